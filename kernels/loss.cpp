// Cross-entropy forward and backward (see loss.h for the schedule).
#include "kernels/loss.h"

#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "isa/numerics/float_format.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {

// The indirect DMA of the chunked cross-entropy's target logits: its own queue, so it never holds up loads.
constexpr int64_t kGatherQueue = 3;
// One more tile in flight than the element-wise kernels: each row tile chains Vector -> Scalar -> Vector.
constexpr int kDepth = detail::kRingDepth + 1;

isa::AccessPattern per_row_hbm(const KernelContext& ctx, uint32_t t, const Range& r) {
  return hbm_ap(ctx, t, r.begin, {{1, uint32_t(r.size)}, {1, 1}});
}
// Column `col` of a [P, n] SBUF buffer over the first p partitions.
isa::AccessPattern column(const KernelContext& ctx, uint32_t buf, int64_t p, int64_t col) {
  return sb_ap(ctx, buf, uint32_t(p), {{1, 1}}, col);
}

// Finishes a row tile's losses from its statistics ([P, 1] columns): log(sum) (Scalar, unless the caller
// took it already), loss = log(sum) - (x[target] - max) on valid rows and 0 on ignored ones, as torch's
// nll_loss(log_softmax(x)) forms it: x[target] - max first (exact when the target logit is within a factor
// 2 of the max), so a large logit offset cancels before log(sum) is added (lse = max + log(sum) rounded to
// fp32 near max = 1e7 would lose log(sum) to an ulp of 1). Stores the row statistics (max, sum) when
// asked, and the per-row loss (reduction none) or accumulates [sum of losses, valid rows] += ones.T @
// pair in PSUM over the row tiles. `pair` is [P, 2] = [loss, valid]; `stats` is [P, 3] = [max, sum, log(sum)].
struct RowLossColumns {
  isa::AccessPattern sumexp, negmax, stats, picked, diff;
};
void finish_row_loss(const KernelContext& ctx, const CrossEntropySpec& spec, const RowLossColumns& c,
                     uint32_t pair, const Range& rows, bool first_tile, uint32_t loss, int64_t lse,
                     const std::optional<uint32_t>& ones, const std::optional<uint32_t>& total,
                     bool take_log = true) {  // false: the log(sum) column is already written
  const int64_t p = rows.size;
  isa::AccessPattern max_col = c.stats, sum_col = c.stats, pair_cols = c.stats;
  max_col.free[0].size = sum_col.free[0].size = 1;
  pair_cols.free[0].size = 2;
  sum_col.offset += 1;
  isa::AccessPattern log_col = sum_col;
  log_col.offset += 1;
  if (take_log) ctx.builder.emit(isa::Opcode::activation).tensor("dst", log_col).word("op", "log").tensor("data", c.sumexp);
  // loss = log(sum) - (x[target] + -max), one Vector instruction.
  ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
      .tensor("dst", c.diff).tensor("data", c.picked).word("op0", "add").tensor("operand0", c.negmax)
      .word("op1", "subtract").tensor("operand1", log_col).imm("reverse1", 1);
  ctx.builder.emit(isa::Opcode::select_reduce)
      .tensor("dst", column(ctx, pair, p, 0)).tensor("predicate", column(ctx, pair, p, 1)).tensor("on_true", c.diff)
      .imm("on_false", 0.0);
  if (lse >= 0) {
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", max_col).tensor("data", c.negmax).word("op0", "multiply").imm("operand0", -1.0);
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sum_col).tensor("src", c.sumexp);
    dma(ctx, hbm_ap(ctx, uint32_t(lse), rows.begin * 2, {{2, uint32_t(p)}, {1, 2}}), pair_cols, detail::kStoreQueue);
  }
  if (spec.reduction == Reduction::none) {
    dma(ctx, per_row_hbm(ctx, loss, rows), column(ctx, pair, p, 0), detail::kStoreQueue);
  } else {
    ctx.builder.emit(isa::Opcode::nc_matmul)
        .tensor("dst", sb2(ctx, *total, 1, 2)).tensor("stationary", sb2(ctx, *ones, p, 1))
        .tensor("moving", sb2(ctx, pair, p, 2)).word("accumulate", first_tile ? "false" : "true");
  }
}

// The reduced loss from the PSUM [sum of losses, valid rows]: the sum, or torch's mean = sum / valid
// rows (nan when every row is ignored).
void store_reduced_loss(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t total, uint32_t loss,
                        const std::string& name) {
  uint32_t res = ctx.builder.sbuf(ctx.name(name), DType::fp32, {1, 2});
  ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, res, 1, 2)).tensor("src", sb2(ctx, total, 1, 2));
  if (spec.reduction == Reduction::mean) {
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", column(ctx, res, 1, 0)).tensor("data1", column(ctx, res, 1, 0))
        .tensor("data2", column(ctx, res, 1, 1)).word("op", "divide");
  }
  dma(ctx, hbm_ap(ctx, loss, 0, {{1, 1}, {1, 1}}), column(ctx, res, 1, 0), detail::kStoreQueue);
}

