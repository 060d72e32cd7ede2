#include "config/dtype.h"

namespace trnsim {

const std::vector<DTypeInfo>& all_dtypes() {
  static const std::vector<DTypeInfo> table = {
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
  return table;
}

const DTypeInfo& dtype_info(DType dtype) { return all_dtypes()[static_cast<size_t>(dtype)]; }

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view text) {
  for (const DTypeInfo& info : all_dtypes()) {
    if (text == info.name || text == info.nki_name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace trnsim
