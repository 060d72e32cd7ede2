// The .tasm reader and printer. The reader is a hand-written cursor over one line at a time so
// that every error can point at the offending column; it is fuzzed (tests/fuzz), hence the
// explicit bounds on every number that later feeds address arithmetic.
#include "isa/text_form.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <exception>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "config/config_tree.h"
#include "isa/builder.h"
#include "isa/host_workers.h"
#include "isa/view.h"

namespace trnsim::isa {
namespace text_form_detail {
namespace {

// Far beyond any real tensor, small enough that offsets and spans fit int64 with room to spare.
constexpr uint64_t kMaxElements = uint64_t{1} << 40;
constexpr int64_t kMaxOffset = int64_t{1} << 60;
// i64 immediates are stored as double; beyond 2^53 they would not print back exactly.
constexpr int64_t kMaxExactInteger = int64_t{1} << 53;

}  // namespace

std::string allocation_shape_error(const std::vector<uint32_t>& shape) {
  if (shape.empty()) return "a tensor needs at least one dimension";
  if (shape.size() > 8) return "a tensor has at most 8 dimensions";
  uint64_t elements = 1;
  for (uint32_t d : shape) {
    if (d == 0) return "a dimension of size 0";
    elements *= d;  // cannot overflow: checked against 2^40 after every step
    if (elements > kMaxElements) return "more than 2^40 elements";
  }
  return "";
}

std::string allocation_name_error(const std::string& name) {
  OperandSpec number;
  number.kind = OperandKind::f32;
  double scalar = 0;
  std::vector<int64_t> list;
  if (parse_immediate(number, name, scalar, list).empty()) return "'" + name + "' reads as a number";
  return "";
}

AccessPattern checked_raw_access_pattern(const Program& program, uint32_t allocation, int64_t offset,
                                         const std::vector<ApDim>& dims, std::optional<DType> as_dtype) {
  const Allocation& a = program.allocations.at(allocation);
  auto fail = [&](const std::string& message) { throw std::invalid_argument(a.name + ": " + message); };
  if (offset < -kMaxOffset || offset > kMaxOffset) fail("offset out of range");
  if (dims.size() > static_cast<size_t>(kMaxFreeDims) + 1) fail("at most 4 free dimensions");
  bool on_chip = a.space != MemorySpace::hbm;
  int64_t low = offset, high = offset;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i].size == 0) fail("a dimension of size 0");
    if (on_chip && i == 0) continue;  // [start_partition, count], checked by raw_access_pattern
    int64_t span = 0;
    if (__builtin_mul_overflow(int64_t{dims[i].stride}, int64_t{dims[i].size} - 1, &span) ||
        __builtin_add_overflow(span < 0 ? low : high, span, span < 0 ? &low : &high) || low < -kMaxOffset ||
        high > kMaxOffset) {
      fail("the access pattern reaches far outside the tensor");
    }
  }
  return raw_access_pattern(program, allocation, offset, dims, as_dtype);
}

std::string parse_operand_immediate(const OperandSpec& spec, std::string_view text, double& scalar,
                                    std::vector<int64_t>& list) {
  std::string error = parse_immediate(spec, text, scalar, list);
  if (error.empty() && spec.kind == OperandKind::i64) {
    // Decide on the integer itself: 2^53 + 1 rounds to 2^53 as a double.
    std::string_view digits = text.substr(std::min(text.find_first_not_of(" \t"), text.size()));
    while (!digits.empty() && (digits.back() == ' ' || digits.back() == '\t')) digits.remove_suffix(1);
    int64_t value = 0;
    std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (value > kMaxExactInteger || value < -kMaxExactInteger) {
      error = "integer " + std::string(digits) + " is out of range (at most 2^53 in magnitude)";
    }
  }
  return error;
}

std::string engine_error(const InstructionSpec& spec, Engine engine, Generation generation) {
  if (spec.runs_on(engine, generation)) return "";
  std::string allowed;
  for (const EngineAvailability& available : spec.engines) {
    if (generation >= available.since) allowed += (allowed.empty() ? "" : ", ") + std::string(enum_name(available.engine));
  }
  std::string where = " on " + std::string(enum_name(generation));
  if (allowed.empty()) return spec.name + " is not available" + where;
  return spec.name + " cannot run on the " + std::string(enum_name(engine)) + " engine" + where + " (engines: " +
         allowed + ")";
}

}  // namespace text_form_detail

