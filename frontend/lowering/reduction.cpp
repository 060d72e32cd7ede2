// Reduction lowerings: sum / mean / amax / amin / max / min / argmax / argmin over any dims on the
// reduction kernel (kernels/reduction.h), all / any, var / std (and with the mean), vector norms,
// and the scans and products of kernels/scan.h.
#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/elementwise.h"
#include "kernels/reduction.h"
#include "kernels/scan.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {

using kernels::BinaryOp;
using kernels::ReduceOp;
using kernels::ReduceSpec;
using kernels::UnaryOp;

// Reductions (kernels/reduction.h): sum / mean / amax / amin over any dims (empty = all), max / min
// over one dim with their indices, argmax / argmin. The kernel accumulates in fp32 and rounds to the
// input dtype once, which is torch's result dtype here (a `dtype=` other than the input's falls
// back). Its argmax writes int32; the int64 torch wants is a device copy. Built keepdim (the same
// elements in the same order) so that a full reduction has no 0-dim allocation.
std::optional<at::Tensor> lower_reduce(const std::string& op, const at::Tensor& x_in, std::vector<int64_t> rdims,
                                       bool keepdim, ReduceOp kind) {
  if (!on_neuron(x_in) || x_in.numel() == 0) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(x_in.scalar_type());
  if (!dt) return std::nullopt;
  const int64_t rank = x_in.dim();
  const bool arg = kind == ReduceOp::argmax || kind == ReduceOp::argmin;
  if (rank == 0) {  // a 0-dim tensor (e.g. a loss): reduced as [1], the result 0-dim again
    if (arg) return std::nullopt;
    for (int64_t d : rdims) c10::maybe_wrap_dim(d, 0);  // torch accepts only dim 0 / -1
    std::optional<at::Tensor> y = lower_reduce(op, x_in.reshape({1}), {0}, false, kind);
    return y ? std::optional<at::Tensor>(y->reshape({})) : std::nullopt;
  }
  std::vector<bool> reduced(rank, rdims.empty());
  for (int64_t d : rdims) reduced[c10::maybe_wrap_dim(d, rank)] = true;
  std::vector<int64_t> kernel_dims, out_shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) kernel_dims.push_back(d);
    if (!reduced[d]) out_shape.push_back(x_in.size(d));
    else if (keepdim) out_shape.push_back(1);
  }
  if (arg && kernel_dims.size() != 1) return std::nullopt;
  // The kernel's argmax cannot find NaN (nc_find_index8), torch returns the first NaN's index: such
  // inputs fall back (a host-side scan; device memory is host memory).
  if (arg && host_check(x_in, [](const at::Tensor& h) { return h.isnan().any().item<bool>(); }, false))
    return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  at::Tensor x = x_in.contiguous();
  ReduceSpec spec;
  spec.shape = dims(x.sizes());
  spec.dims = kernel_dims;
  spec.op = kind;
  spec.keepdim = true;
  spec.input_dtype = *dt;
  spec.output_dtype = arg ? DType::int32 : *dt;
  at::Tensor y = at::empty(out_shape, x_in.options().dtype(arg ? at::kInt : x_in.scalar_type()));
  const std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + dims_key(x.sizes()) +
                          dims_key(kernel_dims) + std::to_string(spec.keepdim) + "|" + c10::toString(x.scalar_type());
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::reduce_program, spec), {buffer("x", x)},
                 {buffer("y", y)}, record_for(op, {x_in}, x_in.scalar_type()));
  return arg ? y.to(at::kLong) : y;
}

