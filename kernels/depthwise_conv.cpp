// Depthwise conv2d with planes on partitions (see depthwise_conv.h for the schedule).
#include "kernels/depthwise_conv.h"

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "isa/view.h"
#include "kernels/conv_builder.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels::conv_detail {

namespace {

using isa::ApDim;
using isa::Opcode;

constexpr int64_t kAccBanks = 6;             // forward / dX pixel tiles round-robin; the rest hold dW
constexpr int64_t kMaxEngineFree = 32768;    // elements per partition of one compute instruction
constexpr int64_t kStoreQueue = 4;           // stores on 4 / 5, loads on 0..3
constexpr int64_t kSpread = 4;               // Scalar accumulator columns spread over granules (see part_g)
constexpr int64_t kGranuleFloats = 64;       // fp32 per 256-byte dependency granule
constexpr int kGSlots = 3;                   // GpSimd product slots (Scalar reduces them behind it)
constexpr int64_t kGroupElements = 4096;     // per partition: a grad_weight product of several taps
constexpr int64_t kRowGroupBelow = 1024;     // kernel rows share an instruction below this many elements a row

// One pass's plane: the stored plane [h, w] placed in a buffer [hp, wp] at (y * in_dil + pad_t,
// x * in_dil + pad_l) (negative pads crop), zeros elsewhere; the pass's output is [ho, wo].
struct Plane {
  ConvGeometry g;
  int64_t hp = 0, wp = 0, ho = 0, wo = 0;
  bool direct = false;  // the buffer is the plane as stored: one DMA, no staging copy
  bool zero = false;    // the buffer has zero borders or gaps
};

Plane plane_of(const ConvGeometry& g) {
  Plane p;
  p.g = g;
  p.hp = g.padded_h();
  p.wp = g.padded_w();
  p.ho = g.out_h();
  p.wo = g.out_w();
  const bool no_pad = g.pad_t == 0 && g.pad_b == 0 && g.pad_l == 0 && g.pad_r == 0;
  p.direct = no_pad && g.in_dil_h == 1 && g.in_dil_w == 1;
  p.zero = g.pad_t > 0 || g.pad_b > 0 || g.pad_l > 0 || g.pad_r > 0 || g.in_dil_h > 1 || g.in_dil_w > 1;
  return p;
}

bool plane_ok(const Plane& p) {
  const ConvGeometry& g = p.g;
  return p.ho > 0 && p.wo > 0 && p.hp > 0 && p.wp > 0 && g.h * g.w <= isa::kMaxApDimStride && p.hp * p.wp <= isa::kMaxApDimStride &&
         p.ho * p.wo <= isa::kMaxApDimStride && g.stride_h * p.wp <= isa::kMaxApDimStride && g.in_dil_h * p.wp <= isa::kMaxApDimStride &&
         g.dilation_h * p.wp <= isa::kMaxApDimStride;
}

enum class TileEngine { pe, scalar_gpsimd, vector };

struct TileRef {
  int64_t q0, np, key;  // planes [q0, q0 + np); key = q0 mod C (the channel of partition 0)
};

// grad_weight's taps [t0, t0 + taps) of one kernel row: GpSimd product + Scalar accumulators, GpSimd
// product + Vector reduce, or both on Vector.
enum class DwPath { g_s, g_v, v_v };
struct DwGroup {
  int64_t t0, taps, rows, per_row;  // taps = rows x per_row: kernel rows from t0 / KW, columns from t0 % KW
  DwPath path;
};

class DwBuilder {
 public:
  DwBuilder(const KernelContext& ctx, const Conv2dSpec& s) : m_ctx(ctx), m_s(s) {
    m_p = ctx.partitions();
    m_kk = s.kh * s.kw;
    m_ds = dtype_size_bytes(s.input_dtype);
    m_ods = dtype_size_bytes(s.output_dtype);
    m_bank = int64_t(ctx.config.core.psum.bank_bytes / 4);
    m_fp = plane_of(forward_geometry(s));
    m_bp = plane_of(grad_input_geometry(s));
    m_chunks = tiles(s.c, m_p);
    m_dw_cols = ceil_div(m_kk + 1, kSpread) * kSpread;
    m_dw_per_bank = std::max<int64_t>(1, m_bank / m_dw_cols);
    m_group = std::max<int64_t>(1, std::min(s.kw, kGroupElements / std::max<int64_t>(1, m_fp.ho * m_fp.wo)));
    // Small planes: whole kernel rows per instruction too (the engines' fixed costs dominate otherwise).
    if (m_group == s.kw && s.kw * m_fp.ho * m_fp.wo < kRowGroupBelow) m_group_rows = std::max<int64_t>(1, std::min(s.kh, kGroupElements / (s.kw * m_fp.ho * m_fp.wo)));
    // Tiles of 128 consecutive planes, ordered by their channel offset so the diagonals repeat.
    for (const Range& r : tiles(s.n * s.c, m_p)) m_tiles.push_back({r.begin, r.size, r.begin % s.c});
    std::stable_sort(m_tiles.begin(), m_tiles.end(), [](const TileRef& a, const TileRef& b) { return a.key < b.key; });
  }

  // SBUF bytes per partition the pass needs (0 when a limit rules the path out).
  int64_t bytes(bool backward) const {
    if (!plane_ok(m_fp) || (backward && !plane_ok(m_bp))) return -1;
    if (m_fp.ho * m_fp.wo > kMaxEngineFree || m_s.h * m_s.w > kMaxEngineFree) return -1;
    if (int64_t(ceil_div(int64_t(m_chunks.size()), m_dw_per_bank)) > int64_t(m_ctx.config.core.psum.banks) - kAccBanks) {
      return -1;
    }
    if (m_dw_cols > m_bank || m_dw_cols / kSpread > kGranuleFloats) return -1;
    const int64_t slack = 256;
    auto buf = [&](int64_t elems, int64_t size) { return 2 * (elems * size + slack); };
    const int64_t hw = m_s.h * m_s.w, out = m_fp.ho * m_fp.wo;
    int64_t total = buf(m_kk + 1, m_ds) + buf(m_kk * m_p, m_ds);  // weight columns, diagonals
    total += buf(m_p, m_ds) + 2 * (m_p * m_ds + slack) + int64_t(m_chunks.size()) * (m_kk + 1) * m_ds + slack;
    total += (m_fp.direct ? 0 : buf(hw, m_ds)) + buf(m_fp.hp * m_fp.wp, m_ds);  // X staging, padded X
    if (!backward) return total + buf(out, m_ods) + (4 + kGSlots) * (m_bank * 4 + slack);
    total += buf(out, m_ds) + (m_bp.direct ? 0 : buf(m_bp.hp * m_bp.wp, m_ds));  // dY, padded dY
    total += buf(hw, m_ods) + (kGSlots + 2) * (m_group * m_group_rows * out * 4 + 256) / 2 * 2 + 2 * buf(m_dw_cols, 4) +
             buf(m_dw_cols, m_ods);  // dX, products, parts
    total += buf(int64_t(m_chunks.size()) * m_p, 4) + 2 * (m_p * 4 + slack);  // selections, ones, scratch
    return total;
  }

