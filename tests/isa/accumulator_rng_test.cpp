// The Vector engine's accumulator instructions (tensor_scalar_reduce, tensor_scalar_cumulative, exponential; the
// registers shared across instructions by reduce_cmd), nc_match_replace8, and the PRNG instructions (rng, rand2,
// dropout, set_rng_seed, rand_set_state, rand_get_state), against references computed here: element loops in
// double rounded to fp32 after every step the engine performs in fp32, and an XORWOW written from Marsaglia's paper
// (independently of isa/rng.cpp) driven from states the test loads with rand_set_state.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/alu.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/legality.h"
#include "isa/numerics/float_format.h"
#include "isa/text_form.h"
#include "kernel_fixture.h"

namespace trnsim::isa {
namespace {

using numerics::round_to;

using testing_support::config;

double f32(double v) { return static_cast<float>(v); }

// Every program of this suite is legal: build() checks it.
class Kernel : public testing_support::Kernel {
 public:
  explicit Kernel(const std::string& target = "trn2") : testing_support::Kernel(target, /*check_legality=*/true) {}
};

void expect_exact(const Tile& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.values.size(), want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size() && failures < 5; ++i) {
    float g = got.values[i], w = want[i];
    if (!((std::isnan(g) && std::isnan(w)) || numerics::float_bits(g) == numerics::float_bits(w))) {
      ++failures;
      ADD_FAILURE() << what << " element " << i << ": got " << g << " want " << w;
    }
  }
}

std::vector<float> random_values(std::mt19937& rng, size_t count, float low = -4.0f, float high = 4.0f) {
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> out(count);
  for (float& v : out) v = dist(rng);
  return out;
}

double ref_op(AluOp op, double a, double b) {
  switch (op) {
    case AluOp::add: return a + b;
    case AluOp::subtract: return a - b;
    case AluOp::multiply: return a * b;
    case AluOp::maximum: return std::max(a, b);
    case AluOp::minimum: return std::min(a, b);
    default: ADD_FAILURE() << "ref_op: " << alu_op_name(op); return 0;
  }
}
double ref_identity(AluOp op) {
  switch (op) {
    case AluOp::multiply: return 1;
    case AluOp::maximum: return -std::numeric_limits<double>::infinity();
    case AluOp::minimum: return std::numeric_limits<double>::infinity();
    default: return 0;
  }
}

// ---- tensor_scalar_reduce ----

TEST(AccumulatorTest, TensorScalarReduceMatchesReference) {
  std::mt19937 rng(21);
  const AluOp ops0[] = {AluOp::add, AluOp::subtract, AluOp::multiply, AluOp::maximum};
  const AluOp reduce_ops[] = {AluOp::add, AluOp::multiply, AluOp::maximum, AluOp::minimum};
  for (DType out_dtype : {DType::fp32, DType::bf16}) {
    for (AluOp op0 : ops0) {
      for (AluOp reduce_op : reduce_ops) {
        const uint32_t P = 1 + rng() % 128, F = 1 + rng() % 40;
        const bool reverse = rng() % 2, per_partition = rng() % 2;
        Kernel k;
        auto data = k.tensor(DType::fp32, {P, F}), dst = k.tensor(out_dtype, {P, F});
        auto s0 = k.tensor(DType::fp32, {P, 1}), res = k.tensor(DType::fp32, {P, 1});
        auto inst = k.emit(Opcode::tensor_scalar_reduce);
        inst.tensor("dst", dst).tensor("data", data).word("op0", std::string(alu_op_name(op0)));
        inst.word("reduce_op", std::string(alu_op_name(reduce_op))).tensor("reduce_res", res);
        inst.imm("reverse0", reverse ? 1 : 0);
        if (per_partition) inst.tensor("operand0", s0); else inst.imm("operand0", 0.75);
        k.build();
        // Multiplying 40 values of magnitude up to 4 stays finite in fp32.
        Tile x = k.set(data, random_values(rng, size_t{P} * F, -1.5f, 1.5f));
        Tile c = k.set(s0, random_values(rng, P));
        k.run();
        std::vector<float> want_dst, want_res;
        for (uint32_t p = 0; p < P; ++p) {
          double s = per_partition ? c.at(p, 0) : 0.75, acc = ref_identity(reduce_op);
          for (uint32_t i = 0; i < F; ++i) {
            double v = f32(reverse ? ref_op(op0, s, x.at(p, i)) : ref_op(op0, x.at(p, i), s));
            want_dst.push_back(round_to(out_dtype, static_cast<float>(v)));
            acc = f32(ref_op(reduce_op, acc, v));  // the accumulator sees fp32 results, before dst's cast
          }
          want_res.push_back(static_cast<float>(acc));
        }
        std::string what = std::string(alu_op_name(op0)) + "/" + std::string(alu_op_name(reduce_op)) + " " +
                           std::string(dtype_name(out_dtype));
        expect_exact(k.get(dst), want_dst, "dst " + what);
        expect_exact(k.get(res), want_res, "reduce_res " + what);
      }
    }
  }
}

// reduce_cmd across instructions: reset_reduce without reduce_res keeps the sum in the registers, reduce adds the
// next tile and writes it out negated (the registers keep the positive sum), load_reduce starts from reduce_init.
TEST(AccumulatorTest, TensorScalarReduceChainsThroughTheRegisters) {
  std::mt19937 rng(22);
  const uint32_t P = 64, F = 24;
  Kernel k;
  auto a = k.tensor(DType::fp32, {P, F}), b = k.tensor(DType::fp32, {P, F}), dst = k.tensor(DType::fp32, {P, F});
  auto r1 = k.tensor(DType::fp32, {P, 1}), r2 = k.tensor(DType::fp32, {P, 1}), init = k.tensor(DType::fp32, {P, 1});
  auto r3 = k.tensor(DType::fp32, {P, 1});
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", dst).tensor("data", a).word("op0", "add").imm("operand0", 1.0)
      .word("reduce_op", "add");
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", dst).tensor("data", b).word("op0", "add").imm("operand0", 1.0)
      .word("reduce_op", "add").word("reduce_cmd", "reduce").tensor("reduce_res", r1).imm("reduce_res_negate", 1);
  // The registers hold the positive sum: one more tile with nothing added (multiply by 0) leaves it unchanged.
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", dst).tensor("data", b).word("op0", "multiply")
      .imm("operand0", 0.0).word("reduce_op", "add").word("reduce_cmd", "reduce").tensor("reduce_res", r2);
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", dst).tensor("data", a).word("op0", "multiply")
      .imm("operand0", 1.0).word("reduce_op", "maximum").word("reduce_cmd", "load_reduce").tensor("reduce_init", init)
      .tensor("reduce_res", r3);
  k.build();
  Tile x = k.set(a, random_values(rng, P * F)), y = k.set(b, random_values(rng, P * F));
  Tile i0 = k.set(init, random_values(rng, P, -8, 8));
  k.run();
  std::vector<float> want1, want2, want3;
  for (uint32_t p = 0; p < P; ++p) {
    double acc = 0, top = i0.at(p, 0);
    for (uint32_t i = 0; i < F; ++i) acc = f32(acc + f32(x.at(p, i) + 1.0));
    for (uint32_t i = 0; i < F; ++i) acc = f32(acc + f32(y.at(p, i) + 1.0));
    double after_zero = acc;
    for (uint32_t i = 0; i < F; ++i) after_zero = f32(after_zero + 0.0 * y.at(p, i));
    for (uint32_t i = 0; i < F; ++i) top = std::max<double>(top, x.at(p, i));
    want1.push_back(static_cast<float>(-acc));
    want2.push_back(static_cast<float>(after_zero));
    want3.push_back(static_cast<float>(top));
  }
  expect_exact(k.get(r1), want1, "reset then reduce, negated");
  expect_exact(k.get(r2), want2, "registers kept the un-negated sum");
  expect_exact(k.get(r3), want3, "load_reduce from reduce_init");
}

// select_reduce and range_select reduce in the same registers: a following reduce_cmd=reduce continues from them.
TEST(AccumulatorTest, SelectReduceLeavesItsReductionInTheRegisters) {
  std::mt19937 rng(33);
  const uint32_t P = 32, F = 16;
  Kernel k;
  auto pred = k.tensor(DType::fp32, {P, F}), on_true = k.tensor(DType::fp32, {P, F}), dst = k.tensor(DType::fp32, {P, F});
  auto low = k.tensor(DType::fp32, {P, F}), res = k.tensor(DType::fp32, {P, 1}), res2 = k.tensor(DType::fp32, {P, 1});
  k.emit(Opcode::select_reduce).tensor("dst", dst).tensor("predicate", pred).tensor("on_true", on_true)
      .imm("on_false", -50.0).word("reduce_op", "maximum").tensor("reduce_res", res);
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", dst).tensor("data", low).word("op0", "add").imm("operand0", 0.0)
      .word("reduce_op", "maximum").word("reduce_cmd", "reduce").tensor("reduce_res", res2);
  k.build();
  std::vector<float> p(P * F);
  for (float& e : p) e = static_cast<float>(rng() % 2);
  Tile sel = k.set(pred, p), x = k.set(on_true, random_values(rng, P * F));
  k.set(low, std::vector<float>(P * F, -100.0f));
  k.run();
  std::vector<float> want;
  for (uint32_t q = 0; q < P; ++q) {
    double top = -100.0;  // the second instruction's elements
    for (uint32_t i = 0; i < F; ++i) top = std::max<double>(top, sel.at(q, i) != 0 ? x.at(q, i) : -50.0);
    want.push_back(static_cast<float>(top));
  }
  expect_exact(k.get(res2), want, "select_reduce then reduce");
}

// activation's reduce_cmd (NKI 0.7; nki-library's router_topk passes reset_reduce): reduce folds onto the registers
// an earlier activation left, idle leaves them and reduce_res reads them back, reset sets reduce_op's identity, and
// the default (auto) with reduce_res is the instruction's own reduction, as before reduce_cmd existed.
// A bf16 dst folds each row as it is computed; an fp32 dst is folded after the rows, eight rows' chains at once
// (20 rows: two groups of eight and four left over), with the same values.
class ActivationReduceCmd : public ::testing::TestWithParam<DType> {};

TEST_P(ActivationReduceCmd, DrivesTheScalarRegisters) {
  const uint32_t P = 20, F = 3;
  Kernel k;
  auto data = k.tensor(DType::fp32, {P, F}), data2 = k.tensor(DType::fp32, {P, F}), dst = k.tensor(GetParam(), {P, F});
  std::vector<AccessPattern> res;
  for (int i = 0; i < 6; ++i) res.push_back(k.tensor(DType::fp32, {P, 1}));
  auto act = [&](const AccessPattern& in, const char* cmd, const AccessPattern* out, const char* op = "add") {
    auto e = k.emit(Opcode::activation);
    e.tensor("dst", dst).word("op", "copy").tensor("data", in).word("reduce_op", op);
    if (cmd) e.word("reduce_cmd", cmd);
    if (out) e.tensor("reduce_res", *out);
  };
  act(data, nullptr, &res[0]);          // auto with reduce_res: reset_reduce
  act(data2, "reduce", &res[1]);        // folds on top, element by element
  act(data2, "reduce", nullptr);        // folds again, reads nothing out
  act(data2, "idle", &res[2]);          // reads the registers as they are
  act(data2, "reset", &res[3]);         // identity of add, no fold
  act(data, "reset_reduce", &res[4], "maximum");
  act(data2, "idle", &res[5]);          // the plain activation without reduce_res leaves the registers too
  k.build();
  std::vector<float> a = {1.0f / 3, 1, 2, -1, -2, -3, 0.5f, 0.25f, 0.125f, 10, 20, 30};
  std::vector<float> b = {0.1f, 0.2f, 0.3f, 4, 5, 6, -7, 8, -9, 1e-3f, 1e-4f, 1e-5f};
  for (uint32_t i = 12; i < P * F; ++i) {
    a.push_back(std::ldexp(float(int(i * 37 % 23) - 11) / 3.0f, int(i % 7) - 3));
    b.push_back(std::ldexp(float(int(i * 53 % 19) - 9) / 7.0f, int(i % 5) - 2));
  }
  k.set(data, a);
  k.set(data2, b);
  k.run();
  std::vector<float> sums, once, twice, maxima;
  for (uint32_t p = 0; p < P; ++p) {
    float s = a[p * F];
    for (uint32_t i = 1; i < F; ++i) s = float(f32(double(s) + a[p * F + i]));
    sums.push_back(s);
    float t = s;
    for (uint32_t i = 0; i < F; ++i) t = float(f32(double(t) + b[p * F + i]));
    once.push_back(t);
    for (uint32_t i = 0; i < F; ++i) t = float(f32(double(t) + b[p * F + i]));
    twice.push_back(t);
    maxima.push_back(std::max({a[p * F], a[p * F + 1], a[p * F + 2]}));
  }
  expect_exact(k.get(res[0]), sums, "auto with reduce_res");
  expect_exact(k.get(res[1]), once, "reduce");
  expect_exact(k.get(res[2]), twice, "idle after a second reduce");
  expect_exact(k.get(res[3]), std::vector<float>(P, 0.0f), "reset");
  expect_exact(k.get(res[4]), maxima, "reset_reduce maximum");
  expect_exact(k.get(res[5]), maxima, "idle leaves them");
}

INSTANTIATE_TEST_SUITE_P(DstDtypes, ActivationReduceCmd, ::testing::Values(DType::bf16, DType::fp32),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(dtype_name(info.param)); });

