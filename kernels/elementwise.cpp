// Element-wise kernels (see elementwise.h for the layout and engine choices).
#include "kernels/elementwise.h"

#include <stdexcept>
#include <string>

#include "isa/alu.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {

// A 2-D block of the iteration space (rows on partitions, cols on the free axis) with, per operand
// (0 = the output), the element offset of its first element and its row / column strides.
struct Block {
  std::vector<int64_t> offset, row_stride, col_stride;
  int64_t rows = 1, cols = 1;
};

struct Dim {
  int64_t size;
  std::vector<int64_t> strides;  // per operand
};

// Row-major strides of `shape` aligned to the trailing dims of `out` (0 where broadcast).
std::vector<int64_t> aligned_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t s = shape.size() - 1 - i, o = out.size() - 1 - i;
    strides[o] = shape[s] == 1 ? 0 : stride;
    stride *= shape[s];
  }
  return strides;
}

// The blocks covering `out_shape`: size-1 dims dropped, neighbours merged wherever every operand
// walks them as one dim; one merged dim is split [P, N/P] + [1, N%P] so all partitions work.
std::vector<Block> make_blocks(const std::vector<int64_t>& out_shape, const std::vector<std::vector<int64_t>>& shapes,
                               int64_t partitions) {
  const size_t n_ops = shapes.size();
  std::vector<std::vector<int64_t>> strides;
  for (const auto& s : shapes) strides.push_back(aligned_strides(s, out_shape));
  std::vector<Dim> dims;
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    Dim dim{out_shape[d], {}};
    for (size_t o = 0; o < n_ops; ++o) dim.strides.push_back(strides[o][d]);
    bool mergeable = !dims.empty();
    for (size_t o = 0; mergeable && o < n_ops; ++o) {
      mergeable = dims.back().strides[o] == dim.strides[o] * dim.size;
    }
    if (mergeable) {
      dims.back().size *= dim.size;
      dims.back().strides = dim.strides;
    } else {
      dims.push_back(dim);
    }
  }
  if (dims.empty()) dims.push_back({1, std::vector<int64_t>(n_ops, 0)});

  std::vector<Block> blocks;
  if (dims.size() == 1) {
    const Dim& d = dims[0];
    int64_t cols = d.size / partitions, rem = d.size % partitions;
    if (cols > 0) {
      Block b;
      b.rows = partitions;
      b.cols = cols;
      for (size_t o = 0; o < n_ops; ++o) {
        b.offset.push_back(0);
        b.row_stride.push_back(d.strides[o] * cols);
        b.col_stride.push_back(d.strides[o]);
      }
      blocks.push_back(b);
    }
    if (rem > 0) {
      Block b;
      b.cols = rem;
      for (size_t o = 0; o < n_ops; ++o) {
        b.offset.push_back(d.strides[o] * partitions * cols);
        b.row_stride.push_back(0);
        b.col_stride.push_back(d.strides[o]);
      }
      blocks.push_back(b);
    }
    return blocks;
  }
  // A short row dim over a long column dim ([2, 131072] + [131072], a batch broadcast) would use a
  // few partitions: split the column dim [d, cols/d] (d the largest divisor <= P) and loop over the
  // short dim instead, so every operand's blocks still fill the partitions.
  if (dims[dims.size() - 2].size < partitions && dims.back().size >= 2 * partitions) {
    const Dim col = dims.back();
    int64_t d = partitions;
    while (d > 1 && col.size % d != 0) --d;
    if (d > dims[dims.size() - 2].size) {
      Dim split_rows{d, {}}, split_cols{col.size / d, col.strides};
      for (int64_t stride : col.strides) split_rows.strides.push_back(stride * (col.size / d));
      dims.back() = split_rows;
      dims.push_back(split_cols);
    }
  }
  const Dim& row = dims[dims.size() - 2];
  const Dim& col = dims.back();
  const size_t outer = dims.size() - 2;
  std::vector<int64_t> index(outer, 0);
  while (true) {
    Block b;
    b.rows = row.size;
    b.cols = col.size;
    for (size_t o = 0; o < n_ops; ++o) {
      int64_t offset = 0;
      for (size_t d = 0; d < outer; ++d) offset += index[d] * dims[d].strides[o];
      b.offset.push_back(offset);
      b.row_stride.push_back(row.strides[o]);
      b.col_stride.push_back(col.strides[o]);
    }
    blocks.push_back(b);
    size_t d = outer;
    while (d > 0 && ++index[d - 1] == dims[d - 1].size) index[--d] = 0;
    if (d == 0) break;
  }
  return blocks;
}