void check_row_fits(const KernelContext& ctx, const char* kernel, int64_t cols, int64_t bytes_per_column) {
  if (cols * bytes_per_column > detail::sbuf_free_bytes(ctx)) {
    throw KernelUnsupported(std::string(kernel) + ": a row of " + std::to_string(cols) +
                                " classes does not fit in SBUF with its ring buffers (chunked rows not implemented)");
  }
}

// Column chunks of rows too long for SBUF: `n` chunks of `width` columns (the last may be shorter),
// the widest whose chunk-wide buffers (`bytes_per_column`) fit in `budget`, at most `target` columns,
// balanced over the row so the last chunk is not a sliver.
struct Chunks {
  int64_t width, n;
};
Chunks chunk_columns(int64_t cols, int64_t target, int64_t bytes_per_column, int64_t budget, const char* kernel) {
  int64_t width = std::min({cols, target, budget / bytes_per_column});
  if (width < std::min<int64_t>(cols, 64)) {
    throw KernelUnsupported(std::string(kernel) + ": no room in SBUF for a column chunk");
  }
  const int64_t n = ceil_div(cols, width);
  // Balanced, and a multiple of 128 elements: every chunk-wide buffer then spans whole 256-byte granules
  // (a chunk sharing a granule with its neighbour in the ring would make their engines wait on each other).
  width = std::min(cols, ceil_div(ceil_div(cols, n), 128) * 128);
  return {width, ceil_div(cols, width)};
}

