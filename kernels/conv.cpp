#include "kernels/conv.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "isa/view.h"
#include "kernels/conv_builder.h"
#include "kernels/depthwise_conv.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {
namespace conv_detail {

using isa::ApDim;
using isa::Opcode;

namespace {

constexpr int64_t kAccBanks = 6;            // accumulators round-robin; the other 2 banks transpose weights
constexpr int64_t kStageSlots = 4;          // output tiles between evacuation and store
constexpr int64_t kTargetBlockPixels = 2048;  // >= 4 PSUM tiles per block amortise the block's DMA start-up
constexpr double kWeightBudget = 0.35;      // share of an SBUF partition the resident W^T may take
constexpr int64_t kMemsetPiece = 32768;     // elements per memset (engine free-size limit 65536)
constexpr int64_t kMaxEngineFree = 65536;
// Dense dX's weight gather (prepare_weights) alternates Scalar and Vector above this many elements per O
// block; below it Scalar alone (Vector's SBUF port is shared with GpSimd's staging copies). Assumed.
constexpr int64_t kBothEnginesWeightElems = 16384;
constexpr int64_t kTransposeSlotsPerBank = 4;  // [.., 128] fp32 transposes per 2 KiB bank
constexpr int64_t kStoreQueue = 4, kWeightQueue = 6;

// Size-1 dims get stride 0 so a large unused stride does not trip the 16-bit stride field.
std::vector<ApDim> dims(std::vector<ApDim> d) {
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i].size == 1) d[i].stride = 0;
  }
  return d;
}

}  // namespace

isa::AccessPattern raw_ap(const KernelContext& ctx, uint32_t tensor, int64_t offset, std::vector<ApDim> d) {
  return isa::raw_access_pattern(ctx.builder.program(), tensor, offset, dims(std::move(d)));
}

void memset_flat(const KernelContext& ctx, uint32_t buffer, int64_t partitions, int64_t total, double value) {
  for (int64_t begin = 0; begin < total; begin += kMemsetPiece) {
    const int64_t size = std::min(kMemsetPiece, total - begin);
    ctx.builder.emit(Opcode::memset)
        .tensor("dst", raw_ap(ctx, buffer, begin, {{0, uint32_t(partitions)}, {1, uint32_t(size)}}))
        .imm("value", value)
        .on(Engine::gpsimd);
  }
}

// PSUM -> SBUF with the per-partition bias (output channel) and the output cast.
void evacuate(isa::ProgramBuilder& b, const isa::AccessPattern& dst, const isa::AccessPattern& src,
              const isa::AccessPattern* bias, Engine engine) {
  if (engine == Engine::scalar) {
    auto inst = b.emit(Opcode::activation);
    inst.tensor("dst", dst).tensor("data", src).word("op", "copy");
    if (bias) inst.tensor("bias", *bias);
  } else if (bias) {
    b.emit(Opcode::tensor_scalar).tensor("dst", dst).tensor("data", src).word("op0", "add").tensor("operand0", *bias);
  } else {
    b.emit(Opcode::tensor_copy).tensor("dst", dst).tensor("src", src).on(engine);
  }
}

ConvGeometry forward_geometry(const Conv2dSpec& s) {
  ConvGeometry g;
  g.n = s.n, g.c = s.c, g.h = s.h, g.w = s.w, g.o = s.o, g.kh = s.kh, g.kw = s.kw;
  g.stride_h = s.stride_h, g.stride_w = s.stride_w, g.dilation_h = s.dilation_h, g.dilation_w = s.dilation_w;
  g.pad_t = g.pad_b = s.pad_h;
  g.pad_l = g.pad_r = s.pad_w;
  g.bias = s.bias;
  g.input_dtype = s.input_dtype;
  g.output_dtype = s.output_dtype;
  g.in_ct = g.gc = s.c;
  g.out_ct = g.go = s.o;
  g.w_row = s.c * s.kh * s.kw;
  return g;
}

// dX[y] = sum over (ho, kh) with ho*s + kh*d - p = y of dY[ho] W[kh]: a stride-1 conv over dY
// dilated by s, with the kernel flipped, padded d(k-1)-p on top and that plus the rows the forward's
// last window left over ((H + 2p - d(k-1) - 1) mod s) at the bottom, so the output is exactly H.
ConvGeometry grad_input_geometry(const Conv2dSpec& s) {
  ConvGeometry g;
  g.n = s.n, g.c = s.o, g.h = s.out_h(), g.w = s.out_w(), g.o = s.c, g.kh = s.kh, g.kw = s.kw;
  g.dilation_h = s.dilation_h, g.dilation_w = s.dilation_w;
  g.in_dil_h = s.stride_h, g.in_dil_w = s.stride_w;
  g.pad_t = s.dilation_h * (s.kh - 1) - s.pad_h;
  g.pad_l = s.dilation_w * (s.kw - 1) - s.pad_w;
  g.pad_b = g.pad_t + (s.h + 2 * s.pad_h - s.dilation_h * (s.kh - 1) - 1) % s.stride_h;
  g.pad_r = g.pad_l + (s.w + 2 * s.pad_w - s.dilation_w * (s.kw - 1) - 1) % s.stride_w;
  g.flip_weight = true;
  g.input_dtype = s.input_dtype;
  g.output_dtype = s.output_dtype;
  g.in_ct = g.gc = s.o;
  g.out_ct = g.go = s.c;
  g.w_row = s.c * s.kh * s.kw;
  return g;
}

