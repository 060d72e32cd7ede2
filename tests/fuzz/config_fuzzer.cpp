// Fuzz target for the config loader: any YAML text, laid over the shipped trn2 config as a user's config is,
// must either load or throw ConfigError (located, with its rule); whatever loads must load again to the same
// hash from its canonical YAML (the printer and the reader agree). Any other exception, or a crash, is a bug.
// The input's first line, when it has the form KEY=VALUE, is also applied as a --set override.
// libFuzzer build and run: tests/fuzz/tasm_fuzzer.cpp (the same flags; corpus tests/fuzz/config_corpus).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "config/config_loader.h"
#include "config/config_printer.h"
#include "config/config_tree.h"

namespace {

[[noreturn]] void bug(const char* what, const std::string& input, const std::string& detail) {
  std::fprintf(stderr, "config fuzzer: %s\n--- input ---\n%s\n--- detail ---\n%s\n", what, input.c_str(),
               detail.c_str());
  std::abort();
}

const trnsim::ConfigNode& trn2_tree() {
  static const trnsim::ConfigNode tree =
      trnsim::parse_yaml_file(trnsim::resolve_config_path("trn2", trnsim::default_config_dirs()));
  return tree;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trnsim;
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::string canonical;
  try {
    ConfigNode root = trn2_tree();
    merge_config_tree(root, parse_yaml(input, "fuzz.yaml"));
    const std::string first_line = input.substr(0, input.find('\n'));
    if (first_line.find('=') != std::string::npos && first_line.find(':') == std::string::npos) {
      apply_override(root, first_line);
    }
    canonical = to_canonical_yaml(read_hardware_config(root, "fuzz.yaml"));
  } catch (const ConfigError&) {
    return 0;  // refused with a located message: the expected outcome for most inputs
  } catch (const std::exception& e) {
    bug("an exception other than ConfigError", input, e.what());
  }
  try {
    const std::string again = to_canonical_yaml(read_hardware_config(parse_yaml(canonical, "canonical.yaml")));
    if (again != canonical) bug("the canonical YAML reads back to another config", input, canonical + "\n---\n" + again);
  } catch (const std::exception& e) {
    bug("the canonical YAML of a loaded config does not load", input, canonical + "\n" + e.what());
  }
  return 0;
}
