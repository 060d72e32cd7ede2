// Vector engine semantics (several also run on GpSimd or Scalar): elementwise ALU forms, free-axis
// reductions, scans, batch-norm statistics and the top-8 helpers. Arithmetic reads every operand
// into fp32, computes in fp32 and rounds once on the write; bitvec operators work on the integer
// bit patterns instead (NKI: "treats all input elements as bit patterns without any data type casting").
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/bit_alias.h"
#include "isa/semantics/lane_accumulators.h"
#include "isa/semantics/in_place.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

AluOp alu(const Instruction& inst, const char* operand) {
  return static_cast<AluOp>(static_cast<int>(inst.scalar(operand)));
}

std::string shape_text(uint32_t partitions, uint64_t free) {
  return "[" + std::to_string(partitions) + ", " + std::to_string(free) + "]";
}
std::string shape_text(const AccessPattern& ap) { return shape_text(ap.partitions(), ap.free_elements()); }

// Operands of one elementwise instruction must agree on partitions and elements per partition.
void check_same_shape(const char* name_a, const AccessPattern& a, const char* name_b, const AccessPattern& b) {
  if (a.partitions() != b.partitions() || a.free_elements() != b.free_elements()) {
    throw IsaError(std::string(name_a) + " is " + shape_text(a) + " but " + name_b + " is " + shape_text(b) +
                   " (partitions and elements per partition must match)");
  }
}

void check_shape(const char* name, const AccessPattern& ap, uint32_t partitions, uint64_t free) {
  if (ap.partitions() != partitions || ap.free_elements() != free) {
    throw IsaError(std::string(name) + " must be " + shape_text(partitions, free) + ", got " + shape_text(ap));
  }
}

// ---- Integer bit patterns (bitvec operators) ----

bool is_int32_storage(DType dtype) { return dtype == DType::int32 || dtype == DType::uint32; }

void require_integer(const char* name, const AccessPattern& ap, AluOp op) {
  if (dtype_info(ap.dtype).is_float) {
    throw IsaError("bitvec operator " + std::string(alu_op_name(op)) + " needs integer dtypes, but " + name + " is " +
                   std::string(dtype_name(ap.dtype)));
  }
}

// Integer values of the elements. 32-bit integers are read as raw bits (fp32 lanes would lose
// values beyond 2^24); narrower ones convert exactly through fp32.
std::vector<int64_t> read_ints(ExecContext& ctx, const AccessPattern& ap) {
  std::vector<int64_t> out;
  if (is_int32_storage(ap.dtype)) {
    AccessPattern raw = ap;
    raw.dtype = DType::fp32;
    Tile tile = ctx.read(raw);
    out.reserve(tile.values.size());
    for (float v : tile.values) {
      uint32_t bits = numerics::float_bits(v);
      out.push_back(ap.dtype == DType::int32 ? int64_t{static_cast<int32_t>(bits)} : int64_t{bits});
    }
    return out;
  }
  Tile tile = ctx.read(ap);
  out.reserve(tile.values.size());
  for (float v : tile.values) out.push_back(static_cast<int64_t>(v));
  return out;
}

// Stores the low bits of each value as the destination's element (bit-pattern semantics: a
// bitvec result is truncated to the element width, not saturated).
void write_int_bits(ExecContext& ctx, const AccessPattern& ap, const std::vector<int64_t>& values) {
  uint32_t width = dtype_info(ap.dtype).size_bits;
  bool is_signed = ap.dtype == DType::int32 || ap.dtype == DType::int16 || ap.dtype == DType::int8;
  Tile tile(ap.partitions(), ap.free_elements());
  AccessPattern target = ap;
  if (is_int32_storage(ap.dtype)) target.dtype = DType::fp32;
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t mask = width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
    uint64_t bits = static_cast<uint64_t>(values[i]) & mask;
    if (is_int32_storage(ap.dtype)) {
      tile.values[i] = numerics::bits_float(static_cast<uint32_t>(bits));
    } else {
      int64_t v = static_cast<int64_t>(bits);
      if (is_signed && (bits >> (width - 1)) & 1) v -= int64_t{1} << width;
      tile.values[i] = static_cast<float>(v);
    }
  }
  ctx.state.write(target, tile);  // exact: fp32 lanes carry bits, narrow integers are exact in fp32
  ctx.state.set_psum_accumulating(target, false);
}

// a op b on the 32-bit patterns; shifts are logical and take the shift count modulo 32.
int64_t apply_bitvec(AluOp op, int64_t a, int64_t b) {
  uint32_t x = static_cast<uint32_t>(a), y = static_cast<uint32_t>(b);
  switch (op) {
    case AluOp::bitwise_and: return x & y;
    case AluOp::bitwise_or: return x | y;
    case AluOp::bitwise_xor: return x ^ y;
    case AluOp::invert: return static_cast<uint32_t>(~x);
    case AluOp::left_shift: return static_cast<uint32_t>(x << (y & 31));
    case AluOp::right_shift: return x >> (y & 31);
    default: throw IsaError("internal: " + std::string(alu_op_name(op)) + " is not a bitvec operator");
  }
}

