// Reductions and argmax / argmin (see reduction.h for the layouts and engine choices).
#include "kernels/reduction.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "kernels/data_movement.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {

constexpr int64_t kSpreadMaxRows = 64;  // below this many output rows a long row is spread over all partitions

std::vector<int64_t> normalized_dims(const ReduceSpec& spec) {
  std::set<int64_t> dims;
  const int64_t n = int64_t(spec.shape.size());
  for (int64_t d : spec.dims) {
    int64_t k = d < 0 ? d + n : d;
    if (k < 0 || k >= n) throw KernelUnsupported("reduce: dim " + std::to_string(d) + " out of range");
    dims.insert(k);
  }
  if (dims.empty()) throw KernelUnsupported("reduce: no dim to reduce");
  return {dims.begin(), dims.end()};
}

bool is_arg(ReduceOp op) { return op == ReduceOp::argmax || op == ReduceOp::argmin; }

const char* alu_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::max: return "maximum";
    case ReduceOp::min: return "minimum";
    default: return "add";
  }
}

// A load-ahead pipeline over a ring: step i's load fills ring slot i, its compute runs
// kRingDepth - 1 steps later in program order (a DMA queue serves transfers in program order).
struct Step {
  std::function<void(uint32_t)> load, compute;
};
void run_steps(const detail::Ring& ring, const std::vector<Step>& steps) {
  detail::pipelined(
      steps.size(), detail::kRingDepth - 1, [&](size_t i) { steps[i].load(ring[int64_t(i)]); },
      [&](size_t i) { steps[i].compute(ring[int64_t(i)]); });
}

struct Pass {
  uint32_t in, out;
  DType in_dtype, out_dtype;
  int64_t A, R, B;
  double scale;  // applied in the final instruction (mean's 1/count; 1 otherwise)
};

int64_t chunk_width(DType dtype) {
  return std::min<int64_t>(detail::kTargetDmaBytesPerPartition / dtype_size_bytes(dtype), isa::kMaxApDimSize);
}

void emit_reduce(const KernelContext& ctx, const isa::AccessPattern& dst, const isa::AccessPattern& data,
                 const char* op, int64_t axis) {
  ctx.builder.emit(isa::Opcode::tensor_reduce)
      .tensor("dst", dst).word("op", op).tensor("data", data).word("axis", "[" + std::to_string(axis) + "]");
}
void emit_scale(const KernelContext& ctx, const isa::AccessPattern& dst, const isa::AccessPattern& src, double scale) {
  ctx.builder.emit(isa::Opcode::tensor_scalar)
      .tensor("dst", dst).tensor("data", src).word("op0", "multiply").imm("operand0", scale);
}

// Rows: A on partitions, [R, B] (B == 1: chunks of R) on the free axis.
void rows_pass(const KernelContext& ctx, const Pass& ps, const char* op, const std::string& tag) {
  const int64_t P = ctx.partitions(), W = chunk_width(ps.in_dtype);
  const int64_t width = ps.B > 1 ? ps.R * ps.B : std::min(ps.R, W);
  const int64_t chunks = ps.B > 1 ? 1 : ceil_div(ps.R, width);
  detail::Ring ring = detail::make_ring(ctx, tag + "in", ps.in_dtype, width);
  detail::Ring part = detail::make_ring(ctx, tag + "part", DType::fp32, std::max(chunks, ps.B), 2);
  detail::Ring fin = detail::make_ring(ctx, tag + "fin", DType::fp32, 1, 2);
  detail::Ring res = detail::make_ring(ctx, tag + "res", ps.out_dtype, ps.B, 2);
  std::vector<Step> steps;
  int64_t tile = 0;
  for (const Range& r : my_share(ctx, tiles(ps.A, P))) {  // split across cores by row tiles
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t c0 = c * width, w = std::min(width, (ps.B > 1 ? ps.R * ps.B : ps.R) - c0);
      const int64_t t = tile;
      Step s;
      s.load = [&ctx, ps, r, c0, w](uint32_t buf) {
        dma(ctx, sb2(ctx, buf, r.size, w), hbm_ap(ctx, ps.in, r.begin * ps.R * ps.B + c0, {{ps.R * ps.B, uint32_t(r.size)}, {1, uint32_t(w)}}),
            detail::kLoadQueue);
      };
      s.compute = [&ctx, ps, op, r, c, w, t, chunks, part, fin, res](uint32_t buf) {
        uint32_t pb = part[t];
        if (ps.B > 1) {
          // The tile is [p, R, B]; reduce R through a [p, B, R] view (axis 2 = the innermost view dim).
          emit_reduce(ctx, sb2(ctx, pb, r.size, ps.B),
                      sb_ap(ctx, buf, uint32_t(r.size), {{1, uint32_t(ps.B)}, {ps.B, uint32_t(ps.R)}}), op, 2);
        } else if ((t + c) % 2 == 1) {
          // Every other chunk on the Scalar engine (copy in place + its accumulator): a bf16
          // tensor_reduce runs at one element per cycle, so the Vector engine alone would bound a
          // bf16 sum below the DMA rate; two engines keep up with it.
          ctx.builder.emit(isa::Opcode::activation_reduce)
              .tensor("dst", sb2(ctx, buf, r.size, w)).word("op", "copy").tensor("data", sb2(ctx, buf, r.size, w))
              .word("reduce_op", op).tensor("reduce_res", sb2(ctx, pb, r.size, 1, c));
        } else {
          emit_reduce(ctx, sb2(ctx, pb, r.size, 1, c), sb2(ctx, buf, r.size, w), op, 1);
        }
        if (c + 1 < chunks) return;
        isa::AccessPattern acc = sb2(ctx, pb, r.size, ps.B);
        if (chunks > 1) {
          acc = sb2(ctx, fin[t], r.size, 1);
          emit_reduce(ctx, acc, sb2(ctx, pb, r.size, chunks), op, 1);
        }
        isa::AccessPattern out = sb2(ctx, res[t], r.size, ps.B);
        emit_scale(ctx, out, acc, ps.scale);
        dma(ctx, hbm_ap(ctx, ps.out, r.begin * ps.B, {{ps.B, uint32_t(r.size)}, {1, uint32_t(ps.B)}}), out,
            detail::kStoreQueue);
      };
      steps.push_back(s);
    }
    ++tile;
  }
  run_steps(ring, steps);
}

