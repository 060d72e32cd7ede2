// Data-movement kernels (see data_movement.h for the layout and engine choices).
#include "kernels/data_movement.h"

#include <cstdlib>
#include <numeric>
#include <stdexcept>
#include <string>

#include "kernels/tile_pipeline.h"

namespace trnsim::kernels {

using detail::dma;
using detail::hbm_ap;
using detail::sb2;
using detail::sb_ap;

namespace {

// Bytes per HBM -> HBM DMA: large enough that the ~70 ns start-up and the per-descriptor cost stay
// small, small enough that several transfers are in flight on different queues.
constexpr int64_t kCopyBytesPerDma = 2 << 20;
constexpr int64_t kCopyQueues = 4;

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

// Drops size-1 dims and merges neighbours that both sides walk as one dim.
std::vector<detail::CopyDim> merge_dims(const std::vector<detail::CopyDim>& dims) {
  std::vector<detail::CopyDim> out;
  for (const detail::CopyDim& d : dims) {
    if (d.size == 1) continue;
    if (!out.empty() && out.back().src_stride == d.src_stride * d.size &&
        out.back().dst_stride == d.dst_stride * d.size) {
      out.back() = {out.back().size * d.size, d.src_stride, d.dst_stride};
    } else {
      out.push_back(d);
    }
  }
  if (out.empty()) out.push_back({1, 1, 1});
  return out;
}

bool fits_free(const detail::CopyDim& d) {
  return d.size <= isa::kMaxApDimSize && std::llabs(d.src_stride) <= isa::kMaxApDimStride && std::llabs(d.dst_stride) <= isa::kMaxApDimStride;
}

}  // namespace

namespace detail {

void strided_copy(const KernelContext& ctx, uint32_t src, int64_t src_offset, uint32_t dst, int64_t dst_offset,
                  std::vector<CopyDim> dims, int64_t first_queue) {
  dims = merge_dims(dims);
  // An innermost dim with a stride too large for a free dim goes on the partition dim (no limit).
  if (std::llabs(dims.back().src_stride) > isa::kMaxApDimStride || std::llabs(dims.back().dst_stride) > isa::kMaxApDimStride) {
    dims.push_back({1, 1, 1});
  }
  const int64_t esize = dtype_size_bytes(ctx.builder.program().allocations[src].dtype);
  int64_t target = std::max<int64_t>(1, kCopyBytesPerDma / esize);
  // Split across cores: transfers small enough that every core gets some.
  int64_t total = 1;
  for (const CopyDim& d : dims) total *= d.size;
  if (ctx.cores > 1) target = std::max<int64_t>(1, std::min(target, ceil_div(total, ctx.cores)));
  // Free dims from the innermost outward (at most 3, fitting the AP fields); the innermost is
  // chunked when it is too long for one AP dim. The next dim out is the partition dim (any stride),
  // chunked to ~kCopyBytesPerDma; the rest are loops.
  const int n = int(dims.size());
  int first_free = n - 1;
  int64_t free_elems = std::min(dims[n - 1].size, isa::kMaxApDimSize);
  while (first_free > 0 && n - first_free < 3 && dims[n - 1].size <= isa::kMaxApDimSize && fits_free(dims[first_free - 1]) &&
         free_elems * dims[first_free - 1].size <= target) {
    --first_free;
    free_elems *= dims[first_free].size;
  }
  const int part = first_free - 1;  // -1: no partition dim (everything fits the free dims)
  const int64_t part_chunk = part >= 0 ? std::max<int64_t>(1, std::min(dims[part].size, target / free_elems)) : 1;
  const int64_t inner_chunk = std::min(dims[n - 1].size, isa::kMaxApDimSize);

  std::vector<int64_t> index(std::max(0, part), 0);
  // The transfers are listed first, then this core emits its contiguous share of them (queues rotating
  // from first_queue on each core).
  std::vector<std::pair<isa::AccessPattern, isa::AccessPattern>> transfers;  // (dst, src)
  while (true) {
    int64_t so = src_offset, doff = dst_offset;
    for (int d = 0; d < part; ++d) {
      so += index[size_t(d)] * dims[size_t(d)].src_stride;
      doff += index[size_t(d)] * dims[size_t(d)].dst_stride;
    }
    const int64_t part_size = part >= 0 ? dims[size_t(part)].size : 1;
    for (int64_t p0 = 0; p0 < part_size; p0 += part_chunk) {
      const int64_t pn = std::min(part_chunk, part_size - p0);
      for (int64_t c0 = 0; c0 < dims[n - 1].size; c0 += inner_chunk) {
        const int64_t cn = std::min(inner_chunk, dims[n - 1].size - c0);
        std::vector<isa::ApDim> s_ap, d_ap;
        int64_t s0 = so + c0 * dims[n - 1].src_stride, d0 = doff + c0 * dims[n - 1].dst_stride;
        if (part >= 0) {
          s0 += p0 * dims[size_t(part)].src_stride;
          d0 += p0 * dims[size_t(part)].dst_stride;
          s_ap.push_back({dims[size_t(part)].src_stride, uint32_t(pn)});
          d_ap.push_back({dims[size_t(part)].dst_stride, uint32_t(pn)});
        } else {
          s_ap.push_back({0, 1});
          d_ap.push_back({0, 1});
        }
        for (int d = first_free; d < n; ++d) {
          uint32_t size = uint32_t(d == n - 1 ? cn : dims[size_t(d)].size);
          s_ap.push_back({dims[size_t(d)].src_stride, size});
          d_ap.push_back({dims[size_t(d)].dst_stride, size});
        }
        transfers.emplace_back(hbm_ap(ctx, dst, d0, d_ap), hbm_ap(ctx, src, s0, s_ap));
      }
    }
    int d = part;
    while (d > 0 && ++index[size_t(d - 1)] == dims[size_t(d - 1)].size) index[size_t(--d)] = 0;
    if (d <= 0) break;
  }
  int64_t queue = first_queue;
  for (const auto& [d_ap, s_ap] : my_share(ctx, transfers)) {
    dma(ctx, d_ap, s_ap, queue);
    queue = first_queue + (queue - first_queue + 1) % kCopyQueues;
  }
}

}  // namespace detail

// ---- permute ----

std::vector<int64_t> permuted_shape(const PermuteSpec& spec) {
  if (spec.perm.size() != spec.shape.size()) throw KernelUnsupported("permute: perm must list every dim once");
  std::vector<int64_t> out, seen(spec.shape.size(), 0);
  for (int64_t p : spec.perm) {
    if (p < 0 || p >= int64_t(spec.shape.size()) || seen[size_t(p)]++) {
      throw KernelUnsupported("permute: perm must list every dim once");
    }
    out.push_back(spec.shape[size_t(p)]);
  }
  return out;
}

namespace {

// out[..., j, ..., i] = in[..., i, ..., j] for the merged dims: the input's contiguous dim (j) is
// output dim `jdim`, the output's contiguous dim (i) has input stride dims.back().src_stride.
void pe_transpose(const KernelContext& ctx, DType dtype, uint32_t x, uint32_t y, const std::vector<detail::CopyDim>& dims,
                  size_t jdim) {
  const int64_t P = ctx.partitions();
  const detail::CopyDim jd = dims[jdim], id = dims.back();
  std::vector<detail::CopyDim> loops;
  for (size_t d = 0; d + 1 < dims.size(); ++d) {
    if (d != jdim) loops.push_back(dims[d]);
  }
  // Blocks of I x J elements: I/128 loads of [128 (i), J] and J/128 stores of [128 (j), I], so both
  // DMA sides run J (resp. I) contiguous elements per partition (1 KiB for bf16 at 512).
  const int64_t block = 512;
  const int64_t I = std::min(id.size, block), J = std::min(jd.size, block);
  const int64_t in_tiles = ceil_div(I, P), out_tiles = ceil_div(J, P);
  constexpr int kSets = 2;  // two block buffers: block b+1 loads while block b is transposed and stored
  std::vector<detail::Ring> in_rings, out_rings;
  for (int s = 0; s < kSets; ++s) {
    in_rings.push_back(detail::make_ring(ctx, "perm_in" + std::to_string(s) + "_", dtype, J, int(in_tiles)));
    out_rings.push_back(detail::make_ring(ctx, "perm_out" + std::to_string(s) + "_", dtype, I, int(out_tiles)));
  }
  constexpr int kPsumBuffers = 4;
  std::vector<uint32_t> psum;
  for (int k = 0; k < kPsumBuffers; ++k) {
    psum.push_back(ctx.builder.psum(ctx.name("perm_ps" + std::to_string(k)), DType::fp32, {uint32_t(P), uint32_t(P)}));
  }
  const bool scalar_copy = ctx.config.generation >= Generation::trn2;  // tensor_copy on Scalar from trn2 on
  // The I x J blocks of every loop index, in order; each core transposes a contiguous share of them.
  struct TBlock {
    int64_t so, doff;
    Range ib, jb;
  };
  std::vector<TBlock> blocks;
  std::vector<int64_t> index(loops.size(), 0);
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t d = 0; d < loops.size(); ++d) {
      so += index[d] * loops[d].src_stride;
      doff += index[d] * loops[d].dst_stride;
    }
    for (const Range& ib : tiles(id.size, I)) {
      for (const Range& jb : tiles(jd.size, J)) blocks.push_back({so, doff, ib, jb});
    }
    size_t d = loops.size();
    while (d > 0 && ++index[d - 1] == loops[d - 1].size) index[--d] = 0;
    if (d == 0) break;
  }
  int64_t set = 0, transposes = 0;
  for (const TBlock& blk : my_share(ctx, blocks)) {
    const int64_t so = blk.so, doff = blk.doff;
    const Range ib = blk.ib, jb = blk.jb;
    {
      {
        const detail::Ring& in = in_rings[size_t(set % kSets)];
        const detail::Ring& out = out_rings[size_t(set % kSets)];
        ++set;
        std::vector<Range> it = tiles(ib.size, P), jt = tiles(jb.size, P);
        for (size_t t = 0; t < it.size(); ++t) {
          int64_t off = so + (ib.begin + it[t].begin) * id.src_stride + jb.begin * jd.src_stride;
          dma(ctx, sb2(ctx, in[int64_t(t)], it[t].size, jb.size),
              hbm_ap(ctx, x, off, {{id.src_stride, uint32_t(it[t].size)}, {1, uint32_t(jb.size)}}),
              detail::kLoadQueue + int64_t(t % 2) * 2);
        }
        for (size_t u = 0; u < jt.size(); ++u) {
          for (size_t t = 0; t < it.size(); ++t) {
            uint32_t ps = psum[size_t(transposes % kPsumBuffers)];
            isa::AccessPattern pt = sb2(ctx, ps, jt[u].size, it[t].size);
            ctx.builder.emit(isa::Opcode::nc_transpose)
                .tensor("dst", pt)
                .tensor("data", sb2(ctx, in[int64_t(t)], it[t].size, jt[u].size, jt[u].begin));
            auto copy = ctx.builder.emit(isa::Opcode::tensor_copy);
            copy.tensor("dst", sb2(ctx, out[int64_t(u)], jt[u].size, it[t].size, it[t].begin)).tensor("src", pt);
            if (scalar_copy && transposes % 2 == 1) copy.on(Engine::scalar);
            ++transposes;
          }
          int64_t off = doff + (jb.begin + jt[u].begin) * jd.dst_stride + ib.begin * id.dst_stride;
          dma(ctx, hbm_ap(ctx, y, off, {{jd.dst_stride, uint32_t(jt[u].size)}, {1, uint32_t(ib.size)}}),
              sb2(ctx, out[int64_t(u)], jt[u].size, ib.size), detail::kStoreQueue + int64_t(u % 2) * 2);
        }
      }
    }
  }
}

}  // namespace

