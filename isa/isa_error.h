// Errors in a kernel program (user input): an illegal instruction, a malformed .tasm line, a
// bad operand. The message names the instruction (index and source line) and the rule.
#pragma once

#include <stdexcept>
#include <string>

namespace trnsim::isa {

class IsaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace trnsim::isa