std::vector<Range> group_blocks(const Conv2dSpec& s, int64_t partitions) {
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  const int64_t per = cg <= partitions && og <= partitions ? std::min(partitions / cg, partitions / og) : 1;
  return tiles(s.groups, per);
}

ConvGeometry restrict_to_groups(const ConvGeometry& whole, const Conv2dSpec& s, const Range& gr, bool grad_input) {
  ConvGeometry g = whole;
  const int64_t cg = s.c / s.groups, og = s.o / s.groups;
  // The forward's channels of one group; dX swaps input and output channels.
  const int64_t in_g = grad_input ? og : cg, out_g = grad_input ? cg : og;
  g.c = gr.size * in_g;
  g.o = gr.size * out_g;
  g.gc = in_g;
  g.go = out_g;
  g.in_ct = grad_input ? s.o : s.c;
  g.out_ct = grad_input ? s.c : s.o;
  g.in_c0 = gr.begin * in_g;
  g.out_c0 = gr.begin * out_g;
  g.w_row = cg * s.kh * s.kw;
  g.w_off = gr.begin * og * g.w_row;
  return g;
}

void append_program(isa::Program& dst, const isa::Program& part) {
  std::vector<uint32_t> remap(part.allocations.size());
  for (size_t i = 0; i < part.allocations.size(); ++i) {
    const isa::Allocation& a = part.allocations[i];
    const int existing = a.space == isa::MemorySpace::hbm ? dst.find_allocation(a.name) : -1;
    if (existing >= 0) {
      remap[i] = uint32_t(existing);
    } else {
      dst.allocations.push_back(a);
      remap[i] = uint32_t(dst.allocations.size() - 1);
    }
  }
  for (isa::Instruction inst : part.instructions) {
    for (isa::AccessPattern& t : inst.tensors) {
      if (t.present()) t.allocation = remap[t.allocation];
    }
    dst.instructions.push_back(std::move(inst));
  }
}

void Conv2dBuilder::build() {
  validate();
  plan();
  allocate();
  if (m_mode == ConvMode::grad_weight) {
    emit_grad_weight();
  } else {
    emit();
  }
}

void Conv2dBuilder::validate() const {
  const ConvGeometry& s = m_s;
  if (s.n <= 0 || s.c <= 0 || s.h <= 0 || s.w <= 0 || s.o <= 0 || s.kh <= 0 || s.kw <= 0) {
    throw KernelUnsupported("conv2d: empty shape");
  }
  if (s.stride_h <= 0 || s.stride_w <= 0 || s.dilation_h <= 0 || s.dilation_w <= 0) {
    throw KernelUnsupported("conv2d: stride and dilation must be >= 1, padding >= 0");
  }
  if (s.out_h() <= 0 || s.out_w() <= 0) throw KernelUnsupported("conv2d: the kernel does not fit the padded input");
}

// Resident weight rows per partition for an O block of `ob` channels: the forward's [O tile, C * taps] rows
// per O tile; dense dX's forward rows [forward O chunk, ob (its O) * taps] per channel chunk.
int64_t Conv2dBuilder::raw_weight_cols(int64_t ob) const {
  const ConvGeometry& s = m_s;
  if (direct_weights()) return int64_t(m_chunks.size()) * ob * s.kh * s.kw;
  if (m_raw_by_chunk) return 2 * std::min<int64_t>(s.c, m_ctx.partitions()) * s.kh * s.kw;
  return ceil_div(ob, m_ctx.partitions()) * s.c * s.kh * s.kw;
}

void Conv2dBuilder::plan() {
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions();
  m_ho = s.out_h();
  m_wo = s.out_w();
  m_wb = s.padded_w();
  m_in_bytes = dtype_size_bytes(s.input_dtype);
  m_chunks = tiles(s.c, p);
  // Replicas fill the PE rows when C <= 64; partition groups start on the 32/64 alignment. The
  // weight gradient transposes one offset at a time and has no use for them.
  m_cpad = s.c <= 32 ? 32 : (s.c <= 64 ? 64 : p);
  m_reps = s.c <= 64 && m_mode != ConvMode::grad_weight ? std::min<int64_t>(s.kw, p / m_cpad) : 1;
  m_kw_groups = ceil_div(s.kw, m_reps);
  for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
    for (int64_t kh = 0; kh < s.kh; ++kh) {
      for (int64_t kw0 = 0; kw0 < s.kw; kw0 += m_reps) {
        const int64_t reps = std::min(m_reps, s.kw - kw0);
        m_groups.push_back({int64_t(ch), kh, kw0, reps, (reps - 1) * m_cpad + m_chunks[ch].size});
      }
    }
  }
  // Rows reach the buffer through a staging copy unless they land contiguous and unshifted (a
  // column-dilated input would be one DMA descriptor per element).
  m_staged = s.pad_l != 0 || s.pad_r != 0 || m_reps > 1 || s.in_dil_w > 1;
  m_needs_zero = s.pad_t > 0 || s.pad_b > 0 || s.pad_l > 0 || s.pad_r > 0 || m_reps > 1 || s.in_dil_h > 1 ||
                 s.in_dil_w > 1;
  if (m_mode == ConvMode::grad_weight) return;
  // W^T resident per O block.
  const double weight_budget = kWeightBudget * double(m_ctx.config.core.sbuf.bytes_per_partition);
  // Both the raw rows [O-tile, C*KH*KW] and W^T [K, group, O] stay resident for an O block.
  auto bytes = [&](int64_t ob) {
    return double((int64_t(m_groups.size()) * ob + raw_weight_cols(ob)) * m_in_bytes);
  };
  m_o_block = s.o;
  if (bytes(m_o_block) > weight_budget) {
    m_o_block = p;
    if (bytes(m_o_block) > weight_budget && s.groups() == 1) {
      // Large C * KH * KW (fp32 512 x 5x5: 100 KiB a partition for one O tile): the raw rows go one
      // channel chunk at a time through two slots (dense dX's are per O block already), and the O blocks
      // narrow to 64 or 32 channels if W^T alone is still too large (the PE then fills only part of its
      // columns, but nothing falls back).
      m_raw_by_chunk = !direct_weights();
      while (m_o_block > 32 && bytes(m_o_block) > weight_budget) m_o_block /= 2;
    }
    while (m_o_block >= p && bytes(m_o_block + p) <= weight_budget) m_o_block += p;
    if (bytes(m_o_block) > weight_budget) {
      throw KernelUnsupported("conv2d: C * KH * KW too large for the resident weights");
    }
  }
}

