// AdamW (see optimizer.h for the arithmetic and the budget).
#include "kernels/optimizer.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;

namespace {

// A column tile of the flattened tensor: rows [0, p) of a block whose row r starts at element
// base + r * row_stride, columns [c0, c0 + f).
struct FlatTile {
  int64_t base, row_stride, p, c0, f;
};

std::vector<FlatTile> flat_tiles(int64_t n, int64_t partitions, int64_t width) {
  std::vector<FlatTile> out;
  const int64_t cols = n / partitions, tail = n % partitions;
  for (const Range& c : tiles(cols, width)) out.push_back({0, cols, partitions, c.begin, c.size});
  for (const Range& c : tiles(tail, width)) out.push_back({partitions * cols, 0, 1, c.begin, c.size});
  return out;
}

isa::AccessPattern flat_hbm(const KernelContext& ctx, uint32_t tensor, const FlatTile& t) {
  return hbm_ap(ctx, tensor, t.base + t.c0, {{t.row_stride, uint32_t(t.p)}, {1, uint32_t(t.f)}});
}

}  // namespace

std::vector<float> adamw_scalars(const AdamWSpec& spec, const AdamWStep& step) {
  if (step.step < 1) throw KernelUnsupported("adamw: step is 1-based");
  // The scalars exactly as torch's _single_tensor_adamw forms them (Python floats, i.e. doubles).
  const double bc1 = 1.0 - std::pow(spec.beta1, double(step.step));
  const double bc2 = 1.0 - std::pow(spec.beta2, double(step.step));
  return {float(-(step.lr / bc1)), float(std::sqrt(bc2)), float(1.0 - step.lr * step.weight_decay)};
}

