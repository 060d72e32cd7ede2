#include "sim/system/collectives.h"

#include <algorithm>
#include <stdexcept>

namespace trnsim::sim {
namespace {

// "a, b, c" of an enum's names, for messages.
template <class Enum>
std::string known_names() {
  std::string known;
  for (std::string_view n : EnumNames<Enum>::names) known += std::string(known.empty() ? "" : ", ") + std::string(n);
  return known;
}

bool power_of_two(uint32_t n) { return n && (n & (n - 1)) == 0; }

// The collectives KangaRing runs (the reductions and gathers of the whole system).
bool kangaring_runs(CollectiveOp op) {
  return op == CollectiveOp::all_reduce || op == CollectiveOp::all_gather || op == CollectiveOp::reduce_scatter;
}

}  // namespace

const char* collective_op_name(CollectiveOp op) { return enum_name(op).data(); }
const char* collective_algorithm_name(CollectiveAlgorithm algorithm) { return enum_name(algorithm).data(); }

CollectiveOp parse_collective_op(const std::string& name) {
  if (auto op = parse_enum<CollectiveOp>(name)) return *op;
  throw std::invalid_argument("no collective '" + name + "' (one of: " + known_names<CollectiveOp>() + ")");
}

CollectiveAlgorithm parse_collective_algorithm(const std::string& name) {
  if (auto algorithm = parse_enum<CollectiveAlgorithm>(name)) return *algorithm;
  throw std::invalid_argument("no collective algorithm '" + name + "' (one of: " + known_names<CollectiveAlgorithm>() +
                              ")");
}

double bus_bandwidth_factor(CollectiveOp op, uint32_t ranks) {
  const double r = double(std::max(1u, ranks));
  switch (op) {
    case CollectiveOp::all_reduce: return 2 * (r - 1) / r;
    case CollectiveOp::all_gather:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_to_all: return (r - 1) / r;
    case CollectiveOp::permute:
    case CollectiveOp::send_recv:
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce: return 1;
  }
  return 1;
}

CollectiveSimulator::CollectiveSimulator(const HardwareConfig& config, const std::string& system,
                                         uint32_t ranks_per_chip)
    : m_config(config), m_topology(config, system), m_ranks_per_chip(std::max(1u, ranks_per_chip)) {
  for (const SystemLink& link : m_topology.links()) m_links.push_back(std::make_unique<BandwidthCalendar>(link.bytes_per_ns));
  // A copy between two ranks of one chip reads and writes its HBM: half the chip's HBM bandwidth (assumed).
  for (uint32_t chip = 0; chip < m_topology.chips(); ++chip) {
    m_local.push_back(std::make_unique<BandwidthCalendar>(config.hbm.bandwidth_gbps / 2));
  }
  m_cc_core_free_ns.assign(m_topology.chips(), std::vector<double>(std::max(1u, config.chip.collective_cores), 0.0));
}

CollectiveAlgorithm CollectiveSimulator::choose(CollectiveOp op, uint64_t bytes, uint32_t group_size) const {
  if (op == CollectiveOp::permute || op == CollectiveOp::send_recv) return CollectiveAlgorithm::mesh;
  // More than one tier: a switched fabric of two levels or more, or tori joined by switch levels.
  const size_t tiers = m_topology.group_sizes().size() + (m_topology.kind() == Topology::torus ? 1 : 0);
  if (op == CollectiveOp::all_reduce && tiers > 1 && group_size == ranks() && m_topology.inner_group_chips() > 1) {
    return CollectiveAlgorithm::hierarchical;
  }
  if (bytes <= m_config.collectives.mesh_max_bytes) return CollectiveAlgorithm::mesh;
  if (op == CollectiveOp::all_to_all) return CollectiveAlgorithm::mesh;
  if (bytes <= m_config.collectives.recursive_max_bytes && power_of_two(group_size)) {
    return CollectiveAlgorithm::recursive;
  }
  // KangaRing on trn2 and later for the whole system's reductions and gathers; the flat ring on trn1, for other
  // groups and for the rooted collectives' ring part (collectives.md §2).
  if (m_config.generation != Generation::trn1 && group_size == ranks() && kangaring_runs(op)) {
    return CollectiveAlgorithm::kangaring;
  }
  return CollectiveAlgorithm::ring;
}

std::vector<std::vector<uint32_t>> CollectiveSimulator::rings_of(const std::vector<uint32_t>& members,
                                                                  bool topology_rings, size_t cycles) const {
  const uint32_t n = uint32_t(members.size());
  std::vector<std::vector<uint32_t>> orders;  // each a sequence of positions in `members`
  // Members on whole chips, the same number on each chip they use: the topology's cycles can carry them, in the
  // cycles' order of those chips (every chip: the whole cycle; one torus of several: that torus's own cycle).
  std::vector<std::vector<uint32_t>> on_chip(m_topology.chips());
  for (uint32_t p = 0; p < n; ++p) on_chip[members[p] / m_ranks_per_chip].push_back(p);
  size_t per_chip = 0;
  bool whole_chips = n > 0;
  for (const auto& positions : on_chip) {
    if (positions.empty()) continue;
    if (per_chip == 0) per_chip = positions.size();
    whole_chips = whole_chips && positions.size() == per_chip;
  }
  if (topology_rings && whole_chips && m_topology.kind() == Topology::torus) {
    // One cycle: the snake (the order the whole system's members take); more: the link-disjoint ones.
    const std::vector<std::vector<uint32_t>> snake = {m_topology.ring_order()};
    const auto& cycles_of = cycles > 1 ? m_topology.ring_orders() : snake;
    for (size_t c = 0; c < std::min(cycles, cycles_of.size()); ++c) {
      std::vector<uint32_t> order;
      for (uint32_t chip : cycles_of[c]) order.insert(order.end(), on_chip[chip].begin(), on_chip[chip].end());
      orders.push_back(std::move(order));
    }
  } else {
    std::vector<uint32_t> order(n);
    for (uint32_t p = 0; p < n; ++p) order[p] = p;
    orders.push_back(std::move(order));
  }
  std::vector<std::vector<uint32_t>> rings;
  for (const std::vector<uint32_t>& order : orders) {
    std::vector<uint32_t> next(n);
    for (uint32_t i = 0; i < n; ++i) next[order[i]] = order[(i + 1) % n];
    rings.push_back(next);
    if (m_topology.kind() == Topology::torus && n > 2) {
      std::vector<uint32_t> back(n);
      for (uint32_t i = 0; i < n; ++i) back[order[(i + 1) % n]] = order[i];
      rings.push_back(back);
    }
  }
  return rings;
}

std::vector<CollectiveSimulator::Step> CollectiveSimulator::plan(CollectiveOp op, CollectiveAlgorithm algorithm,
                                                                 double bytes, uint32_t n,
                                                                 const std::vector<std::vector<uint32_t>>& rings,
                                                                 uint32_t root) const {
  std::vector<Step> steps;
  if (n < 2) return steps;
  const double chunk = bytes / n;
  auto ring_pass = [&](double per_step, bool reduces) {  // n - 1 steps, each rank to its successor on every ring
    const double share = per_step / double(rings.size());
    for (uint32_t k = 0; k + 1 < n; ++k) {
      Step step;
      for (const std::vector<uint32_t>& next : rings) {
        for (uint32_t i = 0; i < n; ++i) step.push_back({i, next[i], share, reduces});
      }
      steps.push_back(std::move(step));
    }
  };
  auto mesh_pass = [&](double per_peer, bool reduces) {  // one step, every rank to every peer
    Step step;
    for (uint32_t i = 0; i < n; ++i) {
      for (uint32_t k = 1; k < n; ++k) step.push_back({i, (i + k) % n, per_peer, reduces});
    }
    steps.push_back(std::move(step));
  };
  auto halving = [&]() {  // reduce-scatter: partners at n/2, n/4, ..., halving the data each step
    for (uint32_t distance = n / 2; distance >= 1; distance /= 2) {
      Step step;
      for (uint32_t i = 0; i < n; ++i) step.push_back({i, i ^ distance, chunk * distance, true});
      steps.push_back(std::move(step));
    }
  };
  auto doubling = [&]() {  // all-gather: partners at 1, 2, ..., doubling the data each step
    for (uint32_t distance = 1; distance < n; distance *= 2) {
      Step step;
      for (uint32_t i = 0; i < n; ++i) step.push_back({i, i ^ distance, chunk * distance});
      steps.push_back(std::move(step));
    }
  };
  if (algorithm == CollectiveAlgorithm::recursive && !power_of_two(n)) algorithm = CollectiveAlgorithm::ring;
  switch (op) {
    case CollectiveOp::all_reduce:
    case CollectiveOp::reduce_scatter:
    case CollectiveOp::all_gather: {
      const bool scatter = op != CollectiveOp::all_gather, gather = op != CollectiveOp::reduce_scatter;
      switch (algorithm) {
        case CollectiveAlgorithm::mesh:
          if (scatter) mesh_pass(chunk, true);
          if (gather) mesh_pass(chunk, false);
          break;
        case CollectiveAlgorithm::recursive:
          if (scatter) halving();
          if (gather) doubling();
          break;
        case CollectiveAlgorithm::automatic:
        case CollectiveAlgorithm::ring:
        case CollectiveAlgorithm::kangaring:  // run_kangaring builds its parts from rings; here a plain ring
        case CollectiveAlgorithm::hierarchical:
          if (scatter) ring_pass(chunk, true);
          if (gather) ring_pass(chunk, false);
          break;
      }
      break;
    }
    case CollectiveOp::all_to_all:
      if (algorithm == CollectiveAlgorithm::ring) {
        // Pairwise exchange: step k sends to the rank k + 1 further on.
        for (uint32_t k = 1; k < n; ++k) {
          Step step;
          for (uint32_t i = 0; i < n; ++i) step.push_back({i, (i + k) % n, chunk});
          steps.push_back(std::move(step));
        }
      } else {
        mesh_pass(chunk, false);
      }
      break;
    case CollectiveOp::permute: {
      Step step;
      for (uint32_t i = 0; i < n; ++i) step.push_back({i, (i + 1) % n, bytes});
      steps.push_back(std::move(step));
      break;
    }
    case CollectiveOp::send_recv: steps.push_back({{0, 1, bytes}}); break;
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce: {
      const bool broadcast = op == CollectiveOp::broadcast;
      // Mesh: the whole message between the root and each peer in one step. Otherwise the root's part is the
      // scatter (broadcast, first) or the gather (reduce, last) of S / n per peer around the ring part.
      const double per_peer = algorithm == CollectiveAlgorithm::mesh ? bytes : chunk;
      Step rooted;
      for (uint32_t k = 1; k < n; ++k) {
        const uint32_t peer = (root + k) % n;
        rooted.push_back(broadcast ? Transfer{root, peer, per_peer} : Transfer{peer, root, per_peer, true});
      }
      if (algorithm == CollectiveAlgorithm::mesh) {
        steps.push_back(std::move(rooted));
        break;
      }
      if (broadcast) steps.push_back(rooted);
      for (Step& step : plan(broadcast ? CollectiveOp::all_gather : CollectiveOp::reduce_scatter, algorithm, bytes, n,
                             rings)) {
        steps.push_back(std::move(step));
      }
      if (!broadcast) steps.push_back(std::move(rooted));
      break;
    }
  }
  return steps;
}

double CollectiveSimulator::transfer(uint32_t from_rank, uint32_t to_rank, double bytes, double start_ns,
                                     bool reduces, uint32_t copies) {
  const double rate_share = reduces ? m_config.core.dma.read_add_write_efficiency : 1.0;
  const uint32_t from_chip = from_rank / m_ranks_per_chip, to_chip = to_rank / m_ranks_per_chip;
  std::vector<double>& cores = m_cc_core_free_ns[from_chip];
  auto core = std::min_element(cores.begin(), cores.end());
  const double start = std::max(start_ns, *core);
  double end = start;
  const std::vector<uint32_t>& route = m_topology.route(from_chip, to_chip);
  if (route.empty()) {
    end = m_local[from_chip]->reserve(start, bytes, m_local[from_chip]->capacity() * rate_share);
    m_run_bytes[m_links.size() + from_chip] += bytes;
  } else {
    // The bytes stream through every link of the route (cut-through): each link carries them from the start.
    for (uint32_t link : route) {
      end = std::max(end, m_links[link]->reserve(start, bytes, m_links[link]->capacity() * rate_share));
      m_run_bytes[link] += bytes;
    }
  }
  if (copies > 1) {
    // DMA duplication: the other copies are written into the receiving chip's HBM as the bytes arrive.
    const double extra = bytes * double(copies - 1);
    end = std::max(end, m_local[to_chip]->reserve(start, extra, m_local[to_chip]->capacity()));
    m_run_bytes[m_links.size() + to_chip] += extra;
  }
  *core = end;
  return end + m_topology.route_latency_ns(from_chip, to_chip);
}

uint64_t CollectiveSimulator::run_steps(const std::vector<Step>& steps, const std::vector<uint32_t>& members,
                                        std::vector<double>& ready) {
  uint64_t transfers = 0;
  const double step_ns = m_config.collectives.step_latency_ns;
  std::vector<double> begin(members.size());
  std::vector<char> active(members.size());
  for (const Step& step : steps) {
    std::fill(active.begin(), active.end(), 0);
    for (const Transfer& t : step) active[t.from] = active[t.to] = 1;
    for (size_t i = 0; i < members.size(); ++i) begin[i] = ready[members[i]] + (active[i] ? step_ns : 0);
    for (const Transfer& t : step) {
      const double arrival = transfer(members[t.from], members[t.to], t.bytes, begin[t.from], t.reduces, t.copies);
      double& done = ready[members[t.to]];
      done = std::max({done, arrival, begin[t.to]});
      ++transfers;
    }
    for (size_t i = 0; i < members.size(); ++i) {
      if (active[i]) ready[members[i]] = std::max(ready[members[i]], begin[i]);
    }
  }
  return transfers;
}

uint64_t CollectiveSimulator::run_kangaring(CollectiveOp op, double bytes, std::vector<double>& ready,
                                            CollectiveTiming& timing) {
  const uint32_t k = m_ranks_per_chip, chips = m_topology.chips();
  // The ranks of each chip, and rank j of every chip in the topology's ring order.
  std::vector<std::vector<uint32_t>> on_chip(chips), across(k);
  for (uint32_t chip : m_topology.ring_order()) {
    for (uint32_t r = 0; r < k; ++r) {
      on_chip[chip].push_back(chip * k + r);
      across[r].push_back(chip * k + r);
    }
  }
  uint64_t steps = 0;
  auto on_chips = [&](CollectiveOp part_op, double part_bytes) {  // a mesh among each chip's ranks
    if (k < 2) return;
    uint64_t longest = 0;
    for (const std::vector<uint32_t>& members : on_chip) {
      const std::vector<Step> plan_of = plan(part_op, CollectiveAlgorithm::mesh, part_bytes, k, rings_of(members, false));
      timing.transfers += run_steps(plan_of, members, ready);
      longest = std::max<uint64_t>(longest, plan_of.size());
    }
    steps += longest;
  };
  auto over_chips = [&](CollectiveOp part_op, double part_bytes) {  // rank j's ring over the chips, every cycle
    uint64_t longest = 0;
    for (const std::vector<uint32_t>& members : across) {
      std::vector<Step> plan_of = plan(part_op, CollectiveAlgorithm::ring, part_bytes, chips,
                                       rings_of(members, true, m_topology.ring_orders().size()));
      for (Step& step : plan_of) {
        for (Transfer& t : step) {
          if (!t.reduces) t.copies = k;  // gathered chunks land in every rank of the chip
        }
      }
      timing.transfers += run_steps(plan_of, members, ready);
      longest = std::max<uint64_t>(longest, plan_of.size());
    }
    steps += longest;
  };
  switch (op) {
    case CollectiveOp::all_reduce:
      on_chips(CollectiveOp::reduce_scatter, bytes);
      over_chips(CollectiveOp::all_reduce, bytes / k);
      break;
    case CollectiveOp::reduce_scatter:
      on_chips(CollectiveOp::reduce_scatter, bytes);
      over_chips(CollectiveOp::reduce_scatter, bytes / k);
      break;
    case CollectiveOp::all_gather:
      on_chips(CollectiveOp::all_gather, bytes / chips);  // the chip's own ranks' parts
      over_chips(CollectiveOp::all_gather, bytes / k);
      break;
    case CollectiveOp::all_to_all:
    case CollectiveOp::permute:
    case CollectiveOp::send_recv:
    case CollectiveOp::broadcast:
    case CollectiveOp::reduce:
      throw std::logic_error("internal: KangaRing runs reductions and gathers only");
  }
  return steps;
}

CollectiveTiming CollectiveSimulator::run(const CollectiveRequest& request) {
  std::vector<uint32_t> members = request.ranks;
  if (members.empty()) {
    // Every rank, chips in the topology's ring order and the ranks of a chip together.
    for (uint32_t chip : m_topology.ring_order()) {
      for (uint32_t r = 0; r < m_ranks_per_chip; ++r) members.push_back(chip * m_ranks_per_chip + r);
    }
  }
  std::vector<bool> seen(ranks(), false);
  for (uint32_t rank : members) {
    if (rank >= ranks()) {
      throw std::invalid_argument("rank " + std::to_string(rank) + " is not in the system (" +
                                  std::to_string(ranks()) + " ranks)");
    }
    if (seen[rank]) throw std::invalid_argument("rank " + std::to_string(rank) + " is in the group twice");
    seen[rank] = true;
  }
  const uint32_t n = uint32_t(members.size());
  if (request.op == CollectiveOp::send_recv && n < 2) throw std::invalid_argument("send_recv needs two ranks");
  CollectiveTiming timing;
  timing.ranks = n;
  timing.algorithm = request.algorithm == CollectiveAlgorithm::automatic ? choose(request.op, request.bytes, n)
                                                                         : request.algorithm;
  std::vector<double> ready(ranks(), request.start_ns);
  m_run_bytes.assign(m_links.size() + m_local.size(), 0.0);
  const double bytes = double(request.bytes);
  const bool whole = n == ranks();
  if (timing.algorithm == CollectiveAlgorithm::kangaring && (!whole || !kangaring_runs(request.op))) {
    timing.algorithm = CollectiveAlgorithm::ring;
  }
  uint32_t root = 0;  // the root's position in the group
  if (request.root >= 0) {
    if (request.op != CollectiveOp::broadcast && request.op != CollectiveOp::reduce) {
      throw std::invalid_argument(std::string("a root is for broadcast and reduce, not ") +
                                  collective_op_name(request.op));
    }
    auto it = std::find(members.begin(), members.end(), uint32_t(request.root));
    if (it == members.end()) {
      throw std::invalid_argument("root rank " + std::to_string(request.root) + " is not in the group");
    }
    root = uint32_t(it - members.begin());
  }
  if (timing.algorithm == CollectiveAlgorithm::kangaring) {
    timing.steps = run_kangaring(request.op, bytes, ready, timing);
  } else if (timing.algorithm == CollectiveAlgorithm::hierarchical && request.op == CollectiveOp::all_reduce &&
             !m_topology.group_sizes().empty() && whole) {
    // Innermost groups (a first-level switch's chips, or a torus; in the topology's ring order, so a torus's
    // group runs round its snake); position j of every group forms a cross-group ring.
    const uint32_t g = m_topology.inner_group_chips() * m_ranks_per_chip, count = n / g;
    std::vector<std::vector<uint32_t>> inner(count), across(g);
    for (uint32_t chip : m_topology.ring_order()) {
      for (uint32_t r = 0; r < m_ranks_per_chip; ++r) {
        const uint32_t rank = chip * m_ranks_per_chip + r;
        inner[rank / g].push_back(rank);
      }
    }
    for (const std::vector<uint32_t>& group : inner) {
      for (uint32_t j = 0; j < g; ++j) across[j].push_back(group[j]);
    }
    // Inside a torus the ring parts run on all its disjoint cycles both ways (collectives.md §2: the intra-node
    // stage of a large hierarchical collective is KangaRing, which uses every link); across groups, the group order.
    auto part = [&](CollectiveOp op, double part_bytes, const std::vector<std::vector<uint32_t>>& subgroups,
                    bool inside) {
      uint64_t steps = 0;
      for (const auto& members_of : subgroups) {
        const uint32_t size = uint32_t(members_of.size());
        // A part's group is smaller than the system, so choose() never makes it hierarchical again.
        const CollectiveAlgorithm algorithm = choose(op, uint64_t(part_bytes), size);
        const std::vector<Step> steps_of =
            plan(op, algorithm, part_bytes, size, rings_of(members_of, inside, m_topology.ring_orders().size()));
        timing.transfers += run_steps(steps_of, members_of, ready);
        steps = std::max<uint64_t>(steps, steps_of.size());
      }
      timing.steps += steps;
    };
    part(CollectiveOp::reduce_scatter, bytes, inner, true);
    part(CollectiveOp::all_reduce, bytes / g, across, false);
    part(CollectiveOp::all_gather, bytes, inner, true);
  } else {
    if (timing.algorithm == CollectiveAlgorithm::hierarchical) timing.algorithm = CollectiveAlgorithm::ring;
    std::vector<Step> steps =
        plan(request.op, timing.algorithm, bytes, n, rings_of(members, request.ranks.empty()), root);
    if (request.op == CollectiveOp::permute && !request.pairs.empty()) {
      // The pairs given: one step, each source to its target.
      auto position = [&](int64_t rank) {
        auto it = std::find(members.begin(), members.end(), uint32_t(rank));
        if (it == members.end()) throw std::invalid_argument("permute pair rank " + std::to_string(rank) + " is not in the group");
        return uint32_t(it - members.begin());
      };
      Step step;
      for (size_t i = 0; i + 1 < request.pairs.size(); i += 2) {
        step.push_back({position(request.pairs[i]), position(request.pairs[i + 1]), bytes});
      }
      steps.assign(1, step);
    }
    if (timing.algorithm == CollectiveAlgorithm::recursive && !power_of_two(n)) timing.algorithm = CollectiveAlgorithm::ring;
    timing.steps = steps.size();
    timing.transfers = run_steps(steps, members, ready);
  }
  double end = request.start_ns;
  for (uint32_t rank : members) end = std::max(end, ready[rank]);
  timing.latency_ns = end - request.start_ns;
  timing.algbw_gbps = timing.latency_ns > 0 ? bytes / timing.latency_ns : 0;
  timing.busbw_gbps = timing.algbw_gbps * bus_bandwidth_factor(request.op, n);
  // Link index i < links: the topology's link; above: chip (i - links)'s on-chip path.
  auto link_name = [&](size_t index) {
    return index < m_links.size() ? m_topology.links()[index].name
                                  : "chip" + std::to_string(index - m_links.size()) + " HBM (on-chip)";
  };
  for (size_t index = 0; index < m_run_bytes.size(); ++index) {
    if (m_run_bytes[index] > 0) timing.link_bytes.emplace_back(link_name(index), m_run_bytes[index]);
  }
  const auto busiest = std::max_element(m_run_bytes.begin(), m_run_bytes.end());
  if (busiest != m_run_bytes.end() && *busiest > 0) {
    const size_t index = size_t(busiest - m_run_bytes.begin());
    const bool local = index >= m_links.size();
    const BandwidthCalendar& calendar = local ? *m_local[index - m_links.size()] : *m_links[index];
    timing.busiest_link = link_name(index);
    timing.busiest_link_bytes = *busiest;
    timing.busiest_link_utilisation =
        timing.latency_ns > 0 ? std::min(1.0, *busiest / (calendar.capacity() * timing.latency_ns)) : 0.0;
  }
  return timing;
}

}  // namespace trnsim::sim
