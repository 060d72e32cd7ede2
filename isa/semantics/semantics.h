// Semantics of every instruction: exec_<opcode>(instruction, context), one function per row of
// isa/instructions.def, grouped by engine in isa/semantics/<engine>.cpp. Pure functional
// behaviour (values only); timing lives in sim/.
#pragma once

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
  // A "in|f32" operand as one value per partition: the tensor's [P, 1] column, or the immediate
  // broadcast. `partitions` is the tile height it applies to.
  std::vector<float> per_partition(const Instruction& inst, const char* operand, uint32_t partitions);
};

#define TRN_INSN(name, engines, operands, doc) void exec_##name(const Instruction& inst, ExecContext& ctx);
#include "isa/instructions.def"
#undef TRN_INSN

}  // namespace trnsim::isa
