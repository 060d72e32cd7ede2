#include "sim/simulator.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>

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
      same = x && y && x->space == y->space && x->name == y->name && x->shape == y->shape && x->dtype == y->dtype &&
             x->role == y->role;
    }
  }
  if (!same) {
    throw isa::IsaError("the program of core index " + std::to_string(core) +
                        " does not declare the same HBM tensors at the same positions as the first core's (HBM is "
                        "shared)");
  }
}

// The HBM a further core of a launch sharing HBM sees: the first core's store, except that the tensors the program
// declares private (NKI's private_hbm) are the core's own, zero-filled like the first core's were.
std::shared_ptr<isa::HbmStore> core_hbm_store(const isa::Program& program, std::shared_ptr<isa::HbmStore> first) {
  bool any_private = false;
  for (const isa::Allocation& a : program.allocations) any_private |= a.role == isa::AllocationRole::private_to_core;
  if (!any_private) return first;
  auto own = std::make_shared<isa::HbmStore>(std::max(first->size(), program.allocations.size()));
  for (size_t i = 0; i < first->size(); ++i) {
    const bool is_private = i < program.allocations.size() &&
                            program.allocations[i].role == isa::AllocationRole::private_to_core;
    // The shared buffers are lent (the first core's state owns them and outlives the run, as a device tensor's
    // bound storage does).
    if (!is_private && !(*first)[i].empty()) (*own)[i].bind((*first)[i].data(), (*first)[i].size());
  }
  return own;
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
    for (const isa::Allocation& a : programs[i]->allocations) {
      // Cores sharing HBM hold its shared tensors once and their private ones each.
      if (shared_hbm && i > 0 && a.role != isa::AllocationRole::private_to_core) continue;
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

namespace {

// The byte runs [first, end) an HBM access reaches, appended to `runs`; false when there would be more than
// `budget` of them (the caller then treats the access as reaching the whole allocation).
bool append_byte_runs(const isa::AccessPattern& ap, std::vector<std::pair<int64_t, int64_t>>& runs, size_t budget) {
  const int64_t esize = dtype_size_bytes(ap.dtype);
  // Dims outermost first (the partition dim is an HBM access's outer dim); size-1 dims dropped, an innermost
  // stride-1 dim is the run, and outer dims that continue it merge into it.
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  if (ap.partition.size > 1) dims.emplace_back(ap.partition.stride, ap.partition.size);
  for (int i = 0; i < ap.num_free_dims; ++i) {
    if (ap.free[i].size > 1) dims.emplace_back(ap.free[i].stride, ap.free[i].size);
  }
  int64_t run = 1;
  while (!dims.empty() && dims.back().first == run) {
    run *= dims.back().second;
    dims.pop_back();
  }
  uint64_t count = 1;
  for (const auto& d : dims) count *= uint64_t(d.second);
  if (runs.size() + count > budget) return false;
  std::vector<int64_t> index(dims.size(), 0);
  for (uint64_t k = 0; k < count; ++k) {
    int64_t element = ap.offset;
    for (size_t d = 0; d < dims.size(); ++d) element += index[d] * dims[d].first;
    runs.emplace_back(element * esize, (element + run) * esize);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++index[d] < dims[d].second) break;
      index[d] = 0;
    }
  }
  return true;
}

// Sorted, merged runs; whether two such lists share a byte.
void merge_runs(std::vector<std::pair<int64_t, int64_t>>& runs) {
  std::sort(runs.begin(), runs.end());
  size_t out = 0;
  for (const auto& r : runs) {
    if (out > 0 && r.first <= runs[out - 1].second) {
      runs[out - 1].second = std::max(runs[out - 1].second, r.second);
    } else {
      runs[out++] = r;
    }
  }
  runs.resize(out);
}

bool runs_overlap(const std::vector<std::pair<int64_t, int64_t>>& a, const std::vector<std::pair<int64_t, int64_t>>& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i].second <= b[j].first) {
      ++i;
    } else if (b[j].second <= a[i].first) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