TEST(AccumulatorTest, RangeSelectReduceCmdContinuesAcrossTiles) {
  // nki-library's attention_cte masks score tiles with range_select(reduce_cmd=reset_reduce, reduce_res=...): a
  // second tile with reduce_cmd=reduce gives the running maximum of both; idle leaves the registers.
  const uint32_t P = 8, F = 16;
  std::mt19937 rng(41);
  Kernel k;
  auto x0 = k.tensor(DType::fp32, {P, F}), x1 = k.tensor(DType::fp32, {P, F}), dst = k.tensor(DType::fp32, {P, F});
  auto lo = k.tensor(DType::fp32, {P, 1}), hi = k.tensor(DType::fp32, {P, 1});
  auto r0 = k.tensor(DType::fp32, {P, 1}), r1 = k.tensor(DType::fp32, {P, 1}), r2 = k.tensor(DType::fp32, {P, 1});
  auto sel = [&](const AccessPattern& in, const char* cmd, const AccessPattern* out, double start) {
    auto e = k.emit(Opcode::range_select);
    e.tensor("dst", dst).tensor("on_true_tile", in).word("comp_op0", "greater_equal").word("comp_op1", "less")
        .tensor("bound0", lo).tensor("bound1", hi).imm("range_start", start).word("reduce_cmd", cmd);
    if (out) e.tensor("reduce_res", *out);
  };
  sel(x0, "reset_reduce", &r0, 0);
  sel(x1, "reduce", &r1, F);
  sel(x0, "idle", &r2, 0);
  k.build();
  std::vector<float> lows(P), highs(P);
  for (uint32_t p = 0; p < P; ++p) {
    lows[p] = float(p);
    highs[p] = float(2 * F - 3 * p);
  }
  Tile a = k.set(x0, random_values(rng, P * F)), b = k.set(x1, random_values(rng, P * F));
  k.set(lo, lows);
  k.set(hi, highs);
  k.run();
  const float fp32_min = -std::numeric_limits<float>::infinity();  // the ISA's default on_false_value
  std::vector<float> first, both;
  for (uint32_t p = 0; p < P; ++p) {
    float m = fp32_min;
    for (uint32_t i = 0; i < F; ++i) {
      if (i >= lows[p] && i < highs[p]) m = std::max(m, a.at(p, i));
    }
    first.push_back(m);
    for (uint32_t i = 0; i < F; ++i) {
      if (F + i >= lows[p] && F + i < highs[p]) m = std::max(m, b.at(p, i));
    }
    both.push_back(m);
  }
  expect_exact(k.get(r0), first, "reset_reduce");
  expect_exact(k.get(r1), both, "reduce across the second tile");
  expect_exact(k.get(r2), both, "idle reads them back");
}

TEST(AccumulatorTest, ActivationReduceCmdNeedsReduceOp) {
  for (const char* cmd : {"reduce", "reset", "reset_reduce"}) {
    const std::string instruction = std::string("activation dst=a, op=copy, data=a, reduce_cmd=") + cmd;
    Program program = parse_tasm("kernel k\ntarget trn2\nsbuf a : fp32[4, 8]\n" + instruction + "\n", "case.tasm");
    CoreState state(config("trn2").core, program);
    EXPECT_THROW(interpret(program, state, config("trn2")), IsaError) << instruction;
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn2"))) rules.push_back(issue.rule);
    EXPECT_THAT(rules, ::testing::Contains("missing-operand")) << instruction;
  }
}

// ---- tensor_scalar_cumulative ----

TEST(AccumulatorTest, TensorScalarCumulativeScansAndCarriesOver) {
  std::mt19937 rng(23);
  for (AluOp op1 : {AluOp::add, AluOp::subtract, AluOp::multiply, AluOp::maximum, AluOp::minimum}) {
    for (DType out_dtype : {DType::fp32, DType::bf16, DType::fp16}) {
      const uint32_t P = 1 + rng() % 128, F = 1 + rng() % 50;
      Kernel k;
      auto src = k.tensor(DType::fp32, {P, F}), src2 = k.tensor(DType::fp32, {P, F});
      auto dst = k.tensor(out_dtype, {P, F}), dst2 = k.tensor(DType::fp32, {P, F}), dst3 = k.tensor(DType::fp32, {P, F});
      auto imm0 = k.tensor(DType::fp32, {P, 1}), imm1 = k.tensor(DType::fp32, {P, 1});
      const std::string name(alu_op_name(op1));
      // 1: reset_reduce with a per-partition imm0; 2: reduce continues from 1's last value; 3: load_reduce from imm1.
      k.emit(Opcode::tensor_scalar_cumulative).tensor("dst", dst).tensor("src", src).word("op0", "multiply")
          .word("op1", name).tensor("imm0", imm0);
      k.emit(Opcode::tensor_scalar_cumulative).tensor("dst", dst2).tensor("src", src2).word("op0", "add")
          .word("op1", name).imm("imm0", -0.25).word("reduce_cmd", "reduce");
      k.emit(Opcode::tensor_scalar_cumulative).tensor("dst", dst3).tensor("src", src).word("op0", "subtract")
          .word("op1", name).imm("imm0", 0.5).tensor("imm1", imm1).word("reduce_cmd", "load_reduce");
      k.build();
      // Factors near 1 keep a 100-step product finite.
      Tile x = k.set(src, random_values(rng, size_t{P} * F, 0.9f, 1.1f));
      Tile y = k.set(src2, random_values(rng, size_t{P} * F, 0.9f, 1.1f));
      Tile s0 = k.set(imm0, random_values(rng, P, 0.9f, 1.1f));
      Tile s1 = k.set(imm1, random_values(rng, P, -2.0f, 2.0f));
      k.run();
      std::vector<float> want1, want2, want3;
      for (uint32_t p = 0; p < P; ++p) {
        double reg = ref_identity(op1);
        for (uint32_t i = 0; i < F; ++i) {
          reg = f32(ref_op(op1, f32(x.at(p, i) * s0.at(p, 0)), reg));
          want1.push_back(round_to(out_dtype, static_cast<float>(reg)));
        }
        for (uint32_t i = 0; i < F; ++i) {
          reg = f32(ref_op(op1, f32(y.at(p, i) + -0.25), reg));
          want2.push_back(static_cast<float>(reg));
        }
        reg = s1.at(p, 0);
        for (uint32_t i = 0; i < F; ++i) {
          reg = f32(ref_op(op1, f32(x.at(p, i) - 0.5), reg));
          want3.push_back(static_cast<float>(reg));
        }
      }
      std::string what = name + " " + std::string(dtype_name(out_dtype));
      expect_exact(k.get(dst), want1, "reset_reduce " + what);
      expect_exact(k.get(dst2), want2, "reduce " + what);
      expect_exact(k.get(dst3), want3, "load_reduce " + what);
    }
  }
}

// ---- exponential (trn3) ----

