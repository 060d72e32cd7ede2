#include "tools/cli/npy.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <utility>

#include "isa/numerics/float_format.h"

namespace trnsim::cli {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicBytes = 6;
// Headers are Python dict literals of a few dozen bytes; anything far larger is not a real .npy.
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

struct TypeInfo {
  NpyType type;
  const char* descr;
  char kind;  // 'f', 'i', 'u'
  uint32_t bytes;
};

constexpr TypeInfo kTypes[] = {
    {NpyType::f2, "<f2", 'f', 2}, {NpyType::f4, "<f4", 'f', 4}, {NpyType::f8, "<f8", 'f', 8},
    {NpyType::i1, "|i1", 'i', 1}, {NpyType::i2, "<i2", 'i', 2}, {NpyType::i4, "<i4", 'i', 4},
    {NpyType::u1, "|u1", 'u', 1}, {NpyType::u2, "<u2", 'u', 2}, {NpyType::u4, "<u4", 'u', 4},
};

const TypeInfo& info(NpyType type) {
  for (const TypeInfo& t : kTypes) {
    if (t.type == type) return t;
  }
  throw std::logic_error("npy: unknown type");
}

// ---- the header: a Python literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } ----

struct HeaderValue {
  enum Kind { string, boolean, tuple, other } kind = other;
  std::string text;
  bool flag = false;
  std::vector<uint64_t> ints;
};

class HeaderParser {
 public:
  HeaderParser(const std::string& text, const std::string& path) : m_text(text), m_path(path) {}

  std::map<std::string, HeaderValue> parse_dict() {
    std::map<std::string, HeaderValue> result;
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = parse_string();
      expect(':');
      result[key] = parse_value();
      skip_space();
      if (peek() == ',') {
        ++m_pos;
        continue;
      }
      expect('}');
      return result;
    }
    ++m_pos;
    return result;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw NpyError(m_path + ": malformed .npy header (" + what + " at byte " + std::to_string(m_pos) + ")");
  }
  void skip_space() {
    while (m_pos < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
  }
  char peek() const { return m_pos < m_text.size() ? m_text[m_pos] : '\0'; }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++m_pos;
  }
  std::string parse_string() {
    skip_space();
    char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string");
    size_t end = m_text.find(quote, m_pos + 1);
    if (end == std::string::npos) fail("unterminated string");
    std::string s = m_text.substr(m_pos + 1, end - m_pos - 1);
    m_pos = end + 1;
    return s;
  }
  uint64_t parse_uint() {
    skip_space();
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("expected a dimension");
    uint64_t value = 0;
    while (std::isdigit(static_cast<unsigned char>(peek()))) {
      uint64_t digit = uint64_t(peek() - '0');
      if (value > (std::numeric_limits<uint64_t>::max() - digit) / 10) fail("dimension too large");
      value = value * 10 + digit;
      ++m_pos;
    }
    if (peek() == 'L') ++m_pos;  // Python 2 long literals
    return value;
  }
  HeaderValue parse_value() {
    skip_space();
    HeaderValue v;
    char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = HeaderValue::string;
      v.text = parse_string();
    } else if (m_text.compare(m_pos, 4, "True") == 0) {
      v.kind = HeaderValue::boolean;
      v.flag = true;
      m_pos += 4;
    } else if (m_text.compare(m_pos, 5, "False") == 0) {
      v.kind = HeaderValue::boolean;
      m_pos += 5;
    } else if (c == '(') {
      v.kind = HeaderValue::tuple;
      ++m_pos;
      while (true) {
        skip_space();
        if (peek() == ')') break;
        v.ints.push_back(parse_uint());
        skip_space();
        if (peek() == ',') {
          ++m_pos;
        } else if (peek() != ')') {
          fail("expected ',' or ')' in the shape");
        }
      }
      ++m_pos;
    } else {
      // Structured dtypes are lists; skip one balanced value so the error can name the dtype.
      int depth = 0;
      size_t start = m_pos;
      while (m_pos < m_text.size()) {
        char d = m_text[m_pos];
        if (d == '[' || d == '(' || d == '{') ++depth;
        if (d == ']' || d == ')' || d == '}') {
          if (depth == 0) break;
          --depth;
        }
        if (d == ',' && depth == 0) break;
        ++m_pos;
      }
      v.text = m_text.substr(start, m_pos - start);
    }
    return v;
  }

  const std::string& m_text;
  const std::string& m_path;
  size_t m_pos = 0;
};