void build_permute(const KernelContext& ctx, const PermuteSpec& spec, uint32_t x, uint32_t y) {
  std::vector<int64_t> out_shape = permuted_shape(spec);
  std::vector<int64_t> in_strides = row_major_strides(spec.shape), out_strides = row_major_strides(out_shape);
  std::vector<detail::CopyDim> dims;
  for (size_t k = 0; k < out_shape.size(); ++k) dims.push_back({out_shape[k], in_strides[size_t(spec.perm[k])], out_strides[k]});
  dims = merge_dims(dims);
  const bool is_float = dtype_info(spec.dtype).is_float && dtype_size_bytes(spec.dtype) <= 4;
  if (dims.back().src_stride == 1 || !is_float) {
    detail::strided_copy(ctx, x, 0, y, 0, dims);  // integer transposes: element-granular DMA, exact bits
    return;
  }
  size_t jdim = 0;
  while (dims[jdim].src_stride != 1) ++jdim;
  pe_transpose(ctx, spec.dtype, x, y, dims, jdim);
}

isa::Program permute_program(const PermuteSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("permute", config.generation);
  uint32_t x = builder.hbm("x", spec.dtype, detail::to_u32(spec.shape), isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, detail::to_u32(permuted_shape(spec)), isa::AllocationRole::output);
  build_permute(KernelContext{builder, config, "", core, cores}, spec, x, y);
  return builder.finish();
}

