// conv2d backward: the weight gradient's schedule (the input gradient is the forward's machinery on
// another geometry, see conv_builder.h) and the backward program.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "kernels/conv.h"
#include "kernels/conv_builder.h"
#include "kernels/depthwise_conv.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {
namespace conv_detail {
namespace {

using isa::Opcode;

constexpr int64_t kGradAccBanks = 6;          // dW accumulators at most; the other banks take the transposes
constexpr int64_t kSlotsPerBank = 4;          // [<=128, <=128] fp32 transposes per bank
constexpr int64_t kLookAhead = 2;             // tiles transposed ahead of their matmuls (one pass)
constexpr int64_t kRingSlots = kLookAhead + 2;  // tiles in flight between transpose and matmul (one pass)
constexpr int64_t kGroupTiles = 8;            // tiles per PSUM round when the accumulators need passes
constexpr int64_t kGradTargetBlockPixels = 2048;
constexpr int64_t kGradOutputQueue = 4, kGradStoreQueue = 6;

}  // namespace

// dW[O, C*KH*KW (+1)] as [O-tile <= 128, 512-column] PSUM accumulators. When they fit the banks
// they accumulate over the whole kernel; otherwise tiles go in groups and each group's partials are
// added into an fp32 SBUF copy, pass by pass over the accumulators. When that copy, the transposes of
// every column and the row of the store do not fit SBUF (fp32 512x512x3x3: ~280 KiB a partition), the
// accumulators go in rounds (see conv_builder.h) that re-stream X and dY: cheap where such weights
// meet small images, and the only way to bound the buffers for any C * KH * KW.
void Conv2dBuilder::allocate_grad_weight() {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const uint32_t p = m_ctx.partitions();
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  m_ckk = s.c * s.kh * s.kw;
  m_cols = m_ckk + (s.bias ? 1 : 0);  // the ones column: grad_bias = dY^T . 1 in the same matmuls
  m_o_chunks = tiles(s.o, p);
  for (const auto& [ot, ct] : grad_weight_tiles(s, p, bank)) m_accs.push_back({ot, ct});
  m_passes = ceil_div(int64_t(m_accs.size()), kGradAccBanks);
  m_slots = m_passes == 1 ? kRingSlots : kGroupTiles;
  // Slots padded to 128 elements so one slot's writes do not share dependency granules with the next's.
  m_ostride = ceil_div(s.o, 128) * 128;
  m_cstride = ceil_div(m_cols, 128) * 128;
  m_row_cols = m_cols;
  int64_t dy_chunks = int64_t(m_o_chunks.size()), round_accs = int64_t(m_accs.size());
  const int64_t out_bytes = dtype_size_bytes(s.output_dtype);
  // The smallest input block (one output row, double-buffered) with its dY rows of `dy_tiles` O tiles.
  auto min_block = [&](int64_t dy_tiles) {
    return 2 * int64_t(m_chunks.size()) * rows_in(1) * (m_wb + (m_staged ? s.w : 0)) * m_in_bytes +
           2 * m_wo * dy_tiles * m_in_bytes;
  };
  // What the whole dW holds at once, plus the smallest input block.
  const int64_t whole = m_slots * (m_ostride + m_cstride) * m_in_bytes +
                        (m_passes > 1 ? int64_t(m_accs.size()) * bank * 4 : 0) + m_cols * (m_passes > 1 ? 0 : 4) +
                        m_cols * out_bytes + min_block(dy_chunks);
  // Each of the ~12 buffers rounds up to the builder's 64-byte granularity (isa/builder.cpp).
  constexpr int64_t kAlignSlackBytes = 16 * 64;
  const int64_t avail = detail::sbuf_free_bytes(m_ctx) - kAlignSlackBytes;
  if (s.groups() == 1 && whole > avail) {
    // Rounds of a O tiles x b column tiles (a b <= the banks) over groups of g channel chunks (columns
    // chunk-major, see column_of): the a rows' columns of a group gathered in fp32 SBUF over its rounds
    // and stored per chunk (contiguous in HBM). Per pixel tile a round transposes a dY chunks and ~4b
    // column chunks, so over all rounds To Tc (1/b + 4/a) transposes: a as large as fits, then g, then b.
    const int64_t o_tiles = int64_t(m_o_chunks.size()), khw = s.kh * s.kw, piece = std::min<int64_t>(s.c, p) * khw;
    const int64_t chunks = int64_t(m_chunks.size());
    auto row_cap = [&](int64_t g) { return std::min(m_cols, g * int64_t(p) * khw + 1); };
    // A round's transposes cover its columns and at most one cut chunk (< 128 columns) at either end.
    auto cstride = [&](int64_t bc) { return std::min(m_cstride, bc * bank + 2 * 128); };
    auto bytes = [&](int64_t a, int64_t bc, int64_t g) {
      return kRingSlots * (std::min(m_ostride, a * int64_t(p)) + cstride(bc)) * m_in_bytes +
             a * row_cap(g) * 4 + 2 * piece * out_bytes + min_block(a);
    };
    int64_t a = std::min(kGradAccBanks, o_tiles), bc = kGradAccBanks / a, g = chunks;
    while (bytes(a, bc, g) > avail && (a > 1 || g > 1 || bc > 1)) {
      if (a > 1) {
        --a;
        bc = kGradAccBanks / a;
      } else if (g > 1) {
        g = ceil_div(g, 2);
      } else {
        --bc;
      }
    }
    m_rounds = true;
    m_slots = kRingSlots;
    m_ostride = std::min(m_ostride, a * int64_t(p));
    m_cstride = cstride(bc);
    m_row_cols = row_cap(g);
    dy_chunks = a;
    round_accs = std::min(a, o_tiles) * std::min(bc, ceil_div(m_row_cols, bank));
    plan_grad_weight_rounds(a, bc, g);
    m_row_cap = m_row_cols;
    m_row_cols *= a;
  } else {
    plan_grad_weight_split();
  }
  const uint32_t banks = uint32_t(std::min<int64_t>(round_accs, kGradAccBanks));
  m_acc = b.psum(m_ctx.name("convw_acc"), DType::fp32, {p, banks, uint32_t(bank)});
  // Every bank the accumulators leave takes transposes: a tile needs KH*KW*chunks + 1 of them, and
  // a transpose waiting for its slot's copy-out stalls the PE for a whole PSUM round trip.
  const int64_t psum_banks = int64_t(m_ctx.config.core.psum.banks);
  const int64_t trans_banks = std::max<int64_t>(2, psum_banks - int64_t(banks));
  m_tslots = trans_banks * kSlotsPerBank;
  m_tps = b.psum(m_ctx.name("convw_trans"), DType::fp32, {p, uint32_t(trans_banks), uint32_t(bank)});
  m_dyt = b.sbuf(m_ctx.name("convw_dyt"), s.input_dtype, {p, uint32_t(m_slots), uint32_t(m_ostride)});
  m_colt = b.sbuf(m_ctx.name("convw_colt"), s.input_dtype, {p, uint32_t(m_slots), uint32_t(m_cstride)});
  if (m_grouped_passes) {
    m_wacc = b.sbuf(m_ctx.name("convw_wacc"), DType::fp32, {p, uint32_t(m_accs.size()), uint32_t(bank)});
  }
  // (The SBUF partials of grouped passes are the rows themselves.)
  if (!m_grouped_passes) m_wrow = b.sbuf(m_ctx.name("convw_row"), DType::fp32, {p, uint32_t(m_row_cols)});
  // Rounds store a row in pieces of <= 128 channels x taps, two in flight; otherwise the whole row at once.
  const int64_t stage_cols = m_rounds ? 2 * std::min<int64_t>(s.c, p) * s.kh * s.kw : m_cols;
  m_stage = b.sbuf(m_ctx.name("convw_out"), s.output_dtype, {p, uint32_t(stage_cols)});
  // SBUF-grouped partials: a group of tiles never spans two blocks, so each block that kMinBlocks would
  // cut a small batch into pays a flush of every accumulator (more than the load overlap it buys).
  allocate_blocks(dy_chunks * m_in_bytes, kGradTargetBlockPixels, m_grouped_passes ? 1 : kMinBlocks);
  const uint32_t dy_free = uint32_t(dy_chunks * m_nb * m_rb * m_wo);
  for (int i = 0; i < 2; ++i) {
    m_dy[i] = b.sbuf(m_ctx.name("convw_dy" + std::to_string(i)), s.input_dtype, {p, dy_free});
  }
}

// Rounds: this core's O tiles (a contiguous share, balanced by count: whole rows, nothing cut) in groups
// of a, each group's columns by groups of g channel chunks (the last with the ones column), in rounds of
// b 512-column accumulators. Every accumulator sums all pixel tiles in PSUM whatever the grouping, so the
// values do not depend on the number of cores.
void Conv2dBuilder::plan_grad_weight_rounds(int64_t o_tiles_per_round, int64_t col_tiles_per_round,
                                            int64_t chunks_per_group) {
  const int64_t p = m_ctx.partitions(), khw = m_s.kh * m_s.kw, bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const int64_t o_tiles = int64_t(m_o_chunks.size()), chunks = int64_t(m_chunks.size());
  const int64_t cores = int64_t(m_ctx.cores), core = int64_t(m_ctx.core);
  const int64_t i_begin = core * o_tiles / cores, i_end = (core + 1) * o_tiles / cores;
  m_row_groups.clear();
  for (int64_t i0 = i_begin; i0 < i_end; i0 += o_tiles_per_round) {
    const int64_t i1 = std::min(i_end, i0 + o_tiles_per_round);
    const Range o{i0 * p, std::min(m_s.o, i1 * p) - i0 * p};
    for (int64_t c0 = 0; c0 < chunks; c0 += chunks_per_group) {
      const int64_t c1 = std::min(chunks, c0 + chunks_per_group);
      const int64_t begin = m_chunks[size_t(c0)].begin * khw;
      const int64_t end = c1 == chunks ? m_cols : m_chunks[size_t(c1)].begin * khw;
      RowGroup group{o, {begin, end - begin}, {}};
      const std::vector<Range> cols = tiles(end - begin, bank);
      for (size_t j0 = 0; j0 < cols.size(); j0 += size_t(col_tiles_per_round)) {
        std::vector<Accumulator> r;
        for (int64_t i = i0; i < i1; ++i) {
          for (size_t j = j0; j < std::min(cols.size(), j0 + size_t(col_tiles_per_round)); ++j) {
            r.push_back({m_o_chunks[size_t(i)], {begin + cols[j].begin, cols[j].size}});
          }
        }
        group.rounds.push_back(std::move(r));
      }
      m_row_groups.push_back(std::move(group));
    }
  }
  m_grouped_passes = false;
  m_my_accs.clear();
}

// dW's column of channel chunk `ch` at tap `tap` (the first of cr.size): tap-major (tap * C + c) for the
// whole dW, so a transpose's copy-out is one run and an O tile's row one permute; chunk-major
// (c0 * taps + tap * chunk + c - c0) in rounds, so a group of chunks is a contiguous run of HBM per row.
int64_t Conv2dBuilder::column_of(int64_t tap, size_t ch) const {
  const Range& cr = m_chunks[ch];
  return m_rounds ? cr.begin * m_s.kh * m_s.kw + tap * cr.size : tap * m_s.c + cr.begin;
}

// The buffers of a round start at its first O channel and at the first column its transposes write.
void Conv2dBuilder::set_round(const std::vector<Accumulator>& accs) {
  m_my_accs = accs;
  m_o_base = accs.front().o.begin;
  m_k_base = m_o_base / m_ctx.partitions();
  m_col_base = m_ckk;
  for (int64_t tap = 0; tap < m_s.kh * m_s.kw; ++tap) {
    for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
      if (needs_columns(column_of(tap, ch), m_chunks[ch].size)) m_col_base = std::min(m_col_base, column_of(tap, ch));
    }
  }
  for (const Accumulator& a : accs) {
    if (a.cols.begin + a.cols.size - m_col_base > m_cstride || a.o.begin + a.o.size - m_o_base > m_ostride) {
      throw isa::IsaError("conv2d: internal error: a grad_weight round exceeds its buffers");
    }
  }
}

