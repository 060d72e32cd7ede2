// Kernel invocations as data (kernels/kernel_invocation.h): for every registered kernel, one
// representative spec taken through its JSON text and back builds the identical program (the same
// .tasm text, on each core of a split); the strict read refuses what would build another kernel
// than the one written (unknown fields, values or kernels); non-finite numbers survive.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "config/config_loader.h"
#include "isa/text_form.h"
#include "kernels/kernel_common.h"
#include "kernels/kernel_invocation.h"
#include "kernels/spec_json.h"

namespace trnsim::kernels {
namespace {

const HardwareConfig& trn2() {
  static const LoadedConfig config = load_config("trn2");
  return config.hardware;
}

// One case: the invocation made from the spec, and the builder called directly on the same spec.
struct Case {
  KernelInvocation invocation;
  std::function<isa::Program(const HardwareConfig&, uint32_t core, uint32_t cores)> direct;
};

template <typename Spec>
Case make_case(KernelBuilder<Spec> builder, const Spec& spec) {
  return Case{invocation(builder, spec),
              [builder, spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                return builder(spec, hw, core, cores);
              }};
}

// One representative spec per registered kernel, with non-default values where the kernel takes
// them (a field the JSON form lost would then build another program).
std::map<std::string, Case> representative_cases() {
  std::vector<Case> cases;
  {
    MatmulSpec s;
    s.batch = 2, s.m = 256, s.k = 384, s.n = 512, s.input_dtype = DType::bf16, s.output_dtype = DType::bf16;
    s.b_transposed = true, s.bias = true, s.activation = isa::ActivationFunc::gelu, s.residual = true;
    cases.push_back(make_case(matmul_program, s));
  }
  {
    AttentionSpec s;
    s.batch = 1, s.heads = 4, s.kv_heads = 2, s.seq_q = 256, s.seq_k = 256, s.head_dim = 64, s.causal = true;
    s.scale = 0.125, s.write_lse = true;
    cases.push_back(make_case(flash_attention_forward_program, s));
    cases.push_back(make_case(flash_attention_backward_program, s));
  }
  {
    Conv2dSpec s;
    s.n = 2, s.c = 16, s.h = 12, s.w = 10, s.o = 32, s.kh = 3, s.kw = 3, s.stride_h = 2, s.pad_h = 1, s.pad_w = 1;
    s.bias = true;
    cases.push_back(make_case(conv2d_program, s));
    cases.push_back(make_case(conv2d_backward_program, s));
  }
  {
    PoolSpec s;
    s.n = 2, s.c = 8, s.h = 12, s.w = 12, s.kh = 3, s.kw = 3, s.stride_h = 2, s.stride_w = 2, s.pad_h = 1, s.pad_w = 1;
    s.ceil_mode = true;
    cases.push_back(make_case(max_pool2d_program, s));
    cases.push_back(make_case(max_pool2d_backward_program, s));
    s.count_include_pad = false, s.divisor_override = 5;
    cases.push_back(make_case(avg_pool2d_program, s));
    cases.push_back(make_case(avg_pool2d_backward_program, s));
  }
  cases.push_back(make_case(unary_program, UnarySpec{{300, 500}, UnaryOp::affine, DType::bf16, DType::fp32, 0.5, -2}));
  {
    BinarySpec s;
    s.a_shape = {300, 500}, s.b_shape = {1, 500}, s.op = BinaryOp::maximum, s.a_dtype = DType::bf16;
    s.output_dtype = DType::bf16, s.b_scalar = -std::numeric_limits<double>::infinity();  // masked_fill(-inf)
    cases.push_back(make_case(binary_program, s));
  }
  {
    WhereSpec s;
    s.shape = {200, 300}, s.a_dtype = DType::bf16, s.output_dtype = DType::bf16, s.b_scalar = 0.25;
    cases.push_back(make_case(where_program, s));
  }
  cases.push_back(make_case(triangle_program, TriangleSpec{3, 200, 300, -2, false, DType::bf16}));
  cases.push_back(make_case(reduce_program, ReduceSpec{{40, 50, 300}, {0, 2}, ReduceOp::mean, true, DType::bf16,
                                                       DType::fp32}));
  cases.push_back(make_case(scan_program, ScanSpec{300, 200, ScanOp::prod, DType::bf16, DType::fp32}));
  cases.push_back(make_case(prod_program, ProdSpec{300, 200, DType::bf16, DType::fp32}));
  cases.push_back(make_case(softmax_program, SoftmaxSpec{{300, 900}, true, DType::bf16, DType::bf16}));
  cases.push_back(
      make_case(softmax_backward_program, SoftmaxBackwardSpec{{300, 900}, true, DType::bf16, DType::bf16}));
  {
    NormSpec s;
    s.kind = NormKind::layernorm, s.shape = {300, 512}, s.eps = 1e-6, s.bias = true, s.input_dtype = DType::bf16;
    s.output_dtype = DType::bf16, s.param_dtype = DType::bf16, s.save_stats = true;
    cases.push_back(make_case(norm_program, s));
  }
  {
    NormBackwardSpec s;
    s.kind = NormKind::layernorm, s.shape = {300, 512}, s.bias = true, s.input_dtype = DType::bf16;
    cases.push_back(make_case(norm_backward_program, s));
  }
  cases.push_back(make_case(permute_program, PermuteSpec{{4, 130, 520}, {0, 2, 1}, DType::bf16}));
  cases.push_back(make_case(concat_program, ConcatSpec{{{300, 700}, {300, 500}, {300, 3}}, 1, DType::bf16}));
  cases.push_back(make_case(embedding_program, EmbeddingSpec{300, 1000, 256, DType::bf16, DType::uint32}));
  cases.push_back(
      make_case(strided_copy_program, StridedCopySpec{{64, 100}, {1, 128}, 128 * 99 + 64, DType::bf16}));
  cases.push_back(make_case(flip_program, FlipSpec{{{30, -40, 40}, {40, 1, 1}}, 29 * 40, 1200, DType::bf16}));
  {
    CrossEntropySpec s;
    s.rows = 300, s.classes = 1000, s.reduction = Reduction::sum, s.ignore_index = 7, s.logits_dtype = DType::bf16;
    cases.push_back(make_case(cross_entropy_program, s));
    s.reduction = Reduction::mean, s.ignore_index = std::nullopt;
    cases.push_back(make_case(cross_entropy_backward_program, s));
  }
  cases.push_back(make_case(one_hot_program, OneHotSpec{300, 1000, true, true, -0.5, DType::bf16}));
  {
    AdamWSpec s;
    s.elements = 100000, s.param_dtype = DType::bf16, s.grad_dtype = DType::bf16, s.state_dtype = DType::bf16;
    s.beta1 = 0.8, s.beta2 = 0.95, s.eps = 1e-6;
    cases.push_back(make_case(adamw_program, s));
  }
  cases.push_back(
      make_case(gather_rows_program, GatherRowsSpec{300, 1000, 64, DType::bf16, IndexWidth::int32, true}));
  cases.push_back(make_case(scatter_rows_program,
                            ScatterRowsSpec{300, 1000, 64, DType::fp32, IndexWidth::int32, true, true, false}));
  cases.push_back(make_case(scatter_max_program, ScatterMaxSpec{200, 50, 30, DType::bf16, false, false}));
  {
    HistogramSpec s;
    s.n = 5000, s.bins = 64, s.min = -2, s.max = 3, s.output_dtype = DType::int32;
    cases.push_back(make_case(histogram_program, s));
  }
  cases.push_back(make_case(arange_program, ArangeSpec{1000, -5, 3, DType::int32, true}));
  cases.push_back(make_case(nonzero_program, NonzeroSpec{{40, 50}, 123, DType::bf16, false}));
  cases.push_back(make_case(topk_program, TopkSpec{300, 1000, 5, DType::bf16, false, true}));
  cases.push_back(make_case(sort_program, SortSpec{300, 500, DType::int32, true, true}));
  cases.push_back(make_case(counting_sort_program, CountingSortSpec{300, 500, -10, 40, true, true}));

  std::map<std::string, Case> by_name;
  for (Case& c : cases) {
    const std::string name = c.invocation.kernel;
    EXPECT_TRUE(by_name.emplace(name, std::move(c)).second) << "two cases for " << name;
  }
  return by_name;
}

TEST(KernelInvocation, EveryRegisteredKernelHasACase) {
  const auto cases = representative_cases();
  std::vector<std::string> names;
  for (const auto& [name, c] : cases) names.push_back(name);
  EXPECT_EQ(names, registered_kernels());
}

TEST(KernelInvocation, SpecThroughJsonTextBuildsTheIdenticalProgram) {
  for (const auto& [name, c] : representative_cases()) {
    SCOPED_TRACE(name + " " + c.invocation.spec.dump());
    // Through the text a recording stores: dump, then parse.
    const KernelInvocation read{c.invocation.kernel, nlohmann::json::parse(c.invocation.spec.dump())};
    EXPECT_EQ(read, c.invocation);
    for (uint32_t cores : {1u, 2u}) {
      for (uint32_t core = 0; core < cores; ++core) {
        std::string direct, rebuilt;
        try {
          direct = isa::print_tasm(c.direct(trn2(), core, cores));
        } catch (const SplitUnsupported&) {
          EXPECT_THROW(build_kernel(read, trn2(), core, cores), SplitUnsupported);
          continue;
        }
        rebuilt = isa::print_tasm(build_kernel(read, trn2(), core, cores));
        EXPECT_EQ(rebuilt, direct) << "core " << core << " of " << cores;
        EXPECT_GT(direct.size(), 0u);
      }
    }
  }
}

TEST(KernelInvocation, SpecJsonNamesEnumsAndDtypesAndKeepsNonFiniteNumbers) {
  BinarySpec s;
  s.a_shape = {4, 5}, s.op = BinaryOp::greater_equal, s.a_dtype = DType::bf16;
  s.b_scalar = -std::numeric_limits<double>::infinity();
  const KernelInvocation inv = invocation(binary_program, s);
  EXPECT_EQ(inv.kernel, "binary");
  EXPECT_EQ(inv.spec.at("op"), "greater_equal");
  EXPECT_EQ(inv.spec.at("a_dtype"), "bf16");
  EXPECT_EQ(inv.spec.at("b_scalar"), "-inf");
  EXPECT_TRUE(inv.spec.at("a_scalar").is_null());
  EXPECT_EQ(nlohmann::json::parse(inv.spec.dump()), inv.spec);  // the text keeps "-inf" (a number would be null)
  // The JSON form holds the string; the builder gets the number (build_kernel decodes it).
  EXPECT_EQ(isa::print_tasm(build_kernel(inv, trn2(), 0, 1)), isa::print_tasm(binary_program(s, trn2(), 0, 1)));
  s.b_scalar = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(invocation(binary_program, s).spec.at("b_scalar"), "nan");
}

TEST(KernelInvocation, AFieldLeftOutTakesTheStructDefault) {
  KernelInvocation inv = invocation(unary_program, UnarySpec{{300, 500}, UnaryOp::exp, DType::fp32, DType::fp32});
  inv.spec.erase("scale");
  inv.spec.erase("bias");
  EXPECT_EQ(isa::print_tasm(build_kernel(inv, trn2(), 0, 1)),
            isa::print_tasm(unary_program(UnarySpec{{300, 500}, UnaryOp::exp}, trn2(), 0, 1)));
}

void expect_invocation_error(const KernelInvocation& inv, const std::string& needle) {
  try {
    build_kernel(inv, trn2(), 0, 1);
    ADD_FAILURE() << "built " << inv.key();
  } catch (const InvocationError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(KernelInvocation, StrictReadRefusesWhatWouldBuildAnotherKernel) {
  const KernelInvocation good = invocation(unary_program, UnarySpec{{300, 500}, UnaryOp::exp});
  KernelInvocation inv = good;
  inv.spec["op"] = "expp";  // nlohmann alone would read an unknown enum name as the first value (copy)
  expect_invocation_error(inv, "spec field 'op' = \"expp\" reads back as \"copy\"");
  inv = good;
  inv.spec["tile"] = 64;  // a field the struct does not have (nlohmann alone ignores it)
  expect_invocation_error(inv, "no field 'tile'");
  inv = good;
  inv.spec["input_dtype"] = "fp33";
  expect_invocation_error(inv, "unknown dtype 'fp33'");
  inv = good;
  inv.spec["shape"] = "300x500";
  expect_invocation_error(inv, "does not read");
  inv = good;
  inv.spec = nlohmann::json::array();
  expect_invocation_error(inv, "not a JSON object");
  inv = good;
  inv.kernel = "unary2";
  expect_invocation_error(inv, "unknown kernel 'unary2'");
}

// A recording from before the AdamW step became a runtime input holds lr / weight_decay / step in
// its spec: they are retired fields, read and dropped (the program no longer depends on them); any
// other unknown field is still refused.
TEST(KernelInvocation, RetiredFieldsOfAnOlderRecordingStillRead) {
  AdamWSpec spec;
  spec.elements = 5000;
  KernelInvocation inv = invocation(adamw_program, spec);
  const std::string expected = isa::print_tasm(build_kernel(inv, trn2(), 0, 1));
  inv.spec["lr"] = 3e-4, inv.spec["weight_decay"] = 0.1, inv.spec["step"] = 7;
  EXPECT_EQ(isa::print_tasm(build_kernel(inv, trn2(), 0, 1)), expected);
  inv.spec["momentum"] = 0.9;
  expect_invocation_error(inv, "no field 'momentum'");
}

TEST(KernelInvocation, AKernelDecliningItsSpecIsKernelUnsupportedNotAnInvocationError) {
  // The spec reads; the kernel does not take it (argmax over two dims).
  const KernelInvocation inv =
      invocation(reduce_program, ReduceSpec{{40, 50}, {0, 1}, ReduceOp::argmax, false, DType::fp32, DType::int32});
  EXPECT_THROW(build_kernel(inv, trn2(), 0, 1), KernelUnsupported);
}

TEST(KernelInvocation, LogicalCoreSizeIsTheConfiguredLncWithinTheChip) {
  HardwareConfig hw = trn2();
  hw.chip.default_logical_core_size = 2;
  EXPECT_EQ(logical_core_size(hw), 2u);
  hw.chip.default_logical_core_size = 0;
  EXPECT_EQ(logical_core_size(hw), 1u);
  hw.chip.default_logical_core_size = hw.chip.physical_cores + 5;
  EXPECT_EQ(logical_core_size(hw), hw.chip.physical_cores);
}

}  // namespace
}  // namespace trnsim::kernels
