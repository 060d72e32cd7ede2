// The DMA engines of one NeuronCore and their queues. A transfer goes to one queue ID across
// the engines that serve its partitions (FIFO within a queue); each engine moves its share at
// its own rate after a fixed start-up and per-descriptor cost; HBM traffic is booked on the
// core's HBM stack, where it contends with every other queue and core on that stack.
// Each engine's bandwidth is booked over time, so transfers of different queues share it (the
// hardware's round-robin over queues) and one waiting for its data holds nothing.
#pragma once

#include <algorithm>
#include <systemc>
#include <utility>
#include <vector>

#include "config/hardware_config.h"
#include "sim/cost_model.h"
#include "sim/engine/engine_model.h"
#include "sim/base/bandwidth_calendar.h"
#include "sim/mem/hbm.h"

namespace trnsim::sim {

class DmaSystem : public sc_core::sc_module {
 public:
  DmaSystem(sc_core::sc_module_name name, const DmaConfig& config, uint32_t hbm_stack, Hbm& hbm);

  Slot schedule(double ready_ns, const DmaCost& cost, uint32_t queue);

  // Time during which at least one transfer was in flight, and the number of transfers.
  EngineStats stats() const;
  uint64_t bytes() const { return m_bytes; }
  double last_done_ns() const { return m_last_done_ns; }
  void forget_before(double time_ns);
  // No later transfer of this core starts before this (see kIssueWindow in the .cpp).
  double earliest_next_start_ns() const;

 private:
  const DmaConfig& m_config;
  uint32_t m_hbm_stack;
  Hbm& m_hbm;
  std::vector<BandwidthCalendar> m_engines;  // each engine's bandwidth over time (narrow transfers)
  BandwidthCalendar m_all_engines;           // all engines together
  std::vector<double> m_queue_free_ns;
  std::vector<double> m_dge_free_ns;
  std::vector<std::pair<double, double>> m_active;  // [start, end) of every transfer
  uint64_t m_bytes = 0;
  double m_last_done_ns = 0;
  std::vector<double> m_recent_starts;  // ring of the last kIssueWindow transfer starts
  size_t m_issued = 0;
};

}  // namespace trnsim::sim
