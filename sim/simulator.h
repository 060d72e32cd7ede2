// Runs a program on the timing model: builds the SystemC chip for it, runs the SystemC kernel,
// and returns the statistics, the trace and (unless timing-only) the memories with the values
// the interpreter computed.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/core_state.h"
#include "isa/interpreter.h"
#include "sim/stats.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::sim {

struct SimOptions {
  std::vector<uint32_t> cores = {0};  // physical cores that run the program (SPMD)
  bool timing_only = false;           // skip values; timing is identical
  bool trace = false;
  double quantum_ns = 10000;          // temporal-decoupling quantum between cores
  isa::InterpreterOptions interpreter;
  // Recycled SBUF/PSUM images for the cores' states (not owned; nullptr = fresh mappings per simulation).
  isa::MemoryImagePool* image_pool = nullptr;
  // The first core's HBM buffers as the caller prepared them (some bound to host memory: isa::HbmBuffer::bind);
  // nullptr = owned, zero-filled ones. Not used for the scratch run of control flow that reads tensor values.
  std::shared_ptr<isa::HbmStore> hbm_store;
  // Collectives (all_reduce, ...): the config system their ranks' transfers cross (empty: the config's
  // default_system) and how many ranks sit on one chip of it (0: the chip's physical cores, so on one chip every
  // core is a rank of it; 1 on a multi-chip system: core r stands for a rank on chip r).
  std::string collective_system;
  uint32_t collective_ranks_per_chip = 0;
};

struct SimResult {
  SimStats stats;
  std::unique_ptr<TraceWriter> trace;                  // when SimOptions::trace
  std::vector<std::unique_ptr<isa::CoreState>> states;  // one per core with values; empty when timing-only
};

// The same program on every core of options.cores (SPMD), each core with its own memories.
// `prepare` (optional) fills each core's memories (e.g. HBM inputs) before the run.
SimResult simulate(const isa::Program& program, const HardwareConfig& config, const std::string& config_hash,
                   const SimOptions& options,
                   const std::function<void(uint32_t core, isa::CoreState& state)>& prepare = nullptr);

// One program per core of options.cores (a kernel split across cores). With `shared_hbm` the
// cores share one HBM (the programs must declare the same allocations); `prepare` is then
// called once, for the first core.
SimResult simulate(const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
                   const std::string& config_hash, const SimOptions& options,
                   const std::function<void(uint32_t core, isa::CoreState& state)>& prepare, bool shared_hbm);

}  // namespace trnsim::sim
