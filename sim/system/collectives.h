// Collectives across the chips of a system, timed on its links (sim/system/topology): each collective is a
// sequence of steps, every rank sending its part of a step to its peers once it has finished the previous step
// (its sends out and its receives in) and paid the step's fixed cost (collectives.step_latency_ns). A transfer
// waits for a free CC-core of its chip (chip.collective_cores), books its bytes on every link of its route (links
// are shared: concurrent transfers, and collectives run on the same simulator, contend), and arrives after the
// route's latency. Ranks on one chip exchange through the chip's HBM (a copy reads and writes it: half the
// chip's HBM bandwidth, assumed).
//
// Algorithms (collectives.md §2), chosen by size as Neuron's runtime does unless one is asked for:
//   mesh       every rank sends to every peer directly, one step per phase (<= collectives.mesh_max_bytes);
//   recursive  recursive halving (reduce-scatter) / doubling (all-gather), log2(n) steps, n a power of two
//              (<= collectives.recursive_max_bytes);
//   ring       n - 1 steps of S / n around the ranks (larger messages; the fallback where recursive needs a
//              power of two); on a torus the data is split over both directions of the topology's ring (one
//              Hamiltonian cycle both ways: half the links of a 2-D torus, where KangaRing uses all);
//   kangaring  (above recursive; trn2 and later) the ranks of a chip act as one ring position: they reduce-scatter
//              among themselves on the chip, rank j of every chip runs a ring over the chips for its 1 / k of the
//              data (on every link-disjoint Hamiltonian cycle of the torus, both ways: all of a 2-D torus's links),
//              and each arriving all-gather chunk is written to all k ranks of the chip from one read (DMA
//              duplication; the extra writes go through the chip's HBM). O(chips) steps, not O(ranks).
//   hierarchical (all-reduce on a system of more than one tier: a switched fabric of two levels or more, or tori
//              joined by switch levels such as servers over EFA): reduce-scatter inside each innermost group
//              (first-level switch or torus; a torus's ring parts on all its disjoint cycles both ways, as
//              KangaRing's intra-node stage), all-reduce of the group's share across groups, all-gather inside the
//              group, each part by size.
// Broadcast and reduce (torch.distributed's rooted collectives): small messages go straight between the root and
// every peer (mesh); larger ones as scatter + all-gather (broadcast) and reduce-scatter + gather (reduce), the
// bandwidth-optimal forms (van de Geijn; the all-gather / reduce-scatter part by size as above, as a ring where the
// runtime would pick KangaRing). Neuron does not document its own; assumed.
// A reducing step's transfer (the receiver adds what arrives into its own data) moves at most
// core.dma.read_add_write_efficiency of its links' rate: before v4 the DMA's read-add-write runs through the
// collective compute engines at 50 % of copy throughput, on v4 at the full rate (A-V4; that the reduction streams
// with the transfer is assumed). KangaRing's pairing is generalised to all k ranks of a chip (the doc pairs the two
// of a trn1 chip; a trn2 chip at LNC = 2 has four), assumed.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/enum_names.h"
#include "config/hardware_config.h"
#include "sim/base/bandwidth_calendar.h"
#include "sim/system/topology.h"

namespace trnsim::sim {

enum class CollectiveOp : uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,
  permute,
  send_recv,
  broadcast,
  reduce
};
enum class CollectiveAlgorithm : uint8_t { automatic, mesh, recursive, ring, kangaring, hierarchical };
}  // namespace trnsim::sim

namespace trnsim {
template <>
struct EnumNames<sim::CollectiveOp> {
  static constexpr std::array<std::string_view, 8> names = {"all_reduce", "all_gather", "reduce_scatter",
                                                            "all_to_all", "permute",    "send_recv",
                                                            "broadcast",  "reduce"};
};
template <>
struct EnumNames<sim::CollectiveAlgorithm> {
  static constexpr std::array<std::string_view, 6> names = {"auto", "mesh", "recursive", "ring", "kangaring",
                                                            "hierarchical"};
};
}  // namespace trnsim

