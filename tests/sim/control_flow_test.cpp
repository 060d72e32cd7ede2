// Registers and structured control flow (isa/control_flow.h): loops give the values and the simulated time
// of the same program written out by hand; trip counts from tensor values; text form; legality.
#include "isa/control_flow.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>

#include "config/config_loader.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "sim/program_run.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

using testing::HasSubstr;

HardwareConfig trn2() { return load_config("trn2", {}).hardware; }

const char* const kHeader = R"(kernel loops
target trn2
hbm n : int32[1, 1] input
hbm in : fp32[128, 2048] input
hbm out : fp32[128, 2048] output
hbm trips : int32[1, 1] output
sbuf cnt : int32[1, 1]
sbuf x : fp32[128, 2048]
sbuf y : fp32[128, 2048]
dma_copy dst=x, src=in
)";

const char* const kBody =
    "tensor_scalar dst=x, data=x, op0=multiply, operand0=0.5, op1=add, operand1=1.0\n"
    "tensor_tensor dst=y, data1=x, data2=y, op=add\n";

std::string repeat(const std::string& text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

// A counted loop of 4 and the same body written out 4 times.
std::string counted_loop() {
  return std::string(kHeader) + "loop_begin count=4\n" + kBody + "loop_end\ndma_copy dst=out, src=y\n";
}
std::string counted_unrolled() { return std::string(kHeader) + repeat(kBody, 4) + "dma_copy dst=out, src=y\n"; }

// A while loop whose trip count is the value of HBM tensor n (register_load), counting its iterations in r1.
const char* const kWhileBody = "register_add dst=r0, src=r0, imm=-1\nregister_add dst=r1, src=r1, imm=1\n";
std::string while_loop() {
  return std::string(kHeader) +
         "dma_copy dst=cnt, src=n\nregister_load dst=r0, src=cnt\nregister_move dst=r1, imm=0\n"
         "while_begin cond=r0\n" +
         kBody + kWhileBody +
         "while_end\n"
         "register_store dst=cnt, src=r1\ndma_copy dst=trips, src=cnt\ndma_copy dst=out, src=y\n";
}
std::string while_unrolled(int trips) {
  return std::string(kHeader) +
         "dma_copy dst=cnt, src=n\nregister_load dst=r0, src=cnt\nregister_move dst=r1, imm=0\n" +
         repeat(std::string(kBody) + kWhileBody, trips) +
         "register_store dst=cnt, src=r1\ndma_copy dst=trips, src=cnt\ndma_copy dst=out, src=y\n";
}

std::vector<uint8_t> int32_bytes(int32_t value) {
  std::vector<uint8_t> bytes(4);
  std::memcpy(bytes.data(), &value, 4);
  return bytes;
}

std::vector<uint8_t> input_bytes() {
  std::vector<float> values(128 * 2048);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 97) * 0.25f - 3.0f;
  std::vector<uint8_t> bytes(values.size() * 4);
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

struct Outputs {
  std::vector<uint8_t> out, trips;
};

void load_inputs(const isa::Program& p, isa::CoreState& state, int32_t n) {
  state.hbm(uint32_t(p.find_allocation("n"))) = int32_bytes(n);
  state.hbm(uint32_t(p.find_allocation("in"))) = input_bytes();
}

Outputs interpret(const isa::Program& p, int32_t n) {
  HardwareConfig hw = trn2();
  isa::CoreState state(hw.core, p);
  load_inputs(p, state, n);
  isa::interpret(p, state, hw);
  return {state.hbm(uint32_t(p.find_allocation("out"))), state.hbm(uint32_t(p.find_allocation("trips")))};
}

SimResult simulate_program(const isa::Program& p, int32_t n, bool timing_only) {
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  SimOptions options;
  options.timing_only = timing_only;
  return simulate(p, hw, "test", options, [&](uint32_t, isa::CoreState& state) { load_inputs(p, state, n); });
}

TEST(ControlFlow, CountedLoopEqualsTheUnrolledProgramInValuesAndTime) {
  isa::Program loop = isa::parse_tasm(counted_loop(), "loop.tasm");
  isa::Program unrolled = isa::parse_tasm(counted_unrolled(), "unrolled.tasm");
  EXPECT_TRUE(isa::has_control_flow(loop));
  EXPECT_FALSE(isa::control_depends_on_values(loop));
  EXPECT_EQ(interpret(loop, 0).out, interpret(unrolled, 0).out);

  for (bool timing_only : {true, false}) {
    SCOPED_TRACE(timing_only ? "timing only" : "values");
    SimResult a = simulate_program(loop, 0, timing_only), b = simulate_program(unrolled, 0, timing_only);
    EXPECT_GT(b.stats.total_ns, 0);
    EXPECT_DOUBLE_EQ(a.stats.total_ns, b.stats.total_ns);
    EXPECT_EQ(a.stats.instructions["tensor_scalar"], 4u);
    EXPECT_EQ(a.stats.instructions["loop_begin"], 1u);
    EXPECT_EQ(a.stats.instructions["loop_end"], 4u);
    if (!timing_only) {
      uint32_t out = uint32_t(loop.find_allocation("out"));
      EXPECT_EQ(a.states.at(0)->hbm(out), b.states.at(0)->hbm(out));
      EXPECT_EQ(a.states.at(0)->hbm(out), interpret(loop, 0).out);
    }
  }
}

TEST(ControlFlow, EachCoreOfAnSpmdRunFollowsItsOwnInputs) {
  isa::Program loop = isa::parse_tasm(while_loop(), "while.tasm");
  HardwareConfig hw = trn2();
  SimOptions options;
  options.cores = {0, 1};
  // Core 0 runs 1 iteration, core 1 runs 3: as the two unrolled programs on the two cores (which share HBM
  // bandwidth, so not as either alone).
  SimResult spmd = simulate(loop, hw, "test", options,
                            [&](uint32_t core, isa::CoreState& state) { load_inputs(loop, state, core == 0 ? 1 : 3); });
  EXPECT_EQ(spmd.stats.instructions["while_end"], 4u);
  EXPECT_EQ(spmd.states.at(0)->hbm(uint32_t(loop.find_allocation("trips"))), int32_bytes(1));
  EXPECT_EQ(spmd.states.at(1)->hbm(uint32_t(loop.find_allocation("trips"))), int32_bytes(3));
  isa::Program one = isa::parse_tasm(while_unrolled(1), "one.tasm"),
               three = isa::parse_tasm(while_unrolled(3), "three.tasm");
  SimResult unrolled = simulate(
      {&one, &three}, hw, "test", options,
      [&](uint32_t core, isa::CoreState& state) { load_inputs(one, state, core == 0 ? 1 : 3); },
      /*shared_hbm=*/false);
  EXPECT_GT(unrolled.stats.total_ns, 0);
  EXPECT_NEAR(spmd.stats.total_ns, unrolled.stats.total_ns, 1e-6);
}

TEST(ControlFlow, ExpansionKeepsSourceLinesAndNestsLoops) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nsbuf x : fp32[128, 8]\n"
      "loop_begin count=2\n"
      "  loop_begin count=3\n"
      "    memset dst=x, value=1\n"
      "  loop_end\n"
      "  loop_begin count=0\n"
      "    memset dst=x, value=2\n"
      "  loop_end\n"
      "loop_end\n",
      "nested.tasm");
  isa::Program expanded = isa::expand_control_flow(p, nullptr);
  int memsets = 0;
  for (const isa::Instruction& inst : expanded.instructions) {
    if (inst.opcode == isa::Opcode::memset) {
      ++memsets;
      EXPECT_EQ(inst.source_line, 5u);  // the skipped loop's body (line 8) never runs
    }
  }
  EXPECT_EQ(memsets, 6);
  EXPECT_FALSE(isa::has_control_flow(isa::Program{}));
}

