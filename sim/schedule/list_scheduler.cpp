#include "sim/schedule/list_scheduler.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "isa/control_flow.h"
#include "sim/base/dependency_tracker.h"
#include "sim/core/instruction_accesses.h"
#include "sim/cost_model.h"

namespace trnsim::sim {
namespace {

// The bytes one access touches, as a box: partitions [p0, p1) x bytes [b0, b1) of one on-chip memory (absolute
// placement), or bytes [b0, b1) of one HBM tensor (key = its allocation). Conservative: two strided patterns that
// interleave count as overlapping. Engine-internal state (lane accumulators, PRNG states) is a box of its own space.
struct Footprint {
  uint32_t space = 0;  // isa::MemorySpace, or kEngineStateSpace
  uint32_t key = 0;
  uint32_t p0 = 0, p1 = 0;
  int64_t b0 = 0, b1 = 0;
  bool write = false;
};
constexpr uint32_t kEngineStateSpace = 1000;

bool overlap(const Footprint& a, const Footprint& b) {
  return (a.write || b.write) && a.space == b.space && a.key == b.key && a.p0 < b.p1 && b.p0 < a.p1 && a.b0 < b.b1 &&
         b.b0 < a.b1;
}

Footprint footprint_of(const isa::Program& program, const isa::AccessPattern& ap, bool write) {
  Footprint f;
  f.space = static_cast<uint32_t>(ap.space);
  f.write = write;
  const isa::Allocation& allocation = program.allocation(ap);
  const int64_t element_bytes = int64_t(dtype_size_bytes(ap.dtype));
  if (ap.space == isa::MemorySpace::hbm) {
    const auto [low, high] = ap.element_range(true);
    f.key = ap.allocation;
    f.p0 = 0;
    f.p1 = 1;
    f.b0 = low * element_bytes;
    f.b1 = (high + 1) * element_bytes;
  } else {
    const auto [low, high] = ap.element_range(false);
    f.p0 = allocation.base_partition + ap.start_partition;
    f.p1 = f.p0 + std::max<uint32_t>(1, ap.partition.size);
    f.b0 = int64_t(allocation.base_byte) + low * element_bytes;
    f.b1 = int64_t(allocation.base_byte) + (high + 1) * element_bytes;
  }
  return f;
}

// Instructions that share an engine's internal state with others of their engine keep their order there: the lane
// accumulators a reduce_cmd reads and writes (isa/semantics/lane_accumulators.h) and the PRNG states.
bool uses_engine_state(const isa::Instruction& inst) {
  switch (inst.opcode) {
    case isa::Opcode::rng:
    case isa::Opcode::set_rng_seed:
    case isa::Opcode::rand_set_state: return true;
    default: break;
  }
  if (!inst.spec().find("reduce_cmd")) return false;
  const std::string_view command = inst.enum_word("reduce_cmd");
  if (command == "idle") return false;
  // auto: the instruction's own reduction when it writes reduce_res, idle otherwise.
  if (command == "auto") return inst.has("reduce_res") && inst.tensor("reduce_res").present();
  return true;
}

// Instructions nothing moves across: control flow and registers (their order is the sequencer's), dynamically
// addressed operands (the register is read when the instruction issues), semaphores and barriers (they order
// engines by program position) and everything that meets other cores.
bool is_fence(const isa::Instruction& inst) {
  if (isa::is_control_opcode(inst.opcode) || isa::reaches_other_cores(inst.opcode)) return true;
  switch (inst.opcode) {
    case isa::Opcode::sem_wait:
    case isa::Opcode::sem_signal:
    case isa::Opcode::barrier:
    case isa::Opcode::core_barrier: return true;
    default: break;
  }
  const isa::RegisterUse registers = isa::register_use(inst);
  return registers.reads + registers.writes > 0 || isa::has_dynamic_operand(inst);
}

// The resource an instruction's engine order is kept on: a compute engine, or one DMA queue.
uint32_t resource_of(const isa::Instruction& inst) {
  if (is_dma(inst)) return uint32_t(kQueuedEngineCount) + uint32_t(inst.scalar("queue"));
  return static_cast<uint32_t>(inst.engine);
}

class ListScheduler {
 public:
  ListScheduler(const isa::Program& program, const HardwareConfig& config, const ScheduleOptions& options)
      : m_program(program),
        m_config(config),
        m_options(options),
        m_tracker(config, program),
        m_count(program.instructions.size()) {
    m_footprints.resize(m_count);
    m_fence.resize(m_count);
    m_resource.resize(m_count);
    for (size_t i = 0; i < m_count; ++i) {
      const isa::Instruction& inst = program.instructions[i];
      m_fence[i] = is_fence(inst);
      m_resource[i] = resource_of(inst);
      m_reads.clear();
      m_writes.clear();
      collect_accesses(inst, m_reads, m_writes);
      for (const auto* ap : m_reads) m_footprints[i].push_back(footprint_of(program, *ap, false));
      for (const auto* ap : m_writes) m_footprints[i].push_back(footprint_of(program, *ap, true));
      if (uses_engine_state(inst)) {
        Footprint state;
        state.space = kEngineStateSpace;
        state.key = static_cast<uint32_t>(inst.engine);
        state.p1 = 1;
        state.b1 = 1;
        state.write = true;
        m_footprints[i].push_back(state);
      }
    }
    m_keep_order_region.assign(m_count, -1);
    for (size_t r = 0; r < options.keep_order.size(); ++r) {
      const auto [begin, end] = options.keep_order[r];
      for (size_t i = begin; i < std::min(end, m_count); ++i) {
        if (m_keep_order_region[i] < 0) m_keep_order_region[i] = int64_t(r);
      }
    }
    m_extra_predecessors.resize(m_count);
    for (const auto& [later, earlier] : options.edges) {
      if (later >= m_count || earlier >= m_count || later == earlier) {
        throw std::invalid_argument("schedule edge (" + std::to_string(later) + ", " + std::to_string(earlier) +
                                    ") names no pair of the program's " + std::to_string(m_count) + " instructions");
      }
      m_extra_predecessors[later].push_back(earlier);
    }
    const size_t dma_engines = std::max<uint32_t>(1, config.core.dma.engines_per_core);
    m_resource_free_ns.assign(kQueuedEngineCount + config.core.dma.queues_per_engine + 1, 0.0);
    m_dma_engine_free_ns.assign(dma_engines, 0.0);
    m_predecessors_left.assign(m_count, 0);
    m_successors.resize(m_count);
    m_data_ready_ns.assign(m_count, 0.0);
    m_done_ns.assign(m_count, 0.0);
    m_state.assign(m_count, State::waiting);
  }

