#include "sim/base/dependency_tracker.h"

#include <algorithm>
#include <map>

namespace trnsim::sim {

namespace {

using Bytes = DependencyTracker::Bytes;
using Lines = DependencyTracker::Lines;

constexpr int64_t kColumnBytes = DependencyTracker::kGranuleBytes;
constexpr int64_t kLines = DependencyTracker::kGranuleLines;
// HBM tensors with fewer rows than this, or with rows narrower than a granule's run, are tracked as
// their flat bytes cut into lines of kFlatLineBytes (a block of 128 lines is then 512 KiB of
// consecutive bytes), so a 1-row tensor is not one line of very many granules and a narrow one
// wastes none.
constexpr int64_t kMinHbmRows = 32;
constexpr int64_t kFlatLineBytes = 4096;

// --- 256-bit byte sets and 128-bit line sets ---

// Bits [lo, hi) of a 64-bit word, 0 <= lo <= hi <= 64.
constexpr uint64_t bit_span(int64_t lo, int64_t hi) {
  if (lo >= hi) return 0;
  const uint64_t ones = hi - lo == 64 ? ~uint64_t{0} : (uint64_t{1} << (hi - lo)) - 1;
  return ones << lo;
}

struct Prefixes {  // kPrefix.of[n]: bytes [0, n)
  Bytes of[kColumnBytes + 1];
};
constexpr Prefixes make_prefixes() {
  Prefixes p{};
  for (int64_t n = 0; n <= kColumnBytes; ++n) {
    for (int64_t k = 0; k < 4; ++k) p.of[n].w[k] = bit_span(0, std::clamp<int64_t>(n - 64 * k, 0, 64));
  }
  return p;
}
constexpr Prefixes kPrefix = make_prefixes();

inline Bytes minus(const Bytes& a, const Bytes& b) {
  return Bytes{{a.w[0] & ~b.w[0], a.w[1] & ~b.w[1], a.w[2] & ~b.w[2], a.w[3] & ~b.w[3]}};
}

// Bytes [lo, hi) of a run, 0 <= lo <= hi <= 256.
inline Bytes byte_span(int64_t lo, int64_t hi) { return minus(kPrefix.of[hi], kPrefix.of[lo]); }

inline bool intersect(const Bytes& a, const Bytes& b) {
  return ((a.w[0] & b.w[0]) | (a.w[1] & b.w[1]) | (a.w[2] & b.w[2]) | (a.w[3] & b.w[3])) != 0;
}
inline bool any(const Bytes& a) { return (a.w[0] | a.w[1] | a.w[2] | a.w[3]) != 0; }
inline bool same(const Bytes& a, const Bytes& b) {
  return a.w[0] == b.w[0] && a.w[1] == b.w[1] && a.w[2] == b.w[2] && a.w[3] == b.w[3];
}
inline void add(Bytes& a, const Bytes& b) {
  for (int k = 0; k < 4; ++k) a.w[k] |= b.w[k];
}

// Lines [lo, hi) of a granule, 0 <= lo <= hi <= 128.
inline Lines line_span(int64_t lo, int64_t hi) {
  return Lines{{bit_span(std::min<int64_t>(lo, 64), std::min<int64_t>(hi, 64)),
                bit_span(std::max<int64_t>(lo - 64, 0), std::max<int64_t>(hi - 64, 0))}};
}
inline bool intersect(const Lines& a, const Lines& b) { return ((a.w[0] & b.w[0]) | (a.w[1] & b.w[1])) != 0; }
inline bool any(const Lines& a) { return (a.w[0] | a.w[1]) != 0; }
inline bool same(const Lines& a, const Lines& b) { return a.w[0] == b.w[0] && a.w[1] == b.w[1]; }
inline Lines minus(const Lines& a, const Lines& b) { return Lines{{a.w[0] & ~b.w[0], a.w[1] & ~b.w[1]}}; }
inline Lines common(const Lines& a, const Lines& b) { return Lines{{a.w[0] & b.w[0], a.w[1] & b.w[1]}}; }
inline void add(Lines& a, const Lines& b) {
  a.w[0] |= b.w[0];
  a.w[1] |= b.w[1];
}

constexpr size_t kNone = ~size_t{0};

struct Set {  // lines x bytes of one granule
  Lines lines;
  Bytes bytes;
};

// Whether two (lines x bytes) sets share an element.
template <class A, class B>
inline bool overlap(const A& a, const B& b) {
  return intersect(a.lines, b.lines) && intersect(a.bytes, b.bytes);
}

// --- the bytes of an access pattern ---

// The bytes one access pattern touches along a line, as base + sum_k i_k * stride[k] + [0, run) for
// 0 <= i_k < count[k]: strides made positive (a reversed walk touches the same bytes), sorted
// ascending (dim 0 innermost), and every dim whose copies of the run touch or overlap folded into
// the run, so a contiguous tile is a single run and only true gaps remain as dims.
struct Walk {
  int64_t base = 0;
  int64_t run = 0;
  int first = 0, dims = 0;  // dims [first, dims) are left after folding
  int64_t stride[isa::kMaxFreeDims + 1];
  int64_t count[isa::kMaxFreeDims + 1];
};

// Adds a dim of `size` steps of `stride` bytes; false when the pattern is empty.
inline bool add_dim(Walk& w, int64_t stride, int64_t size) {
  if (size <= 0) return false;
  if (size == 1 || stride == 0) return true;
  if (stride < 0) {
    w.base += stride * (size - 1);
    stride = -stride;
  }
  int k = w.dims++;
  for (; k > 0 && w.stride[k - 1] > stride; --k) {
    w.stride[k] = w.stride[k - 1];
    w.count[k] = w.count[k - 1];
  }
  w.stride[k] = stride;
  w.count[k] = size;
  return true;
}

// Dims are ascending, so once one leaves a gap every later one does too: [0, run) stays the exact
// union of the folded dims.
inline void fold(Walk& w) {
  int k = w.first;
  while (k < w.dims && w.stride[k] <= w.run) {
    w.run += w.stride[k] * (w.count[k] - 1);
    ++k;
  }
  w.first = k;
}

// The walk of an access pattern's free dims (and, for HBM, its outer dim) in bytes from `base`.
inline bool make_walk(const isa::AccessPattern& ap, int64_t base, int64_t esize, bool with_partition_dim, Walk& w) {
  w.base = base + ap.offset * esize;
  w.run = esize;
  if (with_partition_dim && !add_dim(w, ap.partition.stride * esize, ap.partition.size)) return false;
  for (int i = 0; i < ap.num_free_dims; ++i) {
    if (!add_dim(w, ap.free[i].stride * esize, ap.free[i].size)) return false;
  }
  fold(w);
  return true;
}

// Calls f(start, length) for every run of the walk (innermost dim fastest).
template <class F>
inline void for_each_run(const Walk& w, F&& f) {
  if (w.first == w.dims) {
    f(w.base, w.run);
    return;
  }
  int64_t index[isa::kMaxFreeDims + 1] = {};
  int64_t at = w.base;
  while (true) {
    f(at, w.run);
    int k = w.first;
    for (; k < w.dims; ++k) {
      if (++index[k] < w.count[k]) {
        at += w.stride[k];
        break;
      }
      at -= w.stride[k] * (w.count[k] - 1);
      index[k] = 0;
    }
    if (k == w.dims) return;
  }
}

}  // namespace

DependencyTracker::DependencyTracker(const HardwareConfig& config, const isa::Program& program)
    : m_program(program) {
  for (const DTypeInfo& info : all_dtypes()) m_dtype_bytes[uint8_t(info.dtype)] = uint8_t((info.size_bits + 7) / 8);
  // One flat table, directly indexed: SBUF granules, then PSUM, then each HBM tensor's. Lookups
  // are the simulator's inner loop, so no hashing.
  auto blocks = [](int64_t lines) { return uint64_t((lines + kLines - 1) / kLines); };
  uint64_t next = 0;
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    OnChipLayout& layout = m_onchip[m];
    const auto memory = static_cast<OnChipMemory>(m);
    layout.bytes = int64_t(onchip_bytes_per_partition(config.core, memory));
    layout.partitions = int64_t(onchip_partitions(config.core, memory));
    layout.columns = (layout.bytes + kColumnBytes - 1) / kColumnBytes;
    layout.base = next;
    next += blocks(layout.partitions) * uint64_t(layout.columns);
  }
  m_hbm_layout.assign(program.allocations.size(), HbmLayout{});
  // A flat HBM tensor (one row, or few) that the program reads partition by partition at a fixed
  // stride (an element-wise kernel's [128, n / 128] view of a flat tensor) is lined by that
  // stride: each tile is then lines x bytes, one fragment per granule run, instead of a piece per
  // partition in each of 128 granules (a 525 M-element AdamW pass simulated 5x slower). Any lining
  // is exact; this one only makes the common access cheap. The most frequent stride wins.
  std::vector<std::map<int64_t, uint64_t>> partition_strides(program.allocations.size());
  for (const isa::Instruction& inst : program.instructions) {
    for (const isa::AccessPattern& ap : inst.tensors) {
      if (!ap.present() || ap.space != isa::MemorySpace::hbm || ap.allocation >= program.allocations.size()) continue;
      if (ap.partition.size < 2 || ap.partition.stride <= 0) continue;
      ++partition_strides[ap.allocation][ap.partition.stride * dtype_size_bytes(ap.dtype)];
    }
  }
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const isa::Allocation& a = program.allocations[i];
    if (a.space != isa::MemorySpace::hbm) continue;
    HbmLayout& layout = m_hbm_layout[i];
    const int64_t row_elements = a.shape.empty() ? 0 : int64_t(a.shape.back());
    const int64_t row_bytes = row_elements * dtype_size_bytes(a.dtype);
    const int64_t rows = row_elements ? int64_t(a.total_elements()) / row_elements : 0;
    layout.limit = rows * row_bytes;
    // Lines are the tensor's rows (its last dimension), so the common access - a tile of rows, one
    // column range each - is one set of lines times one set of bytes in each granule it touches.
    layout.line_bytes = row_bytes >= kColumnBytes && rows >= kMinHbmRows ? row_bytes : kFlatLineBytes;
    if (layout.line_bytes == kFlatLineBytes && !partition_strides[i].empty()) {
      const auto most = std::max_element(partition_strides[i].begin(), partition_strides[i].end(),
                                         [](const auto& a, const auto& b) { return a.second < b.second; });
      if (most->first >= kColumnBytes && most->first * kMinHbmRows <= layout.limit) layout.line_bytes = most->first;
    }
    layout.lines = (layout.limit + layout.line_bytes - 1) / layout.line_bytes;
    layout.columns = (layout.line_bytes + kColumnBytes - 1) / kColumnBytes;
    layout.base = next;
    next += blocks(layout.lines) * uint64_t(layout.columns);
  }
  m_granules.assign(next, Granule{});
  m_free_blocks.resize(33);
  m_memo.resize(kMemoEntries);
}

