// The timing model against hand-computed expectations (issue 4): single instructions, the
// published DMA measurement, DMA roofline, overlap of double-buffered compute and transfer,
// overlap of tiny tiles that share a 256-byte run (exact dependencies), HBM contention between
// cores, config sensitivity, determinism.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

using isa::Opcode;
using isa::ProgramBuilder;
using isa::Slice;

HardwareConfig config(const char* name, std::vector<std::string> overrides = {}) {
  return load_config(name, overrides).hardware;
}

SimResult run(const isa::Program& program, const HardwareConfig& hw, std::vector<uint32_t> cores = {0},
              bool timing_only = true, bool trace = false) {
  isa::check_program(program, hw);
  SimOptions options;
  options.cores = std::move(cores);
  options.timing_only = timing_only;
  options.trace = trace;
  return simulate(program, hw, "test", options);
}

// --- single instructions: time = occupancy + pipeline latency, from the published formulas ---

TEST(SingleInstruction, MatmulIsItsFormulaOnEveryGeneration) {
  for (const char* name : {"trn1", "trn2", "trn3"}) {
    HardwareConfig hw = config(name);
    ProgramBuilder b("mm", hw.generation);
    uint32_t w = b.sbuf("w", DType::bf16, {128, 128});
    uint32_t x = b.sbuf("x", DType::bf16, {128, 512});
    uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
    b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x));
    SimResult r = run(b.program(), hw);
    // ISA-COST: max(min(64, N_stationary), N_moving) cycles, + the pipeline latency.
    double cycles = std::max(std::min(64.0, 128.0), 512.0) + hw.core.tensor.fixed_overhead_cycles;
    EXPECT_NEAR(r.stats.total_ns, cycles / hw.core.tensor.clock_ghz, 1e-6) << name;
    EXPECT_EQ(r.stats.flops, 2ull * 128 * 128 * 512) << name;
    EXPECT_NEAR(r.stats.engines.at("core0.tensor").busy_ns, 512 / hw.core.tensor.clock_ghz, 1e-6) << name;
  }
}

TEST(SingleInstruction, Fp32MatmulTakesFourTimesLonger) {
  HardwareConfig hw = config("trn2");
  ProgramBuilder b("mm", hw.generation);
  uint32_t w = b.sbuf("w", DType::fp32, {128, 128});
  uint32_t x = b.sbuf("x", DType::fp32, {128, 512});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x));
  SimResult r = run(b.program(), hw);
  EXPECT_NEAR(r.stats.engines.at("core0.tensor").busy_ns, 4 * 512 / 2.4, 1e-6);
}

TEST(SingleInstruction, VectorTensorScalarUsesPerformanceModes) {
  HardwareConfig trn1 = config("trn1"), trn2 = config("trn2");
  for (const HardwareConfig* hw : {&trn1, &trn2}) {
    ProgramBuilder b("ts", hw->generation);
    uint32_t src = b.sbuf("src", DType::bf16, {128, 2048});
    uint32_t dst = b.sbuf("dst", DType::bf16, {128, 2048});
    b.emit(Opcode::tensor_scalar).tensor("dst", b.view(dst)).tensor("data", b.view(src)).word("op0", "add").imm(
        "operand0", 1.0);
    SimResult r = run(b.program(), *hw);
    // max(MIN_II, N) / mode: bf16 SBUF->SBUF contiguous is the 4x mode on NC-v3, none on NC-v2.
    double mode = hw->generation == Generation::trn1 ? 1 : 4;
    double busy = std::max(64.0, 2048 / mode) / hw->core.vector.clock_ghz;
    EXPECT_NEAR(r.stats.engines.at("core0.vector").busy_ns, busy, 1e-6);
    EXPECT_NEAR(r.stats.total_ns, busy + hw->core.vector.fixed_overhead_cycles / hw->core.vector.clock_ghz, 1e-6);
  }
}

TEST(SingleInstruction, DependentScalarChainMatchesTheMeasuredInterval) {
  // PERF (V9): dependent 1-element activations issue every ~264 ScalarE cycles on NC-v2.
  HardwareConfig hw = config("trn1");
  ProgramBuilder b("chain", hw.generation);
  uint32_t t = b.sbuf("t", DType::fp32, {128, 1});
  const int count = 100;
  for (int i = 0; i < count; ++i) {
    b.emit(Opcode::activation).tensor("dst", b.view(t)).tensor("data", b.view(t)).word("op", "exp");
  }
  SimResult r = run(b.program(), hw);
  double interval_cycles = r.stats.total_ns / count * hw.core.scalar.clock_ghz;
  EXPECT_NEAR(interval_cycles, 264, 264 * 0.02);
}

TEST(SingleInstruction, AccumulatingVectorAndTopkFollowTheirFormulas) {
  for (const char* name : {"trn2", "trn3"}) {
    HardwareConfig hw = config(name);
    const double vclk = hw.core.vector.clock_ghz, min_ii = hw.core.vector.min_initiation_interval_cycles;
    ProgramBuilder b("acc", hw.generation);
    uint32_t x = b.sbuf("x", DType::fp32, {128, 1024});
    uint32_t y = b.sbuf("y", DType::fp32, {128, 1024});
    uint32_t r = b.sbuf("r", DType::fp32, {128, 1});
    b.emit(Opcode::tensor_scalar_reduce).tensor("dst", b.view(y)).tensor("data", b.view(x)).word("op0", "add")
        .imm("operand0", 1.0).word("reduce_op", "add").tensor("reduce_res", b.view(r));
    SimResult one = run(b.program(), hw);
    // ISA-COST max(MIN_II, N) + MIN_II busy, then the Vector engine's fixed latency.
    double busy = (std::max(min_ii, 1024.0) + min_ii) / vclk;
    EXPECT_NEAR(one.stats.engines.at("core0.vector").busy_ns, busy, 1e-6) << name;
    EXPECT_NEAR(one.stats.total_ns, busy + hw.core.vector.fixed_overhead_cycles / vclk, 1e-6) << name;

    // topk on GpSimd: 4n + K cycles (ISA), results visible when it ends.
    ProgramBuilder t("topk", hw.generation);
    uint32_t src = t.sbuf("src", DType::bf16, {128, 64});
    uint32_t vals = t.sbuf("vals", DType::bf16, {128, 8});
    uint32_t idx = t.sbuf("idx", DType::uint32, {128, 8});
    t.emit(Opcode::topk).tensor("val_dst", t.view(vals)).tensor("idx_dst", t.view(idx)).tensor("src", t.view(src))
        .imm("n", 1000);
    SimResult topk = run(t.program(), hw);
    EXPECT_NEAR(topk.stats.total_ns, (4 * 1000.0 + 8) / hw.core.gpsimd.clock_ghz, 1e-6) << name;
  }
}

