#include "isa/alu.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "isa/numerics/elementary_functions.h"

namespace trnsim::isa {
namespace {

constexpr std::array<std::string_view, 31> kAluNames = {
#define TRN_X(name) #name,
    TRN_ALU_OPS(TRN_X)
#undef TRN_X
};

constexpr std::array<std::string_view, 27> kActivationNames = {
#define TRN_X(name) #name,
    TRN_ACTIVATIONS(TRN_X)
#undef TRN_X
};

[[gnu::always_inline]] inline float sigmoid(float x) { return 1.0f / (1.0f + numerics::exp_fp32(-x)); }

// Bitvec operators work on the integer values the fp32 lanes carry (integer dtypes are
// converted exactly to fp32 on read for |v| < 2^24, and bit patterns beyond that are out of scope).
int64_t as_int(float v) { return static_cast<int64_t>(v); }

}  // namespace

std::string_view alu_op_name(AluOp op) { return kAluNames[static_cast<size_t>(op)]; }

std::optional<AluOp> parse_alu_op(std::string_view name) {
  for (size_t i = 0; i < kAluNames.size(); ++i) {
    if (kAluNames[i] == name) return static_cast<AluOp>(i);
  }
  return std::nullopt;
}

std::string_view activation_name(ActivationFunc func) { return kActivationNames[static_cast<size_t>(func)]; }

std::optional<ActivationFunc> parse_activation(std::string_view name) {
  for (size_t i = 0; i < kActivationNames.size(); ++i) {
    if (kActivationNames[i] == name) return static_cast<ActivationFunc>(i);
  }
  return std::nullopt;
}

bool alu_op_is_bitvec(AluOp op) {
  switch (op) {
    case AluOp::bitwise_and:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
    case AluOp::invert:
    case AluOp::left_shift:
    case AluOp::right_shift:
      return true;
    default:
      return false;
  }
}

bool alu_op_is_reduction(AluOp op) {
  switch (op) {
    case AluOp::add:
    case AluOp::subtract:
    case AluOp::multiply:
    case AluOp::maximum:
    case AluOp::minimum:
    case AluOp::logical_and:
    case AluOp::logical_or:
    case AluOp::logical_xor:
    case AluOp::bitwise_and:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
      return true;
    default:
      return false;
  }
}

bool alu_op_is_unary(AluOp op) {
  switch (op) {
    case AluOp::bypass:
    case AluOp::invert:
    case AluOp::abs:
    case AluOp::square:
    case AluOp::relu:
    case AluOp::rsqrt:
    case AluOp::reciprocal:
      return true;
    default:
      return false;
  }
}

namespace {

// One definition of each operator's value, inlined into the loops below with a constant operator so that each
// operator's loop compiles (and vectorises) on its own; apply_alu is the same function for one element.
[[gnu::always_inline]] inline float alu_value(AluOp op, float a, float b) {
  switch (op) {
    case AluOp::bypass: return a;
    case AluOp::add: return a + b;
    case AluOp::subtract: return a - b;
    case AluOp::multiply: return a * b;
    case AluOp::divide: return a / b;
    case AluOp::maximum: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    case AluOp::minimum: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case AluOp::abs_max: return std::max(std::fabs(a), std::fabs(b));
    case AluOp::abs_min: return std::min(std::fabs(a), std::fabs(b));
    case AluOp::power: return std::pow(a, b);
    case AluOp::equal: return a == b ? 1.0f : 0.0f;
    case AluOp::not_equal: return a != b ? 1.0f : 0.0f;
    case AluOp::greater: return a > b ? 1.0f : 0.0f;
    case AluOp::greater_equal: return a >= b ? 1.0f : 0.0f;
    case AluOp::less: return a < b ? 1.0f : 0.0f;
    case AluOp::less_equal: return a <= b ? 1.0f : 0.0f;
    case AluOp::logical_and: return (a != 0 && b != 0) ? 1.0f : 0.0f;
    case AluOp::logical_or: return (a != 0 || b != 0) ? 1.0f : 0.0f;
    case AluOp::logical_xor: return ((a != 0) != (b != 0)) ? 1.0f : 0.0f;
    case AluOp::bitwise_and: return static_cast<float>(as_int(a) & as_int(b));
    case AluOp::bitwise_or: return static_cast<float>(as_int(a) | as_int(b));
    case AluOp::bitwise_xor: return static_cast<float>(as_int(a) ^ as_int(b));
    case AluOp::invert: return static_cast<float>(static_cast<int32_t>(~static_cast<uint32_t>(as_int(a))));
    case AluOp::left_shift:
      return static_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(as_int(a)) << (as_int(b) & 31)));
    case AluOp::right_shift:
      return static_cast<float>(static_cast<uint32_t>(as_int(a)) >> (as_int(b) & 31));
    case AluOp::abs: return std::fabs(a);
    case AluOp::square: return a * a;
    case AluOp::relu: return a > 0 ? a : 0.0f;
    case AluOp::rsqrt: return 1.0f / std::sqrt(a);
    case AluOp::reciprocal: return 1.0f / a;
    case AluOp::mod: return std::fmod(a, b);
  }
  return NAN;
}

}  // namespace

