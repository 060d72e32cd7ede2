// Sort and top-k kernels (see sort.h).
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
constexpr int64_t kMaxRowElements = 16384;  // schedule choice: a row tile in SBUF (fp32: 64 KiB per partition, two slots)

// Stores m sorted elements at their destination rows `dest` (one per partition): the values
// (`per` words each) and their positions first .. first + m - 1 as int64 (position, 0) pairs, both
// by dma_scatter into the [total_rows] outputs.
void scatter_sorted(const KernelContext& ctx, uint32_t values, uint32_t indices, int64_t total_rows, int64_t per,
                    const isa::AccessPattern& src, const isa::AccessPattern& dest, uint32_t position, int64_t m,
                    int64_t first) {
  ctx.builder.emit(isa::Opcode::dma_scatter)
      .tensor("dst", hbm_ap(ctx, values, 0, {{per, uint32_t(total_rows)}, {1, uint32_t(per)}}))
      .tensor("src", src)
      .tensor("indices", dest)
      .imm("queue", double(detail::kStoreQueue));
  const isa::AccessPattern pos = sb2(ctx, position, m, 2);
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", pos).imm("value", 0).on(Engine::gpsimd);
  ctx.builder.emit(isa::Opcode::iota)
      .tensor("dst", sb_ap(ctx, position, m, {{1, 1}}))
      .word("pattern", "[[0, 1]]")
      .imm("offset", double(first))
      .imm("channel_multiplier", 1);
  ctx.builder.emit(isa::Opcode::dma_scatter)
      .tensor("dst", hbm_ap(ctx, indices, 0, {{2, uint32_t(total_rows)}, {1, 2}}))
      .tensor("src", pos)
      .tensor("indices", dest)
      .imm("queue", double(detail::kStoreQueue + 3));
}
}  // namespace

