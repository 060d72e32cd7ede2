// Instructions: the parsed form of isa/instructions.def (InstructionSpec) and one instance in
// a program (Instruction). Operands are stored in typed slots so that a program of millions of
// instructions stays compact; access them by name through the spec.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/hardware_config.h"
#include "isa/access_pattern.h"

namespace trnsim::isa {

enum class Opcode : uint16_t {
#define TRN_INSN(name, engines, operands, doc) name,
#include "isa/instructions.def"
#undef TRN_INSN
};
constexpr size_t kOpcodeCount = 0
#define TRN_INSN(name, engines, operands, doc) +1
#include "isa/instructions.def"
#undef TRN_INSN
    ;

enum class OperandKind : uint8_t {
  tensor_out,
  tensor_in,
  tensor_inout,
  tensor_or_f32,  // a [P, 1] tensor or an immediate
  f32,
  i64,
  boolean,
  alu_op,
  activation,
  enumeration,
  int_list,
  int_pairs,
  reg,  // a register index (text form r3); stored in a scalar slot
};

// Registers of the core's register file (ISA register_*, loop_begin, while_begin). Sourced: NKI
// nki.isa.register_alloc, "64x 32-bit registers per engine sequencer in NeuronCore v2-v4". trnsim keeps one
// file of that size per core, shared by the sequencers (the NKI compiler places virtual registers on the
// sequencers that use them; a program here names physical ones).
constexpr uint32_t kRegisterCount = 64;

bool is_tensor_kind(OperandKind kind);
// The kind's word in instructions.def ("out", "in|f32", "enum", "reg", ...): for tables that front-ends read
// (frontend/module.cpp instruction_specs).
const char* operand_kind_name(OperandKind kind);

struct OperandSpec {
  std::string name;
  OperandKind kind;
  bool optional = false;      // may be absent (no default)
  bool has_default = false;   // absent means default_text
  std::string default_text;
  std::vector<std::string> enum_values;  // for enumeration
  int tensor_slot = -1;       // index into Instruction::tensors
  int scalar_slot = -1;       // index into Instruction::scalars (also for tensor_or_f32)
  int list_slot = -1;         // index into Instruction::lists
};

struct EngineAvailability {
  Engine engine;
  Generation since;
};

struct InstructionSpec {
  Opcode opcode;
  std::string name;
  std::vector<EngineAvailability> engines;  // first = default
  std::vector<OperandSpec> operands;
  std::string doc;
  int tensor_slots = 0, scalar_slots = 0, list_slots = 0;

  const OperandSpec* find(std::string_view operand) const;
  int index_of(std::string_view operand) const;  // -1 if none
  bool runs_on(Engine engine, Generation generation) const;
};

const InstructionSpec& instruction_spec(Opcode opcode);
const std::vector<InstructionSpec>& all_instruction_specs();
const InstructionSpec* find_instruction_spec(std::string_view name);

struct Instruction {
  Opcode opcode{};
  Engine engine = Engine::sync;
  uint32_t source_line = 0;  // 1-based line in the .tasm text, 0 when built in C++
  uint32_t present_mask = 0;  // bit i set: operand i of the spec was given (or defaulted)
  std::vector<AccessPattern> tensors;
  std::vector<double> scalars;  // immediates, enum indices, operator ids, booleans (0/1)
  std::vector<std::vector<int64_t>> lists;

  const InstructionSpec& spec() const { return instruction_spec(opcode); }
  bool has(std::string_view operand) const;
  // Accessors by operand name; a wrong name is a simulator bug and aborts.
  const AccessPattern& tensor(std::string_view operand) const;
  AccessPattern& tensor(std::string_view operand);
  double scalar(std::string_view operand) const;
  const std::vector<int64_t>& list(std::string_view operand) const;
  // For an in|f32 operand: whether a tensor (rather than an immediate) was given.
  bool is_tensor(std::string_view operand) const;
  // The word an enum operand holds ("" when absent or not an operand of this opcode), and whether it is `word`: compared by name, so no reader
  // depends on the order of the enum's words in instructions.def.
  std::string_view enum_word(std::string_view operand) const;
  bool enum_is(std::string_view operand, std::string_view word) const { return enum_word(operand) == word; }
};

// An instruction with every operand absent and slots sized for its opcode; defaults applied.
Instruction make_instruction(Opcode opcode);

// The collectives (all_reduce, all_gather, reduce_scatter, all_to_all, collective_permute): their bytes move between
// ranks through the CC-cores' DMA, not the trigger engine's memory path.
bool is_collective(Opcode opcode);
// Whether a core's values at this instruction depend on other cores having reached theirs: the collectives,
// sendrecv and core_barrier (semaphores and barrier order one core's own engines only).
bool reaches_other_cores(Opcode opcode);
// dma_transpose with src_shape: its permutation, the axes operand or NKI's default for the rank ([1, 0], [2, 1, 0],
// [3, 1, 2, 0]); empty for another rank without axes.
std::vector<int64_t> dma_transpose_axes(const Instruction& inst);

}  // namespace trnsim::isa

namespace trnsim::isa {

// Parses the text of a non-tensor operand (number, true/false, enum word, operator or
// activation name, [1, 2] list, [[1, 2], [3, 4]] pairs). Returns "" or what is wrong.
std::string parse_immediate(const OperandSpec& spec, std::string_view text, double& scalar,
                            std::vector<int64_t>& list);
// "r<N>" (N any non-negative int32; callers check it against kRegisterCount). Returns "" or what is wrong.
std::string parse_register_name(std::string_view text, int64_t& index);
// The canonical text of a non-tensor operand value (inverse of parse_immediate).
std::string format_immediate(const OperandSpec& spec, double scalar, const std::vector<int64_t>& list);

}  // namespace trnsim::isa
