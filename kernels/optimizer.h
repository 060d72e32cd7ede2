// AdamW update step, in place, as torch.optim.AdamW (decoupled weight decay, bias corrections
// 1 - beta^step) computes it for one parameter tensor:
//   p *= 1 - lr * wd;  m = lerp(m, g, 1 - beta1);  v = v * beta2 + (1 - beta2) * g * g
//   p += -(lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// with torch's operation order (so fp32 results agree to an ulp or so). State m, v is fp32 or the
// parameter's 2-byte dtype; p and g fp32 or bf16 (p, m, v are updated in fp32 and rounded once).
// beta1, beta2 and eps are immediates; what changes from step to step (the bias corrections of the
// step number, and the learning rate a scheduler moves) is a runtime operand: a small fp32 HBM input
// `adamw_scalars` [3] (adamw_scalars() fills it), loaded once into every partition, so that one program serves
// every step and the device's program and timing caches hit from the second step on.
//
// HBM-bound: 28 B per fp32 parameter (read p, g, m, v; write p, m, v), 22 B for bf16 p and g with
// fp32 state, 14 B with bf16 state (18 B as the DMA cost model counts it: the state is stored from
// fp32 SBUF tiles, the DMA rounding once, which keeps m and v in fp32 for the update). The flattened
// tensor is spread as [128, N/128] (+ a one-partition tail) and streamed in column tiles (as large
// as SBUF allows, narrowed toward 16 per core but not below 512 columns, so the pipeline's fill and
// drain stay short) through a
// five-stage software pipeline with loads three tiles ahead, one DMA queue per tensor and direction.
// No engine performance mode applies (every op reads or writes fp32), so the ~13 element-passes
// per column are balanced over three engines: Vector two scalar_tensor_tensor (2 x 2N), GpSimd four
// tensor_tensor (4N + start-ups), Scalar four activations (4N), and the denominator's tensor_scalar
// split by columns between them by clock (Scalar only from trn3, where it may divide).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct AdamWSpec {
  int64_t elements = 0;
  DType param_dtype = DType::fp32, grad_dtype = DType::fp32;
  // exp_avg / exp_avg_sq in HBM (torch keeps them in the parameter's dtype); the update runs in fp32
  // SBUF tiles either way (the DMA widens on load and rounds once on store, as torch's fused kernel).
  DType state_dtype = DType::fp32;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// One launch's values of what the program takes at run time.
struct AdamWStep {
  double lr = 1e-3, weight_decay = 1e-2;
  int64_t step = 1;  // 1-based, after the increment (torch's state["step"] when the update runs)
};
// The `adamw_scalars` input, fp32 [3]: (-lr / (1 - beta1^step), sqrt(1 - beta2^step), 1 - lr * weight_decay),
// formed in double as torch's _single_tensor_adamw forms them (Python floats) and rounded to fp32 as
// the engines take a scalar operand. Throws KernelUnsupported for step < 1.
constexpr uint32_t kAdamWScalars = 3;
std::vector<float> adamw_scalars(const AdamWSpec& spec, const AdamWStep& step);

// param, exp_avg, exp_avg_sq are read and written in place; grad and scalars (fp32 [3], adamw_scalars())
// are read.
void build_adamw(const KernelContext& ctx, const AdamWSpec& spec, uint32_t param, uint32_t grad, uint32_t exp_avg,
                 uint32_t exp_avg_sq, uint32_t scalars);
// HBM tensors param, grad, exp_avg, exp_avg_sq, adamw_scalars (all inputs; param and the state are also
// the results).
// With cores > 1 it is part `core` of the update split across that many cores (contiguous tiles each).
isa::Program adamw_program(const AdamWSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                           uint32_t cores = 1);

}  // namespace trnsim::kernels