  void forward(const Conv2dTensors& t) {
    allocate_common(false);
    m_out[0] = sbuf("dw_out0", m_s.output_dtype, m_fp.ho * m_fp.wo);
    m_out[1] = sbuf("dw_out1", m_s.output_dtype, m_fp.ho * m_fp.wo);
    for (int i = 0; i < 2; ++i) {
      m_accg[i] = sbuf("dw_accg" + std::to_string(i), DType::fp32, m_bank);
      m_accv[i] = sbuf("dw_accv" + std::to_string(i), DType::fp32, m_bank);
    }
    for (int i = 0; i < kGSlots; ++i) m_tmpg[i] = sbuf("dw_tmpg" + std::to_string(i), DType::fp32, m_bank);
    const std::vector<TileRef> mine = my_share(m_ctx, m_tiles);
    // One plan for every plane tile (within a tile, so the engines work on the same buffers).
    const std::vector<TileEngine> plan = plan_pixel_tiles(pixel_tiles(m_fp));
    if (!mine.empty()) load_all_weights(t.weight, t.bias);
    std::vector<int64_t> diag_slot(mine.size());
    auto load = [&](size_t k) {
      const TileRef& tr = mine[k];
      load_plane(m_fp, t.input, tr, k);
      diag_slot[k] = weights(tr, t.bias >= 0);
    };
    auto body = [&](size_t k) {
      const TileRef& tr = mine[k];
      const int64_t ds = diag_slot[k];
      m_w_slot_of_tile = ds;
      conv_tile(m_fp, m_xbuf[k % 2], tr, ds, m_out[k % 2], false, t.bias >= 0 ? &ds : nullptr, nullptr,
                plan.data());
      store(t.output, tr, m_out[k % 2], m_fp.ho * m_fp.wo, k);
    };
    detail::pipelined(mine.size(), 1, load, body);
  }

  void backward(const Conv2dBackwardTensors& t) {
    allocate_common(true);
    const int64_t out = m_fp.ho * m_fp.wo, hw = m_s.h * m_s.w;
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      m_dystage[i] = sbuf("dw_dys" + n, m_s.input_dtype, out);
      m_dybuf[i] = m_bp.direct ? m_dystage[i] : sbuf("dw_dyb" + n, m_s.input_dtype, m_bp.hp * m_bp.wp);
      m_out[i] = sbuf("dw_dx" + n, m_s.output_dtype, hw);
      m_prod_v[i] = sbuf("dw_pv" + n, DType::fp32, m_group * m_group_rows * out);
      m_part[i] = sbuf("dw_part" + n, DType::fp32, m_dw_cols);
      // Scalar's accumulator columns: tap t at granule t % kSpread, index t / kSpread, so consecutive
      // activations do not write one granule (each would wait out the previous one's latency).
      m_part_g[i] = sbuf("dw_partg" + n, DType::fp32, kSpread * kGranuleFloats);
      m_sel[i] = sbuf("dw_sel" + n, DType::fp32, int64_t(m_chunks.size()) * m_p);
      m_dwout[i] = sbuf("dw_wout" + n, m_s.output_dtype, m_dw_cols);
    }
    for (int i = 0; i < kGSlots; ++i) m_prod_g[i] = sbuf("dw_pg" + std::to_string(i), DType::fp32, m_group * m_group_rows * out);
    m_ones = sbuf("dw_ones", DType::fp32, m_p);
    m_seltmp = sbuf("dw_seltmp", DType::fp32, m_p);
    // grad_weight's units: tiles joined by the channel chunks they touch (a chunk's PSUM accumulator
    // sums every tile of its channels, on one core). With at least one unit per core, each core takes a
    // contiguous share of the units and of grad_input's tiles; else core 0 runs grad_weight over every
    // tile and the other cores share grad_input's tiles (one core: both).
    std::vector<int64_t> unit_of = grad_weight_units();
    const int64_t units = m_tiles.empty() ? 0 : *std::max_element(unit_of.begin(), unit_of.end()) + 1;
    Range my_units{0, units}, my_dx{0, int64_t(m_tiles.size())};
    if (m_ctx.cores > 1 && units >= int64_t(m_ctx.cores)) {
      my_units = m_ctx.share(units);
      my_dx = m_ctx.share(int64_t(m_tiles.size()));
    } else if (m_ctx.cores > 1) {
      KernelContext others = m_ctx;
      others.core = m_ctx.core == 0 ? 0 : m_ctx.core - 1;
      others.cores = m_ctx.cores - 1;
      my_units = m_ctx.core == 0 ? Range{0, units} : Range{0, 0};
      my_dx = m_ctx.core == 0 ? Range{0, 0} : others.share(int64_t(m_tiles.size()));
    }
    struct Step {
      TileRef tile;
      bool dx, dw;
    };
    std::vector<Step> steps;
    for (size_t i = 0; i < m_tiles.size(); ++i) {
      const bool dw = unit_of[i] >= my_units.begin && unit_of[i] < my_units.begin + my_units.size;
      const bool dx = int64_t(i) >= my_dx.begin && int64_t(i) < my_dx.begin + my_dx.size;
      if (dw || dx) steps.push_back({m_tiles[i], dx, dw});
    }
    const bool any_dw = my_units.size > 0;
    if (any_dw) plan_grad_weight(my_dx.size > 0, t.grad_bias >= 0);
    if (any_dw) memset_flat(m_ctx, m_ones, m_p, m_p, 1.0);
    if (my_dx.size > 0) load_all_weights(t.weight, -1);
    std::vector<int64_t> diag_slot(steps.size(), -1), sel_slot(steps.size(), -1);
    auto load = [&](size_t k) {
      const Step& st = steps[k];
      if (st.dw) load_plane(m_fp, t.input, st.tile, k);
      // dY, contiguous (dW reads it as is), and padded / dilated for dX.
      dma(ap(m_dystage[k % 2], 0, {{0, u(st.tile.np)}, {1, u(out)}}),
          ap(t.grad_output, st.tile.q0 * out, {{out, u(st.tile.np)}, {1, u(out)}}), int64_t(k % 2) * 2 + 1);
      if (st.dx) {
        if (!m_bp.direct) fill(m_bp, m_dystage[k % 2], m_dybuf[k % 2], st.tile.np, k);
        diag_slot[k] = weights(st.tile, false);
      }
      if (st.dw) sel_slot[k] = selection(st.tile);
    };
    auto body = [&](size_t k) {
      const Step& st = steps[k];
      // dW's groups interleaved with dX's pixel tiles: each engine runs its queue in order, so this
      // keeps the Vector / Scalar evacuations of dX from holding up dW's products and reductions.
      size_t next = 0;
      const size_t groups = st.dw ? m_dw_groups.size() : 0;
      if (st.dw) grad_weight_begin(k);
      if (st.dx) {
        conv_tile(m_bp, m_dybuf[k % 2], st.tile, diag_slot[k], m_out[k % 2], true, nullptr, [&](size_t i, size_t count) {
          for (const size_t target = (i + 1) * groups / count; next < target; ++next) {
            grad_weight_group(k, st.tile, m_dw_groups[next]);
          }
        });
        store(t.grad_input, st.tile, m_out[k % 2], hw, k);
      }
      for (; next < groups; ++next) grad_weight_group(k, st.tile, m_dw_groups[next]);
      if (st.dw) grad_weight_finish(st.tile, k, sel_slot[k], t.grad_bias >= 0);
    };
    detail::pipelined(steps.size(), 1, load, body);
    if (any_dw) store_grad_weight(t.grad_weight, t.grad_bias);
  }

