// Indexing kernels: row gather and row scatter by a runtime index tensor (indirect DMA through the
// GpSimd software DGE: dma_gather / dma_scatter), histograms (torch.histc, bincount) and arange.
//
// Index tensors. The ISA has no int64 (neither has the hardware); PyTorch's int64 indices stay in
// HBM as they are, 8 bytes little-endian, and a kernel reads them as int32 pairs (the allocation is
// declared int32 [n, 2]): a [rows, 2] tile per 128 ids, one descriptor per id, the low word the row
// index. The low word suffices because an index must be < 2^31 rows: the lowering checks on the
// host that every index is within its dim (torch requires it and raises IndexError otherwise), which
// also means the high word is the low word's sign extension. Negative indices (Python's x[-1]) are
// wrapped on the Vector engine (idx + V where idx < 0; exact in the engines' fp32 while V < 2^24).
// int64 results (bincount, arange) are written as (low word, sign-extension word) pairs, so their
// HBM bytes and time are those of int64.
//
// Gather: per 128 ids, the ids tile, dma_gather of the rows (columns chunked to ~16 KiB per
// partition), a store with one contiguous run per row; tiles split across cores.
// Scatter: y[ids[i], :] = src[i, :] (or += with accumulate) on y in place: per 128 ids, the ids and
// the source rows loaded, one dma_scatter per column chunk. Rows are applied in id order (partition
// order within an instruction, instructions in program order on one queue), so repeated ids are
// deterministic: the last row wins, or the sum is taken in id order, as torch's CPU loops do. With
// repeated ids the kernel runs on one core (cores cannot order their stores to one row); with unique
// ids the tiles split across cores.
// Histogram: elements [rows, w] tiles; the bin of each element computed in fp32 as torch's CPU
// histc does ((x - min) * bins / (max - min), truncated, x == max in the last bin, outside [min, max]
// dropped), then per bin an equality mask (times the weight) reduced along the free dim (GpSimd and
// Vector alternating), per-partition counts accumulated, summed over partitions by GpSimd at the end.
// Arange: iota on GpSimd (integers exact), a cast for fp32, the sign word for int64.
// Nonzero: tiles of [128, w <= 64] elements (row-major), the mask x != 0, its inclusive count along
// each partition (tensor_tensor_scan), the partitions before by a strictly-triangular fp32 matmul
// and the tiles before by an all-ones matmul (PSUM, exact integers), each element's coordinates
// from its flat position (exact fp32 division and mod below 2^24), scattered as int64 pairs (one
// dma_scatter per column) to its output row; zeros go to a spare row after the last. The count of nonzeros (the output's size) is the host's, as torch's
// nonzero synchronises with the host on every device.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

// How a kernel reads an index tensor: int32 as is, or int64 as (low, high) int32 pairs.
enum class IndexWidth : uint8_t { int32, int64 };

struct GatherRowsSpec {
  int64_t num_ids = 0, rows = 0, row_elements = 0;  // ids; table [rows, row_elements]
  DType dtype = DType::fp32;                        // table and output (any dtype: bytes move as they are)
  IndexWidth index = IndexWidth::int64;
  bool wrap_negative = false;  // some ids are negative (-rows <= id < 0): add rows on the device
};
void build_gather_rows(const KernelContext& ctx, const GatherRowsSpec& spec, uint32_t ids, uint32_t table, uint32_t y);
// Ids ([n] int32 or [n, 2] int32 pairs), table [rows, D]; y [n, D].
isa::Program gather_rows_program(const GatherRowsSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                 uint32_t cores = 1);

struct ScatterRowsSpec {
  int64_t num_ids = 0, rows = 0, row_elements = 0;  // ids; y [rows, row_elements]; src [num_ids, row_elements]
  DType dtype = DType::fp32;
  IndexWidth index = IndexWidth::int64;
  bool wrap_negative = false;
  bool accumulate = false;  // y[ids[i]] += src[i] (read-add-write DMA: bf16 / fp32 only)
  bool unique_ids = false;  // no id repeats: the tiles may split across cores
};
void build_scatter_rows(const KernelContext& ctx, const ScatterRowsSpec& spec, uint32_t ids, uint32_t src, uint32_t y);
// Ids, src [n, D]; y [rows, D], updated in place (the caller loads y's current values as an input).
isa::Program scatter_rows_program(const ScatterRowsSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                  uint32_t cores = 1);

enum class HistogramMode : uint8_t {
  histc,     // bins of equal width over [min, max] (torch.histc)
  bincount,  // bin = the value itself, 0 <= x < bins (torch.bincount)
};
struct HistogramSpec {
  int64_t n = 0, bins = 0;
  HistogramMode mode = HistogramMode::histc;
  DType input_dtype = DType::fp32;  // fp32 or int32 (an int64 input: int32 pairs, IndexWidth::int64)
  IndexWidth input_width = IndexWidth::int32;
  double min = 0, max = 0;     // histc: the range (min < max), as fp32 values
  bool weighted = false;       // bincount weights (fp32, [n])
  DType output_dtype = DType::fp32;  // fp32 or int32; int64 with output_pairs
  bool output_pairs = false;         // int64 counts as (low, 0) pairs
};
void build_histogram(const KernelContext& ctx, const HistogramSpec& spec, uint32_t x, uint32_t weights, uint32_t y);
// X [n] (or [n, 2] pairs), weights [n] when weighted; y [bins] (or [bins, 2]). Runs on core 0.
isa::Program histogram_program(const HistogramSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                               uint32_t cores = 1);

struct ArangeSpec {
  int64_t n = 0;
  int64_t start = 0, step = 1;  // integers (the lowering takes only what iota makes exactly)
  DType dtype = DType::fp32;    // fp32 or int32; int64 with pairs
  bool pairs = false;
};
// Y [n] (or [n, 2] pairs). Tiles split across cores.
isa::Program arange_program(const ArangeSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);

// scatter_reduce amax / amin (no read-max-write DMA exists): rows on partitions, along the last
// dim; per target position t of a row, select_reduce keeps src where index == t and reduces it
// (max / min are exact in any order, NaN propagating as torch's CPU does), then combined with
// self (include_self) or replacing it where some index hit (a count per t). O(S * J) element
// operations per 128 rows (S targets, J indices per row): for the short rows it is used on.
struct ScatterMaxSpec {
  int64_t rows = 0, targets = 0, per_row = 0;  // self [rows, targets]; index / src [rows, per_row]
  DType dtype = DType::fp32;                    // fp32 or bf16
  bool maximum = true;                          // amax (else amin)
  bool include_self = true;
};
// Self, index (int32 pairs [rows, per_row, 2]), src; y [rows, targets]. Row tiles split across cores.
isa::Program scatter_max_program(const ScatterMaxSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                 uint32_t cores = 1);

struct NonzeroSpec {
  std::vector<int64_t> shape;  // of x (n elements, n < 2^24)
  int64_t nonzeros = 0;        // rows of the output
  DType dtype = DType::fp32;   // x: fp32, bf16, int32, uint8 (bool); int64 as int32 pairs
  bool pairs = false;
};
// X [n] (or [n, 2]); y int32 [nonzeros + 1, ndim, 2] (int64 pairs; the last row is scratch). On core 0.
isa::Program nonzero_program(const NonzeroSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                             uint32_t cores = 1);

}  // namespace trnsim::kernels
