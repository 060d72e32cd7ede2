// The PyTorch device "neuron" (PrivateUse1): simulated HBM allocator with capacity and stats,
// device guard, hooks, the native data-movement and view ops, the ops lowered to the kernel
// library and run on the simulator (kernel_executor), and a counting boxed CPU fallback for the rest.
// One of the few TUs that include ATen (each costs about a minute of compile time on the 2-core CI
// machine): it and nn_lowering.cpp share lowering_support.h.
#include "frontend/neuron_device.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/native/transformers/attention.h>
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
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "config/config_loader.h"
#include "config/derived_figures.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"
#include "kernels/attention.h"
#include "kernels/attention_backward.h"
#include "kernels/data_movement.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "kernels/matmul.h"
#include "kernels/normalization.h"
#include "kernels/reduction.h"
#include "kernels/scan.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::BinarySpec;
using kernels::MatmulSpec;
using kernels::ReduceOp;
using kernels::ReduceSpec;
using kernels::WhereSpec;
using kernels::UnaryOp;
using kernels::UnarySpec;

constexpr int kMaxDevices = 128;  // c10::DeviceIndex is int8_t

// ---------------------------------------------------------------------------------------------
// Configured hardware

std::mutex g_config_mutex;
bool g_config_loaded = false;
DeviceConfigInfo g_config;
bool g_dma_transpose = true;  // the configured core's DMA can transpose (flash attention needs it)

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
  executor_set_hardware(loaded.hardware, loaded.hash);
  g_dma_transpose = loaded.hardware.core.dma.transpose_supported;
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
  at::Tensor alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  // The lazy conjugate / negative bits are tensor metadata, not storage: keep them, so a copy of a
  // conj() view materialises the conjugate as the CPU does.
  if (t.is_conj()) alias = at::_conj(alias);
  if (t.is_neg()) alias = at::_neg_view(alias);
  return alias;
}

// Integers the engines' fp32 arithmetic represents exactly: the kernels compute integer ops in fp32,
// so a lowering runs them only when every input and result stays within this bound.
constexpr double kExactIntegerBound = 16777216.0;  // 2^24

// The dtype an element-wise kernel reads a tensor of `t` as: floats as they are, bool / uint8 as
// uint8, other integers as int32 (int64 narrowed on the host: the ISA has no 64-bit integers; an
// int64 operand's HBM traffic is therefore counted at 4 bytes per element).
std::optional<DType> elementwise_dtype(at::ScalarType t) {
  if (std::optional<DType> f = sim_dtype(t)) return f;
  switch (t) {
    case at::kBool: case at::kByte: return DType::uint8;
    case at::kChar: return DType::int8;
    case at::kShort: return DType::int16;
    case at::kInt: case at::kLong: return DType::int32;
    default: return std::nullopt;
  }
}

// Largest integer magnitude a float dtype holds exactly (an integer operand torch casts to it first).
double exact_integer_limit(at::ScalarType t) {
  return t == at::kBFloat16 ? 256.0 : t == at::kHalf ? 2048.0 : kExactIntegerBound;
}

double host_max_abs(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  const at::Tensor h = host_alias(t);
  return h.scalar_type() == at::kBool ? 1.0 : h.abs().max().item<double>();
}

// The ISA has no 64-bit integers: a dense int64 tensor is read as an int32 host copy of its values
// (the caller has checked that they fit), others as they are.
at::Tensor kernel_input(const at::Tensor& dense) {
  return dense.scalar_type() == at::kLong ? host_alias(dense).to(at::kInt) : dense;
}

// A kernel's output buffer for a dense result, in storage order: an int64 result is written to an
// int32 staging buffer and widened into the result's storage by finish().
struct KernelResult {
  at::Tensor result, staging;
  explicit KernelResult(at::Tensor dense) : result(std::move(dense)) {
    if (result.scalar_type() == at::kLong) staging = at::empty({result.numel()}, at::kInt);
  }
  HostBuffer buffer(const std::string& name) const {
    return HostBuffer{name, (staging.defined() ? staging : result).data_ptr(), size_t(result.numel()),
                      *elementwise_dtype(result.scalar_type())};
  }
  at::Tensor finish() const {
    if (staging.defined()) at::from_blob(result.data_ptr(), {result.numel()}, result.options().device(at::kCPU)).copy_(staging);
    return result;
  }
};

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

OpRecord copy_record(const std::string& op, const at::Tensor& t) {
  OpRecord r;
  r.op = op;
  r.shapes.push_back(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
  r.dtype = c10::toString(t.scalar_type());
  return r;
}

// A non-dense view (a slice, a strided window) made contiguous: one DMA pattern over the storage span
// the view reaches, same dtype only.
bool strided_copy_kernel(const at::Tensor& src, const at::Tensor& dst) {
  const std::optional<DType> dt = sim_dtype(src.scalar_type());
  if (!dt || src.scalar_type() != dst.scalar_type() || src.numel() == 0) return false;
  kernels::StridedCopySpec spec;
  spec.dtype = *dt;
  int64_t span = 1;
  for (int64_t d = 0; d < src.dim(); ++d) {
    if (src.stride(d) < 0) return false;
    spec.shape.push_back(src.size(d));
    spec.src_strides.push_back(src.stride(d));
    span += (src.size(d) - 1) * src.stride(d);
  }
  if (span > std::numeric_limits<uint32_t>::max()) return false;
  spec.src_elements = span;
  std::ostringstream key;
  key << "strided_copy|" << dims_key(src.sizes()) << dims_key(src.strides()) << "|" << span << "|"
      << dtype_name(*dt);
  OpRecord record = copy_record("copy device->device", src);
  const HostBuffer source{"x", src.data_ptr(), static_cast<size_t>(span), *dt};
  try {
    execute_program(dst.device().index(), key.str(),
                    [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                      return kernels::strided_copy_program(spec, hw, core, cores);
                    },
                    {source}, {buffer("y", dst)}, std::move(record));
  } catch (const std::invalid_argument&) {
    return false;
  }
  return true;
}

// An integer (or bool) tensor cast to a float dtype: the DMA converts on the way (through fp32 with
// RNE, which is torch's conversion while |value| <= 2^24; int64 narrowed to int32 on the host
// first). Larger values are left to the host copy.
bool integer_to_float_kernel(const at::Tensor& src, const at::Tensor& dst) {
  if (src.numel() == 0 || !dst.is_contiguous()) return false;
  const bool wide = c10::elementSize(src.scalar_type()) >= 4;
  if (wide && host_alias(src).abs().max().item<double>() > kExactIntegerBound) return false;
  const at::Tensor stored = kernel_input(src);
  const DType in_dt = *elementwise_dtype(src.scalar_type());
  kernels::UnarySpec spec;
  spec.shape = {src.numel()};
  spec.op = UnaryOp::copy;
  spec.input_dtype = in_dt;
  spec.output_dtype = *sim_dtype(dst.scalar_type());
  OpRecord record = copy_record("cast", src);
  try {
    execute_program(dst.device().index(),
                    "cast|" + std::to_string(src.numel()) + "|" + std::string(dtype_name(in_dt)) + ">" +
                        std::string(dtype_name(spec.output_dtype)),
                    [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::unary_program(spec, hw, core, cores); },
                    {HostBuffer{"x", stored.data_ptr(), size_t(src.numel()), in_dt}}, {buffer("y", dst)}, std::move(record));
  } catch (const std::invalid_argument&) {
    return false;
  }
  return true;
}

// A copy within one device as a kernel (values and time from the simulator): into a contiguous
// destination from any dense source (a permutation of contiguous storage: .contiguous() after
// transpose/permute) of the same float dtype (permute kernel: DMA, or PE transposes when the
// innermost dim moves), any other strided view of the same dtype (strided DMA), or a cast between
// contiguous float tensors (unary copy kernel). Returns false for what it does not cover (integer
// dtypes, a cast with a strided source, other devices).
bool device_copy_kernel(const at::Tensor& src, const at::Tensor& dst) {
  // Between two logical cores of the chip too: the destination's DMA engines read the other core's
  // HBM (one chip in the simulated system), on the destination's clock.
  if (src.sizes() != dst.sizes()) return false;
  if (!dst.is_contiguous()) {
    // A dense destination in another dim order (e.g. `.to(dtype)` of a transposed tensor keeps its
    // strides): both viewed in the destination's storage order, where it is contiguous.
    if (!dst.is_non_overlapping_and_dense()) return false;
    std::vector<int64_t> order(static_cast<size_t>(dst.dim()));
    for (int64_t i = 0; i < dst.dim(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return dst.stride(a) > dst.stride(b); });
    const at::Tensor dst_stored = dst.permute(order);
    if (!dst_stored.is_contiguous()) return false;
    return device_copy_kernel(src.permute(order), dst_stored);
  }
  if (at::isIntegralType(src.scalar_type(), true) && sim_dtype(dst.scalar_type()) && src.is_contiguous())
    return integer_to_float_kernel(src, dst);
  const std::optional<DType> src_dt = sim_dtype(src.scalar_type()), dst_dt = sim_dtype(dst.scalar_type());
  if (!src_dt || !dst_dt) return false;
  const int64_t rank = src.dim();
  // Storage order of src: its dims from the largest stride to the smallest.
  std::vector<int64_t> order(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return src.stride(a) > src.stride(b); });
  const at::Tensor stored = rank == 0 ? src.reshape({1}) : src.permute(order);
  if (*src_dt != *dst_dt && !src.is_contiguous()) {
    // A cast from a strided source: gathered into a contiguous tensor of the source dtype first
    // (the DMA copy), then cast (two device kernels).
    at::Tensor gathered = at::empty(src.sizes(), src.options());
    if (!device_copy_kernel(src, gathered)) return false;
    return device_copy_kernel(gathered, dst);
  }
  if (!stored.is_contiguous()) return strided_copy_kernel(src, dst);
  std::vector<int64_t> perm(static_cast<size_t>(std::max<int64_t>(rank, 1)), 0);
  for (int64_t k = 0; k < rank; ++k) perm[static_cast<size_t>(order[k])] = k;  // output dim k = stored dim perm[k]
  bool identity = true;
  for (size_t k = 0; k < perm.size(); ++k) identity = identity && perm[k] == int64_t(k);
  const int device = dst.device().index();
  OpRecord record = copy_record("copy device->device", src);
  try {
    if (*src_dt != *dst_dt) {
      if (!identity) return false;
      kernels::UnarySpec spec;
      spec.shape = {src.numel()};
      spec.op = UnaryOp::copy;
      spec.input_dtype = *src_dt;
      spec.output_dtype = *dst_dt;
      record.op = "cast";
      execute_program(device, "cast|" + std::to_string(src.numel()) + "|" + std::string(dtype_name(*src_dt)) + ">" + std::string(dtype_name(*dst_dt)),
                      [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                        return kernels::unary_program(spec, hw, core, cores);
                      },
                      {buffer("x", stored)}, {buffer("y", dst)}, std::move(record));
      return true;
    }
    kernels::PermuteSpec spec;
    spec.shape = rank == 0 ? std::vector<int64_t>{1} : dims(stored.sizes());
    spec.perm = perm;
    spec.dtype = *src_dt;
    std::ostringstream key;
    key << "copy|" << dims_key(stored.sizes()) << "|";
    for (int64_t p : perm) key << p << ",";
    key << "|" << dtype_name(*src_dt);
    execute_program(device, key.str(),
                    [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                      return kernels::permute_program(spec, hw, core, cores);
                    },
                    {buffer("x", stored)}, {buffer("y", dst)}, std::move(record));
    return true;
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// Set while the CPU fallback moves an op's arguments and results: the fallback's record charges
// those transfers, so its copies must not be charged again.
thread_local bool t_in_fallback = false;

// Host <-> device copies go over the host link and advance the device's simulated clock (the
// bytes that cross are the device side's: a cast happens on the host). Copies within a device
// run as kernels where device_copy_kernel covers them; others are not timed.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy between undefined tensors");
  if (self.numel() == 0 && dst.numel() == 0) return dst;
  const bool lazy_bits = self.is_conj() || self.is_neg() || dst.is_conj() || dst.is_neg();
  if (!lazy_bits && self.device().type() == kNeuron && dst.device().type() == kNeuron && device_copy_kernel(self, dst))
    return dst;
  at::Tensor src_host = host_alias(self);
  at::Tensor dst_host = host_alias(dst);
  dst_host.copy_(src_host);
  const bool from_device = self.device().type() == kNeuron, to_device = dst.device().type() == kNeuron;
  if (from_device != to_device && self.nbytes() > 0 && !t_in_fallback) {
    const at::Tensor& device_side = to_device ? dst : self;
    record_host_transfer(device_side.device().index(), device_side.nbytes(),
                         copy_record(to_device ? "copy host->device" : "copy device->host", device_side));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    at::native::resize_(dst, self.sizes(), std::nullopt);
  }
  return copy_from(self, dst, false);
}

// The Conjugate / Negative keys' boxed fallbacks materialise a conj()/neg view by cloning it, and a
// clone of a device tensor is a copy_ that reaches _copy_from again: an endless recursion. copy_from
// resolves the bits itself (host_alias keeps them), so these keys go straight to it.
at::Tensor copy_from_lazy_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  return copy_from(self, dst, non_blocking);
}
at::Tensor copy_from_and_resize_lazy_bits(const at::Tensor& self, const at::Tensor& dst) {
  c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKeySet({c10::DispatchKey::Conjugate, c10::DispatchKey::Negative}));
  return copy_from_and_resize(self, dst);
}

// Module.to("neuron") keeps parameter identity (and so tied weights) only when the CPU tensor can
// take the device tensor's data in place (`param.data = moved`), as it does for CUDA: a dense
// strided tensor on the CPU or on the device can shallow-copy any other. c10's built-in rule knows
// only the in-tree dense backends and leaves PrivateUse1 to this op.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().is_cpu() || t.device().type() == kNeuron);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
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
  m.impl("_has_compatible_shallow_copy_type", has_compatible_shallow_copy_type);
}

TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", copy_from_lazy_bits);
  m.impl("_copy_from_and_resize", copy_from_and_resize_lazy_bits);
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", copy_from_lazy_bits);
  m.impl("_copy_from_and_resize", copy_from_and_resize_lazy_bits);
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

}  // namespace

namespace {
// Marks the copies the fallback makes (their host-link time is in the fallback's own record).
struct InFallbackScope {
  bool previous = t_in_fallback;
  InFallbackScope() { t_in_fallback = true; }
  ~InFallbackScope() { t_in_fallback = previous; }
};
}  // namespace

void check_common_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  // Ops whose CUDA kernels also take tensors on other devices: copies and moves between devices,
  // and advanced indexing with host index tensors.
  static const std::unordered_set<std::string> cross_device = {
      "_copy_from", "_copy_from_and_resize", "copy_", "_to_copy", "to", "index", "index_put_", "_index_put_impl_",
      "index_put", "set_", "_has_compatible_shallow_copy_type", "_local_scalar_dense", "_pin_memory", "is_pinned",
      "is_set_to", "lift_fresh", "lift_fresh_copy", "_unsafe_index", "_unsafe_index_put"};
  std::string name = op.schema().operator_name().name;
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  if (cross_device.count(name)) return;
  std::optional<c10::Device> common;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    // A 0-dim CPU tensor is a scalar operand (a wrapped Python number), accepted on every device.
    if (t.device().is_cpu() && t.dim() == 0) return;
    if (!common) {
      common = t.device();
      return;
    }
    TORCH_CHECK(*common == t.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                *common, " and ", t.device(), "!");
  };
  for (const c10::IValue& v : args) {
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
    else if (v.isOptionalTensorList()) for (const auto& t : v.toOptionalTensorList().vec()) if (t) visit(*t);
  }
}

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  check_common_device(op, torch::jit::last(*stack, op.schema().arguments().size()));
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
               "' has no neuron kernel (for these arguments) yet; it runs on the CPU (copies to the host and back). "
               "trnsim.fallback_report() lists such ops; TRNSIM_FALLBACK=allow silences this, =error forbids it.");
  }
  // The device tensors among the arguments go to the host, the device tensors among the results
  // come back: both over the host link, on the device's simulated clock.
  const auto& arguments = op.schema().arguments();
  uint64_t to_host = 0;
  std::vector<at::Tensor> written;  // measured after the call: an out= argument may be resized
  int device = -1;
  OpRecord record;
  record.op = full;
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, arguments.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const bool writes = arguments[i].alias_info() && arguments[i].alias_info()->isWrite();
    auto visit = [&](const at::Tensor& t) {
      if (!t.defined()) return;
      record.shapes.push_back(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
      if (record.dtype.empty()) record.dtype = c10::toString(t.scalar_type());
      if (t.device().type() != kNeuron) return;
      if (device < 0) device = t.device().index();
      to_host += t.nbytes();
      if (writes) written.push_back(t);
    };
    const c10::IValue& v = args[i];
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
    else if (v.isOptionalTensorList()) for (const auto& t : v.toOptionalTensorList().vec()) if (t) visit(*t);
  }
  const auto host_start = std::chrono::steady_clock::now();
  {
    InFallbackScope in_fallback;
    at::native::cpu_fallback(op, stack);
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  // Results that are new device tensors come back; mutated arguments (in-place, out=) come back
  // whether or not they are also returned.
  uint64_t to_device = 0;
  for (const at::Tensor& t : written) to_device += t.nbytes();
  for (size_t i = 0; i < op.schema().returns().size(); ++i) {
    const c10::Argument& r = op.schema().returns()[i];
    if (r.alias_info()) continue;  // an alias of a mutated argument, counted above
    c10::IValue& v = (*stack)[stack->size() - op.schema().returns().size() + i];
    // cpu_fallback puts results on the first tensor argument's device: a wrapped scalar (1 - x is
    // sub(1, x)) would leave them on the CPU. Results belong on the device the operands are on.
    if (device >= 0 && v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu() &&
        !(v.toTensor().dim() == 0 && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number())) {
      InFallbackScope in_fallback;
      v = v.toTensor().to(c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)));
    }
    auto visit = [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() != kNeuron) return;
      if (device < 0) device = t.device().index();
      to_device += t.nbytes();
    };
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
  }
  record_fallback(device < 0 ? int(t_current_device) : device, to_host, to_device, host_s, std::move(record));
}

