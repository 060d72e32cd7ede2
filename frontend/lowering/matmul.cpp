// Matmul lowerings: mm, bmm, addmm, baddbmm and the vector products, on the matmul kernel
// (kernels/matmul.h) with its bias / residual epilogue; other coefficients as element-wise kernels.
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/matmul.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {

using kernels::BinaryOp;

// A matmul operand as stored: contiguous, or the transpose (last two dims) of a contiguous tensor
// (nn.Linear's weight.t()), which the kernel loads transposed; anything else is made contiguous
// by a device copy.
namespace {

std::pair<at::Tensor, bool> matmul_operand(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  at::Tensor stored = t.transpose(-1, -2);
  if (stored.is_contiguous()) return {stored, true};
  return {t.contiguous(), false};
}

}  // namespace

// C = A @ B (+ bias[N] or + residual[M, N]) for [M, K] @ [K, N] or batched [B, M, K] @ [B, K, N].
std::optional<at::Tensor> lower_matmul(const std::string& op, const at::Tensor& a_in, const at::Tensor& b_in,
                                       const at::Tensor* addend, bool fp32_result) {
  if (!on_neuron(a_in) || !on_neuron(b_in) || a_in.scalar_type() != b_in.scalar_type()) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(a_in.scalar_type());
  if (!dt) return std::nullopt;
  const bool batched = a_in.dim() == 3;
  if (a_in.dim() != b_in.dim() || (a_in.dim() != 2 && !batched)) return std::nullopt;
  if (batched && a_in.size(0) != b_in.size(0)) return std::nullopt;
  const int64_t m = a_in.size(-2), k = a_in.size(-1), n = b_in.size(-1);
  if (b_in.size(-2) != k || m == 0 || k == 0 || n == 0 || (batched && a_in.size(0) == 0)) return std::nullopt;
  kernels::MatmulSpec spec;
  spec.batch = batched ? a_in.size(0) : 1;
  spec.m = m;
  spec.k = k;
  spec.n = n;
  spec.input_dtype = *dt;
  spec.output_dtype = fp32_result ? DType::fp32 : *dt;  // the PSUM's fp32, not rounded (an epilogue follows)
  const at::TensorOptions out_options = fp32_result ? a_in.options().dtype(at::kFloat) : a_in.options();
  at::Tensor bias;
  if (addend) {
    if (!on_neuron(*addend) || addend->scalar_type() != a_in.scalar_type() || batched) return std::nullopt;
    if (addend->dim() == 1 && addend->size(0) == n) {
      spec.bias = true;
    } else if (addend->dim() == 2 && addend->size(0) == 1 && addend->size(1) == n) {
      spec.bias = true;
    } else if (addend->dim() == 2 && addend->size(0) == m && addend->size(1) == n) {
      spec.residual = true;
    } else {
      return std::nullopt;
    }
    bias = addend->contiguous();
  }
  c10::DeviceGuard guard(a_in.device());
  auto [a, a_t] = matmul_operand(a_in);
  auto [b, b_t] = matmul_operand(b_in);
  spec.a_transposed = a_t;
  spec.b_transposed = b_t;
  at::Tensor c = batched ? at::empty({spec.batch, m, n}, out_options) : at::empty({m, n}, out_options);
  const std::string key = op + "|" + std::to_string(spec.batch) + "," + std::to_string(m) + "," + std::to_string(k) +
                          "," + std::to_string(n) + "|" + c10::toString(a_in.scalar_type()) + "|" +
                          std::to_string(a_t) + std::to_string(b_t) + std::to_string(spec.bias) +
                          std::to_string(spec.residual) + (fp32_result ? "|fp32" : "");
  std::vector<HostBuffer> inputs = {buffer("a", a), buffer("b", b)};
  if (spec.bias) inputs.push_back(buffer("bias", bias));
  if (spec.residual) inputs.push_back(buffer("residual", bias));
  OpRecord record = addend ? record_for(op, {*addend, a_in, b_in}, a_in.scalar_type())
                           : record_for(op, {a_in, b_in}, a_in.scalar_type());
  execute_kernel(a_in.device().index(), key, kernels::invocation(kernels::matmul_program, spec), inputs,
                 {buffer("c", c)}, std::move(record));
  return c;
}

namespace {

// A matmul with an empty operand: zeros (k = 0) or an empty result, and addmm's beta * self.
std::optional<at::Tensor> lower_empty_matmul(LoweringArgs args, bool add) {
  const at::Tensor &a = args[add ? 1 : 0].toTensor(), &b = args[add ? 2 : 1].toTensor();
  if (!on_neuron(a) || !on_neuron(b) || a.dim() < 2 || b.dim() < 2 || a.scalar_type() != b.scalar_type()) return std::nullopt;
  if (a.numel() != 0 && b.numel() != 0) return std::nullopt;
  if (a.size(-1) != b.size(-2) || (a.dim() == 3 && a.size(0) != b.size(0))) return std::nullopt;  // torch's error
  c10::DeviceGuard guard(a.device());
  std::vector<int64_t> shape = dims(a.sizes());
  shape.back() = b.size(-1);
  at::Tensor product = at::zeros(shape, a.options());
  if (!add) return product;
  const c10::Scalar beta = args[3].toScalar();
  if (beta.equal(0) || product.numel() == 0) return product;
  return at::mul(args[0].toTensor(), beta).expand(shape).contiguous();
}

// mm / bmm: [M, K] @ [K, N], or batched.
std::optional<at::Tensor> lower_mm(const std::string& op, LoweringArgs args, int64_t rank) {
  if (auto empty = lower_empty_matmul(args, false)) return empty;
  const at::Tensor& a = args[0].toTensor();
  if (a.dim() != rank) return std::nullopt;
  return lower_matmul(op, a, args[1].toTensor(), nullptr);
}

// beta * self + alpha * (a @ b): a bias the epilogue takes when the coefficients are 1, else the
// matmul kernel, then the scaling and the sum as element-wise kernels, each a separate op on the
// device (re-dispatched, so each is lowered or counted as a fallback).
std::optional<at::Tensor> lower_addmm(const std::string& op, LoweringArgs args, int64_t rank) {
  if (rank == 2) {
    if (auto empty = lower_empty_matmul(args, true)) return empty;
    if (is_one(args[3]) && is_one(args[4])) {
      const at::Tensor& bias = args[0].toTensor();
      std::optional<at::Tensor> fused = lower_matmul(op, args[1].toTensor(), args[2].toTensor(), &bias);
      if (fused || !on_neuron(bias) || !sim_dtype(bias.scalar_type())) return fused;
      // A bias the epilogue does not take (one element, a column): the product, then a broadcast add.
      std::optional<at::Tensor> product = lower_matmul("mm", args[1].toTensor(), args[2].toTensor(), nullptr);
      if (!product) return std::nullopt;
      return lower_binary("add.Tensor", *product, bias, BinaryOp::add);
    }
  }
  const at::Tensor& self = args[0].toTensor();
  const at::Tensor& a = args[1].toTensor();
  const at::Tensor& b = args[2].toTensor();
  if (!on_neuron(self) || !on_neuron(a) || !on_neuron(b) || a.scalar_type() != b.scalar_type()) return std::nullopt;
  // Integer matmuls keep torch's integer result and its own alpha/beta rules: the CPU's kernel.
  if (!sim_dtype(a.scalar_type()) || self.scalar_type() != a.scalar_type()) return std::nullopt;
  if (!args[3].isScalar() || !args[4].isScalar() || a.dim() != rank) return std::nullopt;
  const c10::Scalar beta = args[3].toScalar(), alpha = args[4].toScalar();
  c10::DeviceGuard guard(a.device());
  // torch computes beta * self + alpha * (a @ b) in fp32 and rounds once: the product stays in
  // the PSUM's fp32, self is widened, the epilogue runs in fp32 and only its result is rounded.
  const bool wide = a.scalar_type() != at::kFloat;
  std::optional<at::Tensor> product = lower_matmul(rank == 2 ? "mm" : "bmm", a, b, nullptr, wide);
  if (!product) return std::nullopt;
  at::Tensor result = alpha.equal(1) ? *product : at::mul(*product, alpha);
  if (!beta.equal(0)) {  // beta == 0 ignores self, NaNs included, as torch does
    const at::Tensor self_wide = wide ? self.to(at::kFloat) : self;
    result = at::add(result, beta.equal(1) ? self_wide : at::mul(self_wide, beta));
  }
  return wide ? result.to(a.scalar_type()) : result;
}

// dot / vdot (real): [1, K] @ [K, 1].
std::optional<at::Tensor> lower_dot(const std::string&, LoweringArgs args) {
  const at::Tensor &a = args[0].toTensor(), &b = args[1].toTensor();
  if (!on_neuron(a) || !on_neuron(b) || a.dim() != 1 || b.dim() != 1 || !sim_dtype(a.scalar_type())) return std::nullopt;
  return at::mm(a.view({1, -1}), b.view({-1, 1})).reshape(std::vector<int64_t>{});
}

std::optional<at::Tensor> lower_mv(const std::string&, LoweringArgs args) {
  const at::Tensor &m = args[0].toTensor(), &v = args[1].toTensor();
  if (!on_neuron(m) || !on_neuron(v) || m.dim() != 2 || v.dim() != 1 || !sim_dtype(m.scalar_type())) return std::nullopt;
  return at::mm(m, v.view({-1, 1})).view({-1});
}

std::optional<at::Tensor> lower_addmv(const std::string&, LoweringArgs args) {
  const at::Tensor &self = args[0].toTensor(), &m = args[1].toTensor(), &v = args[2].toTensor();
  if (!on_neuron(m) || !on_neuron(v) || m.dim() != 2 || v.dim() != 1 || !sim_dtype(m.scalar_type())) return std::nullopt;
  at::Tensor col = self.dim() == 1 ? self.view({-1, 1}) : self;
  return at::addmm(col, m, v.view({-1, 1}), args[3].toScalar(), args[4].toScalar()).view({-1});
}

}  // namespace

std::vector<Lowering> matmul_lowerings() {
  auto mm = [](int64_t rank) { return [rank](const std::string& op, LoweringArgs a) { return lower_mm(op, a, rank); }; };
  auto addmm = [](int64_t rank) { return [rank](const std::string& op, LoweringArgs a) { return lower_addmm(op, a, rank); }; };
  return {
      row("mm", mm(2), {"mm.out"}),
      row("bmm", mm(3), {"bmm.out"}),
      row("addmm", addmm(2), {"addmm.out"}),
      row("baddbmm", addmm(3)),
      row("dot", lower_dot),
      row("vdot", lower_dot),
      row("mv", lower_mv, {"mv.out"}),
      row("addmv", lower_addmv, {"addmv.out"}),
  };
}

}  // namespace trnsim::frontend
