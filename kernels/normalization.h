// Row-wise kernels over the last dim: softmax, log_softmax, layernorm and rmsnorm, forward and backward.
//
// Layout: the flattened outer dims are rows, 128 per tile on partitions; the whole last dim C of a
// row sits on the free axis (one contiguous DMA run per partition), when it fits in SBUF with the
// kernel's ring buffers (C up to ~8K elements for bf16 rmsnorm on trn2, ~3K fp32 / ~4.7K bf16 softmax).
// Longer forward rows switch automatically to a chunked two-pass schedule over column chunks (up to
// 16 KiB per partition per load, 256-byte aligned, 4-deep rings), re-reading x from HBM:
//   softmax / log_softmax: online softmax, per-chunk max and sum of exp(x - max_c) combined per row
//     (rescaled by exp(max_c - max); a chunk of only -inf weighs 0), then y = exp(x - max) / sum or
//     (x - max) - log(sum);
//   rmsnorm: per-chunk sums of squares, then x * w * rstd; layernorm: bn_stats per <= 512 elements
//     of every chunk, one bn_aggr per row (the variance), the mean corrected by Scalar sums of x - K
//     (K = the first chunk's mean), then (x - mean) * rstd * w + b. The w / b chunks are
//     re-read per group of 4 row tiles (pass 2 runs chunk-major across the group).
// The backward kernels switch likewise to two passes over column chunks for rows too long for SBUF:
//   softmax backward: pass 1 per-chunk row sums of dy * y, pass 2 (dy - sum) * y; log_softmax backward:
//     pass 1 per-chunk sums of dy (only dy is read), pass 2 dy - exp(y) * sum;
//   norm backward: pass 1 per-chunk sums of g * xhat (and g, layernorm), pass 2 dx; both passes run
//     chunk-major across the core's row tiles, so each w chunk is broadcast once per pass and dw / db
//     accumulate one chunk's columns in PSUM over every row tile (any C; the chunk is at most
//     512 x PSUM banks wide). Also used when dw / db of a row that fits SBUF need more PSUM banks
//     than the core has (C > 4096 on trn2/trn3). The per-(row tile, chunk) partial sums stay in SBUF:
//     8 bytes x row tiles x chunks per partition.
//
// Engine balance (the cost model's per-element cycles: Vector 0.96-1.2 GHz, Scalar and GpSimd
// 1.2 GHz, one element per partition per cycle outside the bf16 modes): each kernel spreads its
// full-width passes over the three engines so that none exceeds the DMA time of a tile:
//   rmsnorm:    Scalar square + row sum (activation reduce), GpSimd x * w (exact in fp32 for bf16
//               inputs), Vector (x * w) * rstd -> output dtype.
//   layernorm:  Vector bn_stats/bn_aggr, GpSimd * w and + b; Scalar x * rstd - mean * rstd (16-bit x) or,
//               for fp32 x, d = x - mean (with sum(d): the corrected two-pass mean) and d * rstd -
//               mean(d) * rstd (on GpSimd without w).
//   softmax:    Vector row max, Scalar exp with the row sum, GpSimd * 1/sum.
//   log_softmax: Vector row max, Scalar exp with the row sum, GpSimd (x - max) - log(sum).
// Numerics follow torch's fp32 CPU kernels where those are exact and do better where they cancel: the max
// is subtracted before log(sum) is added (a fused bias -max - log(sum) loses log(sum) beside a max of 1e7),
// the mean before rstd multiplies (x * rstd - mean * rstd loses an ulp of x * rstd); a row whose mean
// squared overflows fp32 is NaN, as torch's Welford statistics make it (see emit_rstd).
//
// Split across cores (KernelContext core/cores): each core takes a contiguous share of the row tiles;
// rows are independent, so the values equal the one-core values. The backward with dw / db (column
// sums over every row): each core forms dx of its share, core 0 also accumulates dw / db over every
// row (re-reading x and dy of the other cores' rows); the chunked backward with dw / db runs wholly
// on core 0.
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
isa::Program softmax_program(const SoftmaxSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                             uint32_t cores = 1);  // x input, y output

enum class NormKind { layernorm, rmsnorm };

struct NormSpec {
  NormKind kind = NormKind::rmsnorm;
  std::vector<int64_t> shape;  // normalised over the last dim
  double eps = 1e-5;
  bool weight = true, bias = false;  // bias: layernorm only
  DType input_dtype = DType::fp32, output_dtype = DType::fp32, param_dtype = DType::fp32;
  // Also write the per-row statistics the backward takes (torch's native_layer_norm outputs): mean
  // (layernorm) and rstd, fp32 [R]. Each row tile stores its [P, 1] columns as it finishes them.
  bool save_stats = false;
};