namespace {

using namespace text_form_detail;

constexpr int64_t kMaxSliceNumber = int64_t{1} << 40;
constexpr size_t kMaxSuggestLength = 64;  // edit distance is quadratic; long garbage gets no hint

std::string did_you_mean(std::string_view wrong, const std::vector<std::string>& candidates) {
  if (wrong.size() > kMaxSuggestLength) return "";
  std::string hint = nearest_key(std::string(wrong), candidates);
  return hint.empty() ? "" : " (did you mean '" + hint + "'?)";
}

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

// A cursor over [pos, end) of one source line; columns are 1-based offsets into the line.
class Cursor {
 public:
  Cursor(std::string_view line, size_t pos, size_t end, const std::string& origin, uint32_t line_number)
      : m_line(line), m_pos(pos), m_end(end), m_origin(origin), m_line_number(line_number) {}

  [[noreturn]] void fail_at(size_t pos, const std::string& message) const {
    throw IsaError(m_origin + ":" + std::to_string(m_line_number) + ":" + std::to_string(pos + 1) + ": " + message);
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(m_pos, message); }

  size_t pos() const { return m_pos; }
  size_t end() const { return m_end; }
  std::string_view line() const { return m_line; }
  // Non-blank characters from here (for names that need not be identifiers).
  std::string_view word() {
    skip_ws();
    size_t start = m_pos;
    while (m_pos < m_end && m_line[m_pos] != ' ' && m_line[m_pos] != '\t') ++m_pos;
    return m_line.substr(start, m_pos - start);
  }
  Cursor sub(size_t pos, size_t end) const { return Cursor(m_line, pos, end, m_origin, m_line_number); }
  void skip_ws() {
    while (m_pos < m_end && (m_line[m_pos] == ' ' || m_line[m_pos] == '\t')) ++m_pos;
  }
  bool at_end() {
    skip_ws();
    return m_pos >= m_end;
  }
  char peek() {
    skip_ws();
    return m_pos < m_end ? m_line[m_pos] : '\0';
  }
  bool accept(char c) {
    if (peek() != c) return false;
    ++m_pos;
    return true;
  }
  // The rest of the input from here up to the next space, for messages.
  std::string next_token() {
    skip_ws();
    size_t stop = m_pos;
    while (stop < m_end && m_line[stop] != ' ' && m_line[stop] != '\t' && stop - m_pos < 40) ++stop;
    return std::string(m_line.substr(m_pos, stop - m_pos));
  }
  // The context and `what` texts are views: a message is built only when the input is wrong.
  void expect(char c, std::string_view context) {
    if (accept(c)) return;
    const std::string head = "expected '" + std::string(1, c) + "' " + std::string(context);
    fail(at_end() ? head + ", got the end of the line" : head + ", got '" + next_token() + "'");
  }
  void expect_end(std::string_view context) {
    if (!at_end()) fail("unexpected '" + next_token() + "' after " + std::string(context));
  }
  std::string_view identifier(std::string_view what) {
    skip_ws();
    if (m_pos >= m_end || !is_ident_start(m_line[m_pos])) {
      const std::string head = "expected " + std::string(what);
      fail(at_end() ? head + ", got the end of the line" : head + ", got '" + next_token() + "'");
    }
    size_t start = m_pos;
    while (m_pos < m_end && is_ident_char(m_line[m_pos])) ++m_pos;
    return m_line.substr(start, m_pos - start);
  }
  bool at_integer() {
    char c = peek();
    return (c >= '0' && c <= '9') || c == '-' || c == '+';
  }
  int64_t integer(std::string_view what, int64_t low, int64_t high) {
    skip_ws();
    size_t start = m_pos;
    if (m_pos < m_end && (m_line[m_pos] == '-' || m_line[m_pos] == '+')) ++m_pos;
    size_t digits = m_pos;
    while (m_pos < m_end && m_line[m_pos] >= '0' && m_line[m_pos] <= '9') ++m_pos;
    if (m_pos == digits) {
      m_pos = start;
      const std::string head = "expected " + std::string(what);
      fail(at_end() ? head + ", got the end of the line" : head + ", got '" + next_token() + "'");
    }
    std::string_view text = m_line.substr(start, m_pos - start);
    bool negative = text[0] == '-';
    // Accumulate with a cap so that any digit string is handled without overflow.
    int64_t value = 0;
    bool too_big = false;
    for (size_t i = digits; i < m_pos; ++i) {
      if (value > (std::numeric_limits<int64_t>::max() - 9) / 10) too_big = true;
      if (!too_big) value = value * 10 + (m_line[i] - '0');
    }
    if (negative) value = -value;
    if (too_big || value < low || value > high) {
      fail_at(start, "expected " + std::string(what) + " in " + std::to_string(low) + ".." + std::to_string(high) +
                         ", got " + std::string(text));
    }
    return value;
  }

