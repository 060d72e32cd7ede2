#include "isa/legality.h"

#include <algorithm>
#include <stdexcept>
#include <cstdlib>
#include <iterator>
#include <utility>

#include "config/derived_figures.h"
#include "isa/alu.h"
#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/rng.h"

namespace trnsim::isa {
namespace {

// Free-size limits of the Vector/Scalar/GpSimd engines (LANG tiling-overview): an access streams at most 64K
// elements per partition, and one from PSUM spans at most 4K of them (a broadcast may stream more than it spans:
// nki-library's layernorm_tkg broadcasts a [H0, BxS] PSUM mean over H1 to BxS * H1 > 4K elements).
constexpr uint64_t kMaxFreeElements = 65536;
constexpr uint64_t kMaxFreeSpanPsum = 4096;
constexpr uint64_t kBnStatsMaxFree = 512;  // ISA bn_stats: nl.tile_size.bn_stats_fmax
constexpr uint32_t kVectorTransposeMax = 32;  // ISA nc_transpose on the Vector engine
// ISA nc_matmul_mx / quantize_mx: a scale group is 8 partitions x 4 packed values; a 32-partition quadrant of data
// has its 4 scale rows on 4 consecutive partitions of the same quadrant of the scale tile.
constexpr uint32_t kMxGroupPartitions = 8;
constexpr uint32_t kMxQuadrant = 32;
constexpr uint32_t kMxScalesPerQuadrant = kMxQuadrant / kMxGroupPartitions;

// register_load / register_store: the sequencer moves one element of SBUF or HBM itself (NKI: "from HBM/SBUF");
// the compute engines' memory lists, lane alignment and free-size rules do not apply (assumed: the sequencer's
// memory path is not published).
bool is_register_access(const Instruction& inst) {
  return inst.opcode == Opcode::register_load || inst.opcode == Opcode::register_store;
}
// core_barrier names the shared HBM tensor it orders accesses of; its engine does not move its bytes.
bool names_without_access(const Instruction& inst) { return inst.opcode == Opcode::core_barrier; }
// A collective's bytes move through the CC-cores' DMA (HBM or SBUF, as nki.collectives), not its trigger engine's
// memory path (isa/instruction.h).
bool is_collective(const Instruction& inst) { return isa::is_collective(inst.opcode); }
// sendrecv's bytes, too, move by DMA between the cores (or GpSimd's own DMA), not through its trigger engine.
bool moves_between_cores(const Instruction& inst) { return is_collective(inst) || inst.opcode == Opcode::sendrecv; }

bool is_mx_x4(DType d) { return d == DType::mxfp8_e4m3 || d == DType::mxfp8_e5m2 || d == DType::mxfp4_e2m1; }
bool is_mx_scale_operand(const Instruction& inst, const std::string& name) {
  return (inst.opcode == Opcode::nc_matmul_mx && (name == "stationary_scale" || name == "moving_scale")) ||
         (inst.opcode == Opcode::quantize_mx && name == "dst_scale");
}
// quantize_mx's outputs: the MX x4 data and E8M0 scale formats the Vector engine writes only through this instruction
// (A-V4), not among the elementwise dtypes of the engine table; check_quantize_mx checks them.
bool is_quantize_mx_output(const Instruction& inst, const std::string& name) {
  return inst.opcode == Opcode::quantize_mx && (name == "dst" || name == "dst_scale");
}

class Checker {
 public:
  Checker(const Program& program, const HardwareConfig& config) : m_program(program), m_config(config) {}

  std::vector<LegalityIssue> run() {
    if (m_program.generation != m_config.generation) {
      add(-1, "target-generation",
          "the program targets " + std::string(enum_name(m_program.generation)) + " but the config describes " +
              std::string(enum_name(m_config.generation)));
    }
    for (size_t i = 0; i < m_program.allocations.size(); ++i) check_allocation(m_program.allocations[i]);
    for (size_t i = 0; i < m_program.instructions.size(); ++i) {
      m_index = static_cast<long>(i);
      check_instruction(m_program.instructions[i]);
    }
    check_control_nesting();
    return std::move(m_issues);
  }

 private:
  void add(long index, const std::string& rule, const std::string& message) {
    uint32_t line = index >= 0 ? m_program.instructions[index].source_line : 0;
    m_issues.push_back({index, line, rule, message});
  }
  void fail(const std::string& rule, const std::string& message) { add(m_index, rule, message); }

  const Allocation& alloc(const AccessPattern& ap) const { return m_program.allocation(ap); }

  static double tensor_bytes(const Allocation& a) { return double(a.total_elements()) * dtype_size_bytes(a.dtype); }

  void check_allocation(const Allocation& a) {
    if (a.space == MemorySpace::hbm) {
      // Capacity of the chip: every HBM tensor of the kernel, together, must fit in it.
      const double bytes = tensor_bytes(a);
      m_hbm_bytes += bytes;
      if (bytes > double(m_config.hbm.capacity_bytes)) {
        add(-1, "hbm-capacity", "HBM tensor '" + a.name + "' has " + std::to_string(uint64_t(bytes)) +
                                    " bytes, more than the chip's HBM capacity of " +
                                    std::to_string(uint64_t(m_config.hbm.capacity_bytes)));
      } else if (m_hbm_bytes > double(m_config.hbm.capacity_bytes) && !m_hbm_full_reported) {
        m_hbm_full_reported = true;
        add(-1, "hbm-capacity", "the HBM tensors up to '" + a.name + "' take " + std::to_string(uint64_t(m_hbm_bytes)) +
                                    " bytes, more than the chip's HBM capacity of " +
                                    std::to_string(uint64_t(m_config.hbm.capacity_bytes)));
      }
      return;
    }
    const CoreConfig& core = m_config.core;
    uint32_t partitions = a.space == MemorySpace::sbuf ? core.sbuf.partitions : core.psum.partitions;
    uint64_t bytes = a.space == MemorySpace::sbuf ? core.sbuf.bytes_per_partition : core.psum.bytes_per_partition;
    std::string where = std::string(memory_space_name(a.space)) + " tensor '" + a.name + "'";
    if (a.base_partition + a.partitions() > partitions) {
      add(-1, "memory-bounds", where + " needs partitions " + std::to_string(a.base_partition) + ".." +
                                   std::to_string(a.base_partition + a.partitions() - 1) + " of " +
                                   std::to_string(partitions));
    }
    if (a.base_byte + a.bytes_per_partition() > bytes) {
      add(-1, "memory-bounds", where + " needs bytes " + std::to_string(a.base_byte) + ".." +
                                   std::to_string(a.base_byte + a.bytes_per_partition() - 1) +
                                   " of each partition, which has " + std::to_string(bytes));
    }
  }

  // Rules every tensor operand obeys, whatever the instruction.
  void check_operand(const Instruction& inst, const std::string& name, const AccessPattern& ap) {
    const Allocation& a = alloc(ap);
    std::string what = "operand '" + name + "'";
    for (int i = 0; i < ap.num_free_dims; ++i) {
      // Both 16-bit fields are the engines' on-chip access-pattern fields; an HBM side is addressed by the DMA's
      // descriptors (addresses, not access-pattern fields), which AWS's kernels use with longer strides and runs
      // (nki-library's qkv_cte orders a whole [B*S, H] output by core_barrier), and core_barrier moves nothing.
      if (a.space != MemorySpace::hbm && ap.free[i].size > kMaxApDimSize) {
        fail("ap-dim-size", what + ": free dim " + std::to_string(i) + " has " + std::to_string(ap.free[i].size) +
                                " elements; an access-pattern dim holds at most " + std::to_string(kMaxApDimSize));
      }
      if (a.space != MemorySpace::hbm && std::llabs(ap.free[i].stride) > kMaxApDimStride) {
        fail("ap-dim-stride", what + ": free dim " + std::to_string(i) + " stride " +
                                  std::to_string(ap.free[i].stride) + " does not fit the 16-bit stride field");
      }
    }
    if (a.space == MemorySpace::hbm) {
      if (inst.engine != Engine::dma && !is_register_access(inst) && !names_without_access(inst) &&
          !moves_between_cores(inst))
        fail("engine-memory", what + ": only DMA reaches HBM; the " +
                                                                std::string(enum_name(inst.engine)) +
                                                                " engine reads SBUF/PSUM");
      // The bytes the pattern spans (partition dim included) lie inside the tensor, as the
      // interpreter's CoreState asserts when it moves values.
      const auto [low, high] = ap.element_range(/*with_partition=*/true);
      const uint32_t esize = dtype_size_bytes(ap.dtype);
      if (ap.elements() > 0 && (low < 0 || double(high + 1) * esize > tensor_bytes(a))) {
        fail("memory-bounds", what + ": elements " + std::to_string(low) + ".." + std::to_string(high) +
                                  " fall outside HBM tensor '" + a.name + "' (" + std::to_string(a.total_elements()) +
                                  " elements)");
      }
      return;
    }
    const OnChipMemory memory = on_chip_memory(a.space);
    const auto& engines = m_config.core.memory_access.engines_reaching(memory);
    const bool sequencer = (is_register_access(inst) || moves_between_cores(inst)) && a.space == MemorySpace::sbuf;
    if (!sequencer && std::find(engines.begin(), engines.end(), inst.engine) == engines.end()) {
      fail("engine-memory", what + ": the " + std::string(enum_name(inst.engine)) + " engine cannot access " +
                                memory_space_name(a.space));
    }
    uint32_t partitions = onchip_partitions(m_config.core, memory);
    uint32_t count = ap.partitions();
    uint32_t start = a.base_partition + ap.start_partition;
    if (count == 0 || count > partitions) {
      fail("partition-count", what + ": " + std::to_string(count) + " partitions; at most " +
                                  std::to_string(partitions));
      return;
    }
    // A-V2: 65-128 partitions start at 0; 33-64 at 0 or 64; up to 32 on a quadrant boundary.
    uint32_t quadrant = m_config.core.sbuf.quadrant_partitions;
    uint32_t alignment = count > 2 * quadrant ? partitions : (count > quadrant ? 2 * quadrant : quadrant);
    // MX scale tiles follow their own quadrant layout (check_matmul_mx), e.g. partitions 4.. of a tile.
    // The rule is the compute engines' lane wiring; DMA writes partitions as addressed rows.
    if (start % alignment != 0 && !is_mx_scale_operand(inst, name) && inst.engine != Engine::dma && !sequencer) {
      fail("partition-start-alignment", what + ": " + std::to_string(count) + " partitions may not start at partition " +
                                            std::to_string(start) + " (allowed: multiples of " +
                                            std::to_string(alignment) + ")");
    }
    if (start + count > partitions) {
      fail("memory-bounds", what + ": partitions " + std::to_string(start) + ".." + std::to_string(start + count - 1) +
                                " exceed the " + std::to_string(partitions) + " of " + memory_space_name(a.space));
    }
    const auto [low, high] = ap.element_range(/*with_partition=*/false);
    uint32_t esize = dtype_size_bytes(ap.dtype);
    int64_t first_byte = int64_t(a.base_byte) + low * esize, end_byte = int64_t(a.base_byte) + (high + 1) * esize;
    uint64_t limit = onchip_bytes_per_partition(m_config.core, memory);
    if (first_byte < 0 || uint64_t(end_byte) > limit) {
      fail("memory-bounds", what + ": bytes " + std::to_string(first_byte) + ".." + std::to_string(end_byte - 1) +
                                " of each partition fall outside " + memory_space_name(a.space) + " (0.." +
                                std::to_string(limit - 1) + ")");
    }
    const ComputeEngineConfig* compute_rules = sequencer ? nullptr : compute_engine_config(m_config.core, inst.engine);
    if (compute_rules) {
      if (ap.free_elements() > kMaxFreeElements) {
        fail("free-size", what + ": " + std::to_string(ap.free_elements()) + " elements per partition; the " +
                              std::string(enum_name(inst.engine)) + " engine takes at most " +
                              std::to_string(kMaxFreeElements) + " from " + memory_space_name(a.space));
      }
      const uint64_t span = uint64_t(high - low + 1);
      if (a.space == MemorySpace::psum && span > kMaxFreeSpanPsum) {
        fail("free-size", what + ": spans " + std::to_string(span) + " elements of each partition; the " +
                              std::string(enum_name(inst.engine)) + " engine takes at most " +
                              std::to_string(kMaxFreeSpanPsum) + " from psum");
      }
      if (!compute_rules->elements_per_cycle_by_dtype.count(ap.dtype) && !is_quantize_mx_output(inst, name)) {
        fail("engine-dtype", what + ": the " + std::string(enum_name(inst.engine)) + " engine of " +
                                 std::string(enum_name(m_config.generation)) + " does not handle " +
                                 std::string(dtype_name(ap.dtype)));
      }
    }
  }

