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
#include <functional>
#include <map>
#include <tuple>
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
  // `cores_share_chip`: the cores are one chip's, sharing its HBM (an LNC launch), not ranks of a system.
  CollectiveRendezvous(const HardwareConfig& config, std::vector<uint32_t> cores, const std::string& system,
                       uint32_t ranks_per_chip, bool cores_share_chip = false);

  struct Meeting {
    double start_ns = 0, end_ns = 0;
  };
  // Core `core` reaches collective `inst` at `arrival_ns`; blocks until every member has; returns the meeting.
  // `state` is the core's memory (nullptr when timing-only: then no values move).
  Meeting meet(uint32_t core, const isa::Instruction& inst, double arrival_ns, isa::CoreState* state);
  // Core `core` reaches sendrecv `inst` at `arrival_ns` (isa/instructions.def; its ranks are positions among the
  // simulation's cores). Its send starts once the rank it sends to has reached the matching sendrecv (start_ns);
  // the meeting ends when that send and this core's receive are both done (end_ns). On one chip
  // (`cores_share_chip`) `time_send_on_chip(start_ns)` gives the send's end (the caller's DMA or GpSimd books it);
  // across the ranks of a system the links time it. `state`: the core's memory (src read at arrival, dst written
  // from the peer's src), nullptr when timing-only.
  Meeting sendrecv(uint32_t core, const isa::Instruction& inst, double arrival_ns, isa::CoreState* state,
                   const std::function<double(double start_ns)>& time_send_on_chip);
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
  // One sendrecv transfer, from the sender's arrival until the receiver has taken it.
  struct Message {
    bool sent = false, received = false;
    double sender_arrival_ns = 0, receiver_arrival_ns = 0;
    double done_ns = -1;  // the transfer's end, once the sender has timed it
    std::vector<float> values;  // the sender's src (values mode)
    uint32_t partitions = 0;
    uint64_t free_elements = 0;
    DType dtype = DType::fp32;
  };
  using Channel = std::tuple<size_t, size_t, int64_t>;  // sender position, receiver position, pipe
  size_t position_of(uint32_t core) const;
  uint32_t links_ranks_per_chip() const;  // the system model's ranks per chip
  void wait_for(size_t position, const std::function<bool()>& ready, const std::string& what);
  std::vector<int64_t> members_of(uint32_t core, const isa::Instruction& inst) const;  // its rank-list
  void exchange(const Gathering& g) const;  // values
  // all_to_all_v / all_gather_v: chunks by each member's metadata (members and their src in group order).
  void exchange_variable(const std::vector<const Arrival*>& in_order,
                         const std::vector<std::vector<float>>& sources) const;
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
  bool m_cores_share_chip;
  // sendrecv: per channel, its messages by ordinal (std::map: waiting cores keep references), and how many each
  // side has posted.
  std::map<Channel, std::map<size_t, Message>> m_messages;
  std::map<Channel, size_t> m_sent, m_received;
  sc_core::sc_event m_changed;
};

}  // namespace trnsim::sim
