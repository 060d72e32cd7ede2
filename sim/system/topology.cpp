#include "sim/system/topology.h"

#include <algorithm>
#include <array>
#include <functional>
#include <set>
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
    case Topology::single:
      m_rings = {{0}};
      m_snake = {0};
      break;
    case Topology::torus:
      build_torus(system);
      build_levels(system);  // EFA (or another switch) between the tori, when the system has several
      break;
    case Topology::switched: build_levels(system); break;
  }
  m_routes.resize(size_t(m_chips) * m_chips);
  m_route_latency_ns.assign(size_t(m_chips) * m_chips, 0.0);
  for (uint32_t from = 0; from < m_chips; ++from) {
    for (uint32_t to = 0; to < m_chips; ++to) {
      const size_t key = size_t(from) * m_chips + to;
      m_routes[key] = compute_route(from, to);
      if (from == to) continue;
      if (m_kind == Topology::torus && same_torus(from, to)) {
        m_route_latency_ns[key] = double(m_routes[key].size()) * m_hop_latency_ns;
      } else if (m_kind != Topology::single) {
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
  m_torus_chips = 1;
  for (uint32_t d : m_dims) m_torus_chips *= d;
  m_torus_link.assign(size_t(m_chips) * dims * 2, kNoLink);
  // Chip c's coordinate along dimension d: (c / stride_d) % size_d within its torus, dimension 0 fastest; the tori of
  // a multi-server system are numbered one after another.
  std::vector<uint32_t> stride(dims, 1);
  for (size_t d = 1; d < dims; ++d) stride[d] = stride[d - 1] * m_dims[d - 1];
  for (uint32_t chip = 0; chip < m_chips; ++chip) {
    const uint32_t base = chip - chip % m_torus_chips, local = chip % m_torus_chips;
    for (size_t d = 0; d < dims; ++d) {
      const uint32_t size = m_dims[d];
      if (size < 2) continue;
      const uint32_t coordinate = (local / stride[d]) % size;
      // GB/s = bytes/ns. A ring of two has one neighbour, reached by both of the dimension's links.
      const double rate = system.bandwidth_per_chip_gbps_by_dimension[d] / (size == 2 ? 1.0 : 2.0);
      for (int direction = 0; direction < (size == 2 ? 1 : 2); ++direction) {
        const uint32_t next = direction == 0 ? (coordinate + 1) % size : (coordinate + size - 1) % size;
        const uint32_t neighbour = base + local - coordinate * stride[d] + next * stride[d];
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
    for (uint32_t i = 0; i < m_torus_chips; ++i) {
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
  // One torus: its cycles. Several (joined by switch levels, e.g. EFA): each cycle runs torus after torus, the
  // step from one torus to the next crossing the levels.
  auto through_every_torus = [&](const std::vector<uint32_t>& cycle) {
    std::vector<uint32_t> ring;
    for (uint32_t base = 0; base < m_chips; base += m_torus_chips) {
      for (uint32_t chip : cycle) ring.push_back(base + chip);
    }
    return ring;
  };
  m_snake = through_every_torus(snake(order));
  m_rings = {m_snake};
  // A 2-D torus has two Hamiltonian cycles that share no link (collectives.md §2; Kotzig): both, when found.
  if (dims == 2 && m_dims[0] >= 3 && m_dims[1] >= 3) {
    std::vector<std::vector<uint32_t>> pair = disjoint_hamiltonian_cycles(m_dims[0], m_dims[1]);
    if (!pair.empty()) m_rings = {through_every_torus(pair[0]), through_every_torus(pair[1])};
  }
}

std::vector<std::vector<uint32_t>> SystemTopology::disjoint_hamiltonian_cycles(uint32_t width, uint32_t height) {
  // Depth-first search for a Hamiltonian cycle whose complement (every node keeps two of its four edges) is one
  // cycle too. A 4 x 4 torus takes a few thousand steps; the budget keeps an odd size from stalling the build (the
  // caller then keeps the one snake).
  const uint32_t n = width * height;
  auto neighbours = [&](uint32_t v) {
    const uint32_t x = v % width, y = v / width;
    return std::array<uint32_t, 4>{y * width + (x + 1) % width, y * width + (x + width - 1) % width,
                                   ((y + 1) % height) * width + x, ((y + height - 1) % height) * width + x};
  };
  auto edge = [&](uint32_t a, uint32_t b) { return a < b ? uint64_t(a) * n + b : uint64_t(b) * n + a; };
  std::vector<uint32_t> path = {0};
  std::vector<char> visited(n, 0);
  visited[0] = 1;
  std::vector<std::vector<uint32_t>> found;
  uint64_t budget = 2'000'000;
  std::function<bool()> extend = [&]() -> bool {
    if (budget-- == 0) return true;  // give up
    const uint32_t last = path.back();
    if (path.size() == n) {
      bool closes = false;
      for (uint32_t w : neighbours(last)) closes = closes || w == 0;
      if (!closes) return false;
      std::set<uint64_t> used;
      for (size_t i = 0; i < n; ++i) used.insert(edge(path[i], path[(i + 1) % n]));
      // The complement: walk it from node 0; it is one cycle when the walk returns after n nodes.
      std::vector<uint32_t> other = {0};
      uint32_t previous = UINT32_MAX, here = 0;
      while (true) {
        uint32_t next = UINT32_MAX;
        for (uint32_t w : neighbours(here)) {
          if (!used.count(edge(here, w)) && w != previous) {
            next = w;
            break;
          }
        }
        if (next == UINT32_MAX || next == 0) break;
        previous = here;
        here = next;
        other.push_back(here);
        if (other.size() > n) break;
      }
      if (other.size() != n) return false;
      found = {path, other};
      return true;
    }
    for (uint32_t w : neighbours(last)) {
      if (visited[w]) continue;
      visited[w] = 1;
      path.push_back(w);
      if (extend()) return true;
      path.pop_back();
      visited[w] = 0;
    }
    return false;
  };
  extend();
  return found;
}

void SystemTopology::build_levels(const SystemConfig& system) {
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
  if (m_kind == Topology::switched) {
    m_snake.resize(m_chips);
    for (uint32_t chip = 0; chip < m_chips; ++chip) m_snake[chip] = chip;
    m_rings = {m_snake};
  }
}

bool SystemTopology::same_torus(uint32_t a, uint32_t b) const {
  return m_kind == Topology::torus && a / m_torus_chips == b / m_torus_chips;
}

uint32_t SystemTopology::inner_group_chips() const {
  switch (m_kind) {
    case Topology::single: return 1;
    case Topology::torus: return m_torus_chips;
    case Topology::switched: return m_group_sizes.front();
  }
  return m_chips;
}

size_t SystemTopology::shared_level(uint32_t from, uint32_t to) const {
  uint64_t span = m_kind == Topology::torus ? m_torus_chips : 1;
  for (size_t level = 0; level < m_group_sizes.size(); ++level) {
    span *= m_group_sizes[level];
    if (from / span == to / span) return level;
  }
  return m_group_sizes.size() - 1;  // validation: the levels' groups multiply to the chips
}

std::vector<uint32_t> SystemTopology::level_route(uint32_t from, uint32_t to) const {
  std::vector<uint32_t> route;
  const size_t top = shared_level(from, to);
  for (size_t l = 0; l <= top; ++l) route.push_back(m_up[l * m_chips + from]);
  for (size_t l = top + 1; l-- > 0;) route.push_back(m_down[l * m_chips + to]);
  return route;
}

std::vector<uint32_t> SystemTopology::compute_route(uint32_t from, uint32_t to) const {
  std::vector<uint32_t> route;
  if (from == to) return route;
  switch (m_kind) {
    case Topology::single: break;
    case Topology::torus: {
      if (!same_torus(from, to)) {
        route = level_route(from, to);
        break;
      }
      const size_t dims = m_dims.size();
      uint32_t chip = from, stride = 1;
      for (size_t d = 0; d < dims; ++d) {
        const uint32_t size = m_dims[d];
        const uint32_t here = (chip % m_torus_chips / stride) % size, there = (to % m_torus_chips / stride) % size;
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
    case Topology::switched: route = level_route(from, to); break;
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
