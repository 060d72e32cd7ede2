#include "isa/control_flow.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "isa/interpreter.h"
#include "isa/isa_error.h"

namespace trnsim::isa {
namespace {

// "2^24" for a power of two, else the number.
std::string count_text(uint64_t count) {
  if (count == 0 || (count & (count - 1)) != 0) return std::to_string(count);
  int power = 0;
  while ((uint64_t{1} << power) != count) ++power;
  return "2^" + std::to_string(power);
}

std::string where(const Program& program, size_t index) {
  const Instruction& inst = program.instructions[index];
  return "instruction " + std::to_string(index) +
         (inst.source_line ? " (line " + std::to_string(inst.source_line) + ")" : "") + " " + inst.spec().name;
}

}  // namespace

bool is_register_dtype(DType d) {
  return d == DType::int32 || d == DType::int16 || d == DType::int8 || d == DType::uint32 || d == DType::uint16 ||
         d == DType::uint8;
}

int32_t& register_operand(const Instruction& inst, const char* operand, RegisterFile& registers) {
  double index = inst.scalar(operand);
  if (!(index >= 0 && index < kRegisterCount) || index != std::floor(index)) {  // NaN fails the first test
    throw IsaError(std::string(operand) + ": register r" + std::to_string(int64_t(index)) + " does not exist (r0..r" +
                   std::to_string(kRegisterCount - 1) + ") [register-index]");
  }
  return registers[size_t(index)];
}

namespace {

bool is_begin(Opcode opcode) { return opcode == Opcode::loop_begin || opcode == Opcode::while_begin; }
Opcode end_of(Opcode begin) { return begin == Opcode::loop_begin ? Opcode::loop_end : Opcode::while_end; }

}  // namespace

bool is_control_opcode(Opcode opcode) {
  return opcode == Opcode::loop_begin || opcode == Opcode::loop_end || opcode == Opcode::while_begin ||
         opcode == Opcode::while_end;
}

bool has_control_flow(const Program& program) {
  for (const Instruction& inst : program.instructions) {
    if (is_control_opcode(inst.opcode)) return true;
  }
  return false;
}

bool has_dynamic_operand(const Instruction& inst) {
  for (const AccessPattern& ap : inst.tensors) {
    if (ap.present() && ap.dynamic()) return true;
  }
  return false;
}

bool has_dynamic_offsets(const Program& program) {
  for (const Instruction& inst : program.instructions) {
    if (has_dynamic_operand(inst)) return true;
  }
  return false;
}

bool needs_expansion(const Program& program) { return has_control_flow(program) || has_dynamic_offsets(program); }

Instruction resolve_dynamic_offsets(const Program& program, const Instruction& inst, const RegisterFile& registers) {
  Instruction resolved = inst;
  const InstructionSpec& spec = inst.spec();
  const bool skip_out_of_bounds = inst.has("oob_mode") && inst.enum_is("oob_mode", "skip");
  bool skipped = false;
  for (const OperandSpec& operand : spec.operands) {
    if (operand.tensor_slot < 0) continue;
    AccessPattern& ap = resolved.tensors[size_t(operand.tensor_slot)];
    if (!ap.present() || !ap.dynamic()) continue;
    const std::string reg = "r" + std::to_string(ap.offset_register);
    // The parsers check the index; a program built in C++ may not have.
    if (size_t(ap.offset_register) >= registers.size()) {
      throw IsaError("operand '" + operand.name + "': scalar_offset " + reg + " does not exist (r0..r" +
                     std::to_string(kRegisterCount - 1) + ") [register-index]");
    }
    const int32_t value = registers[size_t(ap.offset_register)];
    ap.offset += value;
    ap.resolved_register = ap.offset_register;
    ap.offset_register = -1;
    const Allocation& a = program.allocation(ap);
    const bool hbm = a.space == MemorySpace::hbm;
    const auto [low, high] = ap.element_range(/*with_partition=*/hbm);
    // The tensor's elements (HBM) or elements per partition (on chip), in the operand's dtype.
    const int64_t extent = int64_t((hbm ? a.total_elements() : a.elements_per_partition()) * dtype_size_bytes(a.dtype) /
                                   dtype_size_bytes(ap.dtype));
    if (ap.elements() > 0 && (low < 0 || high >= extent)) {
      if (skip_out_of_bounds) {
        skipped = true;
        ap.offset -= value;  // a skipped access selects nothing: its static part, never outside, stands in
        continue;
      }
      throw IsaError("operand '" + operand.name + "': scalar_offset " + reg + " = " + std::to_string(value) +
                     " puts elements " + std::to_string(low) + ".." + std::to_string(high) + " outside tensor '" +
                     a.name + "' (" + std::to_string(extent) + (hbm ? " elements" : " elements per partition") +
                     ") [dynamic-offset-bounds]");
    }
  }
  if (skipped) {
    // oob_mode=skip: the instruction moves nothing (its access patterns select no element); it still issues and
    // costs its fixed overhead.
    for (AccessPattern& ap : resolved.tensors) {
      if (ap.present()) ap.partition.size = 0;
    }
  }
  return resolved;
}

bool control_depends_on_values(const Program& program) {
  bool loads = false;
  for (const Instruction& inst : program.instructions) loads = loads || inst.opcode == Opcode::register_load;
  return loads && needs_expansion(program);
}

std::vector<int64_t> match_control_flow(const Program& program) {
  std::vector<int64_t> partner(program.instructions.size(), -1);
  std::vector<size_t> open;
  for (size_t i = 0; i < program.instructions.size(); ++i) {
    Opcode opcode = program.instructions[i].opcode;
    if (is_begin(opcode)) {
      open.push_back(i);
    } else if (opcode == Opcode::loop_end || opcode == Opcode::while_end) {
      if (open.empty())
        throw IsaError(where(program, i) + ": no open " +
                       instruction_spec(opcode == Opcode::loop_end ? Opcode::loop_begin : Opcode::while_begin).name +
                       " to end [control-nesting]");
      size_t begin = open.back();
      if (end_of(program.instructions[begin].opcode) != opcode) {
        throw IsaError(where(program, i) + ": ends the " + program.instructions[begin].spec().name + " of " +
                       where(program, begin) + "; it needs " +
                       instruction_spec(end_of(program.instructions[begin].opcode)).name + " [control-nesting]");
      }
      open.pop_back();
      partner[begin] = int64_t(i);
      partner[i] = int64_t(begin);
    }
  }
  if (!open.empty()) throw IsaError(where(program, open.back()) + ": never ended [control-nesting]");
  return partner;
}

RegisterUse register_use(const Instruction& inst) {
  RegisterUse use;
  const InstructionSpec& spec = inst.spec();
  const bool sets_dst = inst.opcode == Opcode::register_move || inst.opcode == Opcode::register_add ||
                        inst.opcode == Opcode::register_sub || inst.opcode == Opcode::register_mul ||
                        inst.opcode == Opcode::register_compare || inst.opcode == Opcode::register_load ||
                        inst.opcode == Opcode::rank_id;
  for (size_t i = 0; i < spec.operands.size(); ++i) {
    const OperandSpec& operand = spec.operands[i];
    if (operand.kind != OperandKind::reg || !((inst.present_mask >> i) & 1u)) continue;
    const double index = inst.scalars[size_t(operand.scalar_slot)];
    if (!(index >= 0 && index < kRegisterCount)) continue;  // legality reports it
    const bool write = sets_dst && operand.name == "dst";
    if (write && use.writes < kMaxRegisterOperands) use.written[size_t(use.writes++)] = int8_t(index);
    if (!write && use.reads < kMaxRegisterOperands) use.read[size_t(use.reads++)] = int8_t(index);
  }
  for (const AccessPattern& ap : inst.tensors) {
    const int8_t reg = ap.dynamic() ? ap.offset_register : ap.resolved_register;
    if (ap.present() && reg >= 0 && use.reads < kMaxRegisterOperands) use.read[size_t(use.reads++)] = reg;
  }
  return use;
}

namespace {

// rank_id's value on the core of rank `rank`: the rank itself, or with a group the rank `back` places before it
// around its rank-list. IsaError [collective-group] when the group does not hold the rank.
int32_t rank_id_value(const Instruction& inst, RegisterFile& registers, uint32_t rank) {
  const std::vector<int64_t>& group = inst.list("group");
  if (group.empty()) return int32_t(rank);
  const size_t size = inst.scalar("group_size") > 0 ? size_t(inst.scalar("group_size")) : group.size();
  int64_t back = int64_t(inst.scalar("back"));
  if (inst.has("back_reg")) {
    back += register_operand(inst, "back_reg", registers);
  }
  for (size_t first = 0; first + size <= group.size(); first += size) {
    for (size_t i = 0; i < size; ++i) {
      if (group[first + i] != int64_t(rank)) continue;
      const int64_t n = int64_t(size);
      const int64_t position = ((int64_t(i) - back) % n + n) % n;
      return int32_t(group[first + size_t(position)]);
    }
  }
  throw IsaError("rank " + std::to_string(rank) + " is in no rank-list of the group [collective-group]");
}

}  // namespace

bool execute_register_only(const Instruction& inst, RegisterFile& registers, uint32_t rank) {
  switch (inst.opcode) {
    case Opcode::rank_id:
      register_operand(inst, "dst", registers) = rank_id_value(inst, registers, rank);
      return true;
    case Opcode::register_move:
      register_operand(inst, "dst", registers) =
          inst.has("src") ? register_operand(inst, "src", registers) : int32_t(int64_t(inst.scalar("imm")));
      return true;
    case Opcode::register_add: {
      uint32_t a = uint32_t(register_operand(inst, "src", registers));
      uint32_t b = inst.has("src2") ? uint32_t(register_operand(inst, "src2", registers))
                                    : uint32_t(int64_t(inst.scalar("imm")));
      register_operand(inst, "dst", registers) = int32_t(a + b);  // two's complement wrap
      return true;
    }
    case Opcode::register_sub: {
      uint32_t a = uint32_t(register_operand(inst, "src", registers));
      uint32_t b = inst.has("src2") ? uint32_t(register_operand(inst, "src2", registers))
                                    : uint32_t(int64_t(inst.scalar("imm")));
      register_operand(inst, "dst", registers) = int32_t(a - b);
      return true;
    }
    case Opcode::register_mul: {
      uint32_t a = uint32_t(register_operand(inst, "src", registers));
      uint32_t b = inst.has("src2") ? uint32_t(register_operand(inst, "src2", registers))
                                    : uint32_t(int64_t(inst.scalar("imm")));
      register_operand(inst, "dst", registers) = int32_t(a * b);  // low 32 bits of the product
      return true;
    }
    case Opcode::register_compare: {
      int32_t a = register_operand(inst, "src", registers);
      int32_t b = inst.has("src2") ? register_operand(inst, "src2", registers) : int32_t(int64_t(inst.scalar("imm")));
      bool holds = false;
      switch (int(inst.scalar("op"))) {  // the enum's order in instructions.def
        case 0:
          holds = a == b;
          break;
        case 1:
          holds = a != b;
          break;
        case 2:
          holds = a < b;
          break;
        case 3:
          holds = a <= b;
          break;
        case 4:
          holds = a > b;
          break;
        default:
          holds = a >= b;
          break;
      }
      register_operand(inst, "dst", registers) = holds ? 1 : 0;
      return true;
    }
    default:
      return false;
  }
}

void walk_control_flow(const Program& program, RegisterFile& registers, const std::function<void(size_t)>& execute,
                       const ExecutionLimits& limits) {
  const std::vector<Instruction>& code = program.instructions;
  const std::vector<int64_t> partner = match_control_flow(program);
  struct Loop {
    size_t begin;
    int64_t remaining;
  };
  std::vector<Loop> loops;
  uint64_t executed = 0;
  const auto start = std::chrono::steady_clock::now();
  const std::string budget = "more than " + count_text(limits.max_instructions) +
                             " instructions (the instruction budget: trnsim run --max-instructions, "
                             "ExecutionLimits::max_instructions)";
  for (size_t pc = 0; pc < code.size();) {
    if (++executed > limits.max_instructions) {
      throw IsaError(where(program, pc) + ": the program executes " + budget +
                     " (a while loop whose condition never clears?) [execution-limit]");
    }
    if (executed % kHostTimeCheckInterval == 0) {
      const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (host_s > limits.max_host_seconds) {
        throw IsaError(where(program, pc) + ": the program ran " + std::to_string(executed) +
                       " instructions in more than " + std::to_string(limits.max_host_seconds) +
                       " s of host time (the host-time budget: trnsim run --max-host-seconds, "
                       "ExecutionLimits::max_host_seconds) [execution-limit]");
      }
    }
    execute(pc);
    const Instruction& inst = code[pc];
    try {
      switch (inst.opcode) {
        case Opcode::loop_begin: {
          int64_t count = 0;
          if (inst.has("count_reg")) {
            count = register_operand(inst, "count_reg", registers);
            // A register holds a computed count: a negative one is a wrong computation, not an empty loop.
            if (count < 0) {
              throw IsaError("count_reg r" + std::to_string(int64_t(inst.scalar("count_reg"))) + " holds " +
                             std::to_string(count) + ": a loop count must be 0 or more [loop-count]");
            }
          } else {
            count = int64_t(inst.scalar("count"));
          }
          // Every iteration executes at least its loop_end: a count past the rest of the budget is refused now,
          // before the work.
          if (count > 0 && uint64_t(count) > limits.max_instructions - std::min(executed, limits.max_instructions)) {
            throw IsaError("count " + std::to_string(count) + " runs at least " + std::to_string(count) +
                           " instructions after the " + std::to_string(executed) + " executed so far: " + budget +
                           " [execution-limit]");
          }
          if (count <= 0) {
            pc = size_t(partner[pc]) + 1;
            continue;
          }
          loops.push_back({pc, count});
          ++pc;
          continue;
        }
        case Opcode::loop_end: {
          Loop& loop = loops.back();
          if (--loop.remaining > 0) {
            pc = loop.begin + 1;
          } else {
            loops.pop_back();
            ++pc;
          }
          continue;
        }
        case Opcode::while_begin:
          pc = register_operand(inst, "cond", registers) != 0 ? pc + 1 : size_t(partner[pc]) + 1;
          continue;
        case Opcode::while_end: {
          size_t begin = size_t(partner[pc]);
          pc = register_operand(code[begin], "cond", registers) != 0 ? begin + 1 : pc + 1;
          continue;
        }
        default:
          ++pc;
      }
    } catch (const IsaError& e) {
      throw IsaError(where(program, pc) + ": " + e.what());
    }
  }
}

Program expand_control_flow(const Program& program, ExecContext* values, uint32_t rank,
                            const std::function<void()>& at_core_barrier, const ExecutionLimits& limits) {
  if (!values && control_depends_on_values(program)) {
    throw IsaError("the control flow of program '" + program.name +
                   "' depends on tensor values (register_load): "
                   "expanding it needs the values [control-values]");
  }
  Program expanded;
  expanded.name = program.name;
  expanded.generation = program.generation;
  expanded.allocations = program.allocations;
  RegisterFile local{};
  RegisterFile& registers = values ? values->state.registers() : local;
  walk_control_flow(program, registers, [&](size_t i) {
    const Instruction& inst = program.instructions[i];
    if (at_core_barrier && inst.opcode == Opcode::core_barrier) at_core_barrier();
    try {
      expanded.instructions.push_back(has_dynamic_operand(inst) ? resolve_dynamic_offsets(program, inst, registers)
                                                                : inst);
      if (values) {
        execute_instruction(expanded.instructions.back(), *values);
      } else {
        execute_register_only(inst, registers, rank);
      }
    } catch (const IsaError& e) {
      throw IsaError(where(program, i) + ": " + e.what());
    }
  }, limits);
  return expanded;
}

}  // namespace trnsim::isa
