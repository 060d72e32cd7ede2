// The engines' pseudo-random number generators, as the ISA exposes them (nki.isa rng, rand2, dropout,
// set_rng_seed, rand_set_state, rand_get_state; ../shared/reference/trainium.md §2.2, §5.2).
//
// Generator: Marsaglia's XORWOW ("Xorshift RNGs", J. Stat. Software 8(14), 2003), the algorithm A-V4 names for the
// NC-v4 Vector engine: five xorshift words and a Weyl counter. A state is six uint32 in the order
// x0, x1, x2, x3, x4, counter (assumed: ISA rand_set_state gives the count, 6, not the order). The NC-v2/v3 Vector
// engines use an LFSR whose taps are not published (A-V4): trnsim runs XORWOW there too, so their values are
// reproducible but are not the hardware's bits.
//
// Layout of the states (ISA rand_set_state / rand_get_state, A-V4): one state per compute lane on GpSimd, four per
// lane on the Vector engine. Lane = absolute partition. On the Vector engine element i of a partition's row (in
// row-major order of the free dims) is drawn from the lane's state i % 4 (assumed: the docs say four states keep
// the 4-values-per-cycle rate, not how elements map to them).
//
// Seeding (set_rng_seed, and every core's state before its first instruction): state words from SplitMix64 of the
// seed and the state's index (assumed; the hardware's seeding function and reset state are not published), with
// kDefaultRngSeed as the reset seed, so the same program gives bit-identical random numbers every run.
#pragma once

#include <array>
#include <cstdint>

namespace trnsim::isa {

constexpr uint32_t kXorwowWords = 6;              // ISA rand_set_state: 6 uint32 per XORWOW state
constexpr uint32_t kVectorRngStatesPerLane = 4;   // A-V4: four XORWOW states per Vector lane (24 uint32)
constexpr uint32_t kGpSimdRngStatesPerLane = 1;   // ISA rand_set_state: 6 elements per GpSimd lane
constexpr uint32_t kDefaultRngSeed = 0x5eed;      // assumed: the reset seed of every engine's generator

struct XorwowState {
  std::array<uint32_t, kXorwowWords> words{};
  // The next 32 random bits (Marsaglia's xorwow step).
  uint32_t next();
};

// The state `stream` (a lane's state index, see above) of a generator seeded with `seed`.
XorwowState seed_xorwow(uint32_t seed, uint32_t stream);

// A draw as a uniform fp32-exact value in [0, 1): the top 24 bits times 2^-24.
inline double unit_interval(uint32_t bits) { return double(bits >> 8) * (1.0 / 16777216.0); }

}  // namespace trnsim::isa