// Whether two of the programs (sharing HBM) touch the same bytes of an allocation with at least one of them writing
// them (a DMA's read-add-write counts as neither: split-K partial sums give the same sum in either order). First by
// spans (cheap: cores on disjoint rows never overlap), then, for the allocations whose spans overlap (interleaved
// shards), by exact byte runs; past a budget of runs an access counts as its whole allocation, which only orders
// more accesses.
bool cores_race_on_hbm(const std::vector<const isa::Program*>& programs) {
  if (programs.size() < 2) return false;
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  struct Touch {
    Runs reads, writes;
  };
  // Every HBM operand of a program with whether it reads and writes, in one walk.
  auto for_each_access = [](const isa::Program& program, auto&& visit) {
    for (const isa::Instruction& inst : program.instructions) {
      const isa::InstructionSpec& spec = inst.spec();
      for (const isa::OperandSpec& operand : spec.operands) {
        if (operand.tensor_slot < 0 || size_t(operand.tensor_slot) >= inst.tensors.size()) continue;
        const isa::AccessPattern& ap = inst.tensors[size_t(operand.tensor_slot)];
        if (!ap.present() || ap.space != isa::MemorySpace::hbm) continue;
        // Each core has its own copy of a private tensor.
        if (program.allocation(ap).role == isa::AllocationRole::private_to_core) continue;
        if (operand.name == "dst" && inst.has("dst_rmw_op") && inst.enum_is("dst_rmw_op", "add")) continue;
        const isa::OperandKind kind = operand.kind;
        visit(ap, kind != isa::OperandKind::tensor_out,
              kind == isa::OperandKind::tensor_out || kind == isa::OperandKind::tensor_inout);
      }
    }
  };
  auto whole = [](const isa::Program& program, const isa::AccessPattern& ap) {
    const isa::Allocation& allocation = program.allocation(ap);
    return std::pair<int64_t, int64_t>(0, int64_t(allocation.total_elements()) * dtype_size_bytes(allocation.dtype));
  };
  auto conflicting = [](const std::vector<std::map<uint32_t, Touch>>& touched, std::set<uint32_t>* which) {
    bool any = false;
    for (size_t a = 0; a < touched.size(); ++a) {
      for (size_t b = a + 1; b < touched.size(); ++b) {
        for (const auto& [allocation, mine] : touched[a]) {
          auto other = touched[b].find(allocation);
          if (other == touched[b].end()) continue;
          const Touch& theirs = other->second;
          if (runs_overlap(mine.writes, theirs.writes) || runs_overlap(mine.writes, theirs.reads) ||
              runs_overlap(mine.reads, theirs.writes)) {
            if (!which) return true;
            which->insert(allocation);
            any = true;
          }
        }
      }
    }
    return any;
  };
  // Spans: one run per allocation and direction.
  std::vector<std::map<uint32_t, Touch>> spans(programs.size());
  for (size_t core = 0; core < programs.size(); ++core) {
    for_each_access(*programs[core], [&](const isa::AccessPattern& ap, bool reads, bool writes) {
      std::pair<int64_t, int64_t> range = whole(*programs[core], ap);
      if (!ap.dynamic()) {
        const auto [first, last] = ap.element_range(/*with_partition=*/true);
        const int64_t esize = dtype_size_bytes(ap.dtype);
        range = {first * esize, (last + 1) * esize};
      }
      Touch& touch = spans[core][ap.allocation];
      for (Runs* runs : {reads ? &touch.reads : nullptr, writes ? &touch.writes : nullptr}) {
        if (!runs) continue;
        if (runs->empty()) {
          runs->push_back(range);
        } else {
          runs->front() = {std::min(runs->front().first, range.first), std::max(runs->front().second, range.second)};
        }
      }
    });
  }
  std::set<uint32_t> candidates;
  if (!conflicting(spans, &candidates)) return false;
  // Exact runs of the candidate allocations.
  constexpr size_t kRunBudget = size_t{1} << 22;
  size_t total = 0;
  std::vector<std::map<uint32_t, Touch>> exact(programs.size());
  for (size_t core = 0; core < programs.size(); ++core) {
    for_each_access(*programs[core], [&](const isa::AccessPattern& ap, bool reads, bool writes) {
      if (!candidates.count(ap.allocation)) return;
      Touch& touch = exact[core][ap.allocation];
      for (Runs* runs : {reads ? &touch.reads : nullptr, writes ? &touch.writes : nullptr}) {
        if (!runs) continue;
        const size_t before = runs->size();
        if (ap.dynamic() || !append_byte_runs(ap, *runs, kRunBudget - std::min(kRunBudget, total))) {
          runs->push_back(whole(*programs[core], ap));
        }
        total += runs->size() - before;
      }
    });
  }
  for (auto& core : exact) {
    for (auto& [allocation, touch] : core) {
      merge_runs(touch.reads);
      merge_runs(touch.writes);
    }
  }
  return conflicting(exact, nullptr);
}

