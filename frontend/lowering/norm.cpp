// Normalization lowerings: softmax / log_softmax and their backward, layer norm and RMS norm
// forward and backward on the kernels of kernels/normalization.h (batch and group norm: batch_norm.cpp).
#include <ATen/ATen.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/normalization.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {

namespace {

// _softmax / _log_softmax over the last dim (kernels/normalization.h) and their backward from the
// forward's output; half_to_float, or a backward whose input_dtype differs, falls back.
// Softmax over another dim: the dim moved last by a device permute, the last-dim kernel, and the
// result permuted back (both copies are kernels, timed like the softmax).
std::optional<at::Tensor> lower_softmax(const std::string& op, const at::Tensor& x_in, int64_t dim, bool log) {
  if (on_neuron(x_in) && x_in.dim() > 1 && !last_dim(x_in, dim)) {
    std::optional<at::Tensor> y = lower_softmax(op, x_in.transpose(dim, -1), -1, log);
    if (!y) return std::nullopt;
    c10::DeviceGuard guard(x_in.device());
    return y->transpose(dim, -1).contiguous();
  }
  if (!on_neuron(x_in) || x_in.numel() == 0 || !last_dim(x_in, dim)) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::SoftmaxSpec spec;
  spec.shape = {x.numel() / x.size(-1), x.size(-1)};
  spec.log = log;
  spec.input_dtype = spec.output_dtype = *dt;
  const std::string key = op + "|" + dims_key(spec.shape) + "|" + c10::toString(x.scalar_type());
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::softmax_program, spec), {buffer("x", x)},
                 {buffer("y", y)}, record_for(op, {x_in}, x_in.scalar_type()));
  return y;
}

std::optional<at::Tensor> lower_softmax_backward(const std::string& op, const at::Tensor& dy_in, const at::Tensor& y_in,
                                                 int64_t dim, at::ScalarType input_dtype, bool log) {
  if (on_neuron(dy_in) && on_neuron(y_in) && y_in.dim() > 1 && !last_dim(y_in, dim)) {
    std::optional<at::Tensor> dx =
        lower_softmax_backward(op, dy_in.transpose(dim, -1), y_in.transpose(dim, -1), -1, input_dtype, log);
    if (!dx) return std::nullopt;
    c10::DeviceGuard guard(y_in.device());
    return dx->transpose(dim, -1).contiguous();
  }
  if (!on_neuron(dy_in) || !on_neuron(y_in) || dy_in.numel() == 0 || dy_in.sizes() != y_in.sizes() ||
      dy_in.scalar_type() != y_in.scalar_type() || input_dtype != dy_in.scalar_type() || !last_dim(y_in, dim))
    return std::nullopt;
  const std::optional<DType> dt = sim_dtype(y_in.scalar_type());
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(y_in.device());
  at::Tensor y = y_in.contiguous(), dy = dy_in.contiguous();
  at::Tensor dx = at::empty(y_in.sizes(), y_in.options());
  kernels::SoftmaxBackwardSpec spec;
  spec.shape = {y.numel() / y.size(-1), y.size(-1)};
  spec.log = log;
  spec.input_dtype = spec.output_dtype = *dt;
  const std::string key = op + "|" + dims_key(spec.shape) + "|" + c10::toString(y.scalar_type());
  execute_kernel(y_in.device().index(), key, kernels::invocation(kernels::softmax_backward_program, spec),
                 {buffer("y", y), buffer("dy", dy)}, {buffer("dx", dx)},
                 record_for(op, {dy_in, y_in}, y_in.scalar_type()));
  return dx;
}

// native_layer_norm / _fused_rms_norm over the last dim (a one-element normalized_shape). The norm
// kernel also writes the statistics torch returns (mean, rstd: [..., 1]; the input's dtype for
// layer_norm as on the CPU, fp32 for rms_norm). Parameters must have the input's dtype.
// The elements per normalized row: the product of the trailing dims `normalized` names (they must
// match x's last dims); the kernels see x as [rows, columns] and the parameters flattened.
std::optional<int64_t> normalized_columns(const at::Tensor& x, c10::IntArrayRef normalized) {
  if (normalized.empty() || static_cast<int64_t>(normalized.size()) > x.dim()) return std::nullopt;
  int64_t cols = 1;
  for (size_t i = 0; i < normalized.size(); ++i) {
    if (x.size(x.dim() - static_cast<int64_t>(normalized.size()) + static_cast<int64_t>(i)) != normalized[i])
      return std::nullopt;
    cols *= normalized[i];
  }
  return cols > 0 ? std::optional<int64_t>(cols) : std::nullopt;
}

