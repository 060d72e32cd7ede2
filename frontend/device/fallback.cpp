// The boxed CPU fallback: every op without a lowering (or whose lowering declined the arguments)
// runs on the CPU through torch's cpu_fallback, counted by operator name, its host-link transfers
// charged to the device's clock; TRNSIM_FALLBACK=allow|warn|error. Also the same-device check of
// every op, and the clear error for sparse layouts.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "frontend/device/device_internal.h"
#include "frontend/device_runtime.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"
#include "frontend/neuron_device.h"
#include <ATen/native/CPUFallback.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <unordered_set>

namespace trnsim::frontend {
namespace {
thread_local bool t_in_fallback = false;
}  // namespace

InFallbackScope::InFallbackScope() : previous_(t_in_fallback) { t_in_fallback = true; }
InFallbackScope::~InFallbackScope() { t_in_fallback = previous_; }
bool in_fallback() { return t_in_fallback; }

void check_common_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  // Ops whose CUDA kernels also take tensors on other devices: copies and moves between devices,
  // and advanced indexing with host index tensors.
  static const std::unordered_set<std::string> cross_device = {
      "_copy_from", "_copy_from_and_resize", "copy_", "_to_copy", "to", "index", "index_put_", "_index_put_impl_",
      "index_put", "set_", "_has_compatible_shallow_copy_type", "_local_scalar_dense", "_pin_memory", "is_pinned",
      "is_set_to", "lift_fresh", "lift_fresh_copy", "_unsafe_index", "_unsafe_index_put"};
  std::string name = op.schema().operator_name().name;
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  if (cross_device.count(name)) return;
  std::optional<c10::Device> common;
  auto visit = [&](const at::Tensor& t) {
    if (!t.defined()) return;
    // A 0-dim CPU tensor is a scalar operand (a wrapped Python number), accepted on every device.
    if (t.device().is_cpu() && t.dim() == 0) return;
    if (!common) {
      common = t.device();
      return;
    }
    TORCH_CHECK(*common == t.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                *common, " and ", t.device(), "!");
  };
  for (const c10::IValue& v : args) {
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
    else if (v.isOptionalTensorList()) for (const auto& t : v.toOptionalTensorList().vec()) if (t) visit(*t);
  }
}


