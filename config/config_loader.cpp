#include "config/config_loader.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>

#include "config/config_printer.h"
#include "config/config_reader.h"
#include "config/config_validate.h"

#ifndef TRNSIM_CONFIG_DIR
#error "TRNSIM_CONFIG_DIR must name the shipped configs/ folder"
#endif

namespace fs = std::filesystem;

namespace trnsim {

namespace detail {

std::string join_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string format_number(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

std::string quoted_names(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  return text;
}

std::string NodeReader::dtype_hint(const std::string& wrong) {
  std::vector<std::string> names;
  for (const DTypeInfo& dtype : all_dtypes()) names.emplace_back(dtype.name);
  std::string hint = nearest_key(wrong, names);
  return hint.empty() ? "" : " (did you mean '" + hint + "'?)";
}

}  // namespace detail

std::vector<std::string> default_config_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("TRNSIM_CONFIG_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t colon = list.find(':', start);
      if (colon == std::string::npos) colon = list.size();
      if (colon > start) dirs.push_back(list.substr(start, colon - start));
      start = colon + 1;
    }
  }
  dirs.emplace_back(TRNSIM_CONFIG_DIR);
  return dirs;
}

namespace {

// A name in a message: a 4 KiB name must not fill the terminal.
std::string shown(const std::string& name) {
  constexpr size_t kShown = 80;
  return name.size() <= kShown ? name : name.substr(0, kShown) + "... (" + std::to_string(name.size()) + " bytes)";
}

// Whether `path` is a regular file. Not finding it is an ordinary answer; anything else the file
// system reports (a name over NAME_MAX, a symlink loop, no permission) is the user's to fix, so it
// is a ConfigError, never an uncaught filesystem_error.
bool is_config_file(const fs::path& path, const std::string& what) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw ConfigError(what + " '" + shown(path.string()) + "': " + ec.message());
  }
  return !ec && fs::is_regular_file(status);
}

// The file `name_or_path` names (as a path, or as a bare name in `search_dirs`), nullopt if none.
std::optional<std::string> find_config_file(const std::string& name_or_path,
                                            const std::vector<std::string>& search_dirs) {
  if (is_config_file(name_or_path, "config")) return name_or_path;
  bool bare_name = name_or_path.find('/') == std::string::npos;
  if (bare_name) {
    std::string file = name_or_path;
    if (fs::path(file).extension() != ".yaml") file += ".yaml";
    for (const std::string& dir : search_dirs) {
      fs::path candidate = fs::path(dir) / file;
      if (is_config_file(candidate, "config")) return candidate.string();
    }
  }
  return std::nullopt;
}

}  // namespace

std::string resolve_config_path(const std::string& name_or_path, const std::vector<std::string>& search_dirs) {
  if (std::optional<std::string> found = find_config_file(name_or_path, search_dirs)) return *found;
  std::string where;
  for (const std::string& dir : search_dirs) where += (where.empty() ? "" : ", ") + dir;
  throw ConfigError("config '" + shown(name_or_path) + "' not found (neither a file nor a name in: " + where + ")");
}

namespace {

constexpr int kMaxInheritanceDepth = 16;

// Reads a file and everything it inherits, merged so that the file's own keys win.
ConfigNode load_with_bases(const std::string& path, const std::vector<std::string>& search_dirs,
                           std::vector<std::string>& chain) {
  // The path was opened as a regular file already, so canonicalising it can only fail in a race;
  // the path as given then still detects a cycle that names the file the same way.
  std::error_code ec;
  std::string canonical = fs::weakly_canonical(path, ec).string();
  if (ec) canonical = path;
  for (const std::string& seen : chain) {
    if (seen == canonical) throw ConfigError(SourceLocation{path, 0, 0}, "base", "inheritance cycle through " + path);
  }
  if (static_cast<int>(chain.size()) >= kMaxInheritanceDepth) {
    throw ConfigError(SourceLocation{path, 0, 0}, "base", "inheritance deeper than 16 files");
  }
  chain.push_back(canonical);
  ConfigNode node = parse_yaml_file(path);
  const ConfigNode* base = node.find("base");
  if (!base) return node;
  if (base->kind != ConfigNode::Kind::scalar) {
    throw ConfigError(base->location, "base", "expected the name or path of a config, got " + base->kind_name());
  }
  // A relative base is relative to the file that names it; a bare name also searches the dirs.
  fs::path relative = fs::path(path).parent_path() / base->scalar;
  std::vector<std::string> dirs = {fs::path(path).parent_path().string()};
  dirs.insert(dirs.end(), search_dirs.begin(), search_dirs.end());
  std::optional<std::string> base_path;
  try {
    base_path = is_config_file(relative, "base config") ? relative.string() : find_config_file(base->scalar, dirs);
  } catch (const ConfigError& e) {
    throw ConfigError(base->location, "base", e.what());
  }
  if (!base_path) throw ConfigError(base->location, "base", "base config '" + shown(base->scalar) + "' not found");
  ConfigNode merged = load_with_bases(*base_path, search_dirs, chain);
  node.entries.erase(std::remove_if(node.entries.begin(), node.entries.end(),
                                    [](const auto& entry) { return entry.first == "base"; }),
                     node.entries.end());
  merge_config_tree(merged, node);
  return merged;
}

std::vector<std::string> keys_of(const ConfigNode& node) {
  std::vector<std::string> keys;
  for (const auto& entry : node.entries) keys.push_back(entry.first);
  return keys;
}

}  // namespace

