// Tests of isa/numerics against references written independently here: each 8-bit format's value formula, a
// brute-force nearest-value search over the decoded code table, and a double-arithmetic RNE for the wide formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "isa/numerics/float_format.h"

namespace trnsim::numerics {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// ----- Independent definitions of the small formats -----------------------------------------------------------
enum class Kind { ieee, fn, e8m0, e2m1 };

struct Spec {
  DType dtype;
  Kind kind;
  int exp_bits;
  int man_bits;
  int bias;
  int code_count;  // 256, or 16 for e2m1
};

const std::vector<Spec>& small_specs() {
  static const std::vector<Spec> specs = {
      {DType::fp8_e4m3, Kind::ieee, 4, 3, 7, 256},      {DType::fp8_e4m3fn, Kind::fn, 4, 3, 7, 256},
      {DType::fp8_e5m2, Kind::ieee, 5, 2, 15, 256},     {DType::fp8_e3m4, Kind::ieee, 3, 4, 3, 256},
      {DType::fp8_e8m0, Kind::e8m0, 8, 0, 127, 256},    {DType::mxfp8_e4m3, Kind::fn, 4, 3, 7, 256},
      {DType::mxfp8_e5m2, Kind::ieee, 5, 2, 15, 256},   {DType::mxfp4_e2m1, Kind::e2m1, 2, 1, 1, 16},
  };
  return specs;
}

// Value of `code` by the textbook formula. With `ignore_specials`, the inf/NaN codes are read as ordinary numbers:
// that gives the value one step above max finite, which decides overflow rounding.
double formula_value(const Spec& s, uint32_t code, bool ignore_specials = false) {
  if (s.kind == Kind::e8m0) {
    if (code == 0xFF && !ignore_specials) return std::nan("");
    return std::ldexp(1.0, static_cast<int>(code) - 127);
  }
  const int total_bits = 1 + s.exp_bits + s.man_bits;
  const bool negative = (code >> (total_bits - 1)) & 1;
  const uint32_t exp_all_ones = (1u << s.exp_bits) - 1;
  uint32_t exp_field = (code >> s.man_bits) & exp_all_ones;
  const uint32_t man_field = code & ((1u << s.man_bits) - 1);
  if (ignore_specials && (code >> s.man_bits) > exp_all_ones) exp_field = code >> s.man_bits;  // max_code + 1
  const double sign = negative ? -1.0 : 1.0;
  if (!ignore_specials) {
    if (s.kind == Kind::ieee && exp_field == exp_all_ones) return man_field == 0 ? sign * kInf : std::nan("");
    if (s.kind == Kind::fn && exp_field == exp_all_ones && man_field == (1u << s.man_bits) - 1) return std::nan("");
  }
  if (exp_field == 0) return sign * std::ldexp(static_cast<double>(man_field), 1 - s.bias - s.man_bits);
  return sign * std::ldexp(1.0 + std::ldexp(static_cast<double>(man_field), -s.man_bits),
                           static_cast<int>(exp_field) - s.bias);
}

uint32_t sign_bit(const Spec& s) { return s.kind == Kind::e8m0 ? 0u : (s.kind == Kind::e2m1 ? 0x8u : 0x80u); }

struct Entry {
  double value;
  uint32_t code;
};

// Non-negative finite values of the format, ascending; the last entry is the virtual "max + 1 ulp" code.
std::vector<Entry> magnitude_table(const Spec& s) {
  std::vector<Entry> table;
  for (uint32_t code = 0; code < static_cast<uint32_t>(s.code_count); ++code) {
    if (code & sign_bit(s)) continue;
    const double v = formula_value(s, code);
    if (std::isfinite(v)) table.push_back({v, code});
  }
  std::sort(table.begin(), table.end(), [](const Entry& a, const Entry& b) { return a.value < b.value; });
  const uint32_t beyond = table.back().code + 1;
  table.push_back({formula_value(s, beyond, /*ignore_specials=*/true), beyond});
  return table;
}

uint32_t nan_code(const Spec& s, bool negative) {
  switch (s.kind) {
    case Kind::e8m0: return 0xFF;
    case Kind::e2m1: return 0x0;  // no NaN: the library's documented choice is +0
    case Kind::fn: return (negative ? 0x80u : 0u) | 0x7Fu;
    case Kind::ieee: {  // the quiet NaN: all-ones exponent, top mantissa bit set
      const uint32_t q = (((1u << s.exp_bits) - 1) << s.man_bits) | (1u << (s.man_bits - 1));
      return (negative ? 0x80u : 0u) | q;
    }
  }
  return 0;
}

// Brute-force reference encoder: nearest table value, ties to the even code (e8m0: to the larger value), then the
// overflow policy. `table` is magnitude_table(s).
uint32_t reference_encode(const Spec& s, const std::vector<Entry>& table, float x, bool saturate) {
  const bool saturating = saturate || s.kind == Kind::e2m1;
  const bool negative = std::signbit(x);
  const uint32_t sign = negative ? sign_bit(s) : 0u;
  const uint32_t max_code = table[table.size() - 2].code;
  const uint32_t overflow = saturating ? max_code : (s.kind == Kind::ieee ? max_code + 1 : nan_code(s, negative));
  if (std::isnan(x)) return s.kind == Kind::e8m0 || s.kind == Kind::e2m1 ? nan_code(s, false) : nan_code(s, negative);
  if (s.kind == Kind::e8m0 && (negative || x == 0.0f)) return saturating ? 0x00 : 0xFF;
  const double m = std::fabs(static_cast<double>(x));
  if (std::isinf(m)) return sign | overflow;
  // First entry >= m.
  const auto it = std::lower_bound(table.begin(), table.end(), m, [](const Entry& e, double v) { return e.value < v; });
  Entry chosen;
  if (it == table.end()) {
    chosen = table.back();
  } else if (it->value == m || it == table.begin()) {
    chosen = *it;
  } else {
    const Entry lo = *(it - 1);
    const Entry hi = *it;
    const double twice = 2.0 * m;
    const double sum = lo.value + hi.value;  // exact: both are short dyadic numbers
    if (twice < sum) {
      chosen = lo;
    } else if (twice > sum) {
      chosen = hi;
    } else if (s.kind == Kind::e8m0) {
      chosen = hi;
    } else {
      chosen = (lo.code & 1) == 0 ? lo : hi;
    }
  }
  if (chosen.code > max_code) return sign | overflow;
  return sign | chosen.code;
}

uint32_t library_encode(DType dtype, float x, bool saturate, RoundingMode mode = RoundingMode::nearest_even,
                        uint32_t random_bits = 0) {
  uint32_t out = 0;
  encode(dtype, x, &out, mode, random_bits, saturate);
  return out;
}

// Edge inputs shared by several tests.
std::vector<float> edge_inputs() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN(), bits_float(0x7F800001u) /* signalling NaN */,
                          std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(), bits_float(0x007FFFFFu), bits_float(0x00400000u),
                          bits_float(0x00600000u), bits_float(0x00200001u)};
  return v;
}

