// DMA semantics: copies between HBM and SBUF (or SBUF and SBUF) with casts through fp32, the
// read-add-write form, the DMA transpose and the indirect row gather.
#include <algorithm>
#include <cstring>
#include <vector>
#include <string>

#include "isa/isa_error.h"
#include "isa/numerics/float_format.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

void exec_dma_copy(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  if (dst.elements() != src.elements()) {
    throw IsaError("dst has " + std::to_string(dst.elements()) + " elements but src has " +
                   std::to_string(src.elements()));
  }
  bool add = inst.scalar("dst_rmw_op") == 1;
  if (!add && src.dtype == dst.dtype) {
    // Without a cast a DMA moves bytes: exact for every dtype (32-bit integers beyond 2^24, NaN
    // payloads, packed MX slots), and no conversion work.
    ctx.state.copy_elements(dst, src, ctx.workers);
    ctx.state.set_psum_accumulating(dst, false);
    return;
  }
  // Casts go through fp32, as the DMA engines compute (A-V2). Element order is row-major over
  // (partition, free dims) on both sides; reshape accordingly.
  if (!add && ctx.state.cast_rows(dst, src, ctx.rounding, ctx.rng, ctx.workers)) {
    ctx.state.set_psum_accumulating(dst, false);
    return;
  }
  Tile values = ctx.state.read(src);
  values.partitions = dst.partitions();
  values.free = dst.free_elements();
  if (add) {
    Tile previous = ctx.state.read(dst);
    for (size_t i = 0; i < values.values.size(); ++i) values.values[i] += previous.values[i];
  }
  ctx.state.write(dst, values, ctx.rounding, ctx.rng);
  ctx.state.set_psum_accumulating(dst, false);  // a write ends an accumulation group, as the copy above
}

namespace {
void transpose_gathered_rows(const Instruction& inst, ExecContext& ctx);  // below, with the indirect DMA's helpers

// NKI's N-d DMA transpose: src's elements, row-major, are src_shape; dst's row-major elements are that array with
// its dims permuted by axes (dst dim i = src dim axes[i]).
void permute_transpose(const Instruction& inst, ExecContext& ctx, const Tile& data) {
  const AccessPattern& dst = inst.tensor("dst");
  const std::vector<int64_t>& shape = inst.list("src_shape");
  const std::vector<int64_t> axes = dma_transpose_axes(inst);
  const size_t rank = shape.size();
  uint64_t total = 1;
  for (int64_t n : shape) total *= uint64_t(n);
  if (total != data.values.size() || total != dst.elements()) {
    throw IsaError("src_shape holds " + std::to_string(total) + " elements but src has " +
                   std::to_string(data.values.size()) + " and dst " + std::to_string(dst.elements()));
  }
  // Row-major strides of src, taken in dst's dim order.
  std::vector<uint64_t> src_stride(rank, 1), dst_dims(rank), stride_by_dst(rank);
  for (size_t d = rank - 1; d > 0; --d) src_stride[d - 1] = src_stride[d] * uint64_t(shape[d]);
  for (size_t i = 0; i < rank; ++i) {
    dst_dims[i] = uint64_t(shape[size_t(axes[i])]);
    stride_by_dst[i] = src_stride[size_t(axes[i])];
  }
  Tile out(dst.partitions(), dst.free_elements());
  std::vector<uint64_t> index(rank, 0);
  uint64_t from = 0;
  for (uint64_t k = 0; k < total; ++k) {
    out.values[k] = data.values[from];
    for (size_t d = rank; d-- > 0;) {
      from += stride_by_dst[d];
      if (++index[d] < dst_dims[d]) break;
      from -= stride_by_dst[d] * dst_dims[d];
      index[d] = 0;
    }
  }
  ctx.state.write(dst, out, ctx.rounding, ctx.rng);
}
}  // namespace