// local_gather (GpSimd, ISA-COST formula, results visible at the end), activate2 (Scalar: max(MIN_II, N) busy, then
// the Scalar latency) and quantize_mx (Vector: A-V4 4 elements per cycle, then the Vector latency) on trn3.
TEST(SingleInstruction, LocalGatherActivate2AndQuantizeMxFollowTheirFormulas) {
  HardwareConfig hw = config("trn3");
  const CoreConfig& core = hw.core;
  ProgramBuilder g("gather", hw.generation);
  uint32_t src = g.sbuf("src", DType::fp32, {128, 512});
  uint32_t idx = g.sbuf("idx", DType::uint16, {128, 4});
  uint32_t dst = g.sbuf("dst", DType::fp32, {128, 128});
  g.emit(Opcode::local_gather).tensor("dst", g.view(dst)).tensor("src_buffer", g.view(src)).tensor("index", g.view(idx))
      .imm("num_elem_per_idx", 2);
  // 64 indices x 2 elements, fp32: C = ((28 + 8) / 8) / min(1, 2) = 4.5.
  EXPECT_NEAR(run(g.program(), hw).stats.total_ns, (core.gpsimd.fixed_overhead_cycles + 128.0 / 4.5) / core.gpsimd.clock_ghz,
              1e-6);

  ProgramBuilder a("act2", hw.generation);
  uint32_t x = a.sbuf("x", DType::bf16, {128, 1024});
  uint32_t y = a.sbuf("y", DType::bf16, {128, 1024});
  a.emit(Opcode::activate2).tensor("dst", a.view(y)).word("op", "exp").tensor("data", a.view(x)).imm("imm0", 2.0)
      .imm("imm1", -1.0).word("op0", "multiply").word("op1", "add");
  SimResult act = run(a.program(), hw);
  const double sbusy = std::max(double(core.scalar.min_initiation_interval_cycles), 1024.0) / core.scalar.clock_ghz;
  EXPECT_NEAR(act.stats.engines.at("core0.scalar").busy_ns, sbusy, 1e-6);
  EXPECT_NEAR(act.stats.total_ns, sbusy + core.scalar.fixed_overhead_cycles / core.scalar.clock_ghz, 1e-6);

  ProgramBuilder q("quant", hw.generation);
  uint32_t qs = q.sbuf("qsrc", DType::bf16, {128, 2048});
  uint32_t qd = q.sbuf("qdst", DType::mxfp8_e4m3, {128, 512});
  uint32_t sc = q.sbuf("qscale", DType::fp8_e8m0, {128, 512});
  q.emit(Opcode::quantize_mx).tensor("dst", q.view(qd)).tensor("src", q.view(qs)).tensor("dst_scale", q.view(sc));
  SimResult quant = run(q.program(), hw);
  const double vbusy = std::max(double(core.vector.min_initiation_interval_cycles), 2048.0 / 4) / core.vector.clock_ghz;
  EXPECT_NEAR(quant.stats.engines.at("core0.vector").busy_ns, vbusy, 1e-6);
  EXPECT_NEAR(quant.stats.total_ns, vbusy + core.vector.fixed_overhead_cycles / core.vector.clock_ghz, 1e-6);
}

// The Scalar accumulator registers live in the core's state: activation's reduction, then activate2 folding on top,
// give through the timing model with values the interpreter's reduce_res.
TEST(Determinism, ScalarAccumulatorThroughTheTimingModelMatchesTheInterpreter) {
  HardwareConfig hw = config("trn3");
  ProgramBuilder b("acc", hw.generation);
  uint32_t x = b.sbuf("x", DType::fp32, {128, 256});
  uint32_t y = b.sbuf("y", DType::fp32, {128, 256});
  uint32_t r = b.sbuf("r", DType::fp32, {128, 1});
  uint32_t r2 = b.sbuf("r2", DType::fp32, {128, 1});
  b.emit(Opcode::iota).tensor("dst", b.view(x)).word("pattern", "[[1, 256]]").imm("channel_multiplier", 3);
  b.emit(Opcode::activation).tensor("dst", b.view(y)).word("op", "copy").tensor("data", b.view(x))
      .word("reduce_op", "maximum").tensor("reduce_res", b.view(r));
  b.emit(Opcode::activate2).tensor("dst", b.view(y)).word("op", "relu").tensor("data", b.view(x)).imm("imm0", -1.0)
      .imm("imm1", 0.0).word("op0", "multiply").word("op1", "bypass").word("reduce_op", "maximum")
      .tensor("reduce_res", b.view(r2)).word("reduce_cmd", "reduce");
  isa::Program program = b.finish();
  SimResult sim = run(program, hw, {0}, /*timing_only=*/false);
  isa::CoreState reference(hw.core, program);
  isa::interpret(program, reference, hw);
  ProgramBuilder views("views", hw.generation);
  isa::AccessPattern ap = views.view(views.sbuf("v", DType::fp32, {128, 1}));
  ap.allocation = r2;
  std::vector<float> got = sim.states.at(0)->read(ap).values, want = reference.read(ap).values;
  EXPECT_EQ(got, want);
  for (uint32_t p = 0; p < 128; ++p) EXPECT_EQ(got[p], float(3 * p + 255)) << p;  // max(row) kept: relu(-x) <= 0
}

// The PRNG state lives in the core's state: the timing model with values gives the interpreter's bits, and the
// same bits on every run.
TEST(Determinism, RandomNumbersAreTheSameEveryRunAndMatchTheInterpreter) {
  HardwareConfig hw = config("trn3");
  ProgramBuilder b("rand", hw.generation);
  uint32_t u = b.sbuf("u", DType::fp32, {128, 512});
  uint32_t d = b.sbuf("d", DType::fp32, {128, 512});
  uint32_t bits = b.sbuf("bits", DType::uint32, {128, 64});
  b.emit(Opcode::rand2).tensor("dst", b.view(u)).imm("min", -1.0).imm("max", 1.0);
  b.emit(Opcode::dropout).tensor("dst", b.view(d)).tensor("data", b.view(u)).imm("prob", 0.5);
  b.emit(Opcode::rng).tensor("dst", b.view(bits)).on(Engine::gpsimd);
  isa::Program program = b.finish();
  SimResult first = run(program, hw, {0}, /*timing_only=*/false);
  SimResult second = run(program, hw, {0}, /*timing_only=*/false);
  isa::CoreState reference(hw.core, program);
  isa::interpret(program, reference, hw);
  ProgramBuilder views("views", hw.generation);  // the same allocation ids, for their access patterns
  for (uint32_t id : {u, d, bits}) {
    isa::AccessPattern ap = views.view(views.sbuf("x" + std::to_string(id), DType::fp32,
                                                  {128, id == bits ? 64u : 512u}));
    ap.allocation = id;
    ap.dtype = DType::fp32;  // raw 32-bit patterns
    std::vector<float> a = first.states.at(0)->read(ap).values, c = second.states.at(0)->read(ap).values;
    std::vector<float> want = reference.read(ap).values;
    ASSERT_EQ(a.size(), want.size());
    EXPECT_EQ(0, std::memcmp(a.data(), want.data(), a.size() * sizeof(float))) << "allocation " << id;
    EXPECT_EQ(0, std::memcmp(c.data(), want.data(), c.size() * sizeof(float))) << "allocation " << id;
  }
}

