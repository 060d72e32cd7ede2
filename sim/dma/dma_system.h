// The DMA engines of one NeuronCore and their queues (trainium.md §7). A transfer is triggered
// when its inputs are ready, reaches its engines after the start latency (descriptor setup,
// synchronization, semaphore-to-start) and goes to one queue ID across the engines that serve its
// partitions. Each engine is busy with its share for the transfer's start-up plus the larger of
// its descriptor processing and its data time (its bytes, or its chunks at min_chunk_bytes each,
// over its bandwidth; DmaCost::engine_ns), so descriptor processing and fragmented access patterns
// bound throughput. Within a queue an engine takes transfers in order (the next one
// starts when the engine is done with the previous one, while that one's data may still be in
// flight); across queues config dma.queue_arbitration decides (round_robin / qos: an engine's time
// is shared by the queues, a transfer using what earlier ones leave; fifo: strict issue order).
// HBM traffic is booked on the core's HBM stack (per channel with modular interleave), where it
// contends with every other queue and core on that stack.
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

  // Slot: start = the engines start the transfer (after the start latency), done = its last byte
  // has landed (HBM latency included).
  Slot schedule(double ready_ns, const DmaCost& cost, uint32_t queue);

  // Time during which at least one transfer was on the engines, and the number of transfers.
  EngineStats stats() const;
  uint64_t bytes() const { return m_bytes; }
  double last_done_ns() const { return m_last_done_ns; }
  void forget_before(double time_ns);
  // No later transfer of this core is triggered before this (see kIssueWindow in the .cpp).
  double earliest_next_start_ns() const;

 private:
  const DmaConfig& m_config;
  uint32_t m_hbm_stack;
  Hbm& m_hbm;
  // Each engine's time (capacity 1 ns per ns), and all engines together (capacity = engines):
  // a transfer over every engine, the common case, books only the latter.
  std::vector<BandwidthCalendar> m_engines;
  BandwidthCalendar m_all_engines;
  std::vector<double> m_queue_free_ns;   // [queue * engines + engine]: FIFO within a queue
  std::vector<double> m_engine_free_ns;  // fifo arbitration: strict issue order on each engine
  std::vector<double> m_dge_free_ns;
  std::vector<std::pair<double, double>> m_active;  // [start, end) of every transfer on the engines
  uint64_t m_bytes = 0;
  double m_last_done_ns = 0;
  std::vector<double> m_recent_triggers;  // ring of the last kIssueWindow transfer triggers
  size_t m_issued = 0;
};

}  // namespace trnsim::sim