// Inputs targeted at one small format: every exact value, every midpoint (tie) between neighbours and 1 fp32 ulp
// either side of it, the overflow boundary, plus random inputs both over all fp32 bit patterns and in range.
std::vector<float> inputs_for(const Spec& s, size_t random_count, uint32_t seed) {
  std::vector<float> v = edge_inputs();
  const std::vector<Entry> table = magnitude_table(s);
  for (size_t i = 0; i < table.size(); ++i) {
    std::vector<float> mags = {static_cast<float>(table[i].value)};
    if (i + 1 < table.size()) {
      const float mid = static_cast<float>((table[i].value + table[i + 1].value) / 2);
      mags.insert(mags.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)});
    }
    for (float m : mags) {
      v.push_back(m);
      v.push_back(-m);
    }
  }
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> log2_range(std::log2(table[1].value) - 4, std::log2(table.back().value) + 2);
  for (size_t i = 0; i < random_count; ++i) {
    v.push_back(bits_float(static_cast<uint32_t>(gen())));
    const float in_range = static_cast<float>(std::exp2(log2_range(gen)));
    v.push_back((gen() & 1) ? -in_range : in_range);
  }
  return v;
}

// ----- 8-bit formats (and the e2m1 element) --------------------------------------------------------------------
TEST(NumericsSmallFormats, EveryCodeDecodesToTheFormulaValue) {
  for (const Spec& s : small_specs()) {
    SCOPED_TRACE(std::string(dtype_name(s.dtype)));
    for (uint32_t code = 0; code < static_cast<uint32_t>(s.code_count); ++code) {
      const uint8_t byte = static_cast<uint8_t>(code);
      const double expected = formula_value(s, code);
      const float got = decode(s.dtype, &byte);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << "code " << code;
      } else {
        EXPECT_EQ(static_cast<double>(got), expected) << "code " << code;
        EXPECT_EQ(std::signbit(got), std::signbit(expected)) << "code " << code;
      }
    }
  }
}

