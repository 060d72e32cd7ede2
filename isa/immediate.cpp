// Text <-> value of immediate operands, shared by defaults in instructions.def, the .tasm
// parser and printer, and the JSON-lines form.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "isa/alu.h"
#include "isa/instruction.h"

namespace trnsim::isa {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

bool parse_double(std::string_view text, double& value) {
  text = trim(text);
  if (text == "inf" || text == "+inf") return value = INFINITY, true;
  if (text == "-inf") return value = -INFINITY, true;
  if (text == "nan") return value = NAN, true;
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size() && !text.empty();
}

bool parse_int(std::string_view text, int64_t& value) {
  text = trim(text);
  auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return result.ec == std::errc() && result.ptr == text.data() + text.size() && !text.empty();
}

// "[a, b, c]" -> items; nested brackets are kept inside an item.
bool split_list(std::string_view text, std::vector<std::string_view>& items) {
  text = trim(text);
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
  text = trim(text.substr(1, text.size() - 2));
  if (text.empty()) return true;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    if (i == text.size() || (text[i] == ',' && depth == 0)) {
      items.push_back(trim(text.substr(start, i - start)));
      start = i + 1;
    } else if (text[i] == '[') {
      ++depth;
    } else if (text[i] == ']') {
      if (--depth < 0) return false;
    }
  }
  return depth == 0;
}

}  // namespace

std::string parse_immediate(const OperandSpec& spec, std::string_view text, double& scalar,
                            std::vector<int64_t>& list) {
  text = trim(text);
  switch (spec.kind) {
    case OperandKind::f32:
    case OperandKind::tensor_or_f32:
      if (!parse_double(text, scalar)) return "expected a number, got '" + std::string(text) + "'";
      return "";
    case OperandKind::i64: {
      int64_t value = 0;
      if (!parse_int(text, value)) return "expected an integer, got '" + std::string(text) + "'";
      scalar = static_cast<double>(value);
      return "";
    }
    case OperandKind::boolean:
      if (text == "true" || text == "True") return scalar = 1, "";
      if (text == "false" || text == "False") return scalar = 0, "";
      return "expected true or false, got '" + std::string(text) + "'";
    case OperandKind::alu_op: {
      auto op = parse_alu_op(text);
      if (!op) return "unknown ALU operator '" + std::string(text) + "'";
      scalar = static_cast<double>(*op);
      return "";
    }
    case OperandKind::activation: {
      auto func = parse_activation(text);
      if (!func) return "unknown activation function '" + std::string(text) + "'";
      scalar = static_cast<double>(*func);
      return "";
    }
    case OperandKind::enumeration:
      for (size_t i = 0; i < spec.enum_values.size(); ++i) {
        if (spec.enum_values[i] == text) return scalar = static_cast<double>(i), "";
      }
      {
        std::string allowed;
        for (const std::string& value : spec.enum_values) allowed += (allowed.empty() ? "" : ", ") + value;
        return "expected one of " + allowed + ", got '" + std::string(text) + "'";
      }
    case OperandKind::int_list: {
      std::vector<std::string_view> items;
      if (!split_list(text, items)) return "expected a list like [1, 2], got '" + std::string(text) + "'";
      list.clear();
      for (std::string_view item : items) {
        int64_t value = 0;
        if (!parse_int(item, value)) return "expected integers in the list, got '" + std::string(item) + "'";
        list.push_back(value);
      }
      return "";
    }
    case OperandKind::int_pairs: {
      std::vector<std::string_view> pairs;
      if (!split_list(text, pairs)) return "expected pairs like [[1, 128]], got '" + std::string(text) + "'";
      list.clear();
      for (std::string_view pair : pairs) {
        std::vector<std::string_view> items;
        int64_t a = 0, b = 0;
        if (!split_list(pair, items) || items.size() != 2 || !parse_int(items[0], a) || !parse_int(items[1], b)) {
          return "expected a [step, count] pair, got '" + std::string(pair) + "'";
        }
        list.push_back(a);
        list.push_back(b);
      }
      return "";
    }
    case OperandKind::reg: {
      // r<N>; any index up to 2^31 parses, legality checks it against kRegisterCount (rule register-index).
      int64_t index = -1;
      std::string error = parse_register_name(text, index);
      scalar = static_cast<double>(index);
      return error;
    }
    default:
      return "operand '" + spec.name + "' takes a tensor";
  }
}

