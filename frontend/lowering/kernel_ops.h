// The lowerings other lowerings are composed of (a softmax over another dim is a permute, the
// softmax kernel and a permute back; nll_loss is a gather and a reduction; ...). Each takes typed
// arguments, runs its kernel on the device and returns the result, or nullopt when it does not
// take them (nothing written). `op` labels the records and kernel-cache keys only.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/reduction.h"

namespace trnsim::frontend {

// The result layout TensorIterator gives an element-wise op over `operands` (its CPU kernels and meta
// functions allocate their results so, and torch.compile's graphs rely on those strides): a transposed
// or channels-last operand's dim order is kept, broadcast or not. An element-wise kernel computes in
// that storage order, on each operand viewed in it (`stored`), and writes the result's storage in order.
struct ElementwiseLayout {
  std::vector<int64_t> sizes, strides;  // the result's, in logical dim order
  std::vector<int64_t> order;           // the result's dims from the outermost in storage to the innermost
  // An empty result in that layout.
  at::Tensor empty(const at::TensorOptions& options) const;
  // `operand` aligned to the result's rank (leading size-1 dims) and permuted into storage order
  // (a view: contiguous when the operand has the result's layout).
  at::Tensor stored(const at::Tensor& operand) const;
};
ElementwiseLayout elementwise_layout(const std::vector<at::Tensor>& operands);

// An in-place op computed out of place: `result` copied into self, when it has self's dtype (else nullopt,
// nothing written).
std::optional<at::Tensor> into_self(const at::Tensor& self, std::optional<at::Tensor> result);

// y = kind(x) (kernels/elementwise.h unary).
std::optional<at::Tensor> lower_unary(const std::string& op, const at::Tensor& x, kernels::UnaryOp kind);

// c = a kind b with PyTorch's type promotion; a 0-dim operand is an immediate. `compare`: a bool
// result. `round_immediate`: an immediate is first rounded to the computation's dtype, as torch does.
std::optional<at::Tensor> lower_binary(const std::string& op, const at::Tensor& a, const at::Tensor& b,
                                       kernels::BinaryOp kind, bool compare = false, bool round_immediate = true);

// out = cond ? a : b; each of a, b is a tensor or an immediate; the result in `result`'s dtype.
std::optional<at::Tensor> lower_where(const std::string& op, const at::Tensor& cond, std::optional<at::Tensor> a,
                                      std::optional<double> a_scalar, std::optional<at::Tensor> b,
                                      std::optional<double> b_scalar, at::ScalarType result);

// Reduction of `kind` over `rdims` (empty: all).
std::optional<at::Tensor> lower_reduce(const std::string& op, const at::Tensor& x, std::vector<int64_t> rdims,
                                       bool keepdim, kernels::ReduceOp kind);

// (var or std, mean) of the var_mean / std_mean correction schemas' arguments.
std::optional<std::pair<at::Tensor, at::Tensor>> lower_var_mean(c10::ArrayRef<c10::IValue> args, bool std_dev);

// C = A @ B (+ *addend), 2-D or batched 3-D; `fp32_result`: the product left in fp32.
std::optional<at::Tensor> lower_matmul(const std::string& op, const at::Tensor& a, const at::Tensor& b,
                                       const at::Tensor* addend, bool fp32_result = false);

// out[i, :] = table[ids[i], :]; `index_select`: ids are 1-D and the table any rank.
std::optional<at::Tensor> lower_embedding(const std::string& op, const at::Tensor& table, const at::Tensor& ids,
                                          bool index_select);

// y[ids[i], :] += src[i, :] in place, in id order (bf16 sums in fp32, rounded once), on the scatter kernel's
// read-add-write DMA. y [rows, D] contiguous (fp32 / bf16), src [n, D] of y's dtype, ids n int64 / int32 on the
// device or the host, which the caller has checked are in [0, rows) (timing-only mode cannot: the kernel's time
// does not depend on them).
void lower_index_add_rows(const std::string& op, const at::Tensor& y, const at::Tensor& ids, const at::Tensor& src);

}  // namespace trnsim::frontend
