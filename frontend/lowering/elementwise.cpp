// Element-wise lowerings: the unary and binary kernels of kernels/elementwise.h with PyTorch's type
// promotion (float, integer and bool operands), comparisons, where / masked_fill, clamps, the
// logical and bitwise ops, pow, and the in-place forms (computed out of place, then copied into
// self, which keeps its dtype and shape).
#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/ScalarOps.h>
#include <ATen/TensorIterator.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/elementwise.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {

using kernels::BinaryOp;
using kernels::BinarySpec;
using kernels::UnaryOp;
using kernels::UnarySpec;
using kernels::WhereSpec;

ElementwiseLayout elementwise_layout(const std::vector<at::Tensor>& operands) {
  // TensorIterator itself on meta twins of the operands: the result it allocates is the layout
  // (its dim reordering by the operands' strides, broadcast dims ignored), without touching values.
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false).declare_static_dtype_and_device(at::kFloat, at::kMeta);
  config.add_owned_output(at::Tensor());
  for (const at::Tensor& t : operands)
    config.add_owned_const_input(at::empty_strided(t.sizes(), t.strides(), at::TensorOptions().dtype(at::kFloat).device(at::kMeta)));
  const at::TensorIterator iter = config.build();
  const at::Tensor& result = iter.output(0);
  ElementwiseLayout layout{dims(result.sizes()), dims(result.strides()), {}};
  for (int64_t d = 0; d < result.dim(); ++d) layout.order.push_back(d);
  // Size-1 dims may share a stride with a neighbour; where they sit in the order does not matter.
  std::stable_sort(layout.order.begin(), layout.order.end(), [&](int64_t a, int64_t b) {
    return layout.strides[size_t(a)] > layout.strides[size_t(b)];
  });
  return layout;
}

at::Tensor ElementwiseLayout::empty(const at::TensorOptions& options) const {
  return at::empty_strided(sizes, strides, options);
}

at::Tensor ElementwiseLayout::stored(const at::Tensor& operand) const {
  at::Tensor t = operand;
  while (t.dim() < int64_t(sizes.size())) t = t.unsqueeze(0);
  return t.permute(order);
}

std::optional<at::Tensor> into_self(const at::Tensor& self, std::optional<at::Tensor> result) {
  if (!result || result->scalar_type() != self.scalar_type()) return std::nullopt;
  at::Tensor target = self;
  target.copy_(*result);
  return target;
}

std::optional<at::Tensor> lower_unary(const std::string& op, const at::Tensor& x_in, UnaryOp kind) {
  if (!on_neuron(x_in)) return std::nullopt;
  const at::ScalarType in_type = x_in.scalar_type();
  at::ScalarType out_type = in_type;
  std::optional<DType> in_dt = sim_dtype(in_type);
  if (!in_dt && at::isIntegralType(in_type, /*includeBool=*/false)) {
    // Integer inputs: abs / neg / sign / relu / square / copy stay integers, the float functions give
    // the default float dtype (torch's promotion); the engines compute in fp32, exact while every input
    // and result is within 2^24 (a square's input within 2^12).
    const bool integer_valued = kind == UnaryOp::abs || kind == UnaryOp::neg || kind == UnaryOp::sign ||
                                kind == UnaryOp::relu || kind == UnaryOp::square || kind == UnaryOp::copy;
    if (!integer_valued) out_type = c10::typeMetaToScalarType(c10::get_default_dtype());
    const double bound = !integer_valued ? exact_integer_limit(out_type)
                         : kind == UnaryOp::square ? std::sqrt(kExactIntegerBound) : kExactIntegerBound;
    if (host_max_abs(x_in) > bound) return std::nullopt;
    if (integer_valued && in_type != at::kInt && in_type != at::kLong && kind != UnaryOp::sign &&
        kind != UnaryOp::relu && kind != UnaryOp::copy)
      return std::nullopt;  // int8/int16/uint8 wrap in torch (abs(-128) is -128)
    in_dt = elementwise_dtype(in_type);
  }
  if (!in_dt) return std::nullopt;
  const std::optional<DType> out_dt = elementwise_dtype(out_type);
  c10::DeviceGuard guard(x_in.device());
  // Computed in the storage order of the result's layout (TensorIterator's: a transposed or
  // channels-last input keeps its layout); an input not dense in that order is gathered first.
  const ElementwiseLayout layout = elementwise_layout({x_in});
  const at::Tensor x = layout.stored(x_in).contiguous();
  at::Tensor y = layout.empty(x_in.options().dtype(out_type));
  if (x_in.numel() == 0) return y;
  const at::Tensor source = kernel_input(x);
  const KernelResult target(y);
  UnarySpec spec;
  spec.shape = {x.numel()};
  spec.op = kind;
  spec.input_dtype = *in_dt;
  spec.output_dtype = *out_dt;
  const std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + std::to_string(x.numel()) + "|" +
                          std::string(dtype_name(*in_dt)) + ">" + std::string(dtype_name(*out_dt));
  execute_kernel(x_in.device().index(), key, kernels::invocation(kernels::unary_program, spec),
                 {HostBuffer{"x", source.data_ptr(), size_t(x.numel()), *in_dt}}, {target.buffer("y")},
                 record_for(op, {x_in}, in_type));
  return target.finish();
}

