// Element conversions between fp32 and every storage dtype, with the hardware's rounding (trainium.md §1.1, §4.3):
// Vector/Scalar/GpSimd/DMA compute in fp32 and cast on the way in and out, TensorE accumulates in fp32, and a write
// to a narrower dtype rounds to nearest even (default) or stochastically.
//
// Contract: every function is pure and thread-safe (the only shared data are const tables built once); nothing here
// reads or changes the host's floating-point environment, which must stay at its default (round to nearest).
//
// Behaviour on special values, per destination (the choices the hardware docs leave open are marked "assumed"):
//   fp32       identity.
//   tf32       32-bit storage, mantissa rounded to 10 bits; fp32's exponent range, overflow -> inf (IEEE).
//   bf16/fp16  IEEE: overflow -> inf, subnormals kept, NaN -> canonical quiet NaN with the input's sign.
//   fp8_e4m3 / fp8_e5m2 / fp8_e3m4 (IEEE-like, have inf):
//              saturate_fp8 (default, NKI's documented cast behaviour): finite overflow and +-inf -> +-max finite.
//              !saturate_fp8: IEEE overflow -> +-inf, inf -> inf.  NaN -> the format's quiet NaN in both modes.
//   fp8_e4m3fn (no inf, NaN = S.1111.111): saturating: overflow and +-inf -> +-448; non-saturating: -> NaN (as
//              ml_dtypes/torch do, since there is no inf to return).  NaN -> NaN.
//   fp8_e8m0   (unsigned 2^(code-127), no zero, 0xFF = NaN): a tie between 2^k and 2^(k+1) rounds up (no mantissa
//              bit to be even, the implicit bit acts as the LSB; ml_dtypes does the same). Positive values below
//              2^-127 -> code 0 (the nearest value, as there is no zero). Zero, negatives: saturating -> code 0 (the
//              lowest value), non-saturating -> NaN. Overflow and +inf: saturating -> 0xFE, else NaN. NaN -> NaN.
//   mxfp8_e4m3 / mxfp8_e5m2: element codecs of e4m3fn / e5m2, same rules.
//   mxfp4_e2m1 values +-{0, .5, 1, 1.5, 2, 3, 4, 6}; always saturates (no inf/NaN codes), NaN -> +0 (assumed).
//   integers   round to nearest even (stochastic: floor(x + u)), saturate to the range, NaN -> 0 (assumed: the
//              hardware docs do not spell out float->int casts; this is the usual saturating-convert behaviour).
//
// MX x4 types: the codecs here handle ONE unpacked element stored in one byte (the fp4 code in the low nibble);
// packing four elements per slot and applying the E8M0 block scale belong to the MX instructions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "config/dtype.h"

namespace trnsim::numerics {

enum class RoundingMode : uint8_t { nearest_even, stochastic };

// Deterministic source of random bits for stochastic rounding (splitmix64). Each engine/instruction owns its own,
// seeded explicitly, so a simulation is reproducible and there is no global state.
class StochasticSource {
 public:
  explicit StochasticSource(uint64_t seed) : m_state(seed) {}
  uint64_t next_u64() {
    uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t next_u32() { return static_cast<uint32_t>(next_u64() >> 32); }

 private:
  uint64_t m_state;
};

// Bytes of one element as these codecs read and write it: dtype_size_bytes(), except 1 for the MX x4 types, whose
// elements are handled unpacked (see above).
uint32_t element_bytes(DType dtype);

// One element. `random_bits` is used only by RoundingMode::stochastic: it is a uniform 32-bit value whose top bits
// are added below the kept mantissa (for integers: u = random_bits / 2^32 in floor(x + u)).
float decode(DType dtype, const void* element);
void encode(DType dtype, float value, void* element, RoundingMode mode = RoundingMode::nearest_even,
            uint32_t random_bits = 0, bool saturate_fp8 = true);

// decode(encode(value)): what an engine's fp32 result becomes once written as `dtype`.
float round_to(DType dtype, float value, RoundingMode mode = RoundingMode::nearest_even, uint32_t random_bits = 0,
               bool saturate_fp8 = true);

// Bulk forms; `count` elements of element_bytes(dtype) each, packed. Stochastic rounding needs `rng` (one draw per
// element, in element order, so results depend only on the seed); throws std::invalid_argument without it.
void convert_to_fp32(DType src, const void* src_data, float* dst, size_t count);
void convert_from_fp32(DType dst, const float* src, void* dst_data, size_t count,
                       RoundingMode mode = RoundingMode::nearest_even, StochasticSource* rng = nullptr,
                       bool saturate_fp8 = true);

bool dtype_has_inf(DType dtype);
bool dtype_has_nan(DType dtype);
// Largest finite value (for integers: the maximum, as the nearest float, e.g. 2^31 for int32).
float dtype_max_finite(DType dtype);

// Raw bit casts, exposed because the interpreter and the tests need them too.
inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float bits_float(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace trnsim::numerics
