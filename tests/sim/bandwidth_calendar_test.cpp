// BandwidthCalendar: closed-form cases, out-of-order bookings, forget_before, and a randomized check
// of the booked profile (capacity never exceeded, bytes conserved) against a discretized brute force.
#include "sim/base/bandwidth_calendar.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace trnsim::sim {

// Friend of BandwidthCalendar: read access to the booked rate profile.
struct BandwidthCalendarTestPeer {
  static const std::map<double, double>& profile(const BandwidthCalendar& c) { return c.m_used; }
};

namespace {

TEST(BandwidthCalendar, SingleTransferRunsAtCapacityOrItsCap) {
  BandwidthCalendar c(10.0);  // 10 bytes/ns
  EXPECT_DOUBLE_EQ(c.reserve(100, 1000), 200);
  BandwidthCalendar capped(10.0);
  EXPECT_DOUBLE_EQ(capped.reserve(100, 1000, 4.0), 350);
  BandwidthCalendar over(10.0);  // a cap above the capacity is the capacity
  EXPECT_DOUBLE_EQ(over.reserve(0, 1000, 25.0), 100);
  EXPECT_DOUBLE_EQ(c.booked_bytes(), 1000);
  EXPECT_DOUBLE_EQ(c.capacity(), 10.0);
}

TEST(BandwidthCalendar, SimultaneousUncappedTransfersShareTheCapacity) {
  // Bookings are first come, first served: the first transfer takes the whole link, the second the
  // capacity left, so together they take exactly as long as if they had split it (both done by 2x).
  BandwidthCalendar c(10.0);
  EXPECT_DOUBLE_EQ(c.reserve(0, 1000), 100);
  EXPECT_DOUBLE_EQ(c.reserve(0, 1000), 200);
  // Each capped at half the capacity, they run side by side and both finish at 2x.
  BandwidthCalendar half(10.0);
  EXPECT_DOUBLE_EQ(half.reserve(0, 1000, 5.0), 200);
  EXPECT_DOUBLE_EQ(half.reserve(0, 1000, 5.0), 200);
  // A third one then waits for the link to free up.
  EXPECT_DOUBLE_EQ(half.reserve(0, 1000), 300);
}

TEST(BandwidthCalendar, CappedTransferLeavesTheRestForAnother) {
  BandwidthCalendar c(10.0);
  EXPECT_DOUBLE_EQ(c.reserve(0, 400, 4.0), 100);  // 4 bytes/ns for 100 ns
  EXPECT_DOUBLE_EQ(c.reserve(0, 600), 100);       // the other 6 bytes/ns alongside
  EXPECT_DOUBLE_EQ(c.reserve(0, 100), 110);       // nothing left before 100
  // A transfer starting in the middle of a capped one gets the remainder, then the full link.
  BandwidthCalendar d(10.0);
  EXPECT_DOUBLE_EQ(d.reserve(0, 800, 8.0), 100);
  EXPECT_DOUBLE_EQ(d.reserve(50, 200), 110);  // 2 bytes/ns for 50 ns = 100, then 10 bytes/ns for 10 ns
}

TEST(BandwidthCalendar, OutOfOrderBookingFillsTheGapLeftEarlier) {
  BandwidthCalendar c(10.0);
  EXPECT_DOUBLE_EQ(c.reserve(100, 1000), 200);  // books [100, 200) fully
  EXPECT_DOUBLE_EQ(c.reserve(0, 500), 50);      // fits before it
  EXPECT_DOUBLE_EQ(c.reserve(0, 1000), 250);    // [50, 100) = 500 bytes, blocked to 200, then 500 more
  EXPECT_DOUBLE_EQ(c.reserve(0, 10), 251);
  // Equal adjacent segments were coalesced: full from 0 to 251, then free.
  const auto& profile = BandwidthCalendarTestPeer::profile(c);
  ASSERT_EQ(profile.size(), 2u);
  EXPECT_EQ(profile.begin()->first, 0);
  EXPECT_EQ(profile.begin()->second, 10.0);
  EXPECT_EQ(profile.rbegin()->first, 251);
  EXPECT_EQ(profile.rbegin()->second, 0);
}

TEST(BandwidthCalendar, ZeroBytesCompleteAtTheirStart) {
  BandwidthCalendar c(10.0);
  EXPECT_EQ(c.reserve(42, 0), 42);
  EXPECT_EQ(c.reserve(42, 0, 3.0), 42);
  EXPECT_EQ(c.booked_bytes(), 0);
  EXPECT_TRUE(BandwidthCalendarTestPeer::profile(c).empty());
  c.reserve(0, 1000);
  EXPECT_EQ(c.reserve(50, 0), 50);  // even inside a fully booked stretch
  // Bytes too few to move the clock at its magnitude (1e-7 ns at 1e12 ns) finish at once, booking nothing.
  BandwidthCalendar late(10.0);
  EXPECT_EQ(late.reserve(1e12, 1e-6), 1e12);
  EXPECT_TRUE(BandwidthCalendarTestPeer::profile(late).size() <= 1);
  EXPECT_EQ(late.reserve(1e12, 1000), 1e12 + 100);
}

TEST(BandwidthCalendar, ForgetBeforeKeepsLaterBookingsIdentical) {
  std::mt19937_64 rng(7);
  BandwidthCalendar keep(16.0), forget(16.0);
  size_t max_forget_size = 0, max_keep_size = 0;
  double clock = 0;
  for (int i = 0; i < 20000; ++i) {
    // Mostly increasing starts with some jitter back in time, like per-core program order.
    clock += std::uniform_real_distribution<double>(0, 40)(rng);
    const double start = clock - std::uniform_real_distribution<double>(0, 100)(rng);
    const double bytes = std::uniform_real_distribution<double>(1, 512)(rng);  // ~80% load
    const double cap = (rng() % 4 == 0) ? 0.0 : std::uniform_real_distribution<double>(1, 16)(rng);
    ASSERT_EQ(keep.reserve(start, bytes, cap), forget.reserve(start, bytes, cap)) << "booking " << i;
    if (i % 64 == 0) forget.forget_before(clock - 100);  // no later start is earlier than this
    max_forget_size = std::max(max_forget_size, BandwidthCalendarTestPeer::profile(forget).size());
    max_keep_size = std::max(max_keep_size, BandwidthCalendarTestPeer::profile(keep).size());
  }
  EXPECT_LT(max_forget_size, 1000u);
  EXPECT_GT(max_keep_size, 4 * max_forget_size);
  forget.forget_before(1e18);
  EXPECT_TRUE(BandwidthCalendarTestPeer::profile(forget).empty());
}

// The same first-come-first-served fill on a grid of dt-wide slots, each holding capacity*dt bytes;
// a transfer takes min(its cap, what is left) of every slot from its start on. Exact only up to the
// slot in which transfers end, so finish times agree within a few slots.
class DiscreteCalendar {
 public:
  DiscreteCalendar(double capacity, double dt, size_t slots) : m_capacity(capacity), m_dt(dt), m_used(slots, 0) {}
  double reserve(double start, double bytes, double cap) {
    const double rate = cap > 0 ? std::min(cap, m_capacity) : m_capacity;
    double remaining = bytes;
    for (size_t k = size_t(std::llround(start / m_dt));; ++k) {
      if (k >= m_used.size()) m_used.resize(2 * k, 0);
      const double take = std::min(rate * m_dt, m_capacity * m_dt - m_used[k]);
      if (take <= 0) continue;
      if (remaining <= take) {
        m_used[k] += remaining;
        return (double(k) + remaining / take) * m_dt;
      }
      m_used[k] += take;
      remaining -= take;
    }
  }

