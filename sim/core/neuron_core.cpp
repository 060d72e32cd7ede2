#include "sim/core/neuron_core.h"

#include <algorithm>
#include <stdexcept>
#include <cmath>

#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/view.h"
#include "sim/core/instruction_accesses.h"
#include "sim/cost_model.h"

namespace trnsim::sim {
namespace {

// Whether an instruction reads or writes HBM the cores share (its tensor operands, not a core's private tensors; a
// collective's or sendrecv's bytes are ordered by their rendezvous instead).
bool touches_shared_hbm(const isa::Program& program, const isa::Instruction& inst) {
  for (size_t i = 0; i < inst.tensors.size(); ++i) {
    const isa::AccessPattern& ap = inst.tensors[i];
    if (ap.present() && ap.space == isa::MemorySpace::hbm &&
        program.allocation(ap).role != isa::AllocationRole::private_to_core) {
      return true;
    }
  }
  return false;
}

// A transpose on the PE array: nc_transpose on the Tensor engine, or an nc_matmul in the transpose mode.
bool is_pe_transpose(const isa::Instruction& inst) {
  if (inst.engine != Engine::tensor) return false;
  return inst.opcode == isa::Opcode::nc_transpose ||
         (inst.opcode == isa::Opcode::nc_matmul && inst.scalar("is_transpose") != 0);
}

// The on-chip transfer of a sendrecv as the instruction that moves the same bytes on this core: an SBUF-to-SBUF
// dma_copy for dma_engine=dma, a GpSimd tensor_copy for gpsimd_dma (GpSimd's own SBUF-to-SBUF path; priced as its
// copy of the tile, assumed: its cost is not published). The peer's dst is priced as this core's (SPMD programs
// lay their tiles out alike).
isa::Instruction sendrecv_transfer(const isa::Instruction& inst) {
  const bool gpsimd = inst.enum_is("dma_engine", "gpsimd_dma");
  isa::Instruction copy = isa::make_instruction(gpsimd ? isa::Opcode::tensor_copy : isa::Opcode::dma_copy);
  copy.engine = gpsimd ? Engine::gpsimd : Engine::dma;
  copy.source_line = inst.source_line;
  for (const char* operand : {"dst", "src"}) {
    const int index = copy.spec().index_of(operand);
    copy.tensors[size_t(copy.spec().operands[size_t(index)].tensor_slot)] = inst.tensor(operand);
    copy.present_mask |= 1u << index;
  }
  return copy;
}

}  // namespace

NeuronCore::NeuronCore(sc_core::sc_module_name name, uint32_t index, const HardwareConfig& config,
                       const isa::Program& program, Hbm& hbm, CoreBarrier& core_barrier,
                       CollectiveRendezvous& collectives, TraceWriter* trace, isa::CoreState* state,
                       const CoreRunOptions& options)
    : sc_core::sc_module(name),
      m_index(index),
      m_config(config),
      m_program(program),
      m_trace(trace),
      m_state(state),
      m_options(options),
      m_tensor_background("tensor_background", Engine::tensor),
      m_dma("dma", config.core.dma, config.hbm.stack_by_core.at(index), hbm),
      m_hbm(hbm),
      m_core_barrier(core_barrier),
      m_collectives(collectives),
      m_tracker(config, program),
      m_slice_of(trace ? program.instructions.size() : 0, -1),
      m_opcode_counts(isa::kOpcodeCount, 0) {
  if (m_state && !m_options.timing_only) {
    m_state->prepare_for(program);
    m_rng = std::make_unique<numerics::StochasticSource>(isa::core_stochastic_seed(options.interpreter.stochastic_seed, index));
    isa::HostWorkers* workers = options.interpreter.workers;
    if (!workers) {
      m_workers = std::make_unique<isa::HostWorkers>(options.interpreter.host_threads);
      workers = m_workers.get();
    }
    m_exec = std::make_unique<isa::ExecContext>(
        isa::ExecContext{*m_state, config, options.interpreter.rounding, m_rng.get(), workers, {}, 0});
    m_exec->rank = options.rank;
  }
  for (size_t i = 0; i < kQueuedEngineCount; ++i) {
    const auto kind = static_cast<Engine>(i);
    m_engines.push_back(std::make_unique<EngineModel>(std::string(enum_name(kind)).c_str(), kind));
  }
  for (size_t i = 0; i < kOnChipMemoryCount; ++i) {
    const auto kind = static_cast<trnsim::OnChipMemory>(i);
    m_memories.push_back(std::make_unique<OnChipMemory>(std::string(enum_name(kind)).c_str(), kind, config.core, program));
  }
  if (m_trace) m_trace_process = m_trace->add_process("core " + std::to_string(index), static_cast<int>(index));
  const uint32_t granularity = std::max(1u, config.core.tensor.tile_granularity_rows);
  m_pe_cell_rows = std::max(1u, config.core.tensor.pe_rows / granularity);
  m_pe_cell_columns = std::max(1u, config.core.tensor.pe_columns / granularity);
  m_pe_cell_free_ns.assign(size_t(m_pe_cell_rows) * m_pe_cell_columns, 0.0);
  m_uses_registers.assign(isa::kOpcodeCount, 0);
  for (size_t opcode = 0; opcode < isa::kOpcodeCount; ++opcode) {
    for (const isa::OperandSpec& operand : isa::instruction_spec(static_cast<isa::Opcode>(opcode)).operands) {
      if (operand.kind == isa::OperandKind::reg) m_uses_registers[opcode] = 1;
    }
  }
  SC_THREAD(run);
}

EngineModel& NeuronCore::engine(Engine kind) {
  // The DMA system books its own queues (step()); every other engine has one queue here.
  if (kind == Engine::dma) throw std::logic_error("internal: no engine queue for " + std::string(enum_name(kind)));
  return *m_engines[static_cast<size_t>(kind)];
}

OnChipMemory* NeuronCore::memory_of(isa::MemorySpace space) {
  return isa::is_on_chip(space) ? m_memories[static_cast<size_t>(isa::on_chip_memory(space))].get() : nullptr;
}

int NeuronCore::trace_track(Engine kind, uint32_t queue) {
  auto key = std::make_pair(static_cast<int>(kind), kind == Engine::dma ? queue : 0u);
  auto it = m_tracks.find(key);
  if (it != m_tracks.end()) return it->second;
  std::string name = kind == Engine::dma ? "qSyncIO" + std::to_string(queue) : std::string(engine_trace_row(kind));
  if (kind == Engine::tensor && queue == 1) name = "TensorMatrixBackground";  // the background-transpose lane
  int order = kind == Engine::dma ? 10 + static_cast<int>(queue) : static_cast<int>(kind);
  int track = m_trace->add_track(m_trace_process, name, order);
  m_tracks.emplace(key, track);
  return track;
}

void NeuronCore::run() {
  std::exception_ptr error;
  try {
    run_program();
  } catch (const sc_core::sc_unwind_exception&) {
    throw;  // the kernel killing or resetting this thread: it must reach the kernel
  } catch (const sc_core::sc_report& report) {
    error = std::make_exception_ptr(isa::IsaError(std::string("core ") + std::to_string(m_index) +
                                                  ": the SystemC kernel reported: " + report.what()));
  } catch (...) {
    error = std::current_exception();
  }
  m_ran_to_end = true;
  m_core_barrier.finished(m_index);
  m_collectives.finished(m_index);
  if (!error) return;
  if (!m_options.error) std::rethrow_exception(error);
  // The other cores see it and return (sc_stop would print a banner to stdout).
  if (!*m_options.error) *m_options.error = error;
}

void NeuronCore::run_program() {
  for (size_t i = 0; i < m_program.instructions.size(); ++i) {
    if (m_options.error && *m_options.error) return;  // another core failed: the run is over
    const isa::Instruction& inst = m_program.instructions[i];
    m_current = i;
    try {
      if (m_options.order_hbm_by_issue && touches_shared_hbm(m_program, inst)) {
        // Cores sharing HBM: the values of an HBM access take effect when it issues in simulated time, so that
        // accesses of different cores to the same bytes land in the order they issue (a core's zeroing of a shared
        // output before another core's store of its shard), not in the order the decoupled threads happen to run.
        // Both modes wait, so timing-only books the shared HBM in the same order and gives the same time. Only
        // for programs that share written HBM bytes: the others' values do not depend on the order.
        step(i);
        const double now_ns = sc_core::sc_time_stamp().to_seconds() * 1e9;
        if (m_local_ns > now_ns) wait(sc_core::sc_time(m_local_ns - now_ns, sc_core::SC_NS));
        if (m_exec) isa::execute_instruction(inst, *m_exec);
      } else {
        if (m_exec) isa::execute_instruction(inst, *m_exec);
        step(i);
      }
    } catch (const isa::IsaError& e) {
      throw isa::IsaError("core " + std::to_string(m_index) + " instruction " + std::to_string(i) +
                          (inst.source_line ? " (line " + std::to_string(inst.source_line) + ")" : "") + " " +
                          inst.spec().name + ": " + e.what());
    }
    // A lone core is the only one booking HBM: bookings before its earliest possible next DMA
    // can be dropped, which keeps the calendars small on long programs.
    if (!m_options.decoupled && (i & 4095) == 4095) {
      m_hbm.forget_before(m_dma.earliest_next_start_ns());
      m_dma.forget_before(m_dma.earliest_next_start_ns());
    }
    // Temporal decoupling: run ahead of the SystemC clock by at most one quantum.
    double now_ns = sc_core::sc_time_stamp().to_seconds() * 1e9;
    if (m_options.decoupled && m_local_ns - now_ns > m_options.quantum_ns) {
      wait(sc_core::sc_time(m_local_ns - now_ns, sc_core::SC_NS));
      m_hbm.forget_before(sc_core::sc_time_stamp().to_seconds() * 1e9 - 4 * m_options.quantum_ns);
      m_dma.forget_before(std::min(m_dma.earliest_next_start_ns(),
                                   sc_core::sc_time_stamp().to_seconds() * 1e9 - 4 * m_options.quantum_ns));
    }
  }
  double now_ns = sc_core::sc_time_stamp().to_seconds() * 1e9;
  if (m_finish_ns > now_ns) wait(sc_core::sc_time(m_finish_ns - now_ns, sc_core::SC_NS));
}

void NeuronCore::step(size_t index) {
  const isa::Instruction& inst = m_program.instructions[index];
  // Reused buffers: a million instructions should not mean a million allocations.
  std::vector<const isa::AccessPattern*>& reads = m_reads;
  std::vector<const isa::AccessPattern*>& writes = m_writes;
  reads.clear();
  writes.clear();
  collect_accesses(inst, reads, writes);
  Dependency dependency;
  if (accumulates_in_pipeline(inst)) {
    m_query_writes.clear();
    for (const isa::AccessPattern* ap : writes) {
      if (ap != &inst.tensor("dst")) m_query_writes.push_back(ap);
    }
    dependency = m_tracker.query(reads, m_query_writes);
  } else {
    dependency = m_tracker.query(reads, writes);
  }
  double ready = dependency.ready_ns;
  // Register dependencies: reg operands, and the registers dynamic addresses were resolved from.
  isa::RegisterUse registers;
  bool has_resolved = false;
  for (const isa::AccessPattern& ap : inst.tensors) has_resolved = has_resolved || ap.resolved_register >= 0;
  if (m_uses_registers[static_cast<size_t>(inst.opcode)] || has_resolved) {
    registers = isa::register_use(inst);
    for (int r = 0; r < registers.reads; ++r) ready = std::max(ready, m_register_ready_ns[size_t(registers.read[size_t(r)])]);
  }
  Slot slot;
  uint32_t performance_mode = 1;
  Engine kind = inst.engine;
  uint32_t queue = 0;
  switch (inst.opcode) {
    case isa::Opcode::sem_wait: {
      // The engine stalls until earlier signals have raised the semaphore to the value.
      int64_t sem = static_cast<int64_t>(inst.scalar("sem")), target = static_cast<int64_t>(inst.scalar("value"));
      // Semaphores start at 0: a wait for 0 or less holds from the start.
      double reached = target <= 0 ? 0.0 : -1.0;
      for (const auto& [time, value] : m_semaphores[sem]) {
        if (value >= target && (reached < 0 || time < reached)) reached = time;
      }
      if (reached < 0) {
        throw isa::IsaError("waits for semaphore " + std::to_string(sem) + " to reach " + std::to_string(target) +
                            ", which no earlier sem_signal does (the program would hang)");
      }
      ready = std::max(ready, reached);
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      slot = engine(kind).schedule(ready, cost.occupancy_ns(), cost.latency_ns());
      break;
    }
    case isa::Opcode::sem_signal: {
      EngineModel& e = engine(kind);
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      double earlier_done = e.last_done_ns();
      if (kind == Engine::tensor) earlier_done = std::max(earlier_done, m_tensor_background.last_done_ns());
      slot = e.schedule(std::max(ready, earlier_done), cost.occupancy_ns(), cost.latency_ns());
      int64_t sem = static_cast<int64_t>(inst.scalar("sem"));
      auto& history = m_semaphores[sem];
      int64_t value = (history.empty() ? 0 : history.back().second) + static_cast<int64_t>(inst.scalar("value"));
      history.emplace_back(slot.done_ns, value);
      break;
    }
    case isa::Opcode::core_barrier: {
      // The engine issues it once its earlier work and this core's accesses of data are done, then waits for the
      // other cores' barriers (blocking this thread in SystemC time until they arrive).
      EngineModel& e = engine(kind);
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      double arrival = std::max(ready, e.free_at_ns());
      if (kind == Engine::tensor) arrival = std::max(arrival, m_tensor_background.free_at_ns());
      double meeting = m_core_barrier.meet(m_index, inst.list("cores"), arrival);
      slot = e.schedule(meeting, cost.occupancy_ns(), cost.latency_ns());
      break;
    }
    case isa::Opcode::all_reduce:
    case isa::Opcode::all_gather:
    case isa::Opcode::reduce_scatter:
    case isa::Opcode::all_to_all:
    case isa::Opcode::collective_permute:
    case isa::Opcode::all_to_all_v:
    case isa::Opcode::all_gather_v: {
      // The engine triggers it once its inputs are ready; the CC-cores run it from the ranks' meeting on, and what
      // reads its dst waits for the end (the engine itself goes on).
      EngineModel& e = engine(kind);
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      const double arrival = std::max(ready, e.free_at_ns());
      const CollectiveRendezvous::Meeting meeting = m_collectives.meet(m_index, inst, arrival, m_state);
      slot = e.schedule(meeting.start_ns, cost.occupancy_ns(), cost.latency_ns());
      slot.done_ns = std::max(slot.done_ns, meeting.end_ns);
      break;
    }
    case isa::Opcode::sendrecv: {
      // The engine triggers it once src and dst are ready and waits for the peer it sends to (a rendezvous); on
      // one chip this core's DMA queues (or GpSimd) move its src to the peer, and what reads dst waits for the
      // peer's transfer into it.
      EngineModel& e = engine(kind);
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      const double arrival = std::max(ready, e.free_at_ns());
      const isa::Instruction transfer = sendrecv_transfer(inst);
      bool engine_booked = false;
      const CollectiveRendezvous::Meeting meeting =
          m_collectives.sendrecv(m_index, inst, arrival, m_state, [&](double start_ns) {
            if (transfer.engine == Engine::dma) {
              return m_dma.schedule(start_ns, dma_cost(transfer, m_program, m_config), 0).done_ns;
            }
            // GpSimd moves the tile itself: its copy is the instruction's time on the engine (issue included).
            const ComputeCost copy = compute_cost(transfer, m_program, m_config);
            slot = engine(Engine::gpsimd).schedule(start_ns, copy.occupancy_ns(), copy.latency_ns());
            engine_booked = true;
            return slot.done_ns;
          });
      if (!engine_booked) slot = e.schedule(meeting.start_ns, cost.occupancy_ns(), cost.latency_ns());
      slot.done_ns = std::max(slot.done_ns, meeting.end_ns);
      break;
    }
    case isa::Opcode::barrier: {
      double all_done = ready;
      all_done = std::max(all_done, m_tensor_background.last_done_ns());
      for (const auto& e : m_engines) all_done = std::max(all_done, e->last_done_ns());
      all_done = std::max(all_done, m_dma.last_done_ns());
      ComputeCost cost = compute_cost(inst, m_program, m_config);
      slot = engine(Engine::sync).schedule(all_done, cost.occupancy_ns(), cost.latency_ns());
      m_tensor_background.hold_until(slot.done_ns);
      for (const auto& e : m_engines) e->hold_until(slot.done_ns);
      break;
    }
    default:
      if (is_dma(inst)) {
        DmaCost cost = dma_cost(inst, m_program, m_config);
        queue = static_cast<uint32_t>(inst.scalar("queue"));
        if (cost.gpsimd_ns > 0) {
          // Software DGE: the GpSimd engine builds the descriptors, in its program order, before the
          // transfer can be triggered (it is busy meanwhile; nothing else waits on it).
          Slot dge = engine(Engine::gpsimd).schedule(ready, cost.gpsimd_ns, 0);
          ready = dge.done_ns;
          if (m_trace) {
            m_trace->slice(m_trace_process, trace_track(Engine::gpsimd, 0), dge.start_ns, dge.end_ns - dge.start_ns,
                           "swdge " + inst.spec().name, {{"index", std::to_string(index)}});
          }
        }
        slot = m_dma.schedule(ready, cost, queue);
        kind = Engine::dma;
      } else {
        ComputeCost cost = compute_cost(inst, m_program, m_config);
        performance_mode = cost.performance_mode;
        double conflict = 0;
        for (const auto* list : {&reads, &writes}) {
          for (const isa::AccessPattern* ap : *list) {
            if (const OnChipMemory* memory = memory_of(ap->space)) conflict = std::max(conflict, memory->conflict_ready(kind, *ap, performance_mode));
          }
        }
        const double start_after = std::max(ready, conflict);
        const bool pe_tiled = (inst.opcode == isa::Opcode::nc_matmul || inst.opcode == isa::Opcode::nc_matmul_mx) &&
                              !inst.list("tile_position").empty();
        if (pe_tiled) {
          // PE tiling: the matmul holds only its tile of the array, so matmuls on disjoint tiles run
          // together; it issues in program order like every Tensor instruction.
          const std::vector<int64_t>& position = inst.list("tile_position");
          const std::vector<int64_t>& size = inst.list("tile_size");
          const int64_t granularity = std::max<int64_t>(1, m_config.core.tensor.tile_granularity_rows);
          std::vector<size_t> cells;
          for (int64_t r = position[0] / granularity; r < (position[0] + size[0]) / granularity; ++r) {
            for (int64_t c = position[1] / granularity; c < (position[1] + size[1]) / granularity; ++c) {
              cells.push_back(size_t(r) * m_pe_cell_columns + size_t(c));
            }
          }
          double start = std::max(start_after, m_tensor_issue_ns);
          for (size_t cell : cells) start = std::max(start, m_pe_cell_free_ns.at(cell));
          slot = engine(Engine::tensor).schedule_beside(start, cost.occupancy_ns(), cost.latency_ns());
          for (size_t cell : cells) m_pe_cell_free_ns[cell] = slot.end_ns;
        } else if (kind == Engine::tensor && m_config.core.tensor.background_transpose) {
          // In program order on either lane; a transpose takes the lane that frees first (the main one on a tie).
          const double issue = std::max(start_after, m_tensor_issue_ns);
          EngineModel& main_lane = engine(Engine::tensor);
          EngineModel& lane = is_pe_transpose(inst) && m_tensor_background.free_at_ns() < main_lane.free_at_ns()
                                  ? m_tensor_background
                                  : main_lane;
          if (&lane == &m_tensor_background) queue = 1;
          slot = lane.schedule(issue, cost.occupancy_ns(), cost.latency_ns());
        } else {
          slot = engine(kind).schedule(start_after, cost.occupancy_ns(), cost.latency_ns());
        }
        if (kind == Engine::tensor && !pe_tiled && queue == 0) {
          // An untiled instruction on the main lane (queue 1 is the background transpose lane) holds the whole
          // array.
          for (double& cell : m_pe_cell_free_ns) cell = std::max(cell, slot.end_ns);
        }
        if (cost.flops) m_flops_by_dtype[cost.flops_dtype] += cost.flops;
      }
  }
  // Every Tensor instruction (semaphores and barriers too) bounds when the next one may issue on either lane.
  if (kind == Engine::tensor) m_tensor_issue_ns = std::max(m_tensor_issue_ns, slot.start_ns);
  // A NaN or infinite config figure that slipped past validation would otherwise stall the
  // SystemC clock (a wait of NaN) or corrupt the bookings of every later instruction.
  if (!std::isfinite(slot.start_ns) || !std::isfinite(slot.done_ns)) {
    throw isa::IsaError("the timing model computed a non-finite time (start " + std::to_string(slot.start_ns) +
                        " ns, done " + std::to_string(slot.done_ns) + " ns): a latency or rate of the config is "
                        "not a finite number");
  }
  for (const auto* list : {&reads, &writes}) {
    for (const isa::AccessPattern* ap : *list) {
      if (OnChipMemory* memory = memory_of(ap->space)) memory->record(kind, *ap, performance_mode, slot.start_ns, slot.end_ns);
    }
  }
  m_tracker.record(static_cast<int64_t>(index), slot.done_ns, reads, writes);
  for (int r = 0; r < registers.writes; ++r) m_register_ready_ns[size_t(registers.written[size_t(r)])] = slot.done_ns;
  ++m_opcode_counts[static_cast<size_t>(inst.opcode)];
  m_local_ns = std::max(m_local_ns, slot.start_ns);
  m_finish_ns = std::max(m_finish_ns, slot.done_ns);

  if (m_trace) {
    std::vector<std::pair<std::string, std::string>> args;
    const isa::InstructionSpec& spec = inst.spec();
    args.emplace_back("index", std::to_string(index));
    if (inst.source_line) args.emplace_back("line", std::to_string(inst.source_line));
    uint64_t bytes = 0;
    for (size_t i = 0; i < spec.operands.size(); ++i) {
      const isa::OperandSpec& operand = spec.operands[i];
      if (!((inst.present_mask >> i) & 1u)) continue;
      if (operand.tensor_slot >= 0 && inst.tensors[operand.tensor_slot].present()) {
        const isa::AccessPattern& ap = inst.tensors[operand.tensor_slot];
        args.emplace_back(operand.name, isa::describe_access_pattern(m_program, ap) + " " +
                                            std::string(dtype_name(ap.dtype)) + " [" +
                                            std::to_string(ap.partitions()) + ", " +
                                            std::to_string(ap.free_elements()) + "]");
        bytes += ap.bytes();
      } else if (operand.scalar_slot >= 0 || operand.list_slot >= 0) {
        args.emplace_back(operand.name,
                          isa::format_immediate(operand, operand.scalar_slot >= 0 ? inst.scalars[operand.scalar_slot] : 0,
                                                operand.list_slot >= 0 ? inst.lists[operand.list_slot] : std::vector<int64_t>{}));
      }
    }
    args.emplace_back("bytes", std::to_string(bytes));
    if (performance_mode > 1) args.emplace_back("performance_mode", std::to_string(performance_mode) + "x");
    int track = trace_track(kind, queue);
    m_slice_of[index] = m_trace->slice(m_trace_process, track, slot.start_ns, slot.end_ns - slot.start_ns, spec.name, args);
    // An arrow for the dependency that made this instruction wait.
    if (dependency.producer >= 0 && dependency.ready_ns >= slot.start_ns - 1e-9 && m_slice_of[dependency.producer] >= 0) {
      const char* kind_name = dependency.kind == 'R' ? "flow (RAW)" : dependency.kind == 'A' ? "anti (WAR)" : "output (WAW)";
      m_trace->flow(m_slice_of[dependency.producer], m_slice_of[index], kind_name);
    }
  }
}

uint64_t NeuronCore::flops(DType& dtype) const {
  uint64_t total = 0, best = 0;
  for (const auto& [d, f] : m_flops_by_dtype) {
    total += f;
    if (f > best) {
      best = f;
      dtype = d;
    }
  }
  return total;
}

void NeuronCore::add_stats(SimStats& stats) const {
  std::string prefix = "core" + std::to_string(m_index) + ".";
  for (const auto& e : m_engines) {
    stats.engines[prefix + std::string(enum_name(e->engine_kind()))] = e->stats();
  }
  // The background-transpose lane is part of the Tensor engine (its busy time may then exceed the elapsed time).
  EngineStats& tensor = stats.engines[prefix + "tensor"];
  tensor.busy_ns += m_tensor_background.stats().busy_ns;
  tensor.instructions += m_tensor_background.stats().instructions;
  stats.engines[prefix + "dma"] = m_dma.stats();
  for (size_t opcode = 0; opcode < m_opcode_counts.size(); ++opcode) {
    if (!m_opcode_counts[opcode]) continue;
    stats.instructions[isa::instruction_spec(static_cast<isa::Opcode>(opcode)).name] += m_opcode_counts[opcode];
    stats.simulated_instructions += m_opcode_counts[opcode];
  }
  stats.dma_bytes += m_dma.bytes();
  DType dtype = DType::bf16;
  uint64_t core_flops = flops(dtype);
  if (core_flops) {
    stats.flops += core_flops;
    stats.flops_dtype = std::string(dtype_name(dtype));
  }
  for (size_t m = 0; m < m_memories.size(); ++m) {
    uint64_t& high_water = stats.high_water_bytes(static_cast<trnsim::OnChipMemory>(m));
    high_water = std::max(high_water, m_memories[m]->high_water_bytes());
  }
}

}  // namespace trnsim::sim
