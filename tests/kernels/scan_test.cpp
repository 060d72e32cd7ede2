// kernels/scan.h on the simulator: split over 2 cores sharing HBM, the outputs equal the one-core
// outputs byte for byte (and an fp32 cumsum equals a host fp32 running sum, the kernel's order);
// the timing of [4096, 4096] bf16 cumsum / prod against the hand formula of its dominant cost.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <functional>
#include <random>
#include <string>

#include "config/config_loader.h"
#include "isa/legality.h"
#include "isa/numerics/float_format.h"
#include "kernels/scan.h"
#include "sim/simulator.h"

namespace trnsim::kernels {
namespace {

using MakeProgram = std::function<isa::Program(uint32_t core, uint32_t cores)>;

struct Outcome {
  std::vector<uint8_t> y;
  std::vector<float> x;  // the input as the kernel saw it (rounded to its dtype)
  sim::SimStats stats;
  std::vector<uint64_t> per_core_instructions;
};

Outcome run(const HardwareConfig& hw, const MakeProgram& make, uint32_t cores, bool timing_only = false) {
  std::vector<isa::Program> programs;
  std::vector<const isa::Program*> parts;
  std::vector<uint32_t> ids;
  for (uint32_t c = 0; c < cores; ++c) {
    programs.push_back(make(c, cores));
    isa::check_program(programs.back(), hw);
    ids.push_back(c);
  }
  for (const isa::Program& p : programs) parts.push_back(&p);
  sim::SimOptions options;
  options.cores = ids;
  options.timing_only = timing_only;
  const isa::Program& first = programs.front();
  const uint32_t x = uint32_t(first.find_allocation("x")), y = uint32_t(first.find_allocation("y"));
  Outcome out;
  sim::SimResult result = sim::simulate(
      parts, hw, "test", options,
      [&](uint32_t, isa::CoreState& state) {
        const isa::Allocation& a = first.allocations[x];
        size_t n = 1;
        for (uint32_t d : a.shape) n *= d;
        std::mt19937 rng(7);
        std::normal_distribution<float> normal;
        out.x.resize(n);
        for (float& v : out.x) v = numerics::round_to(a.dtype, normal(rng));
        numerics::convert_from_fp32(a.dtype, out.x.data(), state.hbm(x).data(), n, numerics::RoundingMode::nearest_even);
      },
      true);
  out.stats = result.stats;
  if (!timing_only) out.y = result.states.front()->hbm(y);
  for (uint32_t c = 0; c < cores; ++c) {
    uint64_t count = 0;
    for (const auto& [name, engine] : result.stats.engines) {
      if (name.rfind("core" + std::to_string(c) + ".", 0) == 0) count += engine.instructions;
    }
    out.per_core_instructions.push_back(count);
  }
  return out;
}

HardwareConfig trn2() { return load_config("trn2").hardware; }

struct SplitCase {
  std::string name;
  MakeProgram make;
};

std::vector<SplitCase> split_cases(const HardwareConfig& hw) {
  std::vector<SplitCase> out;
  auto scan = [&](std::string name, ScanSpec s) {
    out.push_back({name, [s, &hw](uint32_t c, uint32_t n) { return scan_program(s, hw, c, n); }});
  };
  auto prod = [&](std::string name, ProdSpec s) {
    out.push_back({name, [s, &hw](uint32_t c, uint32_t n) { return prod_program(s, hw, c, n); }});
  };
  scan("cumsum_bf16_ragged_rows", {300, 5000, ScanOp::sum, DType::bf16, DType::bf16});
  scan("cumsum_fp32_chunked_columns", {129, 8000, ScanOp::sum, DType::fp32, DType::fp32});
  scan("cumsum_tiles_then_spread_rest", {300, 9000, ScanOp::sum, DType::bf16, DType::bf16});
  scan("cumprod_fp32", {257, 513, ScanOp::prod, DType::fp32, DType::fp32});
  scan("cumsum_spread_bf16", {5, 20000, ScanOp::sum, DType::bf16, DType::bf16});  // few long rows
  scan("cumsum_packed_short_rows", {3000, 7, ScanOp::sum, DType::fp32, DType::bf16});  // 5 rows per partition + rest
  prod("prod_packed_short_rows", {3000, 7, DType::bf16, DType::fp32});
  prod("prod_rows_bf16", {300, 5000, DType::bf16, DType::bf16});
  prod("prod_spread_fp32", {3, 70000, DType::fp32, DType::fp32});
  return out;
}

TEST(ScanKernel, SplitOverTwoCoresEqualsOneCoreByteForByte) {
  const HardwareConfig hw = trn2();
  for (const SplitCase& c : split_cases(hw)) {
    SCOPED_TRACE(c.name);
    Outcome one = run(hw, c.make, 1), two = run(hw, c.make, 2);
    ASSERT_FALSE(one.y.empty());
    EXPECT_EQ(one.y, two.y);
    EXPECT_GT(two.per_core_instructions[0], 0u);
    EXPECT_GT(two.per_core_instructions[1], 0u);  // the work is shared, not done twice by core 0
  }
}

TEST(ScanKernel, Fp32CumsumEqualsAHostRunningSumInFp32) {
  const HardwareConfig hw = trn2();
  const int64_t rows = 129, cols = 8000;  // two row tiles, two column chunks (the carried column)
  ScanSpec s{rows, cols, ScanOp::sum, DType::fp32, DType::fp32};
  Outcome o = run(hw, [&](uint32_t c, uint32_t n) { return scan_program(s, hw, c, n); }, 2);
  std::vector<float> y(size_t(rows * cols));
  numerics::convert_to_fp32(DType::fp32, o.y.data(), y.data(), y.size());
  for (int64_t r = 0; r < rows; ++r) {
    float running = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      running += o.x[size_t(r * cols + j)];
      ASSERT_EQ(y[size_t(r * cols + j)], running) << r << "," << j;
    }
  }
}

// [4096, 4096] bf16 cumsum is bound by the Vector engine: tensor_tensor_scan costs 2N cycles per
// partition (ISA-COST two-input Vector op), so 32 row tiles x 2 x 4096 cycles at the Vector clock.
// Measured 282.1 us against the formula's 273.1 us (the first load and the last cast / store are
// outside the Vector's busy span); band [1.0, 1.1].
TEST(ScanKernel, Bf16CumsumTimeIsTheVectorScanCost) {
  const HardwareConfig hw = trn2();
  const int64_t rows = 4096, cols = 4096;
  ScanSpec s{rows, cols, ScanOp::sum, DType::bf16, DType::bf16};
  Outcome o = run(hw, [&](uint32_t c, uint32_t n) { return scan_program(s, hw, c, n); }, 1, true);
  const double tiles = double(rows) / hw.core.sbuf.partitions;
  const double vector_ns = tiles * 2.0 * double(cols) / hw.core.vector.clock_ghz;
  EXPECT_GE(o.stats.total_ns, vector_ns);
  EXPECT_LE(o.stats.total_ns, 1.1 * vector_ns);
}

// [4096, 4096] bf16 prod is bound by the DMA engines (the product alternates Vector tensor_reduce and
// Scalar activation_reduce, each ~N cycles, so the two engines together outpace the loads): 32 loads
// of [128, 8 KiB] rows plus 32 stores of the [128, 1] results, which share the same 16 engines. An
// engine's share of a transfer takes fixed_latency_ns + max(elements x descriptor_processing_ns,
// bytes / bandwidth): the loads are bandwidth-bound, the 2-byte-per-partition stores bound by their
// 8 elements per engine (trainium.md §7: tiny transfers are overhead-bound); band [1.0, 1.15].
// A 1-D cumsum ([1, 70000] bf16) spread over the partitions: 2 x 547 Vector cycles for the local
// scans instead of 2 x 70000 in one partition (146 us); measured 3.8 us, the rest a chain of small
// dependent instructions (transposes, the [1, 128] carry scan, the Scalar offset) and the DMAs.
TEST(ScanKernel, OneLongRowIsSpreadOverThePartitions) {
  const HardwareConfig hw = trn2();
  ScanSpec s{1, 70000, ScanOp::sum, DType::bf16, DType::bf16};
  Outcome o = run(hw, [&](uint32_t c, uint32_t n) { return scan_program(s, hw, c, n); }, 1, true);
  const double one_partition_ns = 2.0 * 70000 / hw.core.vector.clock_ghz;
  EXPECT_LE(o.stats.total_ns, one_partition_ns / 20);
}

// Short rows ([100000, 7] bf16) packed ~195 to a partition: one scan per row of a partition, each
// at the Vector engine's MIN_II (64 cycles > 2 x 7), so ceil(rows / 128) scans x MIN_II (before
// packing the one-row-per-partition DMAs took 200 us); band [1.0, 1.15] plus the DMA start latency
// of the first load and of the last store, which nothing hides.
TEST(ScanKernel, ShortRowsArePackedAndBoundByTheVectorIssueRate) {
  const HardwareConfig hw = trn2();
  const int64_t rows = 100000, cols = 7;
  ScanSpec s{rows, cols, ScanOp::sum, DType::bf16, DType::bf16};
  Outcome o = run(hw, [&](uint32_t c, uint32_t n) { return scan_program(s, hw, c, n); }, 1, true);
  const double scans = std::ceil(double(rows) / hw.core.sbuf.partitions);
  const double vector_ns = scans * hw.core.vector.min_initiation_interval_cycles / hw.core.vector.clock_ghz;
  EXPECT_GE(o.stats.total_ns, vector_ns);
  EXPECT_LE(o.stats.total_ns, 1.15 * vector_ns + 2 * hw.core.dma.start_latency_ns);
}

TEST(ScanKernel, Bf16ProdTimeIsTheDmaTime) {
  const HardwareConfig hw = trn2();
  const int64_t rows = 4096, cols = 4096;
  ProdSpec s{rows, cols, DType::bf16, DType::bf16};
  Outcome o = run(hw, [&](uint32_t c, uint32_t n) { return prod_program(s, hw, c, n); }, 1, true);
  const DmaConfig& dma = hw.core.dma;
  const double per_engine = double(hw.core.sbuf.partitions) / dma.engines_per_core;  // partitions (elements)
  const double tiles = double(rows) / hw.core.sbuf.partitions;
  const double load = dma.fixed_latency_ns + std::max(per_engine * dma.descriptor_processing_ns,
                                                      per_engine * cols * 2 / dma.bandwidth_per_engine_gbps);
  const double store = dma.fixed_latency_ns + per_engine * dma.descriptor_processing_ns;
  const double dma_ns = tiles * (load + store);
  EXPECT_GE(o.stats.total_ns, dma_ns);
  EXPECT_LE(o.stats.total_ns, 1.15 * dma_ns);
}

}  // namespace
}  // namespace trnsim::kernels