// Spread: B == 1, few rows; row a's R elements as [128, R/128] + a [1, R%128] tail.
void spread_pass(const KernelContext& ctx, const Pass& ps, const char* op, const std::string& tag) {
  const int64_t P = ctx.partitions(), W = chunk_width(ps.in_dtype);
  const int64_t cols = ps.R / P, rem = ps.R % P;
  const int64_t width = std::min(cols, W), chunks = ceil_div(cols, width);
  detail::Ring ring = detail::make_ring(ctx, tag + "in", ps.in_dtype, std::max(width, rem));
  detail::Ring part = detail::make_ring(ctx, tag + "part", DType::fp32, chunks, 2);
  detail::Ring fin = detail::make_ring(ctx, tag + "fin", DType::fp32, 1, 2);
  uint32_t tail = ctx.builder.sbuf(ctx.name(tag + "tail"), DType::fp32, {1, uint32_t(ps.A)});
  uint32_t acc = ctx.builder.sbuf(ctx.name(tag + "acc"), DType::fp32, {1, uint32_t(ps.A)});
  uint32_t res = ctx.builder.sbuf(ctx.name(tag + "res"), ps.out_dtype, {1, uint32_t(ps.A)});
  std::vector<Step> steps;
  // Split across cores by output rows (each row's partials are combined on the core that owns it).
  const Range mine = ctx.share(ps.A);
  if (mine.size == 0) return;
  for (int64_t a = mine.begin; a < mine.begin + mine.size; ++a) {
    const int64_t base = a * ps.R;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t c0 = c * width, w = std::min(width, cols - c0);
      Step s;
      s.load = [&ctx, ps, base, cols, c0, w, P](uint32_t buf) {
        dma(ctx, sb2(ctx, buf, P, w), hbm_ap(ctx, ps.in, base + c0, {{cols, uint32_t(P)}, {1, uint32_t(w)}}),
            detail::kLoadQueue);
      };
      s.compute = [&ctx, op, a, c, w, P, part, fin, chunks, acc](uint32_t buf) {
        emit_reduce(ctx, sb2(ctx, part[a], P, 1, c), sb2(ctx, buf, P, w), op, 1);
        if (c + 1 < chunks) return;
        emit_reduce(ctx, sb2(ctx, fin[a], P, 1), sb2(ctx, part[a], P, chunks), op, 1);
        ctx.builder.emit(isa::Opcode::tensor_partition_reduce)
            .tensor("dst", sb2(ctx, acc, 1, 1, a)).word("op", op).tensor("data", sb2(ctx, fin[a], P, 1));
      };
      steps.push_back(s);
    }
    if (rem > 0) {
      Step s;
      s.load = [&ctx, ps, base, cols, rem, P](uint32_t buf) {
        dma(ctx, sb2(ctx, buf, 1, rem), hbm_ap(ctx, ps.in, base + P * cols, {{0, 1}, {1, uint32_t(rem)}}),
            detail::kLoadQueue);
      };
      s.compute = [&ctx, op, a, rem, tail, acc](uint32_t buf) {
        emit_reduce(ctx, sb2(ctx, tail, 1, 1, a), sb2(ctx, buf, 1, rem), op, 1);
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", sb2(ctx, acc, 1, 1, a)).tensor("data1", sb2(ctx, acc, 1, 1, a))
            .tensor("data2", sb2(ctx, tail, 1, 1, a)).word("op", op);
      };
      steps.push_back(s);
    }
  }
  run_steps(ring, steps);
  const uint32_t n = uint32_t(mine.size);
  emit_scale(ctx, sb2(ctx, res, 1, n, mine.begin), sb2(ctx, acc, 1, n, mine.begin), ps.scale);
  dma(ctx, hbm_ap(ctx, ps.out, mine.begin, {{0, 1}, {1, n}}), sb2(ctx, res, 1, n, mine.begin), detail::kStoreQueue);
}