namespace {

constexpr Bytes kAllBytes{{~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}}};

// The bytes of column k of a fragment.
template <class Fragment>
inline const Bytes& bytes_of(const Fragment& f, int64_t k) {
  return k == 0 ? f.head : k == f.columns - 1 ? f.tail : kAllBytes;
}

// Emits bytes [start, start + length) of the lines `lines` of the block whose first granule is
// `granule`, clipped to [0, limit), as a fragment of the pattern whose fragments start at
// out[first]; a run inside one granule is merged into the pattern's last fragment when that is the
// same granule with the same lines or the same bytes.
template <class Fragment>
inline void emit_run(std::vector<Fragment>& out, size_t first, uint64_t granule, const Lines& lines, int64_t start,
                     int64_t length, int64_t limit) {
  const int64_t end = std::min(start + length, limit);
  start = std::max<int64_t>(start, 0);
  if (start >= end) return;
  const int64_t c0 = start / kColumnBytes, c1 = (end - 1) / kColumnBytes;
  if (c0 < c1) {
    out.push_back(Fragment{granule + uint64_t(c0), c1 - c0 + 1, lines, byte_span(start - c0 * kColumnBytes, kColumnBytes),
                           byte_span(0, end - c1 * kColumnBytes)});
    return;
  }
  const Bytes bytes = byte_span(start - c0 * kColumnBytes, end - c0 * kColumnBytes);
  if (out.size() > first && out.back().granule == granule + uint64_t(c0) && out.back().columns == 1) {
    Fragment& last = out.back();
    if (same(last.lines, lines)) {
      add(last.head, bytes);
      return;
    }
    if (same(last.head, bytes)) {
      add(last.lines, lines);
      return;
    }
  }
  out.push_back(Fragment{granule + uint64_t(c0), 1, lines, bytes, bytes});
}

