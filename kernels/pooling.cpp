// Max / average pooling and their backwards (see pooling.h for the layout and the engine split).
#include "kernels/pooling.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "isa/view.h"
#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

namespace {

using isa::ApDim;
using isa::Opcode;

enum class Mode { max_fwd, avg_fwd, max_bwd, avg_bwd };

constexpr int kParts = 2;                  // part 0 on Vector, part 1 on GpSimd
constexpr int64_t kMaxEngineFree = 32768;  // elements per partition of one compute instruction (limit 65536)
constexpr int64_t kMinBandOutputs = 2048;  // outputs per partition of a band: amortises the per-instruction overhead
constexpr int64_t kGranuleBytes = 256;     // the dependency granule (see tile_pipeline.h)
constexpr int64_t kLoadQueue = 0, kStoreQueue = 1;

const Engine kEngine[kParts] = {Engine::vector, Engine::gpsimd};

bool is_max(Mode m) { return m == Mode::max_fwd || m == Mode::max_bwd; }
bool is_backward(Mode m) { return m == Mode::max_bwd || m == Mode::avg_bwd; }

// Size-1 dims get stride 0 so a large unused stride does not trip the 16-bit stride field.
isa::AccessPattern raw(const KernelContext& ctx, uint32_t alloc, int64_t offset, std::vector<ApDim> d) {
  for (size_t i = 1; i < d.size(); ++i) {
    if (d[i].size == 1) d[i].stride = 0;
  }
  return isa::raw_access_pattern(ctx.builder.program(), alloc, offset, d);
}

std::string pattern_text(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::string s = "[";
  for (size_t i = 0; i < pairs.size(); ++i) {
    s += (i ? ", [" : "[") + std::to_string(pairs[i].first) + ", " + std::to_string(pairs[i].second) + "]";
  }
  return s + "]";
}

class PoolBuilder {
 public:
  PoolBuilder(const KernelContext& ctx, const PoolSpec& spec, Mode mode) : m_ctx(ctx), m_s(spec), m_mode(mode) {}

  // in0: input / grad_output; in1: indices (max backward); out0: output / grad_input; out1: indices.
  void build(uint32_t in0, int64_t in1, uint32_t out0, int64_t out1) {
    m_in0 = in0, m_in1 = in1, m_out0 = out0, m_out1 = out1;
    plan();
    allocate();
    if (is_backward(m_mode)) {
      emit_backward();
    } else {
      emit_forward();
    }
  }

 private:
  struct Item {
    Range planes, rows;  // plane tile; band of output rows
  };

  const KernelContext& m_ctx;
  PoolSpec m_s;
  Mode m_mode;
  uint32_t m_in0 = 0, m_out0 = 0;
  int64_t m_in1 = -1, m_out1 = -1;
  int64_t m_ho = 0, m_wo = 0, m_hp = 0, m_wp = 0, m_rb = 0, m_slots = 2;
  int64_t m_split = 0;  // output rows of a full band on the Vector engine (the rest on GpSimd)
  double m_div = 0;     // avg: the divisor when every window has the same one, else 0
  std::vector<Item> m_items;
  // Per slot: the input band (forward) / grad_output and indices (backward).
  std::vector<uint32_t> m_in, m_idx_in;
  // Per slot and part. max forward: a running max M (dtype), b offset code I, c (and f, GpSimd's part)
  // masks, d int32 indices, e base; avg forward: a fp32 sum, b output (dtype), c divisors; backward:
  // a code (max) / grad_output over the divisor (avg), b scratch, c the fp32 gradient band G.
  struct PartBuffers {
    uint32_t a = 0, b = 0, c = 0, d = 0, e = 0, f = 0;
  };
  std::vector<std::array<PartBuffers, kParts>> m_part;
  // avg with a per-output divisor: the window heights of the output rows [P, Ho] and widths of the output
  // columns [P, Wo] (the divisor of (oh, ow) is their product); max backward: T[r, c] = r s_h W + c s_w,
  // the base of a band's part less a per-part constant.
  uint32_t m_hc = 0, m_wc = 0, m_base = 0;
  // Backward: bands of output rows (the same for every plane tile, whatever the cores, so the
  // accumulation order is too). Each band's G covers padded rows [r0 s_h, r0 s_h + g_rows): part V's
  // [0, v_end), part G's [g_begin, g_rows); rows [rows s_h, g_rows) of a band that is not the last
  // (windows overlapping the next band's) are carried into the next band's G.
  struct Band {
    int64_t r0 = 0, rows = 0, sv = 0, g_rows = 0, top_end = 0, g_begin = 0, v_end = 0;
    bool last = false;
  };
  std::vector<Band> m_bands;
  int64_t m_overlap = 0;  // rows a band carries into the next
  std::array<int64_t, kParts> m_out_rows{}, m_g_alloc{};

  int64_t dsize() const { return dtype_size_bytes(m_s.dtype); }
  int64_t rows_in(int64_t rb) const { return (rb - 1) * m_s.stride_h + m_s.dilation_h * (m_s.kh - 1) + 1; }
  double pad_value() const { return is_max(m_mode) ? -std::numeric_limits<double>::infinity() : 0.0; }
  int64_t code(int64_t kh, int64_t kw) const { return kh * m_s.dilation_h * m_s.w + kw * m_s.dilation_w; }

