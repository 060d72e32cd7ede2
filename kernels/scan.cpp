// Scans (cumsum / cumprod) and the product over the last dim (see scan.h for the layouts).
#include "kernels/scan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;

namespace {

// Below this many rows, long rows are spread over all partitions (scan: rows of >= kSpreadScanMinCols
// float elements; prod: of >= kSpreadMinCols): with few rows most partitions and DMA engines would
// sit idle. Both bounds are schedule choices.
constexpr int64_t kSpreadMaxRows = 64;
constexpr int64_t kSpreadMinCols = 4 * 128;

void check_shape(const char* kernel, int64_t rows, int64_t cols) {
  if (rows < 1 || cols < 1) {
    throw KernelUnsupported(std::string(kernel) + ": rows and cols must be >= 1, got [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  }
}

// Columns per chunk: ~kTargetDmaBytesPerPartition of input per DMA, bounded by what the rings
// (`bytes_per_column` bytes per column, every ring slot included) leave free in SBUF.
int64_t chunk_columns(const KernelContext& ctx, int64_t cols, DType input_dtype, int64_t bytes_per_column) {
  const int64_t target = detail::kTargetDmaBytesPerPartition / dtype_size_bytes(input_dtype);
  constexpr int64_t kRoundingBytes = 16 * 256;  // granule_ring rounds each of <= 16 slots up to 256 bytes
  const int64_t fits = (detail::sbuf_free_bytes(ctx) - kRoundingBytes) / bytes_per_column;
  if (fits < 1) throw KernelUnsupported("scan: no SBUF left for the kernel's buffers");
  return std::min({cols, target, fits, isa::kMaxApDimSize});
}

// A ring whose slots each cover whole 256-byte dependency granules (sizes rounded up), so that two
// slots never share one: the timing model's dependencies are per granule, and the small per-row
// partials of neighbouring slots would otherwise make the engines writing them wait on each other.
detail::Ring granule_ring(const KernelContext& ctx, const std::string& name, DType dtype, int64_t free, int depth) {
  constexpr int64_t kGranuleBytes = 256;  // sim/base/dependency_tracker: SBUF granule = quadrant x 256 B
  const int64_t per_granule = kGranuleBytes / dtype_size_bytes(dtype);
  detail::align_sbuf_to_granule(ctx, name + "pad");
  return detail::make_ring(ctx, name, dtype, ceil_div(free, per_granule) * per_granule, depth);
}

// Loads alternate two DMA queues: a queue serves its transfers one after another, so the fixed
// start-up and descriptor time of one load overlaps the data of the other queue's load.
int64_t load_queue(size_t step) { return step % 2 == 0 ? detail::kLoadQueue : detail::kConstQueue; }

// Row tiles. Short rows are packed `per_partition` to a partition (partition p of a block takes
// rows row0 + p * per_partition ..., one contiguous stretch of HBM), so a tile moves ~width elements
// per partition instead of one short row: a DMA pays a fixed start-up and one descriptor per
// partition, which bounded a [100000, 7] prod at 2% of the HBM share. The rows left over after
// the packed blocks go in tiles of <= 128 one row per partition. The blocks depend only on the
// shape, so a split across cores (whole blocks per core) leaves every row's arithmetic unchanged.
struct RowBlock {
  int64_t row0, partitions, per_partition;
};
std::vector<RowBlock> row_blocks(int64_t rows, int64_t cols, int64_t width, int64_t P) {
  constexpr int64_t kMinBlocks = 4;  // schedule choice: enough tiles for the loads to run ahead of the compute
  const int64_t k = std::min(width / cols, rows / (P * kMinBlocks));
  std::vector<RowBlock> out;
  int64_t r0 = 0;
  for (; k >= 2 && rows - r0 >= P * k; r0 += P * k) out.push_back({r0, P, k});
  for (const Range& t : tiles(rows - r0, P)) out.push_back({r0 + t.begin, t.size, 1});
  return out;
}

// dst = src rounded to dst's dtype, on the Scalar engine (the Vector engine is the scan's bottleneck).
void emit_cast(const KernelContext& ctx, const isa::AccessPattern& dst, const isa::AccessPattern& src) {
  ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", "copy").tensor("data", src);
}

}  // namespace

// ---- scan ----

namespace {

// Few long rows: a row in one partition scans at 2 Vector cycles per element; spread over 128
// partitions it takes 1/128 of that plus a chain of small instructions per block (~3 us).
// Integer inputs stay on the sequential path: a segment's local sum may leave +-2^24 even where
// every prefix sum (what the caller checks) is inside it. The bound is a schedule choice.
constexpr int64_t kSpreadScanMinCols = 8192;

// The rows spread over the partitions: all of few rows, or the < 64 rows left after the full row
// tiles (a one-row tile of 70000 columns would take as long as the full tile before it).
Range spread_rows(const ScanSpec& spec, int64_t P) {
  if (spec.cols < kSpreadScanMinCols || !dtype_info(spec.input_dtype).is_float) return {spec.rows, 0};
  const int64_t rest = spec.rows < kSpreadMaxRows ? spec.rows : spec.rows % P;
  return rest < kSpreadMaxRows ? Range{spec.rows - rest, rest} : Range{spec.rows, 0};
}

struct ScanRings {
  detail::Ring in, acc, out;  // out == acc for an fp32 output
};

// Row a as blocks of 128 x w consecutive elements (partition q takes the q-th stretch of w) plus a
// [1, cols % 128] tail. Per block: the local scan of each partition (Vector); its last column, the
// partition totals, PE-transposed to one partition and scanned there from the carry into the
// block, so column q + 1 of that [1, 129] buffer is the carry through partition q and columns
// 0..127 are each partition's exclusive prefix; those PE-transposed back and applied to the local
// scans on the Scalar engine (bias for a sum, scale for a product), which also rounds to the output
// dtype. Column 128 carries into the next block. The order of the operations differs from a
// sequential scan (a prefix op a local scan), so values agree with it to fp32 rounding.

void scan_spread(const KernelContext& ctx, const ScanSpec& spec, uint32_t x, uint32_t y, Range rows,
                 const ScanRings& rings, int64_t budget) {
  const int64_t P = ctx.partitions();
  const int64_t per_partition = spec.cols / P, rem = spec.cols % P;
  const bool cast = spec.output_dtype != DType::fp32;
  const int64_t depth = detail::kRingDepth;
  const int64_t width = std::min(per_partition, budget);
  const detail::Ring &in = rings.in, &acc = rings.acc, &out = rings.out;
  detail::Ring carry = granule_ring(ctx, "scan_carry", DType::fp32, P + 1, 2);
  std::vector<uint32_t> totals_t, prefix_t;  // PSUM: the partition totals as a row, the prefixes as a column
  for (int i = 0; i < 2; ++i) {
    totals_t.push_back(ctx.builder.psum(ctx.name("scan_totals" + std::to_string(i)), DType::fp32, {1, uint32_t(P)}));
    prefix_t.push_back(ctx.builder.psum(ctx.name("scan_prefix" + std::to_string(i)), DType::fp32, {uint32_t(P), 1}));
  }
  const bool sum = spec.op == ScanOp::sum;
  const char* op = sum ? "add" : "multiply";
  const double identity = sum ? 0.0 : 1.0;
  struct Step {
    int64_t row;
    Range block;  // per-partition columns [begin, begin + size) of the row's 128 x per_partition body
    bool tail, first;
  };
  std::vector<Step> steps;
  const Range share = ctx.share(rows.size);  // split across cores by rows
  for (int64_t a = rows.begin + share.begin; a < rows.begin + share.begin + share.size; ++a) {
    bool first = true;
    for (const Range& b : tiles(per_partition, width)) {
      steps.push_back({a, b, false, first});
      first = false;
    }
    if (rem > 0) steps.push_back({a, {0, rem}, true, false});
  }
  auto scan = [&](const isa::AccessPattern& dst, const isa::AccessPattern& data) -> isa::InstructionBuilder {
    isa::InstructionBuilder b = ctx.builder.emit(isa::Opcode::tensor_tensor_scan);
    b.tensor("dst", dst).tensor("data0", data).tensor("data1", data).word("op0", op).word("op1", "bypass");
    return b;
  };
  detail::pipelined(
      steps.size(), size_t(depth - 1),
      [&](size_t k) {
        const Step& s = steps[k];
        const int64_t base = s.row * spec.cols;
        if (s.tail) {
          dma(ctx, sb2(ctx, in[int64_t(k)], 1, rem), hbm_ap(ctx, x, base + P * per_partition, {{0, 1}, {1, uint32_t(rem)}}),
              load_queue(k));
        } else {
          dma(ctx, sb2(ctx, in[int64_t(k)], P, s.block.size),
              hbm_ap(ctx, x, base + P * s.block.begin, {{s.block.size, uint32_t(P)}, {1, uint32_t(s.block.size)}}),
              load_queue(k));
        }
      },
      [&](size_t k) {
        const Step& s = steps[k];
        const int64_t base = s.row * spec.cols, w = s.block.size;
        const isa::AccessPattern carry_in = sb2(ctx, carry[int64_t(k) - 1], 1, 1, P);  // the previous block's column 128
        if (s.tail) {
          scan(sb2(ctx, acc[int64_t(k)], 1, rem), sb2(ctx, in[int64_t(k)], 1, rem)).tensor("initial", carry_in);
          if (cast) emit_cast(ctx, sb2(ctx, out[int64_t(k)], 1, rem), sb2(ctx, acc[int64_t(k)], 1, rem));
          dma(ctx, hbm_ap(ctx, y, base + P * per_partition, {{0, 1}, {1, uint32_t(rem)}}), sb2(ctx, out[int64_t(k)], 1, rem),
              detail::kStoreQueue);
          return;
        }
        const isa::AccessPattern local = sb2(ctx, acc[int64_t(k)], P, w);
        scan(local, sb2(ctx, in[int64_t(k)], P, w)).imm("initial", identity);
        const uint32_t c = carry[int64_t(k)], tt = totals_t[k % 2], pt = prefix_t[k % 2];
        if (s.first) {
          ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, c, 1, 1)).imm("value", identity);
        } else {
          ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", sb2(ctx, c, 1, 1)).tensor("src", carry_in);
        }
        ctx.builder.emit(isa::Opcode::nc_transpose)
            .tensor("dst", sb2(ctx, tt, 1, P)).tensor("data", sb2(ctx, acc[int64_t(k)], P, 1, w - 1));
        scan(sb2(ctx, c, 1, P, 1), sb2(ctx, tt, 1, P)).tensor("initial", sb2(ctx, c, 1, 1));
        ctx.builder.emit(isa::Opcode::nc_transpose).tensor("dst", sb2(ctx, pt, P, 1)).tensor("data", sb2(ctx, c, 1, P));
        const isa::AccessPattern result = sb2(ctx, out[int64_t(k)], P, w);
        ctx.builder.emit(isa::Opcode::activation)
            .tensor("dst", result).word("op", "copy").tensor("data", local)
            .tensor(sum ? "bias" : "scale", sb2(ctx, pt, P, 1));
        dma(ctx, hbm_ap(ctx, y, base + P * s.block.begin, {{w, uint32_t(P)}, {1, uint32_t(w)}}), result, detail::kStoreQueue);
      });
}

}  // namespace

