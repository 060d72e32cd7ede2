// The PyTorch device "neuron" (PrivateUse1), first slice: simulated HBM allocator with capacity
// and stats, device guard, hooks, the native data-movement and view ops, and a counting boxed
// CPU fallback through which, for now, every compute op runs. The only TU that includes ATen
// (each torch TU costs about a minute of compile time on the 2-core CI machine).
#include "frontend/neuron_device.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "config/config_loader.h"
#include "config/derived_figures.h"

namespace trnsim::frontend {
namespace {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 128;  // c10::DeviceIndex is int8_t

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

// Never throws: used from noexcept guard methods. 0 devices when the config cannot be loaded.
int safe_device_count() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_config_mutex);
    return config_locked().device_count;
  } catch (...) {
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Simulated HBM: host memory standing for device memory, capacity from the config.

std::string format_bytes(uint64_t bytes) {
  std::ostringstream s;
  const double b = static_cast<double>(bytes);
  s << std::fixed << std::setprecision(2);
  if (b >= (1ull << 30)) s << b / (1ull << 30) << " GiB";
  else if (b >= (1ull << 20)) s << b / (1ull << 20) << " MiB";
  else if (b >= (1ull << 10)) s << b / (1ull << 10) << " KiB";
  else s << bytes << " bytes";
  return s.str();
}

struct DeviceMemory {
  c10::CachingDeviceAllocator::Stat bytes;
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;
};

void hbm_delete(void* ptr);

class SimHbmAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex index = current_index();
    const c10::Device device(kNeuron, index);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &hbm_delete, device);
    uint64_t capacity;
    {
      std::lock_guard<std::mutex> lock(g_config_mutex);
      capacity = config_locked().hbm_bytes_per_device;
    }
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    DeviceMemory& mem = memory_[index];
    const uint64_t used = static_cast<uint64_t>(mem.bytes.current);
    if (used + n > capacity) {
      ++mem.num_ooms;
      const uint64_t free_bytes = capacity > used ? capacity - used : 0;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "NEURON out of memory. Tried to allocate ", format_bytes(n),
                       ". Device ", static_cast<int>(index), " has a total capacity of ", format_bytes(capacity),
                       " of which ", format_bytes(free_bytes), " is free. Of the allocated memory ", format_bytes(used),
                       " is allocated by PyTorch. (simulated HBM of the configured hardware; see trnsim.set_config)");
    }
    void* ptr = std::aligned_alloc(64, (n + 63) / 64 * 64);
    TORCH_CHECK_WITH(OutOfMemoryError, ptr != nullptr, "host memory backing the simulated HBM is exhausted (",
                     format_bytes(n), ")");
    blocks_[ptr] = Block{n, index};
    mem.bytes.increase(static_cast<int64_t>(n));
    ++mem.num_allocs;
    return c10::DataPtr(ptr, ptr, &hbm_delete, device);
  }

  void free(void* ptr) {
    if (ptr == nullptr) return;
    {
      std::lock_guard<std::recursive_mutex> lock(mutex_);
      auto it = blocks_.find(ptr);
      if (it != blocks_.end()) {
        memory_[it->second.device].bytes.decrease(static_cast<int64_t>(it->second.size));
        blocks_.erase(it);
      }
    }
    std::free(ptr);
  }

  c10::DeleterFnPtr raw_deleter() const override { return &hbm_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  // c10::DeviceAllocator: what torch.accelerator.memory_* reads.
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const DeviceMemory& mem = memory_[device];
    for (auto* array : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      (*array)[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)] = mem.bytes;
    }
    stats.num_ooms = static_cast<int64_t>(mem.num_ooms);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    memory_[device].bytes.reset_accumulated();
    memory_[device].num_allocs = 0;
    memory_[device].num_ooms = 0;
  }
  void resetPeakStats(c10::DeviceIndex device) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    memory_[device].bytes.reset_peak();
  }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    uint64_t capacity;
    {
      std::lock_guard<std::mutex> lock(g_config_mutex);
      capacity = config_locked().hbm_bytes_per_device;
    }
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const uint64_t used = static_cast<uint64_t>(memory_[device].bytes.current);
    return {capacity > used ? capacity - used : 0, capacity};
  }

  MemoryStats stats(int device) {
    uint64_t capacity;
    {
      std::lock_guard<std::mutex> lock(g_config_mutex);
      capacity = config_locked().hbm_bytes_per_device;
    }
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    const DeviceMemory& mem = memory_[device];
    MemoryStats out;
    out.allocated = static_cast<uint64_t>(mem.bytes.current);
    out.peak_allocated = static_cast<uint64_t>(mem.bytes.peak);
    out.capacity = capacity;
    out.num_allocs = mem.num_allocs;
    out.num_ooms = mem.num_ooms;
    return out;
  }

  bool owns(void* ptr, c10::DeviceIndex* device) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) return false;
    *device = it->second.device;
    return true;
  }

  static c10::DeviceIndex current_index();

 private:
  struct Block {
    size_t size;
    c10::DeviceIndex device;
  };
  std::recursive_mutex mutex_;  // never the GIL: allocate/free run from any thread
  std::unordered_map<void*, Block> blocks_;
  DeviceMemory memory_[kMaxDevices];
};