 private:
  static uint32_t u(int64_t v) { return uint32_t(v); }
  isa::AccessPattern ap(uint32_t tensor, int64_t offset, std::vector<ApDim> d) const {
    return raw_ap(m_ctx, tensor, offset, std::move(d));
  }
  void dma(const isa::AccessPattern& dst, const isa::AccessPattern& src, int64_t queue) {
    m_ctx.builder.emit(Opcode::dma_copy).tensor("dst", dst).tensor("src", src).imm("queue", double(queue));
  }
  uint32_t sbuf(const std::string& name, DType dtype, int64_t elems) {
    // Whole dependency granules: buffers written by different engines never share one.
    detail::align_sbuf_to_granule(m_ctx, name + "_align");
    return m_ctx.builder.sbuf(m_ctx.name(name), dtype, {u(m_p), u(std::max<int64_t>(1, elems))});
  }

  void allocate_common(bool backward) {
    (void)backward;
    for (int i = 0; i < 2; ++i) {
      const std::string n = std::to_string(i);
      m_wcol[i] = sbuf("dw_w" + n, m_s.input_dtype, m_kk + 1);
      m_diag[i] = sbuf("dw_diag" + n, m_s.input_dtype, m_kk * m_p);
      m_xbuf[i] = sbuf("dw_x" + n, m_s.input_dtype, m_fp.hp * m_fp.wp);
      m_xstage[i] = m_fp.direct ? m_xbuf[i] : sbuf("dw_xs" + n, m_s.input_dtype, m_s.h * m_s.w);
      m_selt[i] = sbuf("dw_selt" + n, m_s.input_dtype, m_p);
    }
    m_wall = sbuf("dw_wall", m_s.input_dtype, int64_t(m_chunks.size()) * (m_kk + 1));
    m_ones_in = sbuf("dw_ones_in", m_s.input_dtype, m_p);
    m_selt_tmp = sbuf("dw_selt_tmp", m_s.input_dtype, m_p);
    m_acc = m_ctx.builder.psum(m_ctx.name("dw_acc"), DType::fp32,
                               {u(m_p), m_ctx.config.core.psum.banks, u(m_bank)});
  }

  // Plane tile of `tensor` (planes [q0, q0 + np) of `pl`'s stored size) into buffer k % 2.
  void load_plane(const Plane& pl, uint32_t tensor, const TileRef& tr, size_t k) {
    const int64_t plane = pl.g.h * pl.g.w;
    const uint32_t stage = m_xstage[k % 2];
    dma(ap(stage, 0, {{0, u(tr.np)}, {1, u(plane)}}), ap(tensor, tr.q0 * plane, {{plane, u(tr.np)}, {1, u(plane)}}),
        int64_t(k % 2) * 2);
    if (!pl.direct) fill(pl, stage, m_xbuf[k % 2], tr.np, k);
  }

  // Staging [np, h*w] -> the zero-padded (and dilated / cropped) buffer, lane-wise on Vector (a bf16
  // copy with contiguous rows runs in its 4x mode; GpSimd is busy with grad_weight's products).
  void fill(const Plane& pl, uint32_t stage, uint32_t buf, int64_t np, size_t use) {
    const ConvGeometry& g = pl.g;
    if (pl.zero && use < 2) memset_flat(m_ctx, buf, m_p, pl.hp * pl.wp);
    const int64_t ya = std::max<int64_t>(0, ceil_div_signed(-g.pad_t, g.in_dil_h));
    const int64_t yb = std::min<int64_t>(g.h, floor_div(pl.hp - 1 - g.pad_t, g.in_dil_h) + 1);
    const int64_t xa = std::max<int64_t>(0, ceil_div_signed(-g.pad_l, g.in_dil_w));
    const int64_t xb = std::min<int64_t>(g.w, floor_div(pl.wp - 1 - g.pad_l, g.in_dil_w) + 1);
    if (yb <= ya || xb <= xa) return;
    const int64_t cols = xb - xa, per = std::max<int64_t>(1, std::min(yb - ya, kMaxEngineFree / cols));
    for (int64_t y = ya; y < yb; y += per) {
      const int64_t nr = std::min(per, yb - y);
      m_ctx.builder.emit(Opcode::tensor_copy)
          .tensor("dst", ap(buf, (y * g.in_dil_h + g.pad_t) * pl.wp + xa * g.in_dil_w + g.pad_l,
                            {{0, u(np)}, {g.in_dil_h * pl.wp, u(nr)}, {g.in_dil_w, u(cols)}}))
          .tensor("src", ap(stage, y * g.w + xa, {{0, u(np)}, {g.w, u(nr)}, {1, u(cols)}}))
          .on(Engine::vector);
    }
  }

