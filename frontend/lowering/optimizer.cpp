// Optimizer-step lowerings: the `_foreach_*` ops torch.optim's default (foreach) paths call, per
// tensor on the element-wise kernels; lerp / addcmul / addcdiv (single-tensor forms, the same
// kernels); `_fused_adamw_` on the fused AdamW kernel (kernels/optimizer.h).
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_common.h"
#include "kernels/optimizer.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

// _foreach_* (torch.optim's default multi-tensor path) and _fused_adamw_
// =============================================================================================
//
// Each op is run per tensor on the element-wise kernels, flattened (one program per element count
// and immediates). Composite ops (lerp, addcmul, addcdiv, alpha-scaled add) keep their
// intermediates in fp32 and round once into the result's dtype, as torch's CPU kernels do in
// their fp32 opmath, so bf16 parameters follow the CPU's within an ulp per step.

// A kernel operand: a device tensor (any simulated dtype, contiguous) or an immediate.
struct Operand {
  at::Tensor tensor;
  std::optional<double> scalar;
};
Operand imm(double v) { return Operand{at::Tensor(), v}; }
Operand ten(const at::Tensor& t) { return Operand{t, std::nullopt}; }

// out (contiguous, numel elements) = a op b. A scalar operand is the kernel's runtime input
// (BinarySpec::runtime_scalar), not part of its program: an optimizer's scalars change from step to
// step (bias corrections, a scheduled lr), and the program and its timing are reused for every value.
// The engines take a scalar operand in fp32 either way, so the values are those of an immediate.
void run_binary(const std::string& op, BinaryOp kind, const Operand& a, const Operand& b, const at::Tensor& out) {
  const int64_t numel = out.numel();
  kernels::BinarySpec spec;
  spec.op = kind;
  spec.a_shape = spec.b_shape = {numel};
  spec.output_dtype = *sim_dtype(out.scalar_type());
  spec.a_dtype = a.scalar ? spec.output_dtype : *sim_dtype(a.tensor.scalar_type());
  spec.b_dtype = b.scalar ? spec.output_dtype : *sim_dtype(b.tensor.scalar_type());
  spec.a_scalar = a.scalar;
  spec.b_scalar = b.scalar;
  spec.runtime_scalar = a.scalar || b.scalar;
  std::string key = "foreach_binary|" + std::to_string(static_cast<int>(kind)) + "|" + std::to_string(numel) + "|" +
                    std::to_string(static_cast<int>(spec.a_dtype)) + std::to_string(static_cast<int>(spec.b_dtype)) +
                    std::to_string(static_cast<int>(spec.output_dtype)) + (a.scalar ? "|a=runtime" : "") +
                    (b.scalar ? "|b=runtime" : "");
  float a_value = float(a.scalar.value_or(0)), b_value = float(b.scalar.value_or(0));
  std::vector<HostBuffer> inputs;
  inputs.push_back(a.scalar ? HostBuffer{"a", &a_value, 1, DType::fp32} : buffer("a", a.tensor));
  inputs.push_back(b.scalar ? HostBuffer{"b", &b_value, 1, DType::fp32} : buffer("b", b.tensor));
  const at::Tensor& shown = a.scalar ? b.tensor : a.tensor;
  execute_kernel(out.device().index(), key, kernels::invocation(kernels::binary_program, spec), inputs,
                 {buffer("c", out)}, record_for(op, {shown}, out.scalar_type()));
}

void run_unary(const std::string& op, UnaryOp kind, const at::Tensor& x, const at::Tensor& out) {
  kernels::UnarySpec spec;
  spec.shape = {x.numel()};
  spec.op = kind;
  spec.input_dtype = *sim_dtype(x.scalar_type());
  spec.output_dtype = *sim_dtype(out.scalar_type());
  const std::string key = "foreach_unary|" + std::to_string(static_cast<int>(kind)) + "|" + std::to_string(x.numel()) +
                          "|" + std::to_string(static_cast<int>(spec.input_dtype)) +
                          std::to_string(static_cast<int>(spec.output_dtype));
  execute_kernel(out.device().index(), key, kernels::invocation(kernels::unary_program, spec), {buffer("x", x)},
                 {buffer("y", out)}, record_for(op, {x}, out.scalar_type()));
}