namespace {

// sum of an integer or bool tensor (torch's result: int64): cast to fp32 on the device, the fp32
// reduction, the (integral) result converted on the host. Exact while sum |x| <= 2^24 (every
// partial sum is then exact in fp32); beyond that the CPU's kernel.
// amax / amin / max / min the same way (exact while max |x| <= 2^24; the result keeps x's dtype).
std::optional<at::Tensor> lower_integer_reduce(const std::string& op, const at::Tensor& x, const std::vector<int64_t>& rdims,
                                            bool keepdim, const c10::IValue& dtype_arg, ReduceOp kind) {
  const at::ScalarType result = kind != ReduceOp::sum ? x.scalar_type()
                                : dtype_arg.isNone() ? at::kLong : static_cast<at::ScalarType>(dtype_arg.toInt());
  if (!on_neuron(x) || x.numel() == 0 || !at::isIntegralType(result, true) || (result == at::kBool) != (x.scalar_type() == at::kBool && kind != ReduceOp::sum))
    return std::nullopt;
  const at::Tensor magnitudes = host_alias(x).to(at::kDouble).abs();
  if ((kind == ReduceOp::sum ? magnitudes.sum() : magnitudes.max()).item<double>() > kExactIntegerBound) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  at::Tensor xf = at::empty(x.sizes(), x.options().dtype(at::kFloat));
  if (!integer_to_float_kernel(x.contiguous(), xf)) return std::nullopt;
  std::optional<at::Tensor> r = lower_reduce(op, xf, rdims, keepdim, kind);
  if (!r) return std::nullopt;
  at::Tensor y = at::empty(r->sizes(), x.options().dtype(result));
  host_alias(y).copy_(host_alias(*r));
  return y;
}

// torch.linalg.vector_norm for ord 2, 1, inf, -inf over any dims: |x| or x^2, a reduction, and the
// square root, computed in fp32 (a bf16 input is cast on the device first, the result rounded once,
// as torch's opmath does).
std::optional<at::Tensor> lower_vector_norm(const std::string& op, c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type()) || x_in.numel() == 0 || !args[4].isNone()) return std::nullopt;
  const double ord = args[1].toScalar().toDouble();
  const double inf = std::numeric_limits<double>::infinity();
  if (ord != 2 && ord != 1 && ord != inf && ord != -inf) return std::nullopt;
  const std::vector<int64_t> rdims = int_list(args[2]);
  const bool keepdim = args[3].toBool();
  c10::DeviceGuard guard(x_in.device());
  const at::Tensor x = x_in.scalar_type() == at::kFloat ? x_in : x_in.to(at::kFloat);
  std::optional<at::Tensor> t = ord == 2 ? lower_binary(op + ".square", x, x, BinaryOp::multiply) : lower_unary(op + ".abs", x, UnaryOp::abs);
  if (!t) return std::nullopt;
  const ReduceOp kind = ord == inf ? ReduceOp::max : ord == -inf ? ReduceOp::min : ReduceOp::sum;
  std::optional<at::Tensor> r = lower_reduce(op + ".reduce", *t, rdims, keepdim, kind);
  if (r && ord == 2) r = lower_unary(op + ".sqrt", *r, UnaryOp::sqrt);
  if (!r) return std::nullopt;
  return x_in.scalar_type() == at::kFloat ? r : std::optional<at::Tensor>(r->to(x_in.scalar_type()));
}

}  // namespace

// var / var_mean (correction overloads): two passes as torch, the mean, then the sum of squared
// deviations over (N - correction), in fp32 (a bf16 input cast on the device, the results rounded once).
std::optional<std::pair<at::Tensor, at::Tensor>> lower_var_mean(c10::ArrayRef<c10::IValue> args, bool std_dev) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type()) || x.numel() == 0) return std::nullopt;
  const std::vector<int64_t> rdims = int_list(args[1]);
  const double correction = args[2].isNone() ? 1.0 : args[2].toScalar().toDouble();
  const bool keepdim = args[3].toBool();
  c10::DeviceGuard guard(x.device());
  int64_t n = rdims.empty() ? x.numel() : 1;
  for (int64_t d : rdims) n *= x.size(c10::maybe_wrap_dim(d, x.dim()));
  const at::Tensor xf = x.scalar_type() == at::kFloat ? x : x.to(at::kFloat);
  const std::vector<int64_t> all_ones(x.dim(), 1);
  const at::Tensor mean = rdims.empty() ? at::mean(xf).reshape(all_ones) : at::mean(xf, rdims, true);
  const at::Tensor dev = at::sub(xf, mean);
  at::Tensor ss = rdims.empty() ? at::sum(at::mul(dev, dev)) : at::sum(at::mul(dev, dev), rdims, keepdim);
  if (rdims.empty() && keepdim) ss = ss.reshape(all_ones);
  at::Tensor var = at::div(ss, std::max(0.0, double(n) - correction));
  if (std_dev) var = at::sqrt(var);
  at::Tensor m = keepdim ? mean : rdims.empty() ? mean.reshape({}) : mean.squeeze(rdims);
  if (x.scalar_type() != at::kFloat) {
    var = var.to(x.scalar_type());
    m = m.to(x.scalar_type());
  }
  return std::make_pair(var, m);
}