// A binary operand: a tensor on the device, or a 0-dim tensor used as an immediate (Python numbers
// arrive as wrapped 0-dim CPU tensors).
namespace {

struct BinaryOperand {
  at::Tensor tensor;  // what the kernel reads (an int64 tensor narrowed to an int32 host copy)
  DType dtype = DType::fp32;
  std::optional<double> scalar;
  double max_abs = 0;  // largest |value| (integer and bool operands only: exactness bounds)
};

// A tensor operand is read in the result's storage order (the caller's view: a copy where it is not dense there).
std::optional<BinaryOperand> binary_operand(const at::Tensor& t, bool as_immediate) {
  const bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  if (!at::isFloatingType(t.scalar_type()) && !integral) return std::nullopt;
  if (as_immediate) {
    const double v = on_neuron(t) ? immediate_value(t, 1.0) : t.item().toDouble();
    return BinaryOperand{at::Tensor(), DType::fp32, v, std::abs(v)};
  }
  const std::optional<DType> dt = elementwise_dtype(t.scalar_type());
  if (!on_neuron(t) || !dt) return std::nullopt;
  const at::Tensor stored = t.contiguous();
  BinaryOperand o{stored, *dt, std::nullopt, integral ? host_max_abs(t) : 0.0};
  if (t.scalar_type() == at::kLong) {
    if (o.max_abs > kExactIntegerBound) return std::nullopt;
    o.tensor = kernel_input(o.tensor);  // alive until the program has run
  }
  return o;
}

// Whether torch's result of `kind` on these operands is what the kernel's fp32 arithmetic gives:
// a float result where every integer operand is exact in the result dtype (torch casts it there
// first); an integer result where no intermediate leaves the exact range and no wraparound occurs.
bool exact_in_fp32(BinaryOp kind, const BinaryOperand& a, const BinaryOperand& b, at::ScalarType compute,
                   bool a_integral, bool b_integral) {
  if (at::isFloatingType(compute)) {
    const double limit = exact_integer_limit(compute);
    return (!a_integral || a.max_abs <= limit) && (!b_integral || b.max_abs <= limit);
  }
  for (const BinaryOperand* o : {&a, &b})
    if (o->scalar && *o->scalar != std::nearbyint(*o->scalar)) return false;
  double bound = std::max(a.max_abs, b.max_abs);
  if (kind == BinaryOp::add || kind == BinaryOp::subtract) bound = a.max_abs + b.max_abs;
  if (kind == BinaryOp::multiply) bound = a.max_abs * b.max_abs;
  // and / or / xor of two's-complement values below 2^k stay below 2^(k+1) in magnitude
  if (kind == BinaryOp::bitwise_and || kind == BinaryOp::bitwise_or || kind == BinaryOp::bitwise_xor) bound *= 2;
  if (bound > kExactIntegerBound) return false;
  const bool produces_value = kind == BinaryOp::add || kind == BinaryOp::subtract || kind == BinaryOp::multiply;
  if (!produces_value) return true;
  // Narrow integer results wrap in torch; the kernel would saturate instead.
  switch (compute) {
    case at::kByte: return kind != BinaryOp::subtract && bound <= 255;
    case at::kChar: return bound <= 127;
    case at::kShort: return bound <= 32767;
    default: return true;
  }
}

// c = a op b for any float, integer or bool operands with PyTorch's type promotion (a bf16 and an
// fp32 tensor, an int64 tensor and a Python float, ...): each tensor is read in its own dtype and
// the engines compute in fp32. `compare`: the result is bool (1 / 0 written as uint8), computed in
// the promoted type. Empty results need no kernel.
}  // namespace

std::optional<at::Tensor> lower_binary(const std::string& op, const at::Tensor& a_in, const at::Tensor& b_in,
                                       BinaryOp kind, bool compare, bool round_immediate) {
  if (!on_neuron(a_in) && !on_neuron(b_in)) return std::nullopt;
  const at::ScalarType promoted = at::result_type(a_in, b_in);
  at::ScalarType result = compare ? at::kBool : promoted;
  if (kind == BinaryOp::divide && at::isIntegralType(promoted, /*includeBool=*/true))
    result = c10::typeMetaToScalarType(c10::get_default_dtype());  // true division
  const at::ScalarType compute = kind == BinaryOp::divide ? result : promoted;
  if (compute == at::kBool) {
    // bool arithmetic is logical: + is or, * is and; torch rejects - on bools itself.
    if (kind == BinaryOp::add) kind = BinaryOp::maximum;
    else if (kind == BinaryOp::multiply) kind = BinaryOp::minimum;
    else if (kind == BinaryOp::subtract) return std::nullopt;
  }
  const std::optional<DType> out_dt = elementwise_dtype(result);
  if (!out_dt) return std::nullopt;
  const at::Tensor& device_operand = on_neuron(a_in) ? a_in : b_in;
  c10::DeviceGuard guard(device_operand.device());
  // A 0-dim operand is an immediate unless both are 0-dim: then the device one is a 1-element tensor.
  const bool a_imm = a_in.dim() == 0 && (b_in.dim() > 0 || !on_neuron(a_in));
  const bool b_imm = b_in.dim() == 0 && !a_imm && (a_in.dim() > 0 || !on_neuron(b_in));
  // The result takes TensorIterator's layout (a transposed or channels-last operand's dim order, broadcast
  // or not); the kernel computes in its storage order, on the operands viewed in that order.
  std::vector<at::Tensor> laid_out;
  if (!a_imm) laid_out.push_back(a_in);
  if (!b_imm) laid_out.push_back(b_in);
  const ElementwiseLayout layout = elementwise_layout(laid_out);
  const at::Tensor a_v = a_imm ? a_in : layout.stored(a_in), b_v = b_imm ? b_in : layout.stored(b_in);
  // An expanded operand (stride-0 dims over a contiguous base: the gradient of a keepdim mean or
  // sum, a broadcast mask) goes to the kernel compact and is broadcast there, not materialised by a
  // device copy first (a stride-0 DMA moves one element per descriptor: 22 ms for a [4096, 4096]
  // fp32 expand on trn2, against 0.5 ms for the kernel that reads the compact values).
  auto compact = [](const at::Tensor& t) -> std::optional<at::Tensor> {
    if (!on_neuron(t) || t.dim() == 0) return std::nullopt;
    bool expanded = false;
    std::vector<int64_t> sizes = dims(t.sizes());
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.stride(d) == 0 && t.size(d) > 1) {
        sizes[size_t(d)] = 1;
        expanded = true;
      }
    }
    if (!expanded) return std::nullopt;
    at::Tensor base = t.as_strided(sizes, t.strides(), t.storage_offset());
    if (!base.is_contiguous()) return std::nullopt;
    return base;
  };
  const std::optional<at::Tensor> a_compact = a_imm ? std::nullopt : compact(a_v),
                                  b_compact = b_imm ? std::nullopt : compact(b_v);
  const bool compacted = a_compact || b_compact;
  std::optional<BinaryOperand> a = binary_operand(a_compact ? *a_compact : a_v, a_imm),
                               b = binary_operand(b_compact ? *b_compact : b_v, b_imm);
  if (!a || !b || (a->scalar && b->scalar)) return std::nullopt;
  const bool a_int = at::isIntegralType(a_in.scalar_type(), true), b_int = at::isIntegralType(b_in.scalar_type(), true);
  if (!exact_in_fp32(kind, *a, *b, compute, a_int, b_int)) return std::nullopt;
  if (compare && round_immediate) {  // torch compares against the scalar converted to the operands' dtype
    for (BinaryOperand* o : {&*a, &*b})
      if (o->scalar) o->scalar = at::scalar_tensor(*o->scalar, at::kDouble).to(promoted).item<double>();
  }
  // The result's shape in storage order (what the kernel computes); c is allocated in its logical order.
  std::vector<int64_t> out_shape;
  if (a->scalar) {
    out_shape = dims(b_v.sizes());
  } else if (b->scalar) {
    out_shape = dims(a_v.sizes());
  } else {
    const at::DimVector shape = at::infer_size_dimvector(a_v.sizes(), b_v.sizes());
    out_shape.assign(shape.begin(), shape.end());
  }
  int64_t numel = 1;
  for (int64_t d : out_shape) numel *= d;
  at::Tensor c = layout.empty(device_operand.options().dtype(result));
  if (numel == 0) return c;
  BinarySpec spec;
  spec.op = kind;
  spec.a_dtype = a->dtype;
  spec.b_dtype = b->dtype;
  spec.output_dtype = *out_dt;
  spec.a_scalar = a->scalar;
  spec.b_scalar = b->scalar;
  // Same shapes are flattened (one program per element count); broadcasts keep their shapes.
  const bool same = !a->scalar && !b->scalar && a_v.sizes() == b_v.sizes();
  const bool flat = !compacted && (a->scalar || b->scalar || same);
  spec.a_shape = a->scalar ? std::vector<int64_t>{1} : flat ? std::vector<int64_t>{numel}
                                                            : dims((a_compact ? *a_compact : a_v).sizes());
  spec.b_shape = b->scalar ? std::vector<int64_t>{1} : flat ? std::vector<int64_t>{numel}
                                                            : dims((b_compact ? *b_compact : b_v).sizes());
  if (!flat && a_v.dim() == 0) spec.a_shape = {1};
  if (!flat && b_v.dim() == 0) spec.b_shape = {1};
  if (compacted) spec.out_shape = out_shape;
  std::string key = op + "|" + std::to_string(static_cast<int>(kind)) + "|" + dims_key(spec.a_shape) +
                    dims_key(spec.b_shape) + "|" + std::string(dtype_name(spec.a_dtype)) + "," +
                    std::string(dtype_name(spec.b_dtype)) + ">" + std::string(dtype_name(spec.output_dtype));
  if (compacted) key += "|out" + dims_key(spec.out_shape);
  std::ostringstream immediates;  // an immediate is part of the program
  immediates << std::hexfloat;
  if (spec.a_scalar) immediates << "|a=" << *spec.a_scalar;
  if (spec.b_scalar) immediates << "|b=" << *spec.b_scalar;
  key += immediates.str();
  std::vector<HostBuffer> inputs;
  if (!a->scalar) inputs.push_back(HostBuffer{"a", a->tensor.data_ptr(), size_t(a->tensor.numel()), a->dtype});
  if (!b->scalar) inputs.push_back(HostBuffer{"b", b->tensor.data_ptr(), size_t(b->tensor.numel()), b->dtype});
  const KernelResult out(c);
  execute_kernel(device_operand.device().index(), key, kernels::invocation(kernels::binary_program, spec), inputs,
                 {out.buffer("c")}, record_for(op, {a_in, b_in}, promoted));
  return out.finish();
}

