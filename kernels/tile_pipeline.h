// Helpers shared by the element-wise, reduction and normalization kernels: raw access patterns
// over HBM tensors and SBUF buffers, DMA emission, and the SBUF budget of a tile ring.
//
// Schedule conventions of these (HBM-bound) kernels:
//  - rows on partitions, the contiguous dim on the free axis, so each partition's DMA run is one
//    contiguous stretch of HBM (one descriptor per partition);
//  - tiles sized to ~kTargetDmaBytesPerPartition per partition: the DMA cost model pays a fixed
//    start-up plus one descriptor per partition per engine, so below ~2 KiB the overhead dominates;
//  - kRingDepth buffers per tile role, loads on one DMA queue and stores on another, and the loads
//    emitted one tile ahead of the compute, so load(t+1), compute(t) and store(t-1) overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "isa/view.h"
#include "kernels/kernel_common.h"

namespace trnsim::kernels::detail {

// Four buffers per role: a DMA engine serves its transfers in program order, so loads must be
// emitted far enough ahead of the stores that wait on compute (4 measured best for bf16 add).
constexpr int kRingDepth = 4;
// Per-partition bytes of one tile's DMA: 16 KiB keeps every descriptor element far above the
// ~2 KiB where descriptor processing stops bounding an engine (config dma.descriptor_processing_ns
// x bandwidth) and amortises the ~110 ns start-up per engine (dma.fixed_latency_ns) to ~2% of the
// 128 x 16 KiB / (16 engines x 27.2 GB/s) = 4.8 us transfer, while keeping the pipeline fill short.
constexpr int64_t kTargetDmaBytesPerPartition = 16 * 1024;
// DMA queues: loads, stores and once-loaded constants (weights) on separate queues.
constexpr int64_t kLoadQueue = 0;
constexpr int64_t kStoreQueue = 1;
constexpr int64_t kConstQueue = 2;

// SBUF bytes per partition not yet used by the program's allocations (the builder's bump allocator
// never frees), minus a small reserve for [P, 1] statistics buffers.
inline int64_t sbuf_free_bytes(const KernelContext& ctx) {
  uint64_t used = 0;
  for (const isa::Allocation& a : ctx.builder.program().allocations) {
    if (a.space == isa::MemorySpace::sbuf) used = std::max(used, a.base_byte + a.bytes_per_partition());
  }
  constexpr int64_t kReserve = 4096;  // room for the small per-row buffers a kernel adds later
  return int64_t(ctx.config.core.sbuf.bytes_per_partition) - int64_t(used) - kReserve;
}

// An HBM access pattern: `dims` = partition (stride, size) pair, then up to 4 free dims.
inline isa::AccessPattern hbm_ap(const KernelContext& ctx, uint32_t tensor, int64_t offset,
                                 const std::vector<isa::ApDim>& dims) {
  return isa::raw_access_pattern(ctx.builder.program(), tensor, offset, dims);
}

// An SBUF access pattern over partitions [0, partitions) of `buffer`, free dims `free`.
inline isa::AccessPattern sb_ap(const KernelContext& ctx, uint32_t buffer, uint32_t partitions,
                                const std::vector<isa::ApDim>& free, int64_t offset = 0) {
  std::vector<isa::ApDim> dims{{0, partitions}};
  dims.insert(dims.end(), free.begin(), free.end());
  return isa::raw_access_pattern(ctx.builder.program(), buffer, offset, dims);
}
inline isa::AccessPattern sb2(const KernelContext& ctx, uint32_t buffer, int64_t partitions, int64_t free,
                              int64_t offset = 0) {
  return sb_ap(ctx, buffer, uint32_t(partitions), {{1, uint32_t(free)}}, offset);
}

inline void dma(const KernelContext& ctx, const isa::AccessPattern& dst, const isa::AccessPattern& src,
                int64_t queue) {
  ctx.builder.emit(isa::Opcode::dma_copy).tensor("dst", dst).tensor("src", src).imm("queue", double(queue));
}

// A ring of kRingDepth SBUF buffers [P, free] of one dtype.
struct Ring {
  std::vector<uint32_t> buffers;
  uint32_t operator[](int64_t i) const { return buffers[size_t(i) % buffers.size()]; }
};
inline Ring make_ring(const KernelContext& ctx, const std::string& name, DType dtype, int64_t free,
                      int depth = kRingDepth) {
  Ring ring;
  for (int i = 0; i < depth; ++i) {
    ring.buffers.push_back(
        ctx.builder.sbuf(ctx.name(name + std::to_string(i)), dtype, {ctx.partitions(), uint32_t(std::max<int64_t>(1, free))}));
  }
  return ring;
}

// Pads the SBUF allocator to the next 256-byte boundary (the dependency granule; allocations are only
// 64-byte aligned), so that ring slots whose size is a multiple of 256 bytes never share a granule with
// their neighbours (which would make the engines using neighbouring slots wait on each other).
inline void align_sbuf_to_granule(const KernelContext& ctx, const std::string& name) {
  uint64_t used = 0;
  for (const isa::Allocation& a : ctx.builder.program().allocations) {
    if (a.space == isa::MemorySpace::sbuf) used = std::max(used, a.base_byte + a.bytes_per_partition());
  }
  constexpr uint64_t kGranule = 256, kAllocAlign = 64;  // isa/builder.cpp: allocations start 64-byte aligned
  used = (used + kAllocAlign - 1) / kAllocAlign * kAllocAlign;
  if (used % kGranule != 0) {
    ctx.builder.sbuf(ctx.name(name), DType::fp32, {ctx.partitions(), uint32_t((kGranule - used % kGranule) / 4)});
  }
}

// Software-pipelined loads: load(k) for the first `ahead` steps, then at each step k the load of
// step k + ahead before body(k), so the DMA of later steps overlaps the compute of this one (the
// ring holds ahead + 1 slots).
template <typename Load, typename Body>
void pipelined(size_t steps, size_t ahead, Load&& load, Body&& body) {
  for (size_t k = 0; k < std::min(ahead, steps); ++k) load(k);
  for (size_t k = 0; k < steps; ++k) {
    if (k + ahead < steps) load(k + ahead);
    body(k);
  }
}

inline int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
inline std::vector<uint32_t> to_u32(const std::vector<int64_t>& shape) {
  std::vector<uint32_t> out;
  for (int64_t d : shape) out.push_back(uint32_t(d));
  if (out.empty()) out.push_back(1);
  return out;
}

}  // namespace trnsim::kernels::detail