void build_scan(const KernelContext& ctx, const ScanSpec& spec, uint32_t x, uint32_t y) {
  check_shape("scan", spec.rows, spec.cols);
  const int64_t P = ctx.partitions();
  const bool cast = spec.output_dtype != DType::fp32;
  const int64_t depth = detail::kRingDepth;
  const int64_t per_column =
      depth * (dtype_size_bytes(spec.input_dtype) + 4 + (cast ? dtype_size_bytes(spec.output_dtype) : 0));
  const int64_t budget = chunk_columns(ctx, isa::kMaxApDimSize, spec.input_dtype, per_column);  // elements per partition
  const int64_t width = std::min(spec.cols, budget);
  const Range spread = spread_rows(spec, P);
  const std::vector<RowBlock> blocks =
      spread.begin > 0 ? row_blocks(spread.begin, spec.cols, budget, P) : std::vector<RowBlock>{};
  const int64_t slot = width * (blocks.empty() ? 1 : blocks.front().per_partition);
  // Both layouts share the rings (the spread rows run after the row tiles).
  ScanRings rings{granule_ring(ctx, "scan_in", spec.input_dtype, slot, depth),
                  granule_ring(ctx, "scan_acc", DType::fp32, slot, depth), {}};
  rings.out = cast ? granule_ring(ctx, "scan_out", spec.output_dtype, slot, depth) : rings.acc;
  const detail::Ring &in = rings.in, &acc = rings.acc, &out = rings.out;
  const char* op = spec.op == ScanOp::sum ? "add" : "multiply";
  const double identity = spec.op == ScanOp::sum ? 0.0 : 1.0;

  struct Chunk {
    RowBlock rows;
    Range cols;  // of each row
  };
  std::vector<Chunk> chunks;
  for (const RowBlock& r : my_share(ctx, blocks)) {  // split across cores by row blocks
    for (const Range& c : tiles(spec.cols, width)) chunks.push_back({r, c});
  }
  // [partitions, per_partition * w] of the chunk's rows in HBM (per_partition > 1: whole rows).
  auto hbm_rows = [&](uint32_t tensor, const Chunk& ch) {
    const int64_t run = ch.rows.per_partition * ch.cols.size;
    return hbm_ap(ctx, tensor, ch.rows.row0 * spec.cols + ch.cols.begin,
                  {{ch.rows.per_partition * spec.cols, uint32_t(ch.rows.partitions)}, {1, uint32_t(run)}});
  };
  detail::pipelined(
      chunks.size(), size_t(depth - 1),
      [&](size_t k) {
        const Chunk& ch = chunks[k];
        dma(ctx, sb2(ctx, in[int64_t(k)], ch.rows.partitions, ch.rows.per_partition * ch.cols.size),
            hbm_rows(x, ch), load_queue(k));
      },
      [&](size_t k) {
        const Chunk& ch = chunks[k];
        const int64_t p = ch.rows.partitions, w = ch.cols.size;
        // One scan per row of the partition, in an order where consecutive scans write different
        // 256-byte dependency granules of acc (rows `stride` apart), so none waits for the one before.
        std::vector<int64_t> order;
        const int64_t n = ch.rows.per_partition, stride = std::min(n, ceil_div(256, 4 * w) + 1);
        for (int64_t phase = 0; phase < stride; ++phase) {
          for (int64_t j = phase; j < n; j += stride) order.push_back(j);
        }
        for (const int64_t j : order) {
          const isa::AccessPattern data = sb2(ctx, in[int64_t(k)], p, w, j * w);
          isa::InstructionBuilder scan = ctx.builder.emit(isa::Opcode::tensor_tensor_scan);
          // (x op carried) bypass x: the second operator passes the first result through unchanged.
          scan.tensor("dst", sb2(ctx, acc[int64_t(k)], p, w, j * w)).tensor("data0", data).tensor("data1", data)
              .word("op0", op).word("op1", "bypass");
          if (ch.cols.begin == 0) {
            // torch starts from the identity too (so a leading -0.0 sums to +0.0, as on the CPU).
            scan.imm("initial", identity);
          } else {
            scan.tensor("initial", sb2(ctx, acc[int64_t(k) - 1], p, 1, width - 1));  // the previous chunk's last column
          }
        }
        const int64_t run = ch.rows.per_partition * w;
        if (cast) emit_cast(ctx, sb2(ctx, out[int64_t(k)], p, run), sb2(ctx, acc[int64_t(k)], p, run));
        dma(ctx, hbm_rows(y, ch), sb2(ctx, out[int64_t(k)], p, run), detail::kStoreQueue);
      });
  if (spread.size > 0) scan_spread(ctx, spec, x, y, spread, rings, budget);
}