// The forward, one pass over HBM in column chunks (one chunk when the row fits: up to 8192 bf16 / 4096
// fp32 classes; LLM vocabularies of 32K-152K classes take several).
// Per chunk c: Vector -max_c (negated), Scalar sum_c = sum exp(x - max_c), GpSimd gathers -max_c into a
// [P, n] row. After the last chunk of a row tile: max = max_c over chunks, sum = sum_c sum_c *
// exp(max_c - max) (flash attention's rescaled running sum, done once over the n chunk statistics so
// no engine waits on the previous chunk; with one chunk its statistics are the row's), then lse and the
// loss. The target logit is not searched for in the chunks (a second full-width Vector pass) but
// fetched from HBM by an indirect DMA per row tile (per 64 / 32 rows beyond 131072 / 262144 classes):
// element (row, target) at flat index (row % group) * C + target of the group's logits (exact in fp32
// up to 2^24 / 32 = 524288 classes); ignored rows fetch a clamped index and are masked out anyway.
// Scalar-bound on trn2 (one exp per element: 128 elements / cycle at 1.2 GHz, ~307 GB/s of bf16).
void build_cross_entropy_chunked(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits,
                                 uint32_t target, uint32_t loss, int64_t lse) {
  if (ctx.cores > 1 && spec.reduction != Reduction::none) {
    // The sum over every row accumulates in one core's PSUM: the whole kernel runs on core 0. Per-row
    // losses (reduction none) split by row tiles below.
    on_first_core(ctx, [&](const KernelContext& one) {
      build_cross_entropy_chunked(one, spec, logits, target, loss, lse);
    });
    return;
  }
  const int64_t C = spec.classes, in_b = dtype_size_bytes(spec.logits_dtype);
  const int depth = detail::kRingDepth + 1;
  // Chunk-wide: the logits ring and a bf16 scratch for the discarded exponentials.
  if (C > (int64_t(1) << 24) / 32) throw KernelUnsupported("cross_entropy: more than 524288 classes");
  const Chunks ch = chunk_columns(C, detail::kTargetDmaBytesPerPartition / in_b, depth * in_b + 2 * 2,
                                  detail::sbuf_free_bytes(ctx) - 16 * depth * 256 - 32 * ceil_div(C, 1024),
                                  "cross_entropy");
  const int64_t n = ch.n, W = ch.width;
  detail::align_sbuf_to_granule(ctx, "cec_pad");
  detail::Ring x = detail::make_ring(ctx, "cec_x", spec.logits_dtype, W, depth);
  // Two scratch slots: back-to-back exps into one slot would wait out the Scalar latency (a WAW dependency).
  detail::Ring scratch = detail::make_ring(ctx, "cec_scratch", DType::bf16, W, 2);
  auto stat = [&](const std::string& name, DType d = DType::fp32, int64_t w = 1, int dep = kDepth) {
    return detail::make_ring(ctx, name, d, std::max<int64_t>(w, 256 / dtype_size_bytes(d)), dep);
  };
  detail::Ring tgt = stat("cec_tgt", DType::int32), tgf = stat("cec_tgf"),
               negmax = stat("cec_negmax"), sumexp = stat("cec_sumexp"), lse_r = stat("cec_lse"),
               picked = stat("cec_picked"), diff = stat("cec_diff"), pair = stat("cec_pair", DType::fp32, 2),
               nm = stat("cec_nm", spec.logits_dtype, 1, depth), idx = stat("cec_idx", DType::int32);
  // Per row tile (up to three in flight with the skewed stages): the chunks' -max_c, sum_c and exp(max_c - max).
  detail::Ring nm_all = stat("cec_nm_all", DType::fp32, n, 4), se_all = stat("cec_se_all", DType::fp32, n, 4),
               w_all = stat("cec_w_all", DType::fp32, n, 4);
  // (p % group) * C, the offset of row p's logits among its group's (iota counts partitions from the AP's first).
  // Rows per gather: the most (128, 64 or 32) whose flat indices stay exact in fp32 (< 2^24). One gather
  // per row tile when C <= 131072: each gather waits for a gap between the big loads on the DMA engines.
  int64_t kGroup = 32;
  while (kGroup < int64_t(ctx.partitions()) && 2 * kGroup * C <= (int64_t(1) << 24)) kGroup *= 2;
  const uint32_t base = ctx.builder.sbuf(ctx.name("cec_base"), DType::fp32, {ctx.partitions(), 1});
  auto group_rows = [&](isa::AccessPattern ap, int64_t g, int64_t q) {
    ap.start_partition += uint32_t(g * kGroup);
    ap.partition.size = uint32_t(q);
    return ap;
  };
  for (int64_t g = 0; g < ceil_div(int64_t(ctx.partitions()), kGroup); ++g) {
    ctx.builder.emit(isa::Opcode::iota).tensor("dst", group_rows(sb2(ctx, base, kGroup, 1), g, kGroup))
        .word("pattern", "[[1, 1]]").imm("channel_multiplier", double(C));
  }
  std::optional<uint32_t> ones, total;
  if (spec.reduction != Reduction::none) {
    ones = ctx.builder.sbuf(ctx.name("cec_ones"), DType::fp32, {ctx.partitions(), 1});
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, *ones, ctx.partitions(), 1)).imm("value", 1.0);
    total = ctx.builder.psum(ctx.name("cec_total"), DType::fp32, {1, 2});
  }
  struct Step {
    Range rows;
    int64_t tile, chunk;
  };
  std::vector<Range> row_tiles = my_share(ctx, tiles(spec.rows, ctx.partitions()));
  std::vector<Step> steps;
  for (size_t t = 0; t < row_tiles.size(); ++t) {
    for (int64_t c = 0; c < n; ++c) steps.push_back({row_tiles[t], int64_t(t), c});
  }
  auto cols_of = [&](int64_t c) { return Range{c * W, std::min(W, C - c * W)}; };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    const Range cr = cols_of(s.chunk);
    dma(ctx, sb2(ctx, x[int64_t(k)], s.rows.size, cr.size),
        hbm_ap(ctx, logits, s.rows.begin * C + cr.begin, {{C, uint32_t(s.rows.size)}, {1, uint32_t(cr.size)}}),
        detail::kLoadQueue);
    if (s.chunk == 0) dma(ctx, sb2(ctx, tgt[s.tile], s.rows.size, 1), per_row_hbm(ctx, target, s.rows), detail::kConstQueue);
  };
  // One chunk per row: the row sums and lse of tile pairs (2j, 2j + 1) in columns of one [P, 2] slot.
  // The two columns 64 floats apart: in different 256-byte dependency granules, so the odd tile's exp does
  // not wait out the Scalar latency of the even tile's (a WAW on a shared granule).
  constexpr int64_t kPairStride = 64;
  detail::Ring se2 = stat("cec_se2", DType::fp32, 2 * kPairStride, 3),
               lse2 = stat("cec_lse2", DType::fp32, 2 * kPairStride, 3);
  auto pair_col = [&](const detail::Ring& ring, int64_t t, int64_t p) {
    return sb2(ctx, ring[t / 2], p, 1, (t % 2) * kPairStride);
  };
  auto pair_both = [&](const detail::Ring& ring, int64_t t, int64_t p, int64_t offset = 0) {
    return sb_ap(ctx, ring[t / 2], uint32_t(p), {{kPairStride, 2}}, offset);
  };
  // A tile's [P, 3] (max, sum, log(sum)) in the paired statistics ring.
  auto pair_stats = [&](int64_t t, int64_t p) { return sb2(ctx, lse2[t / 2], p, 3, (t % 2) * kPairStride); };
  const int64_t n_tiles = int64_t(row_tiles.size());
  auto paired = [&](int64_t t) {
    const int64_t u = t ^ 1;
    return u < n_tiles && row_tiles[size_t(t)].size == int64_t(ctx.partitions()) &&
           row_tiles[size_t(u)].size == int64_t(ctx.partitions());
  };
  std::optional<size_t> deferred;  // the even tile of a pair, its loss waiting for the odd one's sum
  // Three stages, skewed in program order (each engine runs its queue in order): iteration i emits stage A
  // of step i (GpSimd target index and gather on a tile's first chunk, Vector -max_c), stage B of step i - 1
  // (Scalar exp with its row sum), then the loss of a row tile whose last chunk's stage B was emitted in the
  // iteration before (so the Scalar log never waits on the exp just before it). So the Vector max runs a step ahead of the Scalar exp and the short dependent chain
  // of a tile's loss (Scalar log -> Vector) runs while the next tile streams, never in front of it.
  auto stage_a = [&](size_t k) {
    const Step& st = steps[k];
    const Range& r = st.rows;
    const int64_t t = st.tile, p = r.size, w = cols_of(st.chunk).size, kk = int64_t(k);
    auto s = [&](const detail::Ring& ring) { return sb2(ctx, ring[t], p, 1); };
    const isa::AccessPattern valid = column(ctx, pair[t], p, 1);
    if (st.chunk == 0) {
      // Per-row target as fp32 (exact below 2^24) and whether the row counts.
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", s(tgf)).tensor("src", s(tgt)).on(Engine::gpsimd);
      if (spec.ignore_index) {
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", valid).tensor("data", s(tgf)).word("op0", "not_equal")
            .imm("operand0", double(*spec.ignore_index)).on(Engine::gpsimd);
      } else {
        ctx.builder.emit(isa::Opcode::memset).tensor("dst", valid).imm("value", 1.0).on(Engine::gpsimd);
      }
      // The target logit by indirect DMA, index (p % group) * C + clamp(target, 0, C - 1) per row.
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", s(picked)).tensor("data", s(tgf)).word("op0", "maximum").imm("operand0", 0.0)
          .word("op1", "minimum").imm("operand1", double(C - 1)).on(Engine::gpsimd);
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", s(picked)).tensor("data1", s(picked)).tensor("data2", sb2(ctx, base, p, 1)).word("op", "add")
          .on(Engine::gpsimd);
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", s(idx)).tensor("src", s(picked)).on(Engine::gpsimd);
      for (int64_t g = 0; g * kGroup < p; ++g) {
        const int64_t q = std::min(kGroup, p - g * kGroup);
        ctx.builder.emit(isa::Opcode::dma_gather)
            .tensor("dst", group_rows(s(picked), g, q))
            .tensor("src", hbm_ap(ctx, logits, (r.begin + g * kGroup) * C, {{1, uint32_t(q * C)}, {1, 1}}))
            .tensor("indices", group_rows(s(idx), g, q))
            .imm("queue", double(kGatherQueue));
      }
    }
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", sb2(ctx, nm[kk], p, 1)).word("op", "maximum").tensor("data", sb2(ctx, x[kk], p, w))
        .word("axis", "[1]").imm("negate", 1);
    if (n > 1) {
      // -max_c clamped (in place, Vector) to the largest finite value of its dtype: a chunk of only -inf
      // (a masked vocabulary tail) then sums exp(-inf) = 0 instead of exp(-inf + inf) = nan, and its
      // weight exp(max_c - max) = 0 leaves the row's sum alone (torch's row max ignores the chunk). A NaN
      // passes through (minimum propagates it): the row's loss is NaN, as on the CPU.
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", sb2(ctx, nm[kk], p, 1)).tensor("data", sb2(ctx, nm[kk], p, 1))
          .word("op0", "minimum").imm("operand0", double(numerics::dtype_max_finite(spec.logits_dtype)));
    }
  };
  auto stage_b = [&](size_t k) {
    const Step& st = steps[k];
    const int64_t t = st.tile, p = st.rows.size, w = cols_of(st.chunk).size, kk = int64_t(k);
    auto col = [&](const detail::Ring& ring, int64_t c) { return sb2(ctx, ring[t], p, 1, c); };
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", sb2(ctx, scratch[kk], p, w)).word("op", "exp").tensor("data", sb2(ctx, x[kk], p, w))
        .tensor("bias", sb2(ctx, nm[kk], p, 1)).word("reduce_op", "add")
        .tensor("reduce_res", n == 1 ? pair_col(se2, t, p) : col(se_all, st.chunk));
    if (n > 1) {
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", col(nm_all, st.chunk)).tensor("src", sb2(ctx, nm[kk], p, 1))
          .on(Engine::gpsimd);
    }
  };
  // The loss of the row tile whose last chunk is step k.
  auto finish = [&](size_t k) {
    const Step& st = steps[k];
    const Range& r = st.rows;
    const int64_t t = st.tile, p = r.size;
    auto s = [&](const detail::Ring& ring) { return sb2(ctx, ring[t], p, 1); };
    if (n == 1) {
      // One chunk: its statistics are the row's. Two full row tiles share one Scalar log ([P, 2]): the
      // even tile's loss waits for the odd one's sum (64 Scalar cycles a tile saved on the bound engine).
      auto row_loss = [&](size_t kj, bool take_log) {
        const int64_t tj = steps[kj].tile, pj = steps[kj].rows.size;
        auto sj = [&](const detail::Ring& ring) { return sb2(ctx, ring[tj], pj, 1); };
        finish_row_loss(ctx, spec,
                        {pair_col(se2, tj, pj), sb2(ctx, nm[int64_t(kj)], pj, 1), pair_stats(tj, pj),
                         sj(picked), sj(diff)},
                        pair[tj], steps[kj].rows, tj == 0, loss, lse, ones, total, take_log);
      };
      if (paired(t) && t % 2 == 0) {
        deferred = k;
        return;
      }
      if (paired(t)) {
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", pair_both(lse2, t, p, 2)).word("op", "log").tensor("data", pair_both(se2, t, p));
        row_loss(*deferred, false);
        deferred.reset();
        row_loss(k, false);
        return;
      }
      row_loss(k, true);
      return;
    }
    // The row statistics from the n chunks': -max = min of -max_c, sum = sum_c sum_c * exp(max_c - max).
    const isa::AccessPattern nms = sb2(ctx, nm_all[t], p, n), ses = sb2(ctx, se_all[t], p, n),
                             ws = sb2(ctx, w_all[t], p, n);
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", s(negmax)).word("op", "minimum").tensor("data", nms).word("axis", "[1]");
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", ws).word("op", "exp").tensor("data", nms).tensor("bias", s(negmax)).imm("scale", -1.0);
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", ws).tensor("data1", ws).tensor("data2", ses).word("op", "multiply");
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", s(sumexp)).word("op", "add").tensor("data", ws).word("axis", "[1]");
    finish_row_loss(ctx, spec, {s(sumexp), s(negmax), sb2(ctx, lse_r[t], p, 3), s(picked), s(diff)}, pair[t], r, t == 0, loss, lse,
                    ones, total);
  };
  const size_t ahead = size_t(depth) - 2;  // the x slot of step k is read until stage B (iteration k + 1)
  int64_t pending = -1;  // a tile's last step whose stage B is emitted, its loss not yet (-1: none)
  for (size_t k = 0; k < std::min(ahead, steps.size()); ++k) load(k);
  for (size_t i = 0; i <= steps.size(); ++i) {
    if (i + ahead < steps.size()) load(i + ahead);
    if (i < steps.size()) stage_a(i);
    if (i > 0) stage_b(i - 1);
    if (pending >= 0) finish(size_t(pending));
    pending = i > 0 && steps[i - 1].chunk == n - 1 ? int64_t(i) - 1 : -1;
  }
  if (pending >= 0) finish(size_t(pending));
  if (spec.reduction != Reduction::none) store_reduced_loss(ctx, spec, *total, loss, "cec_result");
}

}  // namespace

