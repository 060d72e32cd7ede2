// Internal to the conv2d kernels (conv.cpp, conv_backward.cpp): the implicit-GEMM builder shared by
// the forward, the input gradient (dX) and the weight gradient (dW). See conv.h for the schedule.
//
// The builder works on a ConvGeometry rather than the user's Conv2dSpec, so the three passes are one
// machine: dX of a stride-s conv is a stride-1 conv of dY dilated by s (s - 1 zeros between
// elements), padded by d(k-1)-p (negative = cropped) with the flipped, channel-transposed weight,
// and dW streams the same input blocks as the forward.
#pragma once

#include <cstdint>
#include <vector>

#include "isa/view.h"
#include "kernels/conv.h"

namespace trnsim::kernels::conv_detail {

// floor / ceil of a / b for b > 0 and any sign of a (pads may be negative).
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div_signed(int64_t a, int64_t b) { return -floor_div(-a, b); }

enum class ConvMode { forward, grad_input, grad_weight };

struct ConvGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;  // the input as stored: [N, C, H, W]
  int64_t o = 1, kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t in_dil_h = 1, in_dil_w = 1;             // zeros between input elements (dX of a strided conv)
  int64_t pad_t = 0, pad_b = 0, pad_l = 0, pad_r = 0;  // negative = crop
  bool flip_weight = false;  // weight is [C_in_of_this_conv, O_of_this_conv, KH, KW] read flipped (dX)
  bool bias = false;
  DType input_dtype = DType::bf16, output_dtype = DType::fp32;

  int64_t padded_w() const { return (w - 1) * in_dil_w + 1 + pad_l + pad_r; }
  int64_t padded_h() const { return (h - 1) * in_dil_h + 1 + pad_t + pad_b; }
  int64_t out_h() const { return (padded_h() - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (padded_w() - dilation_w * (kw - 1) - 1) / stride_w + 1; }
};

ConvGeometry forward_geometry(const Conv2dSpec& s);
ConvGeometry grad_input_geometry(const Conv2dSpec& s);

// HBM tensors of one pass: `input` is what the blocks stream (X, or dY for dX); forward and dX
// write `output` with `weight`; dW reads `grad_output` and writes `grad_weight` (and `grad_bias`).
struct ConvTensors {
  uint32_t input = 0, weight = 0, output = 0, grad_output = 0, grad_weight = 0;
  int64_t bias = -1, grad_bias = -1;
};

// A contraction group: one matmul per (pixel tile, O tile) contracts over channel chunk `chunk`
// at kernel row kh and columns kw0 .. kw0 + reps - 1 (one per replica), on partitions [0, k).
struct Group {
  int64_t chunk, kh, kw0, reps, k;
};
// Output pixels of one tile: block-local images [n, n + nc), band-local rows, columns.
struct PixelTile {
  int64_t n, nc, row, rc, col, cc;
  int64_t pixels() const { return nc * rc * cc; }
};
struct Block {
  int64_t n0, nb, r0, rb;
};

isa::AccessPattern raw_ap(const KernelContext& ctx, uint32_t tensor, int64_t offset, std::vector<isa::ApDim> d);
void memset_flat(const KernelContext& ctx, uint32_t buffer, int64_t partitions, int64_t total, double value = 0);
void evacuate(isa::ProgramBuilder& b, const isa::AccessPattern& dst, const isa::AccessPattern& src,
              const isa::AccessPattern* bias, Engine engine);

class Conv2dBuilder {
 public:
  Conv2dBuilder(const KernelContext& ctx, const ConvGeometry& g, const ConvTensors& t, ConvMode mode)
      : m_ctx(ctx), m_s(g), m_t(t), m_mode(mode) {}
  void build();

 private:
  // conv.cpp: planning, input blocks, the forward / dX matmuls.
  void validate() const;
  int64_t rows_in(int64_t rb) const { return (rb - 1) * m_s.stride_h + (m_s.kh - 1) * m_s.dilation_h + 1; }
  void plan();
  void allocate();
  void allocate_blocks(int64_t extra_bytes_per_pixel, int64_t target_pixels);
  std::vector<PixelTile> pixel_tiles(const Block& blk, int64_t max_px) const;
  std::vector<Block> blocks() const;
  void load_weight_rows(int64_t o0, int64_t count);
  void prepare_weights(const Range& ot);
  void dma_emit(const isa::AccessPattern& dst, const isa::AccessPattern& src, int64_t queue);
  void load_block(const Block& blk, int64_t index);
  void compute_block(const Block& blk, int64_t index, int64_t o0, int64_t count);
  void emit();
  isa::AccessPattern ap(uint32_t tensor, int64_t offset, std::vector<isa::ApDim> d) const {
    return raw_ap(m_ctx, tensor, offset, std::move(d));
  }

  // conv_backward.cpp: the weight gradient.
  void allocate_grad_weight();
  void load_grad_output(const Block& blk, int64_t index);
  void transpose_tile(const Block& blk, int64_t index, const PixelTile& t, int64_t slot);
  void grad_weight_matmuls(const PixelTile& t, int64_t slot, int64_t pass, bool first, bool last);
  void flush_grad_weight(int64_t pass, bool first_block);
  void store_grad_weight();
  void emit_grad_weight();

  const KernelContext& m_ctx;
  const ConvGeometry m_s;
  const ConvTensors& m_t;
  const ConvMode m_mode;
  int64_t m_ho = 0, m_wo = 0, m_wb = 0, m_in_bytes = 0;
  std::vector<Range> m_chunks;
  int64_t m_cpad = 0, m_reps = 1, m_kw_groups = 1;
  std::vector<Group> m_groups;
  bool m_staged = false, m_needs_zero = false;
  int64_t m_o_block = 0, m_nb = 1, m_rb = 1, m_rows_in = 1;
  uint32_t m_wt = 0, m_wraw = 0, m_acc = 0, m_wps = 0, m_stage = 0, m_bias = 0;
  uint32_t m_buf[2] = {0, 0}, m_staging[2] = {0, 0};
  int64_t m_wprep_step = 0, m_acc_step = 0, m_stage_step = 0, m_evac_step = 0, m_store_step = 0;

  // Weight gradient: dW[O, C*KH*KW (+1 ones column = grad_bias)] accumulated over pixel tiles.
  struct Accumulator {
    Range o, cols;
  };
  std::vector<Range> m_o_chunks;
  std::vector<Accumulator> m_accs;  // (O tile, column tile) pairs, in passes of kGradAccBanks
  int64_t m_ckk = 0, m_cols = 0, m_passes = 1, m_slots = 1, m_tslots = 8, m_tile_step = 0;
  int64_t m_ostride = 0, m_cstride = 0;
  uint32_t m_dy[2] = {0, 0}, m_dyt = 0, m_colt = 0, m_wacc = 0, m_tps = 0, m_wrow = 0;
};

}  // namespace trnsim::kernels::conv_detail
