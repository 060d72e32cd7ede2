#include "sim/mem/onchip_memory.h"

#include <algorithm>

namespace trnsim::sim {

OnChipMemory::OnChipMemory(sc_core::sc_module_name name, trnsim::OnChipMemory kind, const CoreConfig& core,
                           const isa::Program& program)
    : sc_core::sc_module(name),
      m_kind(kind),
      m_core(core),
      m_program(program),
      m_first_use_ns(program.allocations.size(), -1),
      m_last_use_ns(program.allocations.size(), -1) {
  for (const MemoryConflictConfig& conflict : core.memory_access.conflicts) {
    if (conflict.memory == kind) m_conflicts.push_back(&conflict);
  }
}

bool OnChipMemory::applies(const MemoryConflictConfig& conflict, Engine engine, uint32_t performance_mode) const {
  if (std::find(conflict.engines.begin(), conflict.engines.end(), engine) == conflict.engines.end()) return false;
  // The shared Vector/GpSimd bus is only taken by Vector instructions in a 2x/4x mode (A-V3);
  // GpSimd accesses always count, as they contend with such a Vector instruction.
  if (conflict.condition == ConflictCondition::vector_performance_mode && engine == Engine::vector) {
    return performance_mode > 1;
  }
  return true;
}

void OnChipMemory::units(const MemoryConflictConfig& conflict, const isa::AccessPattern& ap, uint64_t& first,
                         uint64_t& last) const {
  first = last = 0;
  if (conflict.scope != ConflictScope::bank) return;
  const isa::Allocation& a = m_program.allocation(ap);
  int64_t low = ap.offset, high = ap.offset;
  for (int i = 0; i < ap.num_free_dims; ++i) {
    int64_t span = ap.free[i].stride * (int64_t{ap.free[i].size} - 1);
    (span < 0 ? low : high) += span;
  }
  uint64_t esize = dtype_size_bytes(ap.dtype);
  first = (a.base_byte + uint64_t(std::max<int64_t>(low, 0)) * esize) / m_core.psum.bank_bytes;
  last = (a.base_byte + uint64_t(high + 1) * esize - 1) / m_core.psum.bank_bytes;
}

double OnChipMemory::conflict_ready(Engine engine, const isa::AccessPattern& ap, uint32_t performance_mode) const {
  double ready = 0;
  for (size_t c = 0; c < m_conflicts.size(); ++c) {
    const MemoryConflictConfig& conflict = *m_conflicts[c];
    if (!applies(conflict, engine, performance_mode)) continue;
    uint64_t first = 0, last = 0;
    units(conflict, ap, first, last);
    for (Engine other : conflict.engines) {
      if (other == engine) continue;
      for (uint64_t unit = first; unit <= last; ++unit) {
        auto it = m_busy_until_ns.find(Key{int(c), unit, other});
        if (it != m_busy_until_ns.end()) ready = std::max(ready, it->second);
      }
    }
  }
  return ready;
}

void OnChipMemory::record(Engine engine, const isa::AccessPattern& ap, uint32_t performance_mode, double start_ns,
                          double end_ns) {
  uint32_t id = ap.allocation;
  if (m_first_use_ns[id] < 0 || start_ns < m_first_use_ns[id]) m_first_use_ns[id] = start_ns;
  m_last_use_ns[id] = std::max(m_last_use_ns[id], end_ns);
  for (size_t c = 0; c < m_conflicts.size(); ++c) {
    const MemoryConflictConfig& conflict = *m_conflicts[c];
    if (!applies(conflict, engine, performance_mode)) continue;
    uint64_t first = 0, last = 0;
    units(conflict, ap, first, last);
    for (uint64_t unit = first; unit <= last; ++unit) {
      double& busy = m_busy_until_ns[Key{int(c), unit, engine}];
      busy = std::max(busy, end_ns);
    }
  }
}

uint64_t OnChipMemory::high_water_bytes() const {
  // Sweep allocation lifetimes; at equal times a release comes before an acquisition.
  std::vector<std::pair<double, int64_t>> events;
  for (size_t i = 0; i < m_program.allocations.size(); ++i) {
    if (m_first_use_ns[i] < 0) continue;
    const isa::Allocation& a = m_program.allocations[i];
    int64_t bytes = static_cast<int64_t>(a.bytes_per_partition() * a.partitions());
    events.emplace_back(m_first_use_ns[i], bytes);
    events.emplace_back(m_last_use_ns[i], -bytes);
  }
  std::sort(events.begin(), events.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first < y.first : x.second < y.second;
  });
  int64_t live = 0, peak = 0;
  for (const auto& [time, delta] : events) {
    live += delta;
    peak = std::max(peak, live);
  }
  return static_cast<uint64_t>(peak);
}

}  // namespace trnsim::sim
