// Row-wise kernels (see normalization.h for the layout and the engine balance).
#include "kernels/normalization.h"

#include <cmath>
#include <functional>
#include <limits>
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
  if (shape.empty()) throw KernelUnsupported("row kernel: shape needs at least one dim");
  return {detail::product(shape) / shape.back(), shape.back()};
}

// The [p, C] HBM rows [r0, r0 + p) of a [R, C] tensor.
isa::AccessPattern rows_hbm(const KernelContext& ctx, uint32_t tensor, const Rows& r, int64_t r0, int64_t p) {
  return hbm_ap(ctx, tensor, r0 * r.cols, {{r.cols, uint32_t(p)}, {1, uint32_t(r.cols)}});
}

// SBUF per partition for a kernel's full-width buffers: what is free, less the per-row statistics rings
// a kernel allocates after sizing its rows (up to 8 rings of kRowDepth 256-byte slots, see stat_ring).
int64_t row_budget(const KernelContext& ctx) { return detail::sbuf_free_bytes(ctx) - 8 * kRowDepth * 256; }

// Throws when `bytes_per_column` (every full-width buffer's bytes per element of a row) does not
// leave room for a row of C elements.
void check_fits(const KernelContext& ctx, const char* kernel, int64_t cols, int64_t bytes_per_column) {
  if (cols * bytes_per_column > row_budget(ctx)) {
    throw KernelUnsupported(std::string(kernel) + ": a row of " + std::to_string(cols) +
                                " elements does not fit in SBUF with its ring buffers (rows longer than " +
                                std::to_string(row_budget(ctx) / bytes_per_column) +
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
  // Split across cores: a contiguous share of the row tiles each (rows are independent).
  std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, ctx.partitions()));
  auto load = [&](size_t t) {
    const Range& rt = row_tiles[t];
    dma(ctx, sb2(ctx, in_ring[int64_t(t)], rt.size, r.cols), rows_hbm(ctx, x, r, rt.begin, rt.size), detail::kLoadQueue);
  };
  // Loads run kRingDepth - 1 tiles ahead (a DMA engine serves its transfers in program order).
  detail::pipelined(row_tiles.size(), kRowDepth - 1, load, [&](size_t t) {
      const Range& rt = row_tiles[t];
      isa::AccessPattern out = compute(sb2(ctx, in_ring[int64_t(t)], rt.size, r.cols), int64_t(t), rt.size);
      dma(ctx, rows_hbm(ctx, y, r, rt.begin, rt.size), out, detail::kStoreQueue);
  });
}

// Stores a row tile's [p, 1] fp32 statistic (SBUF column `offset` of `buffer`) into rows [r0, r0 + p)
// of an fp32 [R] HBM tensor; on the constant queue, off the path of the loads and the y stores.
void store_row_stat(const KernelContext& ctx, int64_t tensor, int64_t r0, int64_t p, uint32_t buffer,
                    int64_t offset = 0) {
  if (tensor < 0) return;
  dma(ctx, hbm_ap(ctx, uint32_t(tensor), r0, {{1, uint32_t(p)}, {1, 1}}), sb2(ctx, buffer, p, 1, offset),
      detail::kConstQueue);
}

// A ring of [P, 1] fp32 per-row statistics.
// Each slot is padded to 256 bytes, the timing model's dependency granule (as the hardware tracks SBUF
// ranges): slots packed into one granule would make, e.g., the Scalar write of tile t's row sum wait for
// a matmul still reading tile t + 1's rstd.
constexpr int64_t kGranuleFloats = 64;
detail::Ring stat_ring(const KernelContext& ctx, const std::string& name, int64_t width = 1,
                       int depth = kRowDepth) {
  return detail::make_ring(ctx, name, DType::fp32, std::max(width, kGranuleFloats), depth);
}

// rstd = rsqrt(var + eps) from bn_aggr's [mean, var] columns (`nan_term` a [P, 1] scratch). The CPU's Welford
// statistics (torch's RowwiseMoments) turn a mean whose square overflows fp32 (|mean| > 1.8e19, e.g. a row
// of 1e30) into a NaN variance (its first combine multiplies mean^2 = inf by a count of 0), so the row is
// NaN there; a finite bn_aggr variance would give 0 or finite values instead. mean * mean * 0 (0, or NaN
// exactly when mean^2 overflows or mean is NaN) added under the rsqrt gives the CPU's NaN rows; it is
// formed beside var + eps, so the chain to rstd stays two dependent instructions. A variance that
// overflows by itself stays inf: rstd 0 and y = 0, as on the CPU.
void emit_rstd(const KernelContext& ctx, const isa::AccessPattern& mean, const isa::AccessPattern& var,
               const isa::AccessPattern& rstd, const isa::AccessPattern& nan_term, double eps) {
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", nan_term).tensor("data", mean).word("op0", "multiply").tensor("operand0", mean)
      .word("op1", "multiply").imm("operand1", 0.0);
  ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
      .tensor("dst", rstd).tensor("data", var).word("op0", "add").imm("operand0", eps)
      .word("op1", "add").tensor("operand1", nan_term);
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", rstd).tensor("data", rstd).word("op0", "rsqrt").imm("operand0", 0.0);
}

}  // namespace

// ---- softmax / log_softmax ----

namespace {

// Column chunks of rows too long for SBUF: `n` chunks of `width` columns (the last may be shorter).
struct Chunks {
  int64_t width, n;
  Range columns(int64_t chunk, int64_t cols) const { return {chunk * width, std::min(width, cols - chunk * width)}; }
};

// One chunk of a row tile in a two-pass schedule: pass 1 gathers the row statistics, pass 2 uses them.
struct ChunkStep {
  Range rows;
  int64_t tile, pass, chunk;
};
// Each row tile's chunks twice, tile by tile (a tile's statistics live only between its two passes).
std::vector<ChunkStep> tile_major_two_passes(const std::vector<Range>& row_tiles, int64_t chunks) {
  std::vector<ChunkStep> steps;
  for (size_t t = 0; t < row_tiles.size(); ++t) {
    for (int64_t pass = 1; pass <= 2; ++pass) {
      for (int64_t c = 0; c < chunks; ++c) steps.push_back({row_tiles[t], int64_t(t), pass, c});
    }
  }
  return steps;
}
// Rows `rows` x columns `cr` of a [*, cols] HBM tensor.
isa::AccessPattern chunk_rows_hbm(const KernelContext& ctx, uint32_t tensor, int64_t cols, const Range& rows,
                                  const Range& cr) {
  return hbm_ap(ctx, tensor, rows.begin * cols + cr.begin, {{cols, uint32_t(rows.size)}, {1, uint32_t(cr.size)}});
}
// The widest chunk whose `bytes_per_column` (every chunk-wide buffer) fits in `budget`, at most
// `target` columns, balanced over the row so the last chunk is not a sliver.
Chunks chunk_columns(int64_t cols, int64_t target, int64_t bytes_per_column, int64_t budget, const char* kernel) {
  int64_t width = std::min(target, budget / bytes_per_column);
  if (width < 64) throw KernelUnsupported(std::string(kernel) + ": no room in SBUF for a column chunk");
  const int64_t n = ceil_div(cols, width);
  // Balanced, and a multiple of 128 elements: every chunk-wide buffer then spans whole 256-byte granules
  // (a chunk sharing a granule with its neighbour in the ring would make their engines wait on each other).
  width = std::min(cols, ceil_div(ceil_div(cols, n), 128) * 128);
  return {width, ceil_div(cols, width)};
}

// Rows too long for SBUF: online softmax over column chunks, two passes over HBM per row tile.
// Pass 1, per chunk c: Vector -max_c (negated), Scalar sum_c = sum exp(x - max_c) (its accumulator),
// GpSimd gathers -max_c into a [P, n] row; after the last chunk, max = max_c over chunks and
// sum = sum_c sum_c * exp(max_c - max) (flash attention's rescaled running sum, done once per row
// over the n chunk statistics rather than chunk by chunk, so no engine waits on the previous chunk).
// Pass 2 re-reads the chunks: softmax Scalar exp(x - max) then * (1 / sum), log_softmax (x - max) - log(sum),
// the full-width work alternating GpSimd and Vector. x - max comes first, exactly as torch orders it: a
// fused per-row bias -max - log(sum) would round log(sum) to an ulp of a large max (0.5 at 1e7). Loads run ring-depth - 1 chunks
// ahead across passes and row tiles, so the second pass of a tile overlaps nothing but its own loads
// and stores and the first pass of the next tile starts streaming while the statistics combine.
void build_softmax_chunked(const KernelContext& ctx, const SoftmaxSpec& spec, const Rows& r, uint32_t x, uint32_t y) {
  const int64_t in_b = dtype_size_bytes(spec.input_dtype), out_b = dtype_size_bytes(spec.output_dtype);
  const int depth = detail::kRingDepth;
  // Chunk-wide buffers: the input ring, the output ring, a bf16 scratch for pass 1's exponentials and
  // (softmax) a kExpDepth-deep fp32 ring for pass 2's (Scalar's exp of the next chunks goes ahead while
  // GpSimd scales an earlier one; the depth is a schedule choice, not measured); ~16 KiB per partition
  // per load (large DMAs) when SBUF allows.
  constexpr int kExpDepth = 3;
  const Chunks ch = chunk_columns(r.cols, detail::kTargetDmaBytesPerPartition / in_b,
                                  depth * (in_b + out_b) + 2 + (spec.log ? 0 : kExpDepth * 4),
                                  row_budget(ctx) - 24 * ceil_div(r.cols, 1024), "softmax");
  const int64_t n = ch.n, stat_w = std::max<int64_t>(n, kGranuleFloats);
  detail::align_sbuf_to_granule(ctx, "smc_pad");
  detail::Ring in = detail::make_ring(ctx, "smc_in", spec.input_dtype, ch.width, depth);
  detail::Ring out = detail::make_ring(ctx, "smc_out", spec.output_dtype, ch.width, depth);
  detail::Ring scratch = detail::make_ring(ctx, "smc_scratch", DType::bf16, ch.width, 1);
  detail::Ring ex = spec.log ? detail::Ring{} : detail::make_ring(ctx, "smc_exp", DType::fp32, ch.width, kExpDepth);
  // Per row tile (two tiles in flight): the chunks' -max and sums, and exp(max_c - max).
  detail::Ring nm_all = detail::make_ring(ctx, "smc_nm_all", DType::fp32, stat_w, 2);
  detail::Ring se_all = detail::make_ring(ctx, "smc_se_all", DType::fp32, stat_w, 2);
  detail::Ring w_all = detail::make_ring(ctx, "smc_w_all", DType::fp32, stat_w, 2);
  detail::Ring nm = stat_ring(ctx, "smc_nm"), neg_max = stat_ring(ctx, "smc_negmax"), sum = stat_ring(ctx, "smc_sum"),
               norm = stat_ring(ctx, "smc_norm");  // log(sum) (log_softmax) or 1 / sum

  using Step = ChunkStep;
  // The row-tile loop (split across cores by whole row tiles), each tile's chunks twice.
  const std::vector<ChunkStep> steps = tile_major_two_passes(my_share(ctx, tiles(r.rows, ctx.partitions())), n);
  auto cols_of = [&](int64_t c) { return ch.columns(c, r.cols); };
  auto chunk_hbm = [&](uint32_t tensor, const Step& s) {
    return chunk_rows_hbm(ctx, tensor, r.cols, s.rows, cols_of(s.chunk));
  };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    dma(ctx, sb2(ctx, in[int64_t(k)], s.rows.size, cols_of(s.chunk).size), chunk_hbm(x, s), detail::kLoadQueue);
  };
  int64_t stores = 0;
  detail::pipelined(steps.size(), size_t(depth) - 1, load, [&](size_t k) {
      const Step& st = steps[k];
      const int64_t p = st.rows.size, t = st.tile, w = cols_of(st.chunk).size;
      auto one = [&](const detail::Ring& ring, int64_t slot) { return sb2(ctx, ring[slot], p, 1); };
      auto col = [&](const detail::Ring& ring, int64_t c) { return sb2(ctx, ring[t], p, 1, c); };
      const isa::AccessPattern xt = sb2(ctx, in[int64_t(k)], p, w);
      if (st.pass == 1) {
        const int64_t kk = int64_t(k);
        ctx.builder.emit(isa::Opcode::tensor_reduce)
            .tensor("dst", one(nm, kk)).word("op", "maximum").tensor("data", xt).word("axis", "[1]").imm("negate", 1);
        // -max_c clamped to the largest finite fp32: a chunk of only -inf then sums exp(-inf) = 0, not
        // exp(-inf + inf) = nan, and weighs exp(max_c - max) = 0 in the row's sum (torch's max ignores
        // it); a NaN passes through (minimum propagates it), so its row is NaN as on the CPU.
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", one(nm, kk)).tensor("data", one(nm, kk)).word("op0", "minimum")
            .imm("operand0", double(std::numeric_limits<float>::max()));
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", sb2(ctx, scratch[0], p, w)).word("op", "exp").tensor("data", xt).tensor("bias", one(nm, kk))
            .imm("scale", 1.0).word("reduce_op", "add").tensor("reduce_res", col(se_all, st.chunk));
        ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", col(nm_all, st.chunk)).tensor("src", one(nm, kk))
            .on(Engine::gpsimd);
        if (st.chunk == n - 1) {
          // -max = min over the chunks' -max_c; sum = sum_c sum_c * exp(max_c - max); log(sum) or 1 / sum.
          const isa::AccessPattern nms = sb2(ctx, nm_all[t], p, n), ses = sb2(ctx, se_all[t], p, n),
                                   ws = sb2(ctx, w_all[t], p, n);
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", one(neg_max, t)).word("op", "minimum").tensor("data", nms).word("axis", "[1]");
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", ws).word("op", "exp").tensor("data", nms).tensor("bias", one(neg_max, t)).imm("scale", -1.0);
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", ws).tensor("data1", ws).tensor("data2", ses).word("op", "multiply");
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", one(sum, t)).word("op", "add").tensor("data", ws).word("axis", "[1]");
          if (spec.log) {
            ctx.builder.emit(isa::Opcode::activation).tensor("dst", one(norm, t)).word("op", "log").tensor("data", one(sum, t));
          } else {
            ctx.builder.emit(isa::Opcode::reciprocal).tensor("dst", one(norm, t)).tensor("data", one(sum, t));
          }
        }
        return;
      }
      const isa::AccessPattern yt = sb2(ctx, out[stores], p, w);
      const Engine full_width = st.chunk % 2 == 0 ? Engine::gpsimd : Engine::vector;
      if (!spec.log) {
        const isa::AccessPattern et = sb2(ctx, ex[stores], p, w);
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", et).word("op", "exp").tensor("data", xt).tensor("bias", one(neg_max, t)).imm("scale", 1.0);
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", yt).tensor("data", et).word("op0", "multiply").tensor("operand0", one(norm, t)).on(Engine::gpsimd);
      } else {
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", yt).tensor("data", xt).word("op0", "add").tensor("operand0", one(neg_max, t))
            .word("op1", "subtract").tensor("operand1", one(norm, t)).on(full_width);
      }
      dma(ctx, chunk_hbm(y, st), yt, detail::kStoreQueue);
      ++stores;
  });
}

}  // namespace