// How a tile reads an input operand.
enum class Mode { immediate, full, per_row, shared };

struct Input {
  int64_t tensor = -1;  // -1: immediate
  DType dtype = DType::fp32;
  double value = 0;
  size_t op_index = 0;  // index into Block's per-operand vectors
  // An immediate whose value the kernel loaded at run time: [P, 1] fp32 in SBUF, its rows the tile's.
  std::optional<isa::AccessPattern> loaded_column;
};

Mode mode_of(const Input& in, const Block& b) {
  if (in.tensor < 0) return Mode::immediate;
  if (b.cols > 1 && b.col_stride[in.op_index] == 0) return Mode::per_row;
  if (b.rows > 1 && b.row_stride[in.op_index] == 0) return Mode::shared;
  return Mode::full;
}

struct Tile {
  size_t block;
  int64_t r0, p, c0, f, chunk;  // rows [r0, r0+p), columns [c0, c0+f), column-chunk index
};

std::vector<Tile> make_tiles(const std::vector<Block>& blocks, int64_t partitions, int64_t width) {
  std::vector<Tile> out;
  for (size_t b = 0; b < blocks.size(); ++b) {
    int64_t chunk = 0;
    for (const Range& c : tiles(blocks[b].cols, width)) {
      for (const Range& r : tiles(blocks[b].rows, partitions)) out.push_back({b, r.begin, r.size, c.begin, c.size, chunk});
      ++chunk;
    }
  }
  return out;
}

// The HBM pattern of operand `o` for a tile: [p, f] (or [p, 1] for a per-row operand).
isa::AccessPattern tile_hbm(const KernelContext& ctx, uint32_t tensor, const Block& b, size_t o, const Tile& t,
                            bool one_column = false) {
  int64_t offset = b.offset[o] + t.r0 * b.row_stride[o] + t.c0 * b.col_stride[o];
  uint32_t f = one_column ? 1u : uint32_t(t.f);
  int64_t col_stride = b.col_stride[o] == 0 && !one_column ? 0 : 1;
  return hbm_ap(ctx, tensor, offset, {{b.row_stride[o], uint32_t(t.p)}, {col_stride, f}});
}

// Tile width: DMA-sized, bounded by the SBUF left for `bytes_per_column` (all ring buffers' bytes
// per element column), and by the 16-bit access-pattern size field.
int64_t tile_width(const KernelContext& ctx, int64_t max_cols, int64_t widest_dtype_bytes, int64_t bytes_per_column) {
  int64_t by_dma = detail::kTargetDmaBytesPerPartition / std::max<int64_t>(1, widest_dtype_bytes);
  int64_t by_sbuf = detail::sbuf_free_bytes(ctx) / std::max<int64_t>(1, bytes_per_column);
  int64_t width = std::min({max_cols, by_dma, by_sbuf, isa::kMaxApDimSize});
  if (width < 1) throw KernelUnsupported("element-wise kernel: SBUF is full");
  return width;
}

void set_scalar_operand(isa::InstructionBuilder& inst, const std::string& name, const Input& in, Mode mode,
                        const isa::AccessPattern& tile, const isa::AccessPattern& dst) {
  if (mode == Mode::immediate && in.loaded_column) {
    isa::AccessPattern column = *in.loaded_column;  // the dst tile's partitions of the loaded value
    column.start_partition = dst.start_partition;
    column.partition.size = dst.partitions();
    inst.tensor(name, column);
  } else if (mode == Mode::immediate) {
    inst.imm(name, in.value);
  } else {
    inst.tensor(name, tile);
  }
}