TEST(ControlFlow, WhileLoopRunsAsManyIterationsAsTheTensorSays) {
  isa::Program loop = isa::parse_tasm(while_loop(), "while.tasm");
  EXPECT_TRUE(isa::control_depends_on_values(loop));
  for (int32_t n : {0, 1, 3}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    isa::Program unrolled = isa::parse_tasm(while_unrolled(n), "unrolled.tasm");
    Outputs looped = interpret(loop, n), straight = interpret(unrolled, n);
    EXPECT_EQ(looped.trips, int32_bytes(n));
    EXPECT_EQ(looped.out, straight.out);
    EXPECT_EQ(looped.trips, straight.trips);
    // Timing-only runs still read n to know the trip count; both modes give the unrolled program's time. The
    // executed while_begin / while_end are Sync instructions of their own (64 cycles at 1.2 GHz on trn2): off the
    // critical path while the Vector chain is longer; with no iteration the skipped while_begin sits on the Sync
    // queue between register_move and register_store, whose result the last DMA waits for.
    const double markers_ns = n == 0 ? 64 / 1.2 : 0;
    for (bool timing_only : {true, false}) {
      SimResult a = simulate_program(loop, n, timing_only), b = simulate_program(unrolled, n, timing_only);
      EXPECT_NEAR(a.stats.total_ns, b.stats.total_ns + markers_ns, 1e-6) << (timing_only ? "timing only" : "values");
      EXPECT_EQ(a.stats.instructions["tensor_scalar"], uint64_t(n));
      EXPECT_EQ(a.stats.instructions["while_end"], uint64_t(n));
      if (!timing_only) {
        EXPECT_EQ(a.states.at(0)->hbm(uint32_t(loop.find_allocation("trips"))), int32_bytes(n));
        EXPECT_EQ(a.states.at(0)->hbm(uint32_t(loop.find_allocation("out"))), straight.out);
      }
    }
  }
  // Without values the expansion cannot know the trip count and says so.
  EXPECT_THROW(isa::expand_control_flow(loop, nullptr), isa::IsaError);
}