  // Estimated busy time (ns) of one kernel offset over `n` outputs per partition on part `e`.
  double est(int e, int64_t n) const {
    if (n <= 0) return 0;
    const CoreConfig& core = m_ctx.config.core;
    const int ops_v[] = {3, 1, 2, 1}, ops_g[] = {3, 1, 3, 1};  // per offset, by Mode (max: Scalar scales G's masks)
    const int mi = int(m_mode);
    if (e == 0) {
      return ops_v[mi] * std::max<double>(core.vector.min_initiation_interval_cycles, 2.0 * double(n)) /
             core.vector.clock_ghz;
    }
    return ops_g[mi] * (double(core.gpsimd.fixed_overhead_cycles) + double(n)) / core.gpsimd.clock_ghz;
  }
  // Vector rows of a band of `rows` output rows: the split that finishes both engines soonest.
  int64_t best_split(int64_t rows) const {
    int64_t best = 0;
    double best_t = std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r <= rows; ++r) {
      const double t = std::max(est(0, r * m_wo), est(1, (rows - r) * m_wo));
      if (t < best_t) best_t = t, best = r;
    }
    return best;
  }
  // The split of a (possibly short) band within the buffers sized for a full band.
  int64_t split_of(int64_t rows) const {
    int64_t sv = std::min(best_split(rows), m_split);
    if (rows - sv > m_rb - m_split) sv = rows - (m_rb - m_split);
    return std::max<int64_t>(0, sv);
  }

  // An SBUF buffer of whole dependency granules (so buffers of different engines never share one).
  uint32_t alloc(const std::string& name, DType dtype, int64_t elements) {
    detail::align_sbuf_to_granule(m_ctx, name + "_align");
    const int64_t per = kGranuleBytes / dtype_size_bytes(dtype);
    const int64_t padded = std::max<int64_t>(1, ceil_div(elements, per) * per);
    return m_ctx.builder.sbuf(m_ctx.name(name), dtype, {m_ctx.partitions(), uint32_t(padded)});
  }
  static int64_t granules(int64_t bytes) { return ceil_div(bytes, kGranuleBytes) * kGranuleBytes + kGranuleBytes; }

  void plan();
  void allocate();
  void emit_forward();
  void emit_backward();

  void fill(Engine engine, uint32_t buffer, int64_t np, int64_t offset, int64_t rows, int64_t row_stride,
              int64_t cols, double value) {
    if (rows <= 0 || cols <= 0) return;
    const int64_t per = std::max<int64_t>(1, std::min(rows, kMaxEngineFree / std::max<int64_t>(1, cols)));
    if (cols > kMaxEngineFree) throw KernelUnsupported("pooling: rows too wide");
    for (int64_t r = 0; r < rows; r += per) {
      const int64_t nr = std::min(per, rows - r);
      m_ctx.builder.emit(Opcode::memset)
          .tensor("dst", raw(m_ctx, buffer, offset + r * row_stride, {{0, uint32_t(np)}, {row_stride, uint32_t(nr)},
                                                                     {1, uint32_t(cols)}}))
          .imm("value", value)
          .on(engine);
    }
  }
  isa::AccessPattern flat2(uint32_t buffer, int64_t np, int64_t offset, int64_t rows, int64_t cols) const {
    return raw(m_ctx, buffer, offset, {{0, uint32_t(np)}, {cols, uint32_t(rows)}, {1, uint32_t(cols)}});
  }
  void tt(Engine e, const isa::AccessPattern& dst, const isa::AccessPattern& a, const isa::AccessPattern& b,
          const char* op) {
    m_ctx.builder.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", a).tensor("data2", b).word("op", op).on(e);
  }
  void ts(Engine e, const isa::AccessPattern& dst, const isa::AccessPattern& a, const char* op0, double v0,
          const char* op1 = nullptr, double v1 = 0) {
    auto inst = m_ctx.builder.emit(Opcode::tensor_scalar);
    inst.tensor("dst", dst).tensor("data", a).word("op0", op0).imm("operand0", v0);
    if (op1) inst.word("op1", op1).imm("operand1", v1);
    inst.on(e);
  }
  void iota(uint32_t buffer, int64_t np, int64_t rows, int64_t cols, int64_t row_step, int64_t col_step,
            int64_t offset) {
    m_ctx.builder.emit(Opcode::iota)
        .tensor("dst", flat2(buffer, np, 0, rows, cols))
        .word("pattern", pattern_text({{row_step, rows}, {col_step, cols}}))
        .imm("offset", double(offset))
        .imm("channel_multiplier", 0)
        .on(Engine::gpsimd);
  }
  // avg: the window heights per output row and widths per output column into m_hc / m_wc (torch:
  // min(start + K, size + pad) - start with the padding counted, else min(start + K, size) - max(start, 0)).
  void window_counts() {
    const PoolSpec& s = m_s;
    const int64_t p = m_ctx.partitions();
    const bool inc = s.count_include_pad;
    const uint32_t tmp = alloc("pool_count_tmp", DType::fp32, std::max(m_ho, m_wo));
    struct Axis {
      uint32_t dst;
      int64_t n, stride, pad, k, size;
    };
    for (const Axis& a : {Axis{m_hc, m_ho, s.stride_h, s.pad_h, s.kh, s.h}, Axis{m_wc, m_wo, s.stride_w, s.pad_w, s.kw, s.w}}) {
      const isa::AccessPattern start = flat2(tmp, p, 0, 1, a.n), end = flat2(a.dst, p, 0, 1, a.n);
      m_ctx.builder.emit(Opcode::iota)
          .tensor("dst", start)
          .word("pattern", pattern_text({{a.stride, a.n}}))
          .imm("offset", double(-a.pad))
          .imm("channel_multiplier", 0)
          .on(Engine::gpsimd);
      ts(Engine::vector, end, start, "add", double(a.k), "minimum", double(inc ? a.size + a.pad : a.size));
      if (!inc) ts(Engine::vector, start, start, "maximum", 0.0);
      tt(Engine::vector, end, end, start, "subtract");
    }
  }
  // dst = the divisors of output rows [r0, r0 + rows), all columns.
  void divisors(Engine e, const isa::AccessPattern& dst, int64_t np, int64_t r0, int64_t rows) {
    tt(e, dst, raw(m_ctx, m_hc, r0, {{0, uint32_t(np)}, {1, uint32_t(rows)}, {0, uint32_t(m_wo)}}),
       raw(m_ctx, m_wc, 0, {{0, uint32_t(np)}, {0, uint32_t(rows)}, {1, uint32_t(m_wo)}}), "multiply");
  }
};

