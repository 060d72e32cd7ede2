// The cost model against the published formulas, computed by hand in each test
// (../shared/reference/trainium.md §5.2 ISA-COST, §6, §7, §1.2/§2.2 performance modes).
// Every formula runs on the trn1, trn2 and trn3 configs; generation-only features on theirs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "sim/cost_model.h"

namespace trnsim::sim {
namespace {

using isa::Opcode;
using isa::Slice;

const HardwareConfig& config(const std::string& name) {
  static std::map<std::string, HardwareConfig> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, load_config(name).hardware).first;
  return it->second;
}

// A one-kernel program builder and the cost of its last instruction on one config.
class Kernel {
 public:
  explicit Kernel(const std::string& config_name)
      : m_hw(config(config_name)), m_builder("k", config(config_name).generation) {}
  const HardwareConfig& hw() const { return m_hw; }
  isa::ProgramBuilder& b() { return m_builder; }
  ComputeCost cost() const {
    const isa::Program& p = m_builder.program();
    return compute_cost(p.instructions.back(), p, m_hw);
  }
  DmaCost dma() const {
    const isa::Program& p = m_builder.program();
    return dma_cost(p.instructions.back(), p, m_hw);
  }

 private:
  const HardwareConfig& m_hw;
  isa::ProgramBuilder m_builder;
};

class CostModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  CostModelTest() : k(GetParam()) {}
  const HardwareConfig& hw() const { return k.hw(); }
  isa::ProgramBuilder& b() { return k.b(); }
  bool v3_or_later() const { return hw().generation >= Generation::trn2; }
  double vector_min_ii() const { return hw().core.vector.min_initiation_interval_cycles; }
  double scalar_min_ii() const { return hw().core.scalar.min_initiation_interval_cycles; }
  double tensor_min_ii() const { return hw().core.tensor.min_initiation_interval_cycles; }
  double gpsimd_start() const { return hw().core.gpsimd.fixed_overhead_cycles; }
  Kernel k;
};

INSTANTIATE_TEST_SUITE_P(Generations, CostModelTest, ::testing::Values("trn1", "trn2", "trn3"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// ---- configs ----

TEST(CostModelConfig, PublishedValuesTheFormulasRelyOn) {
  // PROF: the NeuronCore base clock is 1.4 GHz on Trainium1 and 1.2 GHz on Trainium2 (trn3 assumed 1.2).
  EXPECT_DOUBLE_EQ(config("trn1").chip.base_clock_ghz, 1.4);
  EXPECT_DOUBLE_EQ(config("trn2").chip.base_clock_ghz, 1.2);
  EXPECT_DOUBLE_EQ(config("trn3").chip.base_clock_ghz, 1.2);
  for (const char* name : {"trn1", "trn2", "trn3"}) {
    const CoreConfig& core = config(name).core;
    EXPECT_EQ(core.tensor.min_initiation_interval_cycles, 64u) << name;  // A-V2 MM_INIT_LATENCY
    EXPECT_EQ(core.vector.min_initiation_interval_cycles, 64u) << name;  // ISA-COST MIN_II
    EXPECT_EQ(core.gpsimd.fixed_overhead_cycles, 150u) << name;          // ISA-COST GPSIMD_START
  }
}

// ---- Tensor engine ----

TEST_P(CostModelTest, MatmulIsMaxOfMinIiAndStationaryAgainstMoving) {
  uint32_t w = b().sbuf("w", DType::bf16, {128, 128});
  uint32_t x = b().sbuf("x", DType::bf16, {128, 512});
  uint32_t acc = b().psum("acc", DType::fp32, {128, 512});
  b().emit(Opcode::nc_matmul).tensor("dst", b().view(acc)).tensor("stationary", b().view(w)).tensor("moving",
                                                                                                     b().view(x));
  ComputeCost c = k.cost();
  EXPECT_EQ(c.engine, Engine::tensor);
  EXPECT_DOUBLE_EQ(c.clock_ghz, hw().core.tensor.clock_ghz);
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(std::min(64.0, 128.0), 512.0));
  EXPECT_DOUBLE_EQ(c.latency_cycles, hw().core.tensor.fixed_overhead_cycles);
  EXPECT_EQ(c.flops, uint64_t{2} * 128 * 128 * 512);
  EXPECT_EQ(c.flops_dtype, DType::bf16);
  EXPECT_DOUBLE_EQ(c.occupancy_ns(), 512.0 / hw().core.tensor.clock_ghz);

  // Short moving: bound by MIN_II (the stationary is wider than MIN_II).
  uint32_t acc2 = b().psum("acc2", DType::fp32, {128, 32});
  b().emit(Opcode::nc_matmul)
      .tensor("dst", b().view(acc2))
      .tensor("stationary", b().view(w))
      .tensor("moving", b().view(x, {Slice::all(), Slice::range(0, 32)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(std::min(tensor_min_ii(), 128.0), 32.0));

  // Narrow stationary and moving: min(MIN_II, N_stationary) = 16.
  uint32_t acc3 = b().psum("acc3", DType::fp32, {16, 8});
  b().emit(Opcode::nc_matmul)
      .tensor("dst", b().view(acc3))
      .tensor("stationary", b().view(w, {Slice::all(), Slice::range(0, 16)}))
      .tensor("moving", b().view(x, {Slice::all(), Slice::range(0, 8)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(std::min(tensor_min_ii(), 16.0), 8.0));
  EXPECT_EQ(k.cost().flops, uint64_t{2} * 128 * 16 * 8);
}

TEST_P(CostModelTest, Fp32MatmulCostsFourTimesBf16) {
  uint32_t w = b().sbuf("w", DType::fp32, {128, 128});
  uint32_t x = b().sbuf("x", DType::fp32, {128, 512});
  uint32_t acc = b().psum("acc", DType::fp32, {128, 512});
  b().emit(Opcode::nc_matmul).tensor("dst", b().view(acc)).tensor("stationary", b().view(w)).tensor("moving",
                                                                                                     b().view(x));
  ComputeCost c = k.cost();
  EXPECT_DOUBLE_EQ(hw().core.tensor.rate_factor_by_dtype.at(DType::fp32), 0.25);  // ISA-COST: fp32 4x
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(std::min(64.0, 128.0), 512.0) / 0.25);
  EXPECT_EQ(c.flops, uint64_t{2} * 128 * 128 * 512);
  EXPECT_EQ(c.flops_dtype, DType::fp32);
}

TEST_P(CostModelTest, TransposeMatmulTakesMatmulTimeButNoFlops) {
  uint32_t w = b().sbuf("w", DType::bf16, {128, 128});
  uint32_t id = b().sbuf("identity", DType::bf16, {128, 128});
  uint32_t out = b().psum("out", DType::fp32, {128, 128});
  b().emit(Opcode::nc_matmul)
      .tensor("dst", b().view(out))
      .tensor("stationary", b().view(w))
      .tensor("moving", b().view(id))
      .imm("is_transpose", 1);
  ComputeCost c = k.cost();
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(std::min(64.0, 128.0), 128.0));
  EXPECT_EQ(c.flops, 0u);  // PROF: transposes are not model FLOPs

  // fp32 through the PE transpose mode: the fp32 matmul rate, sped up by the v3+ mode (1x on trn1).
  uint32_t wf = b().sbuf("wf", DType::fp32, {128, 128});
  uint32_t idf = b().sbuf("identity_f", DType::fp32, {128, 128});
  b().emit(Opcode::nc_matmul)
      .tensor("dst", b().view(out))
      .tensor("stationary", b().view(wf))
      .tensor("moving", b().view(idf))
      .imm("is_transpose", 1);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 128.0 / (0.25 * hw().core.tensor.fp32_transpose_speedup));
  EXPECT_EQ(k.cost().flops, 0u);
}

TEST_P(CostModelTest, TensorTransposeIsMaxOfPartitionsAndMinIiAgainstFree) {
  uint32_t x = b().sbuf("x", DType::bf16, {128, 128});
  uint32_t t1 = b().psum("t1", DType::bf16, {64, 128});
  b().emit(Opcode::nc_transpose)
      .tensor("dst", b().view(t1))
      .tensor("data", b().view(x, {Slice::all(), Slice::range(0, 64)}));
  ComputeCost c = k.cost();
  EXPECT_EQ(c.engine, Engine::tensor);
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(128.0, std::min(64.0, 64.0)));
  EXPECT_EQ(c.flops, 0u);

  uint32_t t2 = b().psum("t2", DType::bf16, {128, 32});
  b().emit(Opcode::nc_transpose).tensor("dst", b().view(t2)).tensor("data", b().view(x, {Slice::range(0, 32)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(32.0, std::min(64.0, 128.0)));

  // fp32 costs 4x (the fp32 PE rate), divided by the v3+ transpose-mode speed-up (A-V3: 2x; trn1: 1x).
  uint32_t xf = b().sbuf("xf", DType::fp32, {32, 128});
  uint32_t t3 = b().psum("t3", DType::fp32, {128, 32});
  b().emit(Opcode::nc_transpose).tensor("dst", b().view(t3)).tensor("data", b().view(xf));
  double speedup = hw().core.tensor.fp32_transpose_speedup;
  EXPECT_DOUBLE_EQ(speedup, v3_or_later() ? 2.0 : 1.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(32.0, std::min(64.0, 128.0)) * 4 / speedup);
}

TEST(CostModelTensor, DoubleRowTakesBf16TimeForTwiceTheFlops) {
  for (const char* name : {"trn2", "trn3"}) {
    Kernel k(name);
    auto& b = k.b();
    uint32_t w = b.sbuf("w", DType::fp8_e4m3, {128, 2, 128});
    uint32_t x = b.sbuf("x", DType::fp8_e4m3, {128, 2, 512});
    uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
    b.emit(Opcode::nc_matmul)
        .tensor("dst", b.view(acc))
        .tensor("stationary", b.view(w))
        .tensor("moving", b.view(x))
        .word("perf_mode", "double_row");
    ComputeCost c = k.cost();
    EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(std::min(64.0, 128.0), 512.0)) << name;  // bf16 K = 128 time
    EXPECT_EQ(c.flops, uint64_t{2} * (128 * 2) * 128 * 512) << name;                        // K = 256
    EXPECT_EQ(c.flops_dtype, DType::fp8_e4m3) << name;

    // The same fp8 operands without double_row: K = 128 at the fp8 rate (1.0).
    uint32_t w1 = b.sbuf("w1", DType::fp8_e4m3, {128, 128});
    uint32_t x1 = b.sbuf("x1", DType::fp8_e4m3, {128, 512});
    b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w1)).tensor("moving",
                                                                                                  b.view(x1));
    EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(std::min(64.0, 128.0), 512.0) / 1.0) << name;
    EXPECT_EQ(k.cost().flops, uint64_t{2} * 128 * 128 * 512) << name;
  }
}