std::vector<int64_t> per_partition_ints(const Instruction& inst, ExecContext& ctx, const char* operand,
                                        uint32_t partitions, AluOp op) {
  if (!inst.is_tensor(operand)) return std::vector<int64_t>(partitions, static_cast<int64_t>(inst.scalar(operand)));
  const AccessPattern& ap = inst.tensor(operand);
  check_shape(operand, ap, partitions, 1);
  require_integer(operand, ap, op);
  return read_ints(ctx, ap);
}


void check_reduction(AluOp op) {
  if (!alu_op_is_reduction(op)) throw IsaError(std::string(alu_op_name(op)) + " is not a reduction operator");
}


// The Vector engine's accumulator registers of the lanes `ap`'s partitions run on (isa/core_state.h).
float* lane_accumulators(ExecContext& ctx, const AccessPattern& ap) {
  return lane_registers(ctx.state.vector_accumulators(), ctx, ap, "Vector");
}

// The accumulators after reduce_cmd's first step (NKI reduce_cmd): reset_reduce sets them to `identity`,
// reduce keeps them, load_reduce loads `init` (one value per partition; required).
float* start_accumulation(const Instruction& inst, ExecContext& ctx, const AccessPattern& lanes,
                          const std::string& command, float identity, const char* init) {
  float* acc = lane_accumulators(ctx, lanes);
  uint32_t partitions = lanes.partitions();
  if (command == "reset_reduce") {
    std::fill(acc, acc + partitions, identity);
  } else if (command == "load_reduce") {
    if (!inst.has(init)) throw IsaError(std::string("reduce_cmd=load_reduce needs ") + init);
    std::vector<float> values = ctx.per_partition(inst, init, partitions);
    std::copy(values.begin(), values.end(), acc);
  }
  return acc;
}

// Operands that only load_reduce reads (NKI: "should only be set when reduce_cmd is load_reduce").
void check_init_operand(const Instruction& inst, const std::string& command, const char* init, bool zero_is_unset) {
  if (command == "load_reduce" || !inst.has(init)) return;
  if (zero_is_unset && !inst.is_tensor(init) && inst.scalar(init) == 0.0) return;
  throw IsaError(std::string(init) + " is read only with reduce_cmd=load_reduce, not " + command);
}

bool is_accumulating_reduce_op(AluOp op) {
  return op == AluOp::add || op == AluOp::multiply || op == AluOp::maximum || op == AluOp::minimum;
}

// select_reduce / range_select behind their selection `out` (fp32, before dst's cast): the Vector accumulator
// registers per reduce_cmd (isa/semantics/lane_accumulators.h); reduce_res reads them afterwards.
void accumulate_selection(const Instruction& inst, ExecContext& ctx, const AccessPattern& lanes, const Tile& out,
                          AluOp reduce_op, bool has_res) {
  const AccumulatorCommand command = accumulator_command(inst.enum_word("reduce_cmd"), has_res);
  if (!command.reset && !command.fold && !has_res) return;
  check_reduction(reduce_op);
  if (has_res) check_shape("reduce_res", inst.tensor("reduce_res"), out.partitions, 1);
  float* acc = lane_accumulators(ctx, lanes);
  accumulate_rows(command, reduce_op, acc, out.values.data(), out.partitions, out.free, out.free);
  if (has_res) ctx.write(inst.tensor("reduce_res"), register_tile(acc, out.partitions));
}

}  // namespace

void exec_tensor_tensor(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& a = inst.tensor("data1");
  const AccessPattern& b = inst.tensor("data2");
  check_same_shape("data1", a, "data2", b);
  check_same_shape("dst", dst, "data1", a);
  AluOp op = alu(inst, "op");
  if (alu_op_is_bitvec(op)) {
    require_integer("data1", a, op);
    require_integer("data2", b, op);
    require_integer("dst", dst, op);
    std::vector<int64_t> x = read_ints(ctx, a), y = read_ints(ctx, b);
    for (size_t i = 0; i < x.size(); ++i) x[i] = apply_bitvec(op, x[i], y[i]);
    write_int_bits(ctx, dst, x);
    return;
  }
  ElementwiseRows rows;
  if (rows.init(ctx, dst, {&a, &b})) {
    rows.for_rows(ctx, [&](uint32_t, float* out, const float* const* in, size_t n) {
      apply_alu_rows(op, out, in[0], in[1], n);
    });
    return;
  }
  Tile x = ctx.read(a);
  Tile y = ctx.read(b);
  for_row_ranges(ctx, x.partitions, x.values.size(), [&](uint32_t first, uint32_t end) {
    apply_alu_rows(op, x.row(first), y.row(first), size_t(end - first) * x.free);
  });
  ctx.write(dst, x);
}

