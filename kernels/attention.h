// Flash attention forward: O = softmax(Q K^T * scale [+ causal mask]) V per (batch, head), with
// grouped-query heads (H query heads share H / Hkv key/value heads), head dims up to 128.
//
// Schedule: per (batch, kv head) K^T [d, S] and V [S -> 128-row tiles, d] stay in SBUF; per
// query tile of 128 rows Q^T arrives by DMA transpose; per block of 512 keys the Tensor engine
// computes S = Q K^T into PSUM, the Vector engine the running row max, the Scalar engine
// exp(scale * (S - max)) with the row sums fused, P is transposed (alternately on the PE array and
// by DMA, to share the load) and P V accumulates in PSUM; the output is rescaled by the online
// softmax correction (Vector) and normalised once at the end.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct AttentionSpec {
  int64_t batch = 1, heads = 1, kv_heads = 1, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  double scale = 0;  // 0 = 1 / sqrt(head_dim)
  DType dtype = DType::bf16;
  bool write_lse = false;  // also write each row's logsumexp (of scale * S), what the backward needs
};

// q, o: [B, H, Sq, d]; k, v: [B, Hkv, Sk, d]; lse (when spec.write_lse): [B, H, Sq] fp32.
struct AttentionTensors {
  uint32_t q, k, v, o;
  int64_t lse = -1;
};

void build_flash_attention_forward(const KernelContext& ctx, const AttentionSpec& spec, const AttentionTensors& t);
// With cores > 1: part `core` of the kernel split across that many cores by (batch, head, query tile)
// blocks (contiguous runs balanced by key blocks; q, k, v, o, lse shared in HBM).
isa::Program flash_attention_forward_program(const AttentionSpec& spec, const HardwareConfig& config,
                                             uint32_t core = 0, uint32_t cores = 1);

// Model FLOPs of the two matmuls (causal counts the unmasked half), for MFU.
double attention_forward_flops(const AttentionSpec& spec);

}  // namespace trnsim::kernels
