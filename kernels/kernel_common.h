// Shared pieces of the kernel library: each kernel builder appends instructions for one
// operation to a ProgramBuilder, reading and writing HBM tensors the caller declared, and
// allocating the SBUF/PSUM buffers it needs. Builders are tuned against the timing model the way
// an NKI author tunes on hardware: large DMAs, stationary reuse, double/triple buffering,
// alternating engines and DMA queues so independent work overlaps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/builder.h"

namespace trnsim::kernels {

// A kernel builder that does not take the spec it was given (a shape, dtype or option outside what
// it implements, a tile that cannot be placed in SBUF); what() says why. The one build failure the
// PyTorch device turns into its counted CPU fallback: any other exception from a builder is a bug.
struct KernelUnsupported : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A kernel that cannot split this shape across the requested cores (it can still run whole on one
// core). The only build failure the device executor turns into a one-core run: anything else a
// split build throws propagates.
struct SplitUnsupported : KernelUnsupported {
  using KernelUnsupported::KernelUnsupported;
};

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
  // This core's contiguous share of `n` work items (contiguous rows keep each core's DMAs local):
  // [begin, begin + size), the first n % cores cores taking one item more.
  Range share(int64_t n) const {
    const int64_t base = n / int64_t(cores), extra = n % int64_t(cores), c = int64_t(core);
    return {c * base + std::min(c, extra), base + (c < extra ? 1 : 0)};
  }
  // The same context as a whole kernel on one core (for a phase that is not split).
  KernelContext single() const {
    KernelContext c = *this;
    c.core = 0;
    c.cores = 1;
    return c;
  }
  uint32_t partitions() const { return config.core.sbuf.partitions; }
};

// This core's contiguous share of a list of work items (see KernelContext::share).
template <typename T>
std::vector<T> my_share(const KernelContext& ctx, const std::vector<T>& items) {
  const Range r = ctx.share(int64_t(items.size()));
  return std::vector<T>(items.begin() + r.begin, items.begin() + r.begin + r.size);
}

// Builds a phase that cannot be split across cores (it combines the work of every row, or it feeds a
// later phase, and cores have no way to wait for one another): every core declares the same
// allocations (the cores' HBM declarations must match), only core 0 keeps the instructions.
template <typename Build>
void on_first_core(const KernelContext& ctx, Build&& build) {
  const size_t mark = ctx.builder.program().instructions.size();
  build(ctx.single());
  if (ctx.core != 0) ctx.builder.mutable_program().instructions.resize(mark);
}

inline isa::Slice all() { return isa::Slice::all(); }
inline isa::Slice at(int64_t i) { return isa::Slice::index(i); }
inline isa::Slice span(int64_t begin, int64_t size) { return isa::Slice::range(begin, begin + size); }
inline isa::Slice span(const Range& r) { return isa::Slice::range(r.begin, r.begin + r.size); }

}  // namespace trnsim::kernels
