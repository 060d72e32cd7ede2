// Tests of the Vector/Scalar/GpSimd semantics against references written here: each element is computed in
// double, rounded to fp32 after every step the engine performs in fp32 (double rounding is harmless for one
// + - * / since 53 >= 2*24 + 2), then rounded to the destination dtype with numerics::round_to. Those checks are
// bit-exact (NaN compared as "is NaN": its sign and payload are not specified). Tolerances appear only where
// the reference legitimately sums in another order (reductions, statistics) or evaluates transcendental
// functions in double.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/alu.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/numerics/float_format.h"
#include "kernel_fixture.h"

namespace trnsim::isa {
namespace {

using numerics::round_to;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

const HardwareConfig& trn2() { return testing_support::config("trn2"); }

using testing_support::Kernel;  // kernel_fixture.h

// Values that stress the numerics: specials, subnormals, bf16/fp16 rounding ties, and a spread of magnitudes.
float random_value(std::mt19937& rng, bool specials = true) {
  static const float kEdges[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 1e-40f, -3e-39f, 1.17549435e-38f,
                                 1.00390625f,   // 1 + 2^-8: a bf16 tie, rounds to even (1.0)
                                 1.01171875f,   // 1 + 3 * 2^-8: a bf16 tie, rounds up
                                 1.00048828125f,  // 1 + 2^-11: an fp16 tie
                                 65520.0f, 3.0e38f, -2.5f, 1.0f};
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  if (specials && unit(rng) < 0.15f) return kEdges[rng() % (sizeof(kEdges) / sizeof(kEdges[0]))];
  float magnitude = std::ldexp(1.0f + unit(rng), static_cast<int>(rng() % 24) - 12);
  return rng() % 2 ? magnitude : -magnitude;
}

std::vector<float> random_values(std::mt19937& rng, size_t count, bool specials = true) {
  std::vector<float> out(count);
  for (float& v : out) v = random_value(rng, specials);
  return out;
}

struct Shape {
  uint32_t partitions;
  uint32_t free;
};
Shape random_shape(std::mt19937& rng) {
  static const uint32_t kFree[] = {1, 2, 3, 7, 8, 33, 64, 100, 129, 257};
  return {1 + static_cast<uint32_t>(rng() % 128), kFree[rng() % (sizeof(kFree) / sizeof(kFree[0]))]};
}

struct DTypePair {
  DType in, out;
};
const std::vector<DTypePair>& dtype_pairs() {
  static const std::vector<DTypePair> pairs = {{DType::fp32, DType::fp32}, {DType::fp32, DType::bf16},
                                               {DType::bf16, DType::bf16}, {DType::fp16, DType::fp16},
                                               {DType::bf16, DType::fp32}, {DType::fp32, DType::fp16}};
  return pairs;
}

double f32(double v) { return static_cast<float>(v); }  // one fp32 rounding step of the reference

// The reference ALU, written independently of isa/alu.cpp.
double ref_alu(AluOp op, double a, double b) {
  bool any_nan = std::isnan(a) || std::isnan(b);
  switch (op) {
    case AluOp::add: return a + b;
    case AluOp::subtract: return a - b;
    case AluOp::multiply: return a * b;
    case AluOp::divide: return a / b;
    // NaN propagates; between equal operands (+0 and -0) the first one wins, as isa/alu.cpp chose (the
    // hardware docs do not order signed zeros).
    case AluOp::maximum: return any_nan ? NAN : (b > a ? b : a);
    case AluOp::minimum: return any_nan ? NAN : (b < a ? b : a);
    case AluOp::equal: return a == b;
    case AluOp::greater: return a > b;
    case AluOp::less_equal: return a <= b;
    case AluOp::bypass: return a;
    default: ADD_FAILURE() << "no reference for " << alu_op_name(op); return NAN;
  }
}

// Bit-exact comparison of a result against reference values already rounded to the destination dtype.
void expect_exact(const Tile& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    float g = got.values[i], w = want[i];
    bool same = (std::isnan(g) && std::isnan(w)) || numerics::float_bits(g) == numerics::float_bits(w);
    if (!same) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g << " want " << w;
    }
  }
}

void expect_near_rel(const Tile& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got.values[i])) << what << " element " << i;
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got.values[i], want[i]) << what << " element " << i;
    } else {
      EXPECT_NEAR(got.values[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << " element " << i;
    }
  }
}

std::string label(DTypePair d, Shape s) {
  return std::string(dtype_name(d.in)) + "->" + std::string(dtype_name(d.out)) + " [" + std::to_string(s.partitions) +
         ", " + std::to_string(s.free) + "]";
}

// ---- Elementwise ----

TEST(SemanticsTest, TensorTensorMatchesReference) {
  std::mt19937 rng(1);
  const AluOp ops[] = {AluOp::add, AluOp::subtract, AluOp::multiply, AluOp::divide, AluOp::maximum,
                       AluOp::minimum, AluOp::equal, AluOp::greater, AluOp::less_equal};
  for (DTypePair d : dtype_pairs()) {
    for (AluOp op : ops) {
      Shape s = random_shape(rng);
      Kernel k;
      auto a = k.tensor(d.in, {s.partitions, s.free}), b = k.tensor(d.in, {s.partitions, s.free});
      auto dst = k.tensor(d.out, {s.partitions, s.free});
      std::string name(alu_op_name(op));
      k.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", a).tensor("data2", b).word("op", name);
      k.build();
      Tile x = k.set(a, random_values(rng, size_t{s.partitions} * s.free));
      Tile y = k.set(b, random_values(rng, size_t{s.partitions} * s.free));
      k.run();
      std::vector<float> want;
      for (size_t i = 0; i < x.values.size(); ++i) {
        want.push_back(round_to(d.out, f32(ref_alu(op, x.values[i], y.values[i]))));
      }
      expect_exact(k.get(dst), want, std::string(alu_op_name(op)) + " " + label(d, s));
    }
  }
}