  // 0/1 matrix of (plane p of the tile, channel c0 + j of a chunk): dst[r, f] with the partition r and free
  // index f being (p, j) (transposed = false) or (j, p): one affine_select per image the tile touches
  // (q0 + p == k C + c0 + j), summed. All on partitions from 0 (starts must be quadrant-aligned).
  void select_matrix(uint32_t dst, int64_t dst_off, uint32_t tmp, uint32_t ones, const TileRef& tr, const Range& cr,
                     bool transposed) {
    const int64_t rows = transposed ? cr.size : tr.np, cols = transposed ? tr.np : cr.size;
    const isa::AccessPattern region = ap(dst, dst_off, {{0, u(rows)}, {1, u(cols)}});
    bool first = true;
    for (int64_t k = tr.q0 / m_s.c; k <= (tr.q0 + tr.np - 1) / m_s.c; ++k) {
      const int64_t lo = std::max(tr.q0, k * m_s.c + cr.begin);
      const int64_t hi = std::min(tr.q0 + tr.np, k * m_s.c + cr.begin + cr.size);
      if (hi <= lo && !first) continue;
      m_ctx.builder.emit(Opcode::affine_select)
          .tensor("dst", first ? region : ap(tmp, 0, {{0, u(rows)}, {1, u(cols)}}))
          .word("pattern", "[[" + std::to_string(transposed ? 1 : -1) + ", " + std::to_string(cols) + "]]")
          .imm("channel_multiplier", transposed ? -1 : 1)
          .imm("offset", double(tr.q0 - k * m_s.c - cr.begin))
          .tensor("on_true_tile", ap(ones, 0, {{0, u(rows)}, {1, u(cols)}}))
          .imm("on_false_value", 0)
          .word("cmp_op", "equal")
          .on(Engine::gpsimd);
      if (!first) {
        m_ctx.builder.emit(Opcode::tensor_tensor)
            .tensor("dst", region)
            .tensor("data1", region)
            .tensor("data2", ap(tmp, 0, {{0, u(rows)}, {1, u(cols)}}))
            .word("op", "add")
            .on(Engine::gpsimd);
      }
      first = false;
    }
  }

  // The grad_weight unit of each tile (in m_tiles order): tiles that touch a common channel chunk share one.
  std::vector<int64_t> grad_weight_units() const {
    std::vector<int64_t> parent(m_chunks.size());
    for (size_t j = 0; j < parent.size(); ++j) parent[j] = int64_t(j);
    auto find = [&](int64_t x) {
      while (parent[size_t(x)] != x) x = parent[size_t(x)] = parent[size_t(parent[size_t(x)])];
      return x;
    };
    std::vector<int64_t> first(m_tiles.size(), -1);
    for (size_t i = 0; i < m_tiles.size(); ++i) {
      for (size_t j = 0; j < m_chunks.size(); ++j) {
        if (!touches(m_tiles[i], m_chunks[j])) continue;
        if (first[i] < 0) first[i] = int64_t(j);
        parent[size_t(find(int64_t(j)))] = find(first[i]);
      }
    }
    std::vector<int64_t> id(m_chunks.size(), -1), out(m_tiles.size());
    int64_t next = 0;
    for (size_t i = 0; i < m_tiles.size(); ++i) {
      const int64_t root = find(first[i]);
      if (id[size_t(root)] < 0) id[size_t(root)] = next++;
      out[i] = id[size_t(root)];
    }
    return out;
  }

  bool touches(const TileRef& tr, const Range& cr) const {
    for (int64_t p = 0; p < tr.np; ++p) {
      const int64_t c = (tr.q0 + p) % m_s.c;
      if (c >= cr.begin && c < cr.begin + cr.size) return true;
    }
    return false;
  }

  // All the weights (and bias), channels on partitions, once.
  void load_all_weights(uint32_t weight, int64_t bias) {
    memset_flat(m_ctx, m_ones_in, m_p, m_p, 1.0);
    for (size_t j = 0; j < m_chunks.size(); ++j) {
      const Range& cr = m_chunks[j];
      const int64_t off = int64_t(j) * (m_kk + 1);
      dma(ap(m_wall, off, {{0, u(cr.size)}, {1, u(m_kk)}}), ap(weight, cr.begin * m_kk, {{m_kk, u(cr.size)}, {1, u(m_kk)}}),
          6);
      if (bias >= 0) {
        dma(ap(m_wall, off + m_kk, {{0, u(cr.size)}, {1, 1}}), ap(uint32_t(bias), cr.begin, {{1, u(cr.size)}, {1, 1}}), 6);
      }
    }
  }

  // The weight rows w[c(q)] (and bias) of the tile's planes, gathered onto their partitions by matmuls with
  // a 0/1 selection (exact), and the diagonals diag(w[:, tap]); kept while consecutive tiles share the
  // channel offset. Returns the slot.
  int64_t weights(const TileRef& tr, bool bias) {
    if (m_w_slot >= 0 && m_w_key == tr.key && m_w_np == tr.np) return m_w_slot;
    m_w_slot = (m_w_slot + 1) % 2;
    m_w_key = tr.key;
    m_w_np = tr.np;
    const uint32_t wc = m_wcol[m_w_slot], np = u(tr.np);
    const int64_t cols = m_kk + (bias ? 1 : 0), bank = m_acc_step++ % kAccBanks;
    std::vector<size_t> used;
    for (size_t j = 0; j < m_chunks.size(); ++j) {
      if (touches(tr, m_chunks[j])) used.push_back(j);
    }
    for (size_t i = 0; i < used.size(); ++i) {
      const Range& cr = m_chunks[used[i]];
      const uint32_t st = m_selt[m_selt_step++ % 2];
      select_matrix(st, 0, m_selt_tmp, m_ones_in, tr, cr, true);
      m_ctx.builder.emit(Opcode::nc_matmul)
          .tensor("dst", ap(m_acc, bank * m_bank, {{0, np}, {1, u(cols)}}))
          .tensor("stationary", ap(st, 0, {{0, u(cr.size)}, {1, np}}))
          .tensor("moving", ap(m_wall, int64_t(used[i]) * (m_kk + 1), {{0, u(cr.size)}, {1, u(cols)}}))
          .word("accumulate", i == 0 ? "false" : "true");
    }
    m_ctx.builder.emit(Opcode::tensor_copy)
        .tensor("dst", ap(wc, 0, {{0, np}, {1, u(cols)}}))
        .tensor("src", ap(m_acc, bank * m_bank, {{0, np}, {1, u(cols)}}))
        .on(Engine::scalar);
    // diag[p, tap, j] = (p == j) ? w[p, tap] : 0.
    m_ctx.builder.emit(Opcode::affine_select)
        .tensor("dst", ap(m_diag[m_w_slot], 0, {{0, np}, {m_p, u(m_kk)}, {1, np}}))
        .word("pattern", "[[0, " + std::to_string(m_kk) + "], [-1, " + std::to_string(tr.np) + "]]")
        .imm("channel_multiplier", 1)
        .imm("offset", 0)
        .tensor("on_true_tile", ap(wc, 0, {{0, np}, {1, u(m_kk)}, {0, np}}))
        .imm("on_false_value", 0)
        .word("cmp_op", "equal")
        .on(Engine::gpsimd);
    m_gpsimd_ns += est_gpsimd(m_kk * tr.np);
    return m_w_slot;
  }

