// The accumulator registers of an engine's lanes (isa/core_state.h: one fp32 per lane of the Vector
// and of the Scalar engine), shared by the semantics that read or leave reductions there (reduce_cmd).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

// The registers of the lanes `ap`'s partitions run on; `engine` names the engine in the error.
inline float* lane_registers(std::vector<float>& registers, ExecContext& ctx, const AccessPattern& ap,
                             const char* engine) {
  uint32_t first = ctx.state.first_partition(ap);
  if (size_t{first} + ap.partitions() > registers.size()) {
    throw IsaError("partitions " + std::to_string(first) + ".." + std::to_string(first + ap.partitions() - 1) +
                   " have no " + engine + " engine lane (the engine has " + std::to_string(registers.size()) + ")");
  }
  return registers.data() + first;
}

// What reduce_cmd does to the registers for the instructions whose reduction is optional (activation, select_reduce,
// range_select): `auto` is the ISA's spelling of "not given", the instruction's own reduction (reset_reduce) when
// it writes reduce_res and none otherwise, as these instructions behaved before NKI gave them reduce_cmd.
struct AccumulatorCommand {
  bool reset = false;  // the registers start from reduce_op's identity
  bool fold = false;   // the instruction's results are folded into them
};

inline AccumulatorCommand accumulator_command(std::string_view word, bool writes_reduce_res) {
  if (word == "auto") word = writes_reduce_res ? "reset_reduce" : "idle";
  if (word == "reset") return {true, false};
  if (word == "reset_reduce") return {true, true};
  if (word == "reduce") return {false, true};
  if (word == "idle") return {};
  throw IsaError("reduce_cmd " + std::string(word) + " is not one of idle, reset, reduce, reset_reduce");
}

// One lane's register after `command` over its row of fp32 results in element order: a fresh accumulation
// (reset + fold) folds from the first element, a continued one folds each element onto the register.
inline float accumulate_row(AccumulatorCommand command, AluOp op, float reg, const float* values, uint64_t count) {
  if (command.reset && command.fold) return fold_alu(op, values, count);
  if (command.reset) reg = reduction_identity(op);
  if (command.fold) {
    for (uint64_t i = 0; i < count; ++i) reg = apply_alu(op, reg, values[i]);
  }
  return reg;
}

// accumulate_row over rows [0, rows) at once (row r at values + r * row_stride, its register regs[r]).
inline void accumulate_rows(AccumulatorCommand command, AluOp op, float* regs, const float* values, size_t rows,
                            size_t row_stride, uint64_t count) {
  // Nothing to fold leaves a reset register at the identity, as accumulate_row does.
  if (command.reset && (!command.fold || count == 0)) std::fill(regs, regs + rows, reduction_identity(op));
  if (command.fold && count > 0) fold_alu_rows(op, values, rows, row_stride, count, regs, /*from_first=*/command.reset);
}

// The registers of `partitions` lanes as the [P, 1] tile reduce_res reads out.
inline Tile register_tile(const float* registers, uint32_t partitions) {
  Tile tile(partitions, 1);
  std::copy(registers, registers + partitions, tile.values.begin());
  return tile;
}

}  // namespace trnsim::isa
