// Row-wise kernels (see normalization.h for the layout and the engine balance).
#include "kernels/normalization.h"

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;

namespace {

// nl.tile_size.bn_stats_fmax: bn_stats takes at most 512 elements per partition.
constexpr int64_t kBnStatsMaxFree = 512;
// bn_stats writes (count, mean, var*count) for the even and the odd elements: 6 values.
constexpr int64_t kBnStatsValues = 6;

// Row kernels chain three engines per tile (e.g. Scalar -> Vector -> store), so they keep one more
// tile in flight than the element-wise kernels (5 measured best for bf16 rmsnorm on trn2/trn3).
constexpr int kRowDepth = detail::kRingDepth + 1;

struct Rows {
  int64_t rows, cols;
};
Rows rows_of(const std::vector<int64_t>& shape) {
  if (shape.empty()) throw std::invalid_argument("row kernel: shape needs at least one dim");
  return {detail::product(shape) / shape.back(), shape.back()};
}

// The [p, C] HBM rows [r0, r0 + p) of a [R, C] tensor.
isa::AccessPattern rows_hbm(const KernelContext& ctx, uint32_t tensor, const Rows& r, int64_t r0, int64_t p) {
  return hbm_ap(ctx, tensor, r0 * r.cols, {{r.cols, uint32_t(p)}, {1, uint32_t(r.cols)}});
}

// Throws when `bytes_per_column` (every full-width buffer's bytes per element of a row) does not
// leave room for a row of C elements.
void check_fits(const KernelContext& ctx, const char* kernel, int64_t cols, int64_t bytes_per_column) {
  if (cols * bytes_per_column > detail::sbuf_free_bytes(ctx)) {
    throw std::invalid_argument(std::string(kernel) + ": a row of " + std::to_string(cols) +
                                " elements does not fit in SBUF with its ring buffers (rows longer than " +
                                std::to_string(detail::sbuf_free_bytes(ctx) / bytes_per_column) +
                                " need a two-pass schedule, not implemented)");
  }
}

// A [C] parameter vector loaded once into all partitions (partition stride 0 on the HBM side).
uint32_t load_row_param(const KernelContext& ctx, const std::string& name, uint32_t tensor, DType dtype, int64_t cols) {
  uint32_t buf = ctx.builder.sbuf(ctx.name(name), dtype, {ctx.partitions(), uint32_t(cols)});
  dma(ctx, sb2(ctx, buf, ctx.partitions(), cols), hbm_ap(ctx, tensor, 0, {{0, ctx.partitions()}, {1, uint32_t(cols)}}),
      detail::kConstQueue);
  return buf;
}

// Emits the row-tile loop: loads ahead of compute(t), so loads, compute and stores overlap. `compute` returns the tile to store.
void row_loop(const KernelContext& ctx, const Rows& r, uint32_t x, uint32_t y, const detail::Ring& in_ring,
              const std::function<isa::AccessPattern(const isa::AccessPattern&, int64_t t, int64_t p)>& compute) {
  std::vector<Range> row_tiles = tiles(r.rows, ctx.partitions());
  auto load = [&](size_t t) {
    const Range& rt = row_tiles[t];
    dma(ctx, sb2(ctx, in_ring[int64_t(t)], rt.size, r.cols), rows_hbm(ctx, x, r, rt.begin, rt.size), detail::kLoadQueue);
  };
  // Loads run kRingDepth - 1 tiles ahead (a DMA engine serves its transfers in program order).
  const size_t ahead = kRowDepth - 1;
  for (size_t t = 0; t < std::min(ahead, row_tiles.size()); ++t) load(t);
  for (size_t t = 0; t < row_tiles.size(); ++t) {
    if (t + ahead < row_tiles.size()) load(t + ahead);
    const Range& rt = row_tiles[t];
    isa::AccessPattern out = compute(sb2(ctx, in_ring[int64_t(t)], rt.size, r.cols), int64_t(t), rt.size);
    dma(ctx, rows_hbm(ctx, y, r, rt.begin, rt.size), out, detail::kStoreQueue);
  }
}

// A ring of [P, 1] fp32 per-row statistics.
detail::Ring stat_ring(const KernelContext& ctx, const std::string& name, int64_t width = 1) {
  return detail::make_ring(ctx, name, DType::fp32, width, kRowDepth);
}

}  // namespace

// ---- softmax / log_softmax ----

