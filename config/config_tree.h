// A YAML document as a plain tree that remembers where every key and value came from, so
// inheritance (`base:`), `--set` overrides and validation can all report file:line:column.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trnsim {

struct SourceLocation {
  std::string file;  // a path, or a description such as "--set core.sbuf.partitions=64"
  int line = 0;      // 1-based; 0 when unknown
  int column = 0;    // 1-based

  std::string str() const;  // "file:line:column"
};

// Invalid user input in a config file or an override. what() is the full message,
// beginning with the location.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const SourceLocation& where, const std::string& key_path, const std::string& message);
  explicit ConfigError(const std::string& message) : std::runtime_error(message) {}
};

struct ConfigNode {
  enum class Kind { null, scalar, sequence, map };
  Kind kind = Kind::null;
  std::string scalar;
  bool quoted = false;  // a quoted scalar is a string, never a number or a boolean
  std::vector<ConfigNode> items;
  std::vector<std::pair<std::string, ConfigNode>> entries;  // in file order
  SourceLocation location;      // of the value
  SourceLocation key_location;  // of the key naming this node in its parent map

  const ConfigNode* find(const std::string& key) const;
  ConfigNode* find(const std::string& key);
  std::string kind_name() const;
};

// Parses YAML text (only this function touches yaml-cpp). `origin` names the source in
// locations. Syntax errors and duplicate keys raise ConfigError.
ConfigNode parse_yaml(const std::string& text, const std::string& origin, int first_column = 1);
ConfigNode parse_yaml_file(const std::string& path);

// Merges `overlay` onto `base`: maps merge key by key; anything else replaces.
void merge_config_tree(ConfigNode& base, const ConfigNode& overlay);

// Edit distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b);
// The candidate closest to `wrong`, or "" when none is close enough to be a likely typo.
std::string nearest_key(const std::string& wrong, const std::vector<std::string>& candidates);

}  // namespace trnsim
