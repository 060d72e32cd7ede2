#include "sim/engine/engine_model.h"

#include <algorithm>

namespace trnsim::sim {

EngineModel::EngineModel(sc_core::sc_module_name name, Engine kind) : sc_core::sc_module(name), m_kind(kind) {}

Slot EngineModel::schedule(double ready_ns, double occupancy_ns, double latency_ns) {
  Slot slot;
  slot.start_ns = std::max(ready_ns, m_free_at_ns);
  slot.end_ns = slot.start_ns + occupancy_ns;
  slot.done_ns = slot.end_ns + latency_ns;
  m_free_at_ns = slot.end_ns;
  m_last_done_ns = std::max(m_last_done_ns, slot.done_ns);
  m_stats.busy_ns += occupancy_ns;
  m_busy_until_ns = std::max(m_busy_until_ns, slot.end_ns);
  ++m_stats.instructions;
  return slot;
}

Slot EngineModel::schedule_beside(double start_ns, double occupancy_ns, double latency_ns) {
  Slot slot;
  slot.start_ns = start_ns;
  slot.end_ns = start_ns + occupancy_ns;
  slot.done_ns = slot.end_ns + latency_ns;
  m_stats.busy_ns += std::max(0.0, slot.end_ns - std::max(slot.start_ns, m_busy_until_ns));
  m_busy_until_ns = std::max(m_busy_until_ns, slot.end_ns);
  m_free_at_ns = std::max(m_free_at_ns, slot.end_ns);
  m_last_done_ns = std::max(m_last_done_ns, slot.done_ns);
  ++m_stats.instructions;
  return slot;
}

void EngineModel::hold_until(double time_ns) { m_free_at_ns = std::max(m_free_at_ns, time_ns); }

}  // namespace trnsim::sim
