#include "sim/simulator.h"

#include <chrono>
#include <cstdlib>

#include "config/derived_figures.h"
#include "isa/isa_error.h"
#include "sim/chip/chip.h"

namespace trnsim::sim {
namespace {

// Each simulation elaborates a fresh SystemC context, so one process can run many programs
// (tests, the PyTorch device). SystemC 2.3 creates a context on first use of a null pointer.
class SystemCContext {
 public:
  SystemCContext() {
    setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
    sc_core::sc_curr_simcontext = nullptr;
    sc_core::sc_default_global_context = nullptr;
  }
  ~SystemCContext() {
    delete sc_core::sc_curr_simcontext;
    sc_core::sc_curr_simcontext = nullptr;
    sc_core::sc_default_global_context = nullptr;
  }
};

}  // namespace

SimResult simulate(const isa::Program& program, const HardwareConfig& config, const std::string& config_hash,
                   const SimOptions& options,
                   const std::function<void(uint32_t core, isa::CoreState& state)>& prepare) {
  for (uint32_t core : options.cores) {
    if (core >= config.chip.physical_cores) {
      throw isa::IsaError("core " + std::to_string(core) + " does not exist (the chip has " +
                          std::to_string(config.chip.physical_cores) + ")");
    }
  }
  auto host_start = std::chrono::steady_clock::now();
  SimResult result;
  if (options.trace) result.trace = std::make_unique<TraceWriter>();
  std::vector<isa::CoreState*> states;
  for (uint32_t core : options.cores) {
    // Timing-only runs need no memories (SBUF alone is tens of MiB to clear).
    if (options.timing_only) {
      states.push_back(nullptr);
      continue;
    }
    result.states.push_back(std::make_unique<isa::CoreState>(config.core, program));
    if (prepare) prepare(core, *result.states.back());
    states.push_back(result.states.back().get());
  }
  CoreRunOptions core_options;
  core_options.timing_only = options.timing_only;
  core_options.quantum_ns = options.quantum_ns;
  core_options.interpreter = options.interpreter;
  {
    SystemCContext context;
    Chip chip("chip", config, program, options.cores, result.trace.get(), states, core_options);
    sc_core::sc_start();
    result.stats.total_ns = chip.finish_ns();
    chip.add_stats(result.stats);
  }
  SimStats& stats = result.stats;
  stats.config_name = config.name;
  stats.config_hash = config_hash;
  stats.cores = static_cast<uint32_t>(options.cores.size());
  stats.total_cycles = stats.total_ns * config.chip.base_clock_ghz;
  // MFU counts matmul FLOPs against the peak of the dominant input dtype on the cores used.
  if (auto dtype = parse_dtype(stats.flops_dtype)) {
    stats.peak_tflops = peak_tensor_tflops_per_core(config.core.tensor, *dtype) * stats.cores;
  }
  stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  return result;
}

}  // namespace trnsim::sim
