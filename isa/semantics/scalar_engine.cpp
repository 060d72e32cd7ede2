// Scalar engine semantics: activation functions with the fused scale/bias in front and the
// per-partition accumulator (reduce_regs) behind.
#include <algorithm>
#include <limits>
#include <string>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/in_place.h"
#include "isa/semantics/lane_accumulators.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

std::string shape_text(uint32_t partitions, uint64_t free) {
  return "[" + std::to_string(partitions) + ", " + std::to_string(free) + "]";
}

// The Scalar engine's accumulator registers of the lanes `ap`'s partitions run on (isa/core_state.h).
float* scalar_lane_accumulators(ExecContext& ctx, const AccessPattern& ap) {
  return lane_registers(ctx.state.scalar_accumulators(), ctx, ap, "Scalar");
}

// dst = op(data * scale + bias) elementwise in fp32. Behind it, the Scalar accumulator registers per `command`
// (activation's reduce_cmd; activation_reduce is always reset_reduce): reset starts them from reduce_op's identity,
// fold adds the fp32 results (before the cast to dst.dtype) in element order; reduce_res reads them afterwards.
// They stay in the registers, where later activations and activate2 continue them (NKI: shared across the Scalar
// engine's accumulating instructions).
void activate(const Instruction& inst, ExecContext& ctx, AccumulatorCommand command, bool has_res) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data_ap = inst.tensor("data");
  if (dst.partitions() != data_ap.partitions() || dst.free_elements() != data_ap.free_elements() * values_per_element(data_ap.dtype)) {
    throw IsaError("dst is " + shape_text(dst.partitions(), dst.free_elements()) + " but data is " +
                   shape_text(data_ap.partitions(), data_ap.free_elements() * values_per_element(data_ap.dtype)));
  }
  auto func = static_cast<ActivationFunc>(static_cast<int>(inst.scalar("op")));
  float alpha = inst.spec().find("alpha") ? static_cast<float>(inst.scalar("alpha")) : 0.0f;
  const uint32_t partitions = data_ap.partitions();
  std::vector<float> scale = ctx.per_partition(inst, "scale", partitions);
  std::vector<float> bias = ctx.per_partition(inst, "bias", partitions);
  if (scale.empty()) scale.assign(partitions, 1.0f);
  // An absent bias adds nothing (not even +0.0, which would turn a -0.0 product into +0.0).
  bool has_bias = !bias.empty();

  const bool uses_registers = command.reset || command.fold;
  AluOp reduce_op = AluOp::add;
  if (uses_registers || has_res) {
    if (!inst.has("reduce_op")) throw IsaError("the accumulator (reduce_cmd / reduce_res) needs reduce_op");
    reduce_op = static_cast<AluOp>(static_cast<int>(inst.scalar("reduce_op")));
    if (!alu_op_is_reduction(reduce_op)) {
      throw IsaError("reduce_op " + std::string(alu_op_name(reduce_op)) + " is not a reduction operator");
    }
  }
  if (has_res) {
    const AccessPattern& res = inst.tensor("reduce_res");
    if (res.partitions() != partitions || res.free_elements() != 1) {
      throw IsaError("reduce_res must be " + shape_text(partitions, 1) + ", got " +
                     shape_text(res.partitions(), res.free_elements()));
    }
  }
  float* acc = uses_registers || has_res ? scalar_lane_accumulators(ctx, data_ap) : nullptr;

  ElementwiseRows rows;
  if (rows.init(ctx, dst, {&data_ap})) {
    // An fp32 dst holds the fp32 results themselves: the lanes' folds then run afterwards over its rows, several
    // rows' chains at once (each row still folded in element order), instead of one latency-bound chain per row.
    CoreState::Rows dst_rows;
    const bool fold_after = uses_registers && ctx.state.rows_in_place(dst, /*for_write=*/false, dst_rows) &&
                            dst_rows.fp32_aligned();
    rows.for_rows(ctx, [&](uint32_t p, float* out, const float* const* in, size_t n) {
      apply_activation_rows(func, in[0], out, n, scale[p], has_bias ? &bias[p] : nullptr, alpha);
      // NKI's pseudo code reduces `output = op(...)` in fp32, before dst's cast; each lane has its own register.
      if (uses_registers && !fold_after) acc[p] = accumulate_row(command, reduce_op, acc[p], out, n);
    });
    if (fold_after) {
      const auto* values = reinterpret_cast<const float*>(dst_rows.data);
      const size_t row_stride = size_t(dst_rows.row_stride_bytes) / sizeof(float);
      const uint64_t n = dst.free_elements();
      for_row_ranges(ctx, partitions, uint64_t{partitions} * n, [&](uint32_t first, uint32_t end) {
        accumulate_rows(command, reduce_op, acc + first, values + first * row_stride, end - first, row_stride, n);
      });
    }
    if (has_res) ctx.write(inst.tensor("reduce_res"), register_tile(acc, partitions));
    return;
  }
  Tile data = ctx.read(data_ap);
  Tile out(data.partitions, data.free);
  for_row_ranges(ctx, data.partitions, data.values.size(), [&](uint32_t first, uint32_t end) {
    for (uint32_t p = first; p < end; ++p) {
      apply_activation_rows(func, data.row(p), out.row(p), data.free, scale[p], has_bias ? &bias[p] : nullptr, alpha);
    }
    // NKI's pseudo code reduces `output = op(...)`, and its range_select note relies on the accumulator holding
    // values dst.dtype cannot (FP32_MIN vs a bf16 -inf).
    if (uses_registers) accumulate_rows(command, reduce_op, acc + first, out.row(first), end - first, out.free, data.free);
  });
  ctx.write(dst, out);
  if (has_res) ctx.write(inst.tensor("reduce_res"), register_tile(acc, data.partitions));
}

