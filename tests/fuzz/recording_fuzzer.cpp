// Fuzz target for the recording reader: any manifest.jsonl text, in a recording whose programs/ holds the seed
// programs (tests/fuzz/recording_programs: valid ones, a truncated one, a gzip bomb), must either read or throw
// std::runtime_error naming the file; the same bytes as a program file must inflate within the bound or throw
// std::runtime_error. Any other exception, or a crash, is a bug.
// libFuzzer build and run: tests/fuzz/tasm_fuzzer.cpp (the same flags; corpus tests/fuzz/recording_corpus).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "record/gzip.h"
#include "record/recording_reader.h"

namespace {

namespace fs = std::filesystem;

[[noreturn]] void bug(const char* what, const std::string& input, const std::string& detail) {
  std::fprintf(stderr, "recording fuzzer: %s\n--- input ---\n%s\n--- detail ---\n%s\n", what, input.c_str(),
               detail.c_str());
  std::abort();
}

// A recording directory of this process whose programs/ is the seed program store; each input is its manifest.
const std::string& recording_dir() {
  static const std::string dir = [] {
    const fs::path path = fs::temp_directory_path() / ("trnsim-recording-fuzz-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    fs::create_directory_symlink(fs::path(TRNSIM_SOURCE_DIR) / "tests/fuzz/recording_programs", path / "programs");
    return path.string();
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream manifest(recording_dir() + "/manifest.jsonl", std::ios::binary | std::ios::trunc);
    manifest.write(input.data(), std::streamsize(input.size()));
  }
  try {
    trnsim::record::read_recording(recording_dir());
  } catch (const std::runtime_error&) {
  } catch (const std::exception& e) {
    bug("read_recording threw an exception other than std::runtime_error", input, e.what());
  }
  try {
    trnsim::record::gzip_decompress(input, "fuzz.tasm.gz", uint64_t{1} << 20);
  } catch (const std::runtime_error&) {
  } catch (const std::exception& e) {
    bug("gzip_decompress threw an exception other than std::runtime_error", input, e.what());
  }
  return 0;
}