void Conv2dBuilder::allocate() {
  if (m_mode == ConvMode::grad_weight) {
    allocate_grad_weight();
    return;
  }
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const uint32_t p = m_ctx.partitions();
  const uint32_t bank = uint32_t(m_ctx.config.core.psum.bank_bytes / 4);
  m_wt = b.sbuf(m_ctx.name("conv_wt"), s.input_dtype, {p, uint32_t(m_groups.size() * m_o_block)});
  m_wraw = b.sbuf(m_ctx.name("conv_wraw"), s.input_dtype, {p, uint32_t(raw_weight_cols(m_o_block))});
  m_acc = b.psum(m_ctx.name("conv_acc"), DType::fp32, {p, uint32_t(kAccBanks), bank});
  m_wps = b.psum(m_ctx.name("conv_wtrans"), DType::fp32, {p, 2, bank});
  m_stage = b.sbuf(m_ctx.name("conv_out"), s.output_dtype, {p, uint32_t(kStageSlots), bank});
  // The bias of O tile t (of min(128, O block) channels) in column t, on the tile's partitions.
  if (s.bias) m_bias = b.sbuf(m_ctx.name("conv_bias"), s.input_dtype, {p, uint32_t(ceil_div(s.o, o_tile_size()))});
  // Grouped: one group's weight rows; dX also the forward's block-diagonal rows (transposed into m_wraw).
  if (s.groups() > 1) {
    m_wcompact = b.sbuf(m_ctx.name("conv_wgroup"), s.input_dtype,
                        {p, uint32_t((s.flip_weight ? s.go : s.gc) * s.kh * s.kw)});
    if (s.flip_weight) m_wgrp = b.sbuf(m_ctx.name("conv_wgrp"), s.input_dtype, {p, uint32_t(s.o * s.kh * s.kw)});
  }
  allocate_blocks(0, kTargetBlockPixels, kMinBlocks);
}

// Input blocks: whole images when one fits (several when small), else bands of output rows.
// `extra_bytes_per_pixel`: per output pixel of a block, what the caller double-buffers with it;
// `min_blocks`: so many blocks at least when the batch allows (loads overlap compute).
void Conv2dBuilder::allocate_blocks(int64_t extra_bytes_per_pixel, int64_t target_pixels, int64_t min_blocks) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const uint32_t p = m_ctx.partitions();
  const int64_t avail = detail::sbuf_free_bytes(m_ctx);
  auto bytes = [&](int64_t nb, int64_t rb) {
    return 2 * int64_t(m_chunks.size()) * nb * rows_in(rb) * (m_wb + (m_staged ? s.w : 0)) * m_in_bytes +
           2 * nb * rb * m_wo * extra_bytes_per_pixel;
  };
  if (bytes(1, m_ho) <= avail) {
    m_rb = m_ho;
    m_nb = std::min({s.n, avail / bytes(1, m_ho), ceil_div(target_pixels, m_ho * m_wo), ceil_div(s.n, min_blocks)});
    if (m_mode == ConvMode::grad_weight) {
      // dW's matmuls cost their moving columns (a 512-column tile), whatever the pixels they contract:
      // a block of small images holds one full pixel tile of them at least, load overlap or not.
      m_nb = std::max(m_nb, std::min({s.n, ceil_div(int64_t(p), m_ho * m_wo), avail / bytes(1, m_ho)}));
    }
    if (rows_in(m_rb) * m_wb > isa::kMaxApDimStride) m_nb = 1;
    m_nb = std::max<int64_t>(m_nb, 1);
  } else {
    m_nb = 1;
    m_rb = m_ho;
    while (m_rb > 1 && bytes(1, m_rb) > avail) --m_rb;
    if (bytes(1, m_rb) > avail) {
      throw KernelUnsupported("conv2d: one output row's input does not fit in SBUF (" + std::to_string(bytes(1, m_rb)) +
                          " bytes a partition, " + std::to_string(avail) + " free after the weights and " +
                          (m_mode == ConvMode::grad_weight ? "the weight gradient's buffers)" : "the accumulators)"));
    }
  }
  m_rows_in = rows_in(m_rb);
  const uint32_t buf_free = uint32_t(m_chunks.size() * m_nb * m_rows_in * m_wb);
  for (int i = 0; i < 2; ++i) {
    m_buf[i] = b.sbuf(m_ctx.name("conv_in" + std::to_string(i)), s.input_dtype, {p, buf_free});
    if (m_staged) {
      m_staging[i] = b.sbuf(m_ctx.name("conv_stage" + std::to_string(i)), s.input_dtype,
                            {p, uint32_t(m_chunks.size() * m_nb * m_rows_in * s.w)});
    }
  }
}

