// Every legality rule with its message, on programs built through the builder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/core_state.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"

namespace trnsim::isa {
namespace {

using ::testing::HasSubstr;

const HardwareConfig& config(const char* name) {
  static const HardwareConfig trn1 = load_config("trn1").hardware;
  static const HardwareConfig trn2 = load_config("trn2").hardware;
  static const HardwareConfig trn3 = load_config("trn3").hardware;
  std::string n = name;
  return n == "trn1" ? trn1 : n == "trn3" ? trn3 : trn2;
}

std::vector<std::string> issues(const Program& program, const char* generation = "trn2") {
  std::vector<std::string> messages;
  for (const LegalityIssue& issue : find_legality_issues(program, config(generation))) {
    messages.push_back(format_legality_issue(program, issue));
  }
  return messages;
}

// A legal 128x128x512 matmul: the baseline each test breaks in one way.
struct MatmulProgram {
  ProgramBuilder b{"mm", Generation::trn2};
  uint32_t w, x, acc;
  explicit MatmulProgram(Generation generation = Generation::trn2, DType in = DType::bf16)
      : b("mm", generation) {
    w = b.sbuf("w", in, {128, 128});
    x = b.sbuf("x", in, {128, 512});
    acc = b.psum("acc", DType::fp32, {128, 512});
  }
  InstructionBuilder matmul() {
    return b.emit(Opcode::nc_matmul, 7).tensor("dst", b.view(acc)).tensor("stationary", b.view(w)).tensor(
        "moving", b.view(x));
  }
};

// The Vector engine reads at most 4K elements of a PSUM partition, but a broadcast may stream more than it spans:
// nki-library's layernorm_tkg subtracts a [H0, BxS] PSUM mean broadcast over H1 (BxS * H1 > 4K elements).
TEST(Legality, PsumLimitIsTheSpanNotTheStreamedCount) {
  const std::string head =
      "kernel k\ntarget trn2\nsbuf s : fp32[128, 12288]\npsum m : fp32[128, 512]\npsum w : bf16[128, 6144]\n";
  Program broadcast = parse_tasm(
      head + "tensor_tensor dst=s, data1=s, data2=m{offset=0, ap=[[0, 128], [1, 512], [0, 24]]}, op=subtract\n",
      "case.tasm");
  EXPECT_THAT(issues(broadcast), ::testing::IsEmpty());
  Program wide = parse_tasm(head + "tensor_copy dst=s{offset=0, ap=[[0, 128], [1, 6144]]}, src=w\n", "case.tasm");
  EXPECT_THAT(issues(wide), ::testing::Contains(HasSubstr("spans 6144 elements of each partition; the vector engine "
                                                          "takes at most 4096 from psum [free-size]")));
}

// The 16-bit access-pattern fields bind the engines' on-chip patterns; a DMA's HBM side is descriptors, and
// core_barrier names a whole output tensor (nki-library's qkv_cte: 1.3M elements in one run).
TEST(Legality, HbmRunsLongerThanAnAccessPatternDim) {
  Program program = parse_tasm(
      "kernel k\ntarget trn2\nhbm big : bf16[1310720] output\nsbuf t : bf16[128, 10240]\n"
      "dma_copy dst=big{offset=0, ap=[[1310720, 1], [1, 1310720]]}, src=t\n"
      "core_barrier data=big, cores=[0, 1], engine=gpsimd\n"
      "tensor_copy dst=t{offset=0, ap=[[0, 128], [0, 70000]]}, src=t{offset=0, ap=[[0, 128], [0, 70000]]}\n",
      "case.tasm");
  std::vector<std::string> found = issues(program);
  for (const std::string& issue : found) {
    EXPECT_THAT(issue, ::testing::Not(HasSubstr("operand 'dst': free dim 0 has 1310720"))) << issue;
    EXPECT_THAT(issue, ::testing::Not(HasSubstr("operand 'data'"))) << issue;
  }
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("free dim 0 has 70000 elements; an access-pattern dim holds at "
                                                   "most 65535 [ap-dim-size]")));
}