void PoolBuilder::plan() {
  const PoolSpec& s = m_s;
  const int64_t p = m_ctx.partitions();
  m_ho = s.out_h();
  m_wo = s.out_w();
  m_hp = std::max(s.h + 2 * s.pad_h, rows_in(m_ho));
  m_wp = std::max(s.w + 2 * s.pad_w, (m_wo - 1) * s.stride_w + s.dilation_w * (s.kw - 1) + 1);
  if (s.stride_h * m_wp > isa::kMaxApDimStride || s.stride_w > isa::kMaxApDimStride) {
    throw KernelUnsupported("pooling: rows too wide for the access-pattern strides");
  }
  if (m_wo > isa::kMaxApDimSize || m_wp > kMaxEngineFree) throw KernelUnsupported("pooling: rows too wide");
  if (!is_max(m_mode)) {
    const bool full_h = (m_ho - 1) * s.stride_h - s.pad_h + s.kh <= s.h + s.pad_h;
    const bool full_w = (m_wo - 1) * s.stride_w - s.pad_w + s.kw <= s.w + s.pad_w;
    if (s.divisor_override > 0) {
      m_div = double(s.divisor_override);
    } else if (full_h && full_w && (s.count_include_pad || (s.pad_h == 0 && s.pad_w == 0))) {
      m_div = double(s.kh * s.kw);
    }
  }
  const int64_t planes = s.n * s.c;
  const std::vector<Range> plane_tiles = tiles(planes, p);
  const int64_t avail = detail::sbuf_free_bytes(m_ctx);
  const int64_t ds = dsize();

  if (!is_backward(m_mode)) {
    // Per slot: the padded input band + per output (both parts): max M, I, mask, idx, base; avg S, out, 3 scratch.
    const int64_t per_out = is_max(m_mode) ? ds + 4 + 4 + 4 + 4 + 4 : 4 + ds + 4;
    auto bytes = [&](int64_t rb, int64_t slots) {
      return slots * (granules(rows_in(rb) * m_wp * ds) + rb * m_wo * per_out + 12 * kGranuleBytes) +
             3 * granules(std::max(m_ho, m_wo) * 4);  // window counts (avg)
    };
    m_slots = 3;
    int64_t rb_fit = std::min(m_ho, std::max<int64_t>(1, kMaxEngineFree / m_wo));
    while (rb_fit > 1 && bytes(rb_fit, m_slots) > avail) --rb_fit;
    if (bytes(rb_fit, m_slots) > avail) {
      m_slots = 2;
      if (bytes(rb_fit, m_slots) > avail) throw KernelUnsupported("pooling: one output row does not fit in SBUF");
    }
    // Enough bands for two per core where the planes alone do not give that, but not below
    // kMinBandOutputs per band (instruction overheads).
    int64_t nb = ceil_div(2 * int64_t(m_ctx.cores), int64_t(plane_tiles.size()));
    nb = std::min(nb, std::max<int64_t>(1, m_ho * m_wo / kMinBandOutputs));
    nb = std::max(nb, ceil_div(m_ho, rb_fit));
    m_rb = ceil_div(m_ho, nb);
    m_split = best_split(m_rb);
    std::vector<Item> all;
    for (const Range& t : plane_tiles) {
      for (const Range& r : tiles(m_ho, m_rb)) all.push_back({t, r});
    }
    m_items = my_share(m_ctx, all);
    return;
  }
  // Backward: bands of output rows, as few as fit (whole planes when they do); each core whole plane
  // tiles (a band's carry feeds the next band of the same tile).
  const bool mx = is_max(m_mode);
  m_overlap = std::max<int64_t>(0, s.dilation_h * (s.kh - 1) + 1 - s.stride_h);
  auto make_bands = [&](int64_t rb) {
    std::vector<Band> bands;
    for (const Range& r : tiles(m_ho, rb)) {
      Band b;
      b.r0 = r.begin, b.rows = r.size, b.last = r.begin + r.size == m_ho;
      b.sv = best_split(b.rows);
      const int64_t sg = b.rows - b.sv;
      b.g_rows = b.last ? m_hp - b.r0 * s.stride_h : b.rows * s.stride_h + m_overlap;
      b.top_end = b.sv > 0 ? rows_in(b.sv) : 0;
      b.g_begin = b.sv * s.stride_h;
      b.v_end = sg == 0 ? b.g_rows : std::max(b.top_end, b.g_begin);
      bands.push_back(b);
    }
    return bands;
  };
  auto sizes = [&](const std::vector<Band>& bands) {
    std::array<int64_t, kParts> out{}, g{};
    for (const Band& b : bands) {
      if (b.sv > 0) out[0] = std::max(out[0], b.sv), g[0] = std::max(g[0], b.v_end);
      if (b.rows - b.sv > 0) out[1] = std::max(out[1], b.rows - b.sv), g[1] = std::max(g[1], b.g_rows - b.g_begin);
    }
    return std::array<std::array<int64_t, kParts>, 2>{out, g};
  };
  auto bytes = [&](int64_t rb, int64_t slots) {
    const auto z = sizes(make_bands(rb));
    int64_t per_slot = granules(rb * m_wo * ds) + (mx ? granules(rb * m_wo * 4) : 0);  // grad_output, indices
    for (int e = 0; e < kParts; ++e) {
      per_slot += 2 * granules(z[0][size_t(e)] * m_wo * 4) + granules(z[1][size_t(e)] * m_wp * 4);  // code, tmp, G
    }
    const int64_t consts = granules(std::max(z[0][0], z[0][1]) * m_wo * 4) + granules((m_ho + m_wo) * 4) * 2;
    return slots * per_slot + consts + 4 * kGranuleBytes;
  };
  const int64_t rb_max = std::min(m_ho, std::max<int64_t>(1, kMaxEngineFree / m_wo));
  auto largest = [&](int64_t slots) {
    int64_t rb = rb_max;
    while (rb > 1 && bytes(rb, slots) > avail) rb = std::min(rb - 1, ceil_div(m_ho, ceil_div(m_ho, rb) + 1));
    return bytes(rb, slots) <= avail ? rb : 0;
  };
  int64_t rb = largest(2);
  m_slots = 2;
  const int64_t rb_one = largest(1);
  if (rb == 0 || (rb < rb_one && rb * m_wo < kMinBandOutputs)) rb = rb_one, m_slots = 1;
  if (rb == 0) throw KernelUnsupported("pooling backward: one output row does not fit in SBUF");
  m_rb = ceil_div(m_ho, ceil_div(m_ho, rb));  // even bands
  m_bands = make_bands(m_rb);
  const auto z = sizes(m_bands);
  m_out_rows = z[0];
  m_g_alloc = z[1];
  std::vector<Item> all;
  for (const Range& t : plane_tiles) all.push_back({t, {0, m_ho}});
  m_items = my_share(m_ctx, all);
}