at::Tensor fp32_like(const at::Tensor& t) { return at::empty({t.numel()}, t.options().dtype(at::kFloat)); }

bool is_real(const c10::Scalar& s) { return s.isFloatingPoint() || s.isIntegral(/*includeBool=*/true); }

// One foreach call: per tensor, the last kernel writes into self's storage (in place, contiguous)
// or into a new flat tensor that becomes self's value (copied) or one of the returned results.
struct ForeachCall {
  std::string op;
  bool inplace = false;
  std::vector<at::Tensor> self;
  std::vector<at::Tensor> results;
  size_t done = 0;  // tensors whose result has been written
};

// self and every tensor operand list: on one neuron device, simulated float dtypes, same element
// counts per index, non-empty.
bool lists_supported(const std::vector<at::Tensor>& self, std::initializer_list<const std::vector<at::Tensor>*> others) {
  if (self.empty()) return false;
  for (size_t i = 0; i < self.size(); ++i) {
    const at::Tensor& t = self[i];
    if (!on_neuron(t) || !sim_dtype(t.scalar_type()) || t.numel() == 0 || t.device() != self[0].device()) return false;
    for (const std::vector<at::Tensor>* list : others) {
      if (list->size() != self.size()) return false;
      const at::Tensor& o = (*list)[i];
      if (!on_neuron(o) || !sim_dtype(o.scalar_type()) || o.device() != t.device() || o.sizes() != t.sizes()) return false;
    }
  }
  return true;
}

at::Tensor flat(const at::Tensor& t) { return t.contiguous().reshape({t.numel()}); }

// Where tensor i's result goes: self's own storage when it is contiguous and in place (no copy),
// else a new contiguous tensor. Out of place the result has torch's promoted dtype (`dtype`, e.g. fp32 for a 0-dim bf16 tensor
// times a 0-dim fp32 tensor); in place it is self's.
at::Tensor result_for(const ForeachCall& call, size_t i, std::optional<at::ScalarType> dtype = std::nullopt) {
  const at::Tensor& s = call.self[i];
  if (call.inplace && s.is_contiguous()) return s.view({s.numel()});
  return at::empty({s.numel()}, s.options().dtype(call.inplace || !dtype ? s.scalar_type() : *dtype));
}

// Ternary ops (lerp, addcmul, addcdiv) out of place: the operands share one dtype (else fallback).
bool same_dtypes(const ForeachCall& call, std::initializer_list<const std::vector<at::Tensor>*> others) {
  if (call.inplace) return true;
  for (size_t i = 0; i < call.self.size(); ++i)
    for (const std::vector<at::Tensor>* list : others)
      if ((*list)[i].scalar_type() != call.self[i].scalar_type()) return false;
  return true;
}

void finish(ForeachCall& call, size_t i, const at::Tensor& result) {
  const at::Tensor& s = call.self[i];
  if (call.inplace) {
    if (result.data_ptr() != s.data_ptr()) s.copy_(result.view(s.sizes()));
  } else {
    call.results.push_back(result.view(s.sizes()));
  }
  ++call.done;
}


// What a foreach row computes: the op family, the form of its second operand, in place or not, and
// the kernels of the element-wise families.
enum class ForeachFamily { unary, binary, lerp, addcmul, addcdiv };
enum class ForeachOperand { none, Scalar, List, ScalarList, Tensor };

struct ForeachOp {
  ForeachFamily family;
  ForeachOperand operand;
  bool inplace;
  std::string base;         // "add": the record label's stem
  UnaryOp unary = UnaryOp::copy;
  BinaryOp binary = BinaryOp::add;
  bool has_alpha = false;   // add / sub with a tensor (List) or Tensor operand
};