std::vector<PixelTile> Conv2dBuilder::pixel_tiles(const Block& blk, int64_t max_px) const {
  std::vector<PixelTile> out;
  if (blk.rb == m_ho && m_ho * m_wo <= max_px) {
    const int64_t per = max_px / (m_ho * m_wo);
    for (const Range& r : tiles(blk.nb, per)) out.push_back({r.begin, r.size, 0, m_ho, 0, m_wo});
    return out;
  }
  for (int64_t n = 0; n < blk.nb; ++n) {
    if (m_wo <= max_px) {
      for (const Range& r : tiles(blk.rb, max_px / m_wo)) out.push_back({n, 1, r.begin, r.size, 0, m_wo});
    } else {
      for (int64_t row = 0; row < blk.rb; ++row) {
        for (const Range& c : tiles(m_wo, max_px)) out.push_back({n, 1, row, 1, c.begin, c.size});
      }
    }
  }
  return out;
}

std::vector<Block> Conv2dBuilder::blocks() const {
  std::vector<Block> out;
  for (const Range& nr : tiles(m_s.n, m_nb)) {
    for (const Range& rr : tiles(m_ho, m_rb)) out.push_back({nr.begin, nr.size, rr.begin, rr.size});
  }
  return out;
}

// Weight rows for output channels [o0, o0 + count), O on partitions: forward rows are contiguous
// (one descriptor per partition; W^T straight from HBM would be one per element). For dX the
// conv's output channels are the forward's input channels: runs of KH*KW per (partition, O).
void Conv2dBuilder::load_weight_rows(int64_t o0, int64_t count) {
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions(), khw = s.kh * s.kw;
  if (m_reps > 1 && s.c < m_cpad) memset_flat(m_ctx, m_wt, p, int64_t(m_groups.size()) * m_o_block);
  m_weight_o0 = o0;
  if (m_raw_by_chunk) return;  // prepare_weights loads them chunk by chunk
  if (direct_weights()) {
    // Dense dX: W^T of this conv is the forward's weight with its O on partitions, so the forward rows
    // (one contiguous run of count * taps per partition) are the stationary up to a free-axis gather
    // (prepare_weights); a replica group holds the same rows. (Rows of dX's own O would be runs of
    // KH * KW elements per descriptor: 4.7 MB of 512x512x3x3 bf16 weights took 175 us that way.)
    for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
      const Range& cr = m_chunks[ch];
      for (int64_t r = 0; r < m_reps; ++r) {
        dma_emit(ap(m_wraw, int64_t(ch) * m_o_block * khw, {{uint32_t(r * m_cpad), uint32_t(cr.size)}, {1, uint32_t(count * khw)}}),
                 ap(m_t.weight, s.w_off + cr.begin * s.w_row + o0 * khw, {{s.w_row, uint32_t(cr.size)}, {1, uint32_t(count * khw)}}),
                 kWeightQueue);
      }
    }
    return;
  }
  for (const Range& ot : tiles(count, p)) {
    if (s.groups() > 1) {
      // Block-diagonal (a block of groups has <= 128 output and input channels: one O tile). The
      // forward's rows [O, C * KH * KW]: each row's C / groups x taps weights, repeated over every
      // group's columns by the first of two affine_selects that zero the columns of other groups.
      // dX (flip) wants them the other way round: [its O = the forward's C, (forward O, tap)], by one
      // PE transpose per tap.
      const int64_t of = s.flip_weight ? s.c : s.o, cf = s.flip_weight ? s.o : s.c;  // the forward's O, C
      const int64_t og = s.flip_weight ? s.gc : s.go, cg = s.flip_weight ? s.go : s.gc, k = of / og;
      const uint32_t raw_f = s.flip_weight ? m_wgrp : m_wraw;
      const isa::AccessPattern rows = ap(raw_f, 0, {{0, uint32_t(of)}, {cg * khw, uint32_t(k)}, {1, uint32_t(cg * khw)}});
      // The rows once (contiguous), read k times over by the first select (a stride-0 view).
      dma_emit(ap(m_wcompact, 0, {{0, uint32_t(of)}, {1, uint32_t(cg * khw)}}),
               ap(m_t.weight, s.w_off, {{s.w_row, uint32_t(of)}, {1, uint32_t(cg * khw)}}), kWeightQueue);
      const isa::AccessPattern repeated =
          ap(m_wcompact, 0, {{0, uint32_t(of)}, {0, uint32_t(k)}, {1, uint32_t(cg * khw)}});
      const std::string pattern_lo = "[[" + std::to_string(-og) + ", " + std::to_string(k) + "], [0, " +
                                     std::to_string(cg * khw) + "]]";
      const std::string pattern_hi = "[[" + std::to_string(og) + ", " + std::to_string(k) + "], [0, " +
                                     std::to_string(cg * khw) + "]]";
      // Keep row o in column group j when 0 <= o - og*j <= og - 1.
      m_ctx.builder.emit(Opcode::affine_select).tensor("dst", rows).word("pattern", pattern_lo)
          .imm("channel_multiplier", 1).imm("offset", 0).tensor("on_true_tile", repeated).imm("on_false_value", 0)
          .word("cmp_op", "greater_equal");
      m_ctx.builder.emit(Opcode::affine_select).tensor("dst", rows).word("pattern", pattern_hi)
          .imm("channel_multiplier", -1).imm("offset", double(og - 1)).tensor("on_true_tile", rows)
          .imm("on_false_value", 0).word("cmp_op", "greater_equal");
      if (s.flip_weight) {
        const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
        for (int64_t t = 0; t < khw; ++t) {
          const int64_t slot = (m_wprep_step % (2 * kTransposeSlotsPerBank)) * bank / kTransposeSlotsPerBank;
          isa::AccessPattern tr = ap(m_wps, slot, {{0, uint32_t(cf)}, {1, uint32_t(of)}});
          m_ctx.builder.emit(Opcode::nc_transpose)
              .tensor("dst", tr)
              .tensor("data", ap(m_wgrp, t, {{0, uint32_t(of)}, {khw, uint32_t(cf)}}));
          evacuate(m_ctx.builder, ap(m_wraw, t, {{0, uint32_t(cf)}, {khw, uint32_t(of)}}), tr, nullptr,
                   m_wprep_step++ % 2 ? Engine::scalar : Engine::vector);
        }
      }
      continue;
    }
    const std::vector<ApDim> row = {{khw, uint32_t(s.c)}, {1, uint32_t(khw)}};
    const isa::AccessPattern src =
        s.flip_weight
            ? ap(m_t.weight, s.w_off + (o0 + ot.begin) * khw, {{khw, uint32_t(ot.size)}, {s.w_row, uint32_t(s.c)}, row[1]})
            : ap(m_t.weight, s.w_off + (o0 + ot.begin) * s.w_row, {{s.w_row, uint32_t(ot.size)}, row[0], row[1]});
    dma_emit(ap(m_wraw, ot.begin / p * s.c * khw, {{0, uint32_t(ot.size)}, row[0], row[1]}), src, kWeightQueue);
  }
}