  void check_instruction(const Instruction& inst) {
    const InstructionSpec& spec = inst.spec();
    if (!spec.runs_on(inst.engine, m_config.generation)) {
      fail("engine-opcode", "the " + std::string(enum_name(inst.engine)) + " engine of " +
                                std::string(enum_name(m_config.generation)) + " does not run " + spec.name);
    }
    for (size_t i = 0; i < spec.operands.size(); ++i) {
      const OperandSpec& operand = spec.operands[i];
      bool present = (inst.present_mask >> i) & 1u;
      if (!present && !operand.optional && !operand.has_default) {
        fail("missing-operand", "required operand '" + operand.name + "' is missing");
        continue;
      }
      if (present && operand.tensor_slot >= 0 && inst.tensors[operand.tensor_slot].present()) {
        const AccessPattern& ap = inst.tensors[operand.tensor_slot];
        if (ap.allocation >= m_program.allocations.size()) {
          fail("unknown-tensor", "operand '" + operand.name + "' names no allocation");
          return;
        }
        check_operand(inst, operand.name, ap);
      }
      if (present && operand.kind == OperandKind::alu_op && operand.name.find("reduce") != std::string::npos &&
          !alu_op_is_reduction(static_cast<AluOp>(inst.scalar(operand.name)))) {
        fail("reduce-op", "operand '" + operand.name + "': " +
                              std::string(alu_op_name(static_cast<AluOp>(inst.scalar(operand.name)))) +
                              " is not a reduction operator");
      }
    }
    switch (inst.opcode) {
      case Opcode::nc_matmul: check_matmul(inst); break;
      case Opcode::nc_matmul_mx: check_matmul_mx(inst); break;
      case Opcode::nc_transpose: check_transpose(inst); break;
      case Opcode::dma_copy:
      case Opcode::dma_transpose: check_dma(inst); break;
      case Opcode::dma_gather: check_dma_gather(inst); break;
      case Opcode::dma_scatter: check_dma_scatter(inst); break;
      case Opcode::bn_stats:
        if (inst.tensor("data").free_elements() > kBnStatsMaxFree) {
          fail("bn-stats-free-size", "data has " + std::to_string(inst.tensor("data").free_elements()) +
                                         " elements per partition; bn_stats takes at most 512");
        }
        break;
      case Opcode::tensor_scalar:
        check_tensor_scalar(inst);
        check_tensor_scalar_operands(inst);
        break;
      case Opcode::activation:
        if (m_config.generation == Generation::trn1 && inst.has("bias") && !inst.is_tensor("bias")) {
          fail("activation-bias", "an immediate bias needs NeuronCore-v3 (trn2) or later; use a [P, 1] tensor");
        }
        break;
      default: break;
    }
    check_registers(inst);
    check_operand_shapes(inst);
    check_accumulating(inst);
    check_random(inst);
    if (inst.opcode == Opcode::topk) check_topk(inst);
    if (inst.opcode == Opcode::nc_n_gather) check_nc_n_gather(inst);
    if (inst.opcode == Opcode::nonzero_with_count) check_nonzero_with_count(inst);
    if (inst.opcode == Opcode::sequence_bounds) check_sequence_bounds(inst);
    if (inst.opcode == Opcode::activate2) check_activate2(inst);
    if (inst.opcode == Opcode::nc_stream_shuffle) check_stream_shuffle(inst);
    if (inst.opcode == Opcode::quantize_mx) check_quantize_mx(inst);
    if (inst.opcode == Opcode::local_gather) check_local_gather(inst);
    if (inst.opcode == Opcode::core_barrier) check_core_barrier(inst);
    if (is_collective(inst)) check_collective(inst);
    if (inst.opcode == Opcode::sendrecv) check_sendrecv(inst);
  }

  // Collectives: ranks are physical cores of the simulation, each listed once; dst and src share a dtype; with the
  // group given, the element counts fit it (all_gather's dst = n x src, reduce_scatter's src = n x dst, all_to_all's
  // split into n blocks, the rest equal); the reduction is one nki.collectives offers (add, minimum, maximum).
  void check_collective(const Instruction& inst) {
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& src = inst.tensor("src");
    if (!dst.present() || !src.present()) return;
    if (dst.dtype != src.dtype) {
      fail("collective-dtype", "dst is " + std::string(dtype_name(dst.dtype)) + " but src is " +
                                   std::string(dtype_name(src.dtype)) + " (a collective does not cast)");
    }
    std::vector<int64_t> ranks;
    if (inst.opcode == Opcode::collective_permute) {
      const std::vector<int64_t>& pairs = inst.list("pairs");  // flat: source, target, source, target, ...
      std::vector<int64_t> targets;
      for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
        for (int64_t rank : {pairs[i], pairs[i + 1]}) {
          if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
        }
        if (std::find(targets.begin(), targets.end(), pairs[i + 1]) != targets.end()) {
          fail("collective-group", "rank " + std::to_string(pairs[i + 1]) + " is the target of two pairs");
        }
        targets.push_back(pairs[i + 1]);
      }
      if (pairs.empty()) fail("collective-group", "pairs lists [source, target] ranks: none given");
    } else {
      ranks = inst.list("group");
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (std::find(ranks.begin(), ranks.begin() + long(i), ranks[i]) != ranks.begin() + long(i)) {
          fail("collective-group", "rank " + std::to_string(ranks[i]) + " is listed twice");
        }
      }
      const int64_t size = int64_t(inst.scalar("group_size"));
      if (size < 0 || (size > 0 && (ranks.empty() || ranks.size() % size_t(size) != 0))) {
        fail("collective-group", "group_size " + std::to_string(size) + " must split the group's " +
                                     std::to_string(ranks.size()) + " ranks into equal rank-lists");
      } else if (size > 0) {
        ranks.resize(size_t(size));  // the shape rules below are per rank-list
      }
    }
    for (int64_t rank : ranks) {
      if (rank < 0 || rank >= int64_t(m_config.chip.physical_cores)) {
        fail("collective-group", "rank " + std::to_string(rank) + " is no core of the simulation (ranks are physical "
                                 "cores 0.." + std::to_string(m_config.chip.physical_cores - 1) + ")");
      }
    }
    if (inst.opcode == Opcode::collective_permute && inst.has("src2") != inst.has("op")) {
      fail("collective-op", "a reducing collective_permute takes both src2 and op (op(src, src2) moves)");
    }
    if (inst.opcode == Opcode::collective_permute && inst.has("src2")) {
      const AccessPattern& src2 = inst.tensor("src2");
      if (src2.dtype != src.dtype || src2.elements() != src.elements()) {
        fail("collective-shape", "src2 (" + std::string(dtype_name(src2.dtype)) + ", " +
                                     std::to_string(src2.elements()) + " elements) must match src (" +
                                     std::string(dtype_name(src.dtype)) + ", " + std::to_string(src.elements()) + ")");
      }
    }
    if (inst.opcode == Opcode::all_reduce || inst.opcode == Opcode::reduce_scatter ||
        (inst.opcode == Opcode::collective_permute && inst.has("op"))) {
      const AluOp op = AluOp(inst.scalar("op"));
      if (op != AluOp::add && op != AluOp::maximum && op != AluOp::minimum) {
        fail("collective-op", std::string(alu_op_name(op)) + " is not a reduction a collective computes (add, "
                              "minimum or maximum, as nki.collectives)");
      }
    }
    const uint64_t n = ranks.size(), d = dst.elements(), e = src.elements();
    auto shape = [&](bool ok, const std::string& rule) {
      if (!ok) {
        fail("collective-shape", rule + ": dst has " + std::to_string(d) + " elements and src " + std::to_string(e) +
                                     (n ? " for " + std::to_string(n) + " ranks" : ""));
      }
    };
    switch (inst.opcode) {
      case Opcode::all_gather: shape(n == 0 || d == n * e, "all_gather's dst holds every rank's src"); break;
      case Opcode::reduce_scatter: shape(n == 0 || e == n * d, "reduce_scatter's src holds every rank's dst"); break;
      case Opcode::all_to_all: shape(d == e && (n == 0 || e % n == 0), "all_to_all's dst and src split into one block per rank"); break;
      case Opcode::all_to_all_v:
      case Opcode::all_gather_v: check_variable_collective(inst, n); break;
      default: shape(d == e, "dst and src have as many elements"); break;
    }
  }

  // all_to_all_v / all_gather_v: HBM buffers, a uint32 metadata tensor of rows x n (3 rows, 4 with has_rdispls;
  // all_gather_v takes no receive displacements), dst split into one slot per rank when it has none.
  void check_variable_collective(const Instruction& inst, uint64_t n) {
    const std::string name = inst.spec().name;
    for (const char* operand : {"dst", "src"}) {
      if (alloc(inst.tensor(operand)).space != MemorySpace::hbm) {
        fail("collective-shape", name + "'s " + operand + " is a flat HBM buffer");
      }
    }
    const AccessPattern& metadata = inst.tensor("metadata");
    const bool rdispls = inst.has("has_rdispls") && inst.scalar("has_rdispls") != 0;
    const uint64_t rows = rdispls ? 4 : 3;
    if (metadata.dtype != DType::uint32 && metadata.dtype != DType::int32) {
      fail("collective-shape", name + "'s metadata is uint32, not " + std::string(dtype_name(metadata.dtype)));
    }
    if (n > 0 && metadata.elements() != rows * n) {
      fail("collective-shape", name + "'s metadata holds " + std::to_string(rows) + " rows of " + std::to_string(n) +
                                   " (one per rank), not " + std::to_string(metadata.elements()) + " elements");
    }
    if (n > 0 && !rdispls && inst.tensor("dst").elements() % n != 0) {
      fail("collective-shape", name + "'s dst of " + std::to_string(inst.tensor("dst").elements()) +
                                   " elements does not split into " + std::to_string(n) + " equal slots");
    }
  }

  // sendrecv: SBUF tiles (NKI's compiler takes sendrecv operands in SBUF), one dtype, dst shaped as src (the peer's
  // src lands in this rank's dst row by row), ranks that exist.
  void check_sendrecv(const Instruction& inst) {
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& src = inst.tensor("src");
    if (!dst.present() || !src.present()) return;
    for (const auto& [name, ap] : {std::pair<const char*, const AccessPattern*>{"dst", &dst}, {"src", &src}}) {
      if (alloc(*ap).space != MemorySpace::sbuf) {
        fail("sendrecv", std::string(name) + " is in " + memory_space_name(alloc(*ap).space) +
                             "; sendrecv moves SBUF tiles between cores");
      }
    }
    if (dst.dtype != src.dtype) {
      fail("sendrecv", "dst is " + std::string(dtype_name(dst.dtype)) + " but src is " +
                           std::string(dtype_name(src.dtype)) + " (sendrecv does not cast)");
    }
    if (dst.partitions() != src.partitions() || dst.free_elements() != src.free_elements()) {
      fail("sendrecv", "dst " + shape_text(dst.partitions(), dst.free_elements()) + " and src " +
                           shape_text(src.partitions(), src.free_elements()) +
                           " differ: the peer's src lands in dst row by row");
    }
    for (const char* rank : {"send_to_rank", "recv_from_rank"}) {
      if (inst.scalar(rank) < 0) fail("sendrecv", std::string(rank) + " " + std::to_string(int64_t(inst.scalar(rank))) +
                                                      " is not a rank (ranks count from 0)");
    }
    if (inst.scalar("pipe_id") < 0) fail("sendrecv", "pipe_id must be >= 0");
  }

