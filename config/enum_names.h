// Name tables for the small enums a config can name, so the loader, the printer and the CLI
// spell them one way. Each enum that a config field uses specialises EnumNames.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace trnsim {

template <class Enum>
struct EnumNames;  // specialise with: static constexpr std::array<std::string_view, N> names;

template <class Enum>
std::string_view enum_name(Enum value) {
  return EnumNames<Enum>::names[static_cast<size_t>(value)];
}

template <class Enum>
std::optional<Enum> parse_enum(std::string_view text) {
  const auto& names = EnumNames<Enum>::names;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) return static_cast<Enum>(i);
  }
  return std::nullopt;
}

template <class T, class = void>
struct HasEnumNames : std::false_type {};
template <class T>
struct HasEnumNames<T, std::void_t<decltype(EnumNames<T>::names)>> : std::true_type {};

}  // namespace trnsim