void exec_tensor_scalar(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  check_same_shape("dst", dst, "data", data);
  uint32_t partitions = data.partitions();
  uint64_t free = data.free_elements();
  AluOp op0 = alu(inst, "op0");
  bool has_op1 = inst.has("op1");
  AluOp op1 = has_op1 ? alu(inst, "op1") : AluOp::bypass;
  if (has_op1 && !inst.has("operand1") && !alu_op_is_unary(op1)) throw IsaError("op1 is given but operand1 is not");
  bool rev0 = inst.scalar("reverse0") != 0, rev1 = inst.scalar("reverse1") != 0;
  bool bitvec = alu_op_is_bitvec(op0);
  if (has_op1 && alu_op_is_bitvec(op1) != bitvec) {
    throw IsaError("op0 and op1 must both be bitvec or both arithmetic operators");
  }
  if (bitvec) {
    require_integer("data", data, op0);
    require_integer("dst", dst, op0);
    std::vector<int64_t> x = read_ints(ctx, data);
    std::vector<int64_t> s0 = per_partition_ints(inst, ctx, "operand0", partitions, op0);
    std::vector<int64_t> s1(partitions, 0);
    if (has_op1 && inst.has("operand1")) s1 = per_partition_ints(inst, ctx, "operand1", partitions, op1);
    for (uint32_t p = 0; p < partitions; ++p) {
      for (uint64_t i = 0; i < free; ++i) {
        int64_t& v = x[p * free + i];
        v = rev0 ? apply_bitvec(op0, s0[p], v) : apply_bitvec(op0, v, s0[p]);
        if (has_op1) v = rev1 ? apply_bitvec(op1, s1[p], v) : apply_bitvec(op1, v, s1[p]);
      }
    }
    write_int_bits(ctx, dst, x);
    return;
  }
  std::vector<float> s0 = ctx.per_partition(inst, "operand0", partitions);
  std::vector<float> s1 = ctx.per_partition(inst, "operand1", partitions);
  if (s1.empty()) s1.assign(partitions, 0.0f);
  ElementwiseRows rows;
  if (rows.init(ctx, dst, {&data})) {
    rows.for_rows(ctx, [&](uint32_t p, float* out, const float* const* in, size_t n) {
      apply_alu_scalar(op0, out, in[0], n, s0[p], rev0);
      if (has_op1) apply_alu_scalar(op1, out, n, s1[p], rev1);
    });
    return;
  }
  Tile x = ctx.read(data);
  // op1 applies to op0's fp32 result, so two passes over a row give the values of one fused pass.
  for_row_ranges(ctx, partitions, x.values.size(), [&](uint32_t first, uint32_t end) {
    for (uint32_t p = first; p < end; ++p) {
      apply_alu_scalar(op0, x.row(p), free, s0[p], rev0);
      if (has_op1) apply_alu_scalar(op1, x.row(p), free, s1[p], rev1);
    }
  });
  ctx.write(dst, x);
}

void exec_scalar_tensor_tensor(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  const AccessPattern& operand1 = inst.tensor("operand1");
  check_same_shape("dst", dst, "data", data);
  check_same_shape("operand1", operand1, "data", data);
  AluOp op0 = alu(inst, "op0"), op1 = alu(inst, "op1");
  if (alu_op_is_bitvec(op0) || alu_op_is_bitvec(op1)) {
    throw IsaError("scalar_tensor_tensor takes arithmetic operators only, not bitvec");
  }
  bool rev0 = inst.scalar("reverse0") != 0, rev1 = inst.scalar("reverse1") != 0;
  Tile x = ctx.read(data);
  Tile y = ctx.read(operand1);
  std::vector<float> s0 = ctx.per_partition(inst, "operand0", x.partitions);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    for (uint64_t i = 0; i < x.free; ++i) {
      float v = rev0 ? apply_alu(op0, s0[p], x.at(p, i)) : apply_alu(op0, x.at(p, i), s0[p]);
      x.at(p, i) = rev1 ? apply_alu(op1, y.at(p, i), v) : apply_alu(op1, v, y.at(p, i));
    }
  }
  ctx.write(dst, x);
}