TEST(Legality, LegalMatmulHasNoIssues) {
  MatmulProgram p;
  p.matmul();
  EXPECT_THAT(issues(p.b.program()), ::testing::IsEmpty());
  EXPECT_NO_THROW(check_program(p.b.program(), config("trn2")));
}

TEST(Legality, MatmulShapeLimits) {
  MatmulProgram p;
  uint32_t wide = p.b.sbuf("wide", DType::bf16, {128, 1024});
  uint32_t big_acc = p.b.psum("big", DType::fp32, {128, 1024});
  p.b.emit(Opcode::nc_matmul, 9)
      .tensor("dst", p.b.view(big_acc))
      .tensor("stationary", p.b.view(p.w))
      .tensor("moving", p.b.view(wide));
  auto found = issues(p.b.program());
  EXPECT_THAT(found, ::testing::Contains(
                         "instruction 0 (line 9) nc_matmul: moving free size 1024 exceeds the 512 allowed with a fp32 "
                         "PSUM output on trn2 [matmul-moving-size]"));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("cross a 2048-byte PSUM bank boundary [psum-bank-crossing]")));
  // trn3 takes moving up to 4096 with an fp32 PSUM output (ISA nc_matmul v4).
  MatmulProgram p3(Generation::trn3);
  uint32_t wide3 = p3.b.sbuf("wide", DType::bf16, {128, 1024});
  uint32_t acc3 = p3.b.psum("big", DType::fp32, {128, 1024});
  p3.b.emit(Opcode::nc_matmul).tensor("dst", p3.b.view(acc3)).tensor("stationary", p3.b.view(p3.w)).tensor(
      "moving", p3.b.view(wide3));
  EXPECT_THAT(issues(p3.b.program(), "trn3"), ::testing::IsEmpty());
}

TEST(Legality, MatmulMemoriesAndDtypes) {
  MatmulProgram p;
  uint32_t out_sbuf = p.b.sbuf("out", DType::fp32, {128, 512});
  p.b.emit(Opcode::nc_matmul).tensor("dst", p.b.view(out_sbuf)).tensor("stationary", p.b.view(p.w)).tensor(
      "moving", p.b.view(p.x));
  EXPECT_THAT(issues(p.b.program()), ::testing::Contains(HasSubstr("dst must be in PSUM [matmul-memory]")));

  MatmulProgram mixed;
  uint32_t x32 = mixed.b.sbuf("x32", DType::fp32, {128, 512});
  mixed.b.emit(Opcode::nc_matmul).tensor("dst", mixed.b.view(mixed.acc)).tensor("stationary", mixed.b.view(mixed.w))
      .tensor("moving", mixed.b.view(x32));
  EXPECT_THAT(issues(mixed.b.program()),
              ::testing::Contains(HasSubstr("if one input is fp32/tf32 the other must be too [matmul-dtype-mix]")));

  MatmulProgram mx(Generation::trn2, DType::mxfp8_e4m3);
  mx.matmul();
  EXPECT_THAT(issues(mx.b.program()),
              ::testing::Contains(HasSubstr("the Tensor engine of trn2 does not take mxfp8_e4m3 [matmul-dtype]")));

  MatmulProgram bf16_out;
  uint32_t acc16 = bf16_out.b.psum("acc16", DType::bf16, {128, 512});
  bf16_out.b.emit(Opcode::nc_matmul).tensor("dst", bf16_out.b.view(acc16)).tensor("stationary", bf16_out.b.view(bf16_out.w))
      .tensor("moving", bf16_out.b.view(bf16_out.x));
  EXPECT_THAT(issues(bf16_out.b.program()),
              ::testing::Contains(HasSubstr("dst dtype bf16 is not a PSUM output of the trn2 Tensor engine")));
}

TEST(Legality, TransposeModeWritesTheInputDtypeToPsum) {
  // Transpose mode passes bf16 through the array into PSUM on trn2, although an ordinary matmul may
  // not write bf16 there before trn3.
  ProgramBuilder b("transpose_mode", Generation::trn2);
  uint32_t data = b.sbuf("data", DType::bf16, {128, 128});
  uint32_t identity = b.sbuf("identity", DType::bf16, {128, 128});
  uint32_t out = b.psum("out", DType::bf16, {128, 128});
  b.emit(Opcode::nc_matmul).tensor("dst", b.view(out)).tensor("stationary", b.view(data))
      .tensor("moving", b.view(identity)).imm("is_transpose", 1);
  EXPECT_THAT(issues(b.program()), ::testing::IsEmpty());
}

