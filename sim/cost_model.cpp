// The one cost model (see cost_model.h). Every formula below is the published per-instruction
// cost (ISA-COST, ../shared/reference/trainium.md §5.2) or the engine rules of §5.1, §6, §7 and
// §12, in cycles of the executing engine's clock; the v3/v4 performance modes are applied as
// §1.2/§2.2 describe. Every number comes from the config except the constants of the published
// formulas themselves, which are named below with their source tag.
#include "sim/cost_model.h"

#include "isa/core_state.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "isa/alu.h"
#include "isa/core_state.h"

namespace trnsim::sim {

namespace {

using isa::AccessPattern;
using isa::AluOp;
using isa::Instruction;
using isa::MemorySpace;
using isa::Opcode;
using isa::Program;

// Factors inside the published ISA-COST formulas (§5.2). They are part of the formula, not of the
// hardware description: a generation that changes them changes the formula.
constexpr double kTwoInputFactor = 2;       // ISA-COST: two-input Vector ops (tensor_tensor, scan, ...) 2N
constexpr double kHalfRateFactor = 0.5;     // ISA-COST: bf16 tensor_reduce add/max, memset 0 (bf16/fp16) N/2
constexpr double kReciprocalFactor = 8;     // ISA-COST: reciprocal max(MIN_II, 8N)
constexpr double kBnAggrNumerator = 13;     // ISA-COST: bn_aggr max(MIN_II, 13 * (N / 3))
constexpr double kBnAggrDenominator = 3;
constexpr uint32_t kDoubleRowContraction = 2;  // A-V3: FP8 double_row contracts 2 x 128 rows (K = 256)
// A-V4: the NC-v4 Vector engine's exponential runs at 4x the throughput of the Scalar engine's activation(exp).
constexpr double kExponentialSpeedup = 4;
// A-V4: the NC-v4 Vector engine's XORWOW PRNG produces 4 x 32-bit values per lane per cycle (rand2, rng).
constexpr double kXorwowValuesPerCycle = 4;

bool is_16bit_float(DType d) { return d == DType::bf16 || d == DType::fp16; }

AluOp alu(const Instruction& inst, const char* operand) {
  return static_cast<AluOp>(static_cast<int>(inst.scalar(operand)));
}

// A tensor operand that was given (an in|f32 operand given as an immediate does not count).
const AccessPattern* given_tensor(const Instruction& inst, const isa::OperandSpec& operand) {
  if (!isa::is_tensor_kind(operand.kind) || !inst.has(operand.name)) return nullptr;
  const AccessPattern& ap = inst.tensors[operand.tensor_slot];
  return ap.present() ? &ap : nullptr;
}

// N of ISA-COST: elements per partition of the largest operand.
uint64_t elements_per_partition(const Instruction& inst) {
  uint64_t n = 0;
  for (const isa::OperandSpec& operand : inst.spec().operands) {
    if (const AccessPattern* ap = given_tensor(inst, operand)) n = std::max(n, ap->free_elements());
  }
  return n;
}

MemorySpace space(const Program& program, const AccessPattern& ap) { return program.allocation(ap).space; }

// The tensors an instruction reads (inputs, and in|f32 operands given as tensors).
std::vector<const AccessPattern*> input_tensors(const Instruction& inst) {
  std::vector<const AccessPattern*> inputs;
  for (const isa::OperandSpec& operand : inst.spec().operands) {
    if (operand.kind != isa::OperandKind::tensor_in && operand.kind != isa::OperandKind::tensor_or_f32) continue;
    if (const AccessPattern* ap = given_tensor(inst, operand)) inputs.push_back(ap);
  }
  return inputs;
}

// "Contiguous innermost free dim" / "stride 1" of the perf-mode and tensor_tensor rules (A-V3,
// ISA-COST): the innermost dimension that walks more than one element has stride 1.
bool inner_stride_one(const AccessPattern& ap) {
  for (int i = ap.num_free_dims - 1; i >= 0; --i) {
    if (ap.free[i].size > 1) return ap.free[i].stride == 1;
  }
  return true;
}

// How many elements of these dtypes one lane of the engine streams per cycle: the engine's published datapath width
// (elements_per_cycle_by_dtype, all lanes, best mode; A-V3: 512 bf16/fp16 and 256 other dtypes on the NC-v3 Vector
// engine) over its lanes, for the slowest dtype. Dtypes the engine does not list do not limit it here (legality
// refuses them, but for quantize_mx's packed outputs, which are not streamed element by element).
double lane_rate(const ComputeEngineConfig& engine, std::initializer_list<DType> dtypes) {
  double rate = std::numeric_limits<double>::infinity();
  for (DType dtype : dtypes) {
    auto it = engine.elements_per_cycle_by_dtype.find(dtype);
    if (it != engine.elements_per_cycle_by_dtype.end()) rate = std::min(rate, double(it->second) / engine.lanes);
  }
  return rate;
}

// The same for the tensors an instruction streams: its tensor operands of more than one element per partition (a
// per-partition scalar operand or a [P, 1] reduction result is read or written once per lane, not streamed).
double streaming_lane_rate(const Instruction& inst, const ComputeEngineConfig& engine) {
  double rate = std::numeric_limits<double>::infinity();
  for (const isa::OperandSpec& operand : inst.spec().operands) {
    const AccessPattern* ap = given_tensor(inst, operand);
    if (ap && ap->free_elements() > 1) rate = std::min(rate, lane_rate(engine, {ap->dtype}));
  }
  return rate;
}

// A lane streaming fewer than one element per cycle (a width below the lanes) takes 1 / rate cycles per element:
// the factor on the per-element part of a cost. 1 at every shipped width (none is below the lanes).
double slowdown(double lane_rate) { return lane_rate < 1 ? 1 / lane_rate : 1; }

// The largest mode the engine lists that does not exceed `eligible` (1 when none is listed) nor the lane rate of the
// dtypes streamed: a mode moves `mode` elements per lane per cycle, which the datapath must carry (A-V3: the 4x mode
// is the 512-wide bf16/fp16 path of 128 lanes; at the shipped widths this never lowers a mode the rules give).
uint32_t select_mode(const std::vector<uint32_t>& modes, uint32_t eligible, double lane_rate) {
  uint32_t mode = 1;
  for (uint32_t m : modes) {
    if (m <= eligible && m <= lane_rate) mode = std::max(mode, m);
  }
  return mode;
}

// A-V3 VectorE performance mode of tensor_copy/tensor_scalar: 4x with input and output both in
// SBUF, both bf16/fp16, contiguous innermost; 2x (bf16/fp16) when non-contiguous or a side is in PSUM.
uint32_t vector_copy_mode(const Program& program, const ComputeEngineConfig& engine, const AccessPattern& in,
                          const AccessPattern& out, double lane_rate) {
  if (!is_16bit_float(in.dtype) || !is_16bit_float(out.dtype)) return 1;
  bool both_sbuf = space(program, in) == MemorySpace::sbuf && space(program, out) == MemorySpace::sbuf;
  bool contiguous = inner_stride_one(in) && inner_stride_one(out);
  return select_mode(engine.performance_modes, both_sbuf && contiguous ? 4 : 2, lane_rate);
}

// The copy-like instructions' input operand (the one the perf-mode rules look at).
const AccessPattern& copy_input(const Instruction& inst) {
  return inst.opcode == Opcode::tensor_copy ? inst.tensor("src") : inst.tensor("data");
}

// ---- Tensor engine (§6) ----

// One engine_cost overload per registered engine (config/engine_units.def), on its config struct: compute_cost
// dispatches through with_engine_config, so an engine registered without its cost does not compile.
void engine_cost(const TensorEngineConfig& pe, const Instruction& inst, const Program&, const HardwareConfig&,
                 ComputeCost& cost) {
  const double min_ii = pe.min_initiation_interval_cycles;
  auto rate_of = [&](DType d) {
    auto it = pe.rate_factor_by_dtype.find(d);
    return it == pe.rate_factor_by_dtype.end() ? 1.0 : it->second;
  };
  cost.latency_cycles = pe.fixed_overhead_cycles;  // pipeline fill to the first PSUM write (§6, §13.9)

  if (inst.opcode == Opcode::nc_transpose) {
    // ISA-COST: max(P, min(MIN_II, F)) back-to-back; fp32 at the fp32 matmul rate (4x) unless the
    // v3+ transpose mode speeds it up (A-V3: 2x).
    // The data is the stationary of that matmul (free size F, against an identity moving of P columns), so its
    // LoadStationary bounds it as a matmul's does (see below): max(P, min(MIN_II, F), F / LS speed-up).
    const AccessPattern& data = inst.tensor("data");
    double time_rate = rate_of(data.dtype);
    if (data.dtype == DType::fp32) time_rate *= pe.fp32_transpose_speedup;
    cost.elements = data.free_elements();
    const double f = double(data.free_elements());
    cost.occupancy_cycles =
        std::max({double(data.partitions()), std::min(min_ii, f), f / pe.load_stationary_speedup}) / time_rate;
    cost.flops = 0;
    cost.flops_dtype = data.dtype;
    return;
  }

  const AccessPattern& stationary = inst.tensor("stationary");
  const AccessPattern& moving = inst.tensor("moving");
  const bool mx = inst.opcode == Opcode::nc_matmul_mx;
  const bool double_row = !mx && inst.enum_is("perf_mode", "double_row");
  const bool transpose = !mx && inst.has("is_transpose") && inst.scalar("is_transpose") != 0;

  // Contraction K and the free sizes M (stationary) and N (moving) of the instruction.
  uint64_t k = stationary.partitions();
  uint64_t m = stationary.free_elements();
  uint64_t n = moving.free_elements();
  if (double_row) {  // operands are [128, 2, F]: the 2 is the second half of K (A-V3)
    k *= kDoubleRowContraction;
    m /= kDoubleRowContraction;
    n /= kDoubleRowContraction;
  } else if (mx) {  // each element packs 4 values along K (A-V4: K = 512 per instruction)
    k *= isa::values_per_element(stationary.dtype);
  }

  // The dtype that paces the array: the slower input (both inputs are of one class, see legality).
  DType input_dtype = rate_of(moving.dtype) < rate_of(stationary.dtype) ? moving.dtype : stationary.dtype;
  // Pass time against a bf16 K = 128 pass: 1 / the dtype's rate (fp32: 0.25 -> 4x). A double_row or MX pass
  // contracts kDoubleRowContraction / values_per_element times K = 128 and reaches its rate factor
  // (double_row_rate_factor, the MX dtype's rate_factor_by_dtype) of the bf16 throughput, so it takes
  // contraction / factor bf16 passes: A-V3/A-V4 publish the same LS/MM time as bf16 K = 128 (factor 2 for
  // double_row, 4 for MX), their higher peak coming from K, not from a faster pass.
  double time_rate = rate_of(input_dtype);
  if (double_row) time_rate = pe.double_row_rate_factor / kDoubleRowContraction;
  if (mx) time_rate = rate_of(input_dtype) / isa::values_per_element(input_dtype);
  // The v3+ PE transpose mode (is_transpose) runs fp32 faster (A-V3); the speed-up is 1 before v3.
  if (transpose && input_dtype == DType::fp32) time_rate *= pe.fp32_transpose_speedup;

  // ISA-COST / §6: II = max(min(MM_INIT_LATENCY, N_stationary), N_moving), with the next LoadStationary in the
  // background of this MultiplyMoving: throughput is bound by max(LS, MM) (§6 "Background LoadStationary"), an LS
  // being load_stationary_speedup times faster than an MM of the same free size (§6 "Fast LoadStationary": N_stat /
  // speed-up cycles). II = max(min(MIN_II, N_stat), N_stat / speed-up, N_mov): the LS term binds only when the
  // speed-up is below N_stat / MIN_II, so never at the published 4x with N_stat <= 128 (ISA-COST unchanged); at 1x
  // a [128, 128] stationary against a short moving takes 128 cycles instead of 64. Every nc_matmul loads its
  // stationary (§6 Profiler view: one LS plus one MM per nc_matmul).
  cost.elements = n;
  cost.occupancy_cycles =
      std::max({std::min(min_ii, double(m)), double(m) / pe.load_stationary_speedup, double(n)}) / time_rate;
  // PROF: MFU counts model matmuls only; transposes are not model FLOPs. A MAC is 2 FLOPs.
  cost.flops = transpose ? 0 : 2 * k * m * n;
  cost.flops_dtype = input_dtype;
}

// ---- Vector engine (§5.2 ISA-COST, §1.2 perf modes) ----

void engine_cost(const VectorEngineConfig& dve, const Instruction& inst, const Program& program,
                 const HardwareConfig& config, ComputeCost& cost) {
  const double min_ii = dve.min_initiation_interval_cycles;
  // quantize_mx streams its bf16/fp16 src; its packed outputs are not elements of the datapath (A-V4: 4 input
  // elements per partition per cycle).
  const double rate = inst.opcode == Opcode::quantize_mx ? lane_rate(dve, {inst.tensor("src").dtype})
                                                         : streaming_lane_rate(inst, dve);
  // N of the formulas, in lane cycles at one element per cycle: a width below the lanes stretches every formula.
  const double n = double(cost.elements) * slowdown(rate);
  // A-V2/PERF: the ~100-cycle static overhead is paid by a dependent (RAW) instruction, so it is
  // the delay before results are visible, not part of the initiation interval.
  cost.latency_cycles = dve.fixed_overhead_cycles;

  double cycles = std::max(min_ii, n);  // one-input instruction, and the default for the rest
  switch (inst.opcode) {
    case Opcode::tensor_tensor: {
      const AccessPattern& a = inst.tensor("data1");
      const AccessPattern& b = inst.tensor("data2");
      const AccessPattern& dst = inst.tensor("dst");
      MemorySpace sa = space(program, a), sb = space(program, b);
      bool straddle = (sa == MemorySpace::psum && sb == MemorySpace::sbuf) ||
                      (sa == MemorySpace::sbuf && sb == MemorySpace::psum);
      AluOp op = alu(inst, "op");
      bool fast_sbuf = sa == MemorySpace::sbuf && sb == MemorySpace::sbuf && is_16bit_float(a.dtype) &&
                       is_16bit_float(b.dtype) && is_16bit_float(dst.dtype) &&
                       (op == AluOp::add || op == AluOp::multiply || op == AluOp::subtract) &&
                       inner_stride_one(a) && inner_stride_one(b) && inner_stride_one(dst);
      cycles = std::max(min_ii, straddle || fast_sbuf ? n : kTwoInputFactor * n);
      break;
    }
    case Opcode::tensor_scalar:
    case Opcode::tensor_copy:
      cost.performance_mode = vector_copy_mode(program, dve, copy_input(inst), inst.tensor("dst"), rate);
      // The mode divides the per-element time; MIN_II ("shortest interval between two
      // instructions") still bounds the result.
      cycles = std::max(min_ii, n / cost.performance_mode);
      break;
    case Opcode::scalar_tensor_tensor: {
      bool fast = inst.tensor("data").dtype == DType::bf16 && inst.tensor("operand1").dtype == DType::bf16 &&
                  alu(inst, "op0") == AluOp::subtract && alu(inst, "op1") == AluOp::multiply &&
                  cost.elements % 2 == 0;
      cycles = fast ? n : kTwoInputFactor * n;  // ISA-COST: no MIN_II in this formula
      break;
    }
    case Opcode::tensor_reduce: {
      AluOp op = alu(inst, "op");
      bool fast = inst.tensor("data").dtype == DType::bf16 && inst.tensor("dst").dtype == DType::bf16 &&
                  (op == AluOp::add || op == AluOp::maximum);
      cycles = fast ? kHalfRateFactor * n : n;  // ISA-COST: no MIN_II in this formula
      break;
    }
    case Opcode::tensor_tensor_scan: cycles = std::max(min_ii, kTwoInputFactor * n); break;
    case Opcode::nc_stream_shuffle: break;  // ISA-COST nc_stream_shuffle: max(MIN_II, N), the one-input default
    case Opcode::quantize_mx:
      // A-V4: 4 elements per partition per cycle, the Vector engine's 4x mode (config performance_modes); N = src's
      // elements per partition (the largest operand).
      cost.performance_mode = select_mode(dve.performance_modes, 4, rate);
      cycles = std::max(min_ii, n / cost.performance_mode);
      break;
    // ISA-COST: tensor_scalar_reduce max(MIN_II, N) + MIN_II (the reduction's "small additional cost").
    case Opcode::tensor_scalar_reduce: cycles = std::max(min_ii, n) + min_ii; break;
    // tensor_scalar_cumulative: no published cost (§5.2 "n/a"). Assumed: A-V2's one-input rule, max(MIN_II, N),
    // as tensor_scalar (the scan's carry is the accumulator register, not a second input stream).
    case Opcode::tensor_scalar_cumulative: cycles = std::max(min_ii, n); break;
    case Opcode::exponential: {
      // A-V4: 4x the throughput of ScalarE activation(exp), which costs max(MIN_II, N) ScalarE cycles (ISA-COST):
      // N elements take N / 4 ScalarE cycles, converted to Vector cycles by the two clocks of the config.
      const double scalar_cycles = n / kExponentialSpeedup;
      cycles = std::max(min_ii, scalar_cycles * dve.clock_ghz / config.core.scalar.clock_ghz);
      // Reading the accumulators out into reduce_res: assumed to cost MIN_II, as ISA-COST charges
      // tensor_scalar_reduce for its reduction (A-V4 calls the accumulation itself fused).
      if (inst.has("reduce_res") && inst.tensor("reduce_res").present()) cycles += min_ii;
      break;
    }
    // rand2 (NC-v4 only) and rng on the NC-v4 Vector engine: A-V4's 4 values per lane per cycle. rng before
    // NC-v4 (an LFSR, A-V4): no published rate; assumed one value per lane per cycle, max(MIN_II, N) (A-V2
    // one-output rule).
    case Opcode::rand2: cycles = std::max(min_ii, n / kXorwowValuesPerCycle); break;
    case Opcode::rng:
      cycles = std::max(min_ii, config.generation >= Generation::trn3 ? n / kXorwowValuesPerCycle : n);
      break;
    case Opcode::bn_aggr: cycles = std::max(min_ii, kBnAggrNumerator * (n / kBnAggrDenominator)); break;
    case Opcode::reciprocal: cycles = std::max(min_ii, kReciprocalFactor * n); break;
    case Opcode::memset: {
      bool fast = inst.scalar("value") == 0 && is_16bit_float(inst.tensor("dst").dtype);
      cycles = std::max(min_ii, fast ? kHalfRateFactor * n : n);
      break;
    }
    case Opcode::tensor_copy_predicated:
    case Opcode::select_reduce: {
      // ISA-COST: one pass when the inputs straddle SBUF and PSUM (one read port each), two when
      // they all sit in one memory.
      bool sbuf = false, psum = false;
      for (const AccessPattern* ap : input_tensors(inst)) {
        MemorySpace s = space(program, *ap);
        sbuf |= s == MemorySpace::sbuf;
        psum |= s == MemorySpace::psum;
      }
      cycles = std::max(min_ii, sbuf && psum ? n : kTwoInputFactor * n);
      break;
    }
    // bn_stats, range_select, max8, nc_find_index8, nc_transpose, dropout: max(MIN_II, N) (ISA-COST; max8
    // and nc_find_index8 publish N, taken as at least MIN_II like every Vector instruction). nc_match_replace8:
    // ISA-COST prints min(MIN_II, N), read as max(MIN_II, N) (trainium.md §13.12: a min would make long rows free).
    // set_rng_seed, rand_set_state, rand_get_state: no published cost; assumed max(MIN_II, N) (N = 1 or the state
    // words per lane).
    default: break;
  }
  cost.occupancy_cycles = cycles;
}

// ---- Scalar engine ----

void engine_cost(const ScalarEngineConfig& act, const Instruction& inst, const Program&, const HardwareConfig&,
                 ComputeCost& cost) {
  const double min_ii = act.min_initiation_interval_cycles;
  const double rate = streaming_lane_rate(inst, act);
  const double n = double(cost.elements) * slowdown(rate);  // as on the Vector engine
  // V9: a dependent chain issues every 264 cycles = MIN_II + this overhead (see the configs).
  cost.latency_cycles = act.fixed_overhead_cycles;

  double cycles = std::max(min_ii, n);
  switch (inst.opcode) {
    case Opcode::activation:
      // A-V2: reading the per-lane reduce registers is a separate ActReadAccumulator.
      if (inst.has("reduce_res") && inst.is_tensor("reduce_res")) cycles += act.accumulator_readout_cycles;
      break;
    case Opcode::activation_reduce: cycles += act.accumulator_readout_cycles; break;
    case Opcode::activate2:
      // No published cost (trainium.md §5.2 "n/a"): assumed as activation, max(MIN_II, N) with the tensor-scalar
      // stage free (ISA-COST activation: "same execution cost regardless of scale/bias"), plus the ActReadAccumulator
      // (A-V2) when reduce_res is read out (ISA activate2: "an additional instruction is emitted").
      if (inst.has("reduce_res") && inst.is_tensor("reduce_res")) cycles += act.accumulator_readout_cycles;
      break;
    case Opcode::tensor_scalar:
    case Opcode::tensor_copy: {
      // A-V4: ScalarE runs tensor_scalar/tensor_copy up to 2x for bf16/fp16 (listed modes only).
      const AccessPattern& in = copy_input(inst);
      const AccessPattern& out = inst.tensor("dst");
      cost.performance_mode =
          is_16bit_float(in.dtype) && is_16bit_float(out.dtype) ? select_mode(act.performance_modes, 2, rate) : 1;
      cycles = std::max(min_ii, n / cost.performance_mode);
      break;
    }
    default: break;
  }
  cost.occupancy_cycles = cycles;
}

// ---- GpSimd engine ----

void engine_cost(const GpSimdEngineConfig& pool, const Instruction& inst, const Program&, const HardwareConfig&,
                 ComputeCost& cost) {
  // A width below the lanes stretches the per-element part of every formula below (as on the Vector engine); the
  // processors' start-up does not stream.
  const double slow = slowdown(streaming_lane_rate(inst, pool));
  const double n = double(cost.elements) * slow;
  // ISA-COST GPSIMD_START (~150 cycles) is the start-up of the processors' program: the engine is
  // busy for it, so it is occupancy; results are visible when the instruction ends (latency 0).
  const double start = pool.fixed_overhead_cycles;
  // iota, affine_select, memset, tensor_copy, tensor_tensor, tensor_scalar; rng, rand_set_state, rand_get_state and
  // nonzero_with_count and nc_n_gather (N = indices per partition) have no published cost and are assumed to take the
  // same GPSIMD_START + N.
  double cycles = start + n;
  if (inst.opcode == Opcode::topk) {
    // ISA topk (HEAD docs, the one cost they keep; trainium.md §5.2): 4 * n + K GpSimd cycles, the 16-partition
    // groups in parallel; taken as the whole cost (no GPSIMD_START on top: the published estimate is complete).
    constexpr double kTopkCyclesPerElement = 4;  // ISA topk "4*n + K"
    cycles = slow * (kTopkCyclesPerElement * inst.scalar("n") + double(inst.tensor("val_dst").free_elements()));
  } else if (inst.opcode == Opcode::nc_n_gather) {
    cycles = start + slow * double(inst.tensor("indices").free_elements());  // assumed, as noted above
  } else if (inst.opcode == Opcode::sequence_bounds) {
    // No published cost: assumed GPSIMD_START + n, n = segment ids (one pass over the partition; the two passes of
    // the NKI reference, starts and ends, taken as one).
    cycles = start + slow * double(inst.tensor("segment_ids").free_elements());
  } else if (inst.opcode == Opcode::local_gather) {
    // ISA-COST local_gather (trainium.md §5.2): GPSIMD_START + (num_valid_indices * e) / C GpSimd cycles, with
    // C = ((28 + t * e) / (t * e)) / min(4 / dtype_size, e), e = num_elem_per_idx, t = 4; the 8 cores in parallel.
    constexpr double kGatherT = 4;        // ISA-COST local_gather "t is a constant 4"
    constexpr double kGatherFixed = 28;   // ISA-COST local_gather "28 + t * num_elem_per_idx"
    constexpr double kGatherWordBytes = 4;  // ISA-COST local_gather "4 / dtype_size"
    const double e = inst.scalar("num_elem_per_idx");
    constexpr double kIndexPartitions = 16;  // ISA local_gather: the indices of a core's 16 partitions
    const double valid = inst.has("num_valid_indices") ? inst.scalar("num_valid_indices")
                                                       : kIndexPartitions * double(inst.tensor("index").free_elements());
    const double dtype_size = double(dtype_size_bytes(inst.tensor("src_buffer").dtype));
    const double c = ((kGatherFixed + kGatherT * e) / (kGatherT * e)) / std::min(kGatherWordBytes / dtype_size, e);
    cycles = start + slow * valid * e / c;
  } else if (inst.opcode == Opcode::tensor_partition_reduce) {
    // Assumed (no published cost): each processor is wired to lanes/processors partitions and
    // walks its partitions one after another, so N elements take N * ceil(P / partitions per processor).
    const AccessPattern& data = inst.tensor("data");
    uint32_t per_processor = std::max(1u, pool.lanes / std::max(1u, pool.processors));
    uint32_t rows = (data.partitions() + per_processor - 1) / per_processor;
    cycles = start + slow * double(data.free_elements()) * rows;
  }
  cost.occupancy_cycles = cycles;
  cost.latency_cycles = 0;
}

// ---- synchronisation ----

// sem_signal / sem_wait / barrier issue cost. On Sync: the Sync engine's fixed cost. On another
// engine's sequencer: that engine's MIN_II (the shortest instruction it can issue). The time spent
// waiting for a semaphore is the timing model's, not part of this cost.
// The shortest instruction an engine's sequencer issues, one overload per engine config struct.
double shortest_issue_cycles(const TensorEngineConfig& engine) { return engine.min_initiation_interval_cycles; }
double shortest_issue_cycles(const ComputeEngineConfig& engine) { return engine.min_initiation_interval_cycles; }
double shortest_issue_cycles(const SyncEngineConfig& engine) { return engine.fixed_overhead_cycles; }

// Only control instructions run on Sync (sync_cost); anything else costs the engine's fixed cost.
void engine_cost(const SyncEngineConfig& sp, const Instruction&, const Program&, const HardwareConfig&,
                 ComputeCost& cost) {
  cost.occupancy_cycles = sp.fixed_overhead_cycles;
}

void sync_cost(const Instruction& inst, const HardwareConfig& config, ComputeCost& cost) {
  if (inst.engine == Engine::dma) {
    throw std::logic_error("internal: " + inst.spec().name + " on the DMA engines has no sync cost");
  }
  cost.occupancy_cycles =
      with_engine_config(config.core, inst.engine, [](const auto& engine) { return shortest_issue_cycles(engine); });
  cost.latency_cycles = 0;
}

double engine_clock_ghz(Engine engine, const CoreConfig& core) {
  if (engine == Engine::dma) throw std::logic_error("a DMA instruction has no compute cost; use dma_cost");
  return with_engine_config(core, engine, [](const auto& config) { return config.clock_ghz; });
}

// ---- DMA (§7) ----

// Length in elements of the contiguous runs an access pattern is made of (all runs are equal):
// the innermost dims merged while each dim's stride equals the run so far. SBUF/PSUM rows are
// separate partitions and never merge; an HBM pattern's outer (partition) dim may.
uint64_t run_length(const AccessPattern& ap, MemorySpace memory) {
  uint64_t run = 1;
  for (int i = ap.num_free_dims - 1; i >= 0; --i) {
    if (ap.free[i].size == 1) continue;
    if (ap.free[i].stride != int64_t(run)) return run;
    run *= ap.free[i].size;
  }
  if (memory == MemorySpace::hbm && ap.partition.size > 1 && ap.partition.stride == int64_t(run)) {
    run *= ap.partition.size;
  }
  return run;
}

struct PartitionRange {
  uint32_t begin = 0, end = 0;  // absolute SBUF partitions [begin, end)
};

PartitionRange absolute_partitions(const Program& program, const AccessPattern& ap) {
  uint32_t begin = program.allocation(ap).base_partition + ap.start_partition;
  return {begin, begin + std::max(1u, ap.partitions())};
}

}  // namespace

double DmaCost::data_ns_per_engine() const {
  const double engines_used = std::max<uint32_t>(1, engines);
  const double element_floor_bytes = double(chunks) * min_chunk_bytes / engines_used;
  return std::max(bytes_per_engine(), element_floor_bytes) / bytes_per_ns_per_engine;
}

double DmaCost::engine_ns() const {
  return fixed_latency_ns + std::max(descriptor_ns, data_ns_per_engine());
}

double DmaCost::hbm_channel_efficiency() const {
  uint64_t busiest = 0;
  for (uint32_t c = 0; c < hbm_channels; ++c) busiest = std::max(busiest, hbm_channel_bytes[c]);
  if (busiest == 0) return 1;
  return std::min(1.0, double(bytes) / (double(hbm_channels) * double(busiest)));
}

bool hbm_channel_bytes(const AccessPattern& ap, uint32_t channels, uint32_t granule,
                       std::array<uint64_t, kMaxHbmChannels>& bytes) {
  if (channels == 0 || channels > kMaxHbmChannels || granule == 0) return false;
  const int64_t esize = int64_t(dtype_size_bytes(ap.dtype));
  const int64_t period = int64_t(channels) * granule;
  // The contiguous run and the dims outside it, as run_length() merges them.
  uint64_t run = 1;
  int inner = ap.num_free_dims - 1;
  for (; inner >= 0; --inner) {
    if (ap.free[inner].size == 1) continue;
    if (ap.free[inner].stride != int64_t(run)) break;
    run *= ap.free[inner].size;
  }
  std::vector<isa::ApDim> outer;
  for (int i = inner; i >= 0; --i) {
    if (ap.free[i].size > 1) outer.push_back(ap.free[i]);
  }
  if (ap.partition.size > 1) {
    if (inner < 0 && ap.partition.stride == int64_t(run)) {
      run *= ap.partition.size;
    } else {
      outer.push_back(ap.partition);
    }
  }
  auto residue = [period](int64_t v) { return uint32_t(((v % period) + period) % period); };
  // Where the runs start, modulo one interleave period: (residue, runs starting there).
  std::vector<std::pair<uint32_t, uint64_t>> starts{{residue(ap.offset * esize), 1}};
  constexpr uint64_t kBudget = 1 << 16;  // combinations worth counting per instruction
  for (const isa::ApDim& dim : outer) {
    const uint32_t step = residue(dim.stride * esize);
    const uint32_t cycle = step == 0 ? 1 : uint32_t(period / std::gcd(int64_t(step), period));
    const uint32_t distinct = std::min<uint32_t>(dim.size, cycle);
    if (uint64_t(distinct) * starts.size() > kBudget) return false;
    std::vector<std::pair<uint32_t, uint64_t>> next;
    next.reserve(starts.size() * distinct);
    for (const auto& [r, count] : starts) {
      for (uint32_t i = 0; i < distinct; ++i) {
        const uint64_t repeats = dim.size / cycle + (i < dim.size % cycle ? 1 : 0);
        next.emplace_back(uint32_t((r + uint64_t(i) * step) % period), count * repeats);
      }
    }
    std::sort(next.begin(), next.end());
    starts.clear();
    for (const auto& e : next) {
      if (!starts.empty() && starts.back().first == e.first) {
        starts.back().second += e.second;
      } else {
        starts.push_back(e);
      }
    }
  }
  bytes.fill(0);
  const uint64_t length = run * uint64_t(esize);
  const uint64_t full_periods = length / uint64_t(period), rest = length % uint64_t(period);
  for (const auto& [r, count] : starts) {
    for (uint32_t c = 0; c < channels; ++c) bytes[c] += count * full_periods * granule;
    uint64_t left = rest, at = r;
    while (left > 0) {
      const uint64_t take = std::min<uint64_t>(left, granule - at % granule);
      bytes[(at / granule) % channels] += count * take;
      at = (at + take) % uint64_t(period);
      left -= take;
    }
  }
  return true;
}

bool is_dma(const isa::Instruction& inst) {
  const auto& engines = inst.spec().engines;
  return !engines.empty() && engines.front().engine == Engine::dma;
}

ComputeCost compute_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config) {
  if (is_dma(inst)) throw std::logic_error(inst.spec().name + " is a DMA instruction; use dma_cost");
  ComputeCost cost;
  cost.engine = inst.engine;
  cost.clock_ghz = engine_clock_ghz(inst.engine, config.core);
  cost.elements = elements_per_partition(inst);

  switch (inst.opcode) {
    case Opcode::sem_signal:
    case Opcode::sem_wait:
    case Opcode::barrier:
    // Registers and control flow are sequencer instructions too: the same issue cost (the sequencer's branch and
    // register timings are not published; assumed equal to its other instructions').
    case Opcode::register_move:
    case Opcode::register_add:
    case Opcode::register_sub:
    case Opcode::register_mul:
    case Opcode::register_compare:
    case Opcode::rank_id:
    case Opcode::register_load:
    case Opcode::register_store:
    case Opcode::loop_begin:
    case Opcode::loop_end:
    case Opcode::while_begin:
    case Opcode::while_end: sync_cost(inst, config, cost); return cost;
    case Opcode::all_reduce:
    case Opcode::all_gather:
    case Opcode::reduce_scatter:
    case Opcode::all_to_all:
    case Opcode::collective_permute:
    case Opcode::all_to_all_v:
    case Opcode::all_gather_v:
    case Opcode::sendrecv:
      // The trigger on the engine; the collective's own time comes from the system model at the ranks' meeting.
      sync_cost(inst, config, cost);
      return cost;
    case Opcode::core_barrier:
      // Its issue on the engine, then the remote semaphore update reaching the other core. Assumed: that write
      // crosses the chip like a DMA transfer's fixed part (dma.fixed_latency_ns); the figure is not published.
      sync_cost(inst, config, cost);
      cost.latency_cycles = config.core.dma.fixed_latency_ns * cost.clock_ghz;
      return cost;
    default: break;
  }
  with_engine_config(config.core, inst.engine,
                     [&](const auto& engine) { engine_cost(engine, inst, program, config, cost); });
  return cost;
}