namespace {

// A meta tensor with t's sizes, strides and dtype: what the op's meta function needs.
at::Tensor meta_like(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

// Timing-only mode: the op runs on its arguments' meta twins (PyTorch's meta functions give the
// results' shapes without values), its new results are allocated on the device (no values), its
// mutated arguments resized as the meta call resized theirs, and its time is the documented
// estimate of record_estimate. An op without a meta function, or whose result shape depends on
// values (nonzero, unique, masked_select, ...), cannot be timed this way: a clear error.
void timing_only_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& full,
                          const std::string& reason) {
  const auto& schema = op.schema();
  const size_t n_args = schema.arguments().size(), n_returns = schema.returns().size();
  std::vector<c10::IValue> args(stack->end() - static_cast<std::ptrdiff_t>(n_args), stack->end());
  OpRecord record;
  record.op = full;
  uint64_t bytes_read = 0, bytes_written = 0;
  int device = -1;
  // Device argument i's meta twin, to find what the call did to it.
  std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (device, meta) of mutated arguments
  std::vector<std::pair<at::Tensor, at::Tensor>> by_alias;  // (device, meta) of every tensor argument
  torch::jit::Stack meta_stack;
  for (size_t i = 0; i < n_args; ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const bool writes = arg.alias_info() && arg.alias_info()->isWrite();
    auto twin = [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined()) return t;
      record.shapes.push_back(dims(t.sizes()));
      if (record.dtype.empty()) record.dtype = c10::toString(t.scalar_type());
      if (!on_neuron(t)) return t.is_cpu() && t.dim() == 0 ? t : meta_like(t);  // host scalars stay scalars
      if (device < 0) device = t.device().index();
      at::Tensor m = meta_like(t);
      // An out= argument is only written; an in-place self is read and written.
      if (!(writes && arg.kwarg_only())) bytes_read += t.nbytes();
      if (writes) written.emplace_back(t, m);
      by_alias.emplace_back(t, m);
      return m;
    };
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      meta_stack.emplace_back(twin(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList().vec()) list.push_back(twin(t));
      meta_stack.emplace_back(list);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const auto& t : v.toOptionalTensorList().vec()) list.push_back(t ? std::optional<at::Tensor>(twin(*t)) : std::nullopt);
      meta_stack.emplace_back(list);
    } else {
      meta_stack.push_back(v);
    }
  }
  const auto host_start = std::chrono::steady_clock::now();
  std::string meta_error;
  try {
    op.callBoxed(&meta_stack);
  } catch (const c10::Error& e) {
    meta_error = e.what_without_backtrace();
  } catch (const std::exception& e) {  // a meta function written in Python raises a Python error
    meta_error = e.what();
  }
  if (!meta_error.empty()) {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "trnsim timing-only mode: the operator '", full,
                                "' has no neuron kernel", reason.empty() ? "" : " (" + reason + ")",
                                ", and its result cannot be sized without values: PyTorch's meta function says: ",
                                meta_error,
                                ". Ops whose results depend on values (nonzero, unique, masked selection, ...) need "
                                "values mode: leave trnsim.timing_only() (or set TRNSIM_VALUES=1).");
  }
  const c10::Device target(kNeuron, static_cast<c10::DeviceIndex>(device < 0 ? current_device_index() : device));
  for (auto& [dev, meta] : written) {
    if (dev.sizes() != meta.sizes()) dev.resize_(meta.sizes());
    bytes_written += dev.nbytes();
    mark_without_values(dev.data_ptr());
  }
  auto materialise = [&](const at::Tensor& m, const c10::Argument& ret) -> at::Tensor {
    if (!m.defined() || !m.is_meta()) return m;
    if (ret.alias_info()) {
      // A view of (or the same tensor as) an argument: the device argument whose twin it views.
      for (auto& [dev, meta] : by_alias) {
        if (meta.is_alias_of(m)) {
          if (m.is_same(meta)) return dev;
          return dev.as_strided(m.sizes(), m.strides(), dev.storage_offset() + m.storage_offset() - meta.storage_offset());
        }
      }
    }
    at::Tensor out = at::empty_strided(m.sizes(), m.strides(), m.options().device(target));
    bytes_written += out.nbytes();
    mark_without_values(out.data_ptr());
    return out;
  };
  std::vector<c10::IValue> results;
  for (size_t i = 0; i < n_returns; ++i) {
    const c10::Argument& ret = schema.returns()[i];
    c10::IValue& v = meta_stack[i];
    if (v.isTensor()) {
      results.emplace_back(materialise(v.toTensor(), ret));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList().vec()) list.push_back(materialise(t, ret));
      results.emplace_back(list);
    } else {
      results.push_back(v);
    }
  }
  torch::jit::drop(*stack, n_args);
  for (c10::IValue& v : results) torch::jit::push(*stack, std::move(v));
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  record_estimate(static_cast<int>(target.index()), bytes_read, bytes_written, host_s, std::move(record));
}

}  // namespace

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  check_common_device(op, torch::jit::last(*stack, op.schema().arguments().size()));
  std::shared_ptr<DeviceRuntime> runtime = device_runtime();
  const FallbackMode mode = runtime->fallback_mode();
  const bool first = mode != FallbackMode::error && runtime->count_fallback(full);
  TORCH_CHECK_NOT_IMPLEMENTED(mode != FallbackMode::error, "The operator '", full,
                              "' has no neuron kernel and TRNSIM_FALLBACK=error forbids running it on the CPU. "
                              "Set TRNSIM_FALLBACK=warn or allow to let it fall back.");
  if (!runtime->values_enabled()) {
    if (mode == FallbackMode::warn && first) {
      TORCH_WARN("The operator '", full, "' has no neuron kernel (for these arguments) yet; in timing-only mode it ",
                 "computes nothing and is charged an estimate (kind 'estimate' in trnsim.op_log(): launch cost + its ",
                 "bytes at the HBM bandwidth). ", reason.empty() ? "" : "The kernel's reason: " + reason + ". ",
                 "trnsim.fallback_report() lists such ops.");
    }
    timing_only_fallback(op, stack, full, reason);
    return;
  }
  if (mode == FallbackMode::warn && first) {
    TORCH_WARN("The operator '", full,
               "' has no neuron kernel (for these arguments) yet; it runs on the CPU (copies to the host and back). ",
               reason.empty() ? "" : "The kernel's reason: " + reason + ". ",
               "trnsim.fallback_report() lists such ops; TRNSIM_FALLBACK=allow silences this, =error forbids it.");
  }
  // The device tensors among the arguments go to the host, the device tensors among the results
  // come back: both over the host link, on the device's simulated clock.
  const auto& arguments = op.schema().arguments();
  uint64_t to_host = 0;
  std::vector<at::Tensor> written;  // measured after the call: an out= argument may be resized
  int device = -1;
  OpRecord record;
  record.op = full;
  const c10::ArrayRef<c10::IValue> args = torch::jit::last(*stack, arguments.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const bool writes = arguments[i].alias_info() && arguments[i].alias_info()->isWrite();
    auto visit = [&](const at::Tensor& t) {
      if (!t.defined()) return;
      record.shapes.push_back(std::vector<int64_t>(t.sizes().begin(), t.sizes().end()));
      if (record.dtype.empty()) record.dtype = c10::toString(t.scalar_type());
      if (t.device().type() != kNeuron) return;
      if (device < 0) device = t.device().index();
      to_host += t.nbytes();
      if (writes) written.push_back(t);
    };
    const c10::IValue& v = args[i];
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
    else if (v.isOptionalTensorList()) for (const auto& t : v.toOptionalTensorList().vec()) if (t) visit(*t);
  }
  const auto host_start = std::chrono::steady_clock::now();
  {
    InFallbackScope in_fallback;
    at::native::cpu_fallback(op, stack);
  }
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  // Results that are new device tensors come back; mutated arguments (in-place, out=) come back
  // whether or not they are also returned.
  uint64_t to_device = 0;
  for (const at::Tensor& t : written) to_device += t.nbytes();
  for (size_t i = 0; i < op.schema().returns().size(); ++i) {
    const c10::Argument& r = op.schema().returns()[i];
    if (r.alias_info()) continue;  // an alias of a mutated argument, counted above
    c10::IValue& v = (*stack)[stack->size() - op.schema().returns().size() + i];
    // cpu_fallback puts results on the first tensor argument's device: a wrapped scalar (1 - x is
    // sub(1, x)) would leave them on the CPU. Results belong on the device the operands are on.
    if (device >= 0 && v.isTensor() && v.toTensor().defined() && v.toTensor().device().is_cpu() &&
        !(v.toTensor().dim() == 0 && v.toTensor().unsafeGetTensorImpl()->is_wrapped_number())) {
      InFallbackScope in_fallback;
      v = v.toTensor().to(c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)));
    }
    auto visit = [&](const at::Tensor& t) {
      if (!t.defined() || t.device().type() != kNeuron) return;
      if (device < 0) device = t.device().index();
      to_device += t.nbytes();
    };
    if (v.isTensor()) visit(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorList().vec()) visit(t);
  }
  record_fallback(device < 0 ? int(current_device_index()) : device, to_host, to_device, host_s, std::move(record));
}

namespace {

void boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { neuron_fallback(op, stack); }
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&boxed_fallback>()); }

// Sparse layouts have no kernels and no CPU fallback path on the device: a clear error naming the op.
void neuron_sparse_unsupported(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "neuron: sparse tensors are not supported on the device (", op.schema().operator_name(),
                              "); keep sparse tensors on the CPU, or make them dense with .to_dense() before .to(\"neuron\")");
}
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_sparse_unsupported>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_sparse_unsupported>());
}

}  // namespace

}  // namespace trnsim::frontend