// y = (x - mean) / sqrt(var + eps) * w + b (layernorm), y = x / sqrt(mean(x^2) + eps) * w (rmsnorm);
// w, b are [C] tensors (-1 when absent); mean, rstd the statistics outputs (-1 when not wanted).
void build_norm(const KernelContext& ctx, const NormSpec& spec, uint32_t x, int64_t w, int64_t b, uint32_t y,
                int64_t mean = -1, int64_t rstd = -1);
// x, w, b inputs; y output (and "mean" (layernorm), "rstd" when spec.save_stats).
isa::Program norm_program(const NormSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                          uint32_t cores = 1);



// ---- backward passes ----
//
// Engine balance of the backward kernels (per [128, C] tile):
//   norm backward (rows that fit): with g = dy * w, dx = rstd * g - alpha * x - beta (alpha, beta per
//                  row from sum(g * x) and sum(g)). GpSimd g and g * x; Scalar g~ = rstd * g (with
//                  sum(g) in its accumulator) and sum(g * x) (its scale makes the sum alpha's main term);
//                  Vector (x - mean) * dy in fp32 for dw (the bf16 subtract-multiply one-pass form),
//                  h = x * alpha + beta (bf16 4x mode) and dx = g~ - h; Tensor dw += rstd.T @ that and
//                  db += ones.T @ dy, accumulated in PSUM over every row tile. bf16 inputs keep g, g~, h
//                  in bf16 (dx is a bf16 result of a cancellation), the sums and dw / db in fp32.
//                  fp32 layernorm forms sum(g * (x - mean)) from e (q = e * w), not sum(g * x) - mean *
//                  sum(g), which cancels at large offsets (as torch's CPU backward does); 16-bit x carries
//                  less precision than that cancellation loses, so it keeps q = g * x.
//                  ~86% (layernorm) / ~88% (rmsnorm) of the per-core HBM share for bf16 [8192, 4096]
//                  on trn2, Vector-bound. Rows too long: two passes over column chunks (fp32 work tiles).
//   softmax backward: GpSimd dy * y, Scalar its row sum, Vector (dy - sum) * y (the bf16 fast mode).
//   log_softmax backward: Scalar exp(y), Vector sum(dy), GpSimd dy - exp(y) * sum.

struct NormBackwardSpec {
  NormKind kind = NormKind::rmsnorm;
  std::vector<int64_t> shape;       // of x, dy and dx; normalised over the last dim
  bool weight = true, bias = false;  // bias: layernorm only; dw exists when weight, db when bias
  DType input_dtype = DType::fp32;   // x, dy, dx
  DType param_dtype = DType::fp32;   // w, dw, db
};

// Takes the statistics the forward saved, as torch's native_layer_norm_backward does: mean and rstd
// (fp32 [R], R = rows; mean is -1 for rmsnorm), with rstd = 1 / sqrt(var + eps) (layernorm) or
// 1 / sqrt(mean(x^2) + eps) (rmsnorm). dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with
// g = dy * w (layernorm; rmsnorm without the mean(g) term), dw = sum over rows of dy * xhat, db = sum dy.
// w, dw, db are -1 when absent. Any C (dw / db wider than the PSUM banks use the chunked schedule).
void build_norm_backward(const KernelContext& ctx, const NormBackwardSpec& spec, uint32_t x, uint32_t dy,
                         int64_t mean, uint32_t rstd, int64_t w, uint32_t dx, int64_t dw, int64_t db);
// Inputs x, dy, mean (layernorm), rstd, w (weight); outputs dx, dw (weight), db (bias).
isa::Program norm_backward_program(const NormBackwardSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                   uint32_t cores = 1);

struct SoftmaxBackwardSpec {
  std::vector<int64_t> shape;  // over the last dim
  bool log = false;            // log_softmax
  DType input_dtype = DType::fp32, output_dtype = DType::fp32;  // y and dy / dx
};

// dx from the forward's output y and dy: softmax dx = y * (dy - sum(dy * y)) (torch's
// _softmax_backward_data), log_softmax dx = dy - exp(y) * sum(dy) (_log_softmax_backward_data).
void build_softmax_backward(const KernelContext& ctx, const SoftmaxBackwardSpec& spec, uint32_t y, uint32_t dy,
                            uint32_t dx);
isa::Program softmax_backward_program(const SoftmaxBackwardSpec& spec, const HardwareConfig& config,
                                      uint32_t core = 0, uint32_t cores = 1);  // y, dy in; dx out

}  // namespace trnsim::kernels
