// Internal to the conv2d kernels (conv.cpp, conv_backward.cpp): the implicit-GEMM builder shared by
// the forward, the input gradient (dX) and the weight gradient (dW). See conv.h for the schedule.
//
// The builder works on a ConvGeometry rather than the user's Conv2dSpec, so the three passes are one
// machine: dX of a stride-s conv is a stride-1 conv of dY dilated by s (s - 1 zeros between
// elements), padded by d(k-1)-p (negative = cropped) with the flipped, channel-transposed weight,
// and dW streams the same input blocks as the forward.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "isa/view.h"
#include "kernels/conv.h"

namespace trnsim::kernels::conv_detail {

// floor / ceil of a / b for b > 0 and any sign of a (pads may be negative).
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div_signed(int64_t a, int64_t b) { return -floor_div(-a, b); }

enum class ConvMode { forward, grad_input, grad_weight };

constexpr int64_t kMinBlocks = 4;  // input blocks at least, so loading block i+1 overlaps computing block i

struct ConvGeometry {
  int64_t n = 1, c = 1, h = 1, w = 1;  // the input as stored: [N, C, H, W]
  int64_t o = 1, kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t in_dil_h = 1, in_dil_w = 1;             // zeros between input elements (dX of a strided conv)
  int64_t pad_t = 0, pad_b = 0, pad_l = 0, pad_r = 0;  // negative = crop
  bool flip_weight = false;  // weight is [C_in_of_this_conv, O_of_this_conv, KH, KW] read flipped (dX)
  bool bias = false;
  DType input_dtype = DType::bf16, output_dtype = DType::fp32;
  // Where this conv's channels sit in the HBM tensors (a block of groups of a grouped conv, or all of
  // a dense one): the streamed input has in_ct channels, this conv's start at in_c0; the output (dY
  // for dW) out_ct / out_c0. Weight row `oo` (a forward output channel) starts at w_off + oo * w_row.
  // gc / go: input / output channels of one group (c / o when dense): the weight is block-diagonal.
  int64_t in_ct = 1, in_c0 = 0, out_ct = 1, out_c0 = 0, w_off = 0, w_row = 1, gc = 1, go = 1;

