// nc_matmul, nc_transpose and DMA semantics against independent double-precision references.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/numerics/float_format.h"

namespace trnsim::isa {
namespace {

const HardwareConfig& trn2() {
  static const HardwareConfig config = load_config("trn2").hardware;
  return config;
}

// Values already representable in `dtype`, so the reference and the hardware see the same inputs.
std::vector<float> random_values(size_t count, DType dtype, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& v : values) v = numerics::round_to(dtype, normal(rng));
  return values;
}

void store(CoreState& state, const Program& program, const std::string& name, const std::vector<float>& values) {
  uint32_t id = static_cast<uint32_t>(program.find_allocation(name));
  numerics::convert_from_fp32(program.allocations[id].dtype, values.data(), state.hbm(id).data(), values.size(),
                              numerics::RoundingMode::nearest_even);
}

std::vector<float> load(const CoreState& state, const Program& program, const std::string& name) {
  uint32_t id = static_cast<uint32_t>(program.find_allocation(name));
  std::vector<float> values(program.allocations[id].total_elements());
  numerics::convert_to_fp32(program.allocations[id].dtype, state.hbm(id).data(), values.data(), values.size());
  return values;
}

// out[M, N] = sum over k-tiles of w_t[k, M].T @ x[k, N], loaded by DMA, accumulated in PSUM,
// evacuated by DMA-free path: PSUM -> HBM is illegal, so the result goes PSUM -> SBUF by a
// Tensor-engine-free route: we read PSUM back through a DMA-less check of CoreState instead.
struct MatmulCase {
  uint32_t k_tiles, m, n;
  DType dtype;
};

class MatmulTest : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTest, MatchesDoubleReferenceWithFp32Accumulation) {
  const MatmulCase c = GetParam();
  const uint32_t k = 128 * c.k_tiles;
  ProgramBuilder b("mm", Generation::trn2);
  b.hbm("w", c.dtype, {k, c.m}, AllocationRole::input);
  b.hbm("x", c.dtype, {k, c.n}, AllocationRole::input);
  uint32_t w_hbm = 0, x_hbm = 1;
  uint32_t w = b.sbuf("w_sb", c.dtype, {128, c.k_tiles, c.m});
  uint32_t x = b.sbuf("x_sb", c.dtype, {128, c.k_tiles, c.n});
  uint32_t acc = b.psum("acc", DType::fp32, {c.m, c.n});
  for (uint32_t t = 0; t < c.k_tiles; ++t) {
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(w, {Slice::all(), Slice::index(t)}))
        .tensor("src", b.view(w_hbm, {Slice::range(128 * t, 128 * (t + 1))}));
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(x, {Slice::all(), Slice::index(t)}))
        .tensor("src", b.view(x_hbm, {Slice::range(128 * t, 128 * (t + 1))}));
  }
  for (uint32_t t = 0; t < c.k_tiles; ++t) {
    b.emit(Opcode::nc_matmul)
        .tensor("dst", b.view(acc))
        .tensor("stationary", b.view(w, {Slice::all(), Slice::index(t)}))
        .tensor("moving", b.view(x, {Slice::all(), Slice::index(t)}))
        .word("accumulate", t == 0 ? "false" : "true");
  }
  Program program = b.finish();
  ASSERT_NO_THROW(check_program(program, trn2()));
  CoreState state(trn2().core, program);
  std::vector<float> wv = random_values(size_t(k) * c.m, c.dtype, 1), xv = random_values(size_t(k) * c.n, c.dtype, 2);
  store(state, program, "w", wv);
  store(state, program, "x", xv);
  interpret(program, state, trn2());
  Tile result = state.read(full_allocation(program, acc));
  for (uint32_t i = 0; i < c.m; ++i) {
    for (uint32_t j = 0; j < c.n; ++j) {
      double exact = 0, magnitude = 0;
      for (uint32_t kk = 0; kk < k; ++kk) {
        double term = double(wv[size_t(kk) * c.m + i]) * xv[size_t(kk) * c.n + j];
        exact += term;
        magnitude += std::fabs(term);
      }
      // fp32 accumulation: error bounded by ~k ulps of the magnitude sum.
      ASSERT_NEAR(result.at(i, j), exact, 1e-6 * k * magnitude + 1e-30) << i << "," << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(MatmulCase{1, 128, 512, DType::bf16}, MatmulCase{3, 17, 33, DType::bf16},
                                           MatmulCase{2, 128, 128, DType::fp32}, MatmulCase{1, 1, 1, DType::fp16},
                                           MatmulCase{4, 64, 500, DType::fp8_e4m3}));

// Runs of consecutive matmuls are shared among the host threads in one hand-off (isa/interpreter.cpp): into
// disjoint PSUM banks, as accumulation chains into one bank, with fp32 operands read where they lie and bf16 ones
// converted; a run with partially overlapping dsts is run one matmul at a time. The PSUM bits must not depend on
// the thread count, and must be the double reference's within fp32 accumulation error.
TEST(Matmul, RunsOfMatmulsGiveTheSameBitsOnAnyNumberOfHostThreads) {
  auto psum_bits = [](unsigned host_threads, bool overlapping) {
    ProgramBuilder b("runs", Generation::trn2);
    const uint32_t w = b.sbuf("w", DType::fp32, {128, 256});
    const uint32_t x = b.sbuf("x", DType::fp32, {128, 2048});
    const uint32_t xb = b.sbuf("xb", DType::bf16, {128, 512});
    const uint32_t acc = b.psum("acc", DType::fp32, {128, 8, 512});
    auto bank = [&](uint32_t i, uint32_t begin = 0, uint32_t end = 512) {
      return b.view(acc, {Slice::all(), Slice::index(i), Slice::range(begin, end)});
    };
    auto mm = [&](const AccessPattern& dst, const AccessPattern& stationary, const AccessPattern& moving, bool add) {
      b.emit(Opcode::nc_matmul).tensor("dst", dst).tensor("stationary", stationary).tensor("moving", moving)
          .word("accumulate", add ? "true" : "false");
    };
    const AccessPattern w0 = b.view(w, {Slice::all(), Slice::range(0, 128)});
    const AccessPattern w1 = b.view(w, {Slice::all(), Slice::range(128, 256)});
    // Four matmuls into four banks, then a chain of three into bank 4 (bf16 moving), then one of 384 columns.
    for (uint32_t i = 0; i < 4; ++i) mm(bank(i), i % 2 ? w1 : w0, b.view(x, {Slice::all(), Slice::range(512 * i, 512 * (i + 1))}), false);
    for (uint32_t i = 0; i < 3; ++i) mm(bank(4), i % 2 ? w0 : w1, b.view(xb), i > 0);
    mm(bank(5, 0, 384), w0, b.view(x, {Slice::all(), Slice::range(100, 484)}), false);
    if (overlapping) {
      mm(bank(6, 0, 256), w0, b.view(x, {Slice::all(), Slice::range(0, 256)}), false);
      mm(bank(6, 128, 384), w1, b.view(x, {Slice::all(), Slice::range(256, 512)}), true);
    }
    Program program = b.finish();
    CoreState state(trn2().core, program);
    auto set = [&](uint32_t allocation, uint32_t seed) {
      const AccessPattern ap = full_allocation(program, allocation);
      Tile tile(ap.partitions(), ap.free_elements());
      tile.values = random_values(tile.values.size(), ap.dtype, seed);
      state.write(ap, tile);
    };
    set(w, 11);
    set(x, 12);
    set(xb, 13);
    InterpreterOptions options;
    options.host_threads = host_threads;
    interpret(program, state, trn2(), options);
    AccessPattern raw = full_allocation(program, acc);
    const Tile values = state.read(raw);
    std::vector<uint32_t> bits;
    for (float v : values.values) bits.push_back(numerics::float_bits(v));
    // Bank 4 against the double reference: w1.T @ xb + w0.T @ xb + w1.T @ xb.
    const Tile wt = state.read(full_allocation(program, w)), xt = state.read(full_allocation(program, xb));
    for (uint32_t i = 0; i < 128; i += 17) {
      for (uint32_t j = 0; j < 512; j += 31) {
        double exact = 0, magnitude = 0;
        for (uint32_t k = 0; k < 128; ++k) {
          const double term = (2.0 * wt.at(k, 128 + i) + wt.at(k, i)) * xt.at(k, j);
          exact += term;
          magnitude += std::fabs(term);
        }
        EXPECT_NEAR(values.at(i, 4 * 512 + j), exact, 1e-6 * 3 * 128 * magnitude + 1e-30) << i << "," << j;
      }
    }
    return bits;
  };
  for (bool overlapping : {false, true}) {
    SCOPED_TRACE(overlapping ? "with overlapping dsts" : "");
    const std::vector<uint32_t> one = psum_bits(1, overlapping);
    EXPECT_EQ(psum_bits(2, overlapping), one);
    EXPECT_EQ(psum_bits(3, overlapping), one);
  }
}

TEST(Matmul, AccumulateAutoOverwritesAfterPsumIsRead) {
  ProgramBuilder b("auto", Generation::trn2);
  uint32_t w = b.sbuf("w", DType::fp32, {1, 1});
  uint32_t acc = b.psum("acc", DType::fp32, {1, 1});
  uint32_t out = b.sbuf("out", DType::fp32, {1, 2});
  b.emit(Opcode::memset).tensor("dst", b.view(w)).imm("value", 3.0);
  auto mm = [&] {
    b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(w));
  };
  mm();
  mm();  // accumulates: 9 + 9
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(out, {Slice::all(), Slice::index(0)})).tensor("src", b.view(acc));
  mm();  // the read ended the group: overwrites with 9
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(out, {Slice::all(), Slice::index(1)})).tensor("src", b.view(acc));
  Program program = b.finish();
  CoreState state(trn2().core, program);
  try {
    interpret(program, state, trn2());
  } catch (const IsaError& e) {
    GTEST_SKIP() << "memset/tensor_copy semantics not available: " << e.what();
  }
  Tile t = state.read(full_allocation(program, out));
  EXPECT_EQ(t.at(0, 0), 18.0f);
  EXPECT_EQ(t.at(0, 1), 9.0f);
}

