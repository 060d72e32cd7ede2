// Scalar engine semantics: activation functions with the fused scale/bias in front and the
// per-partition accumulator (reduce_regs) behind.
#include <string>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

std::string shape_text(uint32_t partitions, uint64_t free) {
  return "[" + std::to_string(partitions) + ", " + std::to_string(free) + "]";
}

// dst = op(data * scale + bias) elementwise in fp32; reduce_res[p] = reduce_op over the free
// elements of the result. Each instruction starts its own accumulation (NKI's reset_reduce);
// the accumulator state carried across instructions by reduce_cmd is not part of this ISA.
void activate(const Instruction& inst, ExecContext& ctx, bool has_reduce) {
  const AccessPattern& dst = inst.tensor("dst");
  Tile data = ctx.read(inst.tensor("data"));
  if (dst.partitions() != data.partitions || dst.free_elements() != data.free) {
    throw IsaError("dst is " + shape_text(dst.partitions(), dst.free_elements()) + " but data is " +
                   shape_text(data.partitions, data.free));
  }
  auto func = static_cast<ActivationFunc>(static_cast<int>(inst.scalar("op")));
  float alpha = inst.spec().find("alpha") ? static_cast<float>(inst.scalar("alpha")) : 0.0f;
  std::vector<float> scale = ctx.per_partition(inst, "scale", data.partitions);
  std::vector<float> bias = ctx.per_partition(inst, "bias", data.partitions);
  if (scale.empty()) scale.assign(data.partitions, 1.0f);
  // An absent bias adds nothing (not even +0.0, which would turn a -0.0 product into +0.0).
  bool has_bias = !bias.empty();

  AluOp reduce_op = AluOp::add;
  if (has_reduce) {
    reduce_op = static_cast<AluOp>(static_cast<int>(inst.scalar("reduce_op")));
    if (!alu_op_is_reduction(reduce_op)) {
      throw IsaError("reduce_op " + std::string(alu_op_name(reduce_op)) + " is not a reduction operator");
    }
    const AccessPattern& res = inst.tensor("reduce_res");
    if (res.partitions() != data.partitions || res.free_elements() != 1) {
      throw IsaError("reduce_res must be " + shape_text(data.partitions, 1) + ", got " +
                     shape_text(res.partitions(), res.free_elements()));
    }
  }

  Tile out(data.partitions, data.free);
  Tile reduced(data.partitions, 1);
  for (uint32_t p = 0; p < data.partitions; ++p) {
    const float* in = data.row(p);
    float* o = out.row(p);
    for (uint64_t i = 0; i < data.free; ++i) {
      float x = in[i] * scale[p];
      if (has_bias) x += bias[p];
      o[i] = apply_activation(func, x, alpha);
    }
    if (has_reduce) {
      // The accumulator sits behind the activation's fp32 output, before the cast to dst.dtype:
      // NKI's pseudo code reduces `output = op(...)`, and its range_select note relies on the
      // accumulator holding values dst.dtype cannot (FP32_MIN vs a bf16 -inf). Sequential fold
      // from the first element, as the lane streams its elements.
      float acc = data.free ? o[0] : reduction_identity(reduce_op);
      for (uint64_t i = 1; i < data.free; ++i) acc = apply_alu(reduce_op, acc, o[i]);
      reduced.at(p, 0) = acc;
    }
  }
  ctx.write(dst, out);
  if (has_reduce) ctx.write(inst.tensor("reduce_res"), reduced);
}

}  // namespace

void exec_activation(const Instruction& inst, ExecContext& ctx) {
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  if (has_res && !inst.has("reduce_op")) throw IsaError("reduce_res is given but reduce_op is not");
  activate(inst, ctx, has_res);
}

void exec_activation_reduce(const Instruction& inst, ExecContext& ctx) { activate(inst, ctx, true); }

}  // namespace trnsim::isa
