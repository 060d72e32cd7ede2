// The lowering table: one row per ATen op the device runs on the kernel library. A row names the
// op (schema name and overload), the function that checks its arguments and builds and runs the
// kernels, and the out= overloads computed by the same function. Rows live in per-family files
// (matmul.cpp, elementwise.cpp, norm.cpp, ...); registration with the dispatcher (registry.cpp),
// the out= forms and the coverage listing (trnsim.lowered_ops()) all read them, so adding a
// lowering for an op whose kernel exists is one row in one file.
//
// Contract of a row's function: it returns the op's results in schema order, or nullopt when it
// does not take these arguments; then nothing has been written and the call goes, untouched, to
// the counted CPU fallback. A kernel builder that cannot build the kernel for the arguments throws
// kernels::KernelUnsupported (with the reason), which has the same effect. Any other exception is
// a bug and propagates to the caller.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace trnsim::frontend {

using LoweringArgs = c10::ArrayRef<c10::IValue>;
using LoweredResults = std::optional<std::vector<c10::IValue>>;
using LowerFn = std::function<LoweredResults(const std::string& op, LoweringArgs args)>;
// Where a call the row declines goes (`reason`: the kernel's, when a builder declined); empty: the
// counted CPU fallback of the op itself.
using DeclinedFn = void (*)(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason);

struct Lowering {
  std::string op;                      // "add.Tensor": also the label of the op's records and cache keys
  LowerFn lower;
  std::vector<std::string> out_forms;  // out= overloads: `lower` on all arguments but the trailing out
  std::string family;                  // filled in by the registry from the file the row lives in
  DeclinedFn declined = nullptr;
  // Whether the registry checks, as CUDA does, that the tensor operands share one device before the
  // row runs. Families whose ops take host tensors as CUDA's do (a foreach op's scalar list as a
  // CPU tensor, host index tensors) check what they need themselves.
  bool same_device_operands = true;
  // What the registry checks of the tensors the op writes (self of an in-place op, out=) before the
  // row runs, as the op's CPU kernel does (TensorIterator's checks): `full`, no element written twice
  // (an expanded self) and no partial overlap with another operand (x.t().add_(x)); `partial`, only
  // the latter (masked_fill_ merely warns about an expanded self). Unset: the family's default.
  enum class OverlapCheck { unchecked, partial, full };
  std::optional<OverlapCheck> overlap_check;
  // Whether the out= forms take an `out` of another dtype than the result's, the result cast into it
  // where torch's canCast allows (as cat does); else such an out goes to the CPU (many ops raise there).
  bool out_casts = false;
};

// Row builders from functions (op, args) returning one tensor, several, or a tensor list.
inline LoweredResults lowered(std::optional<at::Tensor> t) {
  if (!t) return std::nullopt;
  return std::vector<c10::IValue>{std::move(*t)};
}
inline LoweredResults lowered(std::optional<std::vector<at::Tensor>> ts) {
  if (!ts) return std::nullopt;
  std::vector<c10::IValue> out;
  for (at::Tensor& t : *ts) out.emplace_back(std::move(t));
  return out;
}
inline LoweredResults lowered(LoweredResults r) { return r; }

template <typename F>
Lowering row(std::string op, F f, std::vector<std::string> out_forms = {}, DeclinedFn declined = nullptr) {
  return Lowering{std::move(op), [f](const std::string& name, LoweringArgs a) { return lowered(f(name, a)); },
                  std::move(out_forms), "", declined, true, std::nullopt, false};
}

// The families, one function per file; registry.cpp lists them.
std::vector<Lowering> matmul_lowerings();
std::vector<Lowering> elementwise_lowerings();
std::vector<Lowering> activation_lowerings();
std::vector<Lowering> arithmetic_lowerings();
std::vector<Lowering> reduction_lowerings();
std::vector<Lowering> norm_lowerings();
std::vector<Lowering> batch_norm_lowerings();
std::vector<Lowering> loss_lowerings();
std::vector<Lowering> data_movement_lowerings();
std::vector<Lowering> attention_lowerings();
std::vector<Lowering> conv_lowerings();
std::vector<Lowering> pooling_lowerings();
std::vector<Lowering> optimizer_lowerings();
std::vector<Lowering> index_lowerings();
std::vector<Lowering> embedding_lowerings();

// Every row, built once on first use.
const std::vector<Lowering>& lowering_table();

}  // namespace trnsim::frontend