// out = cond != 0 ? a : b (kernels/elementwise.h where), operands broadcast; a or b may be an
// immediate. Operands may have other dtypes than `result` (torch's promotion): the DMA and the
// predicated copy convert exactly (a narrower float, or integers the result dtype holds exactly);
// int64 operands and results go through int32 as in lower_binary.
std::optional<at::Tensor> lower_where(const std::string& op, const at::Tensor& cond_in, std::optional<at::Tensor> a_in,
                                      std::optional<double> a_scalar, std::optional<at::Tensor> b_in,
                                      std::optional<double> b_scalar, at::ScalarType result) {
  const std::optional<DType> dt = elementwise_dtype(result);
  if (!dt || !on_neuron(cond_in) || cond_in.scalar_type() != at::kBool) return std::nullopt;
  std::vector<at::Tensor> laid_out = {cond_in};
  for (const auto* t : {&a_in, &b_in}) {
    if (*t && !on_neuron(**t)) return std::nullopt;
    if (*t) laid_out.push_back(**t);
  }
  // The result takes TensorIterator's layout; every operand is viewed in its storage order and
  // broadcast to the result's shape there (a broadcast operand made dense by a device copy).
  const ElementwiseLayout layout = elementwise_layout(laid_out);
  std::vector<int64_t> stored_shape;
  for (int64_t d : layout.order) stored_shape.push_back(layout.sizes[size_t(d)]);
  auto in_order = [&](const at::Tensor& t) { return layout.stored(t).expand(stored_shape); };
  const at::Tensor cond_v = in_order(cond_in);
  if (a_in) a_in = in_order(*a_in);
  if (b_in) b_in = in_order(*b_in);
  c10::DeviceGuard guard(cond_in.device());
  at::Tensor out = layout.empty(cond_in.options().dtype(result));
  if (out.numel() == 0) return out;
  const bool integral_result = at::isIntegralType(result, /*includeBool=*/true);
  // A value operand as the kernel reads it; nullopt where its conversion to `result` is not exact.
  auto operand = [&](const std::optional<at::Tensor>& t) -> std::optional<std::pair<at::Tensor, DType>> {
    if (!t) return std::make_pair(at::Tensor(), *dt);
    const std::optional<DType> odt = elementwise_dtype(t->scalar_type());
    if (!odt) return std::nullopt;
    const bool integral = at::isIntegralType(t->scalar_type(), true);
    if (integral_result && !integral) return std::nullopt;  // torch truncates; the kernel would round
    if (t->scalar_type() != result && sim_dtype(t->scalar_type()) && sim_dtype(result) &&
        c10::elementSize(t->scalar_type()) > c10::elementSize(result))
      return std::nullopt;  // a narrowing float conversion: torch rounds through the CPU's path
    at::Tensor stored = t->contiguous();
    if (integral && (c10::elementSize(t->scalar_type()) >= 4 || !integral_result)) {
      const double limit = integral_result ? kExactIntegerBound : exact_integer_limit(result);
      if (host_max_abs(stored) > limit) return std::nullopt;
      stored = kernel_input(stored);
    }
    return std::make_pair(stored, *odt);
  };
  const std::optional<std::pair<at::Tensor, DType>> a = operand(a_in), b = operand(b_in);
  if (!a || !b) return std::nullopt;
  for (std::optional<double>* v : {&a_scalar, &b_scalar}) {  // an immediate converted to the result dtype, as torch does
    if (!*v) continue;
    if (integral_result && (**v != std::nearbyint(**v) || std::abs(**v) > kExactIntegerBound)) return std::nullopt;
    **v = at::scalar_tensor(**v, at::kDouble).to(result).to(at::kDouble).item<double>();
  }
  WhereSpec spec;
  spec.shape = {cond_v.numel()};
  spec.cond_dtype = DType::uint8;
  spec.a_dtype = a->second;
  spec.b_dtype = b->second;
  spec.output_dtype = *dt;
  spec.a_scalar = a_scalar;
  spec.b_scalar = b_scalar;
  const at::Tensor cond = cond_v.contiguous();  // alive until the program has run
  std::vector<HostBuffer> inputs = {buffer("cond", cond)};
  if (a_in) inputs.push_back(HostBuffer{"a", a->first.data_ptr(), size_t(a->first.numel()), a->second});
  if (b_in) inputs.push_back(HostBuffer{"b", b->first.data_ptr(), size_t(b->first.numel()), b->second});
  const KernelResult target(out);
  std::ostringstream key;
  key << std::hexfloat << op << "|" << cond_v.numel() << "|" << dtype_name(spec.a_dtype) << ","
      << dtype_name(spec.b_dtype) << ">" << dtype_name(spec.output_dtype);
  if (a_scalar) key << "|a=" << *a_scalar;
  if (b_scalar) key << "|b=" << *b_scalar;
  execute_kernel(cond_in.device().index(), key.str(), kernels::invocation(kernels::where_program, spec), inputs,
                 {target.buffer("out")}, record_for(op, {cond_in}, result));
  return target.finish();
}

