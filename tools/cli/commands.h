// Each command group of the `trnsim` CLI registers its subcommands here.
#pragma once

#include <CLI/CLI.hpp>

namespace trnsim::cli {

// Adds `config validate|show|diff|summary|keys`. Handlers run from the parsed callbacks and
// report through the returned exit code slot.
void add_config_commands(CLI::App& app, int& exit_code);

// Adds `run KERNEL.tasm --config C --input NAME=a.npy --output NAME=b.npy`: the functional
// interpreter on user data. Kernel and data errors print "error: ..." and set exit_code to 1.
void add_run_command(CLI::App& app, int& exit_code);

// Adds `bench matmul ...` (kernel library performance on the timing model).
void add_bench_commands(CLI::App& app, int& exit_code);

// Adds `bench collective ...` (collectives across a multi-chip system) to the `bench` command.
void add_collective_bench(CLI::App& bench, int& exit_code);

// Adds `replay REC [--config C] [--set k=v]... [--diff] ...`: re-times a recording of
// trnsim.record() without PyTorch (exit 1 with --diff when any launch's time changed).
void add_replay_command(CLI::App& app, int& exit_code);

}  // namespace trnsim::cli
