// Tensor engine semantics: matmul into PSUM with fp32 accumulation, and PE transposes.
#include <Eigen/Core>

#include "isa/isa_error.h"
#include "isa/semantics/semantics.h"

namespace trnsim::isa {
namespace {

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

enum AccumulateMode { kAccumulateAuto = 0, kAccumulateFalse = 1, kAccumulateTrue = 2 };

// A [K, F] operand (or [128, 2, F] in double_row mode, contraction = partition x 2) as a K x F matrix.
RowMajor contraction_matrix(const Tile& tile, bool double_row, uint64_t free) {
  if (!double_row) return Eigen::Map<const RowMajor>(tile.values.data(), tile.partitions, free);
  // Element (p, r, f) sits at p * 2F + r * F + f; contraction index k = 2p + r.
  RowMajor m(tile.partitions * 2, free);
  for (uint32_t p = 0; p < tile.partitions; ++p) {
    for (uint32_t r = 0; r < 2; ++r) {
      for (uint64_t f = 0; f < free; ++f) m(2 * p + r, f) = tile.at(p, r * free + f);
    }
  }
  return m;
}

Tile transposed(const Tile& in) {
  Tile out(static_cast<uint32_t>(in.free), in.partitions);
  for (uint32_t p = 0; p < in.partitions; ++p) {
    for (uint64_t f = 0; f < in.free; ++f) out.at(static_cast<uint32_t>(f), p) = in.at(p, f);
  }
  return out;
}

}  // namespace

void exec_nc_matmul(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& stationary_ap = inst.tensor("stationary");
  const AccessPattern& moving_ap = inst.tensor("moving");
  bool double_row = inst.scalar("perf_mode") == 1;
  Tile stationary = ctx.state.read(stationary_ap);
  Tile moving = ctx.state.read(moving_ap);
  uint64_t m = double_row ? stationary.free / 2 : stationary.free;
  uint64_t n = double_row ? moving.free / 2 : moving.free;
  if (dst.partitions() != m || dst.free_elements() != n) {
    throw IsaError("dst is [" + std::to_string(dst.partitions()) + ", " + std::to_string(dst.free_elements()) +
                   "] but stationary.T @ moving is [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  }
  Tile result(static_cast<uint32_t>(m), n);
  bool transpose_mode = inst.scalar("is_transpose") != 0 && ctx.config.generation >= Generation::trn2;
  if (transpose_mode) {
    // v3+ transpose mode is bit-accurate: the stationary tile lands transposed (A-V3), NaN/Inf intact.
    result = transposed(stationary);
  } else {
    Eigen::Map<RowMajor> out(result.values.data(), m, n);
    if (double_row) {
      out.noalias() = contraction_matrix(stationary, true, m).transpose() * contraction_matrix(moving, true, n);
    } else {
      // Map the tiles in place: a copy here costs as much as the conversion from bf16.
      Eigen::Map<const RowMajor> s(stationary.values.data(), stationary.partitions, m);
      Eigen::Map<const RowMajor> x(moving.values.data(), moving.partitions, n);
      out.noalias() = s.transpose() * x;
    }
  }
  int mode = static_cast<int>(inst.scalar("accumulate"));
  bool accumulate = mode == kAccumulateTrue || (mode == kAccumulateAuto && ctx.state.psum_accumulating(dst));
  if (accumulate) {
    // PSUM accumulates in fp32; a bf16 PSUM tile (v4) is upcast, added to and rounded back.
    Tile previous = ctx.state.read(dst);
    for (size_t i = 0; i < result.values.size(); ++i) result.values[i] += previous.values[i];
  }
  ctx.state.write(dst, result, ctx.rounding, ctx.rng);
  ctx.state.set_psum_accumulating(dst, true);
}

void exec_nc_transpose(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  Tile data = ctx.read(inst.tensor("data"));
  if (dst.partitions() != data.free || dst.free_elements() != data.partitions) {
    throw IsaError("dst must be [" + std::to_string(data.free) + ", " + std::to_string(data.partitions) +
                   "] to hold data.T");
  }
  ctx.write(dst, transposed(data));
}

}  // namespace trnsim::isa