// --- DMA ---

isa::Program dma_program(Generation generation, uint32_t partitions, uint32_t free, DType dtype, uint32_t repeats = 1) {
  ProgramBuilder b("dma", generation);
  uint32_t src = b.hbm("src", dtype, {partitions, free}, isa::AllocationRole::input);
  uint32_t dst = b.sbuf("dst", dtype, {partitions, free});
  for (uint32_t i = 0; i < repeats; ++i) b.emit(Opcode::dma_copy).tensor("dst", b.view(dst)).tensor("src", b.view(src));
  return b.finish();
}

TEST(Dma, PublishedMeasurementOnTrn2) {
  // DMA Example 1 (V8): A[4, 4096] bf16 = 32 KiB through one DMA engine in 1,416 ns (the engine's
  // span in the profile). The trigger reaches the engine after the start latency.
  HardwareConfig hw = config("trn2");
  SimResult r = run(dma_program(hw.generation, 4, 4096, DType::bf16), hw);
  EXPECT_NEAR(r.stats.engines.at("core0.dma").busy_ns, 1416, 1416 * 0.02);
  EXPECT_NEAR(r.stats.total_ns, hw.core.dma.start_latency_ns + 1416, 1416 * 0.02);
  EXPECT_EQ(r.stats.dma_bytes, 32768u);
}

TEST(Dma, DmaOnlyKernelIsLatencyPlusBytesOverBandwidth) {
  HardwareConfig hw = config("trn2");
  const uint32_t partitions = 128, free = 16384;  // 128 x 32 KiB of bf16 = 4 MiB
  SimResult r = run(dma_program(hw.generation, partitions, free, DType::bf16), hw);
  const DmaConfig& dma = hw.core.dma;
  double bytes = double(partitions) * free * 2;
  double rate = dma.engines_per_core * dma.bandwidth_per_engine_gbps;  // 435 GB/s < the 725 GB/s of a stack
  double descriptors_per_engine = partitions / dma.engines_per_core;   // one contiguous row per partition
  double engine = dma.fixed_latency_ns + std::max(descriptors_per_engine * dma.descriptor_processing_ns, bytes / rate);
  double expected = dma.start_latency_ns + std::max(engine, dma.fixed_latency_ns + bytes / rate + hw.hbm.latency_ns);
  EXPECT_NEAR(r.stats.total_ns, expected, expected * 0.02);
}

TEST(Dma, FewerEnginesTakeLonger) {
  HardwareConfig sixteen = config("trn2"), eight = config("trn2", {"core.dma.engines_per_core=8"});
  const double latency = sixteen.core.dma.start_latency_ns;
  double t16 = run(dma_program(sixteen.generation, 128, 16384, DType::bf16), sixteen).stats.total_ns - latency;
  double t8 = run(dma_program(eight.generation, 128, 16384, DType::bf16), eight).stats.total_ns - latency;
  EXPECT_NEAR(t8 / t16, 2.0, 0.1);
}

// `count` loads of [128, row_bytes / 2] bf16 rows from a contiguous HBM tensor on `queues` queues
// (round robin), each into its own SBUF buffer.
isa::Program small_row_loads(Generation generation, uint32_t row_bytes, uint32_t count, uint32_t queues) {
  ProgramBuilder b("rows", generation);
  const uint32_t elements = row_bytes / 2;
  uint32_t src = b.hbm("src", DType::bf16, {count * 128, elements}, isa::AllocationRole::input);
  uint32_t dst = b.sbuf("dst", DType::bf16, {128, count, elements});
  for (uint32_t i = 0; i < count; ++i) {
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(dst, {Slice::all(), Slice::index(i)}))
        .tensor("src", b.view(src, {Slice::range(128 * i, 128 * (i + 1))}))
        .imm("queue", i % queues);
  }
  return b.finish();
}

TEST(Dma, DescriptorProcessingBoundsThroughputOnEveryQueue) {
  // trainium.md §7: < 256 B per partition is overhead-bound. 64 loads of [128, 256 B]: each engine
  // handles 8 elements per load, at descriptor_processing_ns each; spreading the loads over four
  // queues does not help, the engines are the bottleneck.
  HardwareConfig hw = config("trn2");
  const DmaConfig& dma = hw.core.dma;
  const uint32_t count = 64;
  const double per_engine = 128.0 / dma.engines_per_core;
  const double engine = dma.fixed_latency_ns + std::max(per_engine * dma.descriptor_processing_ns,
                                                        per_engine * 256 / dma.bandwidth_per_engine_gbps);
  // The last element's data lands long before the engines are done with its descriptors.
  const double expected = dma.start_latency_ns + count * engine;
  for (uint32_t queues : {1u, 4u}) {
    SimResult r = run(small_row_loads(hw.generation, 256, count, queues), hw);
    EXPECT_NEAR(r.stats.total_ns, expected, expected * 0.02) << queues << " queues";
  }
  // Achieved bandwidth far below the engines' 16 x 27.2 GB/s.
  SimResult r = run(small_row_loads(hw.generation, 256, count, 4), hw);
  EXPECT_LT(double(r.stats.dma_bytes) / r.stats.total_ns, 0.25 * dma.engines_per_core * dma.bandwidth_per_engine_gbps);
}

TEST(Dma, StartLatencyIsHiddenBehindTheQueue) {
  // Back-to-back loads on one queue pay the start latency once: the next transfer's engines start
  // when they finish the previous one, not a start latency after it.
  HardwareConfig hw = config("trn2");
  const DmaConfig& dma = hw.core.dma;
  const uint32_t count = 16;
  SimResult r = run(small_row_loads(hw.generation, 8192, count, 1), hw);
  const double per_engine = 128.0 / dma.engines_per_core;
  const double engine = dma.fixed_latency_ns + std::max(per_engine * dma.descriptor_processing_ns,
                                                        per_engine * 8192 / dma.bandwidth_per_engine_gbps);
  const double expected = dma.start_latency_ns + count * engine + hw.hbm.latency_ns;
  EXPECT_NEAR(r.stats.total_ns, expected, expected * 0.02);
}