namespace {

// threshold_backward(grad, self, threshold) = self <= threshold ? 0 : grad (relu's backward):
// a comparison against the immediate, then where.
std::optional<at::Tensor> lower_threshold_backward(const at::Tensor& grad, const at::Tensor& self, const c10::Scalar& thr) {
  if (!on_neuron(grad) || !on_neuron(self) || grad.scalar_type() != self.scalar_type() ||
      grad.sizes() != self.sizes() || !sim_dtype(grad.scalar_type()) || grad.numel() == 0)
    return std::nullopt;
  const at::Tensor threshold = scalar_operand(thr.toDouble());
  std::optional<at::Tensor> le = lower_binary("threshold_backward.le", self, threshold, BinaryOp::less_equal, true,
                                                  /*round_immediate=*/false);  // torch: in fp32 (opmath)
  if (!le) return std::nullopt;
  return lower_where("threshold_backward", *le, std::nullopt, 0.0, grad, std::nullopt, grad.scalar_type());
}

// pow.Tensor_Scalar for the exponents the unary kernel has: 2 (square), 1 (copy), 0.5 (sqrt),
// -0.5 (rsqrt), -1 (reciprocal); others fall back.
std::optional<at::Tensor> lower_pow(const std::string& op, const at::Tensor& x, const c10::Scalar& e) {
  if (!e.isFloatingPoint() && !e.isIntegral(false)) return std::nullopt;
  const double v = e.toDouble();
  if (on_neuron(x) && at::isIntegralType(x.scalar_type(), /*includeBool=*/true)) {
    if (x.scalar_type() == at::kBool) return std::nullopt;
    // torch: a float exponent gives the default float dtype (the base cast first); an integer one keeps
    // the integer dtype (x^1, x^2 and x^3 here: exact while the result is within 2^24, checked by the
    // kernels' lowerings; a negative exponent raises on the CPU).
    if (e.isFloatingPoint()) {
      c10::DeviceGuard guard(x.device());
      return lower_pow(op, x.to(c10::typeMetaToScalarType(c10::get_default_dtype())), e);
    }
    if (v == 1) return lower_unary(op, x, UnaryOp::copy);
    if (v == 2) return lower_unary(op, x, UnaryOp::square);
    if (v != 3) return std::nullopt;
    std::optional<at::Tensor> squared = lower_unary(op, x, UnaryOp::square);
    return squared ? lower_binary(op, *squared, x, BinaryOp::multiply) : std::nullopt;
  }
  if (v == 2) return lower_unary(op, x, UnaryOp::square);
  if (v == 1) return lower_unary(op, x, UnaryOp::copy);
  if (v == 0.5) return lower_unary(op, x, UnaryOp::sqrt);
  if (v == -0.5) return lower_unary(op, x, UnaryOp::rsqrt);
  if (v == -1) return lower_unary(op, x, UnaryOp::reciprocal);
  // x^3 (rsqrt's backward), x^-2, x^-1.5: two kernels.
  if (v == 3 || v == -2 || v == -1.5) {
    std::optional<at::Tensor> first = lower_unary(op, x, v == 3 ? UnaryOp::square : v == -2 ? UnaryOp::square : UnaryOp::rsqrt);
    if (!first) return std::nullopt;
    if (v == 3) return lower_binary(op, *first, x, BinaryOp::multiply);
    if (v == -2) return lower_unary(op, *first, UnaryOp::reciprocal);
    std::optional<at::Tensor> cubed = lower_binary(op, *first, *first, BinaryOp::multiply);  // x^-1
    return cubed ? lower_binary(op, *cubed, *first, BinaryOp::multiply) : std::nullopt;
  }
  return std::nullopt;
}

// add / sub's alpha: other * alpha by one more kernel (rounded once more than torch's fused form);
// a 0-dim other with alpha != 1 falls back.
std::optional<at::Tensor> scaled_by_alpha(const std::string& op, const at::Tensor& self, const at::Tensor& other,
                                          const c10::IValue& alpha) {
  if (is_one(alpha)) return other;
  if (!alpha.isScalar() || other.dim() == 0) return std::nullopt;
  const c10::Scalar a = alpha.toScalar();
  if (!a.isFloatingPoint() && !a.isIntegral(false)) return std::nullopt;
  if (!on_neuron(other) || other.scalar_type() != at::result_type(self, other)) return std::nullopt;
  return lower_binary(op + ".alpha", other, scalar_operand(a.toDouble()), BinaryOp::multiply);
}



std::optional<at::Tensor> lower_add_sub(const std::string& op, LoweringArgs args, BinaryOp kind) {
  std::optional<at::Tensor> other = scaled_by_alpha(op, args[0].toTensor(), args[1].toTensor(), args[2]);
  if (!other) return std::nullopt;
  return lower_binary(op, args[0].toTensor(), *other, kind);
}

// self op= other: torch keeps self's shape (the broadcast shape must be self's) and dtype: the op runs
// in the promoted dtype and the result is cast into self (a bf16 parameter times an fp32 tensor: fp32
// arithmetic, rounded once), where torch allows that cast (a float result into an integer self raises).
std::optional<at::Tensor> lower_binary_inplace(const std::string& op, LoweringArgs args, BinaryOp kind, bool has_alpha) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& other = args[1].toTensor();
  if (!on_neuron(self)) return std::nullopt;
  at::ScalarType common = at::result_type(self, other);
  if (kind == BinaryOp::divide && at::isIntegralType(common, /*includeBool=*/true))
    common = c10::typeMetaToScalarType(c10::get_default_dtype());
  if (!at::canCast(common, self.scalar_type())) return std::nullopt;
  if (other.dim() > 0 && at::infer_size_dimvector(self.sizes(), other.sizes()) != self.sizes()) return std::nullopt;
  std::optional<at::Tensor> scaled = other;
  if (has_alpha) scaled = scaled_by_alpha(op, self, other, args[2]);
  if (!scaled) return std::nullopt;
  std::optional<at::Tensor> result = lower_binary(op, self, *scaled, kind);
  if (!result) return std::nullopt;
  at::Tensor target = self;
  target.copy_(*result);
  return target;
}

