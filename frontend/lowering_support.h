// What the torch translation units of the device share (the lowering families under lowering/, the
// native ops): dtype mapping, host aliases of device tensors, host buffers for kernel programs, op
// records, and the counting CPU fallback an unsupported call goes to. Include only from torch TUs
// (it pulls in ATen).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <tuple>
#include <optional>
#include <string>
#include <vector>

#include "config/dtype.h"
#include "frontend/kernel_executor.h"

namespace trnsim::frontend {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// The boxed CPU fallback (counted, TRNSIM_FALLBACK modes): where a lowering sends a call it does
// not support, before it has written anything.
// `reason` (why a kernel could not be built, if that was it) goes into the first warning.
void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& reason = "");

// Raises PyTorch's "Expected all tensors to be on the same device" error when the op's tensor
// arguments sit on different devices (0-dim CPU tensors, i.e. scalars, excepted), as CUDA does;
// copies and indexing with host indices are exempt.
void check_common_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

// An integer (or bool) tensor cast into the contiguous float tensor `dst` by a device copy kernel
// (the DMA converts on the way, through fp32 with RNE: torch's conversion while |value| <= 2^24;
// int64 narrowed to int32 on the host first). False (nothing written) for what it does not cover.
bool integer_to_float_kernel(const at::Tensor& src, const at::Tensor& dst);

inline std::optional<DType> sim_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::fp32;
    case at::kBFloat16: return DType::bf16;
    case at::kHalf: return DType::fp16;
    default: return std::nullopt;
  }
}

inline std::vector<int64_t> dims(c10::IntArrayRef sizes) { return std::vector<int64_t>(sizes.begin(), sizes.end()); }

inline std::string dims_key(c10::IntArrayRef sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? "," : "") + std::to_string(sizes[i]);
  return s + "]";
}

inline bool on_neuron(const at::Tensor& t) { return t.defined() && t.device().type() == kNeuron; }

// Host bytes as the kernels see them: bool as uint8 (0 / 1), int32 as is.
inline HostBuffer buffer(const std::string& name, const at::Tensor& t) {
  DType dt = t.scalar_type() == at::kBool ? DType::uint8 : t.scalar_type() == at::kInt ? DType::int32 : *sim_dtype(t.scalar_type());
  return HostBuffer{name, t.data_ptr(), static_cast<size_t>(t.numel()), dt};
}

// The host's view of a device tensor's bytes. In timing-only mode there are none to read: throws
// ValuesUnavailable (a lowering that needs values is declined to the timing-only fallback).
inline at::Tensor raw_host_alias(const at::Tensor& t);
inline at::Tensor host_alias(const at::Tensor& t) {
  if (t.device().type() != kNeuron) return t;
  if (!values_enabled()) {
    throw ValuesUnavailable("trnsim timing-only mode: the host needs the values of a neuron tensor of shape " +
                            dims_key(t.sizes()) + ", which this mode does not compute");
  }
  return raw_host_alias(t);
}

// The same view without the mode's check: for what knows the block holds values (holds_values) or writes them.
inline at::Tensor raw_host_alias(const at::Tensor& t) {
  if (t.device().type() != kNeuron) return t;
  at::Tensor alias = at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
  // The lazy conjugate / negative bits are tensor metadata, not storage: keep them, so a copy of a
  // conj() view materialises the conjugate as the CPU does.
  if (t.is_conj()) alias = at::_conj(alias);
  if (t.is_neg()) alias = at::_neg_view(alias);
  return alias;
}

// A host-side check of a device tensor's values that picks a kernel path (no NaN for argmax, a
// positive base for pow). In timing-only mode the values are unknown and the check is taken to
// hold (`assumed`): the common case, whose kernel is the one timed.
template <class Check>
inline bool host_check(const at::Tensor& t, Check&& check, bool assumed) {
  if (on_neuron(t) && !values_enabled()) return assumed;
  return check(host_alias(t));
}

