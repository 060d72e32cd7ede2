// JSON lines: the machine form of a program for recorded traces and tools. Line 1 is a header
// {"kernel": NAME, "target": "trn2"}, then one {"alloc": ...} object per allocation, then one
// {"op": ...} object per instruction:
//   {"alloc": "t", "space": "sbuf", "dtype": "bf16", "shape": [128, 512], "role": "internal",
//    "base_partition": 0, "base_byte": 0, "line": 3}
//   {"op": "nc_matmul", "engine": "tensor", "line": 12,
//    "operands": {"dst": {"tensor": "acc", "offset": 0, "ap": [[0, 128], [1, 512]]}, "accumulate": "false"}}
// Unlike .tasm, every present operand is written (defaults included) and tensors always in the
// raw form (plus "dtype" when it differs from the allocation's), so the round trip is exact.
#include <nlohmann/json.hpp>

#include "isa/builder.h"
#include "isa/text_form.h"

namespace trnsim::isa {
namespace {

using Json = nlohmann::ordered_json;
using namespace text_form_detail;

class JsonReader {
 public:
  JsonReader(const std::string& origin, uint32_t line) : m_origin(origin), m_line(line) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw IsaError(m_origin + ":" + std::to_string(m_line) + ": " + message);
  }

  const Json& member(const Json& object, const char* key) const {
    auto it = object.find(key);
    if (it == object.end()) fail(std::string("missing \"") + key + "\"");
    return *it;
  }
  std::string string(const Json& object, const char* key) const {
    const Json& value = member(object, key);
    if (!value.is_string()) fail(std::string("\"") + key + "\" must be a string");
    return value.get<std::string>();
  }
  int64_t integer(const Json& value, const char* key, int64_t low, int64_t high) const {
    if (!value.is_number_integer()) fail(std::string("\"") + key + "\" must be an integer");
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(high)) {
      fail(std::string("\"") + key + "\" is out of range");
    }
    int64_t result = value.get<int64_t>();
    if (result < low || result > high) fail(std::string("\"") + key + "\" is out of range");
    return result;
  }
  int64_t integer(const Json& object, const char* key, int64_t low, int64_t high, int64_t fallback) const {
    auto it = object.find(key);
    return it == object.end() ? fallback : integer(*it, key, low, high);
  }
  uint32_t line() const { return m_line; }

 private:
  const std::string& m_origin;
  uint32_t m_line;
};

Json tensor_json(const Program& program, const AccessPattern& ap) {
  const Allocation& a = program.allocation(ap);
  Json dims = Json::array();
  if (a.space == MemorySpace::hbm) {
    dims.push_back({int64_t{ap.partition.stride}, ap.partition.size});
  } else {
    dims.push_back({ap.start_partition, ap.partition.size});
  }
  for (int i = 0; i < ap.num_free_dims; ++i) dims.push_back({int64_t{ap.free[i].stride}, ap.free[i].size});
  Json value = {{"tensor", a.name}, {"offset", ap.offset}, {"ap", dims}};
  if (ap.dynamic()) value["scalar_offset"] = "r" + std::to_string(ap.offset_register);
  if (ap.dtype != a.dtype) value["dtype"] = std::string(dtype_name(ap.dtype));
  return value;
}

const char* role_name(AllocationRole role) {
  switch (role) {
    case AllocationRole::input: return "input";
    case AllocationRole::output: return "output";
    case AllocationRole::private_to_core: return "private";
    case AllocationRole::internal: return "internal";
  }
  return "internal";
}