float apply_alu(AluOp op, float a, float b) { return alu_value(op, a, b); }

namespace {

// The loops of the three-operand forms, one per way out may coincide with an operand, so each promises the compiler
// what holds (restrict) and vectorises without run-time overlap checks.
template <AluOp kOp>
void alu_rows_distinct(float* __restrict out, const float* __restrict x, const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = alu_value(kOp, x[i], y[i]);
}
template <AluOp kOp>
void alu_rows_out_is_x(float* __restrict out, const float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = alu_value(kOp, out[i], y[i]);
}
template <AluOp kOp>
void alu_rows_out_is_y(float* __restrict out, const float* __restrict x, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = alu_value(kOp, x[i], out[i]);
}
template <AluOp kOp>
void alu_rows_all_same(float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = alu_value(kOp, out[i], out[i]);
}
template <AluOp kOp>
void alu_rows(float* out, const float* x, const float* y, size_t n) {
  if (out == x && out == y) {
    alu_rows_all_same<kOp>(out, n);
  } else if (out == x) {
    alu_rows_out_is_x<kOp>(out, y, n);
  } else if (out == y) {
    alu_rows_out_is_y<kOp>(out, x, n);
  } else {
    alu_rows_distinct<kOp>(out, x, y, n);
  }
}
template <AluOp kOp, bool kReverse>
void alu_scalar_distinct(float* __restrict out, const float* __restrict x, size_t n, float s) {
  for (size_t i = 0; i < n; ++i) out[i] = kReverse ? alu_value(kOp, s, x[i]) : alu_value(kOp, x[i], s);
}
template <AluOp kOp, bool kReverse>
void alu_scalar(float* out, const float* x, size_t n, float s) {
  if (out == x) {
    for (size_t i = 0; i < n; ++i) out[i] = kReverse ? alu_value(kOp, s, out[i]) : alu_value(kOp, out[i], s);
  } else {
    alu_scalar_distinct<kOp, kReverse>(out, x, n, s);
  }
}

}  // namespace

void apply_alu_rows(AluOp op, float* out, const float* x, const float* y, size_t n) {
  switch (op) {
#define TRN_X(name)                               \
  case AluOp::name:                               \
    alu_rows<AluOp::name>(out, x, y, n);          \
    return;
    TRN_ALU_OPS(TRN_X)
#undef TRN_X
  }
}

void apply_alu_scalar(AluOp op, float* out, const float* x, size_t n, float s, bool reverse) {
  switch (op) {
#define TRN_X(name)                                                                                   \
  case AluOp::name:                                                                                   \
    reverse ? alu_scalar<AluOp::name, true>(out, x, n, s) : alu_scalar<AluOp::name, false>(out, x, n, s); \
    return;
    TRN_ALU_OPS(TRN_X)
#undef TRN_X
  }
}

void apply_alu_rows(AluOp op, float* x, const float* y, size_t n) { apply_alu_rows(op, x, x, y, n); }
void apply_alu_scalar(AluOp op, float* x, size_t n, float s, bool reverse) { apply_alu_scalar(op, x, x, n, s, reverse); }

float fold_alu(AluOp op, const float* values, size_t count, size_t stride) {
  if (count == 0) return reduction_identity(op);
  float acc = values[0];
  switch (op) {
#define TRN_X(name)                                                                          \
  case AluOp::name:                                                                          \
    for (size_t i = 1; i < count; ++i) acc = alu_value(AluOp::name, acc, values[i * stride]); \
    return acc;
    TRN_ALU_OPS(TRN_X)
#undef TRN_X
  }
  return acc;
}

namespace {

template <AluOp kOp>
void fold_rows(const float* values, size_t rows, size_t row_stride, size_t count, float* acc, bool from_first) {
  constexpr size_t kInterleave = 8;
  const size_t skip = from_first ? 1 : 0;
  size_t r = 0;
  for (; r + kInterleave <= rows; r += kInterleave) {
    const float* row[kInterleave];
    float a[kInterleave];
    for (size_t j = 0; j < kInterleave; ++j) {
      row[j] = values + (r + j) * row_stride;
      a[j] = from_first ? row[j][0] : acc[r + j];
    }
    for (size_t i = skip; i < count; ++i) {
      for (size_t j = 0; j < kInterleave; ++j) a[j] = alu_value(kOp, a[j], row[j][i]);
    }
    for (size_t j = 0; j < kInterleave; ++j) acc[r + j] = a[j];
  }
  for (; r < rows; ++r) {
    const float* row = values + r * row_stride;
    float a = from_first ? row[0] : acc[r];
    for (size_t i = skip; i < count; ++i) a = alu_value(kOp, a, row[i]);
    acc[r] = a;
  }
}

}  // namespace

