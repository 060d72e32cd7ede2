// Data-movement kernels: permute (torch.permute(...).contiguous()), concatenation, and embedding
// gather (out[i, :] = table[ids[i], :]).
//
// Permute: dims are merged wherever input and output walk them alike, then
//  - the innermost (contiguous) dim stays innermost: DMA only, HBM -> HBM with strided access
//    patterns (one contiguous run per innermost row on both sides, no engine involved);
//  - the innermost dim moves (a transpose of the two innermost merged dims, batched over the
//    rest): blocks are loaded with long contiguous runs along the input's inner dim, transposed
//    128 x 128 on the Tensor engine into PSUM (exact for every float dtype), copied out of PSUM
//    by the Vector and Scalar engines alternately, and stored with long runs along the output's
//    inner dim. Chosen over dma_transpose (2-byte dtypes, trn2+) because the DMA transpose's
//    source side is 128-element runs (one descriptor each) at 90% efficiency, which the timing
//    model makes slower than two full-rate DMAs plus PE transposes (see the bench in the report);
//    integer dtypes (exact bits) fall back to element-granular DMA.
// Concatenation: one HBM -> HBM DMA per input (per chunk), large runs.
// Split across cores: each core takes a contiguous share of the transfers (HBM -> HBM copies), of the
// transpose blocks, or of the 128-id row tiles (gather).
// Gather: ids loaded 128 at a time, dma_gather (software-DGE indirect DMA) of the rows into SBUF,
// stored with one contiguous run per row.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct PermuteSpec {
  std::vector<int64_t> shape;  // input shape
  std::vector<int64_t> perm;   // output dim k = input dim perm[k]
  DType dtype = DType::fp32;
};
std::vector<int64_t> permuted_shape(const PermuteSpec& spec);
void build_permute(const KernelContext& ctx, const PermuteSpec& spec, uint32_t x, uint32_t y);
// X input, y output. With cores > 1: part `core` of the kernel split across that many cores.
isa::Program permute_program(const PermuteSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                             uint32_t cores = 1);

struct ConcatSpec {
  std::vector<std::vector<int64_t>> shapes;  // equal except along dim
  int64_t dim = 0;
  DType dtype = DType::fp32;
};
std::vector<int64_t> concat_shape(const ConcatSpec& spec);
void build_concat(const KernelContext& ctx, const ConcatSpec& spec, const std::vector<uint32_t>& inputs, uint32_t y);
// X0, x1, ... inputs, y output. With cores > 1: part `core` of the kernel split across that many cores.
isa::Program concat_program(const ConcatSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);

struct EmbeddingSpec {
  int64_t num_ids = 0, vocab = 0, dim = 0;
  DType dtype = DType::fp32;        // table and output
  DType index_dtype = DType::int32;  // int32 or uint32
};
void build_embedding(const KernelContext& ctx, const EmbeddingSpec& spec, uint32_t ids, uint32_t table, uint32_t y);
// Ids, table; y. With cores > 1: part `core` of the kernel split across that many cores.
isa::Program embedding_program(const EmbeddingSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                               uint32_t cores = 1);

// Any strided view made contiguous (x[..., 32:], a slice of a transposed tensor): one HBM -> HBM DMA
// pattern over the view (detail::strided_copy), the source given as the storage span the view
// reaches (src_elements from the view's first element).
struct StridedCopySpec {
  std::vector<int64_t> shape, src_strides;  // in elements
  int64_t src_elements = 0;
  DType dtype = DType::fp32;
};
// X [src_elements] input, y [shape] output. With cores > 1: part `core` of the copy.
isa::Program strided_copy_program(const StridedCopySpec& spec, const HardwareConfig& config, uint32_t core = 0,
                                  uint32_t cores = 1);

namespace detail {
// One dim of a strided copy: size, and the element stride on the source and destination side.
struct CopyDim {
  int64_t size, src_stride, dst_stride;
};
}  // namespace detail

// torch.flip: x [elements] -> y [elements] over explicit dims (negative source strides for the
// flipped ones, the source starting at src_offset, its last element), one HBM -> HBM DMA pattern.
struct FlipSpec {
  std::vector<detail::CopyDim> dims;  // outermost first; element strides
  int64_t src_offset = 0;
  int64_t elements = 0;
  DType dtype = DType::fp32;
};
// X input, y output. With cores > 1: part `core` of the copy.
isa::Program flip_program(const FlipSpec& spec, const HardwareConfig& config, uint32_t core = 0, uint32_t cores = 1);

namespace detail {
// Copies src -> dst (both HBM here) over `dims` (outermost first) by DMA, merging dims and
// splitting them to fit the access-pattern limits; queues rotate from `first_queue`.
void strided_copy(const KernelContext& ctx, uint32_t src, int64_t src_offset, uint32_t dst, int64_t dst_offset,
                  std::vector<CopyDim> dims, int64_t first_queue = 0);
}  // namespace detail

}  // namespace trnsim::kernels
