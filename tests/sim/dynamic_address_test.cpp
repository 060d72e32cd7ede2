// Dynamic addressing (AccessPattern::offset_register, NKI scalar_offset): an operand whose start is a register's
// value when the instruction issues. Values and time equal the same program with the offsets written out; a
// resolved pattern outside its tensor is an error; the text and JSON forms keep the register.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/control_flow.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

using testing::HasSubstr;

HardwareConfig trn2() { return load_config("trn2", {}).hardware; }

const char* const kHeader = R"(kernel rows
target trn2
hbm k : int32[1, 1] input
hbm table : fp32[8, 64] input
hbm out : fp32[1, 256] output
sbuf kk : int32[1, 1]
sbuf row : fp32[1, 256]
)";

// Rows k .. k+3 of the table (k read from HBM) side by side in one partition: a counted loop advancing the
// source register by a row and the destination register by 64 elements.
std::string dynamic_rows() {
  return std::string(kHeader) +
         "dma_copy dst=kk, src=k\n"
         "register_load dst=r0, src=kk\n"
         "register_mul dst=r1, src=r0, imm=64\n"
         "register_move dst=r2, imm=0\n"
         "loop_begin count=4\n"
         "dma_copy dst=row{offset=0, scalar_offset=r2, ap=[[0, 1], [1, 64]]}, src=table{offset=0, scalar_offset=r1, "
         "ap=[[64, 1], [1, 64]]}, dge_mode=hwdge\n"
         "register_add dst=r1, src=r1, imm=64\n"
         "register_add dst=r2, src=r2, imm=64\n"
         "loop_end\n"
         "dma_copy dst=out, src=row\n";
}

std::vector<float> table_values() {
  std::vector<float> values(8 * 64);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.5f - 7.0f;
  return values;
}

void load(const isa::Program& p, isa::CoreState& state, int32_t k) {
  std::vector<uint8_t> kb(4);
  std::memcpy(kb.data(), &k, 4);
  state.hbm(uint32_t(p.find_allocation("k"))) = kb;
  std::vector<float> t = table_values();
  std::vector<uint8_t> tb(t.size() * 4);
  std::memcpy(tb.data(), t.data(), tb.size());
  state.hbm(uint32_t(p.find_allocation("table"))) = tb;
}

std::vector<float> as_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// What the program computes, by hand: out[0, 64 i + j] = table[k + i, j].
std::vector<float> expected_rows(int32_t k) {
  std::vector<float> t = table_values(), out(256);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 64; ++j) out[size_t(i * 64 + j)] = t[size_t((k + i) * 64 + j)];
  }
  return out;
}

TEST(DynamicAddress, RowsChosenByARegisterGiveTheRowsInInterpreterAndSimulator) {
  isa::Program p = isa::parse_tasm(dynamic_rows(), "rows.tasm");
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  EXPECT_TRUE(isa::has_dynamic_offsets(p));
  EXPECT_TRUE(isa::control_depends_on_values(p));
  for (int32_t k : {0, 2, 4}) {  // k = 4 reads the last row
    SCOPED_TRACE(k);
    isa::CoreState state(hw.core, p);
    load(p, state, k);
    isa::interpret(p, state, hw);
    EXPECT_EQ(as_floats(state.hbm(uint32_t(p.find_allocation("out")))), expected_rows(k));
    SimResult r = simulate(p, hw, "test", SimOptions{}, [&](uint32_t, isa::CoreState& s) { load(p, s, k); });
    EXPECT_EQ(as_floats(r.states.at(0)->hbm(uint32_t(p.find_allocation("out")))), expected_rows(k));
  }
}

// Registers from immediates, so timing-only expands without values. `prologue` runs first in both programs.
std::string two_row_copies(bool dynamic, const std::string& prologue) {
  const std::string first = dynamic ? "table{offset=0, scalar_offset=r1, ap=[[64, 1], [1, 64]]}" : "table[2:3, :]";
  const std::string second = dynamic ? "table{offset=0, scalar_offset=r1, ap=[[64, 1], [1, 64]]}" : "table[5:6, :]";
  return std::string(kHeader) + prologue + "register_move dst=r1, imm=128\n" +
         "dma_copy dst=row[0:1, 0:64], src=" + first + ", dge_mode=hwdge\n" +
         "register_add dst=r1, src=r1, imm=192\n" + "dma_copy dst=row[0:1, 64:128], src=" + second +
         ", dge_mode=hwdge\n" + "dma_copy dst=out, src=row\n";
}