// A runtime scalar (BinarySpec::runtime_scalar): HBM fp32 [1] read into every partition of a [P, 1]
// SBUF column, once, on the constants' queue.
isa::AccessPattern load_runtime_scalar(const KernelContext& ctx, uint32_t hbm_scalar, const std::string& name) {
  const uint32_t P = ctx.partitions();
  const uint32_t column = ctx.builder.sbuf(ctx.name(name), DType::fp32, {P, 1});
  isa::AccessPattern dst = ctx.builder.view(column);
  dma(ctx, dst, detail::hbm_ap(ctx, hbm_scalar, 0, {{0, P}, {1, 1}}), detail::kConstQueue);
  return dst;
}

std::string binary_alu_name(BinaryOp op) {
  static const char* names[] = {"add", "subtract", "multiply", "divide", "maximum", "minimum",
                                "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
                                "bitwise_and", "bitwise_or", "bitwise_xor", "mod"};
  return names[int(op)];
}

// The shared emission loop: loads every tensor input of each tile (one tile ahead of the
// compute), calls `compute`, which returns the SBUF tile to store, and stores it.
struct TileBuffers {
  std::vector<isa::AccessPattern> inputs;  // per Input: the tile (or [p, 1]) pattern; unused for immediates
  std::vector<Mode> modes;
  isa::AccessPattern out;
};

template <typename Compute>
void run_tiles(const KernelContext& ctx, const std::vector<Block>& blocks, uint32_t out_tensor, DType out_dtype,
               const std::vector<Input>& inputs, const std::string& name, Compute compute) {
  const int64_t P = ctx.partitions();
  int64_t widest = dtype_size_bytes(out_dtype), per_column = detail::kRingDepth * dtype_size_bytes(out_dtype);
  for (const Input& in : inputs) {
    if (in.tensor < 0) continue;
    widest = std::max<int64_t>(widest, dtype_size_bytes(in.dtype));
    per_column += detail::kRingDepth * dtype_size_bytes(in.dtype);  // full tiles, or shared rows
  }
  int64_t max_cols = 1;
  for (const Block& b : blocks) max_cols = std::max(max_cols, b.cols);
  int64_t width = tile_width(ctx, max_cols, widest, per_column);
  // Split across cores: narrower tiles when there are too few for every core to get one.
  if (ctx.cores > 1 && make_tiles(blocks, P, width).size() < ctx.cores) {
    width = tile_width(ctx, ceil_div(max_cols, ctx.cores), widest, per_column);
  }

  detail::Ring out_ring = detail::make_ring(ctx, name + "_out", out_dtype, width);
  std::vector<detail::Ring> in_rings, col_rings;
  for (size_t i = 0; i < inputs.size(); ++i) {
    DType d = inputs[i].dtype;
    in_rings.push_back(inputs[i].tensor < 0 ? detail::Ring{}
                                            : detail::make_ring(ctx, name + "_in" + std::to_string(i) + "_", d, width));
    col_rings.push_back(inputs[i].tensor < 0 ? detail::Ring{}
                                             : detail::make_ring(ctx, name + "_col" + std::to_string(i) + "_", d, 1));
  }
  // Split across cores: each core takes a contiguous run of the tiles (whole column chunks of the
  // [128, N/128] layout, or whole row tiles); the per-element arithmetic does not depend on the split.
  std::vector<Tile> all = my_share(ctx, make_tiles(blocks, P, width));
  // Shared (row-broadcast) operands are loaded once per (block, column chunk) into their ring slot.
  std::vector<std::pair<int64_t, int64_t>> shared_key(inputs.size(), {-1, -1});
  std::vector<int64_t> shared_slot(inputs.size(), -1);
  std::vector<TileBuffers> loaded(all.size());

  auto load = [&](size_t i) {
    const Tile& t = all[i];
    const Block& b = blocks[t.block];
    TileBuffers& tb = loaded[i];
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Input& in = inputs[k];
      Mode mode = mode_of(in, b);
      tb.modes.push_back(mode);
      isa::AccessPattern ap;
      if (mode == Mode::full) {
        ap = sb2(ctx, in_rings[k][int64_t(i)], t.p, t.f);
        dma(ctx, ap, tile_hbm(ctx, uint32_t(in.tensor), b, in.op_index, t), detail::kLoadQueue);
      } else if (mode == Mode::per_row) {
        ap = sb2(ctx, col_rings[k][int64_t(i)], t.p, 1);
        dma(ctx, ap, tile_hbm(ctx, uint32_t(in.tensor), b, in.op_index, t, true), detail::kLoadQueue);
      } else if (mode == Mode::shared) {
        std::pair<int64_t, int64_t> key{int64_t(t.block), t.chunk};
        if (key != shared_key[k]) {
          shared_key[k] = key;
          ++shared_slot[k];
          Tile full_rows = t;
          full_rows.r0 = 0;
          full_rows.p = std::min(P, b.rows);
          dma(ctx, sb2(ctx, in_rings[k][shared_slot[k]], full_rows.p, t.f),
              tile_hbm(ctx, uint32_t(in.tensor), b, in.op_index, full_rows), detail::kConstQueue);
        }
        ap = sb2(ctx, in_rings[k][shared_slot[k]], t.p, t.f);
      }
      tb.inputs.push_back(ap);
    }
    tb.out = sb2(ctx, out_ring[int64_t(i)], t.p, t.f);
  };

  // Loads run kRingDepth - 1 tiles ahead of the compute: a DMA engine serves its transfers in
  // program order, so a load emitted after store(t) could not start before compute(t) ends.
  detail::pipelined(all.size(), detail::kRingDepth - 1, load, [&](size_t i) {
      isa::AccessPattern result = compute(loaded[i], all[i]);
      const Block& b = blocks[all[i].block];
      dma(ctx, tile_hbm(ctx, out_tensor, b, 0, all[i]), result, detail::kStoreQueue);
  });
}