  // core_barrier: the shared tensor is in HBM; the cores are two or more distinct physical cores of the chip.
  void check_core_barrier(const Instruction& inst) {
    // NKI documents data as the shared HBM tensor the cores synchronise on; an on-chip tensor is accepted too, as
    // the NKI compiler does (nki-library's bwmm_shard_on_I meets on an SBUF counter): the barrier then orders only
    // the core's own accesses of it.
    const std::vector<int64_t>& cores = inst.list("cores");
    if (cores.size() < 2) fail("core-barrier", "cores lists the cores that meet: at least two");
    for (size_t i = 0; i < cores.size(); ++i) {
      if (cores[i] < 0 || cores[i] >= int64_t(m_config.chip.physical_cores)) {
        fail("core-barrier", "core " + std::to_string(cores[i]) + " does not exist (the chip has " +
                                 std::to_string(m_config.chip.physical_cores) + ")");
      }
      if (std::find(cores.begin(), cores.begin() + long(i), cores[i]) != cores.begin() + long(i)) {
        fail("core-barrier", "core " + std::to_string(cores[i]) + " is listed twice");
      }
    }
  }

  // ---- Operand shapes and operator kinds: what the interpreter asserts, checked here so that
  // --timing-only (which runs no interpreter) refuses the same programs as a run with values. ----

  // The operand's access pattern when it was given as a tensor, else nullptr.
  static const AccessPattern* given(const Instruction& inst, const char* name) {
    const OperandSpec* operand = inst.spec().find(name);
    if (!operand || operand->tensor_slot < 0 || !inst.has(name)) return nullptr;
    const AccessPattern& ap = inst.tensor(name);
    return ap.present() ? &ap : nullptr;
  }
  static std::string shape_text(uint32_t partitions, uint64_t free) {
    return "[" + std::to_string(partitions) + ", " + std::to_string(free) + "]";
  }
  static std::string shape_text(const AccessPattern& ap) { return shape_text(ap.partitions(), ap.free_elements()); }
  static AluOp alu(const Instruction& inst, const char* name) {
    return static_cast<AluOp>(static_cast<int>(inst.scalar(name)));
  }
  // dma_transpose with src_shape (NKI's N-d forms): a shape of 2 to 4 dims holding src's elements, permuted by one of
  // the permutations NKI supports ((1, 0), (2, 1, 0), (3, 1, 2, 0)); dst holds as many elements with the permuted
  // shape's first dim on its partitions (and an on-chip src its first dim), and there are no indices.
  // `moved`: the elements the transpose permutes (src's, or the gathered rows' of an indirect one).
  void check_permuted_transpose(const Instruction& inst, uint64_t moved) {
    const std::vector<int64_t>& shape = inst.list("src_shape");
    const std::vector<int64_t> axes = dma_transpose_axes(inst);
    const std::vector<std::vector<int64_t>> supported = {{1, 0}, {2, 1, 0}, {3, 1, 2, 0}};
    if (std::find(supported.begin(), supported.end(), axes) == supported.end() || axes.size() != shape.size()) {
      fail("transpose-axes", "a DMA transpose permutes " + std::to_string(shape.size()) +
                                 " dims by (1, 0), (2, 1, 0) or (3, 1, 2, 0) only (NKI nisa.dma_transpose axes)");
      return;
    }
    uint64_t total = 1;
    for (int64_t n : shape) {
      if (n <= 0) {
        fail("operand-shape", "src_shape dims must be positive");
        return;
      }
      total *= uint64_t(n);
    }
    const AccessPattern *dst = given(inst, "dst"), *src = given(inst, "src");
    const bool gathers = given(inst, "indices") != nullptr;
    if (moved != total) {
      fail("operand-shape", std::string(gathers ? "the gathered rows have " : "src has ") + std::to_string(moved) +
                                " elements but src_shape holds " + std::to_string(total));
    }
    if (dst && dst->elements() != total) {
      fail("operand-shape", "dst has " + std::to_string(dst->elements()) + " elements but src_shape holds " +
                                std::to_string(total));
    }
    if (src && !gathers && alloc(*src).space != MemorySpace::hbm && src->partitions() != uint64_t(shape[0])) {
      fail("operand-shape", "an on-chip src has src_shape's first dim (" + std::to_string(shape[0]) +
                                ") on its partitions, not " + std::to_string(src->partitions()));
    }
    const uint64_t dst_partitions = uint64_t(shape[size_t(axes[0])]);
    if (dst && alloc(*dst).space != MemorySpace::hbm && dst->partitions() != dst_partitions) {
      fail("operand-shape", "dst has the permuted shape's first dim (" + std::to_string(dst_partitions) +
                                ") on its partitions, not " + std::to_string(dst->partitions()));
    }
  }

  // nc_transpose / dma_transpose: dst holds the [F, P] transpose of a [P, F] source.
  void transposed(const AccessPattern* dst, const AccessPattern* src) {
    if (dst && src && (dst->partitions() != src->free_elements() || dst->free_elements() != src->partitions())) {
      fail("operand-shape", "dst must be " + shape_text(uint32_t(src->free_elements()), src->partitions()) +
                                " to hold the transpose of " + shape_text(*src) + ", got " + shape_text(*dst));
    }
  }

  void same_shape(const Instruction& inst, const char* a, const char* b) {
    const AccessPattern *x = given(inst, a), *y = given(inst, b);
    if (!x || !y) return;
    if (x->partitions() != y->partitions() || x->free_elements() != y->free_elements()) {
      fail("operand-shape", std::string(a) + " is " + shape_text(*x) + " but " + b + " is " + shape_text(*y) +
                                " (partitions and elements per partition must match)");
    }
  }
  void shape_is(const Instruction& inst, const char* name, uint32_t partitions, uint64_t free) {
    const AccessPattern* ap = given(inst, name);
    if (ap && (ap->partitions() != partitions || ap->free_elements() != free)) {
      fail("operand-shape", std::string(name) + " must be " + shape_text(partitions, free) + ", got " + shape_text(*ap));
    }
  }
  // An in|f32 operand given as a tensor holds one value per partition of the tile it applies to.
  void per_partition(const Instruction& inst, const char* name, uint32_t partitions) {
    const AccessPattern* ap = given(inst, name);
    if (ap && (ap->partitions() != partitions || ap->free_elements() != 1)) {
      fail("per-partition-operand", std::string(name) + ": expected one element per partition for " +
                                        std::to_string(partitions) + " partitions, got " + shape_text(*ap));
    }
  }
  void integer_operand(const Instruction& inst, const char* name, AluOp op) {
    const AccessPattern* ap = given(inst, name);
    if (ap && dtype_info(ap->dtype).is_float) {
      fail("integer-dtype", "bitvec operator " + std::string(alu_op_name(op)) + " needs integer dtypes, but " + name +
                                " is " + std::string(dtype_name(ap->dtype)));
    }
  }
  void reduction_op(const Instruction& inst, const char* name) {
    AluOp op = alu(inst, name);
    if (!alu_op_is_reduction(op)) {
      fail("reduce-op", std::string("operand '") + name + "': " + std::string(alu_op_name(op)) +
                            " is not a reduction operator");
    }
  }
  // iota / affine_select: [step, count] pairs whose counts multiply to the free size of dst.
  void check_pattern(const Instruction& inst, uint64_t free) {
    const std::vector<int64_t>& pattern = inst.list("pattern");
    if (pattern.empty() || pattern.size() % 2 != 0) {
      fail("pattern", "pattern must be a list of [step, count] pairs");
      return;
    }
    uint64_t count = 1;
    for (size_t k = 1; k < pattern.size(); k += 2) {
      if (pattern[k] <= 0) {
        fail("pattern", "pattern counts must be positive, got " + std::to_string(pattern[k]));
        return;
      }
      count *= static_cast<uint64_t>(pattern[k]);
    }
    if (count != free) {
      fail("pattern", "pattern generates " + std::to_string(count) + " elements per partition but dst has " +
                          std::to_string(free));
    }
  }

  void check_tensor_scalar_operands(const Instruction& inst) {
    const AccessPattern* data = given(inst, "data");
    if (!data) return;
    AluOp op0 = alu(inst, "op0");
    bool has_op1 = inst.has("op1");
    AluOp op1 = has_op1 ? alu(inst, "op1") : AluOp::bypass;
    if (has_op1 && !inst.has("operand1") && !alu_op_is_unary(op1)) {
      fail("missing-operand", "op1 is given but operand1 is not");
    }
    bool bitvec = alu_op_is_bitvec(op0);
    if (has_op1 && alu_op_is_bitvec(op1) != bitvec) {
      fail("alu-op", "op0 and op1 must both be bitvec or both arithmetic operators");
    }
    if (bitvec) {
      for (const char* name : {"data", "dst", "operand0"}) integer_operand(inst, name, op0);
      if (has_op1) integer_operand(inst, "operand1", op1);
    }
    per_partition(inst, "operand0", data->partitions());
    per_partition(inst, "operand1", data->partitions());
  }

  // ---- The Vector accumulator and PRNG instructions (ISA tensor_scalar_reduce, tensor_scalar_cumulative,
  // exponential, nc_match_replace8, dropout, rng, rand2, set_rng_seed, rand_set_state, rand_get_state). ----

  void arithmetic_op(const Instruction& inst, const char* name) {
    if (alu_op_is_bitvec(alu(inst, name))) {
      fail("alu-op", inst.spec().name + " takes an arithmetic " + name + ", not bitvec " +
                         std::string(alu_op_name(alu(inst, name))));
    }
  }
  // The reductions the accumulator registers run (ISA tensor_scalar_reduce: add, multiply, max, min;
  // tensor_scalar_cumulative also subtract).
  void accumulating_op(const Instruction& inst, const char* name, bool allow_subtract, const char* rule) {
    AluOp op = alu(inst, name);
    // A reduce_* operand that is no reduction at all is reported once, by check_instruction's reduce-op rule.
    if (std::string(name).find("reduce") != std::string::npos && !alu_op_is_reduction(op)) return;
    bool ok = op == AluOp::add || op == AluOp::multiply || op == AluOp::maximum || op == AluOp::minimum ||
              (allow_subtract && op == AluOp::subtract);
    if (!ok) {
      fail(rule, std::string(name) + " must be add, " + (allow_subtract ? "subtract, " : "") +
                     "multiply, maximum or minimum, not " + std::string(alu_op_name(op)));
    }
  }
  // reduce_cmd=load_reduce reads `init`; any other command must leave it unset (NKI), or 0.0 where it has that
  // default (exponential).
  void reduce_init(const Instruction& inst, const char* init, bool zero_is_unset) {
    std::string command(inst.enum_word("reduce_cmd"));
    if (command == "load_reduce") {
      if (!inst.has(init)) fail("missing-operand", std::string("reduce_cmd=load_reduce needs ") + init);
      return;
    }
    if (!inst.has(init) || (zero_is_unset && !inst.is_tensor(init) && inst.scalar(init) == 0.0)) return;
    fail("reduce-init", std::string(init) + " is read only with reduce_cmd=load_reduce, not " + command);
  }

  // Operands the ISA takes as fp32 only (imm0/imm1 of tensor_scalar_cumulative, reduce_init, max_value), when given
  // as tensors.
  void fp32_operand(const Instruction& inst, const char* name) {
    const AccessPattern* ap = given(inst, name);
    if (ap && ap->dtype != DType::fp32) {
      fail("operand-dtype", std::string(name) + " must be fp32, not " + std::string(dtype_name(ap->dtype)));
    }
  }

