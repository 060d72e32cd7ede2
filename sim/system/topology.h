// The chips of a multi-chip system and the directed links between them, built from one of the config's
// `systems` (HardwareConfig::systems): a torus of NeuronLinks (each chip linked to its two neighbours along every
// dimension, wrapping around) or a switched fabric (each chip has a port into every switch level it crosses). A
// torus system may hold several tori joined by switch levels (servers over EFA): each chip then also has a port
// into every level. A route is the list of links a chip-to-chip transfer crosses; transfers on one link share its
// bandwidth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/hardware_config.h"

namespace trnsim::sim {

struct SystemLink {
  uint32_t from_chip = 0, to_chip = 0;  // a switch port has from == to == the chip it serves
  double bytes_per_ns = 0;              // one direction
  std::string name;                     // "chip3 -> chip7 (dim 1)", "chip3 up L1"
};

class SystemTopology {
 public:
  // The system `name` of `config` (std::invalid_argument naming the systems there are when it is not one).
  SystemTopology(const HardwareConfig& config, const std::string& name);

  const std::string& name() const { return m_name; }
  Topology kind() const { return m_kind; }
  uint32_t chips() const { return m_chips; }
  const std::vector<SystemLink>& links() const { return m_links; }
  // The links from chip `from` to chip `to` in order (empty when from == to). Torus: dimension by dimension,
  // the shorter way round each ring (the positive way on a tie). Switched: up through the levels to the first one
  // whose group holds both chips, then down.
  const std::vector<uint32_t>& route(uint32_t from, uint32_t to) const;
  // The fixed latency of that route: NeuronLink latency per torus hop; a switch level's latency per traversal (the
  // top level of the route once, each level below it twice: up through one switch, down through another).
  // Between two tori of a system only the levels count (the chip's port into them is its own).
  double route_latency_ns(uint32_t from, uint32_t to) const;
  // The chips in an order whose consecutive members (and last to first) are neighbours where the topology allows:
  // a snake through the torus (boustrophedon over the dimensions), chip order on a switched fabric.
  const std::vector<uint32_t>& ring_order() const { return m_snake; }
  // Rings a collective can run on at once (link-disjoint Hamiltonian cycles): the 2-D torus's two (collectives.md
  // §2; not the snake, which shares links with every second cycle), else the one snake (a 3-D torus's, a switched
  // fabric's chip order). With several tori, each ring runs through the tori one after another.
  const std::vector<std::vector<uint32_t>>& ring_orders() const { return m_rings; }
  // The switch levels from the innermost out, groups of the level below per group at each: chips for a switched
  // fabric, tori for a torus system of several (empty for one torus).
  const std::vector<uint32_t>& group_sizes() const { return m_group_sizes; }
  // Chips of the innermost group a hierarchical collective works inside first: a torus, or a first-level switch's.
  uint32_t inner_group_chips() const;
  // Two link-disjoint Hamiltonian cycles of the width x height torus (chips numbered x + y * width), or none when
  // the search's budget runs out first.
  static std::vector<std::vector<uint32_t>> disjoint_hamiltonian_cycles(uint32_t width, uint32_t height);

 private:
  void build_torus(const SystemConfig& system);
  void build_levels(const SystemConfig& system);
  bool same_torus(uint32_t a, uint32_t b) const;
  std::vector<uint32_t> compute_route(uint32_t from, uint32_t to) const;
  // Up through the sender's ports to the first level whose group holds both chips, then down the receiver's.
  std::vector<uint32_t> level_route(uint32_t from, uint32_t to) const;
  // The first switch level (0 = innermost) whose group holds both chips (not both in one torus).
  size_t shared_level(uint32_t from, uint32_t to) const;

  std::string m_name;
  Topology m_kind = Topology::single;
  uint32_t m_chips = 1;
  std::vector<SystemLink> m_links;
  std::vector<uint32_t> m_snake;
  std::vector<std::vector<uint32_t>> m_rings;
  // Torus: dimension sizes and, per (chip, dimension, direction 0 = +, 1 = -), the link index (or UINT32_MAX).
  std::vector<uint32_t> m_dims, m_torus_link;
  uint32_t m_torus_chips = 1;
  // Switch levels (a switched fabric's, or those between tori): group sizes per level, and per (level, chip) the
  // up / down port links.
  std::vector<uint32_t> m_group_sizes, m_up, m_down;
  std::vector<double> m_level_latency_ns;
  double m_hop_latency_ns = 0;
  std::vector<std::vector<uint32_t>> m_routes;  // from * chips + to, computed once
  std::vector<double> m_route_latency_ns;
};

}  // namespace trnsim::sim
