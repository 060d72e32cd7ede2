#include "sim/base/dependency_tracker.h"

#include <algorithm>
#include <cstdlib>

namespace trnsim::sim {

namespace {

// Granule sizes are the model's approximation of the semaphore bookkeeping, not hardware figures:
// SBUF/PSUM accesses are tracked per (quadrant of partitions, 256-byte run of each partition) and HBM
// accesses per (32 rows, 256-byte run of a row) of one tensor, rows being its last dimension. Two accesses that share a granule without sharing bytes
// ("false sharing") only add a conservative wait; a true conflict is never missed.
constexpr uint64_t kOnChipGranuleBytes = 256;
constexpr int64_t kHbmGranuleBytes = 256;  // within one row of the tensor
constexpr int64_t kHbmRowBlock = 32;        // rows per granule


// Lowest and highest element offset of the free dims relative to the pattern's offset, in O(dims).
// Returns false when a dim is empty (the pattern touches nothing).
bool free_extent(const isa::AccessPattern& ap, int64_t& low, int64_t& high) {
  low = high = 0;
  for (int i = 0; i < ap.num_free_dims; ++i) {
    if (ap.free[i].size == 0) return false;
    const int64_t span = ap.free[i].stride * (int64_t{ap.free[i].size} - 1);
    (span < 0 ? low : high) += span;
  }
  return true;
}

}  // namespace

DependencyTracker::DependencyTracker(const HardwareConfig& config, const isa::Program& program)
    : m_program(program),
      m_sbuf_bytes(config.core.sbuf.bytes_per_partition),
      m_psum_bytes(config.core.psum.bytes_per_partition),
      m_quadrant_partitions(std::max<uint32_t>(config.core.sbuf.quadrant_partitions, 1)) {
  // One flat table, directly indexed: SBUF granules, then PSUM, then each HBM tensor's. Lookups
  // are the simulator's inner loop, so no hashing.
  uint64_t quadrants = (uint64_t(config.core.sbuf.partitions) + m_quadrant_partitions - 1) / m_quadrant_partitions;
  m_sbuf_row = (m_sbuf_bytes + kOnChipGranuleBytes - 1) / kOnChipGranuleBytes;
  m_psum_row = (m_psum_bytes + kOnChipGranuleBytes - 1) / kOnChipGranuleBytes;
  m_psum_base = quadrants * m_sbuf_row;
  uint64_t next = m_psum_base + quadrants * m_psum_row;
  m_hbm_layout.assign(program.allocations.size(), HbmLayout{});
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const isa::Allocation& a = program.allocations[i];
    if (a.space != isa::MemorySpace::hbm) continue;
    HbmLayout& layout = m_hbm_layout[i];
    // Rows of the tensor's last dimension; at most ~1024 x 1024 granules per tensor.
    layout.row_bytes = int64_t(a.shape.back()) * dtype_size_bytes(a.dtype);
    layout.rows = int64_t(a.total_elements() / a.shape.back());
    layout.col_bytes = std::max<int64_t>(kHbmGranuleBytes, (layout.row_bytes + 1023) / 1024);
    layout.col_blocks = (layout.row_bytes + layout.col_bytes - 1) / layout.col_bytes;
    layout.row_block = std::max<int64_t>(kHbmRowBlock, (layout.rows + 1023) / 1024);
    layout.base = next;
    next += uint64_t(((layout.rows + layout.row_block - 1) / layout.row_block) * layout.col_blocks);
  }
  m_granules.assign(next, Granule{});
}

