#include "config/config_printer.h"

#include <cstdio>
#include <sstream>

#include "config/config_reader.h"

namespace trnsim {
namespace {

using detail::HasVisit;
using detail::IsMap;
using detail::IsVector;

template <class T>
std::string scalar_text(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    // Control characters escaped: a raw line break inside a double-quoted YAML scalar is folded on reading
    // (one becomes a space, two one newline), so the text would not read back as itself.
    std::string out = "\"";
    for (char c : value) {
      const unsigned char byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\t') {
        out += "\\t";
      } else if (byte < 0x20 || byte == 0x7f) {
        const char* hex = "0123456789abcdef";
        out += "\\x";
        out += hex[byte >> 4];
        out += hex[byte & 15];
      } else {
        out += c;
      }
    }
    return out + "\"";
  } else if constexpr (std::is_same_v<T, DType>) {
    return std::string(dtype_name(value));
  } else if constexpr (HasEnumNames<T>::value) {
    return std::string(enum_name(value));
  } else if constexpr (std::is_floating_point_v<T>) {
    return detail::format_number(value);
  } else {
    return std::to_string(value);
  }
}

template <class K>
std::string key_text(const K& key) {
  if constexpr (std::is_same_v<K, DType>) return std::string(dtype_name(key));
  else return key;
}

template <class T>
constexpr bool is_leaf_v = !HasVisit<T, int>::value && !IsVector<T>::value && !IsMap<T>::value;

// Emits block-style YAML; lists and maps of scalars go in flow style on one line.
class YamlPrinter {
 public:
  explicit YamlPrinter(std::ostringstream& out, int indent) : m_out(out), m_indent(indent) {}

  template <class T>
  void field(const char* key, const T& value, const FieldInfo&) {
    emit(std::string(key), value);
  }

  template <class T>
  void emit(const std::string& key, const T& value) {
    std::string pad(m_indent, ' ');
    if constexpr (IsVector<T>::value) {
      using Item = typename T::value_type;
      if constexpr (is_leaf_v<Item>) {
        m_out << pad << key << ": [";
        for (size_t i = 0; i < value.size(); ++i) m_out << (i ? ", " : "") << scalar_text(value[i]);
        m_out << "]\n";
      } else {
        if (value.empty()) {
          m_out << pad << key << ": []\n";
          return;
        }
        m_out << pad << key << ":\n";
        for (const Item& item : value) {
          std::ostringstream body;
          YamlPrinter nested(body, m_indent + 4);
          const_cast<Item&>(item).visit(nested);
          std::string text = body.str();
          // Turn the first line's indentation into the "- " list marker.
          text.replace(m_indent, 4, "  - ");
          m_out << text;
        }
      }
    } else if constexpr (IsMap<T>::value) {
      using Item = typename T::mapped_type;
      if constexpr (is_leaf_v<Item>) {
        m_out << pad << key << ": {";
        bool first = true;
        for (const auto& [k, v] : value) {
          m_out << (first ? "" : ", ") << key_text(k) << ": " << scalar_text(v);
          first = false;
        }
        m_out << "}\n";
      } else {
        m_out << pad << key << ":" << (value.empty() ? " {}" : "") << "\n";
        YamlPrinter nested(m_out, m_indent + 2);
        for (const auto& [k, v] : value) nested.emit(key_text(k), v);
      }
    } else if constexpr (is_leaf_v<T>) {
      m_out << pad << key << ": " << scalar_text(value) << "\n";
    } else {
      m_out << pad << key << ":\n";
      YamlPrinter nested(m_out, m_indent + 2);
      const_cast<T&>(value).visit(nested);
    }
  }

 private:
  std::ostringstream& m_out;
  int m_indent;
};

class LeafCollector {
 public:
  LeafCollector(std::vector<ConfigLeaf>& out, std::string path) : m_out(out), m_path(std::move(path)) {}

  template <class T>
  void field(const char* key, const T& value, const FieldInfo&) {
    collect(detail::join_path(m_path, key), value);
  }