void fold_alu_rows(AluOp op, const float* values, size_t rows, size_t row_stride, size_t count, float* acc,
                   bool from_first) {
  if (from_first && count == 0) {
    std::fill(acc, acc + rows, reduction_identity(op));
    return;
  }
  switch (op) {
#define TRN_X(name)                                                           \
  case AluOp::name:                                                           \
    fold_rows<AluOp::name>(values, rows, row_stride, count, acc, from_first); \
    return;
    TRN_ALU_OPS(TRN_X)
#undef TRN_X
  }
}

float reduction_identity(AluOp op) {
  switch (op) {
    case AluOp::add:
    case AluOp::subtract:
    case AluOp::logical_or:
    case AluOp::logical_xor:
    case AluOp::bitwise_or:
    case AluOp::bitwise_xor:
      return 0.0f;
    case AluOp::multiply:
    case AluOp::logical_and:
      return 1.0f;
    case AluOp::maximum:
      return -std::numeric_limits<float>::infinity();
    case AluOp::minimum:
      return std::numeric_limits<float>::infinity();
    case AluOp::bitwise_and:
      return -1.0f;  // all bits set
    default:
      return NAN;
  }
}

// Reference fp32 semantics. The hardware evaluates piecewise polynomials with documented valid
// input ranges (nki.api.shared); within those ranges these agree to a few ulps.
namespace {

[[gnu::always_inline]] inline float activation_value(ActivationFunc func, float x, float alpha) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  constexpr float kTwoOverSqrtPi = 1.12837916709551257f;
  switch (func) {
    case ActivationFunc::copy: return x;
    case ActivationFunc::square: return x * x;
    case ActivationFunc::sigmoid: return sigmoid(x);
    case ActivationFunc::relu: return x > 0 ? x : 0.0f;
    case ActivationFunc::prelu: return x > 0 ? x : alpha * x;
    case ActivationFunc::gelu: return 0.5f * x * (1.0f + numerics::erf_fp32(x * kInvSqrt2));
    case ActivationFunc::gelu_dx: {
      float cdf = 0.5f * (1.0f + numerics::erf_fp32(x * kInvSqrt2));
      float pdf = 0.39894228040143268f * numerics::exp_fp32(-0.5f * x * x);
      return cdf + x * pdf;
    }
    case ActivationFunc::gelu_apprx_tanh:
      return 0.5f * x * (1.0f + numerics::tanh_fp32(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    case ActivationFunc::gelu_apprx_sigmoid: return x * sigmoid(1.702f * x);
    case ActivationFunc::gelu_apprx_sigmoid_dx: {
      float s = sigmoid(1.702f * x);
      return s + 1.702f * x * s * (1.0f - s);
    }
    case ActivationFunc::silu: return x * sigmoid(x);
    case ActivationFunc::silu_dx: {
      float s = sigmoid(x);
      return s * (1.0f + x * (1.0f - s));
    }
    case ActivationFunc::tanh: return numerics::tanh_fp32(x);
    case ActivationFunc::softplus: return x > 20.0f ? x : std::log1p(numerics::exp_fp32(x));
    case ActivationFunc::mish: return x * numerics::tanh_fp32(x > 20.0f ? x : std::log1p(numerics::exp_fp32(x)));
    case ActivationFunc::erf: return numerics::erf_fp32(x);
    case ActivationFunc::erf_dx: return kTwoOverSqrtPi * numerics::exp_fp32(-x * x);
    case ActivationFunc::exp: return numerics::exp_fp32(x);
    case ActivationFunc::log: return std::log(x);
    case ActivationFunc::sin: return std::sin(x);
    case ActivationFunc::cos: return std::cos(x);
    case ActivationFunc::arctan: return std::atan(x);
    case ActivationFunc::sqrt: return std::sqrt(x);
    case ActivationFunc::rsqrt: return 1.0f / std::sqrt(x);
    case ActivationFunc::reciprocal: return 1.0f / x;
    case ActivationFunc::sign: return x > 0 ? 1.0f : (x < 0 ? -1.0f : x);
    case ActivationFunc::abs: return std::fabs(x);
  }
  return NAN;
}

}  // namespace

float apply_activation(ActivationFunc func, float x, float alpha) { return activation_value(func, x, alpha); }

void apply_activation_rows(ActivationFunc func, const float* in, float* out, size_t n, float scale, const float* bias,
                           float alpha) {
  switch (func) {
#define TRN_X(name)                                                                                  \
  case ActivationFunc::name:                                                                         \
    if (bias) {                                                                                      \
      const float b = *bias;                                                                         \
      for (size_t i = 0; i < n; ++i) out[i] = activation_value(ActivationFunc::name, in[i] * scale + b, alpha); \
    } else {                                                                                         \
      for (size_t i = 0; i < n; ++i) out[i] = activation_value(ActivationFunc::name, in[i] * scale, alpha); \
    }                                                                                                \
    return;
    TRN_ACTIVATIONS(TRN_X)
#undef TRN_X
  }
}

}  // namespace trnsim::isa