void build_softmax(const KernelContext& ctx, const SoftmaxSpec& spec, uint32_t x, uint32_t y) {
  const Rows r = rows_of(spec.shape);
  const int64_t depth = kRowDepth;
  // in ring, fp32 exp ring (softmax) or a bf16 scratch (log_softmax), out ring.
  int64_t per_column = depth * (dtype_size_bytes(spec.input_dtype) + dtype_size_bytes(spec.output_dtype)) +
                       (spec.log ? 2 : depth * 4);
  if (r.cols * per_column > row_budget(ctx)) {  // the row does not fit: two passes over column chunks
    build_softmax_chunked(ctx, spec, r, x, y);
    return;
  }
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
      // y = (x - max) - log(sum), torch's order: x - max is exact near the max, so a large offset cancels
      // before log(sum) is added (one fused bias -max - log(sum) would round log(sum) to an ulp of the
      // max: 0.5 at 1e7, and all of it for a row of 1e30). Both operations in one GpSimd pass.
      ctx.builder.emit(isa::Opcode::activation).tensor("dst", s(aux)).word("op", "log").tensor("data", s(sum));
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", yt).tensor("data", xt).word("op0", "add").tensor("operand0", s(neg_max))
          .word("op1", "subtract").tensor("operand1", s(aux)).on(Engine::gpsimd);
    }
    return yt;
  });
}

isa::Program softmax_program(const SoftmaxSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder(spec.log ? "log_softmax" : "softmax", config.generation);
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.output_dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  build_softmax(KernelContext{builder, config, "", core, cores}, spec, x, y);
  return builder.finish();
}

// ---- layernorm / rmsnorm ----

namespace {

// Rows too long for SBUF: two passes over HBM per row tile in column chunks (as the chunked softmax).
// Pass 1 per chunk: rmsnorm Scalar sum of squares (its accumulator) into column c of a [P, n] row;
// layernorm Vector bn_stats over <= 512-element pieces into a [P, pieces * 6] row. After the last
// chunk: rmsnorm rstd = rsqrt(sum / C + eps); layernorm bn_aggr over every piece, rstd and -mean * rstd.
// Pass 2 re-reads the x chunks with the w (and b) chunks, broadcast to the partitions on their own
// queue, and normalises: rmsnorm GpSimd x * w, Vector * rstd; layernorm Scalar x * rstd - mean * rstd,
// GpSimd * w and + b. SBUF cannot hold w for the whole row, so it is re-read: row tiles go in groups of
// kNormGroup, pass 1 of every tile of a group, then pass 2 chunk by chunk across the group's tiles,
// each w / b chunk loaded once per group (the broadcast reads 128 copies from HBM: once per tile it
// would cost as much traffic as x itself).
constexpr int64_t kNormGroup = 4;
void build_norm_chunked(const KernelContext& ctx, const NormSpec& spec, const Rows& r, uint32_t x, int64_t w,
                        int64_t b, uint32_t y, int64_t mean_out, int64_t rstd_out) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  const bool has_w = w >= 0, has_b = !rms && b >= 0;
  const char* kernel = rms ? "rmsnorm" : "layernorm";
  const int64_t in_b = dtype_size_bytes(spec.input_dtype), out_b = dtype_size_bytes(spec.output_dtype),
                par_b = dtype_size_bytes(spec.param_dtype);
  const int depth = detail::kRingDepth;
  // bn_stats pieces: ceil(width / 512) per chunk (an upper bound before the width is known).
  const int64_t pieces_bound = ceil_div(r.cols, kBnStatsMaxFree) + ceil_div(r.cols, 1024);
  // (+ layernorm's corrected-mean rings: K, -K and the mean, 2 * kNormGroup slots of a 256-byte granule each;
  // the NaN term's 2; the chunk sums of x - K, 2 slots of one fp32 per chunk, chunks being >= 64 columns.)
  const int64_t stats_bytes = rms ? 2 * 256
                                  : 2 * std::max<int64_t>(256, pieces_bound * kBnStatsValues * 4) +
                                        3 * 2 * kNormGroup * 256 + 2 * 256 + 2 * std::max<int64_t>(256, 4 * ceil_div(r.cols, 64));
  // Loads run depth - 1 steps ahead, which may cross that many param chunks (groups of one tile).
  const int param_depth = depth;
  const Chunks ch = chunk_columns(r.cols, detail::kTargetDmaBytesPerPartition / in_b,
                                  depth * (in_b + out_b + 4) + param_depth * (has_w + has_b) * par_b + 2,
                                  row_budget(ctx) - stats_bytes, kernel);
  const int64_t n = ch.n, chunk_pieces = ceil_div(ch.width, kBnStatsMaxFree);
  const int64_t pieces = (n - 1) * chunk_pieces + ceil_div(r.cols - (n - 1) * ch.width, kBnStatsMaxFree);
  detail::align_sbuf_to_granule(ctx, "nc_pad");
  detail::Ring in = detail::make_ring(ctx, "nc_in", spec.input_dtype, ch.width, depth);
  detail::Ring out = detail::make_ring(ctx, "nc_out", spec.output_dtype, ch.width, depth);
  detail::Ring tmp = detail::make_ring(ctx, "nc_tmp", DType::fp32, ch.width, depth);
  detail::Ring wr = has_w ? detail::make_ring(ctx, "nc_w", spec.param_dtype, ch.width, param_depth) : detail::Ring{};
  detail::Ring br = has_b ? detail::make_ring(ctx, "nc_b", spec.param_dtype, ch.width, param_depth) : detail::Ring{};
  detail::Ring scratch = detail::make_ring(ctx, "nc_sq", DType::bf16, ch.width, 1);  // discarded Scalar outputs
  // Per row tile (two in flight): the chunks' sums of squares or bn_stats.
  detail::Ring acc = stat_ring(ctx, "nc_acc", rms ? n : pieces * kBnStatsValues, 2);
  // Per-row statistics live from a tile's pass 1 to its pass 2: two groups' worth of slots.
  detail::Ring mv = stat_ring(ctx, "nc_mv", 2, 2 * kNormGroup), rstd = stat_ring(ctx, "nc_rstd", 1, 2 * kNormGroup);
  // Layernorm's corrected mean: K = the first chunk's mean (bn_aggr of its pieces), dsum = per-chunk sums
  // of x - K (Scalar accumulator, pass 1), mean = K + sum(dsum) / C: bn_aggr's mean alone is its pieces'
  // fp32 sums, ~10 ulps of a mean of 1e4 over 40000 columns; x - K is centred, so its sums are exact.
  detail::Ring kmv = rms ? detail::Ring{} : stat_ring(ctx, "nc_kmv", 2, 2 * kNormGroup),
               nk = rms ? detail::Ring{} : stat_ring(ctx, "nc_nk", 1, 2 * kNormGroup),
               dsum = rms ? detail::Ring{} : stat_ring(ctx, "nc_dsum", n, 2),
               macc = rms ? detail::Ring{} : stat_ring(ctx, "nc_mean", 1, 2 * kNormGroup),
               nan_term = rms ? detail::Ring{} : stat_ring(ctx, "nc_nan", 1, 2);
  const double inv_cols = 1.0 / double(r.cols);