TEST(ControlFlow, LoopCountFromARegisterAndRegisterArithmetic) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nhbm out : int32[1, 1] output\nhbm out16 : int16[1, 1] output\nsbuf r : int32[1, 1]\n"
      "sbuf h : int16[1, 1]\n"
      "register_move dst=r2, imm=5\nregister_move dst=r3, imm=0\nregister_move dst=r4, imm=-2\n"
      "loop_begin count_reg=r2\n"
      "  register_move dst=r2, imm=100\n"  // the count is read when the loop is entered
      "  register_add dst=r3, src=r3, src2=r4\n"
      "loop_end\n"
      "register_store dst=r, src=r3\nregister_store dst=h, src=r3\n"
      "dma_copy dst=out, src=r\ndma_copy dst=out16, src=h\n",
      "count_reg.tasm");
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  isa::CoreState state(hw.core, p);
  isa::interpret(p, state, hw);
  EXPECT_EQ(state.hbm(0), int32_bytes(-10));
  std::vector<uint8_t> h(2);
  int16_t minus_ten = -10;
  std::memcpy(h.data(), &minus_ten, 2);
  EXPECT_EQ(state.hbm(1), h);
  EXPECT_EQ(state.registers()[3], -10);
  EXPECT_EQ(state.registers()[2], 100);
}

// nl.fori_loop(lower, upper) with bounds from a tensor, both ways: a counted loop of upper - lower, and a while
// loop on i < upper; each sums its induction variable.
TEST(ControlFlow, ForiLoopWithTensorBoundsAsCountedAndAsWhileLoop) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nhbm bounds : int32[1, 2] input\nhbm out : int32[1, 2] output\nsbuf b : int32[1, 2]\n"
      "dma_copy dst=b, src=bounds\n"
      "register_load dst=r0, src=b[0:1, 0:1]\nregister_load dst=r1, src=b[0:1, 1:2]\n"
      // counted: count = upper - lower, i from lower
      "register_sub dst=r2, src=r1, src2=r0\nregister_move dst=r3, src=r0\nregister_move dst=r4, imm=0\n"
      "loop_begin count_reg=r2\n"
      "  register_add dst=r4, src=r4, src2=r3\n  register_add dst=r3, src=r3, imm=1\n"
      "loop_end\n"
      // while i < upper
      "register_move dst=r5, src=r0\nregister_move dst=r6, imm=0\n"
      "register_compare dst=r7, src=r5, op=less, src2=r1\n"
      "while_begin cond=r7\n"
      "  register_add dst=r6, src=r6, src2=r5\n  register_add dst=r5, src=r5, imm=1\n"
      "  register_compare dst=r7, src=r5, op=less, src2=r1\n"
      "while_end\n"
      "register_store dst=b[0:1, 0:1], src=r4\nregister_store dst=b[0:1, 1:2], src=r6\n"
      "dma_copy dst=out, src=b\n",
      "fori.tasm");
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  for (auto [lower, upper] : {std::pair{3, 7}, std::pair{-2, 2}, std::pair{5, 5}, std::pair{6, 1}}) {
    SCOPED_TRACE(std::to_string(lower) + ".." + std::to_string(upper));
    isa::CoreState state(hw.core, p);
    std::vector<uint8_t> bytes = int32_bytes(lower), high = int32_bytes(upper);
    bytes.insert(bytes.end(), high.begin(), high.end());
    state.hbm(0) = bytes;
    if (upper < lower) {
      // The counted form's count is negative: an error (issue 42), where the while form runs no iteration.
      EXPECT_THAT([&] { isa::interpret(p, state, hw); },
                  testing::ThrowsMessage<isa::IsaError>(HasSubstr("count_reg r2 holds -5")));
      continue;
    }
    isa::interpret(p, state, hw);
    int32_t sum = 0;
    for (int32_t i = lower; i < upper; ++i) sum += i;
    std::vector<uint8_t> expected = int32_bytes(sum), second = int32_bytes(sum);
    expected.insert(expected.end(), second.begin(), second.end());
    EXPECT_EQ(state.hbm(1), expected);
  }
}

