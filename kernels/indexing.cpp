// Indexing kernels (see indexing.h for the layouts, the int64 index convention and the ordering
// of repeated indices).
#include "kernels/indexing.h"

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

// Elements per partition of a histogram / arange tile: large enough that the per-instruction
// overhead is small against the per-bin passes, small enough for a few ring slots (schedule choices).
constexpr int64_t kHistogramColumns = 2048;
constexpr int64_t kArangeColumns = 4096;
constexpr int64_t kNonzeroColumns = 64;
// Schedule choices: the widest histogram (bins per partition row) and scatter_max rows (targets,
// values per row) the kernels' single-pass SBUF layouts take; wider ones go to the CPU.
constexpr int64_t kMaxHistogramBins = 4096;
constexpr int64_t kMaxScatterTargets = 4096;
constexpr int64_t kMaxScatterPerRow = 8192;

void check_ids(const char* kernel, int64_t num_ids, int64_t rows, int64_t row_elements) {
  if (num_ids < 1 || rows < 1 || row_elements < 1) {
    throw KernelUnsupported(std::string(kernel) + ": ids, rows and row elements must be positive");
  }
  if (rows > int64_t{INT32_MAX}) throw KernelUnsupported(std::string(kernel) + ": more than 2^31 - 1 rows");
}

// Loads ids [r.begin, r.begin + r.size) into `slot` of `ring` and returns the [r.size, 1] int32
// index operand: the id itself, the low word of an int64 pair (the host checked every id is in
// range, so the high word is its sign extension), or the id wrapped into [0, rows) when negative.
isa::AccessPattern load_ids(const KernelContext& ctx, uint32_t ids, IndexWidth width, bool wrap_negative, int64_t rows,
                            const Range& r, uint32_t buffer, uint32_t wrap_mask, uint32_t wrapped, int64_t queue) {
  const uint32_t n = uint32_t(r.size);
  isa::AccessPattern index;
  if (width == IndexWidth::int64) {
    // Both words of each id: one 8-byte run per partition (one descriptor), as the int64 bytes.
    dma(ctx, sb2(ctx, buffer, n, 2), hbm_ap(ctx, ids, 2 * r.begin, {{2, n}, {1, 2}}), queue);
    index = sb_ap(ctx, buffer, n, {{1, 1}});
  } else {
    dma(ctx, sb2(ctx, buffer, n, 1), hbm_ap(ctx, ids, r.begin, {{1, n}, {1, 1}}), queue);
    index = sb2(ctx, buffer, n, 1);
  }
  if (!wrap_negative) return index;
  // id + rows * (id < 0): fp32 arithmetic, exact for |id| <= rows < 2^24 (the lowering's bound).
  if (rows >= (int64_t{1} << 24)) throw KernelUnsupported("negative ids need a table of fewer than 2^24 rows");
  isa::AccessPattern mask = sb2(ctx, wrap_mask, n, 1), out = sb2(ctx, wrapped, n, 1);
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", mask)
      .tensor("data", index)
      .word("op0", "less")
      .imm("operand0", 0)
      .word("op1", "multiply")
      .imm("operand1", double(rows));
  ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", out).tensor("data1", index).tensor("data2", mask).word(
      "op", "add");
  return out;
}

struct IdRings {
  detail::Ring ids, mask, wrapped;
};
IdRings make_id_rings(const KernelContext& ctx, const std::string& name, IndexWidth width) {
  return {detail::make_ring(ctx, name + "_ids", DType::int32, width == IndexWidth::int64 ? 2 : 1),
          detail::make_ring(ctx, name + "_neg", DType::fp32, 1),
          detail::make_ring(ctx, name + "_wrapped", DType::int32, 1)};
}

int64_t row_chunk(DType dtype, int64_t row_elements) {
  const int64_t esize = dtype_size_bytes(dtype);
  return std::max<int64_t>(1, std::min({row_elements, detail::kTargetDmaBytesPerPartition / esize, isa::kMaxApDimSize}));
}

// The loop gather and scatter share: per 128 ids of this core's share, the ids loaded (load_ids),
// then per column chunk of the rows body(ids range, column range, index operand, row tile slot).
template <typename Body>
void for_each_row_chunk(const KernelContext& ctx, const std::string& name, int64_t num_ids, uint32_t ids,
                        IndexWidth width, bool wrap_negative, int64_t rows, DType dtype, int64_t row_elements,
                        Body&& body) {
  const int64_t chunk = row_chunk(dtype, row_elements);
  IdRings id_rings = make_id_rings(ctx, name, width);
  detail::Ring row_tiles = detail::make_ring(ctx, name + "_rows", dtype, chunk);
  int64_t slot = 0, tile = 0;
  for (const Range& r : my_share(ctx, tiles(num_ids, ctx.partitions()))) {
    const isa::AccessPattern index = load_ids(ctx, ids, width, wrap_negative, rows, r, id_rings.ids[tile],
                                              id_rings.mask[tile], id_rings.wrapped[tile], detail::kConstQueue);
    ++tile;
    for (const Range& col : tiles(row_elements, chunk)) {
      body(r, col, index, row_tiles[slot], slot);
      ++slot;
    }
  }
}