std::string io_error(const std::string& path, const char* what) {
  return path + ": " + what + (errno ? std::string(" (") + std::strerror(errno) + ")" : std::string());
}

// Header text echoed in a message: a corrupt file must not put control bytes on the terminal.
std::string printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text.substr(0, 64)) {
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    }
  }
  return text.size() > 64 ? out + "..." : out;
}

uint32_t read_le(const uint8_t* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Element i of an integer array as int64.
int64_t int_element(const NpyArray& a, uint64_t i) {
  const uint8_t* p = a.data.data() + i * npy_item_bytes(a.type);
  switch (a.type) {
    case NpyType::i1: return static_cast<int8_t>(p[0]);
    case NpyType::i2: return static_cast<int16_t>(read_le(p, 2));
    case NpyType::i4: return static_cast<int32_t>(read_le(p, 4));
    case NpyType::u1: return p[0];
    case NpyType::u2: return read_le(p, 2);
    case NpyType::u4: return read_le(p, 4);
    default: throw std::logic_error("npy: not an integer type");
  }
}

// The NumPy type a tensor dtype is written as (integers as themselves), or nullopt for floats.
bool integer_npy_type(DType dtype, NpyType* type) {
  switch (dtype) {
    case DType::int32: *type = NpyType::i4; return true;
    case DType::int16: *type = NpyType::i2; return true;
    case DType::int8: *type = NpyType::i1; return true;
    case DType::uint32: *type = NpyType::u4; return true;
    case DType::uint16: *type = NpyType::u2; return true;
    case DType::uint8: *type = NpyType::u1; return true;
    default: return false;
  }
}

template <class T>
std::pair<int64_t, int64_t> range_of() {
  return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
}

std::pair<int64_t, int64_t> integer_range(DType dtype) {
  switch (dtype) {
    case DType::int32: return range_of<int32_t>();
    case DType::int16: return range_of<int16_t>();
    case DType::int8: return range_of<int8_t>();
    case DType::uint32: return range_of<uint32_t>();
    case DType::uint16: return range_of<uint16_t>();
    case DType::uint8: return range_of<uint8_t>();
    default: throw std::logic_error("npy: not an integer dtype");
  }
}

bool is_mx_packed(DType dtype) {
  return dtype == DType::mxfp8_e4m3 || dtype == DType::mxfp8_e5m2 || dtype == DType::mxfp4_e2m1;
}

std::vector<float> float_values(const NpyArray& a) {
  uint64_t n = a.elements();
  std::vector<float> values(n);
  switch (a.type) {
    case NpyType::f4:
      std::memcpy(values.data(), a.data.data(), n * 4);
      break;
    case NpyType::f2:
      numerics::convert_to_fp32(DType::fp16, a.data.data(), values.data(), n);
      break;
    case NpyType::f8:
      for (uint64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, a.data.data() + i * 8, 8);
        values[i] = static_cast<float>(d);  // the host rounds to nearest even (default environment)
      }
      break;
    default:
      throw std::logic_error("npy: not a float type");
  }
  return values;
}

}  // namespace

const char* npy_descr(NpyType type) { return info(type).descr; }
uint32_t npy_item_bytes(NpyType type) { return info(type).bytes; }

uint64_t NpyArray::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