// Returns false (nothing written) when the call is not supported.
bool lower_foreach(const ForeachOp& f, c10::ArrayRef<c10::IValue> a, ForeachCall& call) {
  const ForeachOperand overload = f.operand;
  call.inplace = f.inplace;
  call.op = "_foreach_" + f.base + (call.inplace ? "_" : "");
  call.self = a[0].toTensorVector();
  const size_t count = call.self.size();
  if (count == 0) return false;

  if (f.family == ForeachFamily::unary) {
    const std::optional<UnaryOp> kind = f.unary;
    if (!lists_supported(call.self, {})) return false;
    for (size_t i = 0; i < count; ++i) {
      at::Tensor r = result_for(call, i);
      run_unary(call.op, *kind, flat(call.self[i]), r);
      finish(call, i, r);
    }
    return true;
  }

  if (f.family == ForeachFamily::binary) {
    const std::optional<BinaryOp> kind = f.binary;
    const bool has_alpha = f.has_alpha;
    double alpha = 1.0;
    if (has_alpha) {
      const c10::Scalar s = a[2].toScalar();
      if (!is_real(s)) return false;
      // torch's CPU add / sub take alpha in the tensor's own dtype (bf16 rounds it) and compute
      // in fp32 from there.
      alpha = at::scalar_tensor(s.toDouble(), at::kDouble).to(call.self[0].scalar_type()).item<double>();
    }
    std::vector<at::Tensor> others;
    std::vector<double> scalars;
    if (overload == ForeachOperand::List) {
      others = a[1].toTensorVector();
      if (!lists_supported(call.self, {&others})) return false;
    } else {
      if (!lists_supported(call.self, {})) return false;
      if (overload == ForeachOperand::Scalar) {
        const c10::Scalar s = a[1].toScalar();
        if (!is_real(s)) return false;
        scalars.assign(count, s.toDouble());
      } else if (overload == ForeachOperand::ScalarList) {
        for (const c10::IValue& v : a[1].toListRef()) {
          if (!is_real(v.toScalar())) return false;
          scalars.push_back(v.toScalar().toDouble());
        }
        if (scalars.size() != count) return false;
      } else if (overload == ForeachOperand::Tensor) {
        const at::Tensor& t = a[1].toTensor();
        if (t.numel() != 1 || !(at::isFloatingType(t.scalar_type()) || at::isIntegralType(t.scalar_type(), true)))
          return false;
        scalars.assign(count, immediate_value(t, 1.0) * alpha);
      } else {
        return false;
      }
    }
    std::vector<at::ScalarType> result_dtypes;
    for (size_t i = 0; i < count; ++i) {
      at::ScalarType t = call.self[i].scalar_type();
      if (overload == ForeachOperand::List) t = at::result_type(call.self[i], others[i]);
      if (overload == ForeachOperand::Tensor) t = at::result_type(call.self[i], a[1].toTensor());
      if (!sim_dtype(t)) return false;
      result_dtypes.push_back(t);
    }
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor self = flat(call.self[i]);
      at::Tensor r = result_for(call, i, result_dtypes[i]);
      if (overload != ForeachOperand::List) {
        run_binary(call.op, *kind, ten(self), imm(scalars[i]), r);
      } else if (alpha == 1.0) {
        run_binary(call.op, *kind, ten(self), ten(flat(others[i])), r);
      } else {  // self op (alpha * other): the product kept in fp32, one rounding into self's dtype
        at::Tensor scaled = fp32_like(self);
        run_binary(call.op + ".alpha", BinaryOp::multiply, ten(flat(others[i])), imm(alpha), scaled);
        run_binary(call.op, *kind, ten(self), ten(scaled), r);
      }
      finish(call, i, r);
    }
    return true;
  }

  // lerp(self, end, w) = |w| < 0.5 ? self + w * (end - self) : end - (end - self) * (1 - w)
  // (torch's formula, fp32 opmath).
  if (f.family == ForeachFamily::lerp) {
    // Tensor weights (.List) would need a per-element branch: registered so that they fall back as
    // the one foreach op rather than per tensor.
    if (overload != ForeachOperand::Scalar && overload != ForeachOperand::ScalarList) return false;
    const std::vector<at::Tensor> ends = a[1].toTensorVector();
    if (!lists_supported(call.self, {&ends}) || !same_dtypes(call, {&ends})) return false;
    std::vector<double> weights;
    if (overload == ForeachOperand::Scalar) {
      if (!is_real(a[2].toScalar())) return false;
      weights.assign(count, a[2].toScalar().toDouble());
    } else {
      for (const c10::IValue& v : a[2].toListRef()) {
        if (!is_real(v.toScalar())) return false;
        weights.push_back(v.toScalar().toDouble());
      }
      if (weights.size() != count) return false;
    }
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor self = flat(call.self[i]), end = flat(ends[i]);
      const double w = weights[i];
      at::Tensor diff = fp32_like(self), step = fp32_like(self);
      run_binary(call.op + ".diff", BinaryOp::subtract, ten(end), ten(self), diff);
      at::Tensor r = result_for(call, i);
      if (std::abs(w) < 0.5) {
        run_binary(call.op + ".scale", BinaryOp::multiply, ten(diff), imm(w), step);
        run_binary(call.op, BinaryOp::add, ten(self), ten(step), r);
      } else {
        run_binary(call.op + ".scale", BinaryOp::multiply, ten(diff), imm(1.0 - w), step);
        run_binary(call.op, BinaryOp::subtract, ten(end), ten(step), r);
      }
      finish(call, i, r);
    }
    return true;
  }

  // addcmul: self + value * t1 * t2; addcdiv: self + value * t1 / t2 (left to right, as torch's
  // CPU kernels evaluate them, in fp32).
  if (f.family == ForeachFamily::addcmul || f.family == ForeachFamily::addcdiv) {
    const std::vector<at::Tensor> t1 = a[1].toTensorVector(), t2 = a[2].toTensorVector();
    if (!lists_supported(call.self, {&t1, &t2}) || !same_dtypes(call, {&t1, &t2})) return false;
    std::vector<double> values;
    if (overload == ForeachOperand::Scalar) {
      if (!is_real(a[3].toScalar())) return false;
      values.assign(count, a[3].toScalar().toDouble());
    } else if (overload == ForeachOperand::ScalarList) {
      for (const c10::IValue& v : a[3].toListRef()) {
        if (!is_real(v.toScalar())) return false;
        values.push_back(v.toScalar().toDouble());
      }
    } else if (overload == ForeachOperand::Tensor) {
      const at::Tensor& s = a[3].toTensor();
      if (s.dim() != 1 || !(at::isFloatingType(s.scalar_type()) || at::isIntegralType(s.scalar_type(), true)))
        return false;
      const at::Tensor host = s.to(at::kDouble).cpu();
      for (int64_t j = 0; j < host.numel(); ++j) values.push_back(host.data_ptr<double>()[j]);
    } else {
      return false;
    }
    if (values.size() != count) return false;
    const BinaryOp second = f.family == ForeachFamily::addcmul ? BinaryOp::multiply : BinaryOp::divide;
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor self = flat(call.self[i]), x1 = flat(t1[i]), x2 = flat(t2[i]);
      at::Tensor scaled = fp32_like(self), term = fp32_like(self);
      Operand first = ten(x1);
      if (values[i] != 1.0) {
        run_binary(call.op + ".scale", BinaryOp::multiply, ten(x1), imm(values[i]), scaled);
        first = ten(scaled);
      }
      run_binary(call.op + (second == BinaryOp::multiply ? ".mul" : ".div"), second, first, ten(x2), term);
      at::Tensor r = result_for(call, i);
      run_binary(call.op, BinaryOp::add, ten(self), ten(term), r);
      finish(call, i, r);
    }
    return true;
  }
  return false;
}