  struct Step {
    Range rows;
    int64_t tile, pass, chunk;
    int64_t param = -1;  // pass 2: the w / b ring slot; the group's first tile loads it
    bool load_param = false;
  };
  // The row-tile loop (split across cores by whole row tiles) in groups: pass 1 of each tile, then
  // pass 2 chunk-major over the group's tiles.
  std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, ctx.partitions()));
  std::vector<Step> steps;
  int64_t param_slot = 0;
  for (size_t g0 = 0; g0 < row_tiles.size(); g0 += size_t(kNormGroup)) {
    const size_t g1 = std::min(row_tiles.size(), g0 + size_t(kNormGroup));
    for (size_t t = g0; t < g1; ++t) {
      for (int64_t c = 0; c < n; ++c) steps.push_back({row_tiles[t], int64_t(t), 1, c});
    }
    for (int64_t c = 0; c < n; ++c, ++param_slot) {
      for (size_t t = g0; t < g1; ++t) steps.push_back({row_tiles[t], int64_t(t), 2, c, param_slot, t == g0});
    }
  }
  auto cols_of = [&](int64_t c) { return ch.columns(c, r.cols); };
  auto chunk_hbm = [&](uint32_t tensor, const Step& s) {
    return chunk_rows_hbm(ctx, tensor, r.cols, s.rows, cols_of(s.chunk));
  };
  auto param_hbm = [&](int64_t tensor, const Step& s) {
    const Range cr = cols_of(s.chunk);
    return hbm_ap(ctx, uint32_t(tensor), cr.begin, {{0, uint32_t(s.rows.size)}, {1, uint32_t(cr.size)}});
  };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    const int64_t p = s.rows.size, cw = cols_of(s.chunk).size;
    dma(ctx, sb2(ctx, in[int64_t(k)], p, cw), chunk_hbm(x, s), detail::kLoadQueue);
    // The group's w / b chunk on all partitions (later tiles of the group may have fewer rows).
    const int64_t P = ctx.partitions();
    Step all = s;
    all.rows.size = P;
    if (s.load_param && has_w) dma(ctx, sb2(ctx, wr[s.param], P, cw), param_hbm(w, all), detail::kConstQueue);
    if (s.load_param && has_b) dma(ctx, sb2(ctx, br[s.param], P, cw), param_hbm(b, all), detail::kConstQueue);
  };
  int64_t stores = 0;
  detail::pipelined(steps.size(), size_t(depth) - 1, load, [&](size_t k) {
      const Step& st = steps[k];
      const Range cr = cols_of(st.chunk);
      const int64_t p = st.rows.size, t = st.tile, cw = cr.size, kk = int64_t(k);
      auto one = [&](const detail::Ring& ring, int64_t offset = 0) { return sb2(ctx, ring[t], p, 1, offset); };
      const isa::AccessPattern xt = sb2(ctx, in[kk], p, cw);
      if (st.pass == 1) {
        if (rms) {
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", sb2(ctx, scratch[0], p, cw)).word("op", "square").tensor("data", xt)
              .word("reduce_op", "add").tensor("reduce_res", one(acc, st.chunk));
        } else {
          const int64_t first_piece = st.chunk * chunk_pieces;
          for (int64_t c0 = 0; c0 < cw; c0 += kBnStatsMaxFree) {
            const int64_t f = std::min(kBnStatsMaxFree, cw - c0);
            ctx.builder.emit(isa::Opcode::bn_stats)
                .tensor("dst", sb2(ctx, acc[t], p, kBnStatsValues, (first_piece + c0 / kBnStatsMaxFree) * kBnStatsValues))
                .tensor("data", detail::sb_ap(ctx, in[kk], uint32_t(p), {{1, uint32_t(f)}}, c0));
          }
          if (st.chunk == 0) {  // K, and -K for the Scalar bias (Vector; Scalar only reads them)
            ctx.builder.emit(isa::Opcode::bn_aggr)
                .tensor("dst", sb2(ctx, kmv[t], p, 2)).tensor("data", sb2(ctx, acc[t], p, chunk_pieces * kBnStatsValues));
            ctx.builder.emit(isa::Opcode::tensor_scalar)
                .tensor("dst", one(nk)).tensor("data", one(kmv)).word("op0", "multiply").imm("operand0", -1.0);
          }
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", sb2(ctx, scratch[0], p, cw)).word("op", "copy").tensor("data", xt).tensor("bias", one(nk))
              .word("reduce_op", "add").tensor("reduce_res", one(dsum, st.chunk));
        }
        if (st.chunk != n - 1) return;
        if (rms) {
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", one(rstd)).word("op", "add").tensor("data", sb2(ctx, acc[t], p, n)).word("axis", "[1]");
          ctx.builder.emit(isa::Opcode::tensor_scalar)
              .tensor("dst", one(rstd)).tensor("data", one(rstd)).word("op0", "multiply").imm("operand0", inv_cols)
              .word("op1", "add").imm("operand1", spec.eps);
          ctx.builder.emit(isa::Opcode::tensor_scalar)
              .tensor("dst", one(rstd)).tensor("data", one(rstd)).word("op0", "rsqrt").imm("operand0", 0.0);
          store_row_stat(ctx, rstd_out, st.rows.begin, p, rstd[t]);
        } else {
          ctx.builder.emit(isa::Opcode::bn_aggr)
              .tensor("dst", sb2(ctx, mv[t], p, 2)).tensor("data", sb2(ctx, acc[t], p, pieces * kBnStatsValues));
          emit_rstd(ctx, one(mv, 0), one(mv, 1), one(rstd), one(nan_term), spec.eps);
          // Scalar: mean = K + sum(dsum) / C (the chunk sums summed in place).
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", sb2(ctx, dsum[t], p, n)).word("op", "copy").tensor("data", sb2(ctx, dsum[t], p, n))
              .word("reduce_op", "add").tensor("reduce_res", one(macc));
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", one(macc)).word("op", "copy").tensor("data", one(macc)).imm("scale", inv_cols)
              .tensor("bias", one(kmv));
          store_row_stat(ctx, mean_out, st.rows.begin, p, macc[t], 0);
          store_row_stat(ctx, rstd_out, st.rows.begin, p, rstd[t]);
        }
        return;
      }
      const isa::AccessPattern yt = sb2(ctx, out[stores], p, cw), tt = sb2(ctx, tmp[stores], p, cw);
      const isa::AccessPattern wt = has_w ? sb2(ctx, wr[st.param], p, cw) : xt,
                               bt = has_b ? sb2(ctx, br[st.param], p, cw) : xt;
      if (rms) {
        isa::AccessPattern src = xt;
        if (has_w) {
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", tt).tensor("data1", xt).tensor("data2", wt).word("op", "multiply").on(Engine::gpsimd);
          src = tt;
        }
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", yt).tensor("data", src).word("op0", "multiply").tensor("operand0", one(rstd));
      } else {
        // Vector (idle in pass 2): (x - mean) * rstd, the subtraction first (see emit_centered).
        const isa::AccessPattern norm_dst = has_w || has_b ? tt : yt;
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", norm_dst).tensor("data", xt).word("op0", "subtract").tensor("operand0", one(macc))
            .word("op1", "multiply").tensor("operand1", one(rstd));
        if (has_w) {
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", has_b ? tt : yt).tensor("data1", tt).tensor("data2", wt).word("op", "multiply")
              .on(Engine::gpsimd);
        }
        if (has_b) {
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", yt).tensor("data1", tt).tensor("data2", bt).word("op", "add").on(Engine::gpsimd);
        }
      }
      dma(ctx, chunk_hbm(y, st), yt, detail::kStoreQueue);
      ++stores;
  });
}

// The layernorm row loop for rows in SBUF, per tile: Vector bn_stats / bn_aggr, rstd (emit_rstd), -mean
// and -rstd / C; Scalar d = x - mean with sum(d) in its accumulator, then d * rstd - mean(d) * rstd (the
// corrected two-pass mean: no cancellation, d is centred, and as exact as torch's Welford mean, where
// bn_stats' fp32 sums leave a few ulps of a large mean: 1e-3 at 1e4, and y = b for a constant row needs
// it exact; torch's fp32 x * rstd - mean * rstd loses an ulp of x * rstd besides); GpSimd * w, + b.
// Two Scalar passes (with both w and b; otherwise pass 2 on GpSimd) because the activation's
// func(x * scale + bias) scales before it adds and the engine's tensor_scalar runs only multiply-then-
// add; Scalar has the room (GpSimd's * w and + b bound the kernel). The Scalar work is skewed by one tile (pass 1 of tile t, pass 2 of tile t - 1, then the
// [P, 1] mean(d) * rstd of tile t), so no Scalar instruction waits on the one before it.
void build_layernorm_rows(const KernelContext& ctx, const NormSpec& spec, const Rows& r, uint32_t x, uint32_t y,
                          int64_t mean_out, int64_t rstd_out, const std::optional<uint32_t>& w_sb,
                          const std::optional<uint32_t>& b_sb, const detail::Ring& in, const detail::Ring& out,
                          const detail::Ring& tmp) {
  const int64_t chunks = ceil_div(r.cols, kBnStatsMaxFree);
  detail::Ring stats = stat_ring(ctx, "norm_stats", chunks * kBnStatsValues);
  detail::Ring mv = stat_ring(ctx, "norm_mv", 2), rstd = stat_ring(ctx, "norm_rstd"), nmean = stat_ring(ctx, "norm_nmean"),
               dsum = stat_ring(ctx, "norm_dsum"), corr = stat_ring(ctx, "norm_corr"), nrc = stat_ring(ctx, "norm_nrc");
  const double inv_cols = 1.0 / double(r.cols);
  const bool has_w = w_sb.has_value(), has_b = b_sb.has_value();
  // fp32 x gets the exact form; 16-bit x keeps torch's x * rstd - mean * rstd in one Scalar pass: its fp32
  // cancellation (2^-24 |x| rstd) and bn_stats' mean (a few fp32 ulps) are far below x's own rounding
  // (2^-9 |x|), and the second pass would make one engine do two (+22% for bf16 [8192, 4096] with w only).
  const bool exact = spec.input_dtype == DType::fp32;
  const std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, ctx.partitions()));
  auto s = [&](const detail::Ring& ring, int64_t t, int64_t offset = 0) {
    return sb2(ctx, ring[t], row_tiles[size_t(t)].size, 1, offset);
  };
  auto full = [&](const detail::Ring& ring, int64_t t) { return sb2(ctx, ring[t], row_tiles[size_t(t)].size, r.cols); };
  // Pass 1 writes d where the normalised row goes before * w / + b.
  auto norm_dst = [&](int64_t t) { return has_w || has_b ? full(tmp, t) : full(out, t); };
  auto load = [&](size_t t) {
    const Range& rt = row_tiles[t];
    dma(ctx, full(in, int64_t(t)), rows_hbm(ctx, x, r, rt.begin, rt.size), detail::kLoadQueue);
  };
  auto stage_stats = [&](int64_t t) {  // Vector statistics, Scalar pass 1
    const int64_t p = row_tiles[size_t(t)].size;
    for (int64_t c = 0; c < chunks; ++c) {
      int64_t c0 = c * kBnStatsMaxFree, f = std::min(kBnStatsMaxFree, r.cols - c0);
      ctx.builder.emit(isa::Opcode::bn_stats)
          .tensor("dst", sb2(ctx, stats[t], p, kBnStatsValues, c * kBnStatsValues))
          .tensor("data", detail::sb_ap(ctx, in[t], uint32_t(p), {{1, uint32_t(f)}}, c0));
    }
    ctx.builder.emit(isa::Opcode::bn_aggr)
        .tensor("dst", sb2(ctx, mv[t], p, 2)).tensor("data", sb2(ctx, stats[t], p, chunks * kBnStatsValues));
    emit_rstd(ctx, s(mv, t, 0), s(mv, t, 1), s(rstd, t), s(corr, t), spec.eps);
    store_row_stat(ctx, rstd_out, row_tiles[size_t(t)].begin, p, rstd[t]);
    if (!exact) {  // 16-bit x: y = x * rstd + (-mean * rstd), one Scalar pass
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", s(nmean, t)).tensor("data", s(mv, t, 0)).word("op0", "multiply").imm("operand0", -1.0)
          .word("op1", "multiply").tensor("operand1", s(rstd, t));
      return;
    }
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", s(nmean, t)).tensor("data", s(mv, t, 0)).word("op0", "multiply").imm("operand0", -1.0);
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", s(nrc, t)).tensor("data", s(rstd, t)).word("op0", "multiply").imm("operand0", -inv_cols);
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", norm_dst(t)).word("op", "copy").tensor("data", full(in, t)).tensor("bias", s(nmean, t))
        .word("reduce_op", "add").tensor("reduce_res", s(dsum, t));
  };
  auto stage_corr = [&](int64_t t) {  // Scalar [P, 1]: -mean(d) * rstd, and the corrected mean
    if (!exact) {
      store_row_stat(ctx, mean_out, row_tiles[size_t(t)].begin, row_tiles[size_t(t)].size, mv[t], 0);
      return;
    }
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", s(corr, t)).word("op", "copy").tensor("data", s(dsum, t)).tensor("scale", s(nrc, t));
    if (mean_out < 0) return;
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", s(mv, t, 0)).word("op", "copy").tensor("data", s(dsum, t)).imm("scale", inv_cols)
        .tensor("bias", s(mv, t, 0));
    store_row_stat(ctx, mean_out, row_tiles[size_t(t)].begin, row_tiles[size_t(t)].size, mv[t], 0);
  };
  auto stage_norm = [&](int64_t t) {  // Scalar pass 2, GpSimd * w and + b, the store
    const Range& rt = row_tiles[size_t(t)];
    const isa::AccessPattern tt = full(tmp, t), yt = full(out, t);
    if (!exact) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", norm_dst(t)).word("op", "copy").tensor("data", full(in, t)).tensor("scale", s(rstd, t))
          .tensor("bias", s(nmean, t));
    } else if (has_w) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", norm_dst(t)).word("op", "copy").tensor("data", norm_dst(t)).tensor("scale", s(rstd, t))
          .tensor("bias", s(corr, t));
    } else {  // GpSimd has a pass to spare without w: pass 2 goes there
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", norm_dst(t)).tensor("data", norm_dst(t)).word("op0", "multiply").tensor("operand0", s(rstd, t))
          .word("op1", "add").tensor("operand1", s(corr, t)).on(Engine::gpsimd);
    }
    if (has_w) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", has_b ? tt : yt).tensor("data1", tt).tensor("data2", sb2(ctx, *w_sb, rt.size, r.cols))
          .word("op", "multiply").on(Engine::gpsimd);
    }
    if (has_b) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", yt).tensor("data1", tt).tensor("data2", sb2(ctx, *b_sb, rt.size, r.cols)).word("op", "add")
          .on(Engine::gpsimd);
    }
    dma(ctx, rows_hbm(ctx, y, r, rt.begin, rt.size), yt, detail::kStoreQueue);
  };
  const int64_t n = int64_t(row_tiles.size());
  detail::pipelined(size_t(n), kRowDepth - 1, load, [&](size_t k) {
    const int64_t t = int64_t(k);
    stage_stats(t);
    if (!exact) stage_norm(t);  // one Scalar pass: nothing to skew
    if (exact && t > 0) stage_norm(t - 1);
    stage_corr(t);
  });
  if (exact && n > 0) stage_norm(n - 1);
}

}  // namespace