void exec_tensor_reduce(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  AluOp op = alu(inst, "op");
  check_reduction(op);
  // NKI numbers axes as the tile's dims, partition = 0; the reduced axes must be the trailing
  // free dims. The access pattern's free dims are the tile's free dims in order.
  std::vector<int64_t> axes = inst.list("axis");
  std::sort(axes.begin(), axes.end());
  int dims = data.num_free_dims;
  if (axes.empty()) throw IsaError("axis lists no axis to reduce");
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] < 1 || axes[k] > dims) {
      throw IsaError("axis " + std::to_string(axes[k]) + " is not a free axis of data (free axes are 1.." +
                     std::to_string(dims) + ")");
    }
    if (axes[k] != dims - static_cast<int64_t>(axes.size() - 1 - k)) {
      throw IsaError("axis must list the last free axes contiguously, ending at axis " + std::to_string(dims));
    }
  }
  uint64_t inner = 1;
  for (int64_t a : axes) inner *= data.free[a - 1].size;
  uint64_t outer = data.free_elements() / inner;
  // keepdims changes only the shape NKI reports, not the elements written.
  check_shape("dst", dst, data.partitions(), outer);
  bool negate = inst.scalar("negate") != 0;
  if (alu_op_is_bitvec(op)) {
    require_integer("data", data, op);
    require_integer("dst", dst, op);
    std::vector<int64_t> in = read_ints(ctx, data);
    std::vector<int64_t> out(size_t{data.partitions()} * outer);
    for (size_t r = 0; r < out.size(); ++r) {
      int64_t acc = in[r * inner];
      for (uint64_t i = 1; i < inner; ++i) acc = apply_bitvec(op, acc, in[r * inner + i]);
      out[r] = acc;
    }
    write_int_bits(ctx, dst, out);
    return;
  }
  Tile out(data.partitions(), outer);
  size_t row_stride = 0;
  if (const float* base = fp32_rows_to_read(ctx, data, row_stride)) {
    // fp32 rows folded where they lie (no tile copy): rows of partitions, or each partition's `outer` rows.
    for_row_ranges(ctx, data.partitions(), data.elements(), [&](uint32_t first, uint32_t end) {
      if (outer == 1) {
        fold_alu_rows(op, base + first * row_stride, end - first, row_stride, inner, out.row(first), /*from_first=*/true);
      } else {
        for (uint32_t p = first; p < end; ++p) {
          fold_alu_rows(op, base + p * row_stride, outer, inner, inner, out.row(p), /*from_first=*/true);
        }
      }
      if (negate) {
        for (float* v = out.row(first); v < out.row(end); ++v) *v = -*v;
      }
    });
    ctx.write(dst, out);
    return;
  }
  Tile in = ctx.read(data);
  for_row_ranges(ctx, data.partitions(), in.values.size(), [&](uint32_t first, uint32_t end) {
    const size_t r0 = size_t(first) * outer, rows = size_t(end - first) * outer;
    fold_alu_rows(op, in.values.data() + r0 * inner, rows, inner, inner, out.values.data() + r0, /*from_first=*/true);
    if (negate) {
      for (size_t r = r0; r < r0 + rows; ++r) out.values[r] = -out.values[r];
    }
  });
  ctx.write(dst, out);
}

void exec_tensor_copy(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  check_same_shape("dst", dst, "src", src);
  DType alias{};
  if (src.dtype == dst.dtype && bit_alias(dst.dtype, alias)) {
    // Same dtype: a bit-accurate copy (NaN payloads, int32 beyond 2^24 intact), as NKI documents.
    AccessPattern s = src, d = dst;
    s.dtype = d.dtype = alias;
    Tile bits = ctx.read(s);
    ctx.state.write(d, bits);
    ctx.state.set_psum_accumulating(d, false);
    return;
  }
  ElementwiseRows rows;
  if (rows.init(ctx, dst, {&src})) {
    rows.for_rows(ctx, [](uint32_t, float* out, const float* const* in, size_t n) {
      if (out != in[0]) std::copy(in[0], in[0] + n, out);
    });
    return;
  }
  Tile values = ctx.read(src);
  values.free = dst.free_elements();
  ctx.write(dst, values);
}

void exec_tensor_copy_predicated(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& predicate = inst.tensor("predicate");
  check_same_shape("predicate", predicate, "dst", dst);
  bool src_is_tensor = inst.is_tensor("src");
  if (src_is_tensor) check_same_shape("src", inst.tensor("src"), "dst", dst);
  bool reverse = inst.scalar("reverse_pred") != 0;
  Tile pred = ctx.read(predicate);
  // Unselected elements keep their bits, so work in the destination's bit patterns when possible.
  DType alias{};
  bool bits = bit_alias(dst.dtype, alias);
  AccessPattern d = dst;
  if (bits) d.dtype = alias;
  Tile out = ctx.read(d);
  Tile src;
  if (src_is_tensor) {
    AccessPattern s = inst.tensor("src");
    if (bits && s.dtype == dst.dtype) {
      s.dtype = alias;
      src = ctx.read(s);
    } else {
      src = ctx.read(s);
      if (bits) {
        uint8_t buffer[4];
        for (float& v : src.values) {
          numerics::encode(dst.dtype, v, buffer, ctx.rounding, ctx.rng ? ctx.rng->next_u32() : 0);
          v = numerics::decode(alias, buffer);
        }
      }
    }
  } else {
    float value = static_cast<float>(inst.scalar("src"));
    if (bits) {
      uint8_t buffer[4];
      numerics::encode(dst.dtype, value, buffer);
      value = numerics::decode(alias, buffer);
    }
    src = Tile(out.partitions, out.free, value);
  }
  for (size_t i = 0; i < out.values.size(); ++i) {
    if ((pred.values[i] != 0) != reverse) out.values[i] = src.values[i];
  }
  write_aliased(ctx, dst, d, out, bits);
}

