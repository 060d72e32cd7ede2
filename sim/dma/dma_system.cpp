#include "sim/dma/dma_system.h"

#include <algorithm>
#include <cmath>

#include "isa/isa_error.h"

namespace trnsim::sim {
namespace {

// DMA triggers are issued by the engines' in-order sequencers into finite queues, so a transfer
// cannot be triggered long before the ones emitted shortly before it. Modelled as: a transfer is
// triggered no earlier than the one kIssueWindow places earlier in program order (assumed window).
// Within the window transfers on different queues overtake each other freely.
constexpr size_t kIssueWindow = 32;

}  // namespace

DmaSystem::DmaSystem(sc_core::sc_module_name name, const DmaConfig& config, uint32_t hbm_stack, Hbm& hbm)
    : sc_core::sc_module(name),
      m_config(config),
      m_hbm_stack(hbm_stack),
      m_hbm(hbm),
      m_engines(config.engines_per_core, BandwidthCalendar(1.0)),
      m_all_engines(double(config.engines_per_core)),
      m_queue_free_ns(size_t(config.queues_per_engine) * config.engines_per_core, 0),
      m_engine_free_ns(config.engines_per_core, 0),
      m_dge_free_ns(config.hardware_dge_per_core, 0) {}

Slot DmaSystem::schedule(double ready_ns, const DmaCost& cost, uint32_t queue) {
  if (queue >= m_config.queues_per_engine) {
    throw isa::IsaError("DMA queue " + std::to_string(queue) + " does not exist (the config has " +
                        std::to_string(m_config.queues_per_engine) + " per engine)");
  }
  double trigger = ready_ns;
  if (m_recent_triggers.size() == kIssueWindow) trigger = std::max(trigger, m_recent_triggers[m_issued % kIssueWindow]);
  double start = trigger + cost.start_latency_ns;
  if (cost.dge_ns > 0 && !m_dge_free_ns.empty()) {
    // A hardware DGE builds the descriptors (busy dge_ns; take whichever frees first); its time
    // is part of the start latency, but the DGEs bound how many instructions start per second.
    auto dge = std::min_element(m_dge_free_ns.begin(), m_dge_free_ns.end());
    *dge = std::max(trigger, *dge) + cost.dge_ns;
    start = std::max(start, *dge);
  }
  const uint32_t engine_count = uint32_t(m_engines.size());
  const uint32_t first = std::min(cost.first_engine, engine_count - 1);
  const uint32_t engines = std::min(std::max<uint32_t>(1, cost.engines), engine_count - first);
  const bool strict = m_config.queue_arbitration == QueueArbitration::fifo;
  for (uint32_t e = first; e < first + engines; ++e) {
    start = std::max(start, m_queue_free_ns[size_t(queue) * engine_count + e]);
    if (strict) start = std::max(start, m_engine_free_ns[e]);
  }
  const double busy = cost.engine_ns();
  // The calendars walk their bookings by comparing times: a NaN would never compare done.
  if (!std::isfinite(start) || !std::isfinite(busy)) {
    throw isa::IsaError("the DMA timing is not finite (engine start " + std::to_string(start) + " ns, " +
                        std::to_string(busy) +
                        " ns per engine): a latency or rate of the config is not a finite number");
  }
  // The engines' time is booked from the start, so transfers of different queues share it in
  // issue order and a transfer still waiting for its trigger holds nothing.
  double engines_end = m_all_engines.reserve(start, busy * engines, double(engines));
  if (engines < engine_count) {
    for (uint32_t e = first; e < first + engines; ++e) engines_end = std::max(engines_end, m_engines[e].reserve(start, busy, 1.0));
  }
  // When other transfers held the engines, this one started later than asked.
  start = std::max(start, engines_end - busy);
  double end = engines_end;
  if (cost.reads_hbm || cost.writes_hbm) {
    // Data reaches HBM once the engines have started moving it, at most at the engines' rate; the
    // stack's bandwidth (per channel with modular interleave) is shared with every other transfer.
    const double data_start = start + cost.fixed_latency_ns;
    const double rate = engines * cost.bytes_per_ns_per_engine;
    double hbm_end = m_hbm.transfer(m_hbm_stack, data_start, static_cast<double>(cost.bytes), rate,
                                    cost.hbm_channels > 0 ? cost.hbm_channel_bytes.data() : nullptr);
    end = std::max(end, hbm_end);
  }
  for (uint32_t e = first; e < first + engines; ++e) {
    m_queue_free_ns[size_t(queue) * engine_count + e] = engines_end;
    m_engine_free_ns[e] = std::max(m_engine_free_ns[e], engines_end);
  }
  m_active.emplace_back(start, end);
  if (m_recent_triggers.size() < kIssueWindow) {
    m_recent_triggers.push_back(trigger);
  } else {
    m_recent_triggers[m_issued % kIssueWindow] = trigger;
  }
  ++m_issued;
  m_bytes += cost.bytes;
  m_last_done_ns = std::max(m_last_done_ns, end);
  return Slot{start, end, end};
}

double DmaSystem::earliest_next_start_ns() const {
  if (m_recent_triggers.size() < kIssueWindow) return 0;
  return *std::min_element(m_recent_triggers.begin(), m_recent_triggers.end());
}

void DmaSystem::forget_before(double time_ns) {
  for (BandwidthCalendar& engine : m_engines) engine.forget_before(time_ns);
  m_all_engines.forget_before(time_ns);
}

EngineStats DmaSystem::stats() const {
  std::vector<std::pair<double, double>> intervals = m_active;
  std::sort(intervals.begin(), intervals.end());
  EngineStats stats;
  stats.instructions = intervals.size();
  double covered_until = -1e300;
  for (const auto& [start, end] : intervals) {
    double from = std::max(start, covered_until);
    if (end > from) stats.busy_ns += end - from;
    covered_until = std::max(covered_until, end);
  }
  return stats;
}

}  // namespace trnsim::sim