TEST(CostModelTensor, MxMatmulTakesBf16TimeForFourTimesTheFlops) {
  Kernel k("trn3");
  auto& b = k.b();
  uint32_t w = b.sbuf("w", DType::mxfp8_e4m3, {128, 128});
  uint32_t x = b.sbuf("x", DType::mxfp8_e4m3, {128, 512});
  uint32_t ws = b.sbuf("ws", DType::uint8, {128, 128});
  uint32_t xs = b.sbuf("xs", DType::uint8, {128, 512});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  b.emit(Opcode::nc_matmul_mx)
      .tensor("dst", b.view(acc))
      .tensor("stationary", b.view(w))
      .tensor("moving", b.view(x))
      .tensor("stationary_scale", b.view(ws))
      .tensor("moving_scale", b.view(xs));
  ComputeCost c = k.cost();
  // A-V4: the 4.0 rate factor is the K = 512 per pass, not a faster pass.
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(std::min(64.0, 128.0), 512.0));
  EXPECT_EQ(c.flops, uint64_t{2} * (128 * 4) * 128 * 512);
  EXPECT_EQ(c.flops_dtype, DType::mxfp8_e4m3);
  EXPECT_DOUBLE_EQ(c.latency_cycles, k.hw().core.tensor.fixed_overhead_cycles);
}

// ---- Vector engine ----

TEST_P(CostModelTest, VectorTensorTensorIsNOnlyForPsumSbufOrFastBf16) {
  uint32_t a = b().sbuf("a", DType::bf16, {128, 1024});
  uint32_t c2 = b().sbuf("c", DType::bf16, {128, 512});
  uint32_t out = b().sbuf("out", DType::bf16, {128, 512});
  auto first_half = [&](uint32_t t) { return b().view(t, {Slice::all(), Slice::range(0, 512)}); };
  auto emit = [&](const isa::AccessPattern& x, const isa::AccessPattern& y, const isa::AccessPattern& dst,
                  const char* op) {
    b().emit(Opcode::tensor_tensor).tensor("dst", dst).tensor("data1", x).tensor("data2", y).word("op", op);
    return k.cost();
  };
  const double n = 512, min_ii = vector_min_ii();

  // Both SBUF, all bf16, add/multiply/subtract, stride 1: N.
  for (const char* op : {"add", "multiply", "subtract"}) {
    EXPECT_DOUBLE_EQ(emit(first_half(a), b().view(c2), b().view(out), op).occupancy_cycles, std::max(min_ii, n))
        << op;
  }
  ComputeCost c = emit(first_half(a), b().view(c2), b().view(out), "add");
  EXPECT_EQ(c.engine, Engine::vector);
  EXPECT_DOUBLE_EQ(c.clock_ghz, hw().core.vector.clock_ghz);
  EXPECT_DOUBLE_EQ(c.latency_cycles, hw().core.vector.fixed_overhead_cycles);  // the ~100-cycle RAW overhead
  EXPECT_EQ(c.performance_mode, 1u);
  EXPECT_EQ(c.elements, 512u);
  EXPECT_EQ(c.flops, 0u);
  // Another op: 2N.
  EXPECT_DOUBLE_EQ(emit(first_half(a), b().view(c2), b().view(out), "divide").occupancy_cycles,
                   std::max(min_ii, 2 * n));
  // Inner stride 2: 2N.
  EXPECT_DOUBLE_EQ(emit(b().view(a, {Slice::all(), Slice::range(0, 1024, 2)}), b().view(c2), b().view(out), "add")
                       .occupancy_cycles,
                   std::max(min_ii, 2 * n));
  // fp32 in SBUF: 2N.
  uint32_t af = b().sbuf("af", DType::fp32, {128, 512});
  uint32_t cf = b().sbuf("cf", DType::fp32, {128, 512});
  uint32_t of = b().sbuf("of", DType::fp32, {128, 512});
  EXPECT_DOUBLE_EQ(emit(b().view(af), b().view(cf), b().view(of), "add").occupancy_cycles, std::max(min_ii, 2 * n));
  // bf16 inputs but an fp32 output: not "all dtypes bf16": 2N.
  EXPECT_DOUBLE_EQ(emit(first_half(a), b().view(c2), b().view(of), "add").occupancy_cycles, std::max(min_ii, 2 * n));
  // One input in PSUM, the other in SBUF (fp32, any op): N.
  uint32_t p = b().psum("p", DType::fp32, {128, 512});
  EXPECT_DOUBLE_EQ(emit(b().view(p), b().view(cf), b().view(of), "divide").occupancy_cycles, std::max(min_ii, n));
  EXPECT_DOUBLE_EQ(emit(b().view(cf), b().view(p), b().view(of), "maximum").occupancy_cycles, std::max(min_ii, n));
  // Small N: MIN_II.
  auto first16 = [&](uint32_t t) { return b().view(t, {Slice::all(), Slice::range(0, 16)}); };
  EXPECT_DOUBLE_EQ(emit(first16(af), first16(cf), first16(of), "divide").occupancy_cycles, std::max(min_ii, 2 * 16.0));
}

TEST_P(CostModelTest, VectorCopyAndTensorScalarUseThePerformanceModes) {
  const double n = 512, min_ii = vector_min_ii();
  // Perf modes are v3+ (A-V3); trn1 lists only [1].
  const uint32_t four = v3_or_later() ? 4 : 1, two = v3_or_later() ? 2 : 1;
  uint32_t src = b().sbuf("src", DType::bf16, {128, 1024});
  uint32_t dst = b().sbuf("dst", DType::bf16, {128, 512});
  uint32_t dstf = b().sbuf("dstf", DType::fp32, {128, 512});
  uint32_t ps = b().psum("ps", DType::bf16, {128, 512});
  uint32_t psf = b().psum("psf", DType::fp32, {128, 512});
  auto contiguous = b().view(src, {Slice::all(), Slice::range(0, 512)});
  auto strided = b().view(src, {Slice::all(), Slice::range(0, 1024, 2)});

  // bf16 SBUF -> SBUF, contiguous: 4x.
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(dst)).tensor("src", contiguous);
  EXPECT_EQ(k.cost().performance_mode, four);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n / four));
  b().emit(Opcode::tensor_scalar).tensor("dst", b().view(dst)).tensor("data", contiguous).word("op0", "add")
      .imm("operand0", 1.0);
  EXPECT_EQ(k.cost().performance_mode, four);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n / four));
  // Non-contiguous input: 2x.
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(dst)).tensor("src", strided);
  EXPECT_EQ(k.cost().performance_mode, two);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n / two));
  // One side in PSUM (bf16): 2x.
  b().emit(Opcode::tensor_scalar).tensor("dst", b().view(dst)).tensor("data", b().view(ps)).word("op0", "multiply")
      .imm("operand0", 2.0);
  EXPECT_EQ(k.cost().performance_mode, two);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n / two));
  // fp32 on either side: no perf mode.
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(dstf)).tensor("src", contiguous);
  EXPECT_EQ(k.cost().performance_mode, 1u);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n));
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(dst)).tensor("src", b().view(psf));
  EXPECT_EQ(k.cost().performance_mode, 1u);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n));
  // A small copy in 4x mode is still bound by MIN_II.
  b().emit(Opcode::tensor_copy)
      .tensor("dst", b().view(dst, {Slice::all(), Slice::range(0, 128)}))
      .tensor("src", b().view(src, {Slice::all(), Slice::range(0, 128)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 128.0 / four));
}

TEST_P(CostModelTest, VectorScalarTensorTensorIsNOnlyForBf16SubtractMultiplyEvenN) {
  uint32_t d = b().sbuf("d", DType::bf16, {128, 512});
  uint32_t o1 = b().sbuf("o1", DType::bf16, {128, 512});
  uint32_t df = b().sbuf("df", DType::fp32, {128, 512});
  uint32_t out = b().sbuf("out", DType::bf16, {128, 512});
  auto emit = [&](const isa::AccessPattern& data, const isa::AccessPattern& operand1, const isa::AccessPattern& dst,
                  const char* op0, const char* op1) {
    b().emit(Opcode::scalar_tensor_tensor)
        .tensor("dst", dst)
        .tensor("data", data)
        .word("op0", op0)
        .imm("operand0", 1.0)
        .word("op1", op1)
        .tensor("operand1", operand1);
    return k.cost().occupancy_cycles;
  };
  EXPECT_DOUBLE_EQ(emit(b().view(d), b().view(o1), b().view(out), "subtract", "multiply"), 512.0);
  EXPECT_DOUBLE_EQ(emit(b().view(d), b().view(o1), b().view(out), "add", "multiply"), 2 * 512.0);
  EXPECT_DOUBLE_EQ(emit(b().view(df), b().view(o1), b().view(out), "subtract", "multiply"), 2 * 512.0);
  auto odd = [&](uint32_t t) { return b().view(t, {Slice::all(), Slice::range(0, 511)}); };
  EXPECT_DOUBLE_EQ(emit(odd(d), odd(o1), odd(out), "subtract", "multiply"), 2 * 511.0);
}