// W^T of one O tile: one PE transpose per (chunk, kh, kw) lands [C-chunk, O-tile] on the
// replica's partition group; 8 PSUM slots (2 banks x 4) let the PE run ahead of the copies out.
void Conv2dBuilder::prepare_weights(const Range& ot) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions(), khw = s.kh * s.kw;
  int64_t& step = m_wprep_step;
  if (direct_weights()) {
    // Dense dX: per (chunk, kh, kw) a copy gathers the flipped tap of each of the tile's rows
    // (stride KH * KW) into the replica's group of the stationary: no PE transposes. On Scalar: Vector
    // shares its SBUF port with GpSimd, busy with the first blocks' staging copies; only a large weight
    // (more than kBothEnginesWeightElems: a few blocks' copies) gets Vector's half too.
    const bool both = int64_t(m_chunks.size()) * s.kh * s.kw * m_o_block > kBothEnginesWeightElems;
    for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
      const uint32_t cn = uint32_t(m_chunks[ch].size);
      for (int64_t kh = 0; kh < s.kh; ++kh) {
        for (int64_t kw = 0; kw < s.kw; ++kw) {
          const int64_t r = kw % m_reps, g = (int64_t(ch) * s.kh + kh) * m_kw_groups + kw / m_reps;
          const int64_t tap = (s.kh - 1 - kh) * s.kw + (s.kw - 1 - kw);
          const uint32_t part = uint32_t(r * m_cpad);
          evacuate(b, ap(m_wt, g * m_o_block + ot.begin, {{part, cn}, {1, uint32_t(ot.size)}}),
                   ap(m_wraw, (int64_t(ch) * m_o_block + ot.begin) * khw + tap, {{part, cn}, {khw, uint32_t(ot.size)}}),
                   nullptr, both && step++ % 2 ? Engine::vector : Engine::scalar);
        }
      }
    }
    return;
  }
  for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
    const Range& cr = m_chunks[ch];
    int64_t raw = (ot.begin / p * s.c + cr.begin) * khw;
    if (m_raw_by_chunk) {
      // This chunk's columns of the tile's rows (one contiguous run per row) into the next slot.
      raw = (m_raw_step++ % 2) * std::min<int64_t>(s.c, p) * khw;
      dma_emit(ap(m_wraw, raw, {{0, uint32_t(ot.size)}, {1, uint32_t(cr.size * khw)}}),
               ap(m_t.weight, s.w_off + (m_weight_o0 + ot.begin) * s.w_row + cr.begin * khw,
                  {{s.w_row, uint32_t(ot.size)}, {1, uint32_t(cr.size * khw)}}),
               kWeightQueue);
    }
    for (int64_t kh = 0; kh < s.kh; ++kh) {
      for (int64_t kw = 0; kw < s.kw; ++kw) {
        const int64_t r = kw % m_reps;
        const int64_t g = (int64_t(ch) * s.kh + kh) * m_kw_groups + kw / m_reps;
        const int64_t ps = step % (2 * kTransposeSlotsPerBank);
        const uint32_t part = uint32_t(r * m_cpad), cn = uint32_t(cr.size);
        const int64_t slot = ps * int64_t(m_ctx.config.core.psum.bank_bytes / 4) / kTransposeSlotsPerBank;
        // dX reads the kernel flipped: tap (kh, kw) of this conv is (KH-1-kh, KW-1-kw) of the weight.
        const int64_t tap = s.flip_weight ? (s.kh - 1 - kh) * s.kw + (s.kw - 1 - kw) : kh * s.kw + kw;
        isa::AccessPattern t = ap(m_wps, slot, {{part, cn}, {1, uint32_t(ot.size)}});
        b.emit(Opcode::nc_transpose)
            .tensor("dst", t)
            .tensor("data", ap(m_wraw, raw + tap, {{0, uint32_t(ot.size)}, {khw, cn}}));
        isa::AccessPattern dst = ap(m_wt, g * m_o_block + ot.begin, {{part, cn}, {1, uint32_t(ot.size)}});
        evacuate(b, dst, t, nullptr, step++ % 2 ? Engine::scalar : Engine::vector);
      }
    }
  }
}