void PoolBuilder::allocate() {
  const DType dt = m_s.dtype;
  const bool mx = is_max(m_mode);
  m_part.resize(size_t(m_slots));
  const int64_t rows[kParts] = {m_split, m_rb - m_split};  // forward
  for (int64_t k = 0; k < m_slots; ++k) {
    const std::string sl = std::to_string(k);
    if (!is_backward(m_mode)) {
      m_in.push_back(alloc("pool_in" + sl, dt, rows_in(m_rb) * m_wp));
      for (int e = 0; e < kParts; ++e) {
        const int64_t n = std::max<int64_t>(1, rows[e] * m_wo);
        const std::string nm = "pool" + sl + "_" + std::to_string(e) + "_";
        PartBuffers& b = m_part[size_t(k)][size_t(e)];
        if (mx) {
          b.a = alloc(nm + "max", dt, n);
          b.b = alloc(nm + "code", DType::fp32, n);
          b.c = alloc(nm + "mask", DType::fp32, n);
          b.d = alloc(nm + "idx", DType::int32, n);
          b.e = alloc(nm + "base", DType::fp32, n);
          if (e == 1) b.f = alloc(nm + "mask2", DType::fp32, n);
        } else {
          b.a = alloc(nm + "sum", DType::fp32, n);
          b.b = alloc(nm + "out", dt, n);
          b.c = alloc(nm + "div", DType::fp32, n);
        }
      }
    } else {
      m_in.push_back(alloc("pool_go" + sl, dt, m_rb * m_wo));
      if (mx) m_idx_in.push_back(alloc("pool_idx" + sl, DType::int32, m_rb * m_wo));
      for (int e = 0; e < kParts; ++e) {
        const int64_t n = std::max<int64_t>(1, m_out_rows[size_t(e)] * m_wo);
        const std::string nm = "pool" + sl + "_" + std::to_string(e) + "_";
        PartBuffers& b = m_part[size_t(k)][size_t(e)];
        b.a = alloc(nm + (mx ? "code" : "gs"), DType::fp32, n);
        b.b = alloc(nm + "tmp", DType::fp32, n);
        b.c = alloc(nm + "grad", DType::fp32, std::max<int64_t>(1, m_g_alloc[size_t(e)] * m_wp));
      }
    }
  }
  if (!mx && m_div == 0) {
    m_hc = alloc("pool_hcount", DType::fp32, m_ho);
    m_wc = alloc("pool_wcount", DType::fp32, m_wo);
    window_counts();
  }
  if (mx && is_backward(m_mode)) {
    const int64_t rows = std::max<int64_t>(1, std::max(m_out_rows[0], m_out_rows[1]));
    m_base = alloc("pool_base", DType::fp32, rows * m_wo);
    iota(m_base, m_ctx.partitions(), rows, m_wo, m_s.stride_h * m_s.w, m_s.stride_w, 0);
  }
}

