// JSON form of every kernel builder's spec (the data of a KernelInvocation, kernel_invocation.h):
// nlohmann's macros, one line per struct naming its fields once. Fields a JSON object lacks take
// the struct's default (so a field added later still reads recordings made before it); enums are
// written by name. Checking that a JSON spec names only known fields and values is
// kernel_invocation.cpp's job, not this header's.
//
// Adding a field to a spec struct means adding it here too: the invocation round-trip test
// (tests/kernels/kernel_invocation_test.cpp) and replay --rebuild of the golden recordings rebuild
// the recorded programs and fail when a field that shapes the program is missing.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "config/dtype.h"
#include "isa/alu.h"
#include "kernels/attention.h"
#include "kernels/attention_backward.h"
#include "kernels/conv.h"
#include "kernels/data_movement.h"
#include "kernels/elementwise.h"
#include "kernels/indexing.h"
#include "kernels/loss.h"
#include "kernels/matmul.h"
#include "kernels/normalization.h"
#include "kernels/optimizer.h"
#include "kernels/pooling.h"
#include "kernels/reduction.h"
#include "kernels/scan.h"
#include "kernels/sort.h"

// std::optional (nlohmann 3.11.2 has no built-in conversion): null when empty. The pattern of
// nlohmann's README ("How do I convert third-party types?").
namespace nlohmann {
template <typename T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& value) {
    if (value) {
      j = *value;
    } else {
      j = nullptr;
    }
  }
  static void from_json(const json& j, std::optional<T>& value) {
    if (j.is_null()) {
      value.reset();
    } else {
      value = j.get<T>();
    }
  }
};
}  // namespace nlohmann

namespace trnsim {
// Dtypes by their canonical name (config/dtype.h's table), not by a second list of names.
inline void to_json(nlohmann::json& j, DType dtype) { j = std::string(dtype_name(dtype)); }
inline void from_json(const nlohmann::json& j, DType& dtype) {
  const auto parsed = parse_dtype(j.get<std::string>());
  if (!parsed) throw std::invalid_argument("unknown dtype '" + j.get<std::string>() + "'");
  dtype = *parsed;
}
}  // namespace trnsim

namespace trnsim::isa {
// Activation functions by their ISA name (isa/alu.h's table).
inline void to_json(nlohmann::json& j, ActivationFunc func) { j = std::string(activation_name(func)); }
inline void from_json(const nlohmann::json& j, ActivationFunc& func) {
  const auto parsed = parse_activation(j.get<std::string>());
  if (!parsed) throw std::invalid_argument("unknown activation function '" + j.get<std::string>() + "'");
  func = *parsed;
}
}  // namespace trnsim::isa