void exec_dma_transpose(const Instruction& inst, ExecContext& ctx) {
  if (inst.has("indices")) {
    transpose_gathered_rows(inst, ctx);
    return;
  }
  const AccessPattern& dst = inst.tensor("dst");
  Tile data = ctx.state.read(inst.tensor("src"));
  if (!inst.list("src_shape").empty()) {
    permute_transpose(inst, ctx, data);
    return;
  }
  if (dst.partitions() != data.free || dst.free_elements() != data.partitions) {
    throw IsaError("dst must be [" + std::to_string(data.free) + ", " + std::to_string(data.partitions) +
                   "] to hold src.T");
  }
  Tile out(static_cast<uint32_t>(data.free), data.partitions);
  for (uint32_t p = 0; p < data.partitions; ++p) {
    for (uint64_t f = 0; f < data.free; ++f) out.at(static_cast<uint32_t>(f), p) = data.at(p, f);
  }
  ctx.state.write(dst, out, ctx.rounding, ctx.rng);
}

// row(p, index) for each partition p of `indices` (32-bit row indices, read as raw integers: exact beyond 2^24) in
// partition order; an index outside the `rows` of the table is an error naming it, as the DGE would fault on the
// address rather than touch another tensor, unless `skip_out_of_bounds` (oob_mode=skip): then row p does not move.
template <typename Row>
void for_each_row_index(const char* op, const AccessPattern& indices, uint32_t rows, bool skip_out_of_bounds,
                        ExecContext& ctx, Row&& row) {
  AccessPattern raw = indices;
  raw.dtype = DType::fp32;  // the 32-bit patterns, not converted values
  const Tile bits = ctx.state.read(raw);
  for (uint32_t p = 0; p < indices.partitions(); ++p) {
    const uint32_t pattern = numerics::float_bits(bits.values[p]);
    const int64_t index = indices.dtype == DType::int32 ? int64_t{static_cast<int32_t>(pattern)} : int64_t{pattern};
    if (index < 0 || index >= int64_t{rows}) {
      if (skip_out_of_bounds) continue;
      throw IsaError(std::string(op) + " index " + std::to_string(index) + " (partition " + std::to_string(p) +
                     ") is out of range for a table of " + std::to_string(rows) + " rows");
    }
    row(p, index);
  }
}

// The indices of an indirect DMA (dma_gather, dma_scatter): one row index per partition of the
// SBUF side (`side`, "dst" or "src"), read as raw 32-bit integers (exact beyond 2^24) and passed
// to row(p, index) in partition order; an index outside the table is an error naming it, as the
// DGE would fault on the address rather than touch another tensor, unless the instruction asks
// oob_mode=skip: then that partition's row does not move.
template <typename Row>
void for_each_indirect_row(const char* op, const char* side, const AccessPattern& indices, const AccessPattern& sbuf,
                           const AccessPattern& table, bool skip_out_of_bounds, ExecContext& ctx, Row&& row) {
  if (indices.dtype != DType::int32 && indices.dtype != DType::uint32) {
    throw IsaError("indices must be int32 or uint32, not " + std::string(dtype_name(indices.dtype)));
  }
  if (indices.partitions() != sbuf.partitions() || indices.free_elements() != 1) {
    throw IsaError("indices must be [" + std::to_string(sbuf.partitions()) + ", 1] (one row index per " + side +
                   " partition)");
  }
  if (sbuf.free_elements() != table.free_elements()) {
    throw IsaError(std::string(side) + " rows have " + std::to_string(sbuf.free_elements()) +
                   " elements but table rows have " + std::to_string(table.free_elements()));
  }
  for_each_row_index(op, indices, table.partitions(), skip_out_of_bounds, ctx, row);
}

namespace {

// dma_transpose with indices: row indices[p] of the table src becomes column p of dst (its rows read as
// for_each_indirect_row reads them), then written at once; a skipped index leaves its column as it was.
void transpose_gathered_rows(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  if (!inst.list("src_shape").empty()) {
    // NKI's 3-d / 4-d indirect transpose: the gathered rows [indices' partitions, a table row] are src_shape,
    // permuted as the direct form permutes (oob_mode=skip is refused by legality: a skipped row has no place).
    const AccessPattern& indices = inst.tensor("indices");
    Tile gathered(indices.partitions(), src.free_elements());
    for_each_row_index("gather-transpose", indices, src.partitions(), false, ctx, [&](uint32_t p, int64_t index) {
      AccessPattern row = src;
      row.offset += index * src.partition.stride;
      row.partition.size = 1;
      const Tile values = ctx.state.read(row);
      std::copy(values.values.begin(), values.values.end(), gathered.row(p));
    });
    permute_transpose(inst, ctx, gathered);
    return;
  }
  Tile out = ctx.state.read(dst);
  for_each_row_index("gather-transpose", inst.tensor("indices"), src.partitions(), inst.enum_is("oob_mode", "skip"),
                     ctx, [&](uint32_t p, int64_t index) {
                       AccessPattern row = src;
                       row.offset += index * src.partition.stride;
                       row.partition.size = 1;
                       const Tile values = ctx.state.read(row);
                       for (uint64_t f = 0; f < values.free; ++f) out.at(static_cast<uint32_t>(f), p) = values.at(0, f);
                     });
  ctx.state.write(dst, out, ctx.rounding, ctx.rng);
}

}  // namespace