void build_norm(const KernelContext& ctx, const NormSpec& spec, uint32_t x, int64_t w, int64_t b, uint32_t y,
                int64_t mean_out, int64_t rstd_out) {
  const Rows r = rows_of(spec.shape);
  const bool rms = spec.kind == NormKind::rmsnorm;
  const bool has_w = w >= 0, has_b = !rms && b >= 0;
  const int64_t depth = kRowDepth;
  int64_t per_column = depth * (dtype_size_bytes(spec.input_dtype) + dtype_size_bytes(spec.output_dtype) + 4) + 2 +
                       (has_w + has_b) * dtype_size_bytes(spec.param_dtype);
  if (r.cols * per_column > row_budget(ctx)) {  // the row does not fit: two passes over column chunks
    build_norm_chunked(ctx, spec, r, x, w, b, y, mean_out, rstd_out);
    return;
  }
  check_fits(ctx, rms ? "rmsnorm" : "layernorm", r.cols, per_column);

  std::optional<uint32_t> w_sb, b_sb;
  if (has_w) w_sb = load_row_param(ctx, "norm_w", uint32_t(w), spec.param_dtype, r.cols);
  if (has_b) b_sb = load_row_param(ctx, "norm_b", uint32_t(b), spec.param_dtype, r.cols);
  detail::Ring in = detail::make_ring(ctx, "norm_in", spec.input_dtype, r.cols, kRowDepth);
  detail::Ring out = detail::make_ring(ctx, "norm_out", spec.output_dtype, r.cols, kRowDepth);
  detail::Ring tmp = detail::make_ring(ctx, "norm_tmp", DType::fp32, r.cols, kRowDepth);
  detail::Ring scratch = detail::make_ring(ctx, "norm_sq", DType::bf16, r.cols, 1);  // discarded squares
  detail::Ring rstd = rms ? stat_ring(ctx, "norm_rstd") : detail::Ring{};
  const double inv_cols = 1.0 / double(r.cols);
  const std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, ctx.partitions()));  // row_loop's tiles

  if (!rms) {
    build_layernorm_rows(ctx, spec, r, x, y, mean_out, rstd_out, w_sb, b_sb, in, out, tmp);
    return;
  }
  row_loop(ctx, r, x, y, in, [&](const isa::AccessPattern& xt, int64_t t, int64_t p) {
    auto s = [&](const detail::Ring& ring, int64_t offset = 0) { return sb2(ctx, ring[t], p, 1, offset); };
    const int64_t r0 = row_tiles[size_t(t)].begin;
    isa::AccessPattern yt = sb2(ctx, out[t], p, r.cols), tt = sb2(ctx, tmp[t], p, r.cols);
    {
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
      store_row_stat(ctx, rstd_out, r0, p, rstd[t]);
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
  });
}

isa::Program norm_program(const NormSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  isa::ProgramBuilder builder(rms ? "rmsnorm" : "layernorm", config.generation);
  std::vector<uint32_t> param_shape{uint32_t(spec.shape.back())};
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  int64_t w = spec.weight ? int64_t(builder.hbm("w", spec.param_dtype, param_shape, isa::AllocationRole::input)) : -1;
  int64_t b = spec.bias && !rms ? int64_t(builder.hbm("b", spec.param_dtype, param_shape, isa::AllocationRole::input)) : -1;
  uint32_t y = builder.hbm("y", spec.output_dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  int64_t mean = -1, rstd = -1;
  if (spec.save_stats) {
    const std::vector<uint32_t> stat_shape{uint32_t(detail::product(spec.shape) / spec.shape.back())};
    if (!rms) mean = builder.hbm("mean", DType::fp32, stat_shape, isa::AllocationRole::output);
    rstd = builder.hbm("rstd", DType::fp32, stat_shape, isa::AllocationRole::output);
  }
  build_norm(KernelContext{builder, config, "", core, cores}, spec, x, w, b, y, mean, rstd);
  return builder.finish();
}

// ---- backward passes ----

namespace {

// Column chunk of one matmul into one PSUM bank (fp32).
constexpr int64_t kPsumBankColumns = 512;

// The row-tile loop of the backward kernels: several full-width inputs per tile and [p, 1] per-row
// statistics, all loaded kRowDepth - 1 tiles ahead of compute(t), which stores its own outputs.
struct RowInput {
  uint32_t tensor;
  detail::Ring ring;
};
struct RowStat {
  uint32_t tensor;  // fp32 [R]
  detail::Ring ring;
};
using Tiles = std::vector<isa::AccessPattern>;
using Stage = std::function<void(const Tiles& inputs, const Tiles& stats, int64_t t, const Range& rows)>;

// A software-pipelined row loop: iteration i loads tile i + ahead, then emits stage 0 of tile i, stage 1
// of tile i - 1, ... Engines run their queues in order, so skewing the stages lets each engine work on
// a later tile while an earlier tile's chain (e.g. GpSimd -> Scalar -> Vector -> Scalar) drains. Rings
// of inputs need ahead + stages slots (a tile is read by its last stage stages - 1 iterations after its
// first); work tiles produced in stage a and last read in stage b need b - a + 1 slots.
void backward_loop(const KernelContext& ctx, const Rows& r, int64_t ahead, const std::vector<RowInput>& inputs,
                   const std::vector<RowStat>& stats, const std::vector<Stage>& stages) {
  // Split across cores: a contiguous share of the row tiles each (callers with column sums over all
  // rows run on one core, see build_norm_backward).
  std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, ctx.partitions()));
  const int64_t n = int64_t(row_tiles.size()), n_stages = int64_t(stages.size());
  auto load = [&](int64_t t) {
    const Range& rt = row_tiles[size_t(t)];
    for (const RowInput& in : inputs) {
      dma(ctx, sb2(ctx, in.ring[t], rt.size, r.cols), rows_hbm(ctx, in.tensor, r, rt.begin, rt.size),
          detail::kLoadQueue);
    }
    // The small per-row loads go on their own queue so they never wait behind a full tile.
    for (const RowStat& st : stats) {
      dma(ctx, sb2(ctx, st.ring[t], rt.size, 1), hbm_ap(ctx, st.tensor, rt.begin, {{1, uint32_t(rt.size)}, {1, 1}}),
          detail::kConstQueue);
    }
  };
  for (int64_t t = 0; t < std::min(ahead, n); ++t) load(t);
  for (int64_t i = 0; i < n + n_stages - 1; ++i) {
    if (i + ahead < n) load(i + ahead);
    for (int64_t s = 0; s < n_stages; ++s) {
      const int64_t t = i - s;
      if (t < 0 || t >= n) continue;
      const Range& rt = row_tiles[size_t(t)];
      Tiles in_tiles, stat_tiles;
      for (const RowInput& in : inputs) in_tiles.push_back(sb2(ctx, in.ring[t], rt.size, r.cols));
      for (const RowStat& st : stats) stat_tiles.push_back(sb2(ctx, st.ring[t], rt.size, 1));
      stages[size_t(s)](in_tiles, stat_tiles, t, rt);
    }
  }
}

// Column sums over all rows accumulated on the Tensor engine: for each 512-column chunk a PSUM
// [m, 512] fp32 tile += stationary[p, m].T @ moving[p, chunk]. With a one-hot stationary column, row
// j of the PSUM tile receives the column sums of the moving tile and the other rows receive zeros,
// so several sums (dw, db) share one bank set (the extra rows cost the matmul nothing).
struct ColumnSums {
  int64_t rows_out = 1, cols = 0;
  std::vector<uint32_t> banks;
  uint32_t result = 0;  // SBUF [m, C] in the output dtype (allocated up front: its C columns count in the budget)

  ColumnSums(const KernelContext& ctx, const std::string& name, int64_t m, int64_t c, DType dtype)
      : rows_out(m), cols(c) {
    result = ctx.builder.sbuf(ctx.name(name + "_out"), dtype, {uint32_t(m), uint32_t(c)});
    const int64_t chunks = ceil_div(c, kPsumBankColumns);
    const int64_t capacity =
        int64_t(ctx.config.core.psum.bytes_per_partition) / (kPsumBankColumns * int64_t(dtype_size_bytes(DType::fp32)));
    if (chunks > capacity) {
      throw KernelUnsupported(name + ": column sums of " + std::to_string(c) + " columns need " +
                                  std::to_string(chunks) + " PSUM banks, the core has " + std::to_string(capacity));
    }
    for (int64_t k = 0; k < chunks; ++k) {
      banks.push_back(ctx.builder.psum(ctx.name(name + std::to_string(k)), DType::fp32,
                                       {uint32_t(m), uint32_t(kPsumBankColumns)}));
    }
  }
};

// Whether column sums of `cols` columns fit in the PSUM banks at once (else the chunked schedule).
bool column_sums_fit(const KernelContext& ctx, int64_t cols) {
  return ceil_div(cols, kPsumBankColumns) * kPsumBankColumns * int64_t(dtype_size_bytes(DType::fp32)) <=
         int64_t(ctx.config.core.psum.bytes_per_partition);
}

// A [P, m] stationary with ones in column `hot` and zeros elsewhere.
uint32_t one_hot_columns(const KernelContext& ctx, const std::string& name, DType dtype, int64_t m, int64_t hot) {
  uint32_t buf = ctx.builder.sbuf(ctx.name(name), dtype, {ctx.partitions(), uint32_t(m)});
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, buf, ctx.partitions(), m)).imm("value", 0.0);
  ctx.builder.emit(isa::Opcode::memset)
      .tensor("dst", detail::sb_ap(ctx, buf, ctx.partitions(), {{1, 1}}, hot)).imm("value", 1.0);
  return buf;
}