  void check_accumulating(const Instruction& inst) {
    if (inst.opcode == Opcode::tensor_scalar_reduce || inst.opcode == Opcode::tensor_scalar_cumulative ||
        inst.opcode == Opcode::exponential) {
      for (const char* name : {"imm0", "imm1", "reduce_init", "max_value"}) {
        if (inst.spec().find(name)) fp32_operand(inst, name);
      }
    }
    switch (inst.opcode) {
      case Opcode::tensor_scalar_reduce: {
        same_shape(inst, "dst", "data");
        arithmetic_op(inst, "op0");
        accumulating_op(inst, "reduce_op", false, "reduce-op");
        reduce_init(inst, "reduce_init", false);
        if (const AccessPattern* data = given(inst, "data")) {
          per_partition(inst, "operand0", data->partitions());
          per_partition(inst, "reduce_init", data->partitions());
          shape_is(inst, "reduce_res", data->partitions(), 1);
        }
        break;
      }
      case Opcode::tensor_scalar_cumulative: {
        same_shape(inst, "dst", "src");
        arithmetic_op(inst, "op0");
        accumulating_op(inst, "op1", true, "alu-op");
        reduce_init(inst, "imm1", false);
        for (const char* name : {"dst", "src"}) {
          const AccessPattern* ap = given(inst, name);
          if (ap && (ap->dtype == DType::int32 || ap->dtype == DType::uint32)) {
            fail("cumulative-dtype", std::string(name) + ": tensor_scalar_cumulative does not take " +
                                         std::string(dtype_name(ap->dtype)) + " (ISA: int32/uint32 unsupported)");
          }
        }
        if (const AccessPattern* src = given(inst, "src")) {
          per_partition(inst, "imm0", src->partitions());
          per_partition(inst, "imm1", src->partitions());
        }
        break;
      }
      case Opcode::exponential: {
        same_shape(inst, "dst", "src");
        reduce_init(inst, "reduce_init", true);
        if (given(inst, "reduce_res") && inst.enum_is("reduce_cmd", "idle")) {
          fail("reduce-cmd", "reduce_res is written only with an accumulating reduce_cmd, not idle");
        }
        if (const AccessPattern* src = given(inst, "src")) {
          per_partition(inst, "max_value", src->partitions());
          per_partition(inst, "reduce_init", src->partitions());
          shape_is(inst, "reduce_res", src->partitions(), 1);
        }
        break;
      }
      case Opcode::nc_match_replace8: {
        same_shape(inst, "dst", "data");
        const AccessPattern* idx = given(inst, "dst_idx");
        if (idx && dtype_info(idx->dtype).is_float) {
          fail("integer-dtype", "dst_idx must be an integer dtype (uint16 or uint32), not " +
                                    std::string(dtype_name(idx->dtype)));
        }
        if (const AccessPattern* data = given(inst, "data")) {
          shape_is(inst, "vals", data->partitions(), 8);
          shape_is(inst, "dst_idx", data->partitions(), 8);
        }
        break;
      }
      default: break;
    }
  }

  void check_random(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    const uint32_t states = inst.engine == Engine::gpsimd ? kGpSimdRngStatesPerLane : kVectorRngStatesPerLane;
    auto state_tile = [&](const char* name) {
      const AccessPattern* ap = given(inst, name);
      if (ap && (ap->dtype != DType::uint32 || ap->free_elements() != uint64_t{states} * kXorwowWords)) {
        fail("rng-state", std::string(name) + " must be uint32 [P, " + std::to_string(states * kXorwowWords) +
                              "] (" + std::to_string(states) + " XORWOW states per lane on the " +
                              std::string(enum_name(inst.engine)) + " engine), got " +
                              std::string(dtype_name(ap->dtype)) + shape_text(*ap));
      }
    };
    switch (inst.opcode) {
      case Opcode::dropout: {
        same_shape(inst, "dst", "data");
        const AccessPattern* data = given(inst, "data");
        if (!data) break;
        if (dst && dst->dtype != data->dtype) {
          fail("dropout-dtype", "dst.dtype must match data.dtype (" + std::string(dtype_name(data->dtype)) + "), not " +
                                    std::string(dtype_name(dst->dtype)));
        }
        per_partition(inst, "prob", data->partitions());
        const AccessPattern* prob = given(inst, "prob");
        if (prob && !dtype_info(data->dtype).is_float && prob->dtype != DType::fp32) {
          fail("dropout-dtype", "with integer data, prob must be fp32, not " + std::string(dtype_name(prob->dtype)));
        }
        if (prob && dtype_info(data->dtype).is_float && !dtype_info(prob->dtype).is_float) {
          fail("dropout-dtype", "prob must be a float dtype, not " + std::string(dtype_name(prob->dtype)));
        }
        if (inst.has("prob") && !prob && !(inst.scalar("prob") >= 0.0 && inst.scalar("prob") <= 1.0)) {
          fail("dropout-prob", "prob " + std::to_string(inst.scalar("prob")) + " is not a probability in [0, 1]");
        }
        break;
      }
      case Opcode::rng:
        if (dst && dst->dtype != DType::int8 && dst->dtype != DType::int16 && dst->dtype != DType::int32 &&
            dst->dtype != DType::uint8 && dst->dtype != DType::uint16 && dst->dtype != DType::uint32) {
          fail("rng-dtype", "dst must be int8, int16, int32, uint8, uint16 or uint32, not " +
                                std::string(dtype_name(dst->dtype)));
        }
        break;
      case Opcode::rand2: {
        static const DType kRand2Dtypes[] = {DType::fp8_e4m3, DType::fp8_e5m2, DType::fp16,  DType::bf16,
                                             DType::fp32,     DType::tf32,     DType::int8,  DType::int16,
                                             DType::int32,    DType::uint8,    DType::uint16, DType::uint32};
        if (dst && std::find(std::begin(kRand2Dtypes), std::end(kRand2Dtypes), dst->dtype) == std::end(kRand2Dtypes)) {
          fail("rng-dtype", "rand2 does not write " + std::string(dtype_name(dst->dtype)));
        }
        if (dst) {
          per_partition(inst, "min", dst->partitions());
          per_partition(inst, "max", dst->partitions());
        }
        if (inst.has("min") && inst.has("max") && !inst.is_tensor("min") && !inst.is_tensor("max") &&
            !(inst.scalar("min") < inst.scalar("max"))) {
          fail("rand2-range", "min must be below max");
        }
        break;
      }
      case Opcode::set_rng_seed: {
        const AccessPattern* seeds = given(inst, "src_seeds");
        if (seeds && (seeds->partitions() != 1 || seeds->free_elements() != 1 || dtype_size_bytes(seeds->dtype) != 4)) {
          fail("rng-seed", "src_seeds must be a [1, 1] tensor of a 32-bit dtype, got " +
                               std::string(dtype_name(seeds->dtype)) + shape_text(*seeds));
        }
        break;
      }
      case Opcode::rand_set_state: {
        state_tile("src_seeds");
        const AccessPattern* seeds = given(inst, "src_seeds");
        if (seeds && alloc(*seeds).space != MemorySpace::sbuf) fail("rng-state", "src_seeds must be in SBUF");
        break;
      }
      case Opcode::rand_get_state: state_tile("dst"); break;
      default: break;
    }
  }

  // ISA nc_n_gather: uint32 indices, dst.dtype = data.dtype (not packed MX), equal partitions, one dst element per
  // index; all in SBUF.
  void check_nc_n_gather(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* data = given(inst, "data");
    const AccessPattern* indices = given(inst, "indices");
    if (!dst || !data || !indices) return;
    for (const char* name : {"dst", "data", "indices"}) {
      if (alloc(inst.tensor(name)).space != MemorySpace::sbuf) fail("gather", std::string(name) + " must be in SBUF");
    }
    if (indices->dtype != DType::uint32) fail("gather", "indices must be uint32, not " + std::string(dtype_name(indices->dtype)));
    if (dst->dtype != data->dtype) {
      fail("gather", "dst.dtype must match data.dtype (" + std::string(dtype_name(data->dtype)) + "), not " +
                         std::string(dtype_name(dst->dtype)));
    }
    if (is_mx_x4(data->dtype)) fail("gather", "nc_n_gather does not move packed MX dtypes");
    if (data->partitions() != indices->partitions() || dst->partitions() != indices->partitions() ||
        dst->free_elements() != indices->free_elements()) {
      fail("operand-shape", "dst is " + shape_text(*dst) + ", data " + shape_text(*data) + " and indices " +
                                shape_text(*indices) + " (partitions must match; dst holds one element per index)");
    }
  }

  // ISA nonzero_with_count: src fp32/int32, dst int32, both in SBUF, dst one element per partition longer.
  void check_nonzero_with_count(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* src = given(inst, "src");
    if (!dst || !src) return;
    for (const char* name : {"dst", "src"}) {
      if (alloc(inst.tensor(name)).space != MemorySpace::sbuf) fail("nonzero", std::string(name) + " must be in SBUF");
    }
    if ((src->dtype != DType::fp32 && src->dtype != DType::int32) || dst->dtype != DType::int32) {
      fail("nonzero", "src must be fp32 or int32 and dst int32, not " + std::string(dtype_name(src->dtype)) + " / " +
                          std::string(dtype_name(dst->dtype)));
    }
    shape_is(inst, "dst", src->partitions(), src->free_elements() + 1);
  }

  // ISA activate2: dst and data of one shape; (op0, op1) one of the six documented pairs, reverse only on an operator;
  // an accumulating reduce_cmd needs reduce_op in {add, maximum, minimum}; imm0 / imm1 / relu_param per partition or
  // immediate (both imm tensors of one dtype); reduce_res [P, 1].
  void check_activate2(const Instruction& inst) {
    same_shape(inst, "dst", "data");
    const AluOp op0 = alu(inst, "op0"), op1 = alu(inst, "op1");
    const bool pair = op0 == AluOp::multiply
                          ? (op1 == AluOp::add || op1 == AluOp::subtract || op1 == AluOp::bypass)
                          : ((op0 == AluOp::add || op0 == AluOp::subtract || op0 == AluOp::bypass) && op1 == AluOp::bypass);
    if (!pair) {
      fail("activate2-ops", "(op0, op1) = (" + std::string(alu_op_name(op0)) + ", " + std::string(alu_op_name(op1)) +
                                ") is none of (multiply, add|subtract|bypass), (add|subtract|bypass, bypass)");
    }
    if ((inst.scalar("reverse0") != 0 && op0 == AluOp::bypass) || (inst.scalar("reverse1") != 0 && op1 == AluOp::bypass)) {
      fail("activate2-ops", "reverse0 / reverse1 need op0 / op1 to be an operator, not bypass");
    }
    const OperandSpec* cmd = inst.spec().find("reduce_cmd");
    const std::string command = cmd->enum_values.at(static_cast<size_t>(inst.scalar("reduce_cmd")));
    if (command != "idle") {
      if (!inst.has("reduce_op")) {
        fail("missing-operand", "reduce_cmd=" + command + " needs reduce_op");
      } else {
        const AluOp r = alu(inst, "reduce_op");
        // A reduce_op that is no reduction at all is reported by check_instruction's reduce-op rule.
        if (alu_op_is_reduction(r) && r != AluOp::add && r != AluOp::maximum && r != AluOp::minimum) {
          fail("reduce-op", "activate2's reduce_op must be add, maximum or minimum, not " + std::string(alu_op_name(r)));
        }
      }
    }
    const AccessPattern* i0 = given(inst, "imm0");
    const AccessPattern* i1 = given(inst, "imm1");
    if (i0 && i1 && i0->dtype != i1->dtype) {
      fail("operand-dtype", "imm0 and imm1 must share a dtype, not " + std::string(dtype_name(i0->dtype)) + " / " +
                                std::string(dtype_name(i1->dtype)));
    }
    if (const AccessPattern* data = given(inst, "data")) {
      for (const char* name : {"imm0", "imm1", "relu_param"}) per_partition(inst, name, data->partitions());
      shape_is(inst, "reduce_res", data->partitions(), 1);
    }
  }

