#include "record/recording_reader.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

#include "record/program_store.h"

namespace trnsim::record {

namespace fs = std::filesystem;

std::string Recording::incomplete_reason() const {
  if (!footer) return "it has no footer (the recording process stopped before the block ended)";
  if (!footer->complete) return "the recorded block raised: " + (footer->error.empty() ? "(no message)" : footer->error);
  return "";
}

Recording read_recording(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw std::runtime_error(path + ": not a recording directory (" +
                             (fs::exists(path, ec) ? "not a directory" : "no such directory") + ")");
  }
  const std::string manifest = (fs::path(path) / kManifestFile).string();
  std::ifstream in(manifest, std::ios::binary);
  if (!in) throw std::runtime_error(manifest + ": missing or unreadable (not a trnsim recording?)");
  Recording recording;
  recording.path = path;
  std::string line;
  size_t number = 0;
  bool have_header = false;
  std::map<std::string, uint64_t> declared_of;  // hash -> the size a launch declared for it
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    if (recording.footer) throw std::runtime_error(manifest + ":" + std::to_string(number) + ": a line after the footer");
    const LineKind kind = line_kind(line, manifest, number);
    if (!have_header) {
      if (kind != LineKind::header) {
        throw std::runtime_error(manifest + ":" + std::to_string(number) + ": the first line must be the header");
      }
      recording.header = parse_header(line, manifest, number);
      have_header = true;
      continue;
    }
    if (kind == LineKind::header) throw std::runtime_error(manifest + ":" + std::to_string(number) + ": a second header");
    if (kind == LineKind::footer) {
      recording.footer = parse_footer(line, manifest, number);
      continue;
    }
    Launch launch = parse_launch(line, manifest, number);
    if (launch.index != recording.launches.size()) {
      throw std::runtime_error(manifest + ":" + std::to_string(number) + ": launch index " + std::to_string(launch.index) +
                               ", expected " + std::to_string(recording.launches.size()));
    }
    for (size_t i = 0; i < launch.program_hashes.size(); ++i) {
      const std::string& hash = launch.program_hashes[i];
      const std::optional<uint64_t> declared =
          launch.program_bytes.empty() ? std::nullopt : std::optional<uint64_t>(launch.program_bytes[i]);
      if (declared) {
        auto [earlier, fresh] = declared_of.emplace(hash, *declared);
        if (!fresh && earlier->second != *declared) {
          throw std::runtime_error(manifest + ":" + std::to_string(number) + ": program " + hash + " declared " +
                                   std::to_string(*declared) + " bytes here, " + std::to_string(earlier->second) +
                                   " before");
        }
      }
      auto it = recording.programs.find(hash);
      if (it == recording.programs.end()) it = recording.programs.emplace(hash, read_program(path, hash, declared)).first;
      launch.programs.push_back(it->second);
    }
    recording.launches.push_back(std::move(launch));
  }
  if (!have_header) throw std::runtime_error(manifest + ": empty (no header line)");
  if (recording.footer && recording.footer->launches != recording.launches.size()) {
    throw std::runtime_error(manifest + ": the footer counts " + std::to_string(recording.footer->launches) +
                             " launches but the manifest has " + std::to_string(recording.launches.size()));
  }
  return recording;
}

}  // namespace trnsim::record