// Copies out[first, last) to every further block: the same bytes, that block's lines.
template <class Fragment, class Blocks>
inline void repeat_for_blocks(std::vector<Fragment>& out, size_t first, const Blocks& blocks, int64_t columns) {
  const size_t last = out.size();
  const int64_t b0 = blocks.front().first;
  for (size_t k = 1; k < blocks.size(); ++k) {
    const uint64_t shift = uint64_t((blocks[k].first - b0) * columns);
    for (size_t i = first; i < last; ++i) {
      Fragment f = out[i];
      f.granule += shift;
      f.lines = blocks[k].second;
      out.push_back(f);
    }
  }
}

inline uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); }

inline uint64_t pattern_hash(const isa::AccessPattern& ap) {
  uint64_t h = mix(0xcbf29ce484222325ull, ap.allocation);
  h = mix(h, uint64_t(ap.offset));
  h = mix(h, (uint64_t(ap.start_partition) << 32) | ap.partition.size);
  h = mix(h, uint64_t(ap.partition.stride));
  h = mix(h, (uint64_t(ap.num_free_dims) << 8) | uint8_t(ap.dtype));
  for (int i = 0; i < ap.num_free_dims; ++i) h = mix(mix(h, uint64_t(ap.free[i].stride)), ap.free[i].size);
  return h ^ (h >> 31);
}