// A foreach row: in place it returns nothing, else the list of results.
LoweredResults lower_foreach_row(const std::string& op, LoweringArgs a, const ForeachOp& f) {
  ForeachCall call;
  bool lowered = false;
  try {
    lowered = lower_foreach(f, a, call);
  } catch (const kernels::KernelUnsupported&) {
    // Falling back after some in-place results were written would apply the step twice to them.
    TORCH_CHECK(call.done == 0, "neuron: ", op, ": a kernel rejected a tensor after others were updated");
    lowered = false;
  }
  if (!lowered) return std::nullopt;
  if (call.inplace) return std::vector<c10::IValue>{};
  return std::vector<c10::IValue>{c10::IValue(call.results)};
}

// _fused_adamw_ on the fused AdamW kernel: one program per parameter shape and dtypes (betas and eps
// are immediates; the step's bias corrections and the learning rate, which change from step to step,
// are the kernel's runtime input adamw_scalars, so step 2 onwards reuses the built program and its
// timing). exp_avg / exp_avg_sq stay in their dtype in HBM (bf16 for bf16 parameters); the kernel
// updates them in fp32 and rounds once, as torch's fused CPU kernel does.
bool lower_fused_adamw(const std::string& full, c10::ArrayRef<c10::IValue> a) {
  const std::vector<at::Tensor> params = a[0].toTensorVector(), grads = a[1].toTensorVector(),
                                m = a[2].toTensorVector(), v = a[3].toTensorVector(), steps = a[5].toTensorVector();
  double lr = 0;
  if (a[6].isTensor()) {
    if (a[6].toTensor().numel() != 1) return false;
    lr = immediate_value(a[6].toTensor(), 1e-3);
  } else {
    lr = a[6].toDouble();
  }
  const double beta1 = a[7].toDouble(), beta2 = a[8].toDouble(), wd = a[9].toDouble(), eps = a[10].toDouble();
  const bool amsgrad = a[11].toBool(), maximize = a[12].toBool();
  const bool scaled = !a[13].isNone() || !a[14].isNone();
  if (amsgrad || maximize || scaled || params.empty()) return false;
  if (grads.size() != params.size() || m.size() != params.size() || v.size() != params.size() ||
      steps.size() != params.size())
    return false;
  std::vector<int64_t> step_values;
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    auto two_byte_or_fp32 = [](const at::Tensor& t) {
      return t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16;
    };
    if (!on_neuron(p) || !two_byte_or_fp32(p) || p.numel() == 0 || !p.is_contiguous()) return false;
    for (const at::Tensor* t : {&grads[i], &m[i], &v[i]}) {
      if (!on_neuron(*t) || t->device() != p.device() || !two_byte_or_fp32(*t) || t->sizes() != p.sizes() ||
          !t->is_contiguous())
        return false;
    }
    if (m[i].scalar_type() != v[i].scalar_type()) return false;
    if (steps[i].numel() != 1) return false;
    const double step = immediate_value(steps[i], 1.0);
    if (step < 1 || step != std::floor(step)) return false;
    step_values.push_back(static_cast<int64_t>(step));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    kernels::AdamWSpec spec;
    spec.elements = p.numel();
    spec.param_dtype = *sim_dtype(p.scalar_type());
    spec.grad_dtype = *sim_dtype(grads[i].scalar_type());
    spec.state_dtype = *sim_dtype(m[i].scalar_type());
    spec.beta1 = beta1, spec.beta2 = beta2, spec.eps = eps;
    kernels::AdamWStep step;
    step.lr = lr, step.weight_decay = wd, step.step = step_values[i];
    std::vector<float> scalars = kernels::adamw_scalars(spec, step);
    std::ostringstream key;
    key << std::hexfloat << "fused_adamw|" << spec.elements << "|" << static_cast<int>(spec.param_dtype)
        << static_cast<int>(spec.grad_dtype) << static_cast<int>(spec.state_dtype) << "|" << beta1 << "," << beta2 << ","
        << eps;
    c10::DeviceGuard guard(p.device());
    execute_kernel(p.device().index(), key.str(), kernels::invocation(kernels::adamw_program, spec),
                   {buffer("param", p), buffer("grad", grads[i]), buffer("exp_avg", m[i]), buffer("exp_avg_sq", v[i]),
                    HostBuffer{"adamw_scalars", scalars.data(), scalars.size(), DType::fp32}},
                   {buffer("param", p), buffer("exp_avg", m[i]), buffer("exp_avg_sq", v[i])},
                   record_for(full, {p, grads[i]}, p.scalar_type()));
  }
  return true;
}

