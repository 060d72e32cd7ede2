#include "record/recording_writer.h"

#include <filesystem>

#include "isa/text_form.h"
#include "record/program_store.h"

namespace trnsim::record {
namespace {

namespace fs = std::filesystem;

// Whether the directory holds only what a recording writes (so replacing it loses nothing else).
bool is_recording_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kManifestFile, ec)) return false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kManifestFile) continue;
    if (name != kProgramsDir || !entry.is_directory()) return false;
    for (const fs::directory_entry& program : fs::directory_iterator(entry.path(), ec)) {
      const std::string file = program.path().filename().string();
      if (!program.is_regular_file() || file.find(".tasm") == std::string::npos) return false;
    }
  }
  return !ec;
}

void prepare_directory(const std::string& path, bool overwrite) {
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(path, ec);
  if (!ec && fs::exists(status)) {
    if (!overwrite) throw RecordingError(path + " exists (pass overwrite=True to replace it)");
    if (fs::is_directory(status)) {
      if (!fs::is_empty(path, ec) && !is_recording_dir(path)) {
        throw RecordingError(path + " is a directory that is not a trnsim recording (it holds more than " +
                             std::string(kManifestFile) + " and " + kProgramsDir + "/): not replacing it");
      }
      fs::remove_all(path, ec);
    } else {
      fs::remove(path, ec);
    }
    if (ec) throw RecordingError("cannot replace " + path + ": " + ec.message());
  }
  fs::create_directories(fs::path(path) / kProgramsDir, ec);
  if (ec) throw RecordingError("cannot create " + path + ": " + ec.message());
}

}  // namespace

RecordingWriter::RecordingWriter(const std::string& path, RecordingHeader header, bool overwrite)
    : m_path(path), m_header(std::move(header)), m_start(std::chrono::steady_clock::now()) {
  if (path.empty()) throw RecordingError("the recording needs a path");
  prepare_directory(path, overwrite);
  m_manifest.open(fs::path(path) / kManifestFile, std::ios::binary | std::ios::trunc);
  if (!m_manifest) throw RecordingError("cannot write " + (fs::path(path) / kManifestFile).string());
  m_manifest << header_line(m_header) << "\n" << std::flush;
}

RecordingWriter::~RecordingWriter() {
  if (m_closed) return;
  try {
    close(false, "the recording was not closed");
  } catch (...) {
    // A destructor must not throw; the manifest then simply has no footer (incomplete).
  }
}

const std::pair<std::string, uint64_t>& RecordingWriter::hash_of(const std::shared_ptr<const isa::Program>& program) {
  auto it = m_hash_of.find(program.get());
  if (it != m_hash_of.end()) return it->second.second;
  const std::string text = isa::print_tasm(*program);
  const std::string hash = program_hash(text);
  if (m_written.insert(hash).second) write_program(m_path, hash, text, m_header.compressed_programs);
  return m_hash_of.emplace(program.get(), std::make_pair(program, std::make_pair(hash, uint64_t(text.size()))))
      .first->second.second;
}

void RecordingWriter::add(Launch launch) {
  if (m_closed) throw RecordingError(m_path + ": the recording is closed");
  launch.index = m_launches;
  if (launch.kind == "kernel") {
    if (launch.programs.empty()) throw RecordingError("a kernel launch without programs (" + launch.op + ")");
    launch.program_hashes.clear();
    launch.program_bytes.clear();
    for (const auto& program : launch.programs) {
      const auto& [hash, bytes] = hash_of(program);
      launch.program_hashes.push_back(hash);
      launch.program_bytes.push_back(bytes);
    }
  }
  m_manifest << launch_line(launch) << "\n" << std::flush;
  if (!m_manifest) throw RecordingError("cannot write " + (fs::path(m_path) / kManifestFile).string());
  ++m_launches;
}

void RecordingWriter::close(bool complete, const std::string& error) {
  if (m_closed) return;
  m_closed = true;
  RecordingFooter footer;
  footer.complete = complete;
  footer.launches = m_launches;
  footer.host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  footer.error = error;
  m_manifest << footer_line(footer) << "\n" << std::flush;
  m_manifest.close();
  if (!m_manifest) throw RecordingError("cannot write " + (fs::path(m_path) / kManifestFile).string());
}

}  // namespace trnsim::record
