// The .tasm and JSON-lines forms: exact round trips over every opcode, and one test per error
// class pinning the message and the line:column it points at.
#include "isa/text_form.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "isa/builder.h"

namespace trnsim::isa {
namespace {

// Every opcode with non-default operands; kept in sync with tests/fuzz/corpus/all_opcodes.tasm.
const char* const kAllOpcodes = R"(# every opcode
kernel all_opcodes
target trn3
hbm in_a : bf16[128, 512] input
hbm out_a : fp32[128, 512] output
sbuf a : bf16[128, 512]
sbuf b : fp32[128, 512] @ 0:65536
sbuf col : fp32[128, 1]
sbuf idx : uint32[128, 8]
sbuf small : fp32[32, 32]
psum acc : fp32[128, 512]
nc_matmul dst=acc[0:128, 0:128], stationary=a[0:128, 0:128], moving=a[:, 0:128], accumulate=true, is_transpose=true, is_stationary_onezero=true, is_moving_onezero=true, perf_mode=double_row, tile_position=[0, 64], tile_size=[64, 64]
nc_transpose dst=small, data=b[0:32, 0:32], engine=vector
activation dst=b, op=gelu, data=acc, bias=col, scale=2.5, alpha=0.1, reduce_op=add, reduce_res=col  # comment
activation_reduce dst=b, op=exp, data=b, reduce_op=maximum, reduce_res=col, bias=-1.5, scale=col
tensor_tensor dst=b, data1=b, data2=acc, op=multiply, engine=gpsimd
tensor_scalar dst=b, data=b, op0=add, operand0=col, reverse0=true, op1=multiply, operand1=3, reverse1=true, engine=scalar
scalar_tensor_tensor dst=b, data=b, op0=subtract, operand0=0.5, op1=add, operand1=b, reverse0=true, reverse1=true
tensor_reduce dst=col, op=add, data=b, axis=[1], negate=true, keepdims=true
tensor_copy dst=a, src=b[:, 0:512:2], engine=gpsimd
tensor_copy_predicated dst=b, src=-inf, predicate=b, reverse_pred=true
select_reduce dst=b, predicate=b, on_true=b, on_false=col, reverse_pred=true, reduce_op=maximum, reduce_res=col
range_select dst=b, on_true_tile=b, comp_op0=greater_equal, comp_op1=less, bound0=col, bound1=col, reduce_op=minimum, reduce_res=col, range_start=4, on_false_value=0
tensor_tensor_scan dst=b, data0=b, data1=b, initial=1.25, op0=multiply, op1=add
bn_stats dst=b[:, 0:6], data=b
bn_aggr dst=b[:, 0:2], data=b[:, 0:6]
reciprocal dst=b, data=b
max8 dst=b[:, 0:8], src=b
nc_find_index8 dst=idx, data=b, vals=b[:, 0:8]
memset dst=b{offset=510, ap=[[0, 64], [-2, 255]]}, value=-3.5, engine=gpsimd
iota dst=idx, pattern=[[1, 8]], offset=5, channel_multiplier=8
affine_select dst=b, pattern=[[-1, 512]], channel_multiplier=1, on_true_tile=b, on_false_value=-inf, cmp_op=greater_equal, offset=3
tensor_partition_reduce dst=b[0:1, :], op=maximum, data=b
dma_copy dst=a, src=in_a, dge_mode=hwdge, queue=3, dst_rmw_op=add
dma_transpose dst=a[:, 0:128], src=in_a[0:128, 0:128], queue=2
dma_transpose dst=a[0:64, 0:32], src=in_a[:, 0:64], indices=idx[0:32, 0:1], oob_mode=skip
dma_gather dst=a[0:32, 0:512], src=in_a, indices=idx[0:32, 0:1], queue=5
dma_copy dst=out_a, src=b[:, :], dge_mode=swdge
sem_signal sem=3, value=2, engine=vector
sem_wait sem=3, value=2, engine=tensor
barrier
core_barrier data=out_a, cores=[0, 1]
all_reduce dst=out_a, src=in_a, op=maximum, group=[0, 2, 1, 3], group_size=2
all_gather dst=b, src=b, group=[0]
reduce_scatter dst=out_a, src=in_a, op=add, group=[1], engine=gpsimd
all_to_all dst=out_a, src=in_a, group=[0, 1]
collective_permute dst=out_a, src=in_a, pairs=[[0, 1], [1, 0]]
collective_permute dst=out_a, src=in_a, pairs=[[0, 1], [1, 0]], src2=in_a, op=maximum
hbm flat : fp32[4096] output
hbm meta : uint32[4, 4]
all_to_all_v dst=flat, src=out_a, metadata=meta, group=[0, 1, 2, 3], recv_counts_known=true, has_rdispls=true
all_gather_v dst=flat, src=out_a, metadata=meta[0:3, :], group=[0, 1, 2, 3], engine=gpsimd
sendrecv dst=b, src=b, send_to_rank=1, recv_from_rank=0, pipe_id=2, dma_engine=gpsimd_dma, engine=gpsimd
rank_id dst=r4, group=[0, 1, 2, 3], group_size=2, back=1, back_reg=r3
sbuf mx : mxfp8_e4m3[128, 128]
sbuf mx_scale : fp8_e8m0[128, 512]
nc_matmul_mx dst=acc[0:128, 0:128], stationary=mx, moving=mx, stationary_scale=mx_scale[4:128, 0:128], moving_scale=mx_scale[4:128, 0:128], accumulate=true, tile_position=[64, 0], tile_size=[64, 128]
dma_scatter dst=out_a, src=b[0:32, 0:512], indices=idx[0:32, 0:1], queue=4, dst_rmw_op=add
sbuf st : uint32[128, 24]
tensor_scalar_reduce dst=b, data=acc, op0=multiply, operand0=col, reduce_op=maximum, reduce_res=col, reverse0=true, reduce_cmd=load_reduce, reduce_init=col, reduce_res_negate=true
tensor_scalar_cumulative dst=b, src=b, op0=add, op1=multiply, imm0=0.5, imm1=col, reduce_cmd=load_reduce
exponential dst=a, src=acc, max_value=col, reduce_res=col, reduce_cmd=load_reduce, reduce_init=-2.5
nc_match_replace8 dst=b, data=b, vals=b[:, 0:8], imm=-inf, dst_idx=idx
dropout dst=b, data=b, prob=col
rng dst=st, engine=gpsimd
rand2 dst=a, min=-1.5, max=col
set_rng_seed src_seeds=st[0:1, 0:1]
rand_set_state src_seeds=st, engine=vector
rand_get_state dst=st[:, 0:6]
topk val_dst=a[0:32, 0:8], idx_dst=idx[0:32, 0:8], src=a[0:32, 8:11], n=42
nc_n_gather dst=b[:, 0:8], data=b, indices=idx
sbuf nz : int32[128, 9]
nonzero_with_count dst=nz, src=b[:, 0:8], index_offset=16, padding_val=-7
sbuf seg : int32[1, 64]
sequence_bounds dst=b[0:1, 0:128], segment_ids=seg
sbuf gidx : uint16[128, 4]
local_gather dst=b[:, 0:128], src_buffer=b, index=gidx, num_elem_per_idx=4, num_valid_indices=32
activate2 dst=b, op=prelu, data=acc, imm0=col, imm1=-0.5, op0=multiply, op1=subtract, relu_param=col, reverse0=true, reverse1=true, reduce_op=maximum, reduce_res=col, reduce_cmd=reset_reduce
nc_stream_shuffle dst=b[32:64, :], src=b[96:128, :], shuffle_mask=[31, 30, 255, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 255]
sbuf qs : fp8_e8m0[128, 32]
quantize_mx dst=mx[:, 0:32], src=a[:, 0:128], dst_scale=qs[4:128, :]
register_move dst=r5, imm=-7, src=r6, engine=vector
register_add dst=r63, src=r5, imm=3, src2=r2, engine=gpsimd
register_sub dst=r9, src=r8, imm=2, src2=r7
register_mul dst=r11, src=r9, imm=-3, src2=r2, engine=scalar
register_compare dst=r10, src=r9, op=greater_equal, imm=-4, src2=r3
register_load dst=r1, src=nz[0:1, 0:1], engine=scalar
register_store dst=nz[0:1, 1:2], src=r1, engine=tensor
loop_begin count=3, engine=vector
while_begin cond=r1, engine=gpsimd
while_end engine=gpsimd
loop_end engine=vector
loop_begin count_reg=r2
loop_end
)";

bool same_scalar(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Structural equality; source and declaration lines may differ.
void expect_same_program(const Program& a, const Program& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.generation, b.generation);
  ASSERT_EQ(a.allocations.size(), b.allocations.size());
  for (size_t i = 0; i < a.allocations.size(); ++i) {
    const Allocation &x = a.allocations[i], &y = b.allocations[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.space, y.space) << x.name;
    EXPECT_EQ(x.dtype, y.dtype) << x.name;
    EXPECT_EQ(x.shape, y.shape) << x.name;
    EXPECT_EQ(x.role, y.role) << x.name;
    EXPECT_EQ(x.base_partition, y.base_partition) << x.name;
    EXPECT_EQ(x.base_byte, y.base_byte) << x.name;
  }
  ASSERT_EQ(a.instructions.size(), b.instructions.size());
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    const Instruction &x = a.instructions[i], &y = b.instructions[i];
    SCOPED_TRACE("instruction " + std::to_string(i) + " " + x.spec().name);
    ASSERT_EQ(x.opcode, y.opcode);
    EXPECT_EQ(x.engine, y.engine);
    EXPECT_EQ(x.present_mask, y.present_mask);
    ASSERT_EQ(x.tensors.size(), y.tensors.size());
    for (size_t t = 0; t < x.tensors.size(); ++t) EXPECT_TRUE(x.tensors[t] == y.tensors[t]) << "tensor slot " << t;
    for (const OperandSpec& o : x.spec().operands) {
      bool tensor_given = o.tensor_slot >= 0 && x.tensors[o.tensor_slot].present();
      if (o.scalar_slot >= 0 && !tensor_given) {
        EXPECT_TRUE(same_scalar(x.scalars[o.scalar_slot], y.scalars[o.scalar_slot])) << o.name;
      }
      if (o.list_slot >= 0) {
        EXPECT_EQ(x.lists[o.list_slot], y.lists[o.list_slot]) << o.name;
      }
    }
  }
}

