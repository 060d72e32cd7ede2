#include "config/config_validate.h"

#include <algorithm>

namespace trnsim {
namespace {

// Reports a broken rule at the key the user most likely just changed: among the keys the rule
// involves, a command-line override first, then a key set in the file the user named, then the
// rule's main key. The other keys are listed with their locations.
class Checker {
 public:
  Checker(const detail::LocationMap& locations, std::string user_file)
      : m_locations(locations), m_user_file(std::move(user_file)) {}

  void require(bool ok, const std::string& path, const std::string& message,
               const std::vector<std::string>& related = {}) const {
    if (ok) return;
    std::vector<std::string> paths = {path};
    paths.insert(paths.end(), related.begin(), related.end());
    auto rank = [&](const std::string& p) {
      const SourceLocation& where = location(p);
      if (where.file.rfind("--set ", 0) == 0) return 0;
      if (where.file == m_user_file) return 1;
      return p == path ? 2 : 3;
    };
    std::string chosen = *std::min_element(paths.begin(), paths.end(),
                                           [&](const auto& a, const auto& b) { return rank(a) < rank(b); });
    std::string text = message;
    for (const std::string& p : paths) {
      if (p != chosen) text += "; " + p + " is set at " + location(p).str();
    }
    throw ConfigError(location(chosen), chosen, text);
  }

 private:
  SourceLocation location(const std::string& path) const {
    auto it = m_locations.find(path);
    return it != m_locations.end() ? it->second : SourceLocation{"<config>", 0, 0};
  }