// clamp / clamp_min / clamp_max with scalar bounds: max with lo, then min with hi, each bound first
// converted to the tensor's dtype as torch does.
std::optional<at::Tensor> lower_clamp(const std::string& op, const at::Tensor& self, const c10::IValue& lo,
                                      const c10::IValue& hi) {
  std::optional<at::Tensor> x = self;
  if (lo.isNone() && hi.isNone()) return std::nullopt;
  for (const c10::IValue* bound : {&lo, &hi}) {
    if (bound->isNone()) continue;
    const c10::Scalar v = bound->toScalar();
    if (!v.isFloatingPoint() && !v.isIntegral(false)) return std::nullopt;
    if (at::result_type(*x, v) != x->scalar_type()) return std::nullopt;  // e.g. an int tensor and a float bound
    const double rounded = at::scalar_tensor(v, at::kDouble).to(x->scalar_type()).item<double>();
    x = lower_binary(op + (bound == &lo ? ".min" : ".max"), *x, scalar_operand(rounded),
                     bound == &lo ? BinaryOp::maximum : BinaryOp::minimum);
    if (!x) return std::nullopt;
  }
  return x;
}

// clamp with tensor bounds: torch's min(max(x, lo), hi) in the promoted dtype, NaN in x or a bound
// propagating.
std::optional<at::Tensor> lower_clamp_tensor(const std::string& op, const at::Tensor& self, const c10::IValue& lo,
                                             const c10::IValue& hi) {
  at::Tensor x = self;
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
  for (const c10::IValue* bound : {&lo, &hi}) {
    if (bound->isNone()) continue;
    const bool device_tensor = bound->isTensor() && on_neuron(bound->toTensor());
    if (!device_tensor && bound->toTensor().dim() != 0) return std::nullopt;
    std::optional<at::Tensor> r = lower_binary(op, x, bound->toTensor(), bound == &lo ? BinaryOp::maximum : BinaryOp::minimum);
    if (!r) return std::nullopt;
    x = *r;
  }
  return x;
}

// masked_fill(self, mask, value): where(mask, value, self); self's shape must be the broadcast one.
// `allow_bool`: a bool fill value is taken (as 1 / 0).
std::optional<at::Tensor> lower_masked_fill(const std::string& op, LoweringArgs args, bool inplace, bool allow_bool) {
  const at::Tensor& self = args[0].toTensor();
  c10::Scalar v;
  if (args[2].isTensor()) {
    if (args[2].toTensor().dim() != 0) return std::nullopt;
    v = args[2].toTensor().item();
  } else {
    v = args[2].toScalar();
  }
  if (!v.isFloatingPoint() && !v.isIntegral(false) && !(allow_bool && v.isBoolean())) return std::nullopt;
  if (at::infer_size_dimvector(self.sizes(), args[1].toTensor().sizes()) != self.sizes()) return std::nullopt;
  std::optional<at::Tensor> r = lower_where(op, args[1].toTensor(), std::nullopt, v.toDouble(), self, std::nullopt, self.scalar_type());
  if (!r || !inplace) return r;
  at::Tensor target = self;
  target.copy_(*r);
  return target;
}

std::optional<at::Tensor> lower_compare_scalar(const std::string& op, LoweringArgs args, BinaryOp kind) {
  const at::Tensor& a = args[0].toTensor();
  const c10::Scalar& v = args[1].toScalar();
  if (!v.isFloatingPoint() && !v.isIntegral(false)) return std::nullopt;
  return lower_binary(op, a, scalar_operand(v),
                      kind, true);
}

// isneginf / isposinf: x == -inf / +inf; isinf: |x| == inf; isnan: x != x (the ALU compares
// IEEE-style). Floating inputs only (torch's integer versions are all-false).
enum class FloatClass { neginf, posinf, inf, nan };

std::optional<at::Tensor> lower_float_class(const std::string& op, LoweringArgs args, FloatClass which) {
  const at::Tensor& x = args[0].toTensor();
  if (!on_neuron(x) || !sim_dtype(x.scalar_type())) return std::nullopt;
  const double inf = std::numeric_limits<double>::infinity();
  switch (which) {
    case FloatClass::nan: return lower_binary(op, x, x, BinaryOp::not_equal, true);
    case FloatClass::inf: {
      std::optional<at::Tensor> a = lower_unary(op + ".abs", x, UnaryOp::abs);
      if (!a) return std::nullopt;
      return lower_binary(op, *a, scalar_operand(inf), BinaryOp::equal, true);
    }
    case FloatClass::neginf:
    case FloatClass::posinf:
      return lower_binary(op, x, scalar_operand(which == FloatClass::neginf ? -inf : inf),
                          BinaryOp::equal, true);
  }
  return std::nullopt;
}