  std::vector<size_t> run() {
    std::vector<size_t> order;
    order.reserve(m_count);
    size_t next = 0;  // the first instruction not yet in the window
    while (next < m_count || !m_window.empty()) {
      // The window fills up to the look-ahead, never across a fence.
      while (next < m_count && !m_fence[next] && m_window.size() < m_options.lookahead_instructions) admit(next++);
      if (m_window.empty()) {
        // A fence: alone, after everything before it.
        admit(next);
        place(next++, order);
        continue;
      }
      const size_t chosen = choose();
      if (chosen == kNone) {
        // Nothing ready: an edge waits on an instruction beyond the window. Widen it by one, unless the segment is
        // exhausted (then the edges contradict the dependencies).
        if (next < m_count && !m_fence[next]) {
          admit(next++);
          continue;
        }
        throw std::invalid_argument("the schedule's edges (with_schedule) form a cycle with the kernel's "
                                    "dependencies at instruction " + std::to_string(m_window.front()));
      }
      place(chosen, order);
    }
    return order;
  }

 private:
  enum class State : uint8_t { waiting, in_window, placed };
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();

  // Adds instruction i to the window with an edge from every unplaced earlier instruction it depends on (all of which
  // are in the window: the window is the oldest unplaced instructions), and from its extra predecessors.
  void admit(size_t i) {
    m_state[i] = State::in_window;
    for (size_t w : m_window) {
      if (depends(i, w)) add_edge(w, i);
    }
    if (!m_options.edges.empty()) {
      // An edge to an instruction still to come is added when that one is admitted (the loop below).
      for (size_t earlier : m_extra_predecessors[i]) {
        if (m_state[earlier] == State::in_window) add_edge(earlier, i);
      }
      for (size_t w : m_window) {
        for (size_t earlier : m_extra_predecessors[w]) {
          if (earlier == i) add_edge(i, w);
        }
      }
    }
    m_window.push_back(i);
    if (m_predecessors_left[i] == 0) becomes_ready(i);
  }