// Integers the engines' fp32 arithmetic represents exactly: the kernels compute integer ops in fp32,
// so a lowering runs them only when every input and result stays within this bound.
constexpr double kExactIntegerBound = 16777216.0;  // 2^24

// The dtype an element-wise kernel reads a tensor of `t` as: floats as they are, bool / uint8 as
// uint8, other integers as int32 (int64 narrowed on the host: the ISA has no 64-bit integers; an
// int64 operand's HBM traffic is therefore counted at 4 bytes per element).
inline std::optional<DType> elementwise_dtype(at::ScalarType t) {
  if (std::optional<DType> f = sim_dtype(t)) return f;
  switch (t) {
    case at::kBool: case at::kByte: return DType::uint8;
    case at::kChar: return DType::int8;
    case at::kShort: return DType::int16;
    case at::kInt: case at::kLong: return DType::int32;
    default: return std::nullopt;
  }
}

// Largest integer magnitude a float dtype holds exactly (an integer operand torch casts to it first).
inline double exact_integer_limit(at::ScalarType t) {
  return t == at::kBFloat16 ? 256.0 : t == at::kHalf ? 2048.0 : kExactIntegerBound;
}

// In timing-only mode the values are unknown and taken to be in range (a range check picks the
// kernel path, not its time, for the sizes it admits).
inline double host_max_abs(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  if (on_neuron(t) && !values_enabled()) return 0;
  const at::Tensor h = host_alias(t);
  if (h.scalar_type() == at::kBool) return 1.0;
  if (!at::isIntegralType(h.scalar_type(), false)) return h.abs().max().item<double>();
  // The extremes in double: abs() in the tensor's own dtype wraps (|INT64_MIN| is INT64_MIN, negative,
  // which once passed every range check and narrowed the value to 0).
  const auto [lo, hi] = at::aminmax(h);
  return std::max(std::abs(lo.item<double>()), std::abs(hi.item<double>()));
}

// The ISA has no 64-bit integers: a dense int64 tensor is read as an int32 host copy of its values
// (the caller has checked that they fit), others as they are.
// (Timing only: the bytes are never read, so the tensor itself stands for the copy.)
inline at::Tensor kernel_input(const at::Tensor& dense) {
  if (on_neuron(dense) && !values_enabled()) return dense;
  return dense.scalar_type() == at::kLong ? host_alias(dense).to(at::kInt) : dense;
}

// A kernel's output buffer for a dense result, in storage order: an int64 result is written to an
// int32 staging buffer and widened into the result's storage by finish().
struct KernelResult {
  at::Tensor result, staging;
  explicit KernelResult(at::Tensor dense) : result(std::move(dense)) {
    if (result.scalar_type() == at::kLong) staging = at::empty({result.numel()}, at::kInt);
  }
  HostBuffer buffer(const std::string& name) const {
    return HostBuffer{name, (staging.defined() ? staging : result).data_ptr(), size_t(result.numel()),
                      *elementwise_dtype(result.scalar_type())};
  }
  at::Tensor finish() const {
    if (staging.defined()) at::from_blob(result.data_ptr(), {result.numel()}, result.options().device(at::kCPU)).copy_(staging);
    return result;
  }
};

inline std::vector<int64_t> int_list(const c10::IValue& v) {
  if (v.isNone()) return {};
  if (v.isInt()) return {v.toInt()};
  const auto list = v.toIntVector();
  return std::vector<int64_t>(list.begin(), list.end());
}

// A `dtype=` argument the kernel's result dtype satisfies (none, or the input's own).
inline bool same_dtype_arg(const c10::IValue& v, const at::Tensor& x) {
  return v.isNone() || static_cast<at::ScalarType>(v.toInt()) == x.scalar_type();
}

// Whether `dim` is t's last dim.
inline bool last_dim(const at::Tensor& t, int64_t dim) { return t.dim() > 0 && c10::maybe_wrap_dim(dim, t.dim()) == t.dim() - 1; }

// Whether a Scalar argument (alpha, beta) is 1.
inline bool is_one(const c10::IValue& v) { return v.isScalar() ? v.toScalar().equal(1) : false; }