// Split across cores by dW accumulators (O tile x column tile), never by pixels: no partial sums
// cross cores. The accumulators, the input blocks and pixel tiles, the buffers and the choice of
// PSUM-only or SBUF-grouped partial sums all stay the one-core ones, so every element is the same
// sum of the same matmuls (whose shapes decide the rounding): the values are the one-core values bit
// for bit. Each core takes a contiguous run of the accumulators (O-tile major; columns are
// tap-major, tap * C + c, then the ones column = grad_bias), transposes the dY chunks and input
// taps they need, and streams all of X and dY for them.
std::vector<std::pair<Range, Range>> grad_weight_tiles(const ConvGeometry& g, int64_t partitions, int64_t bank) {
  std::vector<std::pair<Range, Range>> out;
  for (const Range& ot : tiles(g.o, partitions)) {
    for (const Range& ct : tiles(g.c * g.kh * g.kw + (g.bias ? 1 : 0), bank)) out.push_back({ot, ct});
  }
  return out;
}

std::vector<int64_t> grad_weight_owners(const ConvGeometry& g, const std::vector<std::pair<Range, Range>>& accs,
                                        uint32_t cores) {
  // Contiguous runs balanced by columns (the input-tap transposes and the matmuls grow with them; the
  // last column tile of an O tile is often short): accumulator i goes to the core whose part of the
  // total its middle column falls in.
  int64_t total = 0, before = 0;
  for (const auto& a : accs) total += a.second.size;
  std::vector<int64_t> owner;
  for (const auto& a : accs) {
    owner.push_back((2 * before + a.second.size) * int64_t(cores) / (2 * total));
    before += a.second.size;
  }
  if (g.gc != g.c && cores > 1) {
    // The block-diagonal masks of a grouped dW work on whole taps: a run that cuts a tap goes to core 0.
    const int64_t ckk = g.c * g.kh * g.kw;
    for (const auto& a : accs) {
      const int64_t end = a.second.begin + a.second.size;
      if (a.second.begin % g.c != 0 || (end % g.c != 0 && end < ckk)) return std::vector<int64_t>(accs.size(), 0);
    }
  }
  return owner;
}