void exec_select_reduce(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& on_true = inst.tensor("on_true");
  check_same_shape("predicate", inst.tensor("predicate"), "dst", dst);
  check_same_shape("on_true", on_true, "dst", dst);
  bool reverse = inst.scalar("reverse_pred") != 0;
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  // NKI's reduce_op defaults to maximum (the only one it supports).
  AluOp reduce_op = inst.has("reduce_op") ? alu(inst, "reduce_op") : AluOp::maximum;
  Tile pred = ctx.read(inst.tensor("predicate"));
  Tile out = ctx.read(on_true);
  std::vector<float> on_false = ctx.per_partition(inst, "on_false", out.partitions);
  for (uint32_t p = 0; p < out.partitions; ++p) {
    for (uint64_t i = 0; i < out.free; ++i) {
      if ((pred.at(p, i) != 0) == reverse) out.at(p, i) = on_false[p];
    }
  }
  // The accumulator sees the fp32 selection, before the cast to dst.dtype (as for activation).
  ctx.write(dst, out);
  accumulate_selection(inst, ctx, dst, out, reduce_op, has_res);
}

void exec_range_select(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& on_true = inst.tensor("on_true_tile");
  check_same_shape("on_true_tile", on_true, "dst", dst);
  uint32_t partitions = dst.partitions();
  check_shape("bound0", inst.tensor("bound0"), partitions, 1);
  check_shape("bound1", inst.tensor("bound1"), partitions, 1);
  AluOp cmp0 = alu(inst, "comp_op0"), cmp1 = alu(inst, "comp_op1");
  for (AluOp op : {cmp0, cmp1}) {
    if (op != AluOp::equal && op != AluOp::less && op != AluOp::less_equal && op != AluOp::greater &&
        op != AluOp::greater_equal) {
      throw IsaError("comparison operator must be equal, less, less_equal, greater or greater_equal, not " +
                     std::string(alu_op_name(op)));
    }
  }
  AluOp reduce_op = alu(inst, "reduce_op");
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  double range_start = inst.scalar("range_start");
  float on_false = static_cast<float>(inst.scalar("on_false_value"));
  Tile out = ctx.read(on_true);
  Tile bound0 = ctx.read(inst.tensor("bound0"));
  Tile bound1 = ctx.read(inst.tensor("bound1"));
  for (uint32_t p = 0; p < partitions; ++p) {
    for (uint64_t i = 0; i < out.free; ++i) {
      // The index is compared in fp32 (NKI: keep range_start + index within 2^24).
      float index = static_cast<float>(static_cast<double>(i) + range_start);
      bool keep = apply_alu(cmp0, index, bound0.at(p, 0)) != 0 && apply_alu(cmp1, index, bound1.at(p, 0)) != 0;
      if (!keep) out.at(p, i) = on_false;
    }
  }
  // fp32 accumulator, before dst's cast: NKI's note relies on reduce_res holding FP32_MIN where a bf16 dst holds -inf.
  ctx.write(dst, out);
  accumulate_selection(inst, ctx, dst, out, reduce_op, has_res);
}

void exec_tensor_tensor_scan(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data0 = inst.tensor("data0");
  const AccessPattern& data1 = inst.tensor("data1");
  check_same_shape("data0", data0, "data1", data1);
  check_same_shape("dst", dst, "data0", data0);
  AluOp op0 = alu(inst, "op0"), op1 = alu(inst, "op1");
  Tile x = ctx.read(data0);
  Tile y = ctx.read(data1);
  std::vector<float> initial = ctx.per_partition(inst, "initial", x.partitions);
  // NKI's docstring: result[i] = op1(op0(data0[i], result[i-1]), data1[i]), result[-1] = initial;
  // the carried state stays fp32 (only the stored copy is rounded to dst.dtype).
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float state = initial[p];
    for (uint64_t i = 0; i < x.free; ++i) {
      state = apply_alu(op1, apply_alu(op0, x.at(p, i), state), y.at(p, i));
      x.at(p, i) = state;
    }
  }
  ctx.write(dst, x);
}