// Rows too long for SBUF (or dw / db wider than the PSUM banks): two passes over HBM in column chunks.
// Both passes run chunk-major across this core's row tiles, so each w chunk (broadcast to the
// partitions) is loaded once per pass and dw / db of a chunk accumulate in PSUM over every row tile
// before the next chunk (the column sums then need only one chunk's banks, any C).
// Pass 1 per (chunk, tile): Scalar xhat = x * rstd - mean * rstd, GpSimd g = dy * w and g * xhat, the
// Scalar accumulator sum(g * xhat) and (layernorm) Vector sum(g) into per-(tile, chunk) partial sums;
// after a tile's last chunk Vector k = -sum(g * xhat) / C, bias = -rstd * sum(g) / C. Pass 2 re-reads
// x, dy (and w): xhat and g again, Vector u = xhat * k + g, Scalar dx = u * rstd + bias; with dw GpSimd
// dy * xhat and Tensor ones.T @ (dy * xhat) (db: ones.T @ dy) per 512 columns, evacuated by Vector and
// stored after the chunk's last tile. rmsnorm is the same with mean = 0 and no sum(g) term.
void build_norm_backward_chunked(const KernelContext& ctx, const NormBackwardSpec& spec, const Rows& r, uint32_t x,
                                 uint32_t dy, int64_t mean, uint32_t rstd, int64_t w, uint32_t dx, int64_t dw,
                                 int64_t db) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  const bool has_w = w >= 0, want_dw = dw >= 0, want_db = !rms && db >= 0, want_sums = want_dw || want_db;
  const char* kernel = rms ? "rmsnorm backward" : "layernorm backward";
  const int64_t in_b = dtype_size_bytes(spec.input_dtype), par_b = dtype_size_bytes(spec.param_dtype);
  const int64_t P = ctx.partitions();
  const int depth = detail::kRingDepth;
  // Slots of the fp32 work tiles (xhat, g, u; 3: ~15% faster than 2 with the skewed stages) and of dx.
  constexpr int kWork = 3, kOut = 2;
  const std::vector<Range> row_tiles = my_share(ctx, tiles(r.rows, P));
  const int64_t T = std::max<int64_t>(1, int64_t(row_tiles.size()));
  int64_t target = detail::kTargetDmaBytesPerPartition / in_b;
  const int64_t banks =
      int64_t(ctx.config.core.psum.bytes_per_partition) / (kPsumBankColumns * int64_t(dtype_size_bytes(DType::fp32)));
  if (want_sums) target = std::min(target, banks * kPsumBankColumns);
  // Chunk-wide: x and dy rings, fp32 xhat / g / u pairs, the dx pair, w, a bf16 scratch and the dw/db pair.
  const int64_t per_column = (depth + 1) * 2 * in_b + 3 * kWork * 4 + kOut * in_b + (has_w ? depth * par_b : 0) + 2 +
                             (want_sums ? 2 * par_b : 0);
  // Per-row statistics of every tile ([P, T] each) and the per-(tile, chunk) partial sums (chunks >= 512 wide).
  const int64_t resident = 6 * T * 4 + 2 * T * ceil_div(r.cols, kPsumBankColumns) * 4 + 8 * 256;
  const Chunks ch = chunk_columns(r.cols, target, per_column, row_budget(ctx) - resident, kernel);
  const int64_t n = ch.n, W = ch.width;
  if (n > ceil_div(r.cols, kPsumBankColumns)) {
    throw KernelUnsupported(std::string(kernel) + ": too many row tiles for the chunked schedule's SBUF");
  }
  auto resident_buf = [&](const std::string& name, int64_t width) {
    return ctx.builder.sbuf(ctx.name(name), DType::fp32, {uint32_t(P), uint32_t(std::max<int64_t>(width, kGranuleFloats))});
  };
  const uint32_t rstd_all = resident_buf("nbc_rstd", T), mean_all = rms ? 0 : resident_buf("nbc_mean", T),
                 nmr_all = rms ? 0 : resident_buf("nbc_nmr", T), k_all = resident_buf("nbc_k", T),
                 bias_all = rms ? 0 : resident_buf("nbc_bias", T), sgx_part = resident_buf("nbc_sgx", T * n),
                 sg_part = rms ? 0 : resident_buf("nbc_sg", T * n);
  constexpr int64_t kDbRow = 32;  // db in PSUM row 32: a DMA may only start at a multiple of 32 partitions
  const int64_t m = want_db ? kDbRow + 1 : 1;
  uint32_t hot_w = 0, hot_b = 0;
  std::vector<uint32_t> psum_banks, result;
  if (want_sums) {
    hot_w = one_hot_columns(ctx, "nbc_hot_w", DType::fp32, m, 0);
    if (want_db) hot_b = one_hot_columns(ctx, "nbc_hot_b", spec.input_dtype, m, kDbRow);
    for (int64_t k = 0; k < ceil_div(W, kPsumBankColumns); ++k) {
      psum_banks.push_back(ctx.builder.psum(ctx.name("nbc_colsum" + std::to_string(k)), DType::fp32,
                                            {uint32_t(m), uint32_t(kPsumBankColumns)}));
    }
    for (int i = 0; i < 2; ++i) {
      result.push_back(ctx.builder.sbuf(ctx.name("nbc_sums" + std::to_string(i)), spec.param_dtype,
                                        {uint32_t(m), uint32_t(W)}));
    }
  }
  detail::align_sbuf_to_granule(ctx, "nbc_pad");
  // x and dy one slot deeper than the prefetch: stage 1 of step k - 1 reads them after the load of step k + 3.
  detail::Ring xr = detail::make_ring(ctx, "nbc_x", spec.input_dtype, W, depth + 1);
  detail::Ring dyr = detail::make_ring(ctx, "nbc_dy", spec.input_dtype, W, depth + 1);
  detail::Ring xh = detail::make_ring(ctx, "nbc_xh", DType::fp32, W, kWork);
  detail::Ring g = detail::make_ring(ctx, "nbc_g", DType::fp32, W, kWork);
  detail::Ring u = detail::make_ring(ctx, "nbc_u", DType::fp32, W, kWork);
  detail::Ring out = detail::make_ring(ctx, "nbc_dx", spec.input_dtype, W, kOut);
  // w is loaded with the steps ring-depth - 1 ahead, which may cross that many chunks (one row tile).
  detail::Ring wr = has_w ? detail::make_ring(ctx, "nbc_w", spec.param_dtype, W, depth) : detail::Ring{};
  detail::Ring scratch = detail::make_ring(ctx, "nbc_scratch", DType::bf16, W, 1);
  const double inv_cols = 1.0 / double(r.cols);

  struct Step {
    int64_t tile, pass, chunk, param;
  };
  std::vector<Step> steps;
  for (int64_t pass = 1; pass <= 2; ++pass) {
    for (int64_t c = 0; c < n; ++c) {
      for (int64_t t = 0; t < int64_t(row_tiles.size()); ++t) steps.push_back({t, pass, c, (pass - 1) * n + c});
    }
  }
  const int64_t last_tile = int64_t(row_tiles.size()) - 1;
  auto cols_of = [&](int64_t c) { return Range{c * W, std::min(W, r.cols - c * W)}; };
  auto chunk_hbm = [&](uint32_t tensor, const Step& s) {
    return chunk_rows_hbm(ctx, tensor, r.cols, row_tiles[size_t(s.tile)], cols_of(s.chunk));
  };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    const Range& rt = row_tiles[size_t(s.tile)];
    const int64_t p = rt.size, cw = cols_of(s.chunk).size;
    if (s.pass == 1 && s.chunk == 0) {
      auto row_stat = [&](uint32_t tensor) { return hbm_ap(ctx, tensor, rt.begin, {{1, uint32_t(p)}, {1, 1}}); };
      dma(ctx, sb2(ctx, rstd_all, p, 1, s.tile), row_stat(rstd), detail::kConstQueue);
      if (!rms) dma(ctx, sb2(ctx, mean_all, p, 1, s.tile), row_stat(uint32_t(mean)), detail::kConstQueue);
    }
    if (has_w && s.tile == 0) {  // the chunk of w on all partitions, once per chunk and pass
      dma(ctx, sb2(ctx, wr[s.param], P, cw),
          hbm_ap(ctx, uint32_t(w), cols_of(s.chunk).begin, {{0, uint32_t(P)}, {1, uint32_t(cw)}}), detail::kConstQueue);
    }
    dma(ctx, sb2(ctx, xr[int64_t(k)], p, cw), chunk_hbm(x, s), detail::kLoadQueue);
    dma(ctx, sb2(ctx, dyr[int64_t(k)], p, cw), chunk_hbm(dy, s), detail::kLoadQueue);
  };
  const size_t ahead = size_t(depth) - 1;
  for (size_t k = 0; k < std::min(ahead, steps.size()); ++k) load(k);
  // Two stages per step, skewed by one step in program order (the engines run in order): stage 0 xhat,
  // g (and g * xhat) of step k is emitted before stage 1 (the sums, or u, dx and dw / db) of step k - 1,
  // so the Scalar and GpSimd engines do not alternate waiting on each other within a step.
  auto emit_step = [&](size_t k, int stage) {
    const Step& st = steps[k];
    const Range& rt = row_tiles[size_t(st.tile)];
    const Range cr = cols_of(st.chunk);
    const int64_t p = rt.size, t = st.tile, cw = cr.size, kk = int64_t(k), slot = kk;
    auto col = [&](uint32_t buf, int64_t c) { return sb2(ctx, buf, p, 1, c); };
    const isa::AccessPattern xt = sb2(ctx, xr[kk], p, cw), dyt = sb2(ctx, dyr[kk], p, cw),
                             xht = sb2(ctx, xh[slot], p, cw), rstd_t = col(rstd_all, t);
    if (stage == 0 && st.pass == 1 && st.chunk == 0 && !rms) {
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", col(nmr_all, t)).tensor("data", col(mean_all, t)).word("op0", "multiply")
          .imm("operand0", -1.0).word("op1", "multiply").tensor("operand1", rstd_t);
    }
    // xhat = x * rstd (rmsnorm, Scalar) or (x - mean) * rstd (layernorm): for fp32 x the subtraction first
    // (x * rstd - mean * rstd cancels to an ulp of x * rstd, 1e-3 at x = 1e4), one two-op GpSimd
    // tensor_scalar (+0.6% at [8192, 4096]); GpSimd: g = dy * w.
    if (stage == 0) {
      if (rms) {
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", xht).word("op", "copy").tensor("data", xt).tensor("scale", rstd_t);
      } else if (spec.input_dtype == DType::fp32) {
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", xht).tensor("data", xt).word("op0", "subtract").tensor("operand0", col(mean_all, t))
            .word("op1", "multiply").tensor("operand1", rstd_t).on(Engine::gpsimd);
      } else {
        // 16-bit x: the fused x * rstd - mean * rstd on Scalar. Its fp32 cancellation (2^-24 |x| rstd) is
        // 2^-15 of x's own rounding, and every engine is ~80% busy here (an exact form costs +28%).
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", xht).word("op", "copy").tensor("data", xt).tensor("scale", rstd_t)
            .tensor("bias", col(nmr_all, t));
      }
    }
    isa::AccessPattern gt = dyt;
    if (has_w) {
      gt = sb2(ctx, g[slot], p, cw);
      if (stage == 0) {
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", gt).tensor("data1", dyt).tensor("data2", sb2(ctx, wr[st.param], p, cw))
            .word("op", "multiply").on(Engine::gpsimd);
      }
    }
    const isa::AccessPattern ut = sb2(ctx, u[slot], p, cw);
    if (stage == 0) {
      if (st.pass == 1) {
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", ut).tensor("data1", gt).tensor("data2", xht).word("op", "multiply").on(Engine::gpsimd);
      }
      return;
    }
    if (st.pass == 1) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", sb2(ctx, scratch[0], p, cw)).word("op", "copy").tensor("data", ut)
          .word("reduce_op", "add").tensor("reduce_res", col(sgx_part, t * n + st.chunk));
      if (!rms) {
        ctx.builder.emit(isa::Opcode::tensor_reduce)
            .tensor("dst", col(sg_part, t * n + st.chunk)).word("op", "add").tensor("data", gt).word("axis", "[1]");
      }
      if (st.chunk == n - 1) {
        // k = -sum(g * xhat) / C; bias = -rstd * sum(g) / C.
        ctx.builder.emit(isa::Opcode::tensor_reduce)
            .tensor("dst", col(k_all, t)).word("op", "add").tensor("data", sb2(ctx, sgx_part, p, n, t * n))
            .word("axis", "[1]");
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", col(k_all, t)).tensor("data", col(k_all, t)).word("op0", "multiply").imm("operand0", -inv_cols);
        if (!rms) {
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", col(bias_all, t)).word("op", "add").tensor("data", sb2(ctx, sg_part, p, n, t * n))
              .word("axis", "[1]");
          ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
              .tensor("dst", col(bias_all, t)).tensor("data", col(bias_all, t)).word("op0", "multiply")
              .imm("operand0", -inv_cols).word("op1", "multiply").tensor("operand1", rstd_t);
        }
      }
      return;
    }
    // Vector: u = xhat * k + g; Scalar: dx = u * rstd + bias.
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", ut).tensor("data", xht).word("op0", "multiply").tensor("operand0", col(k_all, t))
        .word("op1", "add").tensor("operand1", gt);
    const isa::AccessPattern dxt = sb2(ctx, out[slot], p, cw);
    {
      auto e = ctx.builder.emit(isa::Opcode::activation);
      e.tensor("dst", dxt).word("op", "copy").tensor("data", ut).tensor("scale", rstd_t);
      if (!rms) e.tensor("bias", col(bias_all, t));
    }
    dma(ctx, chunk_hbm(dx, st), dxt, detail::kStoreQueue);
    if (!want_sums) return;
    // dw += ones.T @ (dy * xhat) (into the xhat tile, read by u already), db += ones.T @ dy, per PSUM bank.
    if (want_dw) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", xht).tensor("data1", dyt).tensor("data2", xht).word("op", "multiply").on(Engine::gpsimd);
    }
    for (const Range& b : tiles(cw, kPsumBankColumns)) {
      const isa::AccessPattern bank = sb2(ctx, psum_banks[size_t(b.begin / kPsumBankColumns)], m, b.size);
      if (want_dw) {
        ctx.builder.emit(isa::Opcode::nc_matmul)
            .tensor("dst", bank).tensor("stationary", sb2(ctx, hot_w, p, m))
            .tensor("moving", detail::sb_ap(ctx, xh[slot], uint32_t(p), {{1, uint32_t(b.size)}}, b.begin))
            .word("accumulate", t == 0 ? "false" : "true");
      }
      if (want_db) {
        ctx.builder.emit(isa::Opcode::nc_matmul)
            .tensor("dst", bank).tensor("stationary", sb2(ctx, hot_b, p, m))
            .tensor("moving", detail::sb_ap(ctx, dyr[kk], uint32_t(p), {{1, uint32_t(b.size)}}, b.begin))
            .word("accumulate", t == 0 && !want_dw ? "false" : "true");
      }
    }
    if (t != last_tile) return;
    // The chunk's column sums leave PSUM (Vector) and go to dw / db.
    const uint32_t res = result[size_t(st.chunk % 2)];
    for (const Range& b : tiles(cw, kPsumBankColumns)) {
      ctx.builder.emit(isa::Opcode::tensor_copy)
          .tensor("dst", detail::sb_ap(ctx, res, uint32_t(m), {{1, uint32_t(b.size)}}, b.begin))
          .tensor("src", sb2(ctx, psum_banks[size_t(b.begin / kPsumBankColumns)], m, b.size));
    }
    if (want_dw) {
      dma(ctx, hbm_ap(ctx, uint32_t(dw), cr.begin, {{0, 1}, {1, uint32_t(cw)}}),
          ctx.builder.view(res, {span(0, 1), span(0, cw)}), detail::kStoreQueue);
    }
    if (want_db) {
      dma(ctx, hbm_ap(ctx, uint32_t(db), cr.begin, {{0, 1}, {1, uint32_t(cw)}}),
          ctx.builder.view(res, {span(kDbRow, 1), span(0, cw)}), detail::kStoreQueue);
    }
  };
  for (size_t i = 0; i <= steps.size(); ++i) {
    if (i + ahead < steps.size()) load(i + ahead);
    if (i < steps.size()) emit_step(i, 0);
    if (i > 0) emit_step(i - 1, 1);
  }
}

}  // namespace