  bool depends(size_t later, size_t earlier) const {
    if (m_keep_order_region[later] >= 0 && m_keep_order_region[later] == m_keep_order_region[earlier] &&
        m_resource[later] == m_resource[earlier]) {
      return true;
    }
    for (const Footprint& a : m_footprints[later]) {
      for (const Footprint& b : m_footprints[earlier]) {
        if (overlap(a, b)) return true;
      }
    }
    return false;
  }

  void add_edge(size_t from, size_t to) {
    m_successors[from].push_back(to);
    ++m_predecessors_left[to];
  }

  // The data-ready time of an instruction whose predecessors are all placed: it no longer changes, since what is
  // placed later does not touch its bytes.
  void becomes_ready(size_t i) {
    const isa::Instruction& inst = m_program.instructions[i];
    m_reads.clear();
    m_writes.clear();
    collect_accesses(inst, m_reads, m_writes);
    if (accumulates_in_pipeline(inst)) {
      const isa::AccessPattern* dst = &inst.tensor("dst");
      m_writes.erase(std::remove(m_writes.begin(), m_writes.end(), dst), m_writes.end());
    }
    double ready = m_tracker.query(m_reads, m_writes).ready_ns;
    for (size_t earlier : m_extra_predecessors[i]) ready = std::max(ready, m_done_ns[earlier]);
    m_data_ready_ns[i] = ready;
  }

  // When instruction i would start if placed now.
  double estimated_start_ns(size_t i) const {
    const isa::Instruction& inst = m_program.instructions[i];
    double start = std::max(m_data_ready_ns[i], m_resource_free_ns[m_resource[i]]);
    if (is_dma(inst)) {
      const DmaCost& cost = dma_cost_of(i);
      start = std::max(m_data_ready_ns[i] + cost.start_latency_ns, m_resource_free_ns[m_resource[i]]);
      for (uint32_t e = cost.first_engine; e < cost.first_engine + cost.engines && e < m_dma_engine_free_ns.size(); ++e) {
        start = std::max(start, m_dma_engine_free_ns[e]);
      }
    }
    return start;
  }

  const DmaCost& dma_cost_of(size_t i) const {
    auto it = m_dma_costs.find(i);
    if (it == m_dma_costs.end()) it = m_dma_costs.emplace(i, dma_cost(m_program.instructions[i], m_program, m_config)).first;
    return it->second;
  }

  size_t choose() const {
    size_t best = kNone;
    double best_start = 0;
    for (size_t i : m_window) {
      if (m_predecessors_left[i] != 0) continue;
      const double start = estimated_start_ns(i);
      if (best == kNone || start < best_start || (start == best_start && i < best)) {
        best = i;
        best_start = start;
      }
    }
    return best;
  }