  // ISA nc_stream_shuffle: 32 mask entries in 0..31 or 255, dst.dtype = src.dtype (not packed MX), equal elements per
  // partition, every mask entry a dst partition uses naming a src partition the access has, and the start partitions
  // the hardware allows for num_active = ceil(max(src, dst partitions) / 32) * 32: 0 for 96/128, 0 or 64 for 64, a
  // multiple of 32 for 32.
  void check_stream_shuffle(const Instruction& inst) {
    constexpr uint32_t kQuadrant = 32;
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* src = given(inst, "src");
    const std::vector<int64_t>& mask = inst.list("shuffle_mask");
    bool mask_ok = mask.size() == kQuadrant;
    for (int64_t m : mask) mask_ok = mask_ok && ((m >= 0 && m < int64_t{kQuadrant}) || m == 255);
    if (!mask_ok) fail("stream-shuffle", "shuffle_mask must be 32 entries, each 0..31 or 255");
    if (!dst || !src) return;
    if (dst->dtype != src->dtype) {
      fail("stream-shuffle", "dst.dtype must match src.dtype (" + std::string(dtype_name(src->dtype)) + "), not " +
                                 std::string(dtype_name(dst->dtype)));
    }
    if (is_mx_x4(src->dtype)) fail("stream-shuffle", "nc_stream_shuffle does not move packed MX dtypes");
    if (dst->free_elements() != src->free_elements()) {
      fail("operand-shape", "dst has " + std::to_string(dst->free_elements()) + " elements per partition but src " +
                                std::to_string(src->free_elements()));
    }
    if (mask_ok) {
      for (uint32_t p = 0; p < dst->partitions(); ++p) {
        const int64_t m = mask[p % kQuadrant];
        if (m != 255 && (p / kQuadrant) * kQuadrant + uint32_t(m) >= src->partitions()) {
          fail("stream-shuffle", "dst partition " + std::to_string(p) + " reads src partition " +
                                     std::to_string((p / kQuadrant) * kQuadrant + uint32_t(m)) + ", but src has " +
                                     std::to_string(src->partitions()));
          break;
        }
      }
    }
    const uint32_t active = (std::max(src->partitions(), dst->partitions()) + kQuadrant - 1) / kQuadrant * kQuadrant;
    const uint32_t align = active > 64 ? 128 : active;  // 96/128: start 0; 64: 0 or 64; 32: a multiple of 32
    for (const char* name : {"dst", "src"}) {
      const AccessPattern& ap = inst.tensor(name);
      const uint32_t start = alloc(ap).base_partition + ap.start_partition;
      if (start % align != 0) {
        fail("stream-shuffle", std::string(name) + " starts at partition " + std::to_string(start) + "; with " +
                                   std::to_string(active) + " active partitions it must start at a multiple of " +
                                   std::to_string(align));
      }
    }
  }

  // ISA quantize_mx: src bf16/fp16 [32k, 4F] (k <= 4), dst mxfp8_e4m3/e5m2 [32k, F], dst_scale fp8_e8m0/uint8 with
  // F columns and the scale rows nc_matmul_mx reads (4 per quadrant at one offset <= 28); all in SBUF.
  void check_quantize_mx(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* src = given(inst, "src");
    const AccessPattern* scale = given(inst, "dst_scale");
    if (!dst || !src || !scale) return;
    for (const char* name : {"dst", "src", "dst_scale"}) {
      if (alloc(inst.tensor(name)).space != MemorySpace::sbuf) fail("quantize-mx", std::string(name) + " must be in SBUF");
    }
    if (src->dtype != DType::bf16 && src->dtype != DType::fp16) {
      fail("quantize-mx", "src must be bf16 or fp16, not " + std::string(dtype_name(src->dtype)));
    }
    if (dst->dtype != DType::mxfp8_e4m3 && dst->dtype != DType::mxfp8_e5m2) {
      fail("quantize-mx", "dst must be mxfp8_e4m3 or mxfp8_e5m2, not " + std::string(dtype_name(dst->dtype)));
    }
    if (scale->dtype != DType::fp8_e8m0 && scale->dtype != DType::uint8) {
      fail("quantize-mx", "dst_scale must be fp8_e8m0 (float8_e8m0fnu) or uint8, not " + std::string(dtype_name(scale->dtype)));
    }
    const uint32_t p = src->partitions();
    if (p % kMxQuadrant != 0) fail("quantize-mx", "src has " + std::to_string(p) + " partitions, not a multiple of 32");
    if (src->free_elements() % 4 != 0) {
      fail("quantize-mx", "src has " + std::to_string(src->free_elements()) + " elements per partition, not a multiple of 4");
    }
    shape_is(inst, "dst", p, src->free_elements() / 4);
    const uint32_t quadrants = std::max<uint32_t>(1, (p + kMxQuadrant - 1) / kMxQuadrant);
    const uint32_t rows_needed = kMxQuadrant * (quadrants - 1) + kMxScalesPerQuadrant;
    const uint32_t offset = (alloc(*scale).base_partition + scale->start_partition) % kMxQuadrant;
    if (scale->partitions() < rows_needed || scale->free_elements() != src->free_elements() / 4 ||
        offset + kMxScalesPerQuadrant > kMxQuadrant) {
      fail("quantize-mx", "dst_scale is " + shape_text(*scale) + " at quadrant offset " + std::to_string(offset) + "; " +
                              std::to_string(p) + " partitions need at least " + std::to_string(rows_needed) +
                              " scale partitions (4 per quadrant, offset <= 28) and " +
                              std::to_string(src->free_elements() / 4) + " columns");
    }
  }

  // ISA sequence_bounds: segment_ids [1, n] and dst [1, 2n] (NKI's [1, 2, n]), both fp32 or int32, in SBUF. That the
  // ids are non-negative integers is a value, checked by the interpreter.
  void check_sequence_bounds(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* ids = given(inst, "segment_ids");
    if (!dst || !ids) return;
    for (const char* name : {"dst", "segment_ids"}) {
      const AccessPattern& ap = inst.tensor(name);
      if (alloc(ap).space != MemorySpace::sbuf) fail("sequence-bounds", std::string(name) + " must be in SBUF");
      if (ap.dtype != DType::fp32 && ap.dtype != DType::int32) {
        fail("sequence-bounds", std::string(name) + " must be fp32 or int32, not " + std::string(dtype_name(ap.dtype)));
      }
    }
    if (ids->partitions() != 1) {
      fail("sequence-bounds", "segment_ids must be on one partition, got " + shape_text(*ids));
    }
    shape_is(inst, "dst", 1, 2 * ids->free_elements());
  }

  // ISA local_gather: uint16 index, dst.dtype = src_buffer.dtype (not packed MX), src_buffer/index/dst on the same whole
  // 16-partition groups (one GpSimd core each: start a multiple of 16), num_elem_per_idx in {1, 2, 4, 8, 16, 32},
  // 1 <= num_valid_indices <= min(4096, 16 x index's elements per partition), dst num_valid_indices x num_elem_per_idx
  // per partition; all in SBUF.
  void check_local_gather(const Instruction& inst) {
    constexpr uint32_t kGroup = 16;          // ISA: each GpSimd core connects to 16 SBUF partitions
    constexpr int64_t kMaxIndices = 4096;    // ISA: at most 4096 indices per core
    const AccessPattern* dst = given(inst, "dst");
    const AccessPattern* src = given(inst, "src_buffer");
    const AccessPattern* index = given(inst, "index");
    if (!dst || !src || !index) return;
    for (const char* name : {"dst", "src_buffer", "index"}) {
      if (alloc(inst.tensor(name)).space != MemorySpace::sbuf) fail("local-gather", std::string(name) + " must be in SBUF");
    }
    if (index->dtype != DType::uint16) fail("local-gather", "index must be uint16, not " + std::string(dtype_name(index->dtype)));
    if (dst->dtype != src->dtype) {
      fail("local-gather", "dst.dtype must match src_buffer.dtype (" + std::string(dtype_name(src->dtype)) + "), not " +
                               std::string(dtype_name(dst->dtype)));
    }
    if (is_mx_x4(src->dtype)) fail("local-gather", "local_gather does not move packed MX dtypes");
    auto start = [&](const AccessPattern& ap) { return alloc(ap).base_partition + ap.start_partition; };
    if (src->partitions() != index->partitions() || dst->partitions() != src->partitions() ||
        src->partitions() % kGroup != 0 || start(*src) % kGroup != 0 || start(*index) != start(*src) ||
        start(*dst) != start(*src)) {
      fail("local-gather", "src_buffer " + shape_text(*src) + " at partition " + std::to_string(start(*src)) +
                               ", index " + shape_text(*index) + " at " + std::to_string(start(*index)) + " and dst " +
                               shape_text(*dst) + " at " + std::to_string(start(*dst)) +
                               " must cover the same whole 16-partition groups");
    }
    const int64_t e = static_cast<int64_t>(inst.scalar("num_elem_per_idx"));
    if (e != 1 && e != 2 && e != 4 && e != 8 && e != 16 && e != 32) {
      fail("local-gather", "num_elem_per_idx must be 1, 2, 4, 8, 16 or 32, not " + std::to_string(e));
      return;
    }
    const int64_t per_core = int64_t{kGroup} * int64_t(index->free_elements());
    const int64_t valid = inst.has("num_valid_indices") ? static_cast<int64_t>(inst.scalar("num_valid_indices")) : per_core;
    if (valid < 1 || valid > per_core || valid > kMaxIndices) {
      fail("local-gather", "num_valid_indices must be 1 .. min(4096, " + std::to_string(per_core) +
                               " indices per 16-partition group), not " + std::to_string(valid));
      return;
    }
    shape_is(inst, "dst", src->partitions(), uint64_t(valid * e));
  }

  // ISA topk: bf16 source in SBUF on a multiple of 16 partitions, 8 <= n < 65536, 1 <= K <= n with K < 32768,
  // ceil(n / 16) source columns, val_dst bf16 and idx_dst uint32 [P, K] in SBUF.
  void check_topk(const Instruction& inst) {
    const AccessPattern* src = given(inst, "src");
    const AccessPattern* values = given(inst, "val_dst");
    const AccessPattern* indices = given(inst, "idx_dst");
    if (!src || !values || !indices) return;
    const int64_t n = static_cast<int64_t>(inst.scalar("n"));
    const uint64_t k = values->free_elements();
    for (const char* name : {"src", "val_dst", "idx_dst"}) {
      if (alloc(inst.tensor(name)).space != MemorySpace::sbuf) fail("topk", std::string(name) + " must be in SBUF");
    }
    if (src->dtype != DType::bf16 || values->dtype != DType::bf16) {
      fail("topk", "src and val_dst must be bf16, not " + std::string(dtype_name(src->dtype)) + " / " +
                       std::string(dtype_name(values->dtype)));
    }
    if (indices->dtype != DType::uint32) fail("topk", "idx_dst must be uint32, not " + std::string(dtype_name(indices->dtype)));
    if (src->partitions() % 16 != 0) {
      fail("topk", "src has " + std::to_string(src->partitions()) + " partitions; topk needs a multiple of 16");
    }
    if (n < 8 || n >= 65536 || k < 1 || k >= 32768 || int64_t(k) > n) {
      fail("topk", "topk needs 8 <= n < 65536 and 1 <= K <= n, K < 32768; got n = " + std::to_string(n) +
                       ", K = " + std::to_string(k));
    } else if (src->free_elements() < uint64_t(n + 15) / 16) {
      fail("topk", "src has " + std::to_string(src->free_elements()) + " columns; n = " + std::to_string(n) +
                       " needs ceil(n / 16)");
    }
    shape_is(inst, "val_dst", src->partitions(), k);
    shape_is(inst, "idx_dst", src->partitions(), k);
  }

  // Registers and control flow (isa/control_flow.h); the nesting of loops is checked over the program (run()).
  void check_registers(const Instruction& inst) {
    const InstructionSpec& spec = inst.spec();
    for (size_t i = 0; i < spec.operands.size(); ++i) {
      const OperandSpec& operand = spec.operands[i];
      if (operand.kind != OperandKind::reg || !((inst.present_mask >> i) & 1u)) continue;
      double index = inst.scalar(operand.name);
      if (index < 0 || index >= kRegisterCount) {
        fail("register-index", "operand '" + operand.name + "': register r" + std::to_string(int64_t(index)) +
                                   " does not exist (the register file has r0..r" +
                                   std::to_string(kRegisterCount - 1) + ")");
      }
    }
    auto int32_immediate = [&](const char* name) {
      double value = inst.scalar(name);
      if (value < -2147483648.0 || value > 2147483647.0) {
        fail("register-immediate", std::string("operand '") + name + "': " + std::to_string(int64_t(value)) +
                                       " does not fit a 32-bit register");
      }
    };
    auto one_integer = [&](const char* name) {
      if (!inst.has(name) || !inst.tensor(name).present()) return;
      const AccessPattern& ap = inst.tensor(name);
      if (!is_register_dtype(ap.dtype)) {
        fail("register-tensor", std::string("operand '") + name + "' is " + std::string(dtype_name(ap.dtype)) +
                                    "; a register moves an integer dtype (int8/16/32, uint8/16/32)");
      }
      if (ap.elements() != 1) {
        fail("register-tensor", std::string("operand '") + name + "' has " + std::to_string(ap.elements()) +
                                    " elements; a register moves one");
      }
    };
    switch (inst.opcode) {
      case Opcode::register_move:
      case Opcode::register_add:
      case Opcode::register_sub:
      case Opcode::register_mul:
      case Opcode::register_compare: int32_immediate("imm"); break;
      case Opcode::register_load: one_integer("src"); break;
      case Opcode::register_store: one_integer("dst"); break;
      case Opcode::loop_begin:
        if (inst.has("count") == inst.has("count_reg")) {
          fail("loop-count", "give exactly one of count (an immediate) and count_reg (a register)");
        } else if (inst.has("count") && inst.scalar("count") < 0) {
          fail("loop-count", "count " + std::to_string(int64_t(inst.scalar("count"))) + " is negative");
        }
        break;
      default: break;
    }
  }