TEST(AccumulatorTest, ExponentialSubtractsMaxAndSumsIntoTheSharedRegisters) {
  std::mt19937 rng(24);
  const uint32_t P = 96, F = 40;
  Kernel k("trn3");
  auto src = k.tensor(DType::fp32, {P, F}), src2 = k.tensor(DType::fp32, {P, F});
  auto dst = k.tensor(DType::fp32, {P, F}), dst_bf = k.tensor(DType::bf16, {P, F});
  auto maxv = k.tensor(DType::fp32, {P, 1}), res = k.tensor(DType::fp32, {P, 1}), res2 = k.tensor(DType::fp32, {P, 1});
  auto res3 = k.tensor(DType::fp32, {P, 1}), scratch = k.tensor(DType::fp32, {P, F});
  k.emit(Opcode::exponential).tensor("dst", dst).tensor("src", src).tensor("max_value", maxv)
      .word("reduce_cmd", "reset_reduce").tensor("reduce_res", res);
  // idle: no accumulation, registers untouched; then reduce continues the sum with the second tile (bf16 dst:
  // the registers add the fp32 values).
  k.emit(Opcode::exponential).tensor("dst", scratch).tensor("src", src2).imm("max_value", 1.0);
  k.emit(Opcode::exponential).tensor("dst", dst_bf).tensor("src", src2).imm("max_value", 1.0)
      .word("reduce_cmd", "reduce").tensor("reduce_res", res2);
  // load_reduce from an immediate; then tensor_scalar_reduce continues on the same registers (they are shared).
  k.emit(Opcode::exponential).tensor("dst", scratch).tensor("src", src).imm("max_value", 0.0)
      .word("reduce_cmd", "load_reduce").imm("reduce_init", 100.0);
  k.emit(Opcode::tensor_scalar_reduce).tensor("dst", scratch).tensor("data", src2).word("op0", "multiply")
      .imm("operand0", 2.0).word("reduce_op", "add").word("reduce_cmd", "reduce").tensor("reduce_res", res3);
  k.build();
  Tile x = k.set(src, random_values(rng, P * F, -6, 6)), y = k.set(src2, random_values(rng, P * F, -6, 6));
  Tile m = k.set(maxv, random_values(rng, P, 0, 6));
  k.run();
  std::vector<double> want_dst, want_res, want_res2, want_res3;
  std::vector<float> want_bf;
  for (uint32_t p = 0; p < P; ++p) {
    double sum = 0, sum3 = 100;
    for (uint32_t i = 0; i < F; ++i) {
      double e = std::exp(double(float(x.at(p, i) - m.at(p, 0))));
      want_dst.push_back(e);
      sum += e;
      sum3 += std::exp(double(x.at(p, i)));
    }
    want_res.push_back(sum);
    for (uint32_t i = 0; i < F; ++i) {
      double e = std::exp(double(float(y.at(p, i) - 1.0f)));
      sum += e;
      sum3 += f32(2.0 * y.at(p, i));
    }
    want_res2.push_back(sum);
    want_res3.push_back(sum3);
  }
  // exp in fp32 vs double: a few ulps per element; sums of 40-80 positive terms: relative 1e-5.
  auto near = [](const Tile& got, const std::vector<double>& want, double rel, const std::string& what) {
    ASSERT_EQ(got.values.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.values[i], want[i], rel * std::fabs(want[i])) << what << i;
  };
  near(k.get(dst), want_dst, 1e-6, "dst");
  near(k.get(res), want_res, 1e-5, "reset_reduce sum");
  near(k.get(res2), want_res2, 1e-5, "idle kept, reduce continued");
  near(k.get(res3), want_res3, 1e-5, "load_reduce, then tensor_scalar_reduce on the same registers");
  Tile bf = k.get(dst_bf);
  for (uint32_t p = 0; p < P; ++p) {
    for (uint32_t i = 0; i < F; ++i) {
      double e = std::exp(double(float(y.at(p, i) - 1.0f)));
      EXPECT_NEAR(bf.at(p, i), e, e * (1.0 / 256)) << "bf16 dst " << p << "," << i;  // bf16: 8 significant bits
    }
  }
}

TEST(AccumulatorTest, ExponentialAndRand2LegalityOnTrn3) {
  // The rule ids legality reports, or the parser's message where the text form itself refuses the instruction
  // (an opcode or engine the target generation lacks).
  auto rules = [](const std::string& target, const std::string& instruction) -> std::vector<std::string> {
    Program program;
    try {
      program = parse_tasm("kernel k\ntarget " + target +
                                     "\nsbuf a : fp32[4, 8]\nsbuf col : fp32[4, 1]\nsbuf c2 : fp32[4, 2]\n"
                                     "sbuf s : uint32[4, 24]\nsbuf g : uint32[4, 6]\n" + instruction + "\n",
                                 "case.tasm");
    } catch (const IsaError& e) {
      return {e.what()};
    }
    std::vector<std::string> out;
    for (const LegalityIssue& issue : find_legality_issues(program, config(target))) out.push_back(issue.rule);
    return out;
  };
  using ::testing::Contains;
  using ::testing::IsEmpty;
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, max_value=col, reduce_res=col, reduce_cmd=reset_reduce"),
              IsEmpty());
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, reduce_res=col"), Contains("reduce-cmd"));
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, reduce_init=2.0, reduce_cmd=reduce"), Contains("reduce-init"));
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, max_value=c2"), Contains("per-partition-operand"));
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, reduce_res=c2, reduce_cmd=reduce"), Contains("operand-shape"));
  using ::testing::HasSubstr;
  EXPECT_THAT(rules("trn2", "exponential dst=a, src=a"), Contains(HasSubstr("exponential is not available on trn2")));
  EXPECT_THAT(rules("trn3", "rand2 dst=a, min=0, max=col"), IsEmpty());
  EXPECT_THAT(rules("trn3", "rand2 dst=a, min=1, max=1"), Contains("rand2-range"));
  EXPECT_THAT(rules("trn3", "rand2 dst=s, min=0, max=c2"), Contains("per-partition-operand"));
  EXPECT_THAT(rules("trn2", "rand2 dst=a, min=0, max=1"), Contains(HasSubstr("rand2 is not available on trn2")));
  EXPECT_THAT(rules("trn3", "rand_set_state src_seeds=s, engine=vector"), IsEmpty());
  EXPECT_THAT(rules("trn3", "rand_set_state src_seeds=g, engine=vector"), Contains("rng-state"));
  EXPECT_THAT(rules("trn3", "rand_get_state dst=g"), IsEmpty());  // GpSimd: 6 words per lane
  EXPECT_THAT(rules("trn2", "rand_get_state dst=s, engine=vector"), Contains(HasSubstr("trn2")));
  EXPECT_THAT(rules("trn1", "rand_get_state dst=g"), Contains(HasSubstr("rand_get_state is not available on trn1")));
  EXPECT_THAT(rules("trn1", "rng dst=g, engine=gpsimd"), Contains(HasSubstr("trn1")));
  EXPECT_THAT(rules("trn1", "rng dst=g"), IsEmpty());  // Vector on every generation
  EXPECT_THAT(rules("trn2", "dropout dst=a, data=a, prob=1.5"), Contains("dropout-prob"));
  // fp32-only scalar operands (ISA: imm0/imm1, reduce_init, max_value "must be FP32").
  EXPECT_THAT(rules("trn3", "exponential dst=a, src=a, max_value=g[:, 0:1]"), Contains("operand-dtype"));
  EXPECT_THAT(rules("trn2", "tensor_scalar_cumulative dst=a, src=a, op0=add, op1=add, imm0=g[:, 0:1]"),
              Contains("operand-dtype"));
  // A reduce_op that is no reduction is reported once.
  EXPECT_THAT(rules("trn2", "tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1, reduce_op=divide"),
              ::testing::ElementsAre("reduce-op"));
}

// ---- nc_match_replace8 ----

TEST(MatchReplace8Test, DuplicateValsTakeSuccessivePositionsInReverseOrder) {
  // The example of the NKI docstring.
  Kernel k;
  auto data = k.tensor(DType::fp32, {1, 11}), vals = k.tensor(DType::fp32, {1, 8});
  auto dst = k.tensor(DType::fp32, {1, 11}), idx = k.tensor(DType::uint32, {1, 8});
  k.emit(Opcode::nc_match_replace8).tensor("dst", dst).tensor("data", data).tensor("vals", vals).imm("imm", -1.0)
      .tensor("dst_idx", idx);
  k.build();
  k.set(data, {1, 2, 3, 4, 8, 8, 8, 8, 8, 8, 8});
  k.set(vals, {3, 8, 8, 8, 8, 8, 8, 8});
  k.run();
  EXPECT_EQ(k.get_bits(idx), (std::vector<uint32_t>{2, 10, 9, 8, 7, 6, 5, 4}));
  expect_exact(k.get(dst), {1, 2, -1, 4, -1, -1, -1, -1, -1, -1, -1}, "replaced");
}

TEST(MatchReplace8Test, Max8ThenReplaceMatchesReference) {
  std::mt19937 rng(25);
  for (DType idx_dtype : {DType::uint32, DType::uint16}) {
    const uint32_t P = 1 + rng() % 128, F = 8 + rng() % 200;
    Kernel k;
    auto data = k.tensor(DType::fp32, {P, F}), top = k.tensor(DType::fp32, {P, 8});
    auto dst = k.tensor(DType::bf16, {P, F}), idx = k.tensor(idx_dtype, {P, 8});
    k.emit(Opcode::max8).tensor("dst", top).tensor("src", data);
    k.emit(Opcode::nc_match_replace8).tensor("dst", dst).tensor("data", data).tensor("vals", top)
        .imm("imm", -std::numeric_limits<double>::infinity()).tensor("dst_idx", idx);
    k.build();
    std::vector<float> v(size_t{P} * F);
    for (float& e : v) e = static_cast<float>(static_cast<int>(rng() % 40) - 20) * 0.25f;  // many duplicates
    Tile x = k.set(data, v);
    k.run();
    std::vector<float> want_dst, want_idx;
    for (uint32_t p = 0; p < P; ++p) {
      std::vector<float> row(x.row(p), x.row(p) + F), sorted = row;
      std::sort(sorted.begin(), sorted.end(), std::greater<float>());
      std::vector<bool> used(F, false);
      std::vector<float> index(8);
      for (int j = 7; j >= 0; --j) {  // vals taken from the last one (NKI)
        for (uint32_t i = 0; i < F; ++i) {
          if (!used[i] && row[i] == sorted[j]) {
            used[i] = true;
            index[j] = static_cast<float>(i);
            break;
          }
        }
      }
      for (uint32_t i = 0; i < F; ++i) want_dst.push_back(used[i] ? -INFINITY : round_to(DType::bf16, row[i]));
      want_idx.insert(want_idx.end(), index.begin(), index.end());
    }
    expect_exact(k.get(dst), want_dst, "dst");
    expect_exact(k.get(idx), want_idx, "dst_idx " + std::string(dtype_name(idx_dtype)));
  }
}

TEST(MatchReplace8Test, UnmatchedValWritesAllOnesAndReplacesNothing) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {1, 9}), vals = k.tensor(DType::fp32, {1, 8});
  auto dst = k.tensor(DType::fp32, {1, 9}), idx = k.tensor(DType::uint32, {1, 8});
  k.emit(Opcode::nc_match_replace8).tensor("dst", dst).tensor("data", data).tensor("vals", vals).imm("imm", 7.0)
      .tensor("dst_idx", idx);
  k.build();
  k.set(data, {5, 4, 3, 2, 1, 0, -0.0f, NAN, 4});
  k.set(vals, {4, -0.0f, NAN, 9, 5, 1, 4, 3});
  k.run();
  // vals 7..0: 3 -> 2, 4 -> 1, 1 -> 4, 5 -> 0, 9 -> none, NaN -> none, -0 -> 5 (equal to +0), 4 -> 8 (1 taken).
  EXPECT_EQ(k.get_bits(idx), (std::vector<uint32_t>{8, 5, 0xFFFFFFFFu, 0xFFFFFFFFu, 0, 4, 1, 2}));
  Tile got = k.get(dst);
  expect_exact(Tile(got), {7, 7, 7, 2, 7, 7, -0.0f, NAN, 7}, "dst");
}

// ---- PRNG ----

// Marsaglia's xorwow ("Xorshift RNGs", 2003, section 3.1), words x, y, z, w, v, d.
struct RefXorwow {
  uint32_t x, y, z, w, v, d;
  uint32_t next() {
    uint32_t t = x ^ (x >> 2);
    x = y;
    y = z;
    z = w;
    w = v;
    v = (v ^ (v << 4)) ^ (t ^ (t << 1));
    d += 362437;
    return d + v;
  }
};