TEST_P(CostModelTest, VectorTensorReduceIsHalfNForBf16AddOrMax) {
  uint32_t d = b().sbuf("d", DType::bf16, {128, 512});
  uint32_t r = b().sbuf("r", DType::bf16, {128, 1});
  uint32_t df = b().sbuf("df", DType::fp32, {128, 512});
  uint32_t rf = b().sbuf("rf", DType::fp32, {128, 1});
  auto emit = [&](uint32_t data, uint32_t dst, const char* op) {
    b().emit(Opcode::tensor_reduce).tensor("dst", b().view(dst)).word("op", op).tensor("data", b().view(data))
        .word("axis", "[1]");
    return k.cost().occupancy_cycles;
  };
  EXPECT_DOUBLE_EQ(emit(d, r, "add"), 512.0 / 2);
  EXPECT_DOUBLE_EQ(emit(d, r, "maximum"), 512.0 / 2);
  EXPECT_DOUBLE_EQ(emit(d, r, "minimum"), 512.0);
  EXPECT_DOUBLE_EQ(emit(df, rf, "add"), 512.0);
  EXPECT_DOUBLE_EQ(emit(d, rf, "add"), 512.0);  // bf16 in, fp32 out
}

TEST_P(CostModelTest, VectorScanStatsReciprocalFormulas) {
  const double min_ii = vector_min_ii();
  uint32_t a = b().sbuf("a", DType::fp32, {128, 512});
  uint32_t c = b().sbuf("c", DType::fp32, {128, 512});
  uint32_t out = b().sbuf("out", DType::fp32, {128, 512});
  b().emit(Opcode::tensor_tensor_scan)
      .tensor("dst", b().view(out))
      .tensor("data0", b().view(a))
      .tensor("data1", b().view(c))
      .imm("initial", 0.0)
      .word("op0", "multiply")
      .word("op1", "add");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2 * 512.0));
  b().emit(Opcode::tensor_tensor_scan)
      .tensor("dst", b().view(out, {Slice::all(), Slice::range(0, 16)}))
      .tensor("data0", b().view(a, {Slice::all(), Slice::range(0, 16)}))
      .tensor("data1", b().view(c, {Slice::all(), Slice::range(0, 16)}))
      .imm("initial", 0.0)
      .word("op0", "multiply")
      .word("op1", "add");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2 * 16.0));

  uint32_t stats = b().sbuf("stats", DType::fp32, {128, 60});
  b().emit(Opcode::bn_stats)
      .tensor("dst", b().view(stats, {Slice::all(), Slice::range(0, 6)}))
      .tensor("data", b().view(a));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0));

  uint32_t agg = b().sbuf("agg", DType::fp32, {128, 2});
  b().emit(Opcode::bn_aggr).tensor("dst", b().view(agg)).tensor("data", b().view(stats));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 13 * (60.0 / 3)));
  b().emit(Opcode::bn_aggr)
      .tensor("dst", b().view(agg))
      .tensor("data", b().view(stats, {Slice::all(), Slice::range(0, 6)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 13 * (6.0 / 3)));

  b().emit(Opcode::reciprocal).tensor("dst", b().view(out)).tensor("data", b().view(a));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 8 * 512.0));
}

TEST_P(CostModelTest, VectorMemsetIsHalfNForZeroInto16BitFloat) {
  const double min_ii = vector_min_ii();
  uint32_t h = b().sbuf("h", DType::bf16, {128, 512});
  uint32_t f = b().sbuf("f", DType::fp16, {128, 512});
  uint32_t s = b().sbuf("s", DType::fp32, {128, 512});
  b().emit(Opcode::memset).tensor("dst", b().view(h)).imm("value", 0.0);
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0 / 2));
  b().emit(Opcode::memset).tensor("dst", b().view(f)).imm("value", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0 / 2));
  b().emit(Opcode::memset).tensor("dst", b().view(h)).imm("value", 1.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0));
  b().emit(Opcode::memset).tensor("dst", b().view(s)).imm("value", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0));
  b().emit(Opcode::memset).tensor("dst", b().view(h, {Slice::all(), Slice::range(0, 64)})).imm("value", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 64.0 / 2));
}

TEST_P(CostModelTest, VectorMax8FindIndexAndTransposeAreN) {
  const double min_ii = vector_min_ii();
  uint32_t d = b().sbuf("d", DType::fp32, {128, 1024});
  uint32_t top = b().sbuf("top", DType::fp32, {128, 8});
  uint32_t idx = b().sbuf("idx", DType::uint32, {128, 8});
  b().emit(Opcode::max8).tensor("dst", b().view(top)).tensor("src", b().view(d));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 1024.0));
  b().emit(Opcode::nc_find_index8).tensor("dst", b().view(idx)).tensor("data", b().view(d)).tensor("vals",
                                                                                                   b().view(top));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 1024.0));
  // Small input: at least MIN_II.
  b().emit(Opcode::max8).tensor("dst", b().view(top)).tensor("src", b().view(d, {Slice::all(), Slice::range(0, 16)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 16.0));

  uint32_t t = b().sbuf("t", DType::bf16, {32, 32});
  uint32_t tt = b().sbuf("tt", DType::bf16, {32, 32});
  b().emit(Opcode::nc_transpose).tensor("dst", b().view(tt)).tensor("data", b().view(t)).on(Engine::vector);
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 32.0));
}

TEST(CostModelVector, RangeSelectIsMaxOfMinIiAndN) {
  for (const char* name : {"trn2", "trn3"}) {
    Kernel k(name);
    auto& b = k.b();
    uint32_t x = b.sbuf("x", DType::fp32, {128, 512});
    uint32_t lo = b.sbuf("lo", DType::fp32, {128, 1});
    uint32_t hi = b.sbuf("hi", DType::fp32, {128, 1});
    uint32_t out = b.sbuf("out", DType::fp32, {128, 512});
    b.emit(Opcode::range_select)
        .tensor("dst", b.view(out))
        .tensor("on_true_tile", b.view(x))
        .word("comp_op0", "greater_equal")
        .word("comp_op1", "less")
        .tensor("bound0", b.view(lo))
        .tensor("bound1", b.view(hi));
    EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(64.0, 512.0)) << name;
  }
}

TEST_P(CostModelTest, VectorPredicatedCopyAndSelectReduceAreNWhenStraddlingSbufAndPsum) {
  const double min_ii = vector_min_ii(), n = 512;
  uint32_t dst = b().sbuf("dst", DType::fp32, {128, 512});
  uint32_t src = b().sbuf("src", DType::fp32, {128, 512});
  uint32_t pred = b().sbuf("pred", DType::fp32, {128, 512});
  uint32_t ps = b().psum("ps", DType::fp32, {128, 512});

  b().emit(Opcode::tensor_copy_predicated).tensor("dst", b().view(dst)).tensor("src", b().view(ps))
      .tensor("predicate", b().view(pred));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n));
  b().emit(Opcode::tensor_copy_predicated).tensor("dst", b().view(dst)).tensor("src", b().view(src))
      .tensor("predicate", b().view(pred));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2 * n));

  b().emit(Opcode::select_reduce).tensor("dst", b().view(dst)).tensor("predicate", b().view(pred))
      .tensor("on_true", b().view(ps)).imm("on_false", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, n));
  b().emit(Opcode::select_reduce).tensor("dst", b().view(dst)).tensor("predicate", b().view(pred))
      .tensor("on_true", b().view(src)).imm("on_false", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2 * n));
}

// ---- Scalar engine ----

TEST_P(CostModelTest, ScalarActivationAddsTheAccumulatorReadout) {
  const double min_ii = scalar_min_ii(), readout = hw().core.scalar.accumulator_readout_cycles;
  uint32_t x = b().sbuf("x", DType::fp32, {128, 512});
  uint32_t y = b().sbuf("y", DType::fp32, {128, 512});
  uint32_t r = b().sbuf("r", DType::fp32, {128, 1});
  b().emit(Opcode::activation).tensor("dst", b().view(y)).word("op", "exp").tensor("data", b().view(x));
  ComputeCost c = k.cost();
  EXPECT_EQ(c.engine, Engine::scalar);
  EXPECT_DOUBLE_EQ(c.clock_ghz, hw().core.scalar.clock_ghz);
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(min_ii, 512.0));
  EXPECT_DOUBLE_EQ(c.latency_cycles, hw().core.scalar.fixed_overhead_cycles);
  // V9: a dependent chain of tiny activations issues every MIN_II + overhead = 264 cycles.
  b().emit(Opcode::activation).tensor("dst", b().view(y, {Slice::all(), Slice::range(0, 1)})).word("op", "exp")
      .tensor("data", b().view(x, {Slice::all(), Slice::range(0, 1)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles + k.cost().latency_cycles, 264.0);

  b().emit(Opcode::activation).tensor("dst", b().view(y)).word("op", "exp").tensor("data", b().view(x))
      .word("reduce_op", "add").tensor("reduce_res", b().view(r));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0) + readout);
  b().emit(Opcode::activation_reduce).tensor("dst", b().view(y)).word("op", "exp").tensor("data", b().view(x))
      .word("reduce_op", "add").tensor("reduce_res", b().view(r));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0) + readout);
  b().emit(Opcode::activation_reduce).tensor("dst", b().view(y, {Slice::all(), Slice::range(0, 8)}))
      .word("op", "exp").tensor("data", b().view(x, {Slice::all(), Slice::range(0, 8)}))
      .word("reduce_op", "add").tensor("reduce_res", b().view(r));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 8.0) + readout);
}