// A Python number as an operand: a wrapped 0-dim CPU tensor, which torch's type promotion ranks below
// any tensor (a 0-dim float tensor clamped by 1.0 stays float; an unwrapped double would promote it).
inline at::Tensor scalar_operand(const c10::Scalar& v) {
  at::Tensor t = at::scalar_tensor(v, v.isFloatingPoint() ? at::kDouble : v.isBoolean() ? at::kBool : at::kLong);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// The value of a one-element tensor on the device or the host (device memory is host memory).
inline c10::Scalar host_scalar(const at::Tensor& t) { return at::_local_scalar_dense(host_alias(t)); }

// The value of a one-element tensor that a kernel takes as an immediate (a scale, a step count, a
// fill value). In timing-only mode a device tensor's value is unknown and `stand_in` is used: an
// immediate changes what the kernel computes, not its instructions or their time.
inline double immediate_value(const at::Tensor& t, double stand_in) {
  if (on_neuron(t) && !values_enabled()) return stand_in;
  return host_scalar(t).toDouble();
}

// Targets / ids as the one-hot kernel's int32 index: -1 where the row is ignored (ignore_index,
// padding_idx), checked on the host (integer metadata, like embedding ids); nullopt when one is
// out of range (the caller falls back, so torch raises its error).
// In timing-only mode the ids are unknown: every row counts as a valid id (0), which is the
// kernel's time for any ids but ignored rows' (a documented approximation of this mode).
inline std::optional<std::vector<int32_t>> one_hot_index(const at::Tensor& ids_in, int64_t classes, int64_t ignored,
                                                  int64_t* count) {
  if (on_neuron(ids_in) && !values_enabled()) {
    *count = ids_in.numel();
    return std::vector<int32_t>(static_cast<size_t>(ids_in.numel()), 0);
  }
  at::Tensor ids_c = ids_in.contiguous();
  at::Tensor ids = at::from_blob(ids_c.data_ptr(), {ids_c.numel()}, at::TensorOptions().dtype(ids_c.scalar_type()))
                       .to(at::kLong, false, true);
  const int64_t* ip = ids.data_ptr<int64_t>();
  std::vector<int32_t> index(static_cast<size_t>(ids.numel()));
  *count = 0;
  for (int64_t r = 0; r < ids.numel(); ++r) {
    if (ip[r] == ignored) {
      index[r] = -1;
      continue;
    }
    if (ip[r] < 0 || ip[r] >= classes) return std::nullopt;
    index[r] = static_cast<int32_t>(ip[r]);
    ++*count;
  }
  return index;
}

// An int argument that may arrive as a SymInt (torch.compile), and a list of them.
inline int64_t int_value(const c10::IValue& v) { return v.isInt() ? v.toInt() : v.toSymInt().guard_int(__FILE__, __LINE__); }
inline std::vector<int64_t> int_values(const c10::IValue& v) {
  std::vector<int64_t> out;
  for (const c10::IValue& e : v.toListRef()) out.push_back(int_value(e));
  return out;
}

// (N, C, H, W) of a 4-D NCHW tensor, or of a 3-D [C, H, W] one as a batch of one.
inline std::tuple<int64_t, int64_t, int64_t, int64_t> nchw(const at::Tensor& t) {
  const bool batched = t.dim() == 4;
  return {batched ? t.size(0) : 1, t.size(batched ? 1 : 0), t.size(batched ? 2 : 1), t.size(batched ? 3 : 2)};
}
// A 3-D (unbatched) tensor as a batch of one.
inline at::Tensor batched(const at::Tensor& t, bool unbatched) { return unbatched ? t.unsqueeze(0) : t; }

inline OpRecord record_for(const std::string& op, std::initializer_list<at::Tensor> inputs, at::ScalarType dtype) {
  OpRecord r;
  r.op = op;
  for (const at::Tensor& t : inputs) r.shapes.push_back(dims(t.sizes()));
  r.dtype = c10::toString(dtype);
  return r;
}

}  // namespace trnsim::frontend