TEST(NumericsSmallFormats, KnownValues) {
  EXPECT_EQ(dtype_max_finite(DType::fp8_e4m3), 240.0f);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e4m3fn), 448.0f);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e5m2), 57344.0f);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e3m4), 15.5f);
  EXPECT_EQ(dtype_max_finite(DType::mxfp4_e2m1), 6.0f);
  EXPECT_EQ(dtype_max_finite(DType::fp8_e8m0), std::ldexp(1.0f, 127));
  const uint8_t e2m1_codes[] = {0, 1, 2, 3, 4, 5, 6, 7};
  const float e2m1_values[] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(decode(DType::mxfp4_e2m1, &e2m1_codes[i]), e2m1_values[i]);
  for (const Spec& s : small_specs()) {
    const std::vector<Entry> table = magnitude_table(s);
    EXPECT_EQ(dtype_max_finite(s.dtype), static_cast<float>(table[table.size() - 2].value));
  }
  EXPECT_EQ(library_encode(DType::fp8_e4m3fn, 464.0f, true), 0x7Eu);    // tie above max: even code is max
  EXPECT_EQ(library_encode(DType::fp8_e4m3fn, 464.0f, false), 0x7Eu);
  EXPECT_EQ(library_encode(DType::fp8_e4m3fn, 465.0f, false), 0x7Fu);   // overflow with no inf -> NaN
  EXPECT_EQ(library_encode(DType::fp8_e4m3, 248.0f, false), 0x78u);     // tie above max rounds to inf
  EXPECT_EQ(library_encode(DType::fp8_e4m3, 248.0f, true), 0x77u);
  EXPECT_EQ(library_encode(DType::fp8_e8m0, 3.0f, true), 0x81u);        // e8m0 ties round up
  EXPECT_EQ(library_encode(DType::fp8_e8m0, 1e-45f, true), 0x00u);
  EXPECT_EQ(library_encode(DType::mxfp4_e2m1, 5.0f, true), 0x6u);       // tie 4|6 -> even code (4)
  EXPECT_EQ(library_encode(DType::mxfp4_e2m1, -1e30f, false), 0xFu);    // e2m1 always saturates
}

TEST(NumericsSmallFormats, EncodeMatchesBruteForceNearest) {
  for (const Spec& s : small_specs()) {
    SCOPED_TRACE(std::string(dtype_name(s.dtype)));
    const std::vector<Entry> table = magnitude_table(s);
    const std::vector<float> inputs = inputs_for(s, 60000, 1234 + static_cast<uint32_t>(s.dtype));
    ASSERT_GE(inputs.size(), 100000u);
    for (bool saturate : {true, false}) {
      size_t failures = 0;
      for (float x : inputs) {
        const uint32_t expected = reference_encode(s, table, x, saturate);
        const uint32_t got = library_encode(s.dtype, x, saturate);
        if (got != expected && ++failures <= 5) {
          ADD_FAILURE() << "x=" << x << " (0x" << std::hex << float_bits(x) << ") saturate=" << saturate
                        << " got 0x" << got << " expected 0x" << expected;
        }
      }
      EXPECT_EQ(failures, 0u) << "saturate=" << saturate;
    }
  }
}

