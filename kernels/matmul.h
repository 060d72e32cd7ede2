// Matmul kernels: C = epilogue(A @ B) for any shapes (ragged edges included), either operand
// optionally given transposed, batched, with a fused epilogue (bias, activation, residual add,
// output cast).
//
// Schedule (NKI tutorial style, sized from the config): for each block of N columns, the whole
// B[K, N-block] (or a K-chunk of it) stays in SBUF; for each block of M rows, A^T tiles
// [128 K, M-block] stream in through a triple-buffered ring on alternating DMA queues; the
// Tensor engine accumulates each [128, 512] output tile over K in its own PSUM bank, with two
// sets of banks alternating between M blocks so the evacuation (PSUM -> SBUF, epilogue, cast,
// alternating Vector/Scalar) of one block overlaps the matmuls of the next.
#pragma once

#include <cstdint>
#include <optional>

#include "isa/alu.h"
#include "kernels/kernel_common.h"

namespace trnsim::kernels {

struct MatmulSpec {
  int64_t batch = 1;
  int64_t m = 0, k = 0, n = 0;
  DType input_dtype = DType::bf16;
  DType output_dtype = DType::fp32;
  bool a_transposed = false;  // A is stored [K, M] (the stationary layout) instead of [M, K]
  bool b_transposed = false;  // B is stored [N, K] instead of [K, N]
  bool bias = false;          // + bias[N] on every row
  std::optional<isa::ActivationFunc> activation;  // applied after the bias
  bool residual = false;      // + residual[M, N] after the activation
};

// HBM tensors the caller declared, with the batch as leading dimension when batch > 1:
// a [M, K] (or [K, M]), b [K, N] (or [N, K]), c [M, N], bias [N], residual [M, N].
struct MatmulTensors {
  uint32_t a, b, c;
  int64_t bias = -1, residual = -1;
};

void build_matmul(const KernelContext& ctx, const MatmulSpec& spec, const MatmulTensors& tensors);

// A whole program for one matmul: declares the HBM tensors (a, b, bias, residual inputs; c output).
// With cores > 1 it is part `core` of the matmul split across that many cores (same HBM tensors).
isa::Program matmul_program(const MatmulSpec& spec, const HardwareConfig& config, uint32_t core = 0,
                            uint32_t cores = 1);

// dst[C, R] = src[R, C] for 2-D HBM tensors (or one batch slice of them), through SBUF: DMA
// transpose where the generation has it for the dtype, else PE transposes through PSUM.
void build_transpose_2d(const KernelContext& ctx, uint32_t src, uint32_t dst, int64_t batch_index = -1);

}  // namespace trnsim::kernels