void build_cross_entropy(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits, uint32_t target,
                         uint32_t loss, int64_t lse) {
  // One schedule for every row length: a row that fits is one chunk (one pass, the target logit by one
  // indirect DMA per row tile instead of a full-width Vector range_select pass, so the kernel runs at
  // the Scalar exp rate); longer rows are split into column chunks.
  build_cross_entropy_chunked(ctx, spec, logits, target, loss, lse);
}

isa::Program cross_entropy_program(const CrossEntropySpec& spec, const HardwareConfig& config, uint32_t core,
                                   uint32_t cores) {
  isa::ProgramBuilder builder("cross_entropy", config.generation);
  const auto in = isa::AllocationRole::input, out = isa::AllocationRole::output;
  uint32_t logits = builder.hbm("logits", spec.logits_dtype, {uint32_t(spec.rows), uint32_t(spec.classes)}, in);
  uint32_t target = builder.hbm("target", DType::int32, {uint32_t(spec.rows)}, in);
  uint32_t loss = builder.hbm("loss", DType::fp32, {spec.reduction == Reduction::none ? uint32_t(spec.rows) : 1u}, out);
  uint32_t lse = builder.hbm("lse", DType::fp32, {uint32_t(spec.rows), 2u}, out);
  build_cross_entropy(KernelContext{builder, config, "", core, cores}, spec, logits, target, loss, lse);
  return builder.finish();
}