isa::Program strided_copy_program(const StridedCopySpec& spec, const HardwareConfig& config, uint32_t core,
                                  uint32_t cores) {
  if (spec.shape.size() != spec.src_strides.size() || spec.shape.empty())
    throw KernelUnsupported("strided copy: one stride per dim");
  isa::ProgramBuilder builder("strided_copy", config.generation);
  uint32_t x = builder.hbm("x", spec.dtype, {uint32_t(spec.src_elements)}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, detail::to_u32(spec.shape), isa::AllocationRole::output);
  const std::vector<int64_t> dst_strides = row_major_strides(spec.shape);
  std::vector<detail::CopyDim> dims;
  for (size_t d = 0; d < spec.shape.size(); ++d) dims.push_back({spec.shape[d], spec.src_strides[d], dst_strides[d]});
  detail::strided_copy(KernelContext{builder, config, "", core, cores}, x, 0, y, 0, dims);
  return builder.finish();
}

isa::Program flip_program(const FlipSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("flip", config.generation);
  uint32_t x = builder.hbm("x", spec.dtype, {uint32_t(spec.elements)}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, {uint32_t(spec.elements)}, isa::AllocationRole::output);
  detail::strided_copy(KernelContext{builder, config, "", core, cores}, x, spec.src_offset, y, 0, spec.dims);
  return builder.finish();
}

