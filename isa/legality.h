// The rules the hardware enforces on a program (../shared/reference/trainium.md §4.2, §5, §6),
// checked against a hardware config: partition counts and start alignment, memory bounds, PSUM
// banks, which engine may touch which memory, dtypes per engine and generation, matmul shapes.
#pragma once

#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::isa {

struct LegalityIssue {
  long instruction = -1;  // index, or -1 for an allocation or the program itself
  uint32_t line = 0;      // source line when known
  std::string rule;       // short rule id, e.g. "partition-start-alignment"
  std::string message;    // what is wrong, naming the operand
};

std::vector<LegalityIssue> find_legality_issues(const Program& program, const HardwareConfig& config);
// "instruction 12 (line 40) nc_matmul: <message> [rule]"
std::string format_legality_issue(const Program& program, const LegalityIssue& issue);
// Throws IsaError with every issue (one per line) when there is any.
void check_program(const Program& program, const HardwareConfig& config);

}  // namespace trnsim::isa
