// Runs kernel-library programs for the PyTorch device with values (interpreter) and time (timing
// model). Plain C++: no torch headers, so the torch TU hands it host pointers and the op's specs.
// Keeps the per-device simulated clock and the per-op log (the profiler's raw material) and a
// cache of built programs keyed by (op, shapes, dtypes).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/dtype.h"
#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::frontend {

// The hardware programs are built for and simulated on; set by set_config (clears the cache).
void executor_set_hardware(const HardwareConfig& config, const std::string& hash);

// One HBM allocation of the program bound to host memory. `dtype` is the dtype of the host
// bytes; when it differs from the allocation's dtype the values are converted (a cast).
struct HostBuffer {
  std::string allocation;
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::fp32;
};

struct OpRecord {
  std::string op;
  std::vector<std::vector<int64_t>> shapes;  // input shapes
  std::string dtype;
  int device = 0;
  double ns = 0;
  uint64_t flops = 0;
  double mfu = 0;
  std::string bottleneck;  // the busiest engine ("tensor", "vector", "scalar", "gpsimd", "dma")
};

using ProgramBuilderFn = std::function<isa::Program(const HardwareConfig&)>;

// Builds (or takes from the cache, by `key`) the program, copies `inputs` into its HBM
// allocations, simulates it on one core with values, copies `outputs` back, advances the
// device's simulated clock and appends to the op log. Returns the op's record.
OpRecord execute_program(int device, const std::string& key, const ProgramBuilderFn& build,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record);

double simulated_ns(int device);  // device < 0: all devices together
void reset_simulated_time();
std::vector<OpRecord> op_log();
void reset_op_log();
size_t program_cache_size();

}  // namespace trnsim::frontend