namespace {

// ---------------------------------------------------------------------------------------------
// Ops on the simulator (slice 2): lowered to the kernel library, values from the interpreter,
// time from the timing model (kernel_executor). Registered boxed; whatever a lowering does not
// support (dtype, shape, alpha/beta, operands on other devices) goes through neuron_fallback,
// counted like any other fallback op.

// A matmul operand as stored: contiguous, or the transpose (last two dims) of a contiguous tensor
// (nn.Linear's weight.t()), which the kernel loads transposed; anything else is made contiguous
// by a device copy.
std::pair<at::Tensor, bool> matmul_operand(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  at::Tensor stored = t.transpose(-1, -2);
  if (stored.is_contiguous()) return {stored, true};
  return {t.contiguous(), false};
}

// C = A @ B (+ bias[N] or + residual[M, N]) for [M, K] @ [K, N] or batched [B, M, K] @ [B, K, N].
std::optional<at::Tensor> lower_matmul(const std::string& op, const at::Tensor& a_in, const at::Tensor& b_in,
                                       const at::Tensor* addend, bool fp32_result = false) {
  if (!on_neuron(a_in) || !on_neuron(b_in) || a_in.scalar_type() != b_in.scalar_type()) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(a_in.scalar_type());
  if (!dt) return std::nullopt;
  const bool batched = a_in.dim() == 3;
  if (a_in.dim() != b_in.dim() || (a_in.dim() != 2 && !batched)) return std::nullopt;
  if (batched && a_in.size(0) != b_in.size(0)) return std::nullopt;
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  if (b_in.size(-2) != k || m == 0 || k == 0 || n == 0 || (batched && a_in.size(0) == 0)) return std::nullopt;
  MatmulSpec spec;
  spec.batch = batched ? a_in.size(0) : 1;
  spec.m = m;
  spec.k = k;
  spec.n = n;
  spec.input_dtype = *dt;
  spec.output_dtype = fp32_result ? DType::fp32 : *dt;  // the PSUM's fp32, not rounded (an epilogue follows)
  const at::TensorOptions out_options = fp32_result ? a_in.options().dtype(at::kFloat) : a_in.options();
  at::Tensor bias;
  if (addend) {
    if (!on_neuron(*addend) || addend->scalar_type() != a_in.scalar_type() || batched) return std::nullopt;
    if (addend->dim() == 1 && addend->size(0) == n) {
      spec.bias = true;
    } else if (addend->dim() == 2 && addend->size(0) == 1 && addend->size(1) == n) {
      spec.bias = true;
    } else if (addend->dim() == 2 && addend->size(0) == m && addend->size(1) == n) {
      spec.residual = true;
    } else {
      return std::nullopt;
    }
    bias = addend->contiguous();
  }
  c10::DeviceGuard guard(a_in.device());
  auto [a, a_t] = matmul_operand(a_in);
  auto [b, b_t] = matmul_operand(b_in);
  spec.a_transposed = a_t;
  spec.b_transposed = b_t;
  at::Tensor c = batched ? at::empty({spec.batch, m, n}, out_options) : at::empty({m, n}, out_options);
  const std::string key = op + "|" + std::to_string(spec.batch) + "," + std::to_string(m) + "," + std::to_string(k) +
                          "," + std::to_string(n) + "|" + c10::toString(a_in.scalar_type()) + "|" +
                          std::to_string(a_t) + std::to_string(b_t) + std::to_string(spec.bias) +
                          std::to_string(spec.residual) + (fp32_result ? "|fp32" : "");
  std::vector<HostBuffer> inputs = {buffer("a", a), buffer("b", b)};
  if (spec.bias) inputs.push_back(buffer("bias", bias));
  if (spec.residual) inputs.push_back(buffer("residual", bias));
  OpRecord record = addend ? record_for(op, {*addend, a_in, b_in}, a_in.scalar_type())
                           : record_for(op, {a_in, b_in}, a_in.scalar_type());
  execute_program(a_in.device().index(), key, [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::matmul_program(spec, hw, core, cores); },
                  inputs, {buffer("c", c)}, std::move(record));
  return c;
}

std::optional<at::Tensor> lower_unary(const std::string& op, const at::Tensor& x_in, UnaryOp kind) {
  if (!on_neuron(x_in)) return std::nullopt;
  const at::ScalarType in_type = x_in.scalar_type();
  at::ScalarType out_type = in_type;
  std::optional<DType> in_dt = sim_dtype(in_type);
  if (!in_dt && at::isIntegralType(in_type, /*includeBool=*/false)) {
    // Integer inputs: abs / neg / sign / relu stay integers, the float functions give the default
    // float dtype (torch's promotion); the engines compute in fp32, exact while |x| <= 2^24.
    const bool integer_valued = kind == UnaryOp::abs || kind == UnaryOp::neg || kind == UnaryOp::sign || kind == UnaryOp::relu;
    if (!integer_valued) out_type = c10::typeMetaToScalarType(c10::get_default_dtype());
    if (host_max_abs(x_in) > (integer_valued ? kExactIntegerBound : exact_integer_limit(out_type))) return std::nullopt;
    if (integer_valued && in_type != at::kInt && in_type != at::kLong && kind != UnaryOp::sign && kind != UnaryOp::relu)
      return std::nullopt;  // int8/int16/uint8 wrap in torch (abs(-128) is -128)
    in_dt = elementwise_dtype(in_type);
  }
  if (!in_dt) return std::nullopt;
  const std::optional<DType> out_dt = elementwise_dtype(out_type);
  c10::DeviceGuard guard(x_in.device());
  // A dense non-contiguous input (transposed, channels-last) is computed in storage order and the
  // result keeps its layout, as TensorIterator does.
  const bool keep_layout = !x_in.is_contiguous() && x_in.is_non_overlapping_and_dense();
  at::Tensor x = keep_layout ? x_in.as_strided({x_in.numel()}, {1}) : x_in.contiguous();
  at::Tensor y = keep_layout ? at::empty_strided(x_in.sizes(), x_in.strides(), x_in.options().dtype(out_type))
                             : at::empty(x_in.sizes(), x_in.options().dtype(out_type));
  if (x_in.numel() == 0) return y;
  const at::Tensor source = kernel_input(x);
  const KernelResult target(y);
  UnarySpec spec;
  spec.shape = {x.numel()};
  spec.op = kind;
  spec.input_dtype = *in_dt;
  spec.output_dtype = *out_dt;
  const std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + std::to_string(x.numel()) + "|" +
                          std::string(dtype_name(*in_dt)) + ">" + std::string(dtype_name(*out_dt));
  execute_program(x_in.device().index(), key, [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::unary_program(spec, hw, core, cores); },
                  {HostBuffer{"x", source.data_ptr(), size_t(x.numel()), *in_dt}}, {target.buffer("y")},
                  record_for(op, {x_in}, in_type));
  return target.finish();
}

// A binary operand: a tensor on the device, or a 0-dim tensor used as an immediate (Python numbers
// arrive as wrapped 0-dim CPU tensors).
struct BinaryOperand {
  at::Tensor tensor;  // what the kernel reads (an int64 tensor narrowed to an int32 host copy)
  DType dtype = DType::fp32;
  std::optional<double> scalar;
  double max_abs = 0;  // largest |value| (integer and bool operands only: exactness bounds)
};

// `storage_order`: a dense tensor read as its storage, flattened (the caller keeps its layout).
std::optional<BinaryOperand> binary_operand(const at::Tensor& t, bool as_immediate, bool storage_order = false) {
  const bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  if (!at::isFloatingType(t.scalar_type()) && !integral) return std::nullopt;
  if (as_immediate) {
    const double v = (on_neuron(t) ? local_scalar_dense(t) : t.item()).toDouble();
    return BinaryOperand{at::Tensor(), DType::fp32, v, std::abs(v)};
  }
  const std::optional<DType> dt = elementwise_dtype(t.scalar_type());
  if (!on_neuron(t) || !dt) return std::nullopt;
  const at::Tensor stored = storage_order ? t.as_strided({t.numel()}, {1}) : t.contiguous();
  BinaryOperand o{stored, *dt, std::nullopt, integral ? host_max_abs(t) : 0.0};
  if (t.scalar_type() == at::kLong) {
    if (o.max_abs > kExactIntegerBound) return std::nullopt;
    o.tensor = kernel_input(o.tensor);  // alive until the program has run
  }
  return o;
}

// Whether torch's result of `kind` on these operands is what the kernel's fp32 arithmetic gives:
// a float result where every integer operand is exact in the result dtype (torch casts it there
// first); an integer result where no intermediate leaves the exact range and no wraparound occurs.
bool exact_in_fp32(BinaryOp kind, const BinaryOperand& a, const BinaryOperand& b, at::ScalarType compute,
                   bool a_integral, bool b_integral) {
  if (at::isFloatingType(compute)) {
    const double limit = exact_integer_limit(compute);
    return (!a_integral || a.max_abs <= limit) && (!b_integral || b.max_abs <= limit);
  }
  for (const BinaryOperand* o : {&a, &b})
    if (o->scalar && *o->scalar != std::nearbyint(*o->scalar)) return false;
  double bound = std::max(a.max_abs, b.max_abs);
  if (kind == BinaryOp::add || kind == BinaryOp::subtract) bound = a.max_abs + b.max_abs;
  if (kind == BinaryOp::multiply) bound = a.max_abs * b.max_abs;
  // and / or / xor of two's-complement values below 2^k stay below 2^(k+1) in magnitude
  if (kind == BinaryOp::bitwise_and || kind == BinaryOp::bitwise_or || kind == BinaryOp::bitwise_xor) bound *= 2;
  if (bound > kExactIntegerBound) return false;
  const bool produces_value = kind == BinaryOp::add || kind == BinaryOp::subtract || kind == BinaryOp::multiply;
  if (!produces_value) return true;
  // Narrow integer results wrap in torch; the kernel would saturate instead.
  switch (compute) {
    case at::kByte: return kind != BinaryOp::subtract && bound <= 255;
    case at::kChar: return bound <= 127;
    case at::kShort: return bound <= 32767;
    default: return true;
  }
}

// c = a op b for any float, integer or bool operands with PyTorch's type promotion (a bf16 and an
// fp32 tensor, an int64 tensor and a Python float, ...): each tensor is read in its own dtype and
// the engines compute in fp32. `compare`: the result is bool (1 / 0 written as uint8), computed in
// the promoted type. Empty results need no kernel.
std::optional<at::Tensor> lower_binary(const std::string& op, const at::Tensor& a_in, const at::Tensor& b_in,
                                       BinaryOp kind, bool compare = false, bool round_immediate = true) {
  if (!on_neuron(a_in) && !on_neuron(b_in)) return std::nullopt;
  const at::ScalarType promoted = at::result_type(a_in, b_in);
  at::ScalarType result = compare ? at::kBool : promoted;
  if (kind == BinaryOp::divide && at::isIntegralType(promoted, /*includeBool=*/true))
    result = c10::typeMetaToScalarType(c10::get_default_dtype());  // true division
  const at::ScalarType compute = kind == BinaryOp::divide ? result : promoted;
  if (compute == at::kBool) {
    // bool arithmetic is logical: + is or, * is and; torch rejects - on bools itself.
    if (kind == BinaryOp::add) kind = BinaryOp::maximum;
    else if (kind == BinaryOp::multiply) kind = BinaryOp::minimum;
    else if (kind == BinaryOp::subtract) return std::nullopt;
  }
  const std::optional<DType> out_dt = elementwise_dtype(result);
  if (!out_dt) return std::nullopt;
  const at::Tensor& device_operand = on_neuron(a_in) ? a_in : b_in;
  c10::DeviceGuard guard(device_operand.device());
  // A 0-dim operand is an immediate unless both are 0-dim: then the device one is a 1-element tensor.
  const bool a_imm = a_in.dim() == 0 && (b_in.dim() > 0 || !on_neuron(a_in));
  const bool b_imm = b_in.dim() == 0 && !a_imm && (a_in.dim() > 0 || !on_neuron(b_in));
  // Same-shaped operands with one dense layout (a transposed or channels-last pair), or one such
  // operand and an immediate, are computed in storage order, and the result keeps that layout, as
  // TensorIterator gives it.
  const at::Tensor* layout_source = nullptr;
  auto dense_strided = [](const at::Tensor& t) { return !t.is_contiguous() && t.is_non_overlapping_and_dense(); };
  if (!a_imm && !b_imm && a_in.sizes() == b_in.sizes() && a_in.strides() == b_in.strides() && dense_strided(a_in))
    layout_source = &a_in;
  else if (a_imm && dense_strided(b_in))
    layout_source = &b_in;
  else if (b_imm && dense_strided(a_in))
    layout_source = &a_in;
  std::optional<BinaryOperand> a = binary_operand(a_in, a_imm, layout_source != nullptr),
                               b = binary_operand(b_in, b_imm, layout_source != nullptr);
  if (!a || !b || (a->scalar && b->scalar)) return std::nullopt;
  const bool a_int = at::isIntegralType(a_in.scalar_type(), true), b_int = at::isIntegralType(b_in.scalar_type(), true);
  if (!exact_in_fp32(kind, *a, *b, compute, a_int, b_int)) return std::nullopt;
  if (compare && round_immediate) {  // torch compares against the scalar converted to the operands' dtype
    for (BinaryOperand* o : {&*a, &*b})
      if (o->scalar) o->scalar = at::scalar_tensor(*o->scalar, at::kDouble).to(promoted).item<double>();
  }
  std::vector<int64_t> out_shape;
  if (a->scalar) {
    out_shape = dims(b_in.sizes());
  } else if (b->scalar) {
    out_shape = dims(a_in.sizes());
  } else {
    const at::DimVector shape = at::infer_size_dimvector(a_in.sizes(), b_in.sizes());
    out_shape.assign(shape.begin(), shape.end());
  }
  int64_t numel = 1;
  for (int64_t d : out_shape) numel *= d;
  const at::TensorOptions out_options = device_operand.options().dtype(result);
  at::Tensor c = layout_source ? at::empty_strided(out_shape, layout_source->strides(), out_options)
                               : at::empty(out_shape, out_options);
  if (numel == 0) return c;
  BinarySpec spec;
  spec.op = kind;
  spec.a_dtype = a->dtype;
  spec.b_dtype = b->dtype;
  spec.output_dtype = *out_dt;
  spec.a_scalar = a->scalar;
  spec.b_scalar = b->scalar;
  // Same shapes are flattened (one program per element count); broadcasts keep their shapes.
  const bool same = !a->scalar && !b->scalar && a_in.sizes() == b_in.sizes();
  const bool flat = a->scalar || b->scalar || same || layout_source;
  spec.a_shape = a->scalar ? std::vector<int64_t>{1} : flat ? std::vector<int64_t>{numel} : dims(a_in.sizes());
  spec.b_shape = b->scalar ? std::vector<int64_t>{1} : flat ? std::vector<int64_t>{numel} : dims(b_in.sizes());
  if (!flat && a_in.dim() == 0) spec.a_shape = {1};
  if (!flat && b_in.dim() == 0) spec.b_shape = {1};
  std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + dims_key(spec.a_shape) +
                    dims_key(spec.b_shape) + "|" + std::string(dtype_name(spec.a_dtype)) + "," +
                    std::string(dtype_name(spec.b_dtype)) + ">" + std::string(dtype_name(spec.output_dtype));
  std::ostringstream immediates;  // an immediate is part of the program
  immediates << std::hexfloat;
  if (spec.a_scalar) immediates << "|a=" << *spec.a_scalar;
  if (spec.b_scalar) immediates << "|b=" << *spec.b_scalar;
  key += immediates.str();
  std::vector<HostBuffer> inputs;
  if (!a->scalar) inputs.push_back(HostBuffer{"a", a->tensor.data_ptr(), size_t(a->tensor.numel()), a->dtype});
  if (!b->scalar) inputs.push_back(HostBuffer{"b", b->tensor.data_ptr(), size_t(b->tensor.numel()), b->dtype});
  const KernelResult out(c);
  execute_program(device_operand.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::binary_program(spec, hw, core, cores); }, inputs,
                  {out.buffer("c")}, record_for(op, {a_in, b_in}, promoted));
  return out.finish();
}

// Reductions (kernels/reduction.h): sum / mean / amax / amin over any dims (empty = all), max / min
// over one dim with their indices, argmax / argmin. The kernel accumulates in fp32 and rounds to the
// input dtype once, which is torch's result dtype here (a `dtype=` other than the input's falls
// back). Its argmax writes int32; the int64 torch wants is a device copy. Built keepdim (the same
// elements in the same order) so that a full reduction has no 0-dim allocation.
std::optional<at::Tensor> lower_reduce(const std::string& op, const at::Tensor& x_in, std::vector<int64_t> rdims,
                                       bool keepdim, ReduceOp kind) {
  if (!on_neuron(x_in) || x_in.numel() == 0) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  const int64_t rank = x_in.dim();
  const bool arg = kind == ReduceOp::argmax || kind == ReduceOp::argmin;
  if (rank == 0) {  // a 0-dim tensor (e.g. a loss): reduced as [1], the result 0-dim again
    if (arg) return std::nullopt;
    for (int64_t d : rdims) c10::maybe_wrap_dim(d, 0);  // torch accepts only dim 0 / -1
    std::optional<at::Tensor> y = lower_reduce(op, x_in.reshape({1}), {0}, false, kind);
    return y ? std::optional<at::Tensor>(y->reshape({})) : std::nullopt;
  }
  std::vector<bool> reduced(rank, rdims.empty());
  for (int64_t d : rdims) reduced[c10::maybe_wrap_dim(d, rank)] = true;
  std::vector<int64_t> kernel_dims, out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) kernel_dims.push_back(d);
    if (!reduced[d]) out_shape.push_back(x_in.size(d));
    else if (keepdim) out_shape.push_back(1);
  }
  if (arg && kernel_dims.size() != 1) return std::nullopt;
  // The kernel's argmax cannot find NaN (nc_find_index8), torch returns the first NaN's index: such
  // inputs fall back (a host-side scan; device memory is host memory).
  if (arg && host_alias(x_in).isnan().any().item<bool>()) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  ReduceSpec spec;
  spec.shape = dims(x.sizes());
  spec.dims = kernel_dims;
  spec.op = kind;
  spec.keepdim = true;
  spec.input_dtype = *dt;
  spec.output_dtype = arg ? DType::int32 : *dt;
  at::Tensor y = at::empty(out_shape, x_in.options().dtype(arg ? at::kInt : x_in.scalar_type()));
  const std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + dims_key(x.sizes()) +
                          dims_key(kernel_dims) + std::to_string(spec.keepdim) + "|" + c10::toString(x.scalar_type());
  execute_program(x_in.device().index(), key, [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::reduce_program(spec, hw, core, cores); },
                  {buffer("x", x)}, {buffer("y", y)}, record_for(op, {x_in}, x_in.scalar_type()));
  return arg ? y.to(at::kLong) : y;
}

// sum of an integer or bool tensor (torch's result: int64): cast to fp32 on the device, the fp32
// reduction, the (integral) result converted on the host. Exact while sum |x| <= 2^24 (every
// partial sum is then exact in fp32); beyond that the CPU's kernel.
// amax / amin / max / min the same way (exact while max |x| <= 2^24; the result keeps x's dtype).
std::optional<at::Tensor> lower_integer_reduce(const std::string& op, const at::Tensor& x, const std::vector<int64_t>& rdims,
                                            bool keepdim, const c10::IValue& dtype_arg, ReduceOp kind = ReduceOp::sum) {
  const at::ScalarType result = kind != ReduceOp::sum ? x.scalar_type()
                                : dtype_arg.isNone() ? at::kLong : static_cast<at::ScalarType>(dtype_arg.toInt());
  if (!on_neuron(x) || x.numel() == 0 || !at::isIntegralType(result, true) || (result == at::kBool) != (x.scalar_type() == at::kBool && kind != ReduceOp::sum))
    return std::nullopt;
  const at::Tensor magnitudes = host_alias(x).to(at::kDouble).abs();
  if ((kind == ReduceOp::sum ? magnitudes.sum() : magnitudes.max()).item<double>() > kExactIntegerBound) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor xf = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  if (!integer_to_float_kernel(x.contiguous(), xf)) return std::nullopt;
  std::optional<at::Tensor> r = lower_reduce(op, xf, rdims, keepdim, kind);
  if (!r) return std::nullopt;
  at::Tensor y = at::empty(r->sizes(), x.options().dtype(result));
  host_alias(y).copy_(host_alias(*r));
  return y;
}

std::vector<int64_t> int_list(const c10::IValue& v) {
  if (v.isNone()) return {};
  if (v.isInt()) return {v.toInt()};
  const auto list = v.toIntVector();
  return std::vector<int64_t>(list.begin(), list.end());
}

// A `dtype=` argument the kernel's result dtype satisfies (none, or the input's own).
bool same_dtype_arg(const c10::IValue& v, const at::Tensor& x) {
  return v.isNone() || static_cast<at::ScalarType>(v.toInt()) == x.scalar_type();
}