void Conv2dBuilder::dma_emit(const isa::AccessPattern& dst, const isa::AccessPattern& src, int64_t queue) {
  m_ctx.builder.emit(Opcode::dma_copy).tensor("dst", dst).tensor("src", src).imm("queue", double(queue));
}

// Block i into buffer i % 2: valid input rows (HBM -> staging, contiguous per channel and image),
// then lane-wise copies into the padded buffer at each replica's column shift. Buffer row j of a
// band starting at output row r0 is padded row r0*stride + j, i.e. input row (that - pad_t) /
// in_dil when that divides (dX of a strided conv: the rows between stay zero).
void Conv2dBuilder::load_block(const Block& blk, int64_t index) {
  const ConvGeometry& s = m_s;
  isa::ProgramBuilder& b = m_ctx.builder;
  const uint32_t buf = m_buf[index % 2];
  const int64_t rin = rows_in(blk.rb);
  const int64_t top = blk.r0 * s.stride_h - s.pad_t;  // logical row of buffer row 0
  const int64_t ya = std::max<int64_t>(0, ceil_div_signed(top, s.in_dil_h));
  const int64_t yb = std::min<int64_t>(s.h, floor_div(top + rin - 1, s.in_dil_h) + 1);
  const int64_t nrows = yb - ya;
  const int64_t jt = ya * s.in_dil_h - top;                                  // buffer row of input row ya
  const int64_t jb = nrows > 0 ? (yb - 1) * s.in_dil_h - top + 1 : rin;      // past the last one
  const int64_t hw = s.h * s.w;
  // Zero borders and unused partitions once per buffer, before its first fill.
  const int64_t buf_free = int64_t(m_chunks.size()) * m_nb * m_rows_in * m_wb;
  const bool banded = m_rb < m_ho;
  // Bands of a row-dilated input move the zero rows between data rows too: zero the whole buffer.
  if (m_needs_zero && (index < 2 || (banded && s.in_dil_h > 1))) {
    memset_flat(m_ctx, buf, m_ctx.partitions(), buf_free);
  } else if (banded) {
    // Bands move the zero rows around; whole-image blocks keep them where the first memset put them.
    for (const Range& z : {Range{0, std::min(jt, rin)}, Range{jb, rin - jb}}) {
      if (z.size <= 0) continue;
      for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
        const int64_t base = int64_t(ch) * m_nb * m_rows_in * m_wb;
        b.emit(Opcode::memset)
            .tensor("dst", ap(buf, base + z.begin * m_wb,
                              {{0, m_ctx.partitions()},
                               {m_rows_in * m_wb, uint32_t(blk.nb)},
                               {m_wb, uint32_t(z.size)},
                               {1, uint32_t(m_wb)}}))
            .imm("value", 0)
            .on(Engine::gpsimd);
      }
    }
  }
  if (nrows <= 0) return;
  const uint32_t stage = m_staged ? m_staging[index % 2] : buf;
  const int64_t row_len = m_staged ? s.w : m_wb;
  // Unstaged rows go straight to their buffer rows (in_dil_h apart); staged ones land contiguous.
  const int64_t dma_row_stride = m_staged ? s.w : s.in_dil_h * m_wb;
  int64_t queue = 0;
  for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
    const Range& cr = m_chunks[ch];
    if (!chunk_needed(ch)) continue;  // dW split across cores: no accumulator of this core reads it
    for (int64_t r = 0; r < (m_staged ? m_reps : 1); ++r) {
      for (int64_t n = 0; n < blk.nb; ++n) {
        const int64_t img = int64_t(ch) * m_nb + n;
        const int64_t dst = m_staged ? img * m_rows_in * row_len : (img * m_rows_in + jt) * row_len;
        dma_emit(ap(stage, dst, {{uint32_t(r * m_cpad), uint32_t(cr.size)}, {dma_row_stride, uint32_t(nrows)},
                                 {1, uint32_t(s.w)}}),
                 ap(m_t.input, ((blk.n0 + n) * s.in_ct + s.in_c0 + cr.begin) * hw + ya * s.w,
                    {{hw, uint32_t(cr.size)}, {s.w, uint32_t(nrows)}, {1, uint32_t(s.w)}}),
                 queue++ % 4);
      }
    }
    if (!m_staged) continue;
    for (int64_t r = 0; r < m_reps; ++r) {
      // Buffer column X of replica r holds padded column X + shift: input column (X + shift - pad_l) / in_dil_w.
      const int64_t shift = r * s.dilation_w;
      const int64_t xa = std::max<int64_t>(0, ceil_div_signed(shift - s.pad_l, s.in_dil_w));
      const int64_t xb = std::min<int64_t>(s.w, floor_div(m_wb - 1 + shift - s.pad_l, s.in_dil_w) + 1);
      if (xb <= xa) continue;
      const int64_t cols = xb - xa, x0 = xa * s.in_dil_w + s.pad_l - shift;
      // Split to the engines' free-size limit: by image, then by rows.
      const int64_t rows_per = std::max<int64_t>(1, std::min(nrows, kMaxEngineFree / cols));
      const bool whole = blk.nb * nrows * cols <= kMaxEngineFree;
      for (int64_t n = 0; n < (whole ? 1 : blk.nb); ++n) {
        for (const Range& rr : whole ? std::vector<Range>{{0, nrows}} : tiles(nrows, rows_per)) {
          const uint32_t images = uint32_t(whole ? blk.nb : 1);
          const int64_t img = int64_t(ch) * m_nb + n;
          const uint32_t part = uint32_t(r * m_cpad), cn = uint32_t(cr.size);
          b.emit(Opcode::tensor_copy)
              .tensor("dst", ap(buf, (img * m_rows_in + jt + rr.begin * s.in_dil_h) * m_wb + x0,
                                {{part, cn}, {m_rows_in * m_wb, images}, {s.in_dil_h * m_wb, uint32_t(rr.size)},
                                 {s.in_dil_w, uint32_t(cols)}}))
              .tensor("src", ap(stage, (img * m_rows_in + rr.begin) * s.w + xa,
                                {{part, cn}, {m_rows_in * s.w, images}, {s.w, uint32_t(rr.size)}, {1, uint32_t(cols)}}))
              .on(Engine::gpsimd);
        }
      }
    }
  }
}