TEST(ControlFlow, RegisterLoadKeepsEveryBitOfAn32BitInteger) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nhbm in : uint32[1, 1] input\nhbm out : int32[1, 1] output\nsbuf v : uint32[1, 1]\n"
      "sbuf w : int32[1, 1]\ndma_copy dst=v, src=in\nregister_load dst=r7, src=v\n"
      "register_add dst=r7, src=r7, imm=1\nregister_store dst=w, src=r7\ndma_copy dst=out, src=w\n",
      "bits.tasm");
  HardwareConfig hw = trn2();
  isa::check_program(p, hw);
  isa::CoreState state(hw.core, p);
  state.hbm(0) = int32_bytes(int32_t(0x7fc00001));  // a NaN pattern as fp32
  isa::interpret(p, state, hw);
  EXPECT_EQ(state.hbm(1), int32_bytes(int32_t(0x7fc00002)));
  EXPECT_EQ(state.registers()[7], int32_t(0x7fc00002));
}

TEST(ControlFlow, TextAndJsonFormsRoundTrip) {
  isa::Program p = isa::parse_tasm(while_loop(), "while.tasm");
  std::string printed = isa::print_tasm(p);
  EXPECT_THAT(printed, HasSubstr("register_load dst=r0, src=cnt\n"));
  EXPECT_THAT(printed, HasSubstr("while_begin cond=r0\n"));
  EXPECT_THAT(printed, HasSubstr("register_add dst=r0, src=r0, imm=-1\n"));
  EXPECT_EQ(isa::print_tasm(isa::parse_tasm(printed, "printed.tasm")), printed);
  EXPECT_EQ(isa::print_tasm(isa::parse_json_lines(isa::to_json_lines(p), "p.jsonl")), printed);
}

std::string legality_error(const std::string& text) {
  isa::Program p = isa::parse_tasm("target trn2\nsbuf f : fp32[1, 1]\nsbuf i : int32[2, 2]\n" + text, "bad.tasm");
  try {
    isa::check_program(p, trn2());
  } catch (const isa::IsaError& e) {
    return e.what();
  }
  return "";
}

