// What a simulation reports (`--stats FILE` writes it as JSON): simulated time, per-engine busy
// time and utilisation, FLOPs and MFU against the config's peak, DMA traffic, on-chip memory
// high-water marks, and the simulator's own speed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "config/units.h"

namespace trnsim::sim {

struct EngineStats {
  double busy_ns = 0;
  uint64_t instructions = 0;
};

struct SimStats {
  double total_ns = 0;   // the program body: from the launch's end to the last instruction's completion
  double launch_ns = 0;  // the kernel execution's fixed cost before the body (config chip.kernel_launch_ns)
  double total_cycles = 0;  // in the chip's base clock (chip.base_clock_ghz)
  std::string config_name;
  std::string config_hash;
  std::map<std::string, uint64_t> instructions;  // by opcode
  std::map<std::string, EngineStats> engines;    // "core0.tensor", ..., "core0.dma" (all queues)
  uint64_t flops = 0;
  std::string flops_dtype;
  double peak_tflops = 0;  // of the cores used, for flops_dtype
  uint64_t dma_bytes = 0;
  uint64_t hbm_bytes = 0;
  // Per registered on-chip memory (config/onchip_memory_units.def): <name>_high_water_bytes, per core, the largest.
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) uint64_t name##_high_water_bytes = 0;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  uint64_t& high_water_bytes(OnChipMemory memory);
  uint64_t high_water_bytes(OnChipMemory memory) const { return const_cast<SimStats*>(this)->high_water_bytes(memory); }
  uint32_t cores = 1;
  double host_seconds = 0;
  uint64_t simulated_instructions = 0;

  double execution_ns() const { return launch_ns + total_ns; }  // one launch, end to end
  double achieved_tflops() const { return total_ns > 0 ? flops / total_ns / 1e3 : 0; }
  double mfu() const { return peak_tflops > 0 ? achieved_tflops() / peak_tflops : 0; }
  double dma_achieved_gbps() const { return total_ns > 0 ? dma_bytes / total_ns : 0; }
  double instructions_per_host_second() const {
    return host_seconds > 0 ? simulated_instructions / host_seconds : 0;
  }
  double utilization(const std::string& engine) const;

  std::string to_json() const;   // the --stats file
  std::string summary() const;   // the short text trnsim run prints
};

}  // namespace trnsim::sim