void Conv2dBuilder::compute_block(const Block& blk, int64_t index, int64_t o0, int64_t count, const Range& tile_range) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions();
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const uint32_t buf = m_buf[index % 2];
  const int64_t img_stride = m_rows_in * m_wb;
  const std::vector<PixelTile> all_tiles = pixel_tiles(blk, bank);
  for (int64_t ti = tile_range.begin; ti < tile_range.begin + tile_range.size; ++ti) {
    const PixelTile& t = all_tiles[size_t(ti)];
    const uint32_t px = uint32_t(t.pixels());
    for (const Range& ot : tiles(count, p)) {
      const int64_t acc = m_acc_step++ % kAccBanks;
      isa::AccessPattern dst = ap(m_acc, acc * bank, {{0, uint32_t(ot.size)}, {1, px}});
      for (size_t gi = 0; gi < m_groups.size(); ++gi) {
        const Group& g = m_groups[gi];
        const int64_t row = (g.chunk * m_nb + t.n) * m_rows_in + t.row * s.stride_h + g.kh * s.dilation_h;
        const int64_t offset = row * m_wb + t.col * s.stride_w + g.kw0 * s.dilation_w;
        b.emit(Opcode::nc_matmul)
            .tensor("dst", dst)
            .tensor("stationary", ap(m_wt, int64_t(gi) * m_o_block + ot.begin, {{0, uint32_t(g.k)}, {1, uint32_t(ot.size)}}))
            .tensor("moving", ap(buf, offset,
                                 {{0, uint32_t(g.k)},
                                  {img_stride, uint32_t(t.nc)},
                                  {s.stride_h * m_wb, uint32_t(t.rc)},
                                  {s.stride_w, uint32_t(t.cc)}}))
            .word("accumulate", gi == 0 ? "false" : "true");
      }
      const int64_t slot = m_stage_step++ % kStageSlots;
      isa::AccessPattern out = ap(m_stage, slot * bank, {{0, uint32_t(ot.size)}, {1, px}});
      const int64_t o_tile = (o0 + ot.begin) / o_tile_size();
      isa::AccessPattern bias;
      if (s.bias) bias = ap(m_bias, o_tile, {{0, uint32_t(ot.size)}, {1, 1}});
      evacuate(b, out, dst, s.bias ? &bias : nullptr, m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
      const int64_t plane = m_ho * m_wo;
      for (int64_t i = 0; i < t.nc; ++i) {
        const int64_t n = blk.n0 + t.n + i;
        dma_emit(ap(m_t.output, (n * s.out_ct + s.out_c0 + o0 + ot.begin) * plane + (blk.r0 + t.row) * m_wo + t.col,
                    {{plane, uint32_t(ot.size)}, {m_wo, uint32_t(t.rc)}, {1, uint32_t(t.cc)}}),
                 ap(m_stage, slot * bank + i * t.rc * t.cc,
                    {{0, uint32_t(ot.size)}, {t.cc, uint32_t(t.rc)}, {1, uint32_t(t.cc)}}),
                 kStoreQueue + (m_store_step++ % 2));
      }
    }
  }
}