// A long load on queue 0 that must wait for a matmul, then a short independent load on queue 1.
isa::Program blocked_queue_program(Generation generation) {
  ProgramBuilder b("arb", generation);
  uint32_t w = b.sbuf("w", DType::bf16, {128, 128});
  uint32_t x = b.sbuf("x", DType::bf16, {128, 512});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  uint32_t out = b.sbuf("out", DType::fp32, {128, 512});
  uint32_t big = b.hbm("big", DType::fp32, {128, 512}, isa::AllocationRole::output);
  uint32_t small = b.hbm("small", DType::bf16, {128, 64}, isa::AllocationRole::input);
  uint32_t s = b.sbuf("s", DType::bf16, {128, 64});
  for (int i = 0; i < 40; ++i) {
    b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x))
        .word("accumulate", i ? "true" : "false");
  }
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(out)).tensor("src", b.view(acc));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(big)).tensor("src", b.view(out)).imm("queue", 0);
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", b.view(small)).imm("queue", 1);
  return b.finish();
}

TEST(Dma, QueueArbitrationDecidesWhetherQueuesOvertake) {
  // round_robin (v2/v3): the engines serve queue 1's ready load while queue 0's store still
  // waits for its data; fifo (a what-if): strict issue order, the load waits behind the store.
  HardwareConfig rr = config("trn2"), fifo = config("trn2", {"core.dma.queue_arbitration=fifo"}),
                 qos = config("trn3");
  ASSERT_EQ(rr.core.dma.queue_arbitration, QueueArbitration::round_robin);
  SimResult a = run(blocked_queue_program(rr.generation), rr, {0}, true);
  SimResult b = run(blocked_queue_program(fifo.generation), fifo, {0}, true);
  // Same total (the store ends last either way), but under fifo the small load finishes after the store.
  const DmaConfig& dma = rr.core.dma;
  const double small_engine = dma.fixed_latency_ns + std::max(8 * dma.descriptor_processing_ns,
                                                              8 * 128 / dma.bandwidth_per_engine_gbps);
  const double store_engine = dma.fixed_latency_ns + std::max(8 * dma.descriptor_processing_ns,
                                                              8 * 2048 / dma.bandwidth_per_engine_gbps);
  // round_robin ends with the store's last byte (its HBM write lands after its engines are done);
  // fifo with the small load's engines, which start when the store's are done.
  const double store_data = dma.fixed_latency_ns + 128.0 * 2048 / (dma.engines_per_core * dma.bandwidth_per_engine_gbps) +
                            rr.hbm.latency_ns;
  EXPECT_NEAR(b.stats.total_ns - a.stats.total_ns, store_engine + small_engine - std::max(store_engine, store_data), 1.0);
  EXPECT_GT(b.stats.total_ns, a.stats.total_ns);
  // qos on trn3 treats every transfer as one class: it overtakes as round_robin does.
  SimResult c = run(blocked_queue_program(qos.generation), qos, {0}, true);
  HardwareConfig qos_fifo = config("trn3", {"core.dma.queue_arbitration=fifo"});
  SimResult d = run(blocked_queue_program(qos_fifo.generation), qos_fifo, {0}, true);
  EXPECT_LT(c.stats.total_ns, d.stats.total_ns);
}

TEST(Dma, SoftwareDgeOccupiesTheGpSimd) {
  HardwareConfig hw = config("trn2");
  ProgramBuilder b("swdge", hw.generation);
  uint32_t src = b.hbm("src", DType::bf16, {128, 128}, isa::AllocationRole::input);
  uint32_t dst = b.sbuf("dst", DType::bf16, {128, 128});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(dst)).tensor("src", b.view(src)).word("dge_mode", "swdge");
  SimResult sw = run(b.finish(), hw);
  const double gpsimd = (hw.core.gpsimd.fixed_overhead_cycles + 128 * hw.core.dma.software_dge_cycles_per_descriptor) /
                        hw.core.gpsimd.clock_ghz;
  EXPECT_NEAR(sw.stats.engines.at("core0.gpsimd").busy_ns, gpsimd, 1e-6);
  SimResult plain = run(dma_program(hw.generation, 128, 128, DType::bf16), hw);
  EXPECT_NEAR(sw.stats.total_ns - plain.stats.total_ns, gpsimd, 1e-6);
}

TEST(Dma, ModularInterleaveGivesAFewChannelPatternOnlyThoseChannels) {
  // trn1 (modular interleave): rows of 1 KiB at a 16 KiB pitch reach 4 of 16 channels of 256 B,
  // so 64 such loads move at a quarter of the stack's bandwidth; rows of 4 KiB use every channel.
  HardwareConfig hw = config("trn1");
  ASSERT_EQ(hw.hbm.interleave, HbmInterleave::modular);
  auto pitched_loads = [&](uint32_t row_bytes) {
    ProgramBuilder b("pitch", hw.generation);
    uint32_t src = b.hbm("src", DType::bf16, {128 * 64, 8192}, isa::AllocationRole::input);
    uint32_t dst = b.sbuf("dst", DType::bf16, {128, 4, row_bytes / 2});
    for (uint32_t i = 0; i < 64; ++i) {
      b.emit(Opcode::dma_copy)
          .tensor("dst", b.view(dst, {Slice::all(), Slice::index(i % 4)}))
          .tensor("src", b.view(src, {Slice::range(128 * i, 128 * (i + 1)), Slice::range(0, row_bytes / 2)}));
    }
    return run(b.finish(), hw).stats.total_ns;
  };
  const double stack = hw.hbm.bandwidth_gbps / hw.hbm.stacks;
  const double channels_reached = 1024.0 / hw.hbm.interleave_bytes;
  const double bytes = 64.0 * 128 * 1024;
  const double expected = bytes / (stack * channels_reached / hw.hbm.channels_per_stack);
  EXPECT_NEAR(pitched_loads(1024), expected, 0.05 * expected);
  // Hashed interleave (the what-if): the same loads are bound by the engines, not the channels.
  const DmaConfig& dma = hw.core.dma;
  HardwareConfig hashed = config("trn1", {"hbm.interleave=hashed"});
  ProgramBuilder b("pitch", hashed.generation);
  uint32_t src = b.hbm("src", DType::bf16, {128 * 64, 8192}, isa::AllocationRole::input);
  uint32_t dst = b.sbuf("dst", DType::bf16, {128, 4, 512});
  for (uint32_t i = 0; i < 64; ++i) {
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(dst, {Slice::all(), Slice::index(i % 4)}))
        .tensor("src", b.view(src, {Slice::range(128 * i, 128 * (i + 1)), Slice::range(0, 512)}));
  }
  const double engine = dma.fixed_latency_ns + std::max(8 * dma.descriptor_processing_ns, 8 * 1024 / dma.bandwidth_per_engine_gbps);
  const double hashed_expected = dma.start_latency_ns + 64 * engine + hashed.hbm.latency_ns;
  EXPECT_NEAR(run(b.finish(), hashed).stats.total_ns, hashed_expected, 0.02 * hashed_expected);
  EXPECT_LT(hashed_expected, 0.8 * expected);
}