TEST(Legality, DoubleRowNeedsFp8AndAGenerationThatHasIt) {
  MatmulProgram p(Generation::trn1);
  p.matmul().word("perf_mode", "double_row");
  EXPECT_THAT(issues(p.b.program(), "trn1"),
              ::testing::Contains(HasSubstr("double_row mode does not take bf16 (no double_row mode on this generation)")));
}

TEST(Legality, PartitionStartAlignment) {
  ProgramBuilder b("align", Generation::trn2);
  uint32_t t = b.sbuf("t", DType::fp32, {128, 64});
  uint32_t u = b.sbuf("u", DType::fp32, {128, 64});
  auto copy = [&](int64_t start, int64_t stop) {
    b.emit(Opcode::tensor_copy)
        .tensor("dst", b.view(t, {Slice::range(start, stop)}))
        .tensor("src", b.view(u, {Slice::range(start, stop)}));
  };
  copy(0, 128);   // ok
  copy(64, 128);  // 64 partitions at 64: ok
  copy(96, 128);  // 32 at 96: ok
  copy(32, 96);   // 64 partitions at 32: illegal
  copy(16, 32);   // 16 at 16: illegal
  copy(1, 128);   // 127 at 1: illegal
  auto found = issues(b.program());
  ASSERT_EQ(found.size(), 6u);  // dst and src of the three illegal copies
  EXPECT_EQ(found[0],
            "instruction 3 tensor_copy: operand 'dst': 64 partitions may not start at partition 32 (allowed: "
            "multiples of 64) [partition-start-alignment]");
  EXPECT_THAT(found[2], HasSubstr("16 partitions may not start at partition 16 (allowed: multiples of 32)"));
  EXPECT_THAT(found[4], HasSubstr("127 partitions may not start at partition 1 (allowed: multiples of 128)"));
}

TEST(Legality, DmaWritesAnyPartition) {
  // The start-partition rule is the compute engines' lane wiring; DMA addresses partitions as rows.
  ProgramBuilder b("dma_rows", Generation::trn2);
  uint32_t h = b.hbm("h", DType::fp32, {4, 64}, AllocationRole::input);
  uint32_t t = b.sbuf("t", DType::fp32, {128, 64});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(t, {Slice::range(5, 9)})).tensor("src", b.view(h));
  EXPECT_THAT(issues(b.program()), ::testing::IsEmpty());
}

TEST(Legality, EngineMemoryRules) {
  ProgramBuilder b("mem", Generation::trn2);
  uint32_t acc = b.psum("acc", DType::fp32, {128, 512});
  uint32_t t = b.sbuf("t", DType::fp32, {128, 512});
  uint32_t h = b.hbm("h", DType::fp32, {128, 512});
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(t)).tensor("src", b.view(acc)).on(Engine::gpsimd);
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(t)).tensor("src", b.view(h));
  b.emit(Opcode::dma_copy).tensor("dst", b.view(h)).tensor("src", b.view(acc));
  auto found = issues(b.program());
  EXPECT_THAT(found, ::testing::Contains("instruction 0 tensor_copy: operand 'src': the gpsimd engine cannot access "
                                         "psum [engine-memory]"));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("instruction 1 tensor_copy: operand 'src': only DMA reaches HBM")));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("instruction 2 dma_copy: operand 'src': the dma engine cannot access "
                                                   "psum")));
}