// The ids input of gather_rows / scatter_rows: [n] int32, or [n, 2] int32 pairs for int64 ids.
uint32_t ids_input(isa::ProgramBuilder& builder, IndexWidth width, uint32_t n) {
  return width == IndexWidth::int64 ? builder.hbm("ids", DType::int32, {n, 2}, isa::AllocationRole::input)
                                    : builder.hbm("ids", DType::int32, {n}, isa::AllocationRole::input);
}

}  // namespace

// ---- gather ----

void build_gather_rows(const KernelContext& ctx, const GatherRowsSpec& spec, uint32_t ids, uint32_t table, uint32_t y) {
  check_ids("gather_rows", spec.num_ids, spec.rows, spec.row_elements);
  const int64_t D = spec.row_elements;
  for_each_row_chunk(ctx, "gather", spec.num_ids, ids, spec.index, spec.wrap_negative, spec.rows, spec.dtype, D,
                     [&](const Range& r, const Range& c, const isa::AccessPattern& index, uint32_t buffer,
                         int64_t slot) {
                       const isa::AccessPattern dst = sb2(ctx, buffer, r.size, c.size);
                       // Gathers alternate between two queues, so one's descriptor generation overlaps
                       // the other's transfer (as the embedding kernel does).
                       ctx.builder.emit(isa::Opcode::dma_gather)
                           .tensor("dst", dst)
                           .tensor("src", hbm_ap(ctx, table, c.begin, {{D, uint32_t(spec.rows)}, {1, uint32_t(c.size)}}))
                           .tensor("indices", index)
                           .imm("queue", double(detail::kLoadQueue + (slot % 2) * 3));
                       dma(ctx, hbm_ap(ctx, y, r.begin * D + c.begin, {{D, uint32_t(r.size)}, {1, uint32_t(c.size)}}),
                           dst, detail::kStoreQueue);
                     });
}

isa::Program gather_rows_program(const GatherRowsSpec& spec, const HardwareConfig& config, uint32_t core,
                                 uint32_t cores) {
  isa::ProgramBuilder builder("gather_rows", config.generation);
  const uint32_t n = uint32_t(spec.num_ids);
  const uint32_t ids = ids_input(builder, spec.index, n);
  uint32_t table = builder.hbm("table", spec.dtype, {uint32_t(spec.rows), uint32_t(spec.row_elements)},
                               isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, {n, uint32_t(spec.row_elements)}, isa::AllocationRole::output);
  build_gather_rows(KernelContext{builder, config, "", core, cores}, spec, ids, table, y);
  return builder.finish();
}

// ---- scatter ----

void build_scatter_rows(const KernelContext& ctx, const ScatterRowsSpec& spec, uint32_t ids, uint32_t src, uint32_t y) {
  check_ids("scatter_rows", spec.num_ids, spec.rows, spec.row_elements);
  if (spec.accumulate && spec.dtype != DType::fp32 && spec.dtype != DType::bf16) {
    throw KernelUnsupported("scatter_rows: accumulation (read-add-write DMA) takes fp32 or bf16");
  }
  auto build = [&](const KernelContext& c) {
    const int64_t D = spec.row_elements;
    for_each_row_chunk(
        c, "scatter", spec.num_ids, ids, spec.index, spec.wrap_negative, spec.rows, spec.dtype, D,
        [&](const Range& r, const Range& col, const isa::AccessPattern& index, uint32_t buffer, int64_t) {
          const isa::AccessPattern row_tile = sb2(c, buffer, r.size, col.size);
          dma(c, row_tile, hbm_ap(c, src, r.begin * D + col.begin, {{D, uint32_t(r.size)}, {1, uint32_t(col.size)}}),
              detail::kLoadQueue);
          // Every scatter on one queue: a queue runs in program order, so rows land in id order.
          c.builder.emit(isa::Opcode::dma_scatter)
              .tensor("dst", hbm_ap(c, y, col.begin, {{D, uint32_t(spec.rows)}, {1, uint32_t(col.size)}}))
              .tensor("src", row_tile)
              .tensor("indices", index)
              .word("dst_rmw_op", spec.accumulate ? "add" : "none")
              .imm("queue", double(detail::kStoreQueue));
        });
  };
  if (spec.unique_ids) {
    build(ctx);
  } else {
    on_first_core(ctx, build);  // repeated ids: one core keeps their order
  }
}

