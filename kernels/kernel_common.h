// Shared pieces of the kernel library: each kernel builder appends instructions for one
// operation to a ProgramBuilder, reading and writing HBM tensors the caller declared, and
// allocating the SBUF/PSUM buffers it needs. Builders are tuned against the timing model the way
// an NKI author tunes on hardware: large DMAs, stationary reuse, double/triple buffering,
// alternating engines and DMA queues so independent work overlaps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/builder.h"

namespace trnsim::kernels {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// [begin, begin + size) ranges covering [0, total) in steps of `step` (the last may be short).
struct Range {
  int64_t begin, size;
};
inline std::vector<Range> tiles(int64_t total, int64_t step) {
  std::vector<Range> out;
  for (int64_t b = 0; b < total; b += step) out.push_back({b, std::min(step, total - b)});
  return out;
}

// What every builder gets: where to emit, for which hardware, and a prefix that keeps the names
// of its buffers unique when several kernels share one program.
struct KernelContext {
  isa::ProgramBuilder& builder;
  const HardwareConfig& config;
  std::string prefix;
  // A kernel split across cores: this program is part `core` of `cores` (each core runs its own
  // part; they share HBM). Builders that split give each core whole blocks of the output.
  uint32_t core = 0;
  uint32_t cores = 1;

  std::string name(const std::string& base) const { return prefix + base; }
  bool mine(int64_t work_item) const { return work_item % int64_t(cores) == int64_t(core); }
  uint32_t partitions() const { return config.core.sbuf.partitions; }
};

inline isa::Slice all() { return isa::Slice::all(); }
inline isa::Slice at(int64_t i) { return isa::Slice::index(i); }
inline isa::Slice span(int64_t begin, int64_t size) { return isa::Slice::range(begin, begin + size); }
inline isa::Slice span(const Range& r) { return isa::Slice::range(r.begin, r.begin + r.size); }

}  // namespace trnsim::kernels