void read_allocation(const JsonReader& r, const Json& object, ProgramBuilder& builder) {
  Allocation a;
  a.name = r.string(object, "alloc");
  if (a.name.empty()) r.fail("an allocation needs a name");
  if (builder.program().find_allocation(a.name) >= 0) r.fail("tensor '" + a.name + "' is declared twice");
  std::string name_error = allocation_name_error(a.name);
  if (!name_error.empty()) r.fail(name_error + " and cannot name a tensor");
  std::string space = r.string(object, "space");
  if (auto parsed_space = parse_memory_space(space)) {
    a.space = *parsed_space;
  } else {
    r.fail("unknown space '" + space + "'");
  }
  std::string dtype = r.string(object, "dtype");
  auto parsed = parse_dtype(dtype);
  if (!parsed) r.fail("unknown dtype '" + dtype + "'");
  a.dtype = *parsed;
  const Json& shape = r.member(object, "shape");
  if (!shape.is_array() || shape.size() > 8) r.fail("\"shape\" must be a list of at most 8 sizes");
  for (const Json& d : shape) a.shape.push_back(static_cast<uint32_t>(r.integer(d, "shape", 1, UINT32_MAX)));
  std::string shape_error = allocation_shape_error(a.shape);
  if (!shape_error.empty()) r.fail("bad shape: " + shape_error);
  std::string role = object.contains("role") ? r.string(object, "role") : "internal";
  if (role == "input") {
    a.role = AllocationRole::input;
  } else if (role == "output") {
    a.role = AllocationRole::output;
  } else if (role == "private") {
    if (a.space != MemorySpace::hbm) r.fail("only an HBM tensor can be private (on-chip tensors are each core's own)");
    a.role = AllocationRole::private_to_core;
  } else if (role != "internal") {
    r.fail("unknown role '" + role + "'");
  }
  a.base_partition = static_cast<uint32_t>(r.integer(object, "base_partition", 0, UINT32_MAX, 0));
  a.base_byte = static_cast<uint64_t>(r.integer(object, "base_byte", 0, int64_t{1} << 48, 0));
  a.declared_line = static_cast<uint32_t>(r.integer(object, "line", 0, UINT32_MAX, 0));
  builder.place(std::move(a));
}

AccessPattern read_tensor(const JsonReader& r, const Json& value, const Program& program) {
  std::string name = r.string(value, "tensor");
  int allocation = program.find_allocation(name);
  if (allocation < 0) r.fail("unknown tensor '" + name + "'");
  int64_t offset = r.integer(r.member(value, "offset"), "offset", -(int64_t{1} << 60), int64_t{1} << 60);
  const Json& ap = r.member(value, "ap");
  if (!ap.is_array() || ap.size() > kMaxFreeDims + 1) r.fail("\"ap\" must be a list of at most 5 pairs");
  std::vector<ApDim> dims;
  for (const Json& pair : ap) {
    if (!pair.is_array() || pair.size() != 2) r.fail("\"ap\" entries must be [stride, size] pairs");
    dims.push_back(ApDim{r.integer(pair[0], "ap", kMinApStride, kMaxApStoredStride),
                         static_cast<uint32_t>(r.integer(pair[1], "ap", 0, UINT32_MAX))});
  }
  std::optional<DType> as_dtype;
  if (value.contains("dtype")) {
    std::string dtype = r.string(value, "dtype");
    as_dtype = parse_dtype(dtype);
    if (!as_dtype) r.fail("unknown dtype '" + dtype + "'");
  }
  AccessPattern result;
  try {
    result = checked_raw_access_pattern(program, static_cast<uint32_t>(allocation), offset, dims, as_dtype);
  } catch (const std::invalid_argument& e) {
    r.fail(std::string("bad access pattern: ") + e.what());
  }
  if (value.contains("scalar_offset")) {
    std::string name = r.string(value, "scalar_offset");
    int64_t index = -1;
    if (!parse_register_name(name, index).empty() || index >= int64_t{kRegisterCount}) {
      r.fail("\"scalar_offset\" must name a register r0..r" + std::to_string(kRegisterCount - 1));
    }
    result.offset_register = static_cast<int8_t>(index);
  }
  return result;
}