namespace {

// cumsum / cumprod along any dim (kernels/scan.h: an inclusive scan along the last dim of
// [rows, cols], fp32 accumulation, each output rounded once as torch's CPU does): the dim moved
// last by a device permute and back. Integer cumsums are exact while sum |x| <= 2^24 (every prefix
// then is); integer cumprods go to the CPU.
std::optional<at::Tensor> lower_scan(const std::string& op, c10::ArrayRef<c10::IValue> args, kernels::ScanOp kind) {
  const bool sum = kind == kernels::ScanOp::sum;
  const at::Tensor& x_in = args[0].toTensor();
  if (!on_neuron(x_in)) return std::nullopt;
  const bool integral = at::isIntegralType(x_in.scalar_type(), true);
  const at::ScalarType result = !args[2].isNone() ? static_cast<at::ScalarType>(args[2].toInt())
                                : integral ? at::kLong : x_in.scalar_type();
  if (integral != at::isIntegralType(result, true) || result == at::kBool) return std::nullopt;
  if (integral && (!sum || host_alias(x_in).to(at::kDouble).abs().sum().item<double>() > kExactIntegerBound))
    return std::nullopt;
  if (!integral && !sim_dtype(result)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const int64_t d = c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x_in.dim(), 1));
  at::Tensor out = at::empty(x_in.sizes(), x_in.options().dtype(result));
  if (x_in.numel() == 0) return out;
  const at::Tensor x = x_in.dim() == 0 ? x_in.reshape({1}) : x_in.movedim(d, -1).contiguous();
  kernels::ScanSpec spec;
  spec.cols = x.size(-1);
  spec.rows = x.numel() / spec.cols;
  spec.op = sum ? kernels::ScanOp::sum : kernels::ScanOp::prod;
  spec.input_dtype = *elementwise_dtype(x.scalar_type());
  spec.output_dtype = *elementwise_dtype(result);
  const at::Tensor source = kernel_input(x);
  const bool in_place = result != at::kLong && (x_in.dim() == 0 || d == x_in.dim() - 1);  // no permute back
  at::Tensor scanned = in_place ? out.view(x.sizes())
                                : at::empty(x.sizes(), x.options().dtype(result == at::kLong ? at::kInt : result));
  const std::string key = op + "|" + std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" +
                          std::string(dtype_name(spec.input_dtype)) + ">" + std::string(dtype_name(spec.output_dtype));
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::scan_program, spec),
                 {HostBuffer{"x", source.data_ptr(), size_t(x.numel()), spec.input_dtype}},
                 {HostBuffer{"y", scanned.data_ptr(), size_t(x.numel()), spec.output_dtype}},
                 record_for(op, {x_in}, x_in.scalar_type()));
  if (in_place) return out;
  const at::Tensor back = x_in.dim() == 0 ? scanned.reshape(std::vector<int64_t>{}) : scanned.movedim(-1, d);
  if (result == at::kLong) host_alias(out).copy_(host_alias(back));  // int32 results widened
  else out.copy_(back);  // a device permute back
  return out;
}

// prod over one dim or all (kernels/scan.h prod: fp32 products rounded once; torch's bf16 CPU
// kernel accumulates in bf16, so the device is the closer of the two there). Floats only.
std::optional<at::Tensor> lower_prod(const std::string& op, c10::ArrayRef<c10::IValue> args, bool over_dim) {
  const at::Tensor& x_in = args[0].toTensor();
  const bool all = !over_dim;
  const c10::IValue& dtype_arg = all ? args[1] : args[3];
  if (!on_neuron(x_in) || !sim_dtype(x_in.scalar_type()) || !same_dtype_arg(dtype_arg, x_in)) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const int64_t d = all ? 0 : c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x_in.dim(), 1));
  const bool keepdim = !all && args[2].toBool();
  std::vector<int64_t> out_shape;
  if (!all) {
    out_shape = dims(x_in.sizes());
    if (x_in.dim() > 0) {
      if (keepdim) out_shape[d] = 1;
      else out_shape.erase(out_shape.begin() + d);
    }
  }
  at::Tensor out = at::empty(out_shape, x_in.options());
  if (x_in.numel() == 0) return out.fill_(1);
  const at::Tensor x = all || x_in.dim() == 0 ? x_in.reshape({1, -1}) : x_in.movedim(d, -1).contiguous();
  kernels::ProdSpec spec;
  spec.cols = x.size(-1);
  spec.rows = x.numel() / spec.cols;
  spec.input_dtype = spec.output_dtype = *sim_dtype(x_in.scalar_type());
  const std::string key = "prod|" + std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" +
                          std::string(dtype_name(spec.input_dtype));
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::prod_program, spec), {buffer("x", x)},
                 {buffer("y", out)}, record_for(op, {x_in}, x_in.scalar_type()));
  return out;
}