// out = cond != 0 ? a : b (kernels/elementwise.h where), operands broadcast; a or b may be an
// immediate. Operands may have other dtypes than `result` (torch's promotion): the DMA and the
// predicated copy convert exactly (a narrower float, or integers the result dtype holds exactly);
// int64 operands and results go through int32 as in lower_binary.
std::optional<at::Tensor> lower_where(const std::string& op, const at::Tensor& cond_in, std::optional<at::Tensor> a_in,
                                      std::optional<double> a_scalar, std::optional<at::Tensor> b_in,
                                      std::optional<double> b_scalar, at::ScalarType result) {
  const std::optional<DType> dt = elementwise_dtype(result);
  if (!dt || !on_neuron(cond_in) || cond_in.scalar_type() != at::kBool) return std::nullopt;
  at::DimVector shape(cond_in.sizes().begin(), cond_in.sizes().end());
  for (const auto* t : {&a_in, &b_in}) {
    if (*t && !on_neuron(**t)) return std::nullopt;
    if (*t) shape = at::infer_size_dimvector(shape, (*t)->sizes());
  }
  // Broadcast operands are expanded to the result's shape and made contiguous by a device copy.
  if (cond_in.sizes() != c10::IntArrayRef(shape)) return lower_where(op, cond_in.expand(shape), a_in, a_scalar, b_in, b_scalar, result);
  if (a_in && a_in->sizes() != c10::IntArrayRef(shape)) return lower_where(op, cond_in, a_in->expand(shape), a_scalar, b_in, b_scalar, result);
  if (b_in && b_in->sizes() != c10::IntArrayRef(shape)) return lower_where(op, cond_in, a_in, a_scalar, b_in->expand(shape), b_scalar, result);
  c10::DeviceGuard guard(cond_in.device());
  at::Tensor out = at::empty(cond_in.sizes(), cond_in.options().dtype(result));
  if (cond_in.numel() == 0) return out;
  const bool integral_result = at::isIntegralType(result, /*includeBool=*/true);
  // A value operand as the kernel reads it; nullopt where its conversion to `result` is not exact.
  auto operand = [&](const std::optional<at::Tensor>& t) -> std::optional<std::pair<at::Tensor, DType>> {
    if (!t) return std::make_pair(at::Tensor(), *dt);
    const std::optional<DType> odt = elementwise_dtype(t->scalar_type());
    if (!odt) return std::nullopt;
    const bool integral = at::isIntegralType(t->scalar_type(), true);
    if (integral_result && !integral) return std::nullopt;  // torch truncates; the kernel would round
    if (t->scalar_type() != result && sim_dtype(t->scalar_type()) && sim_dtype(result) &&
        c10::elementSize(t->scalar_type()) > c10::elementSize(result))
      return std::nullopt;  // a narrowing float conversion: torch rounds through the CPU's path
    at::Tensor stored = t->contiguous();
    if (integral && (c10::elementSize(t->scalar_type()) >= 4 || !integral_result)) {
      const double limit = integral_result ? kExactIntegerBound : exact_integer_limit(result);
      if (host_max_abs(stored) > limit) return std::nullopt;
      stored = kernel_input(stored);
    }
    return std::make_pair(stored, *odt);
  };
  const std::optional<std::pair<at::Tensor, DType>> a = operand(a_in), b = operand(b_in);
  if (!a || !b) return std::nullopt;
  for (std::optional<double>* v : {&a_scalar, &b_scalar}) {  // an immediate converted to the result dtype, as torch does
    if (!*v) continue;
    if (integral_result && (**v != std::nearbyint(**v) || std::abs(**v) > kExactIntegerBound)) return std::nullopt;
    **v = at::scalar_tensor(**v, at::kDouble).to(result).to(at::kDouble).item<double>();
  }
  WhereSpec spec;
  spec.shape = {cond_in.numel()};
  spec.cond_dtype = DType::uint8;
  spec.a_dtype = a->second;
  spec.b_dtype = b->second;
  spec.output_dtype = *dt;
  spec.a_scalar = a_scalar;
  spec.b_scalar = b_scalar;
  const at::Tensor cond = cond_in.contiguous();  // alive until the program has run
  std::vector<HostBuffer> inputs = {buffer("cond", cond)};
  if (a_in) inputs.push_back(HostBuffer{"a", a->first.data_ptr(), size_t(a->first.numel()), a->second});
  if (b_in) inputs.push_back(HostBuffer{"b", b->first.data_ptr(), size_t(b->first.numel()), b->second});
  const KernelResult target(out);
  std::ostringstream key;
  key << std::hexfloat << op << "|" << cond_in.numel() << "|" << dtype_name(spec.a_dtype) << ","
      << dtype_name(spec.b_dtype) << ">" << dtype_name(spec.output_dtype);
  if (a_scalar) key << "|a=" << *a_scalar;
  if (b_scalar) key << "|b=" << *b_scalar;
  execute_program(cond_in.device().index(), key.str(),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::where_program(spec, hw, core, cores); }, inputs,
                  {target.buffer("out")}, record_for(op, {cond_in}, result));
  return target.finish();
}

// threshold_backward(grad, self, threshold) = self <= threshold ? 0 : grad (relu's backward):
// a comparison against the immediate, then where.
std::optional<at::Tensor> lower_threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& thr) {
  if (!on_neuron(grad) || !on_neuron(self) || grad.scalar_type() != self.scalar_type() ||
      grad.sizes() != self.sizes() || !sim_dtype(grad.scalar_type()) || grad.numel() == 0)
    return std::nullopt;
  const at::Tensor threshold = at::scalar_tensor(thr, at::TensorOptions().dtype(at::kDouble));
  std::optional<at::Tensor> le = lower_binary("threshold_backward.le", self, threshold, BinaryOp::less_equal, true,
                                                  /*round_immediate=*/false);  // torch: in fp32 (opmath)
  if (!le) return std::nullopt;
  return lower_where("threshold_backward", *le, std::nullopt, 0.0, grad, std::nullopt, grad.scalar_type());
}

// mse_loss (reduction 0 none, 1 mean, 2 sum) from the element-wise and reduction kernels:
// (self - target)^2, then the reduction. Backward: 2 (self - target) [/ N] * grad_output.
std::optional<at::Tensor> lower_mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  if (self.sizes() != target.sizes() || reduction < 0 || reduction > 2) return std::nullopt;
  std::optional<at::Tensor> diff = lower_binary("mse_loss.sub", self, target, BinaryOp::subtract);
  if (!diff) return std::nullopt;
  std::optional<at::Tensor> sq = lower_binary("mse_loss.square", *diff, *diff, BinaryOp::multiply);
  if (!sq || reduction == 0) return sq;
  std::optional<at::Tensor> loss = lower_reduce("mse_loss", *sq, {}, false, reduction == 1 ? ReduceOp::mean : ReduceOp::sum);
  return loss;
}

std::optional<at::Tensor> lower_mse_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                                  int64_t reduction) {
  if (self.sizes() != target.sizes() || reduction < 0 || reduction > 2 || self.numel() == 0) return std::nullopt;
  if (!(grad.dim() == 0 || grad.sizes() == self.sizes())) return std::nullopt;
  std::optional<at::Tensor> diff = lower_binary("mse_loss_backward.sub", self, target, BinaryOp::subtract);
  if (!diff) return std::nullopt;
  const double scale = reduction == 1 ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  std::optional<at::Tensor> scaled = lower_binary("mse_loss_backward.scale", *diff, at::scalar_tensor(scale, at::kDouble),
                                                  BinaryOp::multiply);
  if (!scaled) return std::nullopt;
  return lower_binary("mse_loss_backward", *scaled, grad, BinaryOp::multiply);
}

// _softmax / _log_softmax over the last dim (kernels/normalization.h) and their backward from the
// forward's output. half_to_float, another dim, or a backward whose input_dtype differs falls back.
bool last_dim(const at::Tensor& t, int64_t dim) { return t.dim() > 0 && c10::maybe_wrap_dim(dim, t.dim()) == t.dim() - 1; }

// Softmax over another dim: the dim moved last by a device permute, the last-dim kernel, and the
// result permuted back (both copies are kernels, timed like the softmax).
std::optional<at::Tensor> lower_softmax(const std::string& op, const at::Tensor& x_in, int64_t dim, bool log) {
  if (on_neuron(x_in) && x_in.dim() > 1 && !last_dim(x_in, dim)) {
    std::optional<at::Tensor> y = lower_softmax(op, x_in.transpose(dim, -1), -1, log);
    if (!y) return std::nullopt;
    c10::DeviceGuard guard(x_in.device());
    return y->transpose(dim, -1).contiguous();
  }
  if (!on_neuron(x_in) || x_in.numel() == 0 || !last_dim(x_in, dim)) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::SoftmaxSpec spec;
  spec.shape = {x.numel() / x.size(-1), x.size(-1)};
  spec.log = log;
  spec.input_dtype = spec.output_dtype = *dt;
  const std::string key = op + "|" + dims_key(spec.shape) + "|" + c10::toString(x.scalar_type());
  execute_program(x_in.device().index(), key, [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::softmax_program(spec, hw, core, cores); },
                  {buffer("x", x)}, {buffer("y", y)}, record_for(op, {x_in}, x_in.scalar_type()));
  return y;
}

std::optional<at::Tensor> lower_softmax_backward(const std::string& op, const at::Tensor& dy_in, const at::Tensor& y_in,
                                                 int64_t dim, at::ScalarType input_dtype, bool log) {
  if (on_neuron(dy_in) && on_neuron(y_in) && y_in.dim() > 1 && !last_dim(y_in, dim)) {
    std::optional<at::Tensor> dx =
        lower_softmax_backward(op, dy_in.transpose(dim, -1), y_in.transpose(dim, -1), -1, input_dtype, log);
    if (!dx) return std::nullopt;
    c10::DeviceGuard guard(y_in.device());
    return dx->transpose(dim, -1).contiguous();
  }
  if (!on_neuron(dy_in) || !on_neuron(y_in) || dy_in.numel() == 0 || dy_in.sizes() != y_in.sizes() ||
      dy_in.scalar_type() != y_in.scalar_type() || input_dtype != dy_in.scalar_type() || !last_dim(y_in, dim))
    return std::nullopt;
  const std::optional<DType> dt = sim_dtype(y_in.scalar_type());
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(y_in.device());
  at::Tensor y = y_in.contiguous(), dy = dy_in.contiguous();
  at::Tensor dx = at::empty(y_in.sizes(), y_in.options());
  kernels::SoftmaxBackwardSpec spec;
  spec.shape = {y.numel() / y.size(-1), y.size(-1)};
  spec.log = log;
  spec.input_dtype = spec.output_dtype = *dt;
  const std::string key = op + "|" + dims_key(spec.shape) + "|" + c10::toString(y.scalar_type());
  execute_program(y_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::softmax_backward_program(spec, hw, core, cores); },
                  {buffer("y", y), buffer("dy", dy)}, {buffer("dx", dx)}, record_for(op, {dy_in, y_in}, y_in.scalar_type()));
  return dx;
}

// native_layer_norm / _fused_rms_norm over the last dim (a one-element normalized_shape). The norm
// kernel also writes the statistics torch returns (mean, rstd: [..., 1]; the input's dtype for
// layer_norm as on the CPU, fp32 for rms_norm). Parameters must have the input's dtype.
// The elements per normalized row: the product of the trailing dims `normalized` names (they must
// match x's last dims); the kernels see x as [rows, columns] and the parameters flattened.
std::optional<int64_t> normalized_columns(const at::Tensor& x, c10::IntArrayRef normalized) {
  if (normalized.empty() || static_cast<int64_t>(normalized.size()) > x.dim()) return std::nullopt;
  int64_t cols = 1;
  for (size_t i = 0; i < normalized.size(); ++i) {
    if (x.size(x.dim() - static_cast<int64_t>(normalized.size()) + static_cast<int64_t>(i)) != normalized[i])
      return std::nullopt;
    cols *= normalized[i];
  }
  return cols > 0 ? std::optional<int64_t>(cols) : std::nullopt;
}

std::optional<std::vector<at::Tensor>> lower_norm(const std::string& op, kernels::NormKind kind, const at::Tensor& x_in,
                                                  c10::IntArrayRef normalized, const c10::IValue& w_arg,
                                                  const c10::IValue& b_arg, double eps) {
  const std::optional<int64_t> cols = normalized_columns(x_in, normalized);
  if (!on_neuron(x_in) || x_in.numel() == 0 || !cols) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  at::Tensor w = w_arg.isNone() ? at::Tensor() : w_arg.toTensor();
  at::Tensor b = b_arg.isNone() ? at::Tensor() : b_arg.toTensor();
  for (const at::Tensor* p : {&w, &b}) {
    if (p->defined() && (!on_neuron(*p) || p->scalar_type() != x_in.scalar_type() || p->sizes() != normalized))
      return std::nullopt;
  }
  const bool rms = kind == kernels::NormKind::rmsnorm;
  c10::DeviceGuard guard(x_in.device());
  const int64_t c = *cols, rows = x_in.numel() / c;
  at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::NormSpec spec;
  spec.kind = kind;
  spec.shape = {rows, c};
  spec.eps = eps;
  spec.weight = w.defined();
  spec.bias = b.defined();
  spec.input_dtype = spec.output_dtype = spec.param_dtype = *dt;
  spec.save_stats = true;  // the kernel writes mean (layernorm) and rstd, fp32, for the backward
  std::ostringstream key;
  key << std::hexfloat << op << "|" << rows << "," << c << "|" << spec.weight << spec.bias << "|" << eps << "|"
      << c10::toString(x.scalar_type()) << "|stats";
  std::vector<HostBuffer> inputs = {buffer("x", x)};
  if (w.defined()) inputs.push_back(buffer("w", w = w.contiguous()));
  if (b.defined()) inputs.push_back(buffer("b", b = b.contiguous()));
  std::vector<int64_t> stat_shape = dims(x_in.sizes());  // [..., 1, ..., 1] over the normalized dims
  for (size_t i = 0; i < normalized.size(); ++i) stat_shape[stat_shape.size() - 1 - i] = 1;
  at::Tensor mean = rms ? at::Tensor() : at::empty(stat_shape, x_in.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(stat_shape, x_in.options().dtype(at::kFloat));
  std::vector<HostBuffer> outputs = {buffer("y", y), buffer("rstd", rstd)};
  if (!rms) outputs.push_back(buffer("mean", mean));
  execute_program(x_in.device().index(), key.str(),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::norm_program(spec, hw, core, cores);
                  },
                  inputs, outputs, record_for(op, {x_in}, x_in.scalar_type()));
  if (rms) return std::vector<at::Tensor>{y, rstd};  // fp32, as on the CPU
  // layer_norm's statistics have the input's dtype, as on the CPU (a cast kernel for 2-byte dtypes).
  return std::vector<at::Tensor>{y, mean.to(x_in.scalar_type()), rstd.to(x_in.scalar_type())};
}

// native_layer_norm_backward / _fused_rms_norm_backward with the saved statistics: dx, dw, db as
// output_mask asks (the kernel computes dw / db whenever the parameter exists).
std::optional<std::vector<at::Tensor>> lower_norm_backward(const std::string& op, kernels::NormKind kind,
                                                           const at::Tensor& dy_in, const at::Tensor& x_in,
                                                           c10::IntArrayRef normalized, const at::Tensor* mean_in,
                                                           const at::Tensor& rstd_in, const c10::IValue& w_arg,
                                                           const c10::IValue& b_arg, std::vector<bool> mask) {
  const std::optional<int64_t> cols = normalized_columns(x_in, normalized);
  if (!on_neuron(x_in) || !on_neuron(dy_in) || !cols || dy_in.sizes() != x_in.sizes() ||
      dy_in.scalar_type() != x_in.scalar_type())
    return std::nullopt;
  if (x_in.numel() == 0) {
    // No rows: dx is empty and the parameter gradients are sums over nothing (the CPU has no
    // _fused_rms_norm_backward to fall back to).
    c10::DeviceGuard guard(x_in.device());
    auto zeros_like_param = [&](const c10::IValue& p) {
      return p.isNone() ? at::Tensor() : at::zeros(p.toTensor().sizes(), p.toTensor().options());
    };
    std::vector<at::Tensor> result = {mask[0] ? at::empty(x_in.sizes(), x_in.options()) : at::Tensor(),
                                      mask[1] ? zeros_like_param(w_arg) : at::Tensor()};
    if (kind == kernels::NormKind::layernorm) result.push_back(mask.size() > 2 && mask[2] ? zeros_like_param(b_arg) : at::Tensor());
    return result;
  }
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt || !on_neuron(rstd_in) || !sim_dtype(rstd_in.scalar_type()) || (mean_in && (!on_neuron(*mean_in) || !sim_dtype(mean_in->scalar_type()))))
    return std::nullopt;
  at::Tensor w = w_arg.isNone() ? at::Tensor() : w_arg.toTensor();
  at::Tensor b = b_arg.isNone() ? at::Tensor() : b_arg.toTensor();
  for (const at::Tensor* p : {&w, &b}) {
    if (p->defined() && (!on_neuron(*p) || p->scalar_type() != x_in.scalar_type() || p->sizes() != normalized))
      return std::nullopt;
  }
  const int64_t c = *cols, rows = x_in.numel() / c;
  if (rstd_in.numel() != rows || (mean_in && mean_in->numel() != rows)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  kernels::NormBackwardSpec spec;
  spec.kind = kind;
  spec.shape = {rows, c};
  spec.weight = w.defined();
  spec.bias = b.defined();
  spec.input_dtype = spec.param_dtype = *dt;
  at::Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  at::Tensor rstd = rstd_in.contiguous().to(at::kFloat);
  std::vector<HostBuffer> inputs = {buffer("x", x), buffer("dy", dy), buffer("rstd", rstd)};
  at::Tensor mean;
  if (mean_in) inputs.push_back(buffer("mean", mean = mean_in->contiguous().to(at::kFloat)));
  if (w.defined()) inputs.push_back(buffer("w", w = w.contiguous()));
  at::Tensor dx = at::empty(x_in.sizes(), x_in.options());
  std::vector<HostBuffer> outputs = {buffer("dx", dx)};
  at::Tensor dw, db;
  if (w.defined()) outputs.push_back(buffer("dw", dw = at::empty(w.sizes(), w.options())));
  if (b.defined()) outputs.push_back(buffer("db", db = at::empty(b.sizes(), b.options())));
  const std::string key = op + "|" + std::to_string(rows) + "," + std::to_string(c) + "|" + std::to_string(spec.weight) +
                          std::to_string(spec.bias) + "|" + c10::toString(x.scalar_type());
  execute_program(x_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::norm_backward_program(spec, hw, core, cores); }, inputs, outputs,
                  record_for(op, {dy_in, x_in}, x_in.scalar_type()));
  std::vector<at::Tensor> result = {mask[0] ? dx : at::Tensor(), mask[1] ? dw : at::Tensor()};
  if (kind == kernels::NormKind::layernorm) result.push_back(mask.size() > 2 && mask[2] ? db : at::Tensor());
  return result;
}