namespace {

// The norm backward for rows that fit in SBUF (and dw / db in the PSUM banks), layernorm and rmsnorm
// (mean = 0, no sum(g) term). With g = dy * w, S = sum(g * x), B = rstd * sum(g) (layernorm):
//   sum(g * xhat) = rstd * (S - mean * sum(g)), alpha = rstd^2 * sum(g * xhat) / C = A - m1 * B with
//   A = rstd^3 / C * S and m1 = rstd^2 * mean / C, beta = B / C - mean * alpha, and
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) = g~ - (x * alpha + beta), g~ = rstd * g;
//   dw = sum over rows of rstd * ((x - mean) * dy) (the rstd column as the matmul's stationary operand,
//   (x - mean) * dy in fp32, exact products), db = sum over rows of dy (a one-hot stationary column).
// Per [128, C] tile, stages skewed in program order (each engine runs its queue in order):
//   0 (tile i): GpSimd g = dy * w and q = g * x; Scalar r2c = rstd^2 / C, g~ = g * rstd (row sum B),
//      k3 = r2c * rstd, m1 = r2c * mean; Vector e = (x - mean) * dy (scalar_tensor_tensor subtract-
//      multiply: the bf16 one-pass form); Tensor db += ones.T @ dy, dw += rstd.T @ e (PSUM, all tiles);
//   sum (tile i - 1): Scalar A = sum(q * k3) (in place), B / C;
//   1 (tile i - kSkew): Vector -alpha, -beta (two [P, 1] ops), h = x * -alpha + -beta over x's slot
//      (bf16 4x mode; emitted before this iteration's GpSimd work, as the mode takes the SBUF bus the
//      GpSimd shares), dx = g~ + h over g~'s slot (bf16 one-pass form); store.
// bf16 inputs keep g, q, g~, h and dx in bf16 (dx's tolerance is a bf16 ulp of rstd * |g|); e, the row
// sums and dw / db stay fp32. Per tile (C = 4096, trn2): Vector ~9.6 us (e 4.3, h 1.1, dx 4.3), GpSimd
// 7.1 (+ the 4x-mode h), Scalar 7.1, Tensor 6.8 (fp32 dw) + 1.7 (bf16 db), HBM ~8.7 at the core's share.
// fp32 inputs move dx (rmsnorm with dw: e = x * dy) to the GpSimd, whose N cycles beat the Vector's 2N.
void build_norm_backward_fused(const KernelContext& ctx, const NormBackwardSpec& spec, const Rows& r, uint32_t x,
                               uint32_t dy, int64_t mean, uint32_t rstd, int64_t w, uint32_t dx, int64_t dw,
                               int64_t db) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  const bool has_w = w >= 0, want_dw = dw >= 0, want_db = !rms && db >= 0, want_sums = want_dw || want_db;
  const DType in_dt = spec.input_dtype;
  const int64_t in_b = dtype_size_bytes(in_dt), par_b = dtype_size_bytes(spec.param_dtype);
  const bool fast16 = in_dt == DType::bf16 || in_dt == DType::fp16;  // the Vector's 16-bit one-pass forms
  const bool exact_q = !rms && in_dt == DType::fp32;  // q = (x - mean) * dy * w, see stage0
  constexpr int64_t kSkew = 2;  // stage 1 of tile t is emitted in iteration t + kSkew
  constexpr int64_t kDyQueue = 3;
  // SBUF per element of a row: x (read until stage 1: ahead + kSkew + 1 slots), dy (stage 0: ahead + 1),
  // g and q (2 each, input dtype), e (2, fp32), g~ / dx (kSkew + 2), w and the dw / db row.
  auto per_column = [&](int64_t ahead) {
    return (ahead + kSkew + 1) * in_b + (ahead + 1) * in_b + (has_w ? 2 * in_b : 0) + 2 * in_b +
           (want_dw || exact_q ? 2 * 4 : 0) + (kSkew + 2) * in_b + (has_w ? par_b : 0) + (want_sums ? par_b : 0);
  };
  // ... plus 10 rings of [P, 1] per-row values (256-byte slots) as deep as x's, and the small one-hot column.
  auto fits = [&](int64_t ahead) {
    return ceil_div(r.cols, 128) * 128 * per_column(ahead) + 10 * (ahead + kSkew + 1) * 256 + 1024 + 256 <=
           detail::sbuf_free_bytes(ctx);
  };
  int64_t ahead = 3;  // loads this many tiles ahead of stage 0 (3 for bf16 rows of 4096 on trn2)
  while (ahead > 1 && !fits(ahead)) --ahead;
  if (!fits(ahead) || (want_sums && !column_sums_fit(ctx, r.cols))) {
    // Two passes over column chunks. Its column sums cannot be shared out: with dw / db and several
    // cores it runs wholly on core 0.
    if (ctx.cores > 1 && want_sums) {
      on_first_core(ctx, [&](const KernelContext& one) {
        build_norm_backward_chunked(one, spec, r, x, dy, mean, rstd, w, dx, dw, db);
      });
    } else {
      build_norm_backward_chunked(ctx, spec, r, x, dy, mean, rstd, w, dx, dw, db);
    }
    return;
  }
  // Split across cores: each core forms dx of its contiguous share of the row tiles. dw / db sum over
  // every row in one core's PSUM (cores cannot add into one another's sums or wait for one another), so
  // core 0 also runs the dw / db part (e and the matmuls) of the other cores' tiles, after its own; the
  // other cores allocate the same buffers (the same SBUF layout) but form no sums.
  const std::vector<Range> all_tiles = tiles(r.rows, ctx.partitions());
  const Range mine = ctx.share(int64_t(all_tiles.size()));
  const bool sums_here = want_sums && (ctx.cores == 1 || ctx.core == 0);
  std::vector<Range> row_tiles;  // this core's tiles: its share (dx), then on core 0 the others' (sums only)
  for (int64_t t = mine.begin; t < mine.begin + mine.size; ++t) row_tiles.push_back(all_tiles[size_t(t)]);
  const int64_t n_dx = int64_t(row_tiles.size());
  if (sums_here && ctx.cores > 1) {
    for (int64_t t = 0; t < int64_t(all_tiles.size()); ++t) {
      if (t < mine.begin || t >= mine.begin + mine.size) row_tiles.push_back(all_tiles[size_t(t)]);
    }
  }
  const bool dw_here = want_dw && sums_here, db_here = want_db && sums_here;
  const bool e_on_gpsimd = rms && !fast16 && dw_here;
  std::optional<uint32_t> w_sb;
  if (has_w) w_sb = load_row_param(ctx, "nb_w", uint32_t(w), spec.param_dtype, r.cols);
  // dw in PSUM row 0, db in row 32: a DMA may only start at a multiple of 32 partitions.
  constexpr int64_t kDbRow = 32;
  const int64_t sums = want_db ? kDbRow + 1 : 1;
  std::optional<ColumnSums> colsums;
  uint32_t hot_b = 0;
  if (want_sums) colsums.emplace(ctx, "nb_colsum", sums, r.cols, spec.param_dtype);
  if (want_db) hot_b = one_hot_columns(ctx, "nb_hot_b", in_dt, sums, kDbRow);
  // Slots padded to whole 256-byte granules (and the first one aligned), so neighbouring slots never
  // share a dependency granule (an engine would wait on the DMA filling the next slot).
  detail::align_sbuf_to_granule(ctx, "nb_pad");
  auto ring = [&](const std::string& name, DType d, int64_t n) {
    const int64_t per_granule = 256 / dtype_size_bytes(d);
    return detail::make_ring(ctx, name, d, ceil_div(r.cols, per_granule) * per_granule, int(n));
  };
  detail::Ring xr = ring("nb_x", in_dt, ahead + kSkew + 1), dyr = ring("nb_dy", in_dt, ahead + 1);
  detail::Ring g = has_w ? ring("nb_g", in_dt, 2) : detail::Ring{}, q = ring("nb_q", in_dt, 2);
  detail::Ring e = want_dw || exact_q ? ring("nb_e", DType::fp32, 2) : detail::Ring{}, gs = ring("nb_gs", in_dt, kSkew + 2);
  const int stat_depth = int(ahead + kSkew + 1);
  detail::Ring rstd_r = stat_ring(ctx, "nb_rstd", 1, stat_depth), mean_r = stat_ring(ctx, "nb_mean", 1, stat_depth);
  detail::Ring sa = stat_ring(ctx, "nb_sa", 1, stat_depth), sb = stat_ring(ctx, "nb_sb", 1, stat_depth),
               r2c = stat_ring(ctx, "nb_r2c", 1, stat_depth), k3 = stat_ring(ctx, "nb_k3", 1, stat_depth),
               m1 = stat_ring(ctx, "nb_m1", 1, stat_depth), bc = stat_ring(ctx, "nb_bc", 1, stat_depth),
               alpha = stat_ring(ctx, "nb_alpha", 1, stat_depth), nbeta = stat_ring(ctx, "nb_nbeta", 1, stat_depth);
  const double inv_cols = 1.0 / double(r.cols);

  const int64_t n = int64_t(row_tiles.size());
  auto full = [&](const detail::Ring& rg, int64_t t, int64_t p) { return sb2(ctx, rg[t], p, r.cols); };
  auto one = [&](const detail::Ring& rg, int64_t t, int64_t p) { return sb2(ctx, rg[t], p, 1); };
  auto load = [&](int64_t t) {
    const Range& rt = row_tiles[size_t(t)];
    // dy first: stage 0's GpSimd and Tensor work starts on it. On its own queue, so the two loads' start-up
    // latencies overlap (what bounds small rows).
    dma(ctx, full(dyr, t, rt.size), rows_hbm(ctx, dy, r, rt.begin, rt.size), kDyQueue);
    dma(ctx, full(xr, t, rt.size), rows_hbm(ctx, x, r, rt.begin, rt.size), detail::kLoadQueue);
    auto row_stat = [&](uint32_t tensor) { return hbm_ap(ctx, tensor, rt.begin, {{1, uint32_t(rt.size)}, {1, 1}}); };
    dma(ctx, one(rstd_r, t, rt.size), row_stat(rstd), detail::kConstQueue);
    if (!rms) dma(ctx, one(mean_r, t, rt.size), row_stat(uint32_t(mean)), detail::kConstQueue);
  };
  // Stage 0: the products, g~ (and B), the dw / db matmuls; the per-row factors that need only the stats.
  auto stage0 = [&](int64_t t) {
    const int64_t p = row_tiles[size_t(t)].size;
    const bool forms_dx = t < n_dx;
    const isa::AccessPattern xt = full(xr, t, p), dyt = full(dyr, t, p), gt = has_w ? full(g, t, p) : dyt;
    const isa::AccessPattern rs = one(rstd_r, t, p);
    if (has_w && forms_dx) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", gt).tensor("data1", dyt).tensor("data2", sb2(ctx, *w_sb, p, r.cols)).word("op", "multiply")
          .on(Engine::gpsimd);
    }
    if (db_here) {  // first on the Tensor engine: it needs only dy
      for (const Range& c : tiles(r.cols, kPsumBankColumns)) {
        ctx.builder.emit(isa::Opcode::nc_matmul)
            .tensor("dst", sb2(ctx, colsums->banks[size_t(c.begin / kPsumBankColumns)], sums, c.size))
            .tensor("stationary", sb2(ctx, hot_b, p, sums))
            .tensor("moving", detail::sb_ap(ctx, dyr[t], uint32_t(p), {{1, uint32_t(c.size)}}, c.begin))
            .word("accumulate", t == 0 ? "false" : "true");
      }
    }
    // Scalar: r2c = rstd^2 / C (from the stats alone, ahead of the full-width work).
    if (forms_dx) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", one(r2c, t, p)).word("op", "square").tensor("data", rs).imm("scale", std::sqrt(inv_cols));
    }
    // fp32 layernorm: sum(g * (x - mean)) from e too (q = e * w), since sum(g * x) - mean * sum(g) cancels
    // (at x = 1e4 + noise a few percent of the result, as in torch's CPU backward); 16-bit x carries less
    // precision than that cancellation loses.
    if (dw_here || (exact_q && forms_dx)) {
      if (e_on_gpsimd) {  // fp32: x * dy costs GpSimd N cycles, a Vector scalar_tensor_tensor 2N
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", full(e, t, p)).tensor("data1", xt).tensor("data2", dyt).word("op", "multiply")
            .on(Engine::gpsimd);
      } else {
        auto em = ctx.builder.emit(isa::Opcode::scalar_tensor_tensor);
        em.tensor("dst", full(e, t, p)).tensor("data", xt).word("op0", "subtract");
        if (rms) em.imm("operand0", 0.0); else em.tensor("operand0", one(mean_r, t, p));
        em.word("op1", "multiply").tensor("operand1", dyt);
      }
    }
    if (dw_here) {
      for (const Range& c : tiles(r.cols, kPsumBankColumns)) {
        ctx.builder.emit(isa::Opcode::nc_matmul)
            .tensor("dst", sb2(ctx, colsums->banks[size_t(c.begin / kPsumBankColumns)], 1, c.size))
            .tensor("stationary", rs)
            .tensor("moving", detail::sb_ap(ctx, e[t], uint32_t(p), {{1, uint32_t(c.size)}}, c.begin))
            .word("accumulate", t == 0 && !db_here ? "false" : "true");
      }
    }
    if (!forms_dx) return;
    // Scalar: g~ = g * rstd (row sum B); then k3 = rstd^3 / C (the scale that makes sum(q) yield
    // rstd^3 * sum(g * x) / C) and m1 = rstd^2 * mean / C (r2c is ready by now). GpSimd: q = g * x.
    {
      auto a = ctx.builder.emit(isa::Opcode::activation);
      a.tensor("dst", full(gs, t, p)).word("op", "copy").tensor("data", gt).tensor("scale", rs);
      if (!rms) a.word("reduce_op", "add").tensor("reduce_res", one(sb, t, p));
    }
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", one(k3, t, p)).word("op", "copy").tensor("data", one(r2c, t, p)).tensor("scale", rs);
    if (!rms && !exact_q) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", one(m1, t, p)).word("op", "copy").tensor("data", one(r2c, t, p))
          .tensor("scale", one(mean_r, t, p));
    }
    if (!exact_q) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", full(q, t, p)).tensor("data1", gt).tensor("data2", xt).word("op", "multiply").on(Engine::gpsimd);
    } else if (has_w) {
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", full(q, t, p)).tensor("data1", full(e, t, p)).tensor("data2", sb2(ctx, *w_sb, p, r.cols))
          .word("op", "multiply").on(Engine::gpsimd);
    }
  };
  // The products sum(q) reduces: q, or e itself for an fp32 layernorm without weight.
  auto q_of = [&](int64_t t, int64_t p) { return exact_q && !has_w ? full(e, t, p) : full(q, t, p); };
  // Scalar: A = k3 * sum(g * x), one tile behind stage 0 (so it never waits on the product just queued),
  // and B / C.
  auto stage_sum = [&](int64_t t) {
    const int64_t p = row_tiles[size_t(t)].size;
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", q_of(t, p)).word("op", "copy").tensor("data", q_of(t, p)).tensor("scale", one(k3, t, p))
        .word("reduce_op", "add").tensor("reduce_res", one(sa, t, p));
    if (!rms) {
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", one(bc, t, p)).word("op", "copy").tensor("data", one(sb, t, p)).imm("scale", inv_cols);
    }
  };
  // Stage 1 (Vector): -alpha = m1 * B - A, c = -alpha * mean + B / C, h = x * -alpha - c over x's slot
  // (x is read for the last time), dx = g~ + h over g~'s slot (rmsnorm: h = x * A, dx = g~ - h); store.
  auto stage1 = [&](int64_t t) {
    const Range& rt = row_tiles[size_t(t)];
    const int64_t p = rt.size;
    const isa::AccessPattern xt = full(xr, t, p), gst = full(gs, t, p);
    if (rms) {
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", xt).tensor("data", xt).word("op0", "multiply").tensor("operand0", one(sa, t, p));
    } else {
      const isa::AccessPattern na = one(alpha, t, p), c = one(nbeta, t, p);
      if (exact_q) {  // A is alpha itself
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", na).tensor("data", one(sa, t, p)).word("op0", "multiply").imm("operand0", -1.0);
      } else {
        ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
            .tensor("dst", na).tensor("data", one(sb, t, p)).word("op0", "multiply").tensor("operand0", one(m1, t, p))
            .word("op1", "subtract").tensor("operand1", one(sa, t, p));
      }
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", c).tensor("data", na).word("op0", "multiply").tensor("operand0", one(mean_r, t, p))
          .word("op1", "add").tensor("operand1", one(bc, t, p));
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", xt).tensor("data", xt).word("op0", "multiply").tensor("operand0", na)
          .word("op1", "subtract").tensor("operand1", c);
    }
    // bf16: the Vector one-pass form; fp32 inputs: GpSimd (N cycles against the Vector's 2N) unless it
    // already forms e (but always on trn1, whose Vector and GpSimd share SBUF access anyway).
    const bool trn1 = ctx.config.generation == Generation::trn1;
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", gst).tensor("data1", gst).tensor("data2", xt).word("op", rms ? "subtract" : "add")
        .on(fast16 || (e_on_gpsimd && !trn1) ? Engine::vector : Engine::gpsimd);
    dma(ctx, rows_hbm(ctx, dx, r, rt.begin, p), gst, detail::kStoreQueue);
  };
  for (int64_t t = 0; t < std::min(ahead, n); ++t) load(t);
  for (int64_t i = 0; i < n + kSkew; ++i) {
    if (i + ahead < n) load(i + ahead);
    // Scalar sums of the previous tile, then the Vector tail of tile i - kSkew (its 4x-mode h runs
    // before this iteration's GpSimd products are queued: the mode shares the SBUF bus with GpSimd),
    // then stage 0 of tile i.
    // (A tile that only feeds dw / db has no tail: its stage 0 goes first.)
    if (i >= n_dx && i < n) stage0(i);
    if (i - 1 >= 0 && i - 1 < n_dx) stage_sum(i - 1);
    if (i - kSkew >= 0 && i - kSkew < n_dx) stage1(i - kSkew);
    if (i < n_dx) stage0(i);
  }
  if (sums_here) {
    // dw / db leave PSUM bank by bank, alternately through Scalar and Vector (both idle by now, while
    // the last dx is still formed), and go out on the constant queue, not behind the dx stores.
    for (const Range& c : tiles(r.cols, kPsumBankColumns)) {
      const int64_t k = c.begin / kPsumBankColumns;
      const isa::AccessPattern dst = detail::sb_ap(ctx, colsums->result, uint32_t(sums), {{1, uint32_t(c.size)}}, c.begin);
      const isa::AccessPattern src = sb2(ctx, colsums->banks[size_t(k)], sums, c.size);
      if (k % 2 == 0) {
        ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", "copy").tensor("data", src);
      } else {
        ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", dst).tensor("src", src);
      }
    }
    for (const auto& [row, tensor] : {std::pair<int64_t, int64_t>{0, dw_here ? dw : -1},
                                      std::pair<int64_t, int64_t>{kDbRow, db_here ? db : -1}}) {
      if (tensor < 0) continue;
      dma(ctx, hbm_ap(ctx, uint32_t(tensor), 0, {{0, 1}, {1, uint32_t(r.cols)}}),
          ctx.builder.view(colsums->result, {span(row, 1), span(0, r.cols)}), detail::kConstQueue);
    }
  }
}

}  // namespace