TEST(Legality, EngineAvailabilityAndDtypesPerGeneration) {
  ProgramBuilder b("gen", Generation::trn1);
  uint32_t t = b.sbuf("t", DType::fp32, {128, 64});
  uint32_t u = b.sbuf("u", DType::fp32, {128, 64});
  b.emit(Opcode::tensor_copy).tensor("dst", b.view(t)).tensor("src", b.view(u)).on(Engine::scalar);
  EXPECT_THAT(issues(b.program(), "trn1"),
              ::testing::Contains("instruction 0 tensor_copy: the scalar engine of trn1 does not run tensor_copy "
                                  "[engine-opcode]"));
  ProgramBuilder c("dtype", Generation::trn2);
  uint32_t f8 = c.sbuf("f8", DType::fp8_e4m3fn, {128, 64});
  uint32_t v = c.sbuf("v", DType::fp32, {128, 64});
  c.emit(Opcode::tensor_copy).tensor("dst", c.view(v)).tensor("src", c.view(f8));
  EXPECT_THAT(issues(c.program()), ::testing::Contains(HasSubstr("the vector engine of trn2 does not handle fp8_e4m3fn")));
  EXPECT_THAT(issues(c.program(), "trn3"), ::testing::Contains(HasSubstr("targets trn2 but the config describes trn3")));
}

TEST(Legality, BoundsSizesAndMisc) {
  ProgramBuilder b("misc", Generation::trn2);
  Allocation huge;
  huge.name = "huge";
  huge.space = MemorySpace::sbuf;
  huge.dtype = DType::fp32;
  huge.shape = {128, 60000};
  b.place(huge);
  uint32_t stats_in = b.sbuf("x", DType::fp32, {128, 1024});
  uint32_t stats_out = b.sbuf("s", DType::fp32, {128, 6});
  b.emit(Opcode::bn_stats).tensor("dst", b.view(stats_out)).tensor("data", b.view(stats_in));
  b.emit(Opcode::activation).tensor("dst", b.view(stats_in)).tensor("data", b.view(stats_in)).word("op", "exp")
      .word("reduce_op", "divide");
  b.emit(Opcode::tensor_scalar).tensor("dst", b.view(stats_in)).tensor("data", b.view(stats_in)).word("op0", "subtract")
      .imm("operand0", 1.0).on(Engine::scalar);
  uint32_t bytes_in = b.sbuf("u8", DType::uint8, {128, 1024});
  b.emit(Opcode::dma_transpose).tensor("dst", b.view(stats_out)).tensor("src", b.view(bytes_in));
  auto found = issues(b.program());
  EXPECT_THAT(found, ::testing::Contains("program: sbuf tensor 'huge' needs bytes 0..239999 of each partition, which "
                                         "has 229376 [memory-bounds]"));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("bn_stats takes at most 512 [bn-stats-free-size]")));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("divide is not a reduction operator [reduce-op]")));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("[scalar-engine-ops]")));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("DMA transpose moves 2- and 4-byte dtypes unchanged")));
  EXPECT_THAT(found, ::testing::Contains(HasSubstr("[dma-size]")));
  EXPECT_THROW(check_program(b.program(), config("trn2")), IsaError);
}

TEST(Legality, MissingRequiredOperand) {
  ProgramBuilder b("missing", Generation::trn2);
  uint32_t t = b.sbuf("t", DType::fp32, {128, 64});
  b.emit(Opcode::tensor_copy, 3).tensor("dst", b.view(t));
  EXPECT_THAT(issues(b.program()),
              ::testing::Contains("instruction 0 (line 3) tensor_copy: required operand 'src' is missing "
                                  "[missing-operand]"));
}

// Every shape and operator rule the interpreter asserts on values is also a legality rule, so
// `trnsim run --timing-only` (no interpreter) refuses the same programs as a run with values.
// Each case is one instruction the interpreter rejects; legality must report it under `rule`.
struct InterpreterRule {
  const char* instruction;
  const char* rule;
};

class LegalityMatchesInterpreter : public ::testing::TestWithParam<InterpreterRule> {};

TEST_P(LegalityMatchesInterpreter, BothRejectTheInstruction) {
  const InterpreterRule& c = GetParam();
  std::string text = std::string("kernel k\ntarget trn2\n") +
                     "sbuf a : fp32[4, 8]\nsbuf b : fp32[4, 9]\nsbuf c2 : fp32[4, 2]\nsbuf d3 : fp32[3, 8]\n"
                     "sbuf col : fp32[4, 1]\nsbuf i : int32[4, 8]\nsbuf h : bf16[4, 8]\npsum p : fp32[4, 4]\n" +
                     c.instruction + "\n";
  Program program = parse_tasm(text, "case.tasm");
  CoreState state(config("trn2").core, program);
  EXPECT_THROW(interpret(program, state, config("trn2")), IsaError) << c.instruction;
  std::vector<std::string> rules;
  for (const LegalityIssue& issue : find_legality_issues(program, config("trn2"))) rules.push_back(issue.rule);
  EXPECT_THAT(rules, ::testing::Contains(c.rule)) << c.instruction;
}

