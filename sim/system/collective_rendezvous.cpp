#include "sim/system/collective_rendezvous.h"

#include <algorithm>
#include <stdexcept>

#include "isa/alu.h"
#include "isa/isa_error.h"

namespace trnsim::sim {
namespace {

std::string list_text(const std::vector<int64_t>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text + "]";
}

CollectiveOp op_of(isa::Opcode opcode) {
  switch (opcode) {
    case isa::Opcode::all_reduce: return CollectiveOp::all_reduce;
    case isa::Opcode::all_gather: return CollectiveOp::all_gather;
    case isa::Opcode::reduce_scatter: return CollectiveOp::reduce_scatter;
    case isa::Opcode::all_to_all: return CollectiveOp::all_to_all;
    case isa::Opcode::collective_permute: return CollectiveOp::permute;
    case isa::Opcode::all_to_all_v: return CollectiveOp::all_to_all;
    case isa::Opcode::all_gather_v: return CollectiveOp::all_gather;
    default: throw std::logic_error("internal: " + isa::instruction_spec(opcode).name + " is not a collective");
  }
}

// A tile of `elements` values shaped as `ap` (its partitions x the rest).
isa::Tile shaped(const isa::AccessPattern& ap, std::vector<float> values) {
  isa::Tile tile(ap.partitions(), ap.free_elements());
  tile.values = std::move(values);
  return tile;
}

}  // namespace

CollectiveRendezvous::CollectiveRendezvous(const HardwareConfig& config, std::vector<uint32_t> cores,
                                           const std::string& system, uint32_t ranks_per_chip, bool cores_share_chip)
    : m_config(config),
      m_cores(std::move(cores)),
      m_finished(m_cores.size(), false),
      m_system(system.empty() ? config.default_system : system),
      m_ranks_per_chip(ranks_per_chip),
      m_cores_share_chip(cores_share_chip) {}

size_t CollectiveRendezvous::position_of(uint32_t core) const {
  return size_t(std::find(m_cores.begin(), m_cores.end(), core) - m_cores.begin());
}

void CollectiveRendezvous::wait_for(size_t position, const std::function<bool()>& ready, const std::string& what) {
  while (!ready()) {
    if (m_finished[position]) throw isa::IsaError(what);
    sc_core::wait(m_changed);
  }
}

CollectiveRendezvous::Meeting CollectiveRendezvous::sendrecv(
    uint32_t core, const isa::Instruction& inst, double arrival_ns, isa::CoreState* state,
    const std::function<double(double start_ns)>& time_send_on_chip) {
  const size_t me = position_of(core);
  const int64_t pipe = int64_t(inst.scalar("pipe_id"));
  const size_t to = size_t(inst.scalar("send_to_rank")), from = size_t(inst.scalar("recv_from_rank"));
  for (size_t rank : {to, from}) {
    if (rank >= m_cores.size()) {
      throw isa::IsaError("rank " + std::to_string(rank) + " is not one of the " + std::to_string(m_cores.size()) +
                          " ranks this simulation runs (run the kernel on every rank it exchanges with, e.g. an LNC "
                          "launch kernel[2]) [sendrecv]");
    }
  }
  const isa::AccessPattern& src = inst.tensor("src");
  const isa::AccessPattern& dst = inst.tensor("dst");
  const Channel out{me, to, pipe}, in{from, me, pipe};
  const size_t out_ordinal = m_sent[out]++, in_ordinal = m_received[in]++;
  Message& sending = m_messages[out][out_ordinal];
  sending.sent = true;
  sending.sender_arrival_ns = arrival_ns;
  sending.partitions = src.partitions();
  sending.free_elements = src.free_elements();
  sending.dtype = src.dtype;
  if (state) sending.values = state->read(src).values;
  Message& receiving = m_messages[in][in_ordinal];
  receiving.received = true;
  receiving.receiver_arrival_ns = arrival_ns;
  m_changed.notify(sc_core::SC_ZERO_TIME);
  const std::string which = "sendrecv #" + std::to_string(out_ordinal + 1) + " of rank " + std::to_string(me) +
                            " on pipe " + std::to_string(pipe);
  wait_for(to, [&] { return sending.received; },
           which + " sends to rank " + std::to_string(to) + ", which finished without a sendrecv receiving from rank " +
               std::to_string(me) + " on that pipe (the program would hang) [sendrecv]");
  Meeting meeting;
  meeting.start_ns = std::max(sending.sender_arrival_ns, sending.receiver_arrival_ns);
  if (m_cores_share_chip) {
    sending.done_ns = time_send_on_chip(meeting.start_ns);
  } else {
    if (!m_links) m_links = std::make_unique<CollectiveSimulator>(m_config, m_system, links_ranks_per_chip());
    CollectiveRequest request;
    request.op = CollectiveOp::send_recv;
    request.bytes = src.elements() * dtype_size_bytes(src.dtype);
    request.ranks = {m_cores[me], m_cores[to]};
    request.start_ns = meeting.start_ns;
    for (uint32_t rank : request.ranks) {
      if (rank >= m_links->ranks()) {
        throw isa::IsaError("sendrecv: rank " + std::to_string(rank) + " is not in system " + m_system + " (" +
                            std::to_string(m_links->ranks()) + " ranks) [sendrecv]");
      }
    }
    sending.done_ns = meeting.start_ns + (me == to ? 0.0 : m_links->run(request).latency_ns);
  }
  m_changed.notify(sc_core::SC_ZERO_TIME);
  wait_for(from, [&] { return receiving.sent && receiving.done_ns >= 0; },
           which + " receives from rank " + std::to_string(from) + ", which finished without a sendrecv sending to "
               "rank " + std::to_string(me) + " on that pipe (the program would hang) [sendrecv]");
  if (receiving.partitions != dst.partitions() || receiving.free_elements != dst.free_elements() ||
      receiving.dtype != dst.dtype) {
    throw isa::IsaError(which + ": its dst is " + std::string(dtype_name(dst.dtype)) + " [" +
                        std::to_string(dst.partitions()) + ", " + std::to_string(dst.free_elements()) + "] but rank " +
                        std::to_string(from) + " sends " + std::string(dtype_name(receiving.dtype)) + " [" +
                        std::to_string(receiving.partitions) + ", " + std::to_string(receiving.free_elements) +
                        "] [sendrecv]");
  }
  if (state && !receiving.values.empty()) {
    state->write(dst, shaped(dst, std::move(receiving.values)), numerics::RoundingMode::nearest_even, nullptr);
  }
  meeting.end_ns = std::max(sending.done_ns, receiving.done_ns);
  return meeting;
}

std::vector<int64_t> CollectiveRendezvous::members_of(uint32_t core, const isa::Instruction& inst) const {
  std::vector<int64_t> members;
  if (inst.opcode == isa::Opcode::collective_permute) {
    const std::vector<int64_t>& pairs = inst.list("pairs");
    for (int64_t rank : pairs) {
      if (std::find(members.begin(), members.end(), rank) == members.end()) members.push_back(rank);
    }
    std::sort(members.begin(), members.end());
    return members;
  }
  members = inst.list("group");
  if (members.empty()) {
    members.assign(m_cores.begin(), m_cores.end());
    return members;
  }
  const size_t size = size_t(inst.scalar("group_size"));
  if (size == 0 || size >= members.size()) return members;
  // The rank-list that holds this core.
  for (size_t first = 0; first < members.size(); first += size) {
    const auto begin = members.begin() + long(first), end = begin + long(size);
    if (std::find(begin, end, int64_t(core)) != end) return std::vector<int64_t>(begin, end);
  }
  return members;  // not in any list: meet() reports it
}

CollectiveRendezvous::Meeting CollectiveRendezvous::meet(uint32_t core, const isa::Instruction& inst,
                                                         double arrival_ns, isa::CoreState* state) {
  const std::vector<int64_t> members = members_of(core, inst);
  const std::string name = inst.spec().name;
  if (std::find(members.begin(), members.end(), int64_t(core)) == members.end()) {
    throw isa::IsaError(name + " on core " + std::to_string(core) + " is over ranks " + list_text(members) +
                        ", which do not include it [collective-group]");
  }
  for (int64_t member : members) {
    if (std::find(m_cores.begin(), m_cores.end(), uint32_t(member)) == m_cores.end()) {
      throw isa::IsaError(name + " is over rank " + std::to_string(member) + ", a core this simulation does not run "
                          "(run the program on every rank of the group) [collective-group]");
    }
  }
  const size_t ordinal = m_joined[{core, members}]++;
  Gathering& g = m_gatherings[{members, ordinal}];
  g.members = members;
  g.arrivals.push_back({core, &inst, state, arrival_ns});
  m_changed.notify(sc_core::SC_ZERO_TIME);
  while (g.arrivals.size() < members.size()) {
    for (int64_t member : members) {
      const size_t slot = size_t(std::find(m_cores.begin(), m_cores.end(), uint32_t(member)) - m_cores.begin());
      const bool arrived = std::any_of(g.arrivals.begin(), g.arrivals.end(),
                                       [&](const Arrival& a) { return a.core == uint32_t(member); });
      if (!arrived && m_finished[slot]) {
        throw isa::IsaError(name + " #" + std::to_string(ordinal + 1) + " over ranks " + list_text(members) +
                            " on core " + std::to_string(core) + " waits for rank " + std::to_string(member) +
                            ", which finished without reaching it (the program would hang) [collective-group]");
      }
    }
    sc_core::wait(m_changed);
  }
  if (!g.done) {
    for (const Arrival& a : g.arrivals) {
      if (a.inst->opcode != inst.opcode || a.inst->tensor("dst").elements() != inst.tensor("dst").elements() ||
          a.inst->tensor("src").elements() != inst.tensor("src").elements() ||
          a.inst->tensor("src").dtype != inst.tensor("src").dtype) {
        throw isa::IsaError(name + " #" + std::to_string(ordinal + 1) + " over ranks " + list_text(members) +
                            " on core " + std::to_string(core) + " meets " + a.inst->spec().name + " of other "
                            "shape or dtype on core " + std::to_string(a.core) + " [collective-group]");
      }
    }
    exchange(g);
    g.meeting = time(g);
    g.done = true;
    m_changed.notify(sc_core::SC_ZERO_TIME);
  }
  return g.meeting;
}

void CollectiveRendezvous::exchange(const Gathering& g) const {
  // In group order (the arrivals come in host order).
  std::vector<const Arrival*> in_order;
  for (int64_t member : g.members) {
    for (const Arrival& a : g.arrivals) {
      if (a.core == uint32_t(member)) in_order.push_back(&a);
    }
  }
  if (std::any_of(in_order.begin(), in_order.end(), [](const Arrival* a) { return a->state == nullptr; })) return;
  const size_t n = in_order.size();
  const isa::Instruction& first = *in_order.front()->inst;
  std::vector<std::vector<float>> sources;
  for (const Arrival* a : in_order) {
    sources.push_back(a->state->read(a->inst->tensor("src")).values);
    // collective_permute with src2: the sender's op(src, src2) is what moves.
    if (a->inst->opcode == isa::Opcode::collective_permute && a->inst->has("src2")) {
      const std::vector<float> second = a->state->read(a->inst->tensor("src2")).values;
      const isa::AluOp op = isa::AluOp(a->inst->scalar("op"));
      std::vector<float>& first = sources.back();
      for (size_t i = 0; i < first.size(); ++i) first[i] = isa::apply_alu(op, first[i], second[i]);
    }
  }
  auto write = [&](const Arrival* a, std::vector<float> values) {
    const isa::AccessPattern& dst = a->inst->tensor("dst");
    a->state->write(dst, shaped(dst, std::move(values)), numerics::RoundingMode::nearest_even, nullptr);
  };
  const size_t e = sources.front().size();
  switch (first.opcode) {
    case isa::Opcode::all_reduce:
    case isa::Opcode::reduce_scatter: {
      const isa::AluOp op = isa::AluOp(first.scalar("op"));
      std::vector<float> total = sources.front();
      for (size_t r = 1; r < n; ++r) {
        for (size_t i = 0; i < e; ++i) total[i] = isa::apply_alu(op, total[i], sources[r][i]);
      }
      if (first.opcode == isa::Opcode::all_reduce) {
        for (const Arrival* a : in_order) write(a, total);
      } else {
        const size_t share = e / n;
        for (size_t r = 0; r < n; ++r) {
          write(in_order[r], std::vector<float>(total.begin() + long(r * share), total.begin() + long((r + 1) * share)));
        }
      }
      break;
    }
    case isa::Opcode::all_gather: {
      std::vector<float> all;
      for (const std::vector<float>& s : sources) all.insert(all.end(), s.begin(), s.end());
      for (const Arrival* a : in_order) write(a, all);
      break;
    }
    case isa::Opcode::all_to_all: {
      const size_t block = e / n;
      for (size_t i = 0; i < n; ++i) {
        std::vector<float> mine;
        for (size_t j = 0; j < n; ++j) {
          mine.insert(mine.end(), sources[j].begin() + long(i * block), sources[j].begin() + long((i + 1) * block));
        }
        write(in_order[i], std::move(mine));
      }
      break;
    }
    case isa::Opcode::all_to_all_v:
    case isa::Opcode::all_gather_v: exchange_variable(in_order, sources); break;
    default: {  // collective_permute
      const std::vector<int64_t>& pairs = first.list("pairs");
      auto index_of = [&](int64_t rank) {
        return size_t(std::find(g.members.begin(), g.members.end(), rank) - g.members.begin());
      };
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) write(in_order[index_of(pairs[i + 1])], sources[index_of(pairs[i])]);
      break;
    }
  }
}