// ---- concat ----

std::vector<int64_t> concat_shape(const ConcatSpec& spec) {
  if (spec.shapes.empty()) throw KernelUnsupported("concat: no inputs");
  std::vector<int64_t> out = spec.shapes[0];
  if (spec.dim < 0 || spec.dim >= int64_t(out.size())) throw KernelUnsupported("concat: dim out of range");
  for (size_t k = 1; k < spec.shapes.size(); ++k) {
    const auto& s = spec.shapes[k];
    for (size_t d = 0; d < out.size(); ++d) {
      if (s.size() != out.size() || (int64_t(d) != spec.dim && s[d] != out[d])) {
        throw KernelUnsupported("concat: shapes differ outside dim " + std::to_string(spec.dim));
      }
    }
    out[size_t(spec.dim)] += s[size_t(spec.dim)];
  }
  return out;
}

void build_concat(const KernelContext& ctx, const ConcatSpec& spec, const std::vector<uint32_t>& inputs, uint32_t y) {
  std::vector<int64_t> out = concat_shape(spec);
  const size_t d = size_t(spec.dim);
  int64_t outer = 1, after = 1;
  for (size_t i = 0; i < d; ++i) outer *= out[i];
  for (size_t i = d + 1; i < out.size(); ++i) after *= out[i];
  const int64_t out_row = out[d] * after;
  int64_t offset = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t row = spec.shapes[k][d] * after;  // contiguous in both the input and the output
    if (row > 0 && outer > 0) {
      // Inputs start on different queues so their first transfers run side by side.
      detail::strided_copy(ctx, inputs[k], 0, y, offset, {{outer, row, out_row}, {row, 1, 1}}, int64_t(k % 4));
    }
    offset += row;
  }
}

