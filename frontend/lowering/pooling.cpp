// Pooling and upsampling lowerings: max / average pooling 2-D forward and backward on the pooling
// kernels (kernels/pooling.h), nearest upsampling by integer factors.
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/pooling.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {


// Nearest upsampling by integer factors (output a multiple of the input; given scales must agree):
// the forward is one strided device copy of the input viewed with stride-0 repeat dims, the
// backward a sum over each output block (the reduction kernel). Other ratios fall back.
std::optional<std::pair<int64_t, int64_t>> integer_factors(int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                                           const c10::IValue& scale_h, const c10::IValue& scale_w) {
  if (in_h <= 0 || in_w <= 0 || out_h % in_h != 0 || out_w % in_w != 0) return std::nullopt;
  const int64_t fh = out_h / in_h, fw = out_w / in_w;
  // torch maps an output index through the given scale (src = floor(dst / scale)): only a scale
  // equal to the factor keeps the blocks.
  if (!scale_h.isNone() && scale_h.toDouble() != double(fh)) return std::nullopt;
  if (!scale_w.isNone() && scale_w.toDouble() != double(fw)) return std::nullopt;
  return std::make_pair(fh, fw);
}

std::optional<std::vector<at::Tensor>> lower_upsample_nearest(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& x = a[0].toTensor();
  if (!on_neuron(x) || x.dim() != 4 || !sim_dtype(x.scalar_type())) return std::nullopt;
  const std::vector<int64_t> out = int_values(a[1]);
  if (out.size() != 2) return std::nullopt;
  const auto f = integer_factors(x.size(2), x.size(3), out[0], out[1], a[2], a[3]);
  if (!f) return std::nullopt;
  c10::DeviceGuard guard(x.device());
  const auto [n, c, h, w] = nchw(x);
  at::Tensor y = x.reshape({n, c, h, 1, w, 1}).expand({n, c, h, f->first, w, f->second}).contiguous();
  return std::vector<at::Tensor>{y.reshape({n, c, out[0], out[1]})};
}

std::optional<std::vector<at::Tensor>> lower_upsample_nearest_backward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& grad = a[0].toTensor();
  const std::vector<int64_t> out = int_values(a[1]), in = int_values(a[2]);
  if (!on_neuron(grad) || grad.dim() != 4 || out.size() != 2 || in.size() != 4 || !sim_dtype(grad.scalar_type()))
    return std::nullopt;
  const auto f = integer_factors(in[2], in[3], out[0], out[1], a[3], a[4]);
  if (!f) return std::nullopt;
  c10::DeviceGuard guard(grad.device());
  at::Tensor g = grad.contiguous().reshape({in[0], in[1], in[2], f->first, in[3], f->second});
  return std::vector<at::Tensor>{g.sum({3, 5})};
}


// =============================================================================================
// pooling: max_pool2d_with_indices / avg_pool2d and their backwards on the pooling kernels
// (kernels/pooling.h). 4-D or 3-D (unbatched) input, fp32 / bf16 / fp16. The kernels write int32
// indices; the int64 torch wants (and the int32 the backward reads) are device copies. Whatever the
// kernels do not take (other dtypes, a spec validate_pool rejects, a grad_output or indices not on
// the device) goes to the counted CPU fallback under the op's own name.
// =============================================================================================


// [a] or [a, b] -> (a, b); an empty list takes `fallback` (torch: stride defaults to the kernel).
std::optional<std::pair<int64_t, int64_t>> pair_of(const c10::IValue& v, std::optional<std::pair<int64_t, int64_t>> fallback) {
  const std::vector<int64_t> x = int_values(v);
  if (x.empty() && fallback) return fallback;
  if (x.size() == 1) return std::make_pair(x[0], x[0]);
  if (x.size() == 2) return std::make_pair(x[0], x[1]);
  return std::nullopt;
}

