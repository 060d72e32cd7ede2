// The memories of one NeuronCore as the functional interpreter sees them: SBUF and PSUM as
// partitions x bytes, and one buffer per HBM allocation. Engines read operands into fp32 tiles
// and write results back through the numerics of the destination dtype.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "config/hardware_config.h"
#include "isa/hbm_buffer.h"
#include "isa/host_workers.h"
#include "isa/numerics/float_format.h"
#include "isa/memory_image.h"
#include "isa/program.h"
#include "isa/rng.h"

namespace trnsim::isa {

// Values held by one storage element of `dtype`: 4 for the MX x4 dtypes (mxfp8_e4m3, mxfp8_e5m2 in a 32-bit slot,
// mxfp4_e2m1 in a 16-bit slot), 1 for every other dtype.
inline uint32_t values_per_element(DType dtype) {
  return dtype == DType::mxfp8_e4m3 || dtype == DType::mxfp8_e5m2 || dtype == DType::mxfp4_e2m1 ? 4u : 1u;
}

// A dense fp32 tile: partitions x free elements, row-major.
struct Tile {
  uint32_t partitions = 0;
  uint64_t free = 0;
  std::vector<float> values;

  Tile() = default;
  Tile(uint32_t p, uint64_t f, float fill = 0.0f) : partitions(p), free(f), values(size_t(p) * f, fill) {}
  float* row(uint32_t p) { return values.data() + size_t(p) * free; }
  const float* row(uint32_t p) const { return values.data() + size_t(p) * free; }
  float& at(uint32_t p, uint64_t i) { return values[size_t(p) * free + i]; }
  float at(uint32_t p, uint64_t i) const { return values[size_t(p) * free + i]; }
};

using HbmStore = std::vector<HbmBuffer>;  // by allocation index; empty for on-chip allocations

class CoreState {
 public:
  // `shared_hbm` (optional) is another core's HBM store for the same HBM declarations, or one the caller
  // prepared (buffers already sized or bound to host memory are kept; the others are zero-filled).
  // `image_pool` (optional) lends recycled SBUF/PSUM images (all zero, like fresh ones); without it each state
  // maps its own.
  // `only_program_sees_onchip`: nothing but `program` (prepare_for) reads this state's SBUF/PSUM, so recycled images
  // need no zeroing where the program reads only what it wrote (reads_only_own_writes); the PyTorch device's case.
  CoreState(const CoreConfig& core, const Program& program, std::shared_ptr<HbmStore> shared_hbm = nullptr,
            MemoryImagePool* image_pool = nullptr, bool only_program_sees_onchip = false);

  // fp32 copy of the elements `ap` names; throws IsaError if any lies outside its memory.
  // MX x4 dtypes are unpacked: the tile is [partitions, 4 * free_elements], the four values of the slot at free
  // element f landing at 4f..4f+3 in packing order. Packing order (assumed; NKI only says "four contiguous
  // elements" per slot): value j sits at bits [8j, 8j+8) of the little-endian 32-bit slot (fp8, i.e. byte j) or
  // bits [4j, 4j+4) of the little-endian 16-bit slot (fp4, i.e. the low nibble of byte 0 first), lowest bits first.
  Tile read(const AccessPattern& ap) const;
  // The same into an existing tile, reusing its storage (hot loops read tiles of one size).
  void read_into(const AccessPattern& ap, Tile& tile) const;
  // Writes `tile` (same value count: elements x values_per_element) through `ap`, rounding to the destination
  // dtype; x4 dtypes are packed in the order read() unpacks them.
  void write(const AccessPattern& ap, const Tile& tile, numerics::RoundingMode rounding = numerics::RoundingMode::nearest_even,
             numerics::StochasticSource* rng = nullptr);