void build_norm_backward(const KernelContext& ctx, const NormBackwardSpec& spec, uint32_t x, uint32_t dy,
                         int64_t mean, uint32_t rstd, int64_t w, uint32_t dx, int64_t dw, int64_t db) {
  if (spec.kind == NormKind::layernorm && mean < 0) throw KernelUnsupported("layernorm backward needs the saved mean");
  build_norm_backward_fused(ctx, spec, rows_of(spec.shape), x, dy, mean, rstd, w, dx, dw, db);
}

isa::Program norm_backward_program(const NormBackwardSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  const bool rms = spec.kind == NormKind::rmsnorm;
  isa::ProgramBuilder builder(rms ? "rmsnorm_backward" : "layernorm_backward", config.generation);
  const Rows r = rows_of(spec.shape);
  std::vector<uint32_t> shape = detail::to_u32(spec.shape), param{uint32_t(r.cols)}, row_stats{uint32_t(r.rows)};
  const auto in = isa::AllocationRole::input, out = isa::AllocationRole::output;
  uint32_t x = builder.hbm("x", spec.input_dtype, shape, in);
  uint32_t dy = builder.hbm("dy", spec.input_dtype, shape, in);
  int64_t mean = rms ? -1 : int64_t(builder.hbm("mean", DType::fp32, row_stats, in));
  uint32_t rstd = builder.hbm("rstd", DType::fp32, row_stats, in);
  int64_t w = spec.weight ? int64_t(builder.hbm("w", spec.param_dtype, param, in)) : -1;
  uint32_t dx = builder.hbm("dx", spec.input_dtype, shape, out);
  int64_t dw = spec.weight ? int64_t(builder.hbm("dw", spec.param_dtype, param, out)) : -1;
  int64_t db = spec.bias && !rms ? int64_t(builder.hbm("db", spec.param_dtype, param, out)) : -1;
  build_norm_backward(KernelContext{builder, config, "", core, cores}, spec, x, dy, mean, rstd, w, dx, dw, db);
  return builder.finish();
}

