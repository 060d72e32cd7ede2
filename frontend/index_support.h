// Host-side helpers of the indexing lowerings (lowering/index.cpp): device tensors seen as CPU
// tensors without a transfer (device memory is host memory here: reading index metadata is what
// the host-side range check does), and HBM buffers that move bytes unchanged, int64 as int32
// pairs (see kernels/indexing.h). Include only from torch TUs.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <string>

#include "config/dtype.h"
#include "frontend/kernel_executor.h"
#include "frontend/lowering_support.h"

namespace trnsim::frontend {

// The kernel dtype that moves an element of `t` bit for bit, and how many of them make one element
// (8-byte elements as two int32 words); nullopt for other sizes.
inline std::optional<std::pair<DType, int64_t>> raw_dtype(at::ScalarType t) {
  switch (c10::elementSize(t)) {
    case 1: return std::make_pair(DType::uint8, int64_t{1});
    case 2: return std::make_pair(DType::uint16, int64_t{1});
    case 4: return std::make_pair(DType::int32, int64_t{1});
    case 8: return std::make_pair(DType::int32, int64_t{2});
    default: return std::nullopt;
  }
}

// The bytes of a contiguous tensor as the raw dtype above (int64 as int32 pairs).
inline HostBuffer raw_buffer(const std::string& name, const at::Tensor& t) {
  const auto raw = *raw_dtype(t.scalar_type());
  return HostBuffer{name, t.data_ptr(), static_cast<size_t>(t.numel() * raw.second), raw.first};
}

// The values of a contiguous fp32 / bf16 / int32 tensor in that dtype, int64 as int32 pairs: for
// kernels whose allocations hold those dtypes (a raw buffer would convert between them).
inline std::optional<HostBuffer> value_buffer(const std::string& name, const at::Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  switch (t.scalar_type()) {
    case at::kFloat: return HostBuffer{name, t.data_ptr(), n, DType::fp32};
    case at::kBFloat16: return HostBuffer{name, t.data_ptr(), n, DType::bf16};
    case at::kInt: return HostBuffer{name, t.data_ptr(), n, DType::int32};
    case at::kLong: return HostBuffer{name, t.data_ptr(), 2 * n, DType::int32};
    default: return std::nullopt;
  }
}

// The dtype the float kernels compute in, for the dtypes read-add-write DMA accumulates.
inline std::optional<DType> accumulate_dtype(at::ScalarType t) {
  if (t == at::kFloat) return DType::fp32;
  if (t == at::kBFloat16) return DType::bf16;
  return std::nullopt;
}

}  // namespace trnsim::frontend
