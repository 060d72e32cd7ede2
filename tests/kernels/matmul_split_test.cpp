// A matmul split across cores that share HBM: each core computes whole output blocks, the
// values match a double-precision reference, and the time scales with the cores.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "config/config_loader.h"
#include "isa/numerics/float_format.h"
#include "kernels/matmul.h"
#include "sim/simulator.h"

namespace trnsim::kernels {
namespace {

struct Split {
  int64_t m, k, n;
  uint32_t cores;
};

class MatmulSplitTest : public ::testing::TestWithParam<Split> {};

TEST_P(MatmulSplitTest, CoresShareTheWorkAndTheResult) {
  const Split c = GetParam();
  const HardwareConfig hw = load_config("trn2").hardware;
  MatmulSpec spec;
  spec.m = c.m;
  spec.k = c.k;
  spec.n = c.n;
  std::vector<isa::Program> programs;
  std::vector<const isa::Program*> parts;
  for (uint32_t core = 0; core < c.cores; ++core) programs.push_back(matmul_program(spec, hw, core, c.cores));
  sim::SimOptions options;
  options.cores.clear();
  for (uint32_t core = 0; core < c.cores; ++core) {
    options.cores.push_back(core);
    parts.push_back(&programs[core]);
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> a(c.m * c.k), b(c.k * c.n);
  for (float& v : a) v = numerics::round_to(DType::bf16, normal(rng));
  for (float& v : b) v = numerics::round_to(DType::bf16, normal(rng));
  const isa::Program& first = programs.front();
  const uint32_t a_id = first.find_allocation("a"), b_id = first.find_allocation("b"), c_id = first.find_allocation("c");
  sim::SimResult result = sim::simulate(
      parts, hw, "test", options,
      [&](uint32_t, isa::CoreState& state) {
        numerics::convert_from_fp32(DType::bf16, a.data(), state.hbm(a_id).data(), a.size(),
                                    numerics::RoundingMode::nearest_even);
        numerics::convert_from_fp32(DType::bf16, b.data(), state.hbm(b_id).data(), b.size(),
                                    numerics::RoundingMode::nearest_even);
      },
      true);
  std::vector<float> out(c.m * c.n);
  numerics::convert_to_fp32(DType::fp32, result.states.front()->hbm(c_id).data(), out.data(), out.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      double exact = 0, magnitude = 0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        exact += double(a[i * c.k + kk]) * b[kk * c.n + j];
        magnitude += std::fabs(double(a[i * c.k + kk]) * b[kk * c.n + j]);
      }
      ASSERT_NEAR(out[i * c.n + j], exact, 4e-7 * c.k * magnitude + 1e-30) << i << "," << j;
    }
  }
  // Every core did matmuls (the work is split, not duplicated).
  for (uint32_t core = 0; core < c.cores; ++core) {
    EXPECT_GT(result.stats.engines.at("core" + std::to_string(core) + ".tensor").instructions, 0u) << core;
  }
  uint64_t matmuls = result.stats.instructions.at("nc_matmul");
  uint64_t expected = uint64_t((c.m + 127) / 128) * ((c.k + 127) / 128) * ((c.n + 511) / 512);
  EXPECT_EQ(matmuls, expected);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulSplitTest,
                         ::testing::Values(Split{300, 256, 1200, 2},   // split by N blocks
                                           Split{600, 384, 512, 2},    // one N block: split by M blocks
                                           Split{260, 130, 2100, 3}));  // ragged, three cores

TEST(MatmulSplit, TwoCoresHalveAComputeBoundMatmul) {
  const HardwareConfig hw = load_config("trn2").hardware;
  MatmulSpec spec;
  spec.m = 1024;
  spec.k = 2048;
  spec.n = 4096;
  spec.a_transposed = true;
  auto time = [&](uint32_t cores) {
    std::vector<isa::Program> programs;
    std::vector<const isa::Program*> parts;
    sim::SimOptions options;
    options.cores.clear();
    options.timing_only = true;
    for (uint32_t core = 0; core < cores; ++core) programs.push_back(matmul_program(spec, hw, core, cores));
    for (uint32_t core = 0; core < cores; ++core) {
      options.cores.push_back(core);
      parts.push_back(&programs[core]);
    }
    return sim::simulate(parts, hw, "test", options, nullptr, true).stats.total_ns;
  };
  EXPECT_NEAR(time(2) / time(1), 0.5, 0.05);
}

}  // namespace
}  // namespace trnsim::kernels