// Never destroyed: tensors may still be freed while static destructors run at exit.
SimHbmAllocator& g_allocator = *new SimHbmAllocator();
void hbm_delete(void* ptr) { g_allocator.free(ptr); }
REGISTER_ALLOCATOR(kNeuron, &g_allocator)

// ---------------------------------------------------------------------------------------------
// Device guard: the current device is thread-local (autograd workers set it); one default
// stream per device, synchronous (the simulator runs each op to completion).

thread_local c10::DeviceIndex t_current_device = 0;

c10::DeviceIndex SimHbmAllocator::current_index() { return t_current_device; }

struct SimGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNeuron, t_current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    TORCH_CHECK(!d.has_index() || d.index() < safe_device_count(), "neuron device index ",
                static_cast<int>(d.index()), " is out of range: the configured system has ", safe_device_count(),
                " devices");
    if (d.has_index()) t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.has_index()) t_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return c10::Stream(c10::Stream::DEFAULT, d); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(safe_device_count());
  }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex, const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  void synchronizeEvent(void*) const override {}
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

// ---------------------------------------------------------------------------------------------
// Generators and hooks

struct SimGenerator : public at::CPUGeneratorImpl {
  explicit SimGenerator(c10::DeviceIndex index) {
    device_ = c10::Device(kNeuron, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
};

std::mutex g_generator_mutex;
std::vector<at::Generator>& g_generators = *new std::vector<at::Generator>(kMaxDevices);  // never destroyed

const at::Generator& default_generator(c10::DeviceIndex index) {
  if (index < 0) index = t_current_device;
  std::lock_guard<std::mutex> lock(g_generator_mutex);
  at::Generator& gen = g_generators[index];
  if (!gen.defined()) {
    gen = at::make_generator<SimGenerator>(index);
    gen.set_current_seed(c10::detail::getNonDeterministicRandom());
  }
  return gen;
}

struct SimHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return safe_device_count() > 0; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override { return default_generator(index); }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return at::make_generator<SimGenerator>(index < 0 ? t_current_device : index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    c10::DeviceIndex index = 0;
    g_allocator.owns(data, &index);
    return at::Device(kNeuron, index);
  }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getCPUAllocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(safe_device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { SimGuardImpl().setDevice(c10::Device(kNeuron, d)); }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = t_current_device;
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    at::native::resize_bytes_cpu(storage.unsafeGetStorageImpl(), newsize);
  }
};

struct HooksRegistrar {
  HooksRegistrar() { at::RegisterPrivateUse1HooksInterface(new SimHooks()); }
} g_hooks_registrar;

// ---------------------------------------------------------------------------------------------
// Native ops: factories, copies, fill/zero, views, resize/set, scalar read. Device memory is host memory,
// so a device tensor's bytes can be viewed as a CPU tensor without a copy ("host alias").

at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().type() != kNeuron) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

void check_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "neuron supports only strided tensors");
  TORCH_CHECK(!pin_memory.has_value() || !*pin_memory, "pin_memory is for host tensors, not neuron tensors");
}

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, t_current_device)));
  return at::detail::empty_generic(size, &g_allocator, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  c10::DeviceGuard guard(device.value_or(c10::Device(kNeuron, t_current_device)));
  return at::detail::empty_strided_generic(size, stride, &g_allocator,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// Host <-> device and device <-> device. The host link timing lands with the timeline (slice 2).
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy between undefined tensors");
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  at::Tensor src_host = host_alias(self);
  at::Tensor dst_host = host_alias(dst);
  dst_host.copy_(src_host);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) { return at::_local_scalar_dense(host_alias(self)); }

// Memory initialisation (a DMA memset on the device), like the copies; timing lands with slice 2.
at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() > 0) host_alias(self).fill_(value);
  return self;
}