 private:
  std::string_view m_line;
  size_t m_pos, m_end;
  const std::string& m_origin;
  uint32_t m_line_number;
};

std::vector<std::string> opcode_and_keyword_names() {
  std::vector<std::string> names = {"kernel", "target", "hbm"};
  for (std::string_view memory : EnumNames<OnChipMemory>::names) names.emplace_back(memory);
  for (const InstructionSpec& spec : all_instruction_specs()) names.push_back(spec.name);
  return names;
}

// One instruction line into one Instruction. Reads the program's declarations and writes nothing else, so
// that several of these parse the lines of a batch on the host threads at once.
class InstructionLineParser {
 public:
  InstructionLineParser(const Program& program, const std::unordered_map<std::string, uint32_t>& allocation_index,
                        const std::string& origin)
      : m_program(program), m_allocation_index(allocation_index), m_origin(origin) {}

  void parse(std::string_view line, uint32_t line_number, Instruction& inst) {
    m_line_number = line_number;
    Cursor c(line, 0, line.size(), m_origin, line_number);
    c.skip_ws();
    size_t word_pos = c.pos();
    std::string_view word = c.identifier("a declaration or an opcode");
    parse_instruction(c, word, word_pos, inst);
  }

 private:
  void parse_instruction(Cursor& c, std::string_view word, size_t word_pos, Instruction& inst) {
    const InstructionSpec* spec = find_instruction_spec(word);
    if (!spec) {
      c.fail_at(word_pos, "unknown opcode '" + std::string(word) + "'" + did_you_mean(word, opcode_and_keyword_names()));
    }
    inst = make_instruction(spec->opcode);
    inst.source_line = m_line_number;
    uint32_t given = 0;
    bool engine_given = false;
    size_t engine_pos = word_pos;
    if (!c.at_end()) {
      split_operands(c, m_operand_spans);
      for (auto [start, stop] : m_operand_spans) {
        Cursor operand = c.sub(start, stop);
        if (operand.at_end()) operand.fail("expected an operand NAME=VALUE");
        size_t name_pos = operand.pos();
        std::string_view name = operand.identifier("an operand name");
        if (!operand.accept('=')) operand.expect('=', "after operand name '" + std::string(name) + "'");
        operand.skip_ws();
        size_t value_pos = operand.pos();
        if (operand.at_end()) operand.fail("operand '" + std::string(name) + "' has no value");
        size_t value_end = stop;
        while (value_end > value_pos && (c.line()[value_end - 1] == ' ' || c.line()[value_end - 1] == '\t')) {
          --value_end;
        }
        Cursor value = c.sub(value_pos, value_end);
        std::string_view text = c.line().substr(value_pos, value_end - value_pos);
        if (name == "engine") {
          if (engine_given) operand.fail_at(name_pos, spec->name + ": operand 'engine' given twice");
          engine_given = true;
          engine_pos = value_pos;
          auto engine = parse_enum<Engine>(text);
          if (!engine) {
            std::vector<std::string> names(EnumNames<Engine>::names.begin(), EnumNames<Engine>::names.end());
            value.fail("unknown engine '" + std::string(text) + "'" + did_you_mean(text, names));
          }
          inst.engine = *engine;
          continue;
        }
        int i = spec->index_of(name);
        if (i < 0) {
          std::vector<std::string> names = {"engine"};
          for (const OperandSpec& o : spec->operands) names.push_back(o.name);
          operand.fail_at(name_pos, spec->name + " has no operand '" + std::string(name) + "'" + did_you_mean(name, names));
        }
        if ((given >> i) & 1u) {
          operand.fail_at(name_pos, spec->name + ": operand '" + std::string(name) + "' given twice");
        }
        given |= 1u << i;
        inst.present_mask |= 1u << i;
        const OperandSpec& o = spec->operands[i];
        bool as_tensor = o.kind != OperandKind::tensor_or_f32 ? is_tensor_kind(o.kind) : false;
        double scalar = 0;
        std::vector<int64_t> list;
        std::string error;
        if (o.kind == OperandKind::tensor_or_f32) {
          // A tensor name never reads as a number (declarations reject such names). Only names
          // starting like inf / nan can read as one, so others skip the number's try (and its message).
          const char first = text[0];
          if (!is_ident_start(first) || first == 'i' || first == 'I' || first == 'n' || first == 'N') {
            error = parse_operand_immediate(o, text, scalar, list);
            as_tensor = !error.empty() && is_ident_start(first);
          } else {
            as_tensor = true;
          }
        } else if (!as_tensor) {
          error = parse_operand_immediate(o, text, scalar, list);
        }
        if (as_tensor) {
          inst.tensors[o.tensor_slot] = parse_tensor(value);
          continue;
        }
        if (!error.empty()) value.fail(spec->name + "." + std::string(name) + ": " + error);
        if (o.scalar_slot >= 0) inst.scalars[o.scalar_slot] = scalar;
        if (o.list_slot >= 0) inst.lists[o.list_slot] = std::move(list);
        if (o.tensor_slot >= 0) inst.tensors[o.tensor_slot] = AccessPattern{};
      }
    }
    for (size_t i = 0; i < spec->operands.size(); ++i) {
      const OperandSpec& o = spec->operands[i];
      if (!o.optional && !o.has_default && !((given >> i) & 1u)) {
        c.fail_at(word_pos, spec->name + ": missing required operand '" + o.name + "'");
      }
    }
    std::string error = engine_error(*spec, inst.engine, m_program.generation);
    if (!error.empty()) c.fail_at(engine_pos, error);
  }

