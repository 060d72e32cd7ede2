// Multi-chip systems (sim/system): topologies from the config and collectives timed on their links, checked against
// times worked out by hand from the link rates, the step and hop latencies (no contention in the cases with closed
// forms), and the runtime's choice of algorithm by size (collectives.md §2).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "config/config_loader.h"
#include "sim/system/collectives.h"
#include "sim/system/topology.h"

namespace trnsim::sim {
namespace {

HardwareConfig trn(const char* name) { return load_config(name).hardware; }

SystemConfig torus(std::vector<uint32_t> dims, std::vector<double> bandwidth) {
  SystemConfig s;
  s.topology = Topology::torus;
  s.chips = 1;
  for (uint32_t d : dims) s.chips *= d;
  s.torus_dimensions = std::move(dims);
  s.bandwidth_per_chip_gbps_by_dimension = std::move(bandwidth);
  return s;
}

SystemConfig switched(std::vector<std::pair<uint32_t, double>> levels, std::vector<double> latency) {
  SystemConfig s;
  s.topology = Topology::switched;
  s.chips = 1;
  for (size_t i = 0; i < levels.size(); ++i) {
    SwitchLevelConfig level;
    level.chips_per_group = levels[i].first;
    level.bandwidth_per_chip_gbps = levels[i].second;
    level.latency_ns = latency[i];
    s.switch_levels.push_back(level);
    s.chips *= level.chips_per_group;
  }
  return s;
}

CollectiveTiming run(const HardwareConfig& hw, const std::string& system, CollectiveOp op, uint64_t bytes,
                     CollectiveAlgorithm algorithm = CollectiveAlgorithm::automatic) {
  CollectiveSimulator simulator(hw, system);
  CollectiveRequest request;
  request.op = op;
  request.bytes = bytes;
  request.algorithm = algorithm;
  return simulator.run(request);
}

TEST(SystemTopology, TorusRoutesTakeTheShorterWayAndTheSnakeRingStepsOneHop) {
  HardwareConfig hw = trn("trn2");
  SystemTopology t(hw, "trn2-48xlarge");
  ASSERT_EQ(t.chips(), 16u);
  EXPECT_EQ(t.links().size(), 16u * 4);  // 4 neighbours per chip
  for (const SystemLink& link : t.links()) EXPECT_DOUBLE_EQ(link.bytes_per_ns, 512.0 / 2);
  size_t longest = 0;
  for (uint32_t a = 0; a < 16; ++a) {
    for (uint32_t b = 0; b < 16; ++b) {
      // Hops = the ring distance along each dimension (4-rings: at most 2 each way).
      const uint32_t dx = std::min((a % 4 + 4 - b % 4) % 4, (b % 4 + 4 - a % 4) % 4);
      const uint32_t dy = std::min((a / 4 + 4 - b / 4) % 4, (b / 4 + 4 - a / 4) % 4);
      ASSERT_EQ(t.route(a, b).size(), dx + dy) << a << " -> " << b;
      EXPECT_DOUBLE_EQ(t.route_latency_ns(a, b), (dx + dy) * hw.neuronlink.latency_ns);
      longest = std::max(longest, t.route(a, b).size());
      uint32_t chip = a;
      for (uint32_t link : t.route(a, b)) {
        ASSERT_EQ(t.links()[link].from_chip, chip);
        chip = t.links()[link].to_chip;
      }
      EXPECT_EQ(chip, b);
    }
  }
  EXPECT_EQ(longest, 4u);
  const std::vector<uint32_t>& ring = t.ring_order();
  ASSERT_EQ(std::set<uint32_t>(ring.begin(), ring.end()).size(), 16u);
  for (size_t i = 0; i < ring.size(); ++i) EXPECT_EQ(t.route(ring[i], ring[(i + 1) % ring.size()]).size(), 1u) << i;
}

// collectives.md §2: the 16-chip 2-D torus has two Hamiltonian cycles that share no link; both ways round both,
// every one of the 64 links carries exactly one ring.
TEST(SystemTopology, TheTwoDTorusHasTwoLinkDisjointHamiltonianCycles) {
  HardwareConfig hw = trn("trn2");
  SystemTopology t(hw, "trn2-48xlarge");
  ASSERT_EQ(t.ring_orders().size(), 2u);
  std::multiset<uint32_t> used;
  for (const std::vector<uint32_t>& cycle : t.ring_orders()) {
    ASSERT_EQ(std::set<uint32_t>(cycle.begin(), cycle.end()).size(), 16u);
    for (size_t i = 0; i < cycle.size(); ++i) {
      const uint32_t a = cycle[i], b = cycle[(i + 1) % cycle.size()];
      ASSERT_EQ(t.route(a, b).size(), 1u) << a << " -> " << b;
      used.insert(t.route(a, b)[0]);
      used.insert(t.route(b, a)[0]);
    }
  }
  EXPECT_EQ(used.size(), t.links().size());
  EXPECT_EQ(std::set<uint32_t>(used.begin(), used.end()).size(), t.links().size());
  // The snake (the order of the whole system's ranks) stays the first ring order's alternative, not one of them.
  EXPECT_EQ(t.ring_order().size(), 16u);
  // Other sizes: a 3 x 5 torus too; a 3-D torus keeps its one snake.
  EXPECT_EQ(SystemTopology::disjoint_hamiltonian_cycles(3, 5).size(), 2u);
  EXPECT_EQ(SystemTopology(hw, "trn2-ultraserver").ring_orders().size(), 1u);
}

// Two servers, each a 4 x 4 torus, joined by EFA: a chip reaches the other server through its own EFA port up and
// the receiver's port down, at the EFA latency; inside a server the torus routes are unchanged.
TEST(SystemTopology, ToriJoinedByEfaRouteThroughTheChipsPorts) {
  HardwareConfig hw = trn("trn2");
  SystemTopology two(hw, "trn2-48xlarge-x2"), one(hw, "trn2-48xlarge");
  const SwitchLevelConfig& efa = hw.systems.at("trn2-48xlarge-x2").switch_levels.at(0);
  ASSERT_EQ(two.chips(), 32u);
  EXPECT_EQ(two.links().size(), 32u * 4 + 32u * 2);
  EXPECT_EQ(two.inner_group_chips(), 16u);
  for (uint32_t a : {0u, 5u, 17u}) {
    for (uint32_t b : {3u, 16u, 30u}) {
      const bool across = a / 16 != b / 16;
      if (!across) {
        EXPECT_EQ(two.route(a, b).size(), one.route(a % 16, b % 16).size());
        EXPECT_DOUBLE_EQ(two.route_latency_ns(a, b), one.route_latency_ns(a % 16, b % 16));
        continue;
      }
      ASSERT_EQ(two.route(a, b).size(), 2u);
      const SystemLink& up = two.links()[two.route(a, b)[0]];
      const SystemLink& down = two.links()[two.route(a, b)[1]];
      EXPECT_EQ(up.from_chip, a);
      EXPECT_EQ(down.to_chip, b);
      EXPECT_DOUBLE_EQ(up.bytes_per_ns, efa.bandwidth_per_chip_gbps);
      EXPECT_DOUBLE_EQ(two.route_latency_ns(a, b), efa.latency_ns);
    }
  }
  // The rings run round one server's torus, then the other's.
  for (uint32_t i = 0; i < 16; ++i) EXPECT_LT(two.ring_order()[i], 16u);
  // Validation counts the tori: 16 chips per torus x 2 servers.
  try {
    load_config("trn2", {"systems.trn2-48xlarge-x2.chips=16"});
    ADD_FAILURE() << "16 chips for two 4 x 4 tori was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("times 2 tori"), std::string::npos) << e.what();
  }
}

TEST(SystemTopology, SwitchedRoutesClimbToTheFirstSharedLevel) {
  HardwareConfig hw = trn("trn3");
  SystemTopology t(hw, "trn3-ultraserver-gen2");
  ASSERT_EQ(t.chips(), 144u);
  const auto& levels = hw.systems.at("trn3-ultraserver-gen2").switch_levels;
  // Chips 0 and 3 share a first-level switch; 0 and 4 meet at the second level.
  EXPECT_EQ(t.route(0, 3).size(), 2u);
  EXPECT_DOUBLE_EQ(t.route_latency_ns(0, 3), levels[0].latency_ns);
  EXPECT_EQ(t.route(0, 4).size(), 4u);
  EXPECT_DOUBLE_EQ(t.route_latency_ns(0, 4), levels[1].latency_ns + 2 * levels[0].latency_ns);
  EXPECT_THROW(SystemTopology(hw, "no-such-system"), std::invalid_argument);
}

// A ring all-reduce on a ring of 8 chips: 2 (n - 1) steps; in each, every chip sends half its chunk of S / n one hop
// each way round, on links nobody else uses.
TEST(Collectives, RingAllReduceIsTwoPassesOfStepsOfOneChunk) {
  HardwareConfig hw = trn("trn2");
  hw.systems["ring8"] = torus({8}, {200});
  const double link = 200.0 / 2, bytes = 64.0 * (1 << 20), chunk = bytes / 8;
  const double step = hw.collectives.step_latency_ns + chunk / 2 / link + hw.neuronlink.latency_ns;
  // The reduce-scatter half adds what arrives: at read_add_write_efficiency of the link's rate (0.5 on trn2).
  const double efficiency = hw.core.dma.read_add_write_efficiency;
  ASSERT_DOUBLE_EQ(efficiency, 0.5);
  const double reduce_step = hw.collectives.step_latency_ns + chunk / 2 / (efficiency * link) + hw.neuronlink.latency_ns;
  const CollectiveTiming t = run(hw, "ring8", CollectiveOp::all_reduce, uint64_t(bytes), CollectiveAlgorithm::ring);
  EXPECT_EQ(t.steps, 14u);
  EXPECT_EQ(t.transfers, 14u * 8 * 2);
  EXPECT_NEAR(t.latency_ns, 7 * reduce_step + 7 * step, 1e-6 * t.latency_ns);
  EXPECT_NEAR(run(hw, "ring8", CollectiveOp::reduce_scatter, uint64_t(bytes), CollectiveAlgorithm::ring).latency_ns,
              7 * reduce_step, 1e-6 * t.latency_ns);
  EXPECT_NEAR(t.busbw_gbps, bytes / t.latency_ns * 2 * 7 / 8, 1e-9);
  // All-gather and reduce-scatter are one pass each.
  EXPECT_NEAR(run(hw, "ring8", CollectiveOp::all_gather, uint64_t(bytes), CollectiveAlgorithm::ring).latency_ns,
              7 * step, 1e-6 * t.latency_ns);
}

// A mesh all-gather on one switch: every chip sends S / n to each of its n - 1 peers at once, so its port (and
// every receiver's) carries (n - 1) S / n.
TEST(Collectives, MeshAllGatherIsBoundByEachChipsPort) {
  HardwareConfig hw = trn("trn3");
  hw.systems["switch8"] = switched({{8, 400}}, {700});
  const double bytes = 1 << 20, chunk = bytes / 8;
  const CollectiveTiming t = run(hw, "switch8", CollectiveOp::all_gather, uint64_t(bytes), CollectiveAlgorithm::mesh);
  EXPECT_EQ(t.steps, 1u);
  EXPECT_NEAR(t.latency_ns, hw.collectives.step_latency_ns + 7 * chunk / 400 + 700, 1e-6);
  // Through one port the CC-cores do not matter (the port serialises the bytes either way)...
  HardwareConfig few = hw;
  few.chip.collective_cores = 1;
  EXPECT_NEAR(run(few, "switch8", CollectiveOp::all_gather, uint64_t(bytes), CollectiveAlgorithm::mesh).latency_ns,
              t.latency_ns, 1e-6);
  // ...but on a torus a chip with one CC-core drives one of its four links at a time.
  HardwareConfig torus16 = trn("trn2"), one_core = torus16;
  one_core.chip.collective_cores = 1;
  const double many = run(torus16, "trn2-48xlarge", CollectiveOp::all_gather, 16 << 20, CollectiveAlgorithm::mesh).latency_ns;
  EXPECT_GT(run(one_core, "trn2-48xlarge", CollectiveOp::all_gather, 16 << 20, CollectiveAlgorithm::mesh).latency_ns,
            1.5 * many);
}

// Broadcast on a switch of 8: a small message goes from the root to each peer at once (the root's port carries
// 7 copies); a large one is scattered (7 pieces of S / 8 through the root's port) and then all-gathered round the
// ring (7 steps of S / 8): 7 S / 8 through each port twice instead of 7 S through the root's. Reduce is its mirror:
// reduce-scatter (adding, at read_add_write_efficiency) then the gather of S / 8 pieces into the root.
TEST(Collectives, BroadcastAndReduceScatterThroughTheRingWhenLarge) {
  HardwareConfig hw = trn("trn3");
  hw.systems["switch8"] = switched({{8, 400}}, {700});
  const double step = hw.collectives.step_latency_ns, hop = 700, port = 400;
  auto timed = [&](CollectiveOp op, double bytes, int64_t root) {
    CollectiveSimulator s(hw, "switch8");
    CollectiveRequest request;
    request.op = op;
    request.bytes = uint64_t(bytes);
    request.root = root;
    return s.run(request);
  };
  const double small = 64 << 10;
  const CollectiveTiming direct = timed(CollectiveOp::broadcast, small, 3);
  EXPECT_EQ(direct.algorithm, CollectiveAlgorithm::mesh);
  EXPECT_EQ(direct.steps, 1u);
  EXPECT_NEAR(direct.latency_ns, step + 7 * small / port + hop, 1e-6);
  EXPECT_NEAR(timed(CollectiveOp::reduce, small, 0).latency_ns,
              step + 7 * small / (hw.core.dma.read_add_write_efficiency * port) + hop, 1e-6);
  // Large (above recursive_max_bytes; 8 ranks: a ring, one way round a switch's chip order).
  const double big = 256.0 * (1 << 20), piece = big / 8;
  ASSERT_GT(big, double(hw.collectives.recursive_max_bytes));
  const CollectiveTiming b = timed(CollectiveOp::broadcast, big, 0);
  EXPECT_EQ(b.algorithm, CollectiveAlgorithm::ring);
  EXPECT_EQ(b.steps, 1u + 7u);
  EXPECT_NEAR(b.latency_ns, (step + 7 * piece / port + hop) + 7 * (step + piece / port + hop), 1e-6 * b.latency_ns);
  EXPECT_NEAR(b.busbw_gbps, big / b.latency_ns, 1e-9);  // factor 1
  const double eff = hw.core.dma.read_add_write_efficiency;
  ASSERT_DOUBLE_EQ(eff, 1.0);  // trn3: the DMA adds at the copy rate (A-V4)
  const CollectiveTiming r = timed(CollectiveOp::reduce, big, 5);
  EXPECT_EQ(r.steps, 7u + 1u);
  EXPECT_NEAR(r.latency_ns, 7 * (step + piece / port + hop) + (step + 7 * piece / port + hop), 1e-6 * r.latency_ns);
  // A root outside the group is an error naming it.
  CollectiveSimulator s(hw, "switch8");
  CollectiveRequest outside;
  outside.op = CollectiveOp::broadcast;
  outside.bytes = 1024;
  outside.ranks = {0, 1};
  outside.root = 5;
  EXPECT_THROW(s.run(outside), std::invalid_argument);
}

// Recursive halving then doubling on a switch of 16 chips: log2(16) = 4 steps each way, S / 2, S / 4, ... out and
// back, one transfer per port per step.
TEST(Collectives, RecursiveAllReduceHalvesThenDoubles) {
  HardwareConfig hw = trn("trn3");
  hw.systems["switch16"] = switched({{16, 250}}, {400});
  const double bytes = 16.0 * (1 << 20);
  double expected = 0;
  for (double share : {1.0 / 2, 1.0 / 4, 1.0 / 8, 1.0 / 16, 1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2}) {
    expected += hw.collectives.step_latency_ns + bytes * share / 250 + 400;
  }
  const CollectiveTiming t =
      run(hw, "switch16", CollectiveOp::all_reduce, uint64_t(bytes), CollectiveAlgorithm::recursive);
  EXPECT_EQ(t.steps, 8u);
  EXPECT_NEAR(t.latency_ns, expected, 1e-6 * expected);
  // Not a power of two: the ring instead.
  hw.systems["switch12"] = switched({{12, 250}}, {400});
  EXPECT_EQ(run(hw, "switch12", CollectiveOp::all_reduce, uint64_t(bytes), CollectiveAlgorithm::recursive).algorithm,
            CollectiveAlgorithm::ring);
}

// A 1 GiB all-reduce over the whole 4 x 4 torus, and its time by hand when each step splits S / 16 over `rings`
// rings that never share a link: 15 reduce-scatter steps (adding at read_add_write_efficiency) and 15 all-gather
// steps, each one hop.
std::pair<CollectiveTiming, double> torus_all_reduce(const HardwareConfig& hw, CollectiveAlgorithm algorithm,
                                                     double rings) {
  CollectiveSimulator whole(hw, "trn2-48xlarge");
  CollectiveRequest request;
  request.op = CollectiveOp::all_reduce;
  request.bytes = uint64_t(1) << 30;
  request.algorithm = algorithm;
  const double link = hw.systems.at("trn2-48xlarge").bandwidth_per_chip_gbps_by_dimension[0] / 2;
  const double fixed = hw.collectives.step_latency_ns + hw.neuronlink.latency_ns,
               share = double(request.bytes) / 16 / rings;
  return {whole.run(request), 15 * (fixed + share / (hw.core.dma.read_add_write_efficiency * link)) +
                                  15 * (fixed + share / link)};
}

// On the 4 x 4 torus the ring pass runs both ways round the snake: two of a chip's four links at once.
TEST(Collectives, TheTorusRingRunsBothWaysRoundTheSnake) {
  const auto [t, expected] = torus_all_reduce(trn("trn2"), CollectiveAlgorithm::ring, 2);
  EXPECT_EQ(t.transfers, 30u * 16 * 2);
  EXPECT_NEAR(t.latency_ns, expected, 1e-6 * t.latency_ns);
}

// KangaRing with one rank per chip: a ring pass over both link-disjoint cycles, both ways, a quarter of each chunk
// on each, every link used by one ring (the flat ring above uses half the links for half chunks).
TEST(Collectives, KangaRingRunsOnBothCyclesBothWays) {
  HardwareConfig hw = trn("trn2");
  const auto [t, expected] = torus_all_reduce(hw, CollectiveAlgorithm::kangaring, 4);
  EXPECT_EQ(t.algorithm, CollectiveAlgorithm::kangaring);
  EXPECT_EQ(t.steps, 30u);
  EXPECT_EQ(t.transfers, 30u * 16 * 4);
  EXPECT_NEAR(t.latency_ns, expected, 1e-6 * t.latency_ns);
  // A group smaller than the system runs the flat ring instead.
  CollectiveRequest request;
  request.op = CollectiveOp::all_reduce;
  request.bytes = uint64_t(1) << 30;
  request.algorithm = CollectiveAlgorithm::kangaring;
  request.ranks = {0, 1, 2, 3};
  EXPECT_EQ(CollectiveSimulator(hw, "trn2-48xlarge").run(request).algorithm, CollectiveAlgorithm::ring);
}

// With four ranks per chip (LNC = 2 on trn2) KangaRing takes the chip as one ring position: one on-chip step, then
// 2 (chips - 1) ring steps, where the flat ring over 64 ranks takes 2 x 63; every gathered chunk is written to the
// chip's four ranks from one read, so each chip's HBM path carries three extra copies of what arrives.
TEST(Collectives, KangaRingTakesAChipsRanksAsOneRingPosition) {
  HardwareConfig hw = trn("trn2");
  const uint64_t bytes = uint64_t(1) << 30;
  auto timed = [&](CollectiveAlgorithm algorithm, CollectiveOp op) {
    CollectiveSimulator s(hw, "trn2-48xlarge", 4);
    CollectiveRequest request;
    request.op = op;
    request.bytes = bytes;
    request.algorithm = algorithm;
    return s.run(request);
  };
  const CollectiveTiming kanga = timed(CollectiveAlgorithm::kangaring, CollectiveOp::all_reduce);
  const CollectiveTiming flat = timed(CollectiveAlgorithm::ring, CollectiveOp::all_reduce);
  EXPECT_EQ(kanga.steps, 1u + 30u);
  EXPECT_EQ(flat.steps, 2u * 63);
  EXPECT_LT(kanga.latency_ns, flat.latency_ns);
  // The on-chip reduce-scatter alone (each rank sends 3 quarters of S to its chip peers, the chip's path at half the
  // HBM rate, adding at read_add_write_efficiency) bounds it from below, plus the ring passes' fixed costs.
  const double local_rate = hw.hbm.bandwidth_gbps / 2 * hw.core.dma.read_add_write_efficiency;
  const double fixed = hw.collectives.step_latency_ns + hw.neuronlink.latency_ns;
  EXPECT_GT(kanga.latency_ns, 4 * 3 * (double(bytes) / 4) / local_rate + 30 * fixed);
  // Reduce-scatter and all-gather: one on-chip step and chips - 1 ring steps each.
  EXPECT_EQ(timed(CollectiveAlgorithm::kangaring, CollectiveOp::reduce_scatter).steps, 1u + 15u);
  EXPECT_EQ(timed(CollectiveAlgorithm::kangaring, CollectiveOp::all_gather).steps, 1u + 15u);
}

// Two servers over EFA: reduce-scatter round each server's torus (on both of its disjoint cycles, both ways, as
// KangaRing's intra-node stage), all-reduce of each chip's sixteenth with its peer in the other server over EFA,
// all-gather round the torus; worked out by hand from the rates and latencies.
TEST(Collectives, HierarchicalAllReduceAcrossServersOverEfa) {
  HardwareConfig hw = trn("trn2");
  CollectiveSimulator s(hw, "trn2-48xlarge-x2");
  const uint64_t bytes = uint64_t(1) << 30;
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, bytes, 32), CollectiveAlgorithm::hierarchical);
  CollectiveRequest request;
  request.op = CollectiveOp::all_reduce;
  request.bytes = bytes;
  const CollectiveTiming t = s.run(request);
  ASSERT_EQ(t.algorithm, CollectiveAlgorithm::hierarchical);
  const SystemConfig& system = hw.systems.at("trn2-48xlarge-x2");
  const double link = system.bandwidth_per_chip_gbps_by_dimension[0] / 2, efa = system.switch_levels[0].bandwidth_per_chip_gbps;
  const double eff = hw.core.dma.read_add_write_efficiency, step = hw.collectives.step_latency_ns;
  const double torus_fixed = step + hw.neuronlink.latency_ns, efa_fixed = step + system.switch_levels[0].latency_ns;
  const double quarter_chunk = double(bytes) / 16 / 4;  // the torus rings: S / 16 per step over 4 disjoint rings
  // Across: 64 MiB between two ranks (above recursive_max_bytes: a ring of two, one step each way of 32 MiB).
  const double share = double(bytes) / 16, across_chunk = share / 2;
  ASSERT_GT(share, double(hw.collectives.recursive_max_bytes));
  const double expected = 15 * (torus_fixed + quarter_chunk / (eff * link)) +
                          (efa_fixed + across_chunk / (eff * efa)) + (efa_fixed + across_chunk / efa) +
                          15 * (torus_fixed + quarter_chunk / link);
  EXPECT_NEAR(t.latency_ns, expected, 1e-6 * expected);
  EXPECT_EQ(t.steps, 15u + 2u + 15u);
}