TEST(ControlFlow, LegalityNamesTheInstructionAndTheRule) {
  EXPECT_THAT(legality_error("loop_begin count=2\nmemset dst=f, value=0\n"),
              HasSubstr("instruction 0 (line 4) loop_begin: never ended [control-nesting]"));
  EXPECT_THAT(legality_error("loop_end\n"),
              HasSubstr("instruction 0 (line 4) loop_end: no open loop_begin to end [control-nesting]"));
  EXPECT_THAT(legality_error("register_move dst=r1, imm=1\nwhile_begin cond=r1\nloop_end\n"),
              HasSubstr("instruction 2 (line 6) loop_end: ends the while_begin of instruction 1; it needs while_end "
                        "[control-nesting]"));
  EXPECT_THAT(legality_error("register_move dst=r64, imm=1\n"),
              HasSubstr("instruction 0 (line 4) register_move: operand 'dst': register r64 does not exist (the "
                        "register file has r0..r63) [register-index]"));
  EXPECT_THAT(legality_error("register_load dst=r0, src=f\n"),
              HasSubstr("instruction 0 (line 4) register_load: operand 'src' is fp32; a register moves an integer "
                        "dtype (int8/16/32, uint8/16/32) [register-tensor]"));
  EXPECT_THAT(legality_error("register_store dst=i, src=r0\n"),
              HasSubstr("register_store: operand 'dst' has 4 elements; a register moves one [register-tensor]"));
  EXPECT_THAT(
      legality_error("loop_begin count=1, count_reg=r0\nloop_end\n"),
      HasSubstr("loop_begin: give exactly one of count (an immediate) and count_reg (a register) [loop-count]"));
  EXPECT_THAT(legality_error("register_move dst=r0, imm=4294967296\n"), HasSubstr("[register-immediate]"));
  // The interpreter refuses the same without a legality check.
  isa::Program unbalanced = isa::parse_tasm("target trn2\nloop_begin count=1\n", "u.tasm");
  HardwareConfig hw = trn2();
  isa::CoreState state(hw.core, unbalanced);
  EXPECT_THAT([&] { isa::interpret(unbalanced, state, hw); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("loop_begin: never ended [control-nesting]")));
}

TEST(ControlFlow, ParserRejectsMalformedRegisters) {
  for (const char* bad : {"register_move dst=3, imm=1", "register_move dst=r, imm=1", "register_move dst=r-1, imm=1",
                          "register_move dst=x3, imm=1", "register_move dst=r 3, imm=1", "while_begin cond=r1.5"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT([&] { isa::parse_tasm(std::string("target trn2\n") + bad + "\n", "bad.tasm"); },
                testing::ThrowsMessage<isa::IsaError>(HasSubstr("expected a register like r0")));
  }
}

TEST(ControlFlow, RunPreparedNeedsTheInputsThatLoopsReadEvenTimingOnly) {
  PreparedProgram prepared = prepare_program(isa::parse_tasm(while_loop(), "while.tasm"), "while.tasm", "trn2", {});
  SimOptions options;
  options.timing_only = true;
  EXPECT_THAT([&] { run_prepared(prepared, {}, options); },
              testing::ThrowsMessage<RunUsageError>(HasSubstr("missing: n: int32[1, 1], in: fp32[128, 2048]")));
  const isa::Program& p = prepared.program;
  SimResult result = run_prepared(
      prepared,
      {{uint32_t(p.find_allocation("n")), int32_bytes(2)}, {uint32_t(p.find_allocation("in")), input_bytes()}},
      options);
  EXPECT_EQ(result.stats.instructions["while_end"], 2u);
}

TEST(ControlFlow, AnEndlessWhileLoopIsAnError) {
  isa::Program p =
      isa::parse_tasm("target trn2\nregister_move dst=r0, imm=1\nwhile_begin cond=r0\nwhile_end\n", "w.tasm");
  EXPECT_THAT([&] { isa::expand_control_flow(p, nullptr); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("more than 2^24 instructions")));
}

// ---- issue 42 K1: a loop that never ends costs a bounded amount of work ----

// Calls of `execute` before walk_control_flow throws; -1 when it does not.
int64_t executed_before_error(const isa::Program& p, const isa::ExecutionLimits& limits, std::string* message) {
  isa::RegisterFile registers{};
  int64_t executed = 0;
  try {
    isa::walk_control_flow(
        p, registers,
        [&](size_t i) {
          ++executed;
          isa::execute_register_only(p.instructions[i], registers);
        },
        limits);
  } catch (const isa::IsaError& e) {
    *message = e.what();
    return executed;
  }
  return -1;
}

const char* const kCountdownFromMinusOne =  // cond != 0 for 2^32 - 1 iterations
    "target trn2\nregister_move dst=r0, imm=-1\nwhile_begin cond=r0\nregister_add dst=r0, src=r0, imm=-1\n"
    "while_end\n";

TEST(ExecutionLimits, AStaticLoopPastTheBudgetIsRefusedBeforeItsFirstIteration) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nloop_begin count=4294967295\nregister_add dst=r0, src=r0, imm=1\nloop_end\n", "forever.tasm");
  std::string message;
  EXPECT_EQ(executed_before_error(p, {}, &message), 1);  // the loop_begin alone: refused from its count
  EXPECT_THAT(message, HasSubstr("instruction 0 (line 2) loop_begin: count 4294967295 runs at least 4294967295 "
                                 "instructions after the 1 executed so far: more than 2^24 instructions"));
  EXPECT_THAT(message, HasSubstr("[execution-limit]"));
  // The timing model expands loops first: the same refusal, before any instruction is scheduled.
  SimOptions options;
  options.timing_only = true;
  EXPECT_THAT([&] { simulate(p, trn2(), "test", options); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("count 4294967295 runs at least")));
}

