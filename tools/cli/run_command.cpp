// `trnsim run KERNEL.tasm --config C --input NAME=a.npy ... --output NAME=c.npy ...`: runs a kernel
// on the functional interpreter with the user's data in its HBM tensors.
#include <chrono>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "config/config_loader.h"
#include "isa/core_state.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "isa/control_flow.h"
#include "sim/program_run.h"
#include "sim/simulator.h"
#include "tools/cli/commands.h"
#include "tools/cli/npy.h"
#include "tools/cli/option_checks.h"
#include "tools/cli/output_files.h"

namespace trnsim::cli {
namespace {

struct RunOptions {
  std::string kernel;
  std::string config = "trn2";
  std::vector<std::string> overrides;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  bool force = false;
  std::string rounding = "nearest";
  uint64_t seed = 0x5eed;
  bool timing_only = false;
  std::string stats_path;
  std::string trace_path;
  std::vector<uint32_t> cores = {0};
  double quantum_ns = 10000;
  isa::ExecutionLimits limits;
};

// Errors in how the command was used (names, files); reported like the others.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Binding {
  std::string tensor;
  std::string path;
  uint32_t allocation = 0;
};

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text.empty() ? "(none)" : text;
}

// "NAME=path" pairs resolved to HBM allocations; unknown or repeated names are errors.
std::vector<Binding> bind_tensors(const isa::Program& program, const std::vector<std::string>& specs,
                                  const char* flag) {
  std::vector<std::string> valid = sim::hbm_tensor_names(program);
  std::vector<Binding> bindings;
  std::set<std::string> seen;
  for (const std::string& spec : specs) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw UsageError(std::string(flag) + " '" + spec + "': expected NAME=FILE.npy");
    }
    Binding b{spec.substr(0, eq), spec.substr(eq + 1), 0};
    int index = sim::find_hbm_tensor(program, b.tensor);
    if (index < 0) {
      throw UsageError(std::string(flag) + " " + b.tensor + ": the kernel has no HBM tensor '" + b.tensor +
                       "' (HBM tensors: " + join(valid) + ")");
    }
    if (!seen.insert(b.tensor).second) throw UsageError(std::string(flag) + " " + b.tensor + ": given twice");
    b.allocation = uint32_t(index);
    bindings.push_back(b);
  }
  return bindings;
}

std::string milliseconds(double seconds) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(seconds < 1 ? 2 : 0) << seconds * 1e3 << " ms";
  return out.str();
}

