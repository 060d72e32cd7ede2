// Activation lowerings: gelu, softplus, the hard activations and the activations' backwards,
// composed of element-wise kernels (kernels/elementwise.h) in torch's order of operations.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/elementwise.h"
#include "kernels/kernel_common.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

// sigmoid_backward(grad, y) = grad * y * (1 - y); tanh_backward(grad, y) = grad * (1 - y^2): composed
// of element-wise kernels. gelu_backward and silu_backward: lower_gelu_backward / lower_silu_backward.
enum class SaturatingActivation { sigmoid, tanh };

std::optional<at::Tensor> lower_activation_backward(const std::string& op, const at::Tensor& grad, const at::Tensor& y,
                                                    SaturatingActivation which) {
  if (!on_neuron(grad) || !on_neuron(y) || grad.sizes() != y.sizes() || grad.scalar_type() != y.scalar_type())
    return std::nullopt;
  const at::Tensor one = at::scalar_tensor(1.0, at::kDouble);
  std::optional<at::Tensor> local;
  if (which == SaturatingActivation::sigmoid) {
    std::optional<at::Tensor> one_minus = lower_binary(op + ".1-y", one, y, BinaryOp::subtract);
    if (!one_minus) return std::nullopt;
    local = lower_binary(op + ".y(1-y)", y, *one_minus, BinaryOp::multiply);
  } else {
    std::optional<at::Tensor> sq = lower_binary(op + ".y^2", y, y, BinaryOp::multiply);
    if (!sq) return std::nullopt;
    local = lower_binary(op + ".1-y^2", one, *sq, BinaryOp::subtract);
  }
  if (!local) return std::nullopt;
  return lower_binary(op, grad, *local, BinaryOp::multiply);
}

// silu_backward(grad, x) = grad * s * (1 + x * (1 - s)), s = sigmoid(x) (the activation table).
std::optional<at::Tensor> lower_silu_backward(const at::Tensor& grad, const at::Tensor& x) {
  if (!on_neuron(grad) || !on_neuron(x) || grad.sizes() != x.sizes() || grad.scalar_type() != x.scalar_type())
    return std::nullopt;
  const std::string op = "silu_backward";
  std::optional<at::Tensor> s = lower_unary(op + ".sigmoid", x, UnaryOp::sigmoid);
  if (!s) return std::nullopt;
  std::optional<at::Tensor> t = lower_binary(op + ".1-s", at::scalar_tensor(1.0, at::kDouble), *s, BinaryOp::subtract);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".x(1-s)", x, *t, BinaryOp::multiply);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".1+", *t, at::scalar_tensor(1.0, at::kDouble), BinaryOp::add);
  if (!t) return std::nullopt;
  t = lower_binary(op + ".s*", *s, *t, BinaryOp::multiply);
  if (!t) return std::nullopt;
  return lower_binary(op, grad, *t, BinaryOp::multiply);
}

