#include "isa/core_state.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "isa/write_coverage.h"
#include "isa/isa_error.h"

namespace trnsim::isa {

namespace {

std::shared_ptr<MemoryImage> memory_image(MemoryImagePool* pool, uint32_t partitions, uint64_t bytes_per_partition,
                                          bool zeroed) {
  return pool ? pool->acquire(partitions, bytes_per_partition, zeroed)
              : std::make_shared<MemoryImage>(partitions, bytes_per_partition);
}

}  // namespace

void CoreState::prepare_for(const Program& program) {
  if (!m_onchip_may_hold_stale || &program == &m_program) return;
  for (auto& image : m_onchip) image->clear();
  m_onchip_may_hold_stale = false;
}

CoreState::CoreState(const CoreConfig& core, const Program& program, std::shared_ptr<HbmStore> shared_hbm,
                     MemoryImagePool* image_pool, bool only_program_sees_onchip)
    : m_core(core),
      m_program(program),
      m_hbm(shared_hbm ? std::move(shared_hbm) : std::make_shared<HbmStore>(program.allocations.size())),
      m_psum_accumulating(size_t(core.psum.partitions) * core.psum.banks, 0) {
  m_onchip_may_hold_stale = image_pool && only_program_sees_onchip && reads_only_own_writes(program);
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    const auto memory = static_cast<OnChipMemory>(m);
    m_onchip[m] = memory_image(image_pool, onchip_partitions(core, memory), onchip_bytes_per_partition(core, memory),
                               !m_onchip_may_hold_stale);
  }
  // A program sharing another's HBM may declare more on-chip tensors: the store is indexed by allocation.
  if (m_hbm->size() < program.allocations.size()) m_hbm->resize(program.allocations.size());
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const Allocation& a = program.allocations[i];
    if (a.space == MemorySpace::hbm && (*m_hbm)[i].empty()) {
      (*m_hbm)[i].assign(a.total_elements() * dtype_size_bytes(a.dtype), 0);
    }
  }
  // Allocations may alias (explicit placement): a write to one changes the bytes of every
  // allocation it overlaps, so each write bumps the versions of the whole overlap set.
  m_vector_accumulators.assign(core.sbuf.partitions, 0.0f);
  m_scalar_accumulators.assign(core.sbuf.partitions, 0.0f);
  // The PRNG states are seeded on first use (rng_states): seeding every lane's states costs more than a small op.
  m_versions.assign(program.allocations.size(), 0);
  m_overlaps.resize(program.allocations.size());
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const Allocation& a = program.allocations[i];
    for (size_t j = 0; j < program.allocations.size(); ++j) {
      const Allocation& b = program.allocations[j];
      bool overlap = i == j;
      if (!overlap && a.space == b.space && a.space != MemorySpace::hbm) {
        overlap = a.base_partition < b.base_partition + b.partitions() &&
                  b.base_partition < a.base_partition + a.partitions() &&
                  a.base_byte < b.base_byte + b.bytes_per_partition() &&
                  b.base_byte < a.base_byte + a.bytes_per_partition();
      }
      if (overlap) m_overlaps[i].push_back(static_cast<uint32_t>(j));
    }
  }
}

uint32_t CoreState::first_partition(const AccessPattern& ap) const {
  return m_program.allocation(ap).base_partition + ap.start_partition;
}

uint32_t CoreState::rng_states_per_lane(Engine engine) const {
  return engine == Engine::gpsimd ? kGpSimdRngStatesPerLane : kVectorRngStatesPerLane;
}

std::vector<XorwowState>& CoreState::rng_states(Engine engine) {
  if (engine != Engine::vector && engine != Engine::gpsimd) {
    throw IsaError(std::string("the ") + std::string(enum_name(engine)) + " engine has no random number generator");
  }
  std::vector<XorwowState>& states = engine == Engine::gpsimd ? m_gpsimd_rng : m_vector_rng;
  if (states.empty()) seed_rng(engine, kDefaultRngSeed);
  return states;
}