namespace trnsim::kernels {

// Enums by name. nlohmann maps an unknown name to the first entry: kernel_invocation.cpp's strict
// read catches that (the value does not read back as written).
NLOHMANN_JSON_SERIALIZE_ENUM(UnaryOp, {{UnaryOp::copy, "copy"},       {UnaryOp::relu, "relu"},
                                       {UnaryOp::gelu, "gelu"},       {UnaryOp::gelu_tanh, "gelu_tanh"},
                                       {UnaryOp::gelu_dx, "gelu_dx"}, {UnaryOp::silu, "silu"},
                                       {UnaryOp::sigmoid, "sigmoid"}, {UnaryOp::tanh, "tanh"},
                                       {UnaryOp::exp, "exp"},         {UnaryOp::log, "log"},
                                       {UnaryOp::sqrt, "sqrt"},       {UnaryOp::rsqrt, "rsqrt"},
                                       {UnaryOp::square, "square"},   {UnaryOp::abs, "abs"},
                                       {UnaryOp::neg, "neg"},         {UnaryOp::reciprocal, "reciprocal"},
                                       {UnaryOp::sin, "sin"},         {UnaryOp::cos, "cos"},
                                       {UnaryOp::erf, "erf"},         {UnaryOp::sign, "sign"},
                                       {UnaryOp::affine, "affine"}})
NLOHMANN_JSON_SERIALIZE_ENUM(BinaryOp, {{BinaryOp::add, "add"},
                                        {BinaryOp::subtract, "subtract"},
                                        {BinaryOp::multiply, "multiply"},
                                        {BinaryOp::divide, "divide"},
                                        {BinaryOp::maximum, "maximum"},
                                        {BinaryOp::minimum, "minimum"},
                                        {BinaryOp::equal, "equal"},
                                        {BinaryOp::not_equal, "not_equal"},
                                        {BinaryOp::greater, "greater"},
                                        {BinaryOp::greater_equal, "greater_equal"},
                                        {BinaryOp::less, "less"},
                                        {BinaryOp::less_equal, "less_equal"},
                                        {BinaryOp::bitwise_and, "bitwise_and"},
                                        {BinaryOp::bitwise_or, "bitwise_or"},
                                        {BinaryOp::bitwise_xor, "bitwise_xor"},
                                        {BinaryOp::mod, "mod"}})
NLOHMANN_JSON_SERIALIZE_ENUM(ReduceOp, {{ReduceOp::sum, "sum"},
                                        {ReduceOp::mean, "mean"},
                                        {ReduceOp::max, "max"},
                                        {ReduceOp::min, "min"},
                                        {ReduceOp::argmax, "argmax"},
                                        {ReduceOp::argmin, "argmin"}})
NLOHMANN_JSON_SERIALIZE_ENUM(ScanOp, {{ScanOp::sum, "sum"}, {ScanOp::prod, "prod"}})
NLOHMANN_JSON_SERIALIZE_ENUM(NormKind, {{NormKind::layernorm, "layernorm"}, {NormKind::rmsnorm, "rmsnorm"}})
NLOHMANN_JSON_SERIALIZE_ENUM(Reduction, {{Reduction::none, "none"}, {Reduction::sum, "sum"}, {Reduction::mean, "mean"}})
NLOHMANN_JSON_SERIALIZE_ENUM(IndexWidth, {{IndexWidth::int32, "int32"}, {IndexWidth::int64, "int64"}})
NLOHMANN_JSON_SERIALIZE_ENUM(HistogramMode, {{HistogramMode::histc, "histc"}, {HistogramMode::bincount, "bincount"}})

namespace detail {  // before FlipSpec, whose dims it is
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CopyDim, size, src_stride, dst_stride)
}  // namespace detail

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MatmulSpec, batch, m, k, n, input_dtype, output_dtype, a_transposed,
                                                b_transposed, bias, activation, residual)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AttentionSpec, batch, heads, kv_heads, seq_q, seq_k, head_dim, causal,
                                                scale, dtype, write_lse)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Conv2dSpec, n, c, h, w, o, kh, kw, stride_h, stride_w, pad_h, pad_w,
                                                dilation_h, dilation_w, groups, bias, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PoolSpec, n, c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w,
                                                dilation_h, dilation_w, ceil_mode, count_include_pad, divisor_override,
                                                dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(UnarySpec, shape, op, input_dtype, output_dtype, scale, bias)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(BinarySpec, a_shape, b_shape, op, a_dtype, b_dtype, output_dtype,
                                                a_scalar, b_scalar, out_shape, runtime_scalar)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(WhereSpec, shape, cond_dtype, a_dtype, b_dtype, output_dtype, a_scalar,
                                                b_scalar)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TriangleSpec, batch, rows, cols, diagonal, upper, dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ReduceSpec, shape, dims, op, keepdim, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ScanSpec, rows, cols, op, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ProdSpec, rows, cols, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SoftmaxSpec, shape, log, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SoftmaxBackwardSpec, shape, log, input_dtype, output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NormSpec, kind, shape, eps, weight, bias, input_dtype, output_dtype,
                                                param_dtype, save_stats)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NormBackwardSpec, kind, shape, weight, bias, input_dtype, param_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(PermuteSpec, shape, perm, dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ConcatSpec, shapes, dim, dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(EmbeddingSpec, num_ids, vocab, dim, dtype, index_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(StridedCopySpec, shape, src_strides, src_elements, dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(FlipSpec, dims, src_offset, elements, dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CrossEntropySpec, rows, classes, reduction, ignore_index, logits_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OneHotSpec, rows, classes, scaled, scale_broadcast, multiplier,
                                                output_dtype)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(AdamWSpec, elements, param_dtype, grad_dtype, state_dtype, beta1, beta2,
                                                eps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(GatherRowsSpec, num_ids, rows, row_elements, dtype, index,
                                                wrap_negative)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ScatterRowsSpec, num_ids, rows, row_elements, dtype, index,
                                                wrap_negative, accumulate, unique_ids)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(HistogramSpec, n, bins, mode, input_dtype, input_width, min, max,
                                                weighted, output_dtype, output_pairs)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ArangeSpec, n, start, step, dtype, pairs)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ScatterMaxSpec, rows, targets, per_row, dtype, maximum, include_self)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(NonzeroSpec, shape, nonzeros, dtype, pairs)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TopkSpec, rows, n, k, dtype, largest, resolve_ties)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SortSpec, rows, n, dtype, pairs, descending)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(CountingSortSpec, rows, n, key_min, keys, pairs, descending)

}  // namespace trnsim::kernels