inline bool same_pattern(const isa::AccessPattern& a, const isa::AccessPattern& b) {
  if (a.allocation != b.allocation || a.offset != b.offset || a.start_partition != b.start_partition ||
      a.partition.size != b.partition.size || a.partition.stride != b.partition.stride || a.dtype != b.dtype ||
      a.num_free_dims != b.num_free_dims || a.space != b.space) {
    return false;
  }
  for (int i = 0; i < a.num_free_dims; ++i) {
    if (a.free[i].stride != b.free[i].stride || a.free[i].size != b.free[i].size) return false;
  }
  return true;
}

}  // namespace

void DependencyTracker::fragments(const isa::AccessPattern& ap, std::vector<Fragment>& out) const {
  if (!ap.present() || ap.partitions() == 0) return;
  // A pattern's fragments depend on nothing else (merging stays within one pattern), so a
  // remembered cut is exact.
  Memo& memo = m_memo[pattern_hash(ap) & (kMemoEntries - 1)];
  if (memo.count >= 0 && same_pattern(memo.ap, ap)) {
    out.insert(out.end(), memo.fragments, memo.fragments + memo.count);
    return;
  }
  const size_t first = out.size();
  cut_pattern(ap, out);
  const size_t count = out.size() - first;
  if (count <= 2) {
    memo.ap = ap;
    memo.count = int(count);
    std::copy(out.begin() + first, out.end(), memo.fragments);
  }
}

