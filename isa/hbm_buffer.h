// The bytes of one HBM allocation as the interpreter holds them: owned (zero-filled, the default),
// or host memory the caller lends for the run (bind: a device tensor's storage read and written in
// place, instead of a copy in before the run and a copy out after it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace trnsim::isa {

class HbmBuffer {
 public:
  HbmBuffer() = default;
  HbmBuffer(const std::vector<uint8_t>& bytes) : m_owned(bytes) {}  // NOLINT: a vector converts
  HbmBuffer& operator=(const std::vector<uint8_t>& bytes) {
    m_owned = bytes;
    m_external = nullptr;
    m_external_size = 0;
    return *this;
  }

  // `bytes` zero bytes (owned), or `bytes` copies of `value`.
  void assign(size_t bytes, uint8_t value) {
    m_external = nullptr;
    m_external_size = 0;
    m_owned.assign(bytes, value);
  }
  // The run reads and writes `size` bytes at `data` (not owned; it must outlive the run) in place of
  // owned storage.
  void bind(void* data, size_t size) {
    std::vector<uint8_t>().swap(m_owned);
    m_external = static_cast<uint8_t*>(data);
    m_external_size = size;
  }
  bool bound() const { return m_external != nullptr; }

  uint8_t* data() { return m_external ? m_external : m_owned.data(); }
  const uint8_t* data() const { return m_external ? m_external : m_owned.data(); }
  size_t size() const { return m_external ? m_external_size : m_owned.size(); }
  bool empty() const { return size() == 0; }
  uint8_t* begin() { return data(); }
  uint8_t* end() { return data() + size(); }
  const uint8_t* begin() const { return data(); }
  const uint8_t* end() const { return data() + size(); }
  uint8_t& operator[](size_t i) { return data()[i]; }
  uint8_t operator[](size_t i) const { return data()[i]; }

  operator std::vector<uint8_t>() const { return std::vector<uint8_t>(begin(), end()); }  // NOLINT: a copy
  bool operator==(const HbmBuffer& other) const {
    return size() == other.size() && (size() == 0 || std::memcmp(data(), other.data(), size()) == 0);
  }
  bool operator==(const std::vector<uint8_t>& other) const {
    return size() == other.size() && (size() == 0 || std::memcmp(data(), other.data(), size()) == 0);
  }

 private:
  std::vector<uint8_t> m_owned;
  uint8_t* m_external = nullptr;
  size_t m_external_size = 0;
};

}  // namespace trnsim::isa