  // loop_begin / loop_end and while_begin / while_end nest properly.
  void check_control_nesting() {
    std::vector<size_t> open;
    const auto& code = m_program.instructions;
    for (size_t i = 0; i < code.size(); ++i) {
      Opcode opcode = code[i].opcode;
      if (opcode == Opcode::loop_begin || opcode == Opcode::while_begin) {
        open.push_back(i);
      } else if (opcode == Opcode::loop_end || opcode == Opcode::while_end) {
        Opcode wanted = opcode == Opcode::loop_end ? Opcode::loop_begin : Opcode::while_begin;
        if (open.empty()) {
          add(long(i), "control-nesting", "no open " + instruction_spec(wanted).name + " to end");
        } else if (code[open.back()].opcode != wanted) {
          add(long(i), "control-nesting", "ends the " + code[open.back()].spec().name + " of instruction " +
                                              std::to_string(open.back()) + "; it needs " +
                                              (wanted == Opcode::loop_begin ? "while_end" : "loop_end"));
          open.pop_back();
        } else {
          open.pop_back();
        }
      }
    }
    for (size_t i : open) add(long(i), "control-nesting", "never ended");
  }

  void check_tensor_reduce(const Instruction& inst) {
    const AccessPattern* data = given(inst, "data");
    reduction_op(inst, "op");
    if (!data) return;
    std::vector<int64_t> axes = inst.list("axis");
    std::sort(axes.begin(), axes.end());
    int dims = data->num_free_dims;
    if (axes.empty()) {
      fail("reduce-axes", "axis lists no axis to reduce");
      return;
    }
    for (size_t k = 0; k < axes.size(); ++k) {
      if (axes[k] < 1 || axes[k] > dims) {
        fail("reduce-axes", "axis " + std::to_string(axes[k]) + " is not a free axis of data (free axes are 1.." +
                                std::to_string(dims) + ")");
        return;
      }
      if (axes[k] != dims - static_cast<int64_t>(axes.size() - 1 - k)) {
        fail("reduce-axes", "axis must list the last free axes contiguously, ending at axis " + std::to_string(dims));
        return;
      }
    }
    uint64_t inner = 1;
    for (int64_t a : axes) inner *= data->free[a - 1].size;
    shape_is(inst, "dst", data->partitions(), inner ? data->free_elements() / inner : 0);
    AluOp op = alu(inst, "op");
    if (alu_op_is_bitvec(op)) {
      integer_operand(inst, "data", op);
      integer_operand(inst, "dst", op);
    }
  }

  // One rule set per opcode, the same the semantics (isa/semantics/) enforce on values.
  void check_operand_shapes(const Instruction& inst) {
    const AccessPattern* dst = given(inst, "dst");
    auto comparison = [&](const char* name, bool allow_not_equal) {
      AluOp op = alu(inst, name);
      bool ok = op == AluOp::equal || op == AluOp::less || op == AluOp::less_equal || op == AluOp::greater ||
                op == AluOp::greater_equal || (allow_not_equal && op == AluOp::not_equal);
      if (!ok) {
        fail("alu-op", std::string(name) + " must be a comparison operator, not " + std::string(alu_op_name(op)));
      }
    };
    switch (inst.opcode) {
      case Opcode::nc_transpose: transposed(dst, given(inst, "data")); break;
      case Opcode::activation:
      case Opcode::activation_reduce: {
        same_shape(inst, "dst", "data");
        const AccessPattern* data = given(inst, "data");
        if (!data) break;
        per_partition(inst, "scale", data->partitions());
        per_partition(inst, "bias", data->partitions());
        if (given(inst, "reduce_res")) {
          if (!inst.has("reduce_op")) fail("missing-operand", "reduce_res is given but reduce_op is not");
          shape_is(inst, "reduce_res", data->partitions(), 1);
        }
        if (inst.spec().find("reduce_cmd") && !inst.has("reduce_op")) {
          const std::string_view command = inst.enum_word("reduce_cmd");
          if (command != "auto" && command != "idle") {
            fail("missing-operand", "reduce_cmd=" + std::string(command) + " needs reduce_op");
          }
        }
        break;
      }
      case Opcode::tensor_tensor: {
        same_shape(inst, "data1", "data2");
        same_shape(inst, "dst", "data1");
        AluOp op = alu(inst, "op");
        if (alu_op_is_bitvec(op)) {
          for (const char* name : {"data1", "data2", "dst"}) integer_operand(inst, name, op);
        }
        break;
      }
      case Opcode::tensor_scalar: same_shape(inst, "dst", "data"); break;
      case Opcode::scalar_tensor_tensor: {
        same_shape(inst, "dst", "data");
        same_shape(inst, "operand1", "data");
        if (alu_op_is_bitvec(alu(inst, "op0")) || alu_op_is_bitvec(alu(inst, "op1"))) {
          fail("alu-op", "scalar_tensor_tensor takes arithmetic operators only, not bitvec");
        }
        if (const AccessPattern* data = given(inst, "data")) per_partition(inst, "operand0", data->partitions());
        break;
      }
      case Opcode::tensor_reduce: check_tensor_reduce(inst); break;
      case Opcode::tensor_copy:
      case Opcode::reciprocal: same_shape(inst, "dst", inst.opcode == Opcode::tensor_copy ? "src" : "data"); break;
      case Opcode::tensor_copy_predicated:
        same_shape(inst, "predicate", "dst");
        same_shape(inst, "src", "dst");
        break;
      case Opcode::select_reduce:
        same_shape(inst, "predicate", "dst");
        same_shape(inst, "on_true", "dst");
        if (dst) per_partition(inst, "on_false", dst->partitions());
        if (dst && given(inst, "reduce_res")) {
          if (inst.has("reduce_op")) reduction_op(inst, "reduce_op");
          shape_is(inst, "reduce_res", dst->partitions(), 1);
        }
        break;
      case Opcode::range_select:
        same_shape(inst, "on_true_tile", "dst");
        comparison("comp_op0", false);
        comparison("comp_op1", false);
        if (!dst) break;
        shape_is(inst, "bound0", dst->partitions(), 1);
        shape_is(inst, "bound1", dst->partitions(), 1);
        if (given(inst, "reduce_res")) shape_is(inst, "reduce_res", dst->partitions(), 1);
        break;
      case Opcode::tensor_tensor_scan:
        same_shape(inst, "data0", "data1");
        same_shape(inst, "dst", "data0");
        if (const AccessPattern* data = given(inst, "data0")) per_partition(inst, "initial", data->partitions());
        break;
      case Opcode::bn_stats:
        if (const AccessPattern* data = given(inst, "data")) shape_is(inst, "dst", data->partitions(), 6);
        break;
      case Opcode::bn_aggr:
        if (const AccessPattern* data = given(inst, "data")) {
          if (data->free_elements() == 0 || data->free_elements() % 3 != 0) {
            fail("operand-shape", "data must hold (count, mean, var*count) triples, but has " +
                                      std::to_string(data->free_elements()) + " elements per partition");
          }
          shape_is(inst, "dst", data->partitions(), 2);
        }
        break;
      case Opcode::max8:
        if (const AccessPattern* src = given(inst, "src")) {
          if (src->free_elements() < 8) {
            fail("operand-shape", "src has " + std::to_string(src->free_elements()) +
                                      " elements per partition; max8 needs at least 8");
          }
          shape_is(inst, "dst", src->partitions(), 8);
        }
        break;
      case Opcode::nc_find_index8:
        if (dst && dtype_info(dst->dtype).is_float) {
          fail("integer-dtype", "dst must be an integer dtype (uint16 or uint32), not " +
                                    std::string(dtype_name(dst->dtype)));
        }
        if (const AccessPattern* data = given(inst, "data")) {
          shape_is(inst, "vals", data->partitions(), 8);
          shape_is(inst, "dst", data->partitions(), 8);
        }
        break;
      case Opcode::iota:
        if (dst) check_pattern(inst, dst->free_elements());
        break;
      case Opcode::affine_select:
        same_shape(inst, "on_true_tile", "dst");
        comparison("cmp_op", true);
        if (dst) check_pattern(inst, dst->free_elements());
        break;
      case Opcode::tensor_partition_reduce:
        reduction_op(inst, "op");
        if (const AccessPattern* data = given(inst, "data")) shape_is(inst, "dst", 1, data->free_elements());
        break;
      case Opcode::dma_transpose:
        if (const AccessPattern* indices = given(inst, "indices")) {
          // The gathered rows [indices' partitions, a table row] are what is transposed.
          if (!inst.list("src_shape").empty()) {
            if (inst.enum_is("oob_mode", "skip")) {
              fail("transpose-axes", "an N-d gathering DMA transpose takes oob_mode=error only");
            }
            check_permuted_transpose(inst, uint64_t(indices->partitions()) *
                                               (given(inst, "src") ? given(inst, "src")->free_elements() : 0));
          } else if (const AccessPattern* src = given(inst, "src")) {
            if (dst && (dst->partitions() != src->free_elements() || dst->free_elements() != indices->partitions())) {
              fail("operand-shape", "dst must be " + shape_text(uint32_t(src->free_elements()), indices->partitions()) +
                                        " to hold the transpose of " + std::to_string(indices->partitions()) +
                                        " gathered rows of " + std::to_string(src->free_elements()) + ", got " +
                                        shape_text(*dst));
            }
          }
        } else if (!inst.list("src_shape").empty()) {
          check_permuted_transpose(inst, given(inst, "src") ? given(inst, "src")->elements() : 0);
        } else {
          transposed(dst, given(inst, "src"));
        }
        [[fallthrough]];
      case Opcode::dma_copy:
      case Opcode::dma_gather:
      case Opcode::dma_scatter: {
        // The queues of one DMA engine (the timing model's queues; also checked there).
        int64_t queue = static_cast<int64_t>(inst.scalar("queue"));
        if (queue < 0 || queue >= int64_t(m_config.core.dma.queues_per_engine)) {
          fail("dma-queue", "DMA queue " + std::to_string(queue) + " does not exist (the config has " +
                                std::to_string(m_config.core.dma.queues_per_engine) + " per engine)");
        }
        break;
      }
      default: break;
    }
  }

