// Convolution and optimizer-step lowerings of the PyTorch device (a second ATen TU next to
// neuron_device.cpp, so neither grows past a minute of compile time):
//  - conv2d forward / backward through the PrivateUse1 "overrideable" convolution ops, on the
//    implicit-GEMM conv kernels (kernels/conv.h);
//  - the `_foreach_*` ops torch.optim's default (foreach) paths call, per tensor on the
//    element-wise kernels, and `_fused_adamw_` on the fused AdamW kernel (kernels/optimizer.h).
// Whatever a lowering does not take goes through the counted CPU fallback before anything is written.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "frontend/lowering_support.h"
#include "isa/isa_error.h"
#include "kernels/conv.h"
#include "kernels/elementwise.h"
#include "kernels/optimizer.h"
#include "kernels/pooling.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

std::string op_name(const c10::OperatorHandle& op) {
  const c10::OperatorName& name = op.schema().operator_name();
  std::string full = name.name;
  if (!name.overload_name.empty()) full += "." + name.overload_name;
  return full.rfind("aten::", 0) == 0 ? full.substr(6) : full;
}

int64_t int_value(const c10::IValue& v) { return v.isInt() ? v.toInt() : v.toSymInt().guard_int(__FILE__, __LINE__); }

std::vector<int64_t> int_values(const c10::IValue& v) {
  std::vector<int64_t> out;
  for (const c10::IValue& e : v.toListRef()) out.push_back(int_value(e));
  return out;
}

// =============================================================================================
// conv2d
// =============================================================================================

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

// (N, C, H, W) of a 4-D NCHW tensor, or of a 3-D [C, H, W] one as a batch of one.
std::tuple<int64_t, int64_t, int64_t, int64_t> nchw(const at::Tensor& t) {
  const bool batched = t.dim() == 4;
  return {batched ? t.size(0) : 1, t.size(batched ? 1 : 0), t.size(batched ? 2 : 1), t.size(batched ? 3 : 2)};
}

// Runs `lower` on the op's arguments and pushes its results; nullopt or a kernel's rejection
// (std::invalid_argument, an IsaError) leaves the stack untouched for `fallback` (by default the
// counted CPU fallback of this op).
template <typename Lower, typename Fallback>
void run_or_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, Lower&& lower, Fallback&& fallback) {
  const size_t n = op.schema().arguments().size();
  std::optional<std::vector<at::Tensor>> out;
  try {
    out = lower(torch::jit::last(*stack, n));
  } catch (const std::invalid_argument&) {
    out.reset();
  } catch (const isa::IsaError&) {  // e.g. the conv builder rejects shapes it cannot place in SBUF
    out.reset();
  }
  if (!out) {
    fallback();
    return;
  }
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : *out) torch::jit::push(*stack, std::move(t));
}

template <typename Lower>
void run_or_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, Lower&& lower) {
  run_or_fallback(op, stack, std::forward<Lower>(lower), [&] { neuron_fallback(op, stack); });
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

// Batched [N, C, H, W] view of an unbatched [C, H, W] input (conv2d unsqueezes before it
// reaches here, but at::convolution may be called directly).
at::Tensor batched(const at::Tensor& t, bool unbatched) { return unbatched ? t.unsqueeze(0) : t; }

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
  execute_program(input.device().index(), conv_key("conv2d", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::conv2d_program(s, hw, core, cores);
                  },
                  inputs,
                  {buffer("output", y)}, std::move(record));
  return unbatched ? y.squeeze(0) : y;
}

void neuron_convolution(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(
      op, stack,
      [](c10::ArrayRef<c10::IValue> a) -> std::optional<std::vector<at::Tensor>> {
        std::optional<at::Tensor> y = lower_conv_forward(a);
        if (!y) return std::nullopt;
        return std::vector<at::Tensor>{*y};
      },
      [&] { neuron_fallback(convolution_handle(), stack); });
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
  execute_program(input.device().index(), conv_key("conv2d_backward", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::conv2d_backward_program(s, hw, core, cores);
                  },
                  {buffer("input", x), buffer("weight", w), buffer("grad_output", dy)}, outputs, std::move(record));
  if (unbatched && dx.defined()) dx = dx.squeeze(0);
  return std::vector<at::Tensor>{dx, dw, db};
}

