// conv2d lowerings: forward and backward through the PrivateUse1 "overrideable" convolution ops, on
// the implicit-GEMM conv kernels (kernels/conv.h). A call the kernels do not take goes to the CPU
// as aten::convolution / convolution_backward (the overrideable ops have no CPU kernel).
#include <ATen/ATen.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/conv.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {


// convolution_overrideable has no CPU kernel (its default throws), so an unsupported call is
// handed to the fallback as aten::convolution / aten::convolution_backward: same arguments
// (the backward's bias_sizes inserted), and the CPU runs the real convolution.
const c10::OperatorHandle& convolution_handle() {
  static const c10::OperatorHandle h = c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution", "");
  return h;
}
const c10::OperatorHandle& convolution_backward_handle() {
  static const c10::OperatorHandle h =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::convolution_backward", "");
  return h;
}


// The kernel's spec for a 2-D convolution of 4-D (or 3-D unbatched) input, or nullopt when the
// kernels do not take it (transposed, other ranks, dtypes, devices, groups not dividing C and O).
std::optional<kernels::Conv2dSpec> conv_spec(const at::Tensor& input, const at::Tensor& weight, const c10::IValue& stride,
                                             const c10::IValue& padding, const c10::IValue& dilation, bool transposed,
                                             int64_t groups) {
  if (transposed || groups < 1) return std::nullopt;
  if (!on_neuron(input) || !on_neuron(weight) || weight.dim() != 4) return std::nullopt;
  if (input.dim() != 4 && input.dim() != 3) return std::nullopt;
  if (input.scalar_type() != weight.scalar_type()) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(input.scalar_type());
  if (!dt) return std::nullopt;
  const std::vector<int64_t> s = int_values(stride), p = int_values(padding), d = int_values(dilation);
  if (s.size() != 2 || p.size() != 2 || d.size() != 2) return std::nullopt;
  kernels::Conv2dSpec spec;
  std::tie(spec.n, spec.c, spec.h, spec.w) = nchw(input);
  spec.o = weight.size(0);
  spec.kh = weight.size(2);
  spec.kw = weight.size(3);
  if (spec.c % groups != 0 || spec.o % groups != 0 || weight.size(1) != spec.c / groups) return std::nullopt;
  spec.groups = groups;
  spec.stride_h = s[0], spec.stride_w = s[1];
  spec.pad_h = p[0], spec.pad_w = p[1];
  spec.dilation_h = d[0], spec.dilation_w = d[1];
  spec.input_dtype = spec.output_dtype = *dt;
  if (spec.n <= 0 || spec.c <= 0 || spec.h <= 0 || spec.w <= 0 || spec.o <= 0) return std::nullopt;
  if (spec.out_h() <= 0 || spec.out_w() <= 0) return std::nullopt;
  return spec;
}

std::string conv_key(const std::string& op, const kernels::Conv2dSpec& s) {
  std::ostringstream key;
  key << op << "|" << s.n << "," << s.c << "," << s.h << "," << s.w << "|" << s.o << "," << s.kh << "," << s.kw << "|s"
      << s.stride_h << "," << s.stride_w << "|p" << s.pad_h << "," << s.pad_w << "|d" << s.dilation_h << ","
      << s.dilation_w << "|g" << s.groups << "|b" << s.bias << "|" << static_cast<int>(s.input_dtype);
  return key.str();
}


std::optional<at::Tensor> lower_conv_forward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& input = a[0].toTensor();
  const at::Tensor& weight = a[1].toTensor();
  const at::Tensor bias = a[2].isNone() ? at::Tensor() : a[2].toTensor();
  std::optional<kernels::Conv2dSpec> spec = conv_spec(input, weight, a[3], a[4], a[5], a[6].toBool(), int_value(a[8]));
  if (!spec) return std::nullopt;
  if (bias.defined()) {
    if (!on_neuron(bias) || bias.scalar_type() != input.scalar_type() || bias.dim() != 1 || bias.size(0) != spec->o)
      return std::nullopt;
    spec->bias = true;
  }
  const bool unbatched = input.dim() == 3;
  c10::DeviceGuard guard(input.device());
  const at::Tensor x = batched(input, unbatched).contiguous(), w = weight.contiguous();
  const at::Tensor b = bias.defined() ? bias.contiguous() : at::Tensor();
  at::Tensor y = at::empty({spec->n, spec->o, spec->out_h(), spec->out_w()}, input.options());
  std::vector<HostBuffer> inputs = {buffer("input", x), buffer("weight", w)};
  if (spec->bias) inputs.push_back(buffer("bias", b));
  OpRecord record = record_for("convolution_overrideable", {input, weight}, input.scalar_type());
  record.flops = static_cast<uint64_t>(spec->flops());
  const kernels::Conv2dSpec s = *spec;
  execute_kernel(input.device().index(), conv_key("conv2d", s), kernels::invocation(kernels::conv2d_program, s), inputs,
                 {buffer("output", y)}, std::move(record));
  return unbatched ? y.squeeze(0) : y;
}

