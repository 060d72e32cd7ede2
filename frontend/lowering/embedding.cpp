// Embedding lowerings: embedding and index_select on the gather kernel, embedding_dense_backward as
// a one-hot matmul.
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

// out[i, :] = table[ids[i], :] (embedding gather kernel): embedding (ids any shape, table [V, D]) and
// index_select along dim 0 (table any rank >= 1, rows flattened). Ids (int64/int32, any device
// memory is host memory here) are checked on the host; out of range falls back so torch raises.
std::optional<at::Tensor> lower_embedding(const std::string& op, const at::Tensor& table_in, const at::Tensor& ids_in,
                                          bool index_select) {
  if (!on_neuron(table_in) || !ids_in.defined() || table_in.dim() < 1) return std::nullopt;
  if (!index_select && table_in.dim() != 2) return std::nullopt;
  if (index_select && ids_in.dim() > 1) return std::nullopt;
  if (ids_in.scalar_type() != at::kLong && ids_in.scalar_type() != at::kInt) return std::nullopt;
  if (ids_in.device().type() != kNeuron && !ids_in.is_cpu()) return std::nullopt;
  const std::optional<DType> dt = sim_dtype(table_in.scalar_type());
  if (!dt) return std::nullopt;
  const int64_t vocab = table_in.size(0);
  const int64_t dim = table_in.numel() / std::max<int64_t>(vocab, 1);
  const int64_t num_ids = ids_in.numel();
  if (vocab == 0 || dim == 0 || num_ids == 0 || vocab > std::numeric_limits<int32_t>::max()) return std::nullopt;
  c10::DeviceGuard guard(table_in.device());
  at::Tensor ids_c = ids_in.contiguous();
  at::Tensor ids_host =
      at::from_blob(ids_c.data_ptr(), {num_ids}, at::TensorOptions().dtype(ids_c.scalar_type()).device(at::kCPU))
          .to(at::kInt, /*non_blocking=*/false, /*copy=*/true);
  const int32_t* p = ids_host.data_ptr<int32_t>();
  if (ids_c.scalar_type() == at::kLong) {
    const int64_t* q = static_cast<const int64_t*>(ids_c.data_ptr());
    for (int64_t i = 0; i < num_ids; ++i)
      if (q[i] < 0 || q[i] >= vocab) return std::nullopt;
  } else {
    for (int64_t i = 0; i < num_ids; ++i)
      if (p[i] < 0 || p[i] >= vocab) return std::nullopt;
  }
  at::Tensor table = table_in.contiguous();
  kernels::EmbeddingSpec spec;
  spec.num_ids = num_ids;
  spec.vocab = vocab;
  spec.dim = dim;
  spec.dtype = *dt;
  spec.index_dtype = DType::int32;
  std::vector<int64_t> out_shape;
  if (index_select) {
    out_shape = dims(table_in.sizes());
    out_shape[0] = num_ids;
  } else {
    out_shape = dims(ids_in.sizes());
    out_shape.push_back(dim);
  }
  at::Tensor y = at::empty(out_shape, table_in.options());
  const std::string key = "embedding|" + std::to_string(num_ids) + "," + std::to_string(vocab) + "," +
                          std::to_string(dim) + "|" + c10::toString(table_in.scalar_type());
  OpRecord record = record_for(op, {table_in, ids_in}, table_in.scalar_type());
  execute_kernel(
      table_in.device().index(), key, kernels::invocation(kernels::embedding_program, spec),
      {HostBuffer{"ids", ids_host.data_ptr(), static_cast<size_t>(num_ids), DType::int32}, buffer("table", table)},
      {buffer("y", y)}, std::move(record));
  return y;
}