// cat along any dim (kernels/data_movement.h concat): every input on the device, of one float
// dtype, non-empty (torch's legacy [0]-shaped inputs fall back).
std::optional<at::Tensor> lower_cat(const std::string& op, const std::vector<at::Tensor>& all_tensors, int64_t dim) {
  // torch's legacy rule: 1-D empty tensors ([0]) are skipped whatever the other shapes.
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& t : all_tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) tensors.push_back(t);
  if (tensors.empty() || !on_neuron(tensors[0]) || tensors[0].dim() == 0) return std::nullopt;
  const at::ScalarType type = at::native::result_type(all_tensors);  // cat promotes like an element-wise op
  const int64_t rank = tensors[0].dim();
  dim = c10::maybe_wrap_dim(dim, rank);
  std::vector<int64_t> out_shape = dims(tensors[0].sizes());
  out_shape[dim] = 0;
  for (const at::Tensor& t : tensors) {
    if (!on_neuron(t) || t.dim() != rank) return std::nullopt;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && t.size(d) != tensors[0].size(d)) return std::nullopt;
    out_shape[dim] += t.size(dim);
  }
  c10::DeviceGuard guard(tensors[0].device());
  // The result's memory format is torch's: the inputs' suggested format when they all agree (a
  // channels-last cat stays channels-last), else contiguous. A channels-last cat is a cat of the
  // NHWC storage along the matching dim.
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& t : tensors) {
    const at::MemoryFormat f = t.suggest_memory_format();
    if (f == at::MemoryFormat::Contiguous || (format && *format != f)) {
      format = at::MemoryFormat::Contiguous;
      break;
    }
    format = f;
  }
  std::vector<int64_t> storage_perm;  // logical dim of each storage-order dim
  if (format == at::MemoryFormat::ChannelsLast) storage_perm = {0, 2, 3, 1};
  if (format == at::MemoryFormat::ChannelsLast3d) storage_perm = {0, 2, 3, 4, 1};
  at::Tensor y = at::empty(out_shape, tensors[0].options().dtype(type).memory_format(format.value_or(at::MemoryFormat::Contiguous)));
  // Inputs of another dtype are cast on the device first; empty ones (a zero-width slice) add nothing.
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    at::Tensor part = t.scalar_type() == type ? t : t.to(type);
    parts.push_back(storage_perm.empty() ? part.contiguous() : part.contiguous(*format).permute(storage_perm));
  }
  if (parts.empty()) return y;
  if (!storage_perm.empty()) dim = std::find(storage_perm.begin(), storage_perm.end(), dim) - storage_perm.begin();
  // Concatenation only moves bytes: an integer or bool tensor is moved as the same bytes in an
  // integer dtype of its width (int64 as int32 pairs: a trailing dim of 2).
  const std::optional<DType> dt = elementwise_dtype(type);
  const bool pairs = type == at::kLong;
  if (!dt) return std::nullopt;
  auto kernel_shape = [&](c10::IntArrayRef sizes) {
    std::vector<int64_t> shape = dims(sizes);
    if (pairs) shape.push_back(2);
    return shape;
  };
  kernels::ConcatSpec spec;
  spec.dim = dim;
  spec.dtype = *dt;
  std::vector<HostBuffer> inputs;
  std::string key = op + "|" + std::to_string(dim) + "|" + c10::toString(type) + "|";
  for (size_t k = 0; k < parts.size(); ++k) {
    spec.shapes.push_back(kernel_shape(parts[k].sizes()));
    inputs.push_back(HostBuffer{"x" + std::to_string(k), parts[k].data_ptr(), size_t(parts[k].numel()) * (pairs ? 2 : 1), *dt});
    key += dims_key(parts[k].sizes());
  }
  OpRecord record;
  record.op = op;
  for (const at::Tensor& t : tensors) record.shapes.push_back(dims(t.sizes()));
  record.dtype = c10::toString(type);
  execute_program(tensors[0].device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::concat_program(spec, hw, core, cores); }, inputs,
                  {HostBuffer{"y", y.data_ptr(), size_t(y.numel()) * (pairs ? 2 : 1), *dt}}, std::move(record));
  return y;
}

// sigmoid_backward(grad, y) = grad * y * (1 - y); tanh_backward(grad, y) = grad * (1 - y^2): composed
// of element-wise kernels. gelu_backward and silu_backward: lower_gelu_backward / lower_silu_backward.
std::optional<at::Tensor> lower_activation_backward(const std::string& op, const at::Tensor& grad, const at::Tensor& y) {
  if (!on_neuron(grad) || !on_neuron(y) || grad.sizes() != y.sizes() || grad.scalar_type() != y.scalar_type())
    return std::nullopt;
  const at::Tensor one = at::scalar_tensor(1.0, at::kDouble);
  std::optional<at::Tensor> local;
  if (op == "sigmoid_backward") {
    std::optional<at::Tensor> one_minus = lower_binary(op + ".1-y", one, y, BinaryOp::subtract);
    if (!one_minus) return std::nullopt;
    local = lower_binary(op + ".y(1-y)", y, *one_minus, BinaryOp::multiply);
  } else {
    std::optional<at::Tensor> sq = lower_binary(op + ".y^2", y, y, BinaryOp::multiply);
    if (!sq) return std::nullopt;
    local = lower_binary(op + ".1-y^2", one, *sq, BinaryOp::subtract);
  }
  if (!local) return std::nullopt;
  return lower_binary(op, grad, *local, BinaryOp::multiply);
}

// pow.Tensor_Scalar for the exponents the unary kernel has: 2 (square), 1 (copy), 0.5 (sqrt),
// -0.5 (rsqrt), -1 (reciprocal); others fall back.
std::optional<at::Tensor> lower_pow(const std::string& op, const at::Tensor& x, const c10::Scalar& e) {
  if (!e.isFloatingPoint() && !e.isIntegral(false)) return std::nullopt;
  const double v = e.toDouble();
  if (v == 2) return lower_unary(op, x, UnaryOp::square);
  if (v == 1) return lower_unary(op, x, UnaryOp::copy);
  if (v == 0.5) return lower_unary(op, x, UnaryOp::sqrt);
  if (v == -0.5) return lower_unary(op, x, UnaryOp::rsqrt);
  if (v == -1) return lower_unary(op, x, UnaryOp::reciprocal);
  // x^3 (rsqrt's backward), x^-2, x^-1.5: two kernels.
  if (v == 3 || v == -2 || v == -1.5) {
    std::optional<at::Tensor> first = lower_unary(op, x, v == 3 ? UnaryOp::square : v == -2 ? UnaryOp::square : UnaryOp::rsqrt);
    if (!first) return std::nullopt;
    if (v == 3) return lower_binary(op, *first, x, BinaryOp::multiply);
    if (v == -2) return lower_unary(op, *first, UnaryOp::reciprocal);
    std::optional<at::Tensor> cubed = lower_binary(op, *first, *first, BinaryOp::multiply);  // x^-1
    return cubed ? lower_binary(op, *cubed, *first, BinaryOp::multiply) : std::nullopt;
  }
  return std::nullopt;
}

bool is_one(const c10::IValue& v) { return v.isScalar() ? v.toScalar().equal(1) : false; }

// add / sub's alpha: other * alpha by one more kernel (rounded once more than torch's fused form);
// a 0-dim other with alpha != 1 falls back.
std::optional<at::Tensor> scaled_by_alpha(const std::string& op, const at::Tensor& self, const at::Tensor& other,
                                          const c10::IValue& alpha) {
  if (is_one(alpha)) return other;
  if (!alpha.isScalar() || other.dim() == 0) return std::nullopt;
  const c10::Scalar a = alpha.toScalar();
  if (!a.isFloatingPoint() && !a.isIntegral(false)) return std::nullopt;
  if (!on_neuron(other) || other.scalar_type() != at::result_type(self, other)) return std::nullopt;
  return lower_binary(op + ".alpha", other, at::scalar_tensor(a.toDouble(), at::kDouble), BinaryOp::multiply);
}

// silu_backward(grad, x) = grad * s * (1 + x * (1 - s)), s = sigmoid(x) (the activation table).
std::optional<at::Tensor> lower_silu_backward(const at::Tensor& grad, const at::Tensor& x) {
  if (!on_neuron(grad) || !on_neuron(x) || grad.sizes() != x.sizes() || grad.scalar_type() != x.scalar_type())
    return std::nullopt;
  const std::string op = "silu_backward";
  std::optional<at::Tensor> s = lower_unary(op + ".sigmoid", x, UnaryOp::sigmoid);
  if (!s) return std::nullopt;
  std::optional<at::Tensor> t = lower_binary(op + ".1-s", at::scalar_tensor(1.0, at::kDouble), *s, BinaryOp::subtract);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".x(1-s)", x, *t, BinaryOp::multiply);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".1+", *t, at::scalar_tensor(1.0, at::kDouble), BinaryOp::add);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".s*", *s, *t, BinaryOp::multiply);
  if (!t) return std::nullopt;
  return lower_binary(op, grad, *t, BinaryOp::multiply);
}

// gelu_backward(grad, x): approximate="none" is grad * gelu'(x) with the activation table's exact
// gelu_dx (Phi(x) + x * phi(x)). approximate="tanh" (the ISA has no derivative of the tanh form) is
// composed: with u = k x (1 + c x^2), t = tanh(u), gelu' = 0.5 (1 + t) + 0.5 k x (1 - t^2) (1 + 3c x^2),
// k = sqrt(2/pi), c = 0.044715. Each step rounds to the tensor's dtype (bf16 is looser than torch's
// fp32-internal formula).
std::optional<at::Tensor> lower_gelu_backward(const at::Tensor& grad, const at::Tensor& x, const std::string& approximate) {
  if (!on_neuron(grad) || !on_neuron(x) || grad.sizes() != x.sizes() || grad.scalar_type() != x.scalar_type())
    return std::nullopt;
  const std::string op = "gelu_backward";
  if (approximate == "none") {
    std::optional<at::Tensor> d = lower_unary(op + ".dx", x, UnaryOp::gelu_dx);
    if (!d) return std::nullopt;
    return lower_binary(op, grad, *d, BinaryOp::multiply);
  }
  if (approximate != "tanh") return std::nullopt;
  constexpr double k = 0.7978845608028654, c = 0.044715;
  auto num = [](double v) { return at::scalar_tensor(v, at::kDouble); };
  std::optional<at::Tensor> x2 = lower_binary(op + ".x2", x, x, BinaryOp::multiply);
  if (!x2) return std::nullopt;
  std::optional<at::Tensor> u = lower_binary(op + ".cx2", *x2, num(c), BinaryOp::multiply);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".1+cx2", *u, num(1.0), BinaryOp::add);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".x(1+cx2)", x, *u, BinaryOp::multiply);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".ku", *u, num(k), BinaryOp::multiply);
  if (!u) return std::nullopt;
  std::optional<at::Tensor> t = lower_unary(op + ".tanh", *u, UnaryOp::tanh);
  if (!t) return std::nullopt;
  std::optional<at::Tensor> r = lower_binary(op + ".t2", *t, *t, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".1-t2", num(1.0), *r, BinaryOp::subtract);
  if (!r) return std::nullopt;
  std::optional<at::Tensor> p = lower_binary(op + ".3cx2", *x2, num(3.0 * c), BinaryOp::multiply);
  if (!p) return std::nullopt;
  p = lower_binary(op + ".1+3cx2", *p, num(1.0), BinaryOp::add);
  if (!p) return std::nullopt;
  r = lower_binary(op + ".(1-t2)(1+3cx2)", *r, *p, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".x*", *r, x, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".0.5k*", *r, num(0.5 * k), BinaryOp::multiply);
  if (!r) return std::nullopt;
  std::optional<at::Tensor> h = lower_binary(op + ".0.5t", *t, num(0.5), BinaryOp::multiply);
  if (!h) return std::nullopt;
  h = lower_binary(op + ".0.5+0.5t", *h, num(0.5), BinaryOp::add);
  if (!h) return std::nullopt;
  h = lower_binary(op + ".dx", *h, *r, BinaryOp::add);
  if (!h) return std::nullopt;
  return lower_binary(op, grad, *h, BinaryOp::multiply);
}

// out[i, :] = table[ids[i], :] (embedding gather kernel): embedding (ids any shape, table [V, D]) and
// index_select along dim 0 (table any rank >= 1, rows flattened). Ids (int64/int32, any device
// memory is host memory here) are checked on the host; out of range falls back so torch raises.
std::optional<at::Tensor> lower_embedding(const std::string& op, const at::Tensor& table_in, const at::Tensor& ids_in,
                                          bool index_select) {
  if (!on_neuron(table_in) || !ids_in.defined() || table_in.dim() < 1) return std::nullopt;
  if (!index_select && table_in.dim() != 2) return std::nullopt;
  if (index_select && ids_in.dim() > 1) return std::nullopt;
  if (ids_in.scalar_type() != at::kLong && ids_in.scalar_type() != at::kInt) return std::nullopt;
  if (ids_in.device().type() != kNeuron && !ids_in.is_cpu()) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(table_in.scalar_type());
  if (!dt) return std::nullopt;
  const int64_t vocab = table_in.size(0);
  const int64_t dim = table_in.numel() / std::max<int64_t>(vocab, 1);
  const int64_t num_ids = ids_in.numel();
  if (vocab == 0 || dim == 0 || num_ids == 0 || vocab > std::numeric_limits<int32_t>::max()) return std::nullopt;
  c10::DeviceGuard guard(table_in.device());
  at::Tensor ids_c = ids_in.contiguous();
  at::Tensor ids_host =
      at::from_blob(ids_c.data_ptr(), {num_ids}, at::TensorOptions().dtype(ids_c.scalar_type()).device(at::kCPU))
          .to(at::kInt, /*non_blocking=*/false, /*copy=*/true);
  const int32_t* p = ids_host.data_ptr<int32_t>();
  if (ids_c.scalar_type() == at::kLong) {
    const int64_t* q = static_cast<const int64_t*>(ids_c.data_ptr());
    for (int64_t i = 0; i < num_ids; ++i)
      if (q[i] < 0 || q[i] >= vocab) return std::nullopt;
  } else {
    for (int64_t i = 0; i < num_ids; ++i)
      if (p[i] < 0 || p[i] >= vocab) return std::nullopt;
  }
  at::Tensor table = table_in.contiguous();
  kernels::EmbeddingSpec spec;
  spec.num_ids = num_ids;
  spec.vocab = vocab;
  spec.dim = dim;
  spec.dtype = *dt;
  spec.index_dtype = DType::int32;
  std::vector<int64_t> out_shape;
  if (index_select) {
    out_shape = dims(table_in.sizes());
    out_shape[0] = num_ids;
  } else {
    out_shape = dims(ids_in.sizes());
    out_shape.push_back(dim);
  }
  at::Tensor y = at::empty(out_shape, table_in.options());
  const std::string key = "embedding|" + std::to_string(num_ids) + "," + std::to_string(vocab) + "," +
                          std::to_string(dim) + "|" + c10::toString(table_in.scalar_type());
  OpRecord record = record_for(op, {table_in, ids_in}, table_in.scalar_type());
  execute_program(table_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::embedding_program(spec, hw, core, cores); },
                  {HostBuffer{"ids", ids_host.data_ptr(), static_cast<size_t>(num_ids), DType::int32},
                   buffer("table", table)},
                  {buffer("y", y)}, std::move(record));
  return y;
}

// nll_loss over [N, C] log-probabilities with class targets (no weight=): the picked log-prob of
// each row is an embedding gather (table [N*C, 1], id r*C + target), times a host-built mask
// (-1 on counted rows, 0 on ignored ones), then summed (and / count for mean); the backward is the
// one-hot kernel (lower_nll_loss_backward). Targets (integer metadata, like embedding ids) are
// checked on the host; out of range falls back. Reduction: 0 none, 1 mean, 2 sum. Returns the
// gather ids and the [N, 1] mask.
std::optional<std::pair<at::Tensor, at::Tensor>> nll_loss_mask(const at::Tensor& self, const at::Tensor& target,
                                                                const c10::IValue& weight, int64_t ignore_index,
                                                                int64_t* count) {
  const bool no_weight = weight.isNone() || (weight.isTensor() && !weight.toTensor().defined());
  if (!on_neuron(self) || self.dim() != 2 || !no_weight || !sim_dtype(self.scalar_type())) return std::nullopt;
  if (target.dim() != 1 || target.size(0) != self.size(0) || target.scalar_type() != at::kLong) return std::nullopt;
  if (target.device().type() != kNeuron && !target.is_cpu()) return std::nullopt;
  const int64_t n = self.size(0), c = self.size(1);
  if (n == 0 || c == 0 || n * c > std::numeric_limits<int32_t>::max()) return std::nullopt;
  at::Tensor t = target.contiguous();
  const int64_t* tp = static_cast<const int64_t*>(t.data_ptr());
  at::Tensor ids = at::zeros({n}, at::kLong);
  at::Tensor mask = at::zeros({n, 1}, at::kFloat);
  int64_t* ip = ids.data_ptr<int64_t>();
  float* mp = mask.data_ptr<float>();
  *count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (tp[r] == ignore_index) continue;
    if (tp[r] < 0 || tp[r] >= c) return std::nullopt;
    ip[r] = r * c + tp[r];
    mp[r] = -1.0f;
    ++*count;
  }
  return std::make_pair(ids, mask.to(self.options()));
}

std::optional<std::vector<at::Tensor>> lower_nll_loss(const std::string& op, const at::Tensor& self,
                                                      const at::Tensor& target, const c10::IValue& weight,
                                                      int64_t reduction, int64_t ignore_index) {
  int64_t count = 0;
  auto m = nll_loss_mask(self, target, weight, ignore_index, &count);
  if (!m || reduction < 0 || reduction > 2 || (reduction == 1 && count == 0)) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  const int64_t n = self.size(0), c = self.size(1);
  std::optional<at::Tensor> picked = lower_embedding(op + ".gather", self.contiguous().reshape({n * c, 1}), m->first, false);
  if (!picked) return std::nullopt;
  std::optional<at::Tensor> loss = lower_binary(op + ".mask", *picked, m->second, BinaryOp::multiply);
  if (!loss) return std::nullopt;
  if (reduction == 0) {
    loss = loss->reshape({n});
  } else {
    loss = lower_reduce(op + ".sum", *loss, {}, false, ReduceOp::sum);
    if (loss && reduction == 1)  // as [1]: two 0-dim operands would both be immediates
      loss = lower_binary(op + ".mean", loss->reshape({1}), at::scalar_tensor(static_cast<double>(count), at::kDouble),
                          BinaryOp::divide);
    if (!loss) return std::nullopt;
    loss = loss->reshape({});
  }
  at::Tensor total_weight = at::empty({}, self.options());
  total_weight.fill_(reduction == 0 ? 0.0 : static_cast<double>(count));
  return std::vector<at::Tensor>{*loss, total_weight};
}

// Targets / ids as the one-hot kernel's int32 index: -1 where the row is ignored (ignore_index,
// padding_idx), checked on the host (integer metadata, like embedding ids); nullopt when one is
// out of range (the caller falls back, so torch raises its error).
std::optional<std::vector<int32_t>> one_hot_index(const at::Tensor& ids_in, int64_t classes, int64_t ignored,
                                                  int64_t* count) {
  at::Tensor ids_c = ids_in.contiguous();
  at::Tensor ids = at::from_blob(ids_c.data_ptr(), {ids_c.numel()}, at::TensorOptions().dtype(ids_c.scalar_type()))
                       .to(at::kLong, false, true);
  const int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<int32_t> index(static_cast<size_t>(ids.numel()));
  *count = 0;
  for (int64_t r = 0; r < ids.numel(); ++r) {
    if (ip[r] == ignored) {
      index[r] = -1;
      continue;
    }
    if (ip[r] < 0 || ip[r] >= classes) return std::nullopt;
    index[r] = static_cast<int32_t>(ip[r]);
    ++*count;
  }
  return index;
}