void apply_override(ConfigNode& root, const std::string& assignment) {
  std::string origin = "--set " + assignment;
  size_t equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw ConfigError(SourceLocation{origin, 0, 0}, "", "expected key.path=value");
  }
  std::string path = assignment.substr(0, equals);
  std::vector<std::string> segments;
  for (size_t start = 0; start <= path.size();) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    segments.push_back(path.substr(start, dot - start));
    start = dot + 1;
  }
  ConfigNode* node = &root;
  std::string walked;
  for (size_t i = 0; i < segments.size(); ++i) {
    const std::string& segment = segments[i];
    bool last = i + 1 == segments.size();
    SourceLocation here{origin, 1, static_cast<int>(walked.size() + (walked.empty() ? 0 : 1)) + 1};
    std::string where = walked.empty() ? segment : walked + "." + segment;
    if (segment.empty()) throw ConfigError(here, path, "empty key in path");
    if (node->kind == ConfigNode::Kind::sequence) {
      size_t index = 0;
      auto result = std::from_chars(segment.data(), segment.data() + segment.size(), index);
      if (result.ec != std::errc() || result.ptr != segment.data() + segment.size() || index >= node->items.size()) {
        throw ConfigError(here, where,
                          "expected a list index below " + std::to_string(node->items.size()) + ", got '" + segment + "'");
      }
      node = &node->items[index];
    } else if (node->kind == ConfigNode::Kind::map) {
      ConfigNode* child = node->find(segment);
      if (!child) {
        if (!last) {
          std::string hint = nearest_key(segment, keys_of(*node));
          throw ConfigError(here, where,
                            "unknown key '" + segment + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
        }
        // A new last key is allowed (a dtype added to a per-dtype map); reading it validates it.
        node->entries.emplace_back(segment, ConfigNode{});
        child = &node->entries.back().second;
        child->key_location = here;
      }
      node = child;
    } else {
      throw ConfigError(here, walked, "'" + walked + "' is a single value and has no key '" + segment + "'");
    }
    walked = where;
  }
  SourceLocation key_location = node->key_location;
  // Columns count from the start of the assignment, so the value starts after the '='.
  *node = parse_yaml(assignment.substr(equals + 1), origin, static_cast<int>(equals) + 2);
  node->key_location = key_location;
}

HardwareConfig read_hardware_config(const ConfigNode& root, const std::string& user_file) {
  HardwareConfig config;
  detail::LocationMap locations;
  detail::NodeReader::read(root, "", config, info("config"), locations);
  validate_hardware_config(config, locations, user_file);
  return config;
}

LoadedConfig load_config(const std::string& name_or_path, const std::vector<std::string>& overrides,
                         const std::vector<std::string>& search_dirs) {
  LoadedConfig loaded;
  loaded.source_file = resolve_config_path(name_or_path, search_dirs);
  std::vector<std::string> chain;
  ConfigNode root = load_with_bases(loaded.source_file, search_dirs, chain);
  for (const std::string& assignment : overrides) apply_override(root, assignment);
  loaded.hardware = read_hardware_config(root, loaded.source_file);
  loaded.canonical_yaml = to_canonical_yaml(loaded.hardware);
  loaded.hash = stable_hash(loaded.canonical_yaml);
  return loaded;
}

}  // namespace trnsim