// Marsaglia's x..v are trnsim's words 4..0 in reverse age order: word 0 is the newest (his v), word 4 the oldest
// (his x), word 5 the counter d (isa/rng.h).
RefXorwow ref_from_words(const uint32_t* words) {
  return RefXorwow{words[4], words[3], words[2], words[1], words[0], words[5]};
}

std::vector<uint32_t> known_states(uint32_t partitions, uint32_t words_per_lane, uint32_t salt) {
  std::mt19937 rng(salt);
  std::vector<uint32_t> words(size_t{partitions} * words_per_lane);
  for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
  return words;
}

TEST(RngTest, VectorRngDrawsFromFourStatesPerLaneOnTrn3) {
  const uint32_t P = 32, F = 37;
  Kernel k("trn3");
  auto state = k.tensor(DType::uint32, {P, 24}), out_state = k.tensor(DType::uint32, {P, 24});
  auto bits = k.tensor(DType::uint32, {P, F}), narrow = k.tensor(DType::int8, {P, F});
  k.emit(Opcode::rand_set_state).tensor("src_seeds", state).on(Engine::vector);
  k.emit(Opcode::rng).tensor("dst", bits);
  k.emit(Opcode::rng).tensor("dst", narrow);
  k.emit(Opcode::rand_get_state).tensor("dst", out_state).on(Engine::vector);
  k.build();
  std::vector<uint32_t> words = known_states(P, 24, 26);
  k.set_bits(state, words);
  k.run();
  std::vector<uint32_t> want_bits, want_state;
  std::vector<float> want_narrow;
  for (uint32_t p = 0; p < P; ++p) {
    RefXorwow g[4];
    for (int s = 0; s < 4; ++s) g[s] = ref_from_words(&words[p * 24 + s * 6]);
    for (uint32_t i = 0; i < F; ++i) want_bits.push_back(g[i % 4].next());
    for (uint32_t i = 0; i < F; ++i) want_narrow.push_back(static_cast<float>(static_cast<int8_t>(g[i % 4].next() & 0xFF)));
    for (int s = 0; s < 4; ++s) want_state.insert(want_state.end(), {g[s].v, g[s].w, g[s].z, g[s].y, g[s].x, g[s].d});
  }
  EXPECT_EQ(k.get_bits(bits), want_bits);
  expect_exact(k.get(narrow), want_narrow, "int8: the low 8 bits");
  EXPECT_EQ(k.get_bits(out_state), want_state);
}

TEST(RngTest, GpSimdRngHasOneStatePerLaneOnTrn2) {
  const uint32_t P = 16, F = 10;
  Kernel k("trn2");
  auto state = k.tensor(DType::uint32, {P, 6}), out = k.tensor(DType::uint16, {P, F});
  k.emit(Opcode::rand_set_state).tensor("src_seeds", state);  // default engine: GpSimd
  k.emit(Opcode::rng).tensor("dst", out).on(Engine::gpsimd);
  k.build();
  std::vector<uint32_t> words = known_states(P, 6, 27);
  k.set_bits(state, words);
  k.run();
  std::vector<float> want;
  for (uint32_t p = 0; p < P; ++p) {
    RefXorwow g = ref_from_words(&words[p * 6]);
    for (uint32_t i = 0; i < F; ++i) want.push_back(static_cast<float>(g.next() & 0xFFFF));
  }
  expect_exact(k.get(out), want, "uint16 from GpSimd");
}

TEST(RngTest, Rand2IsUniformInItsRange) {
  const uint32_t P = 8, F = 20;
  Kernel k("trn3");
  auto state = k.tensor(DType::uint32, {P, 24}), out = k.tensor(DType::fp32, {P, F});
  auto low = k.tensor(DType::fp32, {P, 1});
  k.emit(Opcode::rand_set_state).tensor("src_seeds", state).on(Engine::vector);
  k.emit(Opcode::rand2).tensor("dst", out).tensor("min", low).imm("max", 3.0);
  k.build();
  std::vector<uint32_t> words = known_states(P, 24, 28);
  k.set_bits(state, words);
  Tile lo = k.set(low, {-1, -2, 0, 1, 2, -0.5f, -3, 2.5f});
  k.run();
  std::vector<float> want;
  for (uint32_t p = 0; p < P; ++p) {
    RefXorwow g[4];
    for (int s = 0; s < 4; ++s) g[s] = ref_from_words(&words[p * 24 + s * 6]);
    for (uint32_t i = 0; i < F; ++i) {
      double u = double(g[i % 4].next() >> 8) / 16777216.0;  // top 24 bits: exact in fp32
      want.push_back(static_cast<float>(f32(lo.at(p, 0) + f32(u * f32(3.0 - lo.at(p, 0))))));
    }
  }
  Tile got = k.get(out);
  expect_exact(got, want, "rand2");
  for (uint32_t p = 0; p < P; ++p) {
    for (uint32_t i = 0; i < F; ++i) {
      EXPECT_GE(got.at(p, i), lo.at(p, 0));
      EXPECT_LE(got.at(p, i), 3.0f);
    }
  }
}

TEST(RngTest, DropoutKeepsWhereTheDrawIsAtLeastProb) {
  const uint32_t P = 16, F = 64;
  Kernel k("trn3");
  auto state = k.tensor(DType::uint32, {P, 24}), data = k.tensor(DType::bf16, {P, F}), dst = k.tensor(DType::bf16, {P, F});
  auto prob = k.tensor(DType::fp32, {P, 1});
  k.emit(Opcode::rand_set_state).tensor("src_seeds", state).on(Engine::vector);
  k.emit(Opcode::dropout).tensor("dst", dst).tensor("data", data).tensor("prob", prob);
  k.build();
  std::vector<uint32_t> words = known_states(P, 24, 29);
  k.set_bits(state, words);
  std::mt19937 rng(30);
  Tile x = k.set(data, random_values(rng, P * F));
  Tile pr = k.set(prob, {0, 1, 0.5f, 0.1f, 0.9f, 0.25f, 0.75f, 0.3f, 0, 1, 0.5f, 0.2f, 0.4f, 0.6f, 0.8f, 0.05f});
  k.run();
  std::vector<float> want;
  for (uint32_t p = 0; p < P; ++p) {
    RefXorwow g[4];
    for (int s = 0; s < 4; ++s) g[s] = ref_from_words(&words[p * 24 + s * 6]);
    for (uint32_t i = 0; i < F; ++i) {
      double u = double(g[i % 4].next() >> 8) / 16777216.0;
      want.push_back(u >= pr.at(p, 0) ? x.at(p, i) : 0.0f);  // kept values unscaled (ISA dropout)
    }
  }
  expect_exact(k.get(dst), want, "dropout");
}

// The same program gives the same bits every run (the default seed), set_rng_seed reseeds reproducibly, and
// rand_get_state / rand_set_state replay a sequence.
TEST(RngTest, DeterministicSeedingAndStateReplay) {
  const uint32_t P = 128, F = 2048;
  auto run = [&](uint32_t seed, bool reseed) {
    Kernel k("trn2");
    auto dst = k.tensor(DType::fp32, {P, F}), data = k.tensor(DType::fp32, {P, F}), seeds = k.tensor(DType::uint32, {1, 1});
    if (reseed) k.emit(Opcode::set_rng_seed).tensor("src_seeds", seeds);
    k.emit(Opcode::dropout).tensor("dst", dst).tensor("data", data).imm("prob", 0.3);
    k.build();
    k.set_bits(seeds, {seed});
    k.set(data, std::vector<float>(size_t{P} * F, 1.0f));
    k.run();
    return k.get_bits(dst);
  };
  std::vector<uint32_t> first = run(0, false);
  EXPECT_EQ(run(0, false), first);
  EXPECT_EQ(run(7, true), run(7, true));
  EXPECT_NE(run(7, true), run(8, true));
  EXPECT_NE(run(7, true), first);
  // About 30% dropped: 262144 draws, 5 standard deviations ~ 0.0045.
  double dropped = double(std::count(first.begin(), first.end(), 0u)) / first.size();
  EXPECT_NEAR(dropped, 0.3, 0.005);

  Kernel k("trn2");
  auto saved = k.tensor(DType::uint32, {P, 6}), a = k.tensor(DType::uint32, {P, 100}), b = k.tensor(DType::uint32, {P, 100});
  k.emit(Opcode::rand_get_state).tensor("dst", saved);
  k.emit(Opcode::rng).tensor("dst", a).on(Engine::gpsimd);
  k.emit(Opcode::rand_set_state).tensor("src_seeds", saved);
  k.emit(Opcode::rng).tensor("dst", b).on(Engine::gpsimd);
  k.build();
  k.run();
  EXPECT_EQ(k.get_bits(a), k.get_bits(b));
  std::vector<uint32_t> bits = k.get_bits(a);
  EXPECT_GT(std::set<uint32_t>(bits.begin(), bits.end()).size(), bits.size() - 10);  // distinct lanes and draws
}

TEST(RngTest, DropoutProbZeroAndOneAndIntegerData) {
  Kernel k("trn2");
  auto data = k.tensor(DType::int32, {4, 50}), keep = k.tensor(DType::int32, {4, 50}), drop = k.tensor(DType::int32, {4, 50});
  k.emit(Opcode::dropout).tensor("dst", keep).tensor("data", data).imm("prob", 0.0);
  k.emit(Opcode::dropout).tensor("dst", drop).tensor("data", data).imm("prob", 1.0);
  k.build();
  std::vector<uint32_t> values(200);
  for (uint32_t i = 0; i < 200; ++i) values[i] = 16777217u + i * 1000003u;  // beyond fp32's exact integers
  k.set_bits(data, values);
  k.run();
  EXPECT_EQ(k.get_bits(keep), values);  // bit for bit
  EXPECT_EQ(k.get_bits(drop), std::vector<uint32_t>(200, 0u));
}

// ---- topk (GpSimd) ----

TEST(TopkTest, SnakeOfEachSixteenPartitionGroup) {
  std::mt19937 rng(31);
  const uint32_t P = 32, n = 42, columns = 3, K = 8;
  Kernel k;
  auto src = k.tensor(DType::bf16, {P, columns}), vals = k.tensor(DType::bf16, {P, K});
  auto idx = k.tensor(DType::uint32, {P, K});
  k.emit(Opcode::topk).tensor("val_dst", vals).tensor("idx_dst", idx).tensor("src", src).imm("n", n);
  k.build();
  std::vector<float> v(P * columns);
  for (float& e : v) e = static_cast<float>(static_cast<int>(rng() % 30) - 15);  // duplicates: ties by index
  Tile x = k.set(src, v);
  k.run();
  std::vector<float> want_vals, want_idx;
  for (uint32_t g = 0; g < P / 16; ++g) {
    std::vector<std::pair<float, uint32_t>> snake;  // (value, snake index); columns past n are ignored
    for (uint32_t e = 0; e < n; ++e) snake.push_back({x.at(g * 16 + e % 16, e / 16), e});
    std::vector<std::pair<float, uint32_t>> best;
    for (uint32_t j = 0; j < K; ++j) {  // K passes of "largest remaining, lowest index first"
      size_t pick = SIZE_MAX;
      for (size_t c = 0; c < snake.size(); ++c) {
        if (pick == SIZE_MAX || snake[c].first > snake[pick].first) pick = c;
      }
      best.push_back(snake[pick]);
      snake.erase(snake.begin() + pick);
    }
    std::sort(best.begin(), best.end());  // ascending value, then index
    for (uint32_t p = 0; p < 16; ++p) {
      for (auto& [value, index] : best) {
        want_vals.push_back(value);
        want_idx.push_back(static_cast<float>(index));
      }
    }
  }
  expect_exact(k.get(vals), want_vals, "topk values");
  expect_exact(k.get(idx), want_idx, "topk indices");
}