NpyArray read_npy(const std::string& path, uint64_t max_data_bytes) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!ec && !std::filesystem::is_regular_file(status)) {
    throw NpyError(path + ": not a regular file (" +
                   (std::filesystem::is_directory(status) ? "a directory" : "a device, pipe or socket") +
                   "); an input must be an .npy file");
  }
  uint64_t file_bytes = std::filesystem::file_size(path, ec);
  uint64_t max_file_bytes = max_data_bytes > UINT64_MAX - 2 * kMaxHeaderBytes ? UINT64_MAX
                                                                               : max_data_bytes + 2 * kMaxHeaderBytes;
  if (!ec && file_bytes > max_file_bytes) {
    throw NpyError(path + ": " + std::to_string(file_bytes) + " bytes, more than an .npy of the tensor's shape can "
                   "have (at most " + std::to_string(max_data_bytes) + " bytes of data)");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw NpyError(io_error(path, "cannot open"));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw NpyError(io_error(path, "read error"));

  if (bytes.size() < kMagicBytes + 2 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0) {
    throw NpyError(path + ": not a NumPy .npy file (bad magic)");
  }
  int major = bytes[6];
  size_t length_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
  if (length_bytes == 0) {
    throw NpyError(path + ": unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(bytes[7]) + " (1.0, 2.0 and 3.0 are supported)");
  }
  size_t prefix = kMagicBytes + 2 + length_bytes;
  if (bytes.size() < prefix) throw NpyError(path + ": truncated .npy header");
  uint64_t header_length = read_le(bytes.data() + 8, int(length_bytes));
  if (header_length > kMaxHeaderBytes || prefix + header_length > bytes.size()) {
    throw NpyError(path + ": truncated .npy header");
  }
  std::string header(reinterpret_cast<const char*>(bytes.data() + prefix), header_length);
  auto dict = HeaderParser(header, path).parse_dict();

  for (const char* key : {"descr", "fortran_order", "shape"}) {
    if (!dict.count(key)) throw NpyError(path + ": malformed .npy header (no '" + key + "')");
  }
  const HeaderValue& descr = dict["descr"];
  const HeaderValue& fortran = dict["fortran_order"];
  const HeaderValue& shape = dict["shape"];
  if (fortran.kind != HeaderValue::boolean || shape.kind != HeaderValue::tuple) {
    throw NpyError(path + ": malformed .npy header (fortran_order or shape)");
  }
  if (fortran.flag) {
    throw NpyError(path + ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  }
  NpyArray array;
  bool found = false;
  if (descr.kind == HeaderValue::string) {
    std::string d = descr.text;
    // NumPy writes '|' for one-byte types; '=' (native) would be little-endian on every host we run on.
    if (d.size() >= 2 && (d[0] == '<' || d[0] == '|' || d[0] == '=')) {
      for (const TypeInfo& t : kTypes) {
        if (d.substr(1) == std::string(t.descr).substr(1)) {
          array.type = t.type;
          found = true;
        }
      }
    }
    if (!found && d.size() >= 2 && d[0] == '>' && d.substr(1) != "u1" && d.substr(1) != "i1") {
      throw NpyError(path + ": big-endian dtype '" + printable(d) +
                     "' is not supported (use arr.astype(arr.dtype.newbyteorder('<')))");
    }
  }
  if (!found) {
    std::string name = descr.kind == HeaderValue::string ? "'" + printable(descr.text) + "'" : printable(descr.text);
    throw NpyError(path + ": unsupported dtype " + name + " (supported: float16/32/64, int8/16/32, uint8/16/32)");
  }
  array.shape = shape.ints;

  uint64_t item = npy_item_bytes(array.type);
  uint64_t available = bytes.size() - prefix - header_length;
  uint64_t elements = 1;
  for (uint64_t d : array.shape) {
    if (d != 0 && elements > std::numeric_limits<uint64_t>::max() / item / d) {
      throw NpyError(path + ": data is shorter than the header's shape " + shape_text(array.shape) + " needs");
    }
    elements *= d;
  }
  if (elements * item != available) {
    throw NpyError(path + ": data holds " + std::to_string(available) + " bytes but shape " +
                   shape_text(array.shape) + " of " + npy_descr(array.type) + " needs " +
                   std::to_string(elements * item));
  }
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(prefix + header_length), bytes.end());
  return array;
}

void write_npy(const std::string& path, const NpyArray& array, bool overwrite) {
  std::string header = std::string("{'descr': '") + npy_descr(array.type) +
                       "', 'fortran_order': False, 'shape': " + shape_text(array.shape) + ", }";
  // Pad with spaces so the data starts 64-byte aligned, ending the header with a newline.
  auto padded = [&](size_t length_bytes) {
    size_t prefix = kMagicBytes + 2 + length_bytes;
    size_t total = prefix + header.size() + 1;
    size_t pad = (64 - total % 64) % 64;
    return header + std::string(pad, ' ') + "\n";
  };
  std::string h = padded(2);
  int major = 1;
  if (h.size() > 65535) {
    h = padded(4);
    major = 2;
  }
  std::string prefix(kMagic, kMagicBytes);
  prefix += char(major);
  prefix += char(0);
  uint32_t length = uint32_t(h.size());
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) prefix += char((length >> (8 * i)) & 0xff);

  // "x": create exclusively, so a file that appeared since the caller's check is not replaced either.
  errno = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), overwrite ? "wb" : "wbx"), &std::fclose);
  if (!file) {
    if (errno == EEXIST) throw NpyError(path + ": exists (pass --force to overwrite)");
    throw NpyError(io_error(path, "cannot create"));
  }
  bool ok = std::fwrite(prefix.data(), 1, prefix.size(), file.get()) == prefix.size() &&
            std::fwrite(h.data(), 1, h.size(), file.get()) == h.size() &&
            std::fwrite(array.data.data(), 1, array.data.size(), file.get()) == array.data.size();
  FILE* raw = file.release();
  if (std::fclose(raw) != 0) ok = false;
  if (!ok) throw NpyError(io_error(path, "write error"));
}