TEST_P(CostModelTest, ScalarCopyAndTensorScalarTwiceAsFastForBf16OnV4) {
  if (!v3_or_later()) GTEST_SKIP() << "ScalarE tensor_scalar/tensor_copy are v3+";
  const double min_ii = scalar_min_ii();
  // A-V4: 2x for bf16/fp16 on v4 only.
  const uint32_t two = hw().generation >= Generation::trn3 ? 2 : 1;
  uint32_t h = b().sbuf("h", DType::bf16, {128, 512});
  uint32_t h2 = b().sbuf("h2", DType::bf16, {128, 512});
  uint32_t f = b().sbuf("f", DType::fp32, {128, 512});
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(h2)).tensor("src", b().view(h)).on(Engine::scalar);
  EXPECT_EQ(k.cost().engine, Engine::scalar);
  EXPECT_EQ(k.cost().performance_mode, two);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0 / two));
  b().emit(Opcode::tensor_scalar).tensor("dst", b().view(h2)).tensor("data", b().view(h)).word("op0", "multiply")
      .imm("operand0", 2.0).on(Engine::scalar);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0 / two));
  b().emit(Opcode::tensor_scalar).tensor("dst", b().view(f)).tensor("data", b().view(h)).word("op0", "multiply")
      .imm("operand0", 2.0).on(Engine::scalar);
  EXPECT_EQ(k.cost().performance_mode, 1u);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0));
}

// ---- GpSimd engine ----

TEST_P(CostModelTest, GpSimdIsStartPlusN) {
  const double start = gpsimd_start(), n = 512;
  uint32_t x = b().sbuf("x", DType::fp32, {128, 512});
  uint32_t y = b().sbuf("y", DType::fp32, {128, 512});
  uint32_t i = b().sbuf("i", DType::int32, {128, 512});
  b().emit(Opcode::iota).tensor("dst", b().view(i)).word("pattern", "[[1, 512]]");
  ComputeCost c = k.cost();
  EXPECT_EQ(c.engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(c.clock_ghz, hw().core.gpsimd.clock_ghz);
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, start + n);
  EXPECT_DOUBLE_EQ(c.latency_cycles, 0);  // GPSIMD_START is engine time, not a latency

  b().emit(Opcode::affine_select).tensor("dst", b().view(y)).word("pattern", "[[-1, 512]]")
      .imm("channel_multiplier", 1).tensor("on_true_tile", b().view(x)).imm("on_false_value", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + n);
  b().emit(Opcode::memset).tensor("dst", b().view(y)).imm("value", 0.0).on(Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + n);
  b().emit(Opcode::tensor_copy).tensor("dst", b().view(y)).tensor("src", b().view(x)).on(Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + n);
  b().emit(Opcode::tensor_tensor).tensor("dst", b().view(y)).tensor("data1", b().view(x)).tensor("data2", b().view(x))
      .word("op", "power").on(Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + n);
  b().emit(Opcode::tensor_scalar).tensor("dst", b().view(y)).tensor("data", b().view(x)).word("op0", "rsqrt")
      .imm("operand0", 0.0).on(Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + n);
  b().emit(Opcode::iota).tensor("dst", b().view(i, {Slice::all(), Slice::range(0, 4)})).word("pattern", "[[1, 4]]");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + 4);
}

TEST_P(CostModelTest, GpSimdPartitionReduceWalksEachProcessorsPartitions) {
  const double start = gpsimd_start();
  // lanes / processors = 128 / 8 = 16 partitions per processor.
  EXPECT_EQ(hw().core.gpsimd.lanes / hw().core.gpsimd.processors, 16u);
  uint32_t x = b().sbuf("x", DType::fp32, {128, 64});
  uint32_t r = b().sbuf("r", DType::fp32, {1, 64});
  b().emit(Opcode::tensor_partition_reduce).tensor("dst", b().view(r)).word("op", "add").tensor("data", b().view(x));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + 64 * std::ceil(128 / 16.0));
  b().emit(Opcode::tensor_partition_reduce).tensor("dst", b().view(r)).word("op", "add")
      .tensor("data", b().view(x, {Slice::range(0, 20)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, start + 64 * std::ceil(20 / 16.0));
}

// ---- synchronisation ----

TEST_P(CostModelTest, SemaphoresCostTheIssuingEnginesFixedCost) {
  b().emit(Opcode::sem_signal).imm("sem", 3);
  ComputeCost c = k.cost();
  EXPECT_EQ(c.engine, Engine::sync);
  EXPECT_DOUBLE_EQ(c.clock_ghz, hw().core.sync.clock_ghz);
  EXPECT_DOUBLE_EQ(c.occupancy_cycles, hw().core.sync.fixed_overhead_cycles);
  EXPECT_DOUBLE_EQ(c.latency_cycles, 0);
  b().emit(Opcode::barrier);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, hw().core.sync.fixed_overhead_cycles);
  b().emit(Opcode::sem_wait).imm("sem", 3).imm("value", 1).on(Engine::vector);
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_DOUBLE_EQ(k.cost().clock_ghz, hw().core.vector.clock_ghz);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, vector_min_ii());
  b().emit(Opcode::sem_signal).imm("sem", 3).on(Engine::tensor);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, tensor_min_ii());
}

// ---- DMA ----

TEST(CostModelDma, V8OneEngineMoves32KiBIn1416ns) {
  Kernel k("trn2");
  auto& b = k.b();
  uint32_t a = b.hbm("A", DType::bf16, {4, 4096}, isa::AllocationRole::input);
  uint32_t s = b.sbuf("s", DType::bf16, {4, 4096});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", b.view(a));
  DmaCost c = k.dma();
  const DmaConfig& dma = k.hw().core.dma;
  EXPECT_EQ(c.bytes, 32768u);
  EXPECT_EQ(c.first_engine, 0u);
  EXPECT_EQ(c.engines, 1u);      // 4 partitions, 8 per engine
  EXPECT_EQ(c.descriptors, 4u);  // one 8 KiB row per partition; the HBM side is one run
  EXPECT_TRUE(c.reads_hbm);
  EXPECT_FALSE(c.writes_hbm);
  EXPECT_DOUBLE_EQ(c.bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps);
  EXPECT_DOUBLE_EQ(c.dge_ns, 0);
  EXPECT_DOUBLE_EQ(c.gpsimd_ns, 0);
  EXPECT_DOUBLE_EQ(c.start_latency_ns, dma.start_latency_ns);
  EXPECT_EQ(c.hbm_channels, 0u);  // trn2 hashes HBM addresses over its channels
  // Four 8 KiB elements: the bytes bound the engine, not its descriptor processing.
  EXPECT_DOUBLE_EQ(c.descriptor_ns, 4 * dma.descriptor_processing_ns);
  EXPECT_DOUBLE_EQ(c.engine_ns(), dma.fixed_latency_ns + std::max(4 * dma.descriptor_processing_ns, 32768 / 27.2));
  // V8: the engine's span (its time plus the HBM access latency) is the published 1,416 ns.
  EXPECT_NEAR(c.engine_ns() + k.hw().hbm.latency_ns, 1416, 0.02 * 1416);
}

TEST_P(CostModelTest, DmaSpreadsOverTheEnginesOfItsPartitions) {
  const DmaConfig& dma = hw().core.dma;
  const uint32_t engines = dma.engines_per_core, per_engine = 128 / engines;
  uint32_t a = b().hbm("A", DType::bf16, {128, 128}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {128, 128});
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a));
  DmaCost c = k.dma();
  EXPECT_EQ(c.engines, engines);  // 128 partitions: all 16 engines, 2 KiB each
  EXPECT_EQ(c.first_engine, 0u);
  EXPECT_EQ(c.bytes, 128u * 128 * 2);
  EXPECT_EQ(c.descriptors, 128u);
  EXPECT_DOUBLE_EQ(c.descriptor_ns, 128.0 / engines * dma.descriptor_processing_ns);
  EXPECT_DOUBLE_EQ(c.engine_ns(), dma.fixed_latency_ns + std::max(128.0 / engines * dma.descriptor_processing_ns,
                                                                  (128.0 * 128 * 2 / engines) / dma.bandwidth_per_engine_gbps));

  // Partitions [8, 24): engines 1 and 2.
  b().emit(Opcode::dma_copy)
      .tensor("dst", b().view(s, {Slice::range(8, 24)}))
      .tensor("src", b().view(a, {Slice::range(0, 16)}));
  EXPECT_EQ(k.dma().first_engine, 8 / per_engine);
  EXPECT_EQ(k.dma().engines, (23 / per_engine) - (8 / per_engine) + 1);
  // Partitions [5, 13) straddle engines 0 and 1.
  b().emit(Opcode::dma_copy)
      .tensor("dst", b().view(s, {Slice::range(5, 13)}))
      .tensor("src", b().view(a, {Slice::range(0, 8)}));
  EXPECT_EQ(k.dma().first_engine, 0u);
  EXPECT_EQ(k.dma().engines, 2u);

  // SBUF -> HBM writes HBM.
  uint32_t out = b().hbm("out", DType::bf16, {128, 128}, isa::AllocationRole::output);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(out)).tensor("src", b().view(s));
  EXPECT_FALSE(k.dma().reads_hbm);
  EXPECT_TRUE(k.dma().writes_hbm);

  // HBM -> HBM: every engine.
  b().emit(Opcode::dma_copy).tensor("dst", b().view(out)).tensor("src", b().view(a));
  EXPECT_EQ(k.dma().engines, engines);
  EXPECT_TRUE(k.dma().reads_hbm && k.dma().writes_hbm);
  EXPECT_EQ(k.dma().descriptors, 1u);  // both sides one contiguous run
}

TEST_P(CostModelTest, DmaChunksAreContiguousOnBothSidesAndDescriptorsWalkTheStridedSide) {
  uint32_t a = b().hbm("A", DType::bf16, {64, 128}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {64, 64});
  // Every other HBM element: each element is its own chunk (64 x 64); one descriptor per SBUF row
  // walks the strided HBM side.
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a, {Slice::all(),
                                                                                   Slice::range(0, 128, 2)}));
  EXPECT_EQ(k.dma().chunks, 64u * 64);
  EXPECT_EQ(k.dma().descriptors, 64u);
  // HBM rows of 64 out of 128: 64 runs on both sides.
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a, {Slice::all(),
                                                                                   Slice::range(0, 64)}));
  EXPECT_EQ(k.dma().chunks, 64u);
  EXPECT_EQ(k.dma().descriptors, 64u);
  // A contiguous HBM block [32, 128] into SBUF rows of 64 split in two: chunks of 64 on the SBUF
  // side, at least one descriptor per SBUF partition row (64).
  uint32_t s2 = b().sbuf("s2", DType::bf16, {64, 2, 32});
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s2)).tensor("src", b().view(a, {Slice::range(0, 32)}));
  EXPECT_EQ(k.dma().chunks, 64u);
  EXPECT_EQ(k.dma().descriptors, 64u);
  // A whole contiguous tensor into 64 SBUF rows: one HBM run, still one descriptor per partition row.
  uint32_t c = b().hbm("C", DType::bf16, {64, 64}, isa::AllocationRole::input);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(c));
  EXPECT_EQ(k.dma().chunks, 64u);
  EXPECT_EQ(k.dma().descriptors, 64u);
}

