// Top-k along the last dim (torch.topk, k <= 8): rows on partitions, the Vector engine's max8 (the
// 8 largest values of each partition, descending) and nc_find_index8 (the first position of each),
// so a row costs two passes over its elements. The smallest k are the largest of -x (negation is
// exact). Indices are written as int64 (low word, 0) pairs. Values equal to one another in a row's
// top k would find the same position: the lowering checks the indices of each row are distinct and
// otherwise hands the call to the CPU.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct TopkSpec {
  int64_t rows = 0, n = 0, k = 0;  // x [rows, n]; 1 <= k <= min(n, 8)
  DType dtype = DType::fp32;       // fp32 or bf16 (values out in this dtype)
  bool largest = true;
};
// X [rows, n]; values [rows, k], indices int32 [rows, k, 2] (int64 pairs). Row tiles split across cores.
isa::Program topk_program(const TopkSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

}  // namespace trnsim::kernels
