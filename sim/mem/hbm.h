// Device HBM: stacks of fixed bandwidth shared by every DMA engine of the cores they serve
// (config hbm.stack_by_core), so queues and cores that stream from one stack contend and
// cores on different stacks do not. With modular interleave (config hbm.interleave) each stack's
// channels are booked separately: a transfer whose addresses reach few channels gets only their
// bandwidth, and transfers on disjoint channels do not contend.
#pragma once

#include <systemc>
#include <vector>

#include "config/hardware_config.h"
#include "sim/base/bandwidth_calendar.h"

namespace trnsim::sim {

class Hbm : public sc_core::sc_module {
 public:
  Hbm(sc_core::sc_module_name name, const HbmConfig& config);

  // Books `bytes` on `stack` from `start_ns`, at most `max_rate` bytes/ns; returns when the
  // last byte has moved (access latency included). With modular interleave `channel_bytes` (the
  // config's channel count of them, or null: spread evenly) says how many bytes reach each channel;
  // each channel moves its part at its share of `max_rate`.
  double transfer(uint32_t stack, double start_ns, double bytes, double max_rate,
                  const uint64_t* channel_bytes = nullptr);
  void forget_before(double time_ns);
  uint64_t bytes_moved() const { return m_bytes; }

 private:
  const HbmConfig& m_config;
  std::vector<BandwidthCalendar> m_stacks;
  std::vector<std::vector<BandwidthCalendar>> m_channels;  // [stack][channel], modular interleave only
  uint64_t m_bytes = 0;
};

}  // namespace trnsim::sim
