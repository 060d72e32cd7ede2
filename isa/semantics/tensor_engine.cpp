// Tensor engine semantics: matmul into PSUM with fp32 accumulation, and PE transposes.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "isa/host_workers.h"
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

// out[f * out_stride + p] = in[p * in_stride + f] for p < partitions, f < free, in square blocks so that both
// sides are walked a few cache lines at a time.
void transpose_floats(const float* in, int64_t in_stride, float* out, int64_t out_stride, uint64_t partitions,
                      uint64_t free) {
  constexpr uint64_t kBlock = 16;  // host tuning, assumed (8 and 32 measured no better on dense tiles)
  for (uint64_t p0 = 0; p0 < partitions; p0 += kBlock) {
    const uint64_t p1 = std::min(partitions, p0 + kBlock);
    for (uint64_t f0 = 0; f0 < free; f0 += kBlock) {
      const uint64_t f1 = std::min(free, f0 + kBlock);
      for (uint64_t p = p0; p < p1; ++p) {
        const float* row = in + int64_t(p) * in_stride;
        for (uint64_t f = f0; f < f1; ++f) out[int64_t(f) * out_stride + int64_t(p)] = row[f];
      }
    }
  }
}

Tile transposed(const Tile& in) {
  Tile out(static_cast<uint32_t>(in.free), in.partitions);
  transpose_floats(in.values.data(), int64_t(in.free), out.values.data(), int64_t(in.partitions), in.partitions,
                   in.free);
  return out;
}

// The `accumulate` operand of nc_matmul / nc_matmul_mx: true adds into dst, false overwrites, auto adds when the
// previous matmul into these PSUM locations left them accumulating.
bool matmul_accumulates(const Instruction& inst, const ExecContext& ctx, const AccessPattern& dst) {
  int mode = static_cast<int>(inst.scalar("accumulate"));
  return mode == kAccumulateTrue || (mode == kAccumulateAuto && ctx.state.psum_accumulating(dst));
}

// Writes a matmul result (fp32) to its PSUM dst, adding the previous contents when accumulating, and marks dst as
// accumulating for the next accumulate=auto.
void write_matmul_result(ExecContext& ctx, const AccessPattern& dst, Tile& result, bool accumulate) {
  if (accumulate) {
    // PSUM accumulates in fp32; a bf16 PSUM tile (v4) is upcast, added to and rounded back.
    Tile previous = ctx.state.read(dst);
    for (size_t i = 0; i < result.values.size(); ++i) result.values[i] += previous.values[i];
  }
  ctx.state.write(dst, result, ctx.rounding, ctx.rng);
  ctx.state.set_psum_accumulating(dst, true);
}

// MX scale groups (ISA nc_matmul_mx, quantize_mx): a group is 8 partitions x the 4 packed values of one column; the
// scales of the 4 groups of a 32-partition quadrant sit on 4 consecutive partitions of the same quadrant of the
// scale tile (which may start at any offset within its first quadrant).
constexpr uint32_t kMxGroupPartitions = 8;
constexpr uint32_t kMxQuadrant = 32;
constexpr uint32_t kMxScalesPerQuadrant = kMxQuadrant / kMxGroupPartitions;
uint32_t mx_scale_row(uint32_t group) { return kMxQuadrant * (group / kMxScalesPerQuadrant) + group % kMxScalesPerQuadrant; }

// The E8M0 scales of an MX operand as doubles, [group][column]: 2^(code - 127), code 0xFF = NaN. The scale tile's
// bytes are taken as codes whether it is declared uint8 or fp8_e8m0.
std::vector<std::vector<double>> mx_scales(const CoreState& state, const AccessPattern& scale_ap, uint32_t groups,
                                           uint64_t columns, const char* operand) {
  AccessPattern codes_ap = scale_ap;
  codes_ap.dtype = DType::uint8;
  Tile codes = state.read(codes_ap);
  uint32_t rows_needed = groups == 0 ? 0 : mx_scale_row(groups - 1) + 1;
  if (codes.partitions < rows_needed || codes.free != columns) {
    throw IsaError(std::string(operand) + " is [" + std::to_string(codes.partitions) + ", " +
                   std::to_string(codes.free) + "] but the data needs at least [" + std::to_string(rows_needed) +
                   ", " + std::to_string(columns) + "]");
  }
  std::vector<std::vector<double>> scales(groups, std::vector<double>(columns));
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint64_t c = 0; c < columns; ++c) {
      int code = static_cast<int>(codes.at(mx_scale_row(g), c));
      scales[g][c] = code == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, code - 127);
    }
  }
  return scales;
}