std::vector<double> grad_input_weights(const ConvGeometry& dx, const ConvGeometry& dw, int64_t partitions,
                                       int64_t bank, uint32_t cores) {
  // Estimated PE work (moving columns per pixel) of each core's dW share: its input-tap and dY
  // transposes and its accumulators' columns; then dX's matmul groups per dX pixel.
  const std::vector<std::pair<Range, Range>> accs = grad_weight_tiles(dw, partitions, bank);
  const std::vector<int64_t> owner = grad_weight_owners(dw, accs, cores);
  const std::vector<Range> chunks = tiles(dw.c, partitions);
  std::vector<double> work(cores, 0.0);
  for (uint32_t core = 0; core < cores; ++core) {
    auto mine = [&](int64_t begin, int64_t size, bool o_tile) {
      for (size_t a = 0; a < accs.size(); ++a) {
        const Range& r = o_tile ? accs[a].first : accs[a].second;
        if (owner[a] == int64_t(core) && r.begin < begin + size && begin < r.begin + r.size) return true;
      }
      return false;
    };
    double w = 0;
    for (const Range& ot : tiles(dw.o, partitions)) w += mine(ot.begin, ot.size, true) ? 1 : 0;
    for (int64_t tap = 0; tap < dw.kh * dw.kw; ++tap) {
      for (const Range& cr : chunks) w += mine(tap * dw.c + cr.begin, cr.size, false) ? 1 : 0;
    }
    for (size_t a = 0; a < accs.size(); ++a) {
      if (owner[a] == int64_t(core)) w += double(accs[a].second.size) / double(partitions);
    }
    work[core] = w * double(dw.n * dw.out_h() * dw.out_w());
  }
  const int64_t cpad = dx.c <= 32 ? 32 : (dx.c <= 64 ? 64 : partitions);
  const int64_t reps = dx.c <= 64 ? std::min(dx.kw, partitions / cpad) : 1;
  const double dx_work = double(ceil_div(dx.c, partitions) * dx.kh * ceil_div(dx.kw, reps) * ceil_div(dx.o, partitions)) *
                         double(dx.n * dx.out_h() * dx.out_w());
  // Water-filling: dX goes to the cores with the least dW until every core has the same total.
  std::vector<double> sorted = work;
  std::sort(sorted.begin(), sorted.end());
  double level = sorted[0] + dx_work, below = 0;
  for (size_t k = 0; k < sorted.size(); ++k) {
    below += sorted[k];
    const double l = (dx_work + below) / double(k + 1);
    if (k + 1 == sorted.size() || l <= sorted[k + 1]) {
      level = l;
      break;
    }
  }
  std::vector<double> share(cores);
  for (uint32_t core = 0; core < cores; ++core) share[core] = std::max(0.0, level - work[core]) / dx_work;
  return share;
}