LoweredResults lower_fused_adamw_row(const std::string& op, LoweringArgs a) {
  bool lowered = false;
  try {
    lowered = lower_fused_adamw(op, a);
  } catch (const kernels::KernelUnsupported&) {
    TORCH_CHECK(false, "neuron: ", op, ": the AdamW kernel rejected a parameter (some may have been updated)");
  }
  if (!lowered) return std::nullopt;
  return std::vector<c10::IValue>{};
}

// The single-tensor forms (torch.optim's for-loop path, user code): lerp.Scalar, addcmul, addcdiv,
// their in-place and out= overloads, as the foreach lowering of one-element lists (same kernels,
// same fp32 intermediate arithmetic). out= writes the functional result into `out`.
// `family`: lerp, addcmul or addcdiv; `form`: functional, in place, or out= (the result copied into
// the trailing `out`).
enum class TernaryForm { functional, inplace, out };

LoweredResults lower_pointwise_ternary(const std::string& op, LoweringArgs a, ForeachFamily family, TernaryForm form) {
  const size_t n = a.size();
  const at::Tensor self = a[0].toTensor();
  // lerp.Scalar(self, end, weight) / addcmul(self, t1, t2, value): tensors first, then the scalar.
  const size_t tensors = family == ForeachFamily::lerp ? 2 : 3;
  std::vector<c10::IValue> lists;
  for (size_t i = 0; i < tensors; ++i) lists.emplace_back(std::vector<at::Tensor>{a[i].toTensor()});
  lists.push_back(a[tensors]);
  const std::string base = family == ForeachFamily::lerp ? "lerp" : family == ForeachFamily::addcmul ? "addcmul" : "addcdiv";
  const ForeachOp f{family, ForeachOperand::Scalar, form == TernaryForm::inplace, base};
  ForeachCall call;
  bool lowered = false;
  try {
    lowered = lower_foreach(f, lists, call);
  } catch (const kernels::KernelUnsupported&) {
    TORCH_CHECK(call.done == 0, "neuron: ", op, ": a kernel rejected a tensor after it was updated");
    lowered = false;
  }
  if (!lowered) return std::nullopt;
  if (form == TernaryForm::out) {
    at::Tensor target = a[n - 1].toTensor();
    const at::Tensor result = call.results.front();
    if (!on_neuron(target) || target.scalar_type() != result.scalar_type()) return std::nullopt;
    if (target.sizes() != result.sizes()) target.resize_(result.sizes());
    target.copy_(result);
    return std::vector<c10::IValue>{target};
  }
  return std::vector<c10::IValue>{form == TernaryForm::inplace ? self : call.results.front()};
}

}  // namespace