std::vector<uint8_t> npy_to_tensor_bytes(const NpyArray& array, DType dtype, const std::vector<uint32_t>& shape,
                                         const std::string& path, const std::string& tensor) {
  std::vector<uint64_t> want(shape.begin(), shape.end());
  std::string where = path + ": input '" + tensor + "'";
  if (array.shape != want) {
    std::string declared = shape_text(want);
    declared = "[" + declared.substr(1, declared.size() - (want.size() == 1 ? 3 : 2)) + "]";
    throw NpyError(where + ": shape " + shape_text(array.shape) + " differs from the kernel's declaration " +
                   tensor + " : " + std::string(dtype_name(dtype)) + declared);
  }
  if (is_mx_packed(dtype)) {
    throw NpyError(where + ": packed MX tensors (" + std::string(dtype_name(dtype)) + ") cannot be loaded from .npy");
  }
  const TypeInfo& file = info(array.type);
  uint64_t n = array.elements();
  uint32_t tensor_bytes = dtype_size_bytes(dtype);
  std::vector<uint8_t> out(n * tensor_bytes);
  std::string refused = where + ": cannot load " + file.descr + " data into a " + std::string(dtype_name(dtype)) +
                        " tensor";

  NpyType int_type;
  if (integer_npy_type(dtype, &int_type)) {
    if (file.kind == 'f') throw NpyError(refused + " (convert it to an integer array first)");
    if (array.type == int_type) {
      out = array.data;
      return out;
    }
    // Another integer width: values must fit, since a silent wrap would corrupt the kernel's input.
    auto [low, high] = integer_range(dtype);
    for (uint64_t i = 0; i < n; ++i) {
      int64_t v = int_element(array, i);
      if (v < low || v > high) {
        throw NpyError(where + ": element " + std::to_string(i) + " = " + std::to_string(v) + " does not fit " +
                       std::string(dtype_name(dtype)));
      }
      uint64_t bits = static_cast<uint64_t>(v);
      for (uint32_t b = 0; b < tensor_bytes; ++b) out[i * tensor_bytes + b] = uint8_t(bits >> (8 * b));
    }
    return out;
  }

  // A float tensor.
  if (file.kind == 'f') {
    std::vector<float> values = float_values(array);
    numerics::convert_from_fp32(dtype, values.data(), out.data(), n);
    return out;
  }
  bool raw_bits = file.kind == 'u' && file.bytes == tensor_bytes && dtype != DType::fp32 && dtype != DType::fp16;
  if (!raw_bits) {
    throw NpyError(refused + " (use a float array, or uint" + std::to_string(8 * tensor_bytes) +
                   " raw bit patterns for " + std::string(dtype_name(dtype)) + ")");
  }
  out = array.data;
  return out;
}

NpyArray tensor_bytes_to_npy(const std::vector<uint8_t>& bytes, DType dtype, const std::vector<uint32_t>& shape) {
  NpyArray array;
  array.shape.assign(shape.begin(), shape.end());
  uint64_t n = array.elements();
  if (integer_npy_type(dtype, &array.type)) {
    array.data = bytes;
    return array;
  }
  array.type = NpyType::f4;
  array.data.resize(n * 4);
  std::vector<float> values(n);
  numerics::convert_to_fp32(dtype, bytes.data(), values.data(), n);
  std::memcpy(array.data.data(), values.data(), n * 4);
  return array;
}

}  // namespace trnsim::cli