// Columns: R on partitions (tiles of 128), B in column chunks on the free axis.
void columns_pass(const KernelContext& ctx, const Pass& ps, const char* op, const std::string& tag) {
  // fp32 width: the accumulator, partials and result rows are fp32 [128, width] buffers.
  // Split across cores by (output row, column chunk) groups: each core sums whole columns over every
  // row, so no partial sums cross cores; with several cores the chunks are narrowed so that each core
  // gets some (a column's sum is the same whatever the chunk width).
  const int64_t P = ctx.partitions(), W = chunk_width(DType::fp32);
  const int64_t width = std::min({ps.B, W, ceil_div(ps.B, std::max<int64_t>(1, int64_t(ctx.cores) / ps.A))});
  detail::Ring ring = detail::make_ring(ctx, tag + "in", ps.in_dtype, width);
  detail::Ring acc = detail::make_ring(ctx, tag + "acc", DType::fp32, width, 2);
  detail::Ring col = detail::make_ring(ctx, tag + "col", DType::fp32, width, 2);
  detail::Ring res = detail::make_ring(ctx, tag + "res", ps.out_dtype, width, 2);
  const int64_t rows = std::min(ps.R, P);
  std::vector<Step> steps;
  int64_t group = 0;
  std::vector<std::pair<int64_t, Range>> groups;  // (a, column chunk)
  for (int64_t a = 0; a < ps.A; ++a) {
    for (const Range& c : tiles(ps.B, width)) groups.push_back({a, c});
  }
  for (const auto& ac : my_share(ctx, groups)) {
    const int64_t a = ac.first;
    const Range c = ac.second;
    {
      std::vector<Range> rt = tiles(ps.R, P);
      for (size_t k = 0; k < rt.size(); ++k) {
        const Range r = rt[k];
        const bool first = k == 0, last = k + 1 == rt.size();
        const int64_t g = group;
        Step s;
        s.load = [&ctx, ps, a, c, r](uint32_t buf) {
          dma(ctx, sb2(ctx, buf, r.size, c.size),
              hbm_ap(ctx, ps.in, (a * ps.R + r.begin) * ps.B + c.begin, {{ps.B, uint32_t(r.size)}, {1, uint32_t(c.size)}}),
              detail::kLoadQueue);
        };
        s.compute = [&ctx, ps, op, a, c, r, first, last, g, rows, acc, col, res](uint32_t buf) {
          isa::AccessPattern acc_r = sb2(ctx, acc[g], r.size, c.size);
          if (first) {
            ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", acc_r).tensor("src", sb2(ctx, buf, r.size, c.size));
          } else {
            ctx.builder.emit(isa::Opcode::tensor_tensor)
                .tensor("dst", acc_r).tensor("data1", acc_r).tensor("data2", sb2(ctx, buf, r.size, c.size))
                .word("op", op);
          }
          if (!last) return;
          ctx.builder.emit(isa::Opcode::tensor_partition_reduce)
              .tensor("dst", sb2(ctx, col[g], 1, c.size)).word("op", op)
              .tensor("data", sb2(ctx, acc[g], rows, c.size));
          emit_scale(ctx, sb2(ctx, res[g], 1, c.size), sb2(ctx, col[g], 1, c.size), ps.scale);
          dma(ctx, hbm_ap(ctx, ps.out, a * ps.B + c.begin, {{0, 1}, {1, uint32_t(c.size)}}),
              sb2(ctx, res[g], 1, c.size), detail::kStoreQueue);
        };
        steps.push_back(s);
      }
      ++group;
    }
  }
  run_steps(ring, steps);
}

// Streamed columns (B > 1, R*B too large for one partition, a float input the Tensor engine takes):
// rows are streamed in blocks of 128 x k rows (partition p takes rows p*k .. p*k+k-1 of the block, so
// each DMA moves k*width elements per partition), ragged rows last in tiles of <= 128 x 1. The block
// layout depends only on R and the dtype, never on the column chunk width, so a column's arithmetic
// is the same however the columns are split across cores.
//  - sum / mean: a ones column [rows, 1] stationary, each [rows, <= 512] slice of the tile moving;
//    the column sums accumulate in fp32 PSUM ([1, width] on partition 0, one bank per 512 columns)
//    over the whole column group. fp32 inputs run the PE at a quarter rate, so every other block is
//    added on GpSimd into an fp32 SBUF accumulator instead, folded into PSUM by fp32 matmuls at the end.
//  - max / min: [rows, width] slices alternate between the Vector engine (fp32 accumulator in PSUM:
//    an SBUF + PSUM tensor_tensor runs at one element per cycle) and GpSimd (fp32 SBUF accumulator);
//    once per column group the two are combined, PE-transposed 128 columns at a time into the PSUM
//    accumulator and reduced along the free axis (cheaper than tensor_partition_reduce's ~16
//    cycles per column on GpSimd, which would bound a bf16 max).
constexpr int64_t kStreamWidth = 1024;   // columns per group: 2 PSUM banks of fp32 per set, 2 sets
constexpr int64_t kMatmulColumns = 512;  // moving free size / one PSUM bank of fp32

bool stream_columns_ok(DType dtype) {
  return dtype == DType::bf16 || dtype == DType::fp16 || dtype == DType::fp32;
}