TEST(Collectives, TheAlgorithmFollowsTheMessageSize) {
  HardwareConfig hw = trn("trn2");
  CollectiveSimulator s(hw, "trn2-48xlarge");
  const CollectivesConfig& c = hw.collectives;
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, c.mesh_max_bytes, 16), CollectiveAlgorithm::mesh);
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, c.mesh_max_bytes + 1, 16), CollectiveAlgorithm::recursive);
  // Above recursive on trn2: KangaRing for the whole system, the flat ring for a smaller group.
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, c.recursive_max_bytes + 1, 16), CollectiveAlgorithm::kangaring);
  EXPECT_EQ(s.choose(CollectiveOp::all_gather, c.recursive_max_bytes + 1, 16), CollectiveAlgorithm::kangaring);
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, c.recursive_max_bytes + 1, 8), CollectiveAlgorithm::ring);
  // trn1's runtime keeps the flat ring (collectives.md §2).
  HardwareConfig trn1 = trn("trn1");
  trn1.systems["trn1-torus"] = torus({4, 4}, {100, 100});
  EXPECT_EQ(CollectiveSimulator(trn1, "trn1-torus").choose(CollectiveOp::all_reduce, c.recursive_max_bytes + 1, 16),
            CollectiveAlgorithm::ring);
  EXPECT_EQ(s.choose(CollectiveOp::all_reduce, c.mesh_max_bytes + 1, 12), CollectiveAlgorithm::ring);
  EXPECT_EQ(s.choose(CollectiveOp::all_to_all, uint64_t(1) << 30, 16), CollectiveAlgorithm::mesh);
  // Two switch levels: reduce-scatter in the server, all-reduce across servers, all-gather in the server.
  HardwareConfig trn3 = trn("trn3");
  CollectiveSimulator big(trn3, "trn3-ultraserver-gen2");
  EXPECT_EQ(big.choose(CollectiveOp::all_reduce, uint64_t(1) << 30, 144), CollectiveAlgorithm::hierarchical);
  const CollectiveTiming t = run(trn3, "trn3-ultraserver-gen2", CollectiveOp::all_reduce, uint64_t(1) << 30);
  EXPECT_EQ(t.algorithm, CollectiveAlgorithm::hierarchical);
  EXPECT_GT(t.busbw_gbps, 0);
  // busbw can never beat the chip's port: the inner ring of four moves 3/4 of S out of each chip and back.
  EXPECT_LT(t.busbw_gbps, trn3.systems.at("trn3-ultraserver-gen2").switch_levels[0].bandwidth_per_chip_gbps * 2);
}

