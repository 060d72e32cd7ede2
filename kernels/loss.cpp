// Cross-entropy forward and backward (see loss.h for the schedule).
#include "kernels/loss.h"

#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {

// One more tile in flight than the element-wise kernels: each row tile chains Vector -> Scalar -> Vector.
constexpr int kDepth = detail::kRingDepth + 1;

isa::AccessPattern logits_hbm(const KernelContext& ctx, uint32_t t, const CrossEntropySpec& s, const Range& r) {
  return hbm_ap(ctx, t, r.begin * s.classes, {{s.classes, uint32_t(r.size)}, {1, uint32_t(s.classes)}});
}
isa::AccessPattern per_row_hbm(const KernelContext& ctx, uint32_t t, const Range& r) {
  return hbm_ap(ctx, t, r.begin, {{1, uint32_t(r.size)}, {1, 1}});
}
// Column `col` of a [P, n] SBUF buffer over the first p partitions.
isa::AccessPattern column(const KernelContext& ctx, uint32_t buf, int64_t p, int64_t col) {
  return sb_ap(ctx, buf, uint32_t(p), {{1, 1}}, col);
}

void check_row_fits(const KernelContext& ctx, const char* kernel, int64_t cols, int64_t bytes_per_column) {
  if (cols * bytes_per_column > detail::sbuf_free_bytes(ctx)) {
    throw std::invalid_argument(std::string(kernel) + ": a row of " + std::to_string(cols) +
                                " classes does not fit in SBUF with its ring buffers (chunked rows not implemented)");
  }
}

}  // namespace

