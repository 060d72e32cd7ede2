// Writes a recording as launches arrive (see recording_format.h): the header when opened, each
// launch's new programs and then its manifest line (flushed, so what was recorded survives a crash),
// and a footer when closed. Not thread-safe: the device runtime calls it under its lock.
#pragma once

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

#include "record/launch.h"
#include "record/recording_format.h"

namespace trnsim::record {

class RecordingError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RecordingWriter {
 public:
  // Creates the directory `path`. An existing path is refused unless `overwrite`; even then only
  // a file, an empty directory or an earlier recording (manifest.jsonl and programs/, nothing
  // else) is replaced: a directory holding anything else is the user's and is refused.
  RecordingWriter(const std::string& path, RecordingHeader header, bool overwrite);
  // A writer destroyed without close() writes the footer of an incomplete recording.
  ~RecordingWriter();
  RecordingWriter(const RecordingWriter&) = delete;
  RecordingWriter& operator=(const RecordingWriter&) = delete;

  // Appends the launch (its index is assigned here); programs not yet in the recording are written
  // first. A kernel launch's `programs` must be set; its hashes are filled in.
  void add(Launch launch);
  // Writes the footer; `complete` false marks a block that raised (`error` says what).
  void close(bool complete, const std::string& error);

  const std::string& path() const { return m_path; }
  uint64_t launches() const { return m_launches; }
  size_t distinct_programs() const { return m_written.size(); }
  bool closed() const { return m_closed; }

 private:
  // The program's hash and the bytes of its text (written under programs/ the first time).
  const std::pair<std::string, uint64_t>& hash_of(const std::shared_ptr<const isa::Program>& program);

  std::string m_path;
  RecordingHeader m_header;
  std::ofstream m_manifest;
  uint64_t m_launches = 0;
  bool m_closed = false;
  std::chrono::steady_clock::time_point m_start;
  // Programs come from the executor's cache, so most launches reuse a program already hashed:
  // keyed by address, holding a reference so that the address is not reused by another program.
  std::map<const isa::Program*, std::pair<std::shared_ptr<const isa::Program>, std::pair<std::string, uint64_t>>>
      m_hash_of;
  std::set<std::string> m_written;
};

}  // namespace trnsim::record