  // NAME, NAME[slices] or NAME{offset=O, [scalar_offset=rN, ][dtype=D, ]ap=[[a, b], ...]}.
  AccessPattern parse_tensor(Cursor& c) {
    size_t name_pos = c.pos();
    std::string name(c.identifier("a tensor name"));
    // Declarations are read ahead of the instruction lines: one declared further down is not known here yet.
    auto found = m_allocation_index.find(name);
    int allocation = found == m_allocation_index.end() ? -1 : int(found->second);
    if (allocation >= 0 && m_program.allocations[size_t(allocation)].declared_line > m_line_number) allocation = -1;
    if (allocation < 0) {
      std::vector<std::string> names;
      for (const Allocation& a : m_program.allocations) {
        if (a.declared_line < m_line_number) names.push_back(a.name);
      }
      c.fail_at(name_pos, "unknown tensor '" + name + "'" + did_you_mean(name, names));
    }
    auto index = static_cast<uint32_t>(allocation);
    size_t open_pos = c.pos();
    try {
      if (c.at_end()) return full_allocation(m_program, index);
      if (c.accept('[')) {
        parse_slices(c, m_slices);
        c.expect_end("the slice");
        return slice_allocation(m_program, index, m_slices);
      }
      if (c.accept('{')) {
        std::string word(c.identifier("'offset'"));
        if (word != "offset") c.fail("expected 'offset', got '" + word + "'");
        c.expect('=', "after 'offset'");
        int64_t offset = c.integer("an offset", -(int64_t{1} << 60), int64_t{1} << 60);
        c.expect(',', "after the offset");
        int offset_register = -1;
        word = std::string(c.identifier("'ap'"));
        if (word == "scalar_offset") {
          c.expect('=', "after 'scalar_offset'");
          size_t register_pos = c.pos();
          std::string name(c.identifier("a register like r3"));
          int64_t index = -1;
          if (!parse_register_name(name, index).empty() || index >= int64_t{kRegisterCount}) {
            c.fail_at(register_pos, "scalar_offset must name a register r0..r" + std::to_string(kRegisterCount - 1) +
                                        ", got '" + name + "'");
          }
          offset_register = int(index);
          c.expect(',', "after the scalar_offset register");
          word = std::string(c.identifier("'ap'"));
        }
        std::optional<DType> as_dtype;
        if (word == "dtype") {
          // The allocation's bytes read as another dtype (offset and strides in its elements).
          c.expect('=', "after 'dtype'");
          size_t dtype_pos = c.pos();
          std::string dtype_text(c.identifier("a dtype"));
          as_dtype = parse_dtype(dtype_text);
          if (!as_dtype) {
            std::vector<std::string> names;
            for (const DTypeInfo& info : all_dtypes()) names.emplace_back(info.name);
            c.fail_at(dtype_pos, "unknown dtype '" + dtype_text + "'" + did_you_mean(dtype_text, names));
          }
          c.expect(',', "after the dtype");
          word = std::string(c.identifier("'ap'"));
        }
        if (word != "ap") c.fail("expected 'ap', got '" + word + "'");
        c.expect('=', "after 'ap'");
        c.expect('[', "before the access pattern pairs");
        std::vector<ApDim>& dims = m_dims;  // reused across operands
        dims.clear();
        for (int i = 0; !c.accept(']'); ++i) {
          if (i > 0) c.expect(',', "between access pattern pairs");
          if (i > kMaxFreeDims) c.fail("at most 4 free dimensions after the partition pair");
          c.expect('[', "before a [stride, size] pair");
          ApDim dim;
          dim.stride = c.integer("a stride", kMinApStride, kMaxApStoredStride);
          c.expect(',', "inside a [stride, size] pair");
          dim.size = static_cast<uint32_t>(c.integer("a size", 0, std::numeric_limits<uint32_t>::max()));
          c.expect(']', "after a [stride, size] pair");
          dims.push_back(dim);
        }
        c.expect('}', "after the access pattern");
        c.expect_end("the access pattern");
        AccessPattern ap = checked_raw_access_pattern(m_program, index, offset, dims, as_dtype);
        ap.offset_register = static_cast<int8_t>(offset_register);
        return ap;
      }
    } catch (const std::invalid_argument& e) {
      c.fail_at(open_pos, std::string("bad slice: ") + e.what());
    }
    c.expect_end("the tensor name");
    return {};  // not reached: expect_end threw
  }

