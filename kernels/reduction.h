// Reductions (sum, mean, max, min over any set of dims, keepdim or not) and argmax / argmin over
// one dim with PyTorch's first-occurrence tie rule. Accumulation is fp32; the output is rounded to
// its dtype once, at the end (mean's 1/count scale is applied in that same final instruction).
//
// Decomposition: dims are merged into alternating kept / reduced groups and each reduced group is
// removed by one pass over a [A, R, B] view (A = everything before it, B = the kept dims after it,
// innermost groups first; intermediate results are fp32 HBM scratch, much smaller than the input).
// Per pass, the layout follows where the contiguous data is:
//  - rows (B == 1, or R*B fits one tile per partition): A on partitions, [R, B] on the free axis,
//    every DMA one contiguous run per partition; tensor_reduce over R (a strided [B, R] view when
//    B > 1), chunked along R with the chunk partials reduced once more at the end;
//  - spread (B == 1, A < 64, R large): each output row's R elements are spread over all 128
//    partitions ([128, R/128] plus a [1, R%128] tail) so all 16 DMA engines work; the [128, 1]
//    partials are folded across partitions by tensor_partition_reduce (GpSimd), once per output
//    row, so its ~300-cycle cost is off the streaming path;
//  - streamed columns (B > 1, R*B too large for one partition, bf16/fp16/fp32 input; max/min
//    only with R >= 128): column groups of <= 1024 (two sets of PSUM accumulators alternate so a
//    group's evacuation overlaps the next group), rows streamed in blocks of 128 x k rows (partition
//    p takes k consecutive rows; k*1024 elements = 16 KiB per partition per DMA, loads alternating
//    two DMA queues), ragged rows last in tiles of <= 128. sum/mean: a ones column [rows, 1] as the
//    stationary operand, each [rows, <= 512] slice moving, column sums accumulated in fp32 PSUM over
//    the whole group; fp32 inputs (a quarter-rate PE pass) send every other full block to a GpSimd
//    fp32 accumulator, folded into PSUM by fp32 matmuls at the end. max/min: slices alternate
//    between Vector (fp32 accumulator in PSUM, so SBUF + PSUM tensor_tensor runs at 1 element per
//    cycle) and GpSimd (fp32 SBUF accumulator); the two are combined, PE-transposed 128 columns at a
//    time and reduced along the free axis. The block layout depends only on R and the dtype, so a
//    column's arithmetic does not depend on the chunk width (cores split the columns bit-exactly);
//  - columns (the other B > 1 cases): R on partitions in tiles of 128, B on the free axis; tiles
//    are combined with tensor_tensor into an fp32 [128, w] accumulator and folded across
//    partitions by tensor_partition_reduce once per (output row, column chunk).
// Loads run kRingDepth - 1 tiles ahead (tile_pipeline.h) so DMA and compute overlap.
//
// Split across cores (KernelContext core/cores): each core takes a contiguous share of the output -
// row tiles (rows), output rows (spread), (output row, column chunk) groups (columns; a sum over
// dim 0 is split over its columns), row tiles (argmax). No partial result crosses cores, so the
// values equal the one-core values. A reduction that needs several passes (several reduced dim
// groups, or argmax over a dim that is not innermost) runs wholly on core 0: its later pass reads
// what every part of the earlier one wrote, and cores have no way to wait for one another. A single
// output row that is spread (a full reduction) is one core's work too.
//
// argmax: rows on partitions, max8 + nc_find_index8 per chunk of the row (the first index of the
// maximum within the chunk), chunks combined with a strict greater-than so earlier chunks win ties;
// a reduced dim that is not innermost is first made innermost by the permute kernel (HBM scratch).
// argmin runs argmax on the negated values. NaN rows are not handled (nc_find_index8 cannot find
// NaN): such a row's index is undefined, where PyTorch returns the first NaN.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

enum class ReduceOp { sum, mean, max, min, argmax, argmin };

struct ReduceSpec {
  std::vector<int64_t> shape;
  std::vector<int64_t> dims;  // dims to reduce (any order, negative = from the end); argmax/argmin: exactly one
  ReduceOp op = ReduceOp::sum;
  bool keepdim = false;
  DType input_dtype = DType::fp32;
  DType output_dtype = DType::fp32;  // int32 for argmax / argmin
};

std::vector<int64_t> reduced_shape(const ReduceSpec& spec);
void build_reduce(const KernelContext& ctx, const ReduceSpec& spec, uint32_t x, uint32_t y);
// x input, y output. With cores > 1: part `core` of the reduction split across that many cores.
isa::Program reduce_program(const ReduceSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);

}  // namespace trnsim::kernels