// The kernel's spec, or nullopt (unsupported) for these arguments; validate_pool's rejections throw
// kernels::KernelUnsupported, which the registry sends to the fallback too.
std::optional<kernels::PoolSpec> spec_of(const at::Tensor& self, const c10::IValue& kernel, const c10::IValue& stride,
                                         const c10::IValue& padding, const c10::IValue* dilation, bool ceil_mode,
                                         bool max) {
  if (!on_neuron(self) || (self.dim() != 3 && self.dim() != 4) || self.numel() == 0) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(self.scalar_type());
  if (!dt) return std::nullopt;
  const auto k = pair_of(kernel, std::nullopt);
  if (!k) return std::nullopt;
  const auto s = pair_of(stride, k), p = pair_of(padding, std::nullopt);
  const auto d = dilation ? pair_of(*dilation, std::nullopt) : std::optional<std::pair<int64_t, int64_t>>(std::make_pair(1, 1));
  if (!s || !p || !d) return std::nullopt;
  kernels::PoolSpec spec;
  std::tie(spec.n, spec.c, spec.h, spec.w) = nchw(self);
  std::tie(spec.kh, spec.kw) = *k;
  std::tie(spec.stride_h, spec.stride_w) = *s;
  std::tie(spec.pad_h, spec.pad_w) = *p;
  std::tie(spec.dilation_h, spec.dilation_w) = *d;
  spec.ceil_mode = ceil_mode;
  spec.dtype = *dt;
  kernels::validate_pool(spec, max);  // throws kernels::KernelUnsupported
  return spec;
}

std::string key_of(const std::string& op, const kernels::PoolSpec& s) {
  std::ostringstream key;
  key << op << "|" << s.n << "," << s.c << "," << s.h << "," << s.w << "|k" << s.kh << "," << s.kw << "|s" << s.stride_h
      << "," << s.stride_w << "|p" << s.pad_h << "," << s.pad_w << "|d" << s.dilation_h << "," << s.dilation_w << "|c"
      << s.ceil_mode << "|i" << s.count_include_pad << "|o" << s.divisor_override << "|" << static_cast<int>(s.dtype);
  return key.str();
}

std::vector<int64_t> out_sizes(const kernels::PoolSpec& s, bool unbatched) {
  if (unbatched) return {s.c, s.out_h(), s.out_w()};
  return {s.n, s.c, s.out_h(), s.out_w()};
}

// A gradient / indices tensor that matches the forward's output: on the device, the shape, the dtype.
bool matches(const at::Tensor& t, const kernels::PoolSpec& s, bool unbatched, at::ScalarType dtype) {
  return on_neuron(t) && t.scalar_type() == dtype && dims(t.sizes()) == out_sizes(s, unbatched);
}

std::optional<std::vector<at::Tensor>> max_forward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& self = a[0].toTensor();
  const std::optional<kernels::PoolSpec> spec = spec_of(self, a[1], a[2], a[3], &a[4], a[5].toBool(), true);
  if (!spec) return std::nullopt;
  const bool unbatched = self.dim() == 3;
  c10::DeviceGuard guard(self.device());
  const at::Tensor x = batched(self, unbatched).contiguous();
  at::Tensor y = at::empty(out_sizes(*spec, false), self.options());
  at::Tensor idx = at::empty(out_sizes(*spec, false), self.options().dtype(at::kInt));
  const kernels::PoolSpec s = *spec;
  execute_kernel(self.device().index(), key_of("max_pool2d", s), kernels::invocation(kernels::max_pool2d_program, s),
                 {buffer("input", x)}, {buffer("output", y), buffer("indices", idx)},
                 record_for("max_pool2d_with_indices", {self}, self.scalar_type()));
  at::Tensor indices = idx.to(at::kLong);
  if (unbatched) return std::vector<at::Tensor>{y.squeeze(0), indices.squeeze(0)};
  return std::vector<at::Tensor>{y, indices};
}

// (grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices). The indices must be
// the forward's (each inside its window), as autograd passes them.
std::optional<at::Tensor> max_backward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& grad_output = a[0].toTensor();
  const at::Tensor& self = a[1].toTensor();
  const at::Tensor& indices = a[7].toTensor();
  const std::optional<kernels::PoolSpec> spec = spec_of(self, a[2], a[3], a[4], &a[5], a[6].toBool(), true);
  if (!spec) return std::nullopt;
  const bool unbatched = self.dim() == 3;
  if (!matches(grad_output, *spec, unbatched, self.scalar_type()) || !matches(indices, *spec, unbatched, at::kLong)) {
    return std::nullopt;
  }
  // A plane whose backward does not fit SBUF is rejected when the program is built (kernels::KernelUnsupported):
  // nothing the caller sees has been written by then.
  const kernels::PoolSpec s = *spec;
  c10::DeviceGuard guard(self.device());
  const at::Tensor go = batched(grad_output, unbatched).contiguous();
  const at::Tensor idx = batched(indices, unbatched).contiguous().to(at::kInt);
  at::Tensor gi = at::empty({s.n, s.c, s.h, s.w}, self.options());
  execute_kernel(self.device().index(), key_of("max_pool2d_backward", s),
                 kernels::invocation(kernels::max_pool2d_backward_program, s),
                 {buffer("grad_output", go), buffer("indices", idx)}, {buffer("grad_input", gi)},
                 record_for("max_pool2d_with_indices_backward", {grad_output, self}, self.scalar_type()));
  return unbatched ? gi.squeeze(0) : gi;
}

