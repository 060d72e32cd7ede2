// An access pattern names the elements one instruction operand touches, as the hardware
// addresses them (../shared/reference/trainium.md §4.2): a run of contiguous partitions and,
// within each partition, up to four free dimensions of (stride, size) in elements.
//
// Everything is relative to one allocation of the program (a named SBUF/PSUM/HBM tensor);
// Program resolves absolute partitions and byte addresses. For an HBM tensor, which has no
// partitions, the partition dimension is simply the outermost dimension, with a stride.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "config/dtype.h"
#include "config/units.h"

namespace trnsim::isa {

// Where an operand lives: HBM or one of the core's registered on-chip memories (config/onchip_memory_units.def,
// same names and order).
enum class MemorySpace : uint8_t {
  none,
  hbm,
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) name,
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
};
constexpr size_t kFirstOnChipSpace = static_cast<size_t>(MemorySpace::hbm) + 1;
const char* memory_space_name(MemorySpace space);
// "hbm" or a registered on-chip memory's name; nullopt otherwise (none is not a space one can name).
std::optional<MemorySpace> parse_memory_space(std::string_view name);
inline bool is_on_chip(MemorySpace space) { return static_cast<size_t>(space) >= kFirstOnChipSpace; }
// The on-chip memory of an SBUF/PSUM/... space (logic_error for none and hbm).
OnChipMemory on_chip_memory(MemorySpace space);

// The strides an access pattern can hold (ApStride below); readers refuse others with this range in the message.
constexpr int64_t kMinApStride = std::numeric_limits<int32_t>::min();
constexpr int64_t kMaxApStoredStride = std::numeric_limits<int32_t>::max();

// An access-pattern dim's stride in elements: held in 32 bits (a program holds a pattern per operand slot of
// millions of instructions), read as int64 for address arithmetic. A stride beyond int32 (2^31 elements, 4 GiB of
// bf16 between two steps of one dim) is refused with std::invalid_argument where it is set, never truncated.
class ApStride {
 public:
  constexpr ApStride(int64_t elements = 0) : m_elements(checked(elements)) {}  // NOLINT: implicit by design
  constexpr operator int64_t() const { return m_elements; }                    // NOLINT
  ApStride& operator*=(int64_t factor) { return *this = ApStride(int64_t{m_elements} * factor); }

 private:
  static constexpr int32_t checked(int64_t elements) {
    if (elements < kMinApStride || elements > kMaxApStoredStride) {
      throw std::invalid_argument("stride " + std::to_string(elements) +
                                  " elements is beyond the 2^31 an access pattern holds");
    }
    return static_cast<int32_t>(elements);
  }
  int32_t m_elements;
};

struct ApDim {
  ApStride stride = 0;  // in elements
  uint32_t size = 0;
  bool operator==(const ApDim& o) const { return int64_t{stride} == int64_t{o.stride} && size == o.size; }
};

constexpr int kMaxFreeDims = 4;
// A-V2: an access-pattern dim's size is a uint16 field and its stride an int16 one (the partition
// dim has no stride field). Legality checks them; kernel builders tile to stay inside them.
constexpr int64_t kMaxApDimSize = 65535;
constexpr int64_t kMaxApDimStride = 32767;

// Widest fields first, so that the one-byte ones share one word: a program holds one pattern per
// operand slot of every instruction (64 bytes).
struct AccessPattern {
  ApDim partition;               // SBUF/PSUM: stride unused (partitions are contiguous); HBM: outer dim
  int64_t offset = 0;            // elements from the allocation's start (within a partition for SBUF/PSUM)
  std::array<ApDim, kMaxFreeDims> free{};
  uint32_t allocation = 0;       // index into Program::allocations
  uint32_t start_partition = 0;  // SBUF/PSUM: first partition, relative to the allocation
  MemorySpace space = MemorySpace::none;  // none = operand absent
  DType dtype = DType::fp32;
  uint8_t num_free_dims = 0;
  // NKI's scalar_offset (dynamic addressing): the register whose value, in elements, is added to `offset`
  // when the instruction issues; -1 when the pattern is static. isa/control_flow.h resolves it.
  int8_t offset_register = -1;
  // Once resolved (offset_register added to offset and cleared): the register it came from, so that the timing
  // model can hold the instruction until that register is written; -1 for a pattern that was never dynamic.
  int8_t resolved_register = -1;

  bool present() const { return space != MemorySpace::none; }
  bool dynamic() const { return offset_register >= 0; }
  uint32_t partitions() const { return partition.size; }
  // Elements per partition: the product of the free sizes (1 when there are no free dims).
  uint64_t free_elements() const;
  uint64_t elements() const { return uint64_t{partitions()} * free_elements(); }
  uint64_t bytes() const { return elements() * dtype_size_bytes(dtype); }
  // True when the free dims walk consecutive elements (innermost stride 1, dims nested).
  bool free_contiguous() const;
  // The lowest and highest element offsets the pattern reaches (static part: offset_register not added): its free
  // dims, and its partition dim too where partitions are rows of one tensor (HBM).
  std::pair<int64_t, int64_t> element_range(bool with_partition) const;
  bool operator==(const AccessPattern& o) const;
};
static_assert(sizeof(AccessPattern) == 64, "AccessPattern grew: keep the one-byte fields together");

}  // namespace trnsim::isa
