#include "isa/numerics/float_format.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

namespace trnsim::numerics {

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Small float formats ("minifloats"), described by compile-time traits so that each bulk loop is specialised.
// Codes are magnitude codes; the sign bit (if any) sits just above them.
//   kMinExp:      unbiased exponent of the smallest normal value (e8m0: code 0 = 2^-127 is its smallest value).
//   kMinExpCode:  exponent field of that value: 1, or 0 for e8m0, which has no subnormals and no zero.
//   kMaxCode:     magnitude code of the largest finite value.
//   kOverflowCode: what a non-saturating overflow produces (inf, or NaN where the format has no inf).
//   kNanCode:     the quiet NaN produced for a NaN input.
// ---------------------------------------------------------------------------------------------------------------
template <typename StorageT, int kCodeBits_, int kManBits_, int kMinExp_, int kMinExpCode_, uint32_t kMaxCode_,
          uint32_t kOverflowCode_, uint32_t kNanCode_, bool kSigned_, bool kHasNan_, bool kAlwaysSaturate_,
          bool kSaturateFlagApplies_>
struct MiniFormat {
  using Storage = StorageT;
  static constexpr int kBits = kCodeBits_;  // the sign bit is the top one of these (e2m1: bit 3)
  static constexpr int kManBits = kManBits_;
  static constexpr int kMinExp = kMinExp_;
  static constexpr int kMinExpCode = kMinExpCode_;
  static constexpr uint32_t kMaxCode = kMaxCode_;
  static constexpr uint32_t kOverflowCode = kOverflowCode_;
  static constexpr uint32_t kNanCode = kNanCode_;
  static constexpr bool kSigned = kSigned_;
  static constexpr bool kHasNan = kHasNan_;
  static constexpr bool kAlwaysSaturate = kAlwaysSaturate_;            // no inf and no NaN to overflow to
  static constexpr bool kSaturateFlagApplies = kSaturateFlagApplies_;  // fp8 family only
  static constexpr uint32_t kSignBit = kSigned ? 1u << (kBits - 1) : 0u;
};

//                     storage  bits M  min_exp e0 max  overflow nan  signed nan   always_sat flag
using E4M3 = MiniFormat<uint8_t, 8, 3, -6, 1, 0x77, 0x78, 0x7C, true, true, false, true>;      // max 240, inf 0x78
using E4M3FN = MiniFormat<uint8_t, 8, 3, -6, 1, 0x7E, 0x7F, 0x7F, true, true, false, true>;    // max 448, NaN 0x7F
using E5M2 = MiniFormat<uint8_t, 8, 2, -14, 1, 0x7B, 0x7C, 0x7E, true, true, false, true>;     // max 57344
using E3M4 = MiniFormat<uint8_t, 8, 4, -2, 1, 0x6F, 0x70, 0x78, true, true, false, true>;      // max 15.5
using E8M0 = MiniFormat<uint8_t, 8, 0, -127, 0, 0xFE, 0xFF, 0xFF, false, true, false, true>;   // 2^-127 .. 2^127
using E2M1 = MiniFormat<uint8_t, 4, 1, 0, 1, 0x7, 0x7, 0x0, true, false, true, false>;         // max 6, NaN -> +0
using FP16 = MiniFormat<uint16_t, 16, 10, -14, 1, 0x7BFF, 0x7C00, 0x7E00, true, true, false, false>;

// Rounds |fp32| (bits) into format F. `stochastic` adds random bits below the kept mantissa and truncates; otherwise
// round to nearest, ties to even (for e8m0 the implicit bit is the LSB, so ties round up).
template <typename F>
inline uint32_t encode_mini(uint32_t bits, bool stochastic, uint32_t random_bits, bool saturate) {
  const uint32_t sign = (bits >> 31) ? F::kSignBit : 0u;
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  const bool saturating = F::kAlwaysSaturate || (saturate && F::kSaturateFlagApplies);
  const uint32_t overflow_code = saturating ? F::kMaxCode : F::kOverflowCode;
  if (abs_bits > 0x7F800000u) return F::kHasNan ? (sign | F::kNanCode) : 0u;
  if constexpr (!F::kSigned) {
    // Zero and negatives have no code: the lowest value when clamping, NaN otherwise (ml_dtypes does the same).
    if ((bits >> 31) || abs_bits == 0) return saturating ? 0u : F::kNanCode;
  }
  if (abs_bits == 0x7F800000u) return sign | overflow_code;
  if (abs_bits == 0) return sign;

  int exp = static_cast<int>(abs_bits >> 23) - 127;
  uint64_t mant = abs_bits & 0x7FFFFFu;
  if (exp == -127) {  // fp32 subnormal: normalise so the implicit bit is at bit 23 for every input
    exp = -126;
    while (!(mant & 0x800000u)) {
      mant <<= 1;
      --exp;
    }
  } else {
    mant |= 0x800000u;
  }
  if constexpr (F::kMinExpCode == 0) {
    if (exp < F::kMinExp) return sign;  // below the smallest value of a zero-less format: that value is nearest
  }

  int shift = (23 - F::kManBits) + (exp < F::kMinExp ? F::kMinExp - exp : 0);
  // A 24-bit mantissa shifted by >= 56 rounds to zero either way (SR uses only 32 random bits).
  if (shift >= 56) return sign;
  const uint64_t drop_mask = (uint64_t{1} << shift) - 1;
  uint64_t kept = mant >> shift;
  const uint64_t rem = mant & drop_mask;
  if (stochastic) {
    const uint64_t r = shift <= 32 ? (random_bits >> (32 - shift)) : (uint64_t{random_bits} << (shift - 32));
    kept += (rem + r) >> shift;
  } else {
    // Branch-free RNE: the carry out of rem + (half - 1) + lsb is 1 above half, and at exactly half when odd.
    kept += (rem + ((uint64_t{1} << (shift - 1)) - 1) + (kept & 1)) >> shift;
  }
  // Normal results: the implicit bit in `kept` adds the last 1 to the exponent field, and a rounding carry
  // propagates into the exponent, as in the usual bit-level formulation.
  const int64_t code = exp >= F::kMinExp
                           ? static_cast<int64_t>(exp - F::kMinExp + F::kMinExpCode - 1) * (int64_t{1} << F::kManBits) +
                                 static_cast<int64_t>(kept)  // multiply: the field is -1 for e8m0's code 0
                           : static_cast<int64_t>(kept);
  if (code > static_cast<int64_t>(F::kMaxCode)) return sign | overflow_code;
  return sign | static_cast<uint32_t>(code);
}

// Value of a code of format F; the formula mirrors encode_mini's layout.
template <typename F>
float decode_mini(uint32_t code) {
  const bool negative = F::kSigned && (code & F::kSignBit);
  const uint32_t mag = code & (F::kSignBit ? F::kSignBit - 1 : 0xFFu);
  const float sign = negative ? -1.0f : 1.0f;
  if constexpr (F::kHasNan) {
    if constexpr (F::kOverflowCode == F::kNanCode) {  // "fn" formats: one NaN code, no inf
      if (mag == F::kNanCode) return std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
    } else {  // IEEE-like: the code above max finite is inf, all codes above it are NaN
      if (mag > F::kOverflowCode) return std::copysign(std::numeric_limits<float>::quiet_NaN(), sign);
      if (mag == F::kOverflowCode) return sign * std::numeric_limits<float>::infinity();
    }
  }
  const uint32_t exp_field = mag >> F::kManBits;
  const uint32_t man_field = mag & ((1u << F::kManBits) - 1);
  if (exp_field < static_cast<uint32_t>(F::kMinExpCode)) {  // subnormal (never for e8m0)
    return sign * std::ldexp(static_cast<float>(man_field), F::kMinExp - F::kManBits);
  }
  const int exp = static_cast<int>(exp_field) - F::kMinExpCode + F::kMinExp;
  return sign * std::ldexp(static_cast<float>(man_field + (1u << F::kManBits)), exp - F::kManBits);
}

struct DecodeTables {
  float e4m3[256], e4m3fn[256], e5m2[256], e3m4[256], e8m0[256], e2m1[256];
  DecodeTables() {
    for (uint32_t c = 0; c < 256; ++c) {
      e4m3[c] = decode_mini<E4M3>(c);
      e4m3fn[c] = decode_mini<E4M3FN>(c);
      e5m2[c] = decode_mini<E5M2>(c);
      e3m4[c] = decode_mini<E3M4>(c);
      e8m0[c] = decode_mini<E8M0>(c);
      e2m1[c] = decode_mini<E2M1>(c & 0xFu);  // only the low nibble holds an e2m1 code
    }
  }
};

const DecodeTables& tables() {
  static const DecodeTables kTables;
  return kTables;
}

const float* table_for(DType dtype) {
  switch (dtype) {
    case DType::fp8_e4m3: return tables().e4m3;
    case DType::fp8_e4m3fn:
    case DType::mxfp8_e4m3: return tables().e4m3fn;
    case DType::fp8_e5m2:
    case DType::mxfp8_e5m2: return tables().e5m2;
    case DType::fp8_e3m4: return tables().e3m4;
    case DType::fp8_e8m0: return tables().e8m0;
    case DType::mxfp4_e2m1: return tables().e2m1;
    default: return nullptr;
  }
}

inline float decode_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24 is exact in fp32
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
    return (h & 0x8000u) ? -mag : mag;
  }
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (man << 13));  // inf, or NaN keeping its payload
  return bits_float(sign | ((exp + 112) << 23) | (man << 13));
}

