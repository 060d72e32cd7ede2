// Loads a hardware config: resolves a name or path, follows `base:` inheritance, applies
// `--set path=value` overrides, reads the tree into HardwareConfig, validates it and hashes
// the result. Every problem raises ConfigError with file:line:column and the key path.
#pragma once

#include <string>
#include <vector>

#include "config/config_tree.h"
#include "config/hardware_config.h"

namespace trnsim {

// Directories searched for a bare config name ("trn2" -> <dir>/trn2.yaml): the entries of
// $TRNSIM_CONFIG_PATH (colon-separated), then the configs/ folder of the source tree.
std::vector<std::string> default_config_dirs();

// "trn2", "trn2.yaml", "configs/whatif/x.yaml": an existing path wins, else the search dirs.
std::string resolve_config_path(const std::string& name_or_path, const std::vector<std::string>& search_dirs);

LoadedConfig load_config(const std::string& name_or_path, const std::vector<std::string>& overrides = {},
                         const std::vector<std::string>& search_dirs = default_config_dirs());

// Reads and validates an already-merged tree (used by load_config and by tests). `user_file`
// is the file the user named; cross-field errors prefer pointing at its keys.
HardwareConfig read_hardware_config(const ConfigNode& root, const std::string& user_file = "");

// Applies one "a.b.c=value" assignment to a merged tree. The value is YAML ("4", "[1, 2]").
void apply_override(ConfigNode& root, const std::string& assignment);

}  // namespace trnsim