// Any shared-mode input must not share a ring with full-mode tiles of another block; the binary
// kernel uses separate rings per input, and shared mode is per (input, block): a block switch
// moves to a fresh slot, and a ring slot is reused only kRingDepth loads later.

}  // namespace

// ---- unary ----

void build_unary(const KernelContext& ctx, const UnarySpec& spec, uint32_t x, uint32_t y) {
  const int64_t n = detail::product(spec.shape);
  std::vector<Block> blocks = make_blocks({n}, {{n}, {n}}, ctx.partitions());
  // A cast (copy) is done by the load DMA itself (DMA casts through fp32 with RNE): the tile
  // arrives in the output dtype and no compute engine is involved.
  const bool dma_only = spec.op == UnaryOp::copy;
  Input in{int64_t(x), dma_only ? spec.output_dtype : spec.input_dtype, 0, 1};
  const std::string name = "unary";

  run_tiles(ctx, blocks, y, spec.output_dtype, {in}, name, [&](const TileBuffers& tb, const Tile&) -> isa::AccessPattern {
    const isa::AccessPattern& src = tb.inputs[0];
    const isa::AccessPattern& dst = tb.out;
    auto act = [&](const char* func) {
      ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", func).tensor("data", src);
    };
    // ALU-only functions on the Vector engine: tensor_scalar has the 2x/4x bf16 modes.
    auto alu = [&](const char* op0, double v0, const char* op1 = nullptr, double v1 = 0) {
      auto inst = ctx.builder.emit(isa::Opcode::tensor_scalar);
      inst.tensor("dst", dst).tensor("data", src).word("op0", op0).imm("operand0", v0);
      if (op1) inst.word("op1", op1).imm("operand1", v1);
    };
    switch (spec.op) {
      case UnaryOp::copy: return src;  // the load DMA did the cast
      case UnaryOp::relu: alu("maximum", 0.0); break;
      case UnaryOp::gelu: act("gelu"); break;
      case UnaryOp::gelu_tanh: act("gelu_apprx_tanh"); break;
      case UnaryOp::gelu_dx: act("gelu_dx"); break;
      case UnaryOp::silu: act("silu"); break;
      case UnaryOp::sigmoid: act("sigmoid"); break;
      case UnaryOp::tanh: act("tanh"); break;
      case UnaryOp::exp: act("exp"); break;
      case UnaryOp::log: act("log"); break;
      case UnaryOp::sqrt: act("sqrt"); break;
      case UnaryOp::rsqrt: act("rsqrt"); break;
      case UnaryOp::square: alu("square", 0.0); break;
      case UnaryOp::abs: alu("abs", 0.0); break;
      case UnaryOp::neg: alu("multiply", -1.0); break;
      case UnaryOp::reciprocal: alu("reciprocal", 0.0); break;
      case UnaryOp::sin: act("sin"); break;
      case UnaryOp::cos: act("cos"); break;
      case UnaryOp::erf: act("erf"); break;
      case UnaryOp::sign: act("sign"); break;
      case UnaryOp::affine: alu("multiply", spec.scale, "add", spec.bias); break;
    }
    return dst;
  });
}