// nll_loss_backward: grad_input [N, C] = -grad (/ total_weight for mean) at [r, target[r]], 0
// elsewhere, built on the device by the one-hot kernel (per-row scale = grad_output for 'none',
// its one value broadcast for 'sum' / 'mean').
std::optional<at::Tensor> lower_nll_loss_backward(const std::string& op, const at::Tensor& grad, const at::Tensor& self,
                                                  const at::Tensor& target, const c10::IValue& weight, int64_t reduction,
                                                  int64_t ignore_index, const at::Tensor& total_weight) {
  const bool no_weight = weight.isNone() || (weight.isTensor() && !weight.toTensor().defined());
  if (!on_neuron(self) || self.dim() != 2 || !no_weight || !sim_dtype(self.scalar_type())) return std::nullopt;
  if (target.dim() != 1 || target.size(0) != self.size(0) || target.scalar_type() != at::kLong) return std::nullopt;
  if (target.device().type() != kNeuron && !target.is_cpu()) return std::nullopt;
  if (reduction < 0 || reduction > 2 || !on_neuron(grad) || grad.scalar_type() != self.scalar_type()) return std::nullopt;
  if (reduction == 0 && (grad.dim() != 1 || grad.size(0) != self.size(0))) return std::nullopt;
  if (reduction != 0 && grad.numel() != 1) return std::nullopt;
  const int64_t n = self.size(0), c = self.size(1);
  if (n == 0 || c == 0) return std::nullopt;
  int64_t count = 0;
  std::optional<std::vector<int32_t>> index = one_hot_index(target, c, ignore_index, &count);
  if (!index) return std::nullopt;
  double multiplier = -1.0;
  if (reduction == 1) {
    if (total_weight.numel() != 1) return std::nullopt;
    const double total = (on_neuron(total_weight) ? local_scalar_dense(total_weight) : total_weight.item()).toDouble();
    multiplier = -1.0 / total;  // torch divides by total_weight (0 gives inf / nan, as on the CPU)
  }
  c10::DeviceGuard guard(self.device());
  kernels::OneHotSpec spec;
  spec.rows = n;
  spec.classes = c;
  spec.scaled = true;
  spec.scale_broadcast = reduction != 0;
  spec.multiplier = multiplier;
  spec.output_dtype = *sim_dtype(self.scalar_type());
  at::Tensor grad_c = grad.contiguous();
  at::Tensor out = at::empty({n, c}, self.options());
  std::ostringstream key;
  key << std::hexfloat << op << "|" << n << "," << c << "|" << reduction << "|" << multiplier << "|"
      << c10::toString(self.scalar_type());
  HostBuffer index_buffer{"index", index->data(), index->size(), DType::int32};
  execute_program(self.device().index(), key.str(),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::one_hot_program(spec, hw, core, cores);
                  },
                  {index_buffer, buffer("scale", grad_c)}, {buffer("y", out)},
                  record_for(op, {grad, self}, self.scalar_type()));
  return out;
}

// embedding_dense_backward: grad_weight [V, D] = onehot^T [V, N] @ grad [N, D] on the matmul kernel
// (the one-hot [N, V] built on the device by the one-hot kernel, padding_idx rows zero, loaded
// transposed by the matmul); bounded (V * N), no scale_grad_by_freq.
std::optional<at::Tensor> lower_embedding_backward(const std::string& op, const at::Tensor& grad_in,
                                                   const at::Tensor& ids_in, int64_t vocab, int64_t padding_idx,
                                                   bool scale_grad_by_freq) {
  if (!on_neuron(grad_in) || scale_grad_by_freq || !sim_dtype(grad_in.scalar_type()) || grad_in.dim() < 1) return std::nullopt;
  if (ids_in.scalar_type() != at::kLong && ids_in.scalar_type() != at::kInt) return std::nullopt;
  if (ids_in.device().type() != kNeuron && !ids_in.is_cpu()) return std::nullopt;
  const int64_t n = ids_in.numel(), d = grad_in.size(-1);
  if (n == 0 || d == 0 || vocab <= 0 || grad_in.numel() != n * d || vocab * n > (int64_t(1) << 26)) return std::nullopt;
  int64_t count = 0;
  std::optional<std::vector<int32_t>> index = one_hot_index(ids_in, vocab, padding_idx < 0 ? -1 : padding_idx, &count);
  if (!index) return std::nullopt;
  c10::DeviceGuard guard(grad_in.device());
  kernels::OneHotSpec spec;
  spec.rows = n;
  spec.classes = vocab;
  spec.output_dtype = *sim_dtype(grad_in.scalar_type());
  at::Tensor onehot = at::empty({n, vocab}, grad_in.options());
  HostBuffer index_buffer{"index", index->data(), index->size(), DType::int32};
  execute_program(grad_in.device().index(),
                  op + ".one_hot|" + std::to_string(n) + "," + std::to_string(vocab) + "|" + c10::toString(grad_in.scalar_type()),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::one_hot_program(spec, hw, core, cores);
                  },
                  {index_buffer}, {buffer("y", onehot)}, record_for(op + ".one_hot", {ids_in}, grad_in.scalar_type()));
  return lower_matmul(op, onehot.t(), grad_in.reshape({n, d}), nullptr);
}

// triu / tril over the last two dims (the triangle kernel: GpSimd affine_select per row tile).
std::optional<at::Tensor> lower_triangle(const std::string& op, const at::Tensor& x_in, int64_t diagonal, bool upper) {
  if (!on_neuron(x_in) || x_in.dim() < 2 || x_in.numel() == 0) return std::nullopt;
  // Elements are copied or zeroed through the engine's fp32 datapath: floats, and integers of at
  // most 2 bytes (a bool mask as uint8), keep their values exactly.
  const bool narrow_int = at::isIntegralType(x_in.scalar_type(), true) && c10::elementSize(x_in.scalar_type()) <= 2;
  const std::optional<DType> dt =
      sim_dtype(x_in.scalar_type()) || narrow_int ? elementwise_dtype(x_in.scalar_type()) : std::nullopt;
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::TriangleSpec spec;
  spec.rows = x.size(-2);
  spec.cols = x.size(-1);
  spec.batch = x.numel() / (spec.rows * spec.cols);
  spec.diagonal = diagonal;
  spec.upper = upper;
  spec.dtype = *dt;
  const std::string key = std::string(upper ? "triu|" : "tril|") + std::to_string(spec.batch) + "," +
                          std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" + std::to_string(diagonal) +
                          "|" + std::string(dtype_name(*dt));
  execute_program(x_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::triangle_program(spec, hw, core, cores);
                  },
                  {HostBuffer{"x", x.data_ptr(), size_t(x.numel()), *dt}}, {HostBuffer{"y", y.data_ptr(), size_t(y.numel()), *dt}},
                  record_for(op, {x_in}, x_in.scalar_type()));
  return y;
}

// A Scalar argument as the 0-dim operand torch's promotion sees (an integer stays an integer).
at::Tensor scalar_operand(const c10::Scalar& v) {
  return at::scalar_tensor(v, v.isFloatingPoint() ? at::kDouble : v.isBoolean() ? at::kBool : at::kLong);
}

// Bitwise ops on bool tensors and the logical ops on any tensor: truth values as 1 / 0, and is
// minimum, or is maximum, xor is not_equal, not is == 0. Bitwise ops on integers fall back (the
// kernels compute in fp32).
std::optional<at::Tensor> lower_logical(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  static const std::map<std::string, BinaryOp> binary = {
      {"bitwise_and.Tensor", BinaryOp::minimum}, {"bitwise_or.Tensor", BinaryOp::maximum},
      {"bitwise_xor.Tensor", BinaryOp::not_equal}, {"logical_and", BinaryOp::minimum},
      {"logical_or", BinaryOp::maximum}, {"logical_xor", BinaryOp::not_equal}};
  auto truth = [&](const at::Tensor& t) -> std::optional<at::Tensor> {
    if (t.scalar_type() == at::kBool) return t;
    return lower_binary(op + ".ne0", t, at::scalar_tensor(0.0, at::kDouble), BinaryOp::not_equal, true);
  };
  if (op == "logical_not" || op == "bitwise_not") {
    const at::Tensor& x = args[0].toTensor();
    if (op == "bitwise_not" && x.scalar_type() != at::kBool) return std::nullopt;
    return lower_binary(op, x, at::scalar_tensor(0.0, at::kDouble), BinaryOp::equal, true);
  }
  static const std::map<std::string, BinaryOp> integer_bitwise = {
      {"bitwise_and.Tensor", BinaryOp::bitwise_and}, {"bitwise_or.Tensor", BinaryOp::bitwise_or},
      {"bitwise_xor.Tensor", BinaryOp::bitwise_xor}, {"bitwise_and.Scalar", BinaryOp::bitwise_and},
      {"bitwise_or.Scalar", BinaryOp::bitwise_or}, {"bitwise_xor.Scalar", BinaryOp::bitwise_xor}};
  const bool bitwise = op.rfind("bitwise", 0) == 0;
  if (bitwise) {
    const at::Tensor& a = args[0].toTensor();
    const at::Tensor b = args[1].isTensor() ? args[1].toTensor() : scalar_operand(args[1].toScalar());
    if (!at::isIntegralType(a.scalar_type(), true) || !at::isIntegralType(b.scalar_type(), true)) return std::nullopt;
    if (a.scalar_type() != at::kBool || b.scalar_type() != at::kBool) {
      // integers (or a bool with an integer): the ALU's bitvec ops on the two's-complement values
      auto ib = integer_bitwise.find(op);
      if (ib == integer_bitwise.end()) return std::nullopt;
      return lower_binary(op, a, b, ib->second);
    }
  }
  auto it = binary.find(op);
  if (it == binary.end()) return std::nullopt;
  const at::Tensor &a = args[0].toTensor(), &b = args[1].toTensor();
  if (!on_neuron(a) || !on_neuron(b)) return std::nullopt;
  std::optional<at::Tensor> ta = truth(a), tb = truth(b);
  if (!ta || !tb) return std::nullopt;
  return lower_binary(op, *ta, *tb, it->second, it->second == BinaryOp::not_equal);
}

// hardsigmoid(x) = min(max(x + 3, 0), 6) / 6 and hardswish(x) = x * that, with their backwards,
// composed of element-wise kernels in torch's order of operations.
std::optional<at::Tensor> lower_hard_activation(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (op != "hardsigmoid" && op != "hardswish" && op != "hardsigmoid_backward" && op != "hardswish_backward")
    return std::nullopt;
  const bool backward = op.size() > 9 && op.substr(op.size() - 9) == "_backward";
  const at::Tensor& x = args[backward ? 1 : 0].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
  auto imm = [](double v) { return at::scalar_tensor(v, at::kDouble); };
  auto bin = [&](const at::Tensor& a, const at::Tensor& b, BinaryOp k, bool compare = false) {
    std::optional<at::Tensor> r = lower_binary(op, a, b, k, compare, /*round_immediate=*/false);
    if (!r) throw std::invalid_argument(op + ": an element-wise step has no kernel");
    return *r;
  };
  auto where = [&](const at::Tensor& cond, std::optional<at::Tensor> a, std::optional<double> as, std::optional<at::Tensor> b,
                   std::optional<double> bs) {
    std::optional<at::Tensor> r = lower_where(op, cond, a, as, b, bs, x.scalar_type());
    if (!r) throw std::invalid_argument(op + ": where has no kernel");
    return *r;
  };
  if (op == "hardsigmoid" || op == "hardswish") {
    at::Tensor t = bin(bin(bin(x, imm(3.0), BinaryOp::add), imm(0.0), BinaryOp::maximum), imm(6.0), BinaryOp::minimum);
    if (op == "hardswish") t = bin(x, t, BinaryOp::multiply);
    return bin(t, imm(6.0), BinaryOp::divide);
  }
  const at::Tensor& grad = args[0].toTensor();
  if (!on_neuron(grad) || grad.scalar_type() != x.scalar_type() || grad.sizes() != x.sizes()) return std::nullopt;
  if (op == "hardsigmoid_backward") {  // grad / 6 where -3 < x < 3, else 0
    const at::Tensor inside = bin(bin(x, imm(-3.0), BinaryOp::greater, true), bin(x, imm(3.0), BinaryOp::less, true), BinaryOp::minimum);
    return where(inside, bin(grad, imm(6.0), BinaryOp::divide), std::nullopt, std::nullopt, 0.0);
  }
  // hardswish_backward: 0 below -3, grad * (x / 3 + 0.5) up to 3, grad above
  const at::Tensor slope = bin(grad, bin(bin(x, imm(3.0), BinaryOp::divide), imm(0.5), BinaryOp::add), BinaryOp::multiply);
  const at::Tensor upper = where(bin(x, imm(3.0), BinaryOp::less_equal, true), slope, std::nullopt, grad, std::nullopt);
  return where(bin(x, imm(-3.0), BinaryOp::less, true), std::nullopt, 0.0, upper, std::nullopt);
}

// torch.linalg.vector_norm for ord 2, 1, inf, -inf over any dims: |x| or x^2, a reduction, and the
// square root, computed in fp32 (a bf16 input is cast on the device first, the result rounded once,
// as torch's opmath does).
std::optional<at::Tensor> lower_vector_norm(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type()) || x_in.numel() == 0 || !args[4].isNone()) return std::nullopt;
  const double ord = args[1].toScalar().toDouble();
  const double inf = std::numeric_limits<double>::infinity();
  if (ord != 2 && ord != 1 && ord != inf && ord != -inf) return std::nullopt;
  const std::vector<int64_t> rdims = int_list(args[2]);
  const bool keepdim = args[3].toBool();
  c10::DeviceGuard guard(x_in.device());
  const at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
  std::optional<at::Tensor> t = ord == 2 ? lower_binary(op + ".square", x, x, BinaryOp::multiply) : lower_unary(op + ".abs", x, UnaryOp::abs);
  if (!t) return std::nullopt;
  const ReduceOp kind = ord == inf ? ReduceOp::max : ord == -inf ? ReduceOp::min : ReduceOp::sum;
  std::optional<at::Tensor> r = lower_reduce(op + ".reduce", *t, rdims, keepdim, kind);
  if (r && ord == 2) r = lower_unary(op + ".sqrt", *r, UnaryOp::sqrt);
  if (!r) return std::nullopt;
  return x_in.scalar_type() == at::kFloat ? r : std::optional<at::Tensor>(r->to(x_in.scalar_type()));
}

// var / var_mean (correction overloads): two passes as torch, the mean, then the sum of squared
// deviations over (N - correction), in fp32 (a bf16 input cast on the device, the results rounded once).
std::optional<std::pair<at::Tensor, at::Tensor>> lower_var_mean(c10::ArrayRef<c10::IValue> args, bool std_dev = false) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type()) || x.numel() == 0) return std::nullopt;
  const std::vector<int64_t> rdims = int_list(args[1]);
  const double correction = args[2].isNone() ? 1.0 : args[2].toScalar().toDouble();
  const bool keepdim = args[3].toBool();
  c10::DeviceGuard guard(x.device());
  int64_t n = rdims.empty() ? x.numel() : 1;
  for (int64_t d : rdims) n *= x.size(c10::maybe_wrap_dim(d, x.dim()));
  const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  const std::vector<int64_t> all_ones(x.dim(), 1);
  const at::Tensor mean = rdims.empty() ? at::mean(xf).reshape(all_ones) : at::mean(xf, rdims, true);
  const at::Tensor dev = at::sub(xf, mean);
  at::Tensor ss = rdims.empty() ? at::sum(at::mul(dev, dev)) : at::sum(at::mul(dev, dev), rdims, keepdim);
  if (rdims.empty() && keepdim) ss = ss.reshape(all_ones);
  at::Tensor var = at::div(ss, std::max(0.0, double(n) - correction));
  if (std_dev) var = at::sqrt(var);
  at::Tensor m = keepdim ? mean : rdims.empty() ? mean.reshape({}) : mean.squeeze(rdims);
  if (x.scalar_type() != at::kFloat) {
    var = var.to(x.scalar_type());
    m = m.to(x.scalar_type());
  }
  return std::make_pair(var, m);
}

// A matmul with an empty operand: zeros (k = 0) or an empty result, and addmm's beta * self.
std::optional<at::Tensor> lower_empty_matmul(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (op != "mm" && op != "bmm" && op != "addmm") return std::nullopt;
  const bool add = op == "addmm";
  const at::Tensor &a = args[add ? 1 : 0].toTensor(), &b = args[add ? 2 : 1].toTensor();
  if (!on_neuron(a) || !on_neuron(b) || a.dim() < 2 || b.dim() < 2 || a.scalar_type() != b.scalar_type()) return std::nullopt;
  if (a.numel() != 0 && b.numel() != 0) return std::nullopt;
  if (a.size(-1) != b.size(-2) || (a.dim() == 3 && a.size(0) != b.size(0))) return std::nullopt;  // torch's error
  c10::DeviceGuard guard(a.device());
  std::vector<int64_t> shape = dims(a.sizes());
  shape.back() = b.size(-1);
  at::Tensor product = at::zeros(shape, a.options());
  if (!add) return product;
  const c10::Scalar beta = args[3].toScalar();
  if (beta.equal(0) || product.numel() == 0) return product;
  return at::mul(args[0].toTensor(), beta).expand(shape).contiguous();
}

// cumsum / cumprod along any dim (kernels/scan.h: an inclusive scan along the last dim of
// [rows, cols], fp32 accumulation, each output rounded once as torch's CPU does): the dim moved
// last by a device permute and back. Integer cumsums are exact while sum |x| <= 2^24 (every prefix
// then is); integer cumprods go to the CPU.
std::optional<at::Tensor> lower_scan(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  const bool sum = op == "cumsum";
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in)) return std::nullopt;
  const bool integral = at::isIntegralType(x_in.scalar_type(), true);
  const at::ScalarType result = !args[2].isNone() ? static_cast<at::ScalarType>(args[2].toInt())
                                : integral ? at::kLong : x_in.scalar_type();
  if (integral != at::isIntegralType(result, true) || result == at::kBool) return std::nullopt;
  if (integral && (!sum || host_alias(x_in).to(at::kDouble).abs().sum().item<double>() > kExactIntegerBound))
    return std::nullopt;
  if (!integral && !sim_dtype(result)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const int64_t d = c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x_in.dim(), 1));
  at::Tensor out = at::empty(x_in.sizes(), x_in.options().dtype(result));
  if (x_in.numel() == 0) return out;
  const at::Tensor x = x_in.dim() == 0 ? x_in.reshape({1}) : x_in.movedim(d, -1).contiguous();
  kernels::ScanSpec spec;
  spec.cols = x.size(-1);
  spec.rows = x.numel() / spec.cols;
  spec.op = sum ? kernels::ScanOp::sum : kernels::ScanOp::prod;
  spec.input_dtype = *elementwise_dtype(x.scalar_type());
  spec.output_dtype = *elementwise_dtype(result);
  const at::Tensor source = kernel_input(x);
  const bool in_place = result != at::kLong && (x_in.dim() == 0 || d == x_in.dim() - 1);  // no permute back
  at::Tensor scanned = in_place ? out.view(x.sizes())
                                : at::empty(x.sizes(), x.options().dtype(result == at::kLong ? at::kInt : result));
  const std::string key = op + "|" + std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" +
                          std::string(dtype_name(spec.input_dtype)) + ">" + std::string(dtype_name(spec.output_dtype));
  execute_program(x_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::scan_program(spec, hw, core, cores); },
                  {HostBuffer{"x", source.data_ptr(), size_t(x.numel()), spec.input_dtype}},
                  {HostBuffer{"y", scanned.data_ptr(), size_t(x.numel()), spec.output_dtype}}, record_for(op, {x_in}, x_in.scalar_type()));
  if (in_place) return out;
  const at::Tensor back = x_in.dim() == 0 ? scanned.reshape(std::vector<int64_t>{}) : scanned.movedim(-1, d);
  if (result == at::kLong) host_alias(out).copy_(host_alias(back));  // int32 results widened
  else out.copy_(back);  // a device permute back
  return out;
}

// prod over one dim or all (kernels/scan.h prod: fp32 products rounded once; torch's bf16 CPU
// kernel accumulates in bf16, so the device is the closer of the two there). Floats only.
std::optional<at::Tensor> lower_prod(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& x_in = args[0].toTensor();
  const bool all = op == "prod";
  const c10::IValue& dtype_arg = all ? args[1] : args[3];
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type()) || !same_dtype_arg(dtype_arg, x_in)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const int64_t d = all ? 0 : c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x_in.dim(), 1));
  const bool keepdim = !all && args[2].toBool();
  std::vector<int64_t> out_shape;
  if (!all) {
    out_shape = dims(x_in.sizes());
    if (x_in.dim() > 0) {
      if (keepdim) out_shape[d] = 1;
      else out_shape.erase(out_shape.begin() + d);
    }
  }
  at::Tensor out = at::empty(out_shape, x_in.options());
  if (x_in.numel() == 0) return out.fill_(1);
  const at::Tensor x = all || x_in.dim() == 0 ? x_in.reshape({1, -1}) : x_in.movedim(d, -1).contiguous();
  kernels::ProdSpec spec;
  spec.cols = x.size(-1);
  spec.rows = x.numel() / spec.cols;
  spec.input_dtype = spec.output_dtype = *sim_dtype(x_in.scalar_type());
  const std::string key = "prod|" + std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" +
                          std::string(dtype_name(spec.input_dtype));
  execute_program(x_in.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::prod_program(spec, hw, core, cores); },
                  {buffer("x", x)}, {buffer("y", out)}, record_for(op, {x_in}, x_in.scalar_type()));
  return out;
}

