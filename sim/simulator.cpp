#include "sim/simulator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>

#include "config/derived_figures.h"
#include "isa/control_flow.h"
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

// SystemC keeps one global simulation context, so a process runs one simulation at a time (the
// PyTorch device may be called from several threads).
std::mutex& systemc_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

namespace {

// Programs that share one chip's HBM must declare the same HBM tensors at the same positions (the shared store is
// indexed by allocation); their on-chip tensors are their own and may differ.
void check_same_hbm(const isa::Program& a, const isa::Program& b, size_t core) {
  bool same = true;
  const size_t n = std::max(a.allocations.size(), b.allocations.size());
  for (size_t i = 0; same && i < n; ++i) {
    const isa::Allocation* x = i < a.allocations.size() ? &a.allocations[i] : nullptr;
    const isa::Allocation* y = i < b.allocations.size() ? &b.allocations[i] : nullptr;
    const bool x_hbm = x && x->space == isa::MemorySpace::hbm, y_hbm = y && y->space == isa::MemorySpace::hbm;
    if (x_hbm || y_hbm) {
      same = x && y && x->space == y->space && x->name == y->name && x->shape == y->shape && x->dtype == y->dtype;
    }
  }
  if (!same) {
    throw isa::IsaError("the program of core index " + std::to_string(core) +
                        " does not declare the same HBM tensors at the same positions as the first core's (HBM is "
                        "shared)");
  }
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(uint64_t{1} << 30));
  return text;
}

// Sizes that pass config validation and legality can still be more than the host can hold (an
// SBUF of 2^34 bytes per partition via --set, huge HBM tensors). Refusing them here, with the
// quantity named, replaces a bad_alloc or the OOM killer after minutes of work.
void check_host_memory(const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
                       const SimOptions& options, bool shared_hbm) {
  const double sbuf = double(config.core.sbuf.partitions) * double(config.core.sbuf.bytes_per_partition);
  const double psum = double(config.core.psum.partitions) * double(config.core.psum.bytes_per_partition);
  // The dependency tracker keeps a 32-byte granule per (quadrant, 256 bytes) of SBUF and PSUM per core.
  const double quadrants = std::ceil(double(config.core.sbuf.partitions) /
                                     std::max(1.0, double(config.core.sbuf.quadrant_partitions)));
  const double tracker =
      quadrants * (double(config.core.sbuf.bytes_per_partition) + double(config.core.psum.bytes_per_partition)) /
      256 * 32;
  double hbm = 0;
  for (size_t i = 0; i < programs.size(); ++i) {
    if (shared_hbm && i > 0) break;
    for (const isa::Allocation& a : programs[i]->allocations) {
      if (a.space == isa::MemorySpace::hbm) hbm += double(a.total_elements()) * dtype_size_bytes(a.dtype);
    }
  }
  const double cores = double(programs.size());
  double needed = tracker * cores;
  std::string parts = "dependency tables " + gib(tracker * cores);
  if (!options.timing_only) {
    needed += (sbuf + psum) * cores + hbm;
    parts += ", SBUF " + std::to_string(config.core.sbuf.partitions) + " partitions x " +
             std::to_string(config.core.sbuf.bytes_per_partition) + " bytes per core, PSUM " + gib(psum) +
             " per core, HBM tensors " + gib(hbm);
  }
  const double host = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  if (host > 0 && needed > host) {
    throw isa::IsaError("the simulation needs about " + gib(needed) + " of host memory (" + parts + ") but this host has " +
                        gib(host));
  }
}

}  // namespace

SimResult simulate(const isa::Program& program, const HardwareConfig& config, const std::string& config_hash,
                   const SimOptions& options,
                   const std::function<void(uint32_t core, isa::CoreState& state)>& prepare) {
  std::vector<const isa::Program*> programs(options.cores.size(), &program);
  return simulate(programs, config, config_hash, options, prepare, /*shared_hbm=*/false);
}