TEST(Matmul, TransposeModeIsBitExactWithNanAndInf) {
  ProgramBuilder b("tr", Generation::trn2);
  uint32_t h = b.hbm("h", DType::bf16, {4, 3}, AllocationRole::input);
  uint32_t s = b.sbuf("s", DType::bf16, {4, 3});
  uint32_t id = b.sbuf("id", DType::bf16, {4, 4});
  uint32_t acc = b.psum("acc", DType::bf16, {3, 4});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", b.view(h));
  b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(s)).tensor("moving", b.view(id))
      .word("is_transpose", "true");
  Program program = b.finish();
  CoreState state(trn2().core, program);
  std::vector<float> values = {1.5f, NAN, INFINITY, -0.0f, 2.0f, -INFINITY, 3.0f, 1e-40f, 7.0f, -1.0f, 0.5f, 8.0f};
  store(state, program, "h", values);
  interpret(program, state, trn2());
  Tile t = state.read(full_allocation(program, acc));
  for (uint32_t r = 0; r < 4; ++r) {
    for (uint32_t c = 0; c < 3; ++c) {
      float expected = numerics::round_to(DType::bf16, values[r * 3 + c]);
      float got = t.at(c, r);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got));
      } else {
        EXPECT_EQ(numerics::float_bits(got), numerics::float_bits(expected)) << r << "," << c;
      }
    }
  }
}