void Conv2dBuilder::plan_grad_weight_split() {
  m_grouped_passes = m_passes > 1;
  std::vector<std::pair<Range, Range>> accs;
  for (const Accumulator& a : m_accs) accs.push_back({a.o, a.cols});
  const std::vector<int64_t> owner = grad_weight_owners(m_s, accs, m_ctx.cores);
  m_my_accs.clear();
  for (size_t a = 0; a < m_accs.size(); ++a) {
    if (owner[a] == int64_t(m_ctx.core)) m_my_accs.push_back(m_accs[a]);
  }
}

bool Conv2dBuilder::o_chunk_needed(const Range& oc) const {
  for (const Accumulator& a : m_my_accs) {
    if (a.o.begin == oc.begin) return true;
  }
  return false;
}

bool Conv2dBuilder::chunk_needed(size_t ch) const {
  if (m_mode != ConvMode::grad_weight) return true;
  for (int64_t tap = 0; tap < m_s.kh * m_s.kw; ++tap) {
    if (needs_columns(column_of(tap, ch), m_chunks[ch].size)) return true;
  }
  return false;
}

bool Conv2dBuilder::needs_columns(int64_t begin, int64_t size) const {
  for (const Accumulator& a : m_my_accs) {
    if (a.cols.begin < begin + size && begin < a.cols.begin + a.cols.size) return true;
  }
  return false;
}

// dY of a block, O-chunks on partitions: one contiguous run per (channel, image).
void Conv2dBuilder::load_grad_output(const Block& blk, int64_t index) {
  const int64_t plane = m_ho * m_wo;
  for (size_t k = 0; k < m_o_chunks.size(); ++k) {
    const Range& oc = m_o_chunks[k];
    if (!o_chunk_needed(oc)) continue;  // another core's O tile
    for (int64_t n = 0; n < blk.nb; ++n) {
      dma_emit(ap(m_dy[index % 2], ((int64_t(k) - m_k_base) * m_nb + n) * m_rb * m_wo,
                  {{0, uint32_t(oc.size)}, {1, uint32_t(blk.rb * m_wo)}}),
               ap(m_t.grad_output, ((blk.n0 + n) * m_s.out_ct + m_s.out_c0 + oc.begin) * plane + blk.r0 * m_wo,
                  {{plane, uint32_t(oc.size)}, {1, uint32_t(blk.rb * m_wo)}}),
               kGradOutputQueue + (m_store_step++ % 2));
    }
  }
}

// Pixels onto partitions for one tile: dY^T[pixels, O] and im2col(X)^T[pixels, (c, kh, kw)], each
// a PE transpose of a [channels, pixels] window (the forward's moving pattern) through PSUM.
void Conv2dBuilder::transpose_tile(const Block& blk, int64_t index, const PixelTile& t, int64_t slot) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const uint32_t px = uint32_t(t.pixels()), nc = uint32_t(t.nc), rc = uint32_t(t.rc), cc = uint32_t(t.cc);
  (void)blk;
  auto transpose = [&](const isa::AccessPattern& data, uint32_t channels, uint32_t dst, int64_t dst_offset,
                       int64_t dst_stride) {
    const int64_t ps = m_wprep_step % m_tslots;
    isa::AccessPattern tr = ap(m_tps, ps * bank / kSlotsPerBank, {{0, px}, {1, channels}});
    b.emit(Opcode::nc_transpose).tensor("dst", tr).tensor("data", data);
    evacuate(b, ap(dst, dst_offset, {{0, px}, {dst_stride, channels}}), tr, nullptr,
             m_wprep_step++ % 2 ? Engine::scalar : Engine::vector);
  };
  for (size_t k = 0; k < m_o_chunks.size(); ++k) {
    const Range& oc = m_o_chunks[k];
    if (!o_chunk_needed(oc)) continue;  // another core's O tile
    const int64_t offset = (((int64_t(k) - m_k_base) * m_nb + t.n) * m_rb + t.row) * m_wo + t.col;
    transpose(ap(m_dy[index % 2], offset, {{0, uint32_t(oc.size)}, {m_rb * m_wo, nc}, {m_wo, rc}, {1, cc}}),
              uint32_t(oc.size), m_dyt, slot * m_ostride + oc.begin - m_o_base, 1);
  }
  const uint32_t buf = m_buf[index % 2];
  for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
    const Range& cr = m_chunks[ch];
    for (int64_t kh = 0; kh < s.kh; ++kh) {
      for (int64_t kw = 0; kw < s.kw; ++kw) {
        const int64_t column = column_of(kh * s.kw + kw, ch);
        if (!needs_columns(column, cr.size)) continue;  // another core's (round's) columns
        const int64_t row = (int64_t(ch) * m_nb + t.n) * m_rows_in + t.row * s.stride_h + kh * s.dilation_h;
        const int64_t offset = row * m_wb + t.col * s.stride_w + kw * s.dilation_w;
        transpose(ap(buf, offset,
                     {{0, uint32_t(cr.size)}, {m_rows_in * m_wb, nc}, {s.stride_h * m_wb, rc}, {s.stride_w, cc}}),
                  uint32_t(cr.size), m_colt, slot * m_cstride + column - m_col_base, 1);
      }
    }
  }
}

