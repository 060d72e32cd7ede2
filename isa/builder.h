// Builds programs from C++ (the kernel library and the PyTorch lowering use this): allocate
// tensors, emit instructions with named operands, get back a program checked for legality.
#pragma once

#include <string>
#include <vector>

#include "isa/isa_error.h"
#include "isa/program.h"
#include "isa/view.h"

namespace trnsim::isa {

class ProgramBuilder;

// Fills one instruction's operands by name; unknown names and bad values throw IsaError.
class InstructionBuilder {
 public:
  InstructionBuilder(ProgramBuilder& builder, size_t index) : m_builder(builder), m_index(index) {}
  InstructionBuilder& tensor(const std::string& operand, const AccessPattern& ap);
  InstructionBuilder& imm(const std::string& operand, double value);          // numbers, booleans (0/1)
  InstructionBuilder& word(const std::string& operand, const std::string& text);  // enum words, op names, lists
  InstructionBuilder& on(Engine engine);
  Instruction& instruction();

 private:
  ProgramBuilder& m_builder;
  size_t m_index;
};

class ProgramBuilder {
 public:
  ProgramBuilder(std::string name, Generation generation);

  // Allocations. SBUF/PSUM tensors are placed by a bump allocator unless a placement is given;
  // PSUM tensors start on a 2 KiB bank boundary.
  uint32_t hbm(const std::string& name, DType dtype, std::vector<uint32_t> shape,
               AllocationRole role = AllocationRole::internal);
  uint32_t sbuf(const std::string& name, DType dtype, std::vector<uint32_t> shape);
  uint32_t psum(const std::string& name, DType dtype, std::vector<uint32_t> shape);
  uint32_t place(Allocation allocation);  // explicit placement (the .tasm "@ partition:byte" form)

  AccessPattern view(uint32_t allocation, const std::vector<Slice>& slices = {}) const;

  InstructionBuilder emit(Opcode opcode, uint32_t source_line = 0);

  const Program& program() const { return m_program; }
  Program& mutable_program() { return m_program; }
  // The finished program; legality is checked by check_program (isa/legality.h) against a config.
  Program finish() { return std::move(m_program); }

 private:
  friend class InstructionBuilder;
  uint32_t add_allocation(Allocation allocation);
  Program m_program;
  uint64_t m_sbuf_next_byte = 0;
  uint64_t m_psum_next_byte = 0;
};

}  // namespace trnsim::isa