// Ops that are a few device ops in sequence, each re-dispatched (so each is a lowered kernel, or
// a counted fallback of its own): clamp with tensor bounds, roll, softplus, var / var_mean,
// vector products, empty matmuls, adaptive average pooling by whole windows, 1-D nearest
// upsampling. nullopt leaves the op to the CPU fallback.
std::optional<at::Tensor> lower_composed(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  auto device_tensor = [](const c10::IValue& v) { return v.isTensor() && on_neuron(v.toTensor()); };
  if (op == "clamp.Tensor" || op == "clamp_min.Tensor" || op == "clamp_max.Tensor") {
    at::Tensor x = args[0].toTensor();
    if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
    const c10::IValue lo = op == "clamp_max.Tensor" ? c10::IValue() : args[1];
    const c10::IValue hi = op == "clamp.Tensor" ? args[2] : op == "clamp_max.Tensor" ? args[1] : c10::IValue();
    // torch: min(max(x, lo), hi) in the promoted dtype, NaN in x or a bound propagating.
    for (const c10::IValue* bound : {&lo, &hi}) {
      if (bound->isNone()) continue;
      if (!device_tensor(*bound) && bound->toTensor().dim() != 0) return std::nullopt;
      std::optional<at::Tensor> r = lower_binary(op, x, bound->toTensor(), bound == &lo ? BinaryOp::maximum : BinaryOp::minimum);
      if (!r) return std::nullopt;
      x = *r;
    }
    return x;
  }
  if (op == "fmod.Tensor" || op == "fmod.Scalar" || op == "remainder.Tensor" || op == "remainder.Scalar" ||
      op == "floor_divide" || op == "floor_divide.Scalar" || op == "div.Tensor_mode" || op == "div.Scalar_mode") {
    // The ALU's mod is C fmod (exact). remainder takes the divisor's sign: fmod + b where the signs
    // differ (torch's own formula, so floats match bit for bit). Integer floor / trunc division:
    // (a - fmod(a, b)) / b is an exact integer quotient, floored where the signs differ.
    const at::Tensor& a = args[0].toTensor();
    const at::Tensor b = args[1].isTensor() ? args[1].toTensor() : scalar_operand(args[1].toScalar());
    if (!on_neuron(a)) return std::nullopt;
    const at::ScalarType type = at::result_type(a, b);
    const bool integral = at::isIntegralType(type, /*includeBool=*/false);
    std::string mode = op.rfind("floor_divide", 0) == 0 ? "floor" : "";
    if (op.rfind("div.", 0) == 0) {
      if (args[2].isNone()) return std::nullopt;
      mode = std::string(args[2].toStringRef());
    }
    if (!mode.empty() && !integral) return std::nullopt;  // float floor/trunc division rounds a/b first
    if (integral && b.dim() == 0 && !on_neuron(b) && b.item<double>() == 0) return std::nullopt;  // torch raises
    if (integral && on_neuron(b) && host_alias(b).eq(0).any().item<bool>()) return std::nullopt;
    std::optional<at::Tensor> r = lower_binary(op + ".fmod", a, b, BinaryOp::mod);
    if (!r) return std::nullopt;
    auto cmp = [&](const at::Tensor& x, double v, BinaryOp k) {
      return lower_binary(op + ".sign", x, at::scalar_tensor(v, at::kDouble), k, true);
    };
    // where r != 0 and sign(r) != sign(b)
    std::optional<at::Tensor> r_neg = cmp(*r, 0.0, BinaryOp::less), b_neg = cmp(b.dim() == 0 && !on_neuron(b) ? b.to(a.device()) : b, 0.0, BinaryOp::less),
                              r_nz = cmp(*r, 0.0, BinaryOp::not_equal);
    if (!r_neg || !b_neg || !r_nz) return std::nullopt;
    std::optional<at::Tensor> differ = lower_binary(op + ".differ", *r_neg, *b_neg, BinaryOp::not_equal, true);
    if (!differ) return std::nullopt;
    std::optional<at::Tensor> fix = lower_binary(op + ".fix", *differ, *r_nz, BinaryOp::minimum);
    if (!fix) return std::nullopt;
    if (op.rfind("fmod", 0) == 0) return r;
    if (op.rfind("remainder", 0) == 0) {
      std::optional<at::Tensor> shifted = lower_binary(op + ".shift", *r, b, BinaryOp::add);
      if (!shifted) return std::nullopt;
      return lower_where(op, *fix, *shifted, std::nullopt, *r, std::nullopt, type);
    }
    std::optional<at::Tensor> exact = lower_binary(op + ".sub", a, *r, BinaryOp::subtract);
    if (!exact) return std::nullopt;
    std::optional<at::Tensor> q = lower_binary(op + ".div", *exact, b, BinaryOp::divide);  // exact: an integer quotient
    if (!q) return std::nullopt;
    if (mode == "floor") q = lower_binary(op + ".floor", *q, *fix, BinaryOp::subtract);
    if (!q) return std::nullopt;
    at::Tensor out = at::empty(q->sizes(), q->options().dtype(type));
    host_alias(out).copy_(host_alias(*q));  // integral values: the conversion back is exact
    return out;
  }
  if (op == "isin.Tensor_Tensor") {  // any(elements[..., None] == test_elements.flatten()) over the last dim
    const at::Tensor &x = args[0].toTensor(), &t = args[1].toTensor();
    if (!on_neuron(x) || !on_neuron(t) || x.numel() == 0 || t.numel() == 0) return std::nullopt;
    std::optional<at::Tensor> eq = lower_binary(op + ".eq", x.unsqueeze(-1), t.flatten(), BinaryOp::equal, true);
    if (!eq) return std::nullopt;
    at::Tensor hit = at::any(*eq, -1);
    return args[3].toBool() ? at::logical_not(hit) : hit;
  }
  if (op == "pow.Tensor_Tensor") {
    // x ** y = exp(y * log(x)) for a positive base (the activation table's exp and log); a zero or
    // negative base has special cases (0 ** 0, integer exponents of negatives): the CPU's kernel.
    const at::Tensor &x = args[0].toTensor(), &y = args[1].toTensor();
    if (!on_neuron(x) || !on_neuron(y) || !sim_dtype(x.scalar_type()) || !sim_dtype(y.scalar_type())) return std::nullopt;
    if (x.numel() == 0 || !host_alias(x).gt(0).all().item<bool>()) return std::nullopt;
    const at::ScalarType result = at::result_type(x, y);
    const at::Tensor xf = x.to(at::kFloat), yf = y.to(at::kFloat);  // torch's opmath: fp32
    at::Tensor r = at::exp(at::mul(yf, at::log(xf)));
    return result == at::kFloat ? r : r.to(result);
  }
  if (op == "roll") {  // a cat of the two slices along each rolled dim (device copies)
    const at::Tensor& x = args[0].toTensor();
    if (!on_neuron(x) || x.numel() == 0) return std::nullopt;
    const std::vector<int64_t> shifts = args[1].toIntVector(), rdims = args[2].toIntVector();
    if (rdims.empty()) {
      if (shifts.size() != 1) return std::nullopt;
      return at::roll(x.flatten(), shifts, {0}).view(x.sizes());
    }
    if (shifts.size() != rdims.size()) return std::nullopt;
    at::Tensor y = x;
    for (size_t i = 0; i < rdims.size(); ++i) {
      const int64_t d = c10::maybe_wrap_dim(rdims[i], x.dim());
      const int64_t n = x.size(d);
      const int64_t s = ((shifts[i] % n) + n) % n;
      if (s == 0) continue;
      y = at::cat({y.narrow(d, n - s, s), y.narrow(d, 0, n - s)}, d);
    }
    return y.is_same(x) ? x.clone() : y;
  }
  if (op == "softplus") {  // x > threshold / beta ? x : log(1 + exp(beta x)) / beta, in fp32 as torch's opmath
    const at::Tensor& x_in = args[0].toTensor();
    if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type())) return std::nullopt;
    const double beta = args[1].toScalar().toDouble(), threshold = args[2].toScalar().toDouble();
    const at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
    at::Tensor bx = beta == 1.0 ? x : at::mul(x, beta);
    at::Tensor soft = at::log(at::add(at::exp(bx), 1.0));
    if (beta != 1.0) soft = at::div(soft, beta);
    at::Tensor y = at::where(at::gt(bx, threshold), x, soft);
    return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
  }
  if (op == "var.correction" || op == "std.correction") {
    std::optional<std::pair<at::Tensor, at::Tensor>> vm = lower_var_mean(args, op == "std.correction");
    return vm ? std::optional<at::Tensor>(vm->first) : std::nullopt;
  }
  if (op == "dot" || op == "vdot") {
    const at::Tensor &a = args[0].toTensor(), &b = args[1].toTensor();
    if (!on_neuron(a) || !on_neuron(b) || a.dim() != 1 || b.dim() != 1 || !sim_dtype(a.scalar_type())) return std::nullopt;
    return at::mm(a.view({1, -1}), b.view({-1, 1})).reshape(std::vector<int64_t>{});
  }
  if (op == "mv") {
    const at::Tensor &m = args[0].toTensor(), &v = args[1].toTensor();
    if (!on_neuron(m) || !on_neuron(v) || m.dim() != 2 || v.dim() != 1 || !sim_dtype(m.scalar_type())) return std::nullopt;
    return at::mm(m, v.view({-1, 1})).view({-1});
  }
  if (op == "addmv") {
    const at::Tensor &self = args[0].toTensor(), &m = args[1].toTensor(), &v = args[2].toTensor();
    if (!on_neuron(m) || !on_neuron(v) || m.dim() != 2 || v.dim() != 1 || !sim_dtype(m.scalar_type())) return std::nullopt;
    at::Tensor col = self.dim() == 1 ? self.view({-1, 1}) : self;
    return at::addmm(col, m, v.view({-1, 1}), args[3].toScalar(), args[4].toScalar()).view({-1});
  }
  if (op == "_adaptive_avg_pool2d" || op == "_adaptive_avg_pool2d_backward") {
    const bool backward = op.size() > 9 && op.compare(op.size() - 9, 9, "_backward") == 0;
    const at::Tensor& x = args[backward ? 1 : 0].toTensor();
    if (!on_neuron(x) || x.dim() < 3) return std::nullopt;
    const int64_t h = x.size(-2), w = x.size(-1);
    const at::Tensor& grad = args[0].toTensor();
    const std::vector<int64_t> out = backward ? std::vector<int64_t>{grad.size(-2), grad.size(-1)} : args[1].toIntVector();
    if (out.size() != 2 || out[0] <= 0 || out[1] <= 0 || h % out[0] || w % out[1]) return std::nullopt;
    const std::vector<int64_t> k = {h / out[0], w / out[1]};  // whole windows: an average pool
    if (!backward) return at::avg_pool2d(x, k, k);
    return at::avg_pool2d_backward(grad, x, k, k, {0, 0}, false, true, std::nullopt);
  }
  if (op == "upsample_nearest1d" || op == "upsample_nearest1d_backward") {
    const bool backward = op.size() > 9 && op.compare(op.size() - 9, 9, "_backward") == 0;
    const at::Tensor& x = args[0].toTensor();
    if (!on_neuron(x) || x.dim() != 3) return std::nullopt;
    std::optional<double> scale;
    if (!args[backward ? 3 : 2].isNone()) scale = args[backward ? 3 : 2].toDouble();
    const std::vector<int64_t> out = args[1].toIntVector();
    if (out.size() != 1) return std::nullopt;
    if (!backward) return at::upsample_nearest2d(x.unsqueeze(2), {1, out[0]}, 1.0, scale).squeeze(2);
    const std::vector<int64_t> in = args[2].toIntVector();
    if (in.size() != 3) return std::nullopt;
    return at::upsample_nearest2d_backward(x.unsqueeze(2), {1, out[0]}, {in[0], in[1], 1, in[2]}, 1.0, scale).squeeze(2);
  }
  return std::nullopt;
}

// ATen unary ops that are one kernel of kernels/elementwise.h (their in-place forms, "relu_", too).
const std::map<std::string, UnaryOp>& unary_ops() {
  static const std::map<std::string, UnaryOp> table = {
      {"relu", UnaryOp::relu}, {"silu", UnaryOp::silu}, {"sigmoid", UnaryOp::sigmoid}, {"tanh", UnaryOp::tanh},
      {"exp", UnaryOp::exp},   {"log", UnaryOp::log},   {"sqrt", UnaryOp::sqrt},       {"rsqrt", UnaryOp::rsqrt},
      {"abs", UnaryOp::abs},   {"neg", UnaryOp::neg},   {"reciprocal", UnaryOp::reciprocal},
      {"sin", UnaryOp::sin},   {"cos", UnaryOp::cos},   {"erf", UnaryOp::erf},         {"sign", UnaryOp::sign},
      {"sgn", UnaryOp::sign}};
  return table;
}

