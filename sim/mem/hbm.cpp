#include "sim/mem/hbm.h"

namespace trnsim::sim {

Hbm::Hbm(sc_core::sc_module_name name, const HbmConfig& config) : sc_core::sc_module(name), m_config(config) {
  // The chip's bandwidth is shared evenly by its stacks (config doc of hbm.bandwidth_gbps).
  for (uint32_t i = 0; i < config.stacks; ++i) m_stacks.emplace_back(config.bandwidth_gbps / config.stacks);
}

double Hbm::transfer(uint32_t stack, double start_ns, double bytes, double max_rate) {
  m_bytes += static_cast<uint64_t>(bytes);
  return m_stacks.at(stack).reserve(start_ns, bytes, max_rate) + m_config.latency_ns;
}

void Hbm::forget_before(double time_ns) {
  for (BandwidthCalendar& stack : m_stacks) stack.forget_before(time_ns);
}

}  // namespace trnsim::sim