  int64_t groups() const { return c / gc; }
  int64_t padded_w() const { return (w - 1) * in_dil_w + 1 + pad_l + pad_r; }
  int64_t padded_h() const { return (h - 1) * in_dil_h + 1 + pad_t + pad_b; }
  int64_t out_h() const { return (padded_h() - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  int64_t out_w() const { return (padded_w() - dilation_w * (kw - 1) - 1) / stride_w + 1; }
};

ConvGeometry forward_geometry(const Conv2dSpec& s);
ConvGeometry grad_input_geometry(const Conv2dSpec& s);
// A grouped conv (spec.groups > 1) as dense convs over blocks of consecutive groups that fit the PE
// (block-diagonal weights): [first group, group count) per block.
std::vector<Range> group_blocks(const Conv2dSpec& s, int64_t partitions);
// The geometry of the groups [gr.begin, gr.begin + gr.size) of `g` (a forward or dX geometry of the
// whole grouped conv, channels c / o counting every group).
ConvGeometry restrict_to_groups(const ConvGeometry& g, const Conv2dSpec& s, const Range& gr, bool grad_input);
// Throws std::invalid_argument unless spec.groups divides C and O.
void validate_groups(const Conv2dSpec& s);
// The weight gradient's accumulators as the one-core plan tiles them: (O tile, column tile) pairs,
// O-tile major, columns = (tap, C) then the ones column; and the core that computes each.
std::vector<std::pair<Range, Range>> grad_weight_tiles(const ConvGeometry& g, int64_t partitions, int64_t bank);
std::vector<int64_t> grad_weight_owners(const ConvGeometry& g, const std::vector<std::pair<Range, Range>>& accs,
                                        uint32_t cores);
// Shares of dX's pixel tiles per core that even out the estimated PE work of dX + dW on every core.
std::vector<double> grad_input_weights(const ConvGeometry& dx, const ConvGeometry& dw, int64_t partitions,
                                       int64_t bank, uint32_t cores);
// Appends a program built on its own (its SBUF/PSUM placed from 0, aliasing what `dst` already uses:
// the dependency tracker orders the reuse) to `dst`; its HBM tensors map by name.
void append_program(isa::Program& dst, const isa::Program& part);

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
  // Split across cores: the share of the (forward / dX) pixel tiles each core takes, summing to 1
  // (default: even shares).
  void set_core_shares(std::vector<double> shares) { m_core_shares = std::move(shares); }

 private:
  // conv.cpp: planning, input blocks, the forward / dX matmuls.
  void validate() const;
  int64_t rows_in(int64_t rb) const { return (rb - 1) * m_s.stride_h + (m_s.kh - 1) * m_s.dilation_h + 1; }
  void plan();
  // Dense dX reads the forward's weight rows as they are (see load_weight_rows).
  bool direct_weights() const { return m_s.flip_weight && m_s.groups() == 1; }
  int64_t raw_weight_cols(int64_t ob) const;
  int64_t o_tile_size() const { return std::min<int64_t>(m_ctx.partitions(), m_o_block); }
  void allocate();
  void allocate_blocks(int64_t extra_bytes_per_pixel, int64_t target_pixels, int64_t min_blocks);
  std::vector<PixelTile> pixel_tiles(const Block& blk, int64_t max_px) const;
  std::vector<Block> blocks() const;
  void load_weight_rows(int64_t o0, int64_t count);
  void prepare_weights(const Range& ot);
  void dma_emit(const isa::AccessPattern& dst, const isa::AccessPattern& src, int64_t queue);
  void load_block(const Block& blk, int64_t index);
  void compute_block(const Block& blk, int64_t index, int64_t o0, int64_t count, const Range& tile_range);
  void emit();
  // This core's share of the weight gradient's accumulators (see conv_backward.cpp).
  void plan_grad_weight_split();
  bool needs_columns(int64_t begin, int64_t size) const;
  bool o_chunk_needed(const Range& oc) const;
  bool chunk_needed(size_t ch) const;  // the input block's channel chunk (always, but for a dW share)
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
  void stream_grad_weight(int64_t& block_index);
  void emit_grad_weight();
  void plan_grad_weight_rounds(int64_t o_tiles_per_round, int64_t col_tiles_per_round, int64_t chunks_per_group);
  int64_t column_of(int64_t tap, size_t chunk) const;

  const KernelContext& m_ctx;
  const ConvGeometry m_s;
  const ConvTensors& m_t;
  const ConvMode m_mode;
  std::vector<double> m_core_shares;
  int64_t m_ho = 0, m_wo = 0, m_wb = 0, m_in_bytes = 0;
  std::vector<Range> m_chunks;
  int64_t m_cpad = 0, m_reps = 1, m_kw_groups = 1;
  std::vector<Group> m_groups;
  bool m_staged = false, m_needs_zero = false;
  int64_t m_o_block = 0, m_nb = 1, m_rb = 1, m_rows_in = 1;
  uint32_t m_wt = 0, m_wraw = 0, m_wgrp = 0, m_wcompact = 0, m_acc = 0, m_wps = 0, m_stage = 0, m_bias = 0;
  uint32_t m_buf[2] = {0, 0}, m_staging[2] = {0, 0};
  bool m_raw_by_chunk = false;  // the raw weight rows one channel chunk at a time (large C * KH * KW)
  int64_t m_weight_o0 = 0, m_raw_step = 0;
  int64_t m_wprep_step = 0, m_acc_step = 0, m_stage_step = 0, m_evac_step = 0, m_store_step = 0;

  // Weight gradient: dW[O, C*KH*KW (+1 ones column = grad_bias)] accumulated over pixel tiles.
  struct Accumulator {
    Range o, cols;
  };
  void set_round(const std::vector<Accumulator>& accs);
  std::vector<Range> m_o_chunks;
  std::vector<Accumulator> m_accs;  // (O tile, column tile) pairs of the whole dW (sizes the buffers)
  std::vector<Accumulator> m_my_accs;  // this core's (of this round), in passes of kGradAccBanks
  bool m_grouped_passes = false;       // partials through m_wacc (decided on the whole dW: same sums)
  // Rounds, when the whole dW's buffers do not fit SBUF: rectangles [O tiles x column tiles] of at most
  // kGradAccBanks accumulators, each accumulated in PSUM over one full stream of X and dY (decided on the
  // whole dW, so the sums are the same on any number of cores). The transposes and dY buffers hold one
  // round, indexed from its group's first O channel and its first transposed column (m_o_base, m_col_base);
  // m_wrow holds a group's rows (columns chunk-major: column_of) until its rounds are done.
  bool m_rounds = false;
  // This core's groups of O channels x (chunk-major) columns, each gathered in m_wrow over its rounds.
  struct RowGroup {
    Range o, cols;
    std::vector<std::vector<Accumulator>> rounds;
  };
  std::vector<RowGroup> m_row_groups;
  void store_grad_weight_rows(const RowGroup& group);
  int64_t m_o_base = 0, m_k_base = 0, m_col_base = 0, m_row_cols = 0, m_row_cap = 0;  // m_row_cap: one O tile's
  int64_t m_ckk = 0, m_cols = 0, m_passes = 1, m_slots = 1, m_tslots = 8, m_tile_step = 0;
  int64_t m_ostride = 0, m_cstride = 0;
  uint32_t m_dy[2] = {0, 0}, m_dyt = 0, m_colt = 0, m_wacc = 0, m_tps = 0, m_wrow = 0;
};

}  // namespace trnsim::kernels::conv_detail
