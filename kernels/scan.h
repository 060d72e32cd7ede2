// Inclusive scans (cumsum, cumprod) and the product over the last dim of a [rows, cols] HBM tensor,
// for torch.cumsum / torch.cumprod / torch.prod on the device. Inputs are read into fp32 (the
// engines compute in fp32), every partial result stays fp32 and each output element is rounded to
// the output dtype once, as torch's CPU kernels do for bf16 cumsum / cumprod (fp32 accumulator,
// one rounding per element). Integer inputs are exact while every partial result is within
// +-2^24; checking that is the caller's job (the lowering does it on the host).
//
// Scan: rows on partitions (tiles of 128), columns on the free axis in chunks that fit SBUF; one
// Vector tensor_tensor_scan per chunk (dst = (x op dst[i-1]) bypass x), the last column of one
// chunk the `initial` of the next; the bf16 rounding of the fp32 result runs on the Scalar engine.
// Loads run kRingDepth - 1 chunks ahead (tile_pipeline.h), alternating two DMA queues. Bound (trn2,
// [4096, 4096], one core): bf16 by the Vector engine (the scan costs 2N cycles per partition,
// ISA-COST): 282 us, 238 GB/s = 66% of the core's 362.5 GB/s HBM share, Vector 97% busy; fp32 by
// the DMA engines: 309 us, 434 GB/s (the 16 engines x 27.2 GB/s). Few long rows of a float dtype
// (< 64 rows of >= 8192 columns, e.g. a 1-D cumsum, or the < 64 rows left after the full 128-row
// tiles: [129, 70000] bf16 161 us instead of 292 us) are spread over the partitions instead: blocks
// of 128 x w consecutive elements scanned per partition, the partition totals scanned on one
// partition (PE transposes there and back) into each partition's prefix, applied by the Scalar
// engine; the order of operations differs from a sequential scan, so values agree to fp32 rounding
// (bf16: within one rounding), not bit for bit. [1, 70000] bf16: 3.8 us instead of 146 us.
//
// Prod: rows on partitions, each chunk reduced by multiply into an fp32 partial (chunks alternate
// Vector tensor_reduce / Scalar activation_reduce so two engines keep up with the DMA), the chunk
// partials multiplied at the end. Few long rows (a full reduction of a flattened tensor) are spread
// over all partitions ([128, cols/128] + a [1, cols%128] tail) and the 128 partial products folded
// by tensor_partition_reduce (GpSimd). Bound by the DMA engines: bf16 [4096, 4096] on trn2 81.3 us,
// 413 GB/s (95% of 16 x 27.2 GB/s, above the 362.5 GB/s share). NaN / inf / zero propagate as IEEE
// multiply does; the multiplication order differs from torch's, so fp32 results agree to rounding,
// not bit for bit. torch's CPU prod of a bf16 tensor accumulates in bf16 (torch 2.13: 0.352 against
// the exact 0.338 for 300 factors in [0.75, 1.25]); this kernel returns the fp32-accumulated product
// rounded once (torch's bf16 cumprod does accumulate in fp32, and the scan matches it exactly).
//
// Short rows are packed several to a partition (a block of 128 x k consecutive rows, partition p
// taking k of them: one contiguous DMA run each), so the DMAs are not overhead-bound; the scan then
// issues one tensor_tensor_scan per row of a partition (bound by the Vector MIN_II below 32 columns:
// [100000, 7] bf16 56 us, was 200 us), the prod one tensor_reduce over a [128, k, cols] view (rows of
// <= 512 columns only: that one runs on Vector alone; [100000, 7] bf16 8.9 us, was 197 us).
//
// Split across cores (core / cores): each core takes a contiguous share of the row blocks (spread
// layouts: of the rows); no partial result crosses cores, so values equal the one-core values.
#pragma once

#include <cstdint>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

enum class ScanOp { sum, prod };

struct ScanSpec {
  int64_t rows = 1, cols = 1;  // both >= 1 (empty tensors are the caller's)
  ScanOp op = ScanOp::sum;
  DType input_dtype = DType::fp32;
  DType output_dtype = DType::fp32;
};

// y[r, j] = x[r, 0] op ... op x[r, j].
void build_scan(const KernelContext& ctx, const ScanSpec& spec, uint32_t x, uint32_t y);
// Inputs "x" [rows, cols], output "y" [rows, cols]; with cores > 1 part `core` of the split.
isa::Program scan_program(const ScanSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

struct ProdSpec {
  int64_t rows = 1, cols = 1;  // both >= 1 (the empty product, ones, is the caller's)
  DType input_dtype = DType::fp32;
  DType output_dtype = DType::fp32;
};

// y[r, 0] = x[r, 0] * ... * x[r, cols - 1].
void build_prod(const KernelContext& ctx, const ProdSpec& spec, uint32_t x, uint32_t y);
// Input "x" [rows, cols], output "y" [rows, 1]; with cores > 1 part `core` of the split.
isa::Program prod_program(const ProdSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

}  // namespace trnsim::kernels