// gelu_backward(grad, x): approximate="none" is grad * gelu'(x) with the activation table's exact
// gelu_dx (Phi(x) + x * phi(x)). approximate="tanh" (the ISA has no derivative of the tanh form) is
// composed: with u = k x (1 + c x^2), t = tanh(u), gelu' = 0.5 (1 + t) + 0.5 k x (1 - t^2) (1 + 3c x^2),
// k = sqrt(2/pi), c = 0.044715. Each step rounds to the tensor's dtype (bf16 is looser than torch's
// fp32-internal formula).
std::optional<at::Tensor> lower_gelu_backward(const at::Tensor& grad, const at::Tensor& x, const std::string& approximate) {
  if (!on_neuron(grad) || !on_neuron(x) || grad.sizes() != x.sizes() || grad.scalar_type() != x.scalar_type())
    return std::nullopt;
  const std::string op = "gelu_backward";
  if (approximate == "none") {
    std::optional<at::Tensor> d = lower_unary(op + ".dx", x, UnaryOp::gelu_dx);
    if (!d) return std::nullopt;
    return lower_binary(op, grad, *d, BinaryOp::multiply);
  }
  if (approximate != "tanh") return std::nullopt;
  constexpr double k = 0.7978845608028654, c = 0.044715;
  auto num = [](double v) { return at::scalar_tensor(v, at::kDouble); };
  std::optional<at::Tensor> x2 = lower_binary(op + ".x2", x, x, BinaryOp::multiply);
  if (!x2) return std::nullopt;
  std::optional<at::Tensor> u = lower_binary(op + ".cx2", *x2, num(c), BinaryOp::multiply);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".1+cx2", *u, num(1.0), BinaryOp::add);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".x(1+cx2)", x, *u, BinaryOp::multiply);
  if (!u) return std::nullopt;
  u = lower_binary(op + ".ku", *u, num(k), BinaryOp::multiply);
  if (!u) return std::nullopt;
  std::optional<at::Tensor> t = lower_unary(op + ".tanh", *u, UnaryOp::tanh);
  if (!t) return std::nullopt;
  std::optional<at::Tensor> r = lower_binary(op + ".t2", *t, *t, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".1-t2", num(1.0), *r, BinaryOp::subtract);
  if (!r) return std::nullopt;
  std::optional<at::Tensor> p = lower_binary(op + ".3cx2", *x2, num(3.0 * c), BinaryOp::multiply);
  if (!p) return std::nullopt;
  p = lower_binary(op + ".1+3cx2", *p, num(1.0), BinaryOp::add);
  if (!p) return std::nullopt;
  r = lower_binary(op + ".(1-t2)(1+3cx2)", *r, *p, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".x*", *r, x, BinaryOp::multiply);
  if (!r) return std::nullopt;
  r = lower_binary(op + ".0.5k*", *r, num(0.5 * k), BinaryOp::multiply);
  if (!r) return std::nullopt;
  std::optional<at::Tensor> h = lower_binary(op + ".0.5t", *t, num(0.5), BinaryOp::multiply);
  if (!h) return std::nullopt;
  h = lower_binary(op + ".0.5+0.5t", *h, num(0.5), BinaryOp::add);
  if (!h) return std::nullopt;
  h = lower_binary(op + ".dx", *h, *r, BinaryOp::add);
  if (!h) return std::nullopt;
  return lower_binary(op, grad, *h, BinaryOp::multiply);
}

// hardsigmoid(x) = min(max(x + 3, 0), 6) / 6 and hardswish(x) = x * that, with their backwards,
// composed of element-wise kernels in torch's order of operations.
enum class HardActivation { sigmoid, swish };

struct ElementwiseSteps {
  const std::string& op;
  at::ScalarType dtype;
  at::Tensor bin(const at::Tensor& a, const at::Tensor& b, BinaryOp k, bool compare = false) const {
    std::optional<at::Tensor> r = lower_binary(op, a, b, k, compare, /*round_immediate=*/false);
    if (!r) throw kernels::KernelUnsupported(op + ": an element-wise step has no kernel");
    return *r;
  }
  at::Tensor un(const at::Tensor& x, UnaryOp k) const {
    std::optional<at::Tensor> r = lower_unary(op, x, k);
    if (!r) throw kernels::KernelUnsupported(op + ": an element-wise step has no kernel");
    return *r;
  }
  at::Tensor where(const at::Tensor& cond, std::optional<at::Tensor> a, std::optional<double> as,
                   std::optional<at::Tensor> b, std::optional<double> bs) const {
    std::optional<at::Tensor> r = lower_where(op, cond, a, as, b, bs, dtype);
    if (!r) throw kernels::KernelUnsupported(op + ": where has no kernel");
    return *r;
  }
};