std::vector<Lowering> optimizer_lowerings() {
  std::vector<Lowering> rows;
  auto add = [&](const std::string& name, ForeachOp f) {
    rows.push_back(row(name, [f](const std::string& op, LoweringArgs a) { return lower_foreach_row(op, a, f); }));
  };
  const std::vector<std::pair<const char*, ForeachOperand>> operands = {
      {"Scalar", ForeachOperand::Scalar}, {"List", ForeachOperand::List}, {"ScalarList", ForeachOperand::ScalarList},
      {"Tensor", ForeachOperand::Tensor}};
  const std::vector<std::tuple<const char*, BinaryOp, bool>> binary = {  // name, kernel, takes a Tensor operand
      {"add", BinaryOp::add, true},           {"sub", BinaryOp::subtract, false},   {"mul", BinaryOp::multiply, true},
      {"div", BinaryOp::divide, true},        {"maximum", BinaryOp::maximum, false}, {"minimum", BinaryOp::minimum, false},
      {"clamp_min", BinaryOp::maximum, false}, {"clamp_max", BinaryOp::minimum, false}};
  for (const auto& [base, kind, takes_tensor] : binary) {
    for (const auto& [suffix, operand] : operands) {
      if (operand == ForeachOperand::Tensor && !takes_tensor) continue;
      const bool alpha = (std::string(base) == "add" || std::string(base) == "sub") &&
                         (operand == ForeachOperand::List || operand == ForeachOperand::Tensor);
      for (bool inplace : {true, false}) {
        ForeachOp f{ForeachFamily::binary, operand, inplace, base};
        f.binary = kind;
        f.has_alpha = alpha;
        add("_foreach_" + std::string(base) + (inplace ? "_" : "") + "." + suffix, f);
      }
    }
  }
  const std::vector<std::pair<const char*, UnaryOp>> unary = {
      {"sqrt", UnaryOp::sqrt}, {"neg", UnaryOp::neg}, {"abs", UnaryOp::abs}, {"reciprocal", UnaryOp::reciprocal}};
  for (const auto& [base, kind] : unary) {
    for (bool inplace : {true, false}) {
      ForeachOp f{ForeachFamily::unary, ForeachOperand::none, inplace, base};
      f.unary = kind;
      add("_foreach_" + std::string(base) + (inplace ? "_" : ""), f);
    }
  }
  // Tensor weights of lerp (.List) would need a per-element branch: registered so that they fall
  // back as the one foreach op rather than per tensor.
  const std::vector<std::tuple<const char*, ForeachFamily, std::vector<std::pair<const char*, ForeachOperand>>>> ternary = {
      {"lerp", ForeachFamily::lerp, {{"Scalar", ForeachOperand::Scalar}, {"ScalarList", ForeachOperand::ScalarList}, {"List", ForeachOperand::List}}},
      {"addcmul", ForeachFamily::addcmul, {{"Scalar", ForeachOperand::Scalar}, {"ScalarList", ForeachOperand::ScalarList}, {"Tensor", ForeachOperand::Tensor}}},
      {"addcdiv", ForeachFamily::addcdiv, {{"Scalar", ForeachOperand::Scalar}, {"ScalarList", ForeachOperand::ScalarList}, {"Tensor", ForeachOperand::Tensor}}}};
  for (const auto& [base, family, forms] : ternary) {
    for (const auto& [suffix, operand] : forms) {
      for (bool inplace : {true, false}) add("_foreach_" + std::string(base) + (inplace ? "_" : "") + "." + suffix, ForeachOp{family, operand, inplace, base});
    }
  }
  // The single-tensor forms (torch.optim's for-loop path, user code) as one-element foreach lists.
  auto ternary_row = [&](const char* name, ForeachFamily family, TernaryForm form) {
    rows.push_back(row(name, [family, form](const std::string& op, LoweringArgs a) { return lower_pointwise_ternary(op, a, family, form); }));
  };
  ternary_row("lerp.Scalar", ForeachFamily::lerp, TernaryForm::functional);
  ternary_row("lerp_.Scalar", ForeachFamily::lerp, TernaryForm::inplace);
  ternary_row("lerp.Scalar_out", ForeachFamily::lerp, TernaryForm::out);
  ternary_row("addcmul", ForeachFamily::addcmul, TernaryForm::functional);
  ternary_row("addcmul_", ForeachFamily::addcmul, TernaryForm::inplace);
  ternary_row("addcmul.out", ForeachFamily::addcmul, TernaryForm::out);
  ternary_row("addcdiv", ForeachFamily::addcdiv, TernaryForm::functional);
  ternary_row("addcdiv_", ForeachFamily::addcdiv, TernaryForm::inplace);
  ternary_row("addcdiv.out", ForeachFamily::addcdiv, TernaryForm::out);
  rows.push_back(row("_fused_adamw_", lower_fused_adamw_row));
  rows.push_back(row("_fused_adamw_.tensor_lr", lower_fused_adamw_row));
  return rows;
}

}  // namespace trnsim::frontend
