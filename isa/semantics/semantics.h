// Semantics of every instruction: exec_<opcode>(instruction, context), one function per row of
// isa/instructions.def, grouped by engine in isa/semantics/<engine>.cpp. Pure functional
// behaviour (values only); timing lives in sim/.
#pragma once

#include <memory>

#include "config/hardware_config.h"
#include "isa/core_state.h"
#include "isa/host_workers.h"
#include "isa/instruction.h"

namespace trnsim::isa {

struct ExecContext {
  CoreState& state;
  const HardwareConfig& config;
  numerics::RoundingMode rounding = numerics::RoundingMode::nearest_even;
  numerics::StochasticSource* rng = nullptr;  // for stochastic rounding
  HostWorkers* workers = nullptr;             // host threads for the GEMM; nullptr = caller only

  // Reads an operand, clearing PSUM accumulation marks (a read ends an accumulation group).
  Tile read(const AccessPattern& ap);
  // Writes a result with the context's rounding; clears PSUM accumulation marks.
  void write(const AccessPattern& ap, const Tile& tile);
  // An fp32 copy of an operand that matmuls read repeatedly (the same moving tile for every
  // stationary tile): reused until the allocation's bytes change. No PSUM accumulation marks change.
  std::shared_ptr<const Tile> read_cached(const AccessPattern& ap);
  struct CachedTile {
    AccessPattern ap;
    uint64_t version = 0;
    std::shared_ptr<Tile> tile;
  };
  std::vector<CachedTile> tile_cache;  // small, round-robin replaced
  size_t tile_cache_next = 0;
  // The core's rank: its position among the cores of the simulation (rank_id; a lone interpreter is rank 0).
  uint32_t rank = 0;

  // A "in|f32" operand as one value per partition: the tensor's [P, 1] column, or the immediate
  // broadcast. `partitions` is the tile height it applies to.
  std::vector<float> per_partition(const Instruction& inst, const char* operand, uint32_t partitions);
};

// Calls rows(first, end) over partitions [0, partitions), split across the context's host threads when a tile of
// `elements` values is worth waking them for. Rows are independent and each is computed as it would be alone, so
// results do not depend on the thread count.
template <class Rows>
void for_row_ranges(ExecContext& ctx, uint32_t partitions, uint64_t elements, Rows&& rows) {
  // Host tuning, assumed (not measured per host): waking a sleeping thread costs about what one pass over 64 K
  // values takes; a thread still watching (an instruction handed it work moments ago) takes a task for a quarter
  // of that. Keeping the threads busy through an op's instructions also keeps them from falling asleep.
  constexpr uint64_t kElementsPerSleepingThread = 1 << 16;
  constexpr uint64_t kElementsPerWatchingThread = 1 << 14;
  const bool worth_threads = elements >= 2 * kElementsPerSleepingThread ||
                             (elements >= 2 * kElementsPerWatchingThread && ctx.workers && ctx.workers->watching());
  run_row_ranges(ctx.workers, partitions, worth_threads, rows);
}

#define TRN_INSN(name, engines, operands, doc) void exec_##name(const Instruction& inst, ExecContext& ctx);
#include "isa/instructions.def"
#undef TRN_INSN

// Consecutive nc_matmul instructions [first, first + count) run as one hand-off to the host threads, with the
// values and PSUM marks of running them one by one; returns how many it ran (a prefix), 0 when they do not all take
// the fast path (the caller runs them one by one).
size_t exec_nc_matmul_run(const Instruction* first, size_t count, ExecContext& ctx);

}  // namespace trnsim::isa
