#include "sim/system/topology.h"

#include <algorithm>
#include <stdexcept>

namespace trnsim::sim {
namespace {

constexpr uint32_t kNoLink = UINT32_MAX;

}  // namespace

SystemTopology::SystemTopology(const HardwareConfig& config, const std::string& name) : m_name(name) {
  auto it = config.systems.find(name);
  if (it == config.systems.end()) {
    std::string known;
    for (const auto& [system, _] : config.systems) known += (known.empty() ? "" : ", ") + system;
    throw std::invalid_argument("config " + config.name + " has no system '" + name + "' (it has: " + known + ")");
  }
  const SystemConfig& system = it->second;
  m_kind = system.topology;
  m_chips = std::max(1u, system.chips);
  m_hop_latency_ns = config.neuronlink.latency_ns;
  switch (system.topology) {
    case Topology::single: m_rings = {{0}}; break;
    case Topology::torus: build_torus(system); break;
    case Topology::switched: build_switched(system); break;
  }
  m_routes.resize(size_t(m_chips) * m_chips);
  m_route_latency_ns.assign(size_t(m_chips) * m_chips, 0.0);
  for (uint32_t from = 0; from < m_chips; ++from) {
    for (uint32_t to = 0; to < m_chips; ++to) {
      const size_t key = size_t(from) * m_chips + to;
      m_routes[key] = compute_route(from, to);
      if (m_kind == Topology::torus) {
        m_route_latency_ns[key] = double(m_routes[key].size()) * m_hop_latency_ns;
      } else if (m_kind == Topology::switched && from != to) {
        const size_t top = shared_level(from, to);
        double latency = m_level_latency_ns[top];
        for (size_t l = 0; l < top; ++l) latency += 2 * m_level_latency_ns[l];
        m_route_latency_ns[key] = latency;
      }
    }
  }
}

void SystemTopology::build_torus(const SystemConfig& system) {
  m_dims = system.torus_dimensions;
  const size_t dims = m_dims.size();
  m_torus_link.assign(size_t(m_chips) * dims * 2, kNoLink);
  // Chip c's coordinate along dimension d: (c / stride_d) % size_d, dimension 0 fastest.
  std::vector<uint32_t> stride(dims, 1);
  for (size_t d = 1; d < dims; ++d) stride[d] = stride[d - 1] * m_dims[d - 1];
  for (uint32_t chip = 0; chip < m_chips; ++chip) {
    for (size_t d = 0; d < dims; ++d) {
      const uint32_t size = m_dims[d];
      if (size < 2) continue;
      const uint32_t coordinate = (chip / stride[d]) % size;
      // GB/s = bytes/ns. A ring of two has one neighbour, reached by both of the dimension's links.
      const double rate = system.bandwidth_per_chip_gbps_by_dimension[d] / (size == 2 ? 1.0 : 2.0);
      for (int direction = 0; direction < (size == 2 ? 1 : 2); ++direction) {
        const uint32_t next = direction == 0 ? (coordinate + 1) % size : (coordinate + size - 1) % size;
        const uint32_t neighbour = chip - coordinate * stride[d] + next * stride[d];
        m_torus_link[(size_t(chip) * dims + d) * 2 + size_t(direction)] = uint32_t(m_links.size());
        m_links.push_back({chip, neighbour, rate,
                           "chip" + std::to_string(chip) + " -> chip" + std::to_string(neighbour) + " (dim " +
                               std::to_string(d) + ")"});
      }
      if (size == 2) m_torus_link[(size_t(chip) * dims + d) * 2 + 1] = m_torus_link[(size_t(chip) * dims + d) * 2];
    }
  }
  // A snake: the fastest dimension runs forwards on even rows of the rest and backwards on odd ones (recursively),
  // so each step moves one hop; with even sizes the last chip neighbours the first through the wrap-around links.
  auto snake = [&](const std::vector<size_t>& fastest_first) {
    std::vector<uint32_t> ring;
    for (uint32_t i = 0; i < m_chips; ++i) {
      // Mixed-radix digits of i, fastest dimension first; a digit is reflected when the digits above it sum to odd.
      std::vector<uint32_t> digits(dims);
      uint32_t rest = i;
      for (size_t k = 0; k < dims; ++k) {
        digits[k] = rest % m_dims[fastest_first[k]];
        rest /= m_dims[fastest_first[k]];
      }
      uint32_t chip = 0, parity = 0;
      for (size_t k = dims; k-- > 0;) {
        const size_t d = fastest_first[k];
        const uint32_t digit = parity % 2 ? m_dims[d] - 1 - digits[k] : digits[k];
        parity += digits[k];
        chip += digit * stride[d];
      }
      ring.push_back(chip);
    }
    return ring;
  };
  std::vector<size_t> order(dims);
  for (size_t d = 0; d < dims; ++d) order[d] = d;
  // One snake. A second Hamiltonian cycle of the 2-D torus (collectives.md §2: it has two that share no link) is
  // not built yet: the transposed snake shares links with this one, which would only move the bottleneck.
  m_rings = {snake(order)};
}

void SystemTopology::build_switched(const SystemConfig& system) {
  const size_t levels = system.switch_levels.size();
  m_up.assign(levels * m_chips, kNoLink);
  m_down.assign(levels * m_chips, kNoLink);
  for (size_t l = 0; l < levels; ++l) {
    const SwitchLevelConfig& level = system.switch_levels[l];
    m_group_sizes.push_back(level.chips_per_group);
    m_level_latency_ns.push_back(level.latency_ns);
    for (uint32_t chip = 0; chip < m_chips; ++chip) {
      const std::string port = "chip" + std::to_string(chip) + " L" + std::to_string(l + 1);
      m_up[l * m_chips + chip] = uint32_t(m_links.size());
      m_links.push_back({chip, chip, level.bandwidth_per_chip_gbps, port + " up"});
      m_down[l * m_chips + chip] = uint32_t(m_links.size());
      m_links.push_back({chip, chip, level.bandwidth_per_chip_gbps, port + " down"});
    }
  }
  m_rings.assign(1, std::vector<uint32_t>(m_chips));
  for (uint32_t chip = 0; chip < m_chips; ++chip) m_rings[0][chip] = chip;
}

size_t SystemTopology::shared_level(uint32_t from, uint32_t to) const {
  uint64_t span = 1;
  for (size_t level = 0; level < m_group_sizes.size(); ++level) {
    span *= m_group_sizes[level];
    if (from / span == to / span) return level;
  }
  return m_group_sizes.size() - 1;  // validation: the levels' groups multiply to the chips
}

std::vector<uint32_t> SystemTopology::compute_route(uint32_t from, uint32_t to) const {
  std::vector<uint32_t> route;
  if (from == to) return route;
  switch (m_kind) {
    case Topology::single: break;
    case Topology::torus: {
      const size_t dims = m_dims.size();
      uint32_t chip = from, stride = 1;
      for (size_t d = 0; d < dims; ++d) {
        const uint32_t size = m_dims[d];
        const uint32_t here = (chip / stride) % size, there = (to / stride) % size;
        const uint32_t forward = (there + size - here) % size, backward = (here + size - there) % size;
        const int direction = forward <= backward ? 0 : 1;
        for (uint32_t step = 0; step < std::min(forward, backward); ++step) {
          const uint32_t link = m_torus_link[(size_t(chip) * dims + d) * 2 + size_t(direction)];
          route.push_back(link);
          chip = m_links[link].to_chip;
        }
        stride *= size;
      }
      break;
    }
    case Topology::switched: {
      const size_t top = shared_level(from, to);
      for (size_t l = 0; l <= top; ++l) route.push_back(m_up[l * m_chips + from]);
      for (size_t l = top + 1; l-- > 0;) route.push_back(m_down[l * m_chips + to]);
      break;
    }
  }
  return route;
}

const std::vector<uint32_t>& SystemTopology::route(uint32_t from, uint32_t to) const {
  return m_routes.at(size_t(from) * m_chips + to);
}

double SystemTopology::route_latency_ns(uint32_t from, uint32_t to) const {
  return m_route_latency_ns.at(size_t(from) * m_chips + to);
}

}  // namespace trnsim::sim
