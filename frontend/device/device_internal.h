// What the torch translation units of the device (device/*.cpp, neuron_device.cpp) share: the
// current device, the simulated-HBM allocator, the default generators and the fallback's copy
// scope. Include only from torch TUs.
#pragma once

#include <ATen/ATen.h>

#include <memory>

namespace trnsim::frontend {

class DeviceRuntime;

// The runtime the device runs on (the configured one; loads $TRNSIM_CONFIG or trn2 on first use).
std::shared_ptr<DeviceRuntime> device_runtime();

constexpr int kMaxDevices = 128;  // c10::DeviceIndex is int8_t
// Timing-only mode: host->device copies up to this size keep their bytes (copy_from). A simulator policy, not a
// hardware figure: large enough for index and metadata tensors, small enough that weights still cost no host memory.
constexpr size_t kTimingOnlyKeptCopyBytes = size_t(1) << 20;

// The configured system's device count; never throws (0 when the config cannot be loaded), for
// the guard's noexcept methods.
int safe_device_count() noexcept;

// The current device of this thread (autograd workers set their own).
c10::DeviceIndex current_device_index();
void set_current_device_index(c10::DeviceIndex index);

c10::Allocator* hbm_allocator();
// Whether `ptr` is a live allocation of the device's HBM, and on which device.
bool hbm_owns(void* ptr, c10::DeviceIndex* device);

// The device's default generator (created, seeded non-deterministically, on first use).
const at::Generator& default_generator(c10::DeviceIndex index);

// While alive (the CPU fallback moving an op's arguments and results), host <-> device copies are
// not charged: the fallback's own record charges those transfers.
class InFallbackScope {
 public:
  InFallbackScope();
  ~InFallbackScope();

 private:
  bool previous_;
};
bool in_fallback();

}  // namespace trnsim::frontend