std::optional<at::Tensor> lower_where_self(const std::string& op, LoweringArgs args) {
  const at::Tensor &cond = args[0].toTensor(), &a = args[1].toTensor(), &b = args[2].toTensor();
  // A 0-dim operand (e.g. _safe_softmax's zero, a mask's fill value) is an immediate.
  auto immediate = [](const at::Tensor& t) -> std::optional<double> {
    if (t.dim() != 0) return std::nullopt;
    return immediate_value(t, 0.0);
  };
  const std::optional<double> as = immediate(a), bs = immediate(b);
  return lower_where(op, cond, as ? std::nullopt : std::optional<at::Tensor>(a), as,
                     bs ? std::nullopt : std::optional<at::Tensor>(b), bs, at::result_type(a, b));
}

// Truth values as 1 / 0 (bool as is, others != 0).
std::optional<at::Tensor> truth(const std::string& op, const at::Tensor& t) {
  if (t.scalar_type() == at::kBool) return t;
  return lower_binary(op + ".ne0", t, scalar_operand(0.0), BinaryOp::not_equal, true);
}

// logical_not (any dtype) and bitwise_not (bool only: integers' complement is not in fp32): x == 0.
std::optional<at::Tensor> lower_not(const std::string& op, LoweringArgs args, bool bool_only) {
  const at::Tensor& x = args[0].toTensor();
  if (bool_only && x.scalar_type() != at::kBool) return std::nullopt;
  return lower_binary(op, x, scalar_operand(0.0), BinaryOp::equal, true);
}

// logical_and / or / xor on truth values: and is minimum, or is maximum, xor is not_equal.
std::optional<at::Tensor> lower_logical(const std::string& op, const at::Tensor& a, const at::Tensor& b, BinaryOp kind) {
  if (!on_neuron(a) || !on_neuron(b)) return std::nullopt;
  std::optional<at::Tensor> ta = truth(op, a), tb = truth(op, b);
  if (!ta || !tb) return std::nullopt;
  return lower_binary(op, *ta, *tb, kind, kind == BinaryOp::not_equal);
}

// bitwise_and / or / xor: on bools the logical form (`bool_kind`; the Scalar overloads have none),
// on integers (or a bool with an integer) the ALU's bitvec ops on the two's-complement values.
std::optional<at::Tensor> lower_bitwise(const std::string& op, LoweringArgs args, BinaryOp integer_kind,
                                        std::optional<BinaryOp> bool_kind) {
  const at::Tensor& a = args[0].toTensor();
  const at::Tensor b = args[1].isTensor() ? args[1].toTensor() : scalar_operand(args[1].toScalar());
  if (!at::isIntegralType(a.scalar_type(), true) || !at::isIntegralType(b.scalar_type(), true)) return std::nullopt;
  if (a.scalar_type() != at::kBool || b.scalar_type() != at::kBool) return lower_binary(op, a, b, integer_kind);
  if (!bool_kind) return std::nullopt;
  return lower_logical(op, a, b, *bool_kind);
}

// x ** y = exp(y * log(x)) for a positive base (the activation table's exp and log); a zero or
// negative base has special cases (0 ** 0, integer exponents of negatives): the CPU's kernel.
std::optional<at::Tensor> lower_pow_tensor(const std::string&, LoweringArgs args) {
  const at::Tensor &x = args[0].toTensor(), &y = args[1].toTensor();
  if (!on_neuron(x) || !on_neuron(y) || !sim_dtype(x.scalar_type()) || !sim_dtype(y.scalar_type())) return std::nullopt;
  if (x.numel() == 0 || !host_check(x, [](const at::Tensor& h) { return h.gt(0).all().item<bool>(); }, true))
    return std::nullopt;
  const at::ScalarType result = at::result_type(x, y);
  const at::Tensor xf = x.to(at::kFloat), yf = y.to(at::kFloat);  // torch's opmath: fp32
  at::Tensor r = at::exp(at::mul(yf, at::log(xf)));
  return result == at::kFloat ? r : r.to(result);
}

// rsub(self, other, alpha) = other - alpha * self (`1 - x` is rsub.Scalar): the subtraction with the
// operands swapped; a Scalar other is a Python number (a wrapped scalar in torch's type promotion).
std::optional<at::Tensor> lower_rsub(const std::string& op, LoweringArgs args) {
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor other =
      args[1].isTensor() ? args[1].toTensor() : at::native::wrapped_scalar_tensor(args[1].toScalar());
  std::optional<at::Tensor> scaled = scaled_by_alpha(op, other, self, args[2]);
  if (!scaled) return std::nullopt;
  return lower_binary(op, other, *scaled, BinaryOp::subtract);
}

// hardtanh_backward(grad, self, min, max) = grad where min < self < max, else 0: the CPU's
// `self <= min || self >= max ? 0 : grad`, the bounds converted to self's dtype first.
std::optional<at::Tensor> lower_hardtanh_backward(const std::string& op, LoweringArgs args) {
  const at::Tensor &grad = args[0].toTensor(), &x = args[1].toTensor();
  if (!on_neuron(grad) || !on_neuron(x) || grad.sizes() != x.sizes() || grad.scalar_type() != x.scalar_type() ||
      !sim_dtype(x.scalar_type()))
    return std::nullopt;
  std::optional<at::Tensor> below = lower_binary(op + ".le", x, scalar_operand(args[2].toScalar()), BinaryOp::less_equal, true);
  std::optional<at::Tensor> above = lower_binary(op + ".ge", x, scalar_operand(args[3].toScalar()), BinaryOp::greater_equal, true);
  if (!below || !above) return std::nullopt;
  std::optional<at::Tensor> outside = lower_binary(op + ".or", *below, *above, BinaryOp::maximum);
  if (!outside) return std::nullopt;
  return lower_where(op, *outside, std::nullopt, 0.0, grad, std::nullopt, grad.scalar_type());
}