  // out[q] = sum over taps of w[c(q), tap] * view(tap) of the padded buffer: per <= 512-pixel tile, one
  // matmul per tap (diagonal stationary) accumulated in PSUM; evacuated (with the bias) into `outbuf`.
  void conv_tile(const Plane& pl, uint32_t buf, const TileRef& tr, int64_t slot, uint32_t outbuf, bool flip,
                 const int64_t* bias_slot, const std::function<void(size_t, size_t)>& before = nullptr,
                 const TileEngine* plan = nullptr) {
    isa::ProgramBuilder& b = m_ctx.builder;
    const ConvGeometry& g = pl.g;
    const std::vector<std::pair<Range, Range>> px = pixel_tiles(pl);
    const uint32_t np = u(tr.np);
    const bool hybrid = plan != nullptr;
    for (size_t i = 0; i < px.size(); ++i) {
      if (before) before(i, px.size());
      const auto& [rows, cols] = px[i];
      const int64_t n = rows.size * cols.size;
      if (hybrid && plan[i] != TileEngine::pe) {
        vector_tile(pl, buf, tr, rows, cols, outbuf, flip, bias_slot, plan[i] == TileEngine::scalar_gpsimd);
        continue;
      }
      const int64_t bank = m_acc_step++ % kAccBanks;
      const isa::AccessPattern dst = ap(m_acc, bank * m_bank, {{0, np}, {1, u(n)}});
      for (int64_t t = 0; t < m_kk; ++t) {
        const int64_t kh = t / m_s.kw, kw = t % m_s.kw, wt = flip ? m_kk - 1 - t : t;
        const int64_t off = (rows.begin * g.stride_h + kh * g.dilation_h) * pl.wp + cols.begin * g.stride_w +
                            kw * g.dilation_w;
        b.emit(Opcode::nc_matmul)
            .tensor("dst", dst)
            .tensor("stationary", ap(m_diag[slot], wt * m_p, {{0, np}, {1, np}}))
            .tensor("moving", ap(buf, off, {{0, np}, {g.stride_h * pl.wp, u(rows.size)}, {g.stride_w, u(cols.size)}}))
            .word("accumulate", t == 0 ? "false" : "true");
      }
      isa::AccessPattern bias;
      if (bias_slot) bias = ap(m_wcol[*bias_slot], m_kk, {{0, np}, {1, 1}});
      // Hybrid: Scalar is busy with products (an evacuation queued behind them would hold the PE's banks).
      const Engine e = !hybrid && m_evac_step++ % 2 ? Engine::scalar : Engine::vector;
      evacuate(b, ap(outbuf, rows.begin * pl.wo + cols.begin, {{0, np}, {pl.wo, u(rows.size)}, {1, u(cols.size)}}),
               ap(m_acc, bank * m_bank, {{0, np}, {cols.size, u(rows.size)}, {1, u(cols.size)}}),
               bias_slot ? &bias : nullptr, e);
      (e == Engine::vector ? m_vector_ns : m_scalar_ns) += e == Engine::vector ? est_vector(n) : est_scalar(n);
    }
  }

  std::vector<std::pair<Range, Range>> pixel_tiles(const Plane& pl) const {
    std::vector<std::pair<Range, Range>> px;  // (rows, cols) of the output, <= one PSUM bank each
    if (pl.wo <= m_bank) {
      for (const Range& r : tiles(pl.ho, std::max<int64_t>(1, m_bank / pl.wo))) px.push_back({r, {0, pl.wo}});
    } else {
      for (int64_t r = 0; r < pl.ho; ++r) {
        for (const Range& c : tiles(pl.wo, m_bank)) px.push_back({{r, 1}, c});
      }
    }
    return px;
  }

  // The forward's pixel tiles of a plane tile shared between the PE and the other engines: greedily, each
  // to the path that ends the tile's estimated work soonest (the same plan for every plane tile, on any
  // core, so a plane goes through the same instructions wherever it runs). A plane of one pixel tile
  // stays on the PE.
  std::vector<TileEngine> plan_pixel_tiles(const std::vector<std::pair<Range, Range>>& px) const {
    const auto& cfg = m_ctx.config.core;
    const double kk = double(m_kk);
    double pe = 0, v = 0, sc = 0, g = 0;
    std::vector<TileEngine> out;
    for (const auto& [rows, cols] : px) {
      const double n = double(rows.size * cols.size);
      const double c_pe = kk * std::max<double>(cfg.tensor.min_initiation_interval_cycles, n) / cfg.tensor.clock_ghz;
      const double c_s = kk * std::max<double>(cfg.scalar.min_initiation_interval_cycles, n) / cfg.scalar.clock_ghz;
      const double c_g = (kk - 1) * (double(cfg.gpsimd.fixed_overhead_cycles) + n) / cfg.gpsimd.clock_ghz;
      const double c_v = (std::max<double>(cfg.vector.min_initiation_interval_cycles, n) +
                          (kk - 1) * (2 * n + double(cfg.vector.fixed_overhead_cycles))) / cfg.vector.clock_ghz;
      const double evac_v = est_vector(int64_t(n));
      const double f_pe = std::max({pe + c_pe, v + evac_v, sc, g});
      const double f_sg = std::max({pe, v, sc + c_s, g + c_g});
      const double f_v = std::max({pe, v + c_v, sc, g});
      if (f_pe <= f_sg && f_pe <= f_v) {
        pe += c_pe;
        v += evac_v;
        out.push_back(TileEngine::pe);
      } else if (f_sg <= f_v) {
        sc += c_s, g += c_g;
        out.push_back(TileEngine::scalar_gpsimd);
      } else {
        v += c_v;
        out.push_back(TileEngine::vector);
      }
    }
    return out;
  }

