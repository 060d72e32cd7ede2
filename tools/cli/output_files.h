// The files a command writes (--output, --stats, --trace, --emit-tasm): checked together before
// any simulation time is spent (no two are one file however spelled, none is overwritten
// without --force, each can be created), and written with their errors reported.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trnsim::cli {

class OutputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One spelling per file: "f.npy", "./f.npy", "dir/../f.npy" and a symlink to it give the same
// key. The path is made absolute first, since weakly_canonical leaves a relative path whose
// first component does not exist as it is.
inline std::string same_file_key(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) return path;
  // A symlink to a file not written yet (the output's own) is dangling, which weakly_canonical
  // leaves unresolved: follow it by hand (a bounded number of hops, for loops).
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(absolute, ec)); ++hops) {
    fs::path target = fs::read_symlink(absolute, ec);
    if (ec) break;
    absolute = target.is_absolute() ? target : absolute.parent_path() / target;
  }
  fs::path canonical = fs::weakly_canonical(absolute, ec);
  return (ec ? absolute.lexically_normal() : canonical).string();
}

// Refuses an existing file without --force (write_npy also creates exclusively), and a path that
// cannot be written: a directory, a file without write permission, a missing or read-only folder.
inline void check_writable(const std::string& flag, const std::string& path, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (!ec && fs::exists(status)) {
    if (fs::is_directory(status)) throw OutputFileError(flag + ": " + path + " is a directory");
    if (!force) throw OutputFileError(flag + ": " + path + " exists (pass --force to overwrite)");
    if (::access(path.c_str(), W_OK) != 0) {
      throw OutputFileError(flag + ": " + path + " cannot be written (" + std::strerror(errno) + ")");
    }
    return;
  }
  if (ec && ec != std::errc::no_such_file_or_directory) throw OutputFileError(flag + ": " + path + ": " + ec.message());
  fs::path folder = fs::absolute(path, ec).parent_path();
  fs::file_status folder_status = fs::status(folder, ec);
  if (ec || !fs::is_directory(folder_status)) {
    throw OutputFileError(flag + ": " + path + " cannot be created (no folder " + folder.string() + ")");
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw OutputFileError(flag + ": " + path + " cannot be created in " + folder.string() + " (" + std::strerror(errno) + ")");
  }
}

// Writes a text artefact; a failed write (disk full, a path that vanished) is an error, not a
// missing file after exit 0.
// `mode`: std::ios::app adds to the end of an existing file (bench --csv --append).
template <class Write>
void write_text_file(const std::string& flag, const std::string& path, Write&& write,
                     std::ios::openmode mode = std::ios::out | std::ios::trunc) {
  std::ofstream out(path, mode);
  if (out) write(out);
  out.close();
  if (!out) throw OutputFileError(flag + ": cannot write " + path + " (" + std::strerror(errno) + ")");
}

// (flag, path) pairs, e.g. ("--output c", "c.npy"), ("--stats", "s.json"); empty paths are skipped.
// `appended`: the flags whose existing file is added to rather than replaced (no --force needed), still
// refused when another output of the command is the same file.
inline void check_destinations(const std::vector<std::pair<std::string, std::string>>& destinations, bool force,
                               const std::vector<std::string>& appended = {}) {
  std::map<std::string, std::string> claimed;  // canonical path -> the flag that writes it
  for (const auto& [flag, path] : destinations) {
    if (path.empty()) continue;
    auto [it, fresh] = claimed.emplace(same_file_key(path), flag);
    if (!fresh) {
      throw OutputFileError(flag + ": " + path + " is already the file of another output (" + it->second + ")");
    }
    const bool appends = std::find(appended.begin(), appended.end(), flag) != appended.end();
    check_writable(flag, path, force || appends);
  }
}

}  // namespace trnsim::cli
