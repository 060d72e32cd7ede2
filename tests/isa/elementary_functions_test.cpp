// The Scalar engine's exp, erf and tanh (isa/numerics/elementary_functions.h, reached through the activation rows the
// interpreter runs) against glibc's double exp, erf and tanh rounded once to fp32: the correctly rounded fp32 value
// except where the double lands within ~1e-9 ulp of a rounding boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "isa/alu.h"

namespace trnsim::isa {
namespace {

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// Distance in ulps between two finite floats of the same sign (or both zero).
int64_t ulps_apart(float a, float b) { return std::llabs(int64_t(bits(a)) - int64_t(bits(b))); }

// Every `step`-th fp32 bit pattern from `low` up to `high` (both finite, same sign).
std::vector<float> sweep(float low, float high, uint32_t step) {
  std::vector<float> out;
  const bool negative = std::signbit(low);
  uint32_t from = bits(negative ? high : low), to = bits(negative ? low : high);
  for (uint64_t b = from; b <= to; b += step) out.push_back(from_bits(uint32_t(b)));
  return out;
}

struct Agreement {
  size_t checked = 0;
  size_t off_by_one = 0;
  int64_t worst_ulps = 0;
  float worst_argument = 0;
};

Agreement compare_rows(ActivationFunc func, double (*reference)(double), const std::vector<float>& args) {
  std::vector<float> out(args.size());
  apply_activation_rows(func, args.data(), out.data(), args.size(), 1.0f, nullptr, 0.0f);
  Agreement a;
  for (size_t i = 0; i < args.size(); ++i) {
    const float expected = static_cast<float>(reference(static_cast<double>(args[i])));
    const int64_t ulps = ulps_apart(out[i], expected);
    ++a.checked;
    if (ulps != 0) ++a.off_by_one;
    if (ulps > a.worst_ulps) {
      a.worst_ulps = ulps;
      a.worst_argument = args[i];
    }
  }
  return a;
}

void expect_correctly_rounded(ActivationFunc func, double (*reference)(double), float low, float high) {
  for (const auto& range : {std::pair{low, -0.0f}, std::pair{0.0f, high}}) {  // each sign on its own (bit order)
    const std::vector<float> args = sweep(range.first, range.second, 97);
    const Agreement a = compare_rows(func, reference, args);
    SCOPED_TRACE(std::string(activation_name(func)) + " over [" + std::to_string(range.first) + ", " +
                 std::to_string(range.second) + "]");
    EXPECT_GT(a.checked, 100000u);
    EXPECT_LE(a.worst_ulps, 1) << "at x = " << a.worst_argument;
    // A miss needs the double result within ~5e-15 relative of a rounding boundary: about 1e-7 of the arguments.
    EXPECT_LE(a.off_by_one, a.checked / 1000000 + 2);
  }
}

TEST(ElementaryFunctions, ExpIsCorrectlyRoundedOverTheFp32Range) {
  // Below -103.97 the result rounds to 0, above 88.72 to inf; the subnormal results are in the sweep.
  expect_correctly_rounded(ActivationFunc::exp, [](double x) { return std::exp(x); }, -105.0f, 90.0f);
}

TEST(ElementaryFunctions, ErfIsCorrectlyRounded) {
  expect_correctly_rounded(ActivationFunc::erf, [](double x) { return std::erf(x); }, -6.0f, 6.0f);
}

TEST(ElementaryFunctions, TanhIsCorrectlyRounded) {
  expect_correctly_rounded(ActivationFunc::tanh, [](double x) { return std::tanh(x); }, -12.0f, 12.0f);
}

TEST(ElementaryFunctions, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto exp = [](float x) { return apply_activation(ActivationFunc::exp, x); };
  auto erf = [](float x) { return apply_activation(ActivationFunc::erf, x); };
  EXPECT_EQ(exp(0.0f), 1.0f);
  EXPECT_EQ(exp(-0.0f), 1.0f);
  EXPECT_EQ(exp(kInf), kInf);
  EXPECT_EQ(exp(-kInf), 0.0f);
  EXPECT_EQ(exp(88.72f), std::exp(88.72f));  // the largest finite results
  EXPECT_EQ(exp(88.73f), kInf);
  EXPECT_EQ(exp(-103.0f), static_cast<float>(std::exp(-103.0)));  // subnormal
  EXPECT_EQ(exp(-200.0f), 0.0f);
  EXPECT_EQ(exp(1000.0f), kInf);
  EXPECT_TRUE(std::isnan(exp(nan)));
  EXPECT_EQ(erf(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(erf(-0.0f)));
  EXPECT_EQ(erf(1e-30f), static_cast<float>(std::erf(1e-30)));  // erf(x) ~ 2x/sqrt(pi), no flush to zero
  EXPECT_EQ(erf(1.0f), static_cast<float>(std::erf(1.0)));        // both sides of the pieces' boundaries
  EXPECT_EQ(erf(std::nextafter(1.0f, 0.0f)), static_cast<float>(std::erf(double(std::nextafter(1.0f, 0.0f)))));
  EXPECT_EQ(erf(4.0f), 1.0f);
  EXPECT_EQ(erf(-kInf), -1.0f);
  EXPECT_EQ(erf(kInf), 1.0f);
  EXPECT_TRUE(std::isnan(erf(nan)));
  auto tanh = [](float x) { return apply_activation(ActivationFunc::tanh, x); };
  EXPECT_TRUE(std::signbit(tanh(-0.0f)));
  EXPECT_EQ(tanh(1e-30f), 1e-30f);
  EXPECT_EQ(tanh(0.5f), static_cast<float>(std::tanh(0.5)));  // both sides of the pieces' boundary
  EXPECT_EQ(tanh(std::nextafter(0.5f, 0.0f)), static_cast<float>(std::tanh(double(std::nextafter(0.5f, 0.0f)))));
  EXPECT_EQ(tanh(20.0f), 1.0f);
  EXPECT_EQ(tanh(-kInf), -1.0f);
  EXPECT_TRUE(std::isnan(tanh(nan)));
}

TEST(ElementaryFunctions, FunctionsBuiltOnExpAndErf) {
  // gelu, sigmoid, silu and tanh-gelu through the rows (the vectorised path) and one element at a time give the same bits,
  // and stay within 2 ulps of double references (their fp32 multiplies and adds round too).
  const std::vector<float> args = sweep(-20.0f, -1e-3f, 4099);
  std::vector<float> positive = sweep(1e-3f, 20.0f, 4099);
  std::vector<float> all(args);
  all.insert(all.end(), positive.begin(), positive.end());
  struct Case {
    ActivationFunc func;
    double (*reference)(double);
    float accurate_from;  // below it the fp32 formula itself cancels (gelu: 1 + erf(x) for x < 0)
  };
  const Case cases[] = {
      {ActivationFunc::gelu, [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }, 0.0f},
      {ActivationFunc::sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -20.0f},
      {ActivationFunc::silu, [](double x) { return x / (1.0 + std::exp(-x)); }, -20.0f},
      {ActivationFunc::gelu_apprx_tanh,
       [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }, 0.0f},
  };
  for (const Case& c : cases) {
    std::vector<float> rows(all.size());
    apply_activation_rows(c.func, all.data(), rows.data(), all.size(), 1.0f, nullptr, 0.0f);
    for (size_t i = 0; i < all.size(); ++i) {
      ASSERT_EQ(bits(rows[i]), bits(apply_activation(c.func, all[i]))) << activation_name(c.func) << " " << all[i];
      const float expected = static_cast<float>(c.reference(all[i]));
      if (all[i] < c.accurate_from) continue;
      EXPECT_LE(ulps_apart(rows[i], expected), 2) << activation_name(c.func) << " at " << all[i];
    }
  }
}

}  // namespace
}  // namespace trnsim::isa
