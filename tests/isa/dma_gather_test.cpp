// dma_gather (indirect DMA through the software DGE): semantics, the out-of-range error, legality
// rules and the cost model's bytes / descriptors / descriptor-generation latency.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/numerics/float_format.h"
#include "sim/cost_model.h"

namespace trnsim::isa {
namespace {

const HardwareConfig& trn2() {
  static const HardwareConfig config = load_config("trn2").hardware;
  return config;
}

// A [V, D] table gathered into [P, D] with the given indices (int32 unless `dtype` says otherwise).
struct Gather {
  Program program;
  uint32_t table = 0, ids = 0, rows = 0, out = 0;
};

Gather make_gather(uint32_t v, uint32_t d, uint32_t p, DType table_dtype, DType dst_dtype,
                   DType index_dtype = DType::int32) {
  ProgramBuilder b("g", Generation::trn2);
  Gather g;
  g.table = b.hbm("table", table_dtype, {v, d}, AllocationRole::input);
  g.ids = b.hbm("ids", index_dtype, {p, 1}, AllocationRole::input);
  g.out = b.hbm("out", dst_dtype, {p, d}, AllocationRole::output);
  uint32_t idx = b.sbuf("idx", index_dtype, {p, 1});
  g.rows = b.sbuf("rows", dst_dtype, {p, d});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(idx)).tensor("src", b.view(g.ids));
  b.emit(Opcode::dma_gather, 7).tensor("dst", b.view(g.rows)).tensor("src", b.view(g.table)).tensor("indices",
                                                                                                  b.view(idx));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(g.out)).tensor("src", b.view(g.rows));
  g.program = b.finish();
  return g;
}

void store_ints(CoreState& state, uint32_t id, const std::vector<int32_t>& values) {
  std::memcpy(state.hbm(id).data(), values.data(), values.size() * sizeof(int32_t));
}

TEST(DmaGather, CopiesRowsInIndexOrderWithRepeatsAndCasts) {
  Gather g = make_gather(5, 3, 4, DType::fp32, DType::bf16);
  check_program(g.program, trn2());
  CoreState state(trn2().core, g.program);
  std::vector<float> table(15);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(i + 1) + 0.001f;  // bf16 rounds the 0.001 away
  numerics::convert_from_fp32(DType::fp32, table.data(), state.hbm(g.table).data(), table.size(),
                              numerics::RoundingMode::nearest_even);
  store_ints(state, g.ids, {4, 0, 4, 2});
  interpret(g.program, state, trn2());
  std::vector<float> out(12);
  numerics::convert_to_fp32(DType::bf16, state.hbm(g.out).data(), out.data(), out.size());
  EXPECT_EQ(out, (std::vector<float>{13, 14, 15, 1, 2, 3, 13, 14, 15, 7, 8, 9}));
}

TEST(DmaGather, BitExactWithoutCast) {
  Gather g = make_gather(3, 2, 2, DType::int32, DType::int32);
  CoreState state(trn2().core, g.program);
  store_ints(state, g.table, {16777217, -5, 7, 8, -2147483647, 3});
  store_ints(state, g.ids, {2, 0});
  interpret(g.program, state, trn2());
  int32_t out[4];
  std::memcpy(out, state.hbm(g.out).data(), sizeof out);
  EXPECT_EQ(out[0], -2147483647);
  EXPECT_EQ(out[1], 3);
  EXPECT_EQ(out[2], 16777217);
  EXPECT_EQ(out[3], -5);
}

TEST(DmaGather, OutOfRangeIndexNamesIndexAndRows) {
  Gather g = make_gather(5, 3, 4, DType::fp32, DType::fp32);
  for (int32_t bad : {5, -1}) {
    CoreState state(trn2().core, g.program);
    store_ints(state, g.ids, {0, 1, bad, 2});
    try {
      interpret(g.program, state, trn2());
      FAIL() << "index " << bad << " must raise";
    } catch (const IsaError& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("line 7"));
      EXPECT_THAT(e.what(), testing::HasSubstr("gather index " + std::to_string(bad) +
                                               " (partition 2) is out of range for a table of 5 rows"));
    }
  }
}