std::optional<std::vector<at::Tensor>> lower_norm(const std::string& op, kernels::NormKind kind, const at::Tensor& x_in,
                                                  c10::IntArrayRef normalized, const c10::IValue& w_arg,
                                                  const c10::IValue& b_arg, double eps) {
  const std::optional<int64_t> cols = normalized_columns(x_in, normalized);
  if (!on_neuron(x_in) || x_in.numel() == 0 || !cols) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  at::Tensor w = w_arg.isNone() ? at::Tensor() : w_arg.toTensor();
  at::Tensor b = b_arg.isNone() ? at::Tensor() : b_arg.toTensor();
  for (const at::Tensor* p : {&w, &b}) {
    if (p->defined() && (!on_neuron(*p) || p->scalar_type() != x_in.scalar_type() || p->sizes() != normalized))
      return std::nullopt;
  }
  const bool rms = kind == kernels::NormKind::rmsnorm;
  c10::DeviceGuard guard(x_in.device());
  const int64_t c = *cols, rows = x_in.numel() / c;
  at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::NormSpec spec;
  spec.kind = kind;
  spec.shape = {rows, c};
  spec.eps = eps;
  spec.weight = w.defined();
  spec.bias = b.defined();
  spec.input_dtype = spec.output_dtype = spec.param_dtype = *dt;
  spec.save_stats = true;  // the kernel writes mean (layernorm) and rstd, fp32, for the backward
  std::ostringstream key;
  key << std::hexfloat << op << "|" << rows << "," << c << "|" << spec.weight << spec.bias << "|" << eps << "|"
      << c10::toString(x.scalar_type()) << "|stats";
  std::vector<HostBuffer> inputs = {buffer("x", x)};
  if (w.defined()) inputs.push_back(buffer("w", w = w.contiguous()));
  if (b.defined()) inputs.push_back(buffer("b", b = b.contiguous()));
  std::vector<int64_t> stat_shape = dims(x_in.sizes());  // [..., 1, ..., 1] over the normalized dims
  for (size_t i = 0; i < normalized.size(); ++i) stat_shape[stat_shape.size() - 1 - i] = 1;
  at::Tensor mean = rms ? at::Tensor() : at::empty(stat_shape, x_in.options().dtype(at::kFloat));
  at::Tensor rstd = at::empty(stat_shape, x_in.options().dtype(at::kFloat));
  std::vector<HostBuffer> outputs = {buffer("y", y), buffer("rstd", rstd)};
  if (!rms) outputs.push_back(buffer("mean", mean));
  execute_kernel(x_in.device().index(), key.str(), kernels::invocation(kernels::norm_program, spec), inputs, outputs,
                 record_for(op, {x_in}, x_in.scalar_type()));
  if (rms) return std::vector<at::Tensor>{y, rstd};  // fp32, as on the CPU
  // layer_norm's statistics have the input's dtype, as on the CPU (a cast kernel for 2-byte dtypes).
  return std::vector<at::Tensor>{y, mean.to(x_in.scalar_type()), rstd.to(x_in.scalar_type())};
}

// native_layer_norm_backward / _fused_rms_norm_backward with the saved statistics: dx, dw, db as
// output_mask asks (the kernel computes dw / db whenever the parameter exists).
std::optional<std::vector<at::Tensor>> lower_norm_backward(const std::string& op, kernels::NormKind kind,
                                                           const at::Tensor& dy_in, const at::Tensor& x_in,
                                                           c10::IntArrayRef normalized, const at::Tensor* mean_in,
                                                           const at::Tensor& rstd_in, const c10::IValue& w_arg,
                                                           const c10::IValue& b_arg, std::vector<bool> mask) {
  const std::optional<int64_t> cols = normalized_columns(x_in, normalized);
  if (!on_neuron(x_in) || !on_neuron(dy_in) || !cols || dy_in.sizes() != x_in.sizes() ||
      dy_in.scalar_type() != x_in.scalar_type())
    return std::nullopt;
  if (x_in.numel() == 0) {
    // No rows: dx is empty and the parameter gradients are sums over nothing (the CPU has no
    // _fused_rms_norm_backward to fall back to).
    c10::DeviceGuard guard(x_in.device());
    auto zeros_like_param = [&](const c10::IValue& p) {
      return p.isNone() ? at::Tensor() : at::zeros(p.toTensor().sizes(), p.toTensor().options());
    };
    std::vector<at::Tensor> result = {mask[0] ? at::empty(x_in.sizes(), x_in.options()) : at::Tensor(),
                                      mask[1] ? zeros_like_param(w_arg) : at::Tensor()};
    if (kind == kernels::NormKind::layernorm) result.push_back(mask.size() > 2 && mask[2] ? zeros_like_param(b_arg) : at::Tensor());
    return result;
  }
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt || !on_neuron(rstd_in) || !sim_dtype(rstd_in.scalar_type()) || (mean_in && (!on_neuron(*mean_in) || !sim_dtype(mean_in->scalar_type()))))
    return std::nullopt;
  at::Tensor w = w_arg.isNone() ? at::Tensor() : w_arg.toTensor();
  at::Tensor b = b_arg.isNone() ? at::Tensor() : b_arg.toTensor();
  for (const at::Tensor* p : {&w, &b}) {
    if (p->defined() && (!on_neuron(*p) || p->scalar_type() != x_in.scalar_type() || p->sizes() != normalized))
      return std::nullopt;
  }
  const int64_t c = *cols, rows = x_in.numel() / c;
  if (rstd_in.numel() != rows || (mean_in && mean_in->numel() != rows)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  kernels::NormBackwardSpec spec;
  spec.kind = kind;
  spec.shape = {rows, c};
  spec.weight = w.defined();
  spec.bias = b.defined();
  spec.input_dtype = spec.param_dtype = *dt;
  at::Tensor x = x_in.contiguous(), dy = dy_in.contiguous();
  at::Tensor rstd = rstd_in.contiguous().to(at::kFloat);
  std::vector<HostBuffer> inputs = {buffer("x", x), buffer("dy", dy), buffer("rstd", rstd)};
  at::Tensor mean;
  if (mean_in) inputs.push_back(buffer("mean", mean = mean_in->contiguous().to(at::kFloat)));
  if (w.defined()) inputs.push_back(buffer("w", w = w.contiguous()));
  at::Tensor dx = at::empty(x_in.sizes(), x_in.options());
  std::vector<HostBuffer> outputs = {buffer("dx", dx)};
  at::Tensor dw, db;
  if (w.defined()) outputs.push_back(buffer("dw", dw = at::empty(w.sizes(), w.options())));
  if (b.defined()) outputs.push_back(buffer("db", db = at::empty(b.sizes(), b.options())));
  const std::string key = op + "|" + std::to_string(rows) + "," + std::to_string(c) + "|" + std::to_string(spec.weight) +
                          std::to_string(spec.bias) + "|" + c10::toString(x.scalar_type());
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::norm_backward_program, spec), inputs, outputs,
                 record_for(op, {dy_in, x_in}, x_in.scalar_type()));
  std::vector<at::Tensor> result = {mask[0] ? dx : at::Tensor(), mask[1] ? dw : at::Tensor()};
  if (kind == kernels::NormKind::layernorm) result.push_back(mask.size() > 2 && mask[2] ? db : at::Tensor());
  return result;
}

