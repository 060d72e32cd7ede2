#include "config/dtype.h"

#include <iterator>

namespace trnsim {
namespace {

constexpr bool table_is_in_dtype_order() {
  for (size_t i = 0; i < std::size(kDTypeTable); ++i) {
    if (static_cast<size_t>(kDTypeTable[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_is_in_dtype_order(), "dtype_info indexes kDTypeTable by DType: list the dtypes in DType's order");

}  // namespace

const std::vector<DTypeInfo>& all_dtypes() {
  static const std::vector<DTypeInfo> table(std::begin(kDTypeTable), std::end(kDTypeTable));
  return table;
}

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view text) {
  for (const DTypeInfo& info : all_dtypes()) {
    if (text == info.name || text == info.nki_name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace trnsim
