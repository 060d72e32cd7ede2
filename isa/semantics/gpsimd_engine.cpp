// GpSimd engine semantics (memset also runs on Vector): generated index patterns, the affine
// select behind causal masks, and the cross-partition reduction.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "isa/alu.h"
#include "isa/isa_error.h"
#include "isa/semantics/bit_alias.h"
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

// ISA topk: each group of 16 partitions (one GpSimd core's partitions, ISA nonzero_with_count) holds one "snake" of
// n bf16 values, element e at partition 16g + e % 16, column e / 16. The K largest (K = val_dst's free size) are
// written in ascending order with their snake indices e. Assumed where NKI is silent: the group's result goes to
// every partition of the group ("for each partition"); ties prefer the lower index and list in index order; NaN
// ranks above +inf (as max8).
void exec_topk(const Instruction& inst, ExecContext& ctx) {
  constexpr uint32_t kSnake = 16;  // ISA topk: a 16-partition snake
  const AccessPattern& val_dst = inst.tensor("val_dst");
  const AccessPattern& idx_dst = inst.tensor("idx_dst");
  const AccessPattern& src = inst.tensor("src");
  const int64_t n = static_cast<int64_t>(inst.scalar("n"));
  const uint64_t k = val_dst.free_elements();
  const uint32_t partitions = src.partitions();
  if (partitions == 0 || partitions % kSnake != 0) {
    throw IsaError("src has " + std::to_string(partitions) + " partitions; topk needs a multiple of 16");
  }
  if (n < 8 || n >= 65536 || k < 1 || k >= 32768 || int64_t(k) > n) {
    throw IsaError("topk needs 8 <= n < 65536 and 1 <= K <= n, K < 32768; got n = " + std::to_string(n) +
                   ", K = " + std::to_string(k));
  }
  if (src.free_elements() < uint64_t(n + kSnake - 1) / kSnake) {
    throw IsaError("src has " + std::to_string(src.free_elements()) + " columns; n = " + std::to_string(n) +
                   " needs ceil(n / 16) = " + std::to_string((n + kSnake - 1) / kSnake));
  }
  for (const AccessPattern* out : {&val_dst, &idx_dst}) {
    if (out->partitions() != partitions || out->free_elements() != k) {
      throw IsaError(std::string(out == &val_dst ? "val_dst" : "idx_dst") + " must be " +
                     shape_text(partitions, k) + ", got " + shape_text(*out));
    }
  }
  if (dtype_info(idx_dst.dtype).is_float) throw IsaError("idx_dst must be uint32, not " + std::string(dtype_name(idx_dst.dtype)));
  Tile in = ctx.read(src);
  Tile values(partitions, k);
  std::vector<int64_t> indices(size_t{partitions} * k);
  auto ranks_above = [](float a, float b) {  // a ranks strictly above b
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
    return a > b;
  };
  std::vector<uint32_t> order(static_cast<size_t>(n));
  for (uint32_t g = 0; g < partitions / kSnake; ++g) {
    auto value = [&](uint32_t e) { return in.at(g * kSnake + e % kSnake, e / kSnake); };
    std::iota(order.begin(), order.end(), 0u);
    // The K best by (value descending, index ascending), then listed by value ascending, index ascending.
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](uint32_t a, uint32_t b) {
      if (ranks_above(value(a), value(b))) return true;
      if (ranks_above(value(b), value(a))) return false;
      return a < b;
    });
    std::vector<uint32_t> top(order.begin(), order.begin() + k);
    std::stable_sort(top.begin(), top.end(), [&](uint32_t a, uint32_t b) {
      if (ranks_above(value(b), value(a))) return true;
      if (ranks_above(value(a), value(b))) return false;
      return a < b;
    });
    for (uint32_t p = g * kSnake; p < (g + 1) * kSnake; ++p) {
      for (uint64_t j = 0; j < k; ++j) {
        values.at(p, j) = value(top[j]);
        indices[size_t{p} * k + j] = top[j];
      }
    }
  }
  ctx.write(val_dst, values);
  write_ints(ctx, idx_dst, indices);
}