// Indirect DMA (NKI's software-DGE gather): row p of dst receives row indices[p] of the table src.
void exec_dma_gather(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  const bool skip = inst.enum_is("oob_mode", "skip");
  for_each_indirect_row("gather", "dst", inst.tensor("indices"), dst, src, skip, ctx, [&](uint32_t p, int64_t index) {
    AccessPattern from = src, to = dst;
    from.offset += index * src.partition.stride;
    from.partition.size = 1;
    to.start_partition += p;
    to.partition.size = 1;
    if (from.dtype == to.dtype) {
      ctx.state.copy_elements(to, from);
    } else {
      ctx.state.write(to, ctx.state.read(from), ctx.rounding, ctx.rng);  // a cast through fp32, as dma_copy
    }
  });
  ctx.state.set_psum_accumulating(dst, false);
}

// Indirect store (the inverse of dma_gather): row p of src goes to row indices[p] of the table dst.
// Rows are applied one after another in partition order, so a repeated index is deterministic:
// the last row wins, or with dst_rmw_op=add the rows are summed in partition order (each add in
// fp32, rounded into dst's dtype, as dma_copy's read-add-write). An index outside the table is an
// error naming it (the DGE would fault on the address).
void exec_dma_scatter(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  const bool add = inst.scalar("dst_rmw_op") == 1;
  const bool skip = inst.enum_is("oob_mode", "skip");
  for_each_indirect_row("scatter", "src", inst.tensor("indices"), src, dst, skip, ctx, [&](uint32_t p, int64_t index) {
    AccessPattern from = src, to = dst;
    to.offset += index * dst.partition.stride;
    to.partition.size = 1;
    from.start_partition += p;
    from.partition.size = 1;
    if (!add && from.dtype == to.dtype) {
      ctx.state.copy_elements(to, from);
      return;
    }
    Tile values = ctx.state.read(from);
    if (add) {
      Tile previous = ctx.state.read(to);
      for (size_t i = 0; i < values.values.size(); ++i) values.values[i] += previous.values[i];
    }
    ctx.state.write(to, values, ctx.rounding, ctx.rng);
  });
}

// Synchronisation has no effect on values: the interpreter already runs in program order.
void exec_sem_signal(const Instruction&, ExecContext&) {}
void exec_sem_wait(const Instruction&, ExecContext&) {}
void exec_barrier(const Instruction&, ExecContext&) {}
// The cores' meeting is timing (sim/chip/core_barrier.h); in program order on each core nothing moves.
void exec_core_barrier(const Instruction&, ExecContext&) {}

// A collective's values move at the ranks' meeting (sim/system/collective_rendezvous.h), which sees every member's
// memory; in one rank's program order it changes nothing.
void exec_all_reduce(const Instruction&, ExecContext&) {}
void exec_all_gather(const Instruction&, ExecContext&) {}
void exec_reduce_scatter(const Instruction&, ExecContext&) {}
void exec_all_to_all(const Instruction&, ExecContext&) {}
void exec_collective_permute(const Instruction&, ExecContext&) {}
void exec_all_to_all_v(const Instruction&, ExecContext&) {}
void exec_all_gather_v(const Instruction&, ExecContext&) {}
// sendrecv's values move at the two ranks' rendezvous (sim/system/collective_rendezvous.h), as a collective's.
void exec_sendrecv(const Instruction&, ExecContext&) {}

}  // namespace trnsim::isa
