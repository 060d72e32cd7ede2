// Data-movement lowerings: cat, triu / tril, roll, and the pooling / upsampling forms that are a
// composition of other device ops (adaptive average pooling by whole windows, 1-D nearest
// upsampling).
#include <ATen/ATen.h>
#include <ATen/native/TypeProperties.h>

#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/data_movement.h"
#include "kernels/elementwise.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

// cat along any dim (kernels/data_movement.h concat): every input on the device, of one float
// dtype, non-empty (torch's legacy [0]-shaped inputs fall back).
std::optional<at::Tensor> lower_cat(const std::string& op, const std::vector<at::Tensor>& all_tensors, int64_t dim) {
  // torch's legacy rule: 1-D empty tensors ([0]) are skipped whatever the other shapes.
  std::vector<at::Tensor> tensors;
  for (const at::Tensor& t : all_tensors)
    if (!(t.dim() == 1 && t.numel() == 0)) tensors.push_back(t);
  if (all_tensors.empty() || !on_neuron(all_tensors[0])) return std::nullopt;
  const at::ScalarType type = at::native::result_type(all_tensors);  // cat promotes like an element-wise op
  if (tensors.empty()) {  // only legacy empties: an empty [0] result
    for (const at::Tensor& t : all_tensors)
      if (!on_neuron(t) || t.device() != all_tensors[0].device()) return std::nullopt;
    c10::DeviceGuard guard(all_tensors[0].device());
    return at::empty({0}, all_tensors[0].options().dtype(type));
  }
  if (!on_neuron(tensors[0]) || tensors[0].dim() == 0) return std::nullopt;
  const int64_t rank = tensors[0].dim();
  dim = c10::maybe_wrap_dim(dim, rank);
  std::vector<int64_t> out_shape = dims(tensors[0].sizes());
  out_shape[dim] = 0;
  for (const at::Tensor& t : tensors) {
    if (!on_neuron(t) || t.dim() != rank) return std::nullopt;
    for (int64_t d = 0; d < rank; ++d)
      if (d != dim && t.size(d) != tensors[0].size(d)) return std::nullopt;
    out_shape[dim] += t.size(dim);
  }
  c10::DeviceGuard guard(tensors[0].device());
  // The result's memory format is torch's: the inputs' suggested format when they all agree (a
  // channels-last cat stays channels-last), else contiguous. A channels-last cat is a cat of the
  // NHWC storage along the matching dim.
  std::optional<at::MemoryFormat> format;
  for (const at::Tensor& t : tensors) {
    const at::MemoryFormat f = t.suggest_memory_format();
    if (f == at::MemoryFormat::Contiguous || (format && *format != f)) {
      format = at::MemoryFormat::Contiguous;
      break;
    }
    format = f;
  }
  std::vector<int64_t> storage_perm;  // logical dim of each storage-order dim
  if (format == at::MemoryFormat::ChannelsLast) storage_perm = {0, 2, 3, 1};
  if (format == at::MemoryFormat::ChannelsLast3d) storage_perm = {0, 2, 3, 4, 1};
  at::Tensor y = at::empty(out_shape, tensors[0].options().dtype(type).memory_format(format.value_or(at::MemoryFormat::Contiguous)));
  // Inputs of another dtype are cast on the device first; empty ones (a zero-width slice) add nothing.
  std::vector<at::Tensor> parts;
  for (const at::Tensor& t : tensors) {
    if (t.numel() == 0) continue;
    at::Tensor part = t.scalar_type() == type ? t : t.to(type);
    parts.push_back(storage_perm.empty() ? part.contiguous() : part.contiguous(*format).permute(storage_perm));
  }
  if (parts.empty()) return y;
  if (!storage_perm.empty()) dim = std::find(storage_perm.begin(), storage_perm.end(), dim) - storage_perm.begin();
  // Concatenation only moves bytes: an integer or bool tensor is moved as the same bytes in an
  // integer dtype of its width (int64 as int32 pairs: a trailing dim of 2).
  const std::optional<DType> dt = elementwise_dtype(type);
  const bool pairs = type == at::kLong;
  if (!dt) return std::nullopt;
  auto kernel_shape = [&](c10::IntArrayRef sizes) {
    std::vector<int64_t> shape = dims(sizes);
    if (pairs) shape.push_back(2);
    return shape;
  };
  kernels::ConcatSpec spec;
  spec.dim = dim;
  spec.dtype = *dt;
  std::vector<HostBuffer> inputs;
  std::string key = op + "|" + std::to_string(dim) + "|" + c10::toString(type) + "|";
  for (size_t k = 0; k < parts.size(); ++k) {
    spec.shapes.push_back(kernel_shape(parts[k].sizes()));
    inputs.push_back(HostBuffer{"x" + std::to_string(k), parts[k].data_ptr(), size_t(parts[k].numel()) * (pairs ? 2 : 1), *dt});
    key += dims_key(parts[k].sizes());
  }
  OpRecord record;
  record.op = op;
  for (const at::Tensor& t : tensors) record.shapes.push_back(dims(t.sizes()));
  record.dtype = c10::toString(type);
  execute_kernel(tensors[0].device().index(), key, kernels::invocation(kernels::concat_program, spec), inputs,
                 {HostBuffer{"y", y.data_ptr(), size_t(y.numel()) * (pairs ? 2 : 1), *dt}}, std::move(record));
  return y;
}