namespace {

// Rows too long for SBUF: two passes over HBM per row tile in column chunks (as the chunked forward).
// Pass 1 per chunk: softmax GpSimd dy * y and its row sum in the Scalar accumulator, log_softmax Vector
// sum(dy) (only dy is read), into column c of a [P, n] row; after the last chunk one Vector sum over the
// n partial sums. Pass 2 re-reads y and dy: softmax Vector (dy - sum) * y; log_softmax Scalar exp(y),
// GpSimd exp(y) * sum and dy - that. Loads run ring-depth - 1 chunks ahead across passes and tiles.
void build_softmax_backward_chunked(const KernelContext& ctx, const SoftmaxBackwardSpec& spec, const Rows& r,
                                    uint32_t y, uint32_t dy, uint32_t dx) {
  const char* kernel = spec.log ? "log_softmax backward" : "softmax backward";
  const int64_t y_b = dtype_size_bytes(spec.input_dtype), d_b = dtype_size_bytes(spec.output_dtype);
  const int depth = detail::kRingDepth;
  // Chunk-wide: the y, dy and dx rings, an fp32 work pair and a bf16 scratch.
  const Chunks ch = chunk_columns(r.cols, detail::kTargetDmaBytesPerPartition / std::max(y_b, d_b),
                                  depth * (y_b + 2 * d_b) + 2 * 4 + 2, row_budget(ctx) - 8 * ceil_div(r.cols, 1024),
                                  kernel);
  const int64_t n = ch.n, stat_w = std::max<int64_t>(n, kGranuleFloats);
  detail::align_sbuf_to_granule(ctx, "sbc_pad");
  detail::Ring yr = detail::make_ring(ctx, "sbc_y", spec.input_dtype, ch.width, depth);
  detail::Ring dyr = detail::make_ring(ctx, "sbc_dy", spec.output_dtype, ch.width, depth);
  detail::Ring out = detail::make_ring(ctx, "sbc_dx", spec.output_dtype, ch.width, depth);
  detail::Ring tmp = detail::make_ring(ctx, "sbc_tmp", DType::fp32, ch.width, 2);
  detail::Ring scratch = detail::make_ring(ctx, "sbc_scratch", DType::bf16, ch.width, 1);
  // Per row tile (two in flight): the chunks' partial sums, and the row sum.
  detail::Ring part = detail::make_ring(ctx, "sbc_part", DType::fp32, stat_w, 2);
  detail::Ring sum = stat_ring(ctx, "sbc_sum");

  using Step = ChunkStep;
  // The row-tile loop (split across cores by whole row tiles), each tile's chunks twice.
  const std::vector<ChunkStep> steps = tile_major_two_passes(my_share(ctx, tiles(r.rows, ctx.partitions())), n);
  auto cols_of = [&](int64_t c) { return ch.columns(c, r.cols); };
  auto chunk_hbm = [&](uint32_t tensor, const Step& s) {
    return chunk_rows_hbm(ctx, tensor, r.cols, s.rows, cols_of(s.chunk));
  };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    const int64_t p = s.rows.size, w = cols_of(s.chunk).size;
    if (!(spec.log && s.pass == 1)) dma(ctx, sb2(ctx, yr[int64_t(k)], p, w), chunk_hbm(y, s), detail::kLoadQueue);
    dma(ctx, sb2(ctx, dyr[int64_t(k)], p, w), chunk_hbm(dy, s), detail::kLoadQueue);
  };
  int64_t work = 0;
  detail::pipelined(steps.size(), size_t(depth) - 1, load, [&](size_t k) {
      const Step& st = steps[k];
      const int64_t p = st.rows.size, t = st.tile, w = cols_of(st.chunk).size, kk = int64_t(k);
      const isa::AccessPattern yt = sb2(ctx, yr[kk], p, w), dyt = sb2(ctx, dyr[kk], p, w),
                               tt = sb2(ctx, tmp[work++], p, w), s_t = sb2(ctx, sum[t], p, 1);
      if (st.pass == 1) {
        const isa::AccessPattern partial = sb2(ctx, part[t], p, 1, st.chunk);
        if (!spec.log) {
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", tt).tensor("data1", dyt).tensor("data2", yt).word("op", "multiply").on(Engine::gpsimd);
          ctx.builder.emit(isa::Opcode::activation)
              .tensor("dst", sb2(ctx, scratch[0], p, w)).word("op", "copy").tensor("data", tt)
              .word("reduce_op", "add").tensor("reduce_res", partial);
        } else {
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", partial).word("op", "add").tensor("data", dyt).word("axis", "[1]");
        }
        if (st.chunk == n - 1) {
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", s_t).word("op", "add").tensor("data", sb2(ctx, part[t], p, n)).word("axis", "[1]");
        }
        return;
      }
      const isa::AccessPattern dxt = sb2(ctx, out[kk], p, w);
      if (!spec.log) {
        ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
            .tensor("dst", dxt).tensor("data", dyt).word("op0", "subtract").tensor("operand0", s_t)
            .word("op1", "multiply").tensor("operand1", yt);
      } else {
        ctx.builder.emit(isa::Opcode::activation).tensor("dst", tt).word("op", "exp").tensor("data", yt);
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", tt).tensor("data", tt).word("op0", "multiply").tensor("operand0", s_t).on(Engine::gpsimd);
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", dxt).tensor("data1", dyt).tensor("data2", tt).word("op", "subtract").on(Engine::gpsimd);
      }
      dma(ctx, chunk_hbm(dx, st), dxt, detail::kStoreQueue);
  });
}

}  // namespace

void build_softmax_backward(const KernelContext& ctx, const SoftmaxBackwardSpec& spec, uint32_t y, uint32_t dy,
                            uint32_t dx) {
  const Rows r = rows_of(spec.shape);
  const int64_t depth = kRowDepth;
  int64_t per_column = depth * (dtype_size_bytes(spec.input_dtype) + 2 * dtype_size_bytes(spec.output_dtype) + 4) + 2;
  if (r.cols * per_column > row_budget(ctx)) {  // the row does not fit: two passes over column chunks
    build_softmax_backward_chunked(ctx, spec, r, y, dy, dx);
    return;
  }
  auto ring = [&](const std::string& name, DType d) { return detail::make_ring(ctx, name, d, r.cols, kRowDepth); };
  std::vector<RowInput> inputs{{y, ring("sb_y", spec.input_dtype)}, {dy, ring("sb_dy", spec.output_dtype)}};
  detail::Ring tmp = ring("sb_tmp", DType::fp32), out = ring("sb_dx", spec.output_dtype);
  detail::Ring scratch = detail::make_ring(ctx, "sb_scratch", DType::bf16, r.cols, 1);
  detail::Ring sum = stat_ring(ctx, "sb_sum");

  backward_loop(ctx, r, kRowDepth - 1, inputs, {}, {[&](const Tiles& in, const Tiles&, int64_t t, const Range& rt) {
    const int64_t p = rt.size;
    const isa::AccessPattern &yt = in[0], &dyt = in[1];
    isa::AccessPattern tt = sb2(ctx, tmp[t], p, r.cols), dxt = sb2(ctx, out[t], p, r.cols), st = sb2(ctx, sum[t], p, 1);
    if (!spec.log) {
      // GpSimd dy * y, Scalar its row sum, Vector (dy - sum) * y.
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", tt).tensor("data1", dyt).tensor("data2", yt).word("op", "multiply").on(Engine::gpsimd);
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", sb2(ctx, scratch[0], p, r.cols)).word("op", "copy").tensor("data", tt)
          .word("reduce_op", "add").tensor("reduce_res", st);
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", dxt).tensor("data", dyt).word("op0", "subtract").tensor("operand0", st)
          .word("op1", "multiply").tensor("operand1", yt);
    } else {
      // Scalar exp(y), Vector sum(dy), GpSimd exp(y) * sum and dy - that.
      ctx.builder.emit(isa::Opcode::activation).tensor("dst", tt).word("op", "exp").tensor("data", yt);
      ctx.builder.emit(isa::Opcode::tensor_reduce)
          .tensor("dst", st).word("op", "add").tensor("data", dyt).word("axis", "[1]");
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", tt).tensor("data", tt).word("op0", "multiply").tensor("operand0", st).on(Engine::gpsimd);
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", dxt).tensor("data1", dyt).tensor("data2", tt).word("op", "subtract").on(Engine::gpsimd);
    }
    dma(ctx, rows_hbm(ctx, dx, r, rt.begin, p), dxt, detail::kStoreQueue);
  }});
}

isa::Program softmax_backward_program(const SoftmaxBackwardSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder(spec.log ? "log_softmax_backward" : "softmax_backward", config.generation);
  std::vector<uint32_t> shape = detail::to_u32(spec.shape);
  uint32_t y = builder.hbm("y", spec.input_dtype, shape, isa::AllocationRole::input);
  uint32_t dy = builder.hbm("dy", spec.output_dtype, shape, isa::AllocationRole::input);
  uint32_t dx = builder.hbm("dx", spec.output_dtype, shape, isa::AllocationRole::output);
  build_softmax_backward(KernelContext{builder, config, "", core, cores}, spec, y, dy, dx);
  return builder.finish();
}


}  // namespace trnsim::kernels