// ---- nc_n_gather (GpSimd) ----

TEST(GatherTest, NcNGatherPicksWithinEachPartitionBitForBit) {
  std::mt19937 rng(32);
  for (DType dtype : {DType::fp32, DType::bf16, DType::int32, DType::fp8_e4m3}) {
    const uint32_t P = 1 + rng() % 128, F = 1 + rng() % 100, J = 1 + rng() % 70;
    Kernel k;
    auto data = k.tensor(dtype, {P, F}), dst = k.tensor(dtype, {P, J}), indices = k.tensor(DType::uint32, {P, J});
    k.emit(Opcode::nc_n_gather).tensor("dst", dst).tensor("data", data).tensor("indices", indices);
    k.build();
    // Element bits: 32-bit dtypes through set_bits; narrower ones through fp32 values the dtype holds exactly.
    std::vector<uint32_t> words(size_t{P} * F);
    for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
    Tile x;
    if (dtype_size_bytes(dtype) == 4) {
      k.set_bits(data, words);
    } else {
      x = k.set(data, random_values(rng, size_t{P} * F));
    }
    std::vector<uint32_t> idx(size_t{P} * J);
    for (uint32_t& i : idx) i = static_cast<uint32_t>(rng() % F);
    k.set_bits(indices, idx);
    k.run();
    if (dtype_size_bytes(dtype) == 4) {
      std::vector<uint32_t> want;
      for (uint32_t p = 0; p < P; ++p) {
        for (uint32_t j = 0; j < J; ++j) want.push_back(words[p * F + idx[p * J + j]]);
      }
      EXPECT_EQ(k.get_bits(dst), want) << dtype_name(dtype);
    } else {
      std::vector<float> want;
      for (uint32_t p = 0; p < P; ++p) {
        for (uint32_t j = 0; j < J; ++j) want.push_back(x.at(p, idx[p * J + j]));
      }
      expect_exact(k.get(dst), want, std::string(dtype_name(dtype)));
    }
  }
}

TEST(GatherTest, NcNGatherIndexOutOfRangeIsAnError) {
  Kernel k;
  auto data = k.tensor(DType::fp32, {2, 5}), dst = k.tensor(DType::fp32, {2, 3}), indices = k.tensor(DType::uint32, {2, 3});
  k.emit(Opcode::nc_n_gather).tensor("dst", dst).tensor("data", data).tensor("indices", indices);
  k.build();
  k.set_bits(indices, {0, 4, 1, 2, 5, 0});
  try {
    k.run();
    FAIL() << "expected IsaError";
  } catch (const IsaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nc_n_gather: index 5 (partition 1) is outside data's 5 elements"));
  }
}

// ---- nonzero_with_count (GpSimd, trn2+) ----

TEST(GatherTest, NonzeroWithCountOnTheFirstPartitionOfEachGpSimdCore) {
  const uint32_t P = 128, T = 8;
  Kernel k;
  auto src = k.tensor(DType::fp32, {P, T}), isrc = k.tensor(DType::int32, {P, T});
  auto dst = k.tensor(DType::int32, {P, T + 1}), idst = k.tensor(DType::int32, {P, T + 1});
  k.emit(Opcode::nonzero_with_count).tensor("dst", dst).tensor("src", src).imm("index_offset", 16)
      .imm("padding_val", -1);
  k.emit(Opcode::nonzero_with_count).tensor("dst", idst).tensor("src", isrc);
  k.build();
  std::mt19937 rng(34);
  std::vector<float> v(P * T);
  for (float& e : v) e = (rng() % 3 == 0) ? static_cast<float>(rng() % 5) - 2.0f : 0.0f;
  v[0 * T + 0] = 0, v[0 * T + 1] = 1, v[0 * T + 2] = 1, v[0 * T + 3] = 0;  // the NKI docstring's example row
  v[0 * T + 4] = 0, v[0 * T + 5] = 1, v[0 * T + 6] = 0, v[0 * T + 7] = 0;
  v[16 * T + 3] = -0.0f, v[16 * T + 4] = NAN;  // -0 is zero, NaN is not
  Tile x = k.set(src, v);
  std::vector<uint32_t> bits(P * T);
  for (uint32_t& b : bits) b = rng() % 2 ? 0u : static_cast<uint32_t>(rng());
  k.set_bits(isrc, bits);
  const std::vector<uint32_t> sentinel(P * (T + 1), 0xABCDu);
  k.set_bits(dst, sentinel);
  k.set_bits(idst, sentinel);
  k.run();
  std::vector<uint32_t> got = k.get_bits(dst), igot = k.get_bits(idst);
  // The docstring's example: [17, 18, 21, -1, -1, -1, -1, -1, 3].
  EXPECT_EQ(std::vector<uint32_t>(got.begin(), got.begin() + 9),
            (std::vector<uint32_t>{17, 18, 21, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 3}));
  for (uint32_t p = 0; p < P; ++p) {
    std::vector<uint32_t> want(T + 1, 0xABCDu), iwant(T + 1, 0xABCDu);
    if (p % 16 == 0) {
      uint32_t n = 0, in = 0;
      for (uint32_t i = 0; i < T; ++i) {
        float e = x.at(p, i);
        if (e != 0.0f || std::isnan(e)) want[n++] = i + 16;
        if (bits[p * T + i] != 0) iwant[in++] = i;
      }
      std::fill(want.begin() + n, want.end() - 1, 0xFFFFFFFFu);
      std::fill(iwant.begin() + in, iwant.end() - 1, 0xFFFFFFFFu);
      want[T] = n;
      iwant[T] = in;
    }
    EXPECT_EQ(std::vector<uint32_t>(got.begin() + p * (T + 1), got.begin() + (p + 1) * (T + 1)), want) << p;
    EXPECT_EQ(std::vector<uint32_t>(igot.begin() + p * (T + 1), igot.begin() + (p + 1) * (T + 1)), iwant) << p;
  }
}

// ---- sequence_bounds (GpSimd) ----

// The reference: for each element, walk outwards while the neighbours carry the same id (start inclusive, end
// exclusive); padding (id 0) gets [n, -1].
std::vector<int64_t> sequence_bounds_reference(const std::vector<int64_t>& ids) {
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> out(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    if (ids[size_t(i)] == 0) {
      out[size_t(i)] = n;
      out[size_t(n + i)] = -1;
      continue;
    }
    int64_t lo = i, hi = i;
    while (lo > 0 && ids[size_t(lo - 1)] == ids[size_t(i)]) --lo;
    while (hi + 1 < n && ids[size_t(hi + 1)] == ids[size_t(i)]) ++hi;
    out[size_t(i)] = lo;
    out[size_t(n + i)] = hi + 1;
  }
  return out;
}

std::vector<int64_t> run_sequence_bounds(const std::vector<int64_t>& ids, DType in_dtype, DType out_dtype) {
  const uint32_t n = static_cast<uint32_t>(ids.size());
  Kernel k;
  auto seg = k.tensor(in_dtype, {1, n}), dst = k.tensor(out_dtype, {1, 2 * n});
  k.emit(Opcode::sequence_bounds).tensor("dst", dst).tensor("segment_ids", seg);
  k.build();
  if (in_dtype == DType::int32) {
    std::vector<uint32_t> bits;
    for (int64_t v : ids) bits.push_back(static_cast<uint32_t>(v));
    k.set_bits(seg, bits);
  } else {
    std::vector<float> values;
    for (int64_t v : ids) values.push_back(static_cast<float>(v));
    k.set(seg, values);
  }
  k.run();
  std::vector<int64_t> got;
  if (out_dtype == DType::int32) {
    for (uint32_t b : k.get_bits(dst)) got.push_back(static_cast<int32_t>(b));
  } else {
    for (float v : k.get(dst).values) got.push_back(static_cast<int64_t>(v));
  }
  return got;
}

TEST(SequenceBoundsTest, DocumentedExample) {
  // NKI's example: [0, 1, 1, 2, 2, 2, 0, 3, 3] -> starts [9, 1, 1, 3, 3, 3, 9, 7, 7], ends [-1, 3, 3, 6, 6, 6, -1, 9, 9].
  std::vector<int64_t> want = {9, 1, 1, 3, 3, 3, 9, 7, 7, -1, 3, 3, 6, 6, 6, -1, 9, 9};
  EXPECT_EQ(run_sequence_bounds({0, 1, 1, 2, 2, 2, 0, 3, 3}, DType::int32, DType::int32), want);
  EXPECT_EQ(run_sequence_bounds({0, 1, 1, 2, 2, 2, 0, 3, 3}, DType::fp32, DType::fp32), want);
}

TEST(SequenceBoundsTest, RandomSortedSegmentsAgainstOutwardWalk) {
  std::mt19937 rng(41);
  for (int trial = 0; trial < 24; ++trial) {
    const uint32_t n = 1 + rng() % 600;
    std::vector<int64_t> ids(n);
    for (int64_t& v : ids) v = rng() % 3 == 0 ? 0 : int64_t(rng() % 40);  // padding in between, as NKI allows
    std::sort(ids.begin(), ids.end());
    if (trial % 3 == 1) std::shuffle(ids.begin(), ids.end(), rng);  // unsorted: runs of adjacent equal ids
    if (trial % 4 == 2) ids.assign(n, 7);                            // one segment over everything
    const DType in = trial % 2 ? DType::int32 : DType::fp32, out = trial % 5 < 2 ? DType::int32 : DType::fp32;
    EXPECT_EQ(run_sequence_bounds(ids, in, out), sequence_bounds_reference(ids)) << "trial " << trial;
  }
}

TEST(SequenceBoundsTest, NegativeOrFractionalIdIsAnError) {
  for (DType dtype : {DType::int32, DType::fp32}) {
    try {
      run_sequence_bounds({1, 1, -2, 3}, dtype, DType::int32);
      FAIL() << "expected IsaError";
    } catch (const IsaError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("sequence_bounds: segment id -2"));
    }
  }
  Kernel k;
  auto seg = k.tensor(DType::fp32, {1, 2}), dst = k.tensor(DType::fp32, {1, 4});
  k.emit(Opcode::sequence_bounds).tensor("dst", dst).tensor("segment_ids", seg);
  k.build();
  k.set(seg, {1.5f, 2.0f});
  EXPECT_THROW(k.run(), IsaError);
}

