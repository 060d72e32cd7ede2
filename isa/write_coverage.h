// Static looks at what a program writes before it reads, for the values mode's shortcuts: memory that is
// provably overwritten, or provably never read before it is written, need not be zeroed first. Both answer false
// whenever a cheap look cannot tell (control flow, dynamic addresses, too many pieces): zeroing is always right.
#pragma once

#include <cstdint>
#include <vector>

#include "isa/program.h"

namespace trnsim::isa {

// Whether `program` writes every on-chip byte it reads before reading it: straight-line code where each read lies
// inside one earlier contiguous write of an instruction known to write its outputs whole. Then SBUF/PSUM left over
// from an earlier simulation are invisible to it.
bool reads_only_own_writes(const Program& program);

// Whether the programs (the cores of one launch, sharing HBM) write every element of HBM allocation `id` and none
// reads it: plain dma_copy writes (static addresses, no read-modify-write) that together cover it. Then a buffer
// bound as that allocation needs no zeroing first.
bool overwrites_whole(const std::vector<const Program*>& programs, uint32_t id);

}  // namespace trnsim::isa