void read_instruction(const JsonReader& r, const Json& object, ProgramBuilder& builder) {
  std::string op = r.string(object, "op");
  const InstructionSpec* spec = find_instruction_spec(op);
  if (!spec) r.fail("unknown opcode '" + op + "'");
  auto line = static_cast<uint32_t>(r.integer(object, "line", 0, UINT32_MAX, 0));
  Instruction& inst = builder.emit(spec->opcode, line).instruction();
  if (object.contains("engine")) {
    std::string name = r.string(object, "engine");
    auto engine = parse_enum<Engine>(name);
    if (!engine) r.fail("unknown engine '" + name + "'");
    inst.engine = *engine;
  }
  std::string error = engine_error(*spec, inst.engine, builder.program().generation);
  if (!error.empty()) r.fail(error);
  const Json& operands = r.member(object, "operands");
  if (!operands.is_object()) r.fail("\"operands\" must be an object");
  inst.present_mask = 0;  // the JSON lists every present operand, defaulted ones included
  for (auto it = operands.begin(); it != operands.end(); ++it) {
    int i = spec->index_of(it.key());
    if (i < 0) r.fail(op + " has no operand '" + it.key() + "'");
    const OperandSpec& o = spec->operands[i];
    inst.present_mask |= 1u << i;
    if (it.value().is_object()) {
      if (o.tensor_slot < 0) r.fail(op + "." + o.name + " is not a tensor operand");
      inst.tensors[o.tensor_slot] = read_tensor(r, it.value(), builder.program());
      continue;
    }
    if (!it.value().is_string()) r.fail(op + "." + o.name + ": expected a string or a tensor object");
    double scalar = 0;
    std::vector<int64_t> list;
    error = parse_operand_immediate(o, it.value().get<std::string>(), scalar, list);
    if (!error.empty()) r.fail(op + "." + o.name + ": " + error);
    if (o.scalar_slot >= 0) inst.scalars[o.scalar_slot] = scalar;
    if (o.list_slot >= 0) inst.lists[o.list_slot] = std::move(list);
  }
  for (size_t i = 0; i < spec->operands.size(); ++i) {
    const OperandSpec& o = spec->operands[i];
    if (!o.optional && !o.has_default && !((inst.present_mask >> i) & 1u)) r.fail(op + ": missing operand '" + o.name + "'");
  }
}

}  // namespace

std::string to_json_lines(const Program& program) {
  std::string text = Json{{"kernel", program.name}, {"target", std::string(enum_name(program.generation))}}.dump() + "\n";
  for (const Allocation& a : program.allocations) {
    Json object = {{"alloc", a.name},
                   {"space", memory_space_name(a.space)},
                   {"dtype", std::string(dtype_name(a.dtype))},
                   {"shape", a.shape},
                   {"role", role_name(a.role)},
                   {"base_partition", a.base_partition},
                   {"base_byte", a.base_byte},
                   {"line", a.declared_line}};
    text += object.dump() + "\n";
  }
  for (const Instruction& inst : program.instructions) {
    const InstructionSpec& spec = inst.spec();
    Json operands = Json::object();
    for (size_t i = 0; i < spec.operands.size(); ++i) {
      const OperandSpec& o = spec.operands[i];
      if (!((inst.present_mask >> i) & 1u)) continue;
      if (o.tensor_slot >= 0 && inst.tensors[o.tensor_slot].present()) {
        operands[o.name] = tensor_json(program, inst.tensors[o.tensor_slot]);
      } else if (o.scalar_slot >= 0 || o.list_slot >= 0) {
        operands[o.name] = format_immediate(o, o.scalar_slot >= 0 ? inst.scalars[o.scalar_slot] : 0.0,
                                            o.list_slot >= 0 ? inst.lists[o.list_slot] : std::vector<int64_t>{});
      }
    }
    Json object = {{"op", spec.name},
                   {"engine", std::string(enum_name(inst.engine))},
                   {"line", inst.source_line},
                   {"operands", operands}};
    text += object.dump() + "\n";
  }
  return text;
}

Program parse_json_lines(const std::string& text, const std::string& origin) {
  ProgramBuilder builder("", Generation::trn2);
  size_t start = 0;
  uint32_t line = 0;
  while (start < text.size() && line < UINT32_MAX) {
    size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    ++line;
    std::string_view view(text.data() + start, stop - start);
    start = stop + 1;
    if (view.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    JsonReader r(origin, line);
    try {
      Json object = Json::parse(view);
      if (!object.is_object()) r.fail("expected a JSON object");
      if (object.contains("alloc")) {
        if (!builder.program().instructions.empty()) r.fail("allocations must come before instructions");
        read_allocation(r, object, builder);
      } else if (object.contains("op")) {
        read_instruction(r, object, builder);
      } else if (object.contains("target")) {
        if (!builder.program().allocations.empty() || !builder.program().instructions.empty()) {
          r.fail("the header must be the first line");
        }
        std::string target = r.string(object, "target");
        auto generation = parse_enum<Generation>(target);
        if (!generation) r.fail("unknown target '" + target + "'");
        builder.mutable_program().generation = *generation;
        if (object.contains("kernel")) builder.mutable_program().name = r.string(object, "kernel");
      } else {
        r.fail("expected an \"alloc\", \"op\" or header object");
      }
    } catch (const nlohmann::json::exception& e) {
      r.fail(std::string("bad JSON: ") + e.what());
    } catch (const std::invalid_argument& e) {
      r.fail(e.what());
    }
  }
  return builder.finish();
}

}  // namespace trnsim::isa
