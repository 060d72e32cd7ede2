// 2-D max / average pooling (NCHW) and their backwards, on the Vector and GpSimd engines.
//
// Layout: the N*C planes on partitions (a plane tile of <= 128 planes), a band of the plane's rows
// on the free axis. Each band's input rows go HBM -> SBUF once, into a buffer padded with -inf
// (max) or 0 (avg) borders (the left / right columns are set once per buffer, the top / bottom
// rows where a band has them), and every kernel offset (kh, kw) is a strided view of that buffer
// ([rows: stride s_h * Wp, cols: stride s_w]), as the conv kernel reads its windows; no im2col.
//
// Max pooling keeps a running max M and the offset code I of its first occurrence: with
// g(kh, kw) = kh * d_h * W + kw * d_w (strictly increasing in scan order when (KW - 1) < W),
// mask = view > M (strict: the first of equal values wins, as torch), M = max(M, view),
// I = max(I, mask * g) (a later winner always has a larger code). The flat index into the plane is
// I + base, base(oh, ow) = (oh s_h - p_h) W + ow s_w - p_w (an iota), written as int32.
// Average pooling sums the views in fp32 (kh-major, as torch) and divides by the window size: an
// immediate when every window has the same one (or divisor_override), else the product of the
// window's height (per output row) and width (per output column), both computed once ([P, Ho] and
// [P, Wo], read through stride-0 views): min(start + K, size + pad) - start, or without the padding
// min(start + K, size) - max(start, 0).
//
// Backwards: the gradient accumulates in an fp32 padded band G; per kernel offset one strided view
// of G gets += the output gradient masked by (index - base == g) (max; overlapping windows
// accumulate) or the output gradient / divisor (avg); the real rows of G are stored with the cast
// to the dtype. Bands of output rows (whole planes when they fit SBUF): the rows a band's windows
// share with the next band's (d_h (KH - 1) + 1 - s_h of them) are carried into the next band's G,
// so the bands are fixed by the spec (not by the cores) and so is the order of the additions.
//
// Engines (trn2 costs): the Vector engine's tensor_tensor takes 2N cycles at 0.96 GHz, GpSimd's
// N + 150 at 1.2 GHz, so each band's output rows are split between the two by their estimated times
// (each engine its own output / scratch buffers, granule aligned, so they never wait on each other;
// a backward's parts have their own G rows, the rows both reach are added at the end). Max forward:
// Vector does compare, max, scalar_tensor_tensor (I = max(I, mask * g)); GpSimd compare, max and
// max(I, mask * g) one step late, the Scalar engine scaling its masks in between (two masks in turn).
//
// Split across cores: the (plane tile, band) items (backward: plane tiles), each core a contiguous
// share; every output element is computed the same way whatever the split, so values equal the
// one-core values.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct PoolSpec {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [N, C, H, W]
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;            // implicit -inf (max) / 0 (avg) padding on both sides
  int64_t dilation_h = 1, dilation_w = 1;  // max only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg only
  int64_t divisor_override = 0;   // avg only; 0: none
  DType dtype = DType::bf16;      // input, output and gradients

  // torch's pooling_output_shape.
  static int64_t out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil) {
    const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil ? stride - 1 : 0);
    int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
    if (ceil && (out - 1) * stride >= in + pad) --out;
    return out;
  }
  int64_t out_h() const { return out_size(h, kh, pad_h, stride_h, dilation_h, ceil_mode); }
  int64_t out_w() const { return out_size(w, kw, pad_w, stride_w, dilation_w, ceil_mode); }
};

// Throws std::invalid_argument for what the kernels do not take (torch's own argument errors
// included: padding > kernel / 2, empty output; and (KW - 1) >= W for max pooling, planes of 2^24
// elements or more). The builders also throw it for rows too wide for SBUF or the 16-bit
// access-pattern fields (one output row's band must fit; W up to several thousand does).
void validate_pool(const PoolSpec& spec, bool max);

// Input "input" [N, C, H, W]; outputs "output" [N, C, Ho, Wo] and "indices" [N, C, Ho, Wo] int32 (the
// flat index into the H*W plane of the first maximum of each window).
isa::Program max_pool2d_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                uint32_t cores = 1);
// Input "input"; output "output".
isa::Program avg_pool2d_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                uint32_t cores = 1);
// Inputs "grad_output" [N, C, Ho, Wo] and "indices" (int32, as the forward writes them); output
// "grad_input" [N, C, H, W].
isa::Program max_pool2d_backward_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                         uint32_t cores = 1);
// Input "grad_output"; output "grad_input".
isa::Program avg_pool2d_backward_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                         uint32_t cores = 1);

}  // namespace trnsim::kernels
