#include "isa/builder.h"

namespace trnsim::isa {
namespace {

constexpr uint64_t kSbufAlignBytes = 64;   // assumed allocation granularity
constexpr uint64_t kPsumBankBytes = 2048;  // A-V2: one PSUM bank per partition

uint64_t align_up(uint64_t value, uint64_t alignment) { return (value + alignment - 1) / alignment * alignment; }

}  // namespace

ProgramBuilder::ProgramBuilder(std::string name, Generation generation) {
  m_program.name = std::move(name);
  m_program.generation = generation;
}

uint32_t ProgramBuilder::add_allocation(Allocation allocation) {
  if (allocation.name.empty()) throw IsaError("an allocation needs a name");
  if (m_program.find_allocation(allocation.name) >= 0) {
    throw IsaError("allocation '" + allocation.name + "' is declared twice");
  }
  if (allocation.shape.empty()) throw IsaError("allocation '" + allocation.name + "' needs a shape");
  for (uint32_t d : allocation.shape) {
    if (d == 0) throw IsaError("allocation '" + allocation.name + "' has a dimension of size 0");
  }
  m_program.allocations.push_back(std::move(allocation));
  return static_cast<uint32_t>(m_program.allocations.size() - 1);
}

uint32_t ProgramBuilder::hbm(const std::string& name, DType dtype, std::vector<uint32_t> shape, AllocationRole role) {
  Allocation a;
  a.name = name;
  a.space = MemorySpace::hbm;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.role = role;
  return add_allocation(std::move(a));
}

uint32_t ProgramBuilder::sbuf(const std::string& name, DType dtype, std::vector<uint32_t> shape) {
  Allocation a;
  a.name = name;
  a.space = MemorySpace::sbuf;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.base_byte = m_sbuf_next_byte;
  uint32_t index = add_allocation(std::move(a));
  m_sbuf_next_byte = align_up(m_sbuf_next_byte + m_program.allocations[index].bytes_per_partition(), kSbufAlignBytes);
  return index;
}

uint32_t ProgramBuilder::psum(const std::string& name, DType dtype, std::vector<uint32_t> shape) {
  Allocation a;
  a.name = name;
  a.space = MemorySpace::psum;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.base_byte = align_up(m_psum_next_byte, kPsumBankBytes);
  uint32_t index = add_allocation(std::move(a));
  m_psum_next_byte = m_program.allocations[index].base_byte + m_program.allocations[index].bytes_per_partition();
  return index;
}

uint32_t ProgramBuilder::place(Allocation allocation) { return add_allocation(std::move(allocation)); }

AccessPattern ProgramBuilder::view(uint32_t allocation, const std::vector<Slice>& slices) const {
  try {
    return slice_allocation(m_program, allocation, slices);
  } catch (const std::invalid_argument& e) {
    throw IsaError(e.what());
  }
}

InstructionBuilder ProgramBuilder::emit(Opcode opcode, uint32_t source_line) {
  Instruction inst = make_instruction(opcode);
  inst.source_line = source_line;
  m_program.instructions.push_back(std::move(inst));
  return InstructionBuilder(*this, m_program.instructions.size() - 1);
}

Instruction& InstructionBuilder::instruction() { return m_builder.m_program.instructions[m_index]; }

namespace {

const OperandSpec& operand_spec(const Instruction& inst, const std::string& operand, int& index) {
  index = inst.spec().index_of(operand);
  if (index < 0) throw IsaError(inst.spec().name + " has no operand '" + operand + "'");
  return inst.spec().operands[index];
}

}  // namespace

InstructionBuilder& InstructionBuilder::tensor(const std::string& operand, const AccessPattern& ap) {
  Instruction& inst = instruction();
  int index = 0;
  const OperandSpec& spec = operand_spec(inst, operand, index);
  if (spec.tensor_slot < 0) throw IsaError(inst.spec().name + "." + operand + " is not a tensor operand");
  inst.tensors[spec.tensor_slot] = ap;
  inst.present_mask |= 1u << index;
  return *this;
}

InstructionBuilder& InstructionBuilder::imm(const std::string& operand, double value) {
  Instruction& inst = instruction();
  int index = 0;
  const OperandSpec& spec = operand_spec(inst, operand, index);
  if (spec.scalar_slot < 0) throw IsaError(inst.spec().name + "." + operand + " takes no immediate");
  inst.scalars[spec.scalar_slot] = value;
  if (spec.tensor_slot >= 0) inst.tensors[spec.tensor_slot] = AccessPattern{};  // an immediate replaces a tensor
  inst.present_mask |= 1u << index;
  return *this;
}

InstructionBuilder& InstructionBuilder::word(const std::string& operand, const std::string& text) {
  Instruction& inst = instruction();
  int index = 0;
  const OperandSpec& spec = operand_spec(inst, operand, index);
  double scalar = 0;
  std::vector<int64_t> list;
  std::string error = parse_immediate(spec, text, scalar, list);
  if (!error.empty()) throw IsaError(inst.spec().name + "." + operand + ": " + error);
  if (spec.scalar_slot >= 0) inst.scalars[spec.scalar_slot] = scalar;
  if (spec.list_slot >= 0) inst.lists[spec.list_slot] = std::move(list);
  if (spec.tensor_slot >= 0) inst.tensors[spec.tensor_slot] = AccessPattern{};
  inst.present_mask |= 1u << index;
  return *this;
}

InstructionBuilder& InstructionBuilder::on(Engine engine) {
  instruction().engine = engine;
  return *this;
}

}  // namespace trnsim::isa
