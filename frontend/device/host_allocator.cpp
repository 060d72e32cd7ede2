// The device's host ("pinned") allocator, as torch.accelerator.empty_host_cache() and the host
// memory stats look it up (at::getHostAllocator(PrivateUse1)). Without one registered, torch 2.13's
// emptyHostCache() dereferences a null allocator once the device is initialized (a segfault).
//
// The simulator copies between host and device from any host memory, so page-locked memory buys
// nothing: blocks come from the CPU allocator and nothing is cached, so the cache is always empty
// and the statistics stay zero.
#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>

namespace trnsim::frontend {
namespace {

class SimHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t n) override { return at::getCPUAllocator()->allocate(n); }
  c10::DeleterFnPtr raw_deleter() const override { return at::getCPUAllocator()->raw_deleter(); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  // Copies are synchronous: a block is free for reuse as soon as its tensor is.
  bool record_event(void*, void*, c10::Stream) override { return true; }
  void empty_cache() override {}
  at::HostStats get_stats() override { return at::HostStats{}; }
  void reset_accumulated_stats() override {}
  void reset_peak_stats() override {}
};

// Never destroyed, like the HBM allocator: looked up until the process ends.
SimHostAllocator& g_host_allocator = *new SimHostAllocator();

REGISTER_HOST_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_host_allocator)

}  // namespace
}  // namespace trnsim::frontend