// --- overlap ---

// Streams `tiles` moving tiles from HBM, multiplying each by a resident stationary tile;
// double-buffered (two SBUF slots) or single-buffered.
isa::Program streamed_matmul(Generation generation, int tiles, int buffers) {
  ProgramBuilder b("stream", generation);
  uint32_t w = b.sbuf("w", DType::bf16, {128, 128});
  uint32_t src = b.hbm("x", DType::bf16, {128, uint32_t(512 * tiles)}, isa::AllocationRole::input);
  uint32_t x = b.sbuf("x_sb", DType::bf16, {128, uint32_t(buffers), 512});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  for (int i = 0; i < tiles; ++i) {
    int slot = i % buffers;
    b.emit(Opcode::dma_copy)
        .tensor("dst", b.view(x, {Slice::all(), Slice::index(slot)}))
        .tensor("src", b.view(src, {Slice::all(), Slice::range(512 * i, 512 * (i + 1))}))
        .imm("queue", slot);
    b.emit(Opcode::nc_matmul)
        .tensor("dst", b.view(acc))
        .tensor("stationary", b.view(w))
        .tensor("moving", b.view(x, {Slice::all(), Slice::index(slot)}))
        .word("accumulate", i == 0 ? "false" : "true");
  }
  return b.finish();
}

TEST(Overlap, DoubleBufferedMatmulAndDmaTakeTheMaxNotTheSum) {
  // Without the start latency (a what-if), two buffers hide the smaller of load and matmul.
  HardwareConfig hw = config("trn2", {"core.dma.start_latency_ns=0"});
  const int tiles = 64;
  SimResult single = run(streamed_matmul(hw.generation, tiles, 1), hw);
  SimResult twin = run(streamed_matmul(hw.generation, tiles, 2), hw);
  double compute = single.stats.engines.at("core0.tensor").busy_ns;
  double transfer = single.stats.engines.at("core0.dma").busy_ns;
  // Single buffering serialises each load with the matmul that reads its slot.
  EXPECT_GT(single.stats.total_ns, 0.95 * (compute + transfer));
  // Double buffering hides the smaller of the two behind the larger.
  EXPECT_LT(twin.stats.total_ns, 1.10 * std::max(compute, transfer) + 2000);
  EXPECT_LT(twin.stats.total_ns, compute + transfer - 0.9 * std::min(compute, transfer));
}

TEST(Overlap, TwoBuffersCannotHideTheDmaStartLatency) {
  // With the published ~1.3 us semaphore-to-start latency (DMA) a load into a slot can start only
  // when the matmul two tiles back has read it: every two tiles cost start latency + the load's
  // engine time + one matmul.
  HardwareConfig hw = config("trn2");
  const int tiles = 64;
  SimResult twin = run(streamed_matmul(hw.generation, tiles, 2), hw);
  const DmaConfig& dma = hw.core.dma;
  const double load = dma.fixed_latency_ns + std::max(8 * dma.descriptor_processing_ns, 8 * 1024 / dma.bandwidth_per_engine_gbps);
  const double matmul = twin.stats.engines.at("core0.tensor").busy_ns / tiles;
  const double expected = tiles / 2 * (dma.start_latency_ns + load + matmul);
  EXPECT_NEAR(twin.stats.total_ns, expected, 0.05 * expected);
}

// --- exact dependencies (issue 13) ---

// Two [128, 8] fp32 tiles, 32 bytes per partition each, side by side in one 256-byte run of SBUF
// (bytes 512..543 and 544..575): the Vector engine writes a from x, the Scalar engine writes `target`
// from y.
std::string two_tiny_tiles(const std::string& target) {
  return "kernel tiny\ntarget trn2\n"
         "sbuf x : fp32[128, 8] @ 0:0\nsbuf y : fp32[128, 8] @ 0:32\n"
         "sbuf a : fp32[128, 8] @ 0:512\nsbuf b : fp32[128, 8] @ 0:544\n"
         "tensor_scalar dst=a, data=x, op0=add, operand0=1\n"
         "activation dst=" + target + ", op=copy, data=y[0:128, 7:8]\n";
}

TEST(ExactDependencies, TinyTilesSharingA256ByteRunOverlapInTime) {
  HardwareConfig hw = config("trn2");
  // ISA-COST: tensor_scalar max(MIN_II, N) Vector cycles (fp32: no performance mode), activation
  // max(MIN_II, N) Scalar cycles, N <= 8 elements per partition; each then its engine's fixed latency.
  const double vector_ns = (std::max(double(hw.core.vector.min_initiation_interval_cycles), 8.0) +
                            hw.core.vector.fixed_overhead_cycles) / hw.core.vector.clock_ghz;
  const double scalar_ns = (std::max(double(hw.core.scalar.min_initiation_interval_cycles), 1.0) +
                            hw.core.scalar.fixed_overhead_cycles) / hw.core.scalar.clock_ghz;
  // b shares no byte with a: the engines run side by side (the granule tracker serialised them).
  SimResult apart = run(isa::parse_tasm(two_tiny_tiles("b[0:128, 0:1]"), "apart"), hw);
  EXPECT_NEAR(apart.stats.total_ns, std::max(vector_ns, scalar_ns), 1e-6);
  EXPECT_NEAR(apart.stats.engines.at("core0.scalar").busy_ns,
              std::max(double(hw.core.scalar.min_initiation_interval_cycles), 1.0) / hw.core.scalar.clock_ghz, 1e-6);
  // a's last element: a true write-after-write, the Scalar engine starts when the Vector engine's write is done.
  SimResult sharing = run(isa::parse_tasm(two_tiny_tiles("a[0:128, 7:8]"), "sharing"), hw);
  EXPECT_NEAR(sharing.stats.total_ns, vector_ns + scalar_ns, 1e-6);
}

// --- HBM contention between cores ---

