// Moving elements bit for bit through the interpreter's fp32 tiles: a same-width stand-in dtype
// whose fp32 conversion is exact (uint8 / uint16 / fp32), shared by the semantics that keep or
// copy a destination's bits (tensor_copy, tensor_copy_predicated, dropout).
#pragma once

#include "isa/numerics/float_format.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

// The bit-preserving stand-in for a dtype (fp32 itself for 4-byte types); false for the packed MX types.
inline bool bit_alias(DType dtype, DType& alias) {
  if (numerics::element_bytes(dtype) != dtype_size_bytes(dtype)) return false;
  switch (dtype_size_bytes(dtype)) {
    case 1: alias = DType::uint8; return true;
    case 2: alias = DType::uint16; return true;
    case 4: alias = DType::fp32; return true;
    default: return false;
  }
}

// Writes `tile` to dst: as raw bits through `aliased` (dst seen as its bit_alias dtype) when
// `as_bits`, else through dst's numerics. Either way the write ends a PSUM accumulation group.
inline void write_aliased(ExecContext& ctx, const AccessPattern& dst, const AccessPattern& aliased, const Tile& tile,
                          bool as_bits) {
  if (as_bits) {
    ctx.state.write(aliased, tile);
    ctx.state.set_psum_accumulating(aliased, false);
  } else {
    ctx.write(dst, tile);
  }
}

}  // namespace trnsim::isa
