#include "isa/rng.h"

namespace trnsim::isa {
namespace {

// Marsaglia 2003: the Weyl sequence increment of xorwow.
constexpr uint32_t kXorwowWeyl = 362437;

// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): spreads a seed
// over the state words.
uint64_t splitmix64(uint64_t& x) {
  x += 0x9E3779B97F4A7C15ull;
  uint64_t z = x;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

uint32_t XorwowState::next() {
  uint32_t t = words[4];
  const uint32_t s = words[0];
  words[4] = words[3];
  words[3] = words[2];
  words[2] = words[1];
  words[1] = s;
  t ^= t >> 2;
  t ^= t << 1;
  t ^= s ^ (s << 4);
  words[0] = t;
  words[5] += kXorwowWeyl;
  return t + words[5];
}

XorwowState seed_xorwow(uint32_t seed, uint32_t stream) {
  uint64_t x = (uint64_t{seed} << 32) | stream;
  XorwowState state;
  for (uint32_t i = 0; i + 1 < kXorwowWords; i += 2) {
    uint64_t z = splitmix64(x);
    state.words[i] = static_cast<uint32_t>(z);
    state.words[i + 1] = static_cast<uint32_t>(z >> 32);
  }
  // Five xorshift words must not all be zero (the xorshift part would stay zero); SplitMix64 of distinct inputs
  // makes that vanishingly unlikely, and a fixed word rules it out.
  if ((state.words[0] | state.words[1] | state.words[2] | state.words[3] | state.words[4]) == 0) state.words[0] = 1;
  return state;
}

}  // namespace trnsim::isa