void DependencyTracker::cut_pattern(const isa::AccessPattern& ap, std::vector<Fragment>& out) const {
  const isa::Allocation& a = m_program.allocation(ap);
  const int64_t esize = m_dtype_bytes[uint8_t(ap.dtype)];
  Walk w;
  const size_t first = out.size();
  m_blocks.clear();

  if (a.space != isa::MemorySpace::hbm) {
    // SBUF/PSUM: every partition of the pattern touches the same bytes, so each granule holds the
    // pattern's partitions in it times its bytes in the granule's run.
    const OnChipLayout& layout = m_onchip[static_cast<size_t>(isa::on_chip_memory(a.space))];
    if (!make_walk(ap, int64_t(a.base_byte), esize, false, w)) return;
    const int64_t p0 = int64_t(a.base_partition) + ap.start_partition;
    const int64_t p1 = std::min(p0 + int64_t(ap.partitions()), layout.partitions);
    if (p0 >= p1) return;
    const int64_t b0 = p0 / kLines, b1 = (p1 - 1) / kLines;
    const int64_t columns = layout.columns;
    const uint64_t granule = layout.base + uint64_t(b0 * columns);
    const int64_t limit = layout.bytes;
    const Lines lines = line_span(p0 - b0 * kLines, std::min(p1, (b0 + 1) * kLines) - b0 * kLines);
    for_each_run(w, [&](int64_t start, int64_t length) { emit_run(out, first, granule, lines, start, length, limit); });
    if (b1 == b0) return;
    for (int64_t b = b0; b <= b1; ++b) {
      m_blocks.emplace_back(b, line_span(std::max(p0, b * kLines) - b * kLines, std::min(p1, (b + 1) * kLines) - b * kLines));
    }
    repeat_for_blocks(out, first, m_blocks, columns);
    return;
  }

  // HBM: lines are the layout's rows; the outer (partition) dim is one more dim of the walk.
  const HbmLayout& layout = m_hbm_layout[ap.allocation];
  if (!make_walk(ap, 0, esize, true, w)) return;
  const int64_t line = layout.line_bytes;
  auto granule = [&](int64_t block, int64_t column) { return layout.base + uint64_t(block * layout.columns + column); };
  // A box: dims that step whole lines choose the lines, the others (and the run) the bytes within
  // each, and those stay inside one line: lines x bytes, exactly.
  int64_t column_extent = w.base % line + w.run;
  for (int k = w.first; k < w.dims; ++k) {
    if (w.stride[k] % line != 0) column_extent += w.stride[k] * (w.count[k] - 1);
  }
  if (w.base >= 0 && column_extent <= line) {
    Walk rows, columns;
    rows.base = w.base / line;
    rows.run = 1;
    columns.base = w.base % line;
    columns.run = w.run;
    for (int k = w.first; k < w.dims; ++k) {
      if (w.stride[k] % line == 0) {
        add_dim(rows, w.stride[k] / line, w.count[k]);
      } else {
        add_dim(columns, w.stride[k], w.count[k]);
      }
    }
    fold(rows);
    fold(columns);
    for_each_run(rows, [&](int64_t row, int64_t count) {
      const int64_t end = std::min(row + count, layout.lines);
      while (row < end) {
        const int64_t b = row / kLines, stop = std::min(end, (b + 1) * kLines);
        const Lines lines = line_span(row - b * kLines, stop - b * kLines);
        if (!m_blocks.empty() && m_blocks.back().first == b) {
          add(m_blocks.back().second, lines);
        } else {
          m_blocks.emplace_back(b, lines);
        }
        row = stop;
      }
    });
    if (m_blocks.empty()) return;
    const uint64_t g = granule(m_blocks.front().first, 0);
    const Lines lines = m_blocks.front().second;
    for_each_run(columns, [&](int64_t start, int64_t length) { emit_run(out, first, g, lines, start, length, line); });
    repeat_for_blocks(out, first, m_blocks, layout.columns);
    return;
  }
  // Anything else, run by run: a run is its first line's tail, whole lines, and its last line's head.
  auto part_of_line = [&](int64_t r, int64_t start, int64_t end) {
    const int64_t b = r / kLines;
    emit_run(out, first, granule(b, 0), line_span(r - b * kLines, r - b * kLines + 1), start, end - start, line);
  };
  for_each_run(w, [&](int64_t start, int64_t length) {
    const int64_t end = std::min(start + length, layout.limit);
    start = std::max<int64_t>(start, 0);
    if (start >= end) return;
    const int64_t r0 = start / line, r1 = (end - 1) / line;
    if (r0 == r1) {
      part_of_line(r0, start - r0 * line, end - r0 * line);
      return;
    }
    part_of_line(r0, start - r0 * line, line);
    for (int64_t r = r0 + 1; r < r1;) {  // whole lines r0 + 1 .. r1 - 1
      const int64_t b = r / kLines, stop = std::min(r1, (b + 1) * kLines);
      emit_run(out, first, granule(b, 0), line_span(r - b * kLines, stop - b * kLines), 0, line, line);
      r = stop;
    }
    part_of_line(r1, 0, end - r1 * line);
  });
}