  // After '[': start:stop:step items up to and including ']', into `slices` (reused across operands).
  void parse_slices(Cursor& c, std::vector<Slice>& slices) {
    slices.clear();
    for (int i = 0; !c.accept(']'); ++i) {
      if (i > 0) c.expect(',', "between slices");
      if (i >= 8) c.fail("bad slice: more indices than any tensor has dimensions");
      Slice s;
      bool any = false;
      auto number = [&](const char* what) { return c.integer(what, -kMaxSliceNumber, kMaxSliceNumber); };
      if (c.at_integer()) s.start = number("an index"), any = true;
      if (c.accept(':')) {
        any = true;
        if (c.at_integer()) s.stop = number("a slice stop");
        if (c.accept(':') && c.at_integer()) s.step = number("a slice step");
      } else if (any) {
        s = Slice::index(s.start);
      }
      if (!any) c.fail(c.at_end() ? "bad slice: expected an index, got the end of the line"
                                  : "bad slice: expected an index, got '" + c.next_token() + "'");
      slices.push_back(s);
    }
  }

  // Splits the rest of the cursor's range at commas outside brackets and braces.
  // Into `parts` (reused from line to line: no allocation per instruction).
  void split_operands(Cursor& c, std::vector<std::pair<size_t, size_t>>& parts) {
    parts.clear();
    std::string_view line = c.line();
    size_t start = c.pos();
    std::vector<size_t>& open = m_open_brackets;  // positions of the unclosed brackets
    open.clear();
    for (size_t i = start; i < c.end(); ++i) {
      char ch = line[i];
      if (ch == '[' || ch == '{') {
        open.push_back(i);
      } else if (ch == ']' || ch == '}') {
        if (open.empty() || (line[open.back()] == '[') != (ch == ']')) c.fail_at(i, std::string("unmatched '") + ch + "'");
        open.pop_back();
      } else if (ch == ',' && open.empty()) {
        parts.emplace_back(start, i);
        start = i + 1;
      }
    }
    if (!open.empty()) c.fail_at(open.back(), std::string("unclosed '") + line[open.back()] + "'");
    parts.emplace_back(start, c.end());
  }

  const Program& m_program;
  const std::unordered_map<std::string, uint32_t>& m_allocation_index;
  const std::string& m_origin;
  uint32_t m_line_number = 0;
  std::vector<std::pair<size_t, size_t>> m_operand_spans;
  std::vector<Slice> m_slices;
  std::vector<ApDim> m_dims;
  std::vector<size_t> m_open_brackets;
};

// Reads a .tasm text in pieces of whole lines (parse_tasm_file never holds the whole file). Header and
// declaration lines are read in order as they come; instruction lines are set aside and parsed in batches,
// split over the host threads. Each instruction depends only on the declarations above it, so the program is
// the same for any split, and where several lines are wrong the first one's error is the one thrown, as a
// reader going line by line would.
class TasmParser {
 public:
  explicit TasmParser(const std::string& origin) : m_origin(origin), m_builder("", Generation::trn2) {}

  void reserve_instructions(size_t count) { program().instructions.reserve(count); }