void Conv2dBuilder::grad_weight_matmuls(const PixelTile& t, int64_t slot, int64_t pass, bool first, bool last) {
  (void)last;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const uint32_t px = uint32_t(t.pixels());
  const int64_t end = std::min<int64_t>(int64_t(m_my_accs.size()), (pass + 1) * kGradAccBanks);
  for (int64_t a = pass * kGradAccBanks; a < end; ++a) {
    const Accumulator& acc = m_my_accs[a];
    m_ctx.builder.emit(Opcode::nc_matmul)
        .tensor("dst", ap(m_acc, (a - pass * kGradAccBanks) * bank, {{0, uint32_t(acc.o.size)}, {1, uint32_t(acc.cols.size)}}))
        .tensor("stationary", ap(m_dyt, slot * m_ostride + acc.o.begin - m_o_base, {{0, px}, {1, uint32_t(acc.o.size)}}))
        .tensor("moving", ap(m_colt, slot * m_cstride + acc.cols.begin - m_col_base,
                             {{0, px}, {1, uint32_t(acc.cols.size)}}))
        .word("accumulate", first ? "false" : "true");
  }
}

// One group's partials of a pass into the fp32 SBUF copy (a plain copy the first time).
void Conv2dBuilder::flush_grad_weight(int64_t pass, bool first_group) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
  const int64_t end = std::min<int64_t>(int64_t(m_my_accs.size()), (pass + 1) * kGradAccBanks);
  for (int64_t a = pass * kGradAccBanks; a < end; ++a) {
    const Accumulator& acc = m_my_accs[a];
    const std::vector<isa::ApDim> d = {{0, uint32_t(acc.o.size)}, {1, uint32_t(acc.cols.size)}};
    isa::AccessPattern src = ap(m_acc, (a - pass * kGradAccBanks) * bank, d), dst = ap(m_wacc, a * bank, d);
    if (first_group) {
      evacuate(b, dst, src, nullptr, m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
    } else {
      b.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", src).tensor("data2", dst).word("op", "add");
    }
  }
}