// ISA nc_n_gather: a gather inside each partition, element for element of `indices` (uint32, read as raw bits),
// the elements moved bit for bit (dst.dtype = data.dtype). An index outside [0, data's elements per partition) is an
// error (NKI: "must be within the range").
void exec_nc_n_gather(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data = inst.tensor("data");
  const AccessPattern& indices = inst.tensor("indices");
  if (indices.dtype != DType::uint32) throw IsaError("indices must be uint32, not " + std::string(dtype_name(indices.dtype)));
  if (dst.dtype != data.dtype) {
    throw IsaError("dst.dtype must match data.dtype (" + std::string(dtype_name(data.dtype)) + "), not " +
                   std::string(dtype_name(dst.dtype)));
  }
  if (data.partitions() != indices.partitions() || dst.partitions() != indices.partitions() ||
      dst.free_elements() != indices.free_elements()) {
    throw IsaError("dst is " + shape_text(dst) + ", data " + shape_text(data) + " and indices " + shape_text(indices) +
                   " (partitions must match; dst holds one element per index)");
  }
  DType alias{};  // the elements move bit for bit (bit_alias.h)
  if (!bit_alias(data.dtype, alias)) {
    throw IsaError("nc_n_gather does not move " + std::string(dtype_name(data.dtype)));
  }
  AccessPattern source = data, target = dst, raw_indices = indices;
  source.dtype = target.dtype = alias;
  raw_indices.dtype = DType::fp32;
  Tile in = ctx.read(source);
  Tile index = ctx.read(raw_indices);
  Tile out(dst.partitions(), dst.free_elements());
  for (uint32_t p = 0; p < out.partitions; ++p) {
    for (uint64_t j = 0; j < out.free; ++j) {
      uint32_t i = numerics::float_bits(index.at(p, j));
      if (i >= in.free) {
        throw IsaError("index " + std::to_string(i) + " (partition " + std::to_string(p) + ") is outside data's " +
                       std::to_string(in.free) + " elements per partition");
      }
      out.at(p, j) = in.at(p, i);
    }
  }
  write_aliased(ctx, dst, target, out, /*as_bits=*/true);
}

// ISA nonzero_with_count: each GpSimd core works on the first of its 16 partitions only (absolute partitions 0, 16,
// ..., 112); the other partitions of dst keep their bytes. fp32 elements are nonzero unless +-0 (NaN counts as
// nonzero); int32 elements by their bits. Results are int32 (two's complement wrap of index + index_offset).
void exec_nonzero_with_count(const Instruction& inst, ExecContext& ctx) {
  constexpr uint32_t kPartitionsPerCore = 16;  // ISA: each GpSimd core connects to 16 SBUF partitions
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  if ((src.dtype != DType::fp32 && src.dtype != DType::int32) || dst.dtype != DType::int32) {
    throw IsaError("src must be fp32 or int32 and dst int32, not " + std::string(dtype_name(src.dtype)) + " / " +
                   std::string(dtype_name(dst.dtype)));
  }
  if (dst.partitions() != src.partitions() || dst.free_elements() != src.free_elements() + 1) {
    throw IsaError("dst must be " + shape_text(src.partitions(), src.free_elements() + 1) + " for src " +
                   shape_text(src) + ", got " + shape_text(dst));
  }
  const int64_t offset = static_cast<int64_t>(inst.scalar("index_offset"));
  const int64_t padding = static_cast<int64_t>(inst.scalar("padding_val"));
  const uint32_t first = ctx.state.first_partition(src);
  AccessPattern raw = src;
  raw.dtype = DType::fp32;  // int32 as bits
  Tile in = ctx.read(raw);
  const uint64_t t = src.free_elements();
  for (uint32_t p = 0; p < src.partitions(); ++p) {
    if ((first + p) % kPartitionsPerCore != 0) continue;
    std::vector<int64_t> row;
    for (uint64_t i = 0; i < t; ++i) {
      float v = in.at(p, i);
      bool nonzero = src.dtype == DType::int32 ? numerics::float_bits(v) != 0 : v != 0.0f || std::isnan(v);
      if (nonzero) row.push_back(static_cast<int32_t>(static_cast<uint32_t>(int64_t(i) + offset)));
    }
    const int64_t count = static_cast<int64_t>(row.size());
    row.resize(t, padding);
    row.push_back(count);
    AccessPattern one = dst;  // this partition of dst only
    one.start_partition += p;
    one.partition.size = 1;
    write_ints(ctx, one, row);
  }
}