// The straight-line streams of the programs of cores sharing HBM, one of which at least has control that depends on
// tensor values. Their values run on scratch memories (one HBM as in the run, each core's own SBUF and PSUM and
// private HBM tensors), one core at a time and deterministically: each runs to its next core_barrier and hands over
// to the next core (round robin), so that after a barrier a core reads what the others wrote before it. Accesses of
// different cores between two barriers that touch the same bytes (a race on hardware) see one another in core
// order here; the run that follows orders them by simulated time.
std::vector<std::unique_ptr<isa::Program>> expand_sharing_hbm(
    const std::vector<const isa::Program*>& programs, const HardwareConfig& config, const SimOptions& options,
    const std::function<void(uint32_t core, isa::CoreState& state)>& prepare) {
  const size_t n = programs.size();
  std::vector<std::unique_ptr<isa::CoreState>> scratch;
  scratch.push_back(std::make_unique<isa::CoreState>(config.core, *programs[0], nullptr, options.image_pool));
  if (prepare) prepare(options.cores[0], *scratch[0]);
  for (size_t i = 1; i < n; ++i) {
    scratch.push_back(std::make_unique<isa::CoreState>(
        config.core, *programs[i], core_hbm_store(*programs[i], scratch[0]->hbm_store()), options.image_pool));
  }
  isa::HostWorkers own_workers(options.interpreter.host_threads);
  isa::HostWorkers* workers = options.interpreter.workers ? options.interpreter.workers : &own_workers;
  std::vector<std::unique_ptr<isa::Program>> expanded(n);
  std::mutex mutex;
  std::condition_variable handed_over;
  size_t turn = 0;
  std::vector<bool> done(n, false);
  std::exception_ptr error;
  struct Stopped {};  // another core failed: this one stops where it waits
  // With `mutex` held: the next core (round robin) that has not finished runs; `me` again if it is the last one.
  auto hand_over = [&](size_t me) {
    for (size_t k = 1; k <= n; ++k) {
      if (!done[(me + k) % n]) {
        turn = (me + k) % n;
        break;
      }
    }
    handed_over.notify_all();
  };
  auto wait_for_turn = [&](std::unique_lock<std::mutex>& lock, size_t me) {
    handed_over.wait(lock, [&] { return turn == me || error; });
    if (error) throw Stopped{};
  };
  auto run_core = [&](size_t i) {
    try {
      {
        std::unique_lock<std::mutex> lock(mutex);
        wait_for_turn(lock, i);
      }
      numerics::StochasticSource rng(isa::core_stochastic_seed(options.interpreter.stochastic_seed, options.cores[i]));
      isa::ExecContext context{*scratch[i], config, options.interpreter.rounding, &rng, workers, {}, 0};
      context.rank = uint32_t(i);
      expanded[i] = std::make_unique<isa::Program>(isa::expand_control_flow(
          *programs[i], &context, uint32_t(i),
          [&] {
            std::unique_lock<std::mutex> lock(mutex);
            hand_over(i);
            wait_for_turn(lock, i);
          },
          options.interpreter.limits));
      std::lock_guard<std::mutex> lock(mutex);
      done[i] = true;
      hand_over(i);
    } catch (const Stopped&) {
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
      handed_over.notify_all();
    }
  };
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) threads.emplace_back(run_core, i);
  for (std::thread& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
  return expanded;
}

}  // namespace

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
  const bool any_value_control = std::any_of(programs.begin(), programs.end(), [](const isa::Program* p) {
    return isa::control_depends_on_values(*p);
  });
  if (shared_hbm && programs.size() > 1 && any_value_control) {
    // A core's control may read what another core wrote: the cores' values run together.
    expanded = expand_sharing_hbm(programs, config, options, prepare);
    for (size_t i = 0; i < programs.size(); ++i) scheduled[i] = expanded[i].get();
  }
  for (size_t i = 0; i < programs.size(); ++i) {
    if (scheduled[i] != programs[i] || !isa::needs_expansion(*programs[i])) continue;
    if (isa::control_depends_on_values(*programs[i])) {
      isa::CoreState scratch(config.core, *programs[i], nullptr, options.image_pool);
      if (prepare) prepare(options.cores[i], scratch);
      numerics::StochasticSource rng(isa::core_stochastic_seed(options.interpreter.stochastic_seed, options.cores[i]));
      isa::HostWorkers own_workers(options.interpreter.host_threads);
      isa::HostWorkers* workers = options.interpreter.workers ? options.interpreter.workers : &own_workers;
      isa::ExecContext context{scratch, config, options.interpreter.rounding, &rng, workers, {}, 0};
      context.rank = uint32_t(i);
      expanded.push_back(std::make_unique<isa::Program>(
          isa::expand_control_flow(*programs[i], &context, uint32_t(i), {}, options.interpreter.limits)));
    } else {
      expanded.push_back(std::make_unique<isa::Program>(
          isa::expand_control_flow(*programs[i], nullptr, uint32_t(i), {}, options.interpreter.limits)));
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
        shared_hbm && index > 0 ? core_hbm_store(*programs[index], result.states.front()->hbm_store())
                                : (index == 0 ? options.hbm_store : nullptr);
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
  core_options.order_hbm_by_issue = shared_hbm && cores_race_on_hbm(scheduled);
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