  // `text` ends at a line's end ('\n' consumed) unless `last`; it need only live until feed returns.
  void feed(std::string_view text, bool last) {
    size_t start = 0;
    while (start < text.size() || (last && start == text.size())) {
      size_t stop = text.find('\n', start);
      if (stop == std::string_view::npos) stop = text.size();
      if (m_line_number == std::numeric_limits<uint32_t>::max()) {
        throw IsaError(m_origin + ": more than 2^32 lines");
      }
      ++m_line_number;
      std::string_view line(text.data() + start, stop - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      size_t comment = line.find('#');
      if (comment != std::string_view::npos) line = line.substr(0, comment);
      read_line(line);
      start = stop + 1;
    }
    parse_pending();
  }

  Program finish() { return m_builder.finish(); }

 private:
  // Host tuning, assumed. Lines per batch: enough to keep the threads busy between hand-offs, few enough that the
  // set-aside lines (16 bytes each) and their errors stay small.
  static constexpr size_t kBatchLines = 65536;
  // Below this many lines a batch is parsed on the calling thread (waking threads costs more).
  static constexpr size_t kThreadedBatchLines = 8192;
  static constexpr size_t kChunkLines = 1024;  // lines a thread takes at a time

  Program& program() { return m_builder.mutable_program(); }

  void read_line(std::string_view line) {
    size_t first = 0;
    while (first < line.size() && (line[first] == ' ' || line[first] == '\t')) ++first;
    if (first == line.size()) return;
    size_t word_end = first;
    while (word_end < line.size() && is_ident_char(line[word_end])) ++word_end;
    std::string_view word = line.substr(first, word_end - first);
    if (word == "kernel" || word == "target" || (!word.empty() && parse_memory_space(word))) {
      try {
        Cursor cursor(line, 0, line.size(), m_origin, m_line_number);
        parse_header_or_declaration(cursor);
      } catch (...) {
        parse_pending();  // a line above that is wrong too is the one to report
        throw;
      }
      return;
    }
    m_pending.push_back({line, m_line_number});
    m_seen_body = m_seen_any = true;
    if (m_pending.size() >= kBatchLines) parse_pending();
  }

  void parse_header_or_declaration(Cursor& c) {
    size_t word_pos = c.pos();
    std::string_view word = c.identifier("a declaration or an opcode");
    if (word == "kernel") {
      if (m_seen_any) c.fail_at(word_pos, "'kernel' must be the first line");
      c.skip_ws();
      size_t name_pos = c.pos();
      std::string name(c.word());
      if (name.empty()) c.fail("expected a kernel name, got the end of the line");
      for (char ch : name) {
        if (!is_ident_char(ch) && ch != '.' && ch != '-') c.fail_at(name_pos, "bad kernel name '" + name + "'");
      }
      c.expect_end("the kernel name");
      program().name = name;
      m_seen_any = true;
    } else if (word == "target") {
      if (m_seen_target) c.fail_at(word_pos, "'target' given twice");
      if (m_seen_body) c.fail_at(word_pos, "'target' must come before declarations and instructions");
      c.skip_ws();
      size_t gen_pos = c.pos();
      std::string name(c.identifier("a generation (trn1, trn2, trn3)"));
      auto generation = parse_enum<Generation>(name);
      if (!generation) {
        std::vector<std::string> names(EnumNames<Generation>::names.begin(), EnumNames<Generation>::names.end());
        c.fail_at(gen_pos, "unknown target '" + name + "'" + did_you_mean(name, names));
      }
      c.expect_end("the target");
      program().generation = *generation;
      m_seen_target = m_seen_any = true;
    } else {
      parse_declaration(c, word, m_line_number);
      m_seen_body = m_seen_any = true;
    }
  }

  // Parses the set-aside instruction lines into the program, in order; throws the first line's error if any is
  // wrong.
  void parse_pending() {
    if (m_pending.empty()) return;
    std::vector<Instruction>& instructions = program().instructions;
    const size_t base = instructions.size();
    instructions.resize(base + m_pending.size());
    const size_t chunks = (m_pending.size() + kChunkLines - 1) / kChunkLines;
    std::atomic<size_t> next_chunk{0};
    std::vector<LineError> errors;
    std::mutex errors_mutex;
    auto parse_chunks = [&](unsigned) {
      InstructionLineParser parser(program(), m_allocation_index, m_origin);
      for (size_t chunk = next_chunk++; chunk < chunks; chunk = next_chunk++) {
        const size_t end = std::min(m_pending.size(), (chunk + 1) * kChunkLines);
        for (size_t i = chunk * kChunkLines; i < end; ++i) {
          const PendingLine& line = m_pending[i];
          try {
            parser.parse(line.text, line.number, instructions[base + i]);
          } catch (...) {
            // Later lines of this chunk cannot hold the first error; other chunks go on (one may hold an earlier one).
            std::lock_guard<std::mutex> lock(errors_mutex);
            errors.push_back({line.number, std::current_exception()});
            break;
          }
        }
      }
    };
    if (m_pending.size() >= kThreadedBatchLines) {
      if (!m_workers) m_workers = std::make_unique<HostWorkers>();
      m_workers->run(parse_chunks);
    } else {
      parse_chunks(0);
    }
    m_pending.clear();
    if (!errors.empty()) {
      auto first = std::min_element(errors.begin(), errors.end(),
                                    [](const LineError& a, const LineError& b) { return a.line < b.line; });
      std::rethrow_exception(first->error);
    }
  }

  struct PendingLine {
    std::string_view text;  // in the piece being fed
    uint32_t number;
  };
  struct LineError {
    uint32_t line;
    std::exception_ptr error;
  };

  std::unordered_map<std::string, uint32_t> m_allocation_index;  // name -> index in allocations

  void parse_declaration(Cursor& c, std::string_view space_word, uint32_t line_number) {
    Allocation a;
    a.space = *parse_memory_space(space_word);
    a.declared_line = line_number;
    c.skip_ws();
    size_t name_pos = c.pos();
    a.name = std::string(c.identifier("a tensor name"));
    auto existing = m_allocation_index.find(a.name);
    if (existing != m_allocation_index.end()) {
      c.fail_at(name_pos, "tensor '" + a.name + "' is already declared on line " +
                              std::to_string(program().allocations[existing->second].declared_line));
    }
    std::string name_error = allocation_name_error(a.name);
    if (!name_error.empty()) c.fail_at(name_pos, name_error + " and cannot name a tensor");
    c.expect(':', "after the tensor name");
    c.skip_ws();
    size_t dtype_pos = c.pos();
    std::string dtype_text(c.identifier("a dtype"));
    auto dtype = parse_dtype(dtype_text);
    if (!dtype) {
      std::vector<std::string> names;
      for (const DTypeInfo& info : all_dtypes()) names.emplace_back(info.name);
      c.fail_at(dtype_pos, "unknown dtype '" + dtype_text + "'" + did_you_mean(dtype_text, names));
    }
    a.dtype = *dtype;
    c.skip_ws();
    size_t shape_pos = c.pos();
    c.expect('[', "before the shape");
    for (int i = 0; !c.accept(']'); ++i) {
      if (i > 0) c.expect(',', "between dimensions");
      if (i >= 8) c.fail_at(shape_pos, "a tensor has at most 8 dimensions");
      a.shape.push_back(static_cast<uint32_t>(c.integer("a dimension", 1, std::numeric_limits<uint32_t>::max())));
    }
    std::string shape_error = allocation_shape_error(a.shape);
    if (!shape_error.empty()) c.fail_at(shape_pos, "bad shape: " + shape_error);
    bool placed = false;
    if (c.accept('@')) {
      placed = true;
      a.base_partition = static_cast<uint32_t>(c.integer("a partition", 0, std::numeric_limits<uint32_t>::max()));
      c.expect(':', "between partition and byte offset");
      a.base_byte = static_cast<uint64_t>(c.integer("a byte offset", 0, int64_t{1} << 48));
    }
    if (!c.at_end()) {
      size_t role_pos = c.pos();
      std::string role(c.identifier("a role (input, output or private)"));
      if (role == "input") {
        a.role = AllocationRole::input;
      } else if (role == "output") {
        a.role = AllocationRole::output;
      } else if (role == "private") {
        if (a.space != MemorySpace::hbm) c.fail_at(role_pos, "only an HBM tensor can be private (on-chip tensors are each core's own)");
        a.role = AllocationRole::private_to_core;
      } else {
        c.fail_at(role_pos, "unknown role '" + role + "' (expected input, output or private)");
      }
      c.expect_end("the role");
    }
    const std::string name = a.name;
    if (placed || a.space == MemorySpace::hbm || a.role != AllocationRole::internal) {
      // Name and shape are checked above, so the allocation goes in directly: the builder's own
      // duplicate check is a linear scan, quadratic over the tens of thousands of tiles a traced
      // NKI kernel declares.
      program().allocations.push_back(std::move(a));
    } else if (a.space == MemorySpace::sbuf) {
      m_builder.sbuf(a.name, a.dtype, a.shape);
    } else {
      m_builder.psum(a.name, a.dtype, a.shape);
    }
    program().allocations.back().declared_line = line_number;
    m_allocation_index.emplace(name, uint32_t(program().allocations.size() - 1));
  }

  const std::string& m_origin;
  ProgramBuilder m_builder;
  uint32_t m_line_number = 0;
  std::vector<PendingLine> m_pending;  // instruction lines of the piece being fed, not parsed yet
  std::unique_ptr<HostWorkers> m_workers;  // started by the first batch big enough to share
  bool m_seen_any = false, m_seen_target = false, m_seen_body = false;
};

bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Whether operand `o` of `inst` holds exactly its default value (then the printer omits it).
bool equals_default(const Instruction& inst, const OperandSpec& o) {
  if (!o.has_default) return false;
  if (o.tensor_slot >= 0 && inst.tensors[o.tensor_slot].present()) return false;
  double scalar = 0;
  std::vector<int64_t> list;
  if (!parse_immediate(o, o.default_text, scalar, list).empty()) return false;
  if (o.scalar_slot >= 0 && !same_value(inst.scalars[o.scalar_slot], scalar)) return false;
  if (o.list_slot >= 0 && inst.lists[o.list_slot] != list) return false;
  return true;
}

bool is_whole(const Program& program, const AccessPattern& ap) {
  try {
    return ap == full_allocation(program, ap.allocation);
  } catch (const std::invalid_argument&) {
    return false;  // an allocation of more than 4 free dims has no whole-tensor pattern
  }
}

std::string print_allocation(const Allocation& a) {
  std::string text = std::string(memory_space_name(a.space)) + " " + a.name + " : " + std::string(dtype_name(a.dtype)) + "[";
  for (size_t i = 0; i < a.shape.size(); ++i) text += (i ? ", " : "") + std::to_string(a.shape[i]);
  text += "]";
  // On-chip placement is always written so that a re-parse does not depend on the bump allocator.
  if (a.space != MemorySpace::hbm || a.base_partition != 0 || a.base_byte != 0) {
    text += " @ " + std::to_string(a.base_partition) + ":" + std::to_string(a.base_byte);
  }
  if (a.role == AllocationRole::input) text += " input";
  if (a.role == AllocationRole::output) text += " output";
  if (a.role == AllocationRole::private_to_core) text += " private";
  return text;
}

std::string print_instruction(const Program& program, const Instruction& inst) {
  const InstructionSpec& spec = inst.spec();
  std::string text = spec.name;
  const char* separator = " ";
  for (size_t i = 0; i < spec.operands.size(); ++i) {
    const OperandSpec& o = spec.operands[i];
    if (!((inst.present_mask >> i) & 1u) || equals_default(inst, o)) continue;
    std::string value;
    if (o.tensor_slot >= 0 && inst.tensors[o.tensor_slot].present()) {
      const AccessPattern& ap = inst.tensors[o.tensor_slot];
      value = is_whole(program, ap) ? program.allocation(ap).name : describe_access_pattern(program, ap);
    } else if (o.kind == OperandKind::tensor_in || o.kind == OperandKind::tensor_out ||
               o.kind == OperandKind::tensor_inout) {
      continue;  // marked present but holds no tensor: nothing to write
    } else {
      value = format_immediate(o, o.scalar_slot >= 0 ? inst.scalars[o.scalar_slot] : 0.0,
                               o.list_slot >= 0 ? inst.lists[o.list_slot] : std::vector<int64_t>{});
    }
    text += separator + o.name + "=" + value;
    separator = ", ";
  }
  if (inst.engine != spec.engines.front().engine) text += separator + std::string("engine=") + std::string(enum_name(inst.engine));
  return text;
}

}  // namespace

Program parse_tasm(const std::string& text, const std::string& origin) {
  TasmParser parser(origin);
  // One instruction per line at most: reserving up front saves the vector's regrowth (moving every instruction
  // parsed so far) on programs of millions of lines.
  parser.reserve_instructions(size_t(std::count(text.begin(), text.end(), '\n')) + 1);
  parser.feed(text, /*last=*/true);
  return parser.finish();
}

Program parse_tasm_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IsaError(path + ": cannot read the file");
  TasmParser parser(path);
  // Read in pieces (a file of millions of instructions is hundreds of MiB of text that need not all be held).
  constexpr size_t kPieceBytes = size_t{8} << 20;
  std::string piece;
  bool reserved = false;
  std::string buffer(kPieceBytes, '\0');
  for (;;) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (in.bad()) throw IsaError(path + ": cannot read the file");
    piece.append(buffer.data(), got);
    const bool last = got < buffer.size();
    if (!reserved) {
      // One instruction per line at most: the first piece's lines per byte, over the file's size, sizes the
      // instruction vector once instead of regrowing it (moving every instruction) as it fills.
      reserved = true;
      std::error_code error;
      const uintmax_t file_bytes = std::filesystem::file_size(path, error);
      const size_t lines = size_t(std::count(piece.begin(), piece.end(), '\n')) + 1;
      if (!error && !piece.empty() && file_bytes > piece.size()) {
        parser.reserve_instructions(size_t(double(lines) * double(file_bytes) / double(piece.size()) * 1.05) + 16);
      }
    }
    if (last) {
      parser.feed(piece, /*last=*/true);
      break;
    }
    const size_t end = piece.rfind('\n');
    if (end == std::string::npos) continue;  // one line longer than a piece: read on
    parser.feed(std::string_view(piece).substr(0, end + 1), /*last=*/false);
    piece.erase(0, end + 1);
  }
  return parser.finish();
}

std::string print_tasm(const Program& program) {
  std::string text;
  if (!program.name.empty()) text += "kernel " + program.name + "\n";
  text += "target " + std::string(enum_name(program.generation)) + "\n";
  for (const Allocation& a : program.allocations) text += print_allocation(a) + "\n";
  for (const Instruction& inst : program.instructions) text += print_instruction(program, inst) + "\n";
  return text;
}

}  // namespace trnsim::isa
