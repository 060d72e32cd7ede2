#include "isa/interpreter.h"

#include <algorithm>

#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

Tile ExecContext::read(const AccessPattern& ap) {
  Tile tile = state.read(ap);
  state.set_psum_accumulating(ap, false);
  return tile;
}

void ExecContext::write(const AccessPattern& ap, const Tile& tile) {
  state.write(ap, tile, rounding, rng);
  state.set_psum_accumulating(ap, false);
}

std::shared_ptr<const Tile> ExecContext::read_cached(const AccessPattern& ap) {
  constexpr size_t kCacheEntries = 48;  // enough for the k-tiles of one output block
  uint64_t version = state.version(ap.allocation);
  for (CachedTile& entry : tile_cache) {
    if (entry.version == version && entry.ap == ap) return entry.tile;
  }
  if (tile_cache.size() < kCacheEntries) {
    tile_cache.push_back(CachedTile{ap, version, std::make_shared<Tile>(state.read(ap))});
    return tile_cache.back().tile;
  }
  CachedTile& victim = tile_cache[tile_cache_next];
  tile_cache_next = (tile_cache_next + 1) % kCacheEntries;
  // Reuse the evicted tile's storage unless a caller still holds it.
  if (victim.tile.use_count() != 1) victim.tile = std::make_shared<Tile>();
  state.read_into(ap, *victim.tile);
  victim.ap = ap;
  victim.version = version;
  return victim.tile;
}

std::vector<float> ExecContext::per_partition(const Instruction& inst, const char* operand, uint32_t partitions) {
  if (!inst.has(operand)) return {};
  if (inst.is_tensor(operand)) {
    const AccessPattern& ap = inst.tensor(operand);
    Tile column = read(ap);
    if (column.partitions != partitions || column.free != 1) {
      throw IsaError(inst.spec().name + "." + operand + ": expected one element per partition for " +
                     std::to_string(partitions) + " partitions, got [" + std::to_string(column.partitions) + ", " +
                     std::to_string(column.free) + "]");
    }
    return column.values;
  }
  return std::vector<float>(partitions, static_cast<float>(inst.scalar(operand)));
}

void execute_instruction(const Instruction& inst, ExecContext& context) {
  switch (inst.opcode) {
#define TRN_INSN(name, engines, operands, doc) \
  case Opcode::name:                           \
    exec_##name(inst, context);                \
    return;
#include "isa/instructions.def"
#undef TRN_INSN
  }
}

void interpret(const Program& program, CoreState& state, const HardwareConfig& config,
               const InterpreterOptions& options) {
  state.prepare_for(program);
  numerics::StochasticSource rng(options.stochastic_seed);
  std::unique_ptr<HostWorkers> own_workers;
  if (!options.workers) own_workers = std::make_unique<HostWorkers>(options.host_threads);
  ExecContext context{state, config, options.rounding, &rng, options.workers ? options.workers : own_workers.get(), {}, 0};
  auto run = [&](size_t i) {
    const Instruction& inst = program.instructions[i];
    try {
      if (has_dynamic_operand(inst)) {
        execute_instruction(resolve_dynamic_offsets(program, inst, state.registers()), context);
        return;
      }
      execute_instruction(inst, context);
    } catch (const IsaError& e) {
      throw IsaError("instruction " + std::to_string(i) +
                     (inst.source_line ? " (line " + std::to_string(inst.source_line) + ")" : "") + " " +
                     inst.spec().name + ": " + e.what());
    }
  };
  if (needs_expansion(program)) {
    walk_control_flow(program, state.registers(), run, options.limits);
    return;
  }
  const std::vector<Instruction>& instructions = program.instructions;
  for (size_t i = 0; i < instructions.size();) {
    // A run of matmuls (a kernel's k-steps into several PSUM banks) is shared among the host threads at once.
    size_t run_length = 0;
    while (i + run_length < instructions.size() && instructions[i + run_length].opcode == Opcode::nc_matmul &&
           !has_dynamic_operand(instructions[i + run_length])) {
      ++run_length;
    }
    const size_t ran = run_length >= 2 ? exec_nc_matmul_run(&instructions[i], run_length, context) : 0;
    if (ran > 0) {
      i += ran;
      continue;
    }
    for (size_t end = i + std::max<size_t>(run_length, 1); i < end; ++i) run(i);
  }
}

}  // namespace trnsim::isa
