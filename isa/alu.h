// The ALU operators and activation functions of the compute engines, with NKI's names
// (nki.language.*, see nki.api.shared "Supported Math Operators" and "Activation Functions").
// Element semantics are in fp32, as the engines compute (../shared/reference/trainium.md §4.3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace trnsim::isa {

#define TRN_ALU_OPS(X)                                                                                    \
  X(bypass) X(add) X(subtract) X(multiply) X(divide) X(maximum) X(minimum) X(abs_max) X(abs_min) X(power) \
  X(equal) X(not_equal) X(greater) X(greater_equal) X(less) X(less_equal)                                 \
  X(logical_and) X(logical_or) X(logical_xor)                                                             \
  X(bitwise_and) X(bitwise_or) X(bitwise_xor) X(invert) X(left_shift) X(right_shift)                      \
  X(abs) X(square) X(relu) X(rsqrt) X(reciprocal) X(mod)

enum class AluOp : uint8_t {
#define TRN_X(name) name,
  TRN_ALU_OPS(TRN_X)
#undef TRN_X
};

#define TRN_ACTIVATIONS(X)                                                                            \
  X(copy) X(square) X(sigmoid) X(relu) X(prelu) X(gelu) X(gelu_dx) X(gelu_apprx_tanh)                 \
  X(gelu_apprx_sigmoid) X(gelu_apprx_sigmoid_dx) X(silu) X(silu_dx) X(tanh) X(softplus) X(mish) X(erf) \
  X(erf_dx) X(exp) X(log) X(sin) X(cos) X(arctan) X(sqrt) X(rsqrt) X(reciprocal) X(sign) X(abs)

enum class ActivationFunc : uint8_t {
#define TRN_X(name) name,
  TRN_ACTIVATIONS(TRN_X)
#undef TRN_X
};

std::string_view alu_op_name(AluOp op);
std::optional<AluOp> parse_alu_op(std::string_view name);
std::string_view activation_name(ActivationFunc func);
std::optional<ActivationFunc> parse_activation(std::string_view name);

// Bitvec operators treat elements as integer bit patterns; the rest compute in fp32.
bool alu_op_is_bitvec(AluOp op);
// Operators NKI allows as a reduction (add, max, min, logical/bitwise and/or/xor, ...).
bool alu_op_is_reduction(AluOp op);
// Unary operators ignore their second operand.
bool alu_op_is_unary(AluOp op);

// a op b in fp32 (for bitvec ops, a and b are reinterpreted as int32 bit patterns by the caller).
float apply_alu(AluOp op, float a, float b);
// The same over arrays, one operator per loop (what the hot paths use): x[i] = x[i] op y[i] ...
void apply_alu_rows(AluOp op, float* x, const float* y, size_t n);
// ... and x[i] = x[i] op s, or s op x[i] when `reverse`.
void apply_alu_scalar(AluOp op, float* x, size_t n, float s, bool reverse);
// out[i] = x[i] op y[i] and out[i] = x[i] op s (s op x[i] when `reverse`): out either is an operand (the same
// address) or shares no element with it; x and y may be anything.
void apply_alu_rows(AluOp op, float* out, const float* x, const float* y, size_t n);
void apply_alu_scalar(AluOp op, float* out, const float* x, size_t n, float s, bool reverse);
// Left fold from the first element, ((v[0] op v[s]) op v[2s]) ..., over `count` values (the identity for none):
// the order a lane streams its elements; for subtract x0 - x1 - x2 ..., like numpy's subtract.reduce.
float fold_alu(AluOp op, const float* values, size_t count, size_t stride = 1);
// The same fold over `rows` rows at once (row r at values + r * row_stride), each in its own order as fold_alu: with
// `from_first` acc[r] = fold of row r; without, each row's elements fold onto acc[r] (a register that carries on).
// Interleaving rows lets independent folds overlap (one fold is a chain of dependent operations).
void fold_alu_rows(AluOp op, const float* values, size_t rows, size_t row_stride, size_t count, float* acc,
                   bool from_first);
// The identity element of a reduction operator (0 for add, -inf for maximum, ...).
float reduction_identity(AluOp op);
float apply_activation(ActivationFunc func, float x, float alpha = 0.0f);
// out[i] = func(in[i] * scale + *bias) (no addition when `bias` is null: + 0.0 would turn -0.0 into +0.0).
void apply_activation_rows(ActivationFunc func, const float* in, float* out, size_t n, float scale, const float* bias,
                           float alpha);

}  // namespace trnsim::isa
