#include "record/program_store.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "config/config_printer.h"
#include "isa/text_form.h"
#include "record/gzip.h"
#include "record/recording_format.h"

namespace trnsim::record {
namespace {

namespace fs = std::filesystem;

bool read_file(const fs::path& path, std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return true;
}

}  // namespace

std::string program_hash(const std::string& tasm_text) { return stable_hash(tasm_text); }

std::string program_file(const std::string& hash, bool compressed) {
  return std::string(kProgramsDir) + "/" + hash + (compressed ? ".tasm.gz" : ".tasm");
}

void write_program(const std::string& recording_dir, const std::string& hash, const std::string& tasm_text,
                   bool compressed) {
  const fs::path path = fs::path(recording_dir) / program_file(hash, compressed);
  if (fs::exists(path)) return;
  const std::string bytes = compressed ? gzip_compress(tasm_text) : tasm_text;
  // Written under a temporary name and renamed: a program file is either whole or absent.
  const fs::path partial = path.string() + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) throw std::runtime_error("cannot write " + partial.string());
  }
  fs::rename(partial, path);
}

std::shared_ptr<const isa::Program> read_program(const std::string& recording_dir, const std::string& hash) {
  const fs::path gz = fs::path(recording_dir) / program_file(hash, true);
  const fs::path plain = fs::path(recording_dir) / program_file(hash, false);
  std::string bytes, text, origin;
  if (read_file(gz, bytes)) {
    origin = gz.string();
    text = gzip_decompress(bytes, origin);
  } else if (read_file(plain, text)) {
    origin = plain.string();
  } else {
    throw std::runtime_error(gz.string() + ": missing (nor is there " + plain.filename().string() +
                             "); the recording is incomplete");
  }
  if (program_hash(text) != hash) {
    throw std::runtime_error(origin + ": its text hashes to " + program_hash(text) + ", not " + hash +
                             " (the file was changed after recording)");
  }
  try {
    return std::make_shared<const isa::Program>(isa::parse_tasm(text, origin));
  } catch (const isa::IsaError& e) {
    throw std::runtime_error(e.what());
  }
}

}  // namespace trnsim::record