isa::Program unary_program(const UnarySpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("unary", config.generation);
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.output_dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  build_unary(KernelContext{builder, config, "", core, cores}, spec, x, y);
  return builder.finish();
}

// ---- binary ----

std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1) throw KernelUnsupported("shapes are not broadcast-compatible");
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
std::vector<int64_t> binary_out_shape(const BinarySpec& spec) {
  if (spec.a_scalar && spec.b_scalar) throw KernelUnsupported("binary: at least one operand must be a tensor");
  if (!spec.out_shape.empty()) {
    for (const auto* shape : {spec.a_scalar ? nullptr : &spec.a_shape, spec.b_scalar ? nullptr : &spec.b_shape}) {
      if (shape && broadcast_shape(*shape, spec.out_shape) != spec.out_shape)
        throw KernelUnsupported("binary: an operand does not broadcast to out_shape");
    }
    return spec.out_shape;
  }
  if (spec.a_scalar) return spec.b_shape;
  if (spec.b_scalar) return spec.a_shape;
  return broadcast_shape(spec.a_shape, spec.b_shape);
}
}  // namespace

void build_binary(const KernelContext& ctx, const BinarySpec& spec, int64_t a, int64_t b, uint32_t c) {
  std::vector<int64_t> out = binary_out_shape(spec);
  std::vector<int64_t> a_shape = spec.a_scalar ? std::vector<int64_t>{1} : spec.a_shape;
  std::vector<int64_t> b_shape = spec.b_scalar ? std::vector<int64_t>{1} : spec.b_shape;
  std::vector<Block> blocks = make_blocks(out, {out, a_shape, b_shape}, ctx.partitions());
  Input in_a{spec.a_scalar ? -1 : a, spec.a_dtype, spec.a_scalar.value_or(0), 1};
  Input in_b{spec.b_scalar ? -1 : b, spec.b_dtype, spec.b_scalar.value_or(0), 2};
  if (spec.runtime_scalar) {
    // a / b name the scalar's HBM input here (binary_program declares it fp32 [1]).
    if (spec.a_scalar) in_a.loaded_column = load_runtime_scalar(ctx, uint32_t(a), "binary_a_scalar");
    if (spec.b_scalar) in_b.loaded_column = load_runtime_scalar(ctx, uint32_t(b), "binary_b_scalar");
  }
  const std::string op = binary_alu_name(spec.op);

  run_tiles(ctx, blocks, c, spec.output_dtype, {in_a, in_b}, "binary", [&](const TileBuffers& tb, const Tile&) -> isa::AccessPattern {
    bool a_tensor = tb.modes[0] == Mode::full || tb.modes[0] == Mode::shared;
    bool b_tensor = tb.modes[1] == Mode::full || tb.modes[1] == Mode::shared;
    // A per-row value read across the tile's free axis: the same column, stride 0.
    auto across_row = [&](const isa::AccessPattern& column) {
      isa::AccessPattern ap = column;
      ap.num_free_dims = tb.out.num_free_dims;
      for (int d = 0; d < tb.out.num_free_dims; ++d) ap.free[size_t(d)] = isa::ApDim{0, tb.out.free[size_t(d)].size};
      return ap;
    };
    if (a_tensor && b_tensor) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", tb.out).tensor("data1", tb.inputs[0]).tensor("data2", tb.inputs[1]).word("op", op);
    } else if (!a_tensor && !b_tensor && tb.modes[0] == Mode::immediate) {
      // Only out_shape is wider than the operands: b per row, a an immediate.
      auto inst = ctx.builder.emit(isa::Opcode::tensor_scalar);
      inst.tensor("dst", tb.out).tensor("data", across_row(tb.inputs[1])).word("op0", op).imm("reverse0", 1);
      set_scalar_operand(inst, "operand0", in_a, tb.modes[0], tb.inputs[0], tb.out);
    } else if (!a_tensor && !b_tensor && tb.modes[0] == Mode::per_row) {
      // a per row (b per row or an immediate), the tile wider than both.
      auto inst = ctx.builder.emit(isa::Opcode::tensor_scalar);
      inst.tensor("dst", tb.out).tensor("data", across_row(tb.inputs[0])).word("op0", op);
      set_scalar_operand(inst, "operand0", in_b, tb.modes[1], tb.inputs[1], tb.out);
    } else if (a_tensor || !b_tensor) {
      // b is one value per partition (or an immediate): (a op b) with b as operand0.
      auto inst = ctx.builder.emit(isa::Opcode::tensor_scalar);
      inst.tensor("dst", tb.out).tensor("data", tb.inputs[0]).word("op0", op);
      set_scalar_operand(inst, "operand0", in_b, tb.modes[1], tb.inputs[1], tb.out);
    } else {
      // a is the per-partition value: reverse0 computes (operand0 op data) = (a op b).
      auto inst = ctx.builder.emit(isa::Opcode::tensor_scalar);
      inst.tensor("dst", tb.out).tensor("data", tb.inputs[1]).word("op0", op).imm("reverse0", 1);
      set_scalar_operand(inst, "operand0", in_a, tb.modes[0], tb.inputs[0], tb.out);
    }
    return tb.out;
  });
}