void exec_bn_stats(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  constexpr uint64_t kMaxFree = 512;  // nl.tile_size.bn_stats_fmax
  if (data.free_elements() > kMaxFree) {
    throw IsaError("data has " + std::to_string(data.free_elements()) +
                   " elements per partition; bn_stats takes at most " + std::to_string(kMaxFree));
  }
  check_shape("dst", dst, data.partitions(), 6);
  const uint32_t partitions = data.partitions();
  const uint64_t n = data.free_elements();
  // fp32 rows where they lie, else an fp32 copy of the tile.
  Tile in;
  size_t row_stride = 0;
  const float* base = fp32_rows_to_read(ctx, data, row_stride);
  if (!base) {
    in = ctx.read(data);
    base = in.values.data();
    row_stride = size_t(n);
  }
  Tile out(partitions, 6);
  // Per row and parity, fp32, two passes (mean, then squared deviations) in element order. An empty group (the odd
  // elements of a 1-element row) reports count 0, mean 0, var*count 0 so that bn_aggr's count weighting ignores
  // it. Four rows' two parities run as eight independent chains, each in its own order (so any split of the rows
  // over the host threads gives the same bits).
  constexpr uint32_t kGroup = 4;
  const float count[2] = {float((n + 1) / 2), float(n / 2)};
  for_row_ranges(ctx, partitions, uint64_t{partitions} * n, [&](uint32_t first, uint32_t end) {
    for (uint32_t p0 = first; p0 < end; p0 += kGroup) {
      const uint32_t group = std::min(kGroup, end - p0);
      const float* row[kGroup];
      for (uint32_t g = 0; g < kGroup; ++g) row[g] = base + size_t(p0 + std::min(g, group - 1)) * row_stride;
      float sum[kGroup][2] = {}, mean[kGroup][2], m2[kGroup][2] = {};
      for (uint64_t i = 0; i + 1 < n; i += 2) {
        for (uint32_t g = 0; g < kGroup; ++g) {
          sum[g][0] += row[g][i];
          sum[g][1] += row[g][i + 1];
        }
      }
      if (n % 2) {
        for (uint32_t g = 0; g < kGroup; ++g) sum[g][0] += row[g][n - 1];
      }
      for (uint32_t g = 0; g < kGroup; ++g) {
        for (int parity = 0; parity < 2; ++parity) mean[g][parity] = count[parity] ? sum[g][parity] / count[parity] : 0.0f;
      }
      for (uint64_t i = 0; i + 1 < n; i += 2) {
        for (uint32_t g = 0; g < kGroup; ++g) {
          const float d0 = row[g][i] - mean[g][0], d1 = row[g][i + 1] - mean[g][1];
          m2[g][0] += d0 * d0;
          m2[g][1] += d1 * d1;
        }
      }
      if (n % 2) {
        for (uint32_t g = 0; g < kGroup; ++g) {
          const float d = row[g][n - 1] - mean[g][0];
          m2[g][0] += d * d;
        }
      }
      for (uint32_t g = 0; g < group; ++g) {
        for (int parity = 0; parity < 2; ++parity) {
          out.at(p0 + g, parity * 3 + 0) = count[parity];
          out.at(p0 + g, parity * 3 + 1) = mean[g][parity];
          out.at(p0 + g, parity * 3 + 2) = m2[g][parity];
        }
      }
    }
  });
  ctx.write(dst, out);
}

void exec_bn_aggr(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  if (data.free_elements() == 0 || data.free_elements() % 3 != 0) {
    throw IsaError("data must hold (count, mean, var*count) triples, but has " + std::to_string(data.free_elements()) +
                   " elements per partition");
  }
  check_shape("dst", dst, data.partitions(), 2);
  Tile in = ctx.read(data);
  Tile out(in.partitions, 2);
  uint64_t groups = in.free / 3;
  for (uint32_t p = 0; p < in.partitions; ++p) {
    const float* row = in.row(p);
    // Chan et al.'s parallel combination in fp32: population variance of all the groups'
    // elements. A total count of 0 gives NaN (0/0), as the formula does.
    float n = 0.0f, weighted = 0.0f;
    for (uint64_t g = 0; g < groups; ++g) {
      n += row[3 * g];
      weighted += row[3 * g] * row[3 * g + 1];
    }
    float mean = weighted / n;
    float m2 = 0.0f;
    for (uint64_t g = 0; g < groups; ++g) {
      float d = row[3 * g + 1] - mean;
      m2 += row[3 * g + 2] + row[3 * g] * (d * d);
    }
    out.at(p, 0) = mean;
    out.at(p, 1) = m2 / n;
  }
  ctx.write(dst, out);
}

void exec_reciprocal(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  check_same_shape("dst", dst, "data", data);
  Tile x = ctx.read(data);
  for (float& v : x.values) v = 1.0f / v;
  ctx.write(dst, x);
}

void exec_max8(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  if (src.free_elements() < 8) {
    throw IsaError("src has " + std::to_string(src.free_elements()) + " elements per partition; max8 needs at least 8");
  }
  check_shape("dst", dst, src.partitions(), 8);
  Tile in = ctx.read(src);
  Tile out(in.partitions, 8);
  // Order: NaN above +inf (a max propagates NaN), then descending values; ties (including -0
  // and +0) keep their element order.
  auto greater = [](float a, float b) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
    return a > b;
  };
  std::vector<float> row;
  for (uint32_t p = 0; p < in.partitions; ++p) {
    row.assign(in.row(p), in.row(p) + in.free);
    std::stable_sort(row.begin(), row.end(), greater);
    std::copy(row.begin(), row.begin() + 8, out.row(p));
  }
  ctx.write(dst, out);
}

void exec_nc_find_index8(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  const AccessPattern& vals = inst.tensor("vals");
  if (dtype_info(dst.dtype).is_float) {
    throw IsaError("dst must be an integer dtype (uint16 or uint32), not " + std::string(dtype_name(dst.dtype)));
  }
  check_shape("vals", vals, data.partitions(), 8);
  check_shape("dst", dst, data.partitions(), 8);
  Tile in = ctx.read(data);
  Tile wanted = ctx.read(vals);
  // Matching compares fp32 values: -0 finds +0, NaN finds nothing. Not found = all ones.
  std::vector<int64_t> out(size_t{in.partitions} * 8, int64_t{0xFFFFFFFF});
  for (uint32_t p = 0; p < in.partitions; ++p) {
    const float* row = in.row(p);
    for (uint32_t k = 0; k < 8; ++k) {
      const float* hit = std::find(row, row + in.free, wanted.at(p, k));
      if (hit != row + in.free) out[p * 8 + k] = hit - row;
    }
  }
  write_int_bits(ctx, dst, out);
}

