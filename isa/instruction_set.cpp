// Builds the InstructionSpec table from isa/instructions.def once, and the Instruction accessors.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <unordered_map>

#include "isa/instruction.h"

namespace trnsim::isa {
namespace {

[[noreturn]] void spec_bug(const std::string& message) {
  // A malformed instructions.def is a simulator bug, caught by the first test that runs.
  std::fprintf(stderr, "trnsim internal error: instructions.def: %s\n", message.c_str());
  std::abort();
}

OperandKind parse_kind(const std::string& text, std::vector<std::string>& enum_values) {
  if (text == "out") return OperandKind::tensor_out;
  if (text == "in") return OperandKind::tensor_in;
  if (text == "inout") return OperandKind::tensor_inout;
  if (text == "in|f32") return OperandKind::tensor_or_f32;
  if (text == "f32") return OperandKind::f32;
  if (text == "i64") return OperandKind::i64;
  if (text == "bool") return OperandKind::boolean;
  if (text == "alu") return OperandKind::alu_op;
  if (text == "act") return OperandKind::activation;
  if (text == "ints") return OperandKind::int_list;
  if (text == "pairs") return OperandKind::int_pairs;
  if (text == "reg") return OperandKind::reg;
  if (text.rfind("enum(", 0) == 0 && text.back() == ')') {
    std::stringstream values(text.substr(5, text.size() - 6));
    for (std::string value; std::getline(values, value, ',');) enum_values.push_back(value);
    return OperandKind::enumeration;
  }
  spec_bug("unknown operand kind '" + text + "'");
}

InstructionSpec build_spec(Opcode opcode, const char* name, const char* engines, const char* operands,
                           const char* doc) {
  InstructionSpec spec;
  spec.opcode = opcode;
  spec.name = name;
  spec.doc = doc;
  std::stringstream engine_words(engines);
  for (std::string word; engine_words >> word;) {
    Generation since = Generation::trn1;
    size_t at = word.find('@');
    if (at != std::string::npos) {
      auto generation = parse_enum<Generation>(word.substr(at + 1));
      if (!generation) spec_bug(spec.name + ": bad generation in '" + word + "'");
      since = *generation;
      word = word.substr(0, at);
    }
    auto engine = parse_enum<Engine>(word);
    if (!engine) spec_bug(spec.name + ": bad engine '" + word + "'");
    spec.engines.push_back({*engine, since});
  }
  std::stringstream operand_words(operands);
  for (std::string word; operand_words >> word;) {
    OperandSpec operand;
    size_t colon = word.find(':');
    if (colon == std::string::npos) spec_bug(spec.name + ": operand '" + word + "' has no kind");
    operand.name = word.substr(0, colon);
    std::string kind = word.substr(colon + 1);
    size_t equals = kind.find('=');
    if (equals != std::string::npos) {
      operand.has_default = true;
      operand.default_text = kind.substr(equals + 1);
      kind = kind.substr(0, equals);
    } else if (!kind.empty() && kind.back() == '?') {
      operand.optional = true;
      kind.pop_back();
    }
    operand.kind = parse_kind(kind, operand.enum_values);
    if (is_tensor_kind(operand.kind)) operand.tensor_slot = spec.tensor_slots++;
    if (operand.kind == OperandKind::int_list || operand.kind == OperandKind::int_pairs) {
      operand.list_slot = spec.list_slots++;
    } else if (operand.kind != OperandKind::tensor_in && operand.kind != OperandKind::tensor_out &&
               operand.kind != OperandKind::tensor_inout) {
      operand.scalar_slot = spec.scalar_slots++;
    }
    if (spec.find(operand.name)) spec_bug(spec.name + ": operand '" + operand.name + "' listed twice");
    spec.operands.push_back(std::move(operand));
  }
  if (spec.operands.size() > 32) spec_bug(spec.name + ": more than 32 operands");
  return spec;
}

}  // namespace

bool is_tensor_kind(OperandKind kind) {
  return kind == OperandKind::tensor_in || kind == OperandKind::tensor_out || kind == OperandKind::tensor_inout ||
         kind == OperandKind::tensor_or_f32;
}

const char* operand_kind_name(OperandKind kind) {
  switch (kind) {
    case OperandKind::tensor_out: return "out";
    case OperandKind::tensor_in: return "in";
    case OperandKind::tensor_inout: return "inout";
    case OperandKind::tensor_or_f32: return "in|f32";
    case OperandKind::f32: return "f32";
    case OperandKind::i64: return "i64";
    case OperandKind::boolean: return "bool";
    case OperandKind::alu_op: return "alu";
    case OperandKind::activation: return "act";
    case OperandKind::enumeration: return "enum";
    case OperandKind::int_list: return "ints";
    case OperandKind::int_pairs: return "pairs";
    case OperandKind::reg: return "reg";
  }
  return "?";
}

const std::vector<InstructionSpec>& all_instruction_specs() {
  static const std::vector<InstructionSpec> specs = [] {
    std::vector<InstructionSpec> table;
#define TRN_INSN(name, engines, operands, doc) table.push_back(build_spec(Opcode::name, #name, engines, operands, doc));
#include "isa/instructions.def"
#undef TRN_INSN
    return table;
  }();
  return specs;
}

const InstructionSpec& instruction_spec(Opcode opcode) { return all_instruction_specs()[static_cast<size_t>(opcode)]; }

const InstructionSpec* find_instruction_spec(std::string_view name) {
  // Hashed: the .tasm parser looks up every line's opcode.
  static const std::unordered_map<std::string_view, const InstructionSpec*> by_name = [] {
    std::unordered_map<std::string_view, const InstructionSpec*> map;
    for (const InstructionSpec& spec : all_instruction_specs()) map.emplace(spec.name, &spec);
    return map;
  }();
  auto found = by_name.find(name);
  return found == by_name.end() ? nullptr : found->second;
}

const OperandSpec* InstructionSpec::find(std::string_view operand) const {
  int index = index_of(operand);
  return index < 0 ? nullptr : &operands[index];
}

int InstructionSpec::index_of(std::string_view operand) const {
  // Called by name for every operand of every instruction (parser, legality, interpreter): the length and first
  // letter rule out most names without a memcmp call.
  if (operand.empty()) return -1;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::string& name = operands[i].name;
    if (name.size() == operand.size() && name[0] == operand[0] && std::string_view(name) == operand) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

bool is_collective(Opcode opcode) {
  switch (opcode) {
    case Opcode::all_reduce:
    case Opcode::all_gather:
    case Opcode::reduce_scatter:
    case Opcode::all_to_all:
    case Opcode::collective_permute:
    case Opcode::all_to_all_v:
    case Opcode::all_gather_v: return true;
    default: return false;
  }
}

bool reaches_other_cores(Opcode opcode) {
  return is_collective(opcode) || opcode == Opcode::core_barrier || opcode == Opcode::sendrecv;
}

std::vector<int64_t> dma_transpose_axes(const Instruction& inst) {
  if (!inst.list("axes").empty()) return inst.list("axes");
  switch (inst.list("src_shape").size()) {
    case 2: return {1, 0};
    case 3: return {2, 1, 0};
    case 4: return {3, 1, 2, 0};
    default: return {};
  }
}

bool InstructionSpec::runs_on(Engine engine, Generation generation) const {
  for (const EngineAvailability& available : engines) {
    if (available.engine == engine && generation >= available.since) return true;
  }
  return false;
}

namespace {

const OperandSpec& operand_or_die(const Instruction& inst, std::string_view operand) {
  const OperandSpec* spec = inst.spec().find(operand);
  if (!spec) {
    std::fprintf(stderr, "trnsim internal error: %s has no operand '%.*s'\n", inst.spec().name.c_str(),
                 static_cast<int>(operand.size()), operand.data());
    std::abort();
  }
  return *spec;
}

}  // namespace

bool Instruction::has(std::string_view operand) const {
  int index = spec().index_of(operand);
  return index >= 0 && (present_mask >> index) & 1u;
}

const AccessPattern& Instruction::tensor(std::string_view operand) const {
  return tensors[operand_or_die(*this, operand).tensor_slot];
}

AccessPattern& Instruction::tensor(std::string_view operand) {
  return tensors[operand_or_die(*this, operand).tensor_slot];
}

double Instruction::scalar(std::string_view operand) const { return scalars[operand_or_die(*this, operand).scalar_slot]; }

const std::vector<int64_t>& Instruction::list(std::string_view operand) const {
  return lists[operand_or_die(*this, operand).list_slot];
}

std::string_view Instruction::enum_word(std::string_view operand) const {
  // An opcode without the operand holds no word: readers ask one question of every DMA (dst_rmw_op, dge_mode).
  const OperandSpec* spec = this->spec().find(operand);
  if (!spec || spec->scalar_slot < 0 || !has(operand)) return {};
  auto index = static_cast<size_t>(scalars[size_t(spec->scalar_slot)]);
  return index < spec->enum_values.size() ? std::string_view(spec->enum_values[index]) : std::string_view();
}

bool Instruction::is_tensor(std::string_view operand) const {
  const OperandSpec& spec = operand_or_die(*this, operand);
  return spec.tensor_slot >= 0 && tensors[spec.tensor_slot].present();
}

}  // namespace trnsim::isa
