#include "isa/access_pattern.h"

#include <stdexcept>
#include <string>

namespace trnsim::isa {

const char* memory_space_name(MemorySpace space) {
  switch (space) {
    case MemorySpace::none: return "none";
    case MemorySpace::hbm: return "hbm";
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) \
  case MemorySpace::name:                            \
    return #name;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  }
  return "?";
}

std::optional<MemorySpace> parse_memory_space(std::string_view name) {
  if (name == "hbm") return MemorySpace::hbm;
  if (auto memory = parse_enum<OnChipMemory>(name)) {
    return static_cast<MemorySpace>(kFirstOnChipSpace + static_cast<size_t>(*memory));
  }
  return std::nullopt;
}

OnChipMemory on_chip_memory(MemorySpace space) {
  if (!is_on_chip(space)) throw std::logic_error(std::string("internal: ") + memory_space_name(space) + " is not on chip");
  return static_cast<OnChipMemory>(static_cast<size_t>(space) - kFirstOnChipSpace);
}

uint64_t AccessPattern::free_elements() const {
  uint64_t count = 1;
  for (int i = 0; i < num_free_dims; ++i) count *= free[i].size;
  return count;
}

bool AccessPattern::free_contiguous() const {
  int64_t expected = 1;
  for (int i = num_free_dims - 1; i >= 0; --i) {
    if (free[i].size == 1) continue;
    if (free[i].stride != expected) return false;
    expected *= free[i].size;
  }
  return true;
}

std::pair<int64_t, int64_t> AccessPattern::element_range(bool with_partition) const {
  int64_t low = offset, high = offset;
  auto extend = [&](const ApDim& d) {
    int64_t span = d.stride * (int64_t{d.size} - 1);
    (span < 0 ? low : high) += span;
  };
  if (with_partition) extend(partition);
  for (int i = 0; i < num_free_dims; ++i) extend(free[i]);
  return {low, high};
}

bool AccessPattern::operator==(const AccessPattern& o) const {
  if (space != o.space || dtype != o.dtype || num_free_dims != o.num_free_dims || allocation != o.allocation ||
      start_partition != o.start_partition || !(partition == o.partition) || offset != o.offset ||
      offset_register != o.offset_register) {
    return false;
  }
  for (int i = 0; i < num_free_dims; ++i) {
    if (!(free[i] == o.free[i])) return false;
  }
  return true;
}

}  // namespace trnsim::isa