void CoreState::seed_rng(Engine engine, uint32_t seed) {
  if (engine != Engine::vector && engine != Engine::gpsimd) {
    throw IsaError(std::string("the ") + std::string(enum_name(engine)) + " engine has no random number generator");
  }
  std::vector<XorwowState>& states = engine == Engine::gpsimd ? m_gpsimd_rng : m_vector_rng;
  states.resize(size_t(m_core.sbuf.partitions) * rng_states_per_lane(engine));
  // Distinct streams for the two engines, so their default sequences differ.
  uint32_t first_stream = engine == Engine::gpsimd ? 0x80000000u : 0u;
  for (size_t i = 0; i < states.size(); ++i) states[i] = seed_xorwow(seed, first_stream + static_cast<uint32_t>(i));
}

void CoreState::bump_version(uint32_t allocation) {
  for (uint32_t other : m_overlaps[allocation]) ++m_versions[other];
}

void CoreState::onchip_span(const AccessPattern& ap, int64_t& first_byte, int64_t& end_byte) const {
  const Allocation& a = m_program.allocation(ap);
  const auto [low, high] = ap.element_range(/*with_partition=*/false);  // partitions are rows on chip
  const uint32_t esize = dtype_size_bytes(ap.dtype);
  first_byte = int64_t(a.base_byte) + low * esize;
  end_byte = int64_t(a.base_byte) + (high + 1) * esize;
}

void CoreState::check_bounds(const AccessPattern& ap) const {
  if (ap.elements() == 0) return;  // selects nothing (a DMA skipped by oob_mode=skip)
  const Allocation& a = m_program.allocation(ap);
  if (a.space == MemorySpace::hbm) {
    const auto [low, high] = ap.element_range(/*with_partition=*/true);
    if (low < 0 || uint64_t(high + 1) * dtype_size_bytes(ap.dtype) > (*m_hbm)[ap.allocation].size()) {
      throw IsaError("access to HBM tensor '" + a.name + "' outside its " + std::to_string(a.total_elements()) +
                     " elements");
    }
    return;
  }
  const uint64_t memory = onchip_bytes_per_partition(m_core, on_chip_memory(a.space));
  const uint32_t partitions = onchip_partitions(m_core, on_chip_memory(a.space));
  int64_t first_byte = 0, end_byte = 0;
  onchip_span(ap, first_byte, end_byte);
  if (first_byte < 0 || uint64_t(end_byte) > memory ||
      a.base_partition + ap.start_partition + ap.partitions() > partitions) {
    throw IsaError(std::string("access to ") + memory_space_name(a.space) + " tensor '" + a.name +
                   "' outside the memory (partitions " + std::to_string(a.base_partition + ap.start_partition) + "+" +
                   std::to_string(ap.partitions()) + ", bytes " + std::to_string(first_byte) + ".." +
                   std::to_string(end_byte) + ")");
  }
}

void CoreState::mark_written(const AccessPattern& ap) {
  const Allocation& a = m_program.allocation(ap);
  if (a.space == MemorySpace::hbm) return;
  int64_t first_byte = 0, end_byte = 0;
  onchip_span(ap, first_byte, end_byte);  // within bounds: checked before
  MemoryImage& memory = *m_onchip[static_cast<size_t>(on_chip_memory(a.space))];
  memory.mark_written(a.base_partition + ap.start_partition, ap.partitions(), uint64_t(first_byte), uint64_t(end_byte));
}

uint8_t* CoreState::base_pointer(const AccessPattern& ap, uint32_t partition_index) const {
  const Allocation& a = m_program.allocation(ap);
  uint32_t esize = dtype_size_bytes(ap.dtype);
  if (a.space == MemorySpace::hbm) {
    auto& buffer = (*m_hbm)[ap.allocation];
    return buffer.data() + (ap.offset + int64_t(partition_index) * ap.partition.stride) * esize;
  }
  const MemoryImage& memory = *m_onchip[static_cast<size_t>(on_chip_memory(a.space))];
  const uint64_t bytes_per_partition = onchip_bytes_per_partition(m_core, on_chip_memory(a.space));
  uint64_t partition = a.base_partition + ap.start_partition + partition_index;
  return memory.data() + partition * bytes_per_partition + a.base_byte + ap.offset * esize;
}