std::optional<at::Tensor> lower_triangle(const std::string& op, const at::Tensor& x_in, int64_t diagonal, bool upper) {
  if (!on_neuron(x_in) || x_in.dim() < 2 || x_in.numel() == 0) return std::nullopt;
  // Elements are copied or zeroed through the engine's fp32 datapath: floats, and integers of at
  // most 2 bytes (a bool mask as uint8), keep their values exactly.
  const bool narrow_int = at::isIntegralType(x_in.scalar_type(), true) && c10::elementSize(x_in.scalar_type()) <= 2;
  const std::optional<DType> dt =
      sim_dtype(x_in.scalar_type()) || narrow_int ? elementwise_dtype(x_in.scalar_type()) : std::nullopt;
  if (!dt) return std::nullopt;
  c10::DeviceGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty(x_in.sizes(), x_in.options());
  kernels::TriangleSpec spec;
  spec.rows = x.size(-2);
  spec.cols = x.size(-1);
  spec.batch = x.numel() / (spec.rows * spec.cols);
  spec.diagonal = diagonal;
  spec.upper = upper;
  spec.dtype = *dt;
  const std::string key = std::string(upper ? "triu|" : "tril|") + std::to_string(spec.batch) + "," +
                          std::to_string(spec.rows) + "," + std::to_string(spec.cols) + "|" + std::to_string(diagonal) +
                          "|" + std::string(dtype_name(*dt));
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::triangle_program, spec),
                 {HostBuffer{"x", x.data_ptr(), size_t(x.numel()), *dt}},
                 {HostBuffer{"y", y.data_ptr(), size_t(y.numel()), *dt}}, record_for(op, {x_in}, x_in.scalar_type()));
  return y;
}


std::optional<at::Tensor> lower_triangle_inplace(const std::string& op, LoweringArgs args, bool upper) {
  const at::Tensor& self = args[0].toTensor();
  std::optional<at::Tensor> result = lower_triangle(op, self, args[1].toInt(), upper);
  if (!result) return std::nullopt;
  at::Tensor target = self;
  target.copy_(*result);
  return target;
}

// roll: a cat of the two slices along each rolled dim (device copies).
std::optional<at::Tensor> lower_roll(const std::string&, LoweringArgs args) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x)) return std::nullopt;
  const std::vector<int64_t> shifts = args[1].toIntVector(), rdims = args[2].toIntVector();
  if (shifts.size() != (rdims.empty() ? 1 : rdims.size())) return std::nullopt;  // torch raises its error
  if (x.numel() == 0) return at::empty(x.sizes(), x.options());  // nothing moves (the CPU checks no dim either)
  if (rdims.empty()) return at::roll(x.flatten(), shifts, {0}).view(x.sizes());
  at::Tensor y = x;
  for (size_t i = 0; i < rdims.size(); ++i) {
    const int64_t d = c10::maybe_wrap_dim(rdims[i], x.dim());
    const int64_t n = x.size(d);
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    y = at::cat({y.narrow(d, n - s, s), y.narrow(d, 0, n - s)}, d);
  }
  return y.is_same(x) ? x.clone() : y;
}