// ---- Accumulating instructions (the shared accumulator registers, reduce_cmd) ----

// dst = data op0 operand0 (one arithmetic operator); the lane's accumulator folds in the fp32 results (before the
// cast to dst.dtype, as for activation) in element order; reduce_res = the accumulator, negated on request (the
// register keeps the un-negated value).
void exec_tensor_scalar_reduce(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  check_same_shape("dst", dst, "data", data);
  AluOp op0 = alu(inst, "op0"), reduce_op = alu(inst, "reduce_op");
  if (alu_op_is_bitvec(op0)) throw IsaError("tensor_scalar_reduce takes an arithmetic op0, not bitvec");
  if (!is_accumulating_reduce_op(reduce_op)) {
    throw IsaError("reduce_op must be add, multiply, maximum or minimum, not " + std::string(alu_op_name(reduce_op)));
  }
  const std::string command(inst.enum_word("reduce_cmd"));
  check_init_operand(inst, command, "reduce_init", false);
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  if (has_res) check_shape("reduce_res", inst.tensor("reduce_res"), data.partitions(), 1);
  bool reverse = inst.scalar("reverse0") != 0, negate = inst.scalar("reduce_res_negate") != 0;
  Tile x = ctx.read(data);
  std::vector<float> s0 = ctx.per_partition(inst, "operand0", x.partitions);
  float* acc = start_accumulation(inst, ctx, data, command, reduction_identity(reduce_op), "reduce_init");
  Tile reduced(x.partitions, 1);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float* row = x.row(p);
    for (uint64_t i = 0; i < x.free; ++i) {
      row[i] = reverse ? apply_alu(op0, s0[p], row[i]) : apply_alu(op0, row[i], s0[p]);
      acc[p] = apply_alu(reduce_op, acc[p], row[i]);
    }
    reduced.at(p, 0) = negate ? -acc[p] : acc[p];
  }
  ctx.write(dst, x);
  if (has_res) ctx.write(inst.tensor("reduce_res"), reduced);
}

// NKI's pseudo code: acc = op1(op0(src[i], imm0), acc), dst[i] = acc, with acc carried in fp32 (the stored copy is
// rounded to dst.dtype) and left in the lane's accumulator.
void exec_tensor_scalar_cumulative(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  check_same_shape("dst", dst, "src", src);
  AluOp op0 = alu(inst, "op0"), op1 = alu(inst, "op1");
  if (alu_op_is_bitvec(op0)) throw IsaError("tensor_scalar_cumulative takes an arithmetic op0, not bitvec");
  if (!is_accumulating_reduce_op(op1) && op1 != AluOp::subtract) {
    throw IsaError("op1 must be add, subtract, multiply, maximum or minimum, not " + std::string(alu_op_name(op1)));
  }
  for (const AccessPattern* ap : {&dst, &src}) {
    if (is_int32_storage(ap->dtype)) {
      throw IsaError("tensor_scalar_cumulative does not take " + std::string(dtype_name(ap->dtype)) +
                     " (ISA: int32/uint32 are not supported)");
    }
  }
  const std::string command(inst.enum_word("reduce_cmd"));
  check_init_operand(inst, command, "imm1", false);
  Tile x = ctx.read(src);
  std::vector<float> s0 = ctx.per_partition(inst, "imm0", x.partitions);
  float* acc = start_accumulation(inst, ctx, src, command, reduction_identity(op1), "imm1");
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float* row = x.row(p);
    for (uint64_t i = 0; i < x.free; ++i) {
      acc[p] = apply_alu(op1, apply_alu(op0, row[i], s0[p]), acc[p]);
      row[i] = acc[p];
    }
  }
  ctx.write(dst, x);
}

// dst = exp(src - max_value) in fp32; unless reduce_cmd is idle the accumulator adds each fp32 result (before the
// cast to dst.dtype) in element order. With idle the registers are left as they are (NKI: "state unknown").
void exec_exponential(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  check_same_shape("dst", dst, "src", src);
  const std::string command(inst.enum_word("reduce_cmd"));
  check_init_operand(inst, command, "reduce_init", true);
  bool has_res = inst.has("reduce_res") && inst.tensor("reduce_res").present();
  bool accumulate = command != "idle";
  if (has_res && !accumulate) throw IsaError("reduce_res is written only with an accumulating reduce_cmd, not idle");
  if (has_res) check_shape("reduce_res", inst.tensor("reduce_res"), src.partitions(), 1);
  Tile x = ctx.read(src);
  std::vector<float> max_value = ctx.per_partition(inst, "max_value", x.partitions);
  float* acc = accumulate ? start_accumulation(inst, ctx, src, command, 0.0f, "reduce_init") : nullptr;
  Tile reduced(x.partitions, 1);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float* row = x.row(p);
    for (uint64_t i = 0; i < x.free; ++i) {
      row[i] = apply_activation(ActivationFunc::exp, row[i] - max_value[p]);
      if (acc) acc[p] += row[i];
    }
    if (acc) reduced.at(p, 0) = acc[p];
  }
  ctx.write(dst, x);
  if (has_res) ctx.write(inst.tensor("reduce_res"), reduced);
}

