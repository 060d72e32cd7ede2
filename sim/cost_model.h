// The one cost model: how long each instruction occupies its engine and when its results are
// visible, computed from the hardware config and the published formulas
// (../shared/reference/trainium.md §5–7, §12). Pure functions, no SystemC: the timing model,
// the kernel library's tuning and the tests all call these.
#pragma once

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

// One DMA instruction. A transfer is spread over DMA engines by partition (128 / engines per
// core partitions each, as on hardware); every engine used moves an equal share.
struct DmaCost {
  uint64_t bytes = 0;             // bytes moved (read or written, not both)
  uint32_t first_engine = 0;      // engines used: [first_engine, first_engine + engines)
  uint32_t engines = 1;
  uint64_t descriptors = 0;       // contiguous chunks, all engines together
  double bytes_per_ns_per_engine = 0;  // per-engine rate after efficiency (transpose, read-add-write)
  double fixed_latency_ns = 0;    // per transfer, on each engine
  double descriptor_ns = 0;       // descriptor processing per engine (its share of descriptors)
  double dge_ns = 0;              // hardware descriptor generation before the transfer (hwdge)
  bool reads_hbm = false;
  bool writes_hbm = false;

  // Time on one engine without contention: fixed + descriptors + bytes / rate.
  double engine_ns() const;
};

bool is_dma(const isa::Instruction& inst);
ComputeCost compute_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config);
DmaCost dma_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config);

}  // namespace trnsim::sim