TEST(SemanticsTest, TensorScalarImmediateAndPerPartition) {
  std::mt19937 rng(2);
  for (DTypePair d : dtype_pairs()) {
    for (int variant = 0; variant < 4; ++variant) {
      Shape s = random_shape(rng);
      bool per_partition = variant & 1, reverse = variant & 2;
      Kernel k;
      auto data = k.tensor(d.in, {s.partitions, s.free});
      auto dst = k.tensor(d.out, {s.partitions, s.free});
      auto col = k.tensor(DType::fp32, {s.partitions, 1});
      auto inst = k.emit(Opcode::tensor_scalar);
      inst.tensor("dst", dst).tensor("data", data).word("op0", "subtract").word("op1", "multiply").imm("operand1", 1.5);
      inst.imm("reverse0", reverse).imm("reverse1", reverse);
      if (per_partition) inst.tensor("operand0", col); else inst.imm("operand0", 0.3);
      k.build();
      Tile x = k.set(data, random_values(rng, size_t{s.partitions} * s.free));
      Tile c = k.set(col, random_values(rng, s.partitions, false));
      k.run();
      std::vector<float> want;
      for (uint32_t p = 0; p < s.partitions; ++p) {
        double s0 = per_partition ? c.at(p, 0) : f32(0.3);
        for (uint32_t i = 0; i < s.free; ++i) {
          double v = x.at(p, i);
          double t = f32(reverse ? s0 - v : v - s0);
          want.push_back(round_to(d.out, f32(t * 1.5)));
        }
      }
      expect_exact(k.get(dst), want, "tensor_scalar variant " + std::to_string(variant) + " " + label(d, s));
    }
  }
}

TEST(SemanticsTest, TensorScalarSingleOpAndUnary) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {2, 3}), dst = k.tensor(DType::bf16, {2, 3}), dst2 = k.tensor(DType::fp32, {2, 3});
  k.emit(Opcode::tensor_scalar).tensor("dst", dst).tensor("data", data).word("op0", "add").imm("operand0", 1.0);
  k.emit(Opcode::tensor_scalar).tensor("dst", dst2).tensor("data", data).word("op0", "abs").imm("operand0", 0.0);
  k.build();
  k.set(data, {0.00390625f, -2.0f, kNaN, -kInf, -0.0f, 3.0f});
  k.run();
  // 1 + 2^-8 is a bf16 tie: rounds to even 1.0.
  expect_exact(k.get(dst), {1.0f, -1.0f, kNaN, -kInf, 1.0f, 4.0f}, "add");
  expect_exact(k.get(dst2), {0.00390625f, 2.0f, kNaN, kInf, 0.0f, 3.0f}, "abs");
}

TEST(SemanticsTest, ScalarTensorTensorMatchesReference) {
  std::mt19937 rng(3);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    Kernel k;
    auto data = k.tensor(d.in, {s.partitions, s.free}), other = k.tensor(d.in, {s.partitions, s.free});
    auto dst = k.tensor(d.out, {s.partitions, s.free});
    auto col = k.tensor(DType::bf16, {s.partitions, 1});
    k.emit(Opcode::scalar_tensor_tensor)
        .tensor("dst", dst).tensor("data", data).word("op0", "multiply").tensor("operand0", col)
        .word("op1", "subtract").tensor("operand1", other).imm("reverse1", 1);
    k.build();
    Tile x = k.set(data, random_values(rng, size_t{s.partitions} * s.free));
    Tile y = k.set(other, random_values(rng, size_t{s.partitions} * s.free));
    Tile c = k.set(col, random_values(rng, s.partitions));
    k.run();
    std::vector<float> want;
    for (uint32_t p = 0; p < s.partitions; ++p) {
      for (uint32_t i = 0; i < s.free; ++i) {
        double t = f32(double{x.at(p, i)} * c.at(p, 0));
        want.push_back(round_to(d.out, f32(y.at(p, i) - t)));
      }
    }
    expect_exact(k.get(dst), want, "scalar_tensor_tensor " + label(d, s));
  }
}

TEST(SemanticsTest, ReciprocalMatchesReference) {
  std::mt19937 rng(4);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    Kernel k;
    auto data = k.tensor(d.in, {s.partitions, s.free}), dst = k.tensor(d.out, {s.partitions, s.free});
    k.emit(Opcode::reciprocal).tensor("dst", dst).tensor("data", data);
    k.build();
    Tile x = k.set(data, random_values(rng, size_t{s.partitions} * s.free));
    k.run();
    std::vector<float> want;
    for (float v : x.values) want.push_back(round_to(d.out, f32(1.0 / v)));
    expect_exact(k.get(dst), want, "reciprocal " + label(d, s));
  }
}

// ---- Bitvec operators on integer bit patterns ----

