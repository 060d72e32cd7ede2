#include "isa/semantics/in_place.h"

namespace trnsim::isa {
namespace {

bool same_elements(const CoreState::Rows& a, const CoreState::Rows& b) {
  return a.memory == b.memory && a.first_partition == b.first_partition && a.first_byte == b.first_byte &&
         a.dtype == b.dtype;
}

}  // namespace

bool ElementwiseRows::init(ExecContext& ctx, const AccessPattern& dst,
                           std::initializer_list<const AccessPattern*> sources) {
  m_sources = 0;
  for (const AccessPattern* source : sources) {
    if (!source->present()) continue;
    if (m_sources == kMaxSources || !ctx.state.rows_in_place(*source, /*for_write=*/false, m_src[m_sources])) {
      return false;
    }
    ++m_sources;
  }
  CoreState::Rows probe;
  if (!ctx.state.rows_in_place(dst, /*for_write=*/false, probe)) return false;
  m_free = dst.free_elements();
  m_direct_out = probe.fp32_aligned();
  for (size_t k = 0; k < m_sources; ++k) {
    const CoreState::Rows& s = m_src[k];
    if (s.partitions != probe.partitions || s.row_bytes / dtype_size_bytes(s.dtype) != m_free) return false;
    if (probe.disjoint_from(s)) continue;
    if (same_elements(probe, s) && s.fp32_aligned()) continue;  // element i read, then written
    m_direct_out = false;
    if (s.memory != probe.memory || s.first_partition != probe.first_partition) return false;
  }
  for (const AccessPattern* source : sources) {
    if (source->present()) ctx.state.set_psum_accumulating(*source, false);
  }
  ctx.state.rows_in_place(dst, /*for_write=*/true, m_dst);
  ctx.state.set_psum_accumulating(dst, false);
  m_rounding = ctx.rounding;
  m_rng = ctx.rng;
  return true;
}

const float* fp32_rows_to_read(ExecContext& ctx, const AccessPattern& ap, size_t& row_stride) {
  CoreState::Rows rows;
  if (!ctx.state.rows_in_place(ap, /*for_write=*/false, rows) || !rows.fp32_aligned()) return nullptr;
  ctx.state.set_psum_accumulating(ap, false);
  row_stride = size_t(rows.row_stride_bytes) / sizeof(float);
  return reinterpret_cast<const float*>(rows.data);
}

}  // namespace trnsim::isa