// A ring all-gather on an 8-chip ring splits its data over both directions: every link carries 7 half-chunks, the
// busiest link's utilisation is those bytes over its rate times the collective's latency.
TEST(Collectives, TheBusiestLinkAndItsUtilisation) {
  HardwareConfig hw = trn("trn2");
  hw.systems["ring8"] = torus({8}, {200});
  const double link = 200.0 / 2, bytes = 64.0 * (1 << 20), chunk = bytes / 8;
  const CollectiveTiming t = run(hw, "ring8", CollectiveOp::all_gather, uint64_t(bytes), CollectiveAlgorithm::ring);
  EXPECT_NE(t.busiest_link.find("->"), std::string::npos) << t.busiest_link;
  EXPECT_DOUBLE_EQ(t.busiest_link_bytes, 7 * chunk / 2);
  EXPECT_NEAR(t.busiest_link_utilisation, 7 * chunk / 2 / (link * t.latency_ns), 1e-12);
  EXPECT_LT(t.busiest_link_utilisation, 1.0);
  // Two ranks of one chip exchange through its HBM.
  CollectiveSimulator one_chip(hw, "single-chip", 4);
  CollectiveRequest request;
  request.op = CollectiveOp::send_recv;
  request.bytes = 1 << 20;
  request.ranks = {0, 1};
  request.pairs = {0, 1};
  const CollectiveTiming local = one_chip.run(request);
  EXPECT_EQ(local.busiest_link, "chip0 HBM (on-chip)");
  EXPECT_DOUBLE_EQ(local.busiest_link_bytes, double(1 << 20));
}

