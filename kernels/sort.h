// Sort and top-k along the last dim.
//
// Sort (torch.sort, stable; ascending or descending): the rank of each element is computed
// directly, r_i = #{j : x_j < x_i} + #{j < i : x_j == x_i} (> for descending), and the element and
// its position are scattered to r_i (dma_scatter). Per row the row is broadcast to all partitions
// once ([128, n], partition stride 0); per 128 elements of the row (one per partition) the Vector
// engine counts the smaller elements and the GpSimd the equal earlier ones (an affine_select keeps
// j < i), O(n^2 / 128) element operations per row: fine for the short rows of routing and
// sampling, slower than a merge network for long ones. Values compare in the engines' fp32: exact
// for fp32 / bf16 and for integers below 2^24 (the lowering's bound); NaN (which no comparison
// ranks) is left to the CPU by the lowering. Values move as bytes; indices are int64 pairs.
//
// Sort of integer keys over a small range (K = max - min + 1 <= 512, e.g. MoE expert ids): a stable
// counting sort. Per row, pass 1 counts each key (one-hot [128, K] per 128 elements, summed into
// PSUM by an all-ones matmul, so every partition holds the counts) and their exclusive prefix
// (tensor_tensor_scan) is where each key's run starts; pass 2 adds, per element, the equal keys
// before it (a strictly-triangular matmul within the tile, a running count across tiles) and
// scatters the element and its position there. O(n K / 128) element operations instead of the rank
// sort's O(n^2 / 128).
//
// Top-k along the last dim (torch.topk, k <= 8): rows on partitions, the Vector engine's max8 (the
// 8 largest values of each partition, descending) and nc_find_index8 (the first position of each),
// so a row costs two passes over its elements. The smallest k are the largest of -x (negation is
// exact). Indices are written as int64 (low word, 0) pairs. Equal values in a row's top k all find
// the first position; with resolve_ties each slot's position is found in turn and blanked (NaN,
// which nothing finds) before the next, so equal values take ascending positions (3 passes per
// slot). `kth_count` (per row, how many elements equal the k-th value) lets the lowering see a tie
// across the k-th place, where which element is chosen is the CPU's own business.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct TopkSpec {
  int64_t rows = 0, n = 0, k = 0;  // x [rows, n]; 1 <= k <= min(n, 8)
  DType dtype = DType::fp32;       // fp32 or bf16 (values out in this dtype)
  bool largest = true;
  bool resolve_ties = false;
};
// X [rows, n]; values [rows, k], indices int32 [rows, k, 2] (int64 pairs), kth_count fp32 [rows].
// Row tiles split across cores.
isa::Program topk_program(const TopkSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

struct SortSpec {
  int64_t rows = 0, n = 0;     // x [rows, n], n <= 16384
  DType dtype = DType::fp32;   // fp32, bf16, int32; int64 as int32 pairs (pairs = true)
  bool pairs = false;
  bool descending = false;
};
// X [rows, n] (int32 [rows, n, 2] with pairs); values like x, indices int32 [rows, n, 2]. Rows split across cores.
isa::Program sort_program(const SortSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

struct CountingSortSpec {
  int64_t rows = 0, n = 0;
  int64_t key_min = 0, keys = 1;  // every value in [key_min, key_min + keys), keys <= 512, |values| < 2^24
  bool pairs = false;             // int64 (int32 pairs) or int32
  bool descending = false;
};
// Same tensors as sort_program. Rows split across cores.
isa::Program counting_sort_program(const CountingSortSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                   uint32_t cores = 1);

}  // namespace trnsim::kernels
