// The meeting point of ISA core_barrier (NKI nisa.core_barrier): the physical cores of one chip that share an HBM
// stack wait for each other. Each core's k-th core_barrier meets the k-th of every core it lists; the meeting is
// at the latest of their arrival times, and each core's engine issues its barrier then.
//
// Loosely timed cores run ahead of each other (sim/core/neuron_core.h), so a core that arrives first in host order
// waits for the SystemC event the others post when they arrive or finish; values stay in program order across the
// cores: every instruction a core executed before its barrier has run before any core passes the meeting.
#pragma once

#include <cstdint>
#include <string>
#include <systemc>
#include <vector>

namespace trnsim::sim {

class CoreBarrier {
 public:
  // `cores`: the physical cores this simulation runs.
  explicit CoreBarrier(std::vector<uint32_t> cores);

  // Core `core` reaches its next core_barrier at `arrival_ns`, meeting the cores `members` (it among them). Blocks
  // the calling SystemC thread until every member has arrived at a barrier of the same ordinal; returns the meeting
  // time. IsaError when a member is not simulated, lists other members, or finishes without arriving.
  double meet(uint32_t core, const std::vector<int64_t>& members, double arrival_ns);
  // Core `core` has no more instructions (or stopped on an error): cores waiting for it stop waiting.
  void finished(uint32_t core);

 private:
  struct Arrival {
    double time_ns;
    std::vector<int64_t> members;
  };
  size_t slot_of(uint32_t core) const;  // index into m_cores, or npos

  std::vector<uint32_t> m_cores;
  std::vector<std::vector<Arrival>> m_arrivals;  // per core of m_cores, in ordinal order
  std::vector<bool> m_finished;
  sc_core::sc_event m_changed;
};

}  // namespace trnsim::sim