// bf16 / tf32 are fp32 with a shorter mantissa: round the fp32 bits directly (overflow carries into inf, subnormals
// round correctly because fp32 subnormals share the same bit positions). NaN -> canonical quiet NaN with its sign.
template <int kDropBits>
inline uint32_t round_fp32_bits(uint32_t bits, bool stochastic, uint32_t random_bits) {
  constexpr uint32_t kKeepMask = ~((1u << kDropBits) - 1);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (bits & 0x80000000u) | 0x7FC00000u;
  if (stochastic) return (bits + (random_bits >> (32 - kDropBits))) & kKeepMask;
  return (bits + ((1u << (kDropBits - 1)) - 1) + ((bits >> kDropBits) & 1u)) & kKeepMask;
}

inline uint16_t encode_bf16(float value, bool stochastic, uint32_t random_bits) {
  return static_cast<uint16_t>(round_fp32_bits<16>(float_bits(value), stochastic, random_bits) >> 16);
}

inline uint32_t encode_tf32(float value, bool stochastic, uint32_t random_bits) {
  return round_fp32_bits<13>(float_bits(value), stochastic, random_bits);
}

// Float -> integer: round to nearest even (or floor(x + u) for stochastic), saturate, NaN -> 0 (assumed, see .h).
template <typename Int>
inline Int encode_int(float value, bool stochastic, uint32_t random_bits) {
  constexpr double kMin = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double kMax = static_cast<double>(std::numeric_limits<Int>::max());
  const double x = value;
  if (!(x > kMin)) return std::isnan(x) ? Int{0} : std::numeric_limits<Int>::min();
  if (x >= kMax) return std::numeric_limits<Int>::max();
  double rounded;
  if (stochastic) {
    int64_t floor_x = static_cast<int64_t>(x);  // |x| < 2^32 here, so the int64 is exact
    if (static_cast<double>(floor_x) > x) --floor_x;
    const double frac = x - static_cast<double>(floor_x);  // exact: a float's fraction part fits a double
    rounded = static_cast<double>(floor_x) + (static_cast<double>(random_bits) < frac * 4294967296.0 ? 1.0 : 0.0);
  } else {
    // Adding 1.5 * 2^52 leaves no fraction bits, so the FPU's round-to-nearest-even does the rounding (exact for
    // |x| < 2^51, and the host runs in the default rounding mode, see the header).
    constexpr double kRoundingShift = 6755399441055744.0;
    rounded = (x + kRoundingShift) - kRoundingShift;
  }
  return static_cast<Int>(rounded);  // in range: kMin < x < kMax, and both ends are integers
}