void run(const RunOptions& options) {
  if (options.limits.max_instructions == 0) throw UsageError("--max-instructions: must be 1 or more");
  if (!(options.limits.max_host_seconds > 0) || !std::isfinite(options.limits.max_host_seconds)) {
    throw UsageError("--max-host-seconds: must be a finite number of seconds above 0");
  }
  sim::PreparedProgram prepared = sim::prepare_program(isa::parse_tasm_file(options.kernel), options.kernel,
                                                       options.config, options.overrides);
  const LoadedConfig& config = prepared.config;
  const isa::Program& program = prepared.program;

  std::vector<Binding> inputs = bind_tensors(program, options.inputs, "--input");
  std::vector<Binding> outputs = bind_tensors(program, options.outputs, "--output");
  std::vector<uint32_t> given;
  for (const Binding& b : inputs) given.push_back(b.allocation);
  std::vector<std::string> missing = sim::missing_inputs(program, given);
  // Loops whose trip counts come from tensor values (register_load) need the inputs even when timing-only.
  const bool needs_values = !options.timing_only || isa::control_depends_on_values(program);
  if (!missing.empty() && needs_values) {
    throw UsageError("missing --input for the kernel's input tensors: " + join(missing) +
                     (options.timing_only ? " (its loops depend on tensor values, so --timing-only needs them too)" : ""));
  }
  if (options.timing_only && !outputs.empty()) throw UsageError("--timing-only computes no values to --output");
  std::set<uint32_t> cores;
  for (uint32_t core : options.cores) {
    if (!cores.insert(core).second) throw UsageError("--cores lists core " + std::to_string(core) + " twice");
  }

  // Check every file the run will write before spending time on the kernel: nothing the user has
  // is overwritten without --force, no two of them are the same file (however the paths are
  // spelled), and each can be created.
  std::vector<std::pair<std::string, std::string>> destinations;  // (flag and name, path)
  for (const Binding& b : outputs) {
    const isa::Allocation& a = program.allocations[b.allocation];
    if (a.dtype == DType::mxfp8_e4m3 || a.dtype == DType::mxfp8_e5m2 || a.dtype == DType::mxfp4_e2m1) {
      throw UsageError("--output " + b.tensor + ": packed MX tensors (" + std::string(dtype_name(a.dtype)) +
                       ") cannot be written as .npy");
    }
    destinations.emplace_back("--output " + b.tensor, b.path);
  }
  if (!options.stats_path.empty()) destinations.emplace_back("--stats", options.stats_path);
  if (!options.trace_path.empty()) destinations.emplace_back("--trace", options.trace_path);
  check_destinations(destinations, options.force);

  // Every core runs the kernel on its own copy of the inputs (SPMD); outputs come from the first.
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> loaded;
  if (needs_values) {
    for (const Binding& b : inputs) {
      const isa::Allocation& a = program.allocations[b.allocation];
      // float64 is the widest item a file may hold for a tensor (npy.h); more cannot be this tensor.
      uint64_t max_bytes = a.total_elements() * 8;
      loaded.emplace_back(b.allocation, npy_to_tensor_bytes(read_npy(b.path, max_bytes), a.dtype, a.shape, b.path, b.tensor));
    }
  }
  sim::SimOptions sim_options;
  sim_options.cores = options.cores;
  sim_options.timing_only = options.timing_only;
  sim_options.trace = !options.trace_path.empty();
  sim_options.quantum_ns = options.quantum_ns;
  sim_options.interpreter.rounding =
      options.rounding == "stochastic" ? numerics::RoundingMode::stochastic : numerics::RoundingMode::nearest_even;
  sim_options.interpreter.stochastic_seed = options.seed;
  sim_options.interpreter.limits = options.limits;
  sim::SimResult result = sim::run_prepared(prepared, loaded, sim_options);
  double seconds = result.stats.host_seconds;
  for (const Binding& b : outputs) {
    const isa::Allocation& a = program.allocations[b.allocation];
    const isa::CoreState& state = *result.states.front();
    write_npy(b.path, tensor_bytes_to_npy(state.hbm(b.allocation), a.dtype, a.shape), options.force);
  }
  if (!options.stats_path.empty()) {
    write_text_file("--stats", options.stats_path, [&](std::ostream& out) { out << result.stats.to_json(); });
  }
  if (!options.trace_path.empty()) {
    write_text_file("--trace", options.trace_path, [&](std::ostream& out) { result.trace->write(out); });
  }
  std::string name = program.name.empty() ? options.kernel : program.name;
  std::cout << "ran " << name << " on " << config.hardware.name << " (" << config.hash << "): "
            << program.instructions.size() << " instructions, host time " << milliseconds(seconds)
            << (options.timing_only ? " (timing only)" : "") << "\n"
            << result.stats.summary();
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run a .tasm kernel: values from the interpreter, time from the timing model");
  cmd->add_option("kernel", options->kernel, "Kernel in the .tasm text form")->required();
  cmd->add_option("--config", options->config, "Hardware config file or name (default trn2)");
  cmd->add_option("--set", options->overrides, "Override a config value, e.g. core.sbuf.partitions=64 (repeatable)");
  cmd->add_option("--input", options->inputs,
                  "NAME=FILE.npy: load an HBM tensor (every input tensor must be given; floats are cast with RNE)");
  cmd->add_option("--output", options->outputs,
                  "NAME=FILE.npy: save an HBM tensor after the run (floats as float32, integers as themselves)");
  cmd->add_flag("--force", options->force, "Overwrite existing --output, --stats and --trace files");
  cmd->add_option("--rounding", options->rounding, "Rounding of engine writes: nearest (even, default) or stochastic")
      ->check(CLI::IsMember({"nearest", "stochastic"}));
  cmd->add_option("--seed", options->seed, "Seed of the stochastic-rounding generator (deterministic per seed)");
  cmd->add_flag("--timing-only", options->timing_only, "Skip values (identical timing); inputs are not needed unless loops depend on tensor values");
  cmd->add_option("--stats", options->stats_path, "Write the statistics as JSON to this file");
  cmd->add_option("--trace", options->trace_path, "Write a Perfetto/Chrome trace (open in ui.perfetto.dev)");
  cmd->add_option("--cores", options->cores, "Physical cores that each run the kernel (SPMD), e.g. --cores 0 1")
      ->expected(1, 64);
  cmd->add_option("--quantum-ns", options->quantum_ns, "Temporal-decoupling quantum between cores (ns)");
  cmd->add_option("--max-instructions", options->limits.max_instructions,
                  "Instruction budget of a kernel with loops: more executed instructions is an [execution-limit] "
                  "error (default 2^24 = 16777216)");
  cmd->add_option("--max-host-seconds", options->limits.max_host_seconds,
                  "Host-time budget of a kernel with loops, in seconds (default 600)");
  cmd->callback([options, cmd, &exit_code] {
    try {
      refuse_empty_values(*cmd);
      run(*options);
    } catch (const isa::IsaError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    } catch (const NpyError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    } catch (const UsageError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    }
    // OutputFileError, ConfigError and the rest end in main's catch: the same "error: ..." and exit 1.
  });
}

}  // namespace trnsim::cli