TEST(SemanticsTest, BitvecOperatorsUseBitPatterns) {
  std::mt19937 rng(5);
  const uint32_t partitions = 37, free = 19;
  Kernel k;
  auto a = k.tensor(DType::int32, {partitions, free}), b = k.tensor(DType::int32, {partitions, free});
  auto d_and = k.tensor(DType::int32, {partitions, free}), d_xor = k.tensor(DType::uint32, {partitions, free});
  auto d_shl = k.tensor(DType::int32, {partitions, free}), d_shr = k.tensor(DType::int32, {partitions, free});
  auto d_ts = k.tensor(DType::int32, {partitions, free}), d_red = k.tensor(DType::int32, {partitions, 1});
  auto tt = [&](const AccessPattern& dst, const char* op) {
    k.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", a).tensor("data2", b).word("op", op);
  };
  tt(d_and, "bitwise_and");
  tt(d_xor, "bitwise_xor");
  tt(d_shl, "left_shift");
  tt(d_shr, "right_shift");
  k.emit(Opcode::tensor_scalar).tensor("dst", d_ts).tensor("data", a).word("op0", "bitwise_or").imm("operand0", 0xF0)
      .word("op1", "invert").imm("operand1", 0);
  k.emit(Opcode::tensor_reduce).tensor("dst", d_red).word("op", "bitwise_or").tensor("data", a).word("axis", "[1]");
  k.build();
  std::vector<uint32_t> x(partitions * free), y(partitions * free);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<uint32_t>(rng());  // many beyond 2^24, some NaN patterns as floats
    y[i] = static_cast<uint32_t>(rng());
  }
  x[0] = 0x7FC00001u;
  x[1] = 0xFFFFFFFFu;
  k.set_bits(a, x);
  k.set_bits(b, y);
  k.run();
  std::vector<uint32_t> w_and, w_xor, w_shl, w_shr, w_ts, w_red(partitions, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    w_and.push_back(x[i] & y[i]);
    w_xor.push_back(x[i] ^ y[i]);
    w_shl.push_back(x[i] << (y[i] % 32));
    w_shr.push_back(x[i] >> (y[i] % 32));
    w_ts.push_back(~(x[i] | 0xF0u));
    w_red[i / free] |= x[i];
  }
  EXPECT_EQ(k.get_bits(d_and), w_and);
  EXPECT_EQ(k.get_bits(d_xor), w_xor);
  EXPECT_EQ(k.get_bits(d_shl), w_shl);
  EXPECT_EQ(k.get_bits(d_shr), w_shr);
  EXPECT_EQ(k.get_bits(d_ts), w_ts);
  EXPECT_EQ(k.get_bits(d_red), w_red);
}

TEST(SemanticsTest, BitvecOnFloatDtypeIsAnError) {
  Kernel k;
  auto a = k.tensor(DType::fp32, {4, 4});
  k.emit(Opcode::tensor_tensor).tensor("dst", a).tensor("data1", a).tensor("data2", a).word("op", "bitwise_and");
  k.build();
  try {
    k.run();
    FAIL() << "expected IsaError";
  } catch (const IsaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs integer dtypes"));
  }
}

// ---- Reductions ----

TEST(SemanticsTest, TensorReduceOverTrailingAxes) {
  std::mt19937 rng(6);
  for (DTypePair d : dtype_pairs()) {
    for (const char* op : {"add", "maximum", "minimum"}) {
      uint32_t P = 1 + rng() % 128, A = 1 + rng() % 5, B = 1 + rng() % 9, C = 1 + rng() % 13;
      bool two_axes = rng() % 2, negate = rng() % 2;
      Kernel k;
      auto data = k.tensor(d.in, {P, A, B, C});
      uint32_t inner = two_axes ? B * C : C;
      auto dst = k.tensor(d.out, {P, A * (two_axes ? 1 : B)});
      k.emit(Opcode::tensor_reduce).tensor("dst", dst).word("op", op).tensor("data", data)
          .word("axis", two_axes ? "[2, 3]" : "[3]").imm("negate", negate).imm("keepdims", 0);
      k.build();
      bool is_add = std::string(op) == "add";
      // Sums use finite values: the order of additions differs from the double reference.
      Tile x = k.set(data, random_values(rng, size_t{P} * A * B * C, !is_add));
      k.run();
      std::vector<double> want_sum;
      std::vector<float> want_exact;
      for (size_t r = 0; r < x.values.size() / inner; ++r) {
        double acc = x.values[r * inner];
        for (uint32_t i = 1; i < inner; ++i) acc = ref_alu(*parse_alu_op(op), acc, x.values[r * inner + i]);
        if (negate) acc = -acc;
        want_sum.push_back(acc);
        want_exact.push_back(round_to(d.out, f32(acc)));
      }
      std::string what = std::string("tensor_reduce ") + op + " " + std::string(dtype_name(d.in));
      if (is_add) {
        // Tolerance: fp32 sequential sum vs double sum, plus the destination's rounding.
        double rel = d.out == DType::fp32 ? 1e-5 : 1e-2;
        Tile got = k.get(dst);
        for (size_t i = 0; i < want_sum.size(); ++i) {
          EXPECT_NEAR(got.values[i], want_sum[i], rel * (1.0 + std::fabs(want_sum[i])) * inner) << what << " " << i;
        }
      } else {
        expect_exact(k.get(dst), want_exact, what);
      }
    }
  }
}

