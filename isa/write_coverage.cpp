#include "isa/write_coverage.h"

#include <algorithm>
#include <utility>

#include "isa/control_flow.h"
#include "isa/instruction.h"

namespace trnsim::isa {
namespace {

// Instructions that write every element of each output operand, reading none of it first. The others' outputs
// count as reads too (a matmul accumulating in PSUM, a predicated copy, a DMA adding to its destination or
// skipping an out-of-bounds address).
bool writes_outputs_whole(const Instruction& inst) {
  switch (inst.opcode) {
    case Opcode::activation:
    case Opcode::activation_reduce:
    case Opcode::activate2:
    case Opcode::tensor_tensor:
    case Opcode::tensor_scalar:
    case Opcode::scalar_tensor_tensor:
    case Opcode::tensor_reduce:
    case Opcode::tensor_copy:
    case Opcode::reciprocal:
    case Opcode::memset:
    case Opcode::iota:
    case Opcode::bn_stats:
    case Opcode::bn_aggr:
    case Opcode::nc_transpose:
      return true;
    case Opcode::dma_copy:
      return inst.enum_is("dst_rmw_op", "none") && inst.enum_is("oob_mode", "error");
    case Opcode::nc_matmul:
    case Opcode::nc_matmul_mx:
      // accumulate=false overwrites dst; true and auto (which adds where an earlier matmul left PSUM accumulating)
      // count as reading it.
      return inst.enum_is("accumulate", "false");
    default:
      return false;
  }
}

}  // namespace

bool reads_only_own_writes(const Program& program) {
  // Beyond these, the look costs more than it is worth (and zeroing is always right).
  constexpr size_t kMaxInstructions = size_t{1} << 14;
  constexpr size_t kMaxWrites = 512;
  if (program.instructions.size() > kMaxInstructions || needs_expansion(program)) return false;
  struct Box {
    OnChipMemory memory;
    uint32_t first_partition, end_partition;
    int64_t first_byte, end_byte;
  };
  auto box_of = [&](const AccessPattern& ap) {
    const Allocation& a = program.allocation(ap);
    const auto [low, high] = ap.element_range(/*with_partition=*/false);
    const int64_t esize = dtype_size_bytes(ap.dtype);
    const uint32_t first = a.base_partition + ap.start_partition;
    return Box{on_chip_memory(a.space), first, first + ap.partitions(), int64_t(a.base_byte) + low * esize,
               int64_t(a.base_byte) + (high + 1) * esize};
  };
  std::vector<Box> written;
  std::vector<Box> outputs;
  for (const Instruction& inst : program.instructions) {
    const bool whole = writes_outputs_whole(inst);
    outputs.clear();
    for (const OperandSpec& o : inst.spec().operands) {
      if (o.tensor_slot < 0) continue;
      const AccessPattern& ap = inst.tensors[size_t(o.tensor_slot)];
      if (!ap.present() || !is_on_chip(ap.space) || ap.elements() == 0) continue;
      if (ap.dynamic()) return false;
      const Box box = box_of(ap);
      if (o.kind == OperandKind::tensor_out && whole && ap.free_contiguous()) {
        outputs.push_back(box);
        continue;
      }
      const bool covered = std::any_of(written.begin(), written.end(), [&](const Box& w) {
        return w.memory == box.memory && w.first_partition <= box.first_partition &&
               box.end_partition <= w.end_partition && w.first_byte <= box.first_byte && box.end_byte <= w.end_byte;
      });
      if (!covered) return false;
    }
    for (Box box : outputs) {
      // A box that continues a written one (same partitions and touching bytes, or same bytes and touching
      // partitions) joins it, so that a tile written in pieces (bn_stats per chunk, a transpose per block) covers a
      // read of the whole tile; the union of two such boxes is exactly their bytes.
      for (bool joined = true; joined;) {
        joined = false;
        for (size_t i = 0; i < written.size(); ++i) {
          const Box& w = written[i];
          if (w.memory != box.memory) continue;
          const bool same_partitions = w.first_partition == box.first_partition && w.end_partition == box.end_partition;
          const bool same_bytes = w.first_byte == box.first_byte && w.end_byte == box.end_byte;
          const bool bytes_touch = w.first_byte <= box.end_byte && box.first_byte <= w.end_byte;
          const bool partitions_touch = w.first_partition <= box.end_partition && box.first_partition <= w.end_partition;
          if ((same_partitions && bytes_touch) || (same_bytes && partitions_touch)) {
            box = Box{box.memory, std::min(w.first_partition, box.first_partition),
                      std::max(w.end_partition, box.end_partition), std::min(w.first_byte, box.first_byte),
                      std::max(w.end_byte, box.end_byte)};
            written.erase(written.begin() + std::ptrdiff_t(i));
            joined = true;
            break;
          }
        }
      }
      if (written.size() < kMaxWrites) written.push_back(box);
    }
  }
  return true;
}

bool overwrites_whole(const std::vector<const Program*>& programs, uint32_t id) {
  constexpr size_t kMaxRuns = size_t{1} << 16;  // beyond this, zeroing is cheaper than proving coverage
  std::vector<std::pair<int64_t, int64_t>> runs;  // [first, end) in elements
  for (const Program* program : programs) {
    if (needs_expansion(*program)) return false;
    for (const Instruction& inst : program->instructions) {
      const InstructionSpec& spec = inst.spec();
      for (const OperandSpec& o : spec.operands) {
        if (o.tensor_slot < 0) continue;
        const AccessPattern& ap = inst.tensors[o.tensor_slot];
        if (!ap.present() || ap.space != MemorySpace::hbm || ap.allocation != id) continue;
        if (o.kind != OperandKind::tensor_out) return false;  // read (in / inout) before or after a write
        if (inst.opcode != Opcode::dma_copy || !inst.enum_is("dst_rmw_op", "none") || ap.dynamic()) continue;
        // The pattern's dims outermost first (HBM: the partition dim is the outermost), unit dims dropped.
        std::vector<ApDim> dims;
        if (ap.partition.size != 1) dims.push_back(ap.partition);
        for (int d = 0; d < ap.num_free_dims; ++d) {
          if (ap.free[size_t(d)].size != 1) dims.push_back(ap.free[size_t(d)]);
        }
        if (ap.elements() == 0) continue;
        for (const ApDim& d : dims) {
          if (d.stride <= 0) return false;
        }
        // Fold the innermost contiguous dims into one run length; the rest enumerate the runs' starts.
        int64_t run = 1;
        while (!dims.empty() && dims.back().stride == run) {
          run *= dims.back().size;
          dims.pop_back();
        }
        uint64_t starts = 1;
        for (const ApDim& d : dims) starts *= d.size;
        if (runs.size() + starts > kMaxRuns) return false;
        std::vector<uint32_t> index(dims.size(), 0);
        for (uint64_t k = 0; k < starts; ++k) {
          int64_t first = ap.offset;
          for (size_t d = 0; d < dims.size(); ++d) first += int64_t(index[d]) * dims[d].stride;
          runs.emplace_back(first, first + run);
          for (size_t d = dims.size(); d-- > 0;) {
            if (++index[d] < dims[d].size) break;
            index[d] = 0;
          }
        }
      }
    }
  }
  std::sort(runs.begin(), runs.end());
  int64_t covered = 0;
  for (const auto& [first, end] : runs) {
    if (first > covered) return false;
    covered = std::max(covered, end);
  }
  return covered >= int64_t(programs.front()->allocations[id].total_elements());
}

}  // namespace trnsim::isa