void PoolBuilder::emit_forward() {
  const PoolSpec& s = m_s;
  const bool mx = is_max(m_mode);
  const int64_t plane = s.h * s.w, out_plane = m_ho * m_wo;
  const int64_t rin_max = rows_in(m_rb);
  // Left / right border columns, once per buffer (the loads never write them).
  for (int64_t k = 0; k < m_slots; ++k) {
    const int64_t p = m_ctx.partitions();
    fill(Engine::gpsimd, m_in[size_t(k)], p, 0, rin_max, m_wp, s.pad_w, pad_value());
    fill(Engine::gpsimd, m_in[size_t(k)], p, s.pad_w + s.w, rin_max, m_wp, m_wp - s.pad_w - s.w, pad_value());
  }
  auto load = [&](size_t i) {
    const Item& it = m_items[i];
    const uint32_t buf = m_in[i % size_t(m_slots)];
    const int64_t np = it.planes.size, pr0 = it.rows.begin * s.stride_h, rin = rows_in(it.rows.size);
    const int64_t a = std::clamp(s.pad_h - pr0, int64_t(0), rin);
    const int64_t b = std::clamp(s.pad_h + s.h - pr0, a, rin);
    fill(Engine::gpsimd, buf, np, 0, a, m_wp, m_wp, pad_value());
    fill(Engine::gpsimd, buf, np, b * m_wp, rin - b, m_wp, m_wp, pad_value());
    if (b > a) {
      detail::dma(m_ctx,
                  raw(m_ctx, buf, a * m_wp + s.pad_w, {{0, uint32_t(np)}, {m_wp, uint32_t(b - a)}, {1, uint32_t(s.w)}}),
                  raw(m_ctx, m_in0, it.planes.begin * plane + (pr0 + a - s.pad_h) * s.w,
                      {{plane, uint32_t(np)}, {s.w, uint32_t(b - a)}, {1, uint32_t(s.w)}}),
                  kLoadQueue);
    }
  };
  auto body = [&](size_t i) {
    const Item& it = m_items[i];
    const size_t slot = i % size_t(m_slots);
    const uint32_t buf = m_in[slot];
    const int64_t np = it.planes.size;
    const int64_t sv = split_of(it.rows.size);
    const int64_t part_rows[kParts] = {sv, it.rows.size - sv};
    for (int e = 0; e < kParts; ++e) {
      const int64_t re = part_rows[e];
      if (re <= 0) continue;
      const int64_t row0 = e == 0 ? 0 : sv;  // within the band
      const Engine eng = kEngine[e];
      const PartBuffers& pb = m_part[slot][size_t(e)];
      auto f = [&](uint32_t b) { return flat2(b, np, 0, re, m_wo); };
      auto view = [&](int64_t kh, int64_t kw) {
        return raw(m_ctx, buf, (row0 * s.stride_h + kh * s.dilation_h) * m_wp + kw * s.dilation_w,
                   {{0, uint32_t(np)}, {s.stride_h * m_wp, uint32_t(re)}, {s.stride_w, uint32_t(m_wo)}});
      };
      const int64_t out_off = it.planes.begin * out_plane + (it.rows.begin + row0) * m_wo;
      const std::vector<ApDim> out_dims{{out_plane, uint32_t(np)}, {1, uint32_t(re * m_wo)}};
      if (mx) {
        // base = (oh s_h - p_h) W + ow s_w - p_w for this part's output rows.
        iota(pb.e, np, re, m_wo, s.stride_h * s.w, s.stride_w,
             ((it.rows.begin + row0) * s.stride_h - s.pad_h) * s.w - s.pad_w);
        m_ctx.builder.emit(Opcode::tensor_copy).tensor("dst", f(pb.a)).tensor("src", view(0, 0)).on(eng);
        m_ctx.builder.emit(Opcode::memset).tensor("dst", f(pb.b)).imm("value", 0).on(eng);
        // GpSimd's part: the Scalar engine scales its masks (mask * g), two masks in turn so that
        // GpSimd's next compare and max overlap the scaling and it takes max(I, mask * g) one step late.
        int64_t j = 0;
        for (int64_t kh = 0; kh < s.kh; ++kh) {
          for (int64_t kw = 0; kw < s.kw; ++kw) {
            if (kh == 0 && kw == 0) continue;
            ++j;
            const double g = double(code(kh, kw));
            const uint32_t mask = eng == Engine::vector || j % 2 ? pb.c : pb.f;
            tt(eng, f(mask), view(kh, kw), f(pb.a), "greater");
            tt(eng, f(pb.a), f(pb.a), view(kh, kw), "maximum");
            if (eng == Engine::vector) {
              m_ctx.builder.emit(Opcode::scalar_tensor_tensor)
                  .tensor("dst", f(pb.b)).tensor("data", f(mask)).word("op0", "multiply").imm("operand0", g)
                  .word("op1", "maximum").tensor("operand1", f(pb.b));
            } else {
              m_ctx.builder.emit(Opcode::activation)
                  .tensor("dst", f(mask)).word("op", "copy").tensor("data", f(mask)).imm("scale", g)
                  .on(Engine::scalar);
              if (j > 1) tt(eng, f(pb.b), f(pb.b), f(j % 2 ? pb.f : pb.c), "maximum");
            }
          }
        }
        if (eng != Engine::vector && j > 0) tt(eng, f(pb.b), f(pb.b), f(j % 2 ? pb.c : pb.f), "maximum");
        tt(eng, f(pb.d), f(pb.b), f(pb.e), "add");
        detail::dma(m_ctx, raw(m_ctx, m_out0, out_off, out_dims), raw(m_ctx, pb.a, 0, {{0, uint32_t(np)}, {1, uint32_t(re * m_wo)}}),
                    kStoreQueue);
        detail::dma(m_ctx, raw(m_ctx, uint32_t(m_out1), out_off, out_dims),
                    raw(m_ctx, pb.d, 0, {{0, uint32_t(np)}, {1, uint32_t(re * m_wo)}}), kStoreQueue);
      } else {
        m_ctx.builder.emit(Opcode::tensor_copy).tensor("dst", f(pb.a)).tensor("src", view(0, 0)).on(eng);
        for (int64_t kh = 0; kh < s.kh; ++kh) {
          for (int64_t kw = 0; kw < s.kw; ++kw) {
            if (kh == 0 && kw == 0) continue;
            tt(eng, f(pb.a), f(pb.a), view(kh, kw), "add");
          }
        }
        if (m_div > 0) {
          ts(eng, f(pb.b), f(pb.a), "divide", m_div);
        } else {
          divisors(eng, f(pb.c), np, it.rows.begin + row0, re);
          tt(eng, f(pb.b), f(pb.a), f(pb.c), "divide");
        }
        detail::dma(m_ctx, raw(m_ctx, m_out0, out_off, out_dims), raw(m_ctx, pb.b, 0, {{0, uint32_t(np)}, {1, uint32_t(re * m_wo)}}),
                    kStoreQueue);
      }
    }
  };
  // Loads one item ahead: with three slots the slot a load refills was last read two items ago.
  detail::pipelined(m_items.size(), 1, load, body);
}