// ---- local_gather (GpSimd) ----

// The NKI reference loop: per 16-partition group the indices flattened partition first (order 'F'), the first
// num_valid of them, each an element offset; every partition of the group takes e elements from its own row.
std::vector<float> local_gather_reference(const Tile& src, const std::vector<uint32_t>& index, uint32_t P, uint32_t F_idx,
                                          uint32_t valid, uint32_t e) {
  std::vector<float> out(size_t{P} * valid * e);
  for (uint32_t g = 0; g < P / 16; ++g) {
    std::vector<uint32_t> flat;  // order 'F' over the group's [16, F_idx] index block
    for (uint32_t c = 0; c < F_idx; ++c) {
      for (uint32_t r = 0; r < 16; ++r) flat.push_back(index[size_t(g * 16 + r) * F_idx + c]);
    }
    for (uint32_t p = g * 16; p < g * 16 + 16; ++p) {
      for (uint32_t j = 0; j < valid; ++j) {
        for (uint32_t k = 0; k < e; ++k) out[(size_t(p) * valid + j) * e + k] = src.at(p, flat[j] + k);
      }
    }
  }
  return out;
}

TEST(LocalGatherTest, GathersWithinEachSixteenPartitionGroup) {
  std::mt19937 rng(43);
  const uint32_t elems[] = {1, 2, 4, 8, 16, 32};
  for (int trial = 0; trial < 16; ++trial) {
    const DType dtype = std::vector<DType>{DType::fp32, DType::bf16, DType::fp8_e4m3, DType::int32}[trial % 4];
    const uint32_t P = 16 * (1 + rng() % 8), e = elems[rng() % 6], F = e + rng() % 300, F_idx = 1 + rng() % 12;
    const uint32_t per_core = 16 * F_idx;
    const bool all = trial % 3 == 0;
    const uint32_t valid = all ? per_core : 1 + rng() % per_core;
    Kernel k;
    auto src = k.tensor(dtype, {P, F}), index = k.tensor(DType::uint16, {P, F_idx});
    auto dst = k.tensor(dtype, {P, valid * e});
    auto emit = k.emit(Opcode::local_gather);
    emit.tensor("dst", dst).tensor("src_buffer", src).tensor("index", index).imm("num_elem_per_idx", e);
    if (!all) emit.imm("num_valid_indices", valid);
    k.build();
    Tile x = dtype == DType::int32 ? Tile() : k.set(src, random_values(rng, size_t{P} * F));
    std::vector<uint32_t> words(size_t{P} * F);
    if (dtype == DType::int32) {
      for (uint32_t& w : words) w = static_cast<uint32_t>(rng());
      k.set_bits(src, words);
      x = Tile(P, F);
      for (size_t i = 0; i < words.size(); ++i) x.values[i] = numerics::bits_float(words[i]);
    }
    std::vector<uint32_t> idx(size_t{P} * F_idx);
    std::vector<float> idx_values;
    for (uint32_t& i : idx) {
      i = rng() % (F - e + 1);
      idx_values.push_back(float(i));
    }
    k.set(index, idx_values);
    k.run();
    std::vector<float> want = local_gather_reference(x, idx, P, F_idx, valid, e);
    if (dtype == DType::int32) {
      std::vector<uint32_t> want_bits;
      for (float v : want) want_bits.push_back(numerics::float_bits(v));
      EXPECT_EQ(k.get_bits(dst), want_bits) << "trial " << trial;
    } else {
      expect_exact(k.get(dst), want, "trial " + std::to_string(trial) + " " + std::string(dtype_name(dtype)));
    }
  }
}

TEST(LocalGatherTest, DocumentedExampleShape) {
  // NKI's example: src_buffer [128, 512, 4] fp32, index [128, 4] = the same [16, 4] block eight times, times
  // num_elem_per_idx = 4, 64 valid indices per core: out[p, j, :] = src_buffer[p, index_1d[j], :].
  std::mt19937 rng(44);
  Kernel k;
  auto src = k.tensor(DType::fp32, {128, 512 * 4}), index = k.tensor(DType::uint16, {128, 4});
  auto dst = k.tensor(DType::fp32, {128, 64 * 4});
  k.emit(Opcode::local_gather)
      .tensor("dst", dst)
      .tensor("src_buffer", src)
      .tensor("index", index)
      .imm("num_elem_per_idx", 4)
      .imm("num_valid_indices", 64);
  k.build();
  Tile x = k.set(src, random_values(rng, 128 * 2048));
  std::vector<uint32_t> block(16 * 4);
  for (uint32_t& b : block) b = rng() % 512;
  std::vector<float> idx;
  for (uint32_t p = 0; p < 128; ++p) {
    for (uint32_t c = 0; c < 4; ++c) idx.push_back(float(block[(p % 16) * 4 + c] * 4));
  }
  k.set(index, idx);
  k.run();
  std::vector<float> want;
  for (uint32_t p = 0; p < 128; ++p) {
    for (uint32_t j = 0; j < 64; ++j) {  // index_1d[j] = block[j % 16][j / 16]
      for (uint32_t v = 0; v < 4; ++v) want.push_back(x.at(p, block[(j % 16) * 4 + j / 16] * 4 + v));
    }
  }
  expect_exact(k.get(dst), want, "documented example");
}

TEST(LocalGatherTest, IndexLeavingTheSourceIsAnError) {
  Kernel k;
  auto src = k.tensor(DType::fp32, {16, 10}), index = k.tensor(DType::uint16, {16, 1});
  auto dst = k.tensor(DType::fp32, {16, 32});
  k.emit(Opcode::local_gather)
      .tensor("dst", dst)
      .tensor("src_buffer", src)
      .tensor("index", index)
      .imm("num_elem_per_idx", 2);
  k.build();
  std::vector<float> idx(16, 0.0f);
  idx[5] = 9;  // elements 9 and 10 of a 10-element row
  k.set(index, idx);
  try {
    k.run();
    FAIL() << "expected IsaError";
  } catch (const IsaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("local_gather: index 9 (index 5 of partitions 0..15)"));
  }
}

TEST(LocalGatherTest, LegalityWantsWholeGroupsAndDocumentedLimits) {
  auto rules_of = [](const std::string& body) {
    Program program = parse_tasm("kernel k\ntarget trn2\nsbuf s : fp32[128, 64]\nsbuf x : uint16[128, 300]\n"
                                 "sbuf d : fp32[128, 8192]\n" + body + "\n", "case.tasm");
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn2"))) rules.push_back(issue.rule);
    return rules;
  };
  EXPECT_THAT(rules_of("local_gather dst=d[0:32, 0:16], src_buffer=s[0:32, :], index=x[0:32, 0:1]"),
              ::testing::IsEmpty());
  // Partitions 8..39 straddle two GpSimd cores.
  EXPECT_THAT(rules_of("local_gather dst=d[8:40, 0:16], src_buffer=s[8:40, :], index=x[8:40, 0:1]"),
              ::testing::Contains("local-gather"));
  EXPECT_THAT(rules_of("local_gather dst=d[0:16, 0:48], src_buffer=s[0:16, :], index=x[0:16, 0:1], "
                       "num_elem_per_idx=3"),
              ::testing::Contains("local-gather"));
  // 16 x 300 = 4800 indices per core: more than 4096.
  EXPECT_THAT(rules_of("local_gather dst=d[0:16, 0:4800], src_buffer=s[0:16, :], index=x[0:16, :]"),
              ::testing::Contains("local-gather"));
  EXPECT_THAT(rules_of("local_gather dst=d[0:16, 0:4096], src_buffer=s[0:16, :], index=x[0:16, :], "
                       "num_valid_indices=4096"),
              ::testing::IsEmpty());
  EXPECT_THAT(rules_of("local_gather dst=d[0:16, 0:17], src_buffer=s[0:16, :], index=x[0:16, 0:1]"),
              ::testing::Contains("operand-shape"));
}

// ---- activate2 (Scalar, trn3) ----

// The reference: the two tensor-scalar steps and the activation in double, each rounded to fp32 (exact: products and
// sums of two floats rounded once); copy, relu, square and prelu have closed forms.
double ref_act(const std::string& func, double x, double alpha) {
  if (func == "copy") return x;
  if (func == "relu") return x > 0 ? x : 0.0;
  if (func == "square") return f32(x * x);
  return x > 0 ? x : f32(alpha * x);  // prelu
}

TEST(Activate2Test, EveryOperatorPairAgainstALoop) {
  std::mt19937 rng(51);
  const std::vector<std::pair<std::string, std::string>> pairs = {{"multiply", "add"}, {"multiply", "subtract"},
                                                                  {"multiply", "bypass"}, {"add", "bypass"},
                                                                  {"subtract", "bypass"}, {"bypass", "bypass"}};
  const std::vector<std::string> funcs = {"copy", "relu", "square", "prelu"};
  const std::vector<std::string> reduces = {"add", "maximum", "minimum"};
  int trial = 0;
  for (const auto& [op0, op1] : pairs) {
    for (int rev = 0; rev < 4; ++rev) {
      const bool r0 = rev & 1, r1 = rev & 2;
      if ((r0 && op0 == "bypass") || (r1 && op1 == "bypass")) continue;
      ++trial;
      const std::string func = funcs[trial % 4], reduce = reduces[trial % 3];
      const uint32_t P = 1 + rng() % 128, F = 1 + rng() % 200;
      Kernel k("trn3");
      auto data = k.tensor(DType::fp32, {P, F}), dst = k.tensor(DType::fp32, {P, F});
      auto imm0 = k.tensor(DType::fp32, {P, 1}), relu = k.tensor(DType::fp32, {P, 1}), res = k.tensor(DType::fp32, {P, 1});
      const float imm1 = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
      auto e = k.emit(Opcode::activate2);
      e.tensor("dst", dst).word("op", func).tensor("data", data).tensor("imm0", imm0).imm("imm1", imm1);
      e.word("op0", op0).word("op1", op1).tensor("relu_param", relu).imm("reverse0", r0).imm("reverse1", r1);
      e.word("reduce_op", reduce).tensor("reduce_res", res).word("reduce_cmd", "reset_reduce");
      k.build();
      Tile x = k.set(data, random_values(rng, size_t{P} * F));
      Tile s0 = k.set(imm0, random_values(rng, P));
      Tile alpha = k.set(relu, random_values(rng, P, 0.0f, 1.0f));
      k.run();
      std::vector<float> want, want_res;
      auto step = [](const std::string& op, double a, double b) {
        if (op == "multiply") return f32(a * b);
        if (op == "add") return f32(a + b);
        return f32(a - b);
      };
      for (uint32_t p = 0; p < P; ++p) {
        double acc = reduce == "add" ? 0.0 : reduce == "maximum" ? -INFINITY : INFINITY;
        for (uint32_t i = 0; i < F; ++i) {
          double v = x.at(p, i);
          if (op0 != "bypass") v = r0 ? step(op0, s0.at(p, 0), v) : step(op0, v, s0.at(p, 0));
          if (op1 != "bypass") v = r1 ? step(op1, imm1, v) : step(op1, v, imm1);
          v = ref_act(func, v, alpha.at(p, 0));
          want.push_back(float(v));
          acc = reduce == "add" ? f32(acc + v) : reduce == "maximum" ? std::max(acc, v) : std::min(acc, v);
        }
        want_res.push_back(float(acc));
      }
      std::string what = op0 + "/" + op1 + " rev " + std::to_string(rev) + " " + func + " " + reduce;
      expect_exact(k.get(dst), want, what);
      expect_exact(k.get(res), want_res, what + " reduce_res");
    }
  }
  EXPECT_EQ(trial, 15);  // 6 pairs x the reverse flags their operators allow: 4 + 4 + 2 + 2 + 2 + 1
}