  // One pixel tile off the PE: per tap, Scalar multiplies the view by the weight column (an activation's
  // per-partition scale; the first adds the bias) and GpSimd adds it to an fp32 accumulator; or Vector
  // does both (scalar_tensor_tensor). The last tap writes the output tile.
  void vector_tile(const Plane& pl, uint32_t buf, const TileRef& tr, const Range& rows, const Range& cols,
                   uint32_t outbuf, bool flip, const int64_t* bias_slot, bool scalar_gpsimd) {
    isa::ProgramBuilder& b = m_ctx.builder;
    const ConvGeometry& g = pl.g;
    const uint32_t np = u(tr.np), rc = u(rows.size), cc = u(cols.size);
    const uint32_t wc = m_wcol[m_w_slot_of_tile];
    const isa::AccessPattern out =
        ap(outbuf, rows.begin * pl.wo + cols.begin, {{0, np}, {pl.wo, rc}, {1, cc}});
    const uint32_t accb = scalar_gpsimd ? m_accg[m_hyb_step % 2] : m_accv[m_hyb_step % 2];
    ++m_hyb_step;
    const isa::AccessPattern acc = ap(accb, 0, {{0, np}, {cols.size, rc}, {1, cc}});
    for (int64_t t = 0; t < m_kk; ++t) {
      const int64_t kh = t / m_s.kw, kw = t % m_s.kw, wt = flip ? m_kk - 1 - t : t;
      const int64_t off =
          (rows.begin * g.stride_h + kh * g.dilation_h) * pl.wp + cols.begin * g.stride_w + kw * g.dilation_w;
      const isa::AccessPattern view = ap(buf, off, {{0, np}, {g.stride_h * pl.wp, rc}, {g.stride_w, cc}});
      const isa::AccessPattern w = ap(wc, wt, {{0, np}, {1, 1}});
      const isa::AccessPattern& dst = t == m_kk - 1 ? out : acc;
      if (scalar_gpsimd) {
        const isa::AccessPattern prod =
            t == 0 ? dst : ap(m_tmpg[m_tmp_step++ % kGSlots], 0, {{0, np}, {cols.size, rc}, {1, cc}});
        auto inst = b.emit(Opcode::activation);
        inst.tensor("dst", prod).tensor("data", view).word("op", "copy").tensor("scale", w);
        if (t == 0 && bias_slot) inst.tensor("bias", ap(wc, m_kk, {{0, np}, {1, 1}}));
        if (t > 0) {
          b.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", acc).tensor("data2", prod)
              .word("op", "add").on(Engine::gpsimd);
        }
      } else if (t == 0) {
        auto inst = b.emit(Opcode::tensor_scalar);
        inst.tensor("dst", dst).tensor("data", view).word("op0", "multiply").tensor("operand0", w);
        if (bias_slot) inst.word("op1", "add").tensor("operand1", ap(wc, m_kk, {{0, np}, {1, 1}}));
        inst.on(Engine::vector);
      } else {
        b.emit(Opcode::scalar_tensor_tensor).tensor("dst", dst).tensor("data", view).word("op0", "multiply")
            .tensor("operand0", w).word("op1", "add").tensor("operand1", acc);
      }
    }
  }

  void store(uint32_t tensor, const TileRef& tr, uint32_t outbuf, int64_t plane, size_t k) {
    dma(ap(tensor, tr.q0 * plane, {{plane, u(tr.np)}, {1, u(plane)}}), ap(outbuf, 0, {{0, u(tr.np)}, {1, u(plane)}}),
        kStoreQueue + int64_t(k % 2));
  }

  // sel[q, c] = (c(q) == c) per channel chunk of the tile's planes (fp32), kept while the offset repeats.
  int64_t selection(const TileRef& tr) {
    if (m_sel_slot >= 0 && m_sel_key == tr.key && m_sel_np == tr.np) return m_sel_slot;
    m_sel_slot = (m_sel_slot + 1) % 2;
    m_sel_key = tr.key;
    m_sel_np = tr.np;
    for (size_t j = 0; j < m_chunks.size(); ++j) {
      if (touches(tr, m_chunks[j])) select_matrix(m_sel[m_sel_slot], int64_t(j) * m_p, m_seltmp, m_ones, tr, m_chunks[j], false);
    }
    return m_sel_slot;
  }

  double est_vector(int64_t n) const {
    const auto& v = m_ctx.config.core.vector;
    return std::max<double>(v.min_initiation_interval_cycles, double(n)) / v.clock_ghz;
  }
  double est_scalar(int64_t n) const {
    const auto& s = m_ctx.config.core.scalar;
    return std::max<double>(s.min_initiation_interval_cycles, double(n)) / s.clock_ghz;
  }
  double est_gpsimd(int64_t n) const {
    const auto& g = m_ctx.config.core.gpsimd;
    return (double(g.fixed_overhead_cycles) + double(n)) / g.clock_ghz;
  }

