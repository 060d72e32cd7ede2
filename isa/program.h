// A kernel program: named allocations in HBM, SBUF and PSUM plus one straight-line stream of
// instructions, for one NeuronCore of one generation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "isa/instruction.h"

namespace trnsim::isa {

// `private_to_core`: an HBM scratch tensor of which each core of a launch whose cores share HBM (an LNC launch)
// has its own copy (NKI's nl.private_hbm / nl.hbm: "only visible to each individual kernel instance"); the other
// HBM tensors of such a launch are one tensor for all its cores. On-chip tensors are always a core's own.
enum class AllocationRole : uint8_t { internal, input, output, private_to_core };

struct Allocation {
  std::string name;
  MemorySpace space = MemorySpace::sbuf;
  DType dtype = DType::fp32;
  std::vector<uint32_t> shape;  // SBUF/PSUM: [partitions, free...]; HBM: any rank >= 1
  AllocationRole role = AllocationRole::internal;
  // SBUF/PSUM placement: first partition and byte offset inside each partition.
  uint32_t base_partition = 0;
  uint64_t base_byte = 0;
  uint32_t declared_line = 0;

  uint32_t partitions() const { return space == MemorySpace::hbm ? 1 : shape.at(0); }
  // Elements in one partition (SBUF/PSUM), or in the whole tensor (HBM).
  uint64_t elements_per_partition() const;
  uint64_t bytes_per_partition() const { return elements_per_partition() * dtype_size_bytes(dtype); }
  uint64_t total_elements() const;
  // Row-major element strides of the free dims (SBUF/PSUM: shape[1:], HBM: all dims).
  std::vector<int64_t> strides() const;
};

struct Program {
  std::string name;
  Generation generation = Generation::trn2;
  std::vector<Allocation> allocations;
  std::vector<Instruction> instructions;

  const Allocation& allocation(const AccessPattern& ap) const { return allocations.at(ap.allocation); }
  int find_allocation(const std::string& name) const;  // -1 if none
};

}  // namespace trnsim::isa