TEST(Hbm, TwoCoresOnOneStackContendAndOnTwoStacksDoNot) {
  // trn2: cores 0 and 1 share stack 0, core 2 uses stack 1 (S-LNC). Each core alone pulls up
  // to 16 x 27.2 = 435 GB/s; one stack gives 725 GB/s, less than two cores want.
  HardwareConfig hw = config("trn2");
  isa::Program program = dma_program(hw.generation, 128, 16384, DType::bf16, 8);
  double one = run(program, hw, {0}).stats.total_ns;
  double shared = run(program, hw, {0, 1}).stats.total_ns;
  double separate = run(program, hw, {0, 2}).stats.total_ns;
  EXPECT_GT(shared, 1.15 * one);
  EXPECT_NEAR(separate, one, one * 0.01);
  // Shared: 2 x 32 MiB cannot beat the stack's 725 GB/s. The stack serves bookings first come (a
  // simplification): at worst one core streams at its engines' 435 GB/s, the other gets the rest
  // of the stack, then finishes alone at 435 GB/s.
  double per_core = 8.0 * 128 * 16384 * 2;
  double stack = hw.hbm.bandwidth_gbps / hw.hbm.stacks;
  double engines = hw.core.dma.engines_per_core * hw.core.dma.bandwidth_per_engine_gbps;
  double bound = 2 * per_core / stack;
  double first = per_core / engines;
  double unfair = first + (per_core - (stack - engines) * first) / engines;
  EXPECT_GE(shared, bound);
  EXPECT_LT(shared, 1.02 * unfair + hw.core.dma.start_latency_ns);
}

TEST(Sensitivity, ConfigChangesMoveTimeAsExpected) {
  HardwareConfig base = config("trn2");
  // Tensor clock x2: a matmul-bound kernel halves.
  HardwareConfig fast = config("trn2", {"core.tensor.clock_ghz=4.8"});
  auto matmul_time = [](const HardwareConfig& hw) {
    ProgramBuilder b("mm", hw.generation);
    uint32_t w = b.sbuf("w", DType::bf16, {128, 128});
    uint32_t x = b.sbuf("x", DType::bf16, {128, 512});
    uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
    for (int i = 0; i < 200; ++i) {
      b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor("moving", b.view(x))
          .word("accumulate", i ? "true" : "false");
    }
    return run(b.program(), hw).stats.total_ns;
  };
  EXPECT_NEAR(matmul_time(fast) / matmul_time(base), 0.5, 0.01);
  // HBM bandwidth: two cores on one stack are HBM-bound, so time scales with 1 / bandwidth.
  HardwareConfig wide = config("trn2", {"hbm.bandwidth_gbps=5800"});
  isa::Program program = dma_program(base.generation, 128, 16384, DType::bf16, 8);
  double narrow_t = run(program, base, {0, 1}).stats.total_ns;
  double wide_t = run(program, wide, {0, 1}).stats.total_ns;
  EXPECT_LT(wide_t, 0.85 * narrow_t);
  // PE rows: with 256 rows one instruction contracts K = 256, so a K = 512 product needs half
  // the instructions (and half the time).
  HardwareConfig tall = config("trn2", {"core.tensor.pe_rows=256", "core.sbuf.partitions=256",
                                        "core.psum.partitions=256", "core.vector.lanes=256", "core.scalar.lanes=256",
                                        "core.gpsimd.lanes=256"});
  auto contraction_time = [](const HardwareConfig& hw, uint32_t k_per_instruction) {
    ProgramBuilder b("k", hw.generation);
    uint32_t w = b.sbuf("w", DType::bf16, {k_per_instruction, 512 / k_per_instruction, 128});
    uint32_t x = b.sbuf("x", DType::bf16, {k_per_instruction, 512 / k_per_instruction, 512});
    uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
    for (uint32_t t = 0; t < 512 / k_per_instruction; ++t) {
      b.emit(Opcode::nc_matmul)
          .tensor("dst", b.view(acc))
          .tensor("stationary", b.view(w, {Slice::all(), Slice::index(t)}))
          .tensor("moving", b.view(x, {Slice::all(), Slice::index(t)}))
          .word("accumulate", t ? "true" : "false");
    }
    return run(b.program(), hw).stats.engines.at("core0.tensor").busy_ns;
  };
  EXPECT_NEAR(contraction_time(tall, 256) / contraction_time(base, 128), 0.5, 1e-9);
}

// --- determinism and functional-first ---

TEST(Determinism, SameInputSameCyclesAndTrace) {
  HardwareConfig hw = config("trn2");
  isa::Program program = streamed_matmul(hw.generation, 16, 2);
  SimResult a = run(program, hw, {0}, true, true), b = run(program, hw, {0}, true, true);
  std::ostringstream ta, tb;
  a.trace->write(ta);
  b.trace->write(tb);
  EXPECT_EQ(ta.str(), tb.str());
  EXPECT_EQ(a.stats.total_ns, b.stats.total_ns);
  EXPECT_GT(a.trace->slice_count(), 30u);
}

TEST(Determinism, TimingOnlyGivesIdenticalTiming) {
  HardwareConfig hw = config("trn2");
  isa::Program program = streamed_matmul(hw.generation, 8, 2);
  SimResult timing = run(program, hw, {0}, true), values = run(program, hw, {0}, false);
  EXPECT_EQ(timing.stats.total_ns, values.stats.total_ns);
  EXPECT_EQ(timing.stats.engines.at("core0.tensor").busy_ns, values.stats.engines.at("core0.tensor").busy_ns);
}

// --- errors raised inside the SystemC threads reach the caller as ordinary exceptions ---

// simulate() without legality (the PyTorch device's path): what a core's thread throws comes out
// of simulate as the same IsaError, never as an sc_report or a terminate, and the next
// simulation in the process still runs.
SimResult run_unchecked(const std::string& text, const HardwareConfig& hw, std::vector<uint32_t> cores,
                        bool timing_only) {
  isa::Program program = isa::parse_tasm(text, "case.tasm");
  SimOptions options;
  options.cores = std::move(cores);
  options.timing_only = timing_only;
  return simulate(program, hw, "test", options);
}

const char* kCopyHeader = "kernel k\ntarget trn2\nhbm x : fp32[128, 64] input\nsbuf s : fp32[128, 64]\n";