  void check_matmul(const Instruction& inst) {
    const TensorEngineConfig& pe = m_config.core.tensor;
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& stationary = inst.tensor("stationary");
    const AccessPattern& moving = inst.tensor("moving");
    if (!dst.present() || !stationary.present() || !moving.present()) return;
    if (alloc(dst).space != MemorySpace::psum) fail("matmul-memory", "dst must be in PSUM");
    if (alloc(stationary).space != MemorySpace::sbuf) fail("matmul-memory", "stationary must be in SBUF");
    if (alloc(moving).space != MemorySpace::sbuf) fail("matmul-memory", "moving must be in SBUF");
    bool double_row = inst.scalar("perf_mode") == 1;
    for (const auto* operand : {"stationary", "moving"}) {
      DType dtype = inst.tensor(operand).dtype;
      if (!pe.rate_factor_by_dtype.count(dtype)) {
        fail("matmul-dtype", std::string("operand '") + operand + "': the Tensor engine of " +
                                 std::string(enum_name(m_config.generation)) + " does not take " +
                                 std::string(dtype_name(dtype)));
      } else if (is_mx_x4(dtype)) {
        fail("matmul-dtype", std::string("operand '") + operand + "': " + std::string(dtype_name(dtype)) +
                                 " is an MX x4 dtype; use nc_matmul_mx");
      }
      if (double_row && std::find(pe.double_row_dtypes.begin(), pe.double_row_dtypes.end(), dtype) ==
                            pe.double_row_dtypes.end()) {
        fail("matmul-double-row", std::string("operand '") + operand + "': double_row mode does not take " +
                                      std::string(dtype_name(dtype)) +
                                      (pe.double_row_dtypes.empty() ? " (no double_row mode on this generation)" : ""));
      }
    }
    auto is_fp32ish = [](DType d) { return d == DType::fp32 || d == DType::tf32; };
    if (is_fp32ish(stationary.dtype) != is_fp32ish(moving.dtype)) {
      fail("matmul-dtype-mix", "if one input is fp32/tf32 the other must be too");
    }
    if ((stationary.dtype == DType::fp8_e4m3 && moving.dtype == DType::fp8_e4m3fn) ||
        (stationary.dtype == DType::fp8_e4m3fn && moving.dtype == DType::fp8_e4m3)) {
      fail("matmul-dtype-mix", "legacy fp8_e4m3 and OCP fp8_e4m3fn cannot be mixed");
    }
    uint64_t k = stationary.partitions() * (double_row ? 2 : 1);
    uint64_t m = double_row ? stationary.free_elements() / 2 : stationary.free_elements();
    uint64_t n = double_row ? moving.free_elements() / 2 : moving.free_elements();
    if (double_row && (stationary.num_free_dims < 2 || stationary.free[0].size != 2 || moving.num_free_dims < 2 ||
                       moving.free[0].size != 2)) {
      fail("matmul-double-row", "double_row operands are [128, 2, F]: the first free dim must be 2");
    }
    if (stationary.partitions() != moving.partitions()) {
      fail("matmul-contraction", "stationary has " + std::to_string(stationary.partitions()) +
                                     " partitions but moving has " + std::to_string(moving.partitions()) +
                                     " (the contraction runs over partitions)");
    }
    if (stationary.partitions() > pe.pe_rows) {
      fail("matmul-contraction", "contraction over " + std::to_string(stationary.partitions()) +
                                     " partitions exceeds the " + std::to_string(pe.pe_rows) + " PE rows");
    }
    check_pe_tiling(inst, stationary.partitions(), m, double_row);
    (void)k;
    if (m > pe.max_stationary_free_size) {
      fail("matmul-stationary-size", "stationary free size " + std::to_string(m) + " exceeds " +
                                         std::to_string(pe.max_stationary_free_size));
    }
    // Transpose mode (trn2+) passes the input through the array: dst holds the input dtype, which
    // need not be a PSUM output dtype of ordinary matmuls (bf16 before trn3).
    const bool transpose_mode = inst.scalar("is_transpose") != 0 && m_config.generation >= Generation::trn2;
    check_matmul_output(dst, m, n, transpose_mode && stationary.dtype == dst.dtype);
    if (inst.scalar("is_transpose") != 0 && stationary.dtype != dst.dtype && m_config.generation >= Generation::trn2 &&
        dtype_size_bytes(stationary.dtype) != 1) {
      fail("matmul-transpose-dtype", "transpose mode writes the input dtype: dst must be " +
                                         std::string(dtype_name(stationary.dtype)));
    }
  }

  // PE tiling (ISA nc_matmul, trainium.md §6): tile_size = [rows, columns] of the PE array, each a multiple of
  // core.tensor.tile_granularity_rows (64 on v2, 32 on v3+) up to the array; tile_position = [row, column] aligned
  // to the tile; the stationary fits the tile (K partitions on its rows, M on its columns); double_row mode
  // cannot be combined with column tiling. Both given or neither.
  void check_pe_tiling(const Instruction& inst, uint64_t stationary_rows, uint64_t stationary_columns, bool double_row) {
    const std::vector<int64_t>& position = inst.list("tile_position");
    const std::vector<int64_t>& size = inst.list("tile_size");
    if (position.empty() && size.empty()) return;
    const TensorEngineConfig& pe = m_config.core.tensor;
    if (position.size() != 2 || size.size() != 2) {
      fail("matmul-pe-tiling", "tile_position and tile_size are both [row, column] pairs, given together");
      return;
    }
    const int64_t granularity = std::max<int64_t>(1, pe.tile_granularity_rows);
    const int64_t extent[2] = {int64_t(pe.pe_rows), int64_t(pe.pe_columns)};
    const char* axis[2] = {"row", "column"};
    for (int i = 0; i < 2; ++i) {
      if (size[i] < granularity || size[i] > extent[i] || size[i] % granularity != 0) {
        fail("matmul-pe-tiling", std::string("tile_size ") + axis[i] + " " + std::to_string(size[i]) +
                                     " must be a multiple of " + std::to_string(granularity) + " up to " +
                                     std::to_string(extent[i]) + " on " + std::string(enum_name(m_config.generation)));
        return;
      }
      if (position[i] < 0 || position[i] % size[i] != 0 || position[i] + size[i] > extent[i]) {
        fail("matmul-pe-tiling", std::string("tile_position ") + axis[i] + " " + std::to_string(position[i]) +
                                     " must be a multiple of the tile's " + std::to_string(size[i]) + " " + axis[i] +
                                     "s inside the " + std::to_string(extent[i]) + "-" + axis[i] + " array");
        return;
      }
    }
    if (int64_t(stationary_rows) > size[0] || int64_t(stationary_columns) > size[1]) {
      fail("matmul-pe-tiling", "stationary [" + std::to_string(stationary_rows) + ", " +
                                   std::to_string(stationary_columns) + "] does not fit the [" + std::to_string(size[0]) +
                                   ", " + std::to_string(size[1]) + "] PE tile");
    }
    if (double_row && size[1] != extent[1]) {
      fail("matmul-pe-tiling", "double_row mode cannot be combined with column tiling");
    }
  }

  // The PSUM output of nc_matmul / nc_matmul_mx: a dtype the Tensor engine writes, moving free size within the
  // limit for that dtype, dst = [m, n], and the PSUM bank rule.
  void check_matmul_output(const AccessPattern& dst, uint64_t m, uint64_t n, bool passes_input_dtype = false) {
    const TensorEngineConfig& pe = m_config.core.tensor;
    auto moving_limit = pe.max_moving_free_size_by_psum_dtype.find(dst.dtype);
    if (moving_limit == pe.max_moving_free_size_by_psum_dtype.end() && !passes_input_dtype) {
      fail("matmul-dst-dtype", "dst dtype " + std::string(dtype_name(dst.dtype)) + " is not a PSUM output of the " +
                                   std::string(enum_name(m_config.generation)) + " Tensor engine");
    }
    if (moving_limit != pe.max_moving_free_size_by_psum_dtype.end() && n > moving_limit->second) {
      fail("matmul-moving-size", "moving free size " + std::to_string(n) + " exceeds the " +
                                     std::to_string(moving_limit->second) + " allowed with a " +
                                     std::string(dtype_name(dst.dtype)) + " PSUM output on " +
                                     std::string(enum_name(m_config.generation)));
    }
    if (dst.partitions() != m || dst.free_elements() != n) {
      fail("matmul-shape", "dst is [" + std::to_string(dst.partitions()) + ", " +
                               std::to_string(dst.free_elements()) + "] but stationary.T @ moving is [" +
                               std::to_string(m) + ", " + std::to_string(n) + "]");
    }
    // An accumulation group lives in one PSUM bank unless the generation lets moving span PSUM.
    const Allocation& a = alloc(dst);
    uint64_t bank = m_config.core.psum.bank_bytes;
    bool spans_banks_allowed = moving_limit != pe.max_moving_free_size_by_psum_dtype.end() &&
                               uint64_t(moving_limit->second) * dtype_size_bytes(dst.dtype) > bank;
    if (a.space == MemorySpace::psum && dst.free_contiguous() && !spans_banks_allowed) {
      uint64_t first = a.base_byte + uint64_t(dst.offset) * dtype_size_bytes(dst.dtype);
      uint64_t last = first + dst.free_elements() * dtype_size_bytes(dst.dtype) - 1;
      if (first / bank != last / bank) {
        fail("psum-bank-crossing", "dst bytes " + std::to_string(first) + ".." + std::to_string(last) +
                                       " cross a " + std::to_string(bank) + "-byte PSUM bank boundary");
      }
    }
  }

  // nc_matmul_mx (ISA, A-V4): x4 data, E8M0 scales per 8 partitions x 4 values, row tiling only.
  void check_matmul_mx(const Instruction& inst) {
    const TensorEngineConfig& pe = m_config.core.tensor;
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& stationary = inst.tensor("stationary");
    const AccessPattern& moving = inst.tensor("moving");
    const AccessPattern& stationary_scale = inst.tensor("stationary_scale");
    const AccessPattern& moving_scale = inst.tensor("moving_scale");
    if (!dst.present() || !stationary.present() || !moving.present() || !stationary_scale.present() ||
        !moving_scale.present()) {
      return;
    }
    if (alloc(dst).space != MemorySpace::psum) fail("matmul-memory", "dst must be in PSUM");
    for (const auto* operand : {"stationary", "moving", "stationary_scale", "moving_scale"}) {
      if (alloc(inst.tensor(operand)).space != MemorySpace::sbuf) {
        fail("matmul-memory", std::string(operand) + " must be in SBUF");
      }
    }
    for (const auto* operand : {"stationary", "moving"}) {
      DType dtype = inst.tensor(operand).dtype;
      if (!is_mx_x4(dtype)) {
        fail("matmul-mx-dtype", std::string("operand '") + operand + "' must be mxfp8_e4m3, mxfp8_e5m2 or "
                                "mxfp4_e2m1 (NKI float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4), not " +
                                    std::string(dtype_name(dtype)));
      } else if (!pe.rate_factor_by_dtype.count(dtype)) {
        fail("matmul-mx-dtype", std::string("operand '") + operand + "': the Tensor engine of " +
                                    std::string(enum_name(m_config.generation)) + " does not take " +
                                    std::string(dtype_name(dtype)));
      }
    }
    for (const auto* operand : {"stationary_scale", "moving_scale"}) {
      DType dtype = inst.tensor(operand).dtype;
      if (dtype != DType::uint8 && dtype != DType::fp8_e8m0) {
        fail("matmul-mx-scale", std::string("operand '") + operand + "' must be fp8_e8m0 (float8_e8m0fnu) or uint8, not " +
                                    std::string(dtype_name(dtype)));
      }
    }
    if (dst.dtype != DType::fp32 && dst.dtype != DType::bf16) {
      fail("matmul-dst-dtype", "nc_matmul_mx writes fp32 or bf16, not " + std::string(dtype_name(dst.dtype)));
    }
    uint32_t k = stationary.partitions();
    if (moving.partitions() != k) {
      fail("matmul-contraction", "stationary has " + std::to_string(k) + " partitions but moving has " +
                                     std::to_string(moving.partitions()) + " (the contraction runs over partitions)");
    }
    if (k % kMxQuadrant != 0 || k > pe.pe_rows) {
      fail("matmul-contraction", "nc_matmul_mx contracts over a multiple of 32 partitions, at most " +
                                     std::to_string(pe.pe_rows) + "; stationary has " + std::to_string(k));
    }
    uint64_t m = stationary.free_elements(), n = moving.free_elements();
    if (m > pe.max_stationary_free_size || m % 2 != 0) {
      fail("matmul-stationary-size", "stationary free size " + std::to_string(m) + " must be even and at most " +
                                         std::to_string(pe.max_stationary_free_size));
    }
    check_matmul_output(dst, m, n);
    // Scales: the groups of data quadrant q sit at scale partitions 32q + o .. 32q + o + 3, o = the scale tile's
    // offset in its quadrant; one scale per column.
    uint32_t quadrants = std::max<uint32_t>(1, (k + kMxQuadrant - 1) / kMxQuadrant);
    uint32_t rows_needed = kMxQuadrant * (quadrants - 1) + kMxScalesPerQuadrant;
    for (const auto* operand : {"stationary_scale", "moving_scale"}) {
      const AccessPattern& scale = inst.tensor(operand);
      uint64_t columns = std::string(operand) == "stationary_scale" ? m : n;
      uint32_t offset = (alloc(scale).base_partition + scale.start_partition) % kMxQuadrant;
      if (scale.partitions() < rows_needed || scale.free_elements() != columns ||
          offset + kMxScalesPerQuadrant > kMxQuadrant) {
        fail("matmul-mx-scale", std::string("operand '") + operand + "' is [" + std::to_string(scale.partitions()) +
                                    ", " + std::to_string(scale.free_elements()) + "] at quadrant offset " +
                                    std::to_string(offset) + "; " + std::to_string(k) +
                                    " data partitions need at least " + std::to_string(rows_needed) +
                                    " scale partitions (4 per 32-partition quadrant, at the same offset <= 28) and " +
                                    std::to_string(columns) + " columns");
      }
    }
    check_mx_tiling(inst, k);
  }