std::optional<at::Tensor> lower(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  if (auto empty = lower_empty_matmul(op, args)) return empty;
  if (op == "nll_loss_backward")
    return lower_nll_loss_backward(op, args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3],
                                   args[4].toInt(), args[5].toInt(), args[6].toTensor());
  if (op == "embedding_dense_backward")
    return lower_embedding_backward(op, args[0].toTensor(), args[1].toTensor(), args[2].toInt(), args[3].toInt(),
                                    args[4].toBool());
  if (op == "embedding") return lower_embedding(op, args[0].toTensor(), args[1].toTensor(), false);
  if (op == "index_select") {
    const at::Tensor& self = args[0].toTensor();
    if (self.dim() == 0) return std::nullopt;
    const int64_t d = c10::maybe_wrap_dim(args[1].toInt(), self.dim());
    if (d == 0) return lower_embedding(op, self, args[2].toTensor(), true);
    // Another dim: moved to the front (a device permute), gathered as rows, moved back.
    if (!on_neuron(self)) return std::nullopt;
    std::optional<at::Tensor> rows = lower_embedding(op, self.movedim(d, 0).contiguous(), args[2].toTensor(), true);
    if (!rows) return std::nullopt;
    return rows->movedim(0, d).contiguous();
  }
  if (op == "mm" || op == "bmm") {
    const at::Tensor& a = args[0].toTensor();
    if (a.dim() != (op == "bmm" ? 3 : 2)) return std::nullopt;
    return lower_matmul(op, a, args[1].toTensor(), nullptr);
  }
  if (op == "addmm" && is_one(args[3]) && is_one(args[4])) {
    const at::Tensor& bias = args[0].toTensor();
    std::optional<at::Tensor> fused = lower_matmul(op, args[1].toTensor(), args[2].toTensor(), &bias);
    if (fused || !on_neuron(bias) || !sim_dtype(bias.scalar_type())) return fused;
    // A bias the epilogue does not take (one element, a column): the product, then a broadcast add.
    std::optional<at::Tensor> product = lower_matmul("mm", args[1].toTensor(), args[2].toTensor(), nullptr);
    if (!product) return std::nullopt;
    return lower_binary("add.Tensor", *product, bias, BinaryOp::add);
  }
  if (op == "addmm" || op == "baddbmm") {
    // beta * self + alpha * (a @ b) with other coefficients (baddbmm: attention scores with a
    // bias): the matmul kernel, then the scaling and the sum as element-wise kernels, each a
    // separate op on the device (re-dispatched, so each is lowered or counted as a fallback).
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& a = args[1].toTensor();
    const at::Tensor& b = args[2].toTensor();
    if (!on_neuron(self) || !on_neuron(a) || !on_neuron(b) || a.scalar_type() != b.scalar_type()) return std::nullopt;
    // Integer matmuls keep torch's integer result and its own alpha/beta rules: the CPU's kernel.
    if (!sim_dtype(a.scalar_type()) || self.scalar_type() != a.scalar_type()) return std::nullopt;
    if (!args[3].isScalar() || !args[4].isScalar() || a.dim() != (op == "addmm" ? 2 : 3)) return std::nullopt;
    const c10::Scalar beta = args[3].toScalar(), alpha = args[4].toScalar();
    c10::DeviceGuard guard(a.device());
    // torch computes beta * self + alpha * (a @ b) in fp32 and rounds once: the product stays in
    // the PSUM's fp32, self is widened, the epilogue runs in fp32 and only its result is rounded.
    const bool wide = a.scalar_type() != at::kFloat;
    std::optional<at::Tensor> product = lower_matmul(op == "addmm" ? "mm" : "bmm", a, b, nullptr, wide);
    if (!product) return std::nullopt;
    at::Tensor result = alpha.equal(1) ? *product : at::mul(*product, alpha);
    if (!beta.equal(0)) {  // beta == 0 ignores self, NaNs included, as torch does
      const at::Tensor self_wide = wide ? self.to(at::kFloat) : self;
      result = at::add(result, beta.equal(1) ? self_wide : at::mul(self_wide, beta));
    }
    return wide ? result.to(a.scalar_type()) : result;
  }
  if (op == "add.Tensor" || op == "sub.Tensor") {
    std::optional<at::Tensor> other = scaled_by_alpha(op, args[0].toTensor(), args[1].toTensor(), args[2]);
    if (!other) return std::nullopt;
    return lower_binary(op, args[0].toTensor(), *other, op == "add.Tensor" ? BinaryOp::add : BinaryOp::subtract);
  }
  if (op == "clamp" || op == "clamp_min" || op == "clamp_max") {
    std::optional<at::Tensor> x = args[0].toTensor();
    const c10::IValue lo = op == "clamp_max" ? c10::IValue() : args[1];
    const c10::IValue hi = op == "clamp" ? args[2] : op == "clamp_max" ? args[1] : c10::IValue();
    if (lo.isNone() && hi.isNone()) return std::nullopt;
    for (const c10::IValue* bound : {&lo, &hi}) {
      if (bound->isNone()) continue;
      const c10::Scalar v = bound->toScalar();
      if (!v.isFloatingPoint() && !v.isIntegral(false)) return std::nullopt;
      if (at::result_type(*x, v) != x->scalar_type()) return std::nullopt;  // e.g. an int tensor and a float bound
      // torch clamps to the bound converted to the tensor's dtype
      const double rounded = at::scalar_tensor(v, at::kDouble).to(x->scalar_type()).item<double>();
      x = lower_binary(op + (bound == &lo ? ".min" : ".max"), *x, at::scalar_tensor(rounded, at::kDouble),
                       bound == &lo ? BinaryOp::maximum : BinaryOp::minimum);
      if (!x) return std::nullopt;
    }
    return x;
  }
  if (op == "masked_fill.Scalar") {
    const at::Tensor& self = args[0].toTensor();
    const c10::Scalar v = args[2].toScalar();
    if (!v.isFloatingPoint() && !v.isIntegral(false)) return std::nullopt;
    if (at::infer_size_dimvector(self.sizes(), args[1].toTensor().sizes()) != self.sizes()) return std::nullopt;
    return lower_where(op, args[1].toTensor(), std::nullopt, v.toDouble(), self, std::nullopt, self.scalar_type());
  }
  if (op == "masked_fill_.Scalar" || op == "masked_fill_.Tensor" || op == "masked_fill.Tensor") {
    const at::Tensor& self = args[0].toTensor();
    if (op != "masked_fill_.Scalar" && args[2].toTensor().dim() != 0) return std::nullopt;
    const c10::Scalar v = op == "masked_fill_.Scalar" ? args[2].toScalar() : args[2].toTensor().item();
    if (!v.isFloatingPoint() && !v.isIntegral(false) && !v.isBoolean()) return std::nullopt;
    if (at::infer_size_dimvector(self.sizes(), args[1].toTensor().sizes()) != self.sizes()) return std::nullopt;
    std::optional<at::Tensor> r = lower_where(op, args[1].toTensor(), std::nullopt, v.toDouble(), self, std::nullopt, self.scalar_type());
    if (!r || op == "masked_fill.Tensor") return r;
    at::Tensor target = self;
    target.copy_(*r);
    return target;
  }
  if (auto logical = lower_logical(op, args)) return logical;
  if (auto composed = lower_composed(op, args)) return composed;
  if (auto hard = lower_hard_activation(op, args)) return hard;
  if (op == "linalg_vector_norm") return lower_vector_norm(op, args);
  if (op == "cumsum" || op == "cumprod") return lower_scan(op, args);
  if (op == "prod" || op == "prod.dim_int") return lower_prod(op, args);
  if (op == "silu_backward") return lower_silu_backward(args[0].toTensor(), args[1].toTensor());
  if (op == "gelu_backward")
    return lower_gelu_backward(args[0].toTensor(), args[1].toTensor(), std::string(args[2].toStringRef()));
  // In place: computed out of place, then copied into self (which keeps its dtype and shape).
  if (!op.empty() && op.back() == '_' && unary_ops().count(op.substr(0, op.size() - 1))) {
    const at::Tensor& self = args[0].toTensor();
    std::optional<at::Tensor> result = lower_unary(op, self, unary_ops().at(op.substr(0, op.size() - 1)));
    if (!result || result->scalar_type() != self.scalar_type()) return std::nullopt;
    at::Tensor target = self;
    target.copy_(*result);
    return target;
  }
  if (op == "add_.Tensor" || op == "sub_.Tensor" || op == "mul_.Tensor" || op == "div_.Tensor") {
    const at::Tensor& self = args[0].toTensor();
    const at::Tensor& other = args[1].toTensor();
    if (!on_neuron(self) || at::result_type(self, other) != self.scalar_type()) return std::nullopt;
    if (other.dim() > 0 && at::infer_size_dimvector(self.sizes(), other.sizes()) != self.sizes()) return std::nullopt;
    static const std::map<std::string, BinaryOp> inplace = {{"add_.Tensor", BinaryOp::add},
                                                            {"sub_.Tensor", BinaryOp::subtract},
                                                            {"mul_.Tensor", BinaryOp::multiply},
                                                            {"div_.Tensor", BinaryOp::divide}};
    std::optional<at::Tensor> scaled = other;
    if (op == "add_.Tensor" || op == "sub_.Tensor") scaled = scaled_by_alpha(op, self, other, args[2]);
    if (!scaled) return std::nullopt;
    std::optional<at::Tensor> result = lower_binary(op, self, *scaled, inplace.at(op));
    if (!result) return std::nullopt;
    at::Tensor target = self;
    target.copy_(*result);
    return target;
  }
  if (op == "cat") return lower_cat(op, args[0].toTensorVector(), args[1].toInt());
  if (op == "triu" || op == "tril") return lower_triangle(op, args[0].toTensor(), args[1].toInt(), op == "triu");
  if (op == "triu_" || op == "tril_") {
    const at::Tensor& self = args[0].toTensor();
    std::optional<at::Tensor> result = lower_triangle(op, self, args[1].toInt(), op == "triu_");
    if (!result) return std::nullopt;
    at::Tensor target = self;
    target.copy_(*result);
    return target;
  }
  if (op == "pow.Tensor_Scalar") return lower_pow(op, args[0].toTensor(), args[1].toScalar());
  if (op == "sigmoid_backward" || op == "tanh_backward")
    return lower_activation_backward(op, args[0].toTensor(), args[1].toTensor());
  if (op == "mul.Tensor") return lower_binary(op, args[0].toTensor(), args[1].toTensor(), BinaryOp::multiply);
  if (op == "maximum" || op == "minimum") {
    // NaN propagates as in torch (the ALU's maximum / minimum return the NaN operand too).
    return lower_binary(op, args[0].toTensor(), args[1].toTensor(),
                        op == "maximum" ? BinaryOp::maximum : BinaryOp::minimum);
  }
  if (op == "div.Tensor") return lower_binary(op, args[0].toTensor(), args[1].toTensor(), BinaryOp::divide);
  if (op == "gelu") {
    const std::string approximate(args[1].toStringRef());
    if (approximate != "none" && approximate != "tanh") return std::nullopt;
    return lower_unary(op, args[0].toTensor(), approximate == "tanh" ? UnaryOp::gelu_tanh : UnaryOp::gelu);
  }
  // Reductions.
  if (op == "sum.dim_IntList" && at::isIntegralType(args[0].toTensor().scalar_type(), true))
    return lower_integer_reduce(op, args[0].toTensor(), int_list(args[1]), args[2].toBool(), args[3]);
  if (op == "sum" && at::isIntegralType(args[0].toTensor().scalar_type(), true))
    return lower_integer_reduce(op, args[0].toTensor(), {}, false, args[1]);
  if (op == "sum.dim_IntList" || op == "mean.dim") {
    const at::Tensor& x = args[0].toTensor();
    if (!same_dtype_arg(args[3], x)) return std::nullopt;
    return lower_reduce(op, x, int_list(args[1]), args[2].toBool(), op == "sum.dim_IntList" ? ReduceOp::sum : ReduceOp::mean);
  }
  if (op == "sum" || op == "mean") {
    const at::Tensor& x = args[0].toTensor();
    if (!same_dtype_arg(args[1], x)) return std::nullopt;
    return lower_reduce(op, x, {}, false, op == "sum" ? ReduceOp::sum : ReduceOp::mean);
  }
  if (op == "amax" || op == "amin" || op == "max" || op == "min") {
    const at::Tensor& x = args[0].toTensor();
    const ReduceOp kind = op == "amax" || op == "max" ? ReduceOp::max : ReduceOp::min;
    const std::vector<int64_t> rdims = op.size() == 4 ? int_list(args[1]) : std::vector<int64_t>{};
    const bool keepdim = op.size() == 4 && args[2].toBool();
    if (at::isIntegralType(x.scalar_type(), true)) return lower_integer_reduce(op, x, rdims, keepdim, c10::IValue(), kind);
    return lower_reduce(op, x, rdims, keepdim, kind);
  }
  if (op == "argmax" || op == "argmin") {
    const at::Tensor& x = args[0].toTensor();
    if (x.dim() == 0 && on_neuron(x)) {  // one element: index 0
      if (!args[1].isNone()) c10::maybe_wrap_dim(args[1].toInt(), 0);
      return at::zeros({}, x.options().dtype(at::kLong));
    }
    const ReduceOp kind = op == "argmax" ? ReduceOp::argmax : ReduceOp::argmin;
    if (!args[1].isNone()) return lower_reduce(op, x, {args[1].toInt()}, args[2].toBool(), kind);
    // dim=None: over the flattened tensor; keepdim keeps every dim as 1.
    std::optional<at::Tensor> flat = lower_reduce(op, x.reshape({-1}), {0}, false, kind);
    if (!flat || !args[2].toBool()) return flat;
    return flat->reshape(std::vector<int64_t>(x.dim(), 1));
  }
  if (op == "_softmax" || op == "_log_softmax") {
    if (args[2].toBool()) return std::nullopt;  // half_to_float
    return lower_softmax(op, args[0].toTensor(), args[1].toInt(), op == "_log_softmax");
  }
  if (op == "_softmax_backward_data" || op == "_log_softmax_backward_data")
    return lower_softmax_backward(op, args[0].toTensor(), args[1].toTensor(), args[2].toInt(),
                                  static_cast<at::ScalarType>(args[3].toInt()), op == "_log_softmax_backward_data");
  if (op == "mse_loss") return lower_mse_loss(args[0].toTensor(), args[1].toTensor(), args[2].toInt());
  if (op == "mse_loss_backward")
    return lower_mse_loss_backward(args[0].toTensor(), args[1].toTensor(), args[2].toTensor(), args[3].toInt());
  // Backward of relu, comparisons, where.
  if (op == "threshold_backward") return lower_threshold_backward(args[0].toTensor(), args[1].toTensor(), args[2].toScalar());
  static const std::map<std::string, BinaryOp> compare = {
      {"eq", BinaryOp::equal}, {"ne", BinaryOp::not_equal}, {"lt", BinaryOp::less},
      {"gt", BinaryOp::greater}, {"le", BinaryOp::less_equal}, {"ge", BinaryOp::greater_equal}};
  const size_t dot = op.find('.');
  auto cmp = compare.find(op.substr(0, dot));
  if (cmp != compare.end() && dot != std::string::npos) {
    const std::string overload = op.substr(dot + 1);
    if (overload == "Tensor") return lower_binary(op, args[0].toTensor(), args[1].toTensor(), cmp->second, true);
    if (overload == "Scalar") {
      const at::Tensor& a = args[0].toTensor();
      const c10::Scalar& v = args[1].toScalar();
      if (!v.isFloatingPoint() && !v.isIntegral(false)) return std::nullopt;
      return lower_binary(op, a, at::scalar_tensor(v, at::TensorOptions().dtype(v.isFloatingPoint() ? at::kDouble : at::kLong)),
                          cmp->second, true);
    }
    return std::nullopt;
  }
  // isneginf / isposinf: x == -inf / +inf; isinf: |x| == inf; isnan: x != x (the ALU compares
  // IEEE-style). Floating inputs only (torch's integer versions are all-false).
  if (op == "isneginf" || op == "isposinf" || op == "isinf" || op == "isnan") {
    const at::Tensor& x = args[0].toTensor();
    if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
    const double inf = std::numeric_limits<double>::infinity();
    if (op == "isnan") return lower_binary(op, x, x, BinaryOp::not_equal, true);
    if (op == "isinf") {
      std::optional<at::Tensor> a = lower_unary(op + ".abs", x, UnaryOp::abs);
      if (!a) return std::nullopt;
      return lower_binary(op, *a, at::scalar_tensor(inf, at::kDouble), BinaryOp::equal, true);
    }
    return lower_binary(op, x, at::scalar_tensor(op == "isneginf" ? -inf : inf, at::kDouble), BinaryOp::equal, true);
  }
  // all / any (full, dim): the truth values as fp32 1 / 0 (where), reduced by min / max, compared != 0.
  if (op == "all" || op == "any" || op == "all.dim" || op == "any.dim") {
    const at::Tensor& x = args[0].toTensor();
    if (!on_neuron(x) || x.numel() == 0) return std::nullopt;
    std::optional<at::Tensor> truth = x;
    if (x.scalar_type() != at::kBool) {
      if (!sim_dtype(x.scalar_type())) return std::nullopt;
      truth = lower_binary(op + ".ne0", x, at::scalar_tensor(0.0, at::kDouble), BinaryOp::not_equal, true);
      if (!truth) return std::nullopt;
    }
    std::optional<at::Tensor> f = lower_where(op + ".f", *truth, std::nullopt, 1.0, std::nullopt, 0.0, at::kFloat);
    if (!f) return std::nullopt;
    const bool all = op.rfind("all", 0) == 0;
    const bool dim = op.size() > 3;
    // A full reduction keeps one dim: a 0-dim tensor would be taken as an immediate by the compare.
    const int64_t d = dim ? c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x.dim(), 1)) : 0;
    std::optional<at::Tensor> r = lower_reduce(op + ".reduce", dim && x.dim() > 0 ? *f : f->reshape({-1}), {d}, true,
                                               all ? ReduceOp::min : ReduceOp::max);
    if (!r) return std::nullopt;
    std::optional<at::Tensor> y = lower_binary(op, *r, at::scalar_tensor(0.0, at::kDouble), BinaryOp::not_equal, true);
    if (!y) return std::nullopt;
    if (!dim) return y->reshape({});
    if (x.dim() == 0) return y->reshape({});
    return args[2].toBool() ? *y : y->squeeze(d);
  }
  if (op == "where.self") {
    const at::Tensor &cond = args[0].toTensor(), &a = args[1].toTensor(), &b = args[2].toTensor();
    // A 0-dim operand (e.g. _safe_softmax's zero, a mask's fill value) is an immediate.
    auto immediate = [](const at::Tensor& t) -> std::optional<double> {
      if (t.dim() != 0) return std::nullopt;
      return (on_neuron(t) ? local_scalar_dense(t) : t.item()).toDouble();
    };
    const std::optional<double> as = immediate(a), bs = immediate(b);
    return lower_where(op, cond, as ? std::nullopt : std::optional<at::Tensor>(a), as,
                       bs ? std::nullopt : std::optional<at::Tensor>(b), bs, at::result_type(a, b));
  }
  auto it = unary_ops().find(op);
  if (it != unary_ops().end()) return lower_unary(op, args[0].toTensor(), it->second);
  return std::nullopt;
}

// out= overload -> the functional overload it computes (same arguments, less the trailing out).
const std::map<std::string, std::string>& out_variants() {
  static const std::map<std::string, std::string> table = {
      {"mm.out", "mm"}, {"addmm.out", "addmm"}, {"bmm.out", "bmm"}, {"add.out", "add.Tensor"},
      {"sub.out", "sub.Tensor"}, {"mul.out", "mul.Tensor"}, {"maximum.out", "maximum"}, {"minimum.out", "minimum"}, {"div.out", "div.Tensor"}, {"gelu.out", "gelu"},
      {"silu.out", "silu"}, {"sigmoid.out", "sigmoid"}, {"tanh.out", "tanh"}, {"exp.out", "exp"}, {"relu.out", "relu"},
      {"log.out", "log"}, {"sqrt.out", "sqrt"}, {"rsqrt.out", "rsqrt"}, {"abs.out", "abs"}, {"neg.out", "neg"},
      {"reciprocal.out", "reciprocal"}, {"sin.out", "sin"}, {"cos.out", "cos"}, {"erf.out", "erf"}, {"sign.out", "sign"}, {"sgn.out", "sgn"},
      {"sum.IntList_out", "sum.dim_IntList"}, {"sum.out", "sum"}, {"mean.out", "mean.dim"}, {"amax.out", "amax"},
      {"amin.out", "amin"}, {"argmax.out", "argmax"}, {"argmin.out", "argmin"}, {"eq.Tensor_out", "eq.Tensor"},
      {"ne.Tensor_out", "ne.Tensor"}, {"lt.Tensor_out", "lt.Tensor"}, {"gt.Tensor_out", "gt.Tensor"},
      {"le.Tensor_out", "le.Tensor"}, {"ge.Tensor_out", "ge.Tensor"}, {"eq.Scalar_out", "eq.Scalar"},
      {"ne.Scalar_out", "ne.Scalar"}, {"lt.Scalar_out", "lt.Scalar"}, {"gt.Scalar_out", "gt.Scalar"},
      {"le.Scalar_out", "le.Scalar"}, {"ge.Scalar_out", "ge.Scalar"}, {"clamp.out", "clamp"},
      {"clamp_min.out", "clamp_min"}, {"clamp_max.out", "clamp_max"}, {"pow.Tensor_Scalar_out", "pow.Tensor_Scalar"},
      {"cat.out", "cat"}, {"index_select.out", "index_select"}, {"_softmax.out", "_softmax"},
      {"_log_softmax.out", "_log_softmax"}, {"_softmax_backward_data.out", "_softmax_backward_data"},
      {"_log_softmax_backward_data.out", "_log_softmax_backward_data"}, {"mse_loss.out", "mse_loss"},
      {"threshold_backward.grad_input", "threshold_backward"}, {"sigmoid_backward.grad_input", "sigmoid_backward"},
      {"tanh_backward.grad_input", "tanh_backward"}, {"silu_backward.grad_input", "silu_backward"},
      {"gelu_backward.grad_input", "gelu_backward"}, {"masked_fill.Scalar_out", "masked_fill.Scalar"},
      {"embedding.out", "embedding"}, {"triu.out", "triu"}, {"tril.out", "tril"}, {"isneginf.out", "isneginf"}, {"isposinf.out", "isposinf"},
      {"isnan.out", "isnan"}, {"all.out", "all.dim"}, {"any.out", "any.dim"}, {"all.all_out", "all"},
      {"any.all_out", "any"}, {"where.self_out", "where.self"},
      {"bitwise_and.Tensor_out", "bitwise_and.Tensor"}, {"bitwise_or.Tensor_out", "bitwise_or.Tensor"},
      {"bitwise_xor.Tensor_out", "bitwise_xor.Tensor"}, {"bitwise_not.out", "bitwise_not"},
      {"logical_not.out", "logical_not"}, {"logical_and.out", "logical_and"}, {"logical_or.out", "logical_or"},
      {"logical_xor.out", "logical_xor"}, {"hardsigmoid.out", "hardsigmoid"}, {"hardswish.out", "hardswish"},
      {"hardsigmoid_backward.grad_input", "hardsigmoid_backward"}, {"linalg_vector_norm.out", "linalg_vector_norm"},
      {"clamp.Tensor_out", "clamp.Tensor"}, {"clamp_min.Tensor_out", "clamp_min.Tensor"},
      {"clamp_max.Tensor_out", "clamp_max.Tensor"}, {"softplus.out", "softplus"}, {"pow.Tensor_Tensor_out", "pow.Tensor_Tensor"},
      {"cumsum.out", "cumsum"}, {"cumprod.out", "cumprod"}, {"prod.int_out", "prod.dim_int"}, {"prod.out", "prod"},
      {"fmod.Tensor_out", "fmod.Tensor"}, {"remainder.Tensor_out", "remainder.Tensor"}, {"floor_divide.out", "floor_divide"},
      {"div.out_mode", "div.Tensor_mode"}, {"isin.Tensor_Tensor_out", "isin.Tensor_Tensor"},
      {"bitwise_and.Scalar_out", "bitwise_and.Scalar"}, {"bitwise_or.Scalar_out", "bitwise_or.Scalar"},
      {"bitwise_xor.Scalar_out", "bitwise_xor.Scalar"}, {"mv.out", "mv"},
      {"addmv.out", "addmv"}, {"upsample_nearest1d.out", "upsample_nearest1d"},
      {"upsample_nearest1d_backward.grad_input", "upsample_nearest1d_backward"}};
  return table;
}