 private:
  double m_capacity, m_dt;
  std::vector<double> m_used;
};

TEST(BandwidthCalendar, RandomizedProfileMatchesDiscretizedBruteForce) {
  constexpr double kCapacity = 12.0, kDt = 1.0 / 32;
  std::mt19937_64 rng(2024);
  double worst_error = 0;
  for (int round = 0; round < 10; ++round) {
    BandwidthCalendar c(kCapacity);
    DiscreteCalendar brute(kCapacity, kDt, 1 << 16);
    const double caps[] = {0, 1, 2, 3, 4, 6, 12, 24};
    double total = 0, max_error = 0;
    for (int i = 0; i < 300; ++i) {
      const double start = double(rng() % 4000);  // on the grid, in any order; ~90% load overall
      const double bytes = double(1 + rng() % 1200);
      const double cap = caps[rng() % 8];
      const double finish = c.reserve(start, bytes, cap);
      const double rate = cap > 0 ? std::min(cap, kCapacity) : kCapacity;
      ASSERT_GE(finish, start + bytes / rate * (1 - 1e-12)) << "faster than its cap, booking " << i;
      max_error = std::max(max_error, std::abs(finish - brute.reserve(start, bytes, cap)));
      total += bytes;
    }
    // A wrong fill order or rate would be off by whole transfers (tens of ns); slot rounding stays within a few slots.
    EXPECT_LT(max_error, 16 * kDt) << "round " << round;
    worst_error = std::max(worst_error, max_error);

    // The exact profile: within [0, capacity] everywhere, ends free, holds exactly the booked bytes.
    const auto& profile = BandwidthCalendarTestPeer::profile(c);
    ASSERT_FALSE(profile.empty());
    double integral = 0, previous_rate = -1;
    for (auto it = profile.begin(); it != profile.end(); ++it) {
      EXPECT_GE(it->second, 0);
      EXPECT_LE(it->second, kCapacity);
      EXPECT_NE(it->second, previous_rate) << "adjacent equal segments not coalesced at " << it->first;
      previous_rate = it->second;
      auto next = std::next(it);
      if (next != profile.end()) integral += it->second * (next->first - it->first);
    }
    EXPECT_EQ(profile.rbegin()->second, 0);
    EXPECT_NEAR(integral, total, total * 1e-9);
    EXPECT_DOUBLE_EQ(c.booked_bytes(), total);
  }
  std::printf("[ info     ] largest finish-time difference to the 1/32 ns brute force: %.4f ns\n", worst_error);
}

TEST(BandwidthCalendar, ThroughputOfAMillionMostlyIncreasingReservations) {
  // 16 DMA queues on one HBM stack, each issuing 64 KiB transfers capped at a quarter of the stack,
  // each core's clock a little behind or ahead of the others; old capacity is forgotten as it passes.
  constexpr int kQueues = 16, kTransfers = 1000000;
  BandwidthCalendar c(400.0);
  std::mt19937_64 rng(1);
  std::vector<double> queue_time(kQueues, 0);
  size_t max_size = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kTransfers; ++i) {
    const int q = int(rng() % kQueues);
    queue_time[q] = c.reserve(queue_time[q] + double(rng() % 64), 65536, 100.0);
    if (i % 256 == 0) {
      c.forget_before(*std::min_element(queue_time.begin(), queue_time.end()));
      max_size = std::max(max_size, BandwidthCalendarTestPeer::profile(c).size());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ perf     ] BandwidthCalendar: %.2f M reservations/s (%d in %.3f s, profile <= %zu segments)\n",
              kTransfers / seconds / 1e6, kTransfers, seconds, max_size);
  EXPECT_DOUBLE_EQ(c.booked_bytes(), 65536.0 * kTransfers);
}

}  // namespace
}  // namespace trnsim::sim