TEST(SemanticsTest, TensorReduceRejectsBadAxisAndShape) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {8, 4, 6});
  auto dst = k.tensor(DType::fp32, {8, 4});
  k.emit(Opcode::tensor_reduce).tensor("dst", dst).word("op", "add").tensor("data", data).word("axis", "[1]");
  k.build();
  EXPECT_THROW(
      {
        try {
          k.run();
        } catch (const IsaError& e) {
          EXPECT_THAT(e.what(), HasSubstr("instruction 0 tensor_reduce: axis must list the last free axes"));
          throw;
        }
      },
      IsaError);
  Kernel k2;
  auto data2 = k2.tensor(DType::fp32, {8, 4, 6});
  auto bad2 = k2.tensor(DType::fp32, {8, 3});
  k2.emit(Opcode::tensor_reduce).tensor("dst", bad2).word("op", "add").tensor("data", data2).word("axis", "[2]");
  k2.build();
  try {
    k2.run();
    FAIL() << "expected IsaError";
  } catch (const IsaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dst must be [8, 4], got [8, 3]"));
  }
}

TEST(SemanticsTest, TensorPartitionReduce) {
  std::mt19937 rng(7);
  Kernel k;
  const uint32_t P = 77, F = 13;
  auto data = k.tensor(DType::bf16, {P, F});
  auto dmax = k.tensor(DType::bf16, {1, F}), dsum = k.tensor(DType::fp32, {1, F});
  k.emit(Opcode::tensor_partition_reduce).tensor("dst", dmax).word("op", "maximum").tensor("data", data);
  k.emit(Opcode::tensor_partition_reduce).tensor("dst", dsum).word("op", "add").tensor("data", data);
  k.build();
  Tile x = k.set(data, random_values(rng, P * F, false));
  k.run();
  std::vector<float> want_max;
  std::vector<double> want_sum;
  for (uint32_t i = 0; i < F; ++i) {
    double m = -kInf, s = 0;
    for (uint32_t p = 0; p < P; ++p) {
      m = std::max<double>(m, x.at(p, i));
      s += x.at(p, i);
    }
    want_max.push_back(round_to(DType::bf16, f32(m)));
    want_sum.push_back(s);
  }
  expect_exact(k.get(dmax), want_max, "partition max");
  expect_near_rel(k.get(dsum), want_sum, 1e-3, "partition sum (fp32 order differs from double)");
}

// ---- Copies and selects ----

TEST(SemanticsTest, TensorCopyCastsAndCopiesBitsExactly) {
  std::mt19937 rng(8);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    Kernel k;
    auto src = k.tensor(d.in, {s.partitions, s.free}), dst = k.tensor(d.out, {s.partitions, s.free});
    k.emit(Opcode::tensor_copy).tensor("dst", dst).tensor("src", src);
    k.build();
    Tile x = k.set(src, random_values(rng, size_t{s.partitions} * s.free));
    k.run();
    std::vector<float> want;
    for (float v : x.values) want.push_back(round_to(d.out, v));
    expect_exact(k.get(dst), want, "tensor_copy " + label(d, s));
  }
  Kernel k;
  auto src = k.tensor(DType::int32, {2, 2}), dst = k.tensor(DType::int32, {2, 2});
  auto fsrc = k.tensor(DType::fp32, {1, 1}), fdst = k.tensor(DType::fp32, {1, 1});
  k.emit(Opcode::tensor_copy).tensor("dst", dst).tensor("src", src);
  k.emit(Opcode::tensor_copy).tensor("dst", fdst).tensor("src", fsrc);
  k.build();
  k.set_bits(src, {0x7FFFFFFFu, 0x01000001u, 0x80000000u, 0xFFFFFFFFu});
  k.set_bits(fsrc, {0x7FA00001u});  // a signalling NaN with a payload
  k.run();
  EXPECT_EQ(k.get_bits(dst), (std::vector<uint32_t>{0x7FFFFFFFu, 0x01000001u, 0x80000000u, 0xFFFFFFFFu}));
  EXPECT_EQ(k.get_bits(fdst), (std::vector<uint32_t>{0x7FA00001u}));
}

TEST(SemanticsTest, TensorCopyPredicated) {
  std::mt19937 rng(9);
  for (DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
    for (bool reverse : {false, true}) {
      Shape s = random_shape(rng);
      size_t n = size_t{s.partitions} * s.free;
      Kernel k;
      auto dst = k.tensor(dtype, {s.partitions, s.free}), src = k.tensor(dtype, {s.partitions, s.free});
      auto dst2 = k.tensor(dtype, {s.partitions, s.free});
      auto pred = k.tensor(DType::uint8, {s.partitions, s.free});
      k.emit(Opcode::tensor_copy_predicated).tensor("dst", dst).tensor("src", src).tensor("predicate", pred)
          .imm("reverse_pred", reverse);
      k.emit(Opcode::tensor_copy_predicated).tensor("dst", dst2).imm("src", 1.00390625).tensor("predicate", pred)
          .imm("reverse_pred", reverse);
      k.build();
      Tile old = k.set(dst, random_values(rng, n));
      Tile old2 = k.set(dst2, random_values(rng, n));
      Tile x = k.set(src, random_values(rng, n));
      std::vector<float> p(n);
      for (float& v : p) v = static_cast<float>(rng() % 3);
      k.set(pred, p);
      k.run();
      std::vector<float> want, want2;
      for (size_t i = 0; i < n; ++i) {
        bool take = (p[i] != 0) != reverse;
        want.push_back(take ? x.values[i] : old.values[i]);
        want2.push_back(take ? round_to(dtype, 1.00390625f) : old2.values[i]);
      }
      expect_exact(k.get(dst), want, "copy_predicated tensor");
      expect_exact(k.get(dst2), want2, "copy_predicated immediate");
    }
  }
}