 private:
  const detail::LocationMap& m_locations;
  std::string m_user_file;
};

template <class T>
bool contains(const std::vector<T>& items, const T& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

std::string str(uint64_t value) { return std::to_string(value); }

void check_compute_engine(const Checker& check, const ComputeEngineConfig& engine, const std::string& path,
                          uint32_t partitions) {
  check.require(engine.lanes == partitions, path + ".lanes",
                "lanes (" + str(engine.lanes) + ") must equal the SBUF partitions (" + str(partitions) + ")",
                {"core.sbuf.partitions"});
  check.require(!engine.performance_modes.empty() && engine.performance_modes.front() == 1,
                path + ".performance_modes", "the list must start with 1 (the normal mode)");
  check.require(std::is_sorted(engine.performance_modes.begin(), engine.performance_modes.end()) &&
                    std::adjacent_find(engine.performance_modes.begin(), engine.performance_modes.end()) ==
                        engine.performance_modes.end(),
                path + ".performance_modes", "modes must be listed in increasing order without repeats");
  check.require(!engine.elements_per_cycle_by_dtype.empty(), path + ".elements_per_cycle_by_dtype",
                "the engine must accept at least one dtype");
  uint32_t widest = engine.lanes * engine.performance_modes.back();
  for (const auto& [dtype, width] : engine.elements_per_cycle_by_dtype) {
    check.require(width <= widest, path + ".elements_per_cycle_by_dtype." + std::string(dtype_name(dtype)),
                  "width " + str(width) + " exceeds lanes x the fastest performance mode (" + str(widest) + ")",
                  {path + ".performance_modes", path + ".lanes"});
  }
}

}  // namespace

void validate_hardware_config(const HardwareConfig& config, const detail::LocationMap& locations,
                              const std::string& user_file) {
  Checker check(locations, user_file);
  const ChipConfig& chip = config.chip;
  const CoreConfig& core = config.core;

  // Logical cores group whole physical cores.
  check.require(contains(chip.supported_logical_core_sizes, chip.default_logical_core_size),
                "chip.default_logical_core_size", "must be one of chip.supported_logical_core_sizes",
                {"chip.supported_logical_core_sizes"});
  for (size_t i = 0; i < chip.supported_logical_core_sizes.size(); ++i) {
    uint32_t lnc = chip.supported_logical_core_sizes[i];
    check.require(chip.physical_cores % lnc == 0, "chip.supported_logical_core_sizes[" + str(i) + "]",
                  "LNC " + str(lnc) + " does not divide the " + str(chip.physical_cores) + " physical cores");
  }

  // On-chip memories.
  check.require(core.psum.partitions == core.sbuf.partitions, "core.psum.partitions",
                "PSUM partitions (" + str(core.psum.partitions) + ") must equal SBUF partitions (" +
                    str(core.sbuf.partitions) + ")",
                {"core.sbuf.partitions"});
  check.require(core.psum.banks * core.psum.bank_bytes == core.psum.bytes_per_partition, "core.psum.bank_bytes",
                "banks x bank_bytes = " + str(core.psum.banks * core.psum.bank_bytes) +
                    " differs from bytes_per_partition = " + str(core.psum.bytes_per_partition),
                {"core.psum.banks", "core.psum.bytes_per_partition"});
  check.require(core.sbuf.partitions % core.sbuf.quadrant_partitions == 0, "core.sbuf.quadrant_partitions",
                "must divide the partitions (" + str(core.sbuf.partitions) + ")");

  // Tensor engine.
  const TensorEngineConfig& tensor = core.tensor;
  check.require(tensor.pe_rows <= core.sbuf.partitions, "core.tensor.pe_rows",
                "the contraction runs over partitions: pe_rows cannot exceed " + str(core.sbuf.partitions),
                {"core.sbuf.partitions"});
  check.require(tensor.max_stationary_free_size <= tensor.pe_columns, "core.tensor.max_stationary_free_size",
                "cannot exceed pe_columns (" + str(tensor.pe_columns) + ")");
  check.require(tensor.rate_factor_by_dtype.count(DType::bf16) == 1, "core.tensor.rate_factor_by_dtype",
                "bf16 is the reference dtype and must be listed");
  for (size_t i = 0; i < tensor.double_row_dtypes.size(); ++i) {
    check.require(tensor.rate_factor_by_dtype.count(tensor.double_row_dtypes[i]) == 1,
                  "core.tensor.double_row_dtypes[" + str(i) + "]", "a double_row dtype must be a matmul input dtype");
  }
  check.require(tensor.double_row_dtypes.empty() == (tensor.double_row_rate_factor == 0),
                "core.tensor.double_row_rate_factor", "must be 0 exactly when double_row_dtypes is empty");
  check.require(tensor.max_moving_free_size_by_psum_dtype.count(DType::fp32) == 1,
                "core.tensor.max_moving_free_size_by_psum_dtype", "fp32 PSUM output must be listed");
  for (const auto& [dtype, size] : tensor.max_moving_free_size_by_psum_dtype) {
    uint64_t bytes = uint64_t{size} * dtype_size_bytes(dtype);
    check.require(bytes <= core.psum.bytes_per_partition,
                  "core.tensor.max_moving_free_size_by_psum_dtype." + std::string(dtype_name(dtype)),
                  str(size) + " elements of " + std::string(dtype_name(dtype)) + " exceed a PSUM partition");
  }

  for (size_t i = 0; i < kQueuedEngineCount; ++i) {
    const Engine engine = static_cast<Engine>(i);
    if (const ComputeEngineConfig* rules = compute_engine_config(core, engine)) {
      check_compute_engine(check, *rules, "core." + std::string(enum_name(engine)), core.sbuf.partitions);
    }
  }
  check.require(core.gpsimd.lanes % core.gpsimd.processors == 0, "core.gpsimd.processors",
                "must divide the lanes (" + str(core.gpsimd.lanes) + ")");

  // Memory access and conflicts.
  const MemoryAccessConfig& access = core.memory_access;
  check.require(contains(access.psum_engines, Engine::tensor), "core.memory_access.psum_engines",
                "the Tensor engine writes its results to PSUM and must be listed");
  check.require(contains(access.sbuf_engines, Engine::dma), "core.memory_access.sbuf_engines",
                "DMA moves data into SBUF and must be listed");
  for (size_t i = 0; i < access.conflicts.size(); ++i) {
    const MemoryConflictConfig& conflict = access.conflicts[i];
    std::string path = "core.memory_access.conflicts[" + str(i) + "]";
    const auto& allowed = access.engines_reaching(conflict.memory);
    check.require(conflict.engines.size() >= 2, path + ".engines", "a conflict needs at least two engines");
    for (size_t j = 0; j < conflict.engines.size(); ++j) {
      check.require(contains(allowed, conflict.engines[j]), path + ".engines[" + str(j) + "]",
                    std::string(enum_name(conflict.engines[j])) + " does not access " +
                        std::string(enum_name(conflict.memory)));
    }
    check.require(conflict.scope != ConflictScope::bank || conflict.memory == OnChipMemory::psum, path + ".scope",
                  "only PSUM has banks");
  }

  // DMA: a 128-partition transfer is spread evenly over the engines.
  check.require(core.sbuf.partitions % core.dma.engines_per_core == 0, "core.dma.engines_per_core",
                "must divide the partitions (" + str(core.sbuf.partitions) + ") so each engine serves whole ones",
                {"core.sbuf.partitions"});

  // HBM.
  const HbmConfig& hbm = config.hbm;
  check.require(hbm.stack_by_core.size() == chip.physical_cores, "hbm.stack_by_core",
                "lists " + str(hbm.stack_by_core.size()) + " cores but the chip has " + str(chip.physical_cores),
                {"chip.physical_cores"});
  for (size_t i = 0; i < hbm.stack_by_core.size(); ++i) {
    check.require(hbm.stack_by_core[i] < hbm.stacks, "hbm.stack_by_core[" + str(i) + "]",
                  "stack " + str(hbm.stack_by_core[i]) + " does not exist (the chip has " + str(hbm.stacks) + ")");
  }
  for (uint32_t stack = 0; stack < hbm.stacks; ++stack) {
    check.require(contains(hbm.stack_by_core, stack), "hbm.stack_by_core",
                  "stack " + str(stack) + " serves no core");
  }

  check.require(config.collectives.recursive_max_bytes >= config.collectives.mesh_max_bytes,
                "collectives.recursive_max_bytes", "must be at least collectives.mesh_max_bytes (" +
                str(config.collectives.mesh_max_bytes) + ")");

  // Systems.
  check.require(config.systems.count(config.default_system) == 1, "default_system",
                "'" + config.default_system + "' is not one of the systems listed");
  for (const auto& [name, system] : config.systems) {
    std::string path = "systems." + name;
    switch (system.topology) {
      case Topology::single:
        check.require(system.chips == 1, path + ".chips", "a single-chip system has 1 chip");
        break;
      case Topology::torus: {
        // Several tori joined by switch levels (servers over EFA): the dimensions give one torus's chips.
        uint64_t product = 1, tori = 1;
        for (uint32_t d : system.torus_dimensions) product *= d;
        for (const SwitchLevelConfig& level : system.switch_levels) tori *= level.chips_per_group;
        check.require(!system.torus_dimensions.empty() && product * tori == system.chips, path + ".torus_dimensions",
                      "the dimensions multiply to " + str(product) +
                          (tori > 1 ? " chips per torus, times " + str(tori) + " tori (switch_levels)," : ",") +
                          " not the " + str(system.chips) + " chips");
        check.require(system.bandwidth_per_chip_gbps_by_dimension.size() == system.torus_dimensions.size(),
                      path + ".bandwidth_per_chip_gbps_by_dimension", "needs one bandwidth per torus dimension");
        break;
      }
      case Topology::switched: {
        uint64_t product = 1;
        for (const SwitchLevelConfig& level : system.switch_levels) product *= level.chips_per_group;
        check.require(!system.switch_levels.empty() && product == system.chips, path + ".switch_levels",
                      "the group sizes multiply to " + str(product) + ", not the " + str(system.chips) + " chips");
        break;
      }
    }
    if (system.topology != Topology::torus) {
      check.require(system.torus_dimensions.empty() && system.bandwidth_per_chip_gbps_by_dimension.empty(),
                    path + ".torus_dimensions", "only a torus has dimensions; leave the list empty");
    }
    if (system.topology == Topology::single) {
      check.require(system.switch_levels.empty(), path + ".switch_levels", "a single chip has no switch levels");
    }
  }
}

}  // namespace trnsim
