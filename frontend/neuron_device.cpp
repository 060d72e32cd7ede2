// The device "neuron" as seen from outside the torch translation units (neuron_device.h): the
// configured hardware and the current device. The torch side of the device lives in device/
// (memory, guard and generators, native ops, CPU fallback, random ops) and the ops lowered to the
// kernel library in lowering/ (one row per ATen op, lowering.h).
#include "frontend/neuron_device.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "config/derived_figures.h"
#include "frontend/device/device_internal.h"
#include "frontend/device_runtime.h"
#include "frontend/kernel_executor.h"

namespace trnsim::frontend {
namespace {

std::mutex g_config_mutex;  // one config load at a time

std::optional<FallbackMode> parse_fallback_mode(const std::string& mode) {
  if (mode == "allow") return FallbackMode::allow;
  if (mode == "warn") return FallbackMode::warn;
  if (mode == "error") return FallbackMode::error;
  return std::nullopt;
}

// Loads the config and makes a runtime for it current (the previous one hands the session over);
// the first runtime takes its fallback mode from TRNSIM_FALLBACK.
std::shared_ptr<DeviceRuntime> load_locked(const std::string& name, const std::vector<std::string>& overrides) {
  const bool first = current_runtime_or_null() == nullptr;
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
  executor_describe_config(name, overrides, loaded.source_file);
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  runtime->set_device_info(info);
  if (first) {
    const char* env = std::getenv("TRNSIM_FALLBACK");
    if (env && *env) {
      std::optional<FallbackMode> mode = parse_fallback_mode(env);
      TORCH_CHECK(mode, "TRNSIM_FALLBACK must be allow, warn or error, not '", env, "'");
      runtime->set_fallback_mode(*mode);
    }
  }
  return runtime;
}

std::shared_ptr<DeviceRuntime> runtime_locked() {
  if (std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null()) return runtime;
  const char* env = std::getenv("TRNSIM_CONFIG");
  return load_locked(env && *env ? env : "trn2", {});
}

}  // namespace

std::shared_ptr<DeviceRuntime> device_runtime() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return runtime_locked();
}

int safe_device_count() noexcept {
  try {
    return device_runtime()->device_info().device_count;
  } catch (const std::exception&) {  // e.g. a $TRNSIM_CONFIG that does not load: the next call raises it
    return 0;
  }
}

void set_config(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  std::shared_ptr<DeviceRuntime> runtime = load_locked(name_or_path, overrides);
  if (current_device_index() >= runtime->device_info().device_count) set_current_device_index(0);
}

DeviceConfigInfo config_info() { return device_runtime()->device_info(); }

int device_count() { return config_info().device_count; }

void set_fallback_mode(const std::string& mode) {
  std::optional<FallbackMode> m = parse_fallback_mode(mode);
  TORCH_CHECK(m, "TRNSIM_FALLBACK must be allow, warn or error, not '", mode, "'");
  device_runtime()->set_fallback_mode(*m);
}

std::string fallback_mode() {
  switch (device_runtime()->fallback_mode()) {
    case FallbackMode::allow: return "allow";
    case FallbackMode::warn: return "warn";
    case FallbackMode::error: return "error";
  }
  return "warn";
}

std::map<std::string, int64_t> fallback_counts() { return device_runtime()->fallback_counts(); }

void reset_fallback_counts() { device_runtime()->reset_fallback_counts(); }

int current_device() { return current_device_index(); }

void set_device(int index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "neuron device index ", index,
              " is out of range: the configured system has ", device_count(), " devices");
  set_current_device_index(static_cast<c10::DeviceIndex>(index));
}

}  // namespace trnsim::frontend
