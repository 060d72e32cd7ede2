// Flash attention backward (FlashAttention-2 style): dQ, dK, dV of O = softmax(Q K^T * scale
// [+ causal mask]) V per (batch, head), with grouped-query heads (dK, dV summed over the query
// heads that share a key/value head), head dims up to 128, 2-byte dtypes with fp32 accumulation.
//
// Inputs are what the forward keeps for training: q, k, v, o, dO and the per-row logsumexp
// L = log(sum_j exp(scale * s_ij)) (natural log, masked keys excluded) as fp32 [B, H, Sq]; P is
// recomputed as exp(scale * S - L), so no softmax statistics are redone. The forward in
// kernels/attention.cpp does not write L yet; the tests take it from PyTorch.
//
// Schedule: per (batch, kv head, query head) Q^T and dO^T [d, Sq] (DMA transpose), Q and dO
// [Sq -> 128-row tiles, d], -L and D = rowsum(dO * O) stay in SBUF. Per block of 512 keys K^T,
// V^T [d, 512] and K [512 -> 128-row tiles, d] are loaded (double-buffered), and per query tile
// of 128 rows the Tensor engine computes S = Q K^T and dP = dO V^T into PSUM; the Scalar engine
// P = exp(scale * S - L) and dP - D, the Vector engine dS = P * (dP - D); then dV += P^T dO and
// dK += dS^T Q accumulate in PSUM over the query tiles (queries are the contraction, so P and dS
// are used as they are), dS is transposed by DMA (SBUF to SBUF, sparing the PE array) and
// dQ_partial = dS K is added into an fp32 dQ in SBUF. The scale is applied when dK and dQ leave
// PSUM. Causal blocks skip the 128-key tiles above the diagonal.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/kernel_common.h"

namespace trnsim::kernels {

// q, o, dout, dq: [B, H, Sq, d]; k, v, dk, dv: [B, Hkv, Sk, d]; lse: fp32 [B, H, Sq].
struct AttentionBackwardTensors {
  uint32_t q, k, v, o, dout, lse, dq, dk, dv;
};

void build_flash_attention_backward(const KernelContext& ctx, const AttentionSpec& spec,
                                    const AttentionBackwardTensors& t);
// HBM tensors named q, k, v, o, do, lse (inputs) and dq, dk, dv (outputs).
// With cores > 1: part `core` of the kernel split across that many cores by (batch, kv head): each
// core computes whole dK / dV of its kv heads (all query heads of a group on the same core, so no
// partial sums cross cores) and dQ of those query heads. Values equal the one-core values.
isa::Program flash_attention_backward_program(const AttentionSpec& spec, const HardwareConfig& config,
                                              uint32_t core = 0, uint32_t cores = 1);

// Model FLOPs of the backward's five matmuls: 2.5x the forward's two.
double attention_backward_flops(const AttentionSpec& spec);

}  // namespace trnsim::kernels