isa::Program scan_program(const ScanSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  check_shape("scan", spec.rows, spec.cols);
  isa::ProgramBuilder builder(spec.op == ScanOp::sum ? "cumsum" : "cumprod", config.generation);
  const std::vector<uint32_t> shape{uint32_t(spec.rows), uint32_t(spec.cols)};
  uint32_t x = builder.hbm("x", spec.input_dtype, shape, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.output_dtype, shape, isa::AllocationRole::output);
  build_scan(KernelContext{builder, config, "", core, cores}, spec, x, y);
  return builder.finish();
}

// ---- prod ----

namespace {

// partial[:, 0] = product of data's free elements, on the Vector engine or (odd `slot`) the Scalar
// engine's accumulator (a copy in place), so the two engines share the chunks.
void emit_product(const KernelContext& ctx, const isa::AccessPattern& partial, const isa::AccessPattern& data,
                  int64_t slot) {
  if (slot % 2 == 1) {
    ctx.builder.emit(isa::Opcode::activation_reduce)
        .tensor("dst", data).word("op", "copy").tensor("data", data).word("reduce_op", "multiply")
        .tensor("reduce_res", partial);
  } else {
    ctx.builder.emit(isa::Opcode::tensor_reduce)
        .tensor("dst", partial).word("op", "multiply").tensor("data", data).word("axis", "[1]");
  }
}

// Rows on partitions, chunks of columns; the chunk partials multiplied once per row tile.
void prod_rows(const KernelContext& ctx, const ProdSpec& spec, uint32_t x, uint32_t y) {
  const int64_t P = ctx.partitions();
  const int64_t budget = chunk_columns(ctx, isa::kMaxApDimSize, spec.input_dtype,
                                       detail::kRingDepth * dtype_size_bytes(spec.input_dtype));
  const int64_t width = std::min(spec.cols, budget), chunks = ceil_div(spec.cols, width);
  // Packed tiles reduce on the Vector engine alone (the Scalar accumulator gives one value per
  // partition), which bounds a bf16 product below the DMA rate; only rows short enough that their
  // DMAs would be overhead-bound are packed (the bound a schedule choice).
  constexpr int64_t kPackMaxCols = 512;  // schedule choice
  const std::vector<RowBlock> blocks =
      row_blocks(spec.rows, spec.cols, spec.cols <= kPackMaxCols ? budget : spec.cols, P);
  const int64_t packed = blocks.front().per_partition;  // the most rows per partition
  detail::Ring in = granule_ring(ctx, "prod_in", spec.input_dtype, width * packed, detail::kRingDepth);
  detail::Ring part = granule_ring(ctx, "prod_part", DType::fp32, std::max(chunks, packed), 2);
  detail::Ring fin = granule_ring(ctx, "prod_fin", DType::fp32, 1, 2);
  detail::Ring res = granule_ring(ctx, "prod_res", spec.output_dtype, packed, 2);
  struct Chunk {
    RowBlock rows;
    int64_t tile, chunk;
  };
  std::vector<Chunk> steps;
  int64_t tile = 0;
  for (const RowBlock& r : my_share(ctx, blocks)) {  // split across cores by row blocks
    for (int64_t c = 0; c < chunks; ++c) steps.push_back({r, tile, c});
    ++tile;
  }
  detail::pipelined(
      steps.size(), detail::kRingDepth - 1,
      [&](size_t k) {
        const Chunk& s = steps[k];
        const int64_t c0 = s.chunk * width, w = std::min(width, spec.cols - c0), run = s.rows.per_partition * w;
        dma(ctx, sb2(ctx, in[int64_t(k)], s.rows.partitions, run),
            hbm_ap(ctx, x, s.rows.row0 * spec.cols + c0,
                   {{s.rows.per_partition * spec.cols, uint32_t(s.rows.partitions)}, {1, uint32_t(run)}}),
            load_queue(k));
      },
      [&](size_t k) {
        const Chunk& s = steps[k];
        const int64_t p = s.rows.partitions, c0 = s.chunk * width, w = std::min(width, spec.cols - c0);
        const int64_t n = s.rows.per_partition;  // rows per partition (> 1 only when a row is one chunk)
        if (n > 1) {
          // The tile is [p, n, w]: one product per row, along the innermost view dim.
          ctx.builder.emit(isa::Opcode::tensor_reduce)
              .tensor("dst", sb2(ctx, part[s.tile], p, n)).word("op", "multiply")
              .tensor("data", detail::sb_ap(ctx, in[int64_t(k)], uint32_t(p), {{w, uint32_t(n)}, {1, uint32_t(w)}}))
              .word("axis", "[2]");
        } else {
          emit_product(ctx, sb2(ctx, part[s.tile], p, 1, s.chunk), sb2(ctx, in[int64_t(k)], p, w), int64_t(k));
        }
        if (s.chunk + 1 < chunks) return;
        isa::AccessPattern total = sb2(ctx, part[s.tile], p, n);
        if (chunks > 1) {
          total = sb2(ctx, fin[s.tile], p, 1);
          emit_product(ctx, total, sb2(ctx, part[s.tile], p, chunks), 0);
        }
        const isa::AccessPattern result = sb2(ctx, res[s.tile], p, n);
        ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", result).tensor("src", total);
        dma(ctx, hbm_ap(ctx, y, s.rows.row0, {{n, uint32_t(p)}, {1, uint32_t(n)}}), result, detail::kStoreQueue);
      });
}

// Few long rows: row a as [128, cols/128] (partition q takes a contiguous stretch) + a [1, cols%128]
// tail; each partition's product is folded across partitions by GpSimd once per row.
void prod_spread(const KernelContext& ctx, const ProdSpec& spec, uint32_t x, uint32_t y) {
  const int64_t P = ctx.partitions();
  const int64_t per_partition = spec.cols / P, rem = spec.cols % P;
  const int64_t width = chunk_columns(ctx, per_partition, spec.input_dtype,
                                      detail::kRingDepth * dtype_size_bytes(spec.input_dtype));
  const int64_t chunks = ceil_div(per_partition, width);
  detail::Ring in = granule_ring(ctx, "prod_in", spec.input_dtype, std::max(width, rem), detail::kRingDepth);
  detail::Ring part = granule_ring(ctx, "prod_part", DType::fp32, chunks, 2);
  detail::Ring fin = granule_ring(ctx, "prod_fin", DType::fp32, 1, 2);
  const uint32_t n = uint32_t(spec.rows);
  uint32_t tail = ctx.builder.sbuf(ctx.name("prod_tail"), DType::fp32, {1, n});
  uint32_t acc = ctx.builder.sbuf(ctx.name("prod_acc"), DType::fp32, {1, n});
  uint32_t res = ctx.builder.sbuf(ctx.name("prod_res"), spec.output_dtype, {1, n});
  const Range mine = ctx.share(spec.rows);  // split across cores by rows
  if (mine.size == 0) return;
  struct Step {
    int64_t row, chunk;  // chunk == chunks: the tail
  };
  std::vector<Step> steps;
  for (int64_t a = mine.begin; a < mine.begin + mine.size; ++a) {
    for (int64_t c = 0; c < chunks; ++c) steps.push_back({a, c});
    if (rem > 0) steps.push_back({a, chunks});
  }
  detail::pipelined(
      steps.size(), detail::kRingDepth - 1,
      [&](size_t k) {
        const Step& s = steps[k];
        const int64_t base = s.row * spec.cols;
        if (s.chunk == chunks) {
          dma(ctx, sb2(ctx, in[int64_t(k)], 1, rem), hbm_ap(ctx, x, base + P * per_partition, {{0, 1}, {1, uint32_t(rem)}}),
              load_queue(k));
          return;
        }
        const int64_t c0 = s.chunk * width, w = std::min(width, per_partition - c0);
        dma(ctx, sb2(ctx, in[int64_t(k)], P, w),
            hbm_ap(ctx, x, base + c0, {{per_partition, uint32_t(P)}, {1, uint32_t(w)}}), load_queue(k));
      },
      [&](size_t k) {
        const Step& s = steps[k];
        const isa::AccessPattern row_acc = sb2(ctx, acc, 1, 1, s.row);
        if (s.chunk == chunks) {
          const isa::AccessPattern t = sb2(ctx, tail, 1, 1, s.row);
          emit_product(ctx, t, sb2(ctx, in[int64_t(k)], 1, rem), 0);
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", row_acc).tensor("data1", row_acc).tensor("data2", t).word("op", "multiply");
          return;
        }
        const int64_t c0 = s.chunk * width, w = std::min(width, per_partition - c0);
        emit_product(ctx, sb2(ctx, part[s.row], P, 1, s.chunk), sb2(ctx, in[int64_t(k)], P, w), int64_t(k));
        if (s.chunk + 1 < chunks) return;
        isa::AccessPattern total = sb2(ctx, part[s.row], P, 1);
        if (chunks > 1) {
          total = sb2(ctx, fin[s.row], P, 1);
          emit_product(ctx, total, sb2(ctx, part[s.row], P, chunks), 0);
        }
        ctx.builder.emit(isa::Opcode::tensor_partition_reduce)
            .tensor("dst", row_acc).word("op", "multiply").tensor("data", total);
      });
  const isa::AccessPattern out = sb2(ctx, res, 1, mine.size, mine.begin);
  ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", out).tensor("src", sb2(ctx, acc, 1, mine.size, mine.begin));
  dma(ctx, hbm_ap(ctx, y, mine.begin, {{0, 1}, {1, uint32_t(mine.size)}}), out, detail::kStoreQueue);
}

}  // namespace

void build_prod(const KernelContext& ctx, const ProdSpec& spec, uint32_t x, uint32_t y) {
  check_shape("prod", spec.rows, spec.cols);
  if (spec.rows < kSpreadMaxRows && spec.cols >= kSpreadMinCols) {
    prod_spread(ctx, spec, x, y);
  } else {
    prod_rows(ctx, spec, x, y);
  }
}

isa::Program prod_program(const ProdSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  check_shape("prod", spec.rows, spec.cols);
  isa::ProgramBuilder builder("prod", config.generation);
  uint32_t x = builder.hbm("x", spec.input_dtype, {uint32_t(spec.rows), uint32_t(spec.cols)}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.output_dtype, {uint32_t(spec.rows), 1}, isa::AllocationRole::output);
  build_prod(KernelContext{builder, config, "", core, cores}, spec, x, y);
  return builder.finish();
}

}  // namespace trnsim::kernels