isa::Program topk_program(const TopkSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  if (spec.rows < 1 || spec.n < 1 || spec.k < 1 || spec.k > std::min(spec.n, kMax8)) {
    throw KernelUnsupported("topk: needs rows, n >= 1 and 1 <= k <= min(n, 8)");
  }
  if (spec.n > kMaxRowElements) throw KernelUnsupported("topk: rows longer than 16384 elements");
  isa::ProgramBuilder builder("topk", config.generation);
  const uint32_t R = uint32_t(spec.rows), N = uint32_t(spec.n), K = uint32_t(spec.k);
  uint32_t x = builder.hbm("x", spec.dtype, {R, N}, isa::AllocationRole::input);
  uint32_t values = builder.hbm("values", spec.dtype, {R, K}, isa::AllocationRole::output);
  uint32_t indices = builder.hbm("indices", DType::int32, {R, K, 2}, isa::AllocationRole::output);
  uint32_t kth = builder.hbm("kth_count", DType::fp32, {R}, isa::AllocationRole::output);
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
  detail::Ring eq = detail::make_ring(ctx, "topk_eq", DType::fp32, width, 2);
  detail::Ring count = detail::make_ring(ctx, "topk_count", DType::fp32, 1, 2);
  uint32_t work = 0, positions = 0, found = 0;
  if (spec.resolve_ties) {
    work = builder.sbuf("topk_work", DType::fp32, {ctx.partitions(), uint32_t(width)});
    found = builder.sbuf("topk_found", DType::uint32, {ctx.partitions(), uint32_t(kMax8)});
    const uint32_t ints = builder.sbuf("topk_iota_i", DType::int32, {ctx.partitions(), uint32_t(width)});
    positions = builder.sbuf("topk_iota", DType::fp32, {ctx.partitions(), uint32_t(width)});
    ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, ints, P, width)).word(
        "pattern", "[[1, " + std::to_string(width) + "]]");
    ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, positions, P, width)).tensor(
        "src", sb2(ctx, ints, P, width));
  }
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
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", row)
          .tensor("data", loaded)
          .word("op0", "multiply")
          .imm("operand0", -1.0);
    }
    const isa::AccessPattern all = sb2(ctx, rows[slot], n, width);
    const isa::AccessPattern top = sb2(ctx, best[slot], n, kMax8), pos = sb2(ctx, where[slot], n, kMax8);
    ctx.builder.emit(isa::Opcode::max8).tensor("dst", top).tensor("src", all);
    if (!spec.resolve_ties) {
      ctx.builder.emit(isa::Opcode::nc_find_index8).tensor("dst", pos).tensor("data", all).tensor("vals", top);
    } else {
      const isa::AccessPattern w = sb2(ctx, work, n, width), f = sb2(ctx, found, n, kMax8);
      const isa::AccessPattern e = sb2(ctx, eq[slot], n, width);
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", w).tensor("src", all);
      for (int64_t j = 0; j < spec.k; ++j) {
        ctx.builder.emit(isa::Opcode::nc_find_index8).tensor("dst", f).tensor("data", w).tensor("vals", top);
        const isa::AccessPattern fj = sb_ap(ctx, found, n, {{1, 1}}, j);
        ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb_ap(ctx, where[slot], n, {{1, 1}}, j))
            .tensor("src", fj);
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", e)
            .tensor("data", sb2(ctx, positions, n, width))
            .word("op0", "equal")
            .tensor("operand0", fj);
        ctx.builder.emit(isa::Opcode::tensor_copy_predicated)
            .tensor("dst", w)
            .imm("src", std::numeric_limits<double>::quiet_NaN())
            .tensor("predicate", e);
      }
    }
    // How many elements equal the k-th value (a tie across the k-th place when more than are taken).
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", sb2(ctx, eq[slot], n, spec.n))
        .tensor("data", row)
        .word("op0", "equal")
        .tensor("operand0", sb_ap(ctx, best[slot], n, {{1, 1}}, spec.k - 1))
        .on(Engine::gpsimd);
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", sb2(ctx, count[slot], n, 1))
        .word("op", "add")
        .tensor("data", sb2(ctx, eq[slot], n, spec.n))
        .word("axis", "[1]");
    dma(ctx, hbm_ap(ctx, kth, r.begin, {{1, n}, {1, 1}}), sb2(ctx, count[slot], n, 1), detail::kStoreQueue);
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
    dma(ctx, hbm_ap(ctx, indices, 2 * r.begin * spec.k, {{2 * spec.k, n}, {1, 2 * K}}),
        sb2(ctx, out_i[slot], n, 2 * spec.k),
        detail::kStoreQueue);
    ++slot;
  }
  return builder.finish();
}