template <class Visit>
void DependencyTracker::for_each_granule(const isa::AccessPattern& ap, Visit&& visit) const {
  if (!ap.present() || ap.partitions() == 0) return;
  int64_t low = 0, high = 0;
  if (!free_extent(ap, low, high)) return;
  const isa::Allocation& a = m_program.allocation(ap);
  const int64_t esize = dtype_size_bytes(ap.dtype);

  if (a.space == isa::MemorySpace::hbm) {
    const HbmLayout& layout = m_hbm_layout[ap.allocation];
    const int64_t limit = layout.rows * layout.row_bytes;
    // Granules are (block of rows) x (run of bytes within a row) of the tensor's own row layout,
    // so the common access - a tile of rows, one column range each - touches a handful of them.
    auto visit_block = [&](int64_t row_block, int64_t col_first, int64_t col_last) {
      for (int64_t c = col_first; c <= col_last; ++c) visit(layout.base + uint64_t(row_block * layout.col_blocks + c));
    };
    auto visit_bytes = [&](int64_t first, int64_t last) {
      first = std::max<int64_t>(first, 0);
      last = std::min(last, limit - 1);
      if (first > last) return;
      const int64_t r0 = first / layout.row_bytes, r1 = last / layout.row_bytes;
      if (r0 == r1) {
        visit_block(r0 / layout.row_block, (first % layout.row_bytes) / layout.col_bytes,
                    (last % layout.row_bytes) / layout.col_bytes);
        return;
      }
      for (int64_t b = r0 / layout.row_block; b <= r1 / layout.row_block; ++b) visit_block(b, 0, layout.col_blocks - 1);
    };
    const int64_t rows = ap.partition.size;
    const int64_t row_stride_bytes = ap.partition.stride * esize;
    const int64_t first_byte = (ap.offset + low) * esize, span_bytes = (high - low + 1) * esize;
    if (rows > 1 && row_stride_bytes > 0 && row_stride_bytes % layout.row_bytes == 0 &&
        first_byte % layout.row_bytes + span_bytes <= layout.row_bytes) {
      // A box: the same column range in rows r_first, r_first + step, ...
      const int64_t r_first = first_byte / layout.row_bytes;
      const int64_t r_last = std::min(r_first + (row_stride_bytes / layout.row_bytes) * (rows - 1), layout.rows - 1);
      const int64_t c_first = (first_byte % layout.row_bytes) / layout.col_bytes;
      const int64_t c_last = (first_byte % layout.row_bytes + span_bytes - 1) / layout.col_bytes;
      for (int64_t b = r_first / layout.row_block; b <= r_last / layout.row_block; ++b) visit_block(b, c_first, c_last);
      return;
    }
    if (rows == 1 || std::abs(ap.partition.stride) * esize <= layout.col_bytes) {
      int64_t lo = low, hi = high;
      (ap.partition.stride < 0 ? lo : hi) += ap.partition.stride * (rows - 1);
      visit_bytes((ap.offset + lo) * esize, (ap.offset + hi + 1) * esize - 1);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = ap.offset + r * ap.partition.stride;
      visit_bytes((row + low) * esize, (row + high + 1) * esize - 1);
    }
    return;
  }

  // SBUF/PSUM: every partition covers the same byte range, so the granules are quadrants x byte runs.
  const int64_t bytes = int64_t(a.space == isa::MemorySpace::psum ? m_psum_bytes : m_sbuf_bytes);
  const int64_t first = std::max<int64_t>(int64_t(a.base_byte) + (ap.offset + low) * esize, 0);
  const int64_t last = std::min<int64_t>(int64_t(a.base_byte) + (ap.offset + high + 1) * esize - 1, bytes - 1);
  if (first > last) return;
  const uint64_t g0 = uint64_t(first) / kOnChipGranuleBytes, g1 = uint64_t(last) / kOnChipGranuleBytes;
  const uint64_t p0 = uint64_t(a.base_partition) + ap.start_partition;
  const uint64_t q0 = p0 / m_quadrant_partitions, q1 = (p0 + ap.partitions() - 1) / m_quadrant_partitions;
  const bool psum = a.space == isa::MemorySpace::psum;
  const uint64_t base = psum ? m_psum_base : 0, row = psum ? m_psum_row : m_sbuf_row;
  for (uint64_t q = q0; q <= q1; ++q) {
    for (uint64_t g = g0; g <= g1; ++g) visit(base + q * row + g);
  }
}

Dependency DependencyTracker::query(const std::vector<const isa::AccessPattern*>& reads,
                                    const std::vector<const isa::AccessPattern*>& writes) const {
  Dependency dep;
  // Strictly later wins, so ties go to the first conflict found (reads before writes, WAW before WAR):
  // deterministic, and any of the tied producers explains the wait equally well.
  auto consider = [&dep](double done_ns, int64_t producer, char kind) {
    if (producer >= 0 && (done_ns > dep.ready_ns || dep.producer < 0)) dep = Dependency{done_ns, producer, kind};
  };
  // The granules are kept for the record() that follows (the common call pattern), so they are
  // walked once per instruction.
  m_read_keys.clear();
  m_write_keys.clear();
  for (const isa::AccessPattern* ap : reads) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      m_read_keys.push_back(key);
      const Granule& g = m_granules[key];
      consider(g.write_done_ns, g.writer, 'R');
    });
  }
  for (const isa::AccessPattern* ap : writes) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      m_write_keys.push_back(key);
      const Granule& g = m_granules[key];
      consider(g.write_done_ns, g.writer, 'W');
      consider(g.read_done_ns, g.reader, 'A');
    });
  }
  m_cached_reads = &reads;
  m_cached_writes = &writes;
  m_cached_sizes = {reads.size(), writes.size()};
  return dep;
}

void DependencyTracker::record(int64_t index, double done_ns, const std::vector<const isa::AccessPattern*>& reads,
                               const std::vector<const isa::AccessPattern*>& writes) {
  if (m_cached_reads != &reads || m_cached_writes != &writes ||
      m_cached_sizes != std::make_pair(reads.size(), writes.size())) {
    query(reads, writes);  // not preceded by its query: walk the granules now
  }
  m_cached_reads = m_cached_writes = nullptr;
  // Reads first: where the instruction also writes a granule, its write supersedes its own read.
  for (uint64_t key : m_read_keys) {
    Granule& g = m_granules[key];
    if (g.reader < 0 || done_ns > g.read_done_ns) {
      g.read_done_ns = done_ns;
      g.reader = index;
    }
  }
  for (uint64_t key : m_write_keys) {
    Granule& g = m_granules[key];
    g.write_done_ns = done_ns;
    g.writer = index;
    // Later writers wait for this write (WAW), which itself waited for the earlier reads (WAR).
    g.read_done_ns = 0;
    g.reader = -1;
  }
}

}  // namespace trnsim::sim
