// Element-wise instructions computed straight from their sources into dst in SBUF/PSUM, skipping the fp32 tile
// copies of ExecContext::read / write (on a large tile those copies cost more than the arithmetic).
#pragma once

#include <array>
#include <initializer_list>

#include "isa/semantics/semantics.h"

namespace trnsim::isa {

struct InPlaceRows {
  CoreState::Fp32Rows dst;
  std::array<CoreState::Fp32Rows, 3> src{};  // in the order the sources were given
};

// True where dst and every source are fp32 rows in place (CoreState::fp32_rows_in_place) of one shape and dst
// either is a source element for element or shares no byte with it: element i of dst then depends only on element
// i of each source, so computing in place gives what reading every source first would. On success the PSUM
// accumulation marks are cleared as read() and write() clear them and dst is recorded as written; on failure
// nothing changed and the caller takes the general path. An absent source (not present()) is skipped.
bool elementwise_in_place(ExecContext& ctx, const AccessPattern& dst,
                          std::initializer_list<const AccessPattern*> sources, InPlaceRows& rows);

}  // namespace trnsim::isa