// The (op0, op1) pairs of activate2's tensor-scalar stage (ISA activate2: "six combinations").
bool activate2_pair(AluOp op0, AluOp op1) {
  if (op0 == AluOp::multiply) return op1 == AluOp::add || op1 == AluOp::subtract || op1 == AluOp::bypass;
  return (op0 == AluOp::add || op0 == AluOp::subtract || op0 == AluOp::bypass) && op1 == AluOp::bypass;
}

// The identities activate2's accumulator resets to (add, maximum, minimum).
float activate2_identity(AluOp op) {
  if (op == AluOp::add) return 0.0f;
  return op == AluOp::maximum ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
}

}  // namespace

void exec_activation(const Instruction& inst, ExecContext& ctx) {
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  if (has_res && !inst.has("reduce_op")) throw IsaError("reduce_res is given but reduce_op is not");
  activate(inst, ctx, accumulator_command(inst.enum_word("reduce_cmd"), has_res), has_res);
}

void exec_activation_reduce(const Instruction& inst, ExecContext& ctx) {
  activate(inst, ctx, AccumulatorCommand{true, true}, true);
}

// ISA activate2 (NeuronCore-v4): per element in fp32, val = data; val = val op0 imm0 (imm0 op0 val with reverse0)
// unless op0 is bypass; then the same with op1 / imm1 / reverse1; dst = op(val, relu_param). The accumulator stage
// (reduce_cmd) works on the fp32 results before the cast to dst.dtype, in element order, in the Scalar engine's
// registers: reset sets them to reduce_op's identity without folding, reset_reduce resets and folds, reduce folds on
// top, idle leaves them. reduce_res, when given, reads the registers after the instruction.
void exec_activate2(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data_ap = inst.tensor("data");
  if (dst.partitions() != data_ap.partitions() || dst.free_elements() != data_ap.free_elements()) {
    throw IsaError("dst is " + shape_text(dst.partitions(), dst.free_elements()) + " but data is " +
                   shape_text(data_ap.partitions(), data_ap.free_elements()));
  }
  const AluOp op0 = static_cast<AluOp>(static_cast<int>(inst.scalar("op0")));
  const AluOp op1 = static_cast<AluOp>(static_cast<int>(inst.scalar("op1")));
  if (!activate2_pair(op0, op1)) {
    throw IsaError("(op0, op1) = (" + std::string(alu_op_name(op0)) + ", " + std::string(alu_op_name(op1)) +
                   ") is none of (multiply, add|subtract|bypass), (add|subtract|bypass, bypass)");
  }
  const bool reverse0 = inst.scalar("reverse0") != 0, reverse1 = inst.scalar("reverse1") != 0;
  if ((reverse0 && op0 == AluOp::bypass) || (reverse1 && op1 == AluOp::bypass)) {
    throw IsaError("reverse0 / reverse1 need op0 / op1 to be an operator, not bypass");
  }
  const OperandSpec* cmd_spec = inst.spec().find("reduce_cmd");
  const std::string command = cmd_spec->enum_values.at(static_cast<size_t>(inst.scalar("reduce_cmd")));
  const bool has_op = inst.has("reduce_op");
  const bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  AluOp reduce_op = AluOp::add;
  if (command != "idle") {
    if (!has_op) throw IsaError("reduce_cmd=" + command + " needs reduce_op");
    reduce_op = static_cast<AluOp>(static_cast<int>(inst.scalar("reduce_op")));
    if (reduce_op != AluOp::add && reduce_op != AluOp::maximum && reduce_op != AluOp::minimum) {
      throw IsaError("reduce_op must be add, maximum or minimum, not " + std::string(alu_op_name(reduce_op)));
    }
  }
  if (has_res) {
    const AccessPattern& res = inst.tensor("reduce_res");
    if (res.partitions() != data_ap.partitions() || res.free_elements() != 1) {
      throw IsaError("reduce_res must be " + shape_text(data_ap.partitions(), 1) + ", got " +
                     shape_text(res.partitions(), res.free_elements()));
    }
  }
  auto func = static_cast<ActivationFunc>(static_cast<int>(inst.scalar("op")));
  Tile x = ctx.read(data_ap);
  std::vector<float> imm0 = ctx.per_partition(inst, "imm0", x.partitions);
  std::vector<float> imm1 = ctx.per_partition(inst, "imm1", x.partitions);
  std::vector<float> relu = ctx.per_partition(inst, "relu_param", x.partitions);
  if (relu.empty()) relu.assign(x.partitions, 0.0f);
  float* acc = scalar_lane_accumulators(ctx, data_ap);
  if (command == "reset" || command == "reset_reduce") std::fill(acc, acc + x.partitions, activate2_identity(reduce_op));
  const bool fold = command == "reduce" || command == "reset_reduce";
  Tile reduced(x.partitions, 1);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float* row = x.row(p);
    for (uint64_t i = 0; i < x.free; ++i) {
      float v = row[i];
      if (op0 != AluOp::bypass) v = reverse0 ? apply_alu(op0, imm0[p], v) : apply_alu(op0, v, imm0[p]);
      if (op1 != AluOp::bypass) v = reverse1 ? apply_alu(op1, imm1[p], v) : apply_alu(op1, v, imm1[p]);
      row[i] = apply_activation(func, v, relu[p]);
      if (fold) acc[p] = apply_alu(reduce_op, acc[p], row[i]);
    }
    reduced.at(p, 0) = acc[p];
  }
  ctx.write(dst, x);
  if (has_res) ctx.write(inst.tensor("reduce_res"), reduced);
}

}  // namespace trnsim::isa