TEST(NumericsSmallFormats, BulkMatchesScalar) {
  for (const Spec& s : small_specs()) {
    SCOPED_TRACE(std::string(dtype_name(s.dtype)));
    const std::vector<float> inputs = inputs_for(s, 5000, 99);
    for (bool saturate : {true, false}) {
      std::vector<uint8_t> bulk(inputs.size());
      convert_from_fp32(s.dtype, inputs.data(), bulk.data(), inputs.size(), RoundingMode::nearest_even, nullptr,
                        saturate);
      std::vector<float> back(inputs.size());
      convert_to_fp32(s.dtype, bulk.data(), back.data(), bulk.size());
      for (size_t i = 0; i < inputs.size(); ++i) {
        ASSERT_EQ(bulk[i], library_encode(s.dtype, inputs[i], saturate)) << "x=" << inputs[i];
        const float scalar = round_to(s.dtype, inputs[i], RoundingMode::nearest_even, 0, saturate);
        ASSERT_TRUE(float_bits(back[i]) == float_bits(scalar) || (std::isnan(back[i]) && std::isnan(scalar)));
      }
    }
  }
}

// ----- bf16 / fp16 / tf32 against double arithmetic ------------------------------------------------------------
struct WideSpec {
  DType dtype;
  int man_bits;
  int min_exp;       // unbiased exponent of the smallest normal
  double max_finite;
};

// RNE of x to a binary format with `man_bits` fraction bits, IEEE overflow; computed in double.
double reference_round(const WideSpec& w, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int exp2;
  std::frexp(std::fabs(x), &exp2);  // |x| in [2^(exp2-1), 2^exp2)
  const int exp = std::max(exp2 - 1, w.min_exp);
  const double quantum = std::ldexp(1.0, exp - w.man_bits);
  const double scaled = std::fabs(x) / quantum;  // exact: power-of-two scaling
  double lo = std::floor(scaled);
  const double frac = scaled - lo;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(lo, 2.0) == 1.0)) lo += 1;
  const double r = lo * quantum;
  const double overflow_threshold = w.max_finite + std::ldexp(1.0, std::ilogb(w.max_finite) - w.man_bits - 1);
  if (std::fabs(x) >= overflow_threshold) return std::copysign(kInf, x);
  return std::copysign(r, x);
}

class NumericsWideFormats : public ::testing::TestWithParam<WideSpec> {};

TEST_P(NumericsWideFormats, RandomSweepMatchesDoubleReference) {
  const WideSpec w = GetParam();
  std::mt19937 gen(42);
  std::vector<float> inputs = edge_inputs();
  for (int i = 0; i < 1500000; ++i) inputs.push_back(bits_float(static_cast<uint32_t>(gen())));
  // Exact ties: a representable value plus half its quantum, across the exponent range (incl. subnormals).
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << w.man_bits) - 1);
  for (int e = w.min_exp - w.man_bits; e <= std::ilogb(w.max_finite); ++e) {
    for (int k = 0; k < 8; ++k) {
      const double base = std::ldexp(1.0 + std::ldexp(mantissa(gen), -w.man_bits), e);
      const double quantum = std::ldexp(1.0, std::max(e, w.min_exp) - w.man_bits);
      for (double t : {base + quantum / 2, base - quantum / 2, base}) {
        if (std::fabs(t) <= std::numeric_limits<float>::max()) inputs.push_back(static_cast<float>(t));
      }
    }
  }
  size_t failures = 0;
  for (float x : inputs) {
    const float got = round_to(w.dtype, x);
    const double expected = reference_round(w, x);
    const bool same_value = static_cast<double>(got) == expected && std::signbit(got) == std::signbit(x);
    const bool ok = std::isnan(expected) ? std::isnan(got) : same_value;
    if (!ok && ++failures <= 5) ADD_FAILURE() << "x=" << x << " (0x" << std::hex << float_bits(x) << ") got " << got;
  }
  EXPECT_EQ(failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Numerics, NumericsWideFormats,
                         ::testing::Values(WideSpec{DType::bf16, 7, -126, 0x1.FEp127},
                                           WideSpec{DType::fp16, 10, -14, 65504.0},
                                           WideSpec{DType::tf32, 10, -126, 0x1.FFCp127}),
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

TEST(NumericsFp16, EveryCodeRoundTrips) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const uint16_t h = static_cast<uint16_t>(code);
    const float v = decode(DType::fp16, &h);
    const uint32_t back = library_encode(DType::fp16, v, false);
    const bool is_nan = (code & 0x7C00) == 0x7C00 && (code & 0x3FF) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(v)) << code;
      ASSERT_EQ(back, (code & 0x8000) | 0x7E00u) << code;  // canonical quiet NaN, sign kept
    } else {
      ASSERT_EQ(back, code) << code;
    }
  }
}