INSTANTIATE_TEST_SUITE_P(
    ShapeAndOperatorRules, LegalityMatchesInterpreter,
    ::testing::Values(
        InterpreterRule{"tensor_tensor dst=a, data1=a, data2=b, op=add", "operand-shape"},
        InterpreterRule{"tensor_tensor dst=a, data1=a, data2=a, op=bitwise_and", "integer-dtype"},
        InterpreterRule{"tensor_scalar dst=a, data=a, op0=add, operand0=c2", "per-partition-operand"},
        InterpreterRule{"tensor_scalar dst=a, data=a, op0=add, operand0=1.0, op1=multiply", "missing-operand"},
        InterpreterRule{"tensor_scalar dst=i, data=i, op0=bitwise_and, operand0=1, op1=add, operand1=1.0", "alu-op"},
        InterpreterRule{"tensor_scalar dst=a, data=a, op0=bitwise_and, operand0=1", "integer-dtype"},
        InterpreterRule{"scalar_tensor_tensor dst=a, data=a, op0=add, operand0=1.0, op1=bitwise_or, operand1=a",
                        "alu-op"},
        InterpreterRule{"scalar_tensor_tensor dst=a, data=a, op0=add, operand0=1.0, op1=add, operand1=b",
                        "operand-shape"},
        InterpreterRule{"activation dst=d3, op=exp, data=a", "operand-shape"},
        InterpreterRule{"activation dst=a, op=exp, data=a, bias=c2", "per-partition-operand"},
        InterpreterRule{"activation_reduce dst=a, op=copy, data=a, reduce_op=add, reduce_res=c2", "operand-shape"},
        InterpreterRule{"activation dst=a, op=exp, data=a, reduce_res=col", "missing-operand"},
        InterpreterRule{"tensor_reduce dst=col, op=add, data=a, axis=[2]", "reduce-axes"},
        InterpreterRule{"tensor_reduce dst=c2, op=add, data=a, axis=[1]", "operand-shape"},
        InterpreterRule{"tensor_reduce dst=col, op=divide, data=a, axis=[1]", "reduce-op"},
        InterpreterRule{"tensor_copy dst=b, src=a", "operand-shape"},
        InterpreterRule{"tensor_copy_predicated dst=a, src=a, predicate=b", "operand-shape"},
        InterpreterRule{"select_reduce dst=a, predicate=a, on_true=b, on_false=0.0", "operand-shape"},
        InterpreterRule{"select_reduce dst=a, predicate=a, on_true=a, on_false=c2", "per-partition-operand"},
        InterpreterRule{"range_select dst=a, on_true_tile=a, comp_op0=add, comp_op1=less, bound0=col, bound1=col",
                        "alu-op"},
        InterpreterRule{"range_select dst=a, on_true_tile=a, comp_op0=greater_equal, comp_op1=less, bound0=c2, "
                        "bound1=col",
                        "operand-shape"},
        InterpreterRule{"tensor_tensor_scan dst=a, data0=a, data1=a, initial=c2, op0=add, op1=add",
                        "per-partition-operand"},
        InterpreterRule{"bn_stats dst=a, data=a", "operand-shape"},
        InterpreterRule{"bn_aggr dst=c2, data=a", "operand-shape"},
        InterpreterRule{"reciprocal dst=b, data=a", "operand-shape"},
        InterpreterRule{"max8 dst=c2, src=a", "operand-shape"},
        InterpreterRule{"max8 dst=c2, src=c2", "operand-shape"},
        InterpreterRule{"nc_find_index8 dst=a, data=a, vals=a", "integer-dtype"},
        InterpreterRule{"iota dst=a, pattern=[[1, 7]]", "pattern"},
        InterpreterRule{"iota dst=a, pattern=[[1, 0]]", "pattern"},
        InterpreterRule{"affine_select dst=a, pattern=[[1, 8]], channel_multiplier=0, on_true_tile=a, "
                        "on_false_value=0, cmp_op=add",
                        "alu-op"},
        InterpreterRule{"affine_select dst=a, pattern=[[1, 8]], channel_multiplier=0, on_true_tile=b, "
                        "on_false_value=0",
                        "operand-shape"},
        InterpreterRule{"tensor_partition_reduce dst=a, op=add, data=a", "operand-shape"},
        InterpreterRule{"nc_transpose dst=p, data=a", "operand-shape"},
        InterpreterRule{"dma_transpose dst=h, src=h", "operand-shape"},
        // The Vector accumulator instructions and the PRNG instructions.
        InterpreterRule{"tensor_scalar_reduce dst=b, data=a, op0=add, operand0=1.0, reduce_op=add", "operand-shape"},
        InterpreterRule{"tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1.0, reduce_op=add, reduce_res=c2",
                        "operand-shape"},
        InterpreterRule{"tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1.0, reduce_op=subtract", "reduce-op"},
        InterpreterRule{"tensor_scalar_reduce dst=i, data=i, op0=bitwise_and, operand0=1, reduce_op=add", "alu-op"},
        InterpreterRule{"tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1.0, reduce_op=add, "
                        "reduce_cmd=load_reduce",
                        "missing-operand"},
        InterpreterRule{"tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1.0, reduce_op=add, reduce_init=col",
                        "reduce-init"},
        InterpreterRule{"tensor_scalar_reduce dst=a, data=a, op0=add, operand0=c2, reduce_op=add",
                        "per-partition-operand"},
        InterpreterRule{"tensor_scalar_cumulative dst=a, src=a, op0=add, op1=divide, imm0=1.0", "alu-op"},
        InterpreterRule{"tensor_scalar_cumulative dst=i, src=i, op0=add, op1=add, imm0=1.0", "cumulative-dtype"},
        InterpreterRule{"tensor_scalar_cumulative dst=a, src=a, op0=add, op1=add, imm0=1.0, reduce_cmd=load_reduce",
                        "missing-operand"},
        InterpreterRule{"tensor_scalar_cumulative dst=a, src=a, op0=add, op1=add, imm0=1.0, imm1=2.0", "reduce-init"},
        InterpreterRule{"tensor_scalar_cumulative dst=b, src=a, op0=add, op1=add, imm0=1.0", "operand-shape"},
        InterpreterRule{"nc_match_replace8 dst=a, data=a, vals=c2, imm=0", "operand-shape"},
        InterpreterRule{"nc_match_replace8 dst=a, data=a, vals=a, imm=0, dst_idx=a", "integer-dtype"},
        InterpreterRule{"dropout dst=b, data=a, prob=0.5", "operand-shape"},
        InterpreterRule{"dropout dst=h, data=a, prob=0.5", "dropout-dtype"},
        InterpreterRule{"dropout dst=a, data=a, prob=c2", "per-partition-operand"},
        InterpreterRule{"rng dst=a", "rng-dtype"},
        InterpreterRule{"set_rng_seed src_seeds=col", "rng-seed"},
        InterpreterRule{"rand_set_state src_seeds=i", "rng-state"},
        InterpreterRule{"rand_get_state dst=a", "rng-state"},
        InterpreterRule{"topk val_dst=h, idx_dst=i, src=h, n=8", "topk"},
        InterpreterRule{"nc_n_gather dst=a, data=a, indices=i", "gather"},
        InterpreterRule{"nc_n_gather dst=h, data=a, indices=i", "gather"},
        InterpreterRule{"nonzero_with_count dst=i, src=a", "operand-shape"},
        InterpreterRule{"nonzero_with_count dst=b, src=a", "nonzero"},
        InterpreterRule{"sequence_bounds dst=a, segment_ids=a", "sequence-bounds"},
        InterpreterRule{"sequence_bounds dst=h[0:1, 0:8], segment_ids=a[0:1, 0:4]", "sequence-bounds"},
        InterpreterRule{"sequence_bounds dst=a[0:1, 0:7], segment_ids=a[0:1, 0:4]", "operand-shape"},
        InterpreterRule{"local_gather dst=a, src_buffer=a, index=i", "local-gather"}));