void decline_convolution(const c10::OperatorHandle&, torch::jit::Stack* stack, const std::string& reason) {
  neuron_fallback(convolution_handle(), stack, reason);
}

// (grad_input, grad_weight, grad_bias); the kernel computes grad_input and grad_weight together,
// so only grad_bias is skipped when not asked for; unrequested results are undefined tensors.
std::optional<std::vector<at::Tensor>> lower_conv_backward(c10::ArrayRef<c10::IValue> a) {
  const at::Tensor& grad_output = a[0].toTensor();
  const at::Tensor& input = a[1].toTensor();
  const at::Tensor& weight = a[2].toTensor();
  const bool transposed = a[6].toBool();
  const std::vector<bool> mask = {a[9].toBoolList().get(0), a[9].toBoolList().get(1), a[9].toBoolList().get(2)};
  std::optional<kernels::Conv2dSpec> spec = conv_spec(input, weight, a[3], a[4], a[5], transposed, int_value(a[8]));
  if (!spec) return std::nullopt;
  const bool unbatched = input.dim() == 3;
  const std::vector<int64_t> dy_shape = {spec->n, spec->o, spec->out_h(), spec->out_w()};
  if (!on_neuron(grad_output) || grad_output.scalar_type() != input.scalar_type() ||
      batched(grad_output, unbatched).sizes() != c10::IntArrayRef(dy_shape))
    return std::nullopt;
  spec->bias = mask[2];
  c10::DeviceGuard guard(input.device());
  const at::Tensor x = batched(input, unbatched).contiguous(), w = weight.contiguous(),
                   dy = batched(grad_output, unbatched).contiguous();
  std::vector<HostBuffer> outputs;
  at::Tensor dx, dw, db;
  if (mask[0]) outputs.push_back(buffer("grad_input", dx = at::empty(x.sizes(), input.options())));
  if (mask[1]) outputs.push_back(buffer("grad_weight", dw = at::empty(w.sizes(), weight.options())));
  if (mask[2]) outputs.push_back(buffer("grad_bias", db = at::empty({spec->o}, weight.options())));
  if (outputs.empty()) return std::vector<at::Tensor>{at::Tensor(), at::Tensor(), at::Tensor()};
  OpRecord record = record_for("convolution_backward_overrideable", {grad_output, input, weight}, input.scalar_type());
  record.flops = static_cast<uint64_t>(kernels::conv2d_backward_flops(*spec));
  const kernels::Conv2dSpec s = *spec;
  execute_kernel(input.device().index(), conv_key("conv2d_backward", s),
                 kernels::invocation(kernels::conv2d_backward_program, s),
                 {buffer("input", x), buffer("weight", w), buffer("grad_output", dy)}, outputs, std::move(record));
  if (unbatched && dx.defined()) dx = dx.squeeze(0);
  return std::vector<at::Tensor>{dx, dw, db};
}

void decline_convolution_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason) {
  {
    // convolution_backward takes bias_sizes (the grad_bias shape) after weight.
    const size_t n = op.schema().arguments().size();
    std::vector<c10::IValue> args(stack->end() - n, stack->end());
    torch::jit::drop(*stack, n);
    const at::Tensor& weight = args[2].toTensor();
    const bool want_bias = args[9].toBoolList().get(2);
    const int64_t groups = int_value(args[8]);
    const int64_t bias_size = args[6].toBool() ? weight.size(1) * groups : weight.size(0);
    c10::IValue bias_sizes = want_bias ? c10::IValue(std::vector<int64_t>{bias_size}) : c10::IValue();
    for (size_t i = 0; i < args.size(); ++i) {
      if (i == 3) torch::jit::push(*stack, bias_sizes);
      torch::jit::push(*stack, std::move(args[i]));
    }
    neuron_fallback(convolution_backward_handle(), stack, reason);
  }
}

}  // namespace

std::vector<Lowering> conv_lowerings() {
  return {
      row("convolution_overrideable", [](const std::string&, LoweringArgs a) { return lower_conv_forward(a); }, {},
          decline_convolution),
      row("convolution_backward_overrideable", [](const std::string&, LoweringArgs a) { return lower_conv_backward(a); }, {},
          decline_convolution_backward),
  };
}

}  // namespace trnsim::frontend