TEST(TextForm, EveryOpcodeRoundTrips) {
  Program program = parse_tasm(kAllOpcodes, "all.tasm");
  std::set<Opcode> used;
  for (const Instruction& inst : program.instructions) used.insert(inst.opcode);
  EXPECT_EQ(used.size(), kOpcodeCount) << "kAllOpcodes must use every opcode of instructions.def";

  std::string printed = print_tasm(program);
  Program reparsed = parse_tasm(printed, "printed.tasm");
  EXPECT_EQ(print_tasm(reparsed), printed);
  expect_same_program(program, reparsed);
  // Every operand given above differs from its default, so the printer keeps all of them.
  EXPECT_THAT(printed, testing::HasSubstr("nc_matmul dst=acc[0:128, 0:128], stationary=a[0:128, 0:128], "
                                          "moving=a[0:128, 0:128], accumulate=true, is_transpose=true"));
  EXPECT_THAT(printed, testing::HasSubstr("tensor_copy dst=a, src=b[0:128, 0:511:2], engine=gpsimd\n"));
  EXPECT_THAT(printed, testing::HasSubstr("memset dst=b{offset=510, ap=[[0, 64], [-2, 255]]}, value=-3.5"));
  EXPECT_THAT(printed, testing::HasSubstr("sbuf b : fp32[128, 512] @ 0:65536\n"));
  EXPECT_THAT(printed, testing::HasSubstr("hbm in_a : bf16[128, 512] input\n"));
  EXPECT_THAT(printed, testing::HasSubstr("\nbarrier\n"));
}

