// The device guard (the current device is thread-local: autograd workers set it; one default
// stream per device, synchronous, since the simulator runs each op to completion), the per-device
// default generators and the PrivateUse1 hooks torch asks for both.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/device/device_internal.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"
#include "frontend/neuron_device.h"
#include "frontend/device/sim_generator.h"
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/Resize.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace trnsim::frontend {

namespace {
thread_local c10::DeviceIndex t_current_device = 0;
}  // namespace

c10::DeviceIndex current_device_index() { return t_current_device; }
void set_current_device_index(c10::DeviceIndex index) { t_current_device = index; }

namespace {

// ---------------------------------------------------------------------------------------------
// Device guard: the current device is thread-local (autograd workers set it); one default
// stream per device, synchronous (the simulator runs each op to completion).


struct SimGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  mutable std::atomic<c10::StreamId> next_stream_id_{c10::StreamId(1) << 20};
  c10::DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, current_device_index()); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    TORCH_CHECK(!d.has_index() || d.index() < safe_device_count(), "neuron device index ",
                static_cast<int>(d.index()), " is out of range: the configured system has ", safe_device_count(),
                " devices");
    if (d.has_index()) set_current_device_index(d.index());
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) set_current_device_index(d.index());
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  // torch.Stream("neuron") (DDP makes one to copy inputs between devices): an id of its own. torch.neuron.Stream
  // numbers its streams from 1 and these start at 2^20, so the two never meet; torch.neuron.stream(s) takes either.
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, d, next_stream_id_++);
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(safe_device_count());
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  // Events hold the device's simulated clock when recorded, so elapsed_time is simulated time.
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override { delete static_cast<double*>(event); }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex, const c10::EventFlag) const override {
    if (*event == nullptr) *event = new double(0);
    *static_cast<double*>(*event) = simulated_ns(stream.device_index());
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr, "elapsed_time: both events must have been recorded");
    return (*static_cast<double*>(end) - *static_cast<double*>(start)) / 1e6;  // milliseconds, like CUDA
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

// ---------------------------------------------------------------------------------------------
// Generators and hooks

// The hooks torch asks for the device's generators, devices and pointers. They own the per-device
// default generators (torch hands out references to them, so they live as long as the hooks, i.e.
// the process; a config change keeps them, as CUDA's survive a device reset).
struct SimHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return safe_device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = current_device_index();
    TORCH_CHECK(index < kMaxDevices, "bad neuron device index ", static_cast<int>(index));
    std::lock_guard<std::mutex> lock(generator_mutex_);
    at::Generator& gen = generators_[index];
    if (!gen.defined()) {
      gen = at::make_generator<SimGenerator>(index);
      gen.set_current_seed(c10::detail::getNonDeterministicRandom());
    }
    return gen;
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<SimGenerator>(index < 0 ? current_device_index() : index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    c10::DeviceIndex index = 0;
    hbm_owns(data, &index);
    return at::Device(kNeuron, index);
  }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getCPUAllocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(safe_device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { SimGuardImpl().setDevice(c10::Device(kNeuron, d)); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device_index(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = current_device_index();
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }

 private:
  mutable std::mutex generator_mutex_;
  mutable std::vector<at::Generator> generators_ = std::vector<at::Generator>(kMaxDevices);
};

// Registered once, never destroyed (torch keeps the pointer).
struct HooksRegistrar {
  HooksRegistrar() { at::RegisterPrivateUse1HooksInterface(new SimHooks()); }
} g_hooks_registrar;

}  // namespace

const at::Generator& default_generator(c10::DeviceIndex index) {
  return at::detail::getPrivateUse1Hooks().getDefaultGenerator(index);
}

}  // namespace trnsim::frontend