void CollectiveRendezvous::exchange_variable(const std::vector<const Arrival*>& in_order,
                                             const std::vector<std::vector<float>>& sources) const {
  const size_t n = in_order.size();
  const bool gather = in_order.front()->inst->opcode == isa::Opcode::all_gather_v;
  const std::string name = in_order.front()->inst->spec().name;
  // Each member's metadata, row-major [rows, n] (uint32 values, exact in fp32 below 2^24).
  std::vector<std::vector<float>> metadata;
  for (const Arrival* a : in_order) metadata.push_back(a->state->read(a->inst->tensor("metadata")).values);
  auto entry = [&](size_t member, size_t row, size_t column) -> uint64_t {
    const float v = metadata[member].at(row * n + column);
    if (!(v >= 0)) throw isa::IsaError(name + ": metadata row " + std::to_string(row) + " holds " + std::to_string(v) +
                                       " [collective-shape]");
    return uint64_t(v);
  };
  for (size_t j = 0; j < n; ++j) {  // receiver
    const Arrival* receiver = in_order[j];
    const isa::AccessPattern& dst = receiver->inst->tensor("dst");
    std::vector<float> out = receiver->state->read(dst).values;
    const bool rdispls = !gather && receiver->inst->scalar("has_rdispls") != 0;
    const uint64_t slot = out.size() / n;
    for (size_t i = 0; i < n; ++i) {  // sender
      const uint64_t count = gather ? entry(i, 0, 0) : entry(i, 0, j);
      const uint64_t from = gather ? entry(i, 1, 0) : entry(i, 1, j);
      const uint64_t at = rdispls ? entry(j, 3, i) : i * slot;
      const std::string chunk = name + ": member " + std::to_string(i) + "'s " + std::to_string(count) +
                                " elements to member " + std::to_string(j);
      if (from + count > sources[i].size()) {
        throw isa::IsaError(chunk + " from element " + std::to_string(from) + " leave its src of " +
                            std::to_string(sources[i].size()) + " [collective-shape]");
      }
      if (at + count > out.size() || (!rdispls && count > slot)) {
        throw isa::IsaError(chunk + " at element " + std::to_string(at) + " do not fit its dst (" +
                            std::to_string(out.size()) + " elements, slots of " + std::to_string(slot) +
                            ") [collective-shape]");
      }
      std::copy(sources[i].begin() + long(from), sources[i].begin() + long(from + count), out.begin() + long(at));
      if (receiver->inst->scalar("recv_counts_known") == 0) metadata[j][2 * n + i] = float(count);
    }
    receiver->state->write(dst, shaped(dst, std::move(out)), numerics::RoundingMode::nearest_even, nullptr);
  }
  for (size_t j = 0; j < n; ++j) {
    if (in_order[j]->inst->scalar("recv_counts_known") != 0) continue;
    const isa::AccessPattern& ap = in_order[j]->inst->tensor("metadata");
    in_order[j]->state->write(ap, shaped(ap, metadata[j]), numerics::RoundingMode::nearest_even, nullptr);
  }
}