using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The 32 contraction rows of group g of an unpacked MX tile ([P, 4F], see CoreState::read) as a 32 x F matrix:
// row r is partition 8g + r/4, packed value r%4 (contraction index k = 4p + j).
RowMajorD mx_group(const Tile& tile, uint32_t group, uint64_t columns) {
  RowMajorD m(kMxGroupPartitions * 4, columns);
  for (uint32_t r = 0; r < kMxGroupPartitions * 4; ++r) {
    const float* row = tile.row(group * kMxGroupPartitions + r / 4);
    for (uint64_t c = 0; c < columns; ++c) m(r, c) = row[4 * c + r % 4];
  }
  return m;
}

// The fast path of nc_matmul (the common case): fp32 dst rows in PSUM multiplied into where they lie, fp32
// accumulation as the array does, no staging tile and no second rounding (fp32 -> fp32 is exact). The operands come
// from SBUF, read where they lie when they are fp32, else converted once into a cached tile.
struct DirectMatmul {
  const float* stationary = nullptr;  // [K, M], rows `stationary_stride` floats apart
  int64_t stationary_stride = 0;
  const float* moving = nullptr;  // [K, N]
  int64_t moving_stride = 0;
  float* out = nullptr;  // [M, N] in PSUM
  int64_t out_stride = 0;
  int64_t k = 0, m = 0, n = 0;
  bool accumulate = false;
  std::shared_ptr<const Tile> stationary_tile, moving_tile;  // keep converted operands alive
};

// Whether `inst` takes the fast path: fp32 PSUM dst with contiguous rows, SBUF operands, not transpose or
// double_row mode, shapes that agree (a disagreement is left to the general path, which reports it). Changes
// nothing.
bool direct_matmul_applies(const Instruction& inst, ExecContext& ctx, CoreState::Rows& dst_rows) {
  if (inst.opcode != Opcode::nc_matmul || inst.scalar("perf_mode") == 1) return false;
  if (inst.scalar("is_transpose") != 0 && ctx.config.generation >= Generation::trn2) return false;
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& stationary = inst.tensor("stationary");
  const AccessPattern& moving = inst.tensor("moving");
  if (dst.space != MemorySpace::psum || stationary.space != MemorySpace::sbuf || moving.space != MemorySpace::sbuf) {
    return false;
  }
  if (!ctx.state.rows_in_place(dst, /*for_write=*/false, dst_rows) || !dst_rows.fp32_aligned()) return false;
  return stationary.partitions() == moving.partitions() && dst.partitions() == stationary.free_elements() &&
         dst.free_elements() == moving.free_elements();
}

// An operand as K rows of floats: where it lies when fp32, else (bf16, fp8, ...) the cached fp32 tile.
void direct_operand(const AccessPattern& ap, ExecContext& ctx, const float*& rows, int64_t& stride,
                    std::shared_ptr<const Tile>& tile) {
  CoreState::Rows in_place;
  if (ctx.state.rows_in_place(ap, /*for_write=*/false, in_place) && in_place.fp32_aligned()) {
    rows = reinterpret_cast<const float*>(in_place.data);
    stride = in_place.row_stride_bytes / int64_t(sizeof(float));
    return;
  }
  tile = ctx.read_cached(ap);
  rows = tile->values.data();
  stride = int64_t(tile->free);
}

