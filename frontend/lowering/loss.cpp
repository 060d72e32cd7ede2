// Loss lowerings: mse_loss and nll_loss (forward and backward), composed of the element-wise,
// reduction, gather and one-hot kernels.
#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <vector>

#include "frontend/lowering/kernel_ops.h"
#include "frontend/lowering/lowering.h"
#include "frontend/lowering_support.h"
#include "kernels/data_movement.h"
#include "kernels/loss.h"
#include "kernels/spec_json.h"

namespace trnsim::frontend {
namespace {

using kernels::BinaryOp;
using kernels::ReduceOp;

// mse_loss (reduction 0 none, 1 mean, 2 sum) from the element-wise and reduction kernels:
// (self - target)^2, then the reduction. Backward: 2 (self - target) [/ N] * grad_output.
std::optional<at::Tensor> lower_mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  if (self.sizes() != target.sizes() || reduction < 0 || reduction > 2) return std::nullopt;
  std::optional<at::Tensor> diff = lower_binary("mse_loss.sub", self, target, BinaryOp::subtract);
  if (!diff) return std::nullopt;
  std::optional<at::Tensor> sq = lower_binary("mse_loss.square", *diff, *diff, BinaryOp::multiply);
  if (!sq || reduction == 0) return sq;
  std::optional<at::Tensor> loss = lower_reduce("mse_loss", *sq, {}, false, reduction == 1 ? ReduceOp::mean : ReduceOp::sum);
  return loss;
}

std::optional<at::Tensor> lower_mse_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                                  int64_t reduction) {
  if (self.sizes() != target.sizes() || reduction < 0 || reduction > 2 || self.numel() == 0) return std::nullopt;
  if (!(grad.dim() == 0 || grad.sizes() == self.sizes())) return std::nullopt;
  std::optional<at::Tensor> diff = lower_binary("mse_loss_backward.sub", self, target, BinaryOp::subtract);
  if (!diff) return std::nullopt;
  const double scale = reduction == 1 ? 2.0 / static_cast<double>(self.numel()) : 2.0;
  std::optional<at::Tensor> scaled = lower_binary("mse_loss_backward.scale", *diff, at::scalar_tensor(scale, at::kDouble),
                                                  BinaryOp::multiply);
  if (!scaled) return std::nullopt;
  return lower_binary("mse_loss_backward", *scaled, grad, BinaryOp::multiply);
}

// nll_loss over [N, C] log-probabilities with class targets (no weight=): the picked log-prob of
// each row is an embedding gather (table [N*C, 1], id r*C + target), times a host-built mask
// (-1 on counted rows, 0 on ignored ones), then summed (and / count for mean); the backward is the
// one-hot kernel (lower_nll_loss_backward). Targets (integer metadata, like embedding ids) are
// checked on the host; out of range falls back. Reduction: 0 none, 1 mean, 2 sum. Returns the
// gather ids and the [N, 1] mask.
std::optional<std::pair<at::Tensor, at::Tensor>> nll_loss_mask(const at::Tensor& self, const at::Tensor& target,
                                                                const c10::IValue& weight, int64_t ignore_index,
                                                                int64_t* count) {
  const bool no_weight = weight.isNone() || (weight.isTensor() && !weight.toTensor().defined());
  if (!on_neuron(self) || self.dim() != 2 || !no_weight || !sim_dtype(self.scalar_type())) return std::nullopt;
  if (target.dim() != 1 || target.size(0) != self.size(0) || target.scalar_type() != at::kLong) return std::nullopt;
  if (target.device().type() != kNeuron && !target.is_cpu()) return std::nullopt;
  const int64_t n = self.size(0), c = self.size(1);
  if (n == 0 || c == 0 || n * c > std::numeric_limits<int32_t>::max()) return std::nullopt;
  at::Tensor t = target.contiguous();
  const int64_t* tp = static_cast<const int64_t*>(t.data_ptr());
  at::Tensor ids = at::zeros({n}, at::kLong);
  at::Tensor mask = at::zeros({n, 1}, at::kFloat);
  int64_t* ip = ids.data_ptr<int64_t>();
  float* mp = mask.data_ptr<float>();
  *count = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (tp[r] == ignore_index) continue;
    if (tp[r] < 0 || tp[r] >= c) return std::nullopt;
    ip[r] = r * c + tp[r];
    mp[r] = -1.0f;
    ++*count;
  }
  return std::make_pair(ids, mask.to(self.options()));
}