void neuron_convolution_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return lower_conv_backward(a); }, [&] {
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
    neuron_fallback(convolution_backward_handle(), stack);
  });
}

// =============================================================================================
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

std::string hex(double v) {
  std::ostringstream s;
  s << std::hexfloat << v;
  return s.str();
}

// out (contiguous, numel elements) = a op b.
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
  std::string key = "foreach_binary|" + std::to_string(static_cast<int>(kind)) + "|" + std::to_string(numel) + "|" +
                    std::to_string(static_cast<int>(spec.a_dtype)) + std::to_string(static_cast<int>(spec.b_dtype)) +
                    std::to_string(static_cast<int>(spec.output_dtype));
  if (a.scalar) key += "|a=" + hex(*a.scalar);
  if (b.scalar) key += "|b=" + hex(*b.scalar);
  std::vector<HostBuffer> inputs;
  if (!a.scalar) inputs.push_back(buffer("a", a.tensor));
  if (!b.scalar) inputs.push_back(buffer("b", b.tensor));
  const at::Tensor& shown = a.scalar ? b.tensor : a.tensor;
  execute_program(out.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::binary_program(spec, hw, core, cores); },
                  inputs, {buffer("c", out)}, record_for(op, {shown}, out.scalar_type()));
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
  execute_program(out.device().index(), key,
                  [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::unary_program(spec, hw, core, cores); },
                  {buffer("x", x)}, {buffer("y", out)}, record_for(op, {x}, out.scalar_type()));
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

double scalar_of_tensor(const at::Tensor& t) { return t.item().toDouble(); }

// Binary family: add, sub, mul, div, maximum, minimum, clamp_min, clamp_max.
std::optional<BinaryOp> binary_kind(const std::string& base) {
  if (base == "add") return BinaryOp::add;
  if (base == "sub") return BinaryOp::subtract;
  if (base == "mul") return BinaryOp::multiply;
  if (base == "div") return BinaryOp::divide;
  if (base == "maximum" || base == "clamp_min") return BinaryOp::maximum;
  if (base == "minimum" || base == "clamp_max") return BinaryOp::minimum;
  return std::nullopt;
}

std::optional<UnaryOp> unary_kind(const std::string& base) {
  if (base == "sqrt") return UnaryOp::sqrt;
  if (base == "neg") return UnaryOp::neg;
  if (base == "abs") return UnaryOp::abs;
  if (base == "reciprocal") return UnaryOp::reciprocal;
  return std::nullopt;
}

