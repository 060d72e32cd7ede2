// A Trainium chip for one simulation: the NeuronCores that run the programs (one per listed
// physical core: the same one for SPMD, or the parts of a split kernel) and the HBM stacks they
// share as the config maps them. All binding happens here.
#pragma once

#include <memory>
#include <systemc>
#include <vector>

#include "sim/chip/core_barrier.h"
#include "sim/core/neuron_core.h"
#include "sim/mem/hbm.h"
#include "sim/system/collective_rendezvous.h"

namespace trnsim::sim {

class Chip : public sc_core::sc_module {
 public:
  Chip(sc_core::sc_module_name name, const HardwareConfig& config, const std::vector<const isa::Program*>& programs,
       const std::vector<uint32_t>& cores, TraceWriter* trace, const std::vector<isa::CoreState*>& states,
       const CoreRunOptions& options);

  double finish_ns() const;
  // After sc_start: an IsaError naming the first core stuck at a meeting that cannot complete (every core that
  // could meet it waits too), else nothing.
  void check_all_ran_to_end() const;
  void add_stats(SimStats& stats) const;

 private:
  Hbm m_hbm;
  CoreBarrier m_core_barrier;
  CollectiveRendezvous m_collectives;
  std::vector<std::unique_ptr<NeuronCore>> m_cores;
};

}  // namespace trnsim::sim
