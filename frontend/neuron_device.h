// The PyTorch device "neuron" seen from outside the torch translation units: plain C++ only, so
// the pybind11 bindings (module.cpp) compile without torch headers. The torch side lives in
// neuron_device.cpp (config, current device), device/ (memory, guard, native ops, fallback, random
// ops) and lowering/ (the ops lowered to the kernel library).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trnsim::frontend {

// The hardware the device simulates. Loaded by load_config(name_or_path, overrides); until
// set_config is called the first use loads $TRNSIM_CONFIG or "trn2".
struct DeviceConfigInfo {
  std::string name;
  std::string source_file;
  std::string hash;
  int device_count = 0;                   // logical cores of the default system
  uint64_t hbm_bytes_per_device = 0;      // chip HBM / logical cores per chip
  double host_link_gbps = 0;
  uint32_t cores_per_device = 1;          // physical cores per logical core (LNC)
  double peak_bf16_tflops_per_device = 0; // tensor-engine peak of one logical core
  bool dma_transpose = true;              // the cores' DMA can transpose (the flash-attention kernels need it)
};

void set_config(const std::string& name_or_path, const std::vector<std::string>& overrides);
DeviceConfigInfo config_info();

int device_count();
int current_device();
void set_device(int index);

struct MemoryStats {
  uint64_t allocated = 0;       // bytes held by live tensors
  uint64_t peak_allocated = 0;  // since the last reset
  uint64_t capacity = 0;        // simulated HBM of this device
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;
};
MemoryStats memory_stats(int device);
void reset_peak_memory_stats(int device);

// Boxed CPU fallback: every op without a native neuron kernel, counted by operator name.
enum class FallbackMode { allow, warn, error };
void set_fallback_mode(const std::string& mode);  // "allow" | "warn" | "error"
std::string fallback_mode();
std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

// Per-device default generators (the device's random ops draw from them).
void manual_seed(int device, uint64_t seed);
uint64_t initial_seed(int device);
std::vector<uint8_t> get_rng_state(int device);  // the generator's state bytes (CPU generator format)
void set_rng_state(int device, const std::vector<uint8_t>& state);

// One row of the lowering table (frontend/lowering/lowering.h): the ATen op, its family (the file
// it lives in) and the out= overloads it also computes.
struct LoweringInfo {
  std::string op;
  std::string family;
  std::vector<std::string> out_forms;
};
std::vector<LoweringInfo> lowering_info();

}  // namespace trnsim::frontend