DmaCost dma_cost(const isa::Instruction& inst, const isa::Program& program, const HardwareConfig& config) {
  if (!is_dma(inst)) throw std::logic_error(inst.spec().name + " is not a DMA instruction; use compute_cost");
  const DmaConfig& dma = config.core.dma;
  const AccessPattern& src = inst.tensor("src");
  const AccessPattern& dst = inst.tensor("dst");
  const MemorySpace src_space = space(program, src), dst_space = space(program, dst);

  DmaCost cost;
  cost.bytes = src.elements() * dtype_size_bytes(src.dtype);
  cost.reads_hbm = src_space == MemorySpace::hbm;
  cost.writes_hbm = dst_space == MemorySpace::hbm;

  // Engines (§7): engine e serves SBUF partitions [e * 128/E, (e+1) * 128/E); a transfer uses the
  // engines covering its on-chip side (both sides for SBUF -> SBUF). HBM -> HBM uses them all.
  const uint32_t engine_count = std::max(1u, dma.engines_per_core);
  if (cost.reads_hbm && cost.writes_hbm) {
    cost.first_engine = 0;
    cost.engines = engine_count;
  } else {
    const uint32_t per_engine = std::max(1u, config.core.sbuf.partitions / engine_count);
    PartitionRange range{UINT32_MAX, 0};
    for (const AccessPattern* ap : {&src, &dst}) {
      if (space(program, *ap) == MemorySpace::hbm) continue;
      PartitionRange r = absolute_partitions(program, *ap);
      range.begin = std::min(range.begin, r.begin);
      range.end = std::max(range.end, r.end);
    }
    uint32_t first = range.begin / per_engine, last = (range.end - 1) / per_engine;
    cost.first_engine = std::min(first, engine_count - 1);
    cost.engines = std::min(last, engine_count - 1) - cost.first_engine + 1;
  }

  // Chunks: the pieces contiguous on both sides. With equal-length runs L_src and L_dst over T
  // elements, chunk boundaries are the union of both sides' run boundaries:
  // T/L_src + T/L_dst - T/lcm(L_src, L_dst). A transpose reorders elements, so its sides' runs do
  // not line up; it takes the larger run count. Each chunk takes at least min_chunk_bytes of
  // engine time, so 2-byte strided elements move at a small fraction of the rate.
  // Descriptors: one per run of the less fragmented side (a descriptor walks the other side's
  // strided chunks), and at least one per SBUF partition row (a descriptor does not span
  // partitions). For rows contiguous on both sides (the DMA overview's figure) the two counts agree.
  const uint64_t src_run = run_length(src, src_space), dst_run = run_length(dst, dst_space);
  const uint64_t src_runs = src.elements() / src_run, dst_runs = dst.elements() / dst_run;
  if (inst.opcode == Opcode::dma_copy && src.elements() == dst.elements() && src.elements() > 0) {
    cost.chunks = src_runs + dst_runs - src.elements() / std::lcm(src_run, dst_run);
  } else {
    cost.chunks = std::max(src_runs, dst_runs);
  }
  uint64_t partition_rows = 0;
  for (const AccessPattern* ap : {&src, &dst}) {
    if (space(program, *ap) != MemorySpace::hbm) partition_rows = std::max<uint64_t>(partition_rows, ap->partitions());
  }
  cost.descriptors = std::min(cost.chunks, std::max(std::min(src_runs, dst_runs), partition_rows));
  cost.min_chunk_bytes = std::max<uint32_t>(1, dma.min_chunk_bytes);

  double efficiency = 1;
  if (inst.opcode == Opcode::dma_transpose) {
    efficiency = src_space == MemorySpace::hbm ? dma.transpose_hbm_to_sbuf_efficiency
                                                : dma.transpose_sbuf_to_sbuf_efficiency;
  } else if (inst.enum_is("dst_rmw_op", "add")) {
    efficiency = dma.read_add_write_efficiency;
  }
  if (efficiency <= 0) {
    throw std::invalid_argument(inst.spec().name + ": the DMA engines of " + config.name +
                                " cannot do this transfer (its efficiency is 0 in the config)");
  }
  cost.bytes_per_ns_per_engine = dma.bandwidth_per_engine_gbps * efficiency;  // GB/s = bytes/ns
  cost.start_latency_ns = dma.start_latency_ns;
  cost.fixed_latency_ns = dma.fixed_latency_ns;
  const bool gather_transpose = inst.opcode == Opcode::dma_transpose && inst.has("indices");
  const bool indirect = inst.opcode == Opcode::dma_gather || inst.opcode == Opcode::dma_scatter || gather_transpose;
  if (gather_transpose) {
    // The rows the indices pick (dst's elements, not the whole table) are what move; the transpose's block
    // descriptors are priced by its efficiency above, the gather's one software-DGE descriptor per row below.
    cost.bytes = dst.elements() * dtype_size_bytes(dst.dtype);
    cost.descriptors = inst.tensor("indices").partitions();
    cost.chunks = 0;
  } else if (indirect) {
    // Indirect DMA: the HBM table operand names all V rows but only the SBUF side's rows move (dst
    // of a gather, src of a scatter): one descriptor per row at least (trainium.md §7: indirect DMA
    // needs the software DGE). A scatter's read-add-write was priced above (dma.read_add_write_efficiency).
    const bool gather = inst.opcode == Opcode::dma_gather;
    const AccessPattern& moved = gather ? dst : src;
    const uint64_t rows = moved.partitions();
    cost.bytes = moved.elements() * dtype_size_bytes(moved.dtype);
    cost.descriptors = std::max<uint64_t>(rows, moved.elements() / std::max<uint64_t>(1, gather ? dst_run : src_run));
    cost.chunks = cost.descriptors;
  } else if (inst.opcode == Opcode::dma_transpose) {
    cost.chunks = 0;  // the block transposer, priced by its efficiency (below)
  }
  // Each engine used handles at least one element of the transfer. A DMA transpose is not a list of
  // row elements: the engines write [128 partitions, 16 elements] blocks cooperatively and reach up
  // to 90 % (HBM -> SBUF) / 50 % (SBUF -> SBUF) of copy throughput (A-V3), which the efficiency
  // above prices; it pays one element's processing per engine.
  const double descriptors_per_engine =
      inst.opcode == Opcode::dma_transpose && !gather_transpose ? 1.0
                                                                 : std::max(1.0, double(cost.descriptors) / cost.engines);
  cost.descriptor_ns = descriptors_per_engine * dma.descriptor_processing_ns;
  cost.dge_ns = inst.enum_is("dge_mode", "hwdge") ? dma.hardware_dge_instruction_ns : 0;
  if (indirect || inst.enum_is("dge_mode", "swdge")) {
    // Software DGE (DMA, nki-dge: "consumes GpSimd Engine cycles for descriptor generation"): the
    // GpSimd builds the descriptors in its fixed overhead plus an assumed number of cycles per
    // descriptor (config dma.software_dge_cycles_per_descriptor); the timing model occupies the
    // GpSimd engine for it before the transfer starts.
    cost.gpsimd_ns = (config.core.gpsimd.fixed_overhead_cycles +
                      double(cost.descriptors) * dma.software_dge_cycles_per_descriptor) /
                     config.core.gpsimd.clock_ghz;
  }
  // HBM channels (modular interleave): the HBM side's addresses decide which channels the bytes
  // reach. Indirect rows land wherever their indices point: taken as spread evenly.
  if (config.hbm.interleave == HbmInterleave::modular && !indirect && (cost.reads_hbm || cost.writes_hbm)) {
    const AccessPattern& side = cost.reads_hbm ? src : dst;
    if (hbm_channel_bytes(side, config.hbm.channels_per_stack, config.hbm.interleave_bytes, cost.hbm_channel_bytes)) {
      cost.hbm_channels = config.hbm.channels_per_stack;
    }
  }
  return cost;
}

}  // namespace trnsim::sim
