// Depthwise conv2d (groups == C == O, weight [C, 1, KH, KW]) with the N*C planes on partitions.
// Internal to the conv2d kernels: conv2d_program / conv2d_backward_program pick it for a depthwise
// spec whose planes fit SBUF (else the grouped implicit-GEMM path of conv.cpp runs).
//
// Layout: a tile is up to 128 consecutive planes q = n*C + c (one contiguous HBM run per partition
// for every load and store). Each partition holds its zero-padded plane; kernel tap (kh, kw) is a
// strided view of it.
//  - forward / grad_input: out[q] = sum over taps of w[c(q), tap] * view(tap). On the Tensor engine as a
//    diagonal stationary diag(w[:, tap]) [128, 128] times the tap's view (moving, <= 512 pixels),
//    accumulated over the taps in PSUM (fp32): every partition does useful work whatever C, and a PE
//    column is one pixel-tap of 128 planes (2.4 GHz), 2.5x the Vector engine's fp32 multiply-add
//    (scalar_tensor_tensor, 2 cycles per element at 0.96 GHz). The weight rows w[c(q)] are gathered
//    onto the planes' partitions by a matmul with a 0/1 selection (partition starts must be aligned),
//    the diagonals built by one affine_select, both kept while the tiles' channel offset (q0 mod C)
//    repeats (tiles are ordered by it). The forward also gives some pixel tiles of a plane tile to the
//    other engines (one greedy plan per tile shape: Scalar products with the weight as the activation's
//    per-partition scale + GpSimd adds, or Vector scalar_tensor_tensor), PSUM evacuated by Vector.
//    grad_input is the PE path over dY (dilated by the stride, padded by d(k-1)-p) with the taps flipped.
//  - grad_weight / grad_bias on Vector, GpSimd and Scalar: per tile and group of taps (a kernel row, or
//    several rows for small planes), the product dY * view(tap) (tensor_tensor on GpSimd, reduced over
//    the free axis by Scalar activation accumulators or a Vector tensor_reduce; or both on Vector: a
//    static plan balancing the engines' estimated time) into per-plane columns part[q, tap]; the planes
//    of a channel are summed by sel^T @ part (sel[q, c] = (c(q) == c), a 0/1 matmul) accumulated over
//    the tiles in PSUM. grad_bias is one more column (the sum of dY). grad_input's PE work and its
//    evacuations are interleaved with it (engines run their queues in order).
// Split across cores by plane tiles (each plane goes through the same instructions on any core, so
// values are bit-identical). Backward: grad_weight by units (tiles joined by the channel chunks they
// touch: a chunk's accumulator needs every tile of its channels on one core, cores cannot wait for one
// another); with at least one unit per core each core takes a share of units and of grad_input's tiles,
// else core 0 runs grad_weight over every tile and the other cores share grad_input.
// Not taken (the grouped path runs): channel multiplier O = m*C with m > 1, planes that do not fit SBUF
// (e.g. the backward of 112x112 planes, anything at 224x224).
#pragma once

#include "kernels/conv.h"

namespace trnsim::kernels::conv_detail {

// A depthwise spec (groups == C == O > 1) this path takes (planes fit SBUF and the engines' limits).
bool depthwise_applies(const Conv2dSpec& spec, const KernelContext& ctx, bool backward);
void build_depthwise_forward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dTensors& tensors);
void build_depthwise_backward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dBackwardTensors& tensors);

}  // namespace trnsim::kernels::conv_detail
