// Flash attention forward: O = softmax(Q K^T * scale [+ causal mask]) V per (batch, head), with
// grouped-query heads (H query heads share H / Hkv key/value heads), head dims up to 128.
//
// Schedule: per (batch, kv head) K^T [d, S] and V [S -> 128-row tiles, d] stay in SBUF; per
// query tile of 128 rows Q^T arrives by DMA transpose; the keys of a tile are cut into sections of
// up to 1024 (two PSUM banks of fp32 scores). Per section the Tensor engine computes S = Q K^T
// into PSUM (plus I^T M for the causal mask on the diagonal square), the Vector engine the row max
// (its one pass over the scores: the bottleneck on trn2), GpSimd the running max as
// -scale * max, the Scalar engine exp(scale * S - scale * max) with the row sums fused and the
// rescale factor, P is transposed by DMA and P V accumulates in PSUM over the section; the output
// update o = o * rescale + P V runs on GpSimd (SBUF) with P V drained by the Scalar engine (trn2)
// or added from PSUM by the Vector engine (trn3), and o is normalised once at the end. The stages
// of a section are emitted in a fixed software pipeline across sections and tiles.
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
