// Printing a config: canonical YAML (what `config show` prints and what the hash covers),
// flat "path = value" leaves (for `config diff`), and the list of every key with its doc.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/hardware_config.h"

namespace trnsim {

std::string to_canonical_yaml(const HardwareConfig& config);

struct ConfigLeaf {
  std::string path;   // e.g. "core.tensor.clock_ghz", "core.memory_access.conflicts[0].scope"
  std::string value;  // as printed in canonical YAML
};
std::vector<ConfigLeaf> flatten_config(const HardwareConfig& config);

struct ConfigKeyDoc {
  std::string path;  // "systems.<name>.chips", "core.memory_access.conflicts[].scope"
  std::string doc;
  std::string range;  // "[min, max]" for numbers, the names for enums, "" otherwise
};
std::vector<ConfigKeyDoc> describe_config_keys();

// 64-bit FNV-1a of the text, as 16 lowercase hex digits.
std::string stable_hash(const std::string& text);

}  // namespace trnsim