void DependencyTracker::cut(const std::vector<const isa::AccessPattern*>& list, Cut& out) const {
  out.fragments.clear();
  out.spans.clear();
  for (const isa::AccessPattern* ap : list) {
    if (ap == nullptr) continue;
    const size_t begin = out.fragments.size();
    fragments(*ap, out.fragments);
    out.spans.emplace_back(*ap, std::make_pair(begin, out.fragments.size()));
  }
}

const std::vector<DependencyTracker::Fragment>& DependencyTracker::fragments_of(
    const std::vector<const isa::AccessPattern*>& list, const Cut& cached) {
  // The same patterns in the same order (compared by value: another pattern may sit at the same
  // address by now): the cut as it is.
  if (m_cut_valid) {
    size_t k = 0;
    bool same_list = true;
    for (const isa::AccessPattern* ap : list) {
      if (ap == nullptr) continue;
      if (k == cached.spans.size() || !same_pattern(cached.spans[k].first, *ap)) {
        same_list = false;
        break;
      }
      ++k;
    }
    if (same_list && k == cached.spans.size()) return cached.fragments;
  }
  m_recut.clear();
  for (const isa::AccessPattern* ap : list) {
    if (ap == nullptr) continue;
    bool found = false;
    for (const Cut* c : {&m_read_cut, &m_write_cut}) {
      if (!m_cut_valid || found) break;
      for (const auto& [pattern, span] : c->spans) {
        if (!same_pattern(pattern, *ap)) continue;
        m_recut.insert(m_recut.end(), c->fragments.begin() + span.first, c->fragments.begin() + span.second);
        found = true;
        break;
      }
    }
    if (!found) fragments(*ap, m_recut);
  }
  return m_recut;
}

Dependency DependencyTracker::query(const std::vector<const isa::AccessPattern*>& reads,
                                    const std::vector<const isa::AccessPattern*>& writes) const {
  Dependency dep;
  // Strictly later wins, so ties go to the first conflict found (reads before writes): deterministic,
  // and any of the tied producers explains the wait equally well.
  auto consider = [&dep](double done_ns, int64_t producer, char kind) {
    if (producer >= 0 && (done_ns > dep.ready_ns || dep.producer < 0)) dep = Dependency{done_ns, producer, kind};
  };
  // The fragments are kept for the record() that follows (the common call pattern), so the patterns
  // are cut once per instruction.
  cut(reads, m_read_cut);
  cut(writes, m_write_cut);
  m_cut_valid = true;
  for (const Fragment& f : m_read_cut.fragments) {
    for (int64_t k = 0; k < f.columns; ++k) {
      const Bytes& bytes = bytes_of(f, k);
      const Granule& g = m_granules[f.granule + uint64_t(k)];
      for (const Piece *p = m_pool.data() + g.begin, *end = p + g.size; p != end; ++p) {
        if (p->write() && intersect(p->lines, f.lines) && intersect(p->bytes, bytes)) {
          consider(p->done_ns, p->instruction(), 'R');
        }
      }
    }
  }
  for (const Fragment& f : m_write_cut.fragments) {
    for (int64_t k = 0; k < f.columns; ++k) {
      const Bytes& bytes = bytes_of(f, k);
      const Granule& g = m_granules[f.granule + uint64_t(k)];
      for (const Piece *p = m_pool.data() + g.begin, *end = p + g.size; p != end; ++p) {
        if (intersect(p->lines, f.lines) && intersect(p->bytes, bytes)) {
          consider(p->done_ns, p->instruction(), p->write() ? 'W' : 'A');
        }
      }
    }
  }
  return dep;
}