TEST(SemanticsTest, SelectReduceWithReduction) {
  std::mt19937 rng(10);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    size_t n = size_t{s.partitions} * s.free;
    Kernel k;
    auto dst = k.tensor(d.out, {s.partitions, s.free}), on_true = k.tensor(d.in, {s.partitions, s.free});
    auto pred = k.tensor(DType::int16, {s.partitions, s.free}), on_false = k.tensor(DType::fp32, {s.partitions, 1});
    auto res = k.tensor(DType::fp32, {s.partitions, 1});
    k.emit(Opcode::select_reduce).tensor("dst", dst).tensor("predicate", pred).tensor("on_true", on_true)
        .tensor("on_false", on_false).tensor("reduce_res", res).word("reduce_op", "maximum");
    k.build();
    Tile x = k.set(on_true, random_values(rng, n));
    Tile f = k.set(on_false, random_values(rng, s.partitions));
    std::vector<float> p(n);
    for (float& v : p) v = static_cast<float>(static_cast<int>(rng() % 3) - 1);
    k.set(pred, p);
    k.run();
    std::vector<float> want, want_res;
    for (uint32_t r = 0; r < s.partitions; ++r) {
      double m = 0;
      for (uint32_t i = 0; i < s.free; ++i) {
        double v = p[r * s.free + i] != 0 ? x.at(r, i) : f.at(r, 0);
        m = i == 0 ? v : ref_alu(AluOp::maximum, m, v);
        want.push_back(round_to(d.out, f32(v)));
      }
      want_res.push_back(f32(m));
    }
    expect_exact(k.get(dst), want, "select_reduce " + label(d, s));
    expect_exact(k.get(res), want_res, "select_reduce reduce_res " + label(d, s));
  }
}

TEST(SemanticsTest, RangeSelect) {
  std::mt19937 rng(11);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    Kernel k;
    auto dst = k.tensor(d.out, {s.partitions, s.free}), on_true = k.tensor(d.in, {s.partitions, s.free});
    auto b0 = k.tensor(DType::fp32, {s.partitions, 1}), b1 = k.tensor(DType::fp32, {s.partitions, 1});
    auto res = k.tensor(DType::fp32, {s.partitions, 1});
    k.emit(Opcode::range_select).tensor("dst", dst).tensor("on_true_tile", on_true).word("comp_op0", "greater_equal")
        .word("comp_op1", "less").tensor("bound0", b0).tensor("bound1", b1).tensor("reduce_res", res)
        .imm("range_start", 3).imm("on_false_value", -3.4028235e38);
    k.build();
    Tile x = k.set(on_true, random_values(rng, size_t{s.partitions} * s.free));
    std::vector<float> lo(s.partitions), hi(s.partitions);
    for (uint32_t p = 0; p < s.partitions; ++p) {
      lo[p] = static_cast<float>(rng() % (s.free + 6));
      hi[p] = lo[p] + static_cast<float>(rng() % 8);
    }
    k.set(b0, lo);
    k.set(b1, hi);
    k.run();
    std::vector<float> want, want_res;
    for (uint32_t p = 0; p < s.partitions; ++p) {
      double m = 0;
      for (uint32_t i = 0; i < s.free; ++i) {
        double index = i + 3.0;
        double v = index >= lo[p] && index < hi[p] ? x.at(p, i) : -3.4028235e38;
        m = i == 0 ? v : ref_alu(AluOp::maximum, m, v);
        want.push_back(round_to(d.out, f32(v)));
      }
      want_res.push_back(f32(m));  // the accumulator holds FP32_MIN where a bf16 dst holds -inf
    }
    expect_exact(k.get(dst), want, "range_select " + label(d, s));
    expect_exact(k.get(res), want_res, "range_select reduce_res " + label(d, s));
  }
}

TEST(SemanticsTest, AffineSelectCausalMask) {
  std::mt19937 rng(12);
  for (DTypePair d : dtype_pairs()) {
    uint32_t P = 1 + rng() % 128, A = 1 + rng() % 4, B = 1 + rng() % 40;
    Kernel k;
    auto dst = k.tensor(d.out, {P, A, B}), on_true = k.tensor(d.in, {P, A, B});
    // affine = 5 + 1*p - 3*a - 1*b; keep where >= 0.
    k.emit(Opcode::affine_select).tensor("dst", dst)
        .word("pattern", "[[-3, " + std::to_string(A) + "], [-1, " + std::to_string(B) + "]]")
        .imm("channel_multiplier", 1).tensor("on_true_tile", on_true).imm("on_false_value", -9984.0)
        .word("cmp_op", "greater_equal").imm("offset", 5);
    k.build();
    Tile x = k.set(on_true, random_values(rng, size_t{P} * A * B));
    k.run();
    std::vector<float> want;
    for (uint32_t p = 0; p < P; ++p) {
      for (uint32_t a = 0; a < A; ++a) {
        for (uint32_t b = 0; b < B; ++b) {
          long affine = 5 + long(p) - 3 * long(a) - long(b);
          want.push_back(round_to(d.out, affine >= 0 ? x.at(p, a * B + b) : -9984.0f));
        }
      }
    }
    expect_exact(k.get(dst), want, "affine_select");
  }
}

// ---- Generators ----