// Adaptive average pooling by whole windows: an average pool (kernels/pooling.h through avg_pool2d).
std::optional<at::Tensor> lower_adaptive_avg_pool(const std::string&, LoweringArgs args, bool backward) {
  const at::Tensor& x = args[backward ? 1 : 0].toTensor();
  if (!on_neuron(x) || x.dim() < 3) return std::nullopt;
  const int64_t h = x.size(-2), w = x.size(-1);
  const at::Tensor& grad = args[0].toTensor();
  const std::vector<int64_t> out = backward ? std::vector<int64_t>{grad.size(-2), grad.size(-1)} : args[1].toIntVector();
  if (out.size() != 2 || out[0] <= 0 || out[1] <= 0 || h % out[0] || w % out[1]) return std::nullopt;
  const std::vector<int64_t> k = {h / out[0], w / out[1]};  // whole windows: an average pool
  if (!backward) return at::avg_pool2d(x, k, k);
  return at::avg_pool2d_backward(grad, x, k, k, {0, 0}, false, true, std::nullopt);
}

// 1-D nearest upsampling as the 2-D one over a height of 1.
std::optional<at::Tensor> lower_upsample_nearest1d(const std::string&, LoweringArgs args, bool backward) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || x.dim() != 3) return std::nullopt;
  std::optional<double> scale;
  if (!args[backward ? 3 : 2].isNone()) scale = args[backward ? 3 : 2].toDouble();
  const std::vector<int64_t> out = args[1].toIntVector();
  if (out.size() != 1) return std::nullopt;
  if (!backward) return at::upsample_nearest2d(x.unsqueeze(2), {1, out[0]}, 1.0, scale).squeeze(2);
  const std::vector<int64_t> in = args[2].toIntVector();
  if (in.size() != 3) return std::nullopt;
  return at::upsample_nearest2d_backward(x.unsqueeze(2), {1, out[0]}, {in[0], in[1], 1, in[2]}, 1.0, scale).squeeze(2);
}

}  // namespace

namespace {
// cat.out takes an out of another dtype (the inputs' promoted result cast into it), as torch's cat does.
Lowering cat_row() {
  Lowering r = row("cat", [](const std::string& op, LoweringArgs a) { return lower_cat(op, a[0].toTensorVector(), a[1].toInt()); },
                   {"cat.out"});
  r.out_casts = true;
  return r;
}
}  // namespace

std::vector<Lowering> data_movement_lowerings() {
  auto triangle = [](bool upper) {
    return [upper](const std::string& op, LoweringArgs a) { return lower_triangle(op, a[0].toTensor(), a[1].toInt(), upper); };
  };
  auto triangle_inplace = [](bool upper) {
    return [upper](const std::string& op, LoweringArgs a) { return lower_triangle_inplace(op, a, upper); };
  };
  auto adaptive = [](bool backward) {
    return [backward](const std::string& op, LoweringArgs a) { return lower_adaptive_avg_pool(op, a, backward); };
  };
  auto upsample = [](bool backward) {
    return [backward](const std::string& op, LoweringArgs a) { return lower_upsample_nearest1d(op, a, backward); };
  };
  return {
      cat_row(),
      row("triu", triangle(true), {"triu.out"}),
      row("tril", triangle(false), {"tril.out"}),
      row("triu_", triangle_inplace(true)),
      row("tril_", triangle_inplace(false)),
      row("roll", lower_roll),
      row("_adaptive_avg_pool2d", adaptive(false)),
      row("_adaptive_avg_pool2d_backward", adaptive(true)),
      row("upsample_nearest1d", upsample(false), {"upsample_nearest1d.out"}),
      row("upsample_nearest1d_backward", upsample(true), {"upsample_nearest1d_backward.grad_input"}),
  };
}

}  // namespace trnsim::frontend
