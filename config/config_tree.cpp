#include "config/config_tree.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace trnsim {

std::string SourceLocation::str() const {
  // A command-line override has one line; its column is what helps.
  if (file.rfind("--set ", 0) == 0) return file + (column > 0 ? " (column " + std::to_string(column) + ")" : "");
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

ConfigError::ConfigError(const SourceLocation& where, const std::string& key_path, const std::string& message)
    : std::runtime_error(where.str() + ": " + (key_path.empty() ? "" : key_path + ": ") + message) {}

const ConfigNode* ConfigNode::find(const std::string& key) const {
  for (const auto& [name, child] : entries) {
    if (name == key) return &child;
  }
  return nullptr;
}

ConfigNode* ConfigNode::find(const std::string& key) {
  return const_cast<ConfigNode*>(static_cast<const ConfigNode*>(this)->find(key));
}

std::string ConfigNode::kind_name() const {
  switch (kind) {
    case Kind::null: return "nothing";
    case Kind::scalar: return quoted ? "a quoted string" : "'" + scalar + "'";
    case Kind::sequence: return "a list";
    case Kind::map: return "a mapping";
  }
  return "?";
}

namespace {

SourceLocation location_of(const YAML::Mark& mark, const std::string& origin, int first_column) {
  // yaml-cpp marks are 0-based; an override value starts part-way into its "--set" argument.
  return SourceLocation{origin, mark.line + 1, mark.column + (mark.line == 0 ? first_column : 1)};
}

// yaml-cpp shares the node an alias names, so a short document of nested aliases ("billion
// laughs") is small in yaml-cpp but exponential once copied into ConfigNodes. A document without
// aliases has at most about one node per byte of text, so the budget is that plus room for
// modest alias use; anything beyond it is refused before it exhausts memory. Both caps below are
// simulator limits (assumed, generous for any real config), not hardware figures.
struct ExpansionBudget {
  size_t remaining;
  size_t limit;
};

constexpr size_t kAliasSlackNodes = 100000;
constexpr int kMaxNesting = 256;  // real configs nest a handful of levels

ConfigNode convert(const YAML::Node& node, const std::string& origin, int first_column, ExpansionBudget& budget,
                   int depth) {
  ConfigNode out;
  out.location = location_of(node.Mark(), origin, first_column);
  if (budget.remaining == 0) {
    throw ConfigError(out.location, "",
                      "the document expands to more than " + std::to_string(budget.limit) +
                          " values (YAML aliases nested too deeply?)");
  }
  --budget.remaining;
  if (depth > kMaxNesting) {
    throw ConfigError(out.location, "", "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      out.kind = ConfigNode::Kind::null;
      break;
    case YAML::NodeType::Scalar:
      out.kind = ConfigNode::Kind::scalar;
      out.scalar = node.Scalar();
      out.quoted = node.Tag() == "!";
      break;
    case YAML::NodeType::Sequence:
      out.kind = ConfigNode::Kind::sequence;
      for (const YAML::Node& item : node) out.items.push_back(convert(item, origin, first_column, budget, depth + 1));
      break;
    case YAML::NodeType::Map:
      out.kind = ConfigNode::Kind::map;
      // A hash set, not ConfigNode::find: a scan per key made large files quadratic to load.
      std::unordered_set<std::string> seen;
      for (auto it = node.begin(); it != node.end(); ++it) {
        SourceLocation key_location = location_of(it->first.Mark(), origin, first_column);
        if (!it->first.IsScalar()) throw ConfigError(key_location, "", "a mapping key must be a plain name");
        std::string key = it->first.Scalar();
        if (!seen.insert(key).second) throw ConfigError(key_location, key, "duplicate key");
        ConfigNode child = convert(it->second, origin, first_column, budget, depth + 1);
        child.key_location = key_location;
        // A key with no value has no mark of its own; point at the key instead.
        if (child.kind == ConfigNode::Kind::null) child.location = key_location;
        out.entries.emplace_back(key, std::move(child));
      }
      break;
  }
  return out;
}

}  // namespace

ConfigNode parse_yaml(const std::string& text, const std::string& origin, int first_column) {
  try {
    ExpansionBudget budget{text.size() + kAliasSlackNodes, text.size() + kAliasSlackNodes};
    return convert(YAML::Load(text), origin, first_column, budget, 0);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(location_of(e.mark, origin, first_column), "", "YAML syntax error: " + e.msg);
  }
}

ConfigNode parse_yaml_file(const std::string& path) {
  // Configs are a few KiB; a cap keeps a mistaken path (a disk image, a log) from filling memory
  // (a simulator limit, assumed).
  constexpr uintmax_t kMaxConfigBytes = uintmax_t{64} << 20;
  std::error_code ec;
  uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (!ec && bytes > kMaxConfigBytes) {
    throw ConfigError(SourceLocation{path, 0, 0}, "",
                      "the file has " + std::to_string(bytes) + " bytes; a config may have at most " +
                          std::to_string(kMaxConfigBytes));
  }
  std::ifstream in(path);
  if (!in) throw ConfigError(SourceLocation{path, 0, 0}, "", "cannot read the file");
  std::stringstream text;
  text << in.rdbuf();
  ConfigNode root = parse_yaml(text.str(), path);
  if (root.kind != ConfigNode::Kind::map) {
    throw ConfigError(SourceLocation{path, 1, 1}, "", "a config file must be a mapping of keys, got " + root.kind_name());
  }
  return root;
}

void merge_config_tree(ConfigNode& base, const ConfigNode& overlay) {
  if (base.kind != ConfigNode::Kind::map || overlay.kind != ConfigNode::Kind::map) {
    SourceLocation key_location = base.key_location;
    base = overlay;
    if (overlay.key_location.line == 0) base.key_location = key_location;
    return;
  }
  // Indexed once per map (a find per key would make merging quadratic in the key count).
  std::unordered_map<std::string, size_t> index;
  index.reserve(base.entries.size());
  for (size_t i = 0; i < base.entries.size(); ++i) index.emplace(base.entries[i].first, i);
  for (const auto& [key, child] : overlay.entries) {
    auto found = index.find(key);
    if (found != index.end()) {
      merge_config_tree(base.entries[found->second].second, child);
    } else {
      index.emplace(key, base.entries.size());
      base.entries.emplace_back(key, child);
    }
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string nearest_key(const std::string& wrong, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    size_t d = edit_distance(wrong, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // A suggestion helps only when it is plausibly the same word mistyped.
  size_t limit = std::max<size_t>(2, std::max(wrong.size(), best.size()) / 3);
  return best_distance <= limit ? best : "";
}

}  // namespace trnsim