CollectiveRendezvous::Meeting CollectiveRendezvous::time(const Gathering& g) {
  Meeting meeting;
  for (const Arrival& a : g.arrivals) meeting.start_ns = std::max(meeting.start_ns, a.time_ns);
  if (!m_links) m_links = std::make_unique<CollectiveSimulator>(m_config, m_system, links_ranks_per_chip());
  const isa::Instruction& inst = *g.arrivals.front().inst;
  CollectiveRequest request;
  request.op = op_of(inst.opcode);
  // nccl-tests' sizes: all_gather's output, reduce_scatter's input, otherwise what each rank sends.
  const bool gathers = inst.opcode == isa::Opcode::all_gather || inst.opcode == isa::Opcode::all_gather_v;
  const isa::AccessPattern& sized = gathers ? inst.tensor("dst") : inst.tensor("src");
  request.bytes = sized.elements() * dtype_size_bytes(sized.dtype);
  request.start_ns = meeting.start_ns;
  for (int64_t member : g.members) {
    if (uint32_t(member) >= m_links->ranks()) {
      throw isa::IsaError(std::string(inst.spec().name) + ": rank " + std::to_string(member) + " is not in system " +
                          m_system + " (" + std::to_string(m_links->ranks()) + " ranks) [collective-group]");
    }
    request.ranks.push_back(uint32_t(member));
  }
  if (inst.opcode == isa::Opcode::collective_permute) request.pairs = inst.list("pairs");
  meeting.end_ns = meeting.start_ns + m_links->run(request).latency_ns;
  return meeting;
}

uint32_t CollectiveRendezvous::links_ranks_per_chip() const {
  const SystemConfig& system = m_config.systems.at(m_system);
  return m_ranks_per_chip ? m_ranks_per_chip : (system.chips > 1 ? 1u : std::max(1u, m_config.chip.physical_cores));
}

void CollectiveRendezvous::finished(uint32_t core) {
  auto it = std::find(m_cores.begin(), m_cores.end(), core);
  if (it == m_cores.end()) return;
  m_finished[size_t(it - m_cores.begin())] = true;
  m_changed.notify(sc_core::SC_ZERO_TIME);
}

}  // namespace trnsim::sim