template <typename T>
inline T load(const void* data, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const unsigned char*>(data) + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
inline void store(void* data, size_t index, T value) {
  std::memcpy(static_cast<unsigned char*>(data) + index * sizeof(T), &value, sizeof(T));
}

[[noreturn]] void unknown_dtype(DType dtype) {
  throw std::invalid_argument("numerics: unsupported dtype code " + std::to_string(static_cast<int>(dtype)));
}

// Every encoder behind one signature, so bulk loops are written once and specialised per dtype and rounding mode.
template <typename Storage, typename Fn>
void encode_loop(const float* src, void* dst, size_t count, bool stochastic, StochasticSource* rng, Fn&& fn) {
  if (stochastic) {
    for (size_t i = 0; i < count; ++i) store<Storage>(dst, i, fn(src[i], true, rng->next_u32()));
  } else {
    for (size_t i = 0; i < count; ++i) store<Storage>(dst, i, fn(src[i], false, 0u));
  }
}

template <typename F>
void encode_mini_loop(const float* src, void* dst, size_t count, bool stochastic, StochasticSource* rng,
                      bool saturate) {
  using S = typename F::Storage;
  if (saturate) {
    encode_loop<S>(src, dst, count, stochastic, rng, [](float v, bool sr, uint32_t r) {
      return static_cast<S>(encode_mini<F>(float_bits(v), sr, r, true));
    });
  } else {
    encode_loop<S>(src, dst, count, stochastic, rng, [](float v, bool sr, uint32_t r) {
      return static_cast<S>(encode_mini<F>(float_bits(v), sr, r, false));
    });
  }
}

template <typename Int>
void encode_int_loop(const float* src, void* dst, size_t count, bool stochastic, StochasticSource* rng) {
  encode_loop<Int>(src, dst, count, stochastic, rng,
                   [](float v, bool sr, uint32_t r) { return encode_int<Int>(v, sr, r); });
}

template <typename Int>
void decode_int_loop(const void* src, float* dst, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load<Int>(src, i));
}

}  // namespace

