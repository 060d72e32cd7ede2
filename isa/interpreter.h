// The functional interpreter: runs a program's instructions in program order on a CoreState,
// with the hardware's numerics. The timing model (sim/) schedules the same instructions.
#pragma once

#include <cstdint>

#include "config/hardware_config.h"
#include "isa/core_state.h"
#include "isa/execution_limits.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

struct InterpreterOptions {
  numerics::RoundingMode rounding = numerics::RoundingMode::nearest_even;
  uint64_t stochastic_seed = 0x5eed;  // stochastic rounding is deterministic for a given seed
  unsigned host_threads = 0;          // 0 = $TRNSIM_HOST_THREADS or the host's cores; results do not depend on it
  // Host threads kept by the caller across runs (not owned); nullptr = a pool of host_threads for this run.
  HostWorkers* workers = nullptr;
  // Bounds on a program with control flow (isa/execution_limits.h: defaults and why).
  ExecutionLimits limits;
};

// The stochastic-rounding seed of core `core` in a simulation seeded with `seed`: each core draws its own stream.
inline uint64_t core_stochastic_seed(uint64_t seed, uint32_t core) { return seed + core; }

// Runs every instruction (following loop_begin / while_begin, isa/control_flow.h); an instruction whose operands break a rule raises IsaError naming it.
void interpret(const Program& program, CoreState& state, const HardwareConfig& config,
               const InterpreterOptions& options = {});

// Runs one instruction (used by interpret and by the timing model when values are on).
void execute_instruction(const Instruction& inst, ExecContext& context);

}  // namespace trnsim::isa