template <class Visit>
void CoreState::for_each_element(const AccessPattern& ap, Visit&& visit) const {
  uint32_t esize = dtype_size_bytes(ap.dtype);
  // Pad to four dims so one loop nest serves every rank.
  ApDim dims[kMaxFreeDims];
  int pad = kMaxFreeDims - ap.num_free_dims;
  for (int i = 0; i < kMaxFreeDims; ++i) dims[i] = i < pad ? ApDim{0, 1} : ap.free[i - pad];
  uint64_t index = 0;
  for (uint32_t p = 0; p < ap.partitions(); ++p) {
    uint8_t* base = base_pointer(ap, p);
    for (uint32_t i0 = 0; i0 < dims[0].size; ++i0) {
      for (uint32_t i1 = 0; i1 < dims[1].size; ++i1) {
        for (uint32_t i2 = 0; i2 < dims[2].size; ++i2) {
          int64_t outer = i0 * dims[0].stride + i1 * dims[1].stride + i2 * dims[2].stride;
          visit(p, base + outer * esize, dims[3].stride, dims[3].size, index);
          index += dims[3].size;
        }
      }
    }
  }
}

namespace {

// One MX x4 slot <-> four values, in the packing order documented in core_state.h.
void unpack_x4(DType dtype, const uint8_t* slot, float* out) {
  for (uint32_t j = 0; j < 4; ++j) {
    uint8_t code = dtype == DType::mxfp4_e2m1 ? uint8_t((slot[j / 2] >> (4 * (j % 2))) & 0xF) : slot[j];
    out[j] = numerics::decode(dtype, &code);
  }
}

void pack_x4(DType dtype, const float* in, uint8_t* slot, numerics::RoundingMode rounding,
             numerics::StochasticSource* rng) {
  uint8_t codes[4];
  for (uint32_t j = 0; j < 4; ++j) {
    uint32_t bits = rounding == numerics::RoundingMode::stochastic && rng ? rng->next_u32() : 0;
    numerics::encode(dtype, in[j], &codes[j], rounding, bits);
  }
  if (dtype == DType::mxfp4_e2m1) {
    slot[0] = uint8_t((codes[0] & 0xF) | (codes[1] << 4));
    slot[1] = uint8_t((codes[2] & 0xF) | (codes[3] << 4));
  } else {
    std::memcpy(slot, codes, 4);
  }
}

}  // namespace

Tile CoreState::read(const AccessPattern& ap) const {
  Tile tile;
  read_into(ap, tile);
  return tile;
}

void CoreState::read_into(const AccessPattern& ap, Tile& tile) const {
  check_bounds(ap);
  uint32_t per_element = values_per_element(ap.dtype);
  tile.partitions = ap.partitions();
  tile.free = ap.free_elements() * per_element;
  tile.values.resize(size_t(tile.partitions) * tile.free);  // every element is written below
  uint32_t esize = dtype_size_bytes(ap.dtype);
  for_each_element(ap, [&](uint32_t, uint8_t* run, int64_t stride, uint32_t count, uint64_t index) {
    float* out = tile.values.data() + index * per_element;
    if (per_element != 1) {
      for (uint32_t k = 0; k < count; ++k) unpack_x4(ap.dtype, run + k * stride * esize, out + 4 * k);
    } else if (stride == 1) {
      numerics::convert_to_fp32(ap.dtype, run, out, count);
    } else {
      for (uint32_t k = 0; k < count; ++k) out[k] = numerics::decode(ap.dtype, run + k * stride * esize);
    }
  });
}

void CoreState::write(const AccessPattern& ap, const Tile& tile, numerics::RoundingMode rounding,
                      numerics::StochasticSource* rng) {
  bump_version(ap.allocation);
  check_bounds(ap);
  mark_written(ap);
  uint32_t per_element = values_per_element(ap.dtype);
  if (tile.values.size() != ap.elements() * per_element) {
    throw IsaError("internal: writing " + std::to_string(tile.values.size()) + " values through an access pattern of " +
                   std::to_string(ap.elements()) + " elements" +
                   (per_element != 1 ? " (x" + std::to_string(per_element) + " packed)" : std::string()));
  }
  uint32_t esize = dtype_size_bytes(ap.dtype);
  for_each_element(ap, [&](uint32_t, uint8_t* run, int64_t stride, uint32_t count, uint64_t index) {
    const float* in = tile.values.data() + index * per_element;
    if (per_element != 1) {
      for (uint32_t k = 0; k < count; ++k) pack_x4(ap.dtype, in + 4 * k, run + k * stride * esize, rounding, rng);
    } else if (stride == 1) {
      numerics::convert_from_fp32(ap.dtype, in, run, count, rounding, rng);
    } else {
      for (uint32_t k = 0; k < count; ++k) {
        uint32_t bits = rounding == numerics::RoundingMode::stochastic && rng ? rng->next_u32() : 0;
        numerics::encode(ap.dtype, in[k], run + k * stride * esize, rounding, bits);
      }
    }
  });
}

