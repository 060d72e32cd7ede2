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

// Reads the file unless it is missing (false); one larger than `max_bytes` is an error before it is read.
bool read_file(const fs::path& path, std::string& text, uint64_t max_bytes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > max_bytes) {
    throw std::runtime_error(path.string() + ": " + std::to_string(size) + " bytes, more than the " +
                             std::to_string(max_bytes) + " its program may take (a damaged or hostile file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  text = buffer.str();
  return true;
}

// The most gzip bytes a text of `text_bytes` needs: deflate's stored blocks add 5 bytes per 16 KiB at worst,
// plus the gzip header and trailer (rounded up generously).
uint64_t max_gzip_bytes(uint64_t text_bytes) { return text_bytes + text_bytes / 1024 + 4096; }

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

std::shared_ptr<const isa::Program> program_from_file_bytes(const std::string& bytes, bool compressed,
                                                            const std::string& hash,
                                                            std::optional<uint64_t> declared_bytes,
                                                            const std::string& origin) {
  const uint64_t max_bytes = declared_bytes.value_or(kMaxUndeclaredProgramBytes);
  std::string text = compressed ? gzip_decompress(bytes, origin, max_bytes) : bytes;
  if (text.size() > max_bytes) {
    throw std::runtime_error(origin + ": " + std::to_string(text.size()) + " bytes of text, more than the " +
                             std::to_string(max_bytes) + " its program may have");
  }
  if (declared_bytes && text.size() != *declared_bytes) {
    throw std::runtime_error(origin + ": " + std::to_string(text.size()) + " bytes of text, but the manifest declares " +
                             std::to_string(*declared_bytes) + " (the file was changed after recording)");
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

std::shared_ptr<const isa::Program> read_program(const std::string& recording_dir, const std::string& hash,
                                                 std::optional<uint64_t> declared_bytes) {
  const fs::path gz = fs::path(recording_dir) / program_file(hash, true);
  const fs::path plain = fs::path(recording_dir) / program_file(hash, false);
  const uint64_t max_bytes = declared_bytes.value_or(kMaxUndeclaredProgramBytes);
  std::string bytes;
  if (read_file(gz, bytes, max_gzip_bytes(max_bytes))) {
    return program_from_file_bytes(bytes, true, hash, declared_bytes, gz.string());
  }
  if (read_file(plain, bytes, max_bytes)) {
    return program_from_file_bytes(bytes, false, hash, declared_bytes, plain.string());
  }
  throw std::runtime_error(gz.string() + ": missing (nor is there " + plain.filename().string() +
                           "); the recording is incomplete");
}

}  // namespace trnsim::record