// max.dim / min.dim: (values, indices), two kernels.
std::optional<std::vector<at::Tensor>> lower_max_dim(const std::string& op, LoweringArgs args, bool is_max) {
  const at::Tensor& x = args[0].toTensor();
  const int64_t dim = args[1].toInt();
  const bool keepdim = args[2].toBool();
  std::optional<at::Tensor> out, indices;
  if (x.dim() == 0 && on_neuron(x)) {  // one element: itself, at index 0 (torch accepts dim 0 / -1)
    c10::maybe_wrap_dim(dim, 0);
    out = x.clone();
    indices = at::zeros({}, x.options().dtype(at::kLong));
  } else {
    indices = lower_reduce(op, x, {dim}, keepdim, is_max ? ReduceOp::argmax : ReduceOp::argmin);
  }
  if (indices && !out) out = lower_reduce(op, x, {dim}, keepdim, is_max ? ReduceOp::max : ReduceOp::min);
  if (!out) return std::nullopt;
  return std::vector<at::Tensor>{*out, *indices};
}

// sum / mean over dims (`over_dims`: the dim_IntList schema) or all; integer sums on their own path.
std::optional<at::Tensor> lower_sum_mean(const std::string& op, LoweringArgs args, ReduceOp kind, bool over_dims) {
  const at::Tensor& x = args[0].toTensor();
  const std::vector<int64_t> rdims = over_dims ? int_list(args[1]) : std::vector<int64_t>{};
  const bool keepdim = over_dims && args[2].toBool();
  const c10::IValue& dtype_arg = over_dims ? args[3] : args[1];
  if (!same_dtype_arg(dtype_arg, x)) {
    // A float `dtype=` (every sum of a bf16 tensor under autocast asks for fp32): torch casts the input
    // to it first, then reduces, as this does on the device.
    const at::ScalarType to = static_cast<at::ScalarType>(dtype_arg.toInt());
    if (on_neuron(x) && sim_dtype(to) && (sim_dtype(x.scalar_type()) || at::isIntegralType(x.scalar_type(), true))) {
      c10::DeviceGuard guard(x.device());
      return lower_reduce(op, x.to(to), rdims, keepdim, kind);
    }
  }
  if (kind == ReduceOp::sum && at::isIntegralType(x.scalar_type(), true))
    return lower_integer_reduce(op, x, rdims, keepdim, dtype_arg, ReduceOp::sum);
  if (!same_dtype_arg(dtype_arg, x)) return std::nullopt;
  return lower_reduce(op, x, rdims, keepdim, kind);
}

// amax / amin (over dims) and max / min (all elements).
std::optional<at::Tensor> lower_extremum(const std::string& op, LoweringArgs args, ReduceOp kind, bool over_dims) {
  const at::Tensor& x = args[0].toTensor();
  const std::vector<int64_t> rdims = over_dims ? int_list(args[1]) : std::vector<int64_t>{};
  const bool keepdim = over_dims && args[2].toBool();
  if (at::isIntegralType(x.scalar_type(), true)) return lower_integer_reduce(op, x, rdims, keepdim, c10::IValue(), kind);
  return lower_reduce(op, x, rdims, keepdim, kind);
}

std::optional<at::Tensor> lower_arg_extremum(const std::string& op, LoweringArgs args, ReduceOp kind) {
  const at::Tensor& x = args[0].toTensor();
  if (x.dim() == 0 && on_neuron(x)) {  // one element: index 0
    if (!args[1].isNone()) c10::maybe_wrap_dim(args[1].toInt(), 0);
    return at::zeros({}, x.options().dtype(at::kLong));
  }
  if (!args[1].isNone()) return lower_reduce(op, x, {args[1].toInt()}, args[2].toBool(), kind);
  // dim=None: over the flattened tensor; keepdim keeps every dim as 1.
  std::optional<at::Tensor> flat = lower_reduce(op, x.reshape({-1}), {0}, false, kind);
  if (!flat || !args[2].toBool()) return flat;
  return flat->reshape(std::vector<int64_t>(x.dim(), 1));
}

