// The memories of one NeuronCore as the functional interpreter sees them: SBUF and PSUM as
// partitions x bytes, and one buffer per HBM allocation. Engines read operands into fp32 tiles
// and write results back through the numerics of the destination dtype.
#pragma once

#include <cstdint>
#include <vector>

#include "config/hardware_config.h"
#include "isa/numerics/float_format.h"
#include "isa/program.h"

namespace trnsim::isa {

// A dense fp32 tile: partitions x free elements, row-major.
struct Tile {
  uint32_t partitions = 0;
  uint64_t free = 0;
  std::vector<float> values;

  Tile() = default;
  Tile(uint32_t p, uint64_t f, float fill = 0.0f) : partitions(p), free(f), values(size_t(p) * f, fill) {}
  float* row(uint32_t p) { return values.data() + size_t(p) * free; }
  const float* row(uint32_t p) const { return values.data() + size_t(p) * free; }
  float& at(uint32_t p, uint64_t i) { return values[size_t(p) * free + i]; }
  float at(uint32_t p, uint64_t i) const { return values[size_t(p) * free + i]; }
};

class CoreState {
 public:
  CoreState(const CoreConfig& core, const Program& program);

  // fp32 copy of the elements `ap` names; throws IsaError if any lies outside its memory.
  Tile read(const AccessPattern& ap) const;
  // Writes `tile` (same element count) through `ap`, rounding to the destination dtype.
  void write(const AccessPattern& ap, const Tile& tile, numerics::RoundingMode rounding = numerics::RoundingMode::nearest_even,
             numerics::StochasticSource* rng = nullptr);

  // Raw bytes of an HBM allocation (inputs are loaded and outputs read here).
  std::vector<uint8_t>& hbm(uint32_t allocation) { return m_hbm.at(allocation); }
  const std::vector<uint8_t>& hbm(uint32_t allocation) const { return m_hbm.at(allocation); }

  // PSUM accumulation tracking for nc_matmul accumulate=auto: set where a matmul wrote, cleared
  // where another instruction reads or writes (the compiler's "first write overwrites" rule).
  bool psum_accumulating(const AccessPattern& ap) const;
  void set_psum_accumulating(const AccessPattern& ap, bool value);

  const Program& program() const { return m_program; }
  const CoreConfig& core() const { return m_core; }

 private:
  // Calls visit(partition_index, element_pointer, element_index) for every element of ap, in
  // row-major order of (partition, free dims).
  template <class Visit>
  void for_each_element(const AccessPattern& ap, Visit&& visit) const;
  uint8_t* base_pointer(const AccessPattern& ap, uint32_t partition_index) const;
  void check_bounds(const AccessPattern& ap) const;

  const CoreConfig& m_core;
  const Program& m_program;
  mutable std::vector<uint8_t> m_sbuf;
  mutable std::vector<uint8_t> m_psum;
  std::vector<std::vector<uint8_t>> m_hbm;  // by allocation index; empty for on-chip allocations
  std::vector<uint8_t> m_psum_accumulating;  // one flag per 4-byte PSUM word
};

}  // namespace trnsim::isa
