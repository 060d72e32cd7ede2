// Top-k kernel (see sort.h).
#include "kernels/sort.h"

#include <limits>
#include <stdexcept>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {
constexpr int64_t kMax8 = 8;           // ISA: max8 returns 8 values per partition
constexpr int64_t kMaxRowElements = 16384;  // a row tile in SBUF (fp32: 64 KiB per partition, two slots)
}  // namespace

isa::Program topk_program(const TopkSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  if (spec.rows < 1 || spec.n < 1 || spec.k < 1 || spec.k > std::min(spec.n, kMax8)) {
    throw std::invalid_argument("topk: needs rows, n >= 1 and 1 <= k <= min(n, 8)");
  }
  if (spec.n > kMaxRowElements) throw std::invalid_argument("topk: rows longer than 16384 elements");
  isa::ProgramBuilder builder("topk", config.generation);
  const uint32_t R = uint32_t(spec.rows), N = uint32_t(spec.n), K = uint32_t(spec.k);
  uint32_t x = builder.hbm("x", spec.dtype, {R, N}, isa::AllocationRole::input);
  uint32_t values = builder.hbm("values", spec.dtype, {R, K}, isa::AllocationRole::output);
  uint32_t indices = builder.hbm("indices", DType::int32, {R, K, 2}, isa::AllocationRole::output);
  KernelContext ctx{builder, config, "", core, cores};
  const int64_t P = ctx.partitions();
  // Rows shorter than 8 are padded with -inf, which max8 ranks below every real element (ties with
  // a real -inf resolve to the real one: nc_find_index8 returns the first position).
  const int64_t width = std::max(spec.n, kMax8);
  detail::Ring rows = detail::make_ring(ctx, "topk_x", spec.largest ? spec.dtype : DType::fp32, width, 2);
  detail::Ring raw = detail::make_ring(ctx, "topk_raw", spec.dtype, spec.n, 2);
  detail::Ring best = detail::make_ring(ctx, "topk_max", DType::fp32, kMax8, 2);
  detail::Ring where = detail::make_ring(ctx, "topk_idx", DType::uint32, kMax8, 2);
  detail::Ring out_v = detail::make_ring(ctx, "topk_v", spec.dtype, kMax8, 2);
  detail::Ring out_i = detail::make_ring(ctx, "topk_i", DType::int32, 2 * kMax8, 2);
  int64_t slot = 0;
  for (const Range& r : my_share(ctx, tiles(spec.rows, P))) {
    const uint32_t n = uint32_t(r.size);
    const isa::AccessPattern row = sb2(ctx, rows[slot], n, spec.n);
    if (spec.n < width) {
      ctx.builder.emit(isa::Opcode::memset)
          .tensor("dst", sb2(ctx, rows[slot], n, width))
          .imm("value", -std::numeric_limits<double>::infinity())
          .on(Engine::gpsimd);
    }
    if (spec.largest) {
      dma(ctx, row, hbm_ap(ctx, x, r.begin * spec.n, {{spec.n, n}, {1, N}}), detail::kLoadQueue);
    } else {
      const isa::AccessPattern loaded = sb2(ctx, raw[slot], n, spec.n);
      dma(ctx, loaded, hbm_ap(ctx, x, r.begin * spec.n, {{spec.n, n}, {1, N}}), detail::kLoadQueue);
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", row).tensor("data", loaded).word("op0", "multiply").imm(
          "operand0", -1.0);
    }
    const isa::AccessPattern all = sb2(ctx, rows[slot], n, width);
    const isa::AccessPattern top = sb2(ctx, best[slot], n, kMax8), pos = sb2(ctx, where[slot], n, kMax8);
    ctx.builder.emit(isa::Opcode::max8).tensor("dst", top).tensor("src", all);
    ctx.builder.emit(isa::Opcode::nc_find_index8).tensor("dst", pos).tensor("data", all).tensor("vals", top);
    // Values back in the input's dtype (and sign): exact, they are elements of the row.
    const isa::AccessPattern v = sb2(ctx, out_v[slot], n, spec.k);
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", v)
        .tensor("data", sb2(ctx, best[slot], n, spec.k))
        .word("op0", "multiply")
        .imm("operand0", spec.largest ? 1.0 : -1.0)
        .on(Engine::gpsimd);
    dma(ctx, hbm_ap(ctx, values, r.begin * spec.k, {{spec.k, n}, {1, K}}), v, detail::kStoreQueue);
    // int64 indices: (position, 0) pairs. Positions < 16384 are exact through the engines' fp32.
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, out_i[slot], n, 2 * spec.k)).imm("value", 0);
    ctx.builder.emit(isa::Opcode::tensor_copy)
        .tensor("dst", sb_ap(ctx, out_i[slot], n, {{2, K}}))
        .tensor("src", sb2(ctx, where[slot], n, spec.k));
    dma(ctx, hbm_ap(ctx, indices, 2 * r.begin * spec.k, {{2 * spec.k, n}, {1, 2 * K}}), sb2(ctx, out_i[slot], n, 2 * spec.k),
        detail::kStoreQueue);
    ++slot;
  }
  return builder.finish();
}

}  // namespace trnsim::kernels