// avg_pool2d's (count_include_pad, divisor_override) from the IValues at `i`, `i + 1`.
bool avg_options(kernels::PoolSpec& s, c10::ArrayRef<c10::IValue> a, size_t i) {
  s.count_include_pad = a[i].toBool();
  if (!a[i + 1].isNone()) {
    s.divisor_override = int_value(a[i + 1]);
    if (s.divisor_override <= 0) return false;
  }
  return true;
}

std::optional<at::Tensor> avg_forward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& self = a[0].toTensor();
  std::optional<kernels::PoolSpec> spec = spec_of(self, a[1], a[2], a[3], nullptr, a[4].toBool(), false);
  if (!spec || !avg_options(*spec, a, 5)) return std::nullopt;
  const bool unbatched = self.dim() == 3;
  c10::DeviceGuard guard(self.device());
  const at::Tensor x = batched(self, unbatched).contiguous();
  at::Tensor y = at::empty(out_sizes(*spec, false), self.options());
  const kernels::PoolSpec s = *spec;
  execute_kernel(self.device().index(), key_of("avg_pool2d", s), kernels::invocation(kernels::avg_pool2d_program, s),
                 {buffer("input", x)}, {buffer("output", y)}, record_for("avg_pool2d", {self}, self.scalar_type()));
  return unbatched ? y.squeeze(0) : y;
}

// (grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override).
std::optional<at::Tensor> avg_backward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& grad_output = a[0].toTensor();
  const at::Tensor& self = a[1].toTensor();
  std::optional<kernels::PoolSpec> spec = spec_of(self, a[2], a[3], a[4], nullptr, a[5].toBool(), false);
  if (!spec || !avg_options(*spec, a, 6)) return std::nullopt;
  const bool unbatched = self.dim() == 3;
  if (!matches(grad_output, *spec, unbatched, self.scalar_type())) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  const at::Tensor go = batched(grad_output, unbatched).contiguous();
  const kernels::PoolSpec s = *spec;
  at::Tensor gi = at::empty({s.n, s.c, s.h, s.w}, self.options());
  execute_kernel(self.device().index(), key_of("avg_pool2d_backward", s),
                 kernels::invocation(kernels::avg_pool2d_backward_program, s), {buffer("grad_output", go)},
                 {buffer("grad_input", gi)},
                 record_for("avg_pool2d_backward", {grad_output, self}, self.scalar_type()));
  return unbatched ? gi.squeeze(0) : gi;
}



std::optional<std::vector<at::Tensor>> one(std::optional<at::Tensor> t) {
  if (!t) return std::nullopt;
  return std::vector<at::Tensor>{std::move(*t)};
}

}  // namespace

std::vector<Lowering> pooling_lowerings() {
  return {
      row("max_pool2d_with_indices", [](const std::string&, LoweringArgs a) { return max_forward(a); }),
      row("max_pool2d_with_indices_backward", [](const std::string&, LoweringArgs a) { return one(max_backward(a)); }),
      row("avg_pool2d", [](const std::string&, LoweringArgs a) { return one(avg_forward(a)); }),
      row("avg_pool2d_backward", [](const std::string&, LoweringArgs a) { return one(avg_backward(a)); }),
      row("upsample_nearest2d", [](const std::string&, LoweringArgs a) { return lower_upsample_nearest(a); }),
      row("upsample_nearest2d_backward", [](const std::string&, LoweringArgs a) { return lower_upsample_nearest_backward(a); }),
  };
}

}  // namespace trnsim::frontend