isa::Program scatter_rows_program(const ScatterRowsSpec& spec, const HardwareConfig& config, uint32_t core,
                                  uint32_t cores) {
  isa::ProgramBuilder builder("scatter_rows", config.generation);
  const uint32_t n = uint32_t(spec.num_ids), d = uint32_t(spec.row_elements);
  const uint32_t ids = ids_input(builder, spec.index, n);
  uint32_t src = builder.hbm("src", spec.dtype, {n, d}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, {uint32_t(spec.rows), d}, isa::AllocationRole::output);
  build_scatter_rows(KernelContext{builder, config, "", core, cores}, spec, ids, src, y);
  return builder.finish();
}

// ---- histogram ----

void build_histogram(const KernelContext& ctx, const HistogramSpec& spec, uint32_t x, uint32_t weights, uint32_t y) {
  if (spec.n < 1 || spec.bins < 1) throw KernelUnsupported("histogram: n and bins must be positive");
  if (spec.bins > kMaxHistogramBins) throw KernelUnsupported("histogram: more than " + std::to_string(kMaxHistogramBins) + " bins");
  if (spec.mode == HistogramMode::histc && !(spec.min < spec.max)) {
    throw KernelUnsupported("histogram: histc needs min < max");
  }
  on_first_core(ctx, [&](const KernelContext& c) {
    const int64_t P = c.partitions(), B = spec.bins;
    const int64_t w = std::clamp<int64_t>(ceil_div(spec.n, P), 1, kHistogramColumns);
    const bool pairs = spec.input_width == IndexWidth::int64;
    const DType in_dtype = pairs ? DType::int32 : spec.input_dtype;
    detail::Ring xs = detail::make_ring(c, "hist_x", in_dtype, pairs ? 2 * w : w, 2);
    detail::Ring ws = detail::make_ring(c, "hist_w", DType::fp32, w, 2);
    const uint32_t pos = c.builder.sbuf(c.name("hist_pos"), DType::fp32, {uint32_t(P), uint32_t(w)});
    const uint32_t tmp = c.builder.sbuf(c.name("hist_tmp"), DType::fp32, {uint32_t(P), uint32_t(w)});
    detail::Ring eq = detail::make_ring(c, "hist_eq", DType::fp32, w, 2);
    const uint32_t counts = c.builder.sbuf(c.name("hist_counts"), DType::fp32, {uint32_t(P), uint32_t(B)});
    const uint32_t acc = c.builder.sbuf(c.name("hist_acc"), DType::fp32, {uint32_t(P), uint32_t(B)});
    const uint32_t total = c.builder.sbuf(c.name("hist_total"), DType::fp32, {1, uint32_t(B)});
    const uint32_t out = c.builder.sbuf(c.name("hist_out"), spec.output_pairs ? DType::int32 : spec.output_dtype,
                                        {1, uint32_t(spec.output_pairs ? 2 * B : B)});
    c.builder.emit(isa::Opcode::memset).tensor("dst", sb2(c, acc, P, B)).imm("value", 0);

    // Row tiles of w elements, then the remainder as one short row.
    const int64_t full_rows = spec.n / w, rem = spec.n % w;
    struct Tile {
      int64_t first_element, rows, cols;
    };
    std::vector<Tile> work;
    for (const Range& r : tiles(full_rows, P)) work.push_back({r.begin * w, r.size, w});
    if (rem > 0) work.push_back({full_rows * w, 1, rem});
    int64_t slot = 0, bin_pass = 0;
    for (const Tile& t : work) {
      const uint32_t rows = uint32_t(t.rows), cols = uint32_t(t.cols);
      isa::AccessPattern xv;
      if (pairs) {
        dma(c, sb2(c, xs[slot], rows, 2 * cols), hbm_ap(c, x, 2 * t.first_element, {{2 * t.cols, rows}, {1, 2 * cols}}),
            detail::kLoadQueue);
        xv = sb_ap(c, xs[slot], rows, {{2, cols}});  // the low words
      } else {
        dma(c, sb2(c, xs[slot], rows, cols), hbm_ap(c, x, t.first_element, {{t.cols, rows}, {1, cols}}),
            detail::kLoadQueue);
        xv = sb2(c, xs[slot], rows, cols);
      }
      isa::AccessPattern wv;
      if (spec.weighted) {
        wv = sb2(c, ws[slot], rows, cols);
        dma(c, wv, hbm_ap(c, weights, t.first_element, {{t.cols, rows}, {1, cols}}), detail::kConstQueue);
      }
      const isa::AccessPattern p = sb2(c, pos, rows, cols), q = sb2(c, tmp, rows, cols);
      if (spec.mode == HistogramMode::bincount) {
        c.builder.emit(isa::Opcode::tensor_copy).tensor("dst", p).tensor("src", xv);
      } else {
        // torch's CPU histc: (x - min) * bins / (max - min) in the input's fp32, truncated toward 0
        // (t >= 0 here: t - mod(t, 1)), x == max into the last bin, x outside [min, max] (and NaN) to
        // bin -1, which no bin matches.
        const double lo = float(spec.min), hi = float(spec.max), width = float(float(spec.max) - float(spec.min));
        c.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", p)
            .tensor("data", xv)
            .word("op0", "subtract")
            .imm("operand0", lo)
            .word("op1", "multiply")
            .imm("operand1", double(B));
        c.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", p).tensor("data", p).word("op0", "divide").imm(
            "operand0", width);
        c.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", q).tensor("data", p).word("op0", "mod").imm(
            "operand0", 1.0);
        c.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", p).tensor("data1", p).tensor("data2", q).word(
            "op", "subtract");
        // Bins numbered from 1 (pos + 1, x == max clamped into bin B), times the in-range masks:
        // out of range becomes 0, which no bin matches (NaN stays NaN, which matches none either).
        c.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", p)
            .tensor("data", p)
            .word("op0", "add")
            .imm("operand0", 1.0)
            .word("op1", "minimum")
            .imm("operand1", double(B));
        for (const char* cmp : {"greater_equal", "less_equal"}) {
          c.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", q).tensor("data", xv).word("op0", cmp).imm(
              "operand0", std::string(cmp) == "greater_equal" ? lo : hi);
          c.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", p).tensor("data1", p).tensor("data2", q).word(
              "op", "multiply");
        }
      }
      for (int64_t b = 0; b < B; ++b, ++bin_pass) {
        const isa::AccessPattern e = sb2(c, eq[bin_pass], rows, cols);
        if (spec.weighted) {
          c.builder.emit(isa::Opcode::scalar_tensor_tensor)
              .tensor("dst", e)
              .tensor("data", p)
              .word("op0", "equal")
              .imm("operand0", double(spec.mode == HistogramMode::histc ? b + 1 : b))
              .word("op1", "multiply")
              .tensor("operand1", wv);
        } else {
          c.builder.emit(isa::Opcode::tensor_scalar)
              .tensor("dst", e)
              .tensor("data", p)
              .word("op0", "equal")
              .imm("operand0", double(spec.mode == HistogramMode::histc ? b + 1 : b))
              .on(Engine::gpsimd);
        }
        c.builder.emit(isa::Opcode::tensor_reduce)
            .tensor("dst", sb_ap(c, counts, rows, {{1, 1}}, b))
            .word("op", "add")
            .tensor("data", e)
            .word("axis", "[1]");
      }
      c.builder.emit(isa::Opcode::tensor_tensor)
          .tensor("dst", sb2(c, acc, rows, B))
          .tensor("data1", sb2(c, acc, rows, B))
          .tensor("data2", sb2(c, counts, rows, B))
          .word("op", "add");
      ++slot;
    }
    // Counts are integers below 2^24 in fp32 (exact); weighted sums are fp32 in this order.
    c.builder.emit(isa::Opcode::tensor_partition_reduce)
        .tensor("dst", sb2(c, total, 1, B))
        .word("op", "add")
        .tensor("data", sb2(c, acc, P, B));
    if (spec.output_pairs) {
      c.builder.emit(isa::Opcode::memset).tensor("dst", sb2(c, out, 1, 2 * B)).imm("value", 0).on(Engine::gpsimd);
      c.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb_ap(c, out, 1, {{2, uint32_t(B)}})).tensor(
          "src", sb2(c, total, 1, B));
      dma(c, hbm_ap(c, y, 0, {{2 * B, 1}, {1, uint32_t(2 * B)}}), sb2(c, out, 1, 2 * B), detail::kStoreQueue);
    } else {
      c.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(c, out, 1, B)).tensor("src", sb2(c, total, 1, B));
      dma(c, hbm_ap(c, y, 0, {{B, 1}, {1, uint32_t(B)}}), sb2(c, out, 1, B), detail::kStoreQueue);
    }
  });
}

