#include "sim/dma/dma_system.h"

#include <algorithm>
#include <cmath>

#include "isa/isa_error.h"

namespace trnsim::sim {
namespace {

// DMA triggers are issued by the engines' in-order sequencers into finite queues, so a transfer
// cannot start long before the ones emitted shortly before it. Modelled as: a transfer starts no
// earlier than the one kIssueWindow places earlier in program order (assumed window). Within the
// window transfers on different queues overtake each other freely.
constexpr size_t kIssueWindow = 32;

}  // namespace

DmaSystem::DmaSystem(sc_core::sc_module_name name, const DmaConfig& config, uint32_t hbm_stack, Hbm& hbm)
    : sc_core::sc_module(name),
      m_config(config),
      m_hbm_stack(hbm_stack),
      m_hbm(hbm),
      m_engines(config.engines_per_core, BandwidthCalendar(config.bandwidth_per_engine_gbps)),
      m_all_engines(config.engines_per_core * config.bandwidth_per_engine_gbps),
      m_queue_free_ns(config.queues_per_engine, 0),
      m_dge_free_ns(config.hardware_dge_per_core, 0) {}

Slot DmaSystem::schedule(double ready_ns, const DmaCost& cost, uint32_t queue) {
  if (queue >= m_queue_free_ns.size()) {
    throw isa::IsaError("DMA queue " + std::to_string(queue) + " does not exist (the config has " +
                        std::to_string(m_queue_free_ns.size()) + " per engine)");
  }
  double start = std::max(ready_ns, m_queue_free_ns[queue]);
  if (m_recent_starts.size() == kIssueWindow) start = std::max(start, m_recent_starts[m_issued % kIssueWindow]);
  if (cost.dge_ns > 0 && !m_dge_free_ns.empty()) {
    // A hardware DGE builds the descriptors first; take whichever frees first.
    auto dge = std::min_element(m_dge_free_ns.begin(), m_dge_free_ns.end());
    double dge_start = std::max(start, *dge);
    *dge = dge_start + cost.dge_ns;
    start = *dge;
  }
  // The engines' bandwidth is booked over time, so transfers of different queues share it (the
  // round-robin over queues) and a transfer still waiting for its data holds nothing. All of the
  // core's engines together are one calendar (what a transfer spanning every engine, the common
  // case, needs); a transfer on fewer engines also books the engines it uses, so two narrow
  // transfers on the same partitions share their engines.
  const double first_start = start;
  const double data_start = start + cost.fixed_latency_ns + cost.descriptor_ns;
  // The calendars walk their bookings by comparing times: a NaN would never compare done.
  if (!std::isfinite(data_start) || !std::isfinite(cost.bytes_per_ns_per_engine)) {
    throw isa::IsaError("the DMA timing is not finite (data start " + std::to_string(data_start) + " ns, " +
                        std::to_string(cost.bytes_per_ns_per_engine) +
                        " bytes/ns per engine): a latency or rate of the config is not a finite number");
  }
  const uint32_t engines = std::max<uint32_t>(1, cost.engines);
  double engines_end = m_all_engines.reserve(data_start, double(cost.bytes), engines * cost.bytes_per_ns_per_engine);
  if (engines < m_engines.size()) {
    const double bytes_per_engine = double(cost.bytes) / engines;
    for (uint32_t e = cost.first_engine; e < cost.first_engine + engines && e < m_engines.size(); ++e) {
      engines_end = std::max(engines_end, m_engines[e].reserve(data_start, bytes_per_engine, cost.bytes_per_ns_per_engine));
    }
  }
  double end = engines_end;
  if (cost.reads_hbm || cost.writes_hbm) {
    // Data reaches HBM once the engines have started moving it; the stack's bandwidth is shared.
    double hbm_end = m_hbm.transfer(m_hbm_stack, data_start, static_cast<double>(cost.bytes),
                                    cost.engines * cost.bytes_per_ns_per_engine);
    end = std::max(end, hbm_end);
  }
  m_queue_free_ns[queue] = end;
  m_active.emplace_back(first_start, end);
  if (m_recent_starts.size() < kIssueWindow) {
    m_recent_starts.push_back(first_start);
  } else {
    m_recent_starts[m_issued % kIssueWindow] = first_start;
  }
  ++m_issued;
  m_bytes += cost.bytes;
  m_last_done_ns = std::max(m_last_done_ns, end);
  return Slot{first_start, end, end};
}

double DmaSystem::earliest_next_start_ns() const {
  if (m_recent_starts.size() < kIssueWindow) return 0;
  return *std::min_element(m_recent_starts.begin(), m_recent_starts.end());
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
