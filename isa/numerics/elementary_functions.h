// exp, erf and tanh of fp32 arguments for the interpreter's activation functions. Each is evaluated in double with
// polynomials accurate to ~5e-15 (isa/numerics/elementary_coefficients.h), then rounded once to fp32: the result is
// the correctly rounded fp32 value except within ~1e-7 ulp of a rounding boundary (libm's expf, erff and tanhf are
// only within about an ulp). Unlike libm's calls, the loops over a row vectorise.
// Only IEEE adds, multiplies, divisions, compares and bit moves are used, so the same argument gives the same bits at any
// vector width; whoever includes this must compile with -ffp-contract=off (a fused multiply-add would change them).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "isa/numerics/elementary_coefficients.h"

namespace trnsim::isa::numerics {
namespace detail {

// Written out as straight-line code (a loop here would keep the caller's loop from vectorising).
template <size_t N, size_t... I>
[[gnu::always_inline]] inline double horner(const double (&c)[N], double u, std::index_sequence<I...>) {
  double result = c[N - 1];
  ((result = result * u + c[N - 2 - I]), ...);
  return result;
}

template <size_t N>
[[gnu::always_inline]] inline double horner(const double (&c)[N], double u) {
  return horner(c, u, std::make_index_sequence<N - 1>{});
}

[[gnu::always_inline]] inline uint64_t bits_of(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

[[gnu::always_inline]] inline double double_of(uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// c ? a : b through bit masks. Written as a ?: with a constant operand, GCC splits the loop body into paths (one of
// them folds to a constant) and no longer vectorises it.
[[gnu::always_inline]] inline double select(bool c, double a, double b) {
  const uint64_t mask = uint64_t{0} - uint64_t{c};
  return double_of((bits_of(a) & mask) | (bits_of(b) & ~mask));
}

}  // namespace detail

// e^x for x in [-104, 89] (beyond it an fp32 result is 0 or inf; NaN stays NaN): x = k ln2 + r with |r| <= ln2/2,
// e^x = 2^k e^r, 2^k built in the exponent field.
[[gnu::always_inline]] inline double exp_of_fp32_range(double x) {
  namespace c = coefficients;
  // Adding 1.5 * 2^52 rounds x / ln2 to the nearest integer k and leaves k in the low bits of the sum.
  constexpr double kShifter = 0x1.8p52;
  constexpr double kLog2e = 0x1.71547652b82fep0;
  const double shifted = x * kLog2e + kShifter;
  const uint64_t k_bits = detail::bits_of(shifted);
  const double k = shifted - kShifter;
  const double r = (x - k * c::kLn2High) - k * c::kLn2Low;
  const double two_to_k = detail::double_of((k_bits + 1023) << 52);
  return detail::horner(c::kExpReduced, r * (1.0 / c::kExpReducedHalfWidth)) * two_to_k;
}

[[gnu::always_inline]] inline float exp_fp32(float x) {
  double clamped = x;  // a NaN fails both compares and stays
  clamped = detail::select(clamped < -104.0, -104.0, clamped);
  clamped = detail::select(clamped > 89.0, 89.0, clamped);
  return static_cast<float>(exp_of_fp32_range(clamped));
}

// erf(x): z = |x|; z < 1: z * P(2z^2 - 1); 1 <= z < 4: Q((z - 2.5) / 1.5); beyond, 1 (erf(3.92) already rounds to 1
// in fp32). The sign comes back last, so erf(-0) = -0.
[[gnu::always_inline]] inline float erf_fp32(float x) {
  namespace c = coefficients;
  const double z = x < 0 ? -static_cast<double>(x) : static_cast<double>(x);
  const double small = z * detail::horner(c::kErfSmall, 2.0 * (z * z) - 1.0);
  const double large = detail::horner(c::kErfLarge, (z - 2.5) * (1.0 / 1.5));
  const double magnitude = detail::select(z < 1.0, small, detail::select(z >= 4.0, 1.0, large));  // NaN: `large`, NaN
  return std::copysign(static_cast<float>(magnitude), x);
}

// tanh(x): z = |x|; z < 0.5: z * P(8z^2 - 1); 0.5 <= z: 1 - 2 / (e^(2z) + 1) (no cancellation worth a bit there), z
// clamped at 10 (tanh(9.02) already rounds to 1 in fp32). The sign comes back last, so tanh(-0) = -0.
[[gnu::always_inline]] inline float tanh_fp32(float x) {
  namespace c = coefficients;
  const double z = x < 0 ? -static_cast<double>(x) : static_cast<double>(x);
  const double small = z * detail::horner(c::kTanhSmall, 8.0 * (z * z) - 1.0);
  const double e2z = exp_of_fp32_range(2.0 * detail::select(z > 10.0, 10.0, z));  // a NaN stays NaN
  const double large = 1.0 - 2.0 / (e2z + 1.0);
  return std::copysign(static_cast<float>(detail::select(z < 0.5, small, large)), x);
}

}  // namespace trnsim::isa::numerics