// Everything but the GEMM, in program order: the operands, the accumulate decision (which reads the PSUM marks the
// matmuls before it left) and the marks it leaves.
DirectMatmul plan_direct_matmul(const Instruction& inst, ExecContext& ctx) {
  DirectMatmul plan;
  const AccessPattern& dst = inst.tensor("dst");
  direct_operand(inst.tensor("stationary"), ctx, plan.stationary, plan.stationary_stride, plan.stationary_tile);
  direct_operand(inst.tensor("moving"), ctx, plan.moving, plan.moving_stride, plan.moving_tile);
  plan.k = inst.tensor("moving").partitions();
  plan.m = int64_t(dst.partitions());
  plan.n = int64_t(dst.free_elements());
  plan.accumulate = matmul_accumulates(inst, ctx, dst);
  plan.out = ctx.state.fp32_rows(dst, plan.out_stride);
  ctx.state.set_psum_accumulating(dst, true);
  return plan;
}

// Output columns [begin, end) of one planned matmul: one chunk (column_chunks), so that every run splits a matmul
// the same way.
void multiply_columns(const DirectMatmul& plan, int64_t begin, int64_t end) {
  if (begin >= end) return;
  using Out = Eigen::Map<RowMajor, 0, Eigen::OuterStride<>>;
  using In = Eigen::Map<const RowMajor, 0, Eigen::OuterStride<>>;
  In s(plan.stationary, plan.k, plan.m, Eigen::OuterStride<>(plan.stationary_stride));
  In x(plan.moving + begin, plan.k, end - begin, Eigen::OuterStride<>(plan.moving_stride));
  Out out(plan.out + begin, plan.m, end - begin, Eigen::OuterStride<>(plan.out_stride));
  if (plan.accumulate) {
    out.noalias() += s.transpose() * x;
  } else {
    out.noalias() = s.transpose() * x;
  }
}

// A matmul's output columns are computed in fixed chunks, whichever thread takes each: the GEMM's vector and
// remainder loops meet the columns the same way in every run, so values do not depend on the host's thread count
// or on how matmuls are grouped. Host tuning, assumed: chunks of at least 256 columns (smaller GEMMs lose more to
// packing than a second thread gives).
unsigned column_chunks(const DirectMatmul& plan) { return plan.n >= 512 ? unsigned(plan.n / 256) : 1u; }

void multiply_chunk(const DirectMatmul& plan, unsigned chunk, unsigned chunks) {
  multiply_columns(plan, plan.n * chunk / chunks, plan.n * (chunk + 1) / chunks);
}

}  // namespace

