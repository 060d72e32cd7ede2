#include "sim/chip/chip.h"

#include <algorithm>

#include "isa/isa_error.h"

namespace trnsim::sim {

Chip::Chip(sc_core::sc_module_name name, const HardwareConfig& config, const std::vector<const isa::Program*>& programs,
           const std::vector<uint32_t>& cores, TraceWriter* trace, const std::vector<isa::CoreState*>& states,
           const CoreRunOptions& options)
    : sc_core::sc_module(name),
      m_hbm("hbm", config.hbm),
      m_core_barrier(cores),
      m_collectives(config, cores, options.collective_system, options.collective_ranks_per_chip,
                    options.cores_share_chip) {
  CoreRunOptions core_options = options;
  core_options.decoupled = cores.size() > 1;
  for (size_t i = 0; i < cores.size(); ++i) {
    core_options.rank = uint32_t(i);
    m_cores.push_back(std::make_unique<NeuronCore>(("core" + std::to_string(cores[i])).c_str(), cores[i], config,
                                                   *programs.at(i), m_hbm, m_core_barrier, m_collectives, trace,
                                                   states.at(i),
                                                   core_options));
  }
}

double Chip::finish_ns() const {
  double finish = 0;
  for (const auto& core : m_cores) finish = std::max(finish, core->finish_ns());
  return finish;
}

void Chip::check_all_ran_to_end() const {
  for (const auto& core : m_cores) {
    if (core->ran_to_end()) continue;
    throw isa::IsaError(std::string(core->name()) + " is stuck at instruction " + std::to_string(core->stuck_at()) +
                        ": it waits at a meeting (sendrecv, collective or core_barrier) that the other cores, waiting "
                        "at theirs, never join (the program would hang) [deadlock]");
  }
}

void Chip::add_stats(SimStats& stats) const {
  for (const auto& core : m_cores) core->add_stats(stats);
  stats.hbm_bytes = m_hbm.bytes_moved();
}

}  // namespace trnsim::sim