std::optional<std::vector<at::Tensor>> lower_nll_loss(const std::string& op, const at::Tensor& self,
                                                      const at::Tensor& target, const c10::IValue& weight,
                                                      int64_t reduction, int64_t ignore_index) {
  int64_t count = 0;
  auto m = nll_loss_mask(self, target, weight, ignore_index, &count);
  if (!m || reduction < 0 || reduction > 2 || (reduction == 1 && count == 0)) return std::nullopt;
  c10::DeviceGuard guard(self.device());
  const int64_t n = self.size(0), c = self.size(1);
  std::optional<at::Tensor> picked = lower_embedding(op + ".gather", self.contiguous().reshape({n * c, 1}), m->first, false);
  if (!picked) return std::nullopt;
  std::optional<at::Tensor> loss = lower_binary(op + ".mask", *picked, m->second, BinaryOp::multiply);
  if (!loss) return std::nullopt;
  if (reduction == 0) {
    loss = loss->reshape({n});
  } else {
    loss = lower_reduce(op + ".sum", *loss, {}, false, ReduceOp::sum);
    if (loss && reduction == 1)  // as [1]: two 0-dim operands would both be immediates
      loss = lower_binary(op + ".mean", loss->reshape({1}), at::scalar_tensor(static_cast<double>(count), at::kDouble),
                          BinaryOp::divide);
    if (!loss) return std::nullopt;
    loss = loss->reshape({});
  }
  at::Tensor total_weight = at::empty({}, self.options());
  total_weight.fill_(reduction == 0 ? 0.0 : static_cast<double>(count));
  return std::vector<at::Tensor>{*loss, total_weight};
}

// nll_loss_backward: grad_input [N, C] = -grad (/ total_weight for mean) at [r, target[r]], 0
// elsewhere, built on the device by the one-hot kernel (per-row scale = grad_output for 'none',
// its one value broadcast for 'sum' / 'mean').
std::optional<at::Tensor> lower_nll_loss_backward(const std::string& op, const at::Tensor& grad, const at::Tensor& self,
                                                  const at::Tensor& target, const c10::IValue& weight, int64_t reduction,
                                                  int64_t ignore_index, const at::Tensor& total_weight) {
  const bool no_weight = weight.isNone() || (weight.isTensor() && !weight.toTensor().defined());
  if (!on_neuron(self) || self.dim() != 2 || !no_weight || !sim_dtype(self.scalar_type())) return std::nullopt;
  if (target.dim() != 1 || target.size(0) != self.size(0) || target.scalar_type() != at::kLong) return std::nullopt;
  if (target.device().type() != kNeuron && !target.is_cpu()) return std::nullopt;
  if (reduction < 0 || reduction > 2 || !on_neuron(grad) || grad.scalar_type() != self.scalar_type()) return std::nullopt;
  if (reduction == 0 && (grad.dim() != 1 || grad.size(0) != self.size(0))) return std::nullopt;
  if (reduction != 0 && grad.numel() != 1) return std::nullopt;
  const int64_t n = self.size(0), c = self.size(1);
  if (n == 0 || c == 0) return std::nullopt;
  int64_t count = 0;
  std::optional<std::vector<int32_t>> index = one_hot_index(target, c, ignore_index, &count);
  if (!index) return std::nullopt;
  double multiplier = -1.0;
  if (reduction == 1) {
    if (total_weight.numel() != 1) return std::nullopt;
    // (timing only: the count one_hot_index assumed, every row valid)
    const double total = on_neuron(total_weight) ? immediate_value(total_weight, static_cast<double>(count))
                                                 : total_weight.item().toDouble();
    multiplier = -1.0 / total;  // torch divides by total_weight (0 gives inf / nan, as on the CPU)
  }
  c10::DeviceGuard guard(self.device());
  kernels::OneHotSpec spec;
  spec.rows = n;
  spec.classes = c;
  spec.scaled = true;
  spec.scale_broadcast = reduction != 0;
  spec.multiplier = multiplier;
  spec.output_dtype = *sim_dtype(self.scalar_type());
  at::Tensor grad_c = grad.contiguous();
  at::Tensor out = at::empty({n, c}, self.options());
  std::ostringstream key;
  key << std::hexfloat << op << "|" << n << "," << c << "|" << reduction << "|" << multiplier << "|"
      << c10::toString(self.scalar_type());
  HostBuffer index_buffer{"index", index->data(), index->size(), DType::int32};
  execute_kernel(self.device().index(), key.str(), kernels::invocation(kernels::one_hot_program, spec),
                 {index_buffer, buffer("scale", grad_c)}, {buffer("y", out)},
                 record_for(op, {grad, self}, self.scalar_type()));
  return out;
}


}  // namespace

std::vector<Lowering> loss_lowerings() {
  return {
      row("mse_loss", [](const std::string&, LoweringArgs a) {
        return lower_mse_loss(a[0].toTensor(), a[1].toTensor(), a[2].toInt());
      }, {"mse_loss.out"}),
      row("mse_loss_backward", [](const std::string&, LoweringArgs a) {
        return lower_mse_loss_backward(a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3].toInt());
      }),
      row("nll_loss_forward", [](const std::string& op, LoweringArgs a) {
        return lower_nll_loss(op, a[0].toTensor(), a[1].toTensor(), a[2], a[3].toInt(), a[4].toInt());
      }),
      row("nll_loss_backward", [](const std::string& op, LoweringArgs a) {
        return lower_nll_loss_backward(op, a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), a[3], a[4].toInt(),
                                       a[5].toInt(), a[6].toTensor());
      }),
  };
}

}  // namespace trnsim::frontend
