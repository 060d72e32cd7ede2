// Element data types of the hardware (NKI's dtype list, ../shared/reference/trainium.md §4.3).
// Lives at the bottom of the dependency stack because configs name dtypes (rates per dtype,
// which dtypes an engine accepts) and every layer above reads the same table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trnsim {

enum class DType : uint8_t {
  fp32,
  tf32,
  bf16,
  fp16,
  fp8_e4m3,    // NKI float8_e4m3 (legacy, trn1-trn3 matmul)
  fp8_e4m3fn,  // NKI float8_e4m3fn (OCP variant, matmul on trn3)
  fp8_e5m2,
  fp8_e3m4,    // "FP8_E3", supported at BF16 speed (A-V3 footnote)
  fp8_e8m0,    // NKI float8_e8m0fnu: MX scale factors
  mxfp8_e4m3,  // NKI float8_e4m3fn_x4: four packed MX elements per 32-bit slot (trn3)
  mxfp8_e5m2,  // NKI float8_e5m2_x4
  mxfp4_e2m1,  // NKI float4_e2m1fn_x4
  int32,
  int16,
  int8,
  uint32,
  uint16,
  uint8,
};

struct DTypeInfo {
  DType dtype;
  std::string_view name;      // trnsim's canonical name
  std::string_view nki_name;  // the nki.language spelling, accepted as an alias
  uint32_t size_bits;         // storage bits per element (per packed slot for MX x4 types)
  bool is_float;
};

// Indexed by DType; in the header so that the interpreter's per-row lookups (element sizes) inline.
inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::fp32, "fp32", "float32", 32, true},
    {DType::tf32, "tf32", "tfloat32", 32, true},
    {DType::bf16, "bf16", "bfloat16", 16, true},
    {DType::fp16, "fp16", "float16", 16, true},
    {DType::fp8_e4m3, "fp8_e4m3", "float8_e4m3", 8, true},
    {DType::fp8_e4m3fn, "fp8_e4m3fn", "float8_e4m3fn", 8, true},
    {DType::fp8_e5m2, "fp8_e5m2", "float8_e5m2", 8, true},
    {DType::fp8_e3m4, "fp8_e3m4", "float8_e3m4", 8, true},
    {DType::fp8_e8m0, "fp8_e8m0", "float8_e8m0fnu", 8, true},
    {DType::mxfp8_e4m3, "mxfp8_e4m3", "float8_e4m3fn_x4", 32, true},
    {DType::mxfp8_e5m2, "mxfp8_e5m2", "float8_e5m2_x4", 32, true},
    {DType::mxfp4_e2m1, "mxfp4_e2m1", "float4_e2m1fn_x4", 16, true},
    {DType::int32, "int32", "int32", 32, false},
    {DType::int16, "int16", "int16", 16, false},
    {DType::int8, "int8", "int8", 8, false},
    {DType::uint32, "uint32", "uint32", 32, false},
    {DType::uint16, "uint16", "uint16", 16, false},
    {DType::uint8, "uint8", "uint8", 8, false},
};

const std::vector<DTypeInfo>& all_dtypes();
inline const DTypeInfo& dtype_info(DType dtype) { return kDTypeTable[static_cast<size_t>(dtype)]; }
std::string_view dtype_name(DType dtype);
// Accepts the canonical name or the NKI alias; nullopt when neither matches.
std::optional<DType> parse_dtype(std::string_view text);
inline uint32_t dtype_size_bytes(DType dtype) { return (dtype_info(dtype).size_bits + 7) / 8; }

}  // namespace trnsim