void build_cross_entropy_backward(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits,
                                  uint32_t target, uint32_t lse, uint32_t grad_output, uint32_t dlogits) {
  const int64_t C = spec.classes, P = ctx.partitions();
  std::vector<Range> row_tiles = tiles(spec.rows, P);
  const int64_t T = int64_t(row_tiles.size());
  const int64_t out_bytes = dtype_size_bytes(spec.logits_dtype);
  // Rings of logits, exp, onehot and dlogits, as deep as SBUF allows (2 for bf16 rows of 4096 on trn2), + iota.
  // Rows too long for that (LLM vocabularies) go in column chunks W wide (the softmax needs no statistics
  // beyond the saved lse, so the chunks are independent): the widest chunk with 3-deep rings, at least
  // ~4 KiB of logits per partition per DMA (W = C when the row fits).
  auto per_column = [&](int64_t depth) { return depth * (2 * out_bytes + 2 * 4) + 4; };
  const int64_t budget = detail::sbuf_free_bytes(ctx) - 8192 - 4 * 8 * (ceil_div(spec.rows, P) + ceil_div(C, 1024));
  int depth = kDepth;
  while (depth > 2 && C * per_column(depth) > budget) --depth;
  int64_t W = C;
  if (C * per_column(depth) > budget) {
    depth = 4;
    W = chunk_columns(C, 3072, per_column(depth), budget, "cross_entropy backward").width;
  }
  const int64_t n = ceil_div(C, W);
  check_row_fits(ctx, "cross_entropy backward", W, per_column(depth));
  auto resident = [&](const std::string& n, DType d, int64_t w) {
    return ctx.builder.sbuf(ctx.name(n), d, {uint32_t(P), uint32_t(std::max<int64_t>(1, w))});
  };
  // Per-row values of every tile stay resident ([P, T], column t = row tile t): targets, the saved
  // (max, sum) pairs ([P, 2T]), -max, the row scale and scale / sum, computed once before the row
  // loop (the mean needs the valid-row count of all rows).
  uint32_t tg_i = resident("ceb_tgt", DType::int32, T), tgf = resident("ceb_tgf", DType::fp32, T),
           stats = resident("ceb_stats", DType::fp32, 2 * T), nmax = resident("ceb_nmax", DType::fp32, T),
           coef = resident("ceb_coef", DType::fp32, T), scale = resident("ceb_scale", DType::fp32, T),
           go = resident("ceb_go", DType::fp32, T);
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, tgf, P, T)).imm("value", -1.0);  // pad rows: invalid
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, stats, P, 2 * T)).imm("value", 1.0);
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, go, P, T)).imm("value", 0.0);
  // Split across cores by row tiles (this core's contiguous share, `mine`); the per-row values are
  // loaded for those tiles only, except the targets of every tile for the mean's valid-row count
  // (every core counts all rows itself: cores cannot wait for one another).
  const Range mine = ctx.share(T);
  auto is_mine = [&](int64_t t) { return t >= mine.begin && t < mine.begin + mine.size; };
  for (int64_t t = 0; t < T; ++t) {
    if (!is_mine(t) && spec.reduction != Reduction::mean) continue;
    const Range& r = row_tiles[size_t(t)];
    dma(ctx, column(ctx, tg_i, r.size, t), per_row_hbm(ctx, target, r), detail::kConstQueue);
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", column(ctx, tgf, r.size, t))
        .tensor("src", column(ctx, tg_i, r.size, t));
    if (!is_mine(t)) continue;
    dma(ctx, sb2(ctx, stats, r.size, 2, 2 * t), hbm_ap(ctx, lse, r.begin * 2, {{2, uint32_t(r.size)}, {1, 2}}),
        detail::kConstQueue);
    if (spec.reduction == Reduction::none) {
      dma(ctx, column(ctx, go, r.size, t), per_row_hbm(ctx, grad_output, r), detail::kConstQueue);
    }
  }
  if (spec.reduction != Reduction::none) {  // the scalar grad_output on every partition
    dma(ctx, sb2(ctx, go, P, 1), hbm_ap(ctx, grad_output, 0, {{0, uint32_t(P)}, {1, 1}}), detail::kConstQueue);
  }
  // valid = target >= 0 (not padding) and target != ignore_index.
  uint32_t valid = resident("ceb_valid", DType::fp32, T);
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", sb2(ctx, valid, P, T)).tensor("data", sb2(ctx, tgf, P, T)).word("op0", "greater_equal")
      .imm("operand0", 0.0);
  if (spec.ignore_index) {
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", sb2(ctx, valid, P, T)).tensor("data", sb2(ctx, tgf, P, T)).word("op0", "not_equal")
        .imm("operand0", double(*spec.ignore_index)).word("op1", "multiply").tensor("operand1", sb2(ctx, valid, P, T));
  }
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", sb2(ctx, nmax, P, T)).tensor("data", sb_ap(ctx, stats, uint32_t(P), {{2, uint32_t(T)}}))
      .word("op0", "multiply").imm("operand0", -1.0);
  if (spec.reduction == Reduction::none) {
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", sb2(ctx, scale, P, T)).tensor("data1", sb2(ctx, valid, P, T)).tensor("data2", sb2(ctx, go, P, T))
        .word("op", "multiply");
  } else {
    uint32_t factor = resident("ceb_factor", DType::fp32, 1);
    if (spec.reduction == Reduction::mean) {
      // The valid-row count on every partition: per-partition sums, then ones[P, P].T @ sums (Tensor).
      uint32_t count = resident("ceb_count", DType::fp32, 1), ones = resident("ceb_ones", DType::fp32, P);
      uint32_t all = ctx.builder.psum(ctx.name("ceb_all"), DType::fp32, {uint32_t(P), 1});
      ctx.builder.emit(isa::Opcode::tensor_reduce)
          .tensor("dst", sb2(ctx, count, P, 1)).word("op", "add").tensor("data", sb2(ctx, valid, P, T))
          .word("axis", "[1]");
      ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ones, P, P)).imm("value", 1.0);
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, all, P, 1)).tensor("stationary", sb2(ctx, ones, P, P))
          .tensor("moving", sb2(ctx, count, P, 1)).word("accumulate", "false");
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", sb2(ctx, factor, P, 1)).tensor("data1", sb2(ctx, go, P, 1))
          .tensor("data2", sb2(ctx, all, P, 1))
          .word("op", "divide");
    } else {
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, factor, P, 1))
          .tensor("src", sb2(ctx, go, P, 1));
    }
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", sb2(ctx, scale, P, T)).tensor("data", sb2(ctx, valid, P, T)).word("op0", "multiply")
        .tensor("operand0", sb2(ctx, factor, P, 1));
  }
  // scale / sum: the softmax's normaliser folded into the row scale, so the full-width pass is exp(x - max)
  // (no cancellation against a large max) times one per-row factor. Padding rows: 0 / 1.
  ctx.builder.emit(isa::Opcode::tensor_tensor)
      .tensor("dst", sb2(ctx, coef, P, T)).tensor("data1", sb2(ctx, scale, P, T))
      .tensor("data2", sb_ap(ctx, stats, uint32_t(P), {{2, uint32_t(T)}}, 1)).word("op", "divide");
  uint32_t iota = resident("ceb_iota", DType::fp32, W);
  ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, iota, P, W))
      .word("pattern", "[[1, " + std::to_string(W) + "]]");
  // Chunked rows: the target relative to each chunk (target - first column), written and read by the
  // engine that forms the one-hot: Vector for chunked rows (Scalar exp and * scale, Vector one-hot, GpSimd
  // the difference: ~6% faster than GpSimd doing both), GpSimd in the one-pass schedule.
  const uint32_t tgc = n > 1 ? resident("ceb_tgc", DType::fp32, n) : 0;
  const Engine hot_engine = n > 1 ? Engine::vector : Engine::gpsimd;

  detail::align_sbuf_to_granule(ctx, "ceb_pad");
  detail::Ring x = detail::make_ring(ctx, "ceb_x", spec.logits_dtype, W, depth);
  detail::Ring es = detail::make_ring(ctx, "ceb_es", DType::fp32, W, depth);
  detail::Ring hot = detail::make_ring(ctx, "ceb_hot", DType::fp32, W, depth);
  detail::Ring out = detail::make_ring(ctx, "ceb_dx", spec.logits_dtype, W, depth);
  struct Step {
    int64_t tile;
    Range cols;
  };
  std::vector<Step> steps;
  for (int64_t t = mine.begin; t < mine.begin + mine.size; ++t) {
    for (int64_t c = 0; c < n; ++c) steps.push_back({t, Range{c * W, std::min(W, C - c * W)}});
  }
  auto chunk_hbm = [&](uint32_t tensor, const Step& s) {
    const Range& r = row_tiles[size_t(s.tile)];
    return hbm_ap(ctx, tensor, r.begin * C + s.cols.begin, {{C, uint32_t(r.size)}, {1, uint32_t(s.cols.size)}});
  };
  auto load = [&](size_t k) {
    const Step& s = steps[k];
    dma(ctx, sb2(ctx, x[int64_t(k)], row_tiles[size_t(s.tile)].size, s.cols.size), chunk_hbm(logits, s),
        detail::kLoadQueue);
  };
  detail::pipelined(steps.size(), size_t(depth) - 1, load, [&](size_t k) {
      const Step& st = steps[k];
      const int64_t t = st.tile, p = row_tiles[size_t(t)].size, w = st.cols.size, slot = int64_t(k);
      auto full = [&](const detail::Ring& ring) { return sb2(ctx, ring[slot], p, w); };
      isa::AccessPattern s_col = column(ctx, scale, p, t), tg_col = column(ctx, tgf, p, t);
      if (n > 1) {
        tg_col = column(ctx, tgc, p, st.cols.begin / W);
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", tg_col).tensor("data", column(ctx, tgf, p, t)).word("op0", "subtract")
            .imm("operand0", double(st.cols.begin)).on(hot_engine);
      }
      // Scalar: exp(x - max), then * (scale / sum); GpSimd: (iota == target) * scale, and the difference:
      // torch's exp(log_softmax) - onehot. x - max is exact near the max, where exp(x - lse) with an fp32
      // lse = max + log(sum) would carry the lse's rounding (up to 0.5 at |max| = 1e7) into the exponent.
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", full(es)).word("op", "exp").tensor("data", full(x)).tensor("bias", column(ctx, nmax, p, t));
      ctx.builder.emit(isa::Opcode::activation)
          .tensor("dst", full(es)).word("op", "copy").tensor("data", full(es)).tensor("scale", column(ctx, coef, p, t));
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", full(hot)).tensor("data", sb2(ctx, iota, p, w)).word("op0", "equal")
          .tensor("operand0", tg_col).word("op1", "multiply").tensor("operand1", s_col)
          .on(hot_engine);
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", full(out)).tensor("data1", full(es)).tensor("data2", full(hot)).word("op", "subtract")
          .on(Engine::gpsimd);
      dma(ctx, chunk_hbm(dlogits, st), full(out), detail::kStoreQueue);
  });
}

