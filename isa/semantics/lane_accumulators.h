// The accumulator registers of an engine's lanes (isa/core_state.h: one fp32 per lane of the Vector
// and of the Scalar engine), shared by the semantics that read or leave reductions there (reduce_cmd).
#pragma once

#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

// The registers of the lanes `ap`'s partitions run on; `engine` names the engine in the error.
inline float* lane_registers(std::vector<float>& registers, ExecContext& ctx, const AccessPattern& ap,
                             const char* engine) {
  uint32_t first = ctx.state.first_partition(ap);
  if (size_t{first} + ap.partitions() > registers.size()) {
    throw IsaError("partitions " + std::to_string(first) + ".." + std::to_string(first + ap.partitions() - 1) +
                   " have no " + engine + " engine lane (the engine has " + std::to_string(registers.size()) + ")");
  }
  return registers.data() + first;
}

}  // namespace trnsim::isa