TEST_P(CostModelTest, DmaStridedChunksTakeAtLeastTheMinimumChunkBytesOfEngineTime) {
  const DmaConfig& dma = hw().core.dma;
  ASSERT_EQ(dma.min_chunk_bytes, 64u);  // configs: assumed, one 64-byte beat
  uint32_t a = b().hbm("A", DType::bf16, {128, 256}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {128, 128});
  // Every other element of 128 rows: 128 x 128 two-byte chunks over 16 engines, each chunk one
  // 64-byte beat: 1024 x 64 B per engine, against 8 descriptors per engine.
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a, {Slice::all(),
                                                                                   Slice::range(0, 256, 2)}));
  const double per_engine_bytes = 128.0 * 128 * 64 / 16;
  const double data_ns = per_engine_bytes / dma.bandwidth_per_engine_gbps;
  EXPECT_DOUBLE_EQ(k.dma().data_ns_per_engine(), data_ns);
  EXPECT_DOUBLE_EQ(k.dma().engine_ns(), dma.fixed_latency_ns + std::max(8 * dma.descriptor_processing_ns, data_ns));
  // Contiguous rows of 256 B: chunks above the floor cost their bytes, descriptors bound the engine.
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a, {Slice::all(), Slice::range(0, 128)}));
  EXPECT_DOUBLE_EQ(k.dma().data_ns_per_engine(), 8.0 * 256 / dma.bandwidth_per_engine_gbps);
  EXPECT_DOUBLE_EQ(k.dma().engine_ns(), dma.fixed_latency_ns + 8 * dma.descriptor_processing_ns);
}

TEST_P(CostModelTest, DmaHardwareDgeAddsItsInstructionTime) {
  uint32_t a = b().hbm("A", DType::bf16, {128, 128}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {128, 128});
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a)).word("dge_mode", "hwdge");
  EXPECT_DOUBLE_EQ(k.dma().dge_ns, hw().core.dma.hardware_dge_instruction_ns);
  EXPECT_DOUBLE_EQ(hw().core.dma.hardware_dge_instruction_ns, v3_or_later() ? 600.0 : 0.0);  // A-V3
  EXPECT_DOUBLE_EQ(k.dma().gpsimd_ns, 0);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a)).word("dge_mode", "swdge");
  EXPECT_DOUBLE_EQ(k.dma().dge_ns, 0);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a)).word("dge_mode", "none");
  EXPECT_DOUBLE_EQ(k.dma().dge_ns, 0);  // DMA: descriptors precomputed, "zero on-device overhead"
  EXPECT_DOUBLE_EQ(k.dma().gpsimd_ns, 0);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a));
  EXPECT_DOUBLE_EQ(k.dma().dge_ns, 0);
}

TEST_P(CostModelTest, DmaSoftwareDgeChargesTheGpSimdPerDescriptor) {
  uint32_t a = b().hbm("A", DType::bf16, {128, 256}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {128, 128});
  // Rows of 128 out of 256: 128 descriptors.
  b().emit(Opcode::dma_copy)
      .tensor("dst", b().view(s))
      .tensor("src", b().view(a, {Slice::all(), Slice::range(0, 128)}))
      .word("dge_mode", "swdge");
  const double cycles = hw().core.gpsimd.fixed_overhead_cycles + 128 * hw().core.dma.software_dge_cycles_per_descriptor;
  EXPECT_DOUBLE_EQ(k.dma().gpsimd_ns, cycles / hw().core.gpsimd.clock_ghz);
  EXPECT_GT(k.dma().gpsimd_ns, 0);
}

TEST_P(CostModelTest, DmaSmallElementsAreBoundByDescriptorProcessing) {
  const DmaConfig& dma = hw().core.dma;
  const double per_engine = 128.0 / dma.engines_per_core;
  uint32_t a = b().hbm("A", DType::bf16, {128, 8192}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::bf16, {128, 4096});
  // Trainium.md §7: < 256 B per partition is overhead-bound, >= 4 KiB saturates the engines.
  for (uint32_t row_bytes : {64u, 256u, 1024u, 2048u, 4096u, 8192u}) {
    const uint32_t elements = row_bytes / 2;
    b().emit(Opcode::dma_copy)
        .tensor("dst", b().view(s, {Slice::all(), Slice::range(0, elements)}))
        .tensor("src", b().view(a, {Slice::all(), Slice::range(0, elements)}));
    DmaCost c = k.dma();
    EXPECT_EQ(c.descriptors, 128u);
    const double data = per_engine * row_bytes / dma.bandwidth_per_engine_gbps;
    const double expected = dma.fixed_latency_ns + std::max(per_engine * dma.descriptor_processing_ns, data);
    EXPECT_DOUBLE_EQ(c.engine_ns(), expected) << row_bytes;
    // Throughput relative to the engine's streaming rate.
    const double efficiency = data / c.engine_ns();
    if (row_bytes <= 256) EXPECT_LT(efficiency, 0.25) << row_bytes;
    if (row_bytes >= 4096) EXPECT_GT(efficiency, 0.85) << row_bytes;
  }
}

TEST(CostModelDma, HbmChannelsOfAModularInterleave) {
  // 16 channels x 256 B: a 1 KiB row reaches 4 consecutive channels.
  std::array<uint64_t, kMaxHbmChannels> bytes{};
  isa::AccessPattern ap;
  ap.dtype = DType::bf16;
  ap.partition = {8192, 128};  // rows 16 KiB apart: every row starts on channel 0
  ap.num_free_dims = 1;
  ap.free[0] = {1, 512};
  ASSERT_TRUE(hbm_channel_bytes(ap, 16, 256, bytes));
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(bytes[c], c < 4 ? 128u * 256 : 0u) << c;
  // Offset by 256 elements (512 B): channels 2..5.
  ap.offset = 256;
  ASSERT_TRUE(hbm_channel_bytes(ap, 16, 256, bytes));
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(bytes[c], c >= 2 && c < 6 ? 128u * 256 : 0u) << c;
  // Rows 1 KiB + 256 B apart: row r starts on channel 5r mod 16, so rows spread over every channel.
  ap.offset = 0;
  ap.partition = {640, 128};
  ASSERT_TRUE(hbm_channel_bytes(ap, 16, 256, bytes));
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(bytes[c], 128u * 1024 / 16) << c;
  // A contiguous 4 KiB row: all 16 channels alike; a 100 B row that straddles a granule: two channels.
  ap.partition = {2048, 1};
  ap.free[0] = {1, 2048};
  ASSERT_TRUE(hbm_channel_bytes(ap, 16, 256, bytes));
  for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(bytes[c], 256u) << c;
  ap.offset = 100;  // bytes 200..299: 56 on channel 0, 44 on channel 1
  ap.free[0] = {1, 50};
  ASSERT_TRUE(hbm_channel_bytes(ap, 16, 256, bytes));
  EXPECT_EQ(bytes[0], 56u);
  EXPECT_EQ(bytes[1], 44u);
}

TEST(CostModelDma, Trn1LoadsOfTheTutorialReachFewHbmChannels) {
  // V1 on trn1: a [128, 512] bf16 tile of an [8192, 8192] matrix is 128 rows of 1 KiB at a 16 KiB
  // pitch; with modular interleave it reaches channels_per_stack x 1 KiB / (channels x granule).
  Kernel k("trn1");
  auto& b = k.b();
  const HbmConfig& hbm = k.hw().hbm;
  ASSERT_EQ(hbm.interleave, HbmInterleave::modular);
  uint32_t rhs = b.hbm("rhs", DType::bf16, {8192, 8192}, isa::AllocationRole::input);
  uint32_t s = b.sbuf("s", DType::bf16, {128, 512});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", b.view(rhs, {Slice::range(0, 128), Slice::range(0, 512)}));
  DmaCost c = k.dma();
  ASSERT_EQ(c.hbm_channels, hbm.channels_per_stack);
  const double reached = 1024.0 / hbm.interleave_bytes;  // channels one row covers (its pitch is a whole period)
  EXPECT_DOUBLE_EQ(c.hbm_channel_efficiency(), reached / hbm.channels_per_stack);
}

TEST_P(CostModelTest, DmaReadAddWriteRunsAtItsEfficiency) {
  const DmaConfig& dma = hw().core.dma;
  uint32_t a = b().hbm("A", DType::fp32, {128, 128}, isa::AllocationRole::input);
  uint32_t s = b().sbuf("s", DType::fp32, {128, 128});
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a)).word("dst_rmw_op", "add");
  // A-V4: 50% through the collective engines before v4, full copy throughput on v4.
  double efficiency = hw().generation >= Generation::trn3 ? 1.0 : 0.5;
  EXPECT_DOUBLE_EQ(dma.read_add_write_efficiency, efficiency);
  EXPECT_DOUBLE_EQ(k.dma().bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps * efficiency);
  b().emit(Opcode::dma_copy).tensor("dst", b().view(s)).tensor("src", b().view(a)).word("dst_rmw_op", "none");
  EXPECT_DOUBLE_EQ(k.dma().bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps);
}