isa::Program concat_program(const ConcatSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("concat", config.generation);
  std::vector<uint32_t> inputs;
  for (size_t k = 0; k < spec.shapes.size(); ++k) {
    inputs.push_back(builder.hbm("x" + std::to_string(k), spec.dtype, detail::to_u32(spec.shapes[k]),
                                 isa::AllocationRole::input));
  }
  uint32_t y = builder.hbm("y", spec.dtype, detail::to_u32(concat_shape(spec)), isa::AllocationRole::output);
  build_concat(KernelContext{builder, config, "", core, cores}, spec, inputs, y);
  return builder.finish();
}

// ---- embedding gather ----

void build_embedding(const KernelContext& ctx, const EmbeddingSpec& spec, uint32_t ids, uint32_t table, uint32_t y) {
  const int64_t P = ctx.partitions();
  const int64_t esize = dtype_size_bytes(spec.dtype);
  const int64_t width = std::max<int64_t>(1, std::min({spec.dim, detail::kTargetDmaBytesPerPartition / esize, isa::kMaxApDimSize}));
  detail::Ring idx = detail::make_ring(ctx, "emb_idx", spec.index_dtype, 1);
  detail::Ring rows = detail::make_ring(ctx, "emb_rows", spec.dtype, width);
  int64_t slot = 0;
  for (const Range& r : my_share(ctx, tiles(spec.num_ids, P))) {  // split across cores by row tiles
    isa::AccessPattern ids_tile = sb2(ctx, idx[slot], r.size, 1);
    dma(ctx, ids_tile, hbm_ap(ctx, ids, r.begin, {{1, uint32_t(r.size)}, {1, 1}}), detail::kConstQueue);
    for (const Range& c : tiles(spec.dim, width)) {
      isa::AccessPattern dst = sb2(ctx, rows[slot], r.size, c.size);
      // Gathers alternate between two queues: each one's descriptor generation then overlaps the
      // other's transfer.
      ctx.builder.emit(isa::Opcode::dma_gather)
          .tensor("dst", dst)
          .tensor("src", hbm_ap(ctx, table, c.begin, {{spec.dim, uint32_t(spec.vocab)}, {1, uint32_t(c.size)}}))
          .tensor("indices", ids_tile)
          .imm("queue", double(detail::kLoadQueue + (slot % 2) * 3));
      dma(ctx, hbm_ap(ctx, y, r.begin * spec.dim + c.begin, {{spec.dim, uint32_t(r.size)}, {1, uint32_t(c.size)}}), dst,
          detail::kStoreQueue);
      ++slot;
    }
  }
}

isa::Program embedding_program(const EmbeddingSpec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores) {
  isa::ProgramBuilder builder("embedding", config.generation);
  uint32_t ids = builder.hbm("ids", spec.index_dtype, {uint32_t(spec.num_ids)}, isa::AllocationRole::input);
  uint32_t table = builder.hbm("table", spec.dtype, {uint32_t(spec.vocab), uint32_t(spec.dim)}, isa::AllocationRole::input);
  uint32_t y = builder.hbm("y", spec.dtype, {uint32_t(spec.num_ids), uint32_t(spec.dim)}, isa::AllocationRole::output);
  build_embedding(KernelContext{builder, config, "", core, cores}, spec, ids, table, y);
  return builder.finish();
}

}  // namespace trnsim::kernels
