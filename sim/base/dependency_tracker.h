// Derives the dependencies between instructions from the memory each reads and writes (RAW,
// WAR, WAW), as the hardware's semaphores enforce them. Memory is tracked in granules: for
// SBUF/PSUM a quadrant of partitions x a run of bytes, for HBM a block of rows x a run of bytes of one tensor.
// Instructions arrive in program order; for each access the tracker answers when the
// conflicting earlier accesses complete and which instruction that was (for flow arrows).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "isa/program.h"

namespace trnsim::sim {

struct Dependency {
  double ready_ns = 0;     // earliest start allowed by memory dependencies
  int64_t producer = -1;   // the instruction whose completion set ready_ns (-1: none)
  char kind = ' ';         // 'R' (read after write), 'A' (write after read), 'W' (write after write)
};

class DependencyTracker {
 public:
  DependencyTracker(const HardwareConfig& config, const isa::Program& program);

  // The dependency of instruction `index` reading `reads` and writing `writes`.
  Dependency query(const std::vector<const isa::AccessPattern*>& reads,
                   const std::vector<const isa::AccessPattern*>& writes) const;
  // Records that instruction `index` reads/writes these and completes at `done_ns`. Cheapest right
  // after query() with the same vectors (their granules are reused); the vectors must not change
  // in between.
  void record(int64_t index, double done_ns, const std::vector<const isa::AccessPattern*>& reads,
              const std::vector<const isa::AccessPattern*>& writes);

 private:
  struct Granule {
    double write_done_ns = 0;
    int64_t writer = -1;
    double read_done_ns = 0;  // latest completion among reads since the last write
    int64_t reader = -1;
  };
  // Calls visit(key) once for every granule key the access pattern touches (query() looks keys up without
  // inserting; record() inserts).
  template <class Visit>
  void for_each_granule(const isa::AccessPattern& ap, Visit&& visit) const;

  const isa::Program& m_program;
  uint64_t m_sbuf_bytes, m_psum_bytes;
  uint32_t m_quadrant_partitions;
  uint64_t m_sbuf_row = 0, m_psum_row = 0, m_psum_base = 0;  // granules per quadrant; PSUM's first index
  struct HbmLayout {
    uint64_t base = 0;  // first granule
    int64_t row_bytes = 1, rows = 1, col_bytes = 1, col_blocks = 1, row_block = 1;
  };
  std::vector<HbmLayout> m_hbm_layout;  // by allocation
  std::vector<Granule> m_granules;
  // Granules of the last query, reused by the record() of the same instruction.
  mutable std::vector<uint64_t> m_read_keys, m_write_keys;
  mutable const void* m_cached_reads = nullptr;
  mutable const void* m_cached_writes = nullptr;
  mutable std::pair<size_t, size_t> m_cached_sizes{0, 0};
};

}  // namespace trnsim::sim