std::optional<at::Tensor> lower_hard(const std::string& op, LoweringArgs args, HardActivation which) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
  const ElementwiseSteps s{op, x.scalar_type()};
  at::Tensor t = s.bin(s.bin(s.bin(x, scalar_operand(3.0), BinaryOp::add), scalar_operand(0.0), BinaryOp::maximum), scalar_operand(6.0), BinaryOp::minimum);
  if (which == HardActivation::swish) t = s.bin(x, t, BinaryOp::multiply);
  return s.bin(t, scalar_operand(6.0), BinaryOp::divide);
}

std::optional<at::Tensor> lower_hard_backward(const std::string& op, LoweringArgs args, HardActivation which) {
  const at::Tensor& grad = args[0].toTensor();
  const at::Tensor& x = args[1].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
  if (!on_neuron(grad) || grad.scalar_type() != x.scalar_type() || grad.sizes() != x.sizes()) return std::nullopt;
  const ElementwiseSteps s{op, x.scalar_type()};
  if (which == HardActivation::sigmoid) {  // grad / 6 where -3 < x < 3, else 0
    const at::Tensor inside = s.bin(s.bin(x, scalar_operand(-3.0), BinaryOp::greater, true), s.bin(x, scalar_operand(3.0), BinaryOp::less, true),
                                    BinaryOp::minimum);
    return s.where(inside, s.bin(grad, scalar_operand(6.0), BinaryOp::divide), std::nullopt, std::nullopt, 0.0);
  }
  // hardswish_backward: 0 below -3, grad * (x / 3 + 0.5) up to 3, grad above
  const at::Tensor slope = s.bin(grad, s.bin(s.bin(x, scalar_operand(3.0), BinaryOp::divide), scalar_operand(0.5), BinaryOp::add), BinaryOp::multiply);
  const at::Tensor upper = s.where(s.bin(x, scalar_operand(3.0), BinaryOp::less_equal, true), slope, std::nullopt, grad, std::nullopt);
  return s.where(s.bin(x, scalar_operand(-3.0), BinaryOp::less, true), std::nullopt, 0.0, upper, std::nullopt);
}

// softplus: x > threshold / beta ? x : log(1 + exp(beta x)) / beta, in fp32 as torch's opmath.
std::optional<at::Tensor> lower_softplus(const std::string&, LoweringArgs args) {
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type())) return std::nullopt;
  const double beta = args[1].toScalar().toDouble(), threshold = args[2].toScalar().toDouble();
  const at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
  at::Tensor bx = beta == 1.0 ? x : at::mul(x, beta);
  at::Tensor soft = at::log(at::add(at::exp(bx), 1.0));
  if (beta != 1.0) soft = at::div(soft, beta);
  at::Tensor y = at::where(at::gt(bx, threshold), x, soft);
  return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
}

// leaky_relu(x, slope) = x > 0 ? x : x * slope, and its backward grad * (x > 0 ? 1 : slope) (the CPU's
// kernels; the product in fp32, rounded once). `self_is_result` (the in-place form's backward reads the
// result, whose sign is x's for a positive slope, as torch requires).
std::optional<at::Tensor> lower_leaky_relu(const std::string& op, const at::Tensor& x, const at::Tensor& value,
                                           const c10::Scalar& slope) {
  if (!on_neuron(x) || !on_neuron(value) || !sim_dtype(x.scalar_type()) || value.scalar_type() != x.scalar_type() ||
      value.sizes() != x.sizes())
    return std::nullopt;
  const ElementwiseSteps s{op, x.scalar_type()};
  const at::Tensor positive = s.bin(x, scalar_operand(0.0), BinaryOp::greater, true);
  return s.where(positive, value, std::nullopt, s.bin(value, scalar_operand(slope), BinaryOp::multiply), std::nullopt);
}