TEST(CostModelDma, TransposeRunsAtItsEfficiency) {
  for (const char* name : {"trn2", "trn3"}) {
    Kernel k(name);
    auto& b = k.b();
    const DmaConfig& dma = k.hw().core.dma;
    uint32_t a = b.hbm("A", DType::bf16, {16, 128}, isa::AllocationRole::input);
    uint32_t s = b.sbuf("s", DType::bf16, {128, 16});
    uint32_t s2 = b.sbuf("s2", DType::bf16, {16, 128});
    b.emit(Opcode::dma_transpose).tensor("dst", b.view(s)).tensor("src", b.view(a));
    DmaCost c = k.dma();
    EXPECT_EQ(c.bytes, 16u * 128 * 2) << name;
    EXPECT_EQ(c.engines, dma.engines_per_core) << name;  // 128 SBUF partitions
    EXPECT_EQ(c.descriptors, 128u) << name;              // the SBUF side's rows (the HBM side is one run)
    EXPECT_DOUBLE_EQ(c.bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps * 0.9) << name;  // A-V3 HBM->SBUF
    b.emit(Opcode::dma_transpose).tensor("dst", b.view(s)).tensor("src", b.view(s2));
    EXPECT_DOUBLE_EQ(k.dma().bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps * 0.5) << name;  // SBUF->SBUF
  }
}

TEST(CostModelDma, ComputeAndDmaCostsRejectTheOtherKind) {
  Kernel k("trn2");
  auto& b = k.b();
  uint32_t a = b.hbm("A", DType::bf16, {4, 64}, isa::AllocationRole::input);
  uint32_t s = b.sbuf("s", DType::bf16, {4, 64});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", b.view(a));
  EXPECT_TRUE(is_dma(b.program().instructions.back()));
  EXPECT_THROW(k.cost(), std::logic_error);
  b.emit(Opcode::memset).tensor("dst", b.view(s)).imm("value", 0.0);
  EXPECT_FALSE(is_dma(b.program().instructions.back()));
  EXPECT_THROW(k.dma(), std::logic_error);
}

// ---- The Vector accumulator and PRNG instructions ----

TEST_P(CostModelTest, VectorAccumulatingAndRandomFormulas) {
  const double min_ii = vector_min_ii();
  uint32_t a = b().sbuf("a", DType::fp32, {128, 1024});
  uint32_t out = b().sbuf("out", DType::fp32, {128, 1024});
  uint32_t col = b().sbuf("col", DType::fp32, {128, 1});
  auto first = [&](uint32_t t, uint32_t n) { return b().view(t, {Slice::all(), Slice::range(0, n)}); };
  // ISA-COST tensor_scalar_reduce: max(MIN_II, N) + MIN_II.
  for (uint32_t n : {512u, 16u}) {
    b().emit(Opcode::tensor_scalar_reduce)
        .tensor("dst", first(out, n))
        .tensor("data", first(a, n))
        .word("op0", "multiply")
        .imm("operand0", 2.0)
        .word("reduce_op", "add")
        .tensor("reduce_res", b().view(col));
    EXPECT_EQ(k.cost().engine, Engine::vector);
    EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, double(n)) + min_ii) << n;
  }
  // tensor_scalar_cumulative (assumed, A-V2 one-input rule): max(MIN_II, N).
  for (uint32_t n : {512u, 16u}) {
    b().emit(Opcode::tensor_scalar_cumulative)
        .tensor("dst", first(out, n))
        .tensor("src", first(a, n))
        .word("op0", "multiply")
        .word("op1", "add")
        .imm("imm0", 0.5);
    EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, double(n))) << n;
  }
  // ISA-COST dropout: max(MIN_II, N).
  b().emit(Opcode::dropout).tensor("dst", first(out, 512)).tensor("data", first(a, 512)).imm("prob", 0.25);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 512.0));
  // ISA-COST nc_match_replace8: max(MIN_II, N) (the doc's "min" read as max, trainium.md §13.12).
  uint32_t vals = b().sbuf("vals", DType::fp32, {128, 8});
  b().emit(Opcode::nc_match_replace8)
      .tensor("dst", b().view(out))
      .tensor("data", b().view(a))
      .tensor("vals", b().view(vals))
      .imm("imm", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 1024.0));
  b().emit(Opcode::nc_match_replace8)
      .tensor("dst", first(out, 16))
      .tensor("data", first(a, 16))
      .tensor("vals", b().view(vals))
      .imm("imm", 0.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, min_ii);
  // rng on Vector: A-V4's 4 values per lane per cycle on trn3; assumed one per cycle before.
  uint32_t bits = b().sbuf("bits", DType::uint32, {128, 512});
  b().emit(Opcode::rng).tensor("dst", b().view(bits));
  const bool v4 = hw().generation >= Generation::trn3;
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, v4 ? 512.0 / 4 : 512.0));
  // set_rng_seed (assumed max(MIN_II, N), N = 1).
  uint32_t seed = b().sbuf("seed", DType::uint32, {1, 1});
  b().emit(Opcode::set_rng_seed).tensor("src_seeds", b().view(seed));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, min_ii);
  if (!v3_or_later()) return;
  // GpSimd rng / rand_set_state / rand_get_state (trn2+): assumed GPSIMD_START + N.
  b().emit(Opcode::rng).tensor("dst", b().view(bits)).on(Engine::gpsimd);
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 512.0);
  uint32_t state = b().sbuf("state", DType::uint32, {128, 6});
  b().emit(Opcode::rand_set_state).tensor("src_seeds", b().view(state));
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 6.0);
  b().emit(Opcode::rand_get_state).tensor("dst", b().view(state));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 6.0);
}

// activate2 (trn3, no published cost): assumed as activation, max(MIN_II, N), plus the accumulator read-out when
// reduce_res is given.
TEST(CostModelScalar, Activate2OnTrn3IsActivationCost) {
  Kernel k("trn3");
  const ScalarEngineConfig& act = k.hw().core.scalar;
  auto& b = k.b();
  uint32_t x = b.sbuf("x", DType::bf16, {128, 2048});
  uint32_t col = b.sbuf("col", DType::fp32, {128, 1});
  auto first = [&](uint32_t n) { return b.view(x, {Slice::all(), Slice::range(0, n)}); };
  b.emit(Opcode::activate2)
      .tensor("dst", first(1000))
      .word("op", "gelu")
      .tensor("data", first(1000))
      .tensor("imm0", b.view(col))
      .imm("imm1", 0.5)
      .word("op0", "multiply")
      .word("op1", "add");
  EXPECT_EQ(k.cost().engine, Engine::scalar);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(double(act.min_initiation_interval_cycles), 1000.0));
  b.emit(Opcode::activate2)
      .tensor("dst", first(1000))
      .word("op", "copy")
      .tensor("data", first(1000))
      .imm("imm0", 2.0)
      .imm("imm1", 0.0)
      .word("op0", "multiply")
      .word("op1", "bypass")
      .word("reduce_op", "add")
      .tensor("reduce_res", b.view(col))
      .word("reduce_cmd", "reset_reduce");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 1000.0 + act.accumulator_readout_cycles);
  b.emit(Opcode::activate2)
      .tensor("dst", first(8))
      .word("op", "copy")
      .tensor("data", first(8))
      .imm("imm0", 2.0)
      .imm("imm1", 0.0)
      .word("op0", "bypass")
      .word("op1", "bypass");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, act.min_initiation_interval_cycles);
}

// quantize_mx (trn3): A-V4's 4 elements per partition per cycle (the 4x mode), max(MIN_II, N / 4), N = src's elements.
TEST(CostModelVector, QuantizeMxOnTrn3IsFourElementsPerCycle) {
  Kernel k("trn3");
  const double min_ii = k.hw().core.vector.min_initiation_interval_cycles;
  auto& b = k.b();
  uint32_t x = b.sbuf("x", DType::bf16, {128, 2048});
  uint32_t q = b.sbuf("q", DType::mxfp8_e4m3, {128, 512});
  uint32_t s = b.sbuf("s", DType::fp8_e8m0, {128, 512});
  b.emit(Opcode::quantize_mx).tensor("dst", b.view(q)).tensor("src", b.view(x)).tensor("dst_scale", b.view(s));
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_EQ(k.cost().performance_mode, 4u);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2048.0 / 4));
  b.emit(Opcode::quantize_mx)
      .tensor("dst", b.view(q, {Slice::all(), Slice::range(0, 32)}))
      .tensor("src", b.view(x, {Slice::all(), Slice::range(0, 128)}))
      .tensor("dst_scale", b.view(s, {Slice::all(), Slice::range(0, 32)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, min_ii);  // 128 / 4 = 32 < MIN_II
}

// trn3-only Vector instructions: exponential at 4x ScalarE exp's max(MIN_II, N) (A-V4), plus MIN_II (assumed) when
// reduce_res is read out; rand2 at 4 values per lane per cycle (A-V4).
TEST(CostModelVector, ExponentialAndRand2OnTrn3) {
  Kernel k("trn3");
  const CoreConfig& core = k.hw().core;
  const double min_ii = core.vector.min_initiation_interval_cycles;
  const double clocks = core.vector.clock_ghz / core.scalar.clock_ghz;
  EXPECT_DOUBLE_EQ(clocks, 1.0);  // A-V4: both engines at 1.2 GHz, so the formula is max(MIN_II, N / 4)
  auto& b = k.b();
  uint32_t x = b.sbuf("x", DType::bf16, {128, 2048});
  uint32_t y = b.sbuf("y", DType::bf16, {128, 2048});
  uint32_t col = b.sbuf("col", DType::fp32, {128, 1});
  auto first = [&](uint32_t t, uint32_t n) { return b.view(t, {Slice::all(), Slice::range(0, n)}); };
  b.emit(Opcode::exponential).tensor("dst", b.view(y)).tensor("src", b.view(x)).tensor("max_value", b.view(col));
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2048.0 / 4 * clocks));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 512.0);
  b.emit(Opcode::exponential)
      .tensor("dst", b.view(y))
      .tensor("src", b.view(x))
      .tensor("reduce_res", b.view(col))
      .word("reduce_cmd", "reset_reduce");
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 512.0 + min_ii);
  b.emit(Opcode::exponential).tensor("dst", first(y, 128)).tensor("src", first(x, 128));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, min_ii);  // 128 / 4 = 32 < MIN_II
  b.emit(Opcode::rand2).tensor("dst", b.view(y)).imm("min", 0.0).imm("max", 1.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(min_ii, 2048.0 / 4));
  b.emit(Opcode::rand2).tensor("dst", first(y, 100)).imm("min", 0.0).imm("max", 1.0);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, min_ii);
}