void build_softmax(const KernelContext& ctx, const SoftmaxSpec& spec, uint32_t x, uint32_t y) {
  const Rows r = rows_of(spec.shape);
  const int64_t depth = kRowDepth;
  // in ring, fp32 exp ring (softmax) or a bf16 scratch (log_softmax), out ring.
  int64_t per_column = depth * (dtype_size_bytes(spec.input_dtype) + dtype_size_bytes(spec.output_dtype)) +
                       (spec.log ? 2 : depth * 4);
  check_fits(ctx, "softmax", r.cols, per_column);
  detail::Ring in = detail::make_ring(ctx, "sm_in", spec.input_dtype, r.cols, kRowDepth);
  detail::Ring out = detail::make_ring(ctx, "sm_out", spec.output_dtype, r.cols, kRowDepth);
  // softmax keeps exp(x - max) in fp32 for the final scaling; log_softmax only needs its row sum,
  // so the exponentials go to one bf16 scratch that nobody reads.
  detail::Ring e = spec.log ? detail::make_ring(ctx, "sm_scratch", DType::bf16, r.cols, 1)
                            : detail::make_ring(ctx, "sm_exp", DType::fp32, r.cols, kRowDepth);
  detail::Ring neg_max = stat_ring(ctx, "sm_negmax"), sum = stat_ring(ctx, "sm_sum"), aux = stat_ring(ctx, "sm_aux");

  row_loop(ctx, r, x, y, in, [&](const isa::AccessPattern& xt, int64_t t, int64_t p) {
    auto s = [&](const detail::Ring& ring) { return sb2(ctx, ring[t], p, 1); };
    isa::AccessPattern et = sb2(ctx, e[t], p, r.cols), yt = sb2(ctx, out[t], p, r.cols);
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", s(neg_max)).word("op", "maximum").tensor("data", xt).word("axis", "[1]").imm("negate", 1);
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", et).word("op", "exp").tensor("data", xt).tensor("bias", s(neg_max)).imm("scale", 1.0)
        .word("reduce_op", "add").tensor("reduce_res", s(sum));
    if (!spec.log) {
      ctx.builder.emit(isa::Opcode::reciprocal).tensor("dst", s(aux)).tensor("data", s(sum));
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", yt).tensor("data", et).word("op0", "multiply").tensor("operand0", s(aux)).on(Engine::gpsimd);
    } else {
      // y = x + (-max - log(sum)): one per-row bias for the full-width pass.
      ctx.builder.emit(isa::Opcode::activation).tensor("dst", s(aux)).word("op", "log").tensor("data", s(sum));
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", s(aux)).tensor("data1", s(neg_max)).tensor("data2", s(aux)).word("op", "subtract");
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", yt).tensor("data", xt).word("op0", "add").tensor("operand0", s(aux)).on(Engine::gpsimd);
    }
    return yt;
  });
}

isa::Program softmax_program(const SoftmaxSpec& spec, const HardwareConfig& config) {
  isa::ProgramBuilder builder(spec.log ? "log_softmax" : "softmax", config.generation);
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.output_dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  build_softmax(KernelContext{builder, config, ""}, spec, x, y);
  return builder.finish();
}

// ---- layernorm / rmsnorm ----

