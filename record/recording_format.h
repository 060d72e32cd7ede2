// The on-disk form of a recording (a directory, e.g. step.trnrec/):
//
//   manifest.jsonl          line 1: the header (format version, config, trnsim version);
//                           then one line per launch, in the order they ran (a kernel launch
//                           with "kernel": {"name", "spec"}, its invocation, when it has one;
//                           readers of version 1 without invocations ignore the field, so
//                           recordings with and without it are both version 1; likewise
//                           "program_bytes", the size of each program's .tasm text, which
//                           bounds how far a program file is read and inflated);
//                           last: a footer {"end": {...}} saying whether the block completed.
//   programs/<hash>.tasm.gz each distinct program once (gzip of its .tasm text; plain
//                           programs/<hash>.tasm is read too), named by the hash of that text.
//
// A manifest without a footer is a recording whose process stopped while recording. Numbers are
// written so that they read back as the same double (nlohmann::json prints the shortest exact form).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "record/launch.h"

namespace trnsim::record {

constexpr int kFormatVersion = 1;
constexpr const char* kFormatName = "trnsim-recording";
constexpr const char* kManifestFile = "manifest.jsonl";
constexpr const char* kProgramsDir = "programs";

// The config the launches ran on, as the user named it.
struct RecordedConfig {
  std::string name;          // the config's own name ("trn2", "trn2-2x-sbuf")
  std::string name_or_path;  // what was passed to set_config ("trn2", "configs/whatif/x.yaml")
  std::string source;        // the file it resolved to when recording
  std::vector<std::string> overrides;  // "a.b=v", in order
  std::string hash;          // of the effective config
};

struct RecordingHeader {
  int version = kFormatVersion;
  RecordedConfig config;
  std::string trnsim_version;  // `git describe` of the recording build when known, else ""
  bool compressed_programs = true;
};

struct RecordingFooter {
  bool complete = true;     // false: the recorded block raised (error says what)
  uint64_t launches = 0;
  double host_s = 0;        // host seconds from the start of recording to its end
  std::string error;
};

std::string header_line(const RecordingHeader& header);
std::string launch_line(const Launch& launch);
std::string footer_line(const RecordingFooter& footer);

// What one manifest line is; the parse functions throw std::runtime_error "ORIGIN:LINE: ..."
// for a malformed line.
enum class LineKind { header, launch, footer };
LineKind line_kind(const std::string& line, const std::string& origin, size_t line_number);
RecordingHeader parse_header(const std::string& line, const std::string& origin, size_t line_number);
Launch parse_launch(const std::string& line, const std::string& origin, size_t line_number);
RecordingFooter parse_footer(const std::string& line, const std::string& origin, size_t line_number);

}  // namespace trnsim::record