TEST(Activate2Test, ScalarAccumulatorCarriesAcrossInstructions) {
  // activation leaves its reduction in the Scalar registers; activate2 reduce folds on top; idle reads them back;
  // reset sets reduce_op's identity without folding.
  Kernel k("trn3");
  auto data = k.tensor(DType::fp32, {4, 3}), dst = k.tensor(DType::bf16, {4, 3});
  auto r1 = k.tensor(DType::fp32, {4, 1}), r2 = k.tensor(DType::fp32, {4, 1}), r3 = k.tensor(DType::fp32, {4, 1});
  auto r4 = k.tensor(DType::fp32, {4, 1}), r5 = k.tensor(DType::fp32, {4, 1});
  k.emit(Opcode::activation).tensor("dst", dst).word("op", "copy").tensor("data", data).word("reduce_op", "add")
      .tensor("reduce_res", r1);
  auto act2 = [&](const char* cmd, const AccessPattern& res) {
    k.emit(Opcode::activate2).tensor("dst", dst).word("op", "copy").tensor("data", data).imm("imm0", 2.0)
        .imm("imm1", 0.0).word("op0", "multiply").word("op1", "bypass").word("reduce_op", "add")
        .tensor("reduce_res", res).word("reduce_cmd", cmd);
  };
  act2("reduce", r2);
  act2("idle", r3);
  act2("reset", r4);
  act2("reset_reduce", r5);
  k.build();
  // 1/3 is not a bf16 value: the reduction sees the fp32 results, not dst's bf16.
  k.set(data, {1.0f / 3, 1, 2, -1, -2, -3, 0.5f, 0.25f, 0.125f, 10, 20, 30});
  k.run();
  std::vector<float> sums = {float(f32(f32(1.0f / 3 + 1) + 2)), -6, 0.875f, 60};
  std::vector<float> doubled;
  for (float s : sums) doubled.push_back(s * 2);
  std::vector<float> after_reduce;
  for (size_t p = 0; p < 4; ++p) after_reduce.push_back(float(f32(sums[p] + doubled[p])));
  // Row 0's doubled fold: acc = s + 2/3 + 2 + 4 in element order.
  after_reduce[0] = float(f32(f32(f32(sums[0] + f32(2.0 / 3)) + 2) + 4));
  expect_exact(k.get(r1), sums, "activation");
  expect_exact(k.get(r2), after_reduce, "activate2 reduce");
  expect_exact(k.get(r3), after_reduce, "activate2 idle");
  expect_exact(k.get(r4), {0, 0, 0, 0}, "activate2 reset");
  std::vector<float> fresh = doubled;
  fresh[0] = float(f32(f32(f32(2.0 / 3)) + 2) + 4);
  expect_exact(k.get(r5), fresh, "activate2 reset_reduce");
}

TEST(Activate2Test, LegalityAndInterpreterRejectTheSameInstructions) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=add", "activate2-ops"},
      {"activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=bypass, op1=bypass, reverse0=true", "activate2-ops"},
      {"activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=bypass, reduce_cmd=reduce",
       "missing-operand"},
      {"activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=bypass, reduce_op=multiply, "
       "reduce_cmd=reset_reduce",
       "reduce-op"},
      {"activate2 dst=b, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=bypass", "operand-shape"},
      {"activate2 dst=a, op=copy, data=a, imm0=c2, imm1=2.0, op0=add, op1=bypass", "per-partition-operand"},
      {"activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=bypass, reduce_res=c2", "operand-shape"}};
  for (const auto& [instruction, rule] : cases) {
    Program program = parse_tasm("kernel k\ntarget trn3\nsbuf a : fp32[4, 8]\nsbuf b : fp32[4, 9]\n"
                                 "sbuf c2 : fp32[4, 2]\n" + instruction + "\n", "case.tasm");
    CoreState state(config("trn3").core, program);
    EXPECT_THROW(interpret(program, state, config("trn3")), IsaError) << instruction;
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn3"))) rules.push_back(issue.rule);
    EXPECT_THAT(rules, ::testing::Contains(rule)) << instruction;
  }
  // Only NeuronCore-v4 has it: the parser refuses it for an older target.
  try {
    parse_tasm("kernel k\ntarget trn2\nsbuf a : fp32[4, 8]\n"
               "activate2 dst=a, op=copy, data=a, imm0=1.0, imm1=2.0, op0=add, op1=bypass\n", "case.tasm");
    FAIL() << "expected a parse error";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("activate2 is not available on trn2"));
  }
}

// ---- nc_stream_shuffle (Vector) ----

TEST(StreamShuffleTest, EachQuadrantTakesTheMaskedPartitionsBitForBit) {
  std::mt19937 rng(61);
  for (int trial = 0; trial < 12; ++trial) {
    const DType dtype = std::vector<DType>{DType::fp32, DType::bf16, DType::int32, DType::fp8_e5m2}[trial % 4];
    const uint32_t quadrants = 1 + rng() % 4, P = 32 * quadrants, F = 1 + rng() % 100;
    std::vector<int64_t> mask(32);
    for (int64_t& m : mask) m = rng() % 5 == 0 ? 255 : int64_t(rng() % 32);
    Kernel k;
    auto src = k.tensor(dtype, {P, F}), dst = k.tensor(dtype, {P, F});
    k.emit(Opcode::nc_stream_shuffle).tensor("dst", dst).tensor("src", src).word("shuffle_mask", [&] {
      std::string text = "[";
      for (size_t i = 0; i < mask.size(); ++i) text += (i ? ", " : "") + std::to_string(mask[i]);
      return text + "]";
    }());
    k.build();
    std::vector<uint32_t> src_bits(size_t{P} * F), dst_bits(size_t{P} * F);
    if (dtype_size_bytes(dtype) == 4) {
      for (uint32_t& w : src_bits) w = static_cast<uint32_t>(rng());
      for (uint32_t& w : dst_bits) w = static_cast<uint32_t>(rng());
      k.set_bits(src, src_bits);
      k.set_bits(dst, dst_bits);
    }
    Tile xs = dtype_size_bytes(dtype) == 4 ? Tile() : k.set(src, random_values(rng, size_t{P} * F));
    Tile xd = dtype_size_bytes(dtype) == 4 ? Tile() : k.set(dst, random_values(rng, size_t{P} * F));
    k.run();
    if (dtype_size_bytes(dtype) == 4) {
      std::vector<uint32_t> want = dst_bits;
      for (uint32_t p = 0; p < P; ++p) {
        if (mask[p % 32] == 255) continue;
        uint32_t from = p / 32 * 32 + uint32_t(mask[p % 32]);
        for (uint32_t i = 0; i < F; ++i) want[size_t{p} * F + i] = src_bits[size_t{from} * F + i];
      }
      EXPECT_EQ(k.get_bits(dst), want) << "trial " << trial;
    } else {
      std::vector<float> want = xd.values;
      for (uint32_t p = 0; p < P; ++p) {
        if (mask[p % 32] == 255) continue;
        uint32_t from = p / 32 * 32 + uint32_t(mask[p % 32]);
        for (uint32_t i = 0; i < F; ++i) want[size_t{p} * F + i] = xs.at(from, i);
      }
      expect_exact(k.get(dst), want, "trial " + std::to_string(trial));
    }
  }
}

TEST(StreamShuffleTest, DocumentedExamples) {
  // In place, partition i to partition (i + 1) % 32 (mask[i] = (i - 1) % 32).
  Kernel k;
  auto a = k.tensor(DType::fp32, {32, 4}), one = k.tensor(DType::fp32, {1, 4}), b = k.tensor(DType::fp32, {32, 4});
  std::string rotate = "[31";
  for (int i = 1; i < 32; ++i) rotate += ", " + std::to_string(i - 1);
  k.emit(Opcode::nc_stream_shuffle).tensor("dst", a).tensor("src", a).word("shuffle_mask", rotate + "]");
  // Broadcast one partition to 32.
  std::string zeros = "[0";
  for (int i = 1; i < 32; ++i) zeros += ", 0";
  k.emit(Opcode::nc_stream_shuffle).tensor("dst", b).tensor("src", one).word("shuffle_mask", zeros + "]");
  k.build();
  std::vector<float> x(32 * 4), row = {1.5f, -2, 3, 4};
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  k.set(a, x);
  k.set(one, row);
  k.run();
  std::vector<float> rotated(32 * 4), broadcast;
  for (uint32_t p = 0; p < 32; ++p) {
    for (uint32_t i = 0; i < 4; ++i) rotated[((p + 1) % 32) * 4 + i] = x[p * 4 + i];
    broadcast.insert(broadcast.end(), row.begin(), row.end());
  }
  expect_exact(k.get(a), rotated, "rotate in place");
  expect_exact(k.get(b), broadcast, "broadcast");
}

