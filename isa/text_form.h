// The .tasm text form of a program and the JSON-lines form used for recorded traces.
//
//   # comment (also after an instruction)
//   kernel NAME                        optional, first non-comment line
//   target trn2                        generation whose rules apply (default trn2)
//   hbm a : bf16[128, 512] input       HBM tensor; role input | output | (nothing = internal)
//   sbuf t : bf16[128, 512]            SBUF tensor placed by the allocator ...
//   sbuf u : fp32[64, 2, 8] @ 64:1024  ... or at partition 64, byte 1024 of each partition
//   psum acc : fp32[128, 512]          PSUM tensor (bank-aligned by the allocator)
//   nc_matmul dst=acc, stationary=t[0:128, 0:128], moving=u, accumulate=false
//   tensor_copy dst=t[0:64, 0:512], src=acc[0:64, :], engine=scalar
//
// An instruction line is the opcode then comma-separated name=value operands (commas inside
// [] and {} do not separate). Tensor values are NAME, NAME[slices] or the raw access pattern
// NAME{offset=O, ap=[[start_or_stride, count], [stride, size], ...]}; immediates as in
// isa/instructions.def. The printer writes operands in definition order and leaves out
// defaulted ones, so print(parse(print(p))) == print(p).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "isa/isa_error.h"
#include "isa/program.h"

namespace trnsim::isa {

// Throws IsaError "ORIGIN:LINE:COLUMN: message" on any malformed input; never crashes.
Program parse_tasm(const std::string& text, const std::string& origin);
Program parse_tasm_file(const std::string& path);
std::string print_tasm(const Program& program);

// JSON lines: one object per allocation, then one per instruction (see text_form_json.cpp).
std::string to_json_lines(const Program& program);
Program parse_json_lines(const std::string& text, const std::string& origin);

// Checks shared by the text and JSON-lines readers, so both reject the same programs. Each
// returns "" when fine, else what is wrong (the caller adds the location).
namespace text_form_detail {

// Rank, sizes and an element count small enough that no address computation can overflow.
std::string allocation_shape_error(const std::vector<uint32_t>& shape);
// A name the .tasm form cannot reference (it would read as a number, e.g. "nan").
std::string allocation_name_error(const std::string& name);
// raw_access_pattern with overflow-safe bounds checks first; throws std::invalid_argument.
AccessPattern checked_raw_access_pattern(const Program& program, uint32_t allocation, int64_t offset,
                                         const std::vector<ApDim>& dims,
                                         std::optional<DType> as_dtype = std::nullopt);
// parse_immediate plus the range limits that keep the value exactly printable.
std::string parse_operand_immediate(const OperandSpec& spec, std::string_view text, double& scalar,
                                    std::vector<int64_t>& list);
// Why `engine` may not run the instruction on `generation`; "" when it may.
std::string engine_error(const InstructionSpec& spec, Engine engine, Generation generation);

}  // namespace text_form_detail
}  // namespace trnsim::isa
