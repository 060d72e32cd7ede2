// Access patterns from slices of an allocation (t[0:128, 4, 0:512:2]) and back: the readable
// form used by the builder, the .tasm parser and printer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "isa/program.h"

namespace trnsim::isa {

// One index expression: a single index (drops the dimension) or start:stop:step.
struct Slice {
  bool is_index = false;
  int64_t start = 0;
  std::optional<int64_t> stop;  // absent = the dimension's size
  int64_t step = 1;

  static Slice index(int64_t i) { return Slice{true, i, i + 1, 1}; }
  static Slice range(int64_t start, int64_t stop, int64_t step = 1) { return Slice{false, start, stop, step}; }
  static Slice all() { return Slice{}; }
};

// The access pattern of allocation[slices...]. Missing trailing slices take the whole dim.
// For SBUF/PSUM the first slice selects partitions (step 1). Throws std::invalid_argument with
// a message naming the dimension on out-of-range or malformed slices.
AccessPattern slice_allocation(const Program& program, uint32_t allocation, const std::vector<Slice>& slices);

// The whole allocation.
AccessPattern full_allocation(const Program& program, uint32_t allocation);

// Text of an access pattern: "name[0:128, 0:512]" when it is a slice of its allocation,
// else the raw form "name{offset=O, ap=[[stride, size], ...]}" (partition pair first), with
// "scalar_offset=rN, " before ap= for a dynamic pattern and "dtype=D, " for a pattern that reads
// the allocation as another dtype.
std::string describe_access_pattern(const Program& program, const AccessPattern& ap);

// The raw form's access pattern; the same checks as slices. With `as_dtype` the pattern reads the
// allocation's bytes as that dtype (NKI's view(dtype) of an HBM tensor): offset and strides count
// elements of `as_dtype`, and the bounds are the allocation's bytes.
AccessPattern raw_access_pattern(const Program& program, uint32_t allocation, int64_t offset,
                                 const std::vector<ApDim>& dims, std::optional<DType> as_dtype = std::nullopt);

}  // namespace trnsim::isa