void Conv2dBuilder::emit() {
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions();
  if (s.bias) {
    for (const Range& ot : tiles(s.o, o_tile_size())) {
      dma_emit(ap(m_bias, ot.begin / o_tile_size(), {{0, uint32_t(ot.size)}, {1, 1}}),
               ap(uint32_t(m_t.bias), s.out_c0 + ot.begin, {{1, uint32_t(ot.size)}, {1, 1}}), kWeightQueue);
    }
  }
  // Split across cores by (O block, input block, pixel tile) items of the one-core plan, O-block
  // major: each core takes a contiguous share and loads the blocks its tiles are in (a block split
  // between two cores is loaded by both). The tiles stay the one-core ones: the matmuls' shapes
  // decide the rounding of their sums, so the values stay bit for bit the one-core values.
  struct Item {
    Range ob;
    Block blk;
    Range tiles;  // of pixel_tiles(blk)
  };
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  std::vector<Item> mine;
  {
    struct One {
      size_t ob, blk;
      int64_t tile;
    };
    const std::vector<Range> obs = tiles(s.o, m_o_block);
    const std::vector<Block> bl = blocks();
    std::vector<int64_t> per_block(bl.size());
    for (size_t k = 0; k < bl.size(); ++k) per_block[k] = int64_t(pixel_tiles(bl[k], bank).size());
    std::vector<One> all;
    for (size_t o = 0; o < obs.size(); ++o) {
      for (size_t k = 0; k < bl.size(); ++k) {
        for (int64_t t = 0; t < per_block[k]; ++t) all.push_back({o, k, t});
      }
    }
    std::vector<One> share;
    if (m_core_shares.empty()) {
      share = my_share(m_ctx, all);
    } else {
      // Weighted contiguous shares: item i goes to the last core with a share that starts at or
      // before the item's middle.
      for (size_t i = 0; i < all.size(); ++i) {
        const double mid = (double(i) + 0.5) / double(all.size());
        double begin = 0;
        uint32_t owner = 0;
        for (uint32_t c = 0; c < m_ctx.cores; ++c) {
          if (m_core_shares[c] > 0 && mid >= begin) owner = c;
          begin += m_core_shares[c];
        }
        if (owner == m_ctx.core) share.push_back(all[i]);
      }
    }
    for (const One& one : share) {
      if (!mine.empty() && mine.back().ob.begin == obs[one.ob].begin && mine.back().blk.n0 == bl[one.blk].n0 &&
          mine.back().blk.r0 == bl[one.blk].r0) {
        ++mine.back().tiles.size;
      } else {
        mine.push_back({obs[one.ob], bl[one.blk], {one.tile, 1}});
      }
    }
  }
  int64_t index = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    const Range& ob = mine[i].ob;
    if (i == 0 || mine[i - 1].ob.begin != ob.begin) {
      // Input block 0 ahead of the weights, so both arrive while the first W^T tiles are built.
      load_block(mine[i].blk, index);
      load_weight_rows(ob.begin, ob.size);
      for (const Range& ot : tiles(ob.size, p)) prepare_weights(ot);
    }
    // Loads run one block ahead of the matmuls; the dependency tracker orders buffer reuse.
    if (i + 1 < mine.size() && mine[i + 1].ob.begin == ob.begin) load_block(mine[i + 1].blk, index + 1);
    compute_block(mine[i].blk, index, ob.begin, ob.size, mine[i].tiles);
    ++index;
  }
}

}  // namespace conv_detail

namespace conv_detail {
void validate_groups(const Conv2dSpec& spec) {
  if (spec.groups < 1 || spec.c % spec.groups != 0 || spec.o % spec.groups != 0) {
    throw KernelUnsupported("conv2d: groups must be >= 1 and divide both the input channels (" +
                                std::to_string(spec.c) + ") and the output channels (" + std::to_string(spec.o) + ")");
  }
}
}  // namespace conv_detail

void build_conv2d(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dTensors& tensors) {
  using namespace conv_detail;
  validate_groups(spec);
  if (spec.pad_h < 0 || spec.pad_w < 0) throw KernelUnsupported("conv2d: stride and dilation must be >= 1, padding >= 0");
  ConvTensors t;
  t.input = tensors.input, t.weight = tensors.weight, t.output = tensors.output, t.bias = tensors.bias;
  // Depthwise (groups == C == O): planes on partitions, diagonal weights (depthwise_conv.h).
  if (depthwise_applies(spec, ctx, false)) {
    build_depthwise_forward(ctx, spec, tensors);
    return;
  }
  if (spec.groups == 1) {
    Conv2dBuilder(ctx, forward_geometry(spec), t, ConvMode::forward).build();
    return;
  }
  // Grouped: one dense conv per block of groups (block-diagonal weights), each built on its own so
  // it may use all of SBUF / PSUM, appended in turn.
  isa::Program& program = ctx.builder.mutable_program();
  const ConvGeometry whole = forward_geometry(spec);
  for (const Range& gr : group_blocks(spec, ctx.partitions())) {
    isa::ProgramBuilder b(program.name, program.generation);
    auto copy = [&](int64_t id) { return id < 0 ? -1 : int64_t(b.place(program.allocations.at(size_t(id)))); };
    ConvTensors pt;
    pt.input = uint32_t(copy(t.input));
    pt.weight = uint32_t(copy(t.weight));
    pt.output = uint32_t(copy(t.output));
    pt.bias = copy(t.bias);
    KernelContext sub{b, ctx.config, ctx.name("g" + std::to_string(gr.begin) + "_"), ctx.core, ctx.cores};
    Conv2dBuilder(sub, restrict_to_groups(whole, spec, gr, false), pt, ConvMode::forward).build();
    append_program(program, b.program());
  }
}

isa::Program conv2d_program(const Conv2dSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  conv_detail::validate_groups(spec);
  isa::ProgramBuilder b("conv2d", config.generation);
  auto u = [](int64_t v) { return uint32_t(v); };
  Conv2dTensors t{};
  t.input = b.hbm("input", spec.input_dtype, {u(spec.n), u(spec.c), u(spec.h), u(spec.w)}, isa::AllocationRole::input);
  t.weight = b.hbm("weight", spec.input_dtype, {u(spec.o), u(spec.c / spec.groups), u(spec.kh), u(spec.kw)},
                   isa::AllocationRole::input);
  if (spec.bias) t.bias = b.hbm("bias", spec.input_dtype, {u(spec.o)}, isa::AllocationRole::input);
  if (spec.out_h() <= 0 || spec.out_w() <= 0) throw KernelUnsupported("conv2d: the kernel does not fit the padded input");
  t.output = b.hbm("output", spec.output_dtype, {u(spec.n), u(spec.o), u(spec.out_h()), u(spec.out_w())},
                   isa::AllocationRole::output);
  KernelContext ctx{b, config, "", core, cores};
  build_conv2d(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
