#include "isa/view.h"

#include <array>
#include <stdexcept>
#include <string>

namespace trnsim::isa {
namespace {

[[noreturn]] void fail(const Allocation& a, const std::string& message) {
  throw std::invalid_argument(a.name + ": " + message);
}

}  // namespace

AccessPattern slice_allocation(const Program& program, uint32_t allocation, const std::vector<Slice>& slices) {
  const Allocation& a = program.allocations.at(allocation);
  if (slices.size() > a.shape.size()) {
    fail(a, std::to_string(slices.size()) + " indices for a tensor of rank " + std::to_string(a.shape.size()));
  }
  AccessPattern ap;
  ap.space = a.space;
  ap.dtype = a.dtype;
  ap.allocation = allocation;
  bool on_chip = a.space != MemorySpace::hbm;
  // Fixed-size scratch (a rank is at most 8): the .tasm parser slices every operand of millions of lines.
  constexpr size_t kMaxRank = 8;
  if (a.shape.size() > kMaxRank) fail(a, "a tensor has at most 8 dimensions");
  std::array<int64_t, kMaxRank> strides{};  // row-major element strides of the free dims (HBM: of all dims)
  const size_t first_free = on_chip ? 1 : 0;
  for (size_t i = a.shape.size(), stride = 1; i-- > first_free;) {
    strides[i - first_free] = int64_t(stride);
    stride *= a.shape[i];
  }
  std::array<ApDim, kMaxRank> dims{};  // kept dims, outermost first (partition dim first for SBUF/PSUM)
  size_t kept = 0;
  for (size_t d = 0; d < a.shape.size(); ++d) {
    Slice s = d < slices.size() ? slices[d] : Slice::all();
    int64_t size = a.shape[d];
    int64_t stop = s.stop.value_or(size);
    if (s.step <= 0) fail(a, "dimension " + std::to_string(d) + ": step must be positive");
    if (s.start < 0 || s.start >= size || stop > size || stop <= s.start) {
      fail(a, "dimension " + std::to_string(d) + ": index " + std::to_string(s.start) +
                  (s.is_index ? "" : ":" + std::to_string(stop)) + " is outside 0:" + std::to_string(size));
    }
    int64_t count = (stop - s.start + s.step - 1) / s.step;
    bool partition_dim = on_chip && d == 0;
    if (partition_dim) {
      if (s.step != 1) fail(a, "partitions must be contiguous (step 1)");
      ap.start_partition = static_cast<uint32_t>(s.start);
      ap.partition = ApDim{1, static_cast<uint32_t>(count)};
      continue;
    }
    int64_t stride = strides[d - first_free];
    ap.offset += s.start * stride;
    if (!s.is_index) {
      int64_t step_stride = 0;
      if (__builtin_mul_overflow(stride, s.step, &step_stride) || step_stride < kMinApStride ||
          step_stride > kMaxApStoredStride) {
        fail(a, "dimension " + std::to_string(d) + ": a step of " + std::to_string(s.step) + " over a stride of " +
                    std::to_string(stride) + " elements is beyond the 2^31 an access pattern holds");
      }
      dims[kept++] = ApDim{step_stride, static_cast<uint32_t>(count)};
    }
  }
  size_t first_kept = 0;
  if (!on_chip) {
    // HBM: the outermost kept dim plays the partition dim.
    if (kept == 0) {
      ap.partition = ApDim{0, 1};
    } else {
      ap.partition = dims[0];
      first_kept = 1;
    }
  }
  const size_t free_dims = kept - first_kept;
  if (free_dims > static_cast<size_t>(kMaxFreeDims)) {
    fail(a, std::to_string(free_dims) + " free dimensions; the hardware addresses at most 4");
  }
  ap.num_free_dims = static_cast<uint8_t>(free_dims);
  for (size_t i = 0; i < free_dims; ++i) ap.free[i] = dims[first_kept + i];
  return ap;
}

AccessPattern full_allocation(const Program& program, uint32_t allocation) {
  return slice_allocation(program, allocation, {});
}

AccessPattern raw_access_pattern(const Program& program, uint32_t allocation, int64_t offset,
                                 const std::vector<ApDim>& dims, std::optional<DType> as_dtype) {
  const Allocation& a = program.allocations.at(allocation);
  if (dims.empty()) fail(a, "a raw access pattern needs at least the partition pair");
  if (dims.size() > static_cast<size_t>(kMaxFreeDims) + 1) fail(a, "at most 4 free dimensions");
  AccessPattern ap;
  ap.space = a.space;
  ap.dtype = as_dtype.value_or(a.dtype);
  ap.allocation = allocation;
  bool on_chip = a.space != MemorySpace::hbm;
  if (on_chip) {
    // The partition pair is [start_partition, count]: partitions are contiguous.
    if (dims[0].stride < 0 || dims[0].stride + dims[0].size > a.partitions()) {
      fail(a, "partitions " + std::to_string(dims[0].stride) + ":+" + std::to_string(dims[0].size) + " exceed " +
                  std::to_string(a.partitions()));
    }
    ap.start_partition = static_cast<uint32_t>(dims[0].stride);
    ap.partition = ApDim{1, dims[0].size};
  } else {
    ap.partition = dims[0];
  }
  ap.offset = offset;
  ap.num_free_dims = static_cast<uint8_t>(dims.size() - 1);
  for (size_t i = 1; i < dims.size(); ++i) ap.free[i - 1] = dims[i];
  // Every element must stay inside the allocation.
  int64_t low = offset, high = offset;
  auto extend = [&](const ApDim& dim) {
    if (dim.size == 0) fail(a, "a dimension of size 0");
    int64_t span = dim.stride * (int64_t{dim.size} - 1);
    (span < 0 ? low : high) += span;
  };
  if (!on_chip) extend(ap.partition);
  for (int i = 0; i < ap.num_free_dims; ++i) extend(ap.free[i]);
  // In elements of the pattern's dtype: the allocation's bytes (per partition on chip) hold this many.
  const int64_t limit = static_cast<int64_t>(a.bytes_per_partition() / dtype_size_bytes(ap.dtype));
  if (low < 0 || high >= limit) {
    fail(a, "elements " + std::to_string(low) + ".." + std::to_string(high) + " fall outside 0.." +
                std::to_string(limit - 1));
  }
  return ap;
}

namespace {

// Tries to express `ap` as a slice of its allocation; returns "" when it is not one.
std::string as_slices(const Allocation& a, const AccessPattern& ap) {
  bool on_chip = a.space != MemorySpace::hbm;
  std::vector<int64_t> strides = a.strides();
  std::vector<uint32_t> free_shape(a.shape.begin() + (on_chip ? 1 : 0), a.shape.end());
  std::vector<ApDim> dims;
  if (!on_chip && !(ap.partition.size == 1 && ap.partition.stride == 0)) dims.push_back(ap.partition);
  for (int i = 0; i < ap.num_free_dims; ++i) dims.push_back(ap.free[i]);
  // Decompose the offset into per-dimension starts, outermost first.
  std::vector<int64_t> start(free_shape.size(), 0);
  int64_t rest = ap.offset;
  for (size_t d = 0; d < free_shape.size(); ++d) {
    start[d] = rest / strides[d];
    rest %= strides[d];
  }
  if (rest != 0) return "";
  std::vector<std::string> parts;
  if (on_chip) {
    parts.push_back(std::to_string(ap.start_partition) + ":" + std::to_string(ap.start_partition + ap.partitions()));
  }
  size_t next = 0;
  for (size_t d = 0; d < free_shape.size(); ++d) {
    if (start[d] < 0 || start[d] >= free_shape[d]) return "";
    if (next < dims.size() && dims[next].stride > 0 && dims[next].stride % strides[d] == 0 &&
        (dims[next].size > 1 || free_shape[d] == 1 || dims[next].stride == strides[d])) {
      int64_t step = dims[next].stride / strides[d];
      int64_t stop = start[d] + step * (int64_t{dims[next].size} - 1) + 1;
      if (stop > free_shape[d]) return "";
      std::string text = std::to_string(start[d]) + ":" + std::to_string(stop);
      if (step != 1) text += ":" + std::to_string(step);
      parts.push_back(text);
      ++next;
    } else {
      parts.push_back(std::to_string(start[d]));
    }
  }
  if (next != dims.size()) return "";
  std::string text = a.name + "[";
  for (size_t i = 0; i < parts.size(); ++i) text += (i ? ", " : "") + parts[i];
  return text + "]";
}

}  // namespace

std::string describe_access_pattern(const Program& program, const AccessPattern& ap) {
  const Allocation& a = program.allocation(ap);
  if (ap.dtype == a.dtype && !ap.dynamic()) {
    std::string text = as_slices(a, ap);
    // Accept the slice text only if it reproduces the pattern exactly.
    if (!text.empty()) {
      try {
        std::vector<Slice> slices;
        size_t open = text.find('['), pos = open + 1;
        while (pos < text.size() - 1) {
          size_t end = text.find_first_of(",]", pos);
          std::string part = text.substr(pos, end - pos);
          while (!part.empty() && part.front() == ' ') part.erase(part.begin());
          size_t c1 = part.find(':');
          if (c1 == std::string::npos) {
            slices.push_back(Slice::index(std::stoll(part)));
          } else {
            size_t c2 = part.find(':', c1 + 1);
            int64_t s0 = std::stoll(part.substr(0, c1));
            int64_t s1 = std::stoll(part.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1));
            int64_t step = c2 == std::string::npos ? 1 : std::stoll(part.substr(c2 + 1));
            slices.push_back(Slice::range(s0, s1, step));
          }
          pos = end + 1;
        }
        if (slice_allocation(program, ap.allocation, slices) == ap) return text;
      } catch (const std::exception&) {
      }
    }
  }
  std::string text = a.name + "{offset=" + std::to_string(ap.offset) + ", ";
  if (ap.dynamic()) text += "scalar_offset=r" + std::to_string(ap.offset_register) + ", ";
  if (ap.dtype != a.dtype) text += "dtype=" + std::string(dtype_name(ap.dtype)) + ", ";
  text += "ap=[[";
  if (a.space == MemorySpace::hbm) {
    text += std::to_string(ap.partition.stride) + ", " + std::to_string(ap.partition.size) + "]";
  } else {
    text += std::to_string(ap.start_partition) + ", " + std::to_string(ap.partitions()) + "]";
  }
  for (int i = 0; i < ap.num_free_dims; ++i) {
    text += ", [" + std::to_string(ap.free[i].stride) + ", " + std::to_string(ap.free[i].size) + "]";
  }
  return text + "]}";
}

}  // namespace trnsim::isa