// Issue 42 S1: semaphores start at 0, so a wait for 0 (or less) holds from the start instead of being refused as
// a wait no sem_signal satisfies. On the idle Vector queue it delays nothing: the run takes the DMA's time alone.
TEST(SimulationErrors, AWaitForZeroHoldsFromTheStart) {
  HardwareConfig hw = config("trn2");
  const std::string copy = std::string(kCopyHeader) + "dma_copy dst=s, src=x\n";
  for (bool timing_only : {true, false}) {
    for (std::vector<uint32_t> cores : {std::vector<uint32_t>{0}, std::vector<uint32_t>{0, 1}}) {
      const double alone = run_unchecked(copy, hw, cores, timing_only).stats.total_ns;
      for (const char* value : {"0", "-1"}) {
        SCOPED_TRACE(std::string("value=") + value);
        const std::string waited = std::string(kCopyHeader) + "sem_wait engine=vector, sem=3, value=" + value +
                                   "\ndma_copy dst=s, src=x\n";
        SimResult result = run_unchecked(waited, hw, cores, timing_only);
        EXPECT_EQ(result.stats.instructions["sem_wait"], cores.size());
        EXPECT_EQ(result.stats.total_ns, alone);
      }
    }
  }
}

TEST(SimulationErrors, ThreadErrorsAreRethrownAsIsaError) {
  HardwareConfig hw = config("trn2");
  const std::string unsatisfied = std::string(kCopyHeader) + "sem_wait engine=sync, sem=0, value=1\n";
  const std::string bad_queue = std::string(kCopyHeader) + "dma_copy dst=s, src=x, queue=99\n";
  for (bool timing_only : {true, false}) {
    for (std::vector<uint32_t> cores : {std::vector<uint32_t>{0}, std::vector<uint32_t>{0, 1}}) {
      try {
        run_unchecked(unsatisfied, hw, cores, timing_only);
        ADD_FAILURE() << "no error";
      } catch (const isa::IsaError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("core 0 instruction 0 (line 5) sem_wait: waits for semaphore 0"));
      }
      try {
        run_unchecked(bad_queue, hw, cores, timing_only);
        ADD_FAILURE() << "no error";
      } catch (const isa::IsaError& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("DMA queue 99 does not exist (the config has 16 per engine)"));
      }
    }
  }
  EXPECT_THROW(run_unchecked(std::string(kCopyHeader) + "dma_copy dst=s, src=x\n", hw, {1, 0, 1}, true), isa::IsaError);
  SimResult fine = run_unchecked(std::string(kCopyHeader) + "dma_copy dst=s, src=x\n", hw, {0}, true);
  EXPECT_GT(fine.stats.total_ns, 0);
}

// A NaN latency (a config built in code, which skips the loader's checks) is an error naming
// the cause, not a simulation that never ends.
TEST(SimulationErrors, NonFiniteTimesAreAnError) {
  HardwareConfig hw = config("trn2");
  hw.core.dma.fixed_latency_ns = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(
      {
        try {
          run_unchecked(std::string(kCopyHeader) + "dma_copy dst=s, src=x\ndma_copy dst=s, src=x\n", hw, {0}, true);
        } catch (const isa::IsaError& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("not a finite number"));
          throw;
        }
      },
      isa::IsaError);
  HardwareConfig slow = config("trn2");
  slow.core.vector.clock_ghz = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THROW(run_unchecked(std::string(kCopyHeader) + "memset dst=s, value=1\n", slow, {0}, true), isa::IsaError);
}

// tensor.background_transpose (A-V4, trn3): a PE transpose runs on a second, transpose-only lane of the Tensor engine,
// concurrently with another matmul or transpose; both lanes issue in program order.
TEST(TensorEngine, BackgroundTransposeOverlapsTransposesAndMatmuls) {
  const char* text = R"(target trn3
sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
psum acc : fp32[128, 512]
psum t0 : bf16[128, 128]
psum t1 : bf16[128, 128]
psum t2 : bf16[128, 128]
psum t3 : bf16[128, 128]
)";
  for (bool background : {true, false}) {
    HardwareConfig hw =
        config("trn3", {std::string("core.tensor.background_transpose=") + (background ? "true" : "false")});
    const double clock = hw.core.tensor.clock_ghz, latency = hw.core.tensor.fixed_overhead_cycles;
    // A [128, 128] transpose: max(P, min(MIN_II, F), F / LS speed-up) = 128 cycles (ISA-COST, §6).
    const double transpose = std::max({128.0, std::min(64.0, 128.0), 128.0 / hw.core.tensor.load_stationary_speedup});
    std::string chain = text;
    for (int i = 0; i < 4; ++i) chain += "nc_transpose dst=t" + std::to_string(i) + ", data=w\n";
    SimResult r = run(isa::parse_tasm(chain, "chain"), hw);
    // Four independent transposes: two at a time on the two lanes, else one after another.
    EXPECT_NEAR(r.stats.total_ns, ((background ? 2 : 4) * transpose + latency) / clock, 1e-6) << background;
    EXPECT_NEAR(r.stats.engines.at("core0.tensor").busy_ns, 4 * transpose / clock, 1e-6) << background;
    EXPECT_EQ(r.stats.engines.at("core0.tensor").instructions, 4u);

    // A matmul (512 cycles) then a transpose: the transpose runs beside it, else after it.
    SimResult m = run(isa::parse_tasm(std::string(text) + "nc_matmul dst=acc, stationary=w, moving=x\n"
                                                          "nc_transpose dst=t0, data=w\n",
                                      "overlap"),
                      hw);
    EXPECT_NEAR(m.stats.total_ns, ((background ? 512 : 512 + transpose) + latency) / clock, 1e-6) << background;
    // A transpose before a matmul: the matmul issues after it in program order, on the main lane it leaves free
    // only with the feature.
    SimResult t = run(isa::parse_tasm(std::string(text) + "nc_transpose dst=t0, data=w\n"
                                                          "nc_transpose dst=t1, data=w\n"
                                                          "nc_matmul dst=acc, stationary=w, moving=x\n",
                                      "before"),
                      hw);
    EXPECT_NEAR(t.stats.total_ns, ((background ? transpose + 512 : 2 * transpose + 512) + latency) / clock, 1e-6)
        << background;
  }
}