TEST(Collectives, ConcurrentCollectivesShareTheLinks) {
  HardwareConfig hw = trn("trn2");
  CollectiveSimulator s(hw, "trn2-48xlarge");
  CollectiveRequest request;
  request.op = CollectiveOp::all_reduce;
  request.bytes = uint64_t(256) << 20;
  request.algorithm = CollectiveAlgorithm::ring;
  const double alone = s.run(request).latency_ns;
  const double second = s.run(request).latency_ns;  // the same links, booked by the first from time 0
  EXPECT_GT(second, 1.5 * alone);
}

TEST(Collectives, AGroupNamesEachRankOfTheSystemOnce) {
  HardwareConfig hw = trn("trn2");
  CollectiveSimulator s(hw, "trn2-48xlarge");
  CollectiveRequest request;
  request.bytes = 1 << 20;
  request.ranks = {0, 3, 0};
  EXPECT_THROW(s.run(request), std::invalid_argument);
  request.ranks = {0, 16};
  EXPECT_THROW(s.run(request), std::invalid_argument);
}

TEST(Collectives, NamesAndFactors) {
  EXPECT_EQ(parse_collective_op("reduce_scatter"), CollectiveOp::reduce_scatter);
  EXPECT_THROW(parse_collective_op("allreduce"), std::invalid_argument);
  EXPECT_EQ(parse_collective_algorithm("auto"), CollectiveAlgorithm::automatic);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::all_reduce, 16), 2.0 * 15 / 16);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::all_gather, 16), 15.0 / 16);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::permute, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::broadcast, 16), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor(CollectiveOp::reduce, 16), 1.0);
  EXPECT_EQ(parse_collective_algorithm("kangaring"), CollectiveAlgorithm::kangaring);
  EXPECT_EQ(parse_collective_op("broadcast"), CollectiveOp::broadcast);
}

}  // namespace
}  // namespace trnsim::sim