void exec_nc_matmul(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  CoreState::Rows dst_rows;
  if (direct_matmul_applies(inst, ctx, dst_rows)) {
    const DirectMatmul plan = plan_direct_matmul(inst, ctx);
    const unsigned chunks = column_chunks(plan);
    run_row_ranges(ctx.workers, chunks, chunks > 1, [&](uint32_t first, uint32_t end) {
      for (uint32_t chunk = first; chunk < end; ++chunk) multiply_chunk(plan, chunk, chunks);
    });
    return;
  }
  const AccessPattern& stationary_ap = inst.tensor("stationary");
  const AccessPattern& moving_ap = inst.tensor("moving");
  bool double_row = inst.scalar("perf_mode") == 1;
  // Kernels stream the same moving (and stationary) tiles through many matmuls: convert once.
  std::shared_ptr<const Tile> stationary_tile = ctx.read_cached(stationary_ap);
  std::shared_ptr<const Tile> moving_tile = ctx.read_cached(moving_ap);
  const Tile& stationary = *stationary_tile;
  const Tile& moving = *moving_tile;
  uint64_t m = double_row ? stationary.free / 2 : stationary.free;
  uint64_t n = double_row ? moving.free / 2 : moving.free;
  if (dst.partitions() != m || dst.free_elements() != n) {
    throw IsaError("dst is [" + std::to_string(dst.partitions()) + ", " + std::to_string(dst.free_elements()) +
                   "] but stationary.T @ moving is [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  }
  // The contraction runs over the partitions of both operands; a product of unequal ones would read past a tile
  // (found by the sanitizer tier: Eigen's own assertion in a checked build).
  if (stationary.partitions != moving.partitions) {
    throw IsaError("stationary has " + std::to_string(stationary.partitions) + " partitions but moving has " +
                   std::to_string(moving.partitions) + ": the contraction (partition) dims differ");
  }
  bool transpose_mode = inst.scalar("is_transpose") != 0 && ctx.config.generation >= Generation::trn2;
  bool accumulate = matmul_accumulates(inst, ctx, dst);
  Tile result(static_cast<uint32_t>(m), n);
  if (transpose_mode) {
    // v3+ transpose mode is bit-accurate: the stationary tile lands transposed (A-V3), NaN/Inf intact.
    result = transposed(stationary);
  } else {
    Eigen::Map<RowMajor> out(result.values.data(), m, n);
    if (double_row) {
      out.noalias() = contraction_matrix(stationary, true, m).transpose() * contraction_matrix(moving, true, n);
    } else {
      Eigen::Map<const RowMajor> s(stationary.values.data(), stationary.partitions, m);
      Eigen::Map<const RowMajor> x(moving.values.data(), moving.partitions, n);
      out.noalias() = s.transpose() * x;
    }
  }
  write_matmul_result(ctx, dst, result, accumulate);
}

size_t exec_nc_matmul_run(const Instruction* first, size_t count, ExecContext& ctx) {
  // Host tuning, assumed: a run's matmuls share one hand-off to the threads (one per matmul cost more than the
  // second thread gave); 64 bounds the converted operand tiles a run holds at once.
  constexpr size_t kMaxRun = 64;
  count = std::min(count, kMaxRun);
  if (count < 2 || !ctx.workers || ctx.workers->size() < 2) return 0;
  std::vector<CoreState::Rows> dst_rows(count);
  bool all_disjoint = true;
  for (size_t i = 0; i < count; ++i) {
    if (!direct_matmul_applies(first[i], ctx, dst_rows[i])) return 0;
    for (size_t j = 0; j < i; ++j) {
      if (dst_rows[i].disjoint_from(dst_rows[j])) continue;
      // Overlapping dsts must be the same block (an accumulation chain): a column split then keeps each element's
      // updates on one thread, in program order. Any other overlap runs one matmul at a time.
      if (!(first[i].tensor("dst") == first[j].tensor("dst"))) return 0;
      all_disjoint = false;
    }
  }
  std::vector<DirectMatmul> plans;
  plans.reserve(count);
  for (size_t i = 0; i < count; ++i) plans.push_back(plan_direct_matmul(first[i], ctx));
  struct Unit {
    uint32_t matmul, chunk, chunks;
  };
  std::vector<Unit> units;
  for (uint32_t i = 0; i < count; ++i) {
    const unsigned chunks = column_chunks(plans[i]);
    for (uint32_t c = 0; c < chunks; ++c) units.push_back({i, c, chunks});
  }
  const unsigned threads = ctx.workers->size();
  ctx.workers->run([&](unsigned part) {
    if (all_disjoint) {
      // Contiguous units per thread: a thread keeps one matmul's operands in cache.
      for (size_t u = units.size() * part / threads; u < units.size() * (part + 1) / threads; ++u) {
        multiply_chunk(plans[units[u].matmul], units[u].chunk, units[u].chunks);
      }
    } else {
      // An accumulation chain's matmuls have one dst and so the same chunks: chunk c of all of them is this
      // thread's when c % threads == part, taken in program order.
      for (const Unit& unit : units) {
        if (unit.chunk % threads == part) multiply_chunk(plans[unit.matmul], unit.chunk, unit.chunks);
      }
    }
  });
  return count;
}

// Each value is dequantized by its group's scale. Within a group the 32 products are exact in double and summed
// there; group sums are scaled and added in double and the total is rounded once to fp32 (the array's adder order
// is not documented; any order is within fp32 rounding of this).
void exec_nc_matmul_mx(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& stationary_ap = inst.tensor("stationary");
  const AccessPattern& moving_ap = inst.tensor("moving");
  for (const AccessPattern* ap : {&stationary_ap, &moving_ap}) {
    if (values_per_element(ap->dtype) != 4) {
      throw IsaError(std::string(ap == &stationary_ap ? "stationary" : "moving") + " must be an MX x4 dtype, not " +
                     std::string(dtype_name(ap->dtype)));
    }
  }
  uint32_t partitions = stationary_ap.partitions();
  if (moving_ap.partitions() != partitions || partitions % kMxGroupPartitions != 0) {
    throw IsaError("stationary and moving need the same partition count, a multiple of 8 (got " +
                   std::to_string(partitions) + " and " + std::to_string(moving_ap.partitions()) + ")");
  }
  uint64_t m = stationary_ap.free_elements();
  uint64_t n = moving_ap.free_elements();
  if (dst.partitions() != m || dst.free_elements() != n) {
    throw IsaError("dst is [" + std::to_string(dst.partitions()) + ", " + std::to_string(dst.free_elements()) +
                   "] but stationary.T @ moving is [" + std::to_string(m) + ", " + std::to_string(n) + "]");
  }
  uint32_t groups = partitions / kMxGroupPartitions;
  Tile stationary = ctx.state.read(stationary_ap);  // [P, 4M]
  Tile moving = ctx.state.read(moving_ap);          // [P, 4N]
  auto stationary_scale = mx_scales(ctx.state, inst.tensor("stationary_scale"), groups, m, "stationary_scale");
  auto moving_scale = mx_scales(ctx.state, inst.tensor("moving_scale"), groups, n, "moving_scale");

  RowMajorD sum = RowMajorD::Zero(m, n);
  for (uint32_t g = 0; g < groups; ++g) {
    RowMajorD dot = mx_group(stationary, g, m).transpose() * mx_group(moving, g, n);
    for (uint64_t i = 0; i < m; ++i) {
      double si = stationary_scale[g][i];
      for (uint64_t j = 0; j < n; ++j) sum(i, j) += dot(i, j) * (si * moving_scale[g][j]);
    }
  }
  Tile result(static_cast<uint32_t>(m), n);
  Eigen::Map<RowMajor>(result.values.data(), m, n) = sum.cast<float>();
  write_matmul_result(ctx, dst, result, matmul_accumulates(inst, ctx, dst));
}

void exec_nc_transpose(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& data_ap = inst.tensor("data");
  Tile data = ctx.read(data_ap);
  if (dst.partitions() != data.free || dst.free_elements() != data.partitions) {
    throw IsaError("dst must be [" + std::to_string(data.free) + ", " + std::to_string(data.partitions) +
                   "] to hold data.T");
  }
  ctx.write(dst, transposed(data));
}

// ISA quantize_mx (Vector engine, NeuronCore-v4; here beside nc_matmul_mx, whose scale layout it writes). For each
// group g (partitions 8g .. 8g + 7 of src) and dst column c (src columns 4c .. 4c + 3): amax = max |v| over the 32
// values, X = 2^(floor(log2 amax) - (Emax - 1)) (ISA: twice OCP's scale, so the largest value lands in
// [2^(Emax-1), 2^Emax) and never saturates), dst = v / X rounded to nearest even into the fp8 dtype, and X's E8M0 code
// (clamped to 0 .. 254, 2^-127 for an all-zero group) at scale row mx_scale_row(g), column c; the other scale rows keep
// their bytes. A group holding Inf or NaN gets the NaN code 0xFF and NaN values (assumed: the ISA does not say).
void exec_quantize_mx(const Instruction& inst, ExecContext& ctx) {
  const AccessPattern& dst = inst.tensor("dst");
  const AccessPattern& src = inst.tensor("src");
  const AccessPattern& scale_ap = inst.tensor("dst_scale");
  if (src.dtype != DType::bf16 && src.dtype != DType::fp16) {
    throw IsaError("src must be bf16 or fp16, not " + std::string(dtype_name(src.dtype)));
  }
  if (dst.dtype != DType::mxfp8_e4m3 && dst.dtype != DType::mxfp8_e5m2) {
    throw IsaError("dst must be mxfp8_e4m3 or mxfp8_e5m2 (float8_e4m3fn_x4 / float8_e5m2_x4), not " +
                   std::string(dtype_name(dst.dtype)));
  }
  if (scale_ap.dtype != DType::fp8_e8m0 && scale_ap.dtype != DType::uint8) {
    throw IsaError("dst_scale must be fp8_e8m0 or uint8, not " + std::string(dtype_name(scale_ap.dtype)));
  }
  const uint32_t partitions = src.partitions();
  const uint64_t columns = dst.free_elements();
  if (partitions % kMxQuadrant != 0 || dst.partitions() != partitions || src.free_elements() != 4 * columns) {
    throw IsaError("src must be [32k, 4F] and dst [32k, F], got src [" + std::to_string(partitions) + ", " +
                   std::to_string(src.free_elements()) + "] and dst [" + std::to_string(dst.partitions()) + ", " +
                   std::to_string(columns) + "]");
  }
  const uint32_t groups = partitions / kMxGroupPartitions;
  const uint32_t rows_needed = mx_scale_row(groups - 1) + 1;
  AccessPattern codes_ap = scale_ap;
  codes_ap.dtype = DType::uint8;
  Tile codes = ctx.state.read(codes_ap);
  if (codes.partitions < rows_needed || codes.free != columns) {
    throw IsaError("dst_scale is [" + std::to_string(codes.partitions) + ", " + std::to_string(codes.free) +
                   "] but the data needs at least [" + std::to_string(rows_needed) + ", " + std::to_string(columns) + "]");
  }
  const int e_max = dst.dtype == DType::mxfp8_e4m3 ? 8 : 15;  // ISA quantize_mx: Emax of float8_e4m3fn / float8_e5m2
  constexpr int kE8m0Bias = 127, kE8m0MaxCode = 254, kE8m0Nan = 0xFF;
  Tile x = ctx.read(src);  // [P, 4F]: exact fp32 values of bf16/fp16
  Tile out(partitions, 4 * columns);
  for (uint32_t g = 0; g < groups; ++g) {
    for (uint64_t c = 0; c < columns; ++c) {
      float amax = 0.0f;
      bool special = false;
      for (uint32_t p = g * kMxGroupPartitions; p < (g + 1) * kMxGroupPartitions; ++p) {
        for (uint32_t j = 0; j < 4; ++j) {
          float v = x.at(p, 4 * c + j);
          if (!std::isfinite(v)) special = true;
          amax = std::max(amax, std::fabs(v));
        }
      }
      int code = 0;  // 2^-127 for an all-zero group
      if (special) {
        code = kE8m0Nan;
      } else if (amax > 0) {
        int exponent = 0;
        std::frexp(double(amax), &exponent);  // amax = m * 2^exponent, m in [0.5, 1): floor(log2 amax) = exponent - 1
        code = std::clamp(exponent - 1 - (e_max - 1) + kE8m0Bias, 0, kE8m0MaxCode);
      }
      codes.at(mx_scale_row(g), c) = float(code);
      const double scale = code == kE8m0Nan ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, code - kE8m0Bias);
      for (uint32_t p = g * kMxGroupPartitions; p < (g + 1) * kMxGroupPartitions; ++p) {
        for (uint32_t j = 0; j < 4; ++j) out.at(p, 4 * c + j) = float(double(x.at(p, 4 * c + j)) / scale);
      }
    }
  }
  ctx.state.write(dst, out);  // packs each value into the fp8 dtype, round to nearest even
  ctx.state.write(codes_ap, codes);
  ctx.state.set_psum_accumulating(dst, false);
}

}  // namespace trnsim::isa