// Per O tile: the accumulators into one fp32 row [O, (kh, kw, c) + ones] (from the run's first column),
// then one Vector copy permutes it to the HBM order (c, kh, kw) with the output cast, and the rows go out
// contiguous. (im2col^T columns are tap-major so each transpose's copy-out writes one contiguous run.)
void Conv2dBuilder::store_grad_weight() {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4), khw = s.kh * s.kw;
  for (const Range& ot : m_o_chunks) {
    const uint32_t on = uint32_t(ot.size);
    int64_t first = -1, end = -1;  // this core's (round's) columns of the O tile: one contiguous run
    for (const Accumulator& acc : m_my_accs) {
      if (acc.o.begin != ot.begin) continue;
      if (first < 0) first = acc.cols.begin;
      end = acc.cols.begin + acc.cols.size;
    }
    if (first < 0) continue;
    // The row from the run's first column: the fp32 partials in SBUF already are one (an O tile's
    // accumulators are consecutive 512-column slots from a run start on a 512 boundary); PSUM's go out
    // to m_wrow.
    uint32_t row = m_wrow;
    int64_t row_at = 0;
    for (size_t a = 0; a < m_my_accs.size(); ++a) {
      const Accumulator& acc = m_my_accs[a];
      if (acc.o.begin != ot.begin) continue;
      if (m_grouped_passes) {
        if (acc.cols.begin == first) row = m_wacc, row_at = int64_t(a) * bank;
        continue;
      }
      const std::vector<isa::ApDim> d = {{0, on}, {1, uint32_t(acc.cols.size)}};
      evacuate(b, ap(m_wrow, acc.cols.begin - first, d), ap(m_acc, int64_t(a) * bank, d), nullptr,
               m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
    }
    auto row_ap = [&](int64_t column, std::vector<isa::ApDim> d) { return ap(row, row_at + column - first, std::move(d)); };
    // Permutes alternate Vector and Scalar by O tile (each a strided read of the whole row).
    const Engine permute_engine = (ot.begin / int64_t(m_ctx.partitions())) % 2 ? Engine::scalar : Engine::vector;
    const bool has_ones = end > m_ckk;
    end = std::min(end, m_ckk);
    const int64_t hbm_row = s.w_off + ot.begin * s.w_row;
    if (s.groups() > 1) {
      // Block-diagonal: dW of the block of groups was computed dense; zero the columns of other
      // groups (two affine_selects: keep row o in column group j when 0 <= o - go*j <= go - 1), then
      // add the groups' columns together into each row's own [C / groups, taps] (exact: one nonzero).
      // (Runs of a grouped dW are whole taps: grad_weight_owners.)
      const int64_t t0 = first / s.c, t1 = ceil_div(end, s.c), k = s.groups();
      const uint32_t nt = uint32_t(t1 - t0);
      const isa::AccessPattern cols = row_ap(t0 * s.c, {{0, on}, {1, uint32_t(nt * s.c)}});
      for (int hi = 0; hi < 2; ++hi) {
        const std::string pattern = "[[0, " + std::to_string(nt) + "], [" + std::to_string(hi ? s.go : -s.go) + ", " +
                                    std::to_string(k) + "], [0, " + std::to_string(s.gc) + "]]";
        b.emit(Opcode::affine_select).tensor("dst", cols).word("pattern", pattern)
            .imm("channel_multiplier", hi ? -1 : 1).imm("offset", hi ? double(s.go - 1) : 0.0)
            .tensor("on_true_tile", cols).imm("on_false_value", 0).word("cmp_op", "greater_equal");
      }
      b.emit(Opcode::tensor_reduce)
          .tensor("dst", ap(m_stage, t0, {{0, on}, {khw, uint32_t(s.gc)}, {1, nt}}))
          .word("op", "add")
          .tensor("data", row_ap(t0 * s.c, {{0, on}, {1, uint32_t(s.gc)}, {s.c, nt}, {s.gc, uint32_t(k)}}))
          .word("axis", "[3]");
      if (nt == khw) {
        dma_emit(ap(m_t.grad_weight, hbm_row, {{s.w_row, on}, {1, uint32_t(s.gc * khw)}}),
                 ap(m_stage, 0, {{0, on}, {1, uint32_t(s.gc * khw)}}), kGradStoreQueue);
      } else {
        dma_emit(ap(m_t.grad_weight, hbm_row + t0, {{s.w_row, on}, {khw, uint32_t(s.gc)}, {1, nt}}),
                 ap(m_stage, t0, {{0, on}, {khw, uint32_t(s.gc)}, {1, nt}}), kGradStoreQueue);
      }
    } else if (first == 0 && end == m_ckk) {
      // Every column: one Vector copy permutes the row to the HBM order (c, kh, kw) with the output
      // cast, and the rows go out contiguous.
      evacuate(b, ap(m_stage, 0, {{0, on}, {1, uint32_t(m_ckk)}}),
               row_ap(0, {{0, on}, {1, uint32_t(s.c)}, {s.c, uint32_t(khw)}}), nullptr, permute_engine);
      dma_emit(ap(m_t.grad_weight, hbm_row, {{s.w_row, on}, {1, uint32_t(m_ckk)}}),
               ap(m_stage, 0, {{0, on}, {1, uint32_t(m_ckk)}}), kGradStoreQueue);
    } else {
      // A run of columns: its whole taps (runs of taps per (o, c) in HBM), then the cut taps at
      // either end (one element per (o, c)); each piece compact in the stage, one after the other.
      const int64_t t0 = ceil_div(first, s.c), t1 = end / s.c;
      int64_t staged = 0;
      auto piece = [&](int64_t tap0, int64_t ntaps, int64_t c0, int64_t nc) {
        const uint32_t nt = uint32_t(ntaps), ncu = uint32_t(nc);
        const isa::AccessPattern stage = ap(m_stage, staged, {{0, on}, {nt, ncu}, {1, nt}});
        evacuate(b, stage, row_ap(tap0 * s.c + c0, {{0, on}, {1, ncu}, {s.c, nt}}), nullptr, permute_engine);
        dma_emit(ap(m_t.grad_weight, hbm_row + c0 * khw + tap0, {{s.w_row, on}, {khw, ncu}, {1, nt}}), stage,
                 kGradStoreQueue);
        staged += ntaps * nc;
      };
      if (t1 > t0) piece(t0, t1 - t0, 0, s.c);
      if (first % s.c != 0) {
        const int64_t t = first / s.c;
        piece(t, 1, first - t * s.c, std::min(end, (t + 1) * s.c) - first);
      }
      // The tap `end` is cut in, from channel 0, unless the first piece already took it (a run that
      // starts and ends inside one tap). A run that starts on a tap and ends inside it has only this piece.
      const bool head_took_tap = first % s.c != 0 && end / s.c == first / s.c;
      if (end % s.c != 0 && !head_took_tap) piece(end / s.c, 1, 0, end - end / s.c * s.c);
    }
    if (m_t.grad_bias >= 0 && has_ones) {
      // grad_bias: the ones column, cast through the first column of the stage once dW has left.
      isa::AccessPattern db = ap(m_stage, 0, {{0, on}, {1, 1}});
      evacuate(b, db, row_ap(m_ckk, {{0, on}, {1, 1}}), nullptr, Engine::scalar);
      dma_emit(ap(uint32_t(m_t.grad_bias), s.out_c0 + ot.begin, {{1, on}, {1, 1}}), db, kGradStoreQueue + 1);
    }
  }
}

