#include "sim/base/dependency_tracker.h"

#include <algorithm>
#include <cstdlib>

namespace trnsim::sim {

namespace {

// Granule sizes are the model's approximation of the semaphore bookkeeping, not hardware figures:
// SBUF/PSUM accesses are tracked per (quadrant of partitions, 256-byte run of each partition) and HBM
// accesses per 4 KiB run of one tensor. Two accesses that share a granule without sharing bytes
// ("false sharing") only add a conservative wait; a true conflict is never missed.
constexpr uint64_t kOnChipGranuleBytes = 256;
constexpr uint64_t kHbmGranuleBytes = 4096;

// Key layout: space (2 bits) | quadrant or HBM allocation (22 bits) | granule index (40 bits).
constexpr int kIndexBits = 40;
constexpr int kGroupBits = 22;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr uint64_t kGroupMask = (uint64_t{1} << kGroupBits) - 1;

uint64_t granule_key(isa::MemorySpace space, uint64_t group, uint64_t index) {
  return (uint64_t(space) << (kIndexBits + kGroupBits)) | ((group & kGroupMask) << kIndexBits) | (index & kIndexMask);
}

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
  // SBUF alone is ~3k granules on trn2; reserving avoids rehashing in the first instructions.
  m_granules.reserve(8192);
}

template <class Visit>
void DependencyTracker::for_each_granule(const isa::AccessPattern& ap, Visit&& visit) const {
  if (!ap.present() || ap.partitions() == 0) return;
  int64_t low = 0, high = 0;
  if (!free_extent(ap, low, high)) return;
  const isa::Allocation& a = m_program.allocation(ap);
  const int64_t esize = dtype_size_bytes(ap.dtype);

  if (a.space == isa::MemorySpace::hbm) {
    const int64_t limit = int64_t(a.total_elements() * dtype_size_bytes(a.dtype));  // bytes of the tensor
    const int64_t rows = ap.partition.size;
    const int64_t row_stride = ap.partition.stride;
    // Visits the granules of bytes [first, last] not yet visited; rows are walked in increasing address order,
    // so `next` (first unvisited granule) deduplicates granules shared by neighbouring rows.
    int64_t next = 0;
    auto visit_bytes = [&](int64_t first, int64_t last) {
      first = std::max<int64_t>(first, 0);
      last = std::min(last, limit - 1);
      if (first > last) return;
      const int64_t g1 = last / int64_t(kHbmGranuleBytes);
      for (int64_t g = std::max(first / int64_t(kHbmGranuleBytes), next); g <= g1; ++g) {
        visit(granule_key(a.space, ap.allocation, uint64_t(g)));
      }
      next = std::max(next, g1 + 1);
    };
    if (rows == 1 || std::abs(row_stride) * esize <= int64_t(kHbmGranuleBytes)) {
      // Rows at most a granule apart leave no granule of the bounding range untouched: take it whole.
      int64_t lo = low, hi = high;
      (row_stride < 0 ? lo : hi) += row_stride * (rows - 1);
      visit_bytes((ap.offset + lo) * esize, (ap.offset + hi + 1) * esize - 1);
      return;
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = ap.offset + (row_stride < 0 ? rows - 1 - r : r) * row_stride;
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
  for (uint64_t q = q0; q <= q1; ++q) {
    for (uint64_t g = g0; g <= g1; ++g) visit(granule_key(a.space, q, g));
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
  for (const isa::AccessPattern* ap : reads) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      auto it = m_granules.find(key);
      if (it != m_granules.end()) consider(it->second.write_done_ns, it->second.writer, 'R');
    });
  }
  for (const isa::AccessPattern* ap : writes) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      auto it = m_granules.find(key);
      if (it == m_granules.end()) return;
      consider(it->second.write_done_ns, it->second.writer, 'W');
      consider(it->second.read_done_ns, it->second.reader, 'A');
    });
  }
  return dep;
}

void DependencyTracker::record(int64_t index, double done_ns, const std::vector<const isa::AccessPattern*>& reads,
                               const std::vector<const isa::AccessPattern*>& writes) {
  // Reads first: where the instruction also writes a granule, its write supersedes its own read.
  for (const isa::AccessPattern* ap : reads) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      Granule& g = m_granules[key];
      if (g.reader < 0 || done_ns > g.read_done_ns) {
        g.read_done_ns = done_ns;
        g.reader = index;
      }
    });
  }
  for (const isa::AccessPattern* ap : writes) {
    if (ap == nullptr) continue;
    for_each_granule(*ap, [&](uint64_t key) {
      Granule& g = m_granules[key];
      g.write_done_ns = done_ns;
      g.writer = index;
      // Later writers wait for this write (WAW), which itself waited for the earlier reads (WAR).
      g.read_done_ns = 0;
      g.reader = -1;
    });
  }
}

}  // namespace trnsim::sim