void stream_columns_pass(const KernelContext& ctx, const Pass& ps, ReduceOp rop, const std::string& tag) {
  const int64_t P = ctx.partitions();
  const bool additive = rop == ReduceOp::sum || rop == ReduceOp::mean;
  const char* op = alu_name(rop);
  const bool fp32_in = ps.in_dtype == DType::fp32;
  const int64_t width = std::min({ps.B, kStreamWidth, ceil_div(ps.B, std::max<int64_t>(1, int64_t(ctx.cores) / ps.A))});
  // k rows per partition per block: ~16 KiB per partition at the full group width (fixed per dtype).
  const int64_t k = std::max<int64_t>(1, detail::kTargetDmaBytesPerPartition / (kStreamWidth * dtype_size_bytes(ps.in_dtype)));
  detail::align_sbuf_to_granule(ctx, tag + "pad");
  detail::Ring ring = detail::make_ring(ctx, tag + "in", ps.in_dtype, k * width);
  uint32_t ones = 0, ones32 = 0;
  std::vector<uint32_t> pacc, gacc;
  for (int i = 0; i < 2; ++i) {
    // max/min: [P, width] rounded up to whole 128-column blocks (the transposes of the fold land here).
    pacc.push_back(ctx.builder.psum(ctx.name(tag + "pacc" + std::to_string(i)), DType::fp32,
                                    {uint32_t(additive ? 1 : P), uint32_t(additive ? width : ceil_div(width, P) * P)}));
  }
  const bool use_gpsimd_acc = !additive || fp32_in;
  if (use_gpsimd_acc) {
    const int64_t gw = additive ? k * width : width;
    for (int i = 0; i < 2; ++i) {
      gacc.push_back(ctx.builder.sbuf(ctx.name(tag + "gacc" + std::to_string(i)), DType::fp32, {uint32_t(P), uint32_t(gw)}));
    }
  }
  if (additive) {
    ones = ctx.builder.sbuf(ctx.name(tag + "ones"), ps.in_dtype, {uint32_t(P), 1});
    ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ones, P, 1)).imm("value", 1.0).on(Engine::gpsimd);
    ones32 = ones;
    if (!fp32_in && use_gpsimd_acc) {
      ones32 = ctx.builder.sbuf(ctx.name(tag + "ones32"), DType::fp32, {uint32_t(P), 1});
      ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ones32, P, 1)).imm("value", 1.0).on(Engine::gpsimd);
    }
  }
  detail::Ring res = detail::make_ring(ctx, tag + "res", ps.out_dtype, width, 2);

  // Row blocks: (first row, rows on partitions, rows per partition).
  struct Block {
    int64_t r0, rows, k;
  };
  std::vector<Block> blocks;
  {
    const int64_t full = ps.R / (P * k);
    for (int64_t b = 0; b < full; ++b) blocks.push_back({b * P * k, P, k});
    for (const Range& r : tiles(ps.R - full * P * k, P)) blocks.push_back({full * P * k + r.begin, r.size, 1});
  }

  std::vector<std::pair<int64_t, Range>> groups;  // (a, column chunk)
  for (int64_t a = 0; a < ps.A; ++a) {
    for (const Range& c : tiles(ps.B, width)) groups.push_back({a, c});
  }
  struct GroupState {
    bool pe_started = false, gpsimd_used = false;
    int64_t slices = 0;  // max/min: [rows, width] slices accumulated so far
  };
  auto state = std::make_shared<std::vector<GroupState>>();
  std::vector<Step> steps;
  int64_t group = 0, load_count = 0;
  for (const auto& ac : my_share(ctx, groups)) {
    const int64_t a = ac.first, g = group++;
    const Range c = ac.second;
    state->push_back({});
    const uint32_t pa = pacc[size_t(g % 2)];
    const uint32_t ga = use_gpsimd_acc ? gacc[size_t(g % 2)] : 0;
    for (size_t bi = 0; bi < blocks.size(); ++bi) {
      const Block blk = blocks[bi];
      const bool first = bi == 0, last = bi + 1 == blocks.size();
      const int64_t queue = (load_count++ % 2) ? detail::kConstQueue : detail::kLoadQueue;
      Step s;
      s.load = [&ctx, ps, a, c, blk, width, queue](uint32_t buf) {
        const int64_t src = (a * ps.R + blk.r0) * ps.B + c.begin;
        if (blk.k > 1) {
          dma(ctx, sb_ap(ctx, buf, uint32_t(blk.rows), {{width, uint32_t(blk.k)}, {1, uint32_t(c.size)}}),
              hbm_ap(ctx, ps.in, src, {{blk.k * ps.B, uint32_t(blk.rows)}, {ps.B, uint32_t(blk.k)}, {1, uint32_t(c.size)}}),
              queue);
        } else {
          dma(ctx, sb2(ctx, buf, blk.rows, c.size), hbm_ap(ctx, ps.in, src, {{ps.B, uint32_t(blk.rows)}, {1, uint32_t(c.size)}}),
              queue);
        }
      };
      s.compute = [&ctx, ps, rop, op, additive, fp32_in, a, c, blk, bi, first, last, g, width, k, P, pa, ga, ones,
                   ones32, res, state](uint32_t buf) {
        GroupState& st = (*state)[size_t(g)];
        const std::vector<Range> subs = tiles(c.size, kMatmulColumns);
        if (additive) {
          const bool on_gpsimd = fp32_in && blk.k == k && k > 1 && bi % 2 == 1;
          if (on_gpsimd) {
            // fp32: this block is added on GpSimd into the [P, k, width] fp32 accumulator.
            const isa::AccessPattern acc = sb_ap(ctx, ga, uint32_t(P), {{width, uint32_t(k)}, {1, uint32_t(c.size)}});
            const isa::AccessPattern in = sb_ap(ctx, buf, uint32_t(P), {{width, uint32_t(k)}, {1, uint32_t(c.size)}});
            if (!st.gpsimd_used) {
              ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", acc).tensor("src", in).on(Engine::gpsimd);
            } else {
              ctx.builder.emit(isa::Opcode::tensor_tensor)
                  .tensor("dst", acc).tensor("data1", acc).tensor("data2", in).word("op", "add").on(Engine::gpsimd);
            }
            st.gpsimd_used = true;
          } else {
            for (int64_t j = 0; j < blk.k; ++j) {
              for (const Range& sr : subs) {
                ctx.builder.emit(isa::Opcode::nc_matmul)
                    .tensor("dst", sb2(ctx, pa, 1, sr.size, sr.begin))
                    .tensor("stationary", sb2(ctx, ones, blk.rows, 1))
                    .tensor("moving", sb2(ctx, buf, blk.rows, sr.size, j * width + sr.begin))
                    .word("accumulate", st.pe_started ? "true" : "false");
              }
              st.pe_started = true;
            }
          }
          if (!last) return;
          if (st.gpsimd_used) {
            for (int64_t j = 0; j < k; ++j) {
              for (const Range& sr : subs) {
                ctx.builder.emit(isa::Opcode::nc_matmul)
                    .tensor("dst", sb2(ctx, pa, 1, sr.size, sr.begin))
                    .tensor("stationary", sb2(ctx, ones32, P, 1))
                    .tensor("moving", sb2(ctx, ga, P, sr.size, j * width + sr.begin))
                    .word("accumulate", st.pe_started ? "true" : "false");
              }
              st.pe_started = true;
            }
          }
          isa::AccessPattern out = sb2(ctx, res[g], 1, c.size);
          emit_scale(ctx, out, sb2(ctx, pa, 1, c.size), ps.scale);
          dma(ctx, hbm_ap(ctx, ps.out, a * ps.B + c.begin, {{0, 1}, {1, uint32_t(c.size)}}), out, detail::kStoreQueue);
          return;
        }
        // max / min
        const double identity = rop == ReduceOp::max ? -INFINITY : INFINITY;
        if (first) {
          ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, pa, P, c.size)).imm("value", identity).on(Engine::vector);
          ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, ga, P, c.size)).imm("value", identity).on(Engine::gpsimd);
        }
        // Vector (~1 element/cycle at 0.96 GHz with the PSUM accumulator) and GpSimd (1.2 GHz) are
        // about even: alternate them per [rows, width] slice (measured best against 1:2 and 2:1).
        for (int64_t j = 0; j < blk.k; ++j) {
          const bool on_gpsimd = st.slices++ % 2 == 1;
          const isa::AccessPattern acc = sb2(ctx, on_gpsimd ? ga : pa, blk.rows, c.size);
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", acc).tensor("data1", acc).tensor("data2", sb2(ctx, buf, blk.rows, c.size, j * width))
              .word("op", op).on(on_gpsimd ? Engine::gpsimd : Engine::vector);
        }
        if (!last) return;
        const isa::AccessPattern gall = sb2(ctx, ga, P, c.size);
        ctx.builder.emit(isa::Opcode::tensor_tensor)
            .tensor("dst", gall).tensor("data1", sb2(ctx, pa, P, c.size)).tensor("data2", gall).word("op", op);
        // Fold across partitions: PE transposes of 128-column blocks into the (now free) PSUM
        // accumulator, then one tensor_reduce over the rows: column i*128 + p lands on partition p.
        const int64_t nb = c.size / P, rem = c.size % P;
        for (int64_t i = 0; i < nb; ++i) {
          ctx.builder.emit(isa::Opcode::nc_transpose)
              .tensor("dst", sb2(ctx, pa, P, P, i * P)).tensor("data", sb2(ctx, ga, P, P, i * P));
        }
        if (rem > 0) {
          ctx.builder.emit(isa::Opcode::nc_transpose)
              .tensor("dst", sb2(ctx, pa, rem, P, nb * P)).tensor("data", sb2(ctx, ga, P, rem, nb * P));
        }
        if (nb > 0) {
          emit_reduce(ctx, sb_ap(ctx, res[g], uint32_t(P), {{1, uint32_t(nb)}}),
                      sb_ap(ctx, pa, uint32_t(P), {{P, uint32_t(nb)}, {1, uint32_t(P)}}), op, 2);
          dma(ctx, hbm_ap(ctx, ps.out, a * ps.B + c.begin, {{1, uint32_t(P)}, {P, uint32_t(nb)}}),
              sb_ap(ctx, res[g], uint32_t(P), {{1, uint32_t(nb)}}), detail::kStoreQueue);
        }
        if (rem > 0) {
          emit_reduce(ctx, sb_ap(ctx, res[g], uint32_t(rem), {{1, 1}}, nb),
                      sb_ap(ctx, pa, uint32_t(rem), {{1, uint32_t(P)}}, nb * P), op, 1);
          dma(ctx, hbm_ap(ctx, ps.out, a * ps.B + c.begin + nb * P, {{1, uint32_t(rem)}, {1, 1}}),
              sb_ap(ctx, res[g], uint32_t(rem), {{1, 1}}, nb), detail::kStoreQueue);
        }
      };
      steps.push_back(s);
    }
  }
  run_steps(ring, steps);
}

