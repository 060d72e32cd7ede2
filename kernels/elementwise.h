// Element-wise kernels: unary functions (activation table or ALU), type casts, binary operators
// with NumPy/PyTorch broadcasting, and where/select.
//
// Layout: a tensor that is contiguous for every operand is flattened and spread over the 128
// partitions as [128, N/128] (plus a [1, N % 128] tail), so every DMA moves one contiguous run
// per partition. Broadcasting shapes are merged into the fewest (size, stride-per-operand) dims;
// the last merged dim goes on the free axis, the one before on partitions, the rest are loops.
// An operand broadcast along the free axis is loaded as one value per partition and applied with
// tensor_scalar; one broadcast along partitions (a bias row) is loaded once per column chunk with
// a partition-stride-0 DMA and reused by every row tile.
//
// Split across cores (core/cores of the KernelContext): each core streams a contiguous run of the
// tiles; the values do not depend on the split.
//
// Engines: transcendental functions run on the Scalar engine (activation); ALU-only functions
// and binary operators on the Vector engine, whose bf16 tensor_scalar runs in the 4x mode and
// bf16 add/subtract/multiply tensor_tensor at one element per cycle (cost model): both faster
// than the DMA, so these kernels are bound by the DMA engines / the HBM share.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/kernel_common.h"

namespace trnsim::kernels {

enum class UnaryOp {
  copy,  // a type cast when the dtypes differ
  relu, gelu, gelu_tanh, gelu_dx /* d gelu(x) / dx, exact (erf) form */, silu, sigmoid, tanh, exp, log, sqrt, rsqrt, square, abs, neg, reciprocal,
  sin, cos, erf, sign,  // Scalar-engine activation table (rotary embeddings, exact GELU pieces, |x|')
  affine,  // x * scale + bias
};

struct UnarySpec {
  std::vector<int64_t> shape;
  UnaryOp op = UnaryOp::copy;
  DType input_dtype = DType::fp32;
  DType output_dtype = DType::fp32;
  double scale = 1.0, bias = 0.0;  // affine only
};

// y[shape] = op(x[shape]); x, y HBM tensors of the spec's dtypes.
void build_unary(const KernelContext& ctx, const UnarySpec& spec, uint32_t x, uint32_t y);
isa::Program unary_program(const UnarySpec& spec, const HardwareConfig& config, uint32_t core = 0,
                           uint32_t cores = 1);  // x input, y output

enum class BinaryOp {
  add, subtract, multiply, divide, maximum, minimum,
  equal, not_equal, greater, greater_equal, less, less_equal,  // 1 / 0 in the output dtype (uint8 or float)
  bitwise_and, bitwise_or, bitwise_xor,  // on the two's-complement integer value (the ALU's bitvec ops)
  mod,  // C fmod: the remainder with the dividend's sign
};

struct BinarySpec {
  std::vector<int64_t> a_shape, b_shape;  // broadcast-compatible (NumPy rules)
  BinaryOp op = BinaryOp::add;
  DType a_dtype = DType::fp32, b_dtype = DType::fp32, output_dtype = DType::fp32;
  std::optional<double> a_scalar, b_scalar;  // an immediate instead of that tensor (its shape is ignored)
  // The scalar operand's value is not in the program: it is the kernel's input (`a` or `b`, fp32 [1],
  // loaded once into every partition), so that one program serves every value (an optimizer's
  // step-dependent scalars). The *_scalar value then only says which operand is the scalar.
  bool runtime_scalar = false;
  // The result's shape when it is larger than both operands' broadcast (an expanded operand passed
  // compact, e.g. the [B, S, 1] gradient of a keepdim mean expanded to [B, S, H], divided by a
  // scalar); empty: the broadcast of the operands.
  std::vector<int64_t> out_shape;
};

std::vector<int64_t> broadcast_shape(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// c = a op b with broadcasting; c has the broadcast shape. Pass -1 for an operand given as a scalar.
void build_binary(const KernelContext& ctx, const BinarySpec& spec, int64_t a, int64_t b, uint32_t c);
isa::Program binary_program(const BinarySpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);  // a, b inputs, c output

// out = cond != 0 ? a : b, all of one shape (either value operand may be a scalar immediate).
struct WhereSpec {
  std::vector<int64_t> shape;
  DType cond_dtype = DType::uint8, a_dtype = DType::fp32, b_dtype = DType::fp32, output_dtype = DType::fp32;
  std::optional<double> a_scalar, b_scalar;
};
void build_where(const KernelContext& ctx, const WhereSpec& spec, uint32_t cond, int64_t a, int64_t b, uint32_t out);
isa::Program where_program(const WhereSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                          uint32_t cores = 1);  // cond, a, b inputs, out output

// torch.triu / torch.tril over the last two dims of a [batch, rows, cols] tensor: elements on the
// kept side of diagonal `diagonal` are copied, the others zeroed. Rows on partitions, one GpSimd
// affine_select per tile (the index comparison is the instruction's affine expression); DMA-bound.
struct TriangleSpec {
  int64_t batch = 1, rows = 1, cols = 1;
  int64_t diagonal = 0;
  bool upper = true;  // triu (keep col - row >= diagonal); else tril (keep col - row <= diagonal)
  DType dtype = DType::fp32;
};
// X input, y output. With cores > 1: part `core` of the kernel split across that many cores.
isa::Program triangle_program(const TriangleSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                              uint32_t cores = 1);

}  // namespace trnsim::kernels
