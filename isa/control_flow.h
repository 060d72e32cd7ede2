// Structured control flow of a program (loop_begin / loop_end, while_begin / while_end, the register
// file they read) and its expansion into the straight-line instruction stream the program executes.
//
// The interpreter runs control flow directly (interpret). The timing model schedules a straight-line
// stream: sim::simulate expands a program with control flow first (expand_control_flow) and schedules the
// executed instructions, each keeping its source_line; the executed loop_begin / loop_end / while_begin /
// while_end stay in the stream as sequencer instructions of their own cost.
//
// Operands addressed by a register (NKI scalar_offset) are resolved in the expanded stream: each executed
// instruction carries the offset the register held when it issued.
//
// When a trip count, condition or dynamic offset can depend on tensor values (a register_load), the
// expansion runs the values: it needs a CoreState holding the inputs, also for a timing-only run.
// Otherwise registers come from immediates only and the expansion needs no values.
//
// Simplification (stated here, where it lives): the timing of the expanded stream is that of the same
// instructions written out by hand; a branch resolved on a register that a register_load fills costs
// its sequencer instruction but does not hold back the instructions after it on other engines (the
// sequencers are modelled as resolving branches ahead, as with an always-right prediction).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "isa/execution_limits.h"
#include "isa/program.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {

using RegisterFile = std::array<int32_t, kRegisterCount>;

bool is_control_opcode(Opcode opcode);          // loop_begin, loop_end, while_begin, while_end
bool has_control_flow(const Program& program);  // any control instruction
bool has_dynamic_offsets(const Program& program);  // any operand addressed by a register (scalar_offset)
// Whether the timing model needs the expanded stream: control flow or dynamic offsets.
bool needs_expansion(const Program& program);
// Whether trip counts, conditions or dynamic offsets may depend on tensor values: needs_expansion and a
// register_load.
bool control_depends_on_values(const Program& program);

// `inst` with every dynamic operand (AccessPattern::offset_register) made static: the register's value added to its
// offset. The resolved pattern must stay inside its tensor (NKI oob_mode.error): else IsaError [dynamic-offset-bounds].
Instruction resolve_dynamic_offsets(const Program& program, const Instruction& inst, const RegisterFile& registers);
bool has_dynamic_operand(const Instruction& inst);

// For every control instruction, the index of its partner (begin -> end, end -> begin); -1 elsewhere.
// Unbalanced or crossed nesting is an IsaError naming the instruction.
std::vector<int64_t> match_control_flow(const Program& program);

// Calls `execute(index)` for every instruction in the order the program executes them, following the
// control instructions with the registers in `registers` (which `execute` may change: it runs each
// instruction before its control decision is taken). Past `limits` it throws IsaError [execution-limit]; a
// loop_begin whose count alone would pass the instruction budget is refused before its first iteration, and a
// negative count_reg is an IsaError [loop-count].
void walk_control_flow(const Program& program, RegisterFile& registers, const std::function<void(size_t)>& execute,
                       const ExecutionLimits& limits = {});

// The dtypes register_load / register_store move: the integers of 32 bits or fewer.
bool is_register_dtype(DType dtype);

// The register a reg operand names; IsaError (rule register-index) when it is out of range.
int32_t& register_operand(const Instruction& inst, const char* operand, RegisterFile& registers);

// The registers `inst` reads (its reg operands other than a written dst, and the registers its resolved dynamic
// operands came from) and writes (the dst of register_move / add / sub / mul / compare / load). Returns the counts;
// at most kMaxRegisterOperands each.
constexpr int kMaxRegisterOperands = 8;
struct RegisterUse {
  int reads = 0, writes = 0;
  std::array<int8_t, kMaxRegisterOperands> read{}, written{};
};
RegisterUse register_use(const Instruction& inst);

// The register instructions that need no memory (register_move, register_add, register_sub, register_compare,
// rank_id) on a register file; false for any other opcode. `rank`: the executing core's rank, its position among the
// cores of the simulation (what rank_id reads).
bool execute_register_only(const Instruction& inst, RegisterFile& registers, uint32_t rank = 0);

// The straight-line program `program` executes: same name, generation and allocations, the executed
// instructions in order. With `values` every executed instruction is also run on its state (the results equal
// interpret's); without, the program's control must not depend on values (IsaError otherwise).
// `rank`: the core's rank (rank_id), as in execute_register_only; with `values`, values->rank.
// `at_core_barrier` (optional) is called before each executed core_barrier: where the programs of cores sharing HBM,
// expanded together, hand over to one another (sim/simulator.cpp).
Program expand_control_flow(const Program& program, ExecContext* values, uint32_t rank = 0,
                            const std::function<void()>& at_core_barrier = {}, const ExecutionLimits& limits = {});

}  // namespace trnsim::isa
