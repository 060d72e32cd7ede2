// One interpreter program for the semantics tests: declare tensors, emit instructions, build, set
// inputs, run, read outputs (as fp32, or as raw 32-bit patterns).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/legality.h"
#include "isa/numerics/float_format.h"

namespace trnsim::isa::testing_support {

inline const HardwareConfig& config(const std::string& name) {
  static std::map<std::string, HardwareConfig> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load_config(name).hardware).first;
  return it->second;
}

class Kernel {
 public:
  // `check_legality`: build() also runs check_program, for suites whose every program is legal.
  explicit Kernel(const std::string& target = "trn2", bool check_legality = false)
      : m_target(target), m_check_legality(check_legality), m_builder("kernel_fixture", config(target).generation) {}
  AccessPattern tensor(DType dtype, std::vector<uint32_t> shape, uint32_t* id = nullptr) {
    uint32_t allocation = m_builder.sbuf("t" + std::to_string(m_count++), dtype, std::move(shape));
    if (id) *id = allocation;
    return m_builder.view(allocation);
  }
  AccessPattern psum_tensor(DType dtype, std::vector<uint32_t> shape) {
    return m_builder.view(m_builder.psum("t" + std::to_string(m_count++), dtype, std::move(shape)));
  }
  AccessPattern slice(uint32_t allocation, const std::vector<Slice>& slices) const {
    return m_builder.view(allocation, slices);
  }
  InstructionBuilder emit(Opcode opcode) { return m_builder.emit(opcode); }
  void build() {
    m_program = std::make_unique<Program>(m_builder.finish());
    if (m_check_legality) check_program(*m_program, config(m_target));
    m_state = std::make_unique<CoreState>(config(m_target).core, *m_program);
  }
  // Stores `values` (rounded to the tensor's dtype) and returns what was stored, as fp32.
  Tile set(const AccessPattern& ap, const std::vector<float>& values) {
    Tile tile(ap.partitions(), ap.free_elements());
    tile.values = values;
    m_state->write(ap, tile);
    return m_state->read(ap);
  }
  void set_bits(const AccessPattern& ap, const std::vector<uint32_t>& bits) {
    AccessPattern raw = ap;
    raw.dtype = DType::fp32;
    Tile tile(ap.partitions(), ap.free_elements());
    for (size_t i = 0; i < bits.size(); ++i) tile.values[i] = numerics::bits_float(bits[i]);
    m_state->write(raw, tile);
  }
  std::vector<uint32_t> get_bits(const AccessPattern& ap) const {
    AccessPattern raw = ap;
    raw.dtype = DType::fp32;
    std::vector<uint32_t> out;
    for (float v : m_state->read(raw).values) out.push_back(numerics::float_bits(v));
    return out;
  }
  void run() { interpret(*m_program, *m_state, config(m_target)); }
  Tile get(const AccessPattern& ap) const { return m_state->read(ap); }
  CoreState& state() { return *m_state; }

 private:
  std::string m_target;
  bool m_check_legality;
  ProgramBuilder m_builder;
  std::unique_ptr<Program> m_program;
  std::unique_ptr<CoreState> m_state;
  int m_count = 0;
};

}  // namespace trnsim::isa::testing_support