namespace trnsim::sim {

const char* collective_op_name(CollectiveOp op);
const char* collective_algorithm_name(CollectiveAlgorithm algorithm);
CollectiveOp parse_collective_op(const std::string& name);                 // std::invalid_argument listing the names
CollectiveAlgorithm parse_collective_algorithm(const std::string& name);   // "auto" is automatic
// nccl-tests / nccom-test busbw factor for r ranks: all-reduce 2(r-1)/r; all-gather, reduce-scatter, all-to-all
// (r-1)/r; permute, send/recv, broadcast and reduce 1 (collectives.md §1; nccl-tests PERFORMANCE.md).
double bus_bandwidth_factor(CollectiveOp op, uint32_t ranks);

struct CollectiveRequest {
  CollectiveOp op = CollectiveOp::all_reduce;
  // nccl-tests' size: the all-reduce buffer, all-gather's output, reduce-scatter's input, all-to-all's buffer
  // per rank, what each rank sends in a permute / send-recv.
  uint64_t bytes = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::automatic;
  std::vector<uint32_t> ranks;  // the group, in ring order (empty: every rank of the system)
  std::vector<int64_t> pairs;   // permute: source, target, source, target, ... ranks (empty: each to the next)
  int64_t root = -1;            // broadcast / reduce: the root rank (-1: the group's first); other ops take none
  double start_ns = 0;          // when every member is ready
};

struct CollectiveTiming {
  double latency_ns = 0;  // start to the last rank's completion
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  uint32_t ranks = 0;
  uint64_t steps = 0;      // steps on the critical path (all parts)
  uint64_t transfers = 0;  // rank-to-rank transfers booked
  double algbw_gbps = 0;   // bytes / latency (1e9 bytes per second)
  double busbw_gbps = 0;   // algbw x the bus factor
  // The link (or a chip's on-chip path through HBM) that carried the most of this collective's bytes, and the
  // share of its capacity over the collective's latency those bytes took (0..1).
  std::string busiest_link;
  double busiest_link_bytes = 0;
  double busiest_link_utilisation = 0;
  // Every link (and chip's on-chip path) this collective used, with the bytes it put there, in link order: what a
  // trace draws as per-link traffic over the collective's span.
  std::vector<std::pair<std::string, double>> link_bytes;
};

class CollectiveSimulator {
 public:
  // `ranks_per_chip` ranks on each chip (logical cores), ranks numbered chip by chip.
  CollectiveSimulator(const HardwareConfig& config, const std::string& system, uint32_t ranks_per_chip = 1);

  uint32_t ranks() const { return m_ranks_per_chip * m_topology.chips(); }
  const SystemTopology& topology() const { return m_topology; }
  // Runs one collective; links and CC-cores stay booked, so later calls contend with it.
  CollectiveTiming run(const CollectiveRequest& request);
  // The algorithm `run` takes for this op, size and group size when asked for `automatic`.
  CollectiveAlgorithm choose(CollectiveOp op, uint64_t bytes, uint32_t group_size) const;

 private:
  struct Transfer {
    uint32_t from, to;  // positions in the group
    double bytes;
    bool reduces = false;  // the receiver adds the bytes into its own (a reduce-scatter step)
    uint32_t copies = 1;   // ranks of the receiving chip written from one read (KangaRing's DMA duplication)
  };
  using Step = std::vector<Transfer>;
  // `rings`: for each ring the successor of every position (a ring pass splits its data over them).
  std::vector<Step> plan(CollectiveOp op, CollectiveAlgorithm algorithm, double bytes, uint32_t n,
                         const std::vector<std::vector<uint32_t>>& rings, uint32_t root = 0) const;
  // The rings among `members`: on a torus both directions of the first `cycles` of the topology's ring orders,
  // through the chips the members use (when `topology_rings` and the members are whole chips, as many ranks on
  // each), or of the group's own order; elsewhere the group's order one way.
  std::vector<std::vector<uint32_t>> rings_of(const std::vector<uint32_t>& members, bool topology_rings,
                                              size_t cycles = 1) const;
  // KangaRing over every rank (see the top of this file); returns the steps on the critical path.
  uint64_t run_kangaring(CollectiveOp op, double bytes, std::vector<double>& ready, CollectiveTiming& timing);
  // Runs steps among `members` (ranks) from their ready times; returns the count of transfers.
  uint64_t run_steps(const std::vector<Step>& steps, const std::vector<uint32_t>& members, std::vector<double>& ready);
  // One rank-to-rank transfer that may start at `start_ns`: its arrival.
  double transfer(uint32_t from_rank, uint32_t to_rank, double bytes, double start_ns, bool reduces,
                  uint32_t copies = 1);

  const HardwareConfig& m_config;
  SystemTopology m_topology;
  uint32_t m_ranks_per_chip;
  std::vector<std::unique_ptr<BandwidthCalendar>> m_links;  // one per topology link
  std::vector<std::unique_ptr<BandwidthCalendar>> m_local;  // per chip: rank-to-rank on one chip
  std::vector<std::vector<double>> m_cc_core_free_ns;       // per chip, per CC-core
  // Bytes the current run put on each link (then each chip's local path), for CollectiveTiming::busiest_link.
  std::vector<double> m_run_bytes;
};

}  // namespace trnsim::sim