uint32_t element_bytes(DType dtype) {
  switch (dtype) {
    case DType::mxfp8_e4m3:
    case DType::mxfp8_e5m2:
    case DType::mxfp4_e2m1: return 1;
    default: return dtype_size_bytes(dtype);
  }
}

void convert_to_fp32(DType src, const void* src_data, float* dst, size_t count) {
  if (const float* table = table_for(src)) {
    const auto* codes = static_cast<const uint8_t*>(src_data);
    for (size_t i = 0; i < count; ++i) dst[i] = table[codes[i]];
    return;
  }
  switch (src) {
    case DType::fp32:
    case DType::tf32: std::memcpy(dst, src_data, count * sizeof(float)); return;
    case DType::bf16:
      for (size_t i = 0; i < count; ++i) dst[i] = bits_float(static_cast<uint32_t>(load<uint16_t>(src_data, i)) << 16);
      return;
    case DType::fp16:
      for (size_t i = 0; i < count; ++i) dst[i] = decode_fp16(load<uint16_t>(src_data, i));
      return;
    case DType::int32: decode_int_loop<int32_t>(src_data, dst, count); return;
    case DType::int16: decode_int_loop<int16_t>(src_data, dst, count); return;
    case DType::int8: decode_int_loop<int8_t>(src_data, dst, count); return;
    case DType::uint32: decode_int_loop<uint32_t>(src_data, dst, count); return;
    case DType::uint16: decode_int_loop<uint16_t>(src_data, dst, count); return;
    case DType::uint8: decode_int_loop<uint8_t>(src_data, dst, count); return;
    default: unknown_dtype(src);
  }
}

void convert_from_fp32(DType dst, const float* src, void* dst_data, size_t count, RoundingMode mode,
                       StochasticSource* rng, bool saturate_fp8) {
  const bool sr = mode == RoundingMode::stochastic;
  if (sr && rng == nullptr) throw std::invalid_argument("numerics: stochastic rounding needs a StochasticSource");
  switch (dst) {
    case DType::fp32: std::memcpy(dst_data, src, count * sizeof(float)); return;
    case DType::tf32:
      encode_loop<uint32_t>(src, dst_data, count, sr, rng, encode_tf32);
      return;
    case DType::bf16:
      encode_loop<uint16_t>(src, dst_data, count, sr, rng, encode_bf16);
      return;
    case DType::fp16: encode_mini_loop<FP16>(src, dst_data, count, sr, rng, false); return;
    case DType::fp8_e4m3: encode_mini_loop<E4M3>(src, dst_data, count, sr, rng, saturate_fp8); return;
    case DType::fp8_e4m3fn:
    case DType::mxfp8_e4m3: encode_mini_loop<E4M3FN>(src, dst_data, count, sr, rng, saturate_fp8); return;
    case DType::fp8_e5m2:
    case DType::mxfp8_e5m2: encode_mini_loop<E5M2>(src, dst_data, count, sr, rng, saturate_fp8); return;
    case DType::fp8_e3m4: encode_mini_loop<E3M4>(src, dst_data, count, sr, rng, saturate_fp8); return;
    case DType::fp8_e8m0: encode_mini_loop<E8M0>(src, dst_data, count, sr, rng, saturate_fp8); return;
    case DType::mxfp4_e2m1: encode_mini_loop<E2M1>(src, dst_data, count, sr, rng, true); return;
    case DType::int32: encode_int_loop<int32_t>(src, dst_data, count, sr, rng); return;
    case DType::int16: encode_int_loop<int16_t>(src, dst_data, count, sr, rng); return;
    case DType::int8: encode_int_loop<int8_t>(src, dst_data, count, sr, rng); return;
    case DType::uint32: encode_int_loop<uint32_t>(src, dst_data, count, sr, rng); return;
    case DType::uint16: encode_int_loop<uint16_t>(src, dst_data, count, sr, rng); return;
    case DType::uint8: encode_int_loop<uint8_t>(src, dst_data, count, sr, rng); return;
  }
  unknown_dtype(dst);
}