TEST(SemanticsTest, IotaAndMemset) {
  Kernel k;
  const uint32_t P = 100;
  auto i32 = k.tensor(DType::int32, {P, 6}), f32t = k.tensor(DType::bf16, {P, 6});
  auto big = k.tensor(DType::int32, {2, 2}), ms = k.tensor(DType::bf16, {P, 7}), msi = k.tensor(DType::int32, {3, 3});
  k.emit(Opcode::iota).tensor("dst", i32).word("pattern", "[[10, 2], [-1, 3]]").imm("offset", 7)
      .imm("channel_multiplier", 1000);
  k.emit(Opcode::iota).tensor("dst", f32t).word("pattern", "[[10, 2], [-1, 3]]").imm("offset", 7)
      .imm("channel_multiplier", 1000);
  k.emit(Opcode::iota).tensor("dst", big).word("pattern", "[[1, 2]]").imm("offset", 16777217)
      .imm("channel_multiplier", 2147483647);
  k.emit(Opcode::memset).tensor("dst", ms).imm("value", 1.01171875);
  k.emit(Opcode::memset).tensor("dst", msi).imm("value", 16777217);
  k.build();
  k.run();
  std::vector<float> want, want_bf;
  for (uint32_t p = 0; p < P; ++p) {
    for (int w = 0; w < 2; ++w) {
      for (int x = 0; x < 3; ++x) {
        int v = 7 + 1000 * int(p) + 10 * w - x;
        want.push_back(static_cast<float>(v));
        want_bf.push_back(round_to(DType::bf16, static_cast<float>(v)));
      }
    }
  }
  expect_exact(k.get(i32), want, "iota int32");
  expect_exact(k.get(f32t), want_bf, "iota bf16");
  // int32 arithmetic wraps; values beyond 2^24 land exactly.
  EXPECT_EQ(k.get_bits(big), (std::vector<uint32_t>{16777217u, 16777218u, 16777217u + 2147483647u,
                                                    16777218u + 2147483647u}));
  expect_exact(k.get(ms), std::vector<float>(P * 7, 1.015625f), "memset bf16 tie rounds up");
  EXPECT_EQ(k.get_bits(msi), std::vector<uint32_t>(9, 16777217u));
}

// ---- Scans and statistics ----

TEST(SemanticsTest, TensorTensorScan) {
  std::mt19937 rng(13);
  for (DTypePair d : dtype_pairs()) {
    Shape s = random_shape(rng);
    Kernel k;
    auto dst = k.tensor(d.out, {s.partitions, s.free});
    auto a = k.tensor(d.in, {s.partitions, s.free}), b = k.tensor(d.in, {s.partitions, s.free});
    auto init = k.tensor(DType::fp32, {s.partitions, 1});
    // A decaying running sum: r[i] = (a[i] * r[i-1]) + b[i].
    k.emit(Opcode::tensor_tensor_scan).tensor("dst", dst).tensor("data0", a).tensor("data1", b)
        .tensor("initial", init).word("op0", "multiply").word("op1", "add");
    k.build();
    std::uniform_real_distribution<float> decay(0.0f, 1.0f);
    std::vector<float> av(size_t{s.partitions} * s.free);
    for (float& v : av) v = decay(rng);
    Tile x = k.set(a, av);
    Tile y = k.set(b, random_values(rng, av.size()));
    Tile c = k.set(init, random_values(rng, s.partitions, false));
    k.run();
    std::vector<float> want;
    for (uint32_t p = 0; p < s.partitions; ++p) {
      double state = c.at(p, 0);
      for (uint32_t i = 0; i < s.free; ++i) {
        state = f32(f32(double{x.at(p, i)} * state) + y.at(p, i));
        want.push_back(round_to(d.out, static_cast<float>(state)));
      }
    }
    expect_exact(k.get(dst), want, "tensor_tensor_scan " + label(d, s));
  }
}

TEST(SemanticsTest, BnStatsAndAggr) {
  std::mt19937 rng(14);
  for (DType in : {DType::fp32, DType::bf16, DType::fp16}) {
    for (uint32_t free : {1u, 2u, 7u, 300u, 512u}) {
      uint32_t P = 1 + rng() % 128;
      Kernel k;
      uint32_t data_id = 0, stats_id = 0;
      auto data = k.tensor(in, {P, free}, &data_id);
      auto stats_all = k.tensor(DType::fp32, {P, 12}, &stats_id);
      auto out = k.tensor(DType::fp32, {P, 2});
      auto half0 = k.slice(stats_id, {Slice::all(), Slice::range(0, 6)});
      auto half1 = k.slice(stats_id, {Slice::all(), Slice::range(6, 12)});
      auto second = k.slice(data_id, {Slice::all(), Slice::range(0, free / 2 + 1)});
      k.emit(Opcode::bn_stats).tensor("dst", half0).tensor("data", data);
      k.emit(Opcode::bn_stats).tensor("dst", half1).tensor("data", second);
      k.emit(Opcode::bn_aggr).tensor("dst", out).tensor("data", stats_all);
      k.build();
      Tile x = k.set(data, random_values(rng, size_t{P} * free, false));
      k.run();
      Tile st = k.get(stats_all);
      Tile got = k.get(out);
      uint32_t second_free = free / 2 + 1;
      std::vector<double> want_stats, want_out;
      for (uint32_t p = 0; p < P; ++p) {
        for (uint32_t n : {free, second_free}) {
          for (uint32_t parity = 0; parity < 2; ++parity) {
            double count = 0, sum = 0, m2 = 0;
            for (uint32_t i = parity; i < n; i += 2) count += 1, sum += x.at(p, i);
            double mean = count ? sum / count : 0;
            for (uint32_t i = parity; i < n; i += 2) m2 += (x.at(p, i) - mean) * (x.at(p, i) - mean);
            want_stats.insert(want_stats.end(), {count, mean, m2});
          }
        }
        double count = 0, sum = 0, sq = 0;
        for (uint32_t n : {free, second_free}) {
          for (uint32_t i = 0; i < n; ++i) count += 1, sum += x.at(p, i);
        }
        double mean = sum / count;
        for (uint32_t n : {free, second_free}) {
          for (uint32_t i = 0; i < n; ++i) sq += (x.at(p, i) - mean) * (x.at(p, i) - mean);
        }
        want_out.insert(want_out.end(), {mean, sq / count});
      }
      // Tolerance: fp32 sums in element order vs double; values are up to 2^12 in magnitude.
      std::string what = "bn_stats " + std::string(dtype_name(in)) + " F=" + std::to_string(free);
      expect_near_rel(st, want_stats, 1e-4, what);
      expect_near_rel(got, want_out, 1e-4, "bn_aggr " + what);
    }
  }
}