void PoolBuilder::emit_backward() {
  const PoolSpec& s = m_s;
  const bool mx = is_max(m_mode);
  const int64_t plane = s.h * s.w, out_plane = m_ho * m_wo;
  // Steps: (plane tile, band) in order; a band's carry goes to the next step of the same tile.
  struct Step {
    size_t item, band;
  };
  std::vector<Step> steps;
  for (size_t i = 0; i < m_items.size(); ++i) {
    for (size_t b = 0; b < m_bands.size(); ++b) steps.push_back({i, b});
  }
  auto load = [&](size_t k) {
    const Item& it = m_items[steps[k].item];
    const Band& b = m_bands[steps[k].band];
    const size_t slot = k % size_t(m_slots);
    const int64_t np = it.planes.size;
    const int64_t off = it.planes.begin * out_plane + b.r0 * m_wo;
    const std::vector<ApDim> src{{out_plane, uint32_t(np)}, {1, uint32_t(b.rows * m_wo)}};
    detail::dma(m_ctx, flat2(m_in[slot], np, 0, 1, b.rows * m_wo), raw(m_ctx, m_in0, off, src), kLoadQueue);
    if (mx) {
      detail::dma(m_ctx, flat2(m_idx_in[slot], np, 0, 1, b.rows * m_wo), raw(m_ctx, uint32_t(m_in1), off, src),
                  kLoadQueue);
    }
  };
  auto body = [&](size_t k) {
    const Item& it = m_items[steps[k].item];
    const Band& b = m_bands[steps[k].band];
    const size_t slot = k % size_t(m_slots);
    const int64_t np = it.planes.size;
    const int64_t part_rows[kParts] = {b.sv, b.rows - b.sv};
    const int64_t g_first[kParts] = {0, b.g_begin};  // first band-relative padded row of each part's G
    const int64_t g_count[kParts] = {b.v_end, b.g_rows - b.g_begin};
    // Rows [0, carried) of this band's G came from the previous band (see below).
    const int64_t carried = steps[k].band > 0 ? m_overlap : 0;
    const int receiver = b.sv > 0 ? 0 : 1;
    for (int e = 0; e < kParts; ++e) {
      const int64_t re = part_rows[e];
      if (re <= 0) continue;
      const int64_t row0 = e == 0 ? 0 : b.sv;
      const Engine eng = kEngine[e];
      const PartBuffers& pb = m_part[slot][size_t(e)];
      auto f = [&](uint32_t buf) { return flat2(buf, np, 0, re, m_wo); };
      const isa::AccessPattern go = flat2(m_in[slot], np, row0 * m_wo, re, m_wo);
      const int64_t skip = e == receiver ? carried : 0;
      fill(eng, pb.c, np, skip * m_wp, g_count[e] - skip, m_wp, m_wp, 0.0);
      auto view = [&](int64_t kh, int64_t kw) {
        return raw(m_ctx, pb.c, (row0 * s.stride_h - g_first[e] + kh * s.dilation_h) * m_wp + kw * s.dilation_w,
                   {{0, uint32_t(np)}, {s.stride_h * m_wp, uint32_t(re)}, {s.stride_w, uint32_t(m_wo)}});
      };
      if (mx) {
        // code = index - base, base = T + ((r0 + row0) s_h - p_h) W - p_w.
        const double c = double(((b.r0 + row0) * s.stride_h - s.pad_h) * s.w - s.pad_w);
        const isa::AccessPattern idx = flat2(m_idx_in[slot], np, row0 * m_wo, re, m_wo);
        if (eng == Engine::vector) {
          m_ctx.builder.emit(Opcode::scalar_tensor_tensor)
              .tensor("dst", f(pb.a)).tensor("data", idx).word("op0", "subtract").imm("operand0", c)
              .word("op1", "subtract").tensor("operand1", f(m_base));
        } else {
          ts(eng, f(pb.a), idx, "subtract", c);
          tt(eng, f(pb.a), f(pb.a), f(m_base), "subtract");
        }
      } else if (m_div > 0) {
        ts(eng, f(pb.a), go, "divide", m_div);
      } else {
        divisors(eng, f(pb.b), np, b.r0 + row0, re);
        tt(eng, f(pb.a), go, f(pb.b), "divide");
      }
      for (int64_t kh = 0; kh < s.kh; ++kh) {
        for (int64_t kw = 0; kw < s.kw; ++kw) {
          if (mx) {
            const double g = double(code(kh, kw));
            if (eng == Engine::vector) {
              m_ctx.builder.emit(Opcode::scalar_tensor_tensor)
                  .tensor("dst", f(pb.b)).tensor("data", f(pb.a)).word("op0", "equal").imm("operand0", g)
                  .word("op1", "multiply").tensor("operand1", go);
            } else {
              ts(eng, f(pb.b), f(pb.a), "equal", g);
              tt(eng, f(pb.b), f(pb.b), go, "multiply");
            }
            tt(eng, view(kh, kw), view(kh, kw), f(pb.b), "add");
          } else {
            tt(eng, view(kh, kw), view(kh, kw), f(pb.a), "add");
          }
        }
      }
    }
    const PartBuffers& v = m_part[slot][0];
    const PartBuffers& g = m_part[slot][1];
    // Rows both parts' windows reach: G's share added into V's.
    auto add_rows = [&](uint32_t dst, int64_t dst_row, uint32_t src, int64_t src_row, int64_t rows, bool copy) {
      const int64_t per = std::max<int64_t>(1, kMaxEngineFree / m_wp);
      for (int64_t r = 0; r < rows; r += per) {
        const int64_t nr = std::min(per, rows - r);
        const isa::AccessPattern d = flat2(dst, np, (dst_row + r) * m_wp, nr, m_wp);
        const isa::AccessPattern sp = flat2(src, np, (src_row + r) * m_wp, nr, m_wp);
        if (copy) {
          m_ctx.builder.emit(Opcode::tensor_copy).tensor("dst", d).tensor("src", sp).on(Engine::vector);
        } else {
          tt(Engine::vector, d, d, sp, "add");
        }
      }
    };
    if (part_rows[0] > 0 && part_rows[1] > 0 && b.top_end > b.g_begin) {
      add_rows(v.c, b.g_begin, g.c, 0, b.top_end - b.g_begin, false);
    }
    // Store the band's final rows (band-relative [0, rows s_h), or all for the last band) of the real
    // region [p_h, p_h + H): V's G below v_end, G's above.
    const int64_t pr0 = b.r0 * s.stride_h;
    const int64_t final_end = b.last ? b.g_rows : b.rows * s.stride_h;
    auto store = [&](uint32_t buf, int64_t first_row, int64_t r_begin, int64_t r_end) {
      r_begin = std::max(r_begin, s.pad_h - pr0);
      r_end = std::min(r_end, s.pad_h + s.h - pr0);
      if (r_end <= r_begin) return;
      detail::dma(m_ctx,
                  raw(m_ctx, m_out0, it.planes.begin * plane + (pr0 + r_begin - s.pad_h) * s.w,
                      {{plane, uint32_t(np)}, {s.w, uint32_t(r_end - r_begin)}, {1, uint32_t(s.w)}}),
                  raw(m_ctx, buf, (r_begin - first_row) * m_wp + s.pad_w,
                      {{0, uint32_t(np)}, {m_wp, uint32_t(r_end - r_begin)}, {1, uint32_t(s.w)}}),
                  kStoreQueue);
    };
    if (part_rows[0] > 0) store(v.c, 0, 0, std::min(final_end, b.v_end));
    if (part_rows[1] > 0) store(g.c, b.g_begin, part_rows[0] > 0 ? b.v_end : 0, final_end);
    // Carry rows [rows s_h, rows s_h + overlap) into the next band's G (its receiver's rows [0, overlap)).
    if (!b.last && m_overlap > 0) {
      const Band& next = m_bands[steps[k].band + 1];
      const PartBuffers& to = m_part[(k + 1) % size_t(m_slots)][next.sv > 0 ? 0 : 1];
      const int64_t from_row = b.rows * s.stride_h;
      const bool in_g = part_rows[1] > 0;
      add_rows(to.c, 0, in_g ? g.c : v.c, in_g ? from_row - b.g_begin : from_row, m_overlap, true);
    }
  };
  detail::pipelined(steps.size(), size_t(m_slots - 1), load, body);
}