void CoreState::psum_banks(const AccessPattern& ap, uint32_t& first_partition, uint64_t& first_bank,
                           uint64_t& last_bank) const {
  const Allocation& a = m_program.allocation(ap);
  const auto [low, high] = ap.element_range(/*with_partition=*/false);
  uint32_t esize = dtype_size_bytes(ap.dtype);
  uint64_t bank_bytes = m_core.psum.bank_bytes;
  first_partition = a.base_partition + ap.start_partition;
  first_bank = (a.base_byte + uint64_t(std::max<int64_t>(low, 0)) * esize) / bank_bytes;
  last_bank = std::min<uint64_t>((a.base_byte + uint64_t(high + 1) * esize - 1) / bank_bytes, m_core.psum.banks - 1);
}

void CoreState::copy_elements(const AccessPattern& dst, const AccessPattern& src, HostWorkers* workers) {
  check_bounds(src);
  check_bounds(dst);
  mark_written(dst);
  if (src.dtype != dst.dtype || src.elements() != dst.elements()) {
    throw IsaError("internal: copy_elements needs the same dtype and element count");
  }
  bump_version(dst.allocation);
  const uint32_t esize = dtype_size_bytes(src.dtype);
  // Rows of the same length, contiguous on both sides, in allocations that share no bytes (a DMA between HBM
  // and SBUF, the common case): row for row, without staging.
  const bool overlapping = std::find(m_overlaps[src.allocation].begin(), m_overlaps[src.allocation].end(),
                                     dst.allocation) != m_overlaps[src.allocation].end();
  if (!overlapping && src.partitions() == dst.partitions() && src.free_contiguous() && dst.free_contiguous() &&
      src.free_elements() == dst.free_elements()) {
    const size_t row_bytes = size_t(src.free_elements()) * esize;
    const uint32_t partitions = src.partitions();
    auto copy_rows = [&](uint32_t first, uint32_t end) {
      for (uint32_t p = first; p < end; ++p) std::memcpy(base_pointer(dst, p), base_pointer(src, p), row_bytes);
    };
    // Host tuning, assumed: below ~1 MiB waking a thread costs about what it saves.
    constexpr size_t kBytesWorthThreads = size_t{1} << 20;
    run_row_ranges(workers, partitions, row_bytes * partitions >= kBytesWorthThreads, copy_rows);
    return;
  }
  std::vector<uint8_t> staging(src.elements() * esize);  // src and dst may overlap
  for_each_element(src, [&](uint32_t, uint8_t* run, int64_t stride, uint32_t count, uint64_t index) {
    uint8_t* out = staging.data() + index * esize;
    if (stride == 1) {
      std::memcpy(out, run, size_t(count) * esize);
    } else {
      for (uint32_t k = 0; k < count; ++k) std::memcpy(out + k * esize, run + k * stride * esize, esize);
    }
  });
  for_each_element(dst, [&](uint32_t, uint8_t* run, int64_t stride, uint32_t count, uint64_t index) {
    const uint8_t* in = staging.data() + index * esize;
    if (stride == 1) {
      std::memcpy(run, in, size_t(count) * esize);
    } else {
      for (uint32_t k = 0; k < count; ++k) std::memcpy(run + k * stride * esize, in + k * esize, esize);
    }
  });
}

