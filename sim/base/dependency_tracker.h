// Derives the dependencies between instructions from the memory each reads and writes (RAW,
// WAR, WAW), as the hardware's semaphores enforce them, exact to the byte: two accesses conflict
// only when they touch a common byte (of the same partition for SBUF/PSUM, of the same tensor for
// HBM). Small tensors that share a 256-byte region, disjoint slices of one tile and interleaved
// strided patterns never wait on each other (issue 13: granule-level tracking made a mirrored kernel
// run 24 % slow until its tensors were padded).
// Instructions arrive in program order; for each access the tracker answers when the conflicting
// earlier accesses complete and which instruction that was (for flow arrows).
//
// How: memory is cut into granules (SBUF/PSUM: 128 partitions x a 256-byte run of each; HBM: 128
// rows x a 256-byte run of each row of one tensor) that only index the state. Inside a granule the
// state is exact: a few pieces, each a set of lines (partitions or rows, a 128-bit mask) times a set
// of bytes (a 256-bit mask) with the last writer of those bytes, or the latest-finishing read since
// that write. An access pattern is cut into the same (lines x bytes) fragments; a conflict is a
// non-empty intersection of masks, and recording a write takes its bytes out of the older pieces, so
// every byte keeps exactly its last writer and the reads since.
#pragma once

#include <array>
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
  // after query() with the same vectors or the same patterns (their fragments are reused); the
  // patterns must not change in between.
  void record(int64_t index, double done_ns, const std::vector<const isa::AccessPattern*>& reads,
              const std::vector<const isa::AccessPattern*>& writes);

  // Bytes per line of a granule and lines per granule.
  static constexpr int64_t kGranuleBytes = 256;
  static constexpr int64_t kGranuleLines = 128;
  struct Bytes {  // a set of bytes of one granule's 256-byte run (bit i of w[i / 64]: byte i)
    uint64_t w[4];
  };
  struct Lines {  // a set of lines of one granule (bit i of w[i / 64]: line i)
    uint64_t w[2];
  };

 private:
  struct Piece {  // 64 bytes
    Lines lines;
    Bytes bytes;
    double done_ns;
    // instruction * 2 + 1 for the last write of these bytes, instruction * 2 for the
    // latest-finishing read since that write
    int64_t tag;
    bool write() const { return tag & 1; }
    int64_t instruction() const { return tag >> 1; }
  };
  // The part of one access in a run of consecutive granules of one block: the same lines in each,
  // `head` of the first granule's bytes, `tail` of the last's (columns > 1) and all bytes between.
  struct Fragment {
    uint64_t granule;  // the first
    int64_t columns;
    Lines lines;
    Bytes head, tail;
  };
  struct HbmLayout {
    uint64_t base = 0;       // first granule
    int64_t line_bytes = 1;  // a row of the tensor, or a fixed run of its flat bytes (few or narrow rows)
    int64_t lines = 1;
    int64_t columns = 1;     // granules per block of lines
    int64_t limit = 0;       // bytes of the tensor
  };
  // A granule's pieces are a block of m_pool (capacity 2, 4, 8, ...; freed blocks are reused), so
  // the tracker allocates a few large buffers rather than one per granule.
  struct Granule {
    uint32_t begin = 0, size = 0, capacity = 0;
  };
  class Pieces;  // a granule's pieces as a vector-like view (push_back may move them in m_pool)
  struct Memo {  // the last cut of a pattern
    isa::AccessPattern ap;
    int count = -1;  // fragments kept (-1: none)
    Fragment fragments[2];
  };
  static constexpr size_t kMemoEntries = 256;
  struct Cut {  // the fragments of one list of patterns, by pattern
    std::vector<Fragment> fragments;
    std::vector<std::pair<isa::AccessPattern, std::pair<size_t, size_t>>> spans;  // (copies: the caller's may change)
  };

  // Appends the fragments of `ap` (nothing for an absent or empty pattern). Programs repeat their
  // patterns, so the last cut of each is remembered in a small direct-mapped table (m_memo).
  void fragments(const isa::AccessPattern& ap, std::vector<Fragment>& out) const;
  void cut_pattern(const isa::AccessPattern& ap, std::vector<Fragment>& out) const;
  void cut(const std::vector<const isa::AccessPattern*>& list, Cut& out) const;
  // The fragments of `list`: the last query's when it held the same patterns, else cut now (reusing
  // the last query's fragments of any pattern it had, e.g. a matmul queried without its accumulating
  // dst).
  const std::vector<Fragment>& fragments_of(const std::vector<const isa::AccessPattern*>& list, const Cut& cached);
  Pieces pieces_of(uint64_t granule);
  void record_read(uint64_t granule, const Lines& lines, const Bytes& bytes, double done_ns, int64_t index);
  void record_write(uint64_t granule, const Lines& lines, const Bytes& bytes, double done_ns, int64_t index);

  const isa::Program& m_program;
  // Each registered on-chip memory's granules (config/onchip_memory_units.def), one after another from granule 0.
  struct OnChipLayout {
    int64_t bytes = 0;       // per partition
    int64_t partitions = 0;
    int64_t columns = 0;     // granules per block of lines
    uint64_t base = 0;       // the memory's first granule
  };
  std::array<OnChipLayout, kOnChipMemoryCount> m_onchip{};
  std::vector<HbmLayout> m_hbm_layout;               // by allocation
  uint8_t m_dtype_bytes[256] = {};
  std::vector<Granule> m_granules;  // the on-chip memories', then each HBM tensor's
  std::vector<Piece> m_pool;
  std::vector<std::vector<uint32_t>> m_free_blocks;  // by log2(capacity)
  mutable std::vector<Memo> m_memo;
  // The cuts of the last query, reused by the record() of the same instruction, and scratch.
  mutable Cut m_read_cut, m_write_cut;
  mutable bool m_cut_valid = false;  // the cuts belong to the last query (not yet recorded)
  mutable std::vector<std::pair<int64_t, Lines>> m_blocks;
  std::vector<Fragment> m_recut;
  std::vector<const isa::AccessPattern*> m_reads_only;
  std::vector<Piece> m_parts, m_parts_next;
};

}  // namespace trnsim::sim