TEST(NumericsBf16, EveryCodeRoundTripsAndDecodesAsUpperHalf) {
  for (uint32_t code = 0; code < 0x10000; ++code) {
    const uint16_t b = static_cast<uint16_t>(code);
    const float v = decode(DType::bf16, &b);
    ASSERT_EQ(float_bits(v), code << 16);
    const bool is_nan = (code & 0x7F80) == 0x7F80 && (code & 0x7F) != 0;
    ASSERT_EQ(library_encode(DType::bf16, v, false), is_nan ? ((code & 0x8000) | 0x7FC0u) : code) << code;
  }
}

TEST(NumericsTf32, TiesAndOverflow) {
  const float ulp = std::ldexp(1.0f, -10);
  EXPECT_EQ(round_to(DType::tf32, 1.0f + ulp / 2), 1.0f);                  // tie -> even (down)
  EXPECT_EQ(round_to(DType::tf32, 1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);    // tie -> even (up)
  EXPECT_EQ(round_to(DType::tf32, -(1.0f + 3 * ulp / 2)), -(1.0f + 2 * ulp));
  EXPECT_EQ(round_to(DType::tf32, std::nextafter(1.0f + ulp / 2, 2.0f)), 1.0f + ulp);
  EXPECT_EQ(round_to(DType::tf32, std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to(DType::tf32, dtype_max_finite(DType::tf32)), dtype_max_finite(DType::tf32));
  uint32_t stored = 0;
  encode(DType::tf32, 1.0f + 3 * ulp / 2, &stored);
  EXPECT_EQ(stored & 0x1FFFu, 0u);  // stored as 32 bits with the 13 dropped bits zero
}

// ----- Integers --------------------------------------------------------------------------------------------------
template <typename Int>
Int int_encode(DType dtype, float x, RoundingMode mode = RoundingMode::nearest_even, uint32_t random_bits = 0) {
  Int out;
  encode(dtype, x, &out, mode, random_bits);
  return out;
}

TEST(NumericsIntegers, TiesToEvenSaturationAndNan) {
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 2.5f), 2);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 3.5f), 4);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, -2.5f), -2);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, -3.5f), -4);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 0.5f), 0);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 2.5000002f), 3);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, -0.0f), 0);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 3e9f), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 2147483648.0f), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(int_encode<int32_t>(DType::int32, -2147483648.0f), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(int_encode<int32_t>(DType::int32, -1e20f), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(int_encode<int32_t>(DType::int32, 2147483520.0f), 2147483520);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(int_encode<int32_t>(DType::int32, std::numeric_limits<float>::infinity()),
            std::numeric_limits<int32_t>::max());
  EXPECT_EQ(int_encode<int8_t>(DType::int8, 127.4f), 127);
  EXPECT_EQ(int_encode<int8_t>(DType::int8, 127.5f), 127);
  EXPECT_EQ(int_encode<int8_t>(DType::int8, -128.5f), -128);
  EXPECT_EQ(int_encode<int8_t>(DType::int8, -300.0f), -128);
  EXPECT_EQ(int_encode<int8_t>(DType::int8, -std::numeric_limits<float>::quiet_NaN()), 0);
  EXPECT_EQ(int_encode<int16_t>(DType::int16, 40000.0f), 32767);
  EXPECT_EQ(int_encode<int16_t>(DType::int16, -32768.4f), -32768);
  EXPECT_EQ(int_encode<uint8_t>(DType::uint8, -0.4f), 0);
  EXPECT_EQ(int_encode<uint8_t>(DType::uint8, -5.0f), 0);
  EXPECT_EQ(int_encode<uint8_t>(DType::uint8, 254.5f), 254);
  EXPECT_EQ(int_encode<uint8_t>(DType::uint8, 255.5f), 255);
  EXPECT_EQ(int_encode<uint16_t>(DType::uint16, 70000.0f), 65535);
  EXPECT_EQ(int_encode<uint32_t>(DType::uint32, 5e9f), std::numeric_limits<uint32_t>::max());
  EXPECT_EQ(int_encode<uint32_t>(DType::uint32, 4294967040.0f), 4294967040u);
  EXPECT_EQ(int_encode<uint32_t>(DType::uint32, std::numeric_limits<float>::quiet_NaN()), 0u);
  const int32_t i32 = -123456;
  EXPECT_EQ(decode(DType::int32, &i32), -123456.0f);
  const uint16_t u16 = 65535;
  EXPECT_EQ(decode(DType::uint16, &u16), 65535.0f);
  const int8_t i8 = -128;
  EXPECT_EQ(decode(DType::int8, &i8), -128.0f);
}

TEST(NumericsIntegers, RandomAgainstDoubleRint) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-300.0f, 300.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = (i % 2) ? dist(gen) : std::round(dist(gen)) + 0.5f;  // every other input an exact tie
    const double r = std::nearbyint(static_cast<double>(x));  // default FP env: ties to even
    EXPECT_EQ(int_encode<int16_t>(DType::int16, x), static_cast<int16_t>(r)) << x;
    EXPECT_EQ(int_encode<int8_t>(DType::int8, x), static_cast<int8_t>(std::clamp(r, -128.0, 127.0))) << x;
    EXPECT_EQ(int_encode<uint8_t>(DType::uint8, x), static_cast<uint8_t>(std::clamp(r, 0.0, 255.0))) << x;
  }
}

