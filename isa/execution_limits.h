// Bounds on one walk of a program's control flow (interpret, expand_control_flow): a loop that never ends is an
// IsaError [execution-limit] after a bounded amount of work, never a hang or an exhausted host.
#pragma once

#include <cstdint>

namespace trnsim::isa {

// Simulator limits (assumed, not hardware). Set per run through InterpreterOptions::limits (so
// SimOptions::interpreter.limits for the timing model) and on the command line by
// `trnsim run --max-instructions N --max-host-seconds S`.
struct ExecutionLimits {
  // Executed instructions, control instructions included: 2^24, far beyond any kernel trnsim runs today. The timing
  // model holds the expanded stream (a few hundred bytes per instruction), so this also bounds its host memory.
  uint64_t max_instructions = uint64_t{1} << 24;
  // Host seconds of one walk (wall clock), for loops whose instructions are each slow: 2^24 instructions of 1 ms
  // would be hours. Checked every kHostTimeCheckInterval instructions.
  double max_host_seconds = 600;
};

constexpr uint64_t kHostTimeCheckInterval = 1024;

}  // namespace trnsim::isa
