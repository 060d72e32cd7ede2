#include "sim/chip/core_barrier.h"

#include <algorithm>

#include "isa/isa_error.h"

namespace trnsim::sim {
namespace {

std::string list_text(const std::vector<int64_t>& cores) {
  std::string text = "[";
  for (size_t i = 0; i < cores.size(); ++i) text += (i ? ", " : "") + std::to_string(cores[i]);
  return text + "]";
}

}  // namespace

CoreBarrier::CoreBarrier(std::vector<uint32_t> cores)
    : m_cores(std::move(cores)), m_arrivals(m_cores.size()), m_finished(m_cores.size(), false) {}

size_t CoreBarrier::slot_of(uint32_t core) const {
  auto it = std::find(m_cores.begin(), m_cores.end(), core);
  return it == m_cores.end() ? std::string::npos : size_t(it - m_cores.begin());
}

double CoreBarrier::meet(uint32_t core, const std::vector<int64_t>& members, double arrival_ns) {
  const size_t me = slot_of(core);
  if (std::find(members.begin(), members.end(), int64_t(core)) == members.end()) {
    throw isa::IsaError("core " + std::to_string(core) + " is not one of the cores " + list_text(members) +
                        " it meets [core-barrier]");
  }
  for (int64_t member : members) {
    if (slot_of(uint32_t(member)) == std::string::npos) {
      throw isa::IsaError("meets core " + std::to_string(member) + ", which this simulation does not run (run the "
                          "kernel on every core it lists, e.g. an LNC=2 launch kernel[2]) [core-barrier]");
    }
  }
  const size_t ordinal = m_arrivals[me].size();
  m_arrivals[me].push_back({arrival_ns, members});
  m_changed.notify(sc_core::SC_ZERO_TIME);
  double meeting_ns = arrival_ns;
  for (int64_t member : members) {
    const size_t other = slot_of(uint32_t(member));
    while (m_arrivals[other].size() <= ordinal) {
      if (m_finished[other]) {
        throw isa::IsaError("core_barrier #" + std::to_string(ordinal + 1) + " of core " + std::to_string(core) +
                            " waits for core " + std::to_string(member) + ", which reached only " +
                            std::to_string(m_arrivals[other].size()) + " core_barrier(s) (the program would hang) "
                            "[core-barrier]");
      }
      sc_core::wait(m_changed);
    }
    const Arrival& theirs = m_arrivals[other][ordinal];
    if (theirs.members != members) {
      throw isa::IsaError("core_barrier #" + std::to_string(ordinal + 1) + " of core " + std::to_string(core) +
                          " meets cores " + list_text(members) + " but core " + std::to_string(member) +
                          "'s meets " + list_text(theirs.members) + " [core-barrier]");
    }
    meeting_ns = std::max(meeting_ns, theirs.time_ns);
  }
  return meeting_ns;
}

void CoreBarrier::finished(uint32_t core) {
  const size_t me = slot_of(core);
  if (me == std::string::npos) return;
  m_finished[me] = true;
  m_changed.notify(sc_core::SC_ZERO_TIME);
}

}  // namespace trnsim::sim
