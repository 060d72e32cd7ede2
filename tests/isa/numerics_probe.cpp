// numerics_probe: exposes trnsim's fp32 -> dtype encoders to tests/isa/test_numerics_reference.py, which compares
// them with ml_dtypes and torch. Reads lines "DTYPE HEXBITS_OF_FP32" (DTYPE: a trnsim or NKI dtype name) and prints,
// per line, "SAT NONSAT": the encoded element in hex, rounded to nearest even, with fp8 saturation on and off.
// Exits 2 on a malformed line so a broken harness cannot pass silently.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "config/dtype.h"
#include "isa/numerics/float_format.h"

namespace {

uint64_t element_as_integer(const unsigned char* element, uint32_t bytes) {
  uint64_t value = 0;
  std::memcpy(&value, element, bytes);  // little-endian host, as the simulator assumes
  return value;
}

}  // namespace

int main() {
  using trnsim::numerics::RoundingMode;
  char line[256];
  char name[64];
  unsigned long bits = 0;
  size_t line_number = 0;
  while (std::fgets(line, sizeof line, stdin)) {
    ++line_number;
    if (line[0] == '\n' || line[0] == '\0') continue;
    if (std::sscanf(line, "%63s %lx", name, &bits) != 2) {
      std::fprintf(stderr, "numerics_probe: line %zu: expected 'DTYPE HEXBITS', got '%s'\n", line_number, line);
      return 2;
    }
    const auto dtype = trnsim::parse_dtype(name);
    if (!dtype) {
      std::fprintf(stderr, "numerics_probe: line %zu: unknown dtype '%s'\n", line_number, name);
      return 2;
    }
    const float value = trnsim::numerics::bits_float(static_cast<uint32_t>(bits));
    const uint32_t bytes = trnsim::numerics::element_bytes(*dtype);
    unsigned char saturated[8] = {};
    unsigned char ieee[8] = {};
    trnsim::numerics::encode(*dtype, value, saturated, RoundingMode::nearest_even, 0, true);
    trnsim::numerics::encode(*dtype, value, ieee, RoundingMode::nearest_even, 0, false);
    std::printf("%llx %llx\n", static_cast<unsigned long long>(element_as_integer(saturated, bytes)),
                static_cast<unsigned long long>(element_as_integer(ieee, bytes)));
  }
  return 0;
}
