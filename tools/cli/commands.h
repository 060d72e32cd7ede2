// Each command group of the `trnsim` CLI registers its subcommands here.
#pragma once

#include <CLI/CLI.hpp>

namespace trnsim::cli {

// Adds `config validate|show|diff|summary|keys`. Handlers run from the parsed callbacks and
// report through the returned exit code slot.
void add_config_commands(CLI::App& app, int& exit_code);

}  // namespace trnsim::cli