TEST(DynamicAddress, TimeEqualsTheProgramWithTheOffsetsWrittenOutWhenTheRegistersAreReadyFirst) {
  // The DMAs wait for the memset of row (WAW), which ends after both register instructions.
  const std::string memset = "memset dst=row, value=0\n";
  HardwareConfig hw = trn2();
  isa::Program a = isa::parse_tasm(two_row_copies(true, memset), "a.tasm");
  isa::Program b = isa::parse_tasm(two_row_copies(false, memset), "b.tasm");
  EXPECT_FALSE(isa::control_depends_on_values(a));
  for (bool timing_only : {true, false}) {
    SimOptions options;
    options.timing_only = timing_only;
    SimResult ra = simulate(a, hw, "test", options, [&](uint32_t, isa::CoreState& s) { load(a, s, 0); });
    SimResult rb = simulate(b, hw, "test", options, [&](uint32_t, isa::CoreState& s) { load(b, s, 0); });
    EXPECT_GT(rb.stats.total_ns, 0);
    EXPECT_DOUBLE_EQ(ra.stats.total_ns, rb.stats.total_ns);
    if (!timing_only) {
      uint32_t out = uint32_t(a.find_allocation("out"));
      EXPECT_EQ(ra.states.at(0)->hbm(out), rb.states.at(0)->hbm(out));
    }
  }
}

TEST(DynamicAddress, ADmaWaitsForTheRegisterItsAddressComesFrom) {
  // One register-addressed DMA, first in the program: it starts when register_move (a Sync-engine instruction of
  // sync.fixed_overhead_cycles) completes, where the static one starts at once; everything after shifts by that.
  auto one_copy = [](bool dynamic) {
    return std::string(kHeader) + "register_move dst=r1, imm=128\n" + "dma_copy dst=row[0:1, 0:64], src=" +
           (dynamic ? "table{offset=0, scalar_offset=r1, ap=[[64, 1], [1, 64]]}" : "table[2:3, :]") +
           ", dge_mode=hwdge\ndma_copy dst=out, src=row\n";
  };
  HardwareConfig hw = trn2();
  SimOptions options;
  options.timing_only = true;
  const double dynamic = simulate(isa::parse_tasm(one_copy(true), "a.tasm"), hw, "test", options).stats.total_ns;
  const double fixed = simulate(isa::parse_tasm(one_copy(false), "b.tasm"), hw, "test", options).stats.total_ns;
  EXPECT_NEAR(dynamic - fixed, hw.core.sync.fixed_overhead_cycles / hw.core.sync.clock_ghz, 1e-6);
}

TEST(DynamicAddress, AnOffsetOutsideTheTensorIsAnErrorWhenItIssues) {
  isa::Program p = isa::parse_tasm(dynamic_rows(), "rows.tasm");
  HardwareConfig hw = trn2();
  isa::CoreState state(hw.core, p);
  load(p, state, 5);  // rows 5..8: the fourth trip reads row 8 of 8
  EXPECT_THAT([&] { isa::interpret(p, state, hw); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr(
                  "operand 'src': scalar_offset r1 = 512 puts elements 512..575 outside tensor 'table' (512 elements) "
                  "[dynamic-offset-bounds]")));
  EXPECT_THAT([&] { simulate(p, hw, "test", SimOptions{}, [&](uint32_t, isa::CoreState& s) { load(p, s, 5); }); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("(line 13) dma_copy: operand 'src': scalar_offset r1")));
  // On chip the bound is the tensor's elements per partition.
  isa::Program sbuf = isa::parse_tasm(std::string(kHeader) +
                                          "register_move dst=r2, imm=240\n"
                                          "tensor_copy dst=row[0:1, 0:32], src=row{offset=0, scalar_offset=r2, ap=[[0, "
                                          "1], [1, 32]]}\n",
                                      "s.tasm");
  isa::CoreState s2(hw.core, sbuf);
  EXPECT_THAT([&] { isa::interpret(sbuf, s2, hw); },
              testing::ThrowsMessage<isa::IsaError>(
                  HasSubstr("puts elements 240..271 outside tensor 'row' (256 elements per partition) [dynamic-offset-bounds]")));
}