  void place(size_t i, std::vector<size_t>& order) {
    const isa::Instruction& inst = m_program.instructions[i];
    if (m_fence[i]) {
      // A fence starts after everything placed so far (conservative for the estimate only).
      double all_done = 0;
      for (double t : m_resource_free_ns) all_done = std::max(all_done, t);
      for (double t : m_dma_engine_free_ns) all_done = std::max(all_done, t);
      m_data_ready_ns[i] = std::max(m_data_ready_ns[i], all_done);
    }
    const double start = estimated_start_ns(i);
    double done = start;
    if (is_dma(inst)) {
      const DmaCost& cost = dma_cost_of(i);
      const double busy = cost.engine_ns();
      for (uint32_t e = cost.first_engine; e < cost.first_engine + cost.engines && e < m_dma_engine_free_ns.size(); ++e) {
        m_dma_engine_free_ns[e] = start + busy;
      }
      m_resource_free_ns[m_resource[i]] = start + busy;
      done = start + busy;
      m_dma_costs.erase(i);
    } else {
      const ComputeCost cost = compute_cost(inst, m_program, m_config);
      m_resource_free_ns[m_resource[i]] = start + cost.occupancy_ns();
      done = start + cost.occupancy_ns() + cost.latency_ns();
    }
    m_reads.clear();
    m_writes.clear();
    collect_accesses(inst, m_reads, m_writes);
    m_tracker.record(int64_t(i), done, m_reads, m_writes);
    m_done_ns[i] = done;
    m_state[i] = State::placed;
    order.push_back(i);
    m_window.erase(std::find(m_window.begin(), m_window.end(), i));
    for (size_t s : m_successors[i]) {
      if (--m_predecessors_left[s] == 0) becomes_ready(s);
    }
    m_successors[i].clear();
    m_successors[i].shrink_to_fit();
    m_footprints[i].clear();
    m_footprints[i].shrink_to_fit();
  }

  const isa::Program& m_program;
  const HardwareConfig& m_config;
  const ScheduleOptions& m_options;
  DependencyTracker m_tracker;
  size_t m_count;
  std::vector<std::vector<Footprint>> m_footprints;
  std::vector<uint8_t> m_fence;
  std::vector<uint32_t> m_resource;
  std::vector<int64_t> m_keep_order_region;
  std::vector<std::vector<size_t>> m_extra_predecessors;
  std::vector<double> m_resource_free_ns;
  std::vector<double> m_dma_engine_free_ns;
  std::vector<uint32_t> m_predecessors_left;
  std::vector<std::vector<size_t>> m_successors;
  std::vector<double> m_data_ready_ns;
  std::vector<State> m_state;
  std::vector<size_t> m_window;  // in program order
  std::vector<double> m_done_ns;  // estimated completion of each placed instruction (edges read it)
  mutable std::unordered_map<size_t, DmaCost> m_dma_costs;
  std::vector<const isa::AccessPattern*> m_reads, m_writes;
};

}  // namespace

std::vector<size_t> list_schedule(const isa::Program& program, const HardwareConfig& config,
                                  const ScheduleOptions& options) {
  if (program.instructions.empty()) return {};
  if (options.lookahead_instructions == 0) throw std::invalid_argument("the schedule's look-ahead must be at least 1");
  return ListScheduler(program, config, options).run();
}

isa::Program reorder_program(const isa::Program& program, const std::vector<size_t>& order) {
  if (order.size() != program.instructions.size()) {
    throw std::invalid_argument("a schedule of " + std::to_string(order.size()) + " instructions for a program of " +
                                std::to_string(program.instructions.size()));
  }
  isa::Program out;
  out.name = program.name;
  out.generation = program.generation;
  out.allocations = program.allocations;
  out.instructions.reserve(order.size());
  std::vector<uint8_t> seen(order.size(), 0);
  for (size_t i : order) {
    if (i >= order.size() || seen[i]) throw std::invalid_argument("a schedule that is not a permutation");
    seen[i] = 1;
    out.instructions.push_back(program.instructions[i]);
  }
  return out;
}

}  // namespace trnsim::sim