// PE tiling (ISA nc_matmul tile_position / tile_size, trainium.md §6): a matmul on a tile of the PE array holds only
// that tile, so matmuls on disjoint tiles run together; on one tile, or beside an untiled matmul, they queue.
TEST(TensorEngine, PeTilesRunMatmulsOnDisjointTilesTogether) {
  const std::string header = R"(target trn2
sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
psum acc : fp32[128, 4, 512]
)";
  auto tiled = [](int bank, int row, int column, int size) {
    const std::string r = std::to_string(row), c = std::to_string(column), n = std::to_string(size);
    return "nc_matmul dst=acc[0:" + n + ", " + std::to_string(bank) + ", 0:512], stationary=w[" + r + ":" +
           std::to_string(row + size) + ", 0:" + n + "], moving=x[" + r + ":" + std::to_string(row + size) +
           ", 0:512], tile_position=[" + r + "," + c + "], tile_size=[" + n + "," + n + "]\n";
  };
  const HardwareConfig hw = config("trn2");
  const SimResult one = run(isa::parse_tasm(header + tiled(0, 0, 0, 32), "one"), hw);
  const double occupancy = one.stats.engines.at("core0.tensor").busy_ns;
  ASSERT_GT(occupancy, 0);
  // Four on the diagonal tiles: all at once; the engine counts as busy once.
  std::string diagonal = header;
  for (int i = 0; i < 4; ++i) diagonal += tiled(i, 32 * i, 32 * i, 32);
  const SimResult together = run(isa::parse_tasm(diagonal, "diagonal"), hw);
  EXPECT_NEAR(together.stats.total_ns, one.stats.total_ns, 1e-6);
  EXPECT_NEAR(together.stats.engines.at("core0.tensor").busy_ns, occupancy, 1e-6);
  EXPECT_EQ(together.stats.engines.at("core0.tensor").instructions, 4u);
  // Four on one tile: one after another.
  std::string same = header;
  for (int i = 0; i < 4; ++i) same += tiled(i, 0, 0, 32);
  EXPECT_NEAR(run(isa::parse_tasm(same, "same"), hw).stats.total_ns, one.stats.total_ns + 3 * occupancy, 1e-6);
  // An untiled matmul holds the whole array: it waits for a tiled one, and a tiled one waits for it.
  const std::string untiled = "nc_matmul dst=acc[0:128, 3, 0:512], stationary=w, moving=x\n";
  const SimResult after = run(isa::parse_tasm(header + tiled(0, 64, 64, 64) + untiled, "after"), hw);
  const SimResult before = run(isa::parse_tasm(header + untiled + tiled(0, 64, 64, 64), "before"), hw);
  const double untiled_alone =
      run(isa::parse_tasm(header + untiled, "alone"), hw).stats.engines.at("core0.tensor").busy_ns;
  EXPECT_NEAR(after.stats.engines.at("core0.tensor").busy_ns, occupancy + untiled_alone, 1e-6);
  EXPECT_NEAR(after.stats.total_ns, before.stats.total_ns, 1e-6);
  EXPECT_NEAR(after.stats.total_ns, one.stats.total_ns + untiled_alone, 1e-6);
}

TEST(TensorEngine, PeTilesFollowTheGenerationsGranularity) {
  const std::string header = R"(sbuf w : bf16[128, 128]
sbuf x : bf16[128, 512]
psum acc : fp32[128, 512]
)";
  auto rules = [&](const char* name, const std::string& line) {
    const std::string text = std::string("target ") + name + "\n" + header + line + "\n";
    try {
      isa::check_program(isa::parse_tasm(text, "tiles"), config(name));
      return std::string("legal");
    } catch (const isa::IsaError& e) {
      return std::string(e.what());
    }
  };
  const std::string small = "nc_matmul dst=acc[0:32, 0:512], stationary=w[0:32, 0:32], moving=x[0:32, 0:512], "
                            "tile_position=[32,96], tile_size=[32,32]";
  EXPECT_EQ(rules("trn2", small), "legal");
  EXPECT_EQ(rules("trn3", small), "legal");
  // NeuronCore-v2 tiles the array in 64s.
  EXPECT_THAT(rules("trn1", small), ::testing::HasSubstr("[matmul-pe-tiling]"));
  EXPECT_THAT(rules("trn1", small), ::testing::HasSubstr("multiple of 64"));
  EXPECT_EQ(rules("trn1", "nc_matmul dst=acc[0:64, 0:512], stationary=w[0:64, 0:64], moving=x[0:64, 0:512], "
                          "tile_position=[64,0], tile_size=[64,64]"),
            "legal");
  // A tile not aligned to its size, a stationary larger than its tile, half a pair.
  EXPECT_THAT(rules("trn2", "nc_matmul dst=acc[0:32, 0:512], stationary=w[0:32, 0:32], moving=x[0:32, 0:512], "
                            "tile_position=[16,0], tile_size=[32,32]"),
              ::testing::HasSubstr("tile_position row 16 must be a multiple of the tile's 32 rows"));
  EXPECT_THAT(rules("trn2", "nc_matmul dst=acc[0:64, 0:512], stationary=w[0:64, 0:64], moving=x[0:64, 0:512], "
                            "tile_position=[0,0], tile_size=[32,32]"),
              ::testing::HasSubstr("does not fit the [32, 32] PE tile"));
  EXPECT_THAT(rules("trn2", "nc_matmul dst=acc[0:32, 0:512], stationary=w[0:32, 0:32], moving=x[0:32, 0:512], "
                            "tile_position=[0,0]"),
              ::testing::HasSubstr("given together"));
}

// Sizes no host can hold are refused before anything is allocated, naming the quantity.
TEST(SimulationErrors, MemoryBeyondTheHostIsRefused) {
  HardwareConfig hw = config("trn2");
  hw.core.sbuf.bytes_per_partition = uint64_t{1} << 34;
  try {
    run_unchecked(std::string(kCopyHeader) + "dma_copy dst=s, src=x\n", hw, {0}, false);
    ADD_FAILURE() << "no error";
  } catch (const isa::IsaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("SBUF 128 partitions x 17179869184 bytes per core"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("of host memory"));
  }
}

}  // namespace
}  // namespace trnsim::sim

namespace trnsim::sim {
namespace {

TEST(LaunchCost, IsReportedApartFromTheBodyAndFollowsTheConfig) {
  // chip.kernel_launch_ns is charged once per kernel execution: stats launch_ns, execution = launch + body; the
  // body (total_ns) does not depend on it.
  HardwareConfig hw = config("trn2");
  HardwareConfig slow = config("trn2", {"chip.kernel_launch_ns=50000"});
  isa::Program p = dma_program(hw.generation, 128, 512, DType::bf16);
  SimResult a = run(p, hw), b = run(p, slow);
  EXPECT_DOUBLE_EQ(a.stats.launch_ns, hw.chip.kernel_launch_ns);
  EXPECT_DOUBLE_EQ(b.stats.launch_ns, 50000);
  EXPECT_GT(hw.chip.kernel_launch_ns, 0);
  EXPECT_DOUBLE_EQ(a.stats.total_ns, b.stats.total_ns);
  EXPECT_DOUBLE_EQ(b.stats.execution_ns(), 50000 + b.stats.total_ns);
  EXPECT_THAT(b.stats.to_json(), testing::HasSubstr("\"launch_ns\": 50000.0"));
}

}  // namespace
}  // namespace trnsim::sim