// elu(x, alpha, scale, input_scale) = x > 0 ? x * scale : (exp(x * input_scale) - 1) * alpha * scale,
// in fp32 (torch's opmath: a bf16 input cast on the device, the result rounded once); selu and celu
// are elu with their constants. The backward from the input (is_result false):
// grad * (x > 0 ? scale : input_scale * alpha * scale * exp(x * input_scale)), or from the result y:
// grad * (y > 0 ? scale : input_scale * (y + alpha * scale)).
struct EluCoefficients {
  double negative, positive, input;  // alpha * scale, scale, input_scale
  explicit EluCoefficients(LoweringArgs a)
      : negative(a[0].toScalar().toDouble() * a[1].toScalar().toDouble()),
        positive(a[1].toScalar().toDouble()),
        input(a[2].toScalar().toDouble()) {}
};

std::optional<at::Tensor> lower_elu(const std::string& op, LoweringArgs args) {
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type())) return std::nullopt;
  const EluCoefficients c(args.slice(1));
  c10::DeviceGuard guard(x_in.device());
  const at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
  const ElementwiseSteps s{op, at::kFloat};
  at::Tensor negative = s.un(s.bin(x, scalar_operand(c.input), BinaryOp::multiply), UnaryOp::exp);
  negative = s.bin(s.bin(negative, scalar_operand(1.0), BinaryOp::subtract), scalar_operand(c.negative), BinaryOp::multiply);
  const at::Tensor positive = s.bin(x, scalar_operand(c.positive), BinaryOp::multiply);
  const at::Tensor y = s.where(s.bin(x, scalar_operand(0.0), BinaryOp::greater, true), positive, std::nullopt, negative, std::nullopt);
  return x_in.scalar_type() == at::kFloat ? y : y.to(x_in.scalar_type());
}

std::optional<at::Tensor> lower_elu_backward(const std::string& op, LoweringArgs args) {
  const at::Tensor& grad_in = args[0].toTensor();
  const bool is_result = args[4].toBool();
  const at::Tensor& v_in = args[5].toTensor();
  if (!on_neuron(grad_in) || !on_neuron(v_in) || !sim_dtype(v_in.scalar_type()) ||
      grad_in.scalar_type() != v_in.scalar_type() || grad_in.sizes() != v_in.sizes())
    return std::nullopt;
  const EluCoefficients c(args.slice(1));
  if (is_result && args[1].toScalar().toDouble() < 0) return std::nullopt;  // the CPU raises
  c10::DeviceGuard guard(v_in.device());
  const bool fp32 = v_in.scalar_type() == at::kFloat;
  const at::Tensor v = fp32 ? v_in : v_in.to(at::kFloat), grad = fp32 ? grad_in : grad_in.to(at::kFloat);
  const ElementwiseSteps s{op, at::kFloat};
  at::Tensor slope;
  if (is_result) {
    slope = s.bin(s.bin(v, scalar_operand(c.negative), BinaryOp::add), scalar_operand(c.input), BinaryOp::multiply);
  } else {
    slope = s.un(s.bin(v, scalar_operand(c.input), BinaryOp::multiply), UnaryOp::exp);
    slope = s.bin(slope, scalar_operand(c.input * c.negative), BinaryOp::multiply);
  }
  const at::Tensor negative = s.bin(grad, slope, BinaryOp::multiply);
  const at::Tensor positive = s.bin(grad, scalar_operand(c.positive), BinaryOp::multiply);
  const at::Tensor dx = s.where(s.bin(v, scalar_operand(0.0), BinaryOp::greater, true), positive, std::nullopt, negative, std::nullopt);
  return fp32 ? dx : dx.to(v_in.scalar_type());
}

// x on the device in a dtype its kernels take, and (for a backward) the grad there too, of x's dtype and shape.
bool input_and_grad_on_device(const at::Tensor& x, const at::Tensor* grad) {
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return false;
  return !grad || (on_neuron(*grad) && grad->scalar_type() == x.scalar_type() && grad->sizes() == x.sizes());
}