namespace {

// A large vocabulary's embedding_dense_backward: grad_weight [V, D] = 0, then grad rows added into the rows their
// ids name (the scatter kernel's read-add-write DMA, in id order, as torch's CPU index_add), padding_idx's row
// zeroed again (only ids equal to it added to it).
std::optional<at::Tensor> lower_embedding_backward_by_scatter(const std::string& op, const at::Tensor& grad,
                                                              const at::Tensor& ids, int64_t vocab,
                                                              int64_t padding_idx) {
  if (grad.scalar_type() != at::kFloat && grad.scalar_type() != at::kBFloat16) return std::nullopt;
  // Ids out of range fall back, so torch raises its error (timing-only mode: taken to be in range).
  if (!host_check(ids, [&](const at::Tensor& h) { return h.min().item<int64_t>() >= 0 && h.max().item<int64_t>() < vocab; },
                  true)) {
    return std::nullopt;
  }
  c10::DeviceGuard guard(grad.device());
  // bf16 sums in an fp32 table from the start (as the scatter would in a copy of a bf16 one), rounded once.
  at::Tensor grad_weight = at::zeros({vocab, grad.size(-1)}, grad.options().dtype(at::kFloat));
  lower_index_add_rows(op, grad_weight, ids, grad.reshape({ids.numel(), grad.size(-1)}).to(at::kFloat));
  if (padding_idx >= 0 && padding_idx < vocab) grad_weight.select(0, padding_idx).zero_();
  return grad_weight.to(grad.scalar_type());
}

// embedding_dense_backward: grad_weight [V, D] = onehot^T [V, N] @ grad [N, D] on the matmul kernel
// (the one-hot [N, V] built on the device by the one-hot kernel, padding_idx rows zero, loaded
// transposed by the matmul) while V * N is at most 2^26; beyond, by scatter-add (a one-hot of Llama's 128 K
// vocabulary by 4 K tokens would be a 4-TFLOP matmul). No scale_grad_by_freq.
std::optional<at::Tensor> lower_embedding_backward(const std::string& op, const at::Tensor& grad_in,
                                                   const at::Tensor& ids_in, int64_t vocab, int64_t padding_idx,
                                                   bool scale_grad_by_freq) {
  if (!on_neuron(grad_in) || scale_grad_by_freq || !sim_dtype(grad_in.scalar_type()) || grad_in.dim() < 1) return std::nullopt;
  if (ids_in.scalar_type() != at::kLong && ids_in.scalar_type() != at::kInt) return std::nullopt;
  if (ids_in.device().type() != kNeuron && !ids_in.is_cpu()) return std::nullopt;
  const int64_t n = ids_in.numel(), d = grad_in.size(-1);
  if (n == 0 || d == 0 || vocab <= 0 || grad_in.numel() != n * d) return std::nullopt;
  if (vocab * n > (int64_t(1) << 26)) return lower_embedding_backward_by_scatter(op, grad_in, ids_in, vocab, padding_idx);
  int64_t count = 0;
  std::optional<std::vector<int32_t>> index = one_hot_index(ids_in, vocab, padding_idx < 0 ? -1 : padding_idx, &count);
  if (!index) return std::nullopt;
  c10::DeviceGuard guard(grad_in.device());
  kernels::OneHotSpec spec;
  spec.rows = n;
  spec.classes = vocab;
  spec.output_dtype = *sim_dtype(grad_in.scalar_type());
  at::Tensor onehot = at::empty({n, vocab}, grad_in.options());
  HostBuffer index_buffer{"index", index->data(), index->size(), DType::int32};
  execute_kernel(
      grad_in.device().index(),
      op + ".one_hot|" + std::to_string(n) + "," + std::to_string(vocab) + "|" + c10::toString(grad_in.scalar_type()),
      kernels::invocation(kernels::one_hot_program, spec), {index_buffer}, {buffer("y", onehot)},
      record_for(op + ".one_hot", {ids_in}, grad_in.scalar_type()));
  return lower_matmul(op, onehot.t(), grad_in.reshape({n, d}), nullptr);
}


// index_select along dim 0 as rows; another dim moved to the front (a device permute), gathered as
// rows, moved back.
std::optional<at::Tensor> lower_index_select(const std::string& op, LoweringArgs args) {
  const at::Tensor& self = args[0].toTensor();
  if (self.dim() == 0) {  // a scalar: its one value by one index (else torch raises), a 0-d result
    const at::Tensor& index = args[2].toTensor();
    if (index.numel() != 1 || index.dim() > 1) return std::nullopt;
    c10::maybe_wrap_dim(args[1].toInt(), 0);
    std::optional<at::Tensor> one = lower_embedding(op, self.reshape({1}), index.reshape({1}), true);
    return one ? std::optional<at::Tensor>(one->reshape({})) : std::nullopt;
  }
  const int64_t d = c10::maybe_wrap_dim(args[1].toInt(), self.dim());
  if (d == 0) return lower_embedding(op, self, args[2].toTensor(), true);
  if (!on_neuron(self)) return std::nullopt;
  std::optional<at::Tensor> rows = lower_embedding(op, self.movedim(d, 0).contiguous(), args[2].toTensor(), true);
  if (!rows) return std::nullopt;
  return rows->movedim(0, d).contiguous();
}

}  // namespace

std::vector<Lowering> embedding_lowerings() {
  return {
      row("embedding", [](const std::string& op, LoweringArgs a) { return lower_embedding(op, a[0].toTensor(), a[1].toTensor(), false); },
          {"embedding.out"}),
      row("index_select", lower_index_select, {"index_select.out"}),
      row("embedding_dense_backward", [](const std::string& op, LoweringArgs a) {
        return lower_embedding_backward(op, a[0].toTensor(), a[1].toTensor(), a[2].toInt(), a[3].toInt(), a[4].toBool());
      }),
  };
}

}  // namespace trnsim::frontend