std::optional<at::Tensor> lower_softmax_row(const std::string& op, LoweringArgs args, bool log) {
  if (args[2].toBool()) return std::nullopt;  // half_to_float
  return lower_softmax(op, args[0].toTensor(), args[1].toInt(), log);
}

std::optional<at::Tensor> lower_softmax_backward_row(const std::string& op, LoweringArgs args, bool log) {
  return lower_softmax_backward(op, args[0].toTensor(), args[1].toTensor(), args[2].toInt(),
                                static_cast<at::ScalarType>(args[3].toInt()), log);
}

std::optional<std::vector<at::Tensor>> lower_layer_norm(const std::string& op, LoweringArgs args) {
  return lower_norm(op, kernels::NormKind::layernorm, args[0].toTensor(), args[1].toIntVector(), args[2], args[3],
                    args[4].toDouble());
}

// rms_norm's eps defaults to torch.finfo(dtype).eps.
std::optional<std::vector<at::Tensor>> lower_rms_norm(const std::string& op, LoweringArgs args) {
  const at::Tensor& x = args[0].toTensor();
  double eps = 0;
  if (!args[3].isNone()) eps = args[3].toDouble();
  else if (x.scalar_type() == at::kBFloat16) eps = 0.0078125;
  else if (x.scalar_type() == at::kHalf) eps = 0.0009765625;
  else eps = static_cast<double>(std::numeric_limits<float>::epsilon());
  return lower_norm(op, kernels::NormKind::rmsnorm, x, args[1].toIntVector(), args[2], c10::IValue(), eps);
}

std::optional<std::vector<at::Tensor>> lower_layer_norm_backward(const std::string& op, LoweringArgs args) {
  const at::Tensor& mean = args[3].toTensor();
  return lower_norm_backward(op, kernels::NormKind::layernorm, args[0].toTensor(), args[1].toTensor(),
                             args[2].toIntVector(), &mean, args[4].toTensor(), args[5], args[6], args[7].toBoolList().vec());
}

std::optional<std::vector<at::Tensor>> lower_rms_norm_backward(const std::string& op, LoweringArgs args) {
  return lower_norm_backward(op, kernels::NormKind::rmsnorm, args[0].toTensor(), args[1].toTensor(),
                             args[2].toIntVector(), nullptr, args[3].toTensor(), args[4], c10::IValue(),
                             args[5].toBoolList().vec());
}

}  // namespace

std::vector<Lowering> norm_lowerings() {
  auto softmax = [](bool log) { return [log](const std::string& op, LoweringArgs a) { return lower_softmax_row(op, a, log); }; };
  auto softmax_backward = [](bool log) {
    return [log](const std::string& op, LoweringArgs a) { return lower_softmax_backward_row(op, a, log); };
  };
  return {
      row("_softmax", softmax(false), {"_softmax.out"}),
      row("_log_softmax", softmax(true), {"_log_softmax.out"}),
      row("_softmax_backward_data", softmax_backward(false), {"_softmax_backward_data.out"}),
      row("_log_softmax_backward_data", softmax_backward(true), {"_log_softmax_backward_data.out"}),
      row("native_layer_norm", lower_layer_norm),
      row("_fused_rms_norm", lower_rms_norm),
      row("native_layer_norm_backward", lower_layer_norm_backward),
      row("_fused_rms_norm_backward", lower_rms_norm_backward),
  };
}

}  // namespace trnsim::frontend