TEST(TextForm, SourceLinesAndDefaults) {
  Program program = parse_tasm(kAllOpcodes, "all.tasm");
  EXPECT_EQ(program.instructions.front().source_line, 12u);
  EXPECT_EQ(program.allocations.front().declared_line, 4u);
  // Defaults are applied and then left out by the printer.
  Program p = parse_tasm("sbuf t : fp32[128, 4]\nactivation dst=t, op=exp, data=t, scale=1.0, alpha=0\n", "d");
  EXPECT_TRUE(p.instructions[0].has("scale"));
  EXPECT_DOUBLE_EQ(p.instructions[0].scalar("scale"), 1.0);
  EXPECT_FALSE(p.instructions[0].has("bias"));
  EXPECT_EQ(print_tasm(p), "target trn2\nsbuf t : fp32[128, 4] @ 0:0\nactivation dst=t, op=exp, data=t\n");
}

TEST(TextForm, BuilderProgramRoundTrips) {
  ProgramBuilder b("built", Generation::trn3);
  uint32_t x = b.hbm("x", DType::bf16, {4, 256, 64}, AllocationRole::input);
  uint32_t t = b.sbuf("t", DType::bf16, {128, 2, 64});
  uint32_t s = b.sbuf("s", DType::fp32, {128, 1});
  uint32_t acc = b.psum("acc", DType::fp32, {128, 64});
  b.emit(Opcode::dma_copy).tensor("dst", b.view(t, {Slice::all(), Slice::index(1)}))
      .tensor("src", b.view(x, {Slice::index(2), Slice::range(0, 128), Slice::all()})).word("queue", "7");
  b.emit(Opcode::nc_matmul).tensor("dst", b.view(acc)).tensor("stationary", b.view(t, {Slice::all(), Slice::index(0)}))
      .tensor("moving", b.view(t, {Slice::all(), Slice::index(1)})).word("accumulate", "false");
  b.emit(Opcode::tensor_scalar).tensor("dst", b.view(acc)).tensor("data", b.view(acc)).word("op0", "divide")
      .imm("operand0", NAN).word("op1", "add").tensor("operand1", b.view(s)).on(Engine::scalar);
  b.emit(Opcode::activation).tensor("dst", b.view(acc)).word("op", "sigmoid").tensor("data", b.view(acc))
      .imm("bias", -0.0).imm("scale", 1e-30);
  b.emit(Opcode::memset)
      .tensor("dst", raw_access_pattern(b.program(), t, 64, {ApDim{3, 5}, ApDim{-2, 32}}))
      .imm("value", 0.1);
  b.emit(Opcode::tensor_reduce).tensor("dst", b.view(s)).word("op", "maximum")
      .tensor("data", b.view(t, {Slice::range(0, 128), Slice::all(), Slice::range(1, 64, 3)})).word("axis", "[1, 2]");
  b.emit(Opcode::iota).tensor("dst", b.view(s)).word("pattern", "[[0, 1], [2, 3]]").imm("offset", -4);
  b.emit(Opcode::sem_wait).word("sem", "1").imm("value", 9007199254740992.0).on(Engine::gpsimd);
  Program program = b.finish();

  std::string printed = print_tasm(program);
  Program reparsed = parse_tasm(printed, "built.tasm");
  expect_same_program(program, reparsed);
  EXPECT_EQ(print_tasm(reparsed), printed);
  EXPECT_THAT(printed, testing::HasSubstr("operand0=nan"));
  EXPECT_THAT(printed, testing::HasSubstr("memset dst=t{offset=64, ap=[[3, 5], [-2, 32]]}, value=0.1\n"));
}