namespace {

// Whether every element of `p` is in `f`.
template <class A, class B>
inline bool covered(const A& p, const B& f) {
  return !any(minus(p.lines, f.lines)) && !any(minus(p.bytes, f.bytes));
}

// Removes pieces[i], putting the last piece in its place.
template <class List>
inline void remove(List& pieces, size_t i) {
  if (i + 1 < pieces.size()) pieces[i] = pieces.back();
  pieces.pop_back();
}

// Takes the elements of `f` out of pieces[i], which overlaps it: what is left is its lines outside
// f (all its bytes) and its lines inside f (its bytes outside f). Returns false when nothing is left
// and pieces[i] was replaced by the last piece (the caller looks at index i again).
template <class List, class Set>
bool subtract(List& pieces, size_t i, const Set& f) {
  auto& p = pieces[i];
  const Lines outside = minus(p.lines, f.lines);
  const Bytes rest = minus(p.bytes, f.bytes);
  if (any(rest)) {
    if (any(outside)) {
      auto inside = p;
      inside.lines = common(p.lines, f.lines);
      inside.bytes = rest;
      p.lines = outside;
      pieces.push_back(inside);  // disjoint from f
    } else {
      p.bytes = rest;
    }
    return true;
  }
  if (any(outside)) {
    p.lines = outside;
    return true;
  }
  p = pieces.back();
  pieces.pop_back();
  return false;
}

// Appends a piece, merged into the last one when it has the same origin and the same lines or bytes.
template <class List, class Piece>
void append(List& pieces, const Piece& q) {
  if (pieces.size() > 0) {
    auto& last = pieces.back();
    if (last.tag == q.tag && last.done_ns == q.done_ns) {
      if (same(last.lines, q.lines)) {
        add(last.bytes, q.bytes);
        return;
      }
      if (same(last.bytes, q.bytes)) {
        add(last.lines, q.lines);
        return;
      }
    }
  }
  pieces.push_back(q);
}

}  // namespace

class DependencyTracker::Pieces {
 public:
  Pieces(DependencyTracker& t, Granule& g) : m_t(t), m_g(g) {}
  size_t size() const { return m_g.size; }
  Piece& operator[](size_t i) { return m_t.m_pool[m_g.begin + i]; }
  Piece& back() { return m_t.m_pool[m_g.begin + m_g.size - 1]; }
  void pop_back() { --m_g.size; }
  void push_back(const Piece& q) {
    if (m_g.size == m_g.capacity) grow();
    m_t.m_pool[m_g.begin + m_g.size++] = q;
  }

 private:
  void grow() {
    const uint32_t capacity = m_g.capacity ? 2 * m_g.capacity : 2;
    int cls = 0;
    while ((uint32_t{1} << cls) < capacity) ++cls;
    std::vector<uint32_t>& free_blocks = m_t.m_free_blocks[cls];
    uint32_t begin;
    if (!free_blocks.empty()) {
      begin = free_blocks.back();
      free_blocks.pop_back();
    } else {
      begin = uint32_t(m_t.m_pool.size());
      m_t.m_pool.resize(m_t.m_pool.size() + capacity);
    }
    std::copy(m_t.m_pool.begin() + m_g.begin, m_t.m_pool.begin() + m_g.begin + m_g.size, m_t.m_pool.begin() + begin);
    if (m_g.capacity) {
      int old = 0;
      while ((uint32_t{1} << old) < m_g.capacity) ++old;
      m_t.m_free_blocks[old].push_back(m_g.begin);
    }
    m_g.begin = begin;
    m_g.capacity = capacity;
  }
  DependencyTracker& m_t;
  Granule& m_g;
};

DependencyTracker::Pieces DependencyTracker::pieces_of(uint64_t granule) { return Pieces(*this, m_granules[granule]); }

void DependencyTracker::record_write(uint64_t granule, const Lines& lines, const Bytes& bytes, double done_ns,
                                     int64_t index) {
  // The write becomes the last writer of its bytes and clears the reads of them before it; older
  // pieces keep only their other elements. The common case - a tile written again - takes over the
  // slot of the first piece it covers and removes the others it covers.
  const Set f{lines, bytes};
  Granule& g = m_granules[granule];
  if (g.size == 1 && covered(m_pool[g.begin], f)) {  // the common case, short
    m_pool[g.begin] = Piece{lines, bytes, done_ns, index * 2 + 1};
    return;
  }
  Pieces pieces = pieces_of(granule);
  size_t slot = kNone;  // (pieces.size() would move as subtract() appends)
  for (size_t i = 0; i < pieces.size();) {
    const Piece& p = pieces[i];
    if (covered(p, f)) {  // (pieces are never empty: covered implies overlapping)
      if (slot == kNone) {
        slot = i++;
      } else {
        remove(pieces, i);
      }
    } else if (!overlap(p, f) || subtract(pieces, i, f)) {
      ++i;
    }
  }
  const Piece write{lines, bytes, done_ns, index * 2 + 1};
  if (slot != kNone) {
    pieces[slot] = write;
  } else {
    append(pieces, write);
  }
}