TEST(SemanticsTest, BnStatsRejectsMoreThan512) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {4, 513}), dst = k.tensor(DType::fp32, {4, 6});
  k.emit(Opcode::bn_stats).tensor("dst", dst).tensor("data", data);
  k.build();
  try {
    k.run();
    FAIL() << "expected IsaError";
  } catch (const IsaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bn_stats takes at most 512"));
  }
}

// ---- Top-8 ----

TEST(SemanticsTest, Max8AndFindIndex8) {
  std::mt19937 rng(15);
  for (DTypePair d : dtype_pairs()) {
    uint32_t P = 1 + rng() % 128, F = 8 + rng() % 300;
    Kernel k;
    auto src = k.tensor(d.in, {P, F}), top = k.tensor(d.out, {P, 8}), index = k.tensor(DType::uint32, {P, 8});
    auto top_in = k.tensor(d.in, {P, 8});
    k.emit(Opcode::max8).tensor("dst", top).tensor("src", src);
    k.emit(Opcode::max8).tensor("dst", top_in).tensor("src", src);
    k.emit(Opcode::nc_find_index8).tensor("dst", index).tensor("data", src).tensor("vals", top_in);
    k.build();
    // Small integers make duplicates likely, so first-occurrence matters; no NaN here.
    std::vector<float> v(size_t{P} * F);
    for (float& e : v) e = static_cast<float>(static_cast<int>(rng() % 50) - 25) * 0.5f;
    if (F > 9) v[3] = kInf, v[5] = -kInf;
    Tile x = k.set(src, v);
    k.run();
    std::vector<float> want, want_index;
    for (uint32_t p = 0; p < P; ++p) {
      std::vector<double> row(x.row(p), x.row(p) + F);
      std::sort(row.begin(), row.end(), std::greater<double>());
      for (int j = 0; j < 8; ++j) {
        want.push_back(round_to(d.out, f32(row[j])));
        auto at = std::find(x.row(p), x.row(p) + F, static_cast<float>(row[j]));
        want_index.push_back(static_cast<float>(at - x.row(p)));
      }
    }
    expect_exact(k.get(top), want, "max8 " + std::string(dtype_name(d.in)));
    expect_exact(k.get(index), want_index, "nc_find_index8 " + std::string(dtype_name(d.in)));
  }
}

TEST(SemanticsTest, FindIndex8MissingValueIsAllOnes) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {1, 9}), vals = k.tensor(DType::fp32, {1, 8});
  auto d32 = k.tensor(DType::uint32, {1, 8}), d16 = k.tensor(DType::uint16, {1, 8});
  k.emit(Opcode::nc_find_index8).tensor("dst", d32).tensor("data", data).tensor("vals", vals);
  k.emit(Opcode::nc_find_index8).tensor("dst", d16).tensor("data", data).tensor("vals", vals);
  k.build();
  k.set(data, {5, 4, 3, 2, 1, 0, -0.0f, kNaN, 4});
  k.set(vals, {4, -0.0f, kNaN, 7, 5, 1, 2, 3});
  k.run();
  EXPECT_EQ(k.get_bits(d32), (std::vector<uint32_t>{1, 5, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, 4, 3, 2}));
  expect_exact(k.get(d16), {1, 5, 65535, 65535, 0, 4, 3, 2}, "uint16 sentinel");
}

// ---- Activation ----

