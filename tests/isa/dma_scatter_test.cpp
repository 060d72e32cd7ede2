// dma_scatter (indirect DMA store through the software DGE): semantics with repeated indices (last
// row wins / sum in partition order), read-add-write rounding, the out-of-range error, legality
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

// Rows [P, D] scattered into a [V, D] table that starts as `base` (copied HBM -> HBM first).
struct Scatter {
  Program program;
  uint32_t base = 0, ids = 0, rows = 0, table = 0;
};

Scatter make_scatter(uint32_t v, uint32_t d, uint32_t p, DType dtype, bool add, DType index_dtype = DType::int32) {
  ProgramBuilder b("s", Generation::trn2);
  Scatter s;
  s.base = b.hbm("base", dtype, {v, d}, AllocationRole::input);
  s.rows = b.hbm("rows", dtype, {p, d}, AllocationRole::input);
  s.ids = b.hbm("ids", index_dtype, {p, 1}, AllocationRole::input);
  s.table = b.hbm("table", dtype, {v, d}, AllocationRole::output);
  uint32_t idx = b.sbuf("idx", index_dtype, {p, 1});
  uint32_t src = b.sbuf("src", dtype, {p, d});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(s.table)).tensor("src", b.view(s.base));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(idx)).tensor("src", b.view(s.ids));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(src)).tensor("src", b.view(s.rows));
  b.emit(Opcode::dma_scatter, 9)
      .tensor("dst", b.view(s.table))
      .tensor("src", b.view(src))
      .tensor("indices", b.view(idx))
      .word("dst_rmw_op", add ? "add" : "none");
  s.program = b.finish();
  return s;
}

template <typename T>
void store(CoreState& state, uint32_t id, const std::vector<T>& values) {
  std::memcpy(state.hbm(id).data(), values.data(), values.size() * sizeof(T));
}

std::vector<float> table_values(const CoreState& state, const Scatter& s, DType dtype, size_t n) {
  std::vector<float> out(n);
  numerics::convert_to_fp32(dtype, state.hbm(s.table).data(), out.data(), n);
  return out;
}

TEST(DmaScatter, RepeatedIndexTakesTheLastRow) {
  Scatter s = make_scatter(4, 2, 3, DType::int32, false);
  check_program(s.program, trn2());
  CoreState state(trn2().core, s.program);
  store<int32_t>(state, s.base, {1, 2, 3, 4, 5, 6, 7, 8});
  store<int32_t>(state, s.rows, {16777217, -9, 10, 11, -2147483647, 12});
  store<int32_t>(state, s.ids, {3, 0, 3});
  interpret(s.program, state, trn2());
  int32_t out[8];
  std::memcpy(out, state.hbm(s.table).data(), sizeof out);
  // Row 3 got 16777217 then (-2147483647, 12): bit-exact, the later row wins; rows 1, 2 untouched.
  EXPECT_THAT(out, testing::ElementsAre(10, 11, 3, 4, 5, 6, -2147483647, 12));
}

TEST(DmaScatter, AddSumsRepeatsInPartitionOrderRoundingEachStep) {
  Scatter s = make_scatter(2, 1, 3, DType::bf16, true);
  CoreState state(trn2().core, s.program);
  std::vector<float> base = {256, 7}, rows = {1, 1, 2};
  numerics::convert_from_fp32(DType::bf16, base.data(), state.hbm(s.base).data(), 2,
                              numerics::RoundingMode::nearest_even);
  numerics::convert_from_fp32(DType::bf16, rows.data(), state.hbm(s.rows).data(), 3,
                              numerics::RoundingMode::nearest_even);
  store<int32_t>(state, s.ids, {0, 0, 1});
  interpret(s.program, state, trn2());
  // bf16 has 8 significant bits: 256 + 1 rounds to 256 (ties to even) twice, as a sequential
  // bf16 accumulation does; one fp32 sum of both rows would give 258.
  EXPECT_EQ(table_values(state, s, DType::bf16, 2), (std::vector<float>{256, 9}));
}

TEST(DmaScatter, OutOfRangeIndexNamesIndexAndRows) {
  Scatter s = make_scatter(5, 3, 4, DType::fp32, false);
  for (int32_t bad : {5, -1}) {
    CoreState state(trn2().core, s.program);
    store<int32_t>(state, s.ids, {0, 1, 2, bad});
    try {
      interpret(s.program, state, trn2());
      FAIL() << "index " << bad << " must raise";
    } catch (const IsaError& e) {
      EXPECT_THAT(e.what(), testing::HasSubstr("line 9"));
      EXPECT_THAT(e.what(), testing::HasSubstr("scatter index " + std::to_string(bad) +
                                               " (partition 3) is out of range for a table of 5 rows"));
    }
  }
}