isa::Program sort_program(const SortSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  if (spec.rows < 1 || spec.n < 1 || spec.n > kMaxRowElements) {
    throw KernelUnsupported("sort: needs rows >= 1 and 1 <= n <= 16384");
  }
  if (spec.rows * spec.n >= (int64_t{1} << 24)) throw KernelUnsupported("sort: more than 2^24 elements");
  isa::ProgramBuilder builder("sort", config.generation);
  const uint32_t R = uint32_t(spec.rows), N = uint32_t(spec.n);
  const int64_t per = spec.pairs ? 2 : 1;  // words per element
  const DType raw = spec.pairs ? DType::int32 : spec.dtype;
  uint32_t x = spec.pairs ? builder.hbm("x", raw, {R, N, 2}, isa::AllocationRole::input)
                          : builder.hbm("x", raw, {R, N}, isa::AllocationRole::input);
  uint32_t values = spec.pairs ? builder.hbm("values", raw, {R * N, 2}, isa::AllocationRole::output)
                               : builder.hbm("values", raw, {R * N, 1}, isa::AllocationRole::output);
  uint32_t indices = builder.hbm("indices", DType::int32, {R * N, 2}, isa::AllocationRole::output);
  KernelContext ctx{builder, config, "", core, cores};
  const int64_t P = ctx.partitions(), n = spec.n;
  const uint32_t row_all = builder.sbuf("sort_row", raw, {uint32_t(P), uint32_t(per * n)});
  detail::Ring cmp = detail::make_ring(ctx, "sort_lt", DType::fp32, n, 2);
  detail::Ring eq = detail::make_ring(ctx, "sort_eq", DType::fp32, n, 2);
  detail::Ring mine = detail::make_ring(ctx, "sort_x", raw, per, 2);
  detail::Ring lt_count = detail::make_ring(ctx, "sort_c1", DType::fp32, 1, 2);
  detail::Ring eq_count = detail::make_ring(ctx, "sort_c2", DType::fp32, 1, 2);
  detail::Ring rank = detail::make_ring(ctx, "sort_rank", DType::int32, 1, 2);
  detail::Ring position = detail::make_ring(ctx, "sort_pos", DType::int32, 2, 2);
  int64_t slot = 0;
  const Range mine_rows = ctx.share(spec.rows);
  for (int64_t r = mine_rows.begin; r < mine_rows.begin + mine_rows.size; ++r) {
    // The whole row in every partition (partition stride 0), once per row.
    const uint32_t parts = uint32_t(std::min<int64_t>(P, n));
    dma(ctx, sb2(ctx, row_all, parts, per * n), hbm_ap(ctx, x, r * n * per, {{0, parts}, {1, uint32_t(per * n)}}),
        detail::kConstQueue);
    for (const Range& t : tiles(n, P)) {
      const uint32_t m = uint32_t(t.size);
      const isa::AccessPattern bc = spec.pairs ? sb_ap(ctx, row_all, m, {{2, N}}) : sb2(ctx, row_all, m, n);
      // This tile's elements, one per partition, as they are (to be scattered) ...
      const isa::AccessPattern own = sb2(ctx, mine[slot], m, per);
      dma(ctx, own, hbm_ap(ctx, x, (r * n + t.begin) * per, {{per, m}, {1, uint32_t(per)}}), detail::kLoadQueue);
      const isa::AccessPattern key = spec.pairs ? sb_ap(ctx, mine[slot], m, {{1, 1}}) : own;
      // ... counted against the row: smaller (larger) elements, and equal ones earlier in the row.
      const isa::AccessPattern lt = sb2(ctx, cmp[slot], m, n), ties = sb2(ctx, eq[slot], m, n);
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", lt)
          .tensor("data", bc)
          .word("op0", spec.descending ? "greater" : "less")
          .tensor("operand0", key);
      ctx.builder.emit(isa::Opcode::tensor_reduce)
          .tensor("dst", sb2(ctx, lt_count[slot], m, 1))
          .word("op", "add")
          .tensor("data", lt)
          .word("axis", "[1]");
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", ties)
          .tensor("data", bc)
          .word("op0", "equal")
          .tensor("operand0", key)
          .on(Engine::gpsimd);
      // Keep j < i: (t.begin + p) - j > 0.
      ctx.builder.emit(isa::Opcode::affine_select)
          .tensor("dst", ties)
          .word("pattern", "[[-1, " + std::to_string(n) + "]]")
          .imm("channel_multiplier", 1)
          .imm("offset", double(t.begin))
          .tensor("on_true_tile", ties)
          .imm("on_false_value", 0)
          .word("cmp_op", "greater");
      ctx.builder.emit(isa::Opcode::tensor_reduce)
          .tensor("dst", sb2(ctx, eq_count[slot], m, 1))
          .word("op", "add")
          .tensor("data", ties)
          .word("axis", "[1]");
      // Destination row r * n + rank (exact: < 2^24).
      const isa::AccessPattern dest = sb2(ctx, rank[slot], m, 1);
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", dest)
          .tensor("data", sb2(ctx, lt_count[slot], m, 1))
          .word("op0", "add")
          .imm("operand0", double(r * n))
          .word("op1", "add")
          .tensor("operand1", sb2(ctx, eq_count[slot], m, 1));
      scatter_sorted(ctx, values, indices, spec.rows * n, per, own, dest, position[slot], m, t.begin);
      ++slot;
    }
  }
  return builder.finish();
}