// pow(Scalar base, Tensor exponent) for a positive base and a float result (RoPE's base ** (arange /
// dim)): exp(exponent * ln(base)) in fp32 (torch's opmath), rounded once to the result's dtype; base 1
// is 1 everywhere, as on the CPU (even for a NaN exponent). Integer powers and other bases: the CPU.
std::optional<at::Tensor> lower_pow_scalar_base(const std::string& op, LoweringArgs args) {
  const c10::Scalar base = args[0].toScalar();
  const at::Tensor& e = args[1].toTensor();
  if (!on_neuron(e) || (!base.isFloatingPoint() && !base.isIntegral(false))) return std::nullopt;
  const at::ScalarType result = at::result_type(base, e);
  const double b = base.toDouble();
  if (!sim_dtype(result) || !(b > 0) || !std::isfinite(b)) return std::nullopt;
  if (!sim_dtype(e.scalar_type()) && !at::isIntegralType(e.scalar_type(), /*includeBool=*/false)) return std::nullopt;
  c10::DeviceGuard guard(e.device());
  if (b == 1) return at::ones(e.sizes(), e.options().dtype(result));
  const at::Tensor ef = e.scalar_type() == at::kFloat ? e : e.to(at::kFloat);
  std::optional<at::Tensor> p = lower_binary(op + ".mul", ef, scalar_operand(std::log(b)), BinaryOp::multiply);
  if (p) p = lower_unary(op, *p, UnaryOp::exp);
  if (!p || result == at::kFloat) return p;
  return p->to(result);
}

// _assert_async(self[, msg]): the CPU's check of the value (device memory is host memory, so the
// CPU's own error and message). Timing-only mode has no value to check: taken to hold.
LoweredResults lower_assert_async(const std::string&, LoweringArgs args) {
  const at::Tensor& self = args[0].toTensor();
  if (!on_neuron(self)) return std::nullopt;
  if (values_enabled()) {
    if (args.size() > 1) at::_assert_async(host_alias(self), args[1].toStringRef());
    else at::_assert_async(host_alias(self));
  }
  return std::vector<c10::IValue>{};
}

}  // namespace

namespace {
// masked_fill_'s CPU kernel refuses a mask that partially overlaps self but only warns about an expanded self.
Lowering partial_overlap_check(Lowering r) {
  r.overlap_check = Lowering::OverlapCheck::partial;
  return r;
}
}  // namespace