  template <class T>
  void collect(const std::string& path, const T& value) {
    if constexpr (IsVector<T>::value) {
      if constexpr (is_leaf_v<typename T::value_type>) {
        std::string text = "[";
        for (size_t i = 0; i < value.size(); ++i) text += (i ? ", " : "") + scalar_text(value[i]);
        m_out.push_back({path, text + "]"});
      } else {
        for (size_t i = 0; i < value.size(); ++i) collect(path + "[" + std::to_string(i) + "]", value[i]);
        if (value.empty()) m_out.push_back({path, "[]"});
      }
    } else if constexpr (IsMap<T>::value) {
      for (const auto& [k, v] : value) collect(detail::join_path(path, key_text(k)), v);
      if (value.empty()) m_out.push_back({path, "{}"});
    } else if constexpr (is_leaf_v<T>) {
      m_out.push_back({path, scalar_text(value)});
    } else {
      LeafCollector nested(m_out, path);
      const_cast<T&>(value).visit(nested);
    }
  }

 private:
  std::vector<ConfigLeaf>& m_out;
  std::string m_path;
};

class KeyDescriber {
 public:
  KeyDescriber(std::vector<ConfigKeyDoc>& out, std::string path) : m_out(out), m_path(std::move(path)) {}

  template <class T>
  void field(const char* key, T& value, const FieldInfo& field_info) {
    describe<T>(detail::join_path(m_path, key), field_info);
    (void)value;
  }

  template <class T>
  void describe(const std::string& path, const FieldInfo& field_info) {
    if constexpr (IsVector<T>::value) {
      using Item = typename T::value_type;
      if constexpr (is_leaf_v<Item>) m_out.push_back({path, field_info.doc, range_text<Item>(field_info) + " each"});
      else describe<Item>(path + "[]", field_info);
    } else if constexpr (IsMap<T>::value) {
      using Item = typename T::mapped_type;
      if constexpr (is_leaf_v<Item>) m_out.push_back({path, field_info.doc, "dtype -> " + range_text<Item>(field_info)});
      else describe<Item>(path + ".<name>", field_info);
    } else if constexpr (is_leaf_v<T>) {
      m_out.push_back({path, field_info.doc, range_text<T>(field_info)});
    } else {
      T sample{};
      KeyDescriber nested(m_out, path);
      sample.visit(nested);
    }
  }

  template <class T>
  static std::string range_text(const FieldInfo& field_info) {
    if constexpr (std::is_same_v<T, bool>) return "true|false";
    else if constexpr (std::is_same_v<T, std::string>) return "string";
    else if constexpr (std::is_same_v<T, DType>) return "dtype";
    else if constexpr (HasEnumNames<T>::value) {
      std::string text;
      for (auto name : EnumNames<T>::names) text += (text.empty() ? "" : "|") + std::string(name);
      return text;
    } else {
      return std::string(std::is_integral_v<T> ? "integer" : "number") + " in [" +
             detail::format_number(field_info.min) + ", " + detail::format_number(field_info.max) + "]";
    }
  }

 private:
  std::vector<ConfigKeyDoc>& m_out;
  std::string m_path;
};

}  // namespace

std::string to_canonical_yaml(const HardwareConfig& config) {
  std::ostringstream out;
  YamlPrinter printer(out, 0);
  const_cast<HardwareConfig&>(config).visit(printer);
  return out.str();
}

std::vector<ConfigLeaf> flatten_config(const HardwareConfig& config) {
  std::vector<ConfigLeaf> leaves;
  LeafCollector collector(leaves, "");
  const_cast<HardwareConfig&>(config).visit(collector);
  return leaves;
}

std::vector<ConfigKeyDoc> describe_config_keys() {
  std::vector<ConfigKeyDoc> keys;
  KeyDescriber describer(keys, "");
  HardwareConfig sample;
  sample.visit(describer);
  return keys;
}

std::string stable_hash(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  char buffer[17];
  std::snprintf(buffer, sizeof buffer, "%016llx", static_cast<unsigned long long>(hash));
  return buffer;
}

}  // namespace trnsim