SimResult simulate(const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
                   const std::string& config_hash, const SimOptions& options,
                   const std::function<void(uint32_t core, isa::CoreState& state)>& prepare, bool shared_hbm) {
  if (programs.size() != options.cores.size()) {
    throw isa::IsaError("simulate: " + std::to_string(programs.size()) + " programs for " +
                        std::to_string(options.cores.size()) + " cores");
  }
  if (shared_hbm) {
    for (size_t i = 1; i < programs.size(); ++i) check_same_hbm(*programs[0], *programs[i], i);
  }
  for (size_t i = 0; i < options.cores.size(); ++i) {
    const uint32_t core = options.cores[i];
    // One core cannot run two programs (or one program twice) at once.
    if (std::find(options.cores.begin(), options.cores.begin() + long(i), core) != options.cores.begin() + long(i)) {
      throw isa::IsaError("core " + std::to_string(core) + " is listed twice");
    }
    if (core >= config.chip.physical_cores) {
      throw isa::IsaError("core " + std::to_string(core) + " does not exist (the chip has " +
                          std::to_string(config.chip.physical_cores) + ")");
    }
  }
  check_host_memory(programs, config, options, shared_hbm);
  auto host_start = std::chrono::steady_clock::now();
  // Programs with loops run as the straight-line stream they execute (isa/control_flow.h). Control that depends
  // on tensor values is resolved by running the values on a scratch copy of the core's memories (also when
  // timing-only); the run below then executes the expanded stream from the prepared memories again.
  std::vector<std::unique_ptr<isa::Program>> expanded;
  std::vector<const isa::Program*> scheduled = programs;
  for (size_t i = 0; i < programs.size(); ++i) {
    if (!isa::needs_expansion(*programs[i])) continue;
    if (isa::control_depends_on_values(*programs[i])) {
      if (shared_hbm && programs.size() > 1) {
        throw isa::IsaError("the program of core index " + std::to_string(i) + " has control flow that depends on "
                            "tensor values (register_load), which cores sharing HBM do not support yet");
      }
      isa::CoreState scratch(config.core, *programs[i], nullptr, options.image_pool);
      if (prepare) prepare(options.cores[i], scratch);
      numerics::StochasticSource rng(isa::core_stochastic_seed(options.interpreter.stochastic_seed, options.cores[i]));
      isa::HostWorkers own_workers(options.interpreter.host_threads);
      isa::HostWorkers* workers = options.interpreter.workers ? options.interpreter.workers : &own_workers;
      isa::ExecContext context{scratch, config, options.interpreter.rounding, &rng, workers, {}, 0};
      context.rank = uint32_t(i);
      expanded.push_back(std::make_unique<isa::Program>(isa::expand_control_flow(*programs[i], &context, uint32_t(i))));
    } else {
      expanded.push_back(std::make_unique<isa::Program>(isa::expand_control_flow(*programs[i], nullptr, uint32_t(i))));
    }
    scheduled[i] = expanded.back().get();
  }
  SimResult result;
  if (options.trace) result.trace = std::make_unique<TraceWriter>();
  std::vector<isa::CoreState*> states;
  for (uint32_t core : options.cores) {
    // Timing-only runs need no memories (SBUF alone is tens of MiB to clear).
    if (options.timing_only) {
      states.push_back(nullptr);
      continue;
    }
    const size_t index = result.states.size();
    std::shared_ptr<isa::HbmStore> store =
        shared_hbm && index > 0 ? result.states.front()->hbm_store() : (index == 0 ? options.hbm_store : nullptr);
    result.states.push_back(std::make_unique<isa::CoreState>(config.core, *programs[index], store, options.image_pool));
    // With shared HBM the inputs are loaded once, through the first core.
    if (prepare && (!shared_hbm || index == 0)) prepare(core, *result.states.back());
    states.push_back(result.states.back().get());
  }
  CoreRunOptions core_options;
  core_options.timing_only = options.timing_only;
  core_options.quantum_ns = options.quantum_ns;
  core_options.interpreter = options.interpreter;
  core_options.collective_system = options.collective_system;
  core_options.collective_ranks_per_chip = options.collective_ranks_per_chip;
  core_options.cores_share_chip = shared_hbm;
  std::exception_ptr core_error;
  core_options.error = &core_error;
  {
    std::lock_guard<std::mutex> one_at_a_time(systemc_mutex());
    SystemCContext context;
    Chip chip("chip", config, scheduled, options.cores, result.trace.get(), states, core_options);
    try {
      sc_core::sc_start();
    } catch (const sc_core::sc_report& report) {
      // The kernel's own reports (the cores catch their errors): a message, never a terminate.
      throw isa::IsaError(std::string("the SystemC kernel stopped the simulation: ") + report.what());
    }
    if (core_error) std::rethrow_exception(core_error);
    chip.check_all_ran_to_end();
    result.stats.total_ns = chip.finish_ns();
    chip.add_stats(result.stats);
  }
  SimStats& stats = result.stats;
  stats.config_name = config.name;
  stats.config_hash = config_hash;
  stats.cores = static_cast<uint32_t>(options.cores.size());
  stats.total_cycles = stats.total_ns * config.chip.base_clock_ghz;
  stats.launch_ns = config.chip.kernel_launch_ns;
  // MFU counts matmul FLOPs against the peak of the dominant input dtype on the cores used.
  if (auto dtype = parse_dtype(stats.flops_dtype)) {
    stats.peak_tflops = peak_tensor_tflops_per_core(config.core.tensor, *dtype) * stats.cores;
  }
  stats.host_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  return result;
}

}  // namespace trnsim::sim