// NKI oob_mode=skip (nki-library's bwmm points a block's weight load one expert past the end to skip it): a DMA whose
// register-addressed side lands outside its tensor moves nothing, in the interpreter and the simulator, and costs
// what a DMA of no bytes costs (its fixed overhead).
TEST(DynamicAddress, WithOobModeSkipAnOffsetOutsideTheTensorMovesNothing) {
  auto program = [](const std::string& oob) {
    return isa::parse_tasm(std::string(kHeader) +
                               "memset dst=row, value=3.0\n"
                               "dma_copy dst=kk, src=k\nregister_load dst=r0, src=kk\nregister_mul dst=r1, src=r0, imm=64\n"
                               "dma_copy dst=row[0:1, 0:64], src=table{offset=0, scalar_offset=r1, ap=[[64, 1], [1, 64]]}, "
                               "dge_mode=hwdge" + oob + "\n"
                               "dma_copy dst=out, src=row\n",
                           "skip.tasm");
  };
  isa::Program p = program(", oob_mode=skip");
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  for (int32_t k : {2, 8, -1}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    std::vector<float> want(256, 3.0f);
    if (k >= 0 && k < 8) {
      for (int j = 0; j < 64; ++j) want[size_t(j)] = table_values()[size_t(k * 64 + j)];
    }
    isa::CoreState state(hw.core, p);
    load(p, state, k);
    isa::interpret(p, state, hw);
    EXPECT_EQ(as_floats(state.hbm(uint32_t(p.find_allocation("out")))), want);
    SimResult r = simulate(p, hw, "test", SimOptions{}, [&](uint32_t, isa::CoreState& s) { load(p, s, k); });
    EXPECT_EQ(as_floats(r.states.at(0)->hbm(uint32_t(p.find_allocation("out")))), want);
    EXPECT_EQ(r.stats.instructions["dma_copy"], 3u);
  }
  // Without skip the same offset is an error; read-add-write takes oob_mode=error only.
  isa::Program strict = program("");
  EXPECT_THAT([&] { simulate(strict, hw, "test", SimOptions{}, [&](uint32_t, isa::CoreState& s) { load(strict, s, 8); }); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("[dynamic-offset-bounds]")));
  EXPECT_THAT([&] { isa::check_program(program(", oob_mode=skip, dst_rmw_op=add"), hw); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("read-add-write takes oob_mode=error only")));
}

TEST(DynamicAddress, ADmaWithARegisterAddressNamesItsDescriptorGenerator) {
  isa::Program p = isa::parse_tasm(std::string(kHeader) +
                                       "dma_copy dst=row[0:1, 0:64], src=table{offset=0, scalar_offset=r1, ap=[[64, 1], "
                                       "[1, 64]]}\n",
                                   "p.tasm");
  EXPECT_THAT([&] { isa::check_program(p, trn2()); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("dge_mode=hwdge or dge_mode=swdge [dynamic-address-dge]")));
}

TEST(DynamicAddress, TextAndJsonFormsKeepTheRegister) {
  isa::Program p = isa::parse_tasm(dynamic_rows(), "rows.tasm");
  std::string printed = isa::print_tasm(p);
  EXPECT_THAT(printed, HasSubstr("src=table{offset=0, scalar_offset=r1, ap=[[64, 1], [1, 64]]}"));
  EXPECT_EQ(isa::print_tasm(isa::parse_tasm(printed, "printed.tasm")), printed);
  EXPECT_EQ(isa::print_tasm(isa::parse_json_lines(isa::to_json_lines(p), "p.jsonl")), printed);
  for (const char* bad : {"r64", "x1", "r"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT([&] {
      isa::parse_tasm(std::string(kHeader) + "dma_copy dst=row[0:1, 0:64], src=table{offset=0, scalar_offset=" + bad +
                          ", ap=[[64, 1], [1, 64]]}, dge_mode=hwdge\n",
                      "bad.tasm");
    },
                testing::ThrowsMessage<isa::IsaError>(HasSubstr("scalar_offset must name a register r0..r63")));
  }
}

TEST(DynamicAddress, RegisterMulWrapsAtThirtyTwoBits) {
  isa::Program p = isa::parse_tasm("target trn2\nregister_move dst=r0, imm=100000\n"
                                   "register_mul dst=r1, src=r0, imm=100000\nregister_mul dst=r2, src=r0, src2=r0\n",
                                   "m.tasm");
  HardwareConfig hw = trn2();
  isa::CoreState state(hw.core, p);
  isa::interpret(p, state, hw);
  EXPECT_EQ(state.registers()[1], 1410065408);  // 10^10 mod 2^32, as NKI documents for int32 scalars
  EXPECT_EQ(state.registers()[2], 1410065408);
}

}  // namespace
}  // namespace trnsim::sim