// nc_n_gather: no published cost; assumed GPSIMD_START + N (N = indices per partition).
TEST_P(CostModelTest, GpSimdNcNGatherIsStartPlusN) {
  uint32_t data = b().sbuf("data", DType::fp32, {128, 4096});
  uint32_t dst = b().sbuf("dst", DType::fp32, {128, 300});
  uint32_t idx = b().sbuf("idx", DType::uint32, {128, 300});
  b().emit(Opcode::nc_n_gather)
      .tensor("dst", b().view(dst))
      .tensor("data", b().view(data, {Slice::all(), Slice::range(0, 200)}))
      .tensor("indices", b().view(idx));
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 300.0);
  // nonzero_with_count (trn2+, no published cost): assumed GPSIMD_START + N, N = dst's T + 1 elements.
  uint32_t nz = b().sbuf("nz", DType::int32, {128, 513});
  b().emit(Opcode::nonzero_with_count)
      .tensor("dst", b().view(nz))
      .tensor("src", b().view(data, {Slice::all(), Slice::range(0, 512)}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 513.0);
  // A larger data tile does not change N: the indices are what the engine walks.
  b().emit(Opcode::nc_n_gather)
      .tensor("dst", b().view(dst))
      .tensor("data", b().view(data))
      .tensor("indices", b().view(idx));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 300.0);
}

// ISA-COST nc_stream_shuffle: max(MIN_II, N) Vector cycles.
TEST_P(CostModelTest, VectorStreamShuffleIsMaxMinIiN) {
  uint32_t x = b().sbuf("shuf", DType::bf16, {128, 1000});
  std::string id = "[0";
  for (int i = 1; i < 32; ++i) id += ", " + std::to_string(i);
  id += "]";
  b().emit(Opcode::nc_stream_shuffle).tensor("dst", b().view(x)).tensor("src", b().view(x)).word("shuffle_mask", id);
  EXPECT_EQ(k.cost().engine, Engine::vector);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max(vector_min_ii(), 1000.0));
  auto few = b().view(x, {Slice::all(), Slice::range(0, 8)});
  b().emit(Opcode::nc_stream_shuffle).tensor("dst", few).tensor("src", few).word("shuffle_mask", id);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, vector_min_ii());
}

// sequence_bounds: no published cost; assumed GPSIMD_START + n (n = segment ids, not the 2n outputs).
TEST_P(CostModelTest, GpSimdSequenceBoundsIsStartPlusN) {
  uint32_t seg = b().sbuf("seg", DType::int32, {1, 512});
  uint32_t dst = b().sbuf("bounds", DType::int32, {1, 1024});
  b().emit(Opcode::sequence_bounds).tensor("dst", b().view(dst)).tensor("segment_ids", b().view(seg));
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 512.0);
}

// ISA-COST local_gather: GPSIMD_START + (num_valid_indices * e) / C, C = ((28 + 4e) / (4e)) / min(4 / dtype_size, e).
TEST_P(CostModelTest, GpSimdLocalGatherIsThePublishedFormula) {
  uint32_t src = b().sbuf("src", DType::bf16, {128, 1024});
  uint32_t idx = b().sbuf("gidx", DType::uint16, {128, 8});
  uint32_t dst = b().sbuf("gdst", DType::bf16, {128, 128 * 8});
  // e = 8, bf16 (2 bytes), 100 valid indices: C = (60 / 32) / min(2, 8) = 0.9375.
  b().emit(Opcode::local_gather)
      .tensor("dst", b().view(dst, {Slice::all(), Slice::range(0, 800)}))
      .tensor("src_buffer", b().view(src))
      .tensor("index", b().view(idx))
      .imm("num_elem_per_idx", 8)
      .imm("num_valid_indices", 100);
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 100.0 * 8.0 / ((60.0 / 32.0) / 2.0));
  // Defaults: e = 1, every index of the 16-partition block (16 x 8 = 128): C = (32 / 4) / min(2, 1) = 8.
  b().emit(Opcode::local_gather)
      .tensor("dst", b().view(dst, {Slice::all(), Slice::range(0, 128)}))
      .tensor("src_buffer", b().view(src))
      .tensor("index", b().view(idx));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, gpsimd_start() + 128.0 / 8.0);
}

// ISA topk (the cost HEAD docs keep): 4 * n + K GpSimd cycles, nothing added.
TEST_P(CostModelTest, GpSimdTopkIsFourNPlusK) {
  uint32_t src = b().sbuf("src", DType::bf16, {128, 64});
  uint32_t vals = b().sbuf("vals", DType::bf16, {128, 16});
  uint32_t idx = b().sbuf("idx", DType::uint32, {128, 16});
  b().emit(Opcode::topk)
      .tensor("val_dst", b().view(vals))
      .tensor("idx_dst", b().view(idx))
      .tensor("src", b().view(src))
      .imm("n", 1000);
  EXPECT_EQ(k.cost().engine, Engine::gpsimd);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 4 * 1000.0 + 16);
  b().emit(Opcode::topk)
      .tensor("val_dst", b().view(vals, {Slice::all(), Slice::range(0, 8)}))
      .tensor("idx_dst", b().view(idx, {Slice::all(), Slice::range(0, 8)}))
      .tensor("src", b().view(src, {Slice::all(), Slice::range(0, 3)}))
      .imm("n", 42);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 4 * 42.0 + 8);
}


// ---- config keys that drive the compute costs (issue 13: every key is live) ----
// Each expectation is the formula of sim/cost_model.cpp written out with the config values; the what-if values
// are `--set` overrides, so the keys are read as a user's what-if would set them.

HardwareConfig with(const std::string& name, const std::vector<std::string>& overrides) {
  return load_config(name, overrides).hardware;
}

ComputeCost last_cost(const isa::ProgramBuilder& b, const HardwareConfig& hw) {
  const isa::Program& p = b.program();
  return compute_cost(p.instructions.back(), p, hw);
}

// §6 Background / Fast LoadStationary: II = max(min(MIN_II, N_stat), N_stat / load_stationary_speedup, N_mov).
TEST_P(CostModelTest, LoadStationaryBoundsTheMatmulIntervalBelowItsSpeedup) {
  const double min_ii = tensor_min_ii();
  uint32_t w = b().sbuf("w", DType::bf16, {128, 128});
  uint32_t x = b().sbuf("x", DType::bf16, {128, 512});
  uint32_t acc = b().psum("acc", DType::fp32, {128, 64});
  // A [128, 128] stationary against a 64-column moving: MM-bound at MIN_II = 64 with the published 4x LS.
  b().emit(Opcode::nc_matmul)
      .tensor("dst", b().view(acc))
      .tensor("stationary", b().view(w))
      .tensor("moving", b().view(x, {Slice::all(), Slice::range(0, 64)}));
  const double shipped = hw().core.tensor.load_stationary_speedup;
  EXPECT_DOUBLE_EQ(shipped, 4.0);  // PERF Opt #7, A-V2
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max({std::min(min_ii, 128.0), 128.0 / shipped, 64.0}));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, 64.0);  // §6 example: LS 32 cycles hides behind the 64-cycle MM
  for (double speedup : {1.0, 1.5, 2.0}) {
    HardwareConfig slow = with(GetParam(), {"core.tensor.load_stationary_speedup=" + std::to_string(speedup)});
    // LS-bound below 2x: 128 / speed-up cycles (1x: 128, 1.5x: 85.3); at 2x the LS (64) ties the MM.
    EXPECT_DOUBLE_EQ(last_cost(b(), slow).occupancy_cycles, std::max({std::min(min_ii, 128.0), 128.0 / speedup, 64.0}))
        << speedup;
  }
  HardwareConfig one = with(GetParam(), {"core.tensor.load_stationary_speedup=1"});
  EXPECT_DOUBLE_EQ(last_cost(b(), one).occupancy_cycles, 128.0);
  // A moving longer than the stationary is MM-bound at any speed-up.
  b().emit(Opcode::nc_matmul).tensor("dst", b().view(b().psum("acc2", DType::fp32, {128, 512})))
      .tensor("stationary", b().view(w)).tensor("moving", b().view(x));
  EXPECT_DOUBLE_EQ(last_cost(b(), one).occupancy_cycles, 512.0);
  // fp32 takes 4 passes of each, the LS included: (128 / 1) / 0.25.
  uint32_t wf = b().sbuf("wf", DType::fp32, {128, 128});
  uint32_t xf = b().sbuf("xf", DType::fp32, {128, 64});
  b().emit(Opcode::nc_matmul).tensor("dst", b().view(acc)).tensor("stationary", b().view(wf))
      .tensor("moving", b().view(xf));
  EXPECT_DOUBLE_EQ(last_cost(b(), one).occupancy_cycles, std::max({64.0, 128.0 / 1.0, 64.0}) / 0.25);
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max({64.0, 128.0 / shipped, 64.0}) / 0.25);
  // A PE transpose loads its data as the stationary (free size F = 128, moving = P = 32 columns of identity):
  // max(P, min(MIN_II, F), F / speed-up).
  uint32_t t = b().sbuf("t", DType::bf16, {32, 128});
  uint32_t tp = b().psum("tp", DType::bf16, {128, 32});
  b().emit(Opcode::nc_transpose).tensor("dst", b().view(tp)).tensor("data", b().view(t));
  EXPECT_DOUBLE_EQ(k.cost().occupancy_cycles, std::max({32.0, std::min(min_ii, 128.0), 128.0 / shipped}));
  EXPECT_DOUBLE_EQ(last_cost(b(), one).occupancy_cycles, std::max({32.0, std::min(min_ii, 128.0), 128.0 / 1.0}));
}