  // Copies the elements of `src` to `dst` byte for byte (same dtype, same element count, in
  // row-major order of each side): what a DMA without a cast does.
  // `workers` (optional) share the rows of a large copy.
  void copy_elements(const AccessPattern& dst, const AccessPattern& src, HostWorkers* workers = nullptr);
  // dst = src converted through fp32 (what write(dst, read(src)) gives), row by row without the fp32 tile where both
  // sides are rows of one length in allocations sharing no bytes; false (nothing done) otherwise.
  bool cast_rows(const AccessPattern& dst, const AccessPattern& src, numerics::RoundingMode rounding,
                 numerics::StochasticSource* rng, HostWorkers* workers = nullptr);

  // Raw bytes of an HBM allocation (inputs are loaded and outputs read here).
  HbmBuffer& hbm(uint32_t allocation) {
    bump_version(allocation);
    return m_hbm->at(allocation);
  }
  const HbmBuffer& hbm(uint32_t allocation) const { return m_hbm->at(allocation); }
  // The HBM buffers, shareable by the cores of one chip that run programs declaring the same
  // HBM tensors in the same order (each core's SBUF and PSUM stay its own).
  std::shared_ptr<HbmStore> hbm_store() const { return m_hbm; }

  // PSUM accumulation tracking for nc_matmul accumulate=auto, per (partition, bank) as the
  // hardware keeps one accumulation group per bank: set where a matmul wrote, cleared where
  // another instruction reads or writes (the compiler's "first write overwrites" rule).
  bool psum_accumulating(const AccessPattern& ap) const;
  void set_psum_accumulating(const AccessPattern& ap, bool value);

  // Direct fp32 rows for the hot paths (matmul into PSUM): when `ap` is fp32 with contiguous
  // free dims in SBUF/PSUM, the address of partition 0's first element and the distance between
  // partitions in elements; nullptr otherwise. Bounds are checked.
  float* fp32_rows(const AccessPattern& ap, int64_t& row_stride_elements);

  // An operand with contiguous free dims in SBUF/PSUM, one value per element (not the MX x4 dtypes), seen in place
  // (the element-wise hot paths work there instead of through read()/write()'s whole-tile copies): partition p's
  // elements start at data + p * row_stride_bytes. Where it lies (memory, absolute first partition, first byte
  // within a partition) lets callers tell operands that coincide from ones that overlap.
  struct Rows {
    uint8_t* data = nullptr;
    int64_t row_stride_bytes = 0;
    DType dtype = DType::fp32;
    OnChipMemory memory{};
    uint32_t first_partition = 0;
    uint32_t partitions = 0;
    uint64_t first_byte = 0;
    uint64_t row_bytes = 0;
    uint8_t* row(uint32_t p) const { return data + p * row_stride_bytes; }
    // fp32 rows usable as float arrays where they lie (4-byte aligned); others are converted.
    bool fp32_aligned() const {
      return dtype == DType::fp32 && reinterpret_cast<uintptr_t>(data) % 4 == 0 && row_stride_bytes % 4 == 0;
    }
    // Whether these rows and `other` share no byte.
    bool disjoint_from(const Rows& other) const {
      auto meet = [](uint64_t first_a, uint64_t count_a, uint64_t first_b, uint64_t count_b) {
        return first_a < first_b + count_b && first_b < first_a + count_a;
      };
      return memory != other.memory || !meet(first_partition, partitions, other.first_partition, other.partitions) ||
             !meet(first_byte, row_bytes, other.first_byte, other.row_bytes);
    }
  };
  // False (nothing changed) where `ap` is not such an operand. `for_write` records the write as write() does
  // (version, written range); PSUM accumulation marks are the caller's, as with read()/write(). Bounds are checked.
  bool rows_in_place(const AccessPattern& ap, bool for_write, Rows& rows);

  // Changes whenever bytes of the allocation (or of one aliasing it) may have changed; lets
  // callers keep fp32 copies of operands that are read again and again (matmul tiles).
  uint64_t version(uint32_t allocation) const { return m_versions[allocation]; }

  const Program& program() const { return m_program; }
  // Called before `program` runs on this state: where the state's recycled memories were left unzeroed because
  // its own program reads only what it wrote (reads_only_own_writes), another program gets them zeroed now.
  void prepare_for(const Program& program);
  const CoreConfig& core() const { return m_core; }