// NKI's view(dtype) of an HBM tensor: a raw pattern reads the allocation's bytes as another dtype,
// offset and strides in that dtype's elements, bounded by the allocation's bytes.
TEST(TextForm, AccessPatternAsAnotherDtype) {
  const char* text =
      "kernel v\ntarget trn2\nhbm x : fp32[4, 8] input\nsbuf t : bf16[4, 16]\n"
      "dma_copy dst=t, src=x{offset=0, dtype=bf16, ap=[[16, 4], [1, 16]]}\n";
  Program program = parse_tasm(text, "v.tasm");
  const AccessPattern& src = program.instructions[0].tensor("src");
  EXPECT_EQ(src.dtype, DType::bf16);
  EXPECT_EQ(src.bytes(), 4u * 8u * 4u);
  std::string printed = print_tasm(program);
  EXPECT_THAT(printed, testing::HasSubstr("src=x{offset=0, dtype=bf16, ap=[[16, 4], [1, 16]]}"));
  expect_same_program(program, parse_tasm(printed, "v2.tasm"));
  Program from_json = parse_json_lines(to_json_lines(program), "v.jsonl");
  EXPECT_EQ(from_json.instructions[0].tensor("src"), src);
  auto error_of = [](const std::string& src, uint32_t elements) {
    try {
      parse_tasm("hbm x : fp32[4, 8]\nsbuf t : bf16[1, " + std::to_string(elements) + "]\ndma_copy dst=t, src=" + src +
                     "\n",
                 "e.tasm");
    } catch (const IsaError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // 64 bf16 elements fit in the 32 fp32 ones; the 65th does not.
  EXPECT_THAT(error_of("x{offset=0, dtype=bf16, ap=[[0, 1], [1, 65]]}", 65),
              testing::HasSubstr("elements 0..64 fall outside 0..63"));
  EXPECT_THAT(error_of("x{offset=0, dtype=bf61, ap=[[0, 1], [1, 8]]}", 8), testing::HasSubstr("unknown dtype 'bf61'"));
}

TEST(TextForm, JsonLinesRoundTrip) {
  Program program = parse_tasm(kAllOpcodes, "all.tasm");
  std::string json = to_json_lines(program);
  Program reparsed = parse_json_lines(json, "all.jsonl");
  expect_same_program(program, reparsed);
  EXPECT_EQ(to_json_lines(reparsed), json);
  EXPECT_EQ(print_tasm(reparsed), print_tasm(program));
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    EXPECT_EQ(reparsed.instructions[i].source_line, program.instructions[i].source_line);
  }
  EXPECT_THAT(json, testing::HasSubstr(R"({"alloc":"b","space":"sbuf","dtype":"fp32","shape":[128,512],)"
                                       R"("role":"internal","base_partition":0,"base_byte":65536,"line":7})"));
  EXPECT_THAT(json, testing::HasSubstr(R"({"op":"barrier","engine":"sync","line":41,"operands":{}})"));
}

TEST(TextForm, JsonLinesErrors) {
  auto error_of = [](const std::string& text) {
    try {
      parse_json_lines(text, "t.jsonl");
    } catch (const IsaError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("{\"target\": \"trn2\"}\n\n{\"op\": \"nope\", \"operands\": {}}"), "t.jsonl:3: unknown opcode 'nope'");
  EXPECT_THAT(error_of("{\"alloc\": 3}"), testing::StartsWith("t.jsonl:1: \"alloc\" must be a string"));
  EXPECT_THAT(error_of("{\"target\": \"trn2\"}\n{oops"), testing::StartsWith("t.jsonl:2: bad JSON: "));
  EXPECT_EQ(error_of(R"({"alloc": "t", "space": "sbuf", "dtype": "fp32", "shape": [4, 4]})"
                     "\n"
                     R"({"op": "memset", "operands": {"dst": {"tensor": "t", "offset": 0, "ap": [[0, 4], [1, 17]]},)"
                     R"( "value": "1"}})"),
            "t.jsonl:2: bad access pattern: t: elements 0..16 fall outside 0..3");
}

struct ErrorCase {
  const char* name;
  const char* text;
  const char* message;
};

class TextFormError : public testing::TestWithParam<ErrorCase> {};

TEST_P(TextFormError, PointsAtTheToken) {
  try {
    parse_tasm(GetParam().text, "t.tasm");
    FAIL() << "no error for:\n" << GetParam().text;
  } catch (const IsaError& e) {
    EXPECT_EQ(std::string(e.what()), GetParam().message);
  }
}

#define DECL "sbuf a : fp32[128, 4]\n"
INSTANTIATE_TEST_SUITE_P(
    Errors, TextFormError,
    testing::Values(
        ErrorCase{"UnknownOpcode", DECL "  nc_matmull dst=a", "t.tasm:2:3: unknown opcode 'nc_matmull' (did you mean 'nc_matmul'?)"},
        ErrorCase{"UnknownOperand", DECL "reciprocal dst=a, dta=a",
                  "t.tasm:2:19: reciprocal has no operand 'dta' (did you mean 'data'?)"},
        ErrorCase{"MissingOperand", DECL "reciprocal dst=a", "t.tasm:2:1: reciprocal: missing required operand 'data'"},
        ErrorCase{"DuplicateOperand", DECL "reciprocal dst=a, data=a,  dst=a",
                  "t.tasm:2:28: reciprocal: operand 'dst' given twice"},
        ErrorCase{"UnknownTensor", DECL "reciprocal dst=a, data=aa", "t.tasm:2:24: unknown tensor 'aa' (did you mean 'a'?)"},
        ErrorCase{"SliceOutOfRange", DECL "reciprocal dst=a[0:256], data=a",
                  "t.tasm:2:17: bad slice: a: dimension 0: index 0:256 is outside 0:128"},
        ErrorCase{"SliceSyntax", DECL "reciprocal dst=a[0:4, ?], data=a", "t.tasm:2:23: bad slice: expected an index, got '?]'"},
        ErrorCase{"SliceStep", DECL "reciprocal dst=a[:, 0:4:0], data=a",
                  "t.tasm:2:17: bad slice: a: dimension 1: step must be positive"},
        ErrorCase{"RawPattern", DECL "reciprocal dst=a{offset=1, ap=[[0, 128], [1, 4]]}, data=a",
                  "t.tasm:2:17: bad slice: a: elements 1..4 fall outside 0..3"},
        ErrorCase{"BadDtype", "hbm x : bf17[4]", "t.tasm:1:9: unknown dtype 'bf17' (did you mean 'bf16'?)"},
        ErrorCase{"BadShape", "hbm x : bf16[4, 0]", "t.tasm:1:17: expected a dimension in 1..4294967295, got 0"},
        ErrorCase{"BadImmediate", DECL "nc_matmul dst=a, stationary=a, moving=a, accumulate=maybe",
                  "t.tasm:2:53: nc_matmul.accumulate: expected one of auto, false, true, got 'maybe'"},
        ErrorCase{"IntegerTooBig", "sem_signal sem=9007199254740993",
                  "t.tasm:1:16: sem_signal.sem: integer 9007199254740993 is out of range (at most 2^53 in magnitude)"},
        ErrorCase{"BadEngine", DECL "tensor_copy dst=a, src=a, engine=tensor",
                  "t.tasm:2:34: tensor_copy cannot run on the tensor engine on trn2 (engines: vector, scalar, gpsimd)"},
        ErrorCase{"EngineNotYet", "target trn1\n" DECL "tensor_copy dst=a, src=a, engine=scalar",
                  "t.tasm:3:34: tensor_copy cannot run on the scalar engine on trn1 (engines: vector, gpsimd)"},
        ErrorCase{"OpcodeNotYet", "target trn1\n" DECL "dma_transpose dst=a, src=a",
                  "t.tasm:3:1: dma_transpose is not available on trn1"},
        ErrorCase{"UnknownEngine", DECL "reciprocal dst=a, data=a, engine=vectr",
                  "t.tasm:2:34: unknown engine 'vectr' (did you mean 'vector'?)"},
        ErrorCase{"Redeclared", DECL "\nhbm a : fp32[4]", "t.tasm:3:5: tensor 'a' is already declared on line 1"},
        ErrorCase{"NumberName", "sbuf nan : fp32[4]", "t.tasm:1:6: 'nan' reads as a number and cannot name a tensor"},
        ErrorCase{"TargetAfterDeclaration", DECL "target trn1",
                  "t.tasm:2:1: 'target' must come before declarations and instructions"},
        ErrorCase{"KernelNotFirst", "target trn2\nkernel k", "t.tasm:2:1: 'kernel' must be the first line"},
        ErrorCase{"UnknownTarget", "target trn4", "t.tasm:1:8: unknown target 'trn4' (did you mean 'trn1'?)"},
        ErrorCase{"TrailingAfterRole", "hbm x : fp32[4] input extra", "t.tasm:1:23: unexpected 'extra' after the role"},
        ErrorCase{"TrailingAfterSlice", DECL "reciprocal dst=a[0:4]x, data=a", "t.tasm:2:22: unexpected 'x' after the slice"},
        ErrorCase{"TrailingAfterKernel", "kernel k extra", "t.tasm:1:10: unexpected 'extra' after the kernel name"},
        ErrorCase{"BadRole", "hbm x : fp32[4] inptu", "t.tasm:1:17: unknown role 'inptu' (expected input, output or private)"},
        ErrorCase{"PrivateOnChip", "sbuf x : fp32[4, 4] private",
                  "t.tasm:1:21: only an HBM tensor can be private (on-chip tensors are each core's own)"},
        ErrorCase{"Unbalanced", DECL "reciprocal dst=a[0:4, data=a", "t.tasm:2:17: unclosed '['"},
        ErrorCase{"EmptyOperand", DECL "reciprocal dst=a, , data=a", "t.tasm:2:19: expected an operand NAME=VALUE"},
        ErrorCase{"NoValue", DECL "reciprocal dst=a, data=", "t.tasm:2:24: operand 'data' has no value"},
        ErrorCase{"NotAnIdentifier", "42 dst=a", "t.tasm:1:1: expected a declaration or an opcode, got '42'"},
        ErrorCase{"UsedBeforeDeclared", DECL "reciprocal dst=a, data=b\nsbuf b : fp32[128, 4]",
                  "t.tasm:2:24: unknown tensor 'b' (did you mean 'a'?)"},
        ErrorCase{"StrideBeyondInt32", "hbm h : fp32[4]\nmemset dst=h{offset=0, ap=[[2147483648, 2], [1, 1]]}, value=0",
                  "t.tasm:2:29: expected a stride in -2147483648..2147483647, got 2147483648"},
        ErrorCase{"SliceStrideBeyondInt32", "hbm h : fp32[2, 4, 1073741824]\nmemset dst=h[0:2, 0, 0:1], value=0",
                  "t.tasm:2:13: bad slice: h: dimension 0: a step of 1 over a stride of 4294967296 elements is beyond the 2^31 "
                  "an access pattern holds"}),
    [](const testing::TestParamInfo<ErrorCase>& info) { return std::string(info.param.name); });
#undef DECL

TEST(TextForm, FileErrors) {
  EXPECT_THROW(parse_tasm_file("/nonexistent/x.tasm"), IsaError);
}

// A program long enough that its instruction lines are parsed in batches over the host threads, with
// declarations between the instructions.
std::string long_program(size_t steps) {
  std::string text = "kernel long\ntarget trn2\nhbm x : bf16[128, 4096] input\nsbuf x_sb : bf16[128, 4, 64]\n";
  for (size_t i = 0; i < steps; ++i) {
    const size_t slot = i % 4, col = (i * 64) % 4096;
    text += "dma_copy dst=x_sb[0:128, " + std::to_string(slot) + ", 0:64], src=x[0:128, " + std::to_string(col) + ":" +
            std::to_string(col + 64) + "], queue=" + std::to_string(slot) + "\n";
    text += "activation dst=x_sb{offset=" + std::to_string(slot * 64) + ", ap=[[0, 128], [1, 64]]}, op=exp, data=x_sb[:, " +
            std::to_string(slot) + ", :]  # comment\n";
    if (i == steps / 2) text += "sbuf late : fp32[128, 64]\n";
    if (i > steps / 2 && i % 1000 == 0) text += "tensor_copy dst=late, src=x_sb[:, 0, :]\n";
  }
  return text;
}

class ScopedHostThreads {
 public:
  explicit ScopedHostThreads(const char* threads) {
    if (const char* old = std::getenv("TRNSIM_HOST_THREADS")) m_old = old;
    setenv("TRNSIM_HOST_THREADS", threads, 1);
  }
  ~ScopedHostThreads() {
    if (m_old.empty()) {
      unsetenv("TRNSIM_HOST_THREADS");
    } else {
      setenv("TRNSIM_HOST_THREADS", m_old.c_str(), 1);
    }
  }

 private:
  std::string m_old;
};

TEST(TextForm, ThreadedParseIsTheOneThreadParse) {
  const std::string text = long_program(40000);
  Program one_thread, threaded;
  {
    ScopedHostThreads threads("1");
    one_thread = parse_tasm(text, "long.tasm");
  }
  {
    ScopedHostThreads threads("4");
    threaded = parse_tasm(text, "long.tasm");
  }
  ASSERT_EQ(threaded.instructions.size(), one_thread.instructions.size());
  ASSERT_GT(threaded.instructions.size(), 80000u);
  EXPECT_EQ(print_tasm(threaded), print_tasm(one_thread));
  for (size_t i = 0; i < threaded.instructions.size(); ++i) {
    ASSERT_EQ(threaded.instructions[i].source_line, one_thread.instructions[i].source_line) << i;
  }
  // Source lines count every line: the first instruction is line 5, the last the file's last line.
  EXPECT_EQ(threaded.instructions.front().source_line, 5u);
  EXPECT_EQ(threaded.instructions.back().source_line, uint32_t(std::count(text.begin(), text.end(), '\n')));
}

TEST(TextForm, ThreadedParseThrowsTheFirstWrongLine) {
  std::string text = long_program(30000);
  // Wrong lines far apart (different chunks of a batch the threads share), and a wrong declaration after all of
  // them.
  auto line_start = [&](size_t line) {
    size_t at = 0;
    for (size_t i = 1; i < line; ++i) at = text.find('\n', at) + 1;
    return at;
  };
  for (size_t line : {50000u, 20000u, 9000u}) text.insert(line_start(line), "recipro dst=x_sb, data=x_sb\n");
  text += "hbm x : fp32[4]\n";
  ScopedHostThreads threads("2");
  try {
    parse_tasm(text, "long.tasm");
    FAIL() << "no error";
  } catch (const IsaError& e) {
    EXPECT_THAT(std::string(e.what()), testing::StartsWith("long.tasm:9000:1: unknown opcode 'recipro'"));
  }
  // With the instruction lines right, the declaration's error is the first.
  const std::string wrong_declaration_only = long_program(30000) + "hbm x : fp32[4]\n";
  EXPECT_THROW(
      {
        try {
          parse_tasm(wrong_declaration_only, "long.tasm");
        } catch (const IsaError& e) {
          EXPECT_THAT(std::string(e.what()), testing::HasSubstr("tensor 'x' is already declared on line 3"));
          throw;
        }
      },
      IsaError);
}

TEST(TextForm, FileReadInPiecesIsTheTextParse) {
  // Over 8 MiB, so parse_tasm_file reads it in more than one piece and lines straddle the pieces' edges.
  const std::string text = long_program(60000) + "tensor_copy dst=late, src=x_sb[:, 0, :]";  // no final newline
  ASSERT_GT(text.size(), size_t{8} << 20);
  const std::string path = testing::TempDir() + "/trnsim_long_program.tasm";
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  const Program from_file = parse_tasm_file(path);
  const Program from_text = parse_tasm(text, path);
  std::remove(path.c_str());
  EXPECT_EQ(from_file.instructions.size(), from_text.instructions.size());
  EXPECT_EQ(print_tasm(from_file), print_tasm(from_text));
  EXPECT_EQ(from_file.instructions.back().source_line, from_text.instructions.back().source_line);
}

}  // namespace
}  // namespace trnsim::isa
