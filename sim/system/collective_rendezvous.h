// The meeting point of the ISA's collectives (all_reduce, all_gather, reduce_scatter, all_to_all,
// collective_permute): the ranks of one simulation are its physical cores, each with its own memory. A rank's k-th
// collective over a group meets the k-th collective over that group of every member; the meeting starts at the
// latest arrival and lasts what the system model (sim/system/collectives) gives that collective on the links,
// which every collective of the simulation shares.
//
// Values: when the last member arrives it moves the data between the members' memories (the others wait on a
// SystemC event, so each member has executed everything before its collective): reductions in fp32, over the
// members in group order, rounded once to the dtype (the hardware's order and precision are not published:
// assumed). A member that finishes without arriving, or arrives with another collective, is an IsaError.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <systemc>
#include <vector>

#include "config/hardware_config.h"
#include "isa/core_state.h"
#include "isa/instruction.h"
#include "sim/system/collectives.h"

namespace trnsim::sim {

class CollectiveRendezvous {
 public:
  // `cores`: the physical cores this simulation runs (the ranks); `system` / `ranks_per_chip` as in SimOptions.
  CollectiveRendezvous(const HardwareConfig& config, std::vector<uint32_t> cores, const std::string& system,
                       uint32_t ranks_per_chip);

  struct Meeting {
    double start_ns = 0, end_ns = 0;
  };
  // Core `core` reaches collective `inst` at `arrival_ns`; blocks until every member has; returns the meeting.
  // `state` is the core's memory (nullptr when timing-only: then no values move).
  Meeting meet(uint32_t core, const isa::Instruction& inst, double arrival_ns, isa::CoreState* state);
  // Core `core` has no more instructions (or stopped on an error): members waiting for it stop waiting.
  void finished(uint32_t core);

 private:
  struct Arrival {
    uint32_t core;
    const isa::Instruction* inst;
    isa::CoreState* state;
    double time_ns;
  };
  struct Gathering {
    std::vector<int64_t> members;
    std::vector<Arrival> arrivals;
    bool done = false;
    Meeting meeting;
  };
  std::vector<int64_t> members_of(uint32_t core, const isa::Instruction& inst) const;  // its rank-list
  void exchange(const Gathering& g) const;  // values
  Meeting time(const Gathering& g);

  const HardwareConfig& m_config;
  std::vector<uint32_t> m_cores;
  std::vector<bool> m_finished;
  std::string m_system;
  uint32_t m_ranks_per_chip;
  std::unique_ptr<CollectiveSimulator> m_links;  // made at the first collective
  // (members, ordinal) -> the gathering; per core and members, how many it has joined.
  std::map<std::pair<std::vector<int64_t>, size_t>, Gathering> m_gatherings;
  std::map<std::pair<uint32_t, std::vector<int64_t>>, size_t> m_joined;
  sc_core::sc_event m_changed;
};

}  // namespace trnsim::sim