bool CoreState::cast_rows(const AccessPattern& dst, const AccessPattern& src, numerics::RoundingMode rounding,
                          numerics::StochasticSource* rng, HostWorkers* workers) {
  const bool overlapping = std::find(m_overlaps[src.allocation].begin(), m_overlaps[src.allocation].end(),
                                     dst.allocation) != m_overlaps[src.allocation].end();
  if (overlapping || values_per_element(src.dtype) != 1 || values_per_element(dst.dtype) != 1 ||
      src.partitions() != dst.partitions() || !src.free_contiguous() || !dst.free_contiguous() ||
      src.free_elements() != dst.free_elements() || src.elements() == 0) {
    return false;
  }
  check_bounds(src);
  check_bounds(dst);
  mark_written(dst);
  bump_version(dst.allocation);
  const size_t n = size_t(src.free_elements());
  const uint32_t partitions = src.partitions();
  auto cast = [&](uint32_t first, uint32_t end) {
    std::vector<float> row(n);
    for (uint32_t p = first; p < end; ++p) {
      numerics::convert_to_fp32(src.dtype, base_pointer(src, p), row.data(), n);
      numerics::convert_from_fp32(dst.dtype, row.data(), base_pointer(dst, p), n, rounding, rng);
    }
  };
  // Host tuning, assumed: as for_row_ranges. Stochastic rounding draws from one stream in element order: one thread.
  constexpr size_t kElementsWorthThreads = size_t{1} << 17;
  run_row_ranges(workers, partitions,
                 n * partitions >= kElementsWorthThreads && rounding != numerics::RoundingMode::stochastic, cast);
  return true;
}

bool CoreState::psum_accumulating(const AccessPattern& ap) const {
  if (m_program.allocation(ap).space != MemorySpace::psum) return false;
  uint32_t first_partition = 0;
  uint64_t first_bank = 0, last_bank = 0;
  psum_banks(ap, first_partition, first_bank, last_bank);
  for (uint32_t p = first_partition; p < first_partition + ap.partitions() && p < m_core.psum.partitions; ++p) {
    for (uint64_t bank = first_bank; bank <= last_bank; ++bank) {
      if (!m_psum_accumulating[size_t(p) * m_core.psum.banks + bank]) return false;
    }
  }
  return true;
}

void CoreState::set_psum_accumulating(const AccessPattern& ap, bool value) {
  if (m_program.allocation(ap).space != MemorySpace::psum) return;
  uint32_t first_partition = 0;
  uint64_t first_bank = 0, last_bank = 0;
  psum_banks(ap, first_partition, first_bank, last_bank);
  for (uint32_t p = first_partition; p < first_partition + ap.partitions() && p < m_core.psum.partitions; ++p) {
    for (uint64_t bank = first_bank; bank <= last_bank; ++bank) {
      m_psum_accumulating[size_t(p) * m_core.psum.banks + bank] = value;
    }
  }
}

float* CoreState::fp32_rows(const AccessPattern& ap, int64_t& row_stride_elements) {
  bump_version(ap.allocation);  // the caller writes through the pointer
  Rows rows;
  if (!rows_in_place(ap, /*for_write=*/false, rows) || !rows.fp32_aligned()) return nullptr;
  rows_in_place(ap, /*for_write=*/true, rows);
  row_stride_elements = rows.row_stride_bytes / int64_t(sizeof(float));
  return reinterpret_cast<float*>(rows.data);
}

bool CoreState::rows_in_place(const AccessPattern& ap, bool for_write, Rows& rows) {
  const Allocation& a = m_program.allocation(ap);
  if (values_per_element(ap.dtype) != 1 || a.space == MemorySpace::hbm || !ap.free_contiguous()) return false;
  check_bounds(ap);
  if (for_write) {
    bump_version(ap.allocation);
    mark_written(ap);
  }
  const OnChipMemory memory = on_chip_memory(a.space);
  rows.data = base_pointer(ap, 0);
  rows.row_stride_bytes = int64_t(onchip_bytes_per_partition(m_core, memory));
  rows.dtype = ap.dtype;
  rows.memory = memory;
  rows.first_partition = a.base_partition + ap.start_partition;
  rows.partitions = ap.partitions();
  rows.first_byte = a.base_byte + uint64_t(ap.offset) * dtype_size_bytes(ap.dtype);
  rows.row_bytes = ap.free_elements() * dtype_size_bytes(ap.dtype);
  return true;
}

}  // namespace trnsim::isa