PoolSpec checked(const PoolSpec& spec, bool max) {
  validate_pool(spec, max);
  return spec;
}

isa::Program pool_program(const char* name, const PoolSpec& spec, Mode mode, const HardwareConfig& config, uint32_t core,
                          uint32_t cores) {
  const PoolSpec s = checked(spec, is_max(mode));
  isa::ProgramBuilder b(name, config.generation);
  auto u = [](int64_t v) { return uint32_t(v); };
  const std::vector<uint32_t> in_shape{u(s.n), u(s.c), u(s.h), u(s.w)}, out_shape{u(s.n), u(s.c), u(s.out_h()), u(s.out_w())};
  KernelContext ctx{b, config, "", core, cores};
  PoolBuilder builder(ctx, s, mode);
  switch (mode) {
    case Mode::max_fwd: {
      const uint32_t in = b.hbm("input", s.dtype, in_shape, isa::AllocationRole::input);
      const uint32_t out = b.hbm("output", s.dtype, out_shape, isa::AllocationRole::output);
      const uint32_t idx = b.hbm("indices", DType::int32, out_shape, isa::AllocationRole::output);
      builder.build(in, -1, out, idx);
      break;
    }
    case Mode::avg_fwd: {
      const uint32_t in = b.hbm("input", s.dtype, in_shape, isa::AllocationRole::input);
      const uint32_t out = b.hbm("output", s.dtype, out_shape, isa::AllocationRole::output);
      builder.build(in, -1, out, -1);
      break;
    }
    case Mode::max_bwd: {
      const uint32_t go = b.hbm("grad_output", s.dtype, out_shape, isa::AllocationRole::input);
      const uint32_t idx = b.hbm("indices", DType::int32, out_shape, isa::AllocationRole::input);
      const uint32_t gi = b.hbm("grad_input", s.dtype, in_shape, isa::AllocationRole::output);
      builder.build(go, idx, gi, -1);
      break;
    }
    case Mode::avg_bwd: {
      const uint32_t go = b.hbm("grad_output", s.dtype, out_shape, isa::AllocationRole::input);
      const uint32_t gi = b.hbm("grad_input", s.dtype, in_shape, isa::AllocationRole::output);
      builder.build(go, -1, gi, -1);
      break;
    }
  }
  return b.finish();
}

}  // namespace