// What only the timing model met before: a DMA queue the config does not have, an HBM tensor
// larger than HBM.
TEST(Legality, DmaQueueAndHbmCapacity) {
  Program program = parse_tasm(
      "kernel k\ntarget trn2\nhbm x : fp32[4, 8] input\nhbm huge : fp32[1000000, 100000] input\n"
      "sbuf a : fp32[4, 8]\ndma_copy dst=a, src=x, queue=16\ndma_copy dst=a, src=x, queue=15\n",
      "case.tasm");
  auto found = issues(program);
  EXPECT_THAT(found, ::testing::Contains("instruction 0 (line 6) dma_copy: DMA queue 16 does not exist (the config "
                                         "has 16 per engine) [dma-queue]"));
  EXPECT_THAT(found, ::testing::Contains("program: HBM tensor 'huge' has 400000000000 bytes, more than the chip's "
                                         "HBM capacity of 103079215104 [hbm-capacity]"));
  EXPECT_EQ(found.size(), 2u);
}

// A pattern built in C++ (the text form's slices check their own bounds) that runs past its HBM
// tensor: the interpreter faults on it, so legality refuses it for --timing-only too.
TEST(Legality, HbmAccessOutsideItsTensor) {
  ProgramBuilder b("hbm", Generation::trn2);
  uint32_t x = b.hbm("x", DType::fp32, {4, 8}, AllocationRole::input);
  uint32_t a = b.sbuf("a", DType::fp32, {4, 8});
  AccessPattern src = b.view(x);
  src.offset = 8;
  b.emit(Opcode::dma_copy).tensor("dst", b.view(a)).tensor("src", src);
  Program program = b.program();
  EXPECT_THAT(issues(program), ::testing::ElementsAre("instruction 0 dma_copy: operand 'src': elements 8..39 fall "
                                                      "outside HBM tensor 'x' (32 elements) [memory-bounds]"));
  CoreState state(config("trn2").core, program);
  EXPECT_THROW(interpret(program, state, config("trn2")), IsaError);
}