at::Tensor& zero(at::Tensor& self) { return fill_scalar(self, 0); }

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> fmt) {
  return at::native::resize_(self, size, fmt);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                        c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, std::move(source), offset, size, stride);
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return at::native::set_storage_cpu_(self, std::move(source), 0, {elements}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) { return at::native::set_tensor_(self, source); }

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_allocator, /*resizable=*/true);
  return at::native::set_storage_cpu_(self, std::move(storage), 0, {0}, {});
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  return at::native::unfold(self, dim, size, step);
}
at::Tensor view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("_local_scalar_dense", local_scalar_dense);
  m.impl("fill_.Scalar", fill_scalar);
  m.impl("zero_", zero);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  m.impl("_reshape_alias", reshape_alias);
  m.impl("resize_", resize);
  m.impl("set_.source_Storage_storage_offset", set_storage);
  m.impl("set_.source_Storage", set_source_storage);
  m.impl("set_.source_Tensor", set_source_tensor);
  m.impl("set_", set_empty);
  m.impl("unfold", unfold);
  m.impl("view_as_real", view_as_real);
  m.impl("view_as_complex", view_as_complex);
}

// ---------------------------------------------------------------------------------------------
// Boxed CPU fallback: counts every op by name; TRNSIM_FALLBACK=allow|warn|error.

std::mutex g_fallback_mutex;
FallbackMode g_fallback_mode = FallbackMode::warn;
std::map<std::string, int64_t> g_fallback_counts;
std::unordered_set<std::string> g_fallback_warned;

struct FallbackEnv {
  FallbackEnv() {
    const char* env = std::getenv("TRNSIM_FALLBACK");
    if (env && *env) {
      try {
        set_fallback_mode(env);
      } catch (...) {
      }
    }
  }
} g_fallback_env;

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  FallbackMode mode;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_fallback_mutex);
    mode = g_fallback_mode;
    if (mode != FallbackMode::error) {
      ++g_fallback_counts[full];
      first = g_fallback_warned.insert(full).second;
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(mode != FallbackMode::error, "The operator '", full,
                              "' has no neuron kernel and TRNSIM_FALLBACK=error forbids running it on the CPU. "
                              "Set TRNSIM_FALLBACK=warn or allow to let it fall back.");
  if (mode == FallbackMode::warn && first) {
    TORCH_WARN("The operator '", full,
               "' has no neuron kernel yet; it runs on the CPU (copies to the host and back). "
               "trnsim.fallback_report() lists such ops; TRNSIM_FALLBACK=allow silences this, =error forbids it.");
  }
  at::native::cpu_fallback(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>()); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// The plain-C++ interface of neuron_device.h

void set_config(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  load_locked(name_or_path, overrides);
  if (t_current_device >= g_config.device_count) t_current_device = 0;
}

DeviceConfigInfo config_info() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return config_locked();
}

int device_count() {
  std::lock_guard<std::mutex> lock(g_config_mutex);
  return config_locked().device_count;
}

int current_device() { return t_current_device; }

void set_device(int index) {
  TORCH_CHECK(index >= 0 && index < device_count(), "neuron device index ", index,
              " is out of range: the configured system has ", device_count(), " devices");
  t_current_device = static_cast<c10::DeviceIndex>(index);
}

MemoryStats memory_stats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "bad neuron device index ", device);
  return g_allocator.stats(device);
}

void reset_peak_memory_stats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "bad neuron device index ", device);
  g_allocator.resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

void set_fallback_mode(const std::string& mode) {
  FallbackMode m;
  if (mode == "allow") m = FallbackMode::allow;
  else if (mode == "warn") m = FallbackMode::warn;
  else if (mode == "error") m = FallbackMode::error;
  else TORCH_CHECK(false, "TRNSIM_FALLBACK must be allow, warn or error, not '", mode, "'");
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_fallback_mode = m;
}

std::string fallback_mode() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  switch (g_fallback_mode) {
    case FallbackMode::allow: return "allow";
    case FallbackMode::warn: return "warn";
    case FallbackMode::error: return "error";
  }
  return "warn";
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  return g_fallback_counts;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(g_fallback_mutex);
  g_fallback_counts.clear();
  g_fallback_warned.clear();
}

void manual_seed(int device, uint64_t seed) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_current_seed(seed);
}

uint64_t initial_seed(int device) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.current_seed();
}

}  // namespace trnsim::frontend
