// DMA semantics: copies between HBM and SBUF (or SBUF and SBUF) with casts through fp32, the
// read-add-write form, and the DMA transpose.
#include <cstring>

#include "isa/isa_error.h"
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
    ctx.state.copy_elements(dst, src);
    ctx.state.set_psum_accumulating(dst, false);
    return;
  }
  // Casts go through fp32, as the DMA engines compute (A-V2). Element order is row-major over
  // (partition, free dims) on both sides; reshape accordingly.
  Tile values = ctx.state.read(src);
  values.partitions = dst.partitions();
  values.free = dst.free_elements();
  if (add) {
    Tile previous = ctx.state.read(dst);
    for (size_t i = 0; i < values.values.size(); ++i) values.values[i] += previous.values[i];
  }
  ctx.state.write(dst, values, ctx.rounding, ctx.rng);
}

void exec_dma_transpose(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  Tile data = ctx.state.read(inst.tensor("src"));
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

// Synchronisation has no effect on values: the interpreter already runs in program order.
void exec_sem_signal(const Instruction&, ExecContext&) {}
void exec_sem_wait(const Instruction&, ExecContext&) {}
void exec_barrier(const Instruction&, ExecContext&) {}

}  // namespace trnsim::isa