// all / any (full, dim): the truth values as fp32 1 / 0 (where), reduced by min / max, compared != 0.
std::optional<at::Tensor> lower_all_any(const std::string& op, LoweringArgs args, bool all, bool over_dim) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || x.numel() == 0) return std::nullopt;
  std::optional<at::Tensor> truth = x;
  if (x.scalar_type() != at::kBool) {
    if (!sim_dtype(x.scalar_type())) return std::nullopt;
    truth = lower_binary(op + ".ne0", x, at::scalar_tensor(0.0, at::kDouble), BinaryOp::not_equal, true);
    if (!truth) return std::nullopt;
  }
  std::optional<at::Tensor> f = lower_where(op + ".f", *truth, std::nullopt, 1.0, std::nullopt, 0.0, at::kFloat);
  if (!f) return std::nullopt;
  // A full reduction keeps one dim: a 0-dim tensor would be taken as an immediate by the compare.
  const int64_t d = over_dim ? c10::maybe_wrap_dim(args[1].toInt(), std::max<int64_t>(x.dim(), 1)) : 0;
  std::optional<at::Tensor> r = lower_reduce(op + ".reduce", over_dim && x.dim() > 0 ? *f : f->reshape({-1}), {d}, true,
                                             all ? ReduceOp::min : ReduceOp::max);
  if (!r) return std::nullopt;
  std::optional<at::Tensor> y = lower_binary(op, *r, at::scalar_tensor(0.0, at::kDouble), BinaryOp::not_equal, true);
  if (!y) return std::nullopt;
  if (!over_dim || x.dim() == 0) return y->reshape({});
  return args[2].toBool() ? *y : y->squeeze(d);
}

}  // namespace

std::vector<Lowering> reduction_lowerings() {
  auto sum_mean = [](ReduceOp k, bool over_dims) {
    return [k, over_dims](const std::string& op, LoweringArgs a) { return lower_sum_mean(op, a, k, over_dims); };
  };
  auto extremum = [](ReduceOp k, bool over_dims) {
    return [k, over_dims](const std::string& op, LoweringArgs a) { return lower_extremum(op, a, k, over_dims); };
  };
  auto arg_extremum = [](ReduceOp k) { return [k](const std::string& op, LoweringArgs a) { return lower_arg_extremum(op, a, k); }; };
  auto max_dim = [](bool is_max) { return [is_max](const std::string& op, LoweringArgs a) { return lower_max_dim(op, a, is_max); }; };
  auto all_any = [](bool all, bool over_dim) {
    return [all, over_dim](const std::string& op, LoweringArgs a) { return lower_all_any(op, a, all, over_dim); };
  };
  auto var = [](bool std_dev) {
    return [std_dev](const std::string&, LoweringArgs a) -> std::optional<at::Tensor> {
      std::optional<std::pair<at::Tensor, at::Tensor>> vm = lower_var_mean(a, std_dev);
      if (!vm) return std::nullopt;
      return vm->first;
    };
  };
  auto var_mean = [](bool std_dev) {
    return [std_dev](const std::string&, LoweringArgs a) -> std::optional<std::vector<at::Tensor>> {
      std::optional<std::pair<at::Tensor, at::Tensor>> vm = lower_var_mean(a, std_dev);
      if (!vm) return std::nullopt;
      return std::vector<at::Tensor>{vm->first, vm->second};
    };
  };
  auto scan = [](kernels::ScanOp k) { return [k](const std::string& op, LoweringArgs a) { return lower_scan(op, a, k); }; };
  auto prod = [](bool over_dim) { return [over_dim](const std::string& op, LoweringArgs a) { return lower_prod(op, a, over_dim); }; };
  return {
      row("sum.dim_IntList", sum_mean(ReduceOp::sum, true), {"sum.IntList_out"}),
      row("sum", sum_mean(ReduceOp::sum, false), {"sum.out"}),
      row("mean.dim", sum_mean(ReduceOp::mean, true), {"mean.out"}),
      row("mean", sum_mean(ReduceOp::mean, false)),
      row("amax", extremum(ReduceOp::max, true), {"amax.out"}),
      row("amin", extremum(ReduceOp::min, true), {"amin.out"}),
      row("max", extremum(ReduceOp::max, false)),
      row("min", extremum(ReduceOp::min, false)),
      row("max.dim", max_dim(true)),
      row("min.dim", max_dim(false)),
      row("argmax", arg_extremum(ReduceOp::argmax), {"argmax.out"}),
      row("argmin", arg_extremum(ReduceOp::argmin), {"argmin.out"}),
      row("all", all_any(true, false), {"all.all_out"}),
      row("any", all_any(false, false), {"any.all_out"}),
      row("all.dim", all_any(true, true), {"all.out"}),
      row("any.dim", all_any(false, true), {"any.out"}),
      row("var.correction", var(false)),
      row("std.correction", var(true)),
      row("var_mean.correction", var_mean(false)),
      row("std_mean.correction", var_mean(true)),
      row("linalg_vector_norm", lower_vector_norm, {"linalg_vector_norm.out"}),
      row("cumsum", scan(kernels::ScanOp::sum), {"cumsum.out"}),
      row("cumprod", scan(kernels::ScanOp::prod), {"cumprod.out"}),
      row("prod", prod(false), {"prod.out"}),
      row("prod.dim_int", prod(true), {"prod.int_out"}),
  };
}

}  // namespace trnsim::frontend