  // grad_weight's taps in groups of consecutive kw (one instruction each when the planes are small), each
  // group statically on the GpSimd + Scalar pair or on Vector, balancing the engines' estimated busy
  // time per tile (with the tile's fills, dX evacuations and grad_bias).
  void plan_grad_weight(bool dx, bool bias) {
    const int64_t n = m_fp.ho * m_fp.wo, hw = m_s.h * m_s.w;
    const auto& cfg = m_ctx.config.core;
    const double vclk = cfg.vector.clock_ghz;
    auto fill_ns = [&](const Plane& pl, int64_t elems) {
      const bool fast = m_ds == 2 && pl.g.in_dil_w == 1;
      return std::max<double>(cfg.vector.min_initiation_interval_cycles, double(elems) / (fast ? 4 : 1)) / vclk;
    };
    double g = 0, sc = 0, v = 0;
    if (!m_fp.direct) v += fill_ns(m_fp, hw);
    if (dx) {
      if (!m_bp.direct) v += fill_ns(m_bp, n);
      v += est_vector(hw / 2);
      sc += est_scalar(hw / 2);
    }
    if (bias) v += double(n) / vclk;
    const double readout = double(cfg.scalar.accumulator_readout_cycles) / cfg.scalar.clock_ghz;
    for (int64_t kh = 0; kh < m_s.kh; kh += m_group_rows) {
      const int64_t rows = std::min(m_group_rows, m_s.kh - kh);
      for (int64_t kw0 = 0; kw0 < m_s.kw; kw0 += m_group) {
        const int64_t per_row = std::min(m_group, m_s.kw - kw0), b = rows * per_row;
        // (a) GpSimd product, Scalar accumulators; (b) GpSimd product, Vector reduce; (c) both on Vector.
        const double ga = g + est_gpsimd(b * n), sa = sc + double(b) * (est_scalar(n) + readout);
        const double vb = v + double(b * n) / vclk, vc = v + 3.0 * double(b * n) / vclk;
        const double fa = std::max({ga, sa, v}), fb = std::max({ga, sc, vb}), fc = std::max({g, sc, vc});
        DwGroup grp{kh * m_s.kw + kw0, b, rows, per_row, DwPath::g_s};
        if (fa <= fb && fa <= fc) {
          g = ga, sc = sa;
        } else if (fb <= fc) {
          g = ga, v = vb, grp.path = DwPath::g_v;
        } else {
          v = vc, grp.path = DwPath::v_v;
        }
        (grp.path == DwPath::g_s ? m_any_g : m_any_v) = true;
        m_dw_groups.push_back(grp);
      }
    }
    if (bias) m_any_v = true;
  }

  // Per tap: dY * view(tap) reduced over the free axis into a column of part (Vector) / part_g (GpSimd
  // products, Scalar accumulators); grad_bias: the sum of dY. Then the planes of each channel summed
  // by sel^T @ part (+ sel^T @ part_g: each holds zeros in the other's columns) into PSUM.
  void grad_weight_begin(size_t k) {
    isa::ProgramBuilder& b = m_ctx.builder;
    if (k >= 2) return;  // columns no path writes stay zero
    b.emit(Opcode::memset).tensor("dst", ap(m_part[k % 2], 0, {{0, u(m_p)}, {1, u(m_dw_cols)}})).imm("value", 0)
        .on(Engine::vector);
    b.emit(Opcode::memset).tensor("dst", ap(m_part_g[k % 2], 0, {{0, u(m_p)}, {1, u(kSpread * kGranuleFloats)}}))
        .imm("value", 0).on(Engine::gpsimd);
  }

  void grad_weight_group(size_t k, const TileRef& tr, const DwGroup& grp) {
    isa::ProgramBuilder& b = m_ctx.builder;
    const ConvGeometry& g = m_fp.g;
    const int64_t ho = m_fp.ho, wo = m_fp.wo, n = ho * wo;
    const uint32_t np = u(tr.np), part = m_part[k % 2], part_g = m_part_g[k % 2];
    const uint32_t xbuf = m_xbuf[k % 2], dys = m_dystage[k % 2];
    {
      const int64_t kh = grp.t0 / m_s.kw, kw0 = grp.t0 % m_s.kw;
      const isa::AccessPattern xv =
          ap(xbuf, kh * g.dilation_h * m_fp.wp + kw0 * g.dilation_w,
             {{0, np}, {g.dilation_h * m_fp.wp, u(grp.rows)}, {g.dilation_w, u(grp.per_row)}, {g.stride_h * m_fp.wp, u(ho)},
              {g.stride_w, u(wo)}});
      const isa::AccessPattern dy =
          ap(dys, 0, {{0, np}, {0, u(grp.rows)}, {0, u(grp.per_row)}, {wo, u(ho)}, {1, u(wo)}});
      const std::vector<ApDim> prod_dims{{0, np}, {grp.per_row * n, u(grp.rows)}, {n, u(grp.per_row)}, {wo, u(ho)}, {1, u(wo)}};
      if (grp.path == DwPath::g_s || grp.path == DwPath::g_v) {
        const uint32_t pb = m_prod_g[m_g_step++ % kGSlots];
        const isa::AccessPattern prod = ap(pb, 0, prod_dims);
        b.emit(Opcode::tensor_tensor).tensor("dst", prod)
            .tensor("data1", dy).tensor("data2", xv).word("op", "multiply").on(Engine::gpsimd);
        if (grp.path == DwPath::g_v) {
          b.emit(Opcode::tensor_reduce).tensor("dst", ap(part, grp.t0, {{0, np}, {1, u(grp.taps)}}))
              .word("op", "add").tensor("data", prod).word("axis", "[3, 4]");
          return;
        }
        for (int64_t i = 0; i < grp.taps; ++i) {
          const isa::AccessPattern prod = ap(pb, i * n, {{0, np}, {1, u(n)}});
          const int64_t t = grp.t0 + (i / grp.per_row) * m_s.kw + i % grp.per_row;
          b.emit(Opcode::activation).tensor("dst", prod).tensor("data", prod).word("op", "copy")
              .word("reduce_op", "add")
              .tensor("reduce_res", ap(part_g, (t % kSpread) * kGranuleFloats + t / kSpread, {{0, np}, {1, 1}}));
        }
      } else {
        const isa::AccessPattern prod =
            ap(m_prod_v[m_v_step++ % 2], 0, prod_dims);
        b.emit(Opcode::tensor_tensor).tensor("dst", prod).tensor("data1", dy).tensor("data2", xv)
            .word("op", "multiply").on(Engine::vector);
        b.emit(Opcode::tensor_reduce).tensor("dst", ap(part, grp.t0, {{0, np}, {1, u(grp.taps)}})).word("op", "add")
            .tensor("data", prod).word("axis", "[3, 4]");
      }
    }
  }