// mish(x) = x * tanh(softplus(x)) and its backward grad * (t + x * sigmoid(x) * (1 - t^2)),
// t = tanh(softplus(x)), in fp32 as torch's opmath (softplus: the device's lowering).
std::optional<at::Tensor> lower_mish(const std::string& op, const at::Tensor& x_in, const at::Tensor* grad_in) {
  if (!input_and_grad_on_device(x_in, grad_in)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const bool fp32 = x_in.scalar_type() == at::kFloat;
  const at::Tensor x = fp32 ? x_in : x_in.to(at::kFloat);
  const ElementwiseSteps s{op, at::kFloat};
  const at::Tensor t = s.un(at::softplus(x, 1, 20), UnaryOp::tanh);
  at::Tensor y;
  if (!grad_in) {
    y = s.bin(x, t, BinaryOp::multiply);
  } else {
    const at::Tensor one_minus = s.bin(scalar_operand(1.0), s.bin(t, t, BinaryOp::multiply), BinaryOp::subtract);
    const at::Tensor local = s.bin(t, s.bin(s.bin(x, s.un(x, UnaryOp::sigmoid), BinaryOp::multiply), one_minus, BinaryOp::multiply),
                                   BinaryOp::add);
    y = s.bin(fp32 ? *grad_in : grad_in->to(at::kFloat), local, BinaryOp::multiply);
  }
  return fp32 ? y : y.to(x_in.scalar_type());
}

// log_sigmoid_forward(x) -> (min(x, 0) - log(1 + z), z) with z = exp(-|x|) (the CPU keeps z as the
// buffer its backward reads), and log_sigmoid_backward(grad, x, buffer) = grad * (x < 0 ? 1 : z) / (1 + z),
// z recomputed from x. In fp32 (torch's opmath: bf16 cast on the device, results rounded once).
// binary_cross_entropy_with_logits is composed of these on the CPU too.
std::optional<std::vector<at::Tensor>> lower_log_sigmoid(const std::string& op, const at::Tensor& x_in,
                                                         const at::Tensor* grad_in) {
  if (!input_and_grad_on_device(x_in, grad_in)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const bool fp32 = x_in.scalar_type() == at::kFloat;
  const at::Tensor x = fp32 ? x_in : x_in.to(at::kFloat);
  const ElementwiseSteps s{op, at::kFloat};
  const at::Tensor z = s.un(s.bin(s.un(x, UnaryOp::abs), scalar_operand(-1.0), BinaryOp::multiply), UnaryOp::exp);
  const at::Tensor one_plus = s.bin(z, scalar_operand(1.0), BinaryOp::add);
  auto rounded = [&](const at::Tensor& t) { return fp32 ? t : t.to(x_in.scalar_type()); };
  if (!grad_in) {
    const at::Tensor y = s.bin(s.bin(x, scalar_operand(0.0), BinaryOp::minimum), s.un(one_plus, UnaryOp::log), BinaryOp::subtract);
    return std::vector<at::Tensor>{rounded(y), rounded(z)};
  }
  const at::Tensor numerator =
      s.where(s.bin(x, scalar_operand(0.0), BinaryOp::less, true), std::nullopt, 1.0, z, std::nullopt);
  const at::Tensor local = s.bin(numerator, one_plus, BinaryOp::divide);
  return std::vector<at::Tensor>{rounded(s.bin(fp32 ? *grad_in : grad_in->to(at::kFloat), local, BinaryOp::multiply))};
}

std::optional<at::Tensor> lower_gelu(const std::string& op, LoweringArgs args) {
  const std::string approximate(args[1].toStringRef());
  if (approximate != "none" && approximate != "tanh") return std::nullopt;
  return lower_unary(op, args[0].toTensor(), approximate == "tanh" ? UnaryOp::gelu_tanh : UnaryOp::gelu);
}

}  // namespace

std::vector<Lowering> activation_lowerings() {
  auto saturating = [](SaturatingActivation which) {
    return [which](const std::string& op, LoweringArgs a) {
      return lower_activation_backward(op, a[0].toTensor(), a[1].toTensor(), which);
    };
  };
  auto hard = [](HardActivation which) { return [which](const std::string& op, LoweringArgs a) { return lower_hard(op, a, which); }; };
  auto hard_backward = [](HardActivation which) {
    return [which](const std::string& op, LoweringArgs a) { return lower_hard_backward(op, a, which); };
  };
  return {
      row("gelu", lower_gelu, {"gelu.out"}),
      row("sigmoid_backward", saturating(SaturatingActivation::sigmoid), {"sigmoid_backward.grad_input"}),
      row("tanh_backward", saturating(SaturatingActivation::tanh), {"tanh_backward.grad_input"}),
      row("silu_backward", [](const std::string&, LoweringArgs a) { return lower_silu_backward(a[0].toTensor(), a[1].toTensor()); },
          {"silu_backward.grad_input"}),
      row("gelu_backward", [](const std::string&, LoweringArgs a) {
        return lower_gelu_backward(a[0].toTensor(), a[1].toTensor(), std::string(a[2].toStringRef()));
      }, {"gelu_backward.grad_input"}),
      row("hardsigmoid", hard(HardActivation::sigmoid), {"hardsigmoid.out"}),
      row("hardswish", hard(HardActivation::swish), {"hardswish.out"}),
      row("hardsigmoid_backward", hard_backward(HardActivation::sigmoid), {"hardsigmoid_backward.grad_input"}),
      row("hardswish_backward", hard_backward(HardActivation::swish)),
      row("softplus", lower_softplus, {"softplus.out"}),
      row("hardsigmoid_", [](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_hard(op, a, HardActivation::sigmoid));
      }),
      row("hardswish_", [](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_hard(op, a, HardActivation::swish));
      }),
      row("leaky_relu", [](const std::string& op, LoweringArgs a) {
        return lower_leaky_relu(op, a[0].toTensor(), a[0].toTensor(), a[1].toScalar());
      }, {"leaky_relu.out"}),
      row("leaky_relu_", [](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_leaky_relu(op, a[0].toTensor(), a[0].toTensor(), a[1].toScalar()));
      }),
      // leaky_relu_backward(grad, self, slope, self_is_result): the sign test on self, the slope on grad
      row("leaky_relu_backward", [](const std::string& op, LoweringArgs a) -> std::optional<at::Tensor> {
        if (a[3].toBool() && a[2].toScalar().toDouble() < 0) return std::nullopt;  // the CPU raises
        return lower_leaky_relu(op, a[1].toTensor(), a[0].toTensor(), a[2].toScalar());
      }, {"leaky_relu_backward.grad_input"}),
      row("elu", lower_elu, {"elu.out"}),
      row("elu_", [](const std::string& op, LoweringArgs a) { return into_self(a[0].toTensor(), lower_elu(op, a)); }),
      row("elu_backward", lower_elu_backward, {"elu_backward.grad_input"}),
      row("log_sigmoid_forward", [](const std::string& op, LoweringArgs a) { return lower_log_sigmoid(op, a[0].toTensor(), nullptr); }),
      row("log_sigmoid_backward", [](const std::string& op, LoweringArgs a) {
        const at::Tensor grad = a[0].toTensor();
        return lower_log_sigmoid(op, a[1].toTensor(), &grad);
      }, {"log_sigmoid_backward.grad_input"}),
      row("mish", [](const std::string& op, LoweringArgs a) { return lower_mish(op, a[0].toTensor(), nullptr); }, {"mish.out"}),
      row("mish_", [](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_mish(op, a[0].toTensor(), nullptr));
      }),
      row("mish_backward", [](const std::string& op, LoweringArgs a) {
        const at::Tensor grad = a[0].toTensor();
        return lower_mish(op, a[1].toTensor(), &grad);
      }),
  };
}

}  // namespace trnsim::frontend
