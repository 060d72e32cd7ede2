// Element-wise instructions computed row by row straight between their operands in SBUF/PSUM, skipping the
// whole-tile fp32 copies of ExecContext::read / write (on a large tile those copies cost more than the arithmetic).
// fp32 operands are used where they lie; other dtypes are converted one row at a time, with the numerics read()
// and write() apply.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "isa/semantics/semantics.h"

namespace trnsim::isa {

class ElementwiseRows {
 public:
  static constexpr size_t kMaxSources = 3;

  // True where dst and every present source are on-chip rows in place (CoreState::rows_in_place) of one shape, and
  // no row's result can land on source bytes not yet read: a source is dst element for element, disjoint from it,
  // or (when the results go through a row buffer) starts on dst's first partition, so dst row p meets only source
  // row p, read before it is written. On success the PSUM accumulation marks are cleared as read() and write()
  // clear them and dst is recorded as written; on failure nothing changed and the caller takes the tile path.
  bool init(ExecContext& ctx, const AccessPattern& dst, std::initializer_list<const AccessPattern*> sources);

  uint32_t partitions() const { return m_dst.partitions; }
  uint64_t free() const { return m_free; }

  // For each partition p in [first, end): compute(p, out, in, n) with in[k] source k's row p as fp32 and out the
  // fp32 row to store in dst's row p (n values). Rows are independent; a range may run on any host thread unless
  // stochastic rounding draws from the context's one stream (then for_rows runs them all, in order).
  template <class Compute>
  void rows(uint32_t first, uint32_t end, Compute&& compute);
  template <class Compute>
  void for_rows(ExecContext& ctx, Compute&& compute);

 private:
  CoreState::Rows m_dst;
  std::array<CoreState::Rows, kMaxSources> m_src{};
  size_t m_sources = 0;
  uint64_t m_free = 0;
  bool m_direct_out = false;  // dst is fp32 and may be written element by element as the sources are read
  numerics::RoundingMode m_rounding = numerics::RoundingMode::nearest_even;
  numerics::StochasticSource* m_rng = nullptr;
};

// An fp32 operand read where it lies, for instructions that only read it (reductions, statistics): the address of
// partition 0's first element and the distance between partitions in elements, with the PSUM accumulation marks
// cleared as read() clears them; nullptr (nothing changed) where the operand needs read().
const float* fp32_rows_to_read(ExecContext& ctx, const AccessPattern& ap, size_t& row_stride);

template <class Compute>
void ElementwiseRows::rows(uint32_t first, uint32_t end, Compute&& compute) {
  const size_t n = size_t(m_free);
  std::vector<float> buffer((m_sources + 1) * n);  // a row per converted source, and the results' row
  std::array<const float*, kMaxSources> in{};
  for (uint32_t p = first; p < end; ++p) {
    for (size_t k = 0; k < m_sources; ++k) {
      const CoreState::Rows& s = m_src[k];
      if (s.fp32_aligned()) {
        in[k] = reinterpret_cast<const float*>(s.row(p));
      } else {
        float* converted = buffer.data() + k * n;
        numerics::convert_to_fp32(s.dtype, s.row(p), converted, n);
        in[k] = converted;
      }
    }
    float* out = m_direct_out ? reinterpret_cast<float*>(m_dst.row(p)) : buffer.data() + m_sources * n;
    compute(p, out, in.data(), n);
    if (!m_direct_out) numerics::convert_from_fp32(m_dst.dtype, out, m_dst.row(p), n, m_rounding, m_rng);
  }
}

template <class Compute>
void ElementwiseRows::for_rows(ExecContext& ctx, Compute&& compute) {
  if (m_rounding == numerics::RoundingMode::stochastic && !m_direct_out) {
    rows(0, partitions(), compute);
    return;
  }
  for_row_ranges(ctx, partitions(), uint64_t(partitions()) * m_free,
                 [&](uint32_t first, uint32_t end) { rows(first, end, compute); });
}

}  // namespace trnsim::isa
