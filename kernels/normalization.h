// Row-wise kernels over the last dim: softmax, log_softmax, layernorm and rmsnorm (forward).
//
// Layout: the flattened outer dims are rows, 128 per tile on partitions; the whole last dim C of a
// row sits on the free axis (one contiguous DMA run per partition). A row must fit in SBUF with
// the kernel's ring buffers (C up to ~8K elements for bf16 rmsnorm on trn2); longer rows would
// need a two-pass schedule, not implemented.
//
// Engine balance (the cost model's per-element cycles: Vector 0.96-1.2 GHz, Scalar and GpSimd
// 1.2 GHz, one element per partition per cycle outside the bf16 modes): each kernel spreads its
// full-width passes over the three engines so that none exceeds the DMA time of a tile:
//   rmsnorm:    Scalar square + row sum (activation reduce), GpSimd x * w (exact in fp32 for bf16
//               inputs), Vector (x * w) * rstd -> output dtype.
//   layernorm:  Vector bn_stats/bn_aggr, Scalar x * rstd - mean * rstd, GpSimd * w and + b.
//   softmax:    Vector row max, Scalar exp with the row sum, GpSimd * 1/sum.
//   log_softmax: Vector row max, Scalar exp with the row sum, GpSimd x - max - log(sum).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct SoftmaxSpec {
  std::vector<int64_t> shape;  // softmax over the last dim
  bool log = false;            // log_softmax
  DType input_dtype = DType::fp32, output_dtype = DType::fp32;
};

void build_softmax(const KernelContext& ctx, const SoftmaxSpec& spec, uint32_t x, uint32_t y);
isa::Program softmax_program(const SoftmaxSpec& spec, const HardwareConfig& config);  // x input, y output

enum class NormKind { layernorm, rmsnorm };

struct NormSpec {
  NormKind kind = NormKind::rmsnorm;
  std::vector<int64_t> shape;  // normalised over the last dim
  double eps = 1e-5;
  bool weight = true, bias = false;  // bias: layernorm only
  DType input_dtype = DType::fp32, output_dtype = DType::fp32, param_dtype = DType::fp32;
};

// y = (x - mean) / sqrt(var + eps) * w + b (layernorm), y = x / sqrt(mean(x^2) + eps) * w (rmsnorm);
// w, b are [C] tensors (-1 when absent).
void build_norm(const KernelContext& ctx, const NormSpec& spec, uint32_t x, int64_t w, int64_t b, uint32_t y);
isa::Program norm_program(const NormSpec& spec, const HardwareConfig& config);  // x, w, b inputs; y output

}  // namespace trnsim::kernels