// ----- Stochastic rounding -----------------------------------------------------------------------------------------
struct SrCase {
  DType dtype;
  float lo, hi;  // adjacent representable values
};

TEST(NumericsStochastic, UnbiasedAndAlwaysANeighbour) {
  const std::vector<SrCase> cases = {
      {DType::bf16, 1.0f, 1.0078125f},          {DType::bf16, -3.0f, -3.015625f},
      {DType::fp16, 1.0f, 1.0009765625f},       {DType::fp16, 0.0f, std::ldexp(1.0f, -24)},  // subnormal
      {DType::tf32, 2.0f, 2.001953125f},        {DType::fp8_e4m3, 1.0f, 1.125f},
      {DType::fp8_e4m3fn, -256.0f, -288.0f},    {DType::fp8_e5m2, 0.0f, std::ldexp(1.0f, -16)},
      {DType::fp8_e3m4, 0.25f, 0.265625f},      {DType::fp8_e8m0, 4.0f, 8.0f},
      {DType::mxfp4_e2m1, 4.0f, 6.0f},          {DType::mxfp4_e2m1, 0.0f, 0.5f},
      {DType::int8, 3.0f, 4.0f},                {DType::int32, -8.0f, -7.0f},
      {DType::uint16, 100.0f, 101.0f},
  };
  constexpr int kDraws = 200000;
  for (const SrCase& c : cases) {
    for (double fraction : {0.3, 0.5, 0.0625, 1.0 / 1024}) {  // the last one reaches deep below the kept bits
      const float x = static_cast<float>(c.lo + (static_cast<double>(c.hi) - c.lo) * fraction);
      const double p = (static_cast<double>(x) - c.lo) / (static_cast<double>(c.hi) - c.lo);
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " x=" + std::to_string(x));
      std::vector<float> src(kDraws, x);
      std::vector<uint32_t> raw(kDraws);
      std::vector<float> rounded(kDraws);
      StochasticSource rng(0xC0FFEE + static_cast<uint64_t>(fraction * 1000));
      convert_from_fp32(c.dtype, src.data(), raw.data(), kDraws, RoundingMode::stochastic, &rng);
      convert_to_fp32(c.dtype, raw.data(), rounded.data(), kDraws);
      double sum = 0;
      for (float r : rounded) {
        ASSERT_TRUE(r == c.lo || r == c.hi) << r;
        sum += r;
      }
      const double mean = sum / kDraws;
      const double sigma = std::fabs(static_cast<double>(c.hi) - c.lo) * std::sqrt(p * (1 - p) / kDraws);
      EXPECT_NEAR(mean, static_cast<double>(x), 5 * sigma + 1e-12 * std::fabs(x)) << "p=" << p;
    }
  }
}