// ISA sequence_bounds (GpSimd): one partition of n segment ids (fp32 values or int32 bits), each a non-negative integer,
// 0 marking padding. For every element: the start (inclusive) and end (exclusive) of the run of equal ids around it,
// written as dst[0, i] (starts) and dst[0, n + i] (ends), NKI's [1, 2, n] flattened; padding gets start n and end -1.
// A run is maximal among adjacent equal ids (the NKI reference compares neighbours only), so ids need not be sorted.
void exec_sequence_bounds(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& ids = inst.tensor("segment_ids");
  for (const AccessPattern* ap : {&dst, &ids}) {
    if (ap->dtype != DType::fp32 && ap->dtype != DType::int32) {
      throw IsaError("segment_ids and dst must be fp32 or int32, not " + std::string(dtype_name(ids.dtype)) + " / " +
                     std::string(dtype_name(dst.dtype)));
    }
  }
  if (ids.partitions() != 1 || dst.partitions() != 1 || dst.free_elements() != 2 * ids.free_elements()) {
    throw IsaError("segment_ids must be [1, n] and dst [1, 2n], got " + shape_text(ids) + " and " + shape_text(dst));
  }
  AccessPattern raw = ids;
  raw.dtype = DType::fp32;  // int32 as bits
  Tile in = ctx.read(raw);
  const int64_t n = static_cast<int64_t>(ids.free_elements());
  std::vector<int64_t> id(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float v = in.at(0, uint64_t(i));
    double x = ids.dtype == DType::int32 ? double(static_cast<int32_t>(numerics::float_bits(v))) : double(v);
    if (!(x >= 0) || x != std::floor(x)) {
      throw IsaError("segment id " + std::to_string(x) + " at element " + std::to_string(i) +
                     " is not a non-negative integer");
    }
    id[size_t(i)] = static_cast<int64_t>(x);
  }
  std::vector<int64_t> out(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) {  // starts, left to right
    int64_t& start = out[size_t(i)];
    if (id[size_t(i)] == 0) start = n;
    else if (i > 0 && id[size_t(i)] == id[size_t(i - 1)]) start = out[size_t(i - 1)];
    else start = i;
  }
  for (int64_t i = n - 1; i >= 0; --i) {  // ends, right to left
    int64_t& end = out[size_t(n + i)];
    if (id[size_t(i)] == 0) end = -1;
    else if (i + 1 < n && id[size_t(i)] == id[size_t(i + 1)]) end = out[size_t(n + i + 1)];
    else end = i + 1;
  }
  write_ints(ctx, dst, out);
}