isa::Program histogram_program(const HistogramSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("histogram", config.generation);
  const uint32_t n = uint32_t(spec.n), bins = uint32_t(spec.bins);
  uint32_t x = spec.input_width == IndexWidth::int64
                   ? builder.hbm("x", DType::int32, {n, 2}, isa::AllocationRole::input)
                   : builder.hbm("x", spec.input_dtype, {n}, isa::AllocationRole::input);
  uint32_t weights = spec.weighted ? builder.hbm("weights", DType::fp32, {n}, isa::AllocationRole::input) : 0;
  uint32_t y = spec.output_pairs ? builder.hbm("y", DType::int32, {bins, 2}, isa::AllocationRole::output)
                                 : builder.hbm("y", spec.output_dtype, {bins}, isa::AllocationRole::output);
  build_histogram(KernelContext{builder, config, "", core, cores}, spec, x, weights, y);
  return builder.finish();
}

// ---- arange ----

isa::Program arange_program(const ArangeSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  if (spec.n < 1) throw KernelUnsupported("arange: n must be positive");
  const int64_t last = spec.start + spec.step * (spec.n - 1);
  if (std::max(std::llabs(spec.start), std::llabs(last)) > int64_t{INT32_MAX}) {
    throw KernelUnsupported("arange: values beyond int32 (iota's range)");
  }
  isa::ProgramBuilder builder("arange", config.generation);
  const uint32_t n = uint32_t(spec.n);
  uint32_t y = spec.pairs ? builder.hbm("y", DType::int32, {n, 2}, isa::AllocationRole::output)
                          : builder.hbm("y", spec.dtype, {n}, isa::AllocationRole::output);
  KernelContext ctx{builder, config, "", core, cores};
  const int64_t P = ctx.partitions();
  const int64_t w = std::clamp<int64_t>(ceil_div(spec.n, P), 1, kArangeColumns);
  const int64_t per = spec.pairs ? 2 : 1;
  detail::Ring ints = detail::make_ring(ctx, "arange_i", DType::int32, per * w, 2);
  detail::Ring floats = detail::make_ring(ctx, "arange_f", DType::fp32, w, 2);
  const int64_t full_rows = spec.n / w, rem = spec.n % w;
  std::vector<std::pair<int64_t, int64_t>> work;  // (first row, rows) of width w, then the remainder
  for (const Range& r : my_share(ctx, tiles(full_rows, P))) work.push_back({r.begin, r.size});
  int64_t slot = 0;
  auto emit_tile = [&](int64_t first, int64_t rows, int64_t cols) {
    const uint32_t R = uint32_t(rows), C = uint32_t(cols);
    isa::AccessPattern lo = spec.pairs ? sb_ap(ctx, ints[slot], R, {{2, C}}) : sb2(ctx, ints[slot], rows, cols);
    ctx.builder.emit(isa::Opcode::iota)
        .tensor("dst", lo)
        .word("pattern", "[[" + std::to_string(spec.step) + ", " + std::to_string(cols) + "]]")
        .imm("offset", double(spec.start + spec.step * first))
        .imm("channel_multiplier", double(spec.step * cols));
    if (spec.pairs) {
      // The sign-extension word: -1 for negative values, else 0.
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", sb_ap(ctx, ints[slot], R, {{2, C}}, 1))
          .tensor("data", lo)
          .word("op0", "less")
          .imm("operand0", 0)
          .word("op1", "multiply")
          .imm("operand1", -1.0);
      dma(ctx, hbm_ap(ctx, y, 2 * first, {{2 * cols, R}, {1, 2 * C}}), sb2(ctx, ints[slot], rows, 2 * cols),
          detail::kStoreQueue);
    } else if (spec.dtype == DType::int32) {
      dma(ctx, hbm_ap(ctx, y, first, {{cols, R}, {1, C}}), lo, detail::kStoreQueue);
    } else {
      isa::AccessPattern f = sb2(ctx, floats[slot], rows, cols);
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", f).tensor("src", lo);
      dma(ctx, hbm_ap(ctx, y, first, {{cols, R}, {1, C}}), f, detail::kStoreQueue);
    }
    ++slot;
  };
  for (const auto& [row, rows] : work) emit_tile(row * w, rows, w);
  if (rem > 0 && ctx.core == cores - 1) emit_tile(full_rows * w, 1, rem);
  return builder.finish();
}

