// Registers and structured control flow (isa/control_flow.h). The control instructions do nothing here:
// interpret / expand_control_flow follow them (walk_control_flow); what remains is the register file.
#include <cstring>

#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

// The one element of a register_load / register_store operand; its 32-bit integers as the bits of an fp32
// (the fp32 read and write are exact for every bit pattern, as nc_n_gather uses them), narrower ones as values.
AccessPattern register_element(const AccessPattern& ap, const char* operand) {
  if (!is_register_dtype(ap.dtype)) {
    throw IsaError(std::string(operand) + " is " + std::string(dtype_name(ap.dtype)) +
                   "; a register moves an integer dtype (int8/16/32, uint8/16/32) [register-tensor]");
  }
  if (ap.elements() != 1) {
    throw IsaError(std::string(operand) + " has " + std::to_string(ap.elements()) +
                   " elements; a register moves one [register-tensor]");
  }
  AccessPattern element = ap;
  if (dtype_size_bytes(ap.dtype) == 4) element.dtype = DType::fp32;
  return element;
}

}  // namespace

void exec_register_move(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers());
}
void exec_register_add(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers());
}
void exec_register_sub(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers());
}
void exec_register_mul(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers());
}
void exec_register_compare(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers());
}

void exec_rank_id(const Instruction& inst, ExecContext& ctx) {
  execute_register_only(inst, ctx.state.registers(), ctx.rank);
}

void exec_register_load(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& src = inst.tensor("src");
  Tile tile = ctx.read(register_element(src, "src"));
  int32_t value = 0;
  if (dtype_size_bytes(src.dtype) == 4) {
    std::memcpy(&value, &tile.values.at(0), sizeof value);
  } else {
    value = int32_t(tile.values.at(0));
  }
  register_operand(inst, "dst", ctx.state.registers()) = value;
}

void exec_register_store(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  int32_t value = register_operand(inst, "src", ctx.state.registers());
  Tile tile(1, 1);
  if (dtype_size_bytes(dst.dtype) == 4) {
    std::memcpy(&tile.values.at(0), &value, sizeof value);
  } else {
    // Truncated to the destination's width, as a store of the low bits.
    const uint32_t bits = dtype_size_bytes(dst.dtype) * 8;
    uint32_t low = uint32_t(value) & ((1u << bits) - 1);
    bool is_signed = dst.dtype == DType::int8 || dst.dtype == DType::int16;
    tile.values.at(0) = is_signed && (low >> (bits - 1)) ? float(int64_t(low) - (int64_t{1} << bits)) : float(low);
  }
  ctx.write(register_element(dst, "dst"), tile);
}

void exec_loop_begin(const Instruction&, ExecContext&) {}
void exec_loop_end(const Instruction&, ExecContext&) {}
void exec_while_begin(const Instruction&, ExecContext&) {}
void exec_while_end(const Instruction&, ExecContext&) {}

}  // namespace trnsim::isa