std::vector<std::string> rules(const Program& program) {
  std::vector<std::string> out;
  for (const LegalityIssue& issue : find_legality_issues(program, trn2())) out.push_back(issue.rule);
  return out;
}

TEST(DmaGather, LegalityRules) {
  EXPECT_TRUE(rules(make_gather(5, 3, 4, DType::bf16, DType::bf16, DType::uint32).program).empty());
  EXPECT_THAT(rules(make_gather(5, 3, 4, DType::bf16, DType::bf16, DType::fp32).program),
              testing::Contains("dma-gather"));

  ProgramBuilder b("g", Generation::trn2);
  uint32_t table = b.hbm("table", DType::fp32, {10, 8});
  uint32_t sb_table = b.sbuf("sb_table", DType::fp32, {10, 8});
  uint32_t idx = b.sbuf("idx", DType::int32, {4, 1});
  uint32_t rows = b.sbuf("rows", DType::fp32, {4, 8});
  uint32_t out = b.hbm("out", DType::fp32, {4, 8});
  // src in SBUF, dst in HBM, too few indices, row-size mismatch: one rule each.
  b.emit(Opcode::dma_gather).tensor("dst", b.view(rows)).tensor("src", b.view(sb_table)).tensor("indices", b.view(idx));
  b.emit(Opcode::dma_gather).tensor("dst", b.view(out)).tensor("src", b.view(table)).tensor("indices", b.view(idx));
  b.emit(Opcode::dma_gather)
      .tensor("dst", b.view(rows))
      .tensor("src", b.view(table))
      .tensor("indices", b.view(idx, {Slice::range(0, 2), Slice::all()}));
  b.emit(Opcode::dma_gather)
      .tensor("dst", b.view(rows, {Slice::all(), Slice::range(0, 4)}))
      .tensor("src", b.view(table))
      .tensor("indices", b.view(idx));
  Program program = b.finish();
  std::vector<LegalityIssue> issues = find_legality_issues(program, trn2());
  std::vector<long> flagged;
  for (const LegalityIssue& issue : issues) {
    if (issue.rule == "dma-gather") flagged.push_back(issue.instruction);
  }
  EXPECT_THAT(flagged, testing::IsSupersetOf({0L, 1L, 2L, 3L}));
}

TEST(DmaGather, CostMovesOnlyGatheredRowsWithOneDescriptorEach) {
  Gather g = make_gather(50000, 256, 128, DType::bf16, DType::bf16);
  const Instruction& gather = g.program.instructions[1];
  sim::DmaCost cost = sim::dma_cost(gather, g.program, trn2());
  EXPECT_EQ(cost.bytes, 128u * 256u * 2u);
  EXPECT_EQ(cost.descriptors, 128u);
  EXPECT_TRUE(cost.reads_hbm);
  EXPECT_FALSE(cost.writes_hbm);
  EXPECT_EQ(cost.engines, trn2().core.dma.engines_per_core);
  // Descriptor generation on the GpSimd (software DGE): GPSIMD_START + the config's cycles per row.
  const GpSimdEngineConfig& pool = trn2().core.gpsimd;
  double dge = (pool.fixed_overhead_cycles + 128.0 * trn2().core.dma.software_dge_cycles_per_descriptor) / pool.clock_ghz;
  EXPECT_NEAR(cost.gpsimd_ns, dge, 1e-9);
  EXPECT_DOUBLE_EQ(cost.fixed_latency_ns, trn2().core.dma.fixed_latency_ns);
}

