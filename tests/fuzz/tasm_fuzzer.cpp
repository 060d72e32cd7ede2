// Fuzz target for the .tasm reader: any input must either parse or throw IsaError, and whatever
// parses must survive print -> parse -> print unchanged (text and structure).
//
// libFuzzer build (clang only; the CXX flags instrument the library too, so that coverage
// guides the search, and make UBSan findings fatal):
//   CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release \
//     -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -g"
//   cmake --build build-fuzz --target tasm_fuzzer
//   mkdir -p /tmp/tasm-corpus && cp tests/fuzz/corpus/*.tasm /tmp/tasm-corpus/
//   build-fuzz/bin/tasm_fuzzer /tmp/tasm-corpus -max_total_time=60 -max_len=4096
// (libFuzzer adds what it finds to the first corpus directory, hence the scratch copy.)
// With any compiler, tasm_fuzz_smoke (standalone_fuzz_main.cpp) runs the corpus plus seeded
// random mutations through the same entry point as a ctest (label fuzz).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "isa/text_form.h"

namespace {

[[noreturn]] void bug(const char* what, const std::string& input, const std::string& detail) {
  std::fprintf(stderr, "tasm fuzzer: %s\n--- input ---\n%s\n--- detail ---\n%s\n", what, input.c_str(), detail.c_str());
  std::abort();
}

bool same_scalar(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Structural equality of two programs, ignoring source/declaration lines.
bool same_program(const trnsim::isa::Program& a, const trnsim::isa::Program& b) {
  using namespace trnsim::isa;
  if (a.name != b.name || a.generation != b.generation || a.allocations.size() != b.allocations.size() ||
      a.instructions.size() != b.instructions.size()) {
    return false;
  }
  for (size_t i = 0; i < a.allocations.size(); ++i) {
    const Allocation &x = a.allocations[i], &y = b.allocations[i];
    if (x.name != y.name || x.space != y.space || x.dtype != y.dtype || x.shape != y.shape || x.role != y.role ||
        x.base_partition != y.base_partition || x.base_byte != y.base_byte) {
      return false;
    }
  }
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    const Instruction &x = a.instructions[i], &y = b.instructions[i];
    if (x.opcode != y.opcode || x.engine != y.engine || x.present_mask != y.present_mask || x.lists != y.lists ||
        x.tensors.size() != y.tensors.size() || x.scalars.size() != y.scalars.size()) {
      return false;
    }
    for (size_t t = 0; t < x.tensors.size(); ++t) {
      if (!(x.tensors[t] == y.tensors[t])) return false;
    }
    for (const OperandSpec& o : x.spec().operands) {
      bool tensor_given = o.tensor_slot >= 0 && x.tensors[o.tensor_slot].present();
      if (o.scalar_slot >= 0 && !tensor_given && !same_scalar(x.scalars[o.scalar_slot], y.scalars[o.scalar_slot])) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using trnsim::isa::IsaError;
  std::string input(reinterpret_cast<const char*>(data), size);
  trnsim::isa::Program program;
  try {
    program = trnsim::isa::parse_tasm(input, "fuzz.tasm");
  } catch (const IsaError&) {
    return 0;  // rejected with a located message: the expected outcome for most inputs
  }
  std::string printed = trnsim::isa::print_tasm(program);
  trnsim::isa::Program reparsed;
  try {
    reparsed = trnsim::isa::parse_tasm(printed, "printed.tasm");
  } catch (const IsaError& e) {
    bug("the printer wrote text the parser rejects", input, printed + "\n" + e.what());
  }
  std::string reprinted = trnsim::isa::print_tasm(reparsed);
  if (reprinted != printed) bug("print(parse(print(p))) != print(p)", input, printed + "\n---\n" + reprinted);
  if (!same_program(program, reparsed)) bug("parse(print(p)) differs from p", input, printed);
  // The JSON-lines form must round-trip exactly as well.
  std::string json = trnsim::isa::to_json_lines(program);
  try {
    if (!same_program(program, trnsim::isa::parse_json_lines(json, "fuzz.jsonl"))) {
      bug("parse_json_lines(to_json_lines(p)) differs from p", input, json);
    }
  } catch (const IsaError& e) {
    bug("to_json_lines wrote text parse_json_lines rejects", input, json + "\n" + e.what());
  }
  return 0;
}
