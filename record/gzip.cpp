#include "record/gzip.h"

#include <zlib.h>

#include <stdexcept>
#include <string>

namespace trnsim::record {
namespace {

constexpr int kGzipWindowBits = 15 + 16;  // 32 KiB window, gzip wrapper instead of zlib's

}  // namespace

std::string gzip_compress(const std::string& data) {
  if (data.size() > 0xffffffffu) throw std::runtime_error("gzip: more than 4 GiB in one piece");
  z_stream stream{};
  if (deflateInit2(&stream, Z_BEST_COMPRESSION, Z_DEFLATED, kGzipWindowBits, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("gzip: zlib could not start a compression");
  }
  std::string out(deflateBound(&stream, data.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&stream, Z_FINISH);
  const size_t written = stream.total_out;
  deflateEnd(&stream);
  if (rc != Z_STREAM_END) throw std::runtime_error("gzip: compression did not finish");
  out.resize(written);
  return out;
}

std::string gzip_decompress(const std::string& data, const std::string& origin, uint64_t max_bytes) {
  if (data.size() > 0xffffffffu) throw std::runtime_error(origin + ": more than 4 GiB of gzip");
  z_stream stream{};
  if (inflateInit2(&stream, kGzipWindowBits) != Z_OK) throw std::runtime_error(origin + ": zlib could not start");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  stream.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(buffer);
    stream.avail_out = sizeof buffer;
    rc = inflate(&stream, Z_NO_FLUSH);
    const size_t produced = sizeof buffer - stream.avail_out;
    if (out.size() + produced > max_bytes) {
      inflateEnd(&stream);
      throw std::runtime_error(origin + ": inflates to more than the " + std::to_string(max_bytes) +
                               " bytes its program may have (a damaged or hostile file)");
    }
    out.append(buffer, produced);
    if (rc == Z_BUF_ERROR && stream.avail_in == 0) break;  // input ended before the stream did
  }
  const std::string why = stream.msg ? stream.msg : "truncated";
  inflateEnd(&stream);
  if (rc != Z_STREAM_END) throw std::runtime_error(origin + ": not a complete gzip stream (" + why + ")");
  return out;
}

}  // namespace trnsim::record