  // The absolute partition (= compute lane) of the first partition of an SBUF/PSUM access.
  uint32_t first_partition(const AccessPattern& ap) const;

  // Engine-internal state the ISA reaches besides memory; like the memories, it carries over from one
  // instruction to the next in program order (each engine runs its own instructions in order).
  // The Vector engine's accumulator registers, one fp32 per lane, shared by its accumulating instructions
  // (ISA tensor_scalar_reduce, tensor_scalar_cumulative, exponential, select_reduce, range_select: reduce_cmd).
  // They start at 0 (assumed: the reset value is not published; NKI says to reset_reduce before relying on them).
  std::vector<float>& vector_accumulators() { return m_vector_accumulators; }
  // The Scalar engine's accumulator registers, one fp32 per lane (ISA activate2 reduce_cmd; activation leaves its
  // reduction there too, NKI: "shared across Scalar Engine accumulation instructions"). They start at 0 (assumed).
  std::vector<float>& scalar_accumulators() { return m_scalar_accumulators; }
  // The register file (ISA register_*, loop_begin count_reg / index, while_begin cond): kRegisterCount int32s.
  // They start at 0 (assumed: NKI's register_alloc() without a value leaves a register uninitialised).
  std::array<int32_t, kRegisterCount>& registers() { return m_registers; }
  const std::array<int32_t, kRegisterCount>& registers() const { return m_registers; }
  // PRNG states (isa/rng.h): lanes x kVectorRngStatesPerLane for Engine::vector, lanes x
  // kGpSimdRngStatesPerLane for Engine::gpsimd, lane-major. Seeded with kDefaultRngSeed at construction.
  std::vector<XorwowState>& rng_states(Engine engine);
  uint32_t rng_states_per_lane(Engine engine) const;
  // set_rng_seed: every state of the engine from `seed` (isa/rng.h).
  void seed_rng(Engine engine, uint32_t seed);

 private:
  // Calls visit(partition_index, element_pointer, element_index) for every element of ap, in
  // row-major order of (partition, free dims).
  template <class Visit>
  void for_each_element(const AccessPattern& ap, Visit&& visit) const;
  uint8_t* base_pointer(const AccessPattern& ap, uint32_t partition_index) const;
  void check_bounds(const AccessPattern& ap) const;
  // The PSUM banks an access touches: [first, last] bank and the absolute first partition.
  void psum_banks(const AccessPattern& ap, uint32_t& first_partition, uint64_t& first_bank, uint64_t& last_bank) const;

  const CoreConfig& m_core;
  const Program& m_program;
  // Records a write through `ap` in its on-chip image (a recycled image is zeroed again where it was written).
  void mark_written(const AccessPattern& ap);
  // The on-chip bytes [first_byte, end_byte) per partition that `ap` reaches (not HBM).
  void onchip_span(const AccessPattern& ap, int64_t& first_byte, int64_t& end_byte) const;

  // One image per registered on-chip memory (config/onchip_memory_units.def), indexed by OnChipMemory.
  std::array<std::shared_ptr<MemoryImage>, kOnChipMemoryCount> m_onchip;
  bool m_onchip_may_hold_stale = false;  // recycled images not zeroed (see prepare_for)
  std::shared_ptr<HbmStore> m_hbm;  // by allocation index; empty for on-chip allocations
  std::vector<uint8_t> m_psum_accumulating;  // one flag per (partition, bank)
  std::vector<uint64_t> m_versions;                  // by allocation
  std::vector<std::vector<uint32_t>> m_overlaps;     // allocations sharing bytes, by allocation
  std::vector<float> m_vector_accumulators;          // by lane
  std::vector<float> m_scalar_accumulators;          // by lane
  std::array<int32_t, kRegisterCount> m_registers{};
  std::vector<XorwowState> m_vector_rng, m_gpsimd_rng;  // by lane x state
  void bump_version(uint32_t allocation);
};

}  // namespace trnsim::isa
