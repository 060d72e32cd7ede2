// The one cost model: how long each instruction occupies its engine and when its results are
// visible, computed from the hardware config and the published formulas
// (../shared/reference/trainium.md §5–7, §12). Pure functions, no SystemC: the timing model,
// the kernel library's tuning and the tests all call these.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::sim {

// A compute instruction (Tensor, Vector, Scalar, GpSimd, Sync) on its engine.
struct ComputeCost {
  Engine engine = Engine::sync;
  double clock_ghz = 1;
  double occupancy_cycles = 0;  // the engine is busy this long (initiation interval)
  double latency_cycles = 0;    // further cycles until dependents may start (pipeline, sync)
  uint32_t performance_mode = 1;  // 1, 2 or 4 (Vector/Scalar perf modes)
  uint64_t elements = 0;        // N: elements per partition the cost was computed from
  uint64_t flops = 0;           // matmul: 2*K*M*N; 0 for other instructions
  DType flops_dtype = DType::bf16;  // the dtype whose peak the FLOPs count against (MFU)

  double occupancy_ns() const { return occupancy_cycles / clock_ghz; }
  double latency_ns() const { return latency_cycles / clock_ghz; }
};

// Most HBM channels of one stack the model tracks (config hbm.channels_per_stack is at most this).
constexpr uint32_t kMaxHbmChannels = 64;

// One DMA instruction (trainium.md §7). A transfer is spread over DMA engines by partition
// (128 / engines per core partitions each, as on hardware); every engine used moves an equal
// share. Each engine processes its share's descriptor elements (chunks contiguous on both sides)
// in order: an element takes at least descriptor_processing_ns, and the share at least its bytes
// over the engine's bandwidth, so small elements bound throughput, not only latency.
struct DmaCost {
  uint64_t bytes = 0;             // bytes moved (read or written, not both)
  uint32_t first_engine = 0;      // engines used: [first_engine, first_engine + engines)
  uint32_t engines = 1;
  uint64_t descriptors = 0;       // descriptors (contiguous runs of the less fragmented side), all engines together
  uint64_t chunks = 0;            // chunks contiguous on both sides, all engines together
  uint32_t min_chunk_bytes = 1;   // engine time a chunk takes at least, in bytes
  double bytes_per_ns_per_engine = 0;  // per-engine rate after efficiency (transpose, read-add-write)
  double start_latency_ns = 0;    // trigger -> engines start (not engine time; hidden in a busy queue)
  double fixed_latency_ns = 0;    // per transfer, on each engine (engine time)
  double descriptor_ns = 0;       // processing of the engine's share of the descriptors (engine time)
  double dge_ns = 0;              // hardware descriptor generation before the transfer (hwdge)
  double gpsimd_ns = 0;           // software descriptor generation on the GpSimd engine (swdge, indirect DMA)
  bool reads_hbm = false;
  bool writes_hbm = false;
  // HBM bytes of the transfer on each channel of its stack (modular interleave); channels == 0
  // when the addresses spread evenly (hashed interleave) or the transfer does not touch HBM.
  uint32_t hbm_channels = 0;
  std::array<uint64_t, kMaxHbmChannels> hbm_channel_bytes{};

  // Bytes one engine moves.
  double bytes_per_engine() const { return double(bytes) / std::max<uint32_t>(1, engines); }
  // Time each engine is busy with the transfer: fixed + max(descriptors, data), data =
  // max(bytes, chunks x min_chunk_bytes) / rate.
  double engine_ns() const;
  double data_ns_per_engine() const;
  // Share of the stack's bandwidth the transfer can use: its bytes over engines x bytes on its busiest
  // channel (1 when hashed or spread evenly).
  double hbm_channel_efficiency() const;
};

bool is_dma(const isa::Instruction& inst);
ComputeCost compute_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config);
DmaCost dma_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config);

// Bytes of an HBM access pattern on each of `channels` channels when consecutive `granule`-byte
// blocks of addresses go to consecutive channels (modular interleave), counting from the tensor's
// start (HBM tensors are assumed to start on a channels x granule boundary). Returns false (and
// leaves `bytes` alone) when the pattern is too irregular to count cheaply; treat it as spread evenly.
bool hbm_channel_bytes(const isa::AccessPattern& ap, uint32_t channels, uint32_t granule,
                       std::array<uint64_t, kMaxHbmChannels>& bytes);

}  // namespace trnsim::sim