isa::Program cross_entropy_backward_program(const CrossEntropySpec& spec, const HardwareConfig& config, uint32_t core,
                                            uint32_t cores) {
  isa::ProgramBuilder builder("cross_entropy_backward", config.generation);
  const auto in = isa::AllocationRole::input;
  std::vector<uint32_t> shape{uint32_t(spec.rows), uint32_t(spec.classes)}, rows{uint32_t(spec.rows)};
  uint32_t logits = builder.hbm("logits", spec.logits_dtype, shape, in);
  uint32_t target = builder.hbm("target", DType::int32, rows, in);
  uint32_t lse = builder.hbm("lse", DType::fp32, {uint32_t(spec.rows), 2u}, in);
  uint32_t go = builder.hbm("dloss", DType::fp32, {spec.reduction == Reduction::none ? uint32_t(spec.rows) : 1u}, in);
  uint32_t dlogits = builder.hbm("dlogits", spec.logits_dtype, shape, isa::AllocationRole::output);
  build_cross_entropy_backward(KernelContext{builder, config, "", core, cores}, spec, logits, target, lse, go, dlogits);
  return builder.finish();
}

}  // namespace trnsim::kernels

namespace trnsim::kernels {

void build_one_hot(const KernelContext& ctx, const OneHotSpec& spec, uint32_t index, int64_t scale, uint32_t y) {
  const int64_t C = spec.classes, P = ctx.partitions();
  if (spec.rows <= 0 || C <= 0) throw KernelUnsupported("one_hot: rows and classes must be positive");
  // Column chunks of at most 4096 (16 KiB of fp32 per partition per chunk); the iota holds 0..W-1
  // and each chunk compares against index - chunk start.
  const int64_t W = std::min<int64_t>(C, 4096);
  uint32_t iota = ctx.builder.sbuf(ctx.name("oh_iota"), DType::fp32, {uint32_t(P), uint32_t(W)});
  ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, iota, P, W)).word("pattern", "[[1, " + std::to_string(W) + "]]");
  constexpr int kDepth = 3;
  auto stat = [&](const std::string& n, DType d) {
    return detail::make_ring(ctx, n, d, std::max<int64_t>(1, 256 / dtype_size_bytes(d)), kDepth);  // granule-padded
  };
  detail::Ring idx = stat("oh_idx", DType::int32), idxf = stat("oh_idxf", DType::fp32), shifted = stat("oh_shift", DType::fp32),
               sc = stat("oh_scale", DType::fp32);
  detail::Ring out = detail::make_ring(ctx, "oh_out", spec.output_dtype, W, kDepth);
  std::vector<Range> row_tiles = my_share(ctx, tiles(spec.rows, P));
  auto load = [&](size_t t) {
    const Range& r = row_tiles[t];
    dma(ctx, sb2(ctx, idx[int64_t(t)], r.size, 1), per_row_hbm(ctx, index, r), detail::kConstQueue);
    if (spec.scaled) {
      const isa::AccessPattern src = spec.scale_broadcast
                                         ? hbm_ap(ctx, uint32_t(scale), 0, {{0, uint32_t(r.size)}, {1, 1}})
                                         : per_row_hbm(ctx, uint32_t(scale), r);
      dma(ctx, sb2(ctx, sc[int64_t(t)], r.size, 1), src, detail::kLoadQueue);
    }
  };
  int64_t stores = 0;
  detail::pipelined(row_tiles.size(), kDepth - 1, load, [&](size_t i) {
    const Range& r = row_tiles[i];
    const int64_t t = int64_t(i), p = r.size;
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, idxf[t], p, 1)).tensor("src", sb2(ctx, idx[t], p, 1));
    if (spec.scaled && spec.multiplier != 1.0) {
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", sb2(ctx, sc[t], p, 1)).tensor("data", sb2(ctx, sc[t], p, 1))
          .word("op0", "multiply").imm("operand0", spec.multiplier);
    }
    for (const Range& c : tiles(C, W)) {
      isa::AccessPattern target = sb2(ctx, idxf[t], p, 1);
      if (c.begin > 0) {
        ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", sb2(ctx, shifted[t], p, 1)).tensor("data", target)
            .word("op0", "subtract").imm("operand0", double(c.begin));
        target = sb2(ctx, shifted[t], p, 1);
      }
      const isa::AccessPattern yt = sb2(ctx, out[stores], p, c.size);
      auto emit = ctx.builder.emit(isa::Opcode::tensor_scalar);
      emit.tensor("dst", yt).tensor("data", sb2(ctx, iota, p, c.size)).word("op0", "equal").tensor("operand0", target);
      if (spec.scaled) emit.word("op1", "multiply").tensor("operand1", sb2(ctx, sc[t], p, 1));
      dma(ctx, hbm_ap(ctx, y, r.begin * C + c.begin, {{C, uint32_t(p)}, {1, uint32_t(c.size)}}), yt,
          stores % 2 ? detail::kStoreQueue : detail::kLoadQueue + 3);
      ++stores;
    }
  });
}

isa::Program one_hot_program(const OneHotSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("one_hot", config.generation);
  const auto in = isa::AllocationRole::input;
  uint32_t index = builder.hbm("index", DType::int32, {uint32_t(spec.rows)}, in);
  const uint32_t scale_count = spec.scale_broadcast ? 1u : uint32_t(spec.rows);
  int64_t scale = spec.scaled ? int64_t(builder.hbm("scale", DType::fp32, {scale_count}, in)) : -1;
  uint32_t y = builder.hbm("y", spec.output_dtype, {uint32_t(spec.rows), uint32_t(spec.classes)},
                           isa::AllocationRole::output);
  build_one_hot(KernelContext{builder, config, "", core, cores}, spec, index, scale, y);
  return builder.finish();
}

}  // namespace trnsim::kernels