// Few rows (R <= kFewRowsMax over long rows B, e.g. a bias gradient summed over a batch of 2): each
// row is spread over the partitions as [d, B/d] (d the largest divisor of B <= 128) and the R rows
// are combined element-wise into an fp32 accumulator, so every load fills the partitions and the
// pass streams at the DMA rate (the streamed-columns pass would move R rows per 128-row block).
constexpr int64_t kFewRowsMax = 16;

int64_t few_rows_partitions(const KernelContext& ctx, const Pass& ps) {
  const int64_t P = ctx.partitions();
  if (ps.R > kFewRowsMax || ps.B < 2 * P) return 0;
  int64_t d = P;
  while (d > 1 && ps.B % d != 0) --d;
  return d >= 32 ? d : 0;
}

void few_rows_pass(const KernelContext& ctx, const Pass& ps, const char* op, const std::string& tag, int64_t d) {
  const int64_t per = ps.B / d;  // a row's elements per partition
  const int64_t width = std::min(per, chunk_width(ps.in_dtype));
  detail::Ring ring = detail::make_ring(ctx, tag + "in", ps.in_dtype, width);
  detail::Ring acc = detail::make_ring(ctx, tag + "acc", DType::fp32, width, 2);
  detail::Ring res = detail::make_ring(ctx, tag + "res", ps.out_dtype, width, 2);
  std::vector<std::pair<int64_t, Range>> groups;  // (a, column chunk within a partition's run)
  for (int64_t a = 0; a < ps.A; ++a) {
    for (const Range& c : tiles(per, width)) groups.push_back({a, c});
  }
  std::vector<Step> steps;
  int64_t group = 0;
  for (const auto& [a, c] : my_share(ctx, groups)) {
    const int64_t g = group++;
    for (int64_t r = 0; r < ps.R; ++r) {
      Step s;
      s.load = [&ctx, ps, a = a, c = c, r, d, per](uint32_t buf) {
        dma(ctx, sb2(ctx, buf, d, c.size),
            hbm_ap(ctx, ps.in, (a * ps.R + r) * ps.B + c.begin, {{per, uint32_t(d)}, {1, uint32_t(c.size)}}),
            detail::kLoadQueue);
      };
      s.compute = [&ctx, ps, op, a = a, c = c, r, d, per, g, acc, res](uint32_t buf) {
        const isa::AccessPattern acc_t = sb2(ctx, acc[g], d, c.size), in_t = sb2(ctx, buf, d, c.size);
        if (r == 0) {
          ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", acc_t).tensor("src", in_t);
        } else {
          ctx.builder.emit(isa::Opcode::tensor_tensor)
              .tensor("dst", acc_t).tensor("data1", acc_t).tensor("data2", in_t).word("op", op);
        }
        if (r + 1 != ps.R) return;
        emit_scale(ctx, sb2(ctx, res[g], d, c.size), acc_t, ps.scale);
        dma(ctx, hbm_ap(ctx, ps.out, a * ps.B + c.begin, {{per, uint32_t(d)}, {1, uint32_t(c.size)}}),
            sb2(ctx, res[g], d, c.size), detail::kStoreQueue);
      };
      steps.push_back(s);
    }
  }
  run_steps(ring, steps);
}