isa::Program binary_program(const BinarySpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("binary", config.generation);
  int64_t a = -1, b = -1;
  if (!spec.a_scalar) a = builder.hbm("a", spec.a_dtype, detail::to_u32(spec.a_shape), isa::AllocationRole::input);
  if (!spec.b_scalar) b = builder.hbm("b", spec.b_dtype, detail::to_u32(spec.b_shape), isa::AllocationRole::input);
  if (spec.runtime_scalar) {  // the scalar operand's value, read at run time
    if (spec.a_scalar) a = builder.hbm("a", DType::fp32, {1}, isa::AllocationRole::input);
    if (spec.b_scalar) b = builder.hbm("b", DType::fp32, {1}, isa::AllocationRole::input);
  }
  uint32_t c = builder.hbm("c", spec.output_dtype, detail::to_u32(binary_out_shape(spec)), isa::AllocationRole::output);
  build_binary(KernelContext{builder, config, "", core, cores}, spec, a, b, c);
  return builder.finish();
}

// ---- where ----

void build_where(const KernelContext& ctx, const WhereSpec& spec, uint32_t cond, int64_t a, int64_t b, uint32_t out) {
  const int64_t n = detail::product(spec.shape);
  std::vector<Block> blocks = make_blocks({n}, {{n}, {n}, {n}, {n}}, ctx.partitions());
  Input in_c{int64_t(cond), spec.cond_dtype, 0, 1};
  Input in_a{spec.a_scalar ? -1 : a, spec.a_dtype, spec.a_scalar.value_or(0), 2};
  // b is loaded straight into the output tile (the DMA casts), so it needs no ring of its own.
  Input none{-1, spec.b_dtype, spec.b_scalar.value_or(0), 3};

  run_tiles(ctx, blocks, out, spec.output_dtype, {in_c, in_a, none}, "where", [&](const TileBuffers& tb, const Tile& t) -> isa::AccessPattern {
    if (spec.b_scalar) {
      // select_reduce: dst = pred ? on_true : on_false (an immediate); on_true must be a tensor.
      if (!spec.a_scalar) {
        ctx.builder.emit(isa::Opcode::select_reduce)
            .tensor("dst", tb.out).tensor("predicate", tb.inputs[0]).tensor("on_true", tb.inputs[1])
            .imm("on_false", *spec.b_scalar);
        return tb.out;
      }
      ctx.builder.emit(isa::Opcode::memset).tensor("dst", tb.out).imm("value", *spec.b_scalar);
    } else {
      dma(ctx, tb.out, tile_hbm(ctx, uint32_t(b), blocks[t.block], 3, t), detail::kLoadQueue);
    }
    auto inst = ctx.builder.emit(isa::Opcode::tensor_copy_predicated);
    inst.tensor("dst", tb.out).tensor("predicate", tb.inputs[0]);
    set_scalar_operand(inst, "src", in_a, tb.modes[1], tb.inputs[1], tb.out);
    return tb.out;
  });
}

