// Registers every row of the lowering table with the dispatcher (PrivateUse1, boxed) and lists
// them for trnsim.lowered_ops(). One kernel object per row: the row, not the op's name, decides
// what runs.
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#include <utility>

#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "frontend/neuron_device.h"
#include "kernels/kernel_common.h"

namespace trnsim::frontend {
namespace {

void push_results(torch::jit::Stack* stack, size_t arguments, std::vector<c10::IValue> results) {
  torch::jit::drop(*stack, arguments);
  for (c10::IValue& v : results) torch::jit::push(*stack, std::move(v));
}

// PyTorch's memory-overlap errors for the tensors the op writes (schema: alias annotation with a write),
// raised before anything runs as the CPU's TensorIterator kernels raise them.
void check_write_overlap(const c10::OperatorHandle& op, LoweringArgs args, Lowering::OverlapCheck check) {
  if (check == Lowering::OverlapCheck::unchecked) return;
  const std::vector<c10::Argument>& schema = op.schema().arguments();
  for (size_t w = 0; w < args.size() && w < schema.size(); ++w) {
    const c10::AliasInfo* alias = schema[w].alias_info();
    if (!alias || !alias->isWrite() || !args[w].isTensor() || !args[w].toTensor().defined()) continue;
    const at::Tensor& written = args[w].toTensor();
    if (check == Lowering::OverlapCheck::full) at::assert_no_internal_overlap(written);
    for (size_t i = 0; i < args.size(); ++i)
      if (i != w && args[i].isTensor() && args[i].toTensor().defined())
        at::assert_no_partial_overlap(written, args[i].toTensor());
  }
}

// The op's lowering, or its out= form: the functional lowering on every argument but the trailing
// `out`, its result copied into `out` (resized as torch's out= contract allows; a dtype other than
// the result's falls back, where the CPU applies torch's casting rules).
class LoweredKernel final : public c10::OperatorKernel {
 public:
  LoweredKernel(const Lowering* row, bool out_form) : row_(row), out_form_(out_form) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = op.schema().arguments().size();
    const LoweringArgs args = torch::jit::last(*stack, n);
    if (row_->same_device_operands) check_common_device(op, args);
    check_write_overlap(op, args, *row_->overlap_check);
    LoweredResults results;
    try {
      if (!out_form_) {
        results = row_->lower(row_->op, args);
      } else {
        at::Tensor target = args[n - 1].toTensor();
        if (on_neuron(target)) results = row_->lower(row_->op, args.slice(0, n - 1));
        if (results && (results->size() != 1 || !(*results)[0].isTensor())) results.reset();
        if (results) {
          const at::ScalarType type = (*results)[0].toTensor().scalar_type();
          if (type != target.scalar_type() && !(row_->out_casts && at::canCast(type, target.scalar_type()))) results.reset();
        }
        if (results) {
          const at::Tensor& result = (*results)[0].toTensor();
          if (target.sizes() != result.sizes()) target.resize_(result.sizes());
          target.copy_(result);
          results = std::vector<c10::IValue>{target};
        }
      }
    } catch (const kernels::KernelUnsupported& e) {
      decline(op, stack, e.what());
      return;
    } catch (const ValuesUnavailable& e) {
      // Timing only: the lowering needed values for a decision (a host-side check or index).
      decline(op, stack, e.what());
      return;
    }
    if (!results) {
      decline(op, stack, "");
      return;
    }
    push_results(stack, n, std::move(*results));
  }

 private:
  void decline(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) const {
    if (row_->declined) row_->declined(op, stack, reason);
    else neuron_fallback(op, stack, reason);
  }

  const Lowering* row_;
  bool out_form_;
};

enum class Operands { same_device, may_be_on_host };

// `overlap`: the write-overlap check of the family's rows that set none (the element-wise families'
// CPU kernels are TensorIterator ones, which check; the others check what they need themselves).
void add_family(std::vector<Lowering>& table, const char* family, std::vector<Lowering> rows,
                Operands operands = Operands::same_device,
                Lowering::OverlapCheck overlap = Lowering::OverlapCheck::unchecked) {
  for (Lowering& r : rows) {
    r.family = family;
    r.same_device_operands = operands == Operands::same_device;
    if (!r.overlap_check) r.overlap_check = overlap;
    table.push_back(std::move(r));
  }
}

}  // namespace

const std::vector<Lowering>& lowering_table() {
  static const std::vector<Lowering> table = [] {
    std::vector<Lowering> t;
    add_family(t, "matmul", matmul_lowerings());
    constexpr Lowering::OverlapCheck iterator = Lowering::OverlapCheck::full;
    add_family(t, "elementwise", elementwise_lowerings(), Operands::same_device, iterator);
    add_family(t, "activation", activation_lowerings(), Operands::same_device, iterator);
    add_family(t, "arithmetic", arithmetic_lowerings(), Operands::same_device, iterator);
    add_family(t, "reduction", reduction_lowerings());
    add_family(t, "norm", norm_lowerings());
    add_family(t, "batch_norm", batch_norm_lowerings());
    add_family(t, "loss", loss_lowerings());
    add_family(t, "data_movement", data_movement_lowerings());
    add_family(t, "attention", attention_lowerings(), Operands::may_be_on_host);
    add_family(t, "conv", conv_lowerings(), Operands::may_be_on_host);
    add_family(t, "pooling", pooling_lowerings(), Operands::may_be_on_host);
    add_family(t, "optimizer", optimizer_lowerings(), Operands::may_be_on_host, iterator);
    add_family(t, "embedding", embedding_lowerings());
    add_family(t, "index", index_lowerings(), Operands::may_be_on_host);
    return t;
  }();
  return table;
}

std::vector<LoweringInfo> lowering_info() {
  std::vector<LoweringInfo> out;
  for (const Lowering& r : lowering_table()) out.push_back(LoweringInfo{r.op, r.family, r.out_forms});
  return out;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const Lowering& r : lowering_table()) {
    m.impl(r.op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<LoweredKernel>(&r, false)));
    for (const std::string& out : r.out_forms)
      m.impl(out.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::make_unique<LoweredKernel>(&r, true)));
  }
}

}  // namespace trnsim::frontend