void build_norm(const KernelContext& ctx, const NormSpec& spec, uint32_t x, int64_t w, int64_t b, uint32_t y) {
  const Rows r = rows_of(spec.shape);
  const bool rms = spec.kind == NormKind::rmsnorm;
  const bool has_w = w >= 0, has_b = !rms && b >= 0;
  const int64_t depth = kRowDepth;
  int64_t per_column = depth * (dtype_size_bytes(spec.input_dtype) + dtype_size_bytes(spec.output_dtype) + 4) + 2 +
                       (has_w + has_b) * dtype_size_bytes(spec.param_dtype);
  check_fits(ctx, rms ? "rmsnorm" : "layernorm", r.cols, per_column);

  std::optional<uint32_t> w_sb, b_sb;
  if (has_w) w_sb = load_row_param(ctx, "norm_w", uint32_t(w), spec.param_dtype, r.cols);
  if (has_b) b_sb = load_row_param(ctx, "norm_b", uint32_t(b), spec.param_dtype, r.cols);
  detail::Ring in = detail::make_ring(ctx, "norm_in", spec.input_dtype, r.cols, kRowDepth);
  detail::Ring out = detail::make_ring(ctx, "norm_out", spec.output_dtype, r.cols, kRowDepth);
  detail::Ring tmp = detail::make_ring(ctx, "norm_tmp", DType::fp32, r.cols, kRowDepth);
  detail::Ring scratch = detail::make_ring(ctx, "norm_sq", DType::bf16, r.cols, 1);  // discarded squares
  const int64_t chunks = ceil_div(r.cols, kBnStatsMaxFree);
  detail::Ring stats = stat_ring(ctx, "norm_stats", chunks * kBnStatsValues);
  detail::Ring mv = stat_ring(ctx, "norm_mv", 2), rstd = stat_ring(ctx, "norm_rstd"), nmr = stat_ring(ctx, "norm_nmr");
  const double inv_cols = 1.0 / double(r.cols);

  row_loop(ctx, r, x, y, in, [&](const isa::AccessPattern& xt, int64_t t, int64_t p) {
    auto s = [&](const detail::Ring& ring, int64_t offset = 0) { return sb2(ctx, ring[t], p, 1, offset); };
    isa::AccessPattern yt = sb2(ctx, out[t], p, r.cols), tt = sb2(ctx, tmp[t], p, r.cols);
    if (rms) {
      // Scalar: sum of squares in the activation's fp32 accumulator; the squares themselves are
      // written to a bf16 scratch nobody reads.
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", sb2(ctx, scratch[0], p, r.cols)).word("op", "square").tensor("data", xt)
          .word("reduce_op", "add").tensor("reduce_res", s(rstd));
      // rstd = rsqrt(sum / C + eps) on [P, 1] (two short Vector instructions).
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", s(rstd)).tensor("data", s(rstd)).word("op0", "multiply").imm("operand0", inv_cols)
          .word("op1", "add").imm("operand1", spec.eps);
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", s(rstd)).tensor("data", s(rstd)).word("op0", "rsqrt").imm("operand0", 0.0);
      isa::AccessPattern scaled_src = xt;
      if (has_w) {
        // GpSimd: x * w in fp32 (exact for bf16 x and w), in parallel with the Scalar pass.
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", tt).tensor("data1", xt).tensor("data2", sb2(ctx, *w_sb, p, r.cols)).word("op", "multiply")
            .on(Engine::gpsimd);
        scaled_src = tt;
      }
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", yt).tensor("data", scaled_src).word("op0", "multiply").tensor("operand0", s(rstd));
      return yt;
    }
    // layernorm: mean and variance from bn_stats over <= 512-element chunks, aggregated.
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t c0 = c * kBnStatsMaxFree, f = std::min(kBnStatsMaxFree, r.cols - c0);
      ctx.builder.emit(isa::Opcode::bn_stats)
          .tensor("dst", sb2(ctx, stats[t], p, kBnStatsValues, c * kBnStatsValues))
          .tensor("data", detail::sb_ap(ctx, in[t], uint32_t(p), {{1, uint32_t(f)}}, c0));
    }
    ctx.builder.emit(isa::Opcode::bn_aggr)
        .tensor("dst", sb2(ctx, mv[t], p, 2)).tensor("data", sb2(ctx, stats[t], p, chunks * kBnStatsValues));
    // rstd = rsqrt(var + eps); nmr = -mean * rstd.
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", s(rstd)).tensor("data", s(mv, 1)).word("op0", "add").imm("operand0", spec.eps);
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", s(rstd)).tensor("data", s(rstd)).word("op0", "rsqrt").imm("operand0", 0.0);
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", s(nmr)).tensor("data", s(mv, 0)).word("op0", "multiply").imm("operand0", -1.0)
        .word("op1", "multiply").tensor("operand1", s(rstd));
    // Scalar: x * rstd + (-mean * rstd), the normalised row, in one pass.
    isa::AccessPattern norm_dst = has_w || has_b ? tt : yt;
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", norm_dst).word("op", "copy").tensor("data", xt).tensor("scale", s(rstd)).tensor("bias", s(nmr));
    if (has_w) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", has_b ? tt : yt).tensor("data1", tt).tensor("data2", sb2(ctx, *w_sb, p, r.cols))
          .word("op", "multiply").on(Engine::gpsimd);
    }
    if (has_b) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", yt).tensor("data1", tt).tensor("data2", sb2(ctx, *b_sb, p, r.cols)).word("op", "add")
          .on(Engine::gpsimd);
    }
    return yt;
  });
}

isa::Program norm_program(const NormSpec& spec, const HardwareConfig& config) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  isa::ProgramBuilder builder(rms ? "rmsnorm" : "layernorm", config.generation);
  std::vector<uint32_t> param_shape{uint32_t(spec.shape.back())};
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  int64_t w = spec.weight ? int64_t(builder.hbm("w", spec.param_dtype, param_shape, isa::AllocationRole::input)) : -1;
  int64_t b = spec.bias && !rms ? int64_t(builder.hbm("b", spec.param_dtype, param_shape, isa::AllocationRole::input)) : -1;
  uint32_t y = builder.hbm("y", spec.output_dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  build_norm(KernelContext{builder, config, ""}, spec, x, w, b, y);
  return builder.finish();
}

}  // namespace trnsim::kernels
