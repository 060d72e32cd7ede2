// A shared link or memory of fixed bandwidth whose capacity is booked over time: each transfer
// reserves its bytes from its start time on, at most at its own rate, in whatever capacity is
// left, so concurrent requesters (DMA queues, cores on one HBM stack) share the bandwidth.
// Requests may arrive out of time order (each core books in its own program order); older
// capacity is forgotten with forget_before() to keep bookings cheap.
#pragma once

#include <cstdint>
#include <map>

namespace trnsim::sim {

class BandwidthCalendar {
 public:
  explicit BandwidthCalendar(double bytes_per_ns) : m_capacity(bytes_per_ns) {}

  // Books `bytes` starting no earlier than `start_ns`, at most `max_rate` bytes/ns (0 = no cap);
  // returns the time the last byte is through.
  double reserve(double start_ns, double bytes, double max_rate = 0);
  // Drops bookings that end before `time_ns` (no new request will start before it).
  void forget_before(double time_ns);

  double capacity() const { return m_capacity; }
  double booked_bytes() const { return m_booked_bytes; }

 private:
  friend struct BandwidthCalendarTestPeer;  // the tests inspect the booked profile
  using Profile = std::map<double, double>;
  // Merges neighbours of equal rate among the keys [from, to) (rates within rounding count as equal).
  void coalesce(Profile::iterator from, Profile::iterator to);

  double m_capacity;
  double m_booked_bytes = 0;
  // Piecewise-constant used rate: key = segment start time, value = used bytes/ns until the next key.
  Profile m_used;
};

}  // namespace trnsim::sim
