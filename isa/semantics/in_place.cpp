#include "isa/semantics/in_place.h"

namespace trnsim::isa {
namespace {

bool ranges_meet(uint64_t first_a, uint64_t count_a, uint64_t first_b, uint64_t count_b) {
  return first_a < first_b + count_b && first_b < first_a + count_a;
}

// Identical (same elements in the same order) or disjoint; a partial overlap would let dst overwrite a source
// element before it is read.
bool identical_or_disjoint(const CoreState::Fp32Rows& a, const CoreState::Fp32Rows& b) {
  if (a.memory != b.memory) return true;
  if (a.first_partition == b.first_partition && a.first_byte == b.first_byte) return true;
  return !ranges_meet(a.first_partition, a.partitions, b.first_partition, b.partitions) ||
         !ranges_meet(a.first_byte, a.row_bytes, b.first_byte, b.row_bytes);
}

}  // namespace

bool elementwise_in_place(ExecContext& ctx, const AccessPattern& dst,
                          std::initializer_list<const AccessPattern*> sources, InPlaceRows& rows) {
  if (sources.size() > rows.src.size()) return false;
  size_t i = 0;
  for (const AccessPattern* source : sources) {
    if (!source->present()) continue;
    CoreState::Fp32Rows& s = rows.src[i++];
    if (!ctx.state.fp32_rows_in_place(*source, /*for_write=*/false, s)) return false;
  }
  CoreState::Fp32Rows probe;
  if (!ctx.state.fp32_rows_in_place(dst, /*for_write=*/false, probe)) return false;
  for (size_t k = 0; k < i; ++k) {
    if (rows.src[k].partitions != probe.partitions || rows.src[k].row_bytes != probe.row_bytes) return false;
    if (!identical_or_disjoint(probe, rows.src[k])) return false;
  }
  for (const AccessPattern* source : sources) {
    if (source->present()) ctx.state.set_psum_accumulating(*source, false);
  }
  ctx.state.fp32_rows_in_place(dst, /*for_write=*/true, rows.dst);
  ctx.state.set_psum_accumulating(dst, false);
  return true;
}

}  // namespace trnsim::isa
