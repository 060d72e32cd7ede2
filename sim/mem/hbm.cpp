#include "sim/mem/hbm.h"

#include <algorithm>

namespace trnsim::sim {

Hbm::Hbm(sc_core::sc_module_name name, const HbmConfig& config) : sc_core::sc_module(name), m_config(config) {
  // The chip's bandwidth is shared evenly by its stacks (config doc of hbm.bandwidth_gbps).
  for (uint32_t i = 0; i < config.stacks; ++i) m_stacks.emplace_back(config.bandwidth_gbps / config.stacks);
  if (config.interleave == HbmInterleave::modular) {
    const double per_channel = config.bandwidth_gbps / config.stacks / config.channels_per_stack;
    m_channels.assign(config.stacks, std::vector<BandwidthCalendar>(config.channels_per_stack, BandwidthCalendar(per_channel)));
  }
}

double Hbm::transfer(uint32_t stack, double start_ns, double bytes, double max_rate, const uint64_t* channel_bytes) {
  m_bytes += static_cast<uint64_t>(bytes);
  if (m_channels.empty() || bytes <= 0) return m_stacks.at(stack).reserve(start_ns, bytes, max_rate) + m_config.latency_ns;
  std::vector<BandwidthCalendar>& calendars = m_channels.at(stack);
  const double channels = double(calendars.size());
  double end = start_ns;
  for (size_t c = 0; c < calendars.size(); ++c) {
    const double part = channel_bytes ? double(channel_bytes[c]) : bytes / channels;
    if (part <= 0) continue;
    end = std::max(end, calendars[c].reserve(start_ns, part, max_rate * (part / bytes)));
  }
  return end + m_config.latency_ns;
}

void Hbm::forget_before(double time_ns) {
  for (BandwidthCalendar& stack : m_stacks) stack.forget_before(time_ns);
  for (auto& stack : m_channels) {
    for (BandwidthCalendar& channel : stack) channel.forget_before(time_ns);
  }
}

}  // namespace trnsim::sim
