// 2-D convolution (NCHW, weight [O, C, KH, KW]) as an implicit GEMM on the Tensor engine.
//
// Arrangement: output channels on PSUM partitions (stationary = W^T tile [K, O-tile <= 128]),
// output pixels on the free axis (moving = a strided window of the input in SBUF, <= 512 pixels).
// The transposed arrangement (pixels stationary, O moving) would fill the array for O = 64 (the
// model's II is max(min(64, M), N)), but writes [pixels, O] tiles that need a PE transpose each
// before the NCHW store (one descriptor per element otherwise), which eats most of the gain.
//
// The im2col matrix never exists: each input block (a few images, or a band of output rows of
// one image) is loaded once into a zero-padded SBUF buffer [C, images, rows, W + 2*pad_w], and
// every kernel offset (kh, kw) is a moving access pattern [C, images, rows (stride s*Wb),
// cols (stride s)] into it, accumulating in PSUM over all offsets and channel chunks. When
// C <= 64 the contraction would use only C of the 128 PE rows, so the buffer holds R = 128/C'
// copies on partition groups r*C' (C' = C rounded up to the 32/64-partition alignment), copy r
// shifted left by r*dilation columns: one matmul then contracts over (c, kw0..kw0+R-1).
//
// Loads stay cheap for the DMA (one descriptor per partition and image): rows go contiguous
// HBM -> staging SBUF, and GpSimd copies them (lane-wise, with the replica's column shift) into
// the padded buffer, whose zero borders are set once. Blocks are double-buffered; Vector and
// Scalar alternate PSUM evacuation with the bias add and output cast.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct Conv2dSpec {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [N, C, H, W]
  int64_t o = 1, kh = 1, kw = 1;        // weight [O, C, KH, KW]
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;  // zero padding on both sides
  int64_t dilation_h = 1, dilation_w = 1;
  // Grouped (and depthwise, groups == C): weight [O, C / groups, KH, KW]; group g maps input channels
  // [g C/groups, (g+1) C/groups) to output channels [g O/groups, ...). Built as dense convs over blocks
  // of consecutive groups that fit the PE (<= 128 input and output channels; one group per block when
  // a group is wider) with block-diagonal weights: correct for any grouping, but the PE multiplies
  // the zeros too, so a depthwise conv costs what a dense min(C, 128)-channel conv costs (the PE's
  // moving columns, KH*KW*pixels per 128 channels, are the bottleneck; MFU ~ 1 / 128 of dense).
  // Depthwise (groups == C == O) whose planes fit SBUF takes its own path instead (depthwise_conv.h):
  // the N*C planes on partitions, diagonal weights per tap on the PE, grad_weight on Vector / GpSimd /
  // Scalar. A channel multiplier (O = m*C, m > 1) stays on the grouped path.
  int64_t groups = 1;
  bool bias = false;   // + bias[O] (input dtype)
  DType input_dtype = DType::bf16;
  DType output_dtype = DType::fp32;

  int64_t out_h() const { return (h + 2 * pad_h - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (w + 2 * pad_w - dilation_w * (kw - 1) - 1) / stride_w + 1; }
  // Model FLOPs (2 per MAC), the numerator of the MFU.
  double flops() const { return 2.0 * double(n * o * out_h() * out_w()) * double(c / (groups > 0 ? groups : 1) * kh * kw); }
};

// HBM tensors the caller declared: input [N, C, H, W], weight [O, C, KH, KW], bias [O], output
// [N, O, Ho, Wo] (output_dtype).
struct Conv2dTensors {
  uint32_t input, weight, output;
  int64_t bias = -1;
};

void build_conv2d(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dTensors& tensors);

// A whole program: inputs "input", "weight" (and "bias"), output "output".
// Split across cores (part `core` of `cores`, sharing HBM; every core declares the same tensors): the
// one-core plan's (O block, input block, pixel tile) items, each core a contiguous share; a core loads
// the blocks its tiles are in (a block cut between two cores is loaded by both) and all the weights.
// The tiles stay the one-core ones because the simulated matmul's rounding depends on its shape: the
// values equal the one-core values bit for bit. cores == 1 emits the same program as before.
isa::Program conv2d_program(const Conv2dSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);

// Backward of the forward above (same spec; `bias` says whether grad_bias is wanted; gradients in
// spec.output_dtype, accumulated in fp32). Grouped: per block of groups as in the forward; dW of a block
// is computed dense, masked to its block diagonal and folded to [O, C / groups, KH, KW].
//  - grad_input: stride 1 is a conv of dY padded by d(k-1)-p with the flipped, channel-transposed
//    weight, on the forward's machinery. Stride s > 1 uses the same conv over dY dilated by s
//    (s - 1 zero rows/columns between elements, placed by the block loader in SBUF, so nothing
//    extra goes through HBM). Chosen over col2im because col2im's scatter-add of KH*KW
//    overlapping [C, pixels] partials runs on the Vector engine (~KH*KW adds per dX element),
//    which is slower than the PE's wasted zero MACs (3/4 of them at s = 2) and keeps one code path.
//  - grad_weight (and grad_bias): a GEMM over output pixels on partitions: dY^T[pixels, O] is the
//    stationary, im2col(X)^T[pixels, C*KH*KW] the moving (PE transposes of the forward's input
//    windows), accumulated in PSUM; grad_bias is one more moving column of ones. A dW whose buffers do
//    not fit SBUF at once (fp32 512x512x3x3) goes in rounds of <= 6 accumulators, each a stream of X and
//    dY, the rows gathered in SBUF and stored by channel chunk (conv_builder.h).
struct Conv2dBackwardTensors {
  uint32_t input, weight, grad_output, grad_input, grad_weight;
  int64_t grad_bias = -1;
};
void build_conv2d_backward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dBackwardTensors& tensors);

// Inputs "input", "weight", "grad_output" [N, O, Ho, Wo] (input dtype); outputs "grad_input",
// "grad_weight" (and "grad_bias" when spec.bias).
// Split across cores: dX as the forward; dW / db by the one-core plan's accumulators ([O tile <= 128,
// column tile <= 512] of dW viewed as [O, (tap, C) + ones column]), a contiguous run per core balanced
// by columns, each over every pixel: no partial sums cross cores, but each core streams all of X (the
// channel chunks its columns need) and dY (its O tiles). A dW with one accumulator (O <= 128 and
// C*KH*KW < 512) runs on core 0; with two, the cores get e.g. [64, 512] and [64, 65] columns (64x64x3x3),
// so the backward gains less than the forward.
isa::Program conv2d_backward_program(const Conv2dSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                     uint32_t cores = 1);
// Model FLOPs of the backward: dX and dW, each the forward's (grad_bias is not counted).
inline double conv2d_backward_flops(const Conv2dSpec& spec) { return 2 * spec.flops(); }

}  // namespace trnsim::kernels