void build_cross_entropy(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits, uint32_t target,
                         uint32_t loss, int64_t lse) {
  const int64_t C = spec.classes;
  const bool trn1 = ctx.config.generation == Generation::trn1;
  check_row_fits(ctx, "cross_entropy", C, kDepth * dtype_size_bytes(spec.logits_dtype) + 2 * 2 + (trn1 ? 4 : 0));
  detail::Ring x = detail::make_ring(ctx, "ce_x", spec.logits_dtype, C, kDepth);
  detail::Ring scratch = detail::make_ring(ctx, "ce_scratch", DType::bf16, C, 2);  // discarded full-width results
  auto stat = [&](const std::string& n, DType d = DType::fp32, int64_t w = 1) {
    // Padded to the 256-byte dependency granule, so slots of different tiles never falsely depend.
    return detail::make_ring(ctx, n, d, std::max<int64_t>(w, 256 / dtype_size_bytes(d)), kDepth);
  };
  detail::Ring tgt = stat("ce_tgt", DType::int32), tgf = stat("ce_tgf"), tg1 = stat("ce_tg1"),
               negmax = stat("ce_negmax", spec.logits_dtype), sumexp = stat("ce_sumexp"), lse_r = stat("ce_lse"),
               picked = stat("ce_picked"), diff = stat("ce_diff"), pair = stat("ce_pair", DType::fp32, 2);
  std::optional<uint32_t> iota, ones, total;
  if (trn1) {
    iota = ctx.builder.sbuf(ctx.name("ce_iota"), DType::fp32, {ctx.partitions(), uint32_t(C)});
    ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, *iota, ctx.partitions(), C))
        .word("pattern", "[[1, " + std::to_string(C) + "]]");
  }
  if (spec.reduction != Reduction::none) {
    ones = ctx.builder.sbuf(ctx.name("ce_ones"), DType::fp32, {ctx.partitions(), 1});
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, *ones, ctx.partitions(), 1)).imm("value", 1.0);
    total = ctx.builder.psum(ctx.name("ce_total"), DType::fp32, {1, 2});
  }
  std::vector<Range> row_tiles = tiles(spec.rows, ctx.partitions());
  auto load = [&](size_t t) {
    const Range& r = row_tiles[t];
    dma(ctx, sb2(ctx, x[int64_t(t)], r.size, C), logits_hbm(ctx, logits, spec, r), detail::kLoadQueue);
    dma(ctx, sb2(ctx, tgt[int64_t(t)], r.size, 1), per_row_hbm(ctx, target, r), detail::kConstQueue);
  };
  const size_t ahead = kDepth - 1;
  for (size_t t = 0; t < std::min(ahead, row_tiles.size()); ++t) load(t);
  for (size_t i = 0; i < row_tiles.size(); ++i) {
    if (i + ahead < row_tiles.size()) load(i + ahead);
    const Range& r = row_tiles[i];
    const int64_t t = int64_t(i), p = r.size;
    auto s = [&](const detail::Ring& ring) { return sb2(ctx, ring[t], p, 1); };
    isa::AccessPattern xt = sb2(ctx, x[t], p, C), valid = column(ctx, pair[t], p, 1);
    // Per-row target as fp32 (exact below 2^24), its upper bound, and whether the row counts.
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", s(tgf)).tensor("src", s(tgt));
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", s(tg1)).tensor("data", s(tgf)).word("op0", "add").imm("operand0", 1.0);
    if (spec.ignore_index) {
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", valid).tensor("data", s(tgf)).word("op0", "not_equal")
          .imm("operand0", double(*spec.ignore_index));
    } else {
      ctx.builder.emit(isa::Opcode::memset).tensor("dst", valid).imm("value", 1.0);
    }
    // Vector: -max (in the logits dtype: exact, and the bf16 half-rate reduce); Scalar: sum exp(x - max).
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", s(negmax)).word("op", "maximum").tensor("data", xt).word("axis", "[1]").imm("negate", 1);
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", sb2(ctx, scratch[0], p, C)).word("op", "exp").tensor("data", xt).tensor("bias", s(negmax))
        .word("reduce_op", "add").tensor("reduce_res", s(sumexp));
    // Vector: the target logit, max over the one index in [target, target + 1).
    if (!trn1) {
      ctx.builder.emit(isa::Opcode::range_select)
          .tensor("dst", sb2(ctx, scratch[1], p, C)).tensor("on_true_tile", xt).word("comp_op0", "greater_equal")
          .word("comp_op1", "less").tensor("bound0", s(tgf)).tensor("bound1", s(tg1)).word("reduce_op", "maximum")
          .tensor("reduce_res", s(picked));
    } else {
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", sb2(ctx, scratch[1], p, C)).tensor("data", sb2(ctx, *iota, p, C)).word("op0", "equal")
          .tensor("operand0", s(tgf));
      ctx.builder.emit(isa::Opcode::select_reduce)
          .tensor("dst", sb2(ctx, scratch[1], p, C)).tensor("predicate", sb2(ctx, scratch[1], p, C))
          .tensor("on_true", xt).imm("on_false", -std::numeric_limits<double>::infinity())
          .word("reduce_op", "maximum").tensor("reduce_res", s(picked));
    }
    // lse = log(sum) + max; loss = lse - x[target] on valid rows, 0 on ignored ones (x[target] is -inf there).
    ctx.builder.emit(isa::Opcode::activation).tensor("dst", s(lse_r)).word("op", "log").tensor("data", s(sumexp));
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", s(lse_r)).tensor("data1", s(lse_r)).tensor("data2", s(negmax)).word("op", "subtract");
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", s(diff)).tensor("data1", s(lse_r)).tensor("data2", s(picked)).word("op", "subtract");
    ctx.builder.emit(isa::Opcode::select_reduce)
        .tensor("dst", column(ctx, pair[t], p, 0)).tensor("predicate", valid).tensor("on_true", s(diff))
        .imm("on_false", 0.0);
    if (lse >= 0) dma(ctx, per_row_hbm(ctx, uint32_t(lse), r), s(lse_r), detail::kStoreQueue);
    if (spec.reduction == Reduction::none) {
      dma(ctx, per_row_hbm(ctx, loss, r), column(ctx, pair[t], p, 0), detail::kStoreQueue);
    } else {
      // Tensor: [sum of losses, valid rows] += ones.T @ pair, accumulated in PSUM over the row tiles.
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, *total, 1, 2)).tensor("stationary", sb2(ctx, *ones, p, 1))
          .tensor("moving", sb2(ctx, pair[t], p, 2)).word("accumulate", i == 0 ? "false" : "true");
    }
  }
  if (spec.reduction != Reduction::none) {
    uint32_t res = ctx.builder.sbuf(ctx.name("ce_result"), DType::fp32, {1, 2});
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, res, 1, 2)).tensor("src", sb2(ctx, *total, 1, 2));
    if (spec.reduction == Reduction::mean) {  // torch: sum / valid rows (nan when every row is ignored)
      ctx.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", column(ctx, res, 1, 0)).tensor("data1", column(ctx, res, 1, 0))
          .tensor("data2", column(ctx, res, 1, 1)).word("op", "divide");
    }
    dma(ctx, hbm_ap(ctx, loss, 0, {{1, 1}, {1, 1}}), column(ctx, res, 1, 0), detail::kStoreQueue);
  }
}