isa::Program where_program(const WhereSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("where", config.generation);
  auto shape = detail::to_u32(spec.shape);
  uint32_t cond = builder.hbm("cond", spec.cond_dtype, shape, isa::AllocationRole::input);
  int64_t a = spec.a_scalar ? -1 : int64_t(builder.hbm("a", spec.a_dtype, shape, isa::AllocationRole::input));
  int64_t b = spec.b_scalar ? -1 : int64_t(builder.hbm("b", spec.b_dtype, shape, isa::AllocationRole::input));
  uint32_t out = builder.hbm("out", spec.output_dtype, shape, isa::AllocationRole::output);
  build_where(KernelContext{builder, config, "", core, cores}, spec, cond, a, b, out);
  return builder.finish();
}

isa::Program triangle_program(const TriangleSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  if (spec.batch <= 0 || spec.rows <= 0 || spec.cols <= 0) throw KernelUnsupported("triangle: empty tensor");
  isa::ProgramBuilder builder(spec.upper ? "triu" : "tril", config.generation);
  const std::vector<uint32_t> shape{uint32_t(spec.batch * spec.rows), uint32_t(spec.cols)};
  const uint32_t x = builder.hbm("x", spec.dtype, shape, isa::AllocationRole::input);
  const uint32_t y = builder.hbm("y", spec.dtype, shape, isa::AllocationRole::output);
  const KernelContext ctx{builder, config, "", core, cores};
  const int64_t P = ctx.partitions();
  const int64_t width = std::max<int64_t>(
      1, std::min({spec.cols, detail::kTargetDmaBytesPerPartition / int64_t(dtype_size_bytes(spec.dtype)),
                   isa::kMaxApDimSize}));
  const detail::Ring in = detail::make_ring(ctx, "tri_in", spec.dtype, width);
  const detail::Ring out = detail::make_ring(ctx, "tri_out", spec.dtype, width);
  struct Item {
    int64_t row0;  // first row of the tile in the flattened [batch * rows] tensor
    Range rows, cols;
  };
  std::vector<Item> items;
  for (int64_t b = 0; b < spec.batch; ++b) {
    for (const Range& r : tiles(spec.rows, P)) {
      for (const Range& c : tiles(spec.cols, width)) items.push_back({b * spec.rows + r.begin, r, c});
    }
  }
  items = my_share(ctx, items);
  auto rows_hbm = [&](uint32_t tensor, const Item& it) {
    return hbm_ap(ctx, tensor, it.row0 * spec.cols + it.cols.begin,
                  {{spec.cols, uint32_t(it.rows.size)}, {1, uint32_t(it.cols.size)}});
  };
  detail::pipelined(
      items.size(), detail::kRingDepth - 1,
      [&](size_t k) {
        const Item& it = items[k];
        dma(ctx, sb2(ctx, in[int64_t(k)], it.rows.size, it.cols.size), rows_hbm(x, it), detail::kLoadQueue);
      },
      [&](size_t k) {
        const Item& it = items[k];
        // Keep where the affine expression >= 0: triu col - row - diagonal, tril row - col + diagonal,
        // with row = rows.begin + p and col = cols.begin + i.
        const int64_t sign = spec.upper ? 1 : -1;
        const int64_t offset = sign * (it.cols.begin - it.rows.begin) - (spec.upper ? spec.diagonal : -spec.diagonal);
        const isa::AccessPattern dst = sb2(ctx, out[int64_t(k)], it.rows.size, it.cols.size);
        ctx.builder.emit(isa::Opcode::affine_select)
            .tensor("dst", dst)
            .word("pattern", "[[" + std::to_string(sign) + ", " + std::to_string(it.cols.size) + "]]")
            .imm("channel_multiplier", double(-sign))
            .imm("offset", double(offset))
            .tensor("on_true_tile", sb2(ctx, in[int64_t(k)], it.rows.size, it.cols.size))
            .imm("on_false_value", 0.0)
            .word("cmp_op", "greater_equal");
        dma(ctx, rows_hbm(y, it), dst, detail::kStoreQueue);
      });
  return builder.finish();
}

}  // namespace trnsim::kernels