TEST(ExecutionLimits, TheInstructionBudgetIsConfigurable) {
  // 1 + count x (body + loop_end) instructions.
  auto loop = [](int count) {
    return isa::parse_tasm("target trn2\nloop_begin count=" + std::to_string(count) +
                               "\nregister_add dst=r0, src=r0, imm=1\nloop_end\n",
                           "loop.tasm");
  };
  isa::ExecutionLimits limits;
  limits.max_instructions = 100;
  std::string message;
  EXPECT_EQ(executed_before_error(loop(49), limits, &message), -1);  // 99 instructions
  EXPECT_EQ(executed_before_error(loop(50), limits, &message), 100);  // the 101st is refused
  EXPECT_THAT(message, HasSubstr("the program executes more than 100 instructions (the instruction budget: trnsim "
                                 "run --max-instructions"));
  // Through the interpreter's and the simulator's options.
  const HardwareConfig hw = trn2();
  isa::Program forever = isa::parse_tasm(kCountdownFromMinusOne, "countdown.tasm");
  isa::CoreState state(hw.core, forever);
  isa::InterpreterOptions interpreter;
  interpreter.limits = limits;
  EXPECT_THAT([&] { isa::interpret(forever, state, hw, interpreter); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("more than 100 instructions")));
  for (bool timing_only : {true, false}) {
    SimOptions options;
    options.timing_only = timing_only;
    options.interpreter.limits = limits;
    EXPECT_THAT([&] { simulate(forever, hw, "test", options); },
                testing::ThrowsMessage<isa::IsaError>(HasSubstr("more than 100 instructions")));
  }
}

TEST(ExecutionLimits, AWhileLoopIsStoppedByTheHostTimeBudget) {
  isa::Program p = isa::parse_tasm(kCountdownFromMinusOne, "countdown.tasm");
  isa::ExecutionLimits limits;
  limits.max_instructions = uint64_t{1} << 40;  // out of reach: the host time stops it
  limits.max_host_seconds = 0.2;
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  const int64_t executed = executed_before_error(p, limits, &message);
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(executed, 0);
  EXPECT_EQ(executed % int64_t(isa::kHostTimeCheckInterval), int64_t(isa::kHostTimeCheckInterval) - 1);
  EXPECT_THAT(message, HasSubstr("s of host time (the host-time budget: trnsim run --max-host-seconds"));
  EXPECT_THAT(message, HasSubstr("[execution-limit]"));
  EXPECT_GE(host_s, 0.2);
  EXPECT_LT(host_s, 30);  // 2^32 iterations would take minutes
}

TEST(ExecutionLimits, ANegativeCountRegisterIsAnError) {
  isa::Program p = isa::parse_tasm(
      "target trn2\nregister_move dst=r2, imm=-1\nloop_begin count_reg=r2\nregister_add dst=r0, src=r0, imm=1\n"
      "loop_end\n",
      "negative.tasm");
  EXPECT_THAT([&] { isa::expand_control_flow(p, nullptr); },
              testing::ThrowsMessage<isa::IsaError>(
                  HasSubstr("instruction 1 (line 3) loop_begin: count_reg r2 holds -1: a loop count must be 0 or "
                            "more [loop-count]")));
  const HardwareConfig hw = trn2();
  isa::CoreState state(hw.core, p);
  EXPECT_THAT([&] { isa::interpret(p, state, hw); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("count_reg r2 holds -1")));
  // Zero is an empty loop, as before.
  isa::Program zero = isa::parse_tasm(
      "target trn2\nregister_move dst=r2, imm=0\nloop_begin count_reg=r2\nregister_add dst=r0, src=r0, imm=1\n"
      "loop_end\n",
      "zero.tasm");
  EXPECT_EQ(isa::expand_control_flow(zero, nullptr).instructions.size(), 2u);  // register_move, loop_begin
}

}  // namespace
}  // namespace trnsim::sim