isa::Program cross_entropy_program(const CrossEntropySpec& spec, const HardwareConfig& config) {
  isa::ProgramBuilder builder("cross_entropy", config.generation);
  const auto in = isa::AllocationRole::input, out = isa::AllocationRole::output;
  uint32_t logits = builder.hbm("logits", spec.logits_dtype, {uint32_t(spec.rows), uint32_t(spec.classes)}, in);
  uint32_t target = builder.hbm("target", DType::int32, {uint32_t(spec.rows)}, in);
  uint32_t loss = builder.hbm("loss", DType::fp32, {spec.reduction == Reduction::none ? uint32_t(spec.rows) : 1u}, out);
  uint32_t lse = builder.hbm("lse", DType::fp32, {uint32_t(spec.rows)}, out);
  build_cross_entropy(KernelContext{builder, config, ""}, spec, logits, target, loss, lse);
  return builder.finish();
}

void build_cross_entropy_backward(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits,
                                  uint32_t target, uint32_t lse, uint32_t grad_output, uint32_t dlogits) {
  const int64_t C = spec.classes, P = ctx.partitions();
  std::vector<Range> row_tiles = tiles(spec.rows, P);
  const int64_t T = int64_t(row_tiles.size());
  const int64_t out_bytes = dtype_size_bytes(spec.logits_dtype);
  // Rings of logits, exp, onehot and dlogits, as deep as SBUF allows (2 for bf16 rows of 4096 on trn2), + iota.
  auto per_column = [&](int64_t depth) { return depth * (2 * out_bytes + 2 * 4) + 4; };
  int depth = kDepth;
  while (depth > 2 && C * per_column(depth) > detail::sbuf_free_bytes(ctx) - 8192) --depth;
  check_row_fits(ctx, "cross_entropy backward", C, per_column(depth));
  auto resident = [&](const std::string& n, DType d, int64_t w) {
    return ctx.builder.sbuf(ctx.name(n), d, {uint32_t(P), uint32_t(std::max<int64_t>(1, w))});
  };
  // Per-row values of every tile stay resident ([P, T], column t = row tile t): targets, -lse and the
  // row scale, computed once before the row loop (the mean needs the valid-row count of all rows).
  uint32_t tg_i = resident("ceb_tgt", DType::int32, T), tgf = resident("ceb_tgf", DType::fp32, T),
           nlse = resident("ceb_nlse", DType::fp32, T), scale = resident("ceb_scale", DType::fp32, T),
           go = resident("ceb_go", DType::fp32, T);
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, tgf, P, T)).imm("value", -1.0);  // pad rows: invalid
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, nlse, P, T)).imm("value", 0.0);
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, go, P, T)).imm("value", 0.0);
  for (int64_t t = 0; t < T; ++t) {
    const Range& r = row_tiles[size_t(t)];
    dma(ctx, column(ctx, tg_i, r.size, t), per_row_hbm(ctx, target, r), detail::kConstQueue);
    dma(ctx, column(ctx, nlse, r.size, t), per_row_hbm(ctx, lse, r), detail::kConstQueue);
    if (spec.reduction == Reduction::none) {
      dma(ctx, column(ctx, go, r.size, t), per_row_hbm(ctx, grad_output, r), detail::kConstQueue);
    }
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", column(ctx, tgf, r.size, t))
        .tensor("src", column(ctx, tg_i, r.size, t));
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
      .tensor("dst", sb2(ctx, nlse, P, T)).tensor("data", sb2(ctx, nlse, P, T)).word("op0", "multiply")
      .imm("operand0", -1.0);
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
  uint32_t iota = resident("ceb_iota", DType::fp32, C);
  ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, iota, P, C))
      .word("pattern", "[[1, " + std::to_string(C) + "]]");

  detail::Ring x = detail::make_ring(ctx, "ceb_x", spec.logits_dtype, C, depth);
  detail::Ring es = detail::make_ring(ctx, "ceb_es", DType::fp32, C, depth);
  detail::Ring hot = detail::make_ring(ctx, "ceb_hot", DType::fp32, C, depth);
  detail::Ring out = detail::make_ring(ctx, "ceb_dx", spec.logits_dtype, C, depth);
  auto load = [&](size_t t) {
    const Range& r = row_tiles[t];
    dma(ctx, sb2(ctx, x[int64_t(t)], r.size, C), logits_hbm(ctx, logits, spec, r), detail::kLoadQueue);
  };
  const size_t ahead = size_t(depth) - 1;
  for (size_t t = 0; t < std::min(ahead, row_tiles.size()); ++t) load(t);
  for (size_t i = 0; i < row_tiles.size(); ++i) {
    if (i + ahead < row_tiles.size()) load(i + ahead);
    const Range& r = row_tiles[i];
    const int64_t t = int64_t(i), p = r.size;
    auto full = [&](const detail::Ring& ring) { return sb2(ctx, ring[t], p, C); };
    isa::AccessPattern s_col = column(ctx, scale, p, t);
    // Scalar: exp(x - lse), then * scale; GpSimd: (iota == target) * scale, and the difference.
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", full(es)).word("op", "exp").tensor("data", full(x)).tensor("bias", column(ctx, nlse, p, t));
    ctx.builder.emit(isa::Opcode::activation)
        .tensor("dst", full(es)).word("op", "copy").tensor("data", full(es)).tensor("scale", s_col);
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", full(hot)).tensor("data", sb2(ctx, iota, p, C)).word("op0", "equal")
        .tensor("operand0", column(ctx, tgf, p, t)).word("op1", "multiply").tensor("operand1", s_col)
        .on(Engine::gpsimd);
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", full(out)).tensor("data1", full(es)).tensor("data2", full(hot)).word("op", "subtract")
        .on(Engine::gpsimd);
    dma(ctx, logits_hbm(ctx, dlogits, spec, r), full(out), detail::kStoreQueue);
  }
}

isa::Program cross_entropy_backward_program(const CrossEntropySpec& spec, const HardwareConfig& config) {
  isa::ProgramBuilder builder("cross_entropy_backward", config.generation);
  const auto in = isa::AllocationRole::input;
  std::vector<uint32_t> shape{uint32_t(spec.rows), uint32_t(spec.classes)}, rows{uint32_t(spec.rows)};
  uint32_t logits = builder.hbm("logits", spec.logits_dtype, shape, in);
  uint32_t target = builder.hbm("target", DType::int32, rows, in);
  uint32_t lse = builder.hbm("lse", DType::fp32, rows, in);
  uint32_t go = builder.hbm("dloss", DType::fp32, {spec.reduction == Reduction::none ? uint32_t(spec.rows) : 1u}, in);
  uint32_t dlogits = builder.hbm("dlogits", spec.logits_dtype, shape, isa::AllocationRole::output);
  build_cross_entropy_backward(KernelContext{builder, config, ""}, spec, logits, target, lse, go, dlogits);
  return builder.finish();
}

}  // namespace trnsim::kernels
