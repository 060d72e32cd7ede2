// gzip (RFC 1952) of a byte string through zlib, for the programs of a recording: the .tasm text
// of a kernel compresses about tenfold. The header carries no time stamp or file name, so the same
// text always gives the same bytes.
#pragma once

#include <cstdint>
#include <string>

namespace trnsim::record {

std::string gzip_compress(const std::string& data);
// Throws std::runtime_error naming `origin` when the bytes are not a complete gzip stream, or when they inflate to
// more than `max_bytes` (stopped there: a gzip bomb costs at most that much memory and time).
std::string gzip_decompress(const std::string& data, const std::string& origin, uint64_t max_bytes);

}  // namespace trnsim::record