// Returns false (nothing written) when the call is not supported.
bool lower_foreach(const std::string& full, c10::ArrayRef<c10::IValue> a, ForeachCall& call) {
  const size_t dot = full.find('.');
  std::string base = full.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  base = base.substr(std::string("_foreach_").size());
  call.inplace = !base.empty() && base.back() == '_';
  if (call.inplace) base.pop_back();
  call.op = "_foreach_" + base + (call.inplace ? "_" : "");
  call.self = a[0].toTensorVector();
  const size_t count = call.self.size();
  if (count == 0) return false;

  if (std::optional<UnaryOp> kind = unary_kind(base)) {
    if (!lists_supported(call.self, {})) return false;
    for (size_t i = 0; i < count; ++i) {
      at::Tensor r = result_for(call, i);
      run_unary(call.op, *kind, flat(call.self[i]), r);
      finish(call, i, r);
    }
    return true;
  }

  if (std::optional<BinaryOp> kind = binary_kind(base)) {
    const bool has_alpha = (base == "add" || base == "sub") && (overload == "List" || overload == "Tensor");
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
    if (overload == "List") {
      others = a[1].toTensorVector();
      if (!lists_supported(call.self, {&others})) return false;
    } else {
      if (!lists_supported(call.self, {})) return false;
      if (overload == "Scalar") {
        const c10::Scalar s = a[1].toScalar();
        if (!is_real(s)) return false;
        scalars.assign(count, s.toDouble());
      } else if (overload == "ScalarList") {
        for (const c10::IValue& v : a[1].toListRef()) {
          if (!is_real(v.toScalar())) return false;
          scalars.push_back(v.toScalar().toDouble());
        }
        if (scalars.size() != count) return false;
      } else if (overload == "Tensor") {
        const at::Tensor& t = a[1].toTensor();
        if (t.numel() != 1 || !(at::isFloatingType(t.scalar_type()) || at::isIntegralType(t.scalar_type(), true)))
          return false;
        scalars.assign(count, scalar_of_tensor(t) * alpha);
      } else {
        return false;
      }
    }
    std::vector<at::ScalarType> result_dtypes;
    for (size_t i = 0; i < count; ++i) {
      at::ScalarType t = call.self[i].scalar_type();
      if (overload == "List") t = at::result_type(call.self[i], others[i]);
      if (overload == "Tensor") t = at::result_type(call.self[i], a[1].toTensor());
      if (!sim_dtype(t)) return false;
      result_dtypes.push_back(t);
    }
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor self = flat(call.self[i]);
      at::Tensor r = result_for(call, i, result_dtypes[i]);
      if (overload != "List") {
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
  if (base == "lerp") {
    // Tensor weights (.List) would need a per-element branch: registered so that they fall back as
    // the one foreach op rather than per tensor.
    if (overload != "Scalar" && overload != "ScalarList") return false;
    const std::vector<at::Tensor> ends = a[1].toTensorVector();
    if (!lists_supported(call.self, {&ends}) || !same_dtypes(call, {&ends})) return false;
    std::vector<double> weights;
    if (overload == "Scalar") {
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
  if (base == "addcmul" || base == "addcdiv") {
    const std::vector<at::Tensor> t1 = a[1].toTensorVector(), t2 = a[2].toTensorVector();
    if (!lists_supported(call.self, {&t1, &t2}) || !same_dtypes(call, {&t1, &t2})) return false;
    std::vector<double> values;
    if (overload == "Scalar") {
      if (!is_real(a[3].toScalar())) return false;
      values.assign(count, a[3].toScalar().toDouble());
    } else if (overload == "ScalarList") {
      for (const c10::IValue& v : a[3].toListRef()) {
        if (!is_real(v.toScalar())) return false;
        values.push_back(v.toScalar().toDouble());
      }
    } else if (overload == "Tensor") {
      const at::Tensor& s = a[3].toTensor();
      if (s.dim() != 1 || !(at::isFloatingType(s.scalar_type()) || at::isIntegralType(s.scalar_type(), true)))
        return false;
      const at::Tensor host = s.to(at::kDouble).cpu();
      for (int64_t j = 0; j < host.numel(); ++j) values.push_back(host.data_ptr<double>()[j]);
    } else {
      return false;
    }
    if (values.size() != count) return false;
    const BinaryOp second = base == "addcmul" ? BinaryOp::multiply : BinaryOp::divide;
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

void neuron_foreach(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const std::string full = op_name(op);
  ForeachCall call;
  bool lowered = false;
  try {
    lowered = lower_foreach(full, torch::jit::last(*stack, n), call);
  } catch (const std::invalid_argument&) {
    // Falling back after some in-place results were written would apply the step twice to them.
    TORCH_CHECK(call.done == 0, "neuron: ", full, ": a kernel rejected a tensor after others were updated");
    lowered = false;
  }
  if (!lowered) {
    neuron_fallback(op, stack);
    return;
  }
  torch::jit::drop(*stack, n);
  if (!call.inplace) torch::jit::push(*stack, c10::IValue(call.results));
}

// _fused_adamw_ on the fused AdamW kernel: one program per parameter tensor (step and
// hyper-parameters are immediates). exp_avg / exp_avg_sq stay in their dtype in HBM (bf16 for bf16
// parameters); the kernel updates them in fp32 and rounds once, as torch's fused CPU kernel does.
bool lower_fused_adamw(const std::string& full, c10::ArrayRef<c10::IValue> a) {
  const std::vector<at::Tensor> params = a[0].toTensorVector(), grads = a[1].toTensorVector(),
                                m = a[2].toTensorVector(), v = a[3].toTensorVector(), steps = a[5].toTensorVector();
  double lr = 0;
  if (a[6].isTensor()) {
    if (a[6].toTensor().numel() != 1) return false;
    lr = scalar_of_tensor(a[6].toTensor());
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
    const double step = scalar_of_tensor(steps[i]);
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
    spec.lr = lr, spec.beta1 = beta1, spec.beta2 = beta2, spec.eps = eps, spec.weight_decay = wd;
    spec.step = step_values[i];
    std::ostringstream key;
    key << std::hexfloat << "fused_adamw|" << spec.elements << "|" << static_cast<int>(spec.param_dtype)
        << static_cast<int>(spec.grad_dtype) << static_cast<int>(spec.state_dtype) << "|" << lr << "," << beta1 << "," << beta2 << "," << eps << "," << wd
        << "|" << spec.step;
    c10::DeviceGuard guard(p.device());
    execute_program(p.device().index(), key.str(),
                    [spec](const HardwareConfig& hw, uint32_t core, uint32_t cores) { return kernels::adamw_program(spec, hw, core, cores); },
                    {buffer("param", p), buffer("grad", grads[i]), buffer("exp_avg", m[i]), buffer("exp_avg_sq", v[i])},
                    {buffer("param", p), buffer("exp_avg", m[i]), buffer("exp_avg_sq", v[i])},
                    record_for(full, {p, grads[i]}, p.scalar_type()));
  }
  return true;
}

void neuron_fused_adamw(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const std::string full = op_name(op);
  bool lowered = false;
  try {
    lowered = lower_fused_adamw(full, torch::jit::last(*stack, n));
  } catch (const std::invalid_argument&) {
    TORCH_CHECK(false, "neuron: ", full, ": the AdamW kernel rejected a parameter (some may have been updated)");
  }
  if (!lowered) {
    neuron_fallback(op, stack);
    return;
  }
  torch::jit::drop(*stack, n);
}

// The single-tensor forms (torch.optim's for-loop path, user code): lerp.Scalar, addcmul, addcdiv,
// their in-place and out= overloads, as the foreach lowering of one-element lists (same kernels,
// same fp32 intermediate arithmetic). out= writes the functional result into `out`.
void neuron_pointwise_ternary(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const std::string full = op_name(op);
  const size_t dot = full.find('.');
  std::string base = full.substr(0, dot);
  const bool inplace = base.back() == '_';
  if (inplace) base.pop_back();
  const std::string overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  const bool out_variant = overload == "out" || overload == "Scalar_out";
  const c10::ArrayRef<c10::IValue> a = torch::jit::last(*stack, n);
  const at::Tensor self = a[0].toTensor();
  // lerp.Scalar(self, end, weight) / addcmul(self, t1, t2, value): tensors first, then the scalar.
  const size_t tensors = base == "lerp" ? 2 : 3;
  std::vector<c10::IValue> lists;
  for (size_t i = 0; i < tensors; ++i) lists.emplace_back(std::vector<at::Tensor>{a[i].toTensor()});
  lists.push_back(a[tensors]);
  ForeachCall call;
  bool lowered = false;
  try {
    lowered = lower_foreach("_foreach_" + base + (inplace ? "_" : "") + ".Scalar", lists, call);
  } catch (const std::invalid_argument&) {
    TORCH_CHECK(call.done == 0, "neuron: ", full, ": a kernel rejected a tensor after it was updated");
    lowered = false;
  }
  if (lowered && out_variant) {
    at::Tensor target = a[n - 1].toTensor();
    const at::Tensor result = call.results.front();
    lowered = on_neuron(target) && target.scalar_type() == result.scalar_type();
    if (lowered) {
      if (target.sizes() != result.sizes()) target.resize_(result.sizes());
      target.copy_(result);
      torch::jit::drop(*stack, n);
      torch::jit::push(*stack, target);
      return;
    }
  }
  if (!lowered) {
    neuron_fallback(op, stack);
    return;
  }
  torch::jit::drop(*stack, n);
  torch::jit::push(*stack, inplace ? self : call.results.front());
}

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

void neuron_batch_norm(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> v = torch::jit::last(*stack, n);
  BatchNormArgs a{v[0].toTensor(), optional_tensor(v[1]), optional_tensor(v[2]), optional_tensor(v[3]),
                  optional_tensor(v[4])};
  const bool training = v[5].toBool();
  if (!bn_supported(a) || (!training && (!a.running_mean.defined() || !a.running_var.defined()))) {
    neuron_fallback(op, stack);
    return;
  }
  std::vector<at::Tensor> out = lower_batch_norm(a, training, v[6].toDouble(), v[7].toDouble());
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : out) torch::jit::push(*stack, std::move(t));
}

void neuron_batch_norm_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const c10::ArrayRef<c10::IValue> v = torch::jit::last(*stack, n);
  const at::Tensor grad_out = v[0].toTensor();
  BatchNormArgs a{v[1].toTensor(), optional_tensor(v[2]), at::Tensor(), optional_tensor(v[3]), optional_tensor(v[4])};
  const at::Tensor save_mean = optional_tensor(v[5]), save_invstd = optional_tensor(v[6]);
  const bool training = v[7].toBool();
  const std::vector<bool> mask = {v[9].toBoolList().get(0), v[9].toBoolList().get(1), v[9].toBoolList().get(2)};
  const bool stats = training ? save_mean.defined() && save_invstd.defined() && on_neuron(save_mean) &&
                                    on_neuron(save_invstd) && save_mean.numel() == a.input.size(1)
                              : a.running_mean.defined() && a.running_var.defined();
  if (!bn_supported(a) || !stats || !on_neuron(grad_out) || grad_out.sizes() != a.input.sizes()) {
    neuron_fallback(op, stack);
    return;
  }
  std::vector<at::Tensor> out = lower_batch_norm_backward(grad_out, a, save_mean, save_invstd, training,
                                                          v[8].toDouble(), mask);
  torch::jit::drop(*stack, n);
  for (at::Tensor& t : out) torch::jit::push(*stack, std::move(t));
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

void neuron_upsample_nearest(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return lower_upsample_nearest(a); });
}

void neuron_upsample_nearest_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return lower_upsample_nearest_backward(a); });
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("upsample_nearest2d", torch::CppFunction::makeFromBoxedFunction<&neuron_upsample_nearest>());
  m.impl("upsample_nearest2d_backward",
         torch::CppFunction::makeFromBoxedFunction<&neuron_upsample_nearest_backward>());
  m.impl("native_batch_norm", torch::CppFunction::makeFromBoxedFunction<&neuron_batch_norm>());
  m.impl("native_batch_norm_backward", torch::CppFunction::makeFromBoxedFunction<&neuron_batch_norm_backward>());
  for (const char* name : {"lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", "addcmul", "addcmul_", "addcmul.out",
                           "addcdiv", "addcdiv_", "addcdiv.out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&neuron_pointwise_ternary>());
  }
  m.impl("convolution_overrideable", torch::CppFunction::makeFromBoxedFunction<&neuron_convolution>());
  m.impl("convolution_backward_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&neuron_convolution_backward>());
  m.impl("_fused_adamw_", torch::CppFunction::makeFromBoxedFunction<&neuron_fused_adamw>());
  m.impl("_fused_adamw_.tensor_lr", torch::CppFunction::makeFromBoxedFunction<&neuron_fused_adamw>());
  for (const char* base : {"add", "sub", "mul", "div", "maximum", "minimum", "clamp_min", "clamp_max"}) {
    for (const char* overload : {"Scalar", "List", "ScalarList", "Tensor"}) {
      const std::string o = overload;
      if (o == "Tensor" && std::string(base) != "add" && std::string(base) != "mul" && std::string(base) != "div")
        continue;
      for (const char* suffix : {"_", ""}) {
        m.impl(("_foreach_" + std::string(base) + suffix + "." + o).c_str(),
               torch::CppFunction::makeFromBoxedFunction<&neuron_foreach>());
      }
    }
  }
  for (const char* base : {"sqrt", "neg", "abs", "reciprocal"}) {
    m.impl(("_foreach_" + std::string(base) + "_").c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_foreach>());
    m.impl(("_foreach_" + std::string(base)).c_str(), torch::CppFunction::makeFromBoxedFunction<&neuron_foreach>());
  }
  for (const char* name : {"_foreach_lerp_.Scalar", "_foreach_lerp.Scalar", "_foreach_lerp_.ScalarList",
                           "_foreach_lerp.ScalarList", "_foreach_lerp_.List", "_foreach_lerp.List",
                           "_foreach_addcmul_.Scalar", "_foreach_addcmul.Scalar",
                           "_foreach_addcmul_.ScalarList", "_foreach_addcmul.ScalarList", "_foreach_addcmul_.Tensor",
                           "_foreach_addcmul.Tensor", "_foreach_addcdiv_.Scalar", "_foreach_addcdiv.Scalar",
                           "_foreach_addcdiv_.ScalarList", "_foreach_addcdiv.ScalarList", "_foreach_addcdiv_.Tensor",
                           "_foreach_addcdiv.Tensor"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&neuron_foreach>());
  }
}

// =============================================================================================
// pooling: max_pool2d_with_indices / avg_pool2d and their backwards on the pooling kernels
// (kernels/pooling.h). 4-D or 3-D (unbatched) input, fp32 / bf16 / fp16. The kernels write int32
// indices; the int64 torch wants (and the int32 the backward reads) are device copies. Whatever the
// kernels do not take (other dtypes, a spec validate_pool rejects, a grad_output or indices not on
// the device) goes to the counted CPU fallback under the op's own name.
// =============================================================================================

namespace pool {

// [a] or [a, b] -> (a, b); an empty list takes `fallback` (torch: stride defaults to the kernel).
std::optional<std::pair<int64_t, int64_t>> pair_of(const c10::IValue& v, std::optional<std::pair<int64_t, int64_t>> fallback) {
  const std::vector<int64_t> x = int_values(v);
  if (x.empty() && fallback) return fallback;
  if (x.size() == 1) return std::make_pair(x[0], x[0]);
  if (x.size() == 2) return std::make_pair(x[0], x[1]);
  return std::nullopt;
}

// The kernel's spec, or nullopt (unsupported) for these arguments; validate_pool's rejections throw
// std::invalid_argument, which the callers send to the fallback too.
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
  kernels::validate_pool(spec, max);  // throws std::invalid_argument
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
  execute_program(self.device().index(), key_of("max_pool2d", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::max_pool2d_program(s, hw, core, cores);
                  },
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
  // A plane whose backward does not fit SBUF is rejected when the program is built (std::invalid_argument):
  // nothing the caller sees has been written by then.
  const kernels::PoolSpec s = *spec;
  c10::DeviceGuard guard(self.device());
  const at::Tensor go = batched(grad_output, unbatched).contiguous();
  const at::Tensor idx = batched(indices, unbatched).contiguous().to(at::kInt);
  at::Tensor gi = at::empty({s.n, s.c, s.h, s.w}, self.options());
  execute_program(self.device().index(), key_of("max_pool2d_backward", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::max_pool2d_backward_program(s, hw, core, cores);
                  },
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
  execute_program(self.device().index(), key_of("avg_pool2d", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::avg_pool2d_program(s, hw, core, cores);
                  },
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
  execute_program(self.device().index(), key_of("avg_pool2d_backward", s),
                  [s](const HardwareConfig& hw, uint32_t core, uint32_t cores) {
                    return kernels::avg_pool2d_backward_program(s, hw, core, cores);
                  },
                  {buffer("grad_output", go)}, {buffer("grad_input", gi)},
                  record_for("avg_pool2d_backward", {grad_output, self}, self.scalar_type()));
  return unbatched ? gi.squeeze(0) : gi;
}


template <typename F>
std::optional<std::vector<at::Tensor>> one(F&& f, c10::ArrayRef<c10::IValue> a) {
  std::optional<at::Tensor> t = f(a);
  if (!t) return std::nullopt;
  return std::vector<at::Tensor>{std::move(*t)};
}

void neuron_max_pool2d(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return max_forward(a); });
}
void neuron_max_pool2d_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return one(max_backward, a); });
}
void neuron_avg_pool2d(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return one(avg_forward, a); });
}
void neuron_avg_pool2d_backward(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  run_or_fallback(op, stack, [](c10::ArrayRef<c10::IValue> a) { return one(avg_backward, a); });
}

}  // namespace pool

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool2d_with_indices", torch::CppFunction::makeFromBoxedFunction<&pool::neuron_max_pool2d>());
  m.impl("max_pool2d_with_indices_backward",
         torch::CppFunction::makeFromBoxedFunction<&pool::neuron_max_pool2d_backward>());
  m.impl("avg_pool2d", torch::CppFunction::makeFromBoxedFunction<&pool::neuron_avg_pool2d>());
  m.impl("avg_pool2d_backward", torch::CppFunction::makeFromBoxedFunction<&pool::neuron_avg_pool2d_backward>());
}

}  // namespace
}  // namespace trnsim::frontend