// dma_transpose with indices: rows indices[p] of the table, transposed (dst [D, P]); priced as a DMA transpose of
// the gathered bytes (its HBM-to-SBUF efficiency) with one software-DGE descriptor per row.
TEST(DmaGather, AnIndexedTransposeGathersRowsThenTransposesThem) {
  ProgramBuilder b("gt", Generation::trn2);
  const uint32_t table = b.hbm("table", DType::bf16, {40, 64}, AllocationRole::input);
  const uint32_t ids = b.hbm("ids", DType::int32, {8, 1}, AllocationRole::input);
  const uint32_t out = b.hbm("out", DType::bf16, {64, 8}, AllocationRole::output);
  const uint32_t idx = b.sbuf("idx", DType::int32, {8, 1});
  const uint32_t t = b.sbuf("t", DType::bf16, {64, 8});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(idx)).tensor("src", b.view(ids));
  b.emit(Opcode::dma_transpose).tensor("dst", b.view(t)).tensor("src", b.view(table)).tensor("indices", b.view(idx));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(out)).tensor("src", b.view(t));
  Program program = b.finish();
  check_program(program, trn2());
  CoreState state(trn2().core, program);
  std::vector<uint16_t> values(40 * 64);
  for (size_t i = 0; i < values.size(); ++i) numerics::encode(DType::bf16, float(i % 97) - 48.0f, &values[i]);
  std::memcpy(state.hbm(table).data(), values.data(), values.size() * 2);
  const std::vector<int32_t> rows = {7, 0, 39, 7, 12, 3, 21, 30};
  store_ints(state, ids, rows);
  interpret(program, state, trn2());
  std::vector<uint16_t> got(64 * 8);
  std::memcpy(got.data(), state.hbm(out).data(), got.size() * 2);
  for (size_t d = 0; d < 64; ++d) {
    for (size_t p = 0; p < 8; ++p) ASSERT_EQ(got[d * 8 + p], values[size_t(rows[p]) * 64 + d]) << d << " " << p;
  }
  const sim::DmaCost cost = sim::dma_cost(program.instructions[1], program, trn2());
  EXPECT_EQ(cost.bytes, 64u * 8u * 2u);
  EXPECT_EQ(cost.descriptors, 8u);
  EXPECT_DOUBLE_EQ(cost.bytes_per_ns_per_engine,
                   trn2().core.dma.bandwidth_per_engine_gbps * trn2().core.dma.transpose_hbm_to_sbuf_efficiency);
  const GpSimdEngineConfig& pool = trn2().core.gpsimd;
  EXPECT_NEAR(cost.gpsimd_ns,
              (pool.fixed_overhead_cycles + 8.0 * trn2().core.dma.software_dge_cycles_per_descriptor) / pool.clock_ghz,
              1e-9);
  // dst shaped for the gathered rows, not for the table.
  ProgramBuilder bad("bad", Generation::trn2);
  const uint32_t tb = bad.hbm("table", DType::bf16, {40, 64}, AllocationRole::input);
  const uint32_t ix = bad.sbuf("idx", DType::int32, {8, 1});
  const uint32_t wrong = bad.sbuf("t", DType::bf16, {64, 40});
  bad.emit(Opcode::dma_transpose).tensor("dst", bad.view(wrong)).tensor("src", bad.view(tb)).tensor("indices", bad.view(ix));
  EXPECT_THAT([&] { check_program(bad.finish(), trn2()); },
              testing::ThrowsMessage<IsaError>(testing::HasSubstr("gathered rows")));
}

// The 16-bit access-pattern stride binds the on-chip side; a DMA's HBM side is addressed by its descriptors.
TEST(DmaGather, LongHbmStridesAreLegalOnChipOnesAreNot) {
  ProgramBuilder b("strides", Generation::trn2);
  const uint32_t wide = b.hbm("wide", DType::bf16, {128, 65536}, AllocationRole::input);
  const uint32_t s = b.sbuf("s", DType::bf16, {128, 2, 64});
  // Two column blocks 40000 elements apart in each HBM row: an HBM stride of 40000.
  AccessPattern src = b.view(wide, {Slice::all(), Slice::range(0, 128)});
  src.num_free_dims = 2;
  src.free[0] = {40000, 2};
  src.free[1] = {1, 64};
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s)).tensor("src", src);
  EXPECT_NO_THROW(check_program(b.program(), trn2()));
  AccessPattern onchip = b.view(s);
  onchip.free[0].stride = 40000;
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(s)).tensor("src", onchip);
  EXPECT_THAT([&] { check_program(b.program(), trn2()); },
              testing::ThrowsMessage<IsaError>(testing::HasSubstr("16-bit stride field")));
}

}  // namespace
}  // namespace trnsim::isa