TEST(SemanticsTest, ActivationExactFunctions) {
  std::mt19937 rng(16);
  for (DTypePair d : dtype_pairs()) {
    for (const char* op : {"copy", "relu", "square", "prelu"}) {
      Shape s = random_shape(rng);
      bool tensor_operands = rng() % 2;
      Kernel k;
      auto data = k.tensor(d.in, {s.partitions, s.free}), dst = k.tensor(d.out, {s.partitions, s.free});
      auto scale = k.tensor(DType::fp32, {s.partitions, 1}), bias = k.tensor(DType::bf16, {s.partitions, 1});
      auto res = k.tensor(DType::fp32, {s.partitions, 1});
      auto inst = k.emit(Opcode::activation);
      inst.tensor("dst", dst).word("op", op).tensor("data", data).imm("alpha", 0.25).word("reduce_op", "maximum")
          .tensor("reduce_res", res);
      if (tensor_operands) {
        inst.tensor("scale", scale).tensor("bias", bias);
      } else {
        inst.imm("scale", 0.7).imm("bias", -1.5);
      }
      k.build();
      Tile x = k.set(data, random_values(rng, size_t{s.partitions} * s.free));
      Tile sc = k.set(scale, random_values(rng, s.partitions, false));
      Tile bi = k.set(bias, random_values(rng, s.partitions, false));
      k.run();
      std::vector<float> want, want_res;
      std::string name = op;
      for (uint32_t p = 0; p < s.partitions; ++p) {
        double sv = tensor_operands ? sc.at(p, 0) : f32(0.7), bv = tensor_operands ? bi.at(p, 0) : -1.5;
        double m = 0;
        for (uint32_t i = 0; i < s.free; ++i) {
          double t = f32(f32(x.at(p, i) * sv) + bv);
          double y = name == "copy" ? t : name == "relu" ? (t > 0 ? t : 0.0) : name == "square" ? t * t
                                                                              : (t > 0 ? t : f32(0.25 * t));
          y = f32(y);
          m = i == 0 ? y : ref_alu(AluOp::maximum, m, y);
          want.push_back(round_to(d.out, static_cast<float>(y)));
        }
        want_res.push_back(f32(m));  // reduce_res sees the fp32 activation output, before dst's rounding
      }
      expect_exact(k.get(dst), want, std::string("activation ") + op + " " + label(d, s));
      expect_exact(k.get(res), want_res, std::string("activation reduce_res ") + op + " " + label(d, s));
    }
  }
}

TEST(SemanticsTest, ActivationTranscendentalAndReduceAdd) {
  std::mt19937 rng(17);
  for (const char* op : {"exp", "tanh", "sigmoid", "silu", "gelu"}) {
    Shape s = random_shape(rng);
    Kernel k;
    auto data = k.tensor(DType::fp32, {s.partitions, s.free}), dst = k.tensor(DType::fp32, {s.partitions, s.free});
    auto res = k.tensor(DType::fp32, {s.partitions, 1});
    k.emit(Opcode::activation_reduce).tensor("dst", dst).word("op", op).tensor("data", data).word("reduce_op", "add")
        .tensor("reduce_res", res).imm("scale", 0.5).imm("bias", 0.25);
    k.build();
    std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
    std::vector<float> v(size_t{s.partitions} * s.free);
    for (float& e : v) e = dist(rng);
    Tile x = k.set(data, v);
    k.run();
    std::vector<double> want, want_res;
    std::string name = op;
    for (uint32_t p = 0; p < s.partitions; ++p) {
      double sum = 0;
      for (uint32_t i = 0; i < s.free; ++i) {
        double t = f32(f32(x.at(p, i) * 0.5) + 0.25);
        double sig = 1.0 / (1.0 + std::exp(-t));
        double y = name == "exp" ? std::exp(t) : name == "tanh" ? std::tanh(t) : name == "sigmoid" ? sig
                   : name == "silu" ? t * sig : 0.5 * t * (1.0 + std::erf(t / std::sqrt(2.0)));
        want.push_back(y);
        sum += y;
      }
      want_res.push_back(sum);
    }
    // Tolerance: fp32 library functions vs double, and an fp32 sum in element order.
    expect_near_rel(k.get(dst), want, 1e-5, std::string("activation ") + op);
    expect_near_rel(k.get(res), want_res, 1e-5 * s.free, std::string("activation_reduce ") + op);
  }
}

// ---- Shape errors name the instruction and the operands ----

std::string run_error(Kernel& k) {
  try {
    k.run();
  } catch (const IsaError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SemanticsTest, ShapeMismatchesAreErrors) {
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), b = k.tensor(DType::fp32, {4, 9});
    k.emit(Opcode::tensor_tensor).tensor("dst", a).tensor("data1", a).tensor("data2", b).word("op", "add");
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("instruction 0 tensor_tensor: data1 is [4, 8] but data2 is [4, 9]"));
  }
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), col = k.tensor(DType::fp32, {4, 2});
    k.emit(Opcode::tensor_scalar).tensor("dst", a).tensor("data", a).word("op0", "add").tensor("operand0", col);
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("operand0: expected one element per partition for 4 partitions, got [4, 2]"));
  }
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), d = k.tensor(DType::bf16, {3, 8});
    k.emit(Opcode::activation).tensor("dst", d).word("op", "exp").tensor("data", a);
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("activation: dst is [3, 8] but data is [4, 8]"));
  }
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), d = k.tensor(DType::fp32, {4, 7});
    k.emit(Opcode::iota).tensor("dst", d).word("pattern", "[[1, 8]]");
    k.emit(Opcode::max8).tensor("dst", d).tensor("src", a);
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("iota: pattern generates 8 elements per partition but dst has 7"));
  }
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), r = k.tensor(DType::fp32, {4, 2});
    k.emit(Opcode::activation_reduce).tensor("dst", a).word("op", "copy").tensor("data", a).word("reduce_op", "add")
        .tensor("reduce_res", r);
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("reduce_res must be [4, 1], got [4, 2]"));
  }
  {
    Kernel k;
    auto a = k.tensor(DType::fp32, {4, 8}), d = k.tensor(DType::fp32, {4, 6});
    k.emit(Opcode::tensor_copy).tensor("dst", d).tensor("src", a);
    k.build();
    EXPECT_THAT(run_error(k), HasSubstr("tensor_copy: dst is [4, 6] but src is [4, 8]"));
  }
}

}  // namespace
}  // namespace trnsim::isa
