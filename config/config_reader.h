// The visitor that fills a config struct from a ConfigNode, checking types, ranges and
// unknown keys. Internal to the loader; recorded locations let validation point at a key.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "config/config_tree.h"
#include "config/hardware_config.h"

namespace trnsim::detail {

using LocationMap = std::map<std::string, SourceLocation>;

template <class T, class V, class = void>
struct HasVisit : std::false_type {};
template <class T, class V>
struct HasVisit<T, V, std::void_t<decltype(std::declval<T&>().visit(std::declval<V&>()))>> : std::true_type {};

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};
template <class T>
struct IsMap : std::false_type {};
template <class K, class T>
struct IsMap<std::map<K, T>> : std::true_type {};

std::string join_path(const std::string& path, const std::string& key);
std::string format_number(double value);
std::string quoted_names(const std::vector<std::string>& names);

class NodeReader {
 public:
  NodeReader(const ConfigNode& node, std::string path, LocationMap& locations)
      : m_node(node), m_path(std::move(path)), m_locations(locations) {}

  template <class T>
  void field(const char* key, T& value, const FieldInfo& field_info) {
    m_known_keys.emplace_back(key);
    std::string path = join_path(m_path, key);
    const ConfigNode* child = m_node.find(key);
    if (!child) throw ConfigError(m_node.location, path, std::string("missing required key '") + key + "'");
    read(*child, path, value, field_info);
  }

  // Rejects keys no field consumed, suggesting the nearest valid one.
  void finish() const {
    for (const auto& [key, child] : m_node.entries) {
      if (std::find(m_known_keys.begin(), m_known_keys.end(), key) != m_known_keys.end()) continue;
      std::string hint = nearest_key(key, m_known_keys);
      throw ConfigError(child.key_location, join_path(m_path, key),
                        "unknown key '" + key + "'" + (hint.empty() ? "" : " (did you mean '" + hint + "'?)"));
    }
  }

  template <class T>
  static void read(const ConfigNode& node, const std::string& path, T& value, const FieldInfo& field_info,
                   LocationMap& locations) {
    locations[path] = node.location;
    if constexpr (std::is_same_v<T, bool>) {
      require_scalar(node, path, "true or false");
      if (node.scalar == "true") value = true;
      else if (node.scalar == "false") value = false;
      else throw ConfigError(node.location, path, "expected true or false, got " + node.kind_name());
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (node.kind != ConfigNode::Kind::scalar) {
        throw ConfigError(node.location, path, "expected a string, got " + node.kind_name());
      }
      value = node.scalar;
    } else if constexpr (std::is_same_v<T, DType>) {
      require_scalar(node, path, "a dtype name");
      auto parsed = parse_dtype(node.scalar);
      if (!parsed) throw ConfigError(node.location, path, "unknown dtype '" + node.scalar + "'" + dtype_hint(node.scalar));
      value = *parsed;
    } else if constexpr (HasEnumNames<T>::value) {
      require_scalar(node, path, "a name");
      auto parsed = parse_enum<T>(node.scalar);
      if (!parsed) {
        std::vector<std::string> names(EnumNames<T>::names.begin(), EnumNames<T>::names.end());
        throw ConfigError(node.location, path, "expected one of " + quoted_names(names) + ", got '" + node.scalar + "'");
      }
      value = *parsed;
    } else if constexpr (std::is_arithmetic_v<T>) {
      read_number(node, path, value, field_info);
    } else if constexpr (IsVector<T>::value) {
      if (node.kind != ConfigNode::Kind::sequence) {
        throw ConfigError(node.location, path, "expected a list, got " + node.kind_name());
      }
      value.assign(node.items.size(), typename T::value_type{});
      for (size_t i = 0; i < node.items.size(); ++i) {
        read(node.items[i], path + "[" + std::to_string(i) + "]", value[i], field_info, locations);
      }
    } else if constexpr (IsMap<T>::value) {
      if (node.kind != ConfigNode::Kind::map) {
        throw ConfigError(node.location, path, "expected a mapping, got " + node.kind_name());
      }
      value.clear();
      for (const auto& [key, child] : node.entries) {
        std::string child_path = join_path(path, key);
        typename T::key_type parsed_key{};
        if constexpr (std::is_same_v<typename T::key_type, DType>) {
          auto dtype = parse_dtype(key);
          if (!dtype) throw ConfigError(child.key_location, child_path, "unknown dtype '" + key + "'" + dtype_hint(key));
          parsed_key = *dtype;
        } else {
          parsed_key = key;
        }
        read(child, child_path, value[parsed_key], field_info, locations);
      }
    } else {
      static_assert(HasVisit<T, NodeReader>::value, "config field type has no reader");
      if (node.kind != ConfigNode::Kind::map) {
        throw ConfigError(node.location, path, "expected a mapping, got " + node.kind_name());
      }
      NodeReader reader(node, path, locations);
      value.visit(reader);
      reader.finish();
    }
  }

 private:
  template <class T>
  void read(const ConfigNode& node, const std::string& path, T& value, const FieldInfo& field_info) {
    read(node, path, value, field_info, m_locations);
  }

  static void require_scalar(const ConfigNode& node, const std::string& path, const char* expected) {
    if (node.kind != ConfigNode::Kind::scalar || node.quoted) {
      throw ConfigError(node.location, path, std::string("expected ") + expected + ", got " + node.kind_name());
    }
  }

  static std::string dtype_hint(const std::string& wrong);

  template <class T>
  static void read_number(const ConfigNode& node, const std::string& path, T& value, const FieldInfo& field_info) {
    const char* expected = std::is_integral_v<T> ? "an integer" : "a number";
    if (node.kind != ConfigNode::Kind::scalar || node.quoted) {
      throw ConfigError(node.location, path, std::string("expected ") + expected + ", got " + node.kind_name());
    }
    const std::string& text = node.scalar;
    const char* end = text.data() + text.size();
    auto result = std::from_chars(text.data(), end, value);
    if (result.ec == std::errc::result_out_of_range) {
      throw ConfigError(node.location, path, "'" + text + "' does not fit the field");
    }
    if (result.ec != std::errc() || result.ptr != end) {
      throw ConfigError(node.location, path, std::string("expected ") + expected + ", got '" + text + "'");
    }
    double as_double = static_cast<double>(value);
    // from_chars reads "nan" and "inf"; NaN passes every range comparison, and no field means
    // anything by an infinity.
    if constexpr (std::is_floating_point_v<T>) {
      if (!std::isfinite(as_double)) {
        throw ConfigError(node.location, path, "expected a finite number, got '" + text + "'");
      }
    }
    if (as_double < field_info.min || as_double > field_info.max) {
      throw ConfigError(node.location, path,
                        "value " + text + " is out of range [" + format_number(field_info.min) + ", " +
                            format_number(field_info.max) + "]");
    }
  }

  const ConfigNode& m_node;
  std::string m_path;
  LocationMap& m_locations;
  std::vector<std::string> m_known_keys;
};

}  // namespace trnsim::detail