void reduce_pass(const KernelContext& ctx, const Pass& ps, ReduceOp op, const std::string& tag) {
  const char* alu = alu_name(op);
  const int64_t few_rows_d = is_arg(op) ? 0 : few_rows_partitions(ctx, ps);
  if (ps.B == 1 && ps.A < kSpreadMaxRows && ps.R >= 4 * int64_t(ctx.partitions())) {
    spread_pass(ctx, ps, alu, tag);
  } else if (ps.B == 1 || ps.R * ps.B <= chunk_width(ps.in_dtype)) {
    rows_pass(ctx, ps, alu, tag);
  } else if (few_rows_d > 0) {
    few_rows_pass(ctx, ps, alu, tag, few_rows_d);
  } else if (stream_columns_ok(ps.in_dtype) && !is_arg(op) &&
             (op == ReduceOp::sum || op == ReduceOp::mean || ps.R >= int64_t(ctx.partitions()))) {
    // max/min over fewer rows than partitions: the plain columns pass (a fold over only those rows)
    // is cheaper than initialising and folding full 128-partition accumulators.
    stream_columns_pass(ctx, ps, op, tag);
  } else {
    columns_pass(ctx, ps, alu, tag);
  }
}

// argmax / argmin of each row of x viewed as [rows, R] (R contiguous), int32 indices into y.
void arg_rows(const KernelContext& ctx, ReduceOp op, uint32_t x, DType dtype, int64_t rows, int64_t R, uint32_t y) {
  const int64_t P = ctx.partitions();
  const int64_t width = std::min(R, chunk_width(DType::fp32)), chunks = ceil_div(R, width);
  const bool negate = op == ReduceOp::argmin;
  detail::Ring ring = detail::make_ring(ctx, "arg_in", dtype, width);
  detail::Ring work = detail::make_ring(ctx, "arg_work", DType::fp32, std::max<int64_t>(width, 8), 2);
  detail::Ring vals = detail::make_ring(ctx, "arg_vals", DType::fp32, 8, 2);
  detail::Ring idx = detail::make_ring(ctx, "arg_idx", DType::uint32, 8, 2);
  detail::Ring cand = detail::make_ring(ctx, "arg_cand", DType::fp32, 1, 2);
  detail::Ring mask = detail::make_ring(ctx, "arg_mask", DType::fp32, 1, 2);
  detail::Ring best_v = detail::make_ring(ctx, "arg_best_v", DType::fp32, 1, 2);
  detail::Ring best_i = detail::make_ring(ctx, "arg_best_i", DType::fp32, 1, 2);
  detail::Ring res = detail::make_ring(ctx, "arg_res", DType::int32, 1, 2);
  std::vector<Step> steps;
  int64_t step = 0, tile = 0;
  for (const Range& r : my_share(ctx, tiles(rows, P))) {  // split across cores by row tiles
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t c0 = c * width, w = std::min(width, R - c0), t = tile, k = step++;
      Step s;
      s.load = [&ctx, x, R, r, c0, w](uint32_t buf) {
        dma(ctx, sb2(ctx, buf, r.size, w), hbm_ap(ctx, x, r.begin * R + c0, {{R, uint32_t(r.size)}, {1, uint32_t(w)}}),
            detail::kLoadQueue);
      };
      s.compute = [=, &ctx](uint32_t buf) {
        const int64_t p = r.size, wp = std::max<int64_t>(w, 8);
        isa::AccessPattern data = sb2(ctx, buf, p, w);
        if (negate || w < 8) {
          // max8 needs 8 elements: pad with -inf, which never wins over a real element (the first
          // occurrence of the maximum is always a real one).
          if (w < 8) ctx.builder.emit(isa::Opcode::memset).tensor("dst", sb2(ctx, work[k], p, 8)).imm("value", -INFINITY);
          auto copy = ctx.builder.emit(isa::Opcode::tensor_scalar);
          copy.tensor("dst", sb2(ctx, work[k], p, w)).tensor("data", data).word("op0", "multiply").imm("operand0", negate ? -1.0 : 1.0);
          data = sb2(ctx, work[k], p, wp);
        }
        ctx.builder.emit(isa::Opcode::max8).tensor("dst", sb2(ctx, vals[k], p, 8)).tensor("src", data);
        ctx.builder.emit(isa::Opcode::nc_find_index8)
            .tensor("dst", sb2(ctx, idx[k], p, 8)).tensor("data", data).tensor("vals", sb2(ctx, vals[k], p, 8));
        isa::AccessPattern ci = sb2(ctx, cand[k], p, 1), v0 = sb2(ctx, vals[k], p, 1);
        isa::AccessPattern bv = sb2(ctx, best_v[t], p, 1), bi = sb2(ctx, best_i[t], p, 1);
        // The chunk's index as fp32 (exact below 2^24) plus the chunk's start.
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", c == 0 ? bi : ci).tensor("data", sb2(ctx, idx[k], p, 1)).word("op0", "add").imm("operand0", double(c0));
        if (c == 0) {
          ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", bv).tensor("src", v0);
        } else {
          // Strictly greater: on a tie the earlier chunk keeps its (smaller) index.
          isa::AccessPattern m = sb2(ctx, mask[k], p, 1);
          ctx.builder.emit(isa::Opcode::tensor_tensor).tensor("dst", m).tensor("data1", v0).tensor("data2", bv).word("op", "greater");
          ctx.builder.emit(isa::Opcode::tensor_copy_predicated).tensor("dst", bi).tensor("src", ci).tensor("predicate", m);
          ctx.builder.emit(isa::Opcode::tensor_copy_predicated).tensor("dst", bv).tensor("src", v0).tensor("predicate", m);
        }
        if (c + 1 < chunks) return;
        isa::AccessPattern out = sb2(ctx, res[t], p, 1);
        ctx.builder.emit(isa::Opcode::tensor_copy).tensor("dst", out).tensor("src", bi);
        dma(ctx, hbm_ap(ctx, y, r.begin, {{1, uint32_t(p)}, {1, 1}}), out, detail::kStoreQueue);
      };
      steps.push_back(s);
    }
    ++tile;
  }
  run_steps(ring, steps);
}

}  // namespace