// The same property over many programs: every valid one-instruction baseline below, with each
// tensor operand replaced in turn by every tensor of the pool (other shapes, dtypes, memories).
// Whenever the interpreter rejects a mutant, legality must have rejected it too.
TEST(Legality, EveryProgramTheInterpreterRejectsIsIllegal) {
  const std::string pool =
      "sbuf a : fp32[4, 8]\nsbuf b : fp32[4, 9]\nsbuf c2 : fp32[4, 2]\nsbuf d3 : fp32[3, 8]\nsbuf col : fp32[4, 1]\n"
      "sbuf i : int32[4, 8]\nsbuf i1 : int32[4, 1]\nsbuf u8 : uint32[4, 8]\nsbuf h : bf16[4, 8]\nsbuf h4 : bf16[4, 4]\n"
      "sbuf ht : bf16[8, 4]\nsbuf s6 : fp32[4, 6]\nsbuf r1 : fp32[1, 8]\nsbuf t8 : fp32[8, 4]\npsum pm : fp32[4, 8]\n"
      "psum p8 : fp32[8, 4]\nsbuf g6 : uint32[4, 6]\nsbuf one : uint32[1, 1]\n";
  const std::vector<std::string> names = {"a", "b", "c2", "d3", "col", "i", "i1", "u8", "h",
                                          "h4", "ht", "s6", "r1", "t8", "pm", "p8", "g6", "one"};
  const std::vector<std::string> baselines = {
      "tensor_tensor dst=a, data1=a, data2=a, op=add",
      "tensor_tensor dst=i, data1=i, data2=i, op=bitwise_and",
      "tensor_scalar dst=a, data=a, op0=add, operand0=col",
      "tensor_scalar dst=a, data=a, op0=add, operand0=1.0, op1=multiply, operand1=col",
      "tensor_scalar dst=i, data=i, op0=bitwise_and, operand0=i1",
      "scalar_tensor_tensor dst=a, data=a, op0=add, operand0=col, op1=multiply, operand1=a",
      "activation dst=a, op=exp, data=a, bias=col, scale=col",
      "activation dst=a, op=exp, data=a, reduce_op=add, reduce_res=col",
      "activation_reduce dst=a, op=copy, data=a, reduce_op=add, reduce_res=col",
      "tensor_reduce dst=col, op=add, data=a, axis=[1]",
      "tensor_copy dst=a, src=a",
      "tensor_copy_predicated dst=a, src=a, predicate=a",
      "select_reduce dst=a, predicate=a, on_true=a, on_false=col, reduce_op=maximum, reduce_res=col",
      "range_select dst=a, on_true_tile=a, comp_op0=greater_equal, comp_op1=less, bound0=col, bound1=col, "
      "reduce_res=col",
      "tensor_tensor_scan dst=a, data0=a, data1=a, initial=col, op0=add, op1=add",
      "bn_stats dst=s6, data=a",
      "bn_aggr dst=c2, data=s6",
      "reciprocal dst=a, data=a",
      "max8 dst=a, src=a",
      "nc_find_index8 dst=u8, data=a, vals=a",
      "iota dst=i, pattern=[[1, 8]]",
      "affine_select dst=a, pattern=[[1, 8]], channel_multiplier=0, on_true_tile=a, on_false_value=0",
      "tensor_partition_reduce dst=r1, op=add, data=a",
      "nc_transpose dst=p8, data=a",
      "dma_copy dst=a, src=a",
      "dma_transpose dst=ht, src=h",
      "nc_matmul dst=pm, stationary=h4, moving=h",
      "memset dst=a, value=1",
      "tensor_scalar_reduce dst=a, data=a, op0=add, operand0=col, reduce_op=add, reduce_res=col",
      "tensor_scalar_reduce dst=a, data=a, op0=add, operand0=1.0, reduce_op=maximum, reduce_cmd=load_reduce, "
      "reduce_init=col",
      "tensor_scalar_cumulative dst=a, src=a, op0=multiply, op1=add, imm0=col, imm1=col, reduce_cmd=load_reduce",
      "nc_match_replace8 dst=a, data=a, vals=a, imm=0, dst_idx=u8",
      "dropout dst=a, data=a, prob=col",
      "rng dst=u8",
      "rng dst=u8, engine=gpsimd",
      "set_rng_seed src_seeds=one",
      "rand_set_state src_seeds=g6",
      "rand_get_state dst=g6",
      "nc_n_gather dst=a, data=a, indices=u8",
  };
  auto program_of = [&](const std::string& instruction) {
    return parse_tasm("kernel k\ntarget trn2\n" + pool + instruction + "\n", "case.tasm");
  };
  auto interpreter_rejects = [&](const Program& program) {
    CoreState state(config("trn2").core, program);
    try {
      interpret(program, state, config("trn2"));
    } catch (const IsaError&) {
      return true;
    }
    return false;
  };
  size_t mutants = 0, rejected = 0;
  for (const std::string& baseline : baselines) {
    Program base = program_of(baseline);
    ASSERT_THAT(issues(base), ::testing::IsEmpty()) << baseline;
    ASSERT_FALSE(interpreter_rejects(base)) << baseline;
    // Tensor operands are "=name" followed by "," or the end.
    for (size_t at = baseline.find('='); at != std::string::npos; at = baseline.find('=', at + 1)) {
      size_t end = baseline.find(',', at);
      if (end == std::string::npos) end = baseline.size();
      std::string operand = baseline.substr(at + 1, end - at - 1);
      if (std::find(names.begin(), names.end(), operand) == names.end()) continue;
      for (const std::string& other : names) {
        if (other == operand) continue;
        std::string text = baseline.substr(0, at + 1) + other + baseline.substr(end);
        Program mutant = program_of(text);
        ++mutants;
        if (!interpreter_rejects(mutant)) continue;
        ++rejected;
        EXPECT_THAT(issues(mutant), ::testing::Not(::testing::IsEmpty())) << text;
      }
    }
  }
  EXPECT_GT(mutants, 800u);
  EXPECT_GT(rejected, 300u);  // the walk met many of the interpreter's rules
}

}  // namespace
}  // namespace trnsim::isa