void DependencyTracker::record_read(uint64_t granule, const Lines& lines, const Bytes& bytes, double done_ns,
                                    int64_t index) {
  // Each element keeps the latest-finishing read since its last write (the earlier-recorded one on
  // a tie), so read pieces stay disjoint: the new read takes over the elements of reads finishing
  // earlier and leaves those of reads finishing no earlier to them.
  const Set f{lines, bytes};
  Granule& g = m_granules[granule];
  if (g.size == 1 && m_pool[g.begin].write()) {  // the common cases, short: the first read since a write,
    pieces_of(granule).push_back(Piece{lines, bytes, done_ns, index * 2});
    return;
  }
  if (g.size == 2) {  // or a read of all of an earlier read's bytes
    Piece* p = &m_pool[g.begin];
    for (int k = 0; k < 2; ++k) {
      if (p[1 - k].write() && !p[k].write() && p[k].done_ns < done_ns && covered(p[k], f)) {
        p[k] = Piece{lines, bytes, done_ns, index * 2};
        return;
      }
    }
  }
  Pieces pieces = pieces_of(granule);
  bool whole = true;  // nothing of the new read is left to a later-finishing one (m_parts unused)
  size_t slot = kNone;  // (pieces.size() would move as subtract() appends)
  for (size_t i = 0; i < pieces.size();) {
    const Piece& p = pieces[i];
    if (p.write()) {
      ++i;
    } else if (p.done_ns < done_ns) {
      if (covered(p, f)) {
        if (slot == kNone) {
          slot = i++;
        } else {
          remove(pieces, i);
        }
      } else if (!overlap(p, f) || subtract(pieces, i, f)) {
        ++i;
      }
    } else {
      if (overlap(p, f)) {
        if (whole) {
          m_parts.assign(1, Piece{lines, bytes, done_ns, index * 2});
          whole = false;
        }
        m_parts_next.clear();
        for (const Piece& q : m_parts) {
          m_parts_next.push_back(q);
          if (overlap(q, p)) subtract(m_parts_next, m_parts_next.size() - 1, p);
        }
        m_parts.swap(m_parts_next);
      }
      ++i;
    }
  }
  if (whole) {
    const Piece read{lines, bytes, done_ns, index * 2};
    if (slot != kNone) {
      pieces[slot] = read;
    } else {
      append(pieces, read);
    }
    return;
  }
  if (slot != kNone) remove(pieces, slot);  // (a covered slot's elements are all in m_parts)
  for (const Piece& q : m_parts) append(pieces, q);
}

void DependencyTracker::record(int64_t index, double done_ns, const std::vector<const isa::AccessPattern*>& reads,
                               const std::vector<const isa::AccessPattern*>& writes) {
  // Reads first: where the instruction also writes a byte, its write supersedes its own read, so
  // a pattern it also writes (an in-out operand such as an accumulating matmul's dst) is not
  // recorded as read at all.
  m_reads_only.clear();
  for (const isa::AccessPattern* ap : reads) {
    if (ap != nullptr && std::find(writes.begin(), writes.end(), ap) == writes.end()) m_reads_only.push_back(ap);
  }
  const bool all_reads = m_reads_only.size() == reads.size();
  for (const Fragment& f : fragments_of(all_reads ? reads : m_reads_only, m_read_cut)) {
    for (int64_t k = 0; k < f.columns; ++k) record_read(f.granule + uint64_t(k), f.lines, bytes_of(f, k), done_ns, index);
  }
  for (const Fragment& f : fragments_of(writes, m_write_cut)) {
    for (int64_t k = 0; k < f.columns; ++k) record_write(f.granule + uint64_t(k), f.lines, bytes_of(f, k), done_ns, index);
  }
  m_cut_valid = false;
}

}  // namespace trnsim::sim