std::vector<int64_t> reduced_shape(const ReduceSpec& spec) {
  std::vector<int64_t> dims = normalized_dims(spec);
  std::vector<int64_t> out;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (!reduced) out.push_back(spec.shape[d]);
    else if (spec.keepdim) out.push_back(1);
  }
  return out;
}

namespace {

// Whether the reduction takes more than one pass over HBM (a later pass reads what an earlier one
// wrote): several reduced dim groups, or argmax over a dim that is not innermost (permute first).
bool multi_pass(const ReduceSpec& spec) {
  std::vector<int64_t> dims = normalized_dims(spec);
  if (is_arg(spec.op)) {
    int64_t R = spec.shape[size_t(dims[0])], B = 1;
    for (size_t d = size_t(dims[0]) + 1; d < spec.shape.size(); ++d) B *= spec.shape[d];
    return B > 1 && R > 1;
  }
  int reduced_groups = 0;
  bool previous_reduced = false, any = false;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    if (spec.shape[d] == 1) continue;
    bool reduced = std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (reduced && (!any || !previous_reduced)) ++reduced_groups;
    previous_reduced = reduced;
    any = true;
  }
  return reduced_groups > 1;
}

void build_reduce_passes(const KernelContext& ctx, const ReduceSpec& spec, uint32_t x, uint32_t y);

}  // namespace

