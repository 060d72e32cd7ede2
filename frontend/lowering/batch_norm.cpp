// Batch norm and group norm, composed of device kernels.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "kernels/elementwise.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;


// Batch norm (NCHW and [N, C]; statistics over every dim but 1), composed of device kernels: fp32
// casts, the reduction kernel for the per-channel sums, element-wise kernels with [1, C, 1, ...]
// broadcasts. Each step is an op on the device (re-dispatched, so each is timed, or counted when it
// falls back). Statistics are kept in fp32 and returned in the dtype of the running stats / params
// (as the CPU does for a bf16 input with fp32 params).
struct BatchNormArgs {
  at::Tensor input, weight, bias, running_mean, running_var;
};

at::Tensor optional_tensor(const c10::IValue& v) { return v.isNone() ? at::Tensor() : v.toTensor(); }

std::vector<int64_t> bn_reduce_dims(const at::Tensor& input) {
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

std::vector<int64_t> bn_channel_shape(const at::Tensor& input) {
  std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
  shape[1] = input.size(1);
  return shape;
}

bool bn_supported(const BatchNormArgs& a) {
  if (!on_neuron(a.input) || a.input.dim() < 2 || a.input.numel() == 0 || !sim_dtype(a.input.scalar_type())) return false;
  const int64_t c = a.input.size(1);
  for (const at::Tensor* t : {&a.weight, &a.bias, &a.running_mean, &a.running_var}) {
    if (t->defined() && (!on_neuron(*t) || t->dim() != 1 || t->size(0) != c || !sim_dtype(t->scalar_type()))) return false;
  }
  return true;
}

at::ScalarType bn_stat_dtype(const BatchNormArgs& a) {
  if (a.running_mean.defined()) return a.running_mean.scalar_type();
  if (a.weight.defined()) return a.weight.scalar_type();
  return a.input.scalar_type();
}

std::vector<at::Tensor> lower_batch_norm(const BatchNormArgs& a, bool training, double momentum, double eps) {
  c10::DeviceGuard guard(a.input.device());
  const std::vector<int64_t> dims = bn_reduce_dims(a.input), cshape = bn_channel_shape(a.input);
  const at::Tensor x = a.input.to(at::kFloat);
  at::Tensor mean, invstd;
  if (training) {
    mean = x.mean(dims);
    const at::Tensor centered = x - mean.view(cshape);
    const at::Tensor var = (centered * centered).mean(dims);  // biased, for normalising
    invstd = (var + eps).rsqrt();
    const int64_t n = x.numel() / x.size(1);
    if (a.running_mean.defined()) {
      at::Tensor rm = a.running_mean;
      rm.copy_(rm.to(at::kFloat) * (1 - momentum) + mean * momentum);
    }
    if (a.running_var.defined()) {
      at::Tensor rv = a.running_var;
      const double unbias = n > 1 ? double(n) / double(n - 1) : 1.0;  // the running variance is unbiased
      rv.copy_(rv.to(at::kFloat) * (1 - momentum) + var * (momentum * unbias));
    }
  } else {
    TORCH_CHECK(a.running_mean.defined() && a.running_var.defined(), "batch_norm in eval mode needs running stats");
    mean = a.running_mean.to(at::kFloat);
    invstd = (a.running_var.to(at::kFloat) + eps).rsqrt();
  }
  at::Tensor y = (x - mean.view(cshape)) * invstd.view(cshape);
  if (a.weight.defined()) y = y * a.weight.to(at::kFloat).view(cshape);
  if (a.bias.defined()) y = y + a.bias.to(at::kFloat).view(cshape);
  y = y.to(a.input.scalar_type());
  if (!training) {
    const at::TensorOptions empty = a.input.options().dtype(bn_stat_dtype(a));
    return {y, at::empty({0}, empty), at::empty({0}, empty)};
  }
  return {y, mean.to(bn_stat_dtype(a)), invstd.to(bn_stat_dtype(a))};
}

std::vector<at::Tensor> lower_batch_norm_backward(const at::Tensor& grad_out, const BatchNormArgs& a,
                                                  const at::Tensor& save_mean, const at::Tensor& save_invstd,
                                                  bool training, double eps, const std::vector<bool>& mask) {
  c10::DeviceGuard guard(a.input.device());
  const std::vector<int64_t> dims = bn_reduce_dims(a.input), cshape = bn_channel_shape(a.input);
  const at::Tensor x = a.input.to(at::kFloat), dy = grad_out.to(at::kFloat);
  at::Tensor mean, invstd;
  if (training) {
    mean = save_mean.to(at::kFloat);
    invstd = save_invstd.to(at::kFloat);
  } else {
    mean = a.running_mean.to(at::kFloat);
    invstd = (a.running_var.to(at::kFloat) + eps).rsqrt();
  }
  const at::Tensor xhat = (x - mean.view(cshape)) * invstd.view(cshape);
  const at::Tensor dbias = dy.sum(dims);
  const at::Tensor dweight = (dy * xhat).sum(dims);
  at::Tensor dx;
  if (mask[0]) {
    at::Tensor scale = a.weight.defined() ? invstd * a.weight.to(at::kFloat) : invstd;
    if (training) {
      const double n = double(x.numel() / x.size(1));
      // dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat))
      dx = (dy - (dbias / n).view(cshape) - xhat * (dweight / n).view(cshape)) * scale.view(cshape);
    } else {
      dx = dy * scale.view(cshape);
    }
    dx = dx.to(a.input.scalar_type());
  }
  const at::ScalarType param_dtype = a.weight.defined() ? a.weight.scalar_type() : a.input.scalar_type();
  return {dx, mask[1] ? dweight.to(param_dtype) : at::Tensor(), mask[2] ? dbias.to(param_dtype) : at::Tensor()};
}

std::optional<std::vector<at::Tensor>> lower_batch_norm_row(const std::string&, LoweringArgs v) {
  BatchNormArgs a{v[0].toTensor(), optional_tensor(v[1]), optional_tensor(v[2]), optional_tensor(v[3]),
                  optional_tensor(v[4])};
  const bool training = v[5].toBool();
  if (!bn_supported(a) || (!training && (!a.running_mean.defined() || !a.running_var.defined()))) return std::nullopt;
  return lower_batch_norm(a, training, v[6].toDouble(), v[7].toDouble());
}

std::optional<std::vector<at::Tensor>> lower_batch_norm_backward_row(const std::string&, LoweringArgs v) {
  const at::Tensor grad_out = v[0].toTensor();
  BatchNormArgs a{v[1].toTensor(), optional_tensor(v[2]), at::Tensor(), optional_tensor(v[3]), optional_tensor(v[4])};
  const at::Tensor save_mean = optional_tensor(v[5]), save_invstd = optional_tensor(v[6]);
  const bool training = v[7].toBool();
  const std::vector<bool> mask = {v[9].toBoolList().get(0), v[9].toBoolList().get(1), v[9].toBoolList().get(2)};
  const bool stats = training ? save_mean.defined() && save_invstd.defined() && on_neuron(save_mean) &&
                                    on_neuron(save_invstd) && save_mean.numel() == a.input.size(1)
                              : a.running_mean.defined() && a.running_var.defined();
  if (!bn_supported(a) || !stats || !on_neuron(grad_out) || grad_out.sizes() != a.input.sizes()) return std::nullopt;
  return lower_batch_norm_backward(grad_out, a, save_mean, save_invstd, training, v[8].toDouble(), mask);
}

// Group norm as a layer norm over each (sample, group)'s C/G * HxW elements followed by the
// per-channel affine, registered as the op's autograd kernel for the device: autograd then
// differentiates the composed device ops (layer norm backward, element-wise), so the backward runs on
// the device too (torch's own decomposition goes through var_mean, and its backward has no neuron
// kernel).
// native_group_norm's mean and rstd are differentiable outputs on the CPU (its backward takes their
// gradients too). The layer norm computes them already; this node gives them their gradient without
// recomputing anything in the forward: d mean / dx = 1 / n, d rstd / dx = -rstd^3 (x - mean) / n
// over each (sample, group) of n elements, as device ops when a backward asks for it.
struct GroupNormStatistics : public torch::autograd::Function<GroupNormStatistics> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& grouped,
                                                const at::Tensor& mean, const at::Tensor& rstd) {
    ctx->save_for_backward({grouped, mean, rstd});
    return {mean.clone(), rstd.clone()};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &mean = saved[1], &rstd = saved[2];  // [N, G, n], [N, G, 1] twice
    const double n = static_cast<double>(x.size(-1));
    at::Tensor dx;
    if (grads[0].defined()) dx = (grads[0] / n).expand(x.sizes());
    if (grads[1].defined()) {
      const at::Tensor term = (x - mean) * (rstd * rstd * rstd * grads[1] * (-1.0 / n));
      dx = dx.defined() ? dx + term : term;
    }
    return {dx, at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> group_norm_composed(const at::Tensor& input,
                                                                  const std::optional<at::Tensor>& weight,
                                                                  const std::optional<at::Tensor>& bias, c10::SymInt n,
                                                                  c10::SymInt c, c10::SymInt hxw, int64_t groups,
                                                                  double eps) {
  const int64_t N = n.guard_int(__FILE__, __LINE__), C = c.guard_int(__FILE__, __LINE__);
  TORCH_CHECK(groups > 0 && C % groups == 0, "group_norm: ", C, " channels are not divisible into ", groups, " groups");
  const at::Tensor grouped = input.reshape({N, groups, C / groups * hxw.guard_int(__FILE__, __LINE__)});
  auto [normed, mean, rstd] = at::native_layer_norm(grouped, {grouped.size(-1)}, std::nullopt, std::nullopt, eps);
  at::Tensor y = normed.reshape(input.sizes());
  std::vector<int64_t> channel_shape(static_cast<size_t>(input.dim()), 1);
  if (input.dim() > 1) channel_shape[1] = C;
  if (weight && weight->defined()) y = y * weight->reshape(channel_shape);
  if (bias && bias->defined()) y = y + bias->reshape(channel_shape);
  if (!input.requires_grad() || !at::GradMode::is_enabled())
    return {y, mean.reshape({N, groups}).detach(), rstd.reshape({N, groups}).detach()};
  torch::autograd::variable_list stats = GroupNormStatistics::apply(grouped, mean.detach(), rstd.detach());
  return {y, stats[0].reshape({N, groups}), stats[1].reshape({N, groups})};
}

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("native_group_norm", group_norm_composed);
}

}  // namespace

std::vector<Lowering> batch_norm_lowerings() {
  return {
      row("native_batch_norm", lower_batch_norm_row),
      row("native_batch_norm_backward", lower_batch_norm_backward_row),
  };
}

}  // namespace trnsim::frontend