  // Row tiling only: tile_size = [row_size, 128] with row_size 32/64/128 and at least the stationary partitions;
  // tile_position = [start_row, 0] with start_row a multiple of row_size below 128; both given or neither.
  void check_mx_tiling(const Instruction& inst, uint32_t k) {
    const std::vector<int64_t>& position = inst.list("tile_position");
    const std::vector<int64_t>& size = inst.list("tile_size");
    if (position.empty() && size.empty()) return;
    int64_t rows = m_config.core.tensor.pe_rows, columns = m_config.core.tensor.pe_columns;
    if (position.size() != 2 || size.size() != 2) {
      fail("matmul-mx-tiling", "tile_position and tile_size are both [row, column] pairs, given together");
      return;
    }
    if (size[1] != columns || position[1] != 0) {
      fail("matmul-mx-tiling", "nc_matmul_mx tiles rows only: tile_size column must be " + std::to_string(columns) +
                                   " and tile_position column 0");
    }
    if (size[0] != 32 && size[0] != 64 && size[0] != rows) {
      fail("matmul-mx-tiling", "tile_size row " + std::to_string(size[0]) + " must be 32, 64 or " +
                                   std::to_string(rows));
    } else if (position[0] < 0 || position[0] >= rows || position[0] % size[0] != 0) {
      fail("matmul-mx-tiling", "tile_position row " + std::to_string(position[0]) + " must be a multiple of " +
                                   std::to_string(size[0]) + " below " + std::to_string(rows));
    } else if (int64_t(k) > size[0]) {
      fail("matmul-mx-tiling", "stationary has " + std::to_string(k) + " partitions, more than the " +
                                   std::to_string(size[0]) + "-row tile");
    }
  }

  void check_transpose(const Instruction& inst) {
    const AccessPattern& data = inst.tensor("data");
    const AccessPattern& dst = inst.tensor("dst");
    if (!data.present() || !dst.present()) return;
    if (inst.engine == Engine::tensor) {
      if (alloc(dst).space != MemorySpace::psum) fail("transpose-memory", "a Tensor-engine transpose writes PSUM");
      if (alloc(data).space != MemorySpace::sbuf) fail("transpose-memory", "a Tensor-engine transpose reads SBUF");
      if (data.partitions() > m_config.core.tensor.pe_rows || data.free_elements() > m_config.core.tensor.pe_columns) {
        fail("transpose-size", "the Tensor engine transposes at most [128, 128]");
      }
    } else if (data.partitions() > kVectorTransposeMax || data.free_elements() > kVectorTransposeMax) {
      fail("transpose-size", "the Vector engine transposes at most [32, 32]");
    }
  }

  void check_dma(const Instruction& inst) {
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& src = inst.tensor("src");
    if (!dst.present() || !src.present()) return;
    const bool gathers = inst.opcode == Opcode::dma_transpose && inst.has("indices");
    if (gathers) check_gather_transpose(inst);
    if (!gathers && dst.elements() != src.elements()) {
      fail("dma-size", "dst has " + std::to_string(dst.elements()) + " elements but src has " +
                           std::to_string(src.elements()));
    }
    if (inst.opcode == Opcode::dma_copy && inst.scalar("dst_rmw_op") == 1) {
      if (src.dtype != dst.dtype || (dst.dtype != DType::bf16 && dst.dtype != DType::fp32)) {
        fail("dma-read-add-write", "read-add-write needs matching bf16 or fp32 dtypes (A-V4)");
      }
      if (inst.enum_is("oob_mode", "skip")) {
        // nki.isa.dma_copy: "If dst_rmw_op is specified, only oob_mode=oob_mode.error is allowed."
        fail("dma-read-add-write", "read-add-write takes oob_mode=error only");
      }
    }
    // DMA: "When either sw_dge or hw_dge mode is used, the src and dst tensors can have a dynamic start address";
    // descriptors made before the run (dge_mode none) cannot follow a register. The mode is named, not left to a
    // compiler, because the two cost differently.
    if (inst.opcode == Opcode::dma_copy && (dst.dynamic() || src.dynamic()) && !inst.enum_is("dge_mode", "swdge") &&
        !inst.enum_is("dge_mode", "hwdge")) {
      fail("dynamic-address-dge", "a dynamic address (scalar_offset) needs descriptors made at run time: "
                                  "dge_mode=hwdge or dge_mode=swdge");
    }
    if (inst.opcode == Opcode::dma_transpose && (dst.dynamic() || src.dynamic())) {
      fail("dynamic-address-dge", "dma_transpose takes static addresses only");
    }
    if (inst.opcode == Opcode::dma_transpose) {
      if (!m_config.core.dma.transpose_supported) fail("dma-transpose", "this generation's DMA cannot transpose");
      // A-V3: "2-byte and 4-byte dtypes, bit-accurate" (the 2-byte limit of trainium.md's tables is the hardware
      // DGE's, NKI dma_transpose dge_mode=hwdge; nki-library's attention_tkg transposes fp32 K tiles).
      const uint32_t size = dtype_size_bytes(src.dtype);
      if ((size != 2 && size != 4) || src.dtype != dst.dtype) {
        fail("dma-transpose", "DMA transpose moves 2- and 4-byte dtypes unchanged");
      }
    }
  }

  // An indirect DMA (dma_gather, dma_scatter): the table in HBM (src of a gather, dst of a
  // scatter), the rows in SBUF, one 32-bit row index per SBUF partition. False when an operand is
  // missing (reported elsewhere).
  bool check_indirect_dma(const Instruction& inst, const char* rule, bool table_is_dst) {
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& src = inst.tensor("src");
    const AccessPattern& indices = inst.tensor("indices");
    if (!dst.present() || !src.present() || !indices.present()) return false;
    for (const char* name : {"dst", "src"}) {
      const bool table = (std::string(name) == "dst") == table_is_dst;
      const MemorySpace space = table ? MemorySpace::hbm : MemorySpace::sbuf;
      if (alloc(inst.tensor(name)).space != space) {
        fail(rule, std::string(name) + (table ? " (the table) must be in HBM" : " must be in SBUF"));
      }
    }
    const AccessPattern& rows = table_is_dst ? src : dst;
    const AccessPattern& table = table_is_dst ? dst : src;
    const std::string side = table_is_dst ? "src" : "dst";
    if (alloc(indices).space != MemorySpace::sbuf) fail(rule, "indices must be in SBUF");
    if (indices.dtype != DType::int32 && indices.dtype != DType::uint32) {
      fail(rule, "indices must be int32 or uint32, not " + std::string(dtype_name(indices.dtype)));
    }
    if (indices.partitions() != rows.partitions() || indices.free_elements() != 1) {
      fail(rule, "indices is [" + std::to_string(indices.partitions()) + ", " +
                     std::to_string(indices.free_elements()) + "] but must be [" + std::to_string(rows.partitions()) +
                     ", 1] (one row index per " + side + " partition)");
    }
    if (rows.free_elements() != table.free_elements()) {
      fail(rule, side + " rows have " + std::to_string(rows.free_elements()) + " elements but table rows have " +
                     std::to_string(table.free_elements()));
    }
    return true;
  }

  // dma_transpose with indices: the table in HBM, dst in SBUF, one 32-bit row index per gathered row (dst's free
  // elements), read by the software DGE.
  void check_gather_transpose(const Instruction& inst) {
    const AccessPattern& indices = inst.tensor("indices");
    if (alloc(inst.tensor("src")).space != MemorySpace::hbm) fail("dma-gather", "src (the table) must be in HBM");
    if (alloc(inst.tensor("dst")).space != MemorySpace::sbuf) fail("dma-gather", "dst must be in SBUF");
    if (alloc(indices).space != MemorySpace::sbuf) fail("dma-gather", "indices must be in SBUF");
    if (indices.dtype != DType::int32 && indices.dtype != DType::uint32) {
      fail("dma-gather", "indices must be int32 or uint32, not " + std::string(dtype_name(indices.dtype)));
    }
    if (indices.free_elements() != 1) fail("dma-gather", "indices holds one row index per partition ([P, 1])");
  }

  // dma_gather: table rows from HBM into SBUF partitions.
  void check_dma_gather(const Instruction& inst) { check_indirect_dma(inst, "dma-gather", false); }

  // dma_scatter: SBUF rows into an HBM table, one 32-bit row index per source partition; the
  // read-add-write form takes what dma_copy's does (A-V4).
  void check_dma_scatter(const Instruction& inst) {
    if (!check_indirect_dma(inst, "dma-scatter", true)) return;
    const AccessPattern& dst = inst.tensor("dst");
    const AccessPattern& src = inst.tensor("src");
    if (inst.scalar("dst_rmw_op") == 1 &&
        (src.dtype != dst.dtype || (dst.dtype != DType::bf16 && dst.dtype != DType::fp32))) {
      fail("dma-read-add-write", "read-add-write needs matching bf16 or fp32 dtypes (A-V4)");
    }
    if (inst.scalar("dst_rmw_op") == 1 && inst.enum_is("oob_mode", "skip")) {
      // nki.isa.dma_copy: "If dst_rmw_op is specified, only oob_mode=oob_mode.error is allowed."
      fail("dma-read-add-write", "read-add-write takes oob_mode=error only");
    }
  }

  void check_tensor_scalar(const Instruction& inst) {
    if (inst.engine != Engine::scalar || m_config.generation != Generation::trn2) return;
    // ISA: on trn2 the Scalar engine runs only (multiply, add), (multiply, -) and (add, -).
    AluOp op0 = static_cast<AluOp>(inst.scalar("op0"));
    bool has_op1 = inst.has("op1");
    AluOp op1 = has_op1 ? static_cast<AluOp>(inst.scalar("op1")) : AluOp::bypass;
    bool ok = (op0 == AluOp::multiply && (!has_op1 || op1 == AluOp::add)) || (op0 == AluOp::add && !has_op1);
    if (!ok) fail("scalar-engine-ops", "the trn2 Scalar engine runs tensor_scalar only as (multiply, add), "
                                       "(multiply) or (add)");
  }

  const Program& m_program;
  const HardwareConfig& m_config;
  long m_index = -1;
  std::vector<LegalityIssue> m_issues;
  double m_hbm_bytes = 0;
  bool m_hbm_full_reported = false;
};

}  // namespace

std::vector<LegalityIssue> find_legality_issues(const Program& program, const HardwareConfig& config) {
  return Checker(program, config).run();
}

std::string format_legality_issue(const Program& program, const LegalityIssue& issue) {
  std::string where = issue.instruction < 0 ? "program" : "instruction " + std::to_string(issue.instruction);
  if (issue.line) where += " (line " + std::to_string(issue.line) + ")";
  if (issue.instruction >= 0) where += " " + program.instructions[issue.instruction].spec().name;
  return where + ": " + issue.message + " [" + issue.rule + "]";
}

void check_program(const Program& program, const HardwareConfig& config) {
  std::vector<LegalityIssue> issues = find_legality_issues(program, config);
  if (issues.empty()) return;
  // A generated program can break one rule thousands of times; the first few say what is wrong.
  constexpr size_t kShown = 10;
  std::string message;
  for (size_t i = 0; i < issues.size() && i < kShown; ++i) {
    message += (message.empty() ? "" : "\n") + format_legality_issue(program, issues[i]);
  }
  if (issues.size() > kShown) message += "\n... and " + std::to_string(issues.size() - kShown) + " more issues";
  throw IsaError(message);
}

}  // namespace trnsim::isa