isa::Program counting_sort_program(const CountingSortSpec& spec, const HardwareConfig& config, uint32_t core,
                                   uint32_t cores) {
  constexpr int64_t kMaxKeys = 512;  // one PSUM bank of fp32 counts per partition
  if (spec.rows < 1 || spec.n < 1 || spec.keys < 1 || spec.keys > kMaxKeys) {
    throw KernelUnsupported("counting_sort: needs rows, n >= 1 and 1 <= keys <= 512");
  }
  if (spec.rows * spec.n >= (int64_t{1} << 24)) throw KernelUnsupported("counting_sort: more than 2^24 elements");
  isa::ProgramBuilder builder("counting_sort", config.generation);
  const uint32_t R = uint32_t(spec.rows), N = uint32_t(spec.n), K = uint32_t(spec.keys);
  const int64_t per = spec.pairs ? 2 : 1, n = spec.n;
  uint32_t x = spec.pairs ? builder.hbm("x", DType::int32, {R, N, 2}, isa::AllocationRole::input)
                          : builder.hbm("x", DType::int32, {R, N}, isa::AllocationRole::input);
  uint32_t values = spec.pairs ? builder.hbm("values", DType::int32, {R * N, 2}, isa::AllocationRole::output)
                               : builder.hbm("values", DType::int32, {R * N, 1}, isa::AllocationRole::output);
  uint32_t indices = builder.hbm("indices", DType::int32, {R * N, 2}, isa::AllocationRole::output);
  KernelContext ctx{builder, config, "", core, cores};
  const uint32_t P = ctx.partitions();
  // Constants: key ids along the free dim, ones, strict[q, p] = 1 where q < p.
  const uint32_t key_ids_i = builder.sbuf("cs_keys_i", DType::int32, {P, K});
  const uint32_t key_ids = builder.sbuf("cs_keys", DType::fp32, {P, K});
  const uint32_t wide = std::max(P, K);
  const uint32_t ones = builder.sbuf("cs_ones", DType::bf16, {P, wide});
  const uint32_t strict = builder.sbuf("cs_strict", DType::bf16, {P, P});
  ctx.builder.emit(isa::Opcode::iota).tensor("dst", sb2(ctx, key_ids_i, P, K))
      .word("pattern", "[[1, " + std::to_string(K) + "]]");
  ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, key_ids, P, K))
      .tensor("src", sb2(ctx, key_ids_i, P, K));
  ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ones, P, wide)).imm("value", 1).on(Engine::gpsimd);
  ctx.builder.emit(isa::Opcode::affine_select)
      .tensor("dst", sb2(ctx, strict, P, P))
      .word("pattern", "[[1, " + std::to_string(P) + "]]")
      .imm("channel_multiplier", -1)
      .imm("offset", 0)
      .tensor("on_true_tile", sb2(ctx, ones, P, P))
      .imm("on_false_value", 0)
      .word("cmp_op", "greater");
  const uint32_t totals = builder.psum("cs_totals", DType::fp32, {P, K});
  const uint32_t before = builder.psum("cs_before", DType::fp32, {P, K});
  const uint32_t start = builder.sbuf("cs_start", DType::fp32, {P, K});
  const uint32_t running = builder.sbuf("cs_running", DType::fp32, {P, K});
  detail::Ring own = detail::make_ring(ctx, "cs_x", DType::int32, per, 2);
  detail::Ring key = detail::make_ring(ctx, "cs_key", DType::fp32, 1, 2);
  detail::Ring onehot = detail::make_ring(ctx, "cs_onehot", DType::bf16, K, 2);
  detail::Ring work = detail::make_ring(ctx, "cs_work", DType::fp32, K, 2);
  detail::Ring dest = detail::make_ring(ctx, "cs_dest", DType::int32, 1, 2);
  detail::Ring position = detail::make_ring(ctx, "cs_pos", DType::int32, 2, 2);
  int64_t slot = 0;
  const std::vector<Range> row_tiles = tiles(n, P);
  // The key of this tile's elements (0 .. K-1; descending: reversed), fp32 [m, 1], and its one-hot row.
  auto load = [&](int64_t r, const Range& t) {
    const uint32_t m = uint32_t(t.size);
    const isa::AccessPattern o = sb2(ctx, own[slot], m, per);
    dma(ctx, o, hbm_ap(ctx, x, (r * n + t.begin) * per, {{per, m}, {1, uint32_t(per)}}), detail::kLoadQueue);
    const isa::AccessPattern low = spec.pairs ? sb_ap(ctx, own[slot], m, {{1, 1}}) : o;
    const isa::AccessPattern k = sb2(ctx, key[slot], m, 1);
    if (spec.descending) {
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", k).tensor("data", low).word("op0", "subtract")
          .imm("operand0", double(spec.key_min + spec.keys - 1)).word("op1", "multiply").imm("operand1", -1.0);
    } else {
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", k).tensor("data", low).word("op0", "subtract").imm(
          "operand0", double(spec.key_min));
    }
    ctx.builder.emit(isa::Opcode::tensor_scalar)
        .tensor("dst", sb2(ctx, onehot[slot], m, K))
        .tensor("data", sb2(ctx, key_ids, m, K))
        .word("op0", "equal")
        .tensor("operand0", k);
    return o;
  };
  const Range mine_rows = ctx.share(spec.rows);
  for (int64_t r = mine_rows.begin; r < mine_rows.begin + mine_rows.size; ++r) {
    // Pass 1: the count of every key, in every partition (PSUM accumulation over the tiles).
    for (size_t i = 0; i < row_tiles.size(); ++i) {
      const uint32_t m = uint32_t(row_tiles[i].size);
      load(r, row_tiles[i]);
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, totals, P, K))
          .tensor("stationary", sb2(ctx, ones, m, P))
          .tensor("moving", sb2(ctx, onehot[slot], m, K))
          .word("accumulate", i == 0 ? "false" : "true");
      ++slot;
    }
    // Where each key's run starts: the exclusive prefix of the counts, plus the row's offset.
    const isa::AccessPattern st = sb2(ctx, start, P, K), tot = sb2(ctx, totals, P, K);
    ctx.builder.emit(isa::Opcode::tensor_tensor_scan)
        .tensor("dst", st)
        .tensor("data0", sb2(ctx, ones, P, K))
        .tensor("data1", tot)
        .imm("initial", 0)
        .word("op0", "multiply")
        .word("op1", "add");
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", st)
        .tensor("data", st)
        .word("op0", "add")
        .imm("operand0", double(r * n))
        .word("op1", "subtract")
        .tensor("operand1", tot);
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, running, P, K)).imm("value", 0);
    // Pass 2: each element's place = start[key] + equal keys before it (this tile, earlier tiles).
    for (size_t i = 0; i < row_tiles.size(); ++i) {
      const Range& t = row_tiles[i];
      const uint32_t m = uint32_t(t.size);
      const isa::AccessPattern o = load(r, t);
      const isa::AccessPattern oh = sb2(ctx, onehot[slot], m, K), w = sb2(ctx, work[slot], m, K);
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, before, m, K))
          .tensor("stationary", sb2(ctx, strict, m, m))
          .tensor("moving", oh)
          .word("accumulate", "false");
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", w).tensor("data1", sb2(ctx, before, m, K)).tensor(
          "data2", sb2(ctx, running, m, K)).word("op", "add");
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", w).tensor("data1", w)
          .tensor("data2", sb2(ctx, start, m, K))
          .word("op", "add");
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", w).tensor("data1", w).tensor("data2", oh).word(
          "op", "multiply");
      const isa::AccessPattern d = sb2(ctx, dest[slot], m, 1);
      ctx.builder.emit(isa::Opcode::tensor_reduce).tensor("dst", d).word("op", "add").tensor("data", w)
          .word("axis", "[1]");
      if (i + 1 < row_tiles.size()) {
        // running += this tile's counts (every partition), for the tiles after it.
        ctx.builder.emit(isa::Opcode::nc_matmul)
            .tensor("dst", sb2(ctx, totals, P, K))
            .tensor("stationary", sb2(ctx, ones, m, P))
            .tensor("moving", oh)
            .word("accumulate", "false");
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", sb2(ctx, running, P, K))
            .tensor("data1", sb2(ctx, running, P, K))
            .tensor("data2", sb2(ctx, totals, P, K))
            .word("op", "add");
      }
      scatter_sorted(ctx, values, indices, spec.rows * n, per, o, d, position[slot], m, t.begin);
      ++slot;
    }
  }
  return builder.finish();
}

}  // namespace trnsim::kernels
