// The device "neuron" as seen from outside the torch translation units (neuron_device.h): the
// configured hardware and the current device. The torch side of the device lives in device/
// (memory, guard and generators, native ops, CPU fallback, random ops) and the ops lowered to the
// kernel library in lowering/ (one row per ATen op, lowering.h).
#include "frontend/neuron_device.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config/derived_figures.h"
#include "frontend/device/device_internal.h"
#include "frontend/kernel_executor.h"

namespace trnsim::frontend {
namespace {

// ---------------------------------------------------------------------------------------------
// Configured hardware

std::mutex g_config_mutex;
bool g_config_loaded = false;
DeviceConfigInfo g_config;

void load_locked(const std::string& name, const std::vector<std::string>& overrides) {
  LoadedConfig loaded = load_config(name, overrides);
  DerivedFigures figures = derive_figures(loaded.hardware);
  DeviceConfigInfo info;
  info.name = loaded.hardware.name;
  info.source_file = loaded.source_file;
  info.hash = loaded.hash;
  info.device_count = static_cast<int>(std::min<uint32_t>(figures.default_system_logical_cores, kMaxDevices - 1));
  if (info.device_count < 1) info.device_count = 1;
  uint32_t per_chip = std::max<uint32_t>(1, figures.logical_cores_per_chip);
  info.hbm_bytes_per_device = loaded.hardware.hbm.capacity_bytes / per_chip;
  info.host_link_gbps = loaded.hardware.host_link.bandwidth_gbps;
  info.cores_per_device = cores_per_device(loaded.hardware);
  info.peak_bf16_tflops_per_device = figures.peak_tflops_per_logical_core[DType::bf16];
  info.dma_transpose = loaded.hardware.core.dma.transpose_supported;
  executor_set_hardware(loaded.hardware, loaded.hash);
  g_config = info;
  g_config_loaded = true;
}

const DeviceConfigInfo& config_locked() {
  if (!g_config_loaded) {
    const char* env = std::getenv("TRNSIM_CONFIG");
    load_locked(env && *env ? env : "trn2", {});
  }
  return g_config;
}



}  // namespace

int safe_device_count() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    return config_locked().device_count;
  } catch (...) {
    return 0;
  }
}

void set_config(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  load_locked(name_or_path, overrides);
  if (current_device_index() >= g_config.device_count) set_current_device_index(0);
}

DeviceConfigInfo config_info() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return config_locked();
}

int device_count() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return config_locked().device_count;
}

int current_device() { return current_device_index(); }

void set_device(int index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "neuron device index ", index,
              " is out of range: the configured system has ", device_count(), " devices");
  set_current_device_index(static_cast<c10::DeviceIndex>(index));
}

}  // namespace trnsim::frontend