// ---- scatter_reduce amax / amin ----

isa::Program scatter_max_program(const ScatterMaxSpec& spec, const HardwareConfig& config, uint32_t core,
                                 uint32_t cores) {
  if (spec.rows < 1 || spec.targets < 1 || spec.per_row < 1) throw KernelUnsupported("scatter_max: empty");
  if (spec.targets > kMaxScatterTargets || spec.per_row > kMaxScatterPerRow) throw KernelUnsupported("scatter_max: rows too long");
  isa::ProgramBuilder builder("scatter_max", config.generation);
  const uint32_t R = uint32_t(spec.rows), S = uint32_t(spec.targets), J = uint32_t(spec.per_row);
  uint32_t self = builder.hbm("self", spec.dtype, {R, S}, isa::AllocationRole::input);
  uint32_t index = builder.hbm("index", DType::int32, {R, J, 2}, isa::AllocationRole::input);
  uint32_t src = builder.hbm("src", spec.dtype, {R, J}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, {R, S}, isa::AllocationRole::output);
  KernelContext ctx{builder, config, "", core, cores};
  const char* op = spec.maximum ? "maximum" : "minimum";
  const double inf = std::numeric_limits<double>::infinity();
  const double identity = spec.maximum ? -inf : inf;
  detail::Ring idx = detail::make_ring(ctx, "smax_idx", DType::int32, 2 * spec.per_row, 2);
  detail::Ring vals = detail::make_ring(ctx, "smax_src", spec.dtype, spec.per_row, 2);
  detail::Ring base = detail::make_ring(ctx, "smax_self", spec.dtype, spec.targets, 2);
  detail::Ring pred = detail::make_ring(ctx, "smax_pred", DType::fp32, spec.per_row, 2);
  detail::Ring picked = detail::make_ring(ctx, "smax_pick", DType::fp32, spec.per_row, 2);
  const uint32_t res = builder.sbuf("smax_res", DType::fp32, {ctx.partitions(), S});
  const uint32_t hits = builder.sbuf("smax_hits", DType::fp32, {ctx.partitions(), S});
  int64_t slot = 0, pass = 0;
  for (const Range& r : my_share(ctx, tiles(spec.rows, ctx.partitions()))) {
    const uint32_t m = uint32_t(r.size);
    dma(ctx, sb2(ctx, idx[slot], m, 2 * J), hbm_ap(ctx, index, 2 * r.begin * J, {{2 * J, m}, {1, 2 * J}}),
        detail::kConstQueue);
    dma(ctx, sb2(ctx, vals[slot], m, J), hbm_ap(ctx, src, r.begin * J, {{J, m}, {1, J}}), detail::kLoadQueue);
    const isa::AccessPattern own = sb2(ctx, base[slot], m, S);
    dma(ctx, own, hbm_ap(ctx, self, r.begin * S, {{S, m}, {1, S}}), detail::kLoadQueue);
    const isa::AccessPattern low = sb_ap(ctx, idx[slot], m, {{2, J}});  // the low words (ids < 2^24: exact)
    for (int64_t t = 0; t < spec.targets; ++t, ++pass) {
      const isa::AccessPattern p = sb2(ctx, pred[pass], m, J);
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", p).tensor("data", low).word("op0", "equal").imm(
          "operand0", double(t)).on(Engine::gpsimd);
      ctx.builder.emit(isa::Opcode::select_reduce)
          .tensor("dst", sb2(ctx, picked[pass], m, J))
          .tensor("predicate", p)
          .tensor("on_true", sb2(ctx, vals[slot], m, J))
          .imm("on_false", identity)
          .word("reduce_op", op)
          .tensor("reduce_res", sb_ap(ctx, res, m, {{1, 1}}, t));
      if (!spec.include_self) {
        ctx.builder.emit(isa::Opcode::tensor_reduce)
            .tensor("dst", sb_ap(ctx, hits, m, {{1, 1}}, t))
            .word("op", "add")
            .tensor("data", p)
            .word("axis", "[1]");
      }
    }
    if (spec.include_self) {
      // Untouched targets reduce to the identity, which leaves self as it is.
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", own).tensor("data1", own).tensor(
          "data2", sb2(ctx, res, m, S)).word("op", op);
    } else {
      ctx.builder.emit(isa::Opcode::tensor_copy_predicated)
          .tensor("dst", own)
          .tensor("src", sb2(ctx, res, m, S))
          .tensor("predicate", sb2(ctx, hits, m, S));
    }
    dma(ctx, hbm_ap(ctx, y, r.begin * S, {{S, m}, {1, S}}), own, detail::kStoreQueue);
    ++slot;
  }
  return builder.finish();
}