std::string parse_register_name(std::string_view text, int64_t& index) {
  index = -1;
  if (text.size() < 2 || text[0] != 'r' || !parse_int(text.substr(1), index) || index < 0 ||
      index > int64_t{2147483647} || text[1] < '0' || text[1] > '9') {
    index = -1;
    return "expected a register like r0, got '" + std::string(text) + "'";
  }
  return "";
}

std::string format_immediate(const OperandSpec& spec, double scalar, const std::vector<int64_t>& list) {
  switch (spec.kind) {
    case OperandKind::i64:
      return std::to_string(static_cast<int64_t>(scalar));
    case OperandKind::reg:
      return "r" + std::to_string(static_cast<int64_t>(scalar));
    case OperandKind::boolean:
      return scalar != 0 ? "true" : "false";
    case OperandKind::alu_op:
      return std::string(alu_op_name(static_cast<AluOp>(scalar)));
    case OperandKind::activation:
      return std::string(activation_name(static_cast<ActivationFunc>(scalar)));
    case OperandKind::enumeration:
      return spec.enum_values.at(static_cast<size_t>(scalar));
    case OperandKind::int_list: {
      std::string text = "[";
      for (size_t i = 0; i < list.size(); ++i) text += (i ? ", " : "") + std::to_string(list[i]);
      return text + "]";
    }
    case OperandKind::int_pairs: {
      std::string text = "[";
      for (size_t i = 0; i + 1 < list.size(); i += 2) {
        text += (i ? ", [" : "[") + std::to_string(list[i]) + ", " + std::to_string(list[i + 1]) + "]";
      }
      return text + "]";
    }
    default: {
      if (std::isinf(scalar)) return scalar > 0 ? "inf" : "-inf";
      if (std::isnan(scalar)) return "nan";
      char buffer[64];
      auto result = std::to_chars(buffer, buffer + sizeof buffer, scalar);
      return std::string(buffer, result.ptr);
    }
  }
}

namespace {

Instruction prototype(Opcode opcode) {
  const InstructionSpec& spec = instruction_spec(opcode);
  Instruction inst;
  inst.opcode = opcode;
  inst.engine = spec.engines.front().engine;
  inst.tensors.resize(spec.tensor_slots);
  inst.scalars.resize(spec.scalar_slots, 0.0);
  inst.lists.resize(spec.list_slots);
  for (size_t i = 0; i < spec.operands.size(); ++i) {
    const OperandSpec& operand = spec.operands[i];
    if (!operand.has_default) continue;
    double scalar = 0;
    std::vector<int64_t> list;
    std::string error = parse_immediate(operand, operand.default_text, scalar, list);
    if (!error.empty()) {
      std::fprintf(stderr, "trnsim internal error: default of %s.%s: %s\n", spec.name.c_str(), operand.name.c_str(),
                   error.c_str());
      std::abort();
    }
    if (operand.scalar_slot >= 0) inst.scalars[operand.scalar_slot] = scalar;
    if (operand.list_slot >= 0) inst.lists[operand.list_slot] = list;
    inst.present_mask |= 1u << i;
  }
  return inst;
}

}  // namespace

// A copy of the opcode's prototype, so that a parser emitting millions of instructions does not
// parse each default's text again.
Instruction make_instruction(Opcode opcode) {
  static const std::vector<Instruction> prototypes = [] {
    std::vector<Instruction> all;
    all.reserve(kOpcodeCount);
    for (size_t i = 0; i < kOpcodeCount; ++i) all.push_back(prototype(static_cast<Opcode>(i)));
    return all;
  }();
  return prototypes[static_cast<size_t>(opcode)];
}

}  // namespace trnsim::isa
