// Integer-style arithmetic lowerings: fmod, remainder, floor_divide and div with a rounding mode,
// and isin, composed of element-wise kernels. The ALU's mod is C fmod (exact); remainder takes the
// divisor's sign (fmod + b where the signs differ: torch's own formula, so floats match bit for
// bit); integer floor / trunc division is (a - fmod(a, b)) / b, an exact integer quotient, floored
// where the signs differ.
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/elementwise.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;

enum class Division { fmod, remainder, quotient };

// `mode_arg`: the rounding mode argument of div.*_mode (None: true division, left to div.Tensor's
// row, so it falls back here); `floor`: floor_divide's mode.
std::optional<at::Tensor> lower_division(const std::string& op, LoweringArgs args, Division what,
                                         const c10::IValue* mode_arg, bool floor) {
  const at::Tensor& a = args[0].toTensor();
  const at::Tensor b = args[1].isTensor() ? args[1].toTensor() : scalar_operand(args[1].toScalar());
  if (!on_neuron(a)) return std::nullopt;
  const at::ScalarType type = at::result_type(a, b);
  const bool integral = at::isIntegralType(type, /*includeBool=*/false);
  std::string mode = floor ? "floor" : "";
  if (mode_arg) {
    if (mode_arg->isNone()) return std::nullopt;
    mode = std::string(mode_arg->toStringRef());
  }
  if (!mode.empty() && !integral) return std::nullopt;  // float floor/trunc division rounds a/b first
  if (integral && b.dim() == 0 && !on_neuron(b) && b.item<double>() == 0) return std::nullopt;  // torch raises
  if (integral && on_neuron(b) && host_alias(b).eq(0).any().item<bool>()) return std::nullopt;
  std::optional<at::Tensor> r = lower_binary(op + ".fmod", a, b, BinaryOp::mod);
  if (!r) return std::nullopt;
  auto cmp = [&](const at::Tensor& x, double v, BinaryOp k) {
    return lower_binary(op + ".sign", x, at::scalar_tensor(v, at::kDouble), k, true);
  };
  // where r != 0 and sign(r) != sign(b)
  std::optional<at::Tensor> r_neg = cmp(*r, 0.0, BinaryOp::less),
                            b_neg = cmp(b.dim() == 0 && !on_neuron(b) ? b.to(a.device()) : b, 0.0, BinaryOp::less),
                            r_nz = cmp(*r, 0.0, BinaryOp::not_equal);
  if (!r_neg || !b_neg || !r_nz) return std::nullopt;
  std::optional<at::Tensor> differ = lower_binary(op + ".differ", *r_neg, *b_neg, BinaryOp::not_equal, true);
  if (!differ) return std::nullopt;
  std::optional<at::Tensor> fix = lower_binary(op + ".fix", *differ, *r_nz, BinaryOp::minimum);
  if (!fix) return std::nullopt;
  if (what == Division::fmod) return r;
  if (what == Division::remainder) {
    std::optional<at::Tensor> shifted = lower_binary(op + ".shift", *r, b, BinaryOp::add);
    if (!shifted) return std::nullopt;
    return lower_where(op, *fix, *shifted, std::nullopt, *r, std::nullopt, type);
  }
  std::optional<at::Tensor> exact = lower_binary(op + ".sub", a, *r, BinaryOp::subtract);
  if (!exact) return std::nullopt;
  std::optional<at::Tensor> q = lower_binary(op + ".div", *exact, b, BinaryOp::divide);  // exact: an integer quotient
  if (!q) return std::nullopt;
  if (mode == "floor") q = lower_binary(op + ".floor", *q, *fix, BinaryOp::subtract);
  if (!q) return std::nullopt;
  at::Tensor out = at::empty(q->sizes(), q->options().dtype(type));
  host_alias(out).copy_(host_alias(*q));  // integral values: the conversion back is exact
  return out;
}

// isin: any(elements[..., None] == test_elements.flatten()) over the last dim.
std::optional<at::Tensor> lower_isin(const std::string& op, LoweringArgs args) {
  const at::Tensor &x = args[0].toTensor(), &t = args[1].toTensor();
  if (!on_neuron(x) || !on_neuron(t) || x.numel() == 0 || t.numel() == 0) return std::nullopt;
  std::optional<at::Tensor> eq = lower_binary(op + ".eq", x.unsqueeze(-1), t.flatten(), BinaryOp::equal, true);
  if (!eq) return std::nullopt;
  at::Tensor hit = at::any(*eq, -1);
  return args[3].toBool() ? at::logical_not(hit) : hit;
}

}  // namespace

std::vector<Lowering> arithmetic_lowerings() {
  auto division = [](Division what, bool floor) {
    return [what, floor](const std::string& op, LoweringArgs a) { return lower_division(op, a, what, nullptr, floor); };
  };
  auto div_mode = [](const std::string& op, LoweringArgs a) { return lower_division(op, a, Division::quotient, &a[2], false); };
  return {
      row("fmod.Tensor", division(Division::fmod, false), {"fmod.Tensor_out"}),
      row("fmod.Scalar", division(Division::fmod, false)),
      row("remainder.Tensor", division(Division::remainder, false), {"remainder.Tensor_out"}),
      row("remainder.Scalar", division(Division::remainder, false)),
      row("floor_divide", division(Division::quotient, true), {"floor_divide.out"}),
      row("floor_divide.Scalar", division(Division::quotient, true)),
      row("div.Tensor_mode", div_mode, {"div.out_mode"}),
      row("div.Scalar_mode", div_mode),
      row("isin.Tensor_Tensor", lower_isin, {"isin.Tensor_Tensor_out"}),
  };
}

}  // namespace trnsim::frontend
