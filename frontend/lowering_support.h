// What the torch translation units that lower ATen ops share (neuron_device.cpp, nn_lowering.cpp):
// dtype mapping, host buffers for kernel programs, op records, and the counting CPU fallback an
// unsupported call goes to. Include only from torch TUs (it pulls in ATen).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "config/dtype.h"
#include "frontend/kernel_executor.h"

namespace trnsim::frontend {

constexpr c10::DeviceType kNeuron = c10::DeviceType::PrivateUse1;

// The boxed CPU fallback (counted, TRNSIM_FALLBACK modes): where a lowering sends a call it does
// not support, before it has written anything.
void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Raises PyTorch's "Expected all tensors to be on the same device" error when the op's tensor
// arguments sit on different devices (0-dim CPU tensors, i.e. scalars, excepted), as CUDA does;
// copies and indexing with host indices are exempt.
void check_common_device(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args);

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

inline OpRecord record_for(const std::string& op, std::initializer_list<at::Tensor> inputs, at::ScalarType dtype) {
  OpRecord r;
  r.op = op;
  for (const at::Tensor& t : inputs) r.shapes.push_back(dims(t.sizes()));
  r.dtype = c10::toString(dtype);
  return r;
}

}  // namespace trnsim::frontend
