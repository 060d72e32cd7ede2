// Cross-entropy over the last dim of [R, C] logits with integer class targets (torch's
// F.cross_entropy(logits, target, ignore_index=..., reduction=...)), forward and backward.
//
// Forward, one pass over each row tile of logits: Vector max (negated: the exp bias), Scalar
// exp(x - max) with the row sum in its accumulator, the target logit fetched by an indirect DMA
// (dma_gather) per row tile. loss = log(sum) - (x[target] - max), in torch's order (log_softmax's
// (x - max) - log(sum)): the max cancels first, so a logit offset of 1e7 or a row of 1e30 costs no digits.
// The row's softmax statistics are saved for the backward as the pair (max, sum exp(x - max)) (as flash
// attention saves its row statistics; one fp32 lse = max + log(sum) near |max| = 1e7 would round log(sum)
// to an ulp of 1, and the backward's exp(x - lse) with it); per-row losses go out directly (reduction
// none) or, with the valid-row count, are summed over all rows on the Tensor engine (a ones column, PSUM accumulation). The stages are
// skewed across row tiles (Vector max one tile ahead of the Scalar exp, a tile's loss after the next
// tile's exp), so the kernel runs at the Scalar exp rate (~80% of the per-core HBM share for bf16 on trn2).
// Backward: dlogits = (exp(x - max) / sum - onehot(target)) * scale per row, scale = grad_output[r] (none),
// grad_output (sum) or grad_output / valid rows (mean), 0 on ignored rows: Scalar exp(x - max) and
// * (scale / sum) (per row, once per core), GpSimd onehot * scale (an iota compared with the target) and
// the subtraction: torch's exp(log_softmax) - onehot, with x - max exact near the max.
// Rows too long for SBUF with the ring buffers (beyond 8K bf16 / 4K fp32 classes forward, ~3K
// backward on trn2: LLM vocabularies of 32K-152K) are split into column chunks (up to 16 KiB per
// partition per load forward, ~6 KiB backward; 256-byte aligned, 3-5 deep rings). Forward: online
// softmax statistics (per-chunk max and sum of exp(x - max_c), rescaled and combined per row once the
// row's chunks are done; one pass over HBM). Backward: chunks are independent given the saved (max, sum)
// (Scalar exp and * scale / sum, Vector the one-hot, GpSimd the difference). Reductions and ignore_index as
// in the one-pass schedule (no label smoothing: the frontend lowers F.cross_entropy, label smoothing too,
// as log_softmax + nll_loss). A chunk of only -inf logits (a masked vocabulary tail) adds nothing to the
// row, as on the CPU; +inf or NaN anywhere in a row makes its loss NaN, a row of only -inf too (torch's
// answers). Classes up to 2^24 / 32 = 524288 forward.
// Split across cores (KernelContext core/cores) by row tiles: the forward with reduction none and the
// backward (with mean every core counts the valid rows of all rows itself, from the targets); the
// forward with sum / mean (one total in one core's PSUM) runs wholly on core 0.
#pragma once

#include <cstdint>
#include <optional>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

enum class Reduction { none, sum, mean };

struct CrossEntropySpec {
  int64_t rows = 1, classes = 1;
  Reduction reduction = Reduction::mean;
  std::optional<int64_t> ignore_index = -100;  // torch's default; nullopt: every row counts
  DType logits_dtype = DType::fp32;             // dlogits has this dtype too; targets are int32
};

// loss: fp32 [R] (none) or [1]; lse: fp32 [R, 2], per row (max, sum exp(x - max)), the logsumexp being
// max + log(sum) (may be -1 when not wanted).
void build_cross_entropy(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits, uint32_t target,
                         uint32_t loss, int64_t lse);
// Inputs logits, target; outputs loss, lse. With cores > 1: part `core` of the kernel split across
// that many cores by row tiles (reduction none); with sum / mean (one total over every row, and cores
// cannot wait for one another) the whole kernel runs on core 0.
isa::Program cross_entropy_program(const CrossEntropySpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                   uint32_t cores = 1);

// lse: the forward's fp32 [R, 2] (max, sum) pairs; grad_output: fp32 [R] (none) or [1]; dlogits [R, C].
void build_cross_entropy_backward(const KernelContext& ctx, const CrossEntropySpec& spec, uint32_t logits,
                                  uint32_t target, uint32_t lse, uint32_t grad_output, uint32_t dlogits);
// Inputs logits, target, lse, grad_output (named "dloss"); output dlogits. With cores > 1: part `core`
// of the kernel split across that many cores by row tiles, whatever the reduction (with mean, every
// core counts the valid rows of all rows itself).
isa::Program cross_entropy_backward_program(const CrossEntropySpec& spec, const HardwareConfig& config,
                                            uint32_t core = 0, uint32_t cores = 1);

}  // namespace trnsim::kernels

namespace trnsim::kernels {

// A scaled one-hot matrix y [R, C]: y[r, c] = scale[r] where c == index[r], else 0 (an index outside
// [0, C), e.g. an ignored target or -1, gives a zero row). The gradient of nll_loss (scale = -grad /
// count) and the one-hot an embedding backward multiplies into its gradient. Built on the device:
// a GpSimd iota of column numbers once, then per 128-row tile and column chunk one Vector
// tensor_scalar (index == column) * scale, stored; DMA-store bound.
struct OneHotSpec {
  int64_t rows = 0, classes = 0;
  bool scaled = false;           // with an fp32 "scale" input (else 1)
  bool scale_broadcast = false;  // "scale" is one value [1] for every row (else one per row, [R])
  double multiplier = 1.0;       // applied to the scale on the device (e.g. -1 / count)
  DType output_dtype = DType::fp32;
};
void build_one_hot(const KernelContext& ctx, const OneHotSpec& spec, uint32_t index, int64_t scale, uint32_t y);
// Inputs "index" (int32 [R]) and "scale" (fp32 [R], when spec.scaled); output "y". With cores > 1:
// part `core` of the kernel split across that many cores by row tiles.
isa::Program one_hot_program(const OneHotSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                             uint32_t cores = 1);

}  // namespace trnsim::kernels