  void grad_weight_finish(const TileRef& tr, size_t k, int64_t sel_slot, bool bias) {
    isa::ProgramBuilder& b = m_ctx.builder;
    const int64_t ho = m_fp.ho, wo = m_fp.wo;
    const uint32_t np = u(tr.np), part = m_part[k % 2], part_g = m_part_g[k % 2], dys = m_dystage[k % 2];
    if (bias) {
      b.emit(Opcode::tensor_reduce).tensor("dst", ap(part, m_kk, {{0, np}, {1, 1}})).word("op", "add")
          .tensor("data", ap(dys, 0, {{0, np}, {wo, u(ho)}, {1, u(wo)}})).word("axis", "[1, 2]");
    }
    if (m_dw_started.empty()) m_dw_started.assign(m_chunks.size(), false);
    for (size_t j = 0; j < m_chunks.size(); ++j) {
      const Range& cr = m_chunks[j];
      if (!touches(tr, cr)) continue;
      for (const uint32_t src : {part, part_g}) {
        if ((src == part && !m_any_v) || (src == part_g && !m_any_g)) continue;
        // part_g read in tap order: (t / kSpread, t % kSpread) at (t % kSpread) granule, t / kSpread.
        const isa::AccessPattern moving =
            src == part ? ap(part, 0, {{0, np}, {1, u(m_dw_cols)}})
                        : ap(part_g, 0, {{0, np}, {1, u(m_dw_cols / kSpread)}, {kGranuleFloats, u(kSpread)}});
        b.emit(Opcode::nc_matmul)
            .tensor("dst", ap(m_acc, dw_offset(j), {{0, u(cr.size)}, {1, u(m_dw_cols)}}))
            .tensor("stationary", ap(m_sel[sel_slot], int64_t(j) * m_p, {{0, np}, {1, u(cr.size)}}))
            .tensor("moving", moving)
            .word("accumulate", m_dw_started[j] ? "true" : "false");
        m_dw_started[j] = true;
      }
    }
  }

  int64_t dw_offset(size_t j) const {
    return (kAccBanks + int64_t(j) / m_dw_per_bank) * m_bank + (int64_t(j) % m_dw_per_bank) * m_dw_cols;
  }

  void store_grad_weight(uint32_t grad_weight, int64_t grad_bias) {
    const int64_t cols = m_kk + (grad_bias >= 0 ? 1 : 0);
    for (size_t j = 0; j < m_chunks.size(); ++j) {
      const Range& cr = m_chunks[j];
      const uint32_t cc = u(cr.size), out = m_dwout[j % 2];
      if (m_dw_started.size() <= j || !m_dw_started[j]) continue;  // another core's unit
      evacuate(m_ctx.builder, ap(out, 0, {{0, cc}, {1, u(cols)}}), ap(m_acc, dw_offset(j), {{0, cc}, {1, u(cols)}}),
               nullptr, j % 2 ? Engine::scalar : Engine::vector);
      dma(ap(grad_weight, cr.begin * m_kk, {{m_kk, cc}, {1, u(m_kk)}}), ap(out, 0, {{0, cc}, {1, u(m_kk)}}),
          kStoreQueue);
      if (grad_bias >= 0) {
        dma(ap(uint32_t(grad_bias), cr.begin, {{1, cc}, {1, 1}}), ap(out, m_kk, {{0, cc}, {1, 1}}), kStoreQueue + 1);
      }
    }
  }

  const KernelContext& m_ctx;
  const Conv2dSpec m_s;
  int64_t m_p = 128, m_kk = 1, m_ds = 2, m_ods = 4, m_bank = 512, m_dw_cols = 1, m_dw_per_bank = 1;
  Plane m_fp, m_bp;
  std::vector<Range> m_chunks;
  std::vector<TileRef> m_tiles;
  uint32_t m_wcol[2] = {0, 0}, m_diag[2] = {0, 0}, m_xbuf[2] = {0, 0}, m_xstage[2] = {0, 0}, m_out[2] = {0, 0};
  uint32_t m_dystage[2] = {0, 0}, m_dybuf[2] = {0, 0}, m_prod_g[kGSlots] = {}, m_prod_v[2] = {0, 0}, m_part_g[2] = {0, 0};
  std::vector<DwGroup> m_dw_groups;
  bool m_any_g = false, m_any_v = false;
  int64_t m_group = 1, m_group_rows = 1;  // taps of a kernel row, kernel rows per grad_weight instruction
  uint32_t m_part[2] = {0, 0}, m_sel[2] = {0, 0}, m_dwout[2] = {0, 0}, m_ones = 0, m_seltmp = 0, m_acc = 0;
  uint32_t m_selt[2] = {0, 0}, m_wall = 0, m_ones_in = 0, m_selt_tmp = 0;
  int64_t m_selt_step = 0, m_w_slot_of_tile = 0, m_hyb_step = 0, m_tmp_step = 0;
  uint32_t m_accg[2] = {0, 0}, m_accv[2] = {0, 0}, m_tmpg[kGSlots] = {};
  int64_t m_w_slot = -1, m_w_key = -1, m_w_np = -1, m_sel_slot = -1, m_sel_key = -1, m_sel_np = -1;
  int64_t m_acc_step = 0, m_evac_step = 0, m_g_step = 0, m_v_step = 0;
  std::vector<bool> m_dw_started;
  // Estimated busy time (ns) of each engine so far: balances grad_weight's taps.
  double m_vector_ns = 0, m_scalar_ns = 0, m_gpsimd_ns = 0;
};

}  // namespace

bool depthwise_applies(const Conv2dSpec& s, const KernelContext& ctx, bool backward) {
  if (s.groups <= 1 || s.groups != s.c || s.o != s.c) return false;
  if (s.pad_h < 0 || s.pad_w < 0 || s.stride_h <= 0 || s.stride_w <= 0 || s.dilation_h <= 0 || s.dilation_w <= 0) {
    return false;
  }
  if (s.out_h() <= 0 || s.out_w() <= 0) return false;
  if (s.kh * s.kw * ctx.partitions() > kMaxEngineFree) return false;
  DwBuilder b(ctx, s);
  const int64_t need = b.bytes(backward);
  return need >= 0 && need <= detail::sbuf_free_bytes(ctx);
}

void build_depthwise_forward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dTensors& tensors) {
  DwBuilder(ctx, spec).forward(tensors);
}

void build_depthwise_backward(const KernelContext& ctx, const Conv2dSpec& spec, const Conv2dBackwardTensors& tensors) {
  DwBuilder(ctx, spec).backward(tensors);
}

}  // namespace trnsim::kernels::conv_detail
