// NumPy .npy files (format 1.0, 2.0 and 3.0; little-endian, C order) and their conversion to and
// from the raw bytes of a kernel's HBM tensors, for `trnsim run --input/--output`.
//
// Input rules (what a user's array becomes in a tensor of dtype D):
//   float file (f2/f4/f8) -> float D: widened to fp32 (f8 narrowed with round-to-nearest-even),
//                                      then cast to D with RNE, as a DMA from fp32 would.
//   unsigned file of D's width -> float D other than fp32/fp16: raw bit patterns (bf16 as <u2 is
//                                      how PyTorch's bf16 tensors are usually exported).
//   integer file -> integer D: converted, every value checked to fit D.
// Anything else (float into an integer tensor, a signed integer into a float tensor, ...) is
// refused rather than guessed at.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/dtype.h"

namespace trnsim::cli {

// Problems with a file or with how it fits a tensor; the message names the file.
class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NpyType : uint8_t { f2, f4, f8, i1, i2, i4, u1, u2, u4 };

const char* npy_descr(NpyType type);  // "<f4", "|u1", ...
uint32_t npy_item_bytes(NpyType type);

struct NpyArray {
  NpyType type = NpyType::f4;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> data;  // little-endian, C order, shape product x item bytes

  uint64_t elements() const;
};

// Throws NpyError "PATH: ..." for unreadable or malformed files, Fortran order, big-endian or
// unsupported dtypes, and a data size that disagrees with the header; also for anything but a
// regular file (a directory, /dev/zero, a pipe) and for a file with more than `max_data_bytes`
// of data plus a header, which is refused before it is read.
NpyArray read_npy(const std::string& path, uint64_t max_data_bytes = UINT64_MAX);

// Writes a version 1.0 file (2.0 if the header would not fit). Refuses to replace an existing
// file unless `overwrite`.
void write_npy(const std::string& path, const NpyArray& array, bool overwrite);

// The bytes of a tensor of `dtype` and `shape` (its declaration) from `array`, by the rules
// above. `path` and `tensor` name the file and tensor in error messages.
std::vector<uint8_t> npy_to_tensor_bytes(const NpyArray& array, DType dtype, const std::vector<uint32_t>& shape,
                                         const std::string& path, const std::string& tensor);

// A tensor's bytes as an array: float dtypes as float32, integer dtypes as themselves.
NpyArray tensor_bytes_to_npy(const std::vector<uint8_t>& bytes, DType dtype, const std::vector<uint32_t>& shape);

// "(128, 512)" as NumPy prints shapes.
std::string shape_text(const std::vector<uint64_t>& shape);

}  // namespace trnsim::cli