TEST(StreamShuffleTest, LegalityAndInterpreterRejectTheSameInstructions) {
  std::string keep = "[255";
  for (int i = 1; i < 32; ++i) keep += ", 255";
  keep += "]";
  std::string five = "[5";
  for (int i = 1; i < 32; ++i) five += ", 5";
  five += "]";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"nc_stream_shuffle dst=a, src=a, shuffle_mask=[0, 1]", "stream-shuffle"},
      {"nc_stream_shuffle dst=a, src=a, shuffle_mask=" + five.substr(0, five.size() - 2) + "40]", "stream-shuffle"},
      {"nc_stream_shuffle dst=a, src=h, shuffle_mask=" + keep, "stream-shuffle"},
      {"nc_stream_shuffle dst=a, src=b, shuffle_mask=" + keep, "operand-shape"},
      {"nc_stream_shuffle dst=a, src=a[0:4, :], shuffle_mask=" + five, "stream-shuffle"}};
  for (const auto& [instruction, rule] : cases) {
    Program program = parse_tasm("kernel k\ntarget trn2\nsbuf a : fp32[128, 8]\nsbuf b : fp32[128, 9]\n"
                                 "sbuf h : bf16[128, 8]\n" + instruction + "\n", "case.tasm");
    CoreState state(config("trn2").core, program);
    EXPECT_THROW(interpret(program, state, config("trn2")), IsaError) << instruction;
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn2"))) rules.push_back(issue.rule);
    EXPECT_THAT(rules, ::testing::Contains(rule)) << instruction;
  }
  // Start partitions: 32 active partitions may start on any quadrant, 64 at 0 or 64, more at 0 only.
  auto rules_of = [](const std::string& body) {
    Program program = parse_tasm("kernel k\ntarget trn2\nsbuf a : fp32[128, 8]\nsbuf c : fp32[128, 8]\n" + body + "\n",
                                 "case.tasm");
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn2"))) rules.push_back(issue.rule);
    return rules;
  };
  std::string id = "[0";
  for (int i = 1; i < 32; ++i) id += ", " + std::to_string(i);
  id += "]";
  EXPECT_THAT(rules_of("nc_stream_shuffle dst=a[96:128, :], src=c[32:64, :], shuffle_mask=" + id), ::testing::IsEmpty());
  EXPECT_THAT(rules_of("nc_stream_shuffle dst=a[64:128, :], src=c[0:64, :], shuffle_mask=" + id), ::testing::IsEmpty());
  EXPECT_THAT(rules_of("nc_stream_shuffle dst=a[32:96, :], src=c[0:64, :], shuffle_mask=" + id),
              ::testing::Contains("stream-shuffle"));
  EXPECT_THAT(rules_of("nc_stream_shuffle dst=a[16:48, :], src=c[0:32, :], shuffle_mask=" + id),
              ::testing::Contains("stream-shuffle"));
  EXPECT_THAT(rules_of("nc_stream_shuffle dst=a[32:128, :], src=c[0:96, :], shuffle_mask=" + id),
              ::testing::Contains("stream-shuffle"));
}

// ---- quantize_mx (Vector, trn3) ----

// Round to nearest even into an fp8 format with `mbits` mantissa bits and minimum normal exponent `emin` (no overflow
// case: quantize_mx's values stay below 2^Emax).
double rne_fp8(double v, int mbits, int emin) {
  if (v == 0) return v;
  int e = std::max(std::ilogb(v), emin);
  double quantum = std::ldexp(1.0, e - mbits);
  return std::nearbyint(v / quantum) * quantum;
}

struct MxReference {
  std::vector<float> values;  // [P, 4F] quantized (before scaling back)
  std::vector<int> codes;     // [groups][F]
};

// The ISA's recipe, group by group: amax over 8 partitions x 4 values, X = 2^(floor(log2 amax) - (Emax - 1)).
MxReference quantize_reference(const Tile& x, DType dtype) {
  const int e_max = dtype == DType::mxfp8_e4m3 ? 8 : 15, mbits = dtype == DType::mxfp8_e4m3 ? 3 : 2;
  const int emin = dtype == DType::mxfp8_e4m3 ? -6 : -14;
  const uint32_t groups = x.partitions / 8;
  const uint64_t columns = x.free / 4;
  MxReference r{std::vector<float>(x.values.size()), std::vector<int>(size_t{groups} * columns)};
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint64_t c = 0; c < columns; ++c) {
      double amax = 0;
      for (uint32_t p = 8 * g; p < 8 * g + 8; ++p) {
        for (uint32_t j = 0; j < 4; ++j) amax = std::max(amax, std::fabs(double(x.at(p, 4 * c + j))));
      }
      int code = amax == 0 ? 0 : std::clamp(std::ilogb(amax) - (e_max - 1) + 127, 0, 254);
      r.codes[g * columns + c] = code;
      for (uint32_t p = 8 * g; p < 8 * g + 8; ++p) {
        for (uint32_t j = 0; j < 4; ++j) {
          r.values[p * x.free + 4 * c + j] = float(rne_fp8(x.at(p, 4 * c + j) / std::ldexp(1.0, code - 127), mbits, emin));
        }
      }
    }
  }
  return r;
}

uint32_t scale_row(uint32_t g) { return 32 * (g / 4) + g % 4; }

TEST(QuantizeMxTest, GroupsScalesAndRoundingAgainstTheRecipe) {
  std::mt19937 rng(71);
  for (int trial = 0; trial < 8; ++trial) {
    const DType dtype = trial % 2 ? DType::mxfp8_e5m2 : DType::mxfp8_e4m3;
    const DType src_dtype = trial % 4 < 2 ? DType::bf16 : DType::fp16;
    const uint32_t P = 32 * (1 + rng() % 4), F = 1 + rng() % 40;
    Kernel k("trn3");
    auto src = k.tensor(src_dtype, {P, 4 * F}), dst = k.tensor(dtype, {P, F}), scale = k.tensor(DType::uint8, {P, F});
    k.emit(Opcode::quantize_mx).tensor("dst", dst).tensor("src", src).tensor("dst_scale", scale);
    k.build();
    // Magnitudes vary by group (2^-12 .. 2^12, within fp16), one group all zero.
    std::vector<float> v = random_values(rng, size_t{P} * 4 * F, -1.0f, 1.0f);
    for (uint32_t p = 0; p < P; ++p) {
      for (uint32_t i = 0; i < 4 * F; ++i) {
        const uint32_t g = p / 8, c = i / 4;
        v[size_t{p} * 4 * F + i] *= std::ldexp(1.0f, int((g * 7 + c * 3) % 25) - 12);
        if (g == 1 && c == 0) v[size_t{p} * 4 * F + i] = 0;
      }
    }
    Tile x = k.set(src, v);
    Tile before(P, F);  // scale rows outside the 4 per quadrant keep their bytes
    for (float& b : before.values) b = 77;
    k.set(scale, before.values);
    k.run();
    MxReference want = quantize_reference(x, dtype);
    expect_exact(k.get(dst), want.values, "trial " + std::to_string(trial) + " values");
    std::vector<float> want_codes(size_t{P} * F, 77.0f);
    for (uint32_t g = 0; g < P / 8; ++g) {
      for (uint32_t c = 0; c < F; ++c) want_codes[size_t{scale_row(g)} * F + c] = float(want.codes[g * F + c]);
    }
    expect_exact(k.get(scale), want_codes, "trial " + std::to_string(trial) + " scales");
    EXPECT_EQ(want.codes[1 * F], 0);  // the all-zero group: 2^-127
  }
}

TEST(QuantizeMxTest, FeedsNcMatmulMxWithItsLayout) {
  // S [512, 16] and V [512, 32] (contraction k = 4p + j) quantized by quantize_mx and multiplied by nc_matmul_mx:
  // the product of the dequantized reference values, and close to S.T @ V itself.
  std::mt19937 rng(72);
  const uint32_t M = 16, N = 32;
  Kernel k("trn3");
  auto s_src = k.tensor(DType::bf16, {128, 4 * M}), v_src = k.tensor(DType::bf16, {128, 4 * N});
  auto s_q = k.tensor(DType::mxfp8_e4m3, {128, M}), v_q = k.tensor(DType::mxfp8_e5m2, {128, N});
  auto s_scale = k.tensor(DType::fp8_e8m0, {128, M}), v_scale = k.tensor(DType::fp8_e8m0, {128, N});
  auto out = k.psum_tensor(DType::fp32, {M, N});
  k.emit(Opcode::quantize_mx).tensor("dst", s_q).tensor("src", s_src).tensor("dst_scale", s_scale);
  k.emit(Opcode::quantize_mx).tensor("dst", v_q).tensor("src", v_src).tensor("dst_scale", v_scale);
  k.emit(Opcode::nc_matmul_mx)
      .tensor("dst", out)
      .tensor("stationary", s_q)
      .tensor("moving", v_q)
      .tensor("stationary_scale", s_scale)
      .tensor("moving_scale", v_scale);
  k.build();
  Tile s = k.set(s_src, random_values(rng, 128 * 4 * M, -3.0f, 3.0f));
  Tile v = k.set(v_src, random_values(rng, 128 * 4 * N, -0.5f, 0.5f));
  k.run();
  MxReference sq = quantize_reference(s, DType::mxfp8_e4m3), vq = quantize_reference(v, DType::mxfp8_e5m2);
  Tile got = k.get(out);
  double err = 0, norm = 0;
  for (uint32_t m = 0; m < M; ++m) {
    for (uint32_t n = 0; n < N; ++n) {
      double want = 0, exact = 0;
      for (uint32_t p = 0; p < 128; ++p) {
        for (uint32_t j = 0; j < 4; ++j) {
          const uint32_t g = p / 8;
          double a = sq.values[p * 4 * M + 4 * m + j] * std::ldexp(1.0, sq.codes[g * M + m] - 127);
          double b = vq.values[p * 4 * N + 4 * n + j] * std::ldexp(1.0, vq.codes[g * N + n] - 127);
          want += a * b;
          exact += double(s.at(p, 4 * m + j)) * double(v.at(p, 4 * n + j));
        }
      }
      EXPECT_NEAR(got.at(m, n), want, 1e-4 * (1 + std::fabs(want))) << m << ", " << n;
      err += (got.at(m, n) - exact) * (got.at(m, n) - exact);
      norm += exact * exact;
    }
  }
  EXPECT_LT(std::sqrt(err / norm), 0.1);  // fp8 data: a few percent of the product
}

TEST(QuantizeMxTest, LegalityAndInterpreterRejectTheSameInstructions) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"quantize_mx dst=q, src=f, dst_scale=s", "quantize-mx"},                      // fp32 src
      {"quantize_mx dst=q[0:16, :], src=x[0:16, :], dst_scale=s", "quantize-mx"},    // 16 partitions
      {"quantize_mx dst=q, src=x, dst_scale=s[0:32, :]", "quantize-mx"},             // too few scale rows
      {"quantize_mx dst=q[:, 0:3], src=x, dst_scale=s", "operand-shape"},
      {"quantize_mx dst=x8, src=x, dst_scale=s", "quantize-mx"}};                    // plain fp8 dst
  for (const auto& [instruction, rule] : cases) {
    Program program = parse_tasm("kernel k\ntarget trn3\nsbuf x : bf16[128, 16]\nsbuf f : fp32[128, 16]\n"
                                 "sbuf q : mxfp8_e4m3[128, 4]\nsbuf x8 : fp8_e4m3[128, 4]\nsbuf s : fp8_e8m0[128, 4]\n" +
                                 instruction + "\n", "case.tasm");
    CoreState state(config("trn3").core, program);
    EXPECT_THROW(interpret(program, state, config("trn3")), IsaError) << instruction;
    std::vector<std::string> rules;
    for (const LegalityIssue& issue : find_legality_issues(program, config("trn3"))) rules.push_back(issue.rule);
    EXPECT_THAT(rules, ::testing::Contains(rule)) << instruction;
  }
  Program ok = parse_tasm("kernel k\ntarget trn3\nsbuf x : bf16[128, 16]\nsbuf q : mxfp8_e5m2[128, 4]\n"
                          "sbuf s : uint8[128, 4]\nquantize_mx dst=q, src=x, dst_scale=s[4:104, :]\n", "case.tasm");
  EXPECT_THAT(find_legality_issues(ok, config("trn3")), ::testing::IsEmpty());
}

}  // namespace
}  // namespace trnsim::isa