// Rounds: the gathered fp32 rows of a group (O tiles x channel chunks), each chunk [c, taps] permuted to the
// HBM order (c, kh, kw) with the output cast (two stage halves, so a piece's copy overlaps the last one's
// store), one contiguous run per row in HBM; grad_bias from the ones column of the last group.
void Conv2dBuilder::store_grad_weight_rows(const RowGroup& group) {
  isa::ProgramBuilder& b = m_ctx.builder;
  const ConvGeometry& s = m_s;
  const int64_t p = m_ctx.partitions(), khw = s.kh * s.kw, half = std::min<int64_t>(s.c, p) * khw;
  const int64_t row_cap = m_row_cap;
  int64_t step = 0;
  for (const Range& ot : tiles(group.o.size, p)) {
    const uint32_t on = uint32_t(ot.size);
    const int64_t row = ot.begin / p * row_cap - group.cols.begin, o = group.o.begin + ot.begin;
    for (size_t ch = 0; ch < m_chunks.size(); ++ch) {
      const Range& cr = m_chunks[ch];
      const int64_t first = column_of(0, ch);
      if (first < group.cols.begin || first >= group.cols.begin + group.cols.size) continue;
      const int64_t at = (step++ % 2) * half;
      const isa::AccessPattern stage = ap(m_stage, at, {{0, on}, {1, uint32_t(cr.size * khw)}});
      evacuate(b, ap(m_stage, at, {{0, on}, {khw, uint32_t(cr.size)}, {1, uint32_t(khw)}}),
               ap(m_wrow, row + first, {{0, on}, {1, uint32_t(cr.size)}, {cr.size, uint32_t(khw)}}), nullptr,
               step % 2 ? Engine::vector : Engine::scalar);
      dma_emit(ap(m_t.grad_weight, s.w_off + o * s.w_row + cr.begin * khw, {{s.w_row, on}, {1, uint32_t(cr.size * khw)}}),
               stage, kGradStoreQueue);
    }
    if (m_t.grad_bias >= 0 && group.cols.begin + group.cols.size > m_ckk) {
      isa::AccessPattern db = ap(m_stage, (step++ % 2) * half, {{0, on}, {1, 1}});
      evacuate(b, db, ap(m_wrow, row + m_ckk, {{0, on}, {1, 1}}), nullptr, Engine::scalar);
      dma_emit(ap(uint32_t(m_t.grad_bias), s.out_c0 + o, {{1, on}, {1, 1}}), db, kGradStoreQueue + 1);
    }
  }
}

// Every input block once: the PE transposes tile j+kLookAhead while the copies of tile j drain; with
// grouped passes, each group of tiles' partials go through m_wacc pass by pass.
void Conv2dBuilder::stream_grad_weight(int64_t& block_index) {
  const int64_t p = m_ctx.partitions();
  const int64_t passes = ceil_div(int64_t(m_my_accs.size()), kGradAccBanks);
  const std::vector<Block> all_blocks = blocks();
  load_block(all_blocks[0], block_index);
  load_grad_output(all_blocks[0], block_index);
  bool first_tile = true, first_group = true;
  for (size_t i = 0; i < all_blocks.size(); ++i) {
    const int64_t index = block_index + int64_t(i);
    if (i + 1 < all_blocks.size()) {
      load_block(all_blocks[i + 1], index + 1);
      load_grad_output(all_blocks[i + 1], index + 1);
    }
    const std::vector<PixelTile> tl = pixel_tiles(all_blocks[i], p);
    if (!m_grouped_passes) {
      std::vector<int64_t> slot(tl.size());
      const size_t ahead = size_t(kLookAhead);
      for (size_t j = 0; j < tl.size() + ahead; ++j) {
        if (j < tl.size()) {
          slot[j] = m_tile_step++ % m_slots;
          transpose_tile(all_blocks[i], index, tl[j], slot[j]);
        }
        if (j >= ahead) {
          grad_weight_matmuls(tl[j - ahead], slot[j - ahead], 0, first_tile, false);
          first_tile = false;
        }
      }
      continue;
    }
    for (size_t g0 = 0; g0 < tl.size(); g0 += kGroupTiles) {
      const size_t g1 = std::min(tl.size(), g0 + kGroupTiles);
      for (size_t j = g0; j < g1; ++j) transpose_tile(all_blocks[i], index, tl[j], int64_t(j - g0));
      for (int64_t pass = 0; pass < passes; ++pass) {
        for (size_t j = g0; j < g1; ++j) grad_weight_matmuls(tl[j], int64_t(j - g0), pass, j == g0, j + 1 == g1);
        flush_grad_weight(pass, first_group);
      }
      first_group = false;
    }
  }
  block_index += int64_t(all_blocks.size());
}

void Conv2dBuilder::emit_grad_weight() {
  const int64_t p = m_ctx.partitions();
  // The ones column, never overwritten by the transposes (of this round).
  auto ones = [&] {
    m_ctx.builder.emit(Opcode::memset)
        .tensor("dst", ap(m_colt, m_ckk - m_col_base, {{0, uint32_t(p)}, {m_cstride, uint32_t(m_slots)}}))
        .imm("value", 1)
        .on(Engine::gpsimd);
  };
  int64_t block_index = 0;
  if (m_rounds) {
    const int64_t bank = int64_t(m_ctx.config.core.psum.bank_bytes / 4);
    const int64_t row_cap = m_row_cap;
    for (const RowGroup& group : m_row_groups) {
      for (const std::vector<Accumulator>& round : group.rounds) {
        set_round(round);
        m_o_base = group.o.begin;
        m_k_base = group.o.begin / p;
        if (m_s.bias && round.back().cols.begin + round.back().cols.size > m_ckk) ones();
        stream_grad_weight(block_index);
        for (size_t a = 0; a < round.size(); ++a) {  // into the group's rows
          const std::vector<isa::ApDim> d = {{0, uint32_t(round[a].o.size)}, {1, uint32_t(round[a].cols.size)}};
          const int64_t at = (round[a].o.begin - group.o.begin) / p * row_cap + round[a].cols.begin - group.cols.begin;
          evacuate(m_ctx.builder, ap(m_wrow, at, d), ap(m_acc, int64_t(a) * bank, d), nullptr,
                   m_evac_step++ % 2 ? Engine::scalar : Engine::vector);
        }
      }
      store_grad_weight_rows(group);
    }
    return;
  }
  if (m_s.bias) ones();
  if (m_my_accs.empty()) return;  // no taps / channels left for this core
  stream_grad_weight(block_index);
  store_grad_weight();
}

}  // namespace conv_detail

