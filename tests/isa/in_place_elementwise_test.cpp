// The element-wise hot paths that compute in place in SBUF/PSUM (isa/semantics/in_place.h) against the values of
// reading every source first: dst the same as a source, disjoint from it, or overlapping it in part (where the
// general path must be taken). And the device's recycled memories left unzeroed for a program that reads only
// what it wrote (isa::reads_only_own_writes): such a program gives the same values, and the next program that could
// see stale bytes still finds zeros. And isa::overwrites_whole, which lets the device skip zeroing an output.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "isa/core_state.h"
#include "isa/memory_image.h"
#include "isa/text_form.h"
#include "isa/write_coverage.h"
#include "kernel_fixture.h"

namespace trnsim::isa {
namespace {

using testing_support::Kernel;

constexpr uint32_t kPartitions = 8, kFree = 16;

std::vector<float> ramp(float scale, float shift) {
  std::vector<float> v(kPartitions * kFree);
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(i % 37) + shift;
  return v;
}

// A view of rows [first, first + count) and elements [column, column + width) of an [8, 16] fp32 tensor.
AccessPattern part(AccessPattern whole, uint32_t first, uint32_t count, uint32_t column, uint32_t width) {
  whole.start_partition += first;
  whole.partition.size = count;
  whole.offset += column;
  whole.free[0].size = width;
  return whole;
}

enum class Form { tensor_tensor, tensor_scalar, activation };

// dst = f(src) computed by the instruction, and by hand from src's values before the instruction.
void check(Form form, uint32_t dst_first, uint32_t dst_column, uint32_t src_first, uint32_t src_column) {
  SCOPED_TRACE(::testing::Message() << "form " << int(form) << " dst (" << dst_first << ", " << dst_column
                                    << ") src (" << src_first << ", " << src_column << ")");
  Kernel k;
  const AccessPattern a = k.tensor(DType::fp32, {kPartitions, kFree});
  const AccessPattern b = k.tensor(DType::fp32, {kPartitions, kFree});
  const uint32_t rows = 4, width = 8;
  const AccessPattern src = part(a, src_first, rows, src_column, width);
  const AccessPattern dst = part(a, dst_first, rows, dst_column, width);
  const AccessPattern other = part(b, 2, rows, 3, width);
  switch (form) {
    case Form::tensor_tensor:
      k.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", src).tensor("data2", other).word("op", "subtract");
      break;
    case Form::tensor_scalar:
      k.emit(Opcode::tensor_scalar).tensor("dst", dst).tensor("data", src).word("op0", "multiply").imm("operand0", 3.0)
          .word("op1", "subtract").imm("operand1", 1.0).imm("reverse1", 1);
      break;
    case Form::activation:
      k.emit(Opcode::activation).tensor("dst", dst).tensor("data", src).word("op", "exp").imm("scale", 0.25);
      break;
  }
  k.build();
  const Tile before_a = k.set(a, ramp(0.5f, -4.0f));
  const Tile before_b = k.set(b, ramp(-0.25f, 2.0f));
  k.run();
  std::vector<float> want = before_a.values;
  for (uint32_t p = 0; p < rows; ++p) {
    for (uint32_t i = 0; i < width; ++i) {
      const float x = before_a.at(src_first + p, src_column + i);
      float v = 0;
      switch (form) {
        case Form::tensor_tensor: v = x - before_b.at(2 + p, 3 + i); break;
        case Form::tensor_scalar: v = 1.0f - x * 3.0f; break;
        case Form::activation: v = std::exp(x * 0.25f); break;
      }
      want[(dst_first + p) * kFree + dst_column + i] = v;
    }
  }
  const Tile got = k.get(a);
  for (size_t i = 0; i < want.size(); ++i) {
    if (form == Form::activation) {
      EXPECT_NEAR(got.values[i], want[i], 1e-6f * std::fabs(want[i])) << "element " << i;
    } else {
      EXPECT_EQ(got.values[i], want[i]) << "element " << i;
    }
  }
}

TEST(InPlaceElementwise, SameDisjointAndPartlyOverlappingOperandsGiveTheValuesOfReadingFirst) {
  for (Form form : {Form::tensor_tensor, Form::tensor_scalar, Form::activation}) {
    check(form, 1, 2, 1, 2);  // dst is src
    check(form, 0, 8, 4, 0);  // disjoint rows and columns
    check(form, 4, 0, 0, 8);  // disjoint rows
    check(form, 1, 0, 0, 0);  // one partition down: row p's result would land on row p + 1 before it is read
    check(form, 0, 1, 0, 0);  // one element along
    check(form, 0, 0, 1, 1);  // the other way
  }
}

TEST(InPlaceElementwise, DstEqualToTheSecondOperand) {
  Kernel k;
  const AccessPattern a = k.tensor(DType::fp32, {kPartitions, kFree});
  const AccessPattern b = k.tensor(DType::fp32, {kPartitions, kFree});
  k.emit(Opcode::tensor_tensor).tensor("dst", b).tensor("data1", a).tensor("data2", b).word("op", "divide");
  k.emit(Opcode::tensor_tensor).tensor("dst", a).tensor("data1", a).tensor("data2", a).word("op", "subtract");
  k.build();
  const Tile x = k.set(a, ramp(1.0f, 1.0f)), y = k.set(b, ramp(0.5f, 3.0f));
  k.run();
  const Tile got_b = k.get(b), got_a = k.get(a);
  for (size_t i = 0; i < x.values.size(); ++i) {
    EXPECT_EQ(got_b.values[i], x.values[i] / y.values[i]) << i;
    EXPECT_EQ(got_a.values[i], 0.0f) << i;
  }
}

float round_bf16(float v) {
  uint16_t bits = 0;
  numerics::convert_from_fp32(DType::bf16, &v, &bits, 1, numerics::RoundingMode::nearest_even);
  float out = 0;
  numerics::convert_to_fp32(DType::bf16, &bits, &out, 1);
  return out;
}

// bf16 operands are converted a row at a time: a dst that starts on the source's first partition but elsewhere
// in the row overwrites only row p after row p was read.
TEST(InPlaceElementwise, Bf16RowsOverlappingWithinTheirOwnPartitionGiveTheValuesOfReadingFirst) {
  for (uint32_t dst_column : {0u, 3u, 8u}) {
    Kernel k;
    uint32_t id = 0;
    const AccessPattern a = k.tensor(DType::bf16, {kPartitions, kFree}, &id);
    const AccessPattern b = k.tensor(DType::fp32, {kPartitions, kFree});
    const AccessPattern src = part(a, 0, kPartitions, 2, 8);
    const AccessPattern dst = part(a, 0, kPartitions, dst_column, 8);
    k.emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", src).tensor("data2", part(b, 0, kPartitions, 0, 8))
        .word("op", "multiply");
    k.build();
    const Tile x = k.set(a, ramp(0.37f, -3.0f)), y = k.set(b, ramp(-1.13f, 0.5f));
    k.run();
    std::vector<float> want = x.values;
    for (uint32_t p = 0; p < kPartitions; ++p) {
      for (uint32_t i = 0; i < 8; ++i) want[p * kFree + dst_column + i] = round_bf16(x.at(p, 2 + i) * y.at(p, i));
    }
    const Tile got = k.get(a);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got.values[i], want[i]) << "column " << dst_column << " element " << i;
  }
}

// The DMA cast's row path gives the bits of the tile path, stochastic rounding's draws included.
TEST(CastRows, MatchesWritingWhatWasReadWithTheSameRoundingDraws) {
  Kernel k;
  const AccessPattern a = k.tensor(DType::fp32, {kPartitions, kFree});
  const AccessPattern b = k.tensor(DType::bf16, {kPartitions, kFree});
  const AccessPattern c = k.tensor(DType::bf16, {kPartitions, kFree});
  k.build();
  k.set(a, ramp(0.0123f, -0.2f));
  for (auto mode : {numerics::RoundingMode::nearest_even, numerics::RoundingMode::stochastic}) {
    CoreState& state = k.state();
    numerics::StochasticSource first(7), second(7);
    ASSERT_TRUE(state.cast_rows(b, a, mode, &first));
    state.write(c, state.read(a), mode, &second);
    EXPECT_EQ(k.get_bits(part(b, 0, kPartitions, 0, kFree / 2)), k.get_bits(part(c, 0, kPartitions, 0, kFree / 2)));
    EXPECT_EQ(first.next_u64(), second.next_u64());  // as many draws
  }
}

// tensor_reduce folds fp32 rows where they lie: each row left to right from its first element, over the last axis
// of a [P, 2, 8] tile (two rows per partition) and over a whole [P, 16] row, with negate.
TEST(InPlaceElementwise, ReductionsOverRowsInPlaceFoldEachRowInItsOrder) {
  Kernel k;
  uint32_t id = 0;
  const AccessPattern a = k.tensor(DType::fp32, {kPartitions, 2, 8}, &id);
  const AccessPattern two = k.tensor(DType::fp32, {kPartitions, 2});
  const AccessPattern one = k.tensor(DType::fp32, {kPartitions, 1});
  const AccessPattern flat = k.tensor(DType::fp32, {kPartitions, kFree});
  k.emit(Opcode::tensor_reduce).tensor("dst", two).word("op", "subtract").tensor("data", a).word("axis", "[2]");
  k.emit(Opcode::tensor_reduce).tensor("dst", one).word("op", "add").tensor("data", flat).word("axis", "[1]")
      .imm("negate", 1);
  k.build();
  std::vector<float> values = ramp(0.731f, -5.0f);
  for (size_t i = 0; i < values.size(); i += 3) values[i] *= 1e7f;  // large and small terms: order shows
  const Tile x = k.set(a, values), y = k.set(flat, values);
  k.run();
  const Tile got_two = k.get(two), got_one = k.get(one);
  for (uint32_t p = 0; p < kPartitions; ++p) {
    for (uint32_t o = 0; o < 2; ++o) {
      float acc = x.values[p * kFree + o * 8];
      for (uint32_t i = 1; i < 8; ++i) acc -= x.values[p * kFree + o * 8 + i];
      EXPECT_EQ(got_two.at(p, o), acc) << p << ", " << o;
    }
    float sum = y.values[p * kFree];
    for (uint32_t i = 1; i < kFree; ++i) sum += y.values[p * kFree + i];
    EXPECT_EQ(got_one.at(p, 0), -sum) << p;
  }
}

Program parse(const std::string& body) {
  return parse_tasm("kernel k\ntarget trn2\nhbm x : fp32[128, 64] input\nhbm y : fp32[128, 64] output\n"
                    "sbuf a : fp32[128, 64]\nsbuf b : fp32[128, 64]\npsum acc : fp32[128, 64]\n" + body, "k.tasm");
}

TEST(ReadsOnlyOwnWrites, TellsProgramsThatReadOnlyWhatTheyWroteFromOnesThatCouldSeeOldBytes) {
  EXPECT_TRUE(reads_only_own_writes(parse("dma_copy dst=a, src=x\n"
                                          "tensor_scalar dst=b, data=a, op0=multiply, operand0=2\n"
                                          "activation dst=a, data=b, op=exp\n"
                                          "dma_copy dst=y, src=a\n")));
  // b is read before anything wrote it.
  EXPECT_FALSE(reads_only_own_writes(parse("dma_copy dst=a, src=x\n"
                                           "tensor_tensor dst=a, data1=a, data2=b, op=add\n")));
  // Half of a written, all of it read.
  EXPECT_FALSE(reads_only_own_writes(parse("dma_copy dst=a{offset=0, ap=[[0, 64], [1, 64]]}, "
                                           "src=x{offset=0, ap=[[64, 64], [1, 64]]}\n"
                                           "dma_copy dst=y, src=a\n")));
  // A strided write covers only every other element of its span.
  EXPECT_FALSE(reads_only_own_writes(parse("memset dst=a{offset=0, ap=[[0, 128], [2, 32]]}, value=1\n"
                                           "dma_copy dst=y, src=a\n")));
  // A DMA adding to its destination reads it.
  EXPECT_FALSE(reads_only_own_writes(parse("dma_copy dst=a, src=x, dst_rmw_op=add\n")));
  // The instruction reads its source before it writes: dst = src on the same unwritten tile reads old bytes.
  EXPECT_FALSE(reads_only_own_writes(parse("tensor_copy dst=a, src=a\n")));
}

// A tile written in pieces that together make a box (the two halves of its bytes, of its partitions) covers a read of
// the whole; pieces with a gap, or an L of two pieces, do not. A matmul with accumulate=false writes its dst; true and
// auto read it.
TEST(ReadsOnlyOwnWrites, PiecesThatMakeABoxCoverIt) {
  EXPECT_TRUE(reads_only_own_writes(parse("memset dst=a[:, 0:32], value=1\nmemset dst=a[:, 32:64], value=2\n"
                                          "dma_copy dst=y, src=a\n")));
  EXPECT_TRUE(reads_only_own_writes(parse("memset dst=a[64:128, :], value=1\nmemset dst=a[0:64, :], value=2\n"
                                          "dma_copy dst=y, src=a\n")));
  // Four quarters, joined two by two and then the halves.
  EXPECT_TRUE(reads_only_own_writes(parse("memset dst=a[0:64, 0:32], value=1\nmemset dst=a[64:128, 32:64], value=1\n"
                                          "memset dst=a[0:64, 32:64], value=1\nmemset dst=a[64:128, 0:32], value=1\n"
                                          "dma_copy dst=y, src=a\n")));
  EXPECT_FALSE(reads_only_own_writes(parse("memset dst=a[:, 0:16], value=1\nmemset dst=a[:, 32:64], value=2\n"
                                           "dma_copy dst=y, src=a\n")));
  EXPECT_FALSE(reads_only_own_writes(parse("memset dst=a[:, 0:32], value=1\nmemset dst=a[0:64, 32:64], value=2\n"
                                           "dma_copy dst=y[0:128, 0:48], src=a[:, 0:48]\n")));
  const std::string mm = "dma_copy dst=a, src=x\nnc_matmul dst=acc[0:64, :], stationary=a, moving=a, accumulate=";
  EXPECT_TRUE(reads_only_own_writes(parse(mm + "false\ntensor_copy dst=b[0:64, :], src=acc[0:64, :]\n")));
  EXPECT_TRUE(reads_only_own_writes(parse(mm + "false\n" + "nc_matmul dst=acc[0:64, :], stationary=a, moving=a, accumulate=true\n")));
  EXPECT_FALSE(reads_only_own_writes(parse(mm + "false\ntensor_copy dst=b, src=acc\n")));  // rows 64..127 unwritten
  EXPECT_FALSE(reads_only_own_writes(parse(mm + "true\n")));
  EXPECT_FALSE(reads_only_own_writes(parse(mm + "auto\n")));
}

TEST(OverwritesWhole, OnlyPlainWritesThatCoverEveryElementAndNoReadCount) {
  const uint32_t y = 1;  // x, y, a, b, acc
  auto whole = [&](std::initializer_list<const char*> bodies) {
    std::vector<Program> programs;
    for (const char* body : bodies) programs.push_back(parse(body));
    std::vector<const Program*> raw;
    for (const Program& p : programs) raw.push_back(&p);
    return overwrites_whole(raw, y);
  };
  EXPECT_TRUE(whole({"dma_copy dst=y, src=a\n"}));
  // Two halves, in either order, on one core or on two.
  const char* top = "dma_copy dst=y{offset=0, ap=[[64, 64], [1, 64]]}, src=a{offset=0, ap=[[0, 64], [1, 64]]}\n";
  const char* bottom = "dma_copy dst=y{offset=4096, ap=[[64, 64], [1, 64]]}, src=a{offset=0, ap=[[64, 64], [1, 64]]}\n";
  EXPECT_TRUE(whole({(std::string(bottom) + top).c_str()}));
  EXPECT_TRUE(whole({top, bottom}));
  EXPECT_FALSE(whole({top}));
  // Every other element, or all but the last element of each row.
  EXPECT_FALSE(whole({"dma_copy dst=y{offset=0, ap=[[64, 128], [2, 32]]}, src=a{offset=0, ap=[[0, 128], [1, 32]]}\n"}));
  EXPECT_FALSE(whole({"dma_copy dst=y{offset=0, ap=[[64, 128], [1, 63]]}, src=a{offset=0, ap=[[0, 128], [1, 63]]}\n"}));
  // Read as well as written, or added to.
  EXPECT_FALSE(whole({"dma_copy dst=y, src=a\ndma_copy dst=b, src=y\n"}));
  EXPECT_FALSE(whole({"dma_copy dst=y, src=a, dst_rmw_op=add\n"}));
}

TEST(ReadsOnlyOwnWrites, ARecycledMemoryLeftUnzeroedIsZeroedForTheNextProgramThatCouldSeeIt) {
  const HardwareConfig& config = testing_support::config("trn2");
  MemoryImagePool pool;
  const Program scribble = parse("memset dst=a, value=7\nmemset dst=b, value=9\nmemset dst=acc, value=5\n");
  const Program own = parse("dma_copy dst=a, src=x\ntensor_scalar dst=a, data=a, op0=add, operand0=1\n"
                            "dma_copy dst=y, src=a\n");
  const Program reads_b = parse("dma_copy dst=y, src=b\n");
  ASSERT_TRUE(reads_only_own_writes(own));
  ASSERT_FALSE(reads_only_own_writes(reads_b));
  auto run = [&](const Program& program, std::vector<float> input) {
    CoreState state(config.core, program, nullptr, &pool, /*only_program_sees_onchip=*/true);
    std::memcpy(state.hbm(0).data(), input.data(), input.size() * sizeof(float));
    interpret(program, state, config);
    std::vector<float> out(128 * 64);
    std::memcpy(out.data(), state.hbm(1).data(), out.size() * sizeof(float));
    return out;
  };
  const std::vector<float> input(128 * 64, 0.5f);
  run(scribble, input);
  const std::vector<float> once = run(own, input);  // on the scribbled images, unzeroed
  for (float v : once) ASSERT_EQ(v, 1.5f);
  const std::vector<float> zeros = run(reads_b, input);  // b still held 9s: zeroed for this program
  for (float v : zeros) ASSERT_EQ(v, 0.0f);
}

}  // namespace
}  // namespace trnsim::isa
