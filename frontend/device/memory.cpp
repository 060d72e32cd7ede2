// Simulated HBM: host memory standing for device memory, with the configured capacity per
// device, torch's allocator statistics and its out-of-memory error.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/device/device_internal.h"
#include "frontend/device_runtime.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"
#include "frontend/neuron_device.h"
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <optional>
#include <map>
#include <sys/mman.h>
#include <algorithm>

namespace trnsim::frontend {
namespace {


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

void hbm_delete(void* ptr);

// Host memory stands for each device's HBM; the bytes are accounted in the device runtime (its
// DeviceState's MemoryAccount, which outlives a set_config with the tensors). The allocator keeps
// only which live block belongs to which device.
class SimHbmAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    const c10::DeviceIndex index = current_index();
    const c10::Device device(kNeuron, index);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &hbm_delete, device);
    std::shared_ptr<DeviceRuntime> runtime = device_runtime();
    uint64_t used = 0;
    if (!runtime->allocate_memory(index, n, &used)) {
      const uint64_t capacity = runtime->device_info().hbm_bytes_per_device;
      const uint64_t free_bytes = capacity > used ? capacity - used : 0;
      TORCH_CHECK_WITH(OutOfMemoryError, false, "NEURON out of memory. Tried to allocate ", format_bytes(n),
                       ". Device ", static_cast<int>(index), " has a total capacity of ", format_bytes(capacity),
                       " of which ", format_bytes(free_bytes), " is free. Of the allocated memory ", format_bytes(used),
                       " is allocated by PyTorch. (simulated HBM of the configured hardware; see trnsim.set_config)");
    }
    // Timing only: the block is address space the host never touches (no values are computed or
    // copied), so it costs no host memory however large the model; reserved without swap backing.
    const bool with_values = runtime->values_enabled();
    void* ptr = nullptr;
    if (with_values) {
      ptr = std::aligned_alloc(64, (n + 63) / 64 * 64);
    } else {
      ptr = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (ptr == MAP_FAILED) ptr = nullptr;
    }
    if (ptr == nullptr) {
      runtime->release_memory(index, n);
      TORCH_CHECK_WITH(OutOfMemoryError, false, "host memory backing the simulated HBM is exhausted (", format_bytes(n), ")");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = Block{n, index, /*mapped=*/!with_values, with_values};
    return c10::DataPtr(ptr, ptr, &hbm_delete, device);
  }

  void free(void* ptr) {
    if (ptr == nullptr) return;
    std::optional<Block> block;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
      if (it != blocks_.end()) {
        block = it->second;
        blocks_.erase(it);
      }
    }
    if (block) {
      if (std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null()) runtime->release_memory(block->device, block->size);
    }
    if (block && block->mapped) ::munmap(ptr, block->size);
    else std::free(ptr);
  }

  // Whether the block holding `ptr` has values (see kernel_executor.h); host memory always has.
  bool holds_values(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Block* block = find_block(ptr);
    return block == nullptr || block->has_values;
  }
  void set_values(const void* ptr, bool has_values) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (Block* block = find_block(ptr)) block->has_values = has_values;
  }

  c10::DeleterFnPtr raw_deleter() const override { return &hbm_delete; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }

  // c10::DeviceAllocator: what torch.accelerator.memory_* reads.
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const MemoryAccount mem = device_runtime()->memory(device);
    c10::CachingDeviceAllocator::Stat bytes;
    bytes.current = mem.current_bytes;
    bytes.peak = mem.peak_bytes;
    bytes.allocated = mem.allocated_bytes;
    bytes.freed = mem.freed_bytes;
    c10::CachingDeviceAllocator::DeviceStats stats;
    for (auto* array : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      (*array)[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)] = bytes;
    }
    stats.num_ooms = static_cast<int64_t>(mem.num_ooms);
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { device_runtime()->reset_accumulated_memory(device); }
  void resetPeakStats(c10::DeviceIndex device) override { device_runtime()->reset_peak_memory(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    std::shared_ptr<DeviceRuntime> runtime = device_runtime();
    const uint64_t capacity = runtime->device_info().hbm_bytes_per_device;
    const uint64_t used = static_cast<uint64_t>(runtime->memory(device).current_bytes);
    return {capacity > used ? capacity - used : 0, capacity};
  }

  bool owns(void* ptr, c10::DeviceIndex* device) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end()) return false;
    *device = it->second.device;
    return true;
  }

  static c10::DeviceIndex current_index() { return current_device_index(); }

 private:
  struct Block {
    size_t size;
    c10::DeviceIndex device;
    bool mapped;      // mmap'd address space (timing-only mode), else aligned_alloc
    bool has_values;  // false once written in timing-only mode
  };
  // The live block containing `ptr` (a view's data pointer lies inside its storage's block).
  Block* find_block(const void* ptr) {
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return nullptr;
    --it;
    return p < it->first + std::max<size_t>(it->second.size, 1) ? &it->second : nullptr;
  }
  std::mutex mutex_;  // never the GIL: allocate/free run from any thread
  std::map<uintptr_t, Block> blocks_;  // by address: interior pointers find their block
};

// Never destroyed: tensors may still be freed while static destructors run at exit.
SimHbmAllocator& g_allocator = *new SimHbmAllocator();
void hbm_delete(void* ptr) { g_allocator.free(ptr); }

REGISTER_ALLOCATOR(kNeuron, &g_allocator)

}  // namespace

c10::Allocator* hbm_allocator() { return &g_allocator; }
void mark_without_values(const void* ptr) { g_allocator.set_values(ptr, false); }
void mark_with_values(const void* ptr) { g_allocator.set_values(ptr, true); }
bool holds_values(const void* ptr) { return g_allocator.holds_values(ptr); }
bool hbm_owns(void* ptr, c10::DeviceIndex* device) { return g_allocator.owns(ptr, device); }

MemoryStats memory_stats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "bad neuron device index ", device);
  std::shared_ptr<DeviceRuntime> runtime = device_runtime();
  const MemoryAccount mem = runtime->memory(device);
  MemoryStats out;
  out.allocated = static_cast<uint64_t>(mem.current_bytes);
  out.peak_allocated = static_cast<uint64_t>(mem.peak_bytes);
  out.capacity = runtime->device_info().hbm_bytes_per_device;
  out.num_allocs = mem.num_allocs;
  out.num_ooms = mem.num_ooms;
  return out;
}

void reset_peak_memory_stats(int device) {
  TORCH_CHECK(device >= 0 && device < kMaxDevices, "bad neuron device index ", device);
  device_runtime()->reset_peak_memory(device);
}

}  // namespace trnsim::frontend