void build_conv2d_backward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dBackwardTensors& tensors) {
  using namespace conv_detail;
  validate_groups(spec);
  if (spec.pad_h < 0 || spec.pad_w < 0) throw KernelUnsupported("conv2d: stride and dilation must be >= 1, padding >= 0");
  // Depthwise (groups == C == O): planes on partitions, dW on Vector / GpSimd / Scalar (depthwise_conv.h).
  if (depthwise_applies(spec, ctx, true)) {
    build_depthwise_backward(ctx, spec, tensors);
    return;
  }
  isa::Program& program = ctx.builder.mutable_program();
  // Each pass is built in a builder of its own, so it may use all of SBUF and PSUM, and appended.
  auto part = [&](const std::string& prefix, const ConvGeometry& g, ConvMode mode, const ConvGeometry* dw = nullptr) {
    isa::ProgramBuilder b(program.name, program.generation);
    ConvTensors t;
    auto copy = [&](int64_t id) { return id < 0 ? -1 : int64_t(b.place(program.allocations.at(size_t(id)))); };
    t.input = uint32_t(copy(mode == ConvMode::grad_input ? tensors.grad_output : tensors.input));
    if (mode == ConvMode::grad_input) {
      t.weight = uint32_t(copy(tensors.weight));
      t.output = uint32_t(copy(tensors.grad_input));
    } else {
      t.grad_output = uint32_t(copy(tensors.grad_output));
      t.grad_weight = uint32_t(copy(tensors.grad_weight));
      t.grad_bias = copy(tensors.grad_bias);
    }
    KernelContext sub{b, ctx.config, ctx.name(prefix), ctx.core, ctx.cores};
    Conv2dBuilder builder(sub, g, t, mode);
    if (dw && ctx.cores > 1) {
      // dX's pixel tiles go mostly to the cores with the smaller dW share (dW runs after it).
      builder.set_core_shares(
          grad_input_weights(g, *dw, ctx.partitions(), int64_t(ctx.config.core.psum.bank_bytes / 4), ctx.cores));
    }
    builder.build();
    append_program(program, b.program());
  };
  if (spec.groups == 1) {
    ConvGeometry gw = forward_geometry(spec);
    gw.bias = tensors.grad_bias >= 0;
    part("dx_", grad_input_geometry(spec), ConvMode::grad_input, &gw);
    part("dw_", gw, ConvMode::grad_weight);
    return;
  }
  // Grouped: dX and dW of each block of groups (block-diagonal weights, see build_conv2d).
  const std::vector<Range> blocks = group_blocks(spec, ctx.partitions());
  for (const Range& gr : blocks) {
    ConvGeometry gw = restrict_to_groups(forward_geometry(spec), spec, gr, false);
    gw.bias = tensors.grad_bias >= 0;
    part("dx_g" + std::to_string(gr.begin) + "_", restrict_to_groups(grad_input_geometry(spec), spec, gr, true),
         ConvMode::grad_input, &gw);
  }
  for (const Range& gr : blocks) {
    ConvGeometry gw = restrict_to_groups(forward_geometry(spec), spec, gr, false);
    gw.bias = tensors.grad_bias >= 0;
    part("dw_g" + std::to_string(gr.begin) + "_", gw, ConvMode::grad_weight);
  }
}

isa::Program conv2d_backward_program(const Conv2dSpec& spec, const HardwareConfig& config, uint32_t core,
                                     uint32_t cores) {
  conv_detail::validate_groups(spec);
  isa::ProgramBuilder b("conv2d_backward", config.generation);
  auto u = [](int64_t v) { return uint32_t(v); };
  if (spec.out_h() <= 0 || spec.out_w() <= 0) throw KernelUnsupported("conv2d: the kernel does not fit the padded input");
  const std::vector<uint32_t> x = {u(spec.n), u(spec.c), u(spec.h), u(spec.w)};
  const std::vector<uint32_t> w = {u(spec.o), u(spec.c / spec.groups), u(spec.kh), u(spec.kw)};
  Conv2dBackwardTensors t{};
  t.input = b.hbm("input", spec.input_dtype, x, isa::AllocationRole::input);
  t.weight = b.hbm("weight", spec.input_dtype, w, isa::AllocationRole::input);
  t.grad_output = b.hbm("grad_output", spec.input_dtype, {u(spec.n), u(spec.o), u(spec.out_h()), u(spec.out_w())},
                        isa::AllocationRole::input);
  t.grad_input = b.hbm("grad_input", spec.output_dtype, x, isa::AllocationRole::output);
  t.grad_weight = b.hbm("grad_weight", spec.output_dtype, w, isa::AllocationRole::output);
  if (spec.bias) t.grad_bias = b.hbm("grad_bias", spec.output_dtype, {u(spec.o)}, isa::AllocationRole::output);
  KernelContext ctx{b, config, "", core, cores};
  build_conv2d_backward(ctx, spec, t);
  return b.finish();
}

}  // namespace trnsim::kernels