TEST(NumericsStochastic, DeterministicPerSeedAndExactValuesStay) {
  std::vector<float> src(4096);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (float& v : src) v = dist(gen);
  auto run = [&](uint64_t seed) {
    std::vector<uint16_t> out(src.size());
    StochasticSource rng(seed);
    convert_from_fp32(DType::bf16, src.data(), out.data(), src.size(), RoundingMode::stochastic, &rng);
    return out;
  };
  EXPECT_EQ(run(17), run(17));
  EXPECT_NE(run(17), run(18));
  // Bulk SR consumes one 32-bit draw per element, in order: the scalar form with those bits agrees.
  StochasticSource replay(17);
  const std::vector<uint16_t> bulk = run(17);
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_EQ(bulk[i], library_encode(DType::bf16, src[i], true, RoundingMode::stochastic, replay.next_u32()));
  }
  // A representable value never moves, whatever the random bits.
  for (uint32_t r : {0u, 1u, 0x80000000u, 0xFFFFFFFFu}) {
    EXPECT_EQ(round_to(DType::fp8_e4m3, 1.125f, RoundingMode::stochastic, r), 1.125f);
    EXPECT_EQ(round_to(DType::bf16, -3.0f, RoundingMode::stochastic, r), -3.0f);
    EXPECT_EQ(round_to(DType::int32, 7.0f, RoundingMode::stochastic, r), 7.0f);
  }
  // Saturation still applies after a stochastic carry past max.
  EXPECT_EQ(round_to(DType::fp8_e4m3fn, 447.99f, RoundingMode::stochastic, 0xFFFFFFFFu), 448.0f);
  EXPECT_EQ(round_to(DType::fp8_e4m3fn, 460.0f, RoundingMode::stochastic, 0xFFFFFFFFu), 448.0f);
  EXPECT_TRUE(std::isnan(round_to(DType::fp8_e4m3fn, 460.0f, RoundingMode::stochastic, 0xFFFFFFFFu, false)));
}

TEST(NumericsStochastic, BulkWithoutSourceIsRejected) {
  float x = 1.0f;
  uint16_t out;
  EXPECT_THROW(convert_from_fp32(DType::bf16, &x, &out, 1, RoundingMode::stochastic, nullptr), std::invalid_argument);
}

// ----- Metadata ------------------------------------------------------------------------------------------------------
TEST(NumericsMetadata, InfMaxAndElementSize) {
  for (DType d : {DType::fp32, DType::tf32, DType::bf16, DType::fp16, DType::fp8_e4m3, DType::fp8_e5m2,
                  DType::fp8_e3m4, DType::mxfp8_e5m2}) {
    EXPECT_TRUE(dtype_has_inf(d)) << dtype_name(d);
  }
  for (DType d : {DType::fp8_e4m3fn, DType::fp8_e8m0, DType::mxfp8_e4m3, DType::mxfp4_e2m1, DType::int32,
                  DType::uint8}) {
    EXPECT_FALSE(dtype_has_inf(d)) << dtype_name(d);
  }
  EXPECT_EQ(dtype_max_finite(DType::bf16), 0x1.FEp127f);
  EXPECT_EQ(dtype_max_finite(DType::fp16), 65504.0f);
  EXPECT_EQ(dtype_max_finite(DType::int8), 127.0f);
  EXPECT_EQ(dtype_max_finite(DType::uint16), 65535.0f);
  EXPECT_EQ(element_bytes(DType::mxfp4_e2m1), 1u);
  EXPECT_EQ(element_bytes(DType::mxfp8_e4m3), 1u);
  EXPECT_EQ(element_bytes(DType::bf16), 2u);
  EXPECT_EQ(element_bytes(DType::tf32), 4u);
  // Every float dtype's max finite survives its own rounding.
  for (const DTypeInfo& info : all_dtypes()) {
    if (!info.is_float) continue;
    const float max = dtype_max_finite(info.dtype);
    EXPECT_EQ(round_to(info.dtype, max), max) << info.name;
  }
}

}  // namespace
}  // namespace trnsim::numerics