std::vector<Lowering> elementwise_lowerings() {
  std::vector<Lowering> rows;
  // One kernel of kernels/elementwise.h each; the in-place forms where torch has them.
  const std::vector<std::tuple<const char*, UnaryOp, bool>> unary = {
      {"relu", UnaryOp::relu, true}, {"silu", UnaryOp::silu, true},   {"sigmoid", UnaryOp::sigmoid, true},
      {"tanh", UnaryOp::tanh, true}, {"exp", UnaryOp::exp, true},     {"log", UnaryOp::log, true},
      {"sqrt", UnaryOp::sqrt, true}, {"rsqrt", UnaryOp::rsqrt, true}, {"abs", UnaryOp::abs, true},
      {"neg", UnaryOp::neg, true},   {"reciprocal", UnaryOp::reciprocal, true},
      {"sin", UnaryOp::sin, true},   {"cos", UnaryOp::cos, true},     {"erf", UnaryOp::erf, true},
      {"sign", UnaryOp::sign, false}, {"sgn", UnaryOp::sign, false}};
  for (const auto& [name, kind, inplace] : unary) {
    const UnaryOp k = kind;
    rows.push_back(row(name, [k](const std::string& op, LoweringArgs a) { return lower_unary(op, a[0].toTensor(), k); },
                       {std::string(name) + ".out"}));
    if (inplace) {
      rows.push_back(row(std::string(name) + "_", [k](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_unary(op, a[0].toTensor(), k));
      }));
    }
  }
  auto binary = [](BinaryOp k) {
    return [k](const std::string& op, LoweringArgs a) { return lower_binary(op, a[0].toTensor(), a[1].toTensor(), k); };
  };
  auto add_sub = [](BinaryOp k) { return [k](const std::string& op, LoweringArgs a) { return lower_add_sub(op, a, k); }; };
  auto inplace = [](BinaryOp k, bool alpha) {
    return [k, alpha](const std::string& op, LoweringArgs a) { return lower_binary_inplace(op, a, k, alpha); };
  };
  auto compare = [](BinaryOp k) {
    return [k](const std::string& op, LoweringArgs a) { return lower_binary(op, a[0].toTensor(), a[1].toTensor(), k, true); };
  };
  auto compare_scalar = [](BinaryOp k) {
    return [k](const std::string& op, LoweringArgs a) { return lower_compare_scalar(op, a, k); };
  };
  auto masked_fill = [](bool in_place, bool allow_bool) {
    return [in_place, allow_bool](const std::string& op, LoweringArgs a) { return lower_masked_fill(op, a, in_place, allow_bool); };
  };
  auto float_class = [](FloatClass c) {
    return [c](const std::string& op, LoweringArgs a) { return lower_float_class(op, a, c); };
  };
  auto logical = [](BinaryOp k) {
    return [k](const std::string& op, LoweringArgs a) { return lower_logical(op, a[0].toTensor(), a[1].toTensor(), k); };
  };
  auto bitwise = [](BinaryOp k, std::optional<BinaryOp> on_bool) {
    return [k, on_bool](const std::string& op, LoweringArgs a) { return lower_bitwise(op, a, k, on_bool); };
  };
  const std::vector<Lowering> fixed = {
      row("add.Tensor", add_sub(BinaryOp::add), {"add.out"}),
      row("sub.Tensor", add_sub(BinaryOp::subtract), {"sub.out"}),
      row("mul.Tensor", binary(BinaryOp::multiply), {"mul.out"}),
      row("div.Tensor", binary(BinaryOp::divide), {"div.out"}),
      // NaN propagates as in torch (the ALU's maximum / minimum return the NaN operand too).
      row("maximum", binary(BinaryOp::maximum), {"maximum.out"}),
      row("minimum", binary(BinaryOp::minimum), {"minimum.out"}),
      row("add_.Tensor", inplace(BinaryOp::add, true)),
      row("sub_.Tensor", inplace(BinaryOp::subtract, true)),
      row("mul_.Tensor", inplace(BinaryOp::multiply, false)),
      row("div_.Tensor", inplace(BinaryOp::divide, false)),
      row("eq.Tensor", compare(BinaryOp::equal), {"eq.Tensor_out"}),
      row("ne.Tensor", compare(BinaryOp::not_equal), {"ne.Tensor_out"}),
      row("lt.Tensor", compare(BinaryOp::less), {"lt.Tensor_out"}),
      row("gt.Tensor", compare(BinaryOp::greater), {"gt.Tensor_out"}),
      row("le.Tensor", compare(BinaryOp::less_equal), {"le.Tensor_out"}),
      row("ge.Tensor", compare(BinaryOp::greater_equal), {"ge.Tensor_out"}),
      row("eq.Scalar", compare_scalar(BinaryOp::equal), {"eq.Scalar_out"}),
      row("ne.Scalar", compare_scalar(BinaryOp::not_equal), {"ne.Scalar_out"}),
      row("lt.Scalar", compare_scalar(BinaryOp::less), {"lt.Scalar_out"}),
      row("gt.Scalar", compare_scalar(BinaryOp::greater), {"gt.Scalar_out"}),
      row("le.Scalar", compare_scalar(BinaryOp::less_equal), {"le.Scalar_out"}),
      row("ge.Scalar", compare_scalar(BinaryOp::greater_equal), {"ge.Scalar_out"}),
      row("where.self", lower_where_self, {"where.self_out"}),
      row("masked_fill.Scalar", masked_fill(false, false), {"masked_fill.Scalar_out"}),
      row("masked_fill.Tensor", masked_fill(false, true)),
      partial_overlap_check(row("masked_fill_.Scalar", masked_fill(true, true))),
      partial_overlap_check(row("masked_fill_.Tensor", masked_fill(true, true))),
      row("clamp", [](const std::string& op, LoweringArgs a) { return lower_clamp(op, a[0].toTensor(), a[1], a[2]); }, {"clamp.out"}),
      row("clamp_min", [](const std::string& op, LoweringArgs a) { return lower_clamp(op, a[0].toTensor(), a[1], c10::IValue()); }, {"clamp_min.out"}),
      row("clamp_max", [](const std::string& op, LoweringArgs a) { return lower_clamp(op, a[0].toTensor(), c10::IValue(), a[1]); }, {"clamp_max.out"}),
      row("clamp.Tensor", [](const std::string& op, LoweringArgs a) { return lower_clamp_tensor(op, a[0].toTensor(), a[1], a[2]); }, {"clamp.Tensor_out"}),
      row("clamp_min.Tensor", [](const std::string& op, LoweringArgs a) { return lower_clamp_tensor(op, a[0].toTensor(), a[1], c10::IValue()); }, {"clamp_min.Tensor_out"}),
      row("clamp_max.Tensor", [](const std::string& op, LoweringArgs a) { return lower_clamp_tensor(op, a[0].toTensor(), c10::IValue(), a[1]); }, {"clamp_max.Tensor_out"}),
      row("isneginf", float_class(FloatClass::neginf), {"isneginf.out"}),
      row("isposinf", float_class(FloatClass::posinf), {"isposinf.out"}),
      row("isinf", float_class(FloatClass::inf)),
      row("isnan", float_class(FloatClass::nan), {"isnan.out"}),
      row("logical_not", [](const std::string& op, LoweringArgs a) { return lower_not(op, a, false); }, {"logical_not.out"}),
      row("bitwise_not", [](const std::string& op, LoweringArgs a) { return lower_not(op, a, true); }, {"bitwise_not.out"}),
      row("logical_and", logical(BinaryOp::minimum), {"logical_and.out"}),
      row("logical_or", logical(BinaryOp::maximum), {"logical_or.out"}),
      row("logical_xor", logical(BinaryOp::not_equal), {"logical_xor.out"}),
      row("bitwise_and.Tensor", bitwise(BinaryOp::bitwise_and, BinaryOp::minimum), {"bitwise_and.Tensor_out"}),
      row("bitwise_or.Tensor", bitwise(BinaryOp::bitwise_or, BinaryOp::maximum), {"bitwise_or.Tensor_out"}),
      row("bitwise_xor.Tensor", bitwise(BinaryOp::bitwise_xor, BinaryOp::not_equal), {"bitwise_xor.Tensor_out"}),
      row("bitwise_and.Scalar", bitwise(BinaryOp::bitwise_and, std::nullopt), {"bitwise_and.Scalar_out"}),
      row("bitwise_or.Scalar", bitwise(BinaryOp::bitwise_or, std::nullopt), {"bitwise_or.Scalar_out"}),
      row("bitwise_xor.Scalar", bitwise(BinaryOp::bitwise_xor, std::nullopt), {"bitwise_xor.Scalar_out"}),
      row("pow.Tensor_Scalar", [](const std::string& op, LoweringArgs a) { return lower_pow(op, a[0].toTensor(), a[1].toScalar()); },
          {"pow.Tensor_Scalar_out"}),
      row("pow.Tensor_Tensor", lower_pow_tensor, {"pow.Tensor_Tensor_out"}),
      row("rsub.Tensor", lower_rsub, {"rsub.Tensor_out"}),
      row("rsub.Scalar", lower_rsub, {"rsub.Scalar_out"}),
      // hardtanh is clamp on the CPU too (relu6 is hardtanh(x, 0, 6))
      row("hardtanh", [](const std::string& op, LoweringArgs a) { return lower_clamp(op, a[0].toTensor(), a[1], a[2]); },
          {"hardtanh.out"}),
      row("hardtanh_", [](const std::string& op, LoweringArgs a) {
        return into_self(a[0].toTensor(), lower_clamp(op, a[0].toTensor(), a[1], a[2]));
      }),
      row("hardtanh_backward", lower_hardtanh_backward, {"hardtanh_backward.grad_input"}),
      row("pow.Scalar", lower_pow_scalar_base, {"pow.Scalar_out"}),
      row("_assert_async", lower_assert_async),
      row("_assert_async.msg", lower_assert_async),
      row("threshold_backward", [](const std::string&, LoweringArgs a) {
        return lower_threshold_backward(a[0].toTensor(), a[1].toTensor(), a[2].toScalar());
      }, {"threshold_backward.grad_input"}),
  };
  rows.insert(rows.end(), fixed.begin(), fixed.end());
  return rows;
}

}  // namespace trnsim::frontend
