// The programs of a recording: each distinct program once, in programs/<hash>.tasm.gz (or
// .tasm), named by the stable hash of its .tasm text. The text form round-trips (isa/text_form.h:
// print(parse(print(p))) == print(p)), and the hash is checked when a program is read back, so a
// damaged or edited file is an error rather than a different time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "isa/program.h"

namespace trnsim::record {

// 16 hex digits (FNV-1a 64 of the text, as the config hash).
std::string program_hash(const std::string& tasm_text);

// "programs/<hash>.tasm.gz" or "programs/<hash>.tasm", relative to the recording.
std::string program_file(const std::string& hash, bool compressed);

// Writes the program's text under `recording_dir` unless that file exists already.
void write_program(const std::string& recording_dir, const std::string& hash, const std::string& tasm_text,
                   bool compressed);

// The most text a program of a recording made before the manifest declared sizes may have (assumed, a
// simulator limit: a kernel of about two million instructions).
constexpr uint64_t kMaxUndeclaredProgramBytes = uint64_t{256} << 20;

// Reads programs/<hash>.tasm.gz, else programs/<hash>.tasm; throws std::runtime_error naming the
// file when it is missing, not the program of that hash, or not a valid program. `declared_bytes`:
// the size of its text that the manifest declares (nullopt: an older recording, bounded by
// kMaxUndeclaredProgramBytes); a file is read and inflated no further than that, and text of another
// size is an error.
std::shared_ptr<const isa::Program> read_program(const std::string& recording_dir, const std::string& hash,
                                                 std::optional<uint64_t> declared_bytes = std::nullopt);

// The program in a program file's bytes (gzip when `compressed`); the same checks as read_program, the file
// named `origin` in errors.
std::shared_ptr<const isa::Program> program_from_file_bytes(const std::string& bytes, bool compressed,
                                                            const std::string& hash,
                                                            std::optional<uint64_t> declared_bytes,
                                                            const std::string& origin);

}  // namespace trnsim::record