// nc_transpose moves every value unchanged to its transposed place, for shapes that are not multiples of the
// blocks the interpreter transposes in, on the Tensor engine (into PSUM) and the Vector engine (32 x 32).
TEST(Transpose, NcTransposeMovesEveryValueToItsTransposedPlace) {
  struct Case {
    uint32_t partitions, free;
    const char* engine;
  };
  for (const Case& c : {Case{128, 128, "tensor"}, Case{100, 37, "tensor"}, Case{5, 128, "tensor"}, Case{32, 32, "vector"},
                        Case{19, 7, "vector"}}) {
    SCOPED_TRACE(std::to_string(c.partitions) + "x" + std::to_string(c.free) + " on " + c.engine);
    ProgramBuilder b("transpose", Generation::trn2);
    const uint32_t in = b.sbuf("in", DType::fp32, {c.partitions, c.free});
    const bool on_tensor = std::string(c.engine) == "tensor";
    const uint32_t out = on_tensor ? b.psum("out", DType::fp32, {c.free, c.partitions})
                                   : b.sbuf("out", DType::fp32, {c.free, c.partitions});
    b.emit(Opcode::nc_transpose).tensor("dst", b.view(out)).tensor("data", b.view(in)).on(on_tensor ? Engine::tensor : Engine::vector);
    Program program = b.finish();
    CoreState state(trn2().core, program);
    Tile values(c.partitions, c.free);
    for (size_t i = 0; i < values.values.size(); ++i) values.values[i] = float(i) * 0.25f - 7.0f;
    values.values[3] = NAN;
    values.values[4] = -0.0f;
    state.write(full_allocation(program, in), values);
    interpret(program, state, trn2());
    const Tile t = state.read(full_allocation(program, out));
    for (uint32_t p = 0; p < c.partitions; ++p) {
      for (uint32_t f = 0; f < c.free; ++f) {
        ASSERT_EQ(numerics::float_bits(t.at(f, p)), numerics::float_bits(values.at(p, f))) << p << "," << f;
      }
    }
  }
}