void validate_pool(const PoolSpec& s, bool max) {
  if (s.n <= 0 || s.c <= 0 || s.h <= 0 || s.w <= 0 || s.kh <= 0 || s.kw <= 0) {
    throw KernelUnsupported("pooling: empty shape or kernel");
  }
  if (s.stride_h <= 0 || s.stride_w <= 0 || s.dilation_h <= 0 || s.dilation_w <= 0 || s.pad_h < 0 || s.pad_w < 0) {
    throw KernelUnsupported("pooling: stride and dilation must be >= 1, padding >= 0");
  }
  if (!max && (s.dilation_h != 1 || s.dilation_w != 1)) throw KernelUnsupported("avg pooling has no dilation");
  if (s.pad_h > s.kh / 2 || s.pad_w > s.kw / 2) {
    throw KernelUnsupported("pooling: padding must be at most half the kernel size");
  }
  if (s.out_h() <= 0 || s.out_w() <= 0) throw KernelUnsupported("pooling: the output is empty");
  if (s.divisor_override < 0) throw KernelUnsupported("pooling: divisor_override must be positive");
  if (max && s.kw - 1 >= s.w) {
    throw KernelUnsupported("max pooling: the offset codes need KW - 1 < W");
  }
  if (s.h * s.w >= (int64_t(1) << 24)) throw KernelUnsupported("pooling: plane indices beyond fp32's integers");
  if (s.dtype != DType::fp32 && s.dtype != DType::bf16 && s.dtype != DType::fp16) {
    throw KernelUnsupported("pooling: fp32, bf16 or fp16 only");
  }
}

isa::Program max_pool2d_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  return pool_program("max_pool2d", spec, Mode::max_fwd, config, core, cores);
}
isa::Program avg_pool2d_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  return pool_program("avg_pool2d", spec, Mode::avg_fwd, config, core, cores);
}
isa::Program max_pool2d_backward_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core,
                                         uint32_t cores) {
  return pool_program("max_pool2d_backward", spec, Mode::max_bwd, config, core, cores);
}
isa::Program avg_pool2d_backward_program(const PoolSpec& spec, const HardwareConfig& config, uint32_t core,
                                         uint32_t cores) {
  return pool_program("avg_pool2d_backward", spec, Mode::avg_bwd, config, core, cores);
}

}  // namespace trnsim::kernels