// ---- nonzero ----

isa::Program nonzero_program(const NonzeroSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  const int64_t nd = std::max<int64_t>(1, int64_t(spec.shape.size()));
  if (n < 1 || n >= (int64_t{1} << 24)) throw KernelUnsupported("nonzero: needs 1 <= n < 2^24 elements");
  if (spec.nonzeros < 0 || spec.nonzeros > n) throw KernelUnsupported("nonzero: count out of range");
  isa::ProgramBuilder builder("nonzero", config.generation);
  const int64_t per = spec.pairs ? 2 : 1;
  const DType in_dtype = spec.pairs ? DType::int32 : spec.dtype;
  uint32_t x = builder.hbm("x", in_dtype, {uint32_t(n), uint32_t(per)}, isa::AllocationRole::input);
  const uint32_t out_rows = uint32_t(spec.nonzeros + 1);
  uint32_t y = builder.hbm("y", DType::int32, {out_rows, uint32_t(2 * nd)}, isa::AllocationRole::output);
  KernelContext whole{builder, config, "", core, cores};
  on_first_core(whole, [&](const KernelContext& ctx) {
    const uint32_t P = ctx.partitions();
    // Elements per partition of a tile: the per-instruction overheads spread over w elements; each
    // column is one scatter of up to 128 rows.
    const int64_t w = std::clamp<int64_t>(ceil_div(n, P), 1, kNonzeroColumns);
    const uint32_t W = uint32_t(w);
    // fp32 constants (the counts reach w * 128, beyond bf16's exact integers): ones, strict[q, p] = 1 where q < p.
    const uint32_t ones = builder.sbuf(ctx.name("nz_ones"), DType::fp32, {P, std::max(P, W)});
    const uint32_t strict = builder.sbuf(ctx.name("nz_strict"), DType::fp32, {P, P});
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ones, P, std::max(P, W))).imm("value", 1).on(
        Engine::gpsimd);
    ctx.builder.emit(isa::Opcode::affine_select)
        .tensor("dst", sb2(ctx, strict, P, P))
        .word("pattern", "[[1, " + std::to_string(P) + "]]")
        .imm("channel_multiplier", -1)
        .imm("offset", 0)
        .tensor("on_true_tile", sb2(ctx, ones, P, P))
        .imm("on_false_value", 0)
        .word("cmp_op", "greater");
    // Rows are numbered from -1 - nonzeros: pos - nonzeros, so pos * mask + nonzeros sends zeros to the spare row.
    const uint32_t running = builder.sbuf(ctx.name("nz_running"), DType::fp32, {P, 1});
    ctx.builder.emit(isa::Opcode::memset)
        .tensor("dst", sb2(ctx, running, P, 1))
        .imm("value", -1.0 - double(spec.nonzeros));
    detail::Ring xs = detail::make_ring(ctx, "nz_x", in_dtype, per * w, 2);
    detail::Ring mask = detail::make_ring(ctx, "nz_mask", DType::fp32, w, 2);
    detail::Ring scan = detail::make_ring(ctx, "nz_scan", DType::fp32, w, 2);
    detail::Ring flat = detail::make_ring(ctx, "nz_flat", DType::fp32, w, 2);
    detail::Ring tmp = detail::make_ring(ctx, "nz_tmp", DType::fp32, w, 2);
    detail::Ring offset = detail::make_ring(ctx, "nz_offset", DType::fp32, 1, 2);
    detail::Ring dest = detail::make_ring(ctx, "nz_dest", DType::int32, w, 2);
    detail::Ring iota_i = detail::make_ring(ctx, "nz_iota", DType::int32, w, 2);
    detail::Ring coords = detail::make_ring(ctx, "nz_coords", DType::int32, 2 * nd * w, 2);
    const uint32_t prefix = builder.psum(ctx.name("nz_prefix"), DType::fp32, {P, 1});
    const uint32_t total = builder.psum(ctx.name("nz_total"), DType::fp32, {P, 1});
    std::vector<int64_t> stride(size_t(nd), 1), size(size_t(nd), 1);
    for (int64_t d = 0; d < int64_t(spec.shape.size()); ++d) size[size_t(d)] = spec.shape[size_t(d)];
    for (int64_t d = nd - 1; d > 0; --d) stride[size_t(d - 1)] = stride[size_t(d)] * size[size_t(d)];
    struct Tile {
      int64_t first, rows, cols;
    };
    std::vector<Tile> work;
    for (const Range& r : tiles(n / w, P)) work.push_back({r.begin * w, r.size, w});
    if (n % w) work.push_back({n / w * w, 1, n % w});
    int64_t slot = 0;
    for (const Tile& t : work) {
      const uint32_t m = uint32_t(t.rows), c = uint32_t(t.cols);
      dma(ctx, sb2(ctx, xs[slot], m, per * c),
          hbm_ap(ctx, x, t.first * per, {{per * t.cols, m}, {1, uint32_t(per * c)}}), detail::kLoadQueue);
      const isa::AccessPattern mk = sb2(ctx, mask[slot], m, c), tv = sb2(ctx, tmp[slot], m, c);
      if (spec.pairs) {
        // Nonzero when either word is: (lo != 0) max (hi != 0).
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", tv)
            .tensor("data", sb_ap(ctx, xs[slot], m, {{2, c}}, 1))
            .word("op0", "not_equal")
            .imm("operand0", 0);
        ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
            .tensor("dst", mk)
            .tensor("data", sb_ap(ctx, xs[slot], m, {{2, c}}))
            .word("op0", "not_equal")
            .imm("operand0", 0)
            .word("op1", "maximum")
            .tensor("operand1", tv);
      } else {
        // x != 0 in fp32: NaN counts as nonzero, -0 as zero (as torch).
        ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", mk).tensor("data", sb2(ctx, xs[slot], m, c))
            .word("op0", "not_equal").imm("operand0", 0);
      }
      // Inclusive count along each partition, then the partitions before (strict matmul) and the tiles before.
      const isa::AccessPattern cs = sb2(ctx, scan[slot], m, c);
      ctx.builder.emit(isa::Opcode::tensor_tensor_scan)
          .tensor("dst", cs)
          .tensor("data0", sb2(ctx, ones, m, c))
          .tensor("data1", mk)
          .imm("initial", 0)
          .word("op0", "multiply")
          .word("op1", "add");
      const isa::AccessPattern row_total = sb_ap(ctx, scan[slot], m, {{1, 1}}, c - 1);
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, prefix, m, 1))
          .tensor("stationary", sb2(ctx, strict, m, m))
          .tensor("moving", row_total)
          .word("accumulate", "false");
      ctx.builder.emit(isa::Opcode::nc_matmul)
          .tensor("dst", sb2(ctx, total, P, 1))
          .tensor("stationary", sb2(ctx, ones, m, P))
          .tensor("moving", row_total)
          .word("accumulate", "false");
      const isa::AccessPattern off = sb2(ctx, offset[slot], m, 1);
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", off).tensor("data1", sb2(ctx, prefix, m, 1))
          .tensor("data2", sb2(ctx, running, m, 1)).word("op", "add");
      ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", sb2(ctx, running, P, 1))
          .tensor("data1", sb2(ctx, running, P, 1)).tensor("data2", sb2(ctx, total, P, 1)).word("op", "add");
      // Output row: (count + offset) * mask + nonzeros.
      ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
          .tensor("dst", tv)
          .tensor("data", cs)
          .word("op0", "add")
          .tensor("operand0", off)
          .word("op1", "multiply")
          .tensor("operand1", mk);
      const isa::AccessPattern dv = sb2(ctx, dest[slot], m, c);
      ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", dv).tensor("data", tv).word("op0", "add")
          .imm("operand0", double(spec.nonzeros));
      // Coordinates of flat position l: (l - l mod stride) / stride, mod size (exact below 2^24).
      const isa::AccessPattern lv = sb2(ctx, flat[slot], m, c);
      ctx.builder.emit(isa::Opcode::iota)
          .tensor("dst", sb2(ctx, iota_i[slot], m, c))
          .word("pattern", "[[1, " + std::to_string(c) + "]]")
          .imm("offset", double(t.first))
          .imm("channel_multiplier", double(t.cols));
      ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", lv).tensor("src", sb2(ctx, iota_i[slot], m, c));
      ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, coords[slot], m, 2 * nd * c)).imm("value", 0)
          .on(Engine::gpsimd);
      for (int64_t d = 0; d < nd; ++d) {
        const isa::AccessPattern cd = sb_ap(ctx, coords[slot], m, {{2 * nd, c}}, 2 * d);
        ctx.builder.emit(isa::Opcode::tensor_scalar).tensor("dst", tv).tensor("data", lv).word("op0", "mod")
            .imm("operand0", double(stride[size_t(d)]));
        ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", tv).tensor("data1", lv).tensor("data2", tv)
            .word("op", "subtract");
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", cd)
            .tensor("data", tv)
            .word("op0", "divide")
            .imm("operand0", double(stride[size_t(d)]))
            .word("op1", "mod")
            .imm("operand1", double(size[size_t(d)]));
      }
      // One scatter per column: partition p's element of that column to its output row.
      for (uint32_t i = 0; i < c; ++i) {
        ctx.builder.emit(isa::Opcode::dma_scatter)
            .tensor("dst", hbm_ap(ctx, y, 0, {{2 * nd, out_rows}, {1, uint32_t(2 * nd)}}))
            .tensor("src", sb_ap(ctx, coords[slot], m, {{1, uint32_t(2 * nd)}}, int64_t(i) * 2 * nd))
            .tensor("indices", sb_ap(ctx, dest[slot], m, {{1, 1}}, i))
            .imm("queue", double(detail::kStoreQueue));
      }
      ++slot;
    }
  });
  return builder.finish();
}

}  // namespace trnsim::kernels