void build_reduce(const KernelContext& ctx, const ReduceSpec& spec, uint32_t x, uint32_t y) {
  if (ctx.cores > 1 && multi_pass(spec)) {
    // A later pass reads the whole scratch tensor an earlier pass wrote, and cores cannot wait for
    // one another: the whole reduction runs on core 0 (the other cores' parts are empty).
    on_first_core(ctx, [&](const KernelContext& one) { build_reduce_passes(one, spec, x, y); });
    return;
  }
  build_reduce_passes(ctx, spec, x, y);
}

namespace {

void build_reduce_passes(const KernelContext& ctx, const ReduceSpec& spec, uint32_t x, uint32_t y) {
  std::vector<int64_t> dims = normalized_dims(spec);
  if (is_arg(spec.op)) {
    if (dims.size() != 1) throw KernelUnsupported("argmax/argmin reduce exactly one dim");
    int64_t A = 1, R = spec.shape[size_t(dims[0])], B = 1;
    for (int64_t d = 0; d < dims[0]; ++d) A *= spec.shape[size_t(d)];
    for (size_t d = size_t(dims[0]) + 1; d < spec.shape.size(); ++d) B *= spec.shape[d];
    uint32_t rows_src = x;
    if (B > 1 && R > 1) {
      // Make the reduced dim innermost: [A, R, B] -> [A, B, R] in HBM scratch.
      PermuteSpec perm{{A, R, B}, {0, 2, 1}, spec.input_dtype};
      rows_src = ctx.builder.hbm(ctx.name("arg_perm"), spec.input_dtype, {uint32_t(A), uint32_t(B), uint32_t(R)});
      build_permute(ctx, perm, x, rows_src);
    }
    arg_rows(ctx, spec.op, rows_src, spec.input_dtype, A * B, R, y);
    return;
  }
  // Merged groups of (size, reduced), size-1 dims dropped.
  std::vector<std::pair<int64_t, bool>> groups;
  int64_t count = 1;
  for (size_t d = 0; d < spec.shape.size(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), int64_t(d)) != dims.end();
    if (reduced) count *= spec.shape[d];
    if (spec.shape[d] == 1) continue;
    if (!groups.empty() && groups.back().second == reduced) groups.back().first *= spec.shape[d];
    else groups.push_back({spec.shape[d], reduced});
  }
  const double scale = spec.op == ReduceOp::mean ? 1.0 / double(std::max<int64_t>(count, 1)) : 1.0;
  std::vector<size_t> reduced_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].second) reduced_groups.push_back(g);
  }
  if (reduced_groups.empty()) {  // only size-1 dims reduced: a copy (through the scale)
    groups.push_back({1, true});
    reduced_groups.push_back(groups.size() - 1);
  }
  uint32_t current = x;
  DType current_dtype = spec.input_dtype;
  for (size_t k = reduced_groups.size(); k-- > 0;) {
    const size_t g = reduced_groups[k];
    int64_t A = 1, B = 1;
    for (size_t i = 0; i < g; ++i) A *= groups[i].first;
    for (size_t i = g + 1; i < groups.size(); ++i) B *= groups[i].first;
    const bool final_pass = k == 0;
    uint32_t out = y;
    if (!final_pass) {
      out = ctx.builder.hbm(ctx.name("red_scratch" + std::to_string(k)), DType::fp32, {uint32_t(A * B)});
    }
    Pass ps{current, out, current_dtype, final_pass ? spec.output_dtype : DType::fp32, A, groups[g].first, B,
            final_pass ? scale : 1.0};
    reduce_pass(ctx, ps, spec.op, "red" + std::to_string(k) + "_");
    groups.erase(groups.begin() + long(g));
    current = out;
    current_dtype = DType::fp32;
  }
}

}  // namespace

isa::Program reduce_program(const ReduceSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("reduce", config.generation);
  uint32_t x = builder.hbm("x", spec.input_dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  DType out_dtype = is_arg(spec.op) ? DType::int32 : spec.output_dtype;
  uint32_t y = builder.hbm("y", out_dtype, detail::to_u32(reduced_shape(spec)), isa::AllocationRole::output);
  ReduceSpec s = spec;
  s.output_dtype = out_dtype;
  build_reduce(KernelContext{builder, config, "", core, cores}, s, x, y);
  return builder.finish();
}

}  // namespace trnsim::kernels
