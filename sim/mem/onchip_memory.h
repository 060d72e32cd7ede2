// SBUF or PSUM of one NeuronCore, as far as timing is concerned: which engines' accesses
// serialise (config core.memory_access.conflicts: e.g. Vector and Scalar on one PSUM bank), and
// how many bytes are live over time (an allocation is live from its first to its last access),
// for the high-water mark.
#pragma once

#include <map>
#include <systemc>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::sim {

class OnChipMemory : public sc_core::sc_module {
 public:
  OnChipMemory(sc_core::sc_module_name name, trnsim::OnChipMemory kind, const CoreConfig& core,
               const isa::Program& program);

  // Earliest start for `engine` touching `ap` given the conflicting engines' earlier accesses.
  double conflict_ready(Engine engine, const isa::AccessPattern& ap, uint32_t performance_mode) const;
  // Records an access in [start_ns, end_ns).
  void record(Engine engine, const isa::AccessPattern& ap, uint32_t performance_mode, double start_ns, double end_ns);

  uint64_t high_water_bytes() const;

 private:
  struct Key {
    int conflict;
    uint64_t unit;  // bank index, or 0 for the whole memory
    Engine engine;
    bool operator<(const Key& o) const {
      return std::tie(conflict, unit, engine) < std::tie(o.conflict, o.unit, o.engine);
    }
  };
  bool applies(const MemoryConflictConfig& conflict, Engine engine, uint32_t performance_mode) const;
  void units(const MemoryConflictConfig& conflict, const isa::AccessPattern& ap, uint64_t& first, uint64_t& last) const;

  trnsim::OnChipMemory m_kind;
  const CoreConfig& m_core;
  const isa::Program& m_program;
  std::vector<const MemoryConflictConfig*> m_conflicts;  // those on this memory
  std::map<Key, double> m_busy_until_ns;
  std::vector<double> m_first_use_ns, m_last_use_ns;  // by allocation
};

}  // namespace trnsim::sim
