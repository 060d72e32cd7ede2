// The registry: one line per kernel builder of the library that takes (spec, config, core, cores).
// The name is the builder's own (KERNEL(matmul, ...) is matmul_program), so a recording names the
// function that built its programs.
#include "kernels/kernel_registry.h"

#include "kernels/kernel_invocation.h"
#include "kernels/spec_json.h"

namespace trnsim::kernels {
namespace {

template <typename Spec, KernelBuilder<Spec> build>
KernelEntry entry(std::vector<std::string> retired_fields = {}) {
  return KernelEntry{build, [](const nlohmann::json& spec) { return nlohmann::json(spec.get<Spec>()); },
                     [](const nlohmann::json& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
                       return build(spec.get<Spec>(), config, core, cores);
                     },
                     std::move(retired_fields)};
}

#define KERNEL(name, Spec) \
  { #name, entry < Spec, &name##_program>() }
// A kernel some of whose spec fields were retired (KernelEntry::retired_fields).
#define KERNEL_RETIRED(name, Spec, ...) \
  { #name, entry < Spec, &name##_program>(__VA_ARGS__) }

}  // namespace

const std::map<std::string, KernelEntry>& kernel_registry() {
  static const std::map<std::string, KernelEntry> registry = {
      // matmul, attention, convolution, pooling
      KERNEL(matmul, MatmulSpec),
      KERNEL(flash_attention_forward, AttentionSpec),
      KERNEL(flash_attention_backward, AttentionSpec),
      KERNEL(conv2d, Conv2dSpec),
      KERNEL(conv2d_backward, Conv2dSpec),
      KERNEL(max_pool2d, PoolSpec),
      KERNEL(max_pool2d_backward, PoolSpec),
      KERNEL(avg_pool2d, PoolSpec),
      KERNEL(avg_pool2d_backward, PoolSpec),
      // element-wise
      KERNEL(unary, UnarySpec),
      KERNEL(binary, BinarySpec),
      KERNEL(where, WhereSpec),
      KERNEL(triangle, TriangleSpec),
      // reductions and scans
      KERNEL(reduce, ReduceSpec),
      KERNEL(scan, ScanSpec),
      KERNEL(prod, ProdSpec),
      // normalization
      KERNEL(softmax, SoftmaxSpec),
      KERNEL(softmax_backward, SoftmaxBackwardSpec),
      KERNEL(norm, NormSpec),
      KERNEL(norm_backward, NormBackwardSpec),
      // data movement
      KERNEL(permute, PermuteSpec),
      KERNEL(concat, ConcatSpec),
      KERNEL(embedding, EmbeddingSpec),
      KERNEL(strided_copy, StridedCopySpec),
      KERNEL(flip, FlipSpec),
      // losses, optimizer
      KERNEL(cross_entropy, CrossEntropySpec),
      KERNEL(cross_entropy_backward, CrossEntropySpec),
      KERNEL(one_hot, OneHotSpec),
      // lr, weight_decay and step: the runtime input adamw_scalars since the step left the program.
      KERNEL_RETIRED(adamw, AdamWSpec, {"lr", "weight_decay", "step"}),
      // indexing and sorting
      KERNEL(gather_rows, GatherRowsSpec),
      KERNEL(scatter_rows, ScatterRowsSpec),
      KERNEL(scatter_max, ScatterMaxSpec),
      KERNEL(histogram, HistogramSpec),
      KERNEL(arange, ArangeSpec),
      KERNEL(nonzero, NonzeroSpec),
      KERNEL(topk, TopkSpec),
      KERNEL(sort, SortSpec),
      KERNEL(counting_sort, CountingSortSpec),
  };
  return registry;
}

#undef KERNEL

}  // namespace trnsim::kernels
