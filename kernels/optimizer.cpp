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

void build_adamw(const KernelContext& ctx, const AdamWSpec& spec, uint32_t param, uint32_t grad, uint32_t exp_avg,
                 uint32_t exp_avg_sq) {
  if (spec.elements <= 0) throw std::invalid_argument("adamw: no elements");
  if (spec.step < 1) throw std::invalid_argument("adamw: step is 1-based");
  const int64_t P = ctx.partitions();
  // Three pipeline stages per tile (see below), loads kAhead tiles ahead: every ring holds
  // kAhead + kStages tiles.
  constexpr int64_t kStages = 3, kAhead = 4, depth = kAhead + kStages;
  // Per column: p, g, m, v and two fp32 work tiles per ring slot.
  const int64_t per_column =
      depth * (dtype_size_bytes(spec.param_dtype) + dtype_size_bytes(spec.grad_dtype) + 4 * 4);
  constexpr int64_t kMaxApDimSize = 65535;
  const int64_t max_cols = std::max<int64_t>(spec.elements / P, spec.elements % P);
  int64_t width = std::min({detail::kTargetDmaBytesPerPartition / 4, detail::sbuf_free_bytes(ctx) / per_column,
                                  kMaxApDimSize, std::max<int64_t>(1, max_cols)});
  if (width < 1) throw std::invalid_argument("adamw: SBUF is full");
  // Split across cores: narrower tiles when there are too few for every core to get one.
  if (ctx.cores > 1 && flat_tiles(spec.elements, P, width).size() < ctx.cores) {
    width = std::max<int64_t>(1, ceil_div(width, ctx.cores));
  }

  auto ring = [&](const std::string& n, DType d) { return detail::make_ring(ctx, n, d, width, int(depth)); };
  detail::Ring p = ring("adamw_p", spec.param_dtype), g = ring("adamw_g", spec.grad_dtype),
               m = ring("adamw_m", DType::fp32), v = ring("adamw_v", DType::fp32), pf = ring("adamw_pf", DType::fp32),
               w = ring("adamw_w", DType::fp32);

  // The scalars exactly as torch's _single_tensor_adamw forms them (Python floats, i.e. doubles).
  const double decay = 1.0 - spec.lr * spec.weight_decay;
  const double bc1 = 1.0 - std::pow(spec.beta1, double(spec.step));
  const double bc2 = 1.0 - std::pow(spec.beta2, double(spec.step));
  const double step_size = spec.lr / bc1, bc2_sqrt = std::sqrt(bc2);

  // Split across cores: each core updates a contiguous run of the column tiles (element-wise, so the
  // values do not depend on the split).
  std::vector<FlatTile> all = my_share(ctx, flat_tiles(spec.elements, P, width));
  const int64_t n = int64_t(all.size());
  auto load = [&](int64_t k) {
    const FlatTile& t = all[size_t(k)];
    dma(ctx, sb2(ctx, p[k], t.p, t.f), flat_hbm(ctx, param, t), detail::kLoadQueue);
    dma(ctx, sb2(ctx, g[k], t.p, t.f), flat_hbm(ctx, grad, t), detail::kLoadQueue);
    dma(ctx, sb2(ctx, m[k], t.p, t.f), flat_hbm(ctx, exp_avg, t), detail::kLoadQueue);
    dma(ctx, sb2(ctx, v[k], t.p, t.f), flat_hbm(ctx, exp_avg_sq, t), detail::kLoadQueue);
  };
  auto act = [&](const isa::AccessPattern& dst, const char* op, const isa::AccessPattern& src, double scale) {
    ctx.builder.emit(isa::Opcode::activation).tensor("dst", dst).word("op", op).tensor("data", src).imm("scale", scale);
  };
  auto gp_tt = [&](const isa::AccessPattern& dst, const isa::AccessPattern& a, const isa::AccessPattern& b,
                   const char* op) {
    ctx.builder.emit(isa::Opcode::tensor_tensor)
        .tensor("dst", dst).tensor("data1", a).tensor("data2", b).word("op", op).on(Engine::gpsimd);
  };
  auto stt = [&](const isa::AccessPattern& dst, const isa::AccessPattern& data, const char* op0, double operand0,
                 const char* op1, const isa::AccessPattern& operand1) {
    ctx.builder.emit(isa::Opcode::scalar_tensor_tensor)
        .tensor("dst", dst).tensor("data", data).word("op0", op0).imm("operand0", operand0).word("op1", op1)
        .tensor("operand1", operand1);
  };
  // Stage s of tile k. Engines run their queues in order, so stage 0 of tile k is emitted next to stage
  // 1 of k - 1 and stage 2 of k - 2: each engine finds work while one tile's chain of ten dependent
  // instructions (Scalar -> GpSimd -> Vector -> ...) drains.
  auto stage = [&](int64_t s, int64_t k) {
    const FlatTile& t = all[size_t(k)];
    auto tile = [&](const detail::Ring& r) { return sb2(ctx, r[k], t.p, t.f); };
    if (s == 0) {
      // param.mul_(1 - lr * wd)  (Scalar, into fp32)
      act(tile(pf), "copy", tile(p), decay);
      // exp_avg.lerp_(grad, 1 - beta1) = m + (1 - beta1) * (g - m)  (GpSimd, Vector)
      gp_tt(tile(w), tile(g), tile(m), "subtract");
      stt(tile(m), tile(w), "multiply", 1.0 - spec.beta1, "add", tile(m));
      // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2) = v * beta2 + ((1 - beta2) * g) * g
      stt(tile(w), tile(g), "multiply", 1.0 - spec.beta2, "multiply", tile(g));
      act(tile(v), "copy", tile(v), spec.beta2);
      gp_tt(tile(v), tile(v), tile(w), "add");
    } else if (s == 1) {
      // denom = sqrt(v) / sqrt(bc2) + eps  (Scalar, GpSimd)
      act(tile(w), "sqrt", tile(v), 1.0);
      ctx.builder.emit(isa::Opcode::tensor_scalar)
          .tensor("dst", tile(w)).tensor("data", tile(w)).word("op0", "divide").imm("operand0", bc2_sqrt)
          .word("op1", "add").imm("operand1", spec.eps).on(Engine::gpsimd);
    } else {
      // param.addcdiv_(m, denom, value=-step_size) = p + (-step_size * m) / denom  (Vector, GpSimd)
      stt(tile(w), tile(m), "multiply", -step_size, "divide", tile(w));
      gp_tt(tile(p), tile(pf), tile(w), "add");
      // Stores last: a DMA engine serves its transfers in program order, so a store emitted before its
      // data is ready would hold up the next loads.
      dma(ctx, flat_hbm(ctx, exp_avg, t), tile(m), detail::kStoreQueue);
      dma(ctx, flat_hbm(ctx, exp_avg_sq, t), tile(v), detail::kStoreQueue);
      dma(ctx, flat_hbm(ctx, param, t), tile(p), detail::kStoreQueue);
    }
  };
  for (int64_t k = 0; k < std::min(kAhead, n); ++k) load(k);
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
  build_adamw(KernelContext{builder, config, "", core, cores}, spec, param, grad, m, v);
  return builder.finish();
}

}  // namespace trnsim::kernels
