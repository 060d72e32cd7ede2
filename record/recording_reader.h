// Reads a recording directory (recording_format.h) back: header, launches with their programs,
// and the footer when the recording was closed.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "record/launch.h"
#include "record/recording_format.h"

namespace trnsim::record {

struct Recording {
  std::string path;
  RecordingHeader header;
  std::vector<Launch> launches;          // kernels with `programs` filled in
  std::optional<RecordingFooter> footer;  // absent: the recording process stopped while recording
  std::map<std::string, std::shared_ptr<const isa::Program>> programs;  // by hash

  bool complete() const { return footer && footer->complete; }
  // "" for a complete recording, else why not (for a warning).
  std::string incomplete_reason() const;
};

// Throws std::runtime_error naming the file (and line) for anything malformed or missing.
Recording read_recording(const std::string& path);

}  // namespace trnsim::record