// ISA local_gather: each GpSimd core serves 16 SBUF partitions (absolute partitions 16c .. 16c + 15). Its indices are
// the uint16 elements of `index` on those partitions taken partition first (the j-th at partition j % 16, flattened
// column j / 16), the first num_valid_indices of them; each index is an element offset into the flattened free dims
// of src_buffer (the NKI reference passes index * num_elem_per_idx), and every partition p of the group receives
// dst[p, j * e + k] = src_buffer[p, index_j + k] for k < e, bit for bit. An index whose e elements leave src_buffer is
// an error (NKI: undefined).
void exec_local_gather(const Instruction& inst, ExecContext& ctx) {
  constexpr uint32_t kPartitionsPerCore = 16;  // ISA: each GpSimd core connects to 16 SBUF partitions
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src_buffer");
  const AccessPattern& index = inst.tensor("index");
  if (index.dtype != DType::uint16) throw IsaError("index must be uint16, not " + std::string(dtype_name(index.dtype)));
  if (dst.dtype != src.dtype) {
    throw IsaError("dst.dtype must match src_buffer.dtype (" + std::string(dtype_name(src.dtype)) + "), not " +
                   std::string(dtype_name(dst.dtype)));
  }
  DType alias{};  // the elements move bit for bit (bit_alias.h)
  if (!bit_alias(src.dtype, alias)) {
    throw IsaError("local_gather does not move " + std::string(dtype_name(src.dtype)));
  }
  const uint32_t first = ctx.state.first_partition(src);
  if (src.partitions() != index.partitions() || src.partitions() % kPartitionsPerCore != 0 ||
      first % kPartitionsPerCore != 0 || ctx.state.first_partition(index) != first ||
      ctx.state.first_partition(dst) != first || dst.partitions() != src.partitions()) {
    throw IsaError("src_buffer, index and dst must cover the same whole 16-partition groups (start a multiple of 16), "
                   "got src_buffer " + shape_text(src) + " at partition " + std::to_string(first) + ", index " +
                   shape_text(index) + " at " + std::to_string(ctx.state.first_partition(index)) + ", dst " +
                   shape_text(dst) + " at " + std::to_string(ctx.state.first_partition(dst)));
  }
  const int64_t e = static_cast<int64_t>(inst.scalar("num_elem_per_idx"));
  if (e != 1 && e != 2 && e != 4 && e != 8 && e != 16 && e != 32) {
    throw IsaError("num_elem_per_idx must be 1, 2, 4, 8, 16 or 32, not " + std::to_string(e));
  }
  const uint64_t per_core = uint64_t{kPartitionsPerCore} * index.free_elements();
  const int64_t valid = inst.has("num_valid_indices") ? static_cast<int64_t>(inst.scalar("num_valid_indices"))
                                                      : static_cast<int64_t>(per_core);
  if (valid < 1 || uint64_t(valid) > per_core || valid > 4096) {
    throw IsaError("num_valid_indices must be 1 .. min(4096, " + std::to_string(per_core) +
                   " indices per 16-partition group), not " + std::to_string(valid));
  }
  if (dst.free_elements() != uint64_t(valid * e)) {
    throw IsaError("dst must be " + shape_text(src.partitions(), uint64_t(valid * e)) +
                   " (num_valid_indices x num_elem_per_idx per partition), got " + shape_text(dst));
  }
  AccessPattern source = src, target = dst;
  source.dtype = target.dtype = alias;
  Tile in = ctx.read(source);
  Tile idx = ctx.read(index);  // uint16 values are exact in fp32
  Tile out(dst.partitions(), dst.free_elements());
  for (uint32_t g = 0; g < src.partitions() / kPartitionsPerCore; ++g) {
    for (int64_t j = 0; j < valid; ++j) {
      const uint32_t ip = g * kPartitionsPerCore + uint32_t(j % kPartitionsPerCore);
      const uint64_t offset = static_cast<uint64_t>(idx.at(ip, uint64_t(j / kPartitionsPerCore)));
      if (offset + uint64_t(e) > in.free) {
        throw IsaError("index " + std::to_string(offset) + " (index " + std::to_string(j) + " of partitions " +
                       std::to_string(first + g * kPartitionsPerCore) + ".." +
                       std::to_string(first + g * kPartitionsPerCore + 15) + ") with " + std::to_string(e) +
                       " elements per index leaves src_buffer's " + std::to_string(in.free) + " elements per partition");
      }
      for (uint32_t p = g * kPartitionsPerCore; p < (g + 1) * kPartitionsPerCore; ++p) {
        for (int64_t k = 0; k < e; ++k) out.at(p, uint64_t(j * e + k)) = in.at(p, offset + uint64_t(k));
      }
    }
  }
  write_aliased(ctx, dst, target, out, /*as_bits=*/true);
}

}  // namespace trnsim::isa
