// GpSimd engine semantics (memset also runs on Vector): generated index patterns, the affine
// select behind causal masks, and the cross-partition reduction.
#include <string>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

std::string shape_text(uint32_t partitions, uint64_t free) {
  return "[" + std::to_string(partitions) + ", " + std::to_string(free) + "]";
}
std::string shape_text(const AccessPattern& ap) { return shape_text(ap.partitions(), ap.free_elements()); }

bool is_int32_storage(DType dtype) { return dtype == DType::int32 || dtype == DType::uint32; }

// Writes integer results: exactly (as bit patterns) into 32-bit integer tensors, which fp32
// lanes could not carry beyond 2^24, and through the usual fp32 cast into everything else.
void write_ints(ExecContext& ctx, const AccessPattern& ap, const std::vector<int64_t>& values) {
  Tile tile(ap.partitions(), ap.free_elements());
  if (is_int32_storage(ap.dtype)) {
    for (size_t i = 0; i < values.size(); ++i) {
      tile.values[i] = numerics::bits_float(static_cast<uint32_t>(values[i]));
    }
    AccessPattern raw = ap;
    raw.dtype = DType::fp32;
    ctx.state.write(raw, tile);
    ctx.state.set_psum_accumulating(raw, false);
    return;
  }
  for (size_t i = 0; i < values.size(); ++i) tile.values[i] = static_cast<float>(values[i]);
  ctx.write(ap, tile);
}

// The affine expression of iota/affine_select for every element of a [partitions, free] tile:
// offset + channel_multiplier * p + sum(step_k * i_k), with `pattern` = [step, count] pairs,
// outermost first, in 32-bit two's-complement arithmetic.
std::vector<int64_t> affine_values(const Instruction& inst, uint32_t partitions, uint64_t free) {
  const std::vector<int64_t>& pattern = inst.list("pattern");
  if (pattern.empty() || pattern.size() % 2 != 0) throw IsaError("pattern must be a list of [step, count] pairs");
  uint64_t count = 1;
  for (size_t k = 1; k < pattern.size(); k += 2) {
    if (pattern[k] <= 0) throw IsaError("pattern counts must be positive, got " + std::to_string(pattern[k]));
    count *= static_cast<uint64_t>(pattern[k]);
  }
  if (count != free) {
    throw IsaError("pattern generates " + std::to_string(count) + " elements per partition but dst has " +
                   std::to_string(free));
  }
  int64_t offset = static_cast<int64_t>(inst.scalar("offset"));
  int64_t multiplier = static_cast<int64_t>(inst.scalar("channel_multiplier"));
  size_t dims = pattern.size() / 2;
  std::vector<int64_t> out(size_t{partitions} * free);
  std::vector<int64_t> index(dims, 0);
  for (uint32_t p = 0; p < partitions; ++p) {
    std::fill(index.begin(), index.end(), 0);
    uint32_t base = static_cast<uint32_t>(offset) + static_cast<uint32_t>(multiplier) * p;
    for (uint64_t i = 0; i < free; ++i) {
      uint32_t value = base;
      for (size_t k = 0; k < dims; ++k) {
        value += static_cast<uint32_t>(pattern[2 * k]) * static_cast<uint32_t>(index[k]);
      }
      out[size_t{p} * free + i] = static_cast<int32_t>(value);
      // Advance the innermost (last) pattern dim first.
      for (size_t k = dims; k-- > 0;) {
        if (++index[k] < pattern[2 * k + 1]) break;
        index[k] = 0;
      }
    }
  }
  return out;
}

bool compare(AluOp op, int64_t a, int64_t b) {
  switch (op) {
    case AluOp::equal: return a == b;
    case AluOp::not_equal: return a != b;
    case AluOp::greater: return a > b;
    case AluOp::greater_equal: return a >= b;
    case AluOp::less: return a < b;
    case AluOp::less_equal: return a <= b;
    default: throw IsaError("cmp_op must be a comparison operator, not " + std::string(alu_op_name(op)));
  }
}

}  // namespace

void exec_memset(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  double value = inst.scalar("value");
  if (is_int32_storage(dst.dtype) && value == static_cast<double>(static_cast<int64_t>(value)) &&
      value >= (dst.dtype == DType::int32 ? -2147483648.0 : 0.0) &&
      value <= (dst.dtype == DType::int32 ? 2147483647.0 : 4294967295.0)) {
    // An integral constant lands exactly, even beyond fp32's 2^24.
    write_ints(ctx, dst, std::vector<int64_t>(dst.elements(), static_cast<int64_t>(value)));
    return;
  }
  ctx.write(dst, Tile(dst.partitions(), dst.free_elements(), static_cast<float>(value)));
}

void exec_iota(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  write_ints(ctx, dst, affine_values(inst, dst.partitions(), dst.free_elements()));
}

void exec_affine_select(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& on_true = inst.tensor("on_true_tile");
  if (on_true.partitions() != dst.partitions() || on_true.free_elements() != dst.free_elements()) {
    throw IsaError("on_true_tile is " + shape_text(on_true) + " but dst is " + shape_text(dst) +
                   " (partitions and elements per partition must match)");
  }
  AluOp cmp = static_cast<AluOp>(static_cast<int>(inst.scalar("cmp_op")));
  std::vector<int64_t> affine = affine_values(inst, dst.partitions(), dst.free_elements());
  float on_false = static_cast<float>(inst.scalar("on_false_value"));
  // Selected elements go through fp32 (NKI: cast to FP32 before converting to dst.dtype).
  Tile out = ctx.read(on_true);
  for (size_t i = 0; i < out.values.size(); ++i) {
    if (!compare(cmp, affine[i], 0)) out.values[i] = on_false;
  }
  ctx.write(dst, out);
}

void exec_tensor_partition_reduce(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  AluOp op = static_cast<AluOp>(static_cast<int>(inst.scalar("op")));
  if (!alu_op_is_reduction(op)) throw IsaError(std::string(alu_op_name(op)) + " is not a reduction operator");
  if (dst.partitions() != 1 || dst.free_elements() != data.free_elements()) {
    throw IsaError("dst must be " + shape_text(1, data.free_elements()) + " to hold the reduction of data " +
                   shape_text(data) + " over its partitions, got " + shape_text(dst));
  }
  Tile in = ctx.read(data);
  Tile out(1, in.free);
  // Fold partition 0, 1, 2, ... in fp32 (bitwise operators act on the integer values fp32 carries).
  for (uint64_t i = 0; i < in.free; ++i) {
    float acc = in.at(0, i);
    for (uint32_t p = 1; p < in.partitions; ++p) acc = apply_alu(op, acc, in.at(p, i));
    out.at(0, i) = acc;
  }
  ctx.write(dst, out);
}

}  // namespace trnsim::isa