void build_adamw(const KernelContext& ctx, const AdamWSpec& spec, uint32_t param, uint32_t grad, uint32_t exp_avg,
                 uint32_t exp_avg_sq, uint32_t scalars) {
  if (spec.elements <= 0) throw KernelUnsupported("adamw: no elements");
  const int64_t P = ctx.partitions();
  const CoreConfig& core = ctx.config.core;
  // Pipeline: loads kAhead tiles ahead of stage 0, kStages compute stages per tile (see below). The
  // load rings hold a tile from its load to its last store; the work rings from stage 0 to the last.
  constexpr int64_t kAhead = 3, kStages = 5;
  constexpr int64_t io_depth = kAhead + kStages + 1, work_depth = kStages + 1;
  // Per column: p, g, m, v (m, v widened to fp32 by the load) and three fp32 work tiles.
  const int64_t per_column = io_depth * (dtype_size_bytes(spec.param_dtype) + dtype_size_bytes(spec.grad_dtype) + 2 * 4) +
                             work_depth * 3 * 4;
  const int64_t max_cols = std::max<int64_t>(spec.elements / P, spec.elements % P);
  // The runtime scalars: one [P, 3] load before the stream (its own queue), read as [P, 1] columns.
  const uint32_t scalars_sb = ctx.builder.sbuf(ctx.name("adamw_scalars_sb"), DType::fp32, {uint32_t(P), kAdamWScalars});
  detail::align_sbuf_to_granule(ctx, "adamw_align");
  int64_t width = std::min({detail::kTargetDmaBytesPerPartition / 4, detail::sbuf_free_bytes(ctx) / per_column,
                            isa::kMaxApDimSize, std::max<int64_t>(1, max_cols)});
  if (width < 1) throw KernelUnsupported("adamw: SBUF is full");
  // Enough tiles per core that the pipeline's fill and drain (about kAhead + kStages tiles' worth of
  // latency) stay small against the stream, but no narrower than kMinWidth columns, below which the
  // fixed costs per instruction (GpSimd start-up, DMA descriptors) dominate.
  constexpr int64_t kMinTilesPerCore = 16, kMinWidth = 512;
  const int64_t cols_per_core = ceil_div(max_cols, int64_t(ctx.cores));
  width = std::min(width, std::max(kMinWidth, ceil_div(cols_per_core, kMinTilesPerCore)));
  // Whole 256-byte granules per slot (128 columns of a 2-byte dtype), so that neighbouring ring
  // slots never share a dependency granule.
  if (width > 128) width = width / 128 * 128;
  // Split across cores: narrower tiles when there are too few for every core to get one.
  if (ctx.cores > 1 && flat_tiles(spec.elements, P, width).size() < ctx.cores) {
    width = std::max<int64_t>(1, ceil_div(width, ctx.cores));
  }

  auto ring = [&](const std::string& n, DType d, int64_t depth) {
    return detail::make_ring(ctx, n, d, width, int(depth));
  };
  detail::Ring p = ring("adamw_p", spec.param_dtype, io_depth), g = ring("adamw_g", spec.grad_dtype, io_depth),
               m = ring("adamw_m", DType::fp32, io_depth), v = ring("adamw_v", DType::fp32, io_depth),
               w = ring("adamw_w", DType::fp32, work_depth), w2 = ring("adamw_w2", DType::fp32, work_depth),
               d = ring("adamw_d", DType::fp32, work_depth);

  // Columns of the runtime scalars (adamw_scalars): -step_size, sqrt(bc2), decay; rows [0, p) of a tile.
  auto scalar_column = [&](uint32_t column, int64_t rows) {
    return ctx.builder.view(scalars_sb, {isa::Slice::range(0, rows), isa::Slice::index(column)});
  };

  // Split across cores: each core updates a contiguous run of the column tiles (element-wise, so the
  // values do not depend on the split).
  std::vector<FlatTile> all = my_share(ctx, flat_tiles(spec.elements, P, width));
  const int64_t n = int64_t(all.size());

  // DMA queues: one per tensor and direction. A queue serves its transfers in program order, so a
  // store waiting on compute holds up only the stores of that tensor, and the fixed start-up of each
  // transfer overlaps the data of the transfers on the other queues.
  constexpr int64_t kQueueLoadP = 0, kQueueLoadG = 1, kQueueLoadM = 2, kQueueLoadV = 3, kQueueStoreM = 4,
                    kQueueStoreV = 5, kQueueStoreP = 6, kQueueScalars = 7;
  auto load = [&](int64_t k) {
    const FlatTile& t = all[size_t(k)];
    dma(ctx, sb2(ctx, m[k], t.p, t.f), flat_hbm(ctx, exp_avg, t), kQueueLoadM);
    dma(ctx, sb2(ctx, g[k], t.p, t.f), flat_hbm(ctx, grad, t), kQueueLoadG);
    dma(ctx, sb2(ctx, v[k], t.p, t.f), flat_hbm(ctx, exp_avg_sq, t), kQueueLoadV);
    dma(ctx, sb2(ctx, p[k], t.p, t.f), flat_hbm(ctx, param, t), kQueueLoadP);
  };
  auto act = [&](const isa::AccessPattern& dst, const char* op, const isa::AccessPattern& src, double scale) {
    ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", op).tensor("data", src).imm("scale", scale);
  };
  auto act_by = [&](const isa::AccessPattern& dst, const char* op, const isa::AccessPattern& src,
                    const isa::AccessPattern& scale) {
    ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", op).tensor("data", src).tensor("scale", scale);
  };
  auto tt = [&](const isa::AccessPattern& dst, const isa::AccessPattern& a, const isa::AccessPattern& b, const char* op,
                Engine engine) {
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", dst).tensor("data1", a).tensor("data2", b).word("op", op).on(engine);
  };
  auto stt = [&](const isa::AccessPattern& dst, const isa::AccessPattern& data, const char* op0, double operand0,
                 const char* op1, const isa::AccessPattern& operand1) {
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", dst).tensor("data", data).word("op0", op0).imm("operand0", operand0).word("op1", op1)
        .tensor("operand1", operand1);
  };

  // Engine assignment. Per column of a tile (fp32 work, no performance mode applies): Vector runs the
  // two scalar_tensor_tensor (2 + 2 cycles), GpSimd four tensor_tensor (4), Scalar four activations
  // (4), and the one remaining single-input op (denom = sqrt(v) / sqrt(bc2) + eps) is split by columns
  // so that the three engines finish together (their clocks differ: Vector is slower on trn2).
  // Scalar runs tensor_scalar from trn2 on, but with a divide only from trn3 on.
  const bool scalar_ts = ctx.config.generation != Generation::trn1 && ctx.config.generation != Generation::trn2;
  // GpSimd also pays its start-up per instruction (four per tile, and one for its share of the split).
  const double t_vector = 4 / core.vector.clock_ghz, t_scalar = 4 / core.scalar.clock_ghz,
               t_gpsimd = (4 + 5 * core.gpsimd.fixed_overhead_cycles / double(width)) / core.gpsimd.clock_ghz;
  // Water-filling: the finishing time T per column with sum_e max(0, T - t_e) * clock_e = 1 cycle.
  double share_g = 0, share_s = 0;
  {
    double lo = std::min({t_vector, t_gpsimd, t_scalar}), hi = std::max({t_vector, t_gpsimd, t_scalar}) + 2.0;
    auto filled = [&](double T, double t, double clock) { return std::max(0.0, T - t) * clock; };
    for (int it = 0; it < 60; ++it) {
      double T = 0.5 * (lo + hi);
      double c = filled(T, t_vector, core.vector.clock_ghz) + filled(T, t_gpsimd, core.gpsimd.clock_ghz) +
                 (scalar_ts ? filled(T, t_scalar, core.scalar.clock_ghz) : 0.0);
      (c < 1 ? lo : hi) = T;
    }
    share_g = filled(lo, t_gpsimd, core.gpsimd.clock_ghz);
    share_s = scalar_ts ? filled(lo, t_scalar, core.scalar.clock_ghz) : 0.0;
  }

  // Stage s of tile k. Engines run their queues in order, and stage s of tile k is emitted next to
  // stage s' of tile k + s - s', so every instruction depends only on work emitted one step earlier:
  // each engine finds work while one tile's chain of dependent instructions drains.
  auto stage = [&](int64_t s, int64_t k) {
    const FlatTile& t = all[size_t(k)];
    auto tile = [&](const detail::Ring& r) { return sb2(ctx, r[k], t.p, t.f); };
    if (s == 0) {
      // exp_avg.lerp_(grad, 1 - beta1) = m + (1 - beta1) * (g - m): the difference (GpSimd) ...
      tt(tile(w), tile(g), tile(m), "subtract", Engine::gpsimd);
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) = v * beta2 + ((1 - beta2) * g) * g
      stt(tile(w2), tile(g), "multiply", 1.0 - spec.beta2, "multiply", tile(g));
      act(tile(v), "copy", tile(v), spec.beta2);
    } else if (s == 1) {
      // ... and the multiply-add (Vector); the second moment's sum (GpSimd).
      stt(tile(m), tile(w), "multiply", 1.0 - spec.beta1, "add", tile(m));
      tt(tile(v), tile(v), tile(w2), "add", Engine::gpsimd);
    } else if (s == 2) {
      // The state is final: store it (the DMA rounds to the state dtype).
      dma(ctx, flat_hbm(ctx, exp_avg, t), tile(m), kQueueStoreM);
      dma(ctx, flat_hbm(ctx, exp_avg_sq, t), tile(v), kQueueStoreV);
      // denom = sqrt(v) / sqrt(bc2) + eps: the root (Scalar); -step_size * m (Scalar, into w);
      // param.mul_(1 - lr * wd) (Scalar, into fp32 w2). The products are rounded to fp32 as the fused
      // scalar_tensor_tensor rounds its first op, so splitting the update over engines leaves every
      // value bit for bit as it was.
      act(tile(d), "sqrt", tile(v), 1.0);
      act_by(tile(w), "copy", tile(m), scalar_column(0, t.p));
      act_by(tile(w2), "copy", tile(p), scalar_column(2, t.p));
    } else if (s == 3) {
      // ... the division and eps, split by columns over Scalar, GpSimd and Vector.
      const int64_t fs = std::llround(double(t.f) * share_s), fg = std::llround(double(t.f) * share_g);
      const int64_t c_s = std::min(fs, t.f), c_g = std::min(fg, t.f - c_s), c_v = t.f - c_s - c_g;
      auto part = [&](int64_t c0, int64_t cols, Engine engine) {
        if (cols <= 0) return;
        isa::AccessPattern ap = sb2(ctx, d[k], t.p, cols, c0);
        ctx.builder.emit(isa::Opcode::tensor_scalar)
            .tensor("dst", ap).tensor("data", ap).word("op0", "divide").tensor("operand0", scalar_column(1, t.p))
            .word("op1", "add").imm("operand1", spec.eps).on(engine);
      };
      part(0, c_s, Engine::scalar);
      part(c_s, c_g, Engine::gpsimd);
      part(c_s + c_g, c_v, Engine::vector);
    } else {
      // param.addcdiv_(m, denom, value=-step_size) = p + (-step_size * m) / denom  (GpSimd)
      tt(tile(w), tile(w), tile(d), "divide", Engine::gpsimd);
      tt(tile(p), tile(w2), tile(w), "add", Engine::gpsimd);
      dma(ctx, flat_hbm(ctx, param, t), tile(p), kQueueStoreP);
    }
  };
  for (int64_t k = 0; k < std::min(kAhead, n); ++k) load(k);
  // The runtime scalars (one row in HBM, read by every partition: a stride-0 outer dim), first read at
  // stage 2 of tile 0: issued after the first tiles' loads, which the pipeline waits on first.
  dma(ctx, ctx.builder.view(scalars_sb), hbm_ap(ctx, scalars, 0, {{0, uint32_t(P)}, {1, kAdamWScalars}}), kQueueScalars);
  for (int64_t i = 0; i < n + kStages - 1; ++i) {
    if (i + kAhead < n) load(i + kAhead);
    for (int64_t s = 0; s < kStages; ++s) {
      if (i - s >= 0 && i - s < n) stage(s, i - s);
    }
  }
}

isa::Program adamw_program(const AdamWSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("adamw", config.generation);
  const auto in = isa::AllocationRole::input;
  std::vector<uint32_t> shape{uint32_t(spec.elements)};
  uint32_t param = builder.hbm("param", spec.param_dtype, shape, in);
  uint32_t grad = builder.hbm("grad", spec.grad_dtype, shape, in);
  uint32_t m = builder.hbm("exp_avg", spec.state_dtype, shape, in);
  uint32_t v = builder.hbm("exp_avg_sq", spec.state_dtype, shape, in);
  uint32_t scalars = builder.hbm("adamw_scalars", DType::fp32, {kAdamWScalars}, in);
  build_adamw(KernelContext{builder, config, "", core, cores}, spec, param, grad, m, v, scalars);
  return builder.finish();
}

}  // namespace trnsim::kernels
