// Checks shared by the commands' options, made before any work: an option given an empty value
// (`--system ''`, `--csv ''`) is a mistake in a script, not a request for the default.
#pragma once

#include <CLI/CLI.hpp>

#include <stdexcept>
#include <string>

namespace trnsim::cli {

// Throws std::invalid_argument naming the first option of `command` given an empty value. Flags
// take no value and are not checked.
inline void refuse_empty_values(const CLI::App& command) {
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_expected_min() == 0) continue;
    for (const std::string& value : option->results()) {
      if (value.empty()) throw std::invalid_argument(option->get_name() + ": an empty value (leave the option out for its default)");
    }
  }
}

}  // namespace trnsim::cli