// oob_mode=skip (nki.isa.dma_copy's oob_mode.skip): an out-of-range row is not written, the others are.
TEST(DmaScatter, OobModeSkipWritesOnlyTheRowsInRange) {
  Scatter s = make_scatter(5, 3, 4, DType::fp32, false);
  s.program.instructions.back().scalars[instruction_spec(Opcode::dma_scatter).find("oob_mode")->scalar_slot] = 1;
  CoreState state(trn2().core, s.program);
  std::vector<float> base(15, -1.0f), rows(12);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(i);
  store(state, s.base, base);
  store(state, s.rows, rows);
  store<int32_t>(state, s.ids, {4, 5, -1, 0});
  interpret(s.program, state, trn2());
  std::vector<float> table = table_values(state, s, DType::fp32, 15);
  EXPECT_THAT(std::vector<float>(table.begin(), table.begin() + 3), testing::ElementsAre(9, 10, 11));
  EXPECT_THAT(std::vector<float>(table.begin() + 12, table.end()), testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(std::vector<float>(table.begin() + 3, table.begin() + 12), testing::Each(-1.0f));
}

std::vector<std::string> rules(const Program& program) {
  std::vector<std::string> out;
  for (const LegalityIssue& issue : find_legality_issues(program, trn2())) out.push_back(issue.rule);
  return out;
}

TEST(DmaScatter, LegalityRules) {
  EXPECT_TRUE(rules(make_scatter(5, 3, 4, DType::bf16, true, DType::uint32).program).empty());
  EXPECT_THAT(rules(make_scatter(5, 3, 4, DType::bf16, false, DType::fp32).program), testing::Contains("dma-scatter"));
  EXPECT_THAT(rules(make_scatter(5, 3, 4, DType::int32, true).program), testing::Contains("dma-read-add-write"));
  Scatter skip_add = make_scatter(5, 3, 4, DType::fp32, true);
  skip_add.program.instructions.back().scalars[instruction_spec(Opcode::dma_scatter).find("oob_mode")->scalar_slot] = 1;
  EXPECT_THAT(rules(skip_add.program), testing::Contains("dma-read-add-write"));  // rmw takes oob_mode=error only

  ProgramBuilder b("s", Generation::trn2);
  uint32_t table = b.hbm("table", DType::fp32, {10, 8});
  uint32_t sb_table = b.sbuf("sb_table", DType::fp32, {10, 8});
  uint32_t idx = b.sbuf("idx", DType::int32, {4, 1});
  uint32_t rows = b.sbuf("rows", DType::fp32, {4, 8});
  uint32_t hbm_rows = b.hbm("hbm_rows", DType::fp32, {4, 8});
  // dst in SBUF, src in HBM, too few indices, row-size mismatch: one rule each.
  b.emit(Opcode::dma_scatter).tensor("dst", b.view(sb_table)).tensor("src", b.view(rows))
      .tensor("indices", b.view(idx));
  b.emit(Opcode::dma_scatter).tensor("dst", b.view(table)).tensor("src", b.view(hbm_rows))
      .tensor("indices", b.view(idx));
  b.emit(Opcode::dma_scatter)
      .tensor("dst", b.view(table))
      .tensor("src", b.view(rows))
      .tensor("indices", b.view(idx, {Slice::range(0, 2), Slice::all()}));
  b.emit(Opcode::dma_scatter)
      .tensor("dst", b.view(table))
      .tensor("src", b.view(rows, {Slice::all(), Slice::range(0, 4)}))
      .tensor("indices", b.view(idx));
  Program program = b.finish();
  std::vector<long> flagged;
  for (const LegalityIssue& issue : find_legality_issues(program, trn2())) {
    if (issue.rule == "dma-scatter") flagged.push_back(issue.instruction);
  }
  EXPECT_THAT(flagged, testing::IsSupersetOf({0L, 1L, 2L, 3L}));

  // A queue the config does not have (trn2: 16 per engine), as for every DMA instruction.
  ProgramBuilder q("q", Generation::trn2);
  uint32_t qtable = q.hbm("table", DType::fp32, {10, 8});
  uint32_t qidx = q.sbuf("idx", DType::int32, {4, 1});
  uint32_t qrows = q.sbuf("rows", DType::fp32, {4, 8});
  q.emit(Opcode::dma_scatter).tensor("dst", q.view(qtable)).tensor("src", q.view(qrows)).tensor("indices", q.view(qidx))
      .imm("queue", 16);
  EXPECT_THAT(rules(q.finish()), testing::ElementsAre("dma-queue"));
}

TEST(DmaScatter, CostMovesOnlyScatteredRowsWithOneDescriptorEach) {
  Scatter s = make_scatter(50000, 256, 128, DType::bf16, false);
  const Instruction& scatter = s.program.instructions[3];
  sim::DmaCost cost = sim::dma_cost(scatter, s.program, trn2());
  EXPECT_EQ(cost.bytes, 128u * 256u * 2u);
  EXPECT_EQ(cost.descriptors, 128u);
  EXPECT_FALSE(cost.reads_hbm);
  EXPECT_TRUE(cost.writes_hbm);
  EXPECT_EQ(cost.engines, trn2().core.dma.engines_per_core);
  const DmaConfig& dma = trn2().core.dma;
  EXPECT_DOUBLE_EQ(cost.bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps);
  const GpSimdEngineConfig& pool = trn2().core.gpsimd;
  double dge = (pool.fixed_overhead_cycles + 128.0 * dma.software_dge_cycles_per_descriptor) / pool.clock_ghz;
  EXPECT_NEAR(cost.gpsimd_ns, dge, 1e-9);
  EXPECT_DOUBLE_EQ(cost.fixed_latency_ns, dma.fixed_latency_ns);

  Scatter a = make_scatter(50000, 256, 128, DType::bf16, true);
  sim::DmaCost add = sim::dma_cost(a.program.instructions[3], a.program, trn2());
  EXPECT_DOUBLE_EQ(add.bytes_per_ns_per_engine, dma.bandwidth_per_engine_gbps * dma.read_add_write_efficiency);
  EXPECT_EQ(add.descriptors, 128u);
}

}  // namespace
}  // namespace trnsim::isa
