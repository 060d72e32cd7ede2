#include "isa/program.h"

namespace trnsim::isa {

uint64_t Allocation::elements_per_partition() const {
  uint64_t count = 1;
  for (size_t i = space == MemorySpace::hbm ? 0 : 1; i < shape.size(); ++i) count *= shape[i];
  return count;
}

uint64_t Allocation::total_elements() const {
  uint64_t count = 1;
  for (uint32_t d : shape) count *= d;
  return count;
}

std::vector<int64_t> Allocation::strides() const {
  size_t first = space == MemorySpace::hbm ? 0 : 1;
  std::vector<int64_t> strides(shape.size() - first);
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > first;) {
    strides[i - first] = stride;
    stride *= shape[i];
  }
  return strides;
}

int Program::find_allocation(const std::string& name) const {
  for (size_t i = 0; i < allocations.size(); ++i) {
    if (allocations[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace trnsim::isa