// A double_row pass takes kDoubleRowContraction / double_row_rate_factor bf16 K = 128 passes (A-V3: factor 2, so the
// bf16 time); the peak of the derived figures uses the same factor, so MFU and time agree.
TEST(CostModelTensor, DoubleRowPassTimeFollowsItsRateFactor) {
  for (const char* name : {"trn2", "trn3"}) {
    isa::ProgramBuilder b("k", config(name).generation);
    uint32_t w = b.sbuf("w", DType::fp8_e4m3, {128, 2, 128});
    uint32_t x = b.sbuf("x", DType::fp8_e4m3, {128, 2, 512});
    uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
    b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x))
        .word("perf_mode", "double_row");
    const double bf16_pass = std::max(std::min(64.0, 128.0), 512.0);  // N_mov = 512 after the [128, 2, F] split
    EXPECT_DOUBLE_EQ(config(name).core.tensor.double_row_rate_factor, 2.0) << name;
    EXPECT_DOUBLE_EQ(last_cost(b, config(name)).occupancy_cycles, bf16_pass * 2 / 2.0) << name;
    for (double factor : {1.0, 4.0}) {
      HardwareConfig hw = with(name, {"core.tensor.double_row_rate_factor=" + std::to_string(factor)});
      EXPECT_DOUBLE_EQ(last_cost(b, hw).occupancy_cycles, bf16_pass * 2 / factor) << name << " " << factor;
      EXPECT_EQ(last_cost(b, hw).flops, uint64_t{2} * 256 * 128 * 512) << name;  // K = 256 either way
    }
  }
}

// An MX pass (K = 4 x 128) takes values_per_element / rate_factor bf16 passes: 4 / 4.0 = the bf16 time (A-V4).
TEST(CostModelTensor, MxPassTimeFollowsItsRateFactor) {
  isa::ProgramBuilder b("k", Generation::trn3);
  uint32_t w = b.sbuf("w", DType::mxfp8_e4m3, {128, 128});
  uint32_t x = b.sbuf("x", DType::mxfp8_e4m3, {128, 512});
  uint32_t ws = b.sbuf("ws", DType::uint8, {128, 128});
  uint32_t xs = b.sbuf("xs", DType::uint8, {128, 512});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  b.emit(Opcode::nc_matmul_mx).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x))
      .tensor("stationary_scale", b.view(ws)).tensor("moving_scale", b.view(xs));
  EXPECT_DOUBLE_EQ(config("trn3").core.tensor.rate_factor_by_dtype.at(DType::mxfp8_e4m3), 4.0);
  EXPECT_DOUBLE_EQ(last_cost(b, config("trn3")).occupancy_cycles, 512.0 * 4 / 4.0);
  HardwareConfig half = with("trn3", {"core.tensor.rate_factor_by_dtype.mxfp8_e4m3=2"});
  EXPECT_DOUBLE_EQ(last_cost(b, half).occupancy_cycles, 512.0 * 4 / 2.0);
}

// Vector widths: elements_per_cycle / lanes caps the performance mode and, below 1 per lane, stretches N.
TEST(CostModelVector, PerDtypeWidthsCapTheModeAndSlowNarrowDtypes) {
  const HardwareConfig& trn2 = config("trn2");
  const double min_ii = trn2.core.vector.min_initiation_interval_cycles, lanes = trn2.core.vector.lanes;
  isa::ProgramBuilder b("k", Generation::trn2);
  uint32_t src = b.sbuf("src", DType::bf16, {128, 512});
  uint32_t dst = b.sbuf("dst", DType::bf16, {128, 512});
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(dst)).tensor("src", b.view(src));
  // Shipped: bf16 512 wide over 128 lanes = 4 per lane, so A-V3's 4x mode of a contiguous SBUF copy.
  EXPECT_EQ(trn2.core.vector.elements_per_cycle_by_dtype.at(DType::bf16) / trn2.core.vector.lanes, 4u);
  EXPECT_EQ(last_cost(b, trn2).performance_mode, 4u);
  EXPECT_DOUBLE_EQ(last_cost(b, trn2).occupancy_cycles, std::max(min_ii, 512.0 / 4));
  // 256 wide: 2 per lane, the 2x mode at most; 128: 1x; 64: half an element per lane per cycle, 2 cycles each.
  for (uint32_t width : {256u, 128u, 64u}) {
    HardwareConfig hw = with("trn2", {"core.vector.elements_per_cycle_by_dtype.bf16=" + std::to_string(width)});
    const double per_lane = width / lanes;
    const uint32_t mode = per_lane >= 2 ? 2 : 1;
    ComputeCost c = last_cost(b, hw);
    EXPECT_EQ(c.performance_mode, mode) << width;
    EXPECT_DOUBLE_EQ(c.occupancy_cycles, std::max(min_ii, 512.0 / std::min(1.0, per_lane) / mode)) << width;
  }
  // The slower of the dtypes streamed paces the instruction: fp32 dst 256 wide (2 per lane, above 1: no slowdown)
  // and no mode (A-V3 modes are 16-bit only); fp32 at 64 wide doubles a two-input op's 2N.
  uint32_t af = b.sbuf("af", DType::fp32, {128, 512});
  uint32_t of = b.sbuf("of", DType::fp32, {128, 512});
  b.emit(Opcode::tensor_tensor).tensor("dst", b.view(of)).tensor("data1", b.view(af)).tensor("data2", b.view(af))
      .word("op", "add");
  EXPECT_DOUBLE_EQ(last_cost(b, trn2).occupancy_cycles, std::max(min_ii, 2 * 512.0));
  HardwareConfig narrow = with("trn2", {"core.vector.elements_per_cycle_by_dtype.fp32=64"});
  EXPECT_DOUBLE_EQ(last_cost(b, narrow).occupancy_cycles, std::max(min_ii, 2 * 512.0 * (128.0 / 64)));
  // A per-partition scalar operand ([128, 1]) is not streamed: an fp32 operand0 of a bf16 tensor_scalar keeps 4x
  // even with fp32 narrowed.
  uint32_t s = b.sbuf("s", DType::fp32, {128, 1});
  b.emit(Opcode::tensor_scalar).tensor("dst", b.view(dst)).tensor("data", b.view(src)).word("op0", "multiply")
      .tensor("operand0", b.view(s));
  EXPECT_EQ(last_cost(b, narrow).performance_mode, 4u);
  EXPECT_DOUBLE_EQ(last_cost(b, narrow).occupancy_cycles, std::max(min_ii, 512.0 / 4));
}

// Every shipped width is at least one element per lane and allows the modes the published rules give (so no
// figure moves at the shipped values): Vector bf16/fp16 4 per lane on NC-v3/v4, Scalar bf16/fp16 2 on NC-v4.
TEST(CostModelConfig, ShippedWidthsAllowThePublishedModes) {
  for (const char* name : {"trn1", "trn2", "trn3"}) {
    const CoreConfig& core = config(name).core;
    for (const ComputeEngineConfig* engine : {static_cast<const ComputeEngineConfig*>(&core.vector),
                                              static_cast<const ComputeEngineConfig*>(&core.scalar),
                                              static_cast<const ComputeEngineConfig*>(&core.gpsimd)}) {
      for (const auto& [dtype, width] : engine->elements_per_cycle_by_dtype) {
        EXPECT_GE(width, engine->lanes) << name << " " << dtype_name(dtype);
      }
      for (DType d : {DType::bf16, DType::fp16}) {
        EXPECT_GE(engine->elements_per_cycle_by_dtype.at(d), engine->lanes * engine->performance_modes.back())
            << name << " " << dtype_name(d);
      }
    }
  }
}

TEST(CostModelScalar, PerDtypeWidthsCapTheV4CopyMode) {
  const HardwareConfig& trn3 = config("trn3");
  const double min_ii = trn3.core.scalar.min_initiation_interval_cycles;
  isa::ProgramBuilder b("k", Generation::trn3);
  uint32_t h = b.sbuf("h", DType::bf16, {128, 512});
  uint32_t h2 = b.sbuf("h2", DType::bf16, {128, 512});
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(h2)).tensor("src", b.view(h)).on(Engine::scalar);
  EXPECT_EQ(trn3.core.scalar.elements_per_cycle_by_dtype.at(DType::bf16), 256u);  // A-V4: 256 bf16 in/out
  EXPECT_EQ(last_cost(b, trn3).performance_mode, 2u);
  HardwareConfig narrow = with("trn3", {"core.scalar.elements_per_cycle_by_dtype.bf16=128"});
  EXPECT_EQ(last_cost(b, narrow).performance_mode, 1u);
  EXPECT_DOUBLE_EQ(last_cost(b, narrow).occupancy_cycles, std::max(min_ii, 512.0));
  HardwareConfig half = with("trn3", {"core.scalar.elements_per_cycle_by_dtype.bf16=64"});
  EXPECT_DOUBLE_EQ(last_cost(b, half).occupancy_cycles, std::max(min_ii, 512.0 * 128 / 64));
}

TEST(CostModelGpSimd, ANarrowDtypeStretchesThePerElementPart) {
  const HardwareConfig& trn2 = config("trn2");
  const double start = trn2.core.gpsimd.fixed_overhead_cycles;
  isa::ProgramBuilder b("k", Generation::trn2);
  uint32_t x = b.sbuf("x", DType::fp32, {128, 512});
  uint32_t y = b.sbuf("y", DType::fp32, {128, 512});
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(y)).tensor("src", b.view(x)).on(Engine::gpsimd);
  EXPECT_DOUBLE_EQ(last_cost(b, trn2).occupancy_cycles, start + 512);
  HardwareConfig narrow = with("trn2", {"core.gpsimd.elements_per_cycle_by_dtype.fp32=32"});
  EXPECT_DOUBLE_EQ(last_cost(b, narrow).occupancy_cycles, start + 512 * (128.0 / 32));
}

}  // namespace
}  // namespace trnsim::sim
