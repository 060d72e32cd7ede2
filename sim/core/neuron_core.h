// One NeuronCore running one instruction stream. Each instruction goes to its engine's in-order
// queue (Tensor, Vector, Scalar, GpSimd, Sync, or a DMA queue); it starts once the engine is
// free, the memory it reads and writes is no longer in use by earlier instructions (RAW, WAR,
// WAW, derived from access patterns), semaphores it waits for are reached, and conflicting
// SBUF/PSUM accesses of other engines are over. Independent engines therefore overlap.
//
// Loosely timed: the core's thread schedules instructions in program order with time
// annotations and only wait()s when it has run a quantum ahead of the SystemC clock, which
// keeps cores interleaved on shared HBM without a context switch per instruction.
// Functional-first: when values are on, each instruction is executed by the interpreter in
// program order before it is scheduled; timing never depends on values.
#pragma once

#include <array>
#include <exception>
#include <map>
#include <memory>
#include <systemc>
#include <vector>

#include "config/hardware_config.h"
#include "isa/core_state.h"
#include "isa/interpreter.h"
#include "sim/base/dependency_tracker.h"
#include "sim/chip/core_barrier.h"
#include "sim/dma/dma_system.h"
#include "sim/engine/engine_model.h"
#include "sim/mem/hbm.h"
#include "sim/mem/onchip_memory.h"
#include "sim/stats.h"
#include "sim/system/collective_rendezvous.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::sim {

struct CoreRunOptions {
  bool timing_only = false;
  double quantum_ns = 10000;
  bool decoupled = false;  // several cores share the chip: sync with the SystemC clock every quantum
  // The cores' programs touch the same HBM bytes, one of them writing (sim/simulator.cpp cores_race_on_hbm): their
  // HBM accesses take effect in the order they issue in simulated time, not as the decoupled threads run.
  bool order_hbm_by_issue = false;
  isa::InterpreterOptions interpreter;
  std::string collective_system;           // see SimOptions
  uint32_t collective_ranks_per_chip = 0;
  bool cores_share_chip = false;  // the cores are one chip's sharing its HBM (an LNC launch), not ranks of a system
  uint32_t rank = 0;              // this core's position among the simulation's cores (rank_id, sendrecv)
  // Where a core's thread leaves the first error it raises: an exception escaping an SC_THREAD
  // would reach the caller of sc_start as an sc_report (or terminate), so the thread stores it
  // and returns, the other cores return at their next instruction, and simulate() rethrows it
  // unchanged.
  std::exception_ptr* error = nullptr;
};

class NeuronCore : public sc_core::sc_module {
 public:
  SC_HAS_PROCESS(NeuronCore);  // SystemC 2.3 needs it for SC_THREAD with a custom constructor
  NeuronCore(sc_core::sc_module_name name, uint32_t index, const HardwareConfig& config, const isa::Program& program,
             Hbm& hbm, CoreBarrier& core_barrier, CollectiveRendezvous& collectives, TraceWriter* trace,
             isa::CoreState* state,
             const CoreRunOptions& options);

  double finish_ns() const { return m_finish_ns; }
  // Whether the core's thread ran to its end; if not once the SystemC kernel has nothing left to do, the core is
  // stuck at instruction stuck_at() (a meeting no other core can complete).
  bool ran_to_end() const { return m_ran_to_end; }
  size_t stuck_at() const { return m_current; }
  uint64_t flops(DType& dtype) const;
  void add_stats(SimStats& stats) const;

 private:
  void run();
  void run_program();
  void step(size_t index);
  EngineModel& engine(Engine kind);
  OnChipMemory* memory_of(isa::MemorySpace space);  // nullptr for HBM
  int trace_track(Engine kind, uint32_t queue);

  uint32_t m_index;
  const HardwareConfig& m_config;
  const isa::Program& m_program;
  TraceWriter* m_trace;
  isa::CoreState* m_state;
  CoreRunOptions m_options;

  // One in-order queue per registered engine (config/engine_units.def), indexed by Engine.
  std::vector<std::unique_ptr<EngineModel>> m_engines;
  // tensor.background_transpose (A-V4): a second, transpose-only lane of the Tensor engine, so a PE transpose runs
  // concurrently with another matmul or transpose. Both lanes issue in program order (m_tensor_issue_ns: the start
  // of the last Tensor instruction); unused without the feature.
  EngineModel m_tensor_background;
  double m_tensor_issue_ns = 0;
  // PE tiling (core.tensor.tile_granularity_rows): when each cell of the array is free, row-major over
  // (pe_rows / g) x (pe_columns / g) cells; a matmul with a tile_position holds only its tile's cells.
  std::vector<double> m_pe_cell_free_ns;
  uint32_t m_pe_cell_rows = 1, m_pe_cell_columns = 1;
  DmaSystem m_dma;
  // One module per registered on-chip memory (config/onchip_memory_units.def), indexed by trnsim::OnChipMemory.
  std::vector<std::unique_ptr<OnChipMemory>> m_memories;
  Hbm& m_hbm;
  CoreBarrier& m_core_barrier;
  CollectiveRendezvous& m_collectives;
  DependencyTracker m_tracker;
  std::unique_ptr<isa::ExecContext> m_exec;
  std::unique_ptr<isa::HostWorkers> m_workers;
  std::unique_ptr<numerics::StochasticSource> m_rng;

  std::map<int64_t, std::vector<std::pair<double, int64_t>>> m_semaphores;  // (time, new value)
  // When each register's last write completes: an instruction reading a register (a trip count, a dynamic
  // address) waits for it.
  std::array<double, isa::kRegisterCount> m_register_ready_ns{};
  std::vector<uint8_t> m_uses_registers;  // per opcode: has reg operands (else only resolved offsets are checked)
  std::vector<int64_t> m_slice_of;  // trace slice per instruction
  int m_trace_process = -1;
  std::map<std::pair<int, uint32_t>, int> m_tracks;
  std::vector<uint64_t> m_opcode_counts;  // by opcode
  std::vector<const isa::AccessPattern*> m_reads, m_writes, m_query_writes;
  std::map<DType, uint64_t> m_flops_by_dtype;
  double m_local_ns = 0;
  double m_finish_ns = 0;
  bool m_ran_to_end = false;
  size_t m_current = 0;  // the instruction being stepped
};

}  // namespace trnsim::sim