// ---- Top-8 replace ----

// vals are taken in the order 7, 6, ..., 0 (NKI); each takes the first position of data equal to it (fp32
// comparison, as nc_find_index8: -0 matches +0, NaN matches nothing) that no earlier val took, so duplicate vals
// pair with successive positions. A val with no such position writes the all-ones index (assumed, as
// nc_find_index8's sentinel; NKI does not say) and replaces nothing.
void exec_nc_match_replace8(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  const AccessPattern& vals = inst.tensor("vals");
  check_same_shape("dst", dst, "data", data);
  check_shape("vals", vals, data.partitions(), 8);
  bool has_idx = inst.has("dst_idx") && inst.tensor("dst_idx").present();
  if (has_idx) {
    const AccessPattern& idx = inst.tensor("dst_idx");
    check_shape("dst_idx", idx, data.partitions(), 8);
    if (dtype_info(idx.dtype).is_float) {
      throw IsaError("dst_idx must be an integer dtype (uint16 or uint32), not " + std::string(dtype_name(idx.dtype)));
    }
  }
  float imm = static_cast<float>(inst.scalar("imm"));
  Tile x = ctx.read(data);
  Tile wanted = ctx.read(vals);
  std::vector<int64_t> index(size_t{x.partitions} * 8, int64_t{0xFFFFFFFF});
  std::vector<char> taken(x.free);
  for (uint32_t p = 0; p < x.partitions; ++p) {
    float* row = x.row(p);
    std::fill(taken.begin(), taken.end(), 0);
    for (int k = 7; k >= 0; --k) {
      float v = wanted.at(p, k);
      for (uint64_t i = 0; i < x.free; ++i) {
        if (!taken[i] && row[i] == v) {
          taken[i] = 1;
          index[size_t{p} * 8 + k] = static_cast<int64_t>(i);
          break;
        }
      }
    }
    for (uint64_t i = 0; i < x.free; ++i) {
      if (taken[i]) row[i] = imm;
    }
  }
  ctx.write(dst, x);
  if (has_idx) write_int_bits(ctx, inst.tensor("dst_idx"), index);
}

// ---- Cross-partition shuffle ----

// ISA nc_stream_shuffle: dst partition 32q + i (relative to dst's first partition) takes src partition
// 32q + shuffle_mask[i] (relative to src's first), the same mask in every quadrant; 255 leaves the dst partition as it
// is. Elements move bit for bit; src is read whole before dst is written (in place allowed). A mask entry naming a
// src partition the access does not have is an error. The hardware start-partition rules are legality's.
void exec_nc_stream_shuffle(const Instruction& inst, ExecContext& ctx) {
  constexpr uint32_t kQuadrant = 32;     // ISA: "within a quadrant of 32 partitions"
  constexpr int64_t kKeep = 255;         // ISA: "shuffle_mask[i]=255 means ... unmodified"
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  const std::vector<int64_t>& mask = inst.list("shuffle_mask");
  if (mask.size() != kQuadrant) throw IsaError("shuffle_mask must have 32 entries, not " + std::to_string(mask.size()));
  for (int64_t m : mask) {
    if ((m < 0 || m >= int64_t{kQuadrant}) && m != kKeep) {
      throw IsaError("shuffle_mask entries are 0..31 or 255, not " + std::to_string(m));
    }
  }
  if (dst.dtype != src.dtype) {
    throw IsaError("dst.dtype must match src.dtype (" + std::string(dtype_name(src.dtype)) + "), not " +
                   std::string(dtype_name(dst.dtype)));
  }
  if (dst.free_elements() != src.free_elements()) {
    throw IsaError("dst has " + std::to_string(dst.free_elements()) + " elements per partition but src " +
                   std::to_string(src.free_elements()));
  }
  DType alias{};  // the elements move bit for bit (bit_alias.h)
  if (!bit_alias(src.dtype, alias)) {
    throw IsaError("nc_stream_shuffle does not move " + std::string(dtype_name(src.dtype)));
  }
  AccessPattern source = src, target = dst;
  source.dtype = target.dtype = alias;
  Tile in = ctx.read(source);
  Tile out = ctx.read(target);
  for (uint32_t p = 0; p < out.partitions; ++p) {
    const int64_t m = mask[p % kQuadrant];
    if (m == kKeep) continue;
    const uint32_t from = (p / kQuadrant) * kQuadrant + uint32_t(m);
    if (from >= in.partitions) {
      throw IsaError("dst partition " + std::to_string(p) + " reads src partition " + std::to_string(from) +
                     " (shuffle_mask[" + std::to_string(p % kQuadrant) + "] = " + std::to_string(m) +
                     "), but src has " + std::to_string(in.partitions));
    }
    std::copy(in.row(from), in.row(from) + in.free, out.row(p));
  }
  write_aliased(ctx, dst, target, out, /*as_bits=*/true);
}

}  // namespace trnsim::isa
