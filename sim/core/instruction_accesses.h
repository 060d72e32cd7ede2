// What one instruction reads and writes, as the timing model and the scheduler both see it.
#pragma once

#include <vector>

#include "isa/program.h"

namespace trnsim::sim {

// The tensor operands `inst` reads and writes (an inout operand in both lists; a read-add-write DMA also reads its
// destination).
inline void collect_accesses(const isa::Instruction& inst, std::vector<const isa::AccessPattern*>& reads,
                             std::vector<const isa::AccessPattern*>& writes) {
  const isa::InstructionSpec& spec = inst.spec();
  for (size_t i = 0; i < spec.operands.size(); ++i) {
    const isa::OperandSpec& operand = spec.operands[i];
    if (operand.tensor_slot < 0 || !((inst.present_mask >> i) & 1u)) continue;
    const isa::AccessPattern& ap = inst.tensors[size_t(operand.tensor_slot)];
    if (!ap.present()) continue;
    switch (operand.kind) {
      case isa::OperandKind::tensor_out: writes.push_back(&ap); break;
      case isa::OperandKind::tensor_inout:
        reads.push_back(&ap);
        writes.push_back(&ap);
        break;
      default: reads.push_back(&ap); break;
    }
  }
  if (inst.opcode == isa::Opcode::dma_copy && inst.scalar("dst_rmw_op") == 1) reads.push_back(&inst.tensor("dst"));
}

// A matmul that accumulates into PSUM (accumulate true or auto) follows the previous matmul of its
// accumulation group through the PE array's pipeline: it needs no semaphore on its destination,
// only on its inputs. Its destination is still recorded, so later readers wait for it.
inline bool accumulates_in_pipeline(const isa::Instruction& inst) {
  return (inst.opcode == isa::Opcode::nc_matmul || inst.opcode == isa::Opcode::nc_matmul_mx) &&
         inst.scalar("accumulate") != 1;
}

}  // namespace trnsim::sim