float decode(DType dtype, const void* element) {
  float value;
  convert_to_fp32(dtype, element, &value, 1);
  return value;
}

void encode(DType dtype, float value, void* element, RoundingMode mode, uint32_t random_bits, bool saturate_fp8) {
  const bool sr = mode == RoundingMode::stochastic;
  const uint32_t r = sr ? random_bits : 0u;
  const uint32_t bits = float_bits(value);
  auto mini = [&](auto format_tag, bool saturate) {
    using F = decltype(format_tag);
    store<typename F::Storage>(element, 0, static_cast<typename F::Storage>(encode_mini<F>(bits, sr, r, saturate)));
  };
  switch (dtype) {
    case DType::fp32: store<float>(element, 0, value); return;
    case DType::tf32: store<uint32_t>(element, 0, encode_tf32(value, sr, r)); return;
    case DType::bf16: store<uint16_t>(element, 0, encode_bf16(value, sr, r)); return;
    case DType::fp16: mini(FP16{}, false); return;
    case DType::fp8_e4m3: mini(E4M3{}, saturate_fp8); return;
    case DType::fp8_e4m3fn:
    case DType::mxfp8_e4m3: mini(E4M3FN{}, saturate_fp8); return;
    case DType::fp8_e5m2:
    case DType::mxfp8_e5m2: mini(E5M2{}, saturate_fp8); return;
    case DType::fp8_e3m4: mini(E3M4{}, saturate_fp8); return;
    case DType::fp8_e8m0: mini(E8M0{}, saturate_fp8); return;
    case DType::mxfp4_e2m1: mini(E2M1{}, true); return;
    case DType::int32: store<int32_t>(element, 0, encode_int<int32_t>(value, sr, r)); return;
    case DType::int16: store<int16_t>(element, 0, encode_int<int16_t>(value, sr, r)); return;
    case DType::int8: store<int8_t>(element, 0, encode_int<int8_t>(value, sr, r)); return;
    case DType::uint32: store<uint32_t>(element, 0, encode_int<uint32_t>(value, sr, r)); return;
    case DType::uint16: store<uint16_t>(element, 0, encode_int<uint16_t>(value, sr, r)); return;
    case DType::uint8: store<uint8_t>(element, 0, encode_int<uint8_t>(value, sr, r)); return;
  }
  unknown_dtype(dtype);
}

float round_to(DType dtype, float value, RoundingMode mode, uint32_t random_bits, bool saturate_fp8) {
  unsigned char element[4] = {};
  encode(dtype, value, element, mode, random_bits, saturate_fp8);
  return decode(dtype, element);
}

bool dtype_has_inf(DType dtype) {
  switch (dtype) {
    case DType::fp32:
    case DType::tf32:
    case DType::bf16:
    case DType::fp16:
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
    case DType::fp8_e3m4:
    case DType::mxfp8_e5m2: return true;  // the MX e5m2 element is plain e5m2 (OCP keeps its inf)
    default: return false;
  }
}

bool dtype_has_nan(DType dtype) {
  const DTypeInfo& info = dtype_info(dtype);
  return info.is_float && dtype != DType::mxfp4_e2m1;
}

float dtype_max_finite(DType dtype) {
  switch (dtype) {
    case DType::fp32: return std::numeric_limits<float>::max();
    case DType::tf32: return bits_float(0x7F7FE000u);
    case DType::bf16: return bits_float(0x7F7F0000u);
    case DType::fp16: return 65504.0f;
    case DType::fp8_e4m3: return 240.0f;
    case DType::fp8_e4m3fn:
    case DType::mxfp8_e4m3: return 448.0f;
    case DType::fp8_e5m2:
    case DType::mxfp8_e5m2: return 57344.0f;
    case DType::fp8_e3m4: return 15.5f;
    case DType::fp8_e8m0: return std::ldexp(1.0f, 127);
    case DType::mxfp4_e2m1: return 6.0f;
    case DType::int32: return static_cast<float>(std::numeric_limits<int32_t>::max());
    case DType::int16: return 32767.0f;
    case DType::int8: return 127.0f;
    case DType::uint32: return static_cast<float>(std::numeric_limits<uint32_t>::max());
    case DType::uint16: return 65535.0f;
    case DType::uint8: return 255.0f;
  }
  unknown_dtype(dtype);
}

}  // namespace trnsim::numerics