TEST(Dma, CastsThroughFp32WithRoundToNearestEven) {
  ProgramBuilder b("cast", Generation::trn2);
  uint32_t src = b.hbm("src", DType::fp32, {2, 4}, AllocationRole::input);
  uint32_t mid = b.sbuf("mid", DType::bf16, {2, 4});
  uint32_t dst = b.hbm("dst", DType::fp32, {2, 4}, AllocationRole::output);
  b.emit(Opcode::dma_copy).tensor("dst", b.view(mid)).tensor("src", b.view(src));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(dst)).tensor("src", b.view(mid));
  Program program = b.finish();
  CoreState state(trn2().core, program);
  // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: RNE keeps the even one (1.0).
  std::vector<float> values = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.0e38f, -2.5f, NAN, 0.1f, -0.0f, 65504.0f};
  store(state, program, "src", values);
  interpret(program, state, trn2());
  std::vector<float> out = load(state, program, "dst");
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 4.0f / 256);
  EXPECT_TRUE(std::isnan(out[4]));
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isnan(values[i])) {
      EXPECT_EQ(out[i], numerics::round_to(DType::bf16, values[i])) << i;
    }
  }
}

TEST(Dma, Int32CopyIsExactAndReadAddWriteAdds) {
  ProgramBuilder b("ints", Generation::trn3);
  uint32_t src = b.hbm("src", DType::int32, {1, 3}, AllocationRole::input);
  uint32_t mid = b.sbuf("mid", DType::int32, {1, 3});
  uint32_t dst = b.hbm("dst", DType::int32, {1, 3}, AllocationRole::output);
  b.emit(Opcode::dma_copy).tensor("dst", b.view(mid)).tensor("src", b.view(src));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(dst)).tensor("src", b.view(mid));
  uint32_t acc_src = b.hbm("a", DType::fp32, {1, 2}, AllocationRole::input);
  uint32_t acc = b.sbuf("acc", DType::fp32, {1, 2});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(acc)).tensor("src", b.view(acc_src));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(acc)).tensor("src", b.view(acc_src)).word("dst_rmw_op", "add");
  uint32_t acc_out = b.hbm("acc_out", DType::fp32, {1, 2}, AllocationRole::output);
  b.emit(Opcode::dma_copy).tensor("dst", b.view(acc_out)).tensor("src", b.view(acc));
  Program program = b.finish();
  const HardwareConfig trn3 = load_config("trn3").hardware;
  ASSERT_NO_THROW(check_program(program, trn3));
  CoreState state(trn3.core, program);
  int32_t ints[3] = {16777217, -2147483647, 123};  // 2^24 + 1 does not survive fp32
  std::memcpy(state.hbm(src).data(), ints, sizeof ints);
  store(state, program, "a", {1.25f, -3.0f});
  interpret(program, state, trn3);
  int32_t copied[3];
  std::memcpy(copied, state.hbm(dst).data(), sizeof copied);
  EXPECT_EQ(copied[0], 16777217);
  EXPECT_EQ(copied[1], -2147483647);
  EXPECT_EQ(copied[2], 123);
  EXPECT_EQ(load(state, program, "acc_out"), (std::vector<float>{2.5f, -6.0f}));
}

TEST(Dma, TransposeAndErrors) {
  ProgramBuilder b("t", Generation::trn2);
  uint32_t src = b.hbm("src", DType::bf16, {2, 3}, AllocationRole::input);
  uint32_t dst = b.sbuf("dst", DType::bf16, {3, 2});
  b.emit(Opcode::dma_transpose).tensor("dst", b.view(dst)).tensor("src", b.view(src));
  uint32_t small = b.sbuf("small", DType::bf16, {2, 2});
  b.emit(Opcode::dma_copy, 12).tensor("dst", b.view(small)).tensor("src", b.view(src));
  Program program = b.finish();
  CoreState state(trn2().core, program);
  store(state, program, "src", {1, 2, 3, 4, 5, 6});
  try {
    interpret(program, state, trn2());
    FAIL() << "a size mismatch must raise";
  } catch (const IsaError& e) {
    EXPECT_STREQ(e.what(), "instruction 1 (line 12) dma_copy: dst has 4 elements but src has 6");
  }
  Tile t = state.read(full_allocation(program, dst));
  EXPECT_EQ(t.values, (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

}  // namespace
}  // namespace trnsim::isa
