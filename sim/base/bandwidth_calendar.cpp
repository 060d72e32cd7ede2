#include "sim/base/bandwidth_calendar.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace trnsim::sim {

namespace {

// Rates are sums of differences of doubles, so a segment meant to be full can come out a few ulps short
// (or over). Anything within this fraction of the capacity is snapped, so that a "full" segment offers
// exactly zero and no transfer is split into slivers of 1e-17 bytes/ns; equal rates within it coalesce.
constexpr double kRateTolerance = 1e-12;

}  // namespace

double BandwidthCalendar::reserve(double start_ns, double bytes, double max_rate) {
  if (!(bytes > 0) || !(m_capacity > 0)) return start_ns;
  const double rate = max_rate > 0 ? std::min(max_rate, m_capacity) : m_capacity;
  const double snap = m_capacity * kRateTolerance;
  m_booked_bytes += bytes;

  // Invariant: the map is empty or its last segment has used rate 0 and runs to infinity, so the walk
  // below always ends inside the map.
  auto it = m_used.lower_bound(start_ns);
  if (it == m_used.end() || it->first != start_ns) {
    const double used_at_start = it == m_used.begin() ? 0.0 : std::prev(it)->second;
    it = m_used.emplace_hint(it, start_ns, used_at_start);
  }
  const auto first_touched = it;

  double remaining = bytes;
  for (;;) {
    auto next = std::next(it);
    const double t0 = it->first;
    const double t1 = next == m_used.end() ? std::numeric_limits<double>::infinity() : next->first;
    const double headroom = m_capacity - it->second;
    if (headroom > snap) {
      const double available = std::min(rate, headroom);
      const double fits = available * (t1 - t0);  // inf for the open-ended last segment
      double finish = t1;
      bool book = true;
      if (remaining < fits) {
        finish = t0 + remaining / available;
        if (finish <= t0) {
          // The rest is below the resolution of t0 (late in a long run): done at t0, nothing to book.
          finish = t0;
          book = false;
        } else if (finish < t1) {
          m_used.emplace_hint(next, finish, it->second);  // split: the tail keeps its old rate
        } else {
          finish = t1;  // rounding put the end on the boundary; the whole segment is used
        }
        remaining = 0;
      } else {
        remaining -= fits;
      }
      if (book) {
        it->second += available;
        if (it->second > m_capacity - snap) it->second = m_capacity;
      }
      // Done, or only a rounding residue of the bytes is left: that must not open a sliver segment.
      if (remaining <= bytes * kRateTolerance) {
        // Coalesce the touched range: from the segment before the start (it may now equal the first
        // touched one) to the one after the finish (the finish boundary may now separate equal rates).
        auto from = first_touched == m_used.begin() ? first_touched : std::prev(first_touched);
        auto last = m_used.upper_bound(finish);
        coalesce(from, last == m_used.end() ? last : std::next(last));
        return finish;
      }
    }
    it = next;
  }
}

void BandwidthCalendar::coalesce(Profile::iterator from, Profile::iterator to) {
  const double snap = m_capacity * kRateTolerance;
  // The rate before the first key is implicitly 0, so a leading zero-rate key is redundant too.
  double previous = from == m_used.begin() ? 0.0 : std::prev(from)->second;
  for (auto it = from; it != to;) {
    if (std::abs(it->second - previous) <= snap) {
      it = m_used.erase(it);
    } else {
      previous = it->second;
      ++it;
    }
  }
}

void BandwidthCalendar::forget_before(double time_ns) {
  // Keep the segment that contains time_ns (the last key <= time_ns); everything before it ends by then.
  auto containing = m_used.upper_bound(time_ns);
  if (containing == m_used.begin()) return;
  --containing;
  m_used.erase(m_used.begin(), containing);
  // A leading zero-rate segment says nothing the implicit zero before the first key doesn't.
  if (!m_used.empty() && m_used.begin()->second == 0) m_used.erase(m_used.begin());
}

}  // namespace trnsim::sim