void neuron_lowered(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  if (full.rfind("aten::", 0) == 0) full = full.substr(6);
  const size_t n = op.schema().arguments().size();
  std::optional<at::Tensor> out;
  std::optional<at::Tensor> indices;
  std::optional<std::vector<at::Tensor>> multi;
  c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, n);
  check_common_device(op, args);
  // A kernel that rejects the shape (std::invalid_argument, e.g. a row wider than SBUF) falls back;
  // the lowered ops are out of place, so nothing was written yet.
  try {
  if (full == "max.dim" || full == "min.dim") {  // (values, indices): two kernels
    const at::Tensor& x = args[0].toTensor();
    const int64_t dim = args[1].toInt();
    const bool keepdim = args[2].toBool();
    const bool is_max = full == "max.dim";
    if (x.dim() == 0 && on_neuron(x)) {  // one element: itself, at index 0 (torch accepts dim 0 / -1)
      c10::maybe_wrap_dim(dim, 0);
      out = x.clone();
      indices = at::zeros({}, x.options().dtype(at::kLong));
    } else {
      indices = lower_reduce(full, x, {dim}, keepdim, is_max ? ReduceOp::argmax : ReduceOp::argmin);
    }
    if (indices && !out) out = lower_reduce(full, x, {dim}, keepdim, is_max ? ReduceOp::max : ReduceOp::min);
    if (!out) indices.reset();
  } else if (full == "native_layer_norm" || full == "_fused_rms_norm") {
    const bool ln = full == "native_layer_norm";
    const at::Tensor& x = args[0].toTensor();
    double eps = 0;
    if (ln) eps = args[4].toDouble();
    else if (!args[3].isNone()) eps = args[3].toDouble();
    else if (x.scalar_type() == at::kBFloat16) eps = 0.0078125;  // torch.finfo(dtype).eps, rms_norm's default
    else if (x.scalar_type() == at::kHalf) eps = 0.0009765625;
    else eps = static_cast<double>(std::numeric_limits<float>::epsilon());
    multi = lower_norm(full, ln ? kernels::NormKind::layernorm : kernels::NormKind::rmsnorm, x,
                       args[1].toIntVector(), args[2], ln ? args[3] : c10::IValue(), eps);
  } else if (full == "var_mean.correction" || full == "std_mean.correction") {
    if (std::optional<std::pair<at::Tensor, at::Tensor>> vm = lower_var_mean(args, full == "std_mean.correction"))
      multi = std::vector<at::Tensor>{vm->first, vm->second};
  } else if (full == "nll_loss_forward") {
    multi = lower_nll_loss(full, args[0].toTensor(), args[1].toTensor(), args[2], args[3].toInt(), args[4].toInt());
  } else if (full == "native_layer_norm_backward") {
    const at::Tensor& mean = args[3].toTensor();
    multi = lower_norm_backward(full, kernels::NormKind::layernorm, args[0].toTensor(), args[1].toTensor(),
                                args[2].toIntVector(), &mean, args[4].toTensor(), args[5], args[6],
                                args[7].toBoolList().vec());
  } else if (full == "_fused_rms_norm_backward") {
    multi = lower_norm_backward(full, kernels::NormKind::rmsnorm, args[0].toTensor(), args[1].toTensor(),
                                args[2].toIntVector(), nullptr, args[3].toTensor(), args[4], c10::IValue(),
                                args[5].toBoolList().vec());
  } else if (out_variants().count(full)) {
    // out= variants (user code, and composite ops such as SDPA's _safe_softmax call them): the
    // functional op, copied into `out` (a device copy kernel; resized as torch's out= contract
    // allows). The out= schemas are the functional ones plus the trailing `out`.
    const std::string& functional = out_variants().at(full);
    at::Tensor target = args[n - 1].toTensor();
    std::optional<at::Tensor> result;
    if (on_neuron(target)) result = lower(functional, args.slice(0, n - 1));
    if (result && target.scalar_type() == result->scalar_type()) {
      if (target.sizes() != result->sizes()) target.resize_(result->sizes());
      target.copy_(*result);
      out = target;
    }
  } else {
    out = lower(full, args);
  }
  } catch (const std::invalid_argument&) {
    out.reset();
    indices.reset();
    multi.reset();
  }
  if (multi) {
    torch::jit::drop(*stack, n);
    for (at::Tensor& t : *multi) torch::jit::push(*stack, std::move(t));
    return;
  }
  if (!out) {
    neuron_fallback(op, stack);
    return;
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, std::move(*out));
  if (indices) torch::jit::push(*stack, std::move(*indices));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"mm", "addmm", "bmm", "add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor", "maximum",
                         "minimum", "relu", "gelu",
                         "silu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sin",
                         "cos", "erf", "relu_", "silu_", "sigmoid_", "tanh_", "exp_", "log_", "sqrt_", "rsqrt_", "abs_",
                         "neg_", "reciprocal_", "sin_", "cos_", "erf_", "sign", "sgn", "baddbmm", "triu", "tril", "triu_", "tril_", "sum.dim_IntList", "mean.dim", "sum", "mean", "amax", "amin",
                         "max", "min", "max.dim", "min.dim", "argmax", "argmin", "threshold_backward", "eq.Tensor",
                         "ne.Tensor", "lt.Tensor", "gt.Tensor", "le.Tensor", "ge.Tensor", "eq.Scalar", "ne.Scalar",
                         "lt.Scalar", "gt.Scalar", "le.Scalar", "ge.Scalar", "where.self", "mse_loss", "mse_loss_backward", "_softmax", "_log_softmax",
                         "_softmax_backward_data", "_log_softmax_backward_data", "native_layer_norm",
                         "native_layer_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward", "add_.Tensor",
                         "sub_.Tensor", "mul_.Tensor", "div_.Tensor", "cat", "pow.Tensor_Scalar", "sigmoid_backward",
                         "tanh_backward", "silu_backward", "gelu_backward", "clamp", "clamp_min", "clamp_max", "masked_fill.Scalar",
                         "embedding", "index_select", "nll_loss_forward", "nll_loss_backward",
                         "embedding_dense_backward", "masked_fill_.Scalar", "masked_fill_.Tensor", "masked_fill.Tensor",
                         "bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "bitwise_not", "logical_not",
                         "logical_and", "logical_or", "logical_xor", "hardsigmoid", "hardswish", "hardsigmoid_backward",
                         "hardswish_backward", "linalg_vector_norm", "clamp.Tensor", "clamp_min.Tensor",
                         "clamp_max.Tensor", "roll", "softplus", "pow.Tensor_Tensor", "cumsum", "cumprod", "prod", "prod.dim_int", "fmod.Tensor", "fmod.Scalar",
                         "remainder.Tensor", "remainder.Scalar", "floor_divide", "floor_divide.Scalar", "div.Tensor_mode",
                         "div.Scalar_mode", "isin.Tensor_Tensor", "bitwise_and.Scalar", "bitwise_or.Scalar",
                         "bitwise_xor.Scalar", "var.correction", "var_mean.correction", "std.correction",
                         "std_mean.correction", "dot", "vdot",
                         "mv", "addmv", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward", "upsample_nearest1d",
                         "upsample_nearest1d_backward"}) {
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&neuron_lowered>());
  }
}

// Float classification and bool reductions, and the out= variants of the lowered ops.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"isneginf", "isposinf", "isinf", "isnan", "all", "any", "all.dim", "any.dim"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&neuron_lowered>());
  for (const auto& [op, functional] : out_variants())
    m.impl(op.c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_lowered>());
}

// SDPA (F.scaled_dot_product_attention) through the PrivateUse1 overrideable path: _fused_sdp_choice
// picks the overrideable backend (flash attention kernels, forward with lse, backward) for what they
// support (2-byte dtypes, head dim 64 / 128, no mask, no dropout, causal only with Sq == Sk, GQA
// when enable_gqa) and the math path (composed of other ops) otherwise.
bool sdpa_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const c10::IValue& mask,
                    double dropout_p, bool is_causal, bool enable_gqa) {
  if (!on_neuron(q) || !on_neuron(k) || !on_neuron(v)) return false;
  if (!(mask.isNone() || (mask.isTensor() && !mask.toTensor().defined())) || dropout_p != 0.0) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  const at::ScalarType t = q.scalar_type();
  if ((t != at::kBFloat16 && t != at::kHalf) || k.scalar_type() != t || v.scalar_type() != t) return false;
  const int64_t d = q.size(3);
  if ((d != 64 && d != 128) || k.size(3) != d || v.size(3) != d) return false;
  if (k.size(0) != q.size(0) || v.sizes() != k.sizes()) return false;
  const int64_t h = q.size(1), hkv = k.size(1);
  if (hkv == 0 || (enable_gqa ? h % hkv != 0 : h != hkv)) return false;
  if (q.size(0) == 0 || h == 0 || q.size(2) == 0 || k.size(2) == 0) return false;
  if (is_causal && q.size(2) != k.size(2)) return false;
  std::lock_guard<std::mutex> lock(g_config_mutex);
  config_locked();
  return g_dma_transpose;
}

void neuron_fused_sdp_choice(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  c10::ArrayRef<c10::IValue> a = torch::jit::last(*stack, n);
  const bool ok = sdpa_supported(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3], a[4].toDouble(),
                                 a[5].toBool(), a[7].toBool());
  torch::jit::drop(*stack, n);
  // sdp::SDPBackend: math = 0, overrideable = 4
  torch::jit::push(*stack, static_cast<int64_t>(ok ? 4 : 0));
}

kernels::AttentionSpec sdpa_spec(const at::Tensor& q, const at::Tensor& k, bool causal, const c10::IValue& scale) {
  kernels::AttentionSpec spec;
  spec.batch = q.size(0);
  spec.heads = q.size(1);
  spec.kv_heads = k.size(1);
  spec.seq_q = q.size(2);
  spec.seq_k = k.size(2);
  spec.head_dim = q.size(3);
  spec.causal = causal;
  spec.scale = scale.isNone() ? 0.0 : scale.toDouble();
  spec.dtype = *sim_dtype(q.scalar_type());
  return spec;
}

std::string sdpa_key(const std::string& op, const kernels::AttentionSpec& s) {
  std::ostringstream key;
  key << std::hexfloat << op << "|" << s.batch << "," << s.heads << "," << s.kv_heads << "," << s.seq_q << ","
      << s.seq_k << "," << s.head_dim << "|" << s.causal << "|" << s.scale << "|" << static_cast<int>(s.dtype);
  return key.str();
}

// The kernels write contiguous [B, H, S, D] results; the op's meta function promises the layout of
// the matching input (empty_like: a [B, S, H, D] buffer viewed transposed, as every Hugging Face
// attention passes it), and torch.compile relies on those strides. A result in another layout is
// moved there by a device copy kernel.
at::Tensor in_layout_of(const at::Tensor& result, const at::Tensor& like) {
  at::Tensor target = at::empty_like(like);
  if (target.strides() == result.strides()) return result;
  target.copy_(result);
  return target;
}

void neuron_sdpa_overrideable(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  c10::ArrayRef<c10::IValue> a = torch::jit::last(*stack, n);
  const at::Tensor &q_in = a[0].toTensor(), &k_in = a[1].toTensor(), &v_in = a[2].toTensor();
  const double dropout_p = a[4].toDouble();
  const bool causal = a[5].toBool();
  TORCH_CHECK(sdpa_supported(q_in, k_in, v_in, a[3], dropout_p, causal, true),
              "neuron: _scaled_dot_product_fused_attention_overrideable: unsupported inputs (query ", q_in.sizes(),
              " ", q_in.scalar_type(), ", key ", k_in.sizes(), ", dropout ", dropout_p, ", causal ", causal,
              "); the flash-attention kernels take bf16/fp16, head dim 64 or 128, no mask, no dropout, causal "
              "only with equal query and key lengths (_fused_sdp_choice routes anything else to the math path)");
  c10::DeviceGuard guard(q_in.device());
  kernels::AttentionSpec spec = sdpa_spec(q_in, k_in, causal, a[7]);
  spec.write_lse = true;
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  at::Tensor o = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({spec.batch, spec.heads, spec.seq_q}, q.options().dtype(at::kFloat));
  OpRecord record = record_for("_scaled_dot_product_fused_attention_overrideable", {q_in, k_in, v_in}, q.scalar_type());
  record.flops = static_cast<uint64_t>(kernels::attention_forward_flops(spec));
  execute_program(q.device().index(), sdpa_key("sdpa_fwd", spec),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::flash_attention_forward_program(spec, hw, core, cores); },
                  {buffer("q", q), buffer("k", k), buffer("v", v)}, {buffer("o", o), buffer("lse", lse)},
                  std::move(record));
  torch::jit::drop(*stack, n);
  const at::Tensor undefined;
  torch::jit::push(*stack, in_layout_of(o, q_in));
  torch::jit::push(*stack, lse);
  torch::jit::push(*stack, undefined);  // cum_seq_q
  torch::jit::push(*stack, undefined);  // cum_seq_k
  torch::jit::push(*stack, c10::SymInt(spec.seq_q));
  torch::jit::push(*stack, c10::SymInt(spec.seq_k));
  torch::jit::push(*stack, undefined);  // philox_seed
  torch::jit::push(*stack, undefined);  // philox_offset
  torch::jit::push(*stack, undefined);  // debug_attn_mask
}

void neuron_sdpa_overrideable_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  c10::ArrayRef<c10::IValue> a = torch::jit::last(*stack, n);
  const at::Tensor &dout_in = a[0].toTensor(), &q_in = a[1].toTensor(), &k_in = a[2].toTensor(),
                   &v_in = a[3].toTensor(), &o_in = a[6].toTensor(), &lse_in = a[7].toTensor();
  const double dropout_p = a[12].toDouble();
  const bool causal = a[13].toBool();
  TORCH_CHECK(sdpa_supported(q_in, k_in, v_in, a[4], dropout_p, causal, true) && on_neuron(dout_in) &&
                  dout_in.scalar_type() == q_in.scalar_type() && lse_in.scalar_type() == at::kFloat,
              "neuron: _scaled_dot_product_fused_attention_overrideable_backward: unsupported inputs (query ",
              q_in.sizes(), " ", q_in.scalar_type(), ", grad_out ", dout_in.scalar_type(), ", logsumexp ",
              lse_in.scalar_type(), ", dropout ", dropout_p, ", causal ", causal,
              "); needs the forward's supported set, grad_out in the query's dtype and an fp32 logsumexp");
  c10::DeviceGuard guard(q_in.device());
  kernels::AttentionSpec spec = sdpa_spec(q_in, k_in, causal, a[16]);
  const at::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous(), o = o_in.contiguous(),
                   dout = dout_in.contiguous(), lse = lse_in.contiguous();
  at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options()),
             dv = at::empty(v.sizes(), v.options());
  OpRecord record =
      record_for("_scaled_dot_product_fused_attention_overrideable_backward", {dout_in, q_in, k_in, v_in}, q.scalar_type());
  record.flops = static_cast<uint64_t>(kernels::attention_backward_flops(spec));
  execute_program(q.device().index(), sdpa_key("sdpa_bwd", spec),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::flash_attention_backward_program(spec, hw, core, cores); },
                  {buffer("q", q), buffer("k", k), buffer("v", v), buffer("o", o), buffer("do", dout),
                   HostBuffer{"lse", lse.data_ptr(), static_cast<size_t>(lse.numel()), DType::fp32}},
                  {buffer("dq", dq), buffer("dk", dk), buffer("dv", dv)}, std::move(record));
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, in_layout_of(dq, q_in));
  torch::jit::push(*stack, in_layout_of(dk, k_in));
  torch::jit::push(*stack, in_layout_of(dv, v_in));
  torch::jit::push(*stack, at::Tensor());
}

int64_t neuron_fused_sdp_choice_stub(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     const std::optional<at::Tensor>& mask, double dropout_p, bool is_causal,
                                     std::optional<double> /*scale*/, bool enable_gqa) {
  const c10::IValue m = mask ? c10::IValue(*mask) : c10::IValue();
  return sdpa_supported(q, k, v, m, dropout_p, is_causal, enable_gqa) ? 4 : 0;
}

}  // namespace
}  // namespace trnsim::frontend
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &trnsim::frontend::neuron_fused_sdp_choice_stub)
}  // namespace at::native
namespace trnsim::frontend {
namespace {

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", torch::CppFunction::makeFromBoxedFunction<&neuron_fused_sdp_choice>());
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&neuron_sdpa_overrideable>());
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         torch::CppFunction::makeFromBoxedFunction<&neuron_sdpa_overrideable_backward>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>()); }

// Sparse layouts have no kernels and no CPU fallback path on the device: a clear error naming the op.
void neuron_sparse_unsupported(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "neuron: sparse tensors are not supported on the device (", op.schema().operator_name(),
                              "); keep sparse tensors on the CPU, or make them dense with .to_dense() before .to(\"neuron\")");
}
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_sparse_unsupported>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_sparse_unsupported>());
}

// ---------------------------------------------------------------------------------------------
// Random numbers from the device generators. The values: the CPU generator's algorithm (mt19937
// with PyTorch's transforms) run on the host with the device generator's own state, so the device
// stream is reproducible from torch.manual_seed and equals what the CPU gives from the same seed.
// The time: one element-wise pass over the output on the device (a unary kernel, in place); the
// ISA has no rng instruction yet, so the generation itself is not modelled beyond that pass.

void charge_elementwise_pass(const at::Tensor& self, const std::string& op) {
  const std::optional<DType> dt = sim_dtype(self.scalar_type());
  if (!dt || self.numel() == 0 || !self.is_contiguous()) return;  // integer / bool / strided: not timed
  kernels::UnarySpec spec;
  spec.shape = {self.numel()};
  spec.op = UnaryOp::copy;
  spec.input_dtype = spec.output_dtype = *dt;
  execute_program(self.device().index(), "rng|" + std::to_string(self.numel()) + "|" + std::string(dtype_name(*dt)),
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::unary_program(spec, hw, core, cores);
                  },
                  {buffer("x", self)}, {buffer("y", self)}, record_for(op, {self}, self.scalar_type()));
}

template <typename Fill>
at::Tensor& with_device_generator(at::Tensor& self, const std::optional<at::Generator>& generator, const char* op,
                                  Fill&& fill) {
  at::Generator gen = generator && generator->defined() ? *generator : default_generator(self.device().index());
  TORCH_CHECK(gen.device().type() == kNeuron, op, ": expected a neuron generator, got one for ", gen.device());
  if (self.numel() == 0) return self;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>();
    cpu.set_state(gen.get_state());
    at::Tensor host = host_alias(self);
    fill(host, cpu);
    gen.set_state(cpu.get_state());
  }
  charge_elementwise_pass(self, op);
  return self;
}

at::Tensor& uniform(at::Tensor& self, double from, double to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "uniform_",
                               [&](at::Tensor& h, const at::Generator& g) { h.uniform_(from, to, g); });
}

at::Tensor& normal(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "normal_",
                               [&](at::Tensor& h, const at::Generator& g) { h.normal_(mean, std, g); });
}

at::Tensor& bernoulli_float(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "bernoulli_",
                               [&](at::Tensor& h, const at::Generator& g) { h.bernoulli_(p, g); });
}

at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "bernoulli_",
                               [&](at::Tensor& h, const at::Generator& g) { h.bernoulli_(host_alias(p), g); });
}

at::Tensor& random_full(at::Tensor& self, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(g); });
}

at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(to, g); });
}

at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "random_",
                               [&](at::Tensor& h, const at::Generator& g) { h.random_(from, to, g); });
}

at::Tensor& exponential(at::Tensor& self, double lambda, std::optional<at::Generator> generator) {
  return with_device_generator(self, generator, "exponential_",
                               [&](at::Tensor& h, const at::Generator& g) { h.exponential_(lambda, g); });
}

// Dropout as the CPU computes it (a bool keep-mask drawn with bernoulli(1 - p), output = input *
// mask / (1 - p)), the mask from the device generator and the arithmetic as device kernels.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  c10::DeviceGuard guard(input.device());
  if (input.numel() == 0 || !train.value_or(true) || p == 0) {
    return {input.clone(), at::ones(input.sizes(), input.options().dtype(at::kBool))};
  }
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  bernoulli_float(mask, 1.0 - p, std::nullopt);
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  at::Tensor zero = at::scalar_tensor(0, input.options().device(at::kCPU));
  return {at::where(mask, input * scale, zero), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad, const at::Tensor& mask, double scale) {
  c10::DeviceGuard guard(grad.device());
  at::Tensor zero = at::scalar_tensor(0, grad.options().device(at::kCPU));
  return at::where(mask, grad * scale, zero);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", uniform);
  m.impl("normal_", normal);
  m.impl("bernoulli_.float", bernoulli_float);
  m.impl("bernoulli_.Tensor", bernoulli_tensor);
  m.impl("random_", random_full);
  m.impl("random_.to", random_to);
  m.impl("random_.from", random_from);
  m.impl("exponential_", exponential);
  m.impl("native_dropout", native_dropout);
  m.impl("native_dropout_backward", native_dropout_backward);
}

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

std::vector<uint8_t> get_rng_state(int device) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  std::lock_guard<std::mutex> lock(gen.mutex());
  const at::Tensor state = gen.get_state();
  const auto* bytes = state.const_data_ptr<uint8_t>();
  return std::vector<uint8_t>(bytes, bytes + state.numel());
}

void set_rng_state(int device, const std::vector<uint8_t>& state) {
  at::Generator gen = default_generator(static_cast<c10::DeviceIndex>(device));
  at::Tensor t = at::empty({static_cast<int64_t>(state.size())}, at::kByte);
  std::memcpy(t.data_ptr(), state.data(), state.size());
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(t);
}

}  // namespace trnsim::frontend
