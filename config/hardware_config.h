// The hardware description every model reads: plain aggregates with unit-suffixed fields,
// filled and validated once by the loader (config_loader.h) and passed around by const&.
//
// Each struct lists its fields exactly once, in visit(): key, member, allowed range and a
// one-line doc. The same list drives YAML parsing, unknown-key detection, printing, hashing,
// diffing and `trnsim config keys`; adding a field means adding one v.field(...) line.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "config/dtype.h"
#include "config/enum_names.h"
#include "config/units.h"

namespace trnsim {

enum class Generation : uint8_t { trn1, trn2, trn3 };
template <>
struct EnumNames<Generation> {
  static constexpr std::array<std::string_view, 3> names = {"trn1", "trn2", "trn3"};
};
// NeuronCore version of a generation: trn1 = NC-v2, trn2 = NC-v3, trn3 = NC-v4.
inline uint32_t neuron_core_version(Generation g) { return static_cast<uint32_t>(g) + 2; }


// Granularity at which two engines' accesses serialise: the whole memory or one PSUM bank.
enum class ConflictScope : uint8_t { memory, bank };
template <>
struct EnumNames<ConflictScope> {
  static constexpr std::array<std::string_view, 2> names = {"memory", "bank"};
};

// When a conflict applies: always, or only while the Vector engine runs in a 2x/4x
// performance mode (on NC-v3+ that mode borrows the shared Vector/GpSimd SBUF bus).
enum class ConflictCondition : uint8_t { always, vector_performance_mode };
template <>
struct EnumNames<ConflictCondition> {
  static constexpr std::array<std::string_view, 2> names = {"always", "vector_performance_mode"};
};

// How a DMA engine picks among its queues (trainium.md §7). round_robin (v2, v3): queues take
// turns, so a transfer of one queue uses engine time another queue leaves free; FIFO within a
// queue. qos (v4): four classes of service; every transfer is in the default class while the ISA
// carries no priority operand, so it behaves as round_robin. fifo (a what-if): an engine serves
// transfers strictly in issue order across all its queues.
enum class QueueArbitration : uint8_t { round_robin, qos, fifo };
template <>
struct EnumNames<QueueArbitration> {
  static constexpr std::array<std::string_view, 3> names = {"round_robin", "qos", "fifo"};
};

// How HBM addresses are spread over the channels of a stack: modular (bit-slice: consecutive
// interleave granules on consecutive channels, so a stride that is a multiple of channels x granule
// keeps hitting the same channels) or hashed (a hash of the address picks the channel: any
// pattern spreads evenly).
enum class HbmInterleave : uint8_t { modular, hashed };
template <>
struct EnumNames<HbmInterleave> {
  static constexpr std::array<std::string_view, 2> names = {"modular", "hashed"};
};

enum class Topology : uint8_t { single, torus, switched };
template <>
struct EnumNames<Topology> {
  static constexpr std::array<std::string_view, 3> names = {"single", "torus", "switched"};
};

// Allowed range and documentation of one field. Bounds are inclusive and apply to numbers,
// to every element of a number list and to every value of a per-dtype map.
//
// A doc that starts with "informational: " marks a key no simulated quantity reads (it describes the hardware, or
// waits for a model that will use it; the doc says which). Every other leaf key changes some simulated time, count
// or legality outcome: tests/sim/config_keys_live_test.cpp perturbs each one and checks that it does.
inline constexpr const char* kInformationalPrefix = "informational: ";
struct FieldInfo {
  const char* doc;
  double min = 0;
  double max = 1e300;
};
inline FieldInfo info(const char* doc, double min = 0, double max = 1e300) { return FieldInfo{doc, min, max}; }

struct ChipConfig {
  uint32_t physical_cores = 0;
  uint32_t default_logical_core_size = 0;
  std::vector<uint32_t> supported_logical_core_sizes;
  uint32_t collective_cores = 0;
  double base_clock_ghz = 0;
  double kernel_launch_ns = 0;

  template <class V>
  void visit(V& v) {
    v.field("physical_cores", physical_cores, info("NeuronCores on one chip", 1, 1024));
    v.field("default_logical_core_size", default_logical_core_size,
            info("physical cores per logical core (LNC) unless the user picks another", 1, 8));
    v.field("supported_logical_core_sizes", supported_logical_core_sizes,
            info("informational: LNC values the chip supports (validated: default_logical_core_size must be one; "
                 "the device and replay run that default)",
                 1, 8));
    v.field("collective_cores", collective_cores,
            info("CC-cores that drive a chip's collective transfers: at most this many of its transfers move at "
                 "once (sim/system)",
                 1, 1024));
    v.field("base_clock_ghz", base_clock_ghz,
            info("NeuronCore base clock: the profiler's cycle count (total_cycles) is in this clock", 0.01, 20));
    v.field("kernel_launch_ns", kernel_launch_ns,
            info("fixed cost of one kernel execution (program load, semaphore set-up, completion) before its first "
                 "instruction: stats launch_ns, charged once per launch (each eager op on the device); total_ns is the "
                 "body after it", 0, 1e9));
  }
};

struct TensorEngineConfig {
  double clock_ghz = 0;
  uint32_t pe_rows = 0;
  uint32_t pe_columns = 0;
  uint32_t fixed_overhead_cycles = 0;
  uint32_t min_initiation_interval_cycles = 0;
  std::map<DType, double> rate_factor_by_dtype;
  std::vector<DType> double_row_dtypes;
  double double_row_rate_factor = 0;
  uint32_t max_stationary_free_size = 0;
  std::map<DType, uint32_t> max_moving_free_size_by_psum_dtype;
  double load_stationary_speedup = 0;
  uint32_t tile_granularity_rows = 0;
  double fp32_transpose_speedup = 0;
  bool background_transpose = false;

  template <class V>
  void visit(V& v) {
    v.field("clock_ghz", clock_ghz, info("PE array clock", 0.01, 20));
    v.field("pe_rows", pe_rows, info("systolic array rows = contraction (K) per matmul instruction", 1, 4096));
    v.field("pe_columns", pe_columns, info("systolic array columns = stationary free size per instruction", 1, 4096));
    v.field("fixed_overhead_cycles", fixed_overhead_cycles,
            info("pipeline fill from issue to first PSUM write, paid once per dependent instruction", 0, 100000));
    v.field("min_initiation_interval_cycles", min_initiation_interval_cycles,
            info("shortest back-to-back matmul interval (MM_INIT_LATENCY)", 1, 100000));
    v.field("rate_factor_by_dtype", rate_factor_by_dtype,
            info("moving-data throughput relative to bf16: a pass takes 1 / this bf16 passes (an MX dtype's factor "
                 "counts its values per element: 4 / this); a dtype absent here cannot be a matmul input",
                 0.001, 64));
    v.field("double_row_dtypes", double_row_dtypes, info("dtypes that may use the double_row performance mode"));
    v.field("double_row_rate_factor", double_row_rate_factor,
            info("throughput relative to bf16 in double_row mode: K doubles per instruction and a pass takes 2 / this "
                 "bf16 passes",
                 0, 64));
    v.field("max_stationary_free_size", max_stationary_free_size, info("largest stationary free size", 1, 4096));
    v.field("max_moving_free_size_by_psum_dtype", max_moving_free_size_by_psum_dtype,
            info("largest moving free size for each PSUM output dtype; absent dtype = not a legal output", 1, 65536));
    v.field("load_stationary_speedup", load_stationary_speedup,
            info("LoadStationary runs this many times faster than a MultiplyMoving of equal free size; loaded in the "
                 "background of the previous matmul, it bounds the matmul interval below by N_stationary / this",
                 1, 64));
    v.field("tile_granularity_rows", tile_granularity_rows,
            info("smallest row/column tile for concurrent small matmuls (not modelled yet: nc_matmul's "
                 "tile_position is neither checked nor timed)",
                 1, 4096));
    v.field("fp32_transpose_speedup", fp32_transpose_speedup, info("speed-up of the PE transpose mode on fp32", 1, 16));
    v.field("background_transpose", background_transpose,
            info("a transpose may run concurrently with another matmul or transpose (the Tensor engine has a "
                 "second, transpose-only lane)"));
  }
};

// Vector, Scalar and GpSimd engines share this shape; each adds its own few fields.
struct ComputeEngineConfig {
  double clock_ghz = 0;
  uint32_t lanes = 0;
  std::map<DType, uint32_t> elements_per_cycle_by_dtype;
  uint32_t fixed_overhead_cycles = 0;
  uint32_t min_initiation_interval_cycles = 0;
  std::vector<uint32_t> performance_modes;

  template <class V>
  void visit(V& v) {
    visit_fields(v, "throughput multipliers the hardware may select (its published rules say when)");
  }
  // The fields, with the doc of performance_modes (an engine without published modes marks it informational).
  template <class V>
  void visit_fields(V& v, const char* performance_modes_doc) {
    v.field("clock_ghz", clock_ghz, info("engine clock", 0.01, 20));
    v.field("lanes", lanes, info("partitions processed in parallel", 1, 4096));
    v.field("elements_per_cycle_by_dtype", elements_per_cycle_by_dtype,
            info("published datapath width in elements per cycle (all lanes, best mode); / lanes = elements per lane "
                 "per cycle, which caps the performance mode of an instruction streaming the dtype and, below 1, "
                 "slows it; a dtype absent here cannot be read or written by the engine",
                 1, 1 << 20));
    v.field("fixed_overhead_cycles", fixed_overhead_cycles,
            info("static cost added to a dependent or small instruction", 0, 100000));
    v.field("min_initiation_interval_cycles", min_initiation_interval_cycles,
            info("shortest interval between two instructions (MIN_II)", 1, 100000));
    v.field("performance_modes", performance_modes, info(performance_modes_doc, 1, 64));
  }
};

struct VectorEngineConfig : ComputeEngineConfig {};

struct ScalarEngineConfig : ComputeEngineConfig {
  uint32_t accumulator_readout_cycles = 0;
  template <class V>
  void visit(V& v) {
    ComputeEngineConfig::visit(v);
    v.field("accumulator_readout_cycles", accumulator_readout_cycles,
            info("cost of reading the per-lane reduce registers (ActReadAccumulator)", 0, 100000));
  }
};

struct GpSimdEngineConfig : ComputeEngineConfig {
  uint32_t processors = 0;
  template <class V>
  void visit(V& v) {
    // No GpSimd performance mode is published (A-V3, A-V4): the cost model runs it at one element per lane per cycle
    // (or slower, elements_per_cycle_by_dtype), whatever the list says.
    ComputeEngineConfig::visit_fields(v, "informational: GpSimd has no published performance mode; its instructions "
                                         "run at 1x whatever is listed (validated against the widths)");
    v.field("processors", processors, info("programmable vector processors, each wired to lanes/processors partitions",
                                           1, 1024));
  }
};

struct SyncEngineConfig {
  double clock_ghz = 0;
  uint32_t fixed_overhead_cycles = 0;
  template <class V>
  void visit(V& v) {
    v.field("clock_ghz", clock_ghz, info("sequencer clock", 0.01, 20));
    v.field("fixed_overhead_cycles", fixed_overhead_cycles,
            info("cost of one control instruction (semaphore, DMA trigger)", 0, 100000));
  }
};

struct SbufConfig {
  uint32_t partitions = 0;
  uint64_t bytes_per_partition = 0;
  uint32_t quadrant_partitions = 0;
  template <class V>
  void visit(V& v) {
    v.field("partitions", partitions, info("partitions (rows) of the state buffer", 1, 4096));
    // The cap is the simulator's, not the hardware's (224 KiB on trn2, trainium.md A-V3): 128 x
    // 64 MiB is 8 GiB of host memory per core.
    v.field("bytes_per_partition", bytes_per_partition,
            info("bytes in one partition (the simulator holds at most 64 MiB)", 1, 1ull << 26));
    v.field("quadrant_partitions", quadrant_partitions,
            info("partitions per quadrant (cross-partition moves stay inside one)", 1, 4096));
  }
};

struct PsumConfig {
  uint32_t partitions = 0;
  uint64_t bytes_per_partition = 0;
  uint32_t banks = 0;
  uint64_t bank_bytes = 0;
  template <class V>
  void visit(V& v) {
    v.field("partitions", partitions, info("partitions of the partial-sum buffer", 1, 4096));
    // The caps are the simulator's, as for SBUF (hardware: 16 KiB, 2 KiB banks; trainium.md A-V3).
    v.field("bytes_per_partition", bytes_per_partition,
            info("bytes in one partition (the simulator holds at most 64 MiB)", 1, 1ull << 26));
    v.field("banks", banks, info("accumulation banks per partition", 1, 1024));
    v.field("bank_bytes", bank_bytes,
            info("bytes of one bank in one partition (the simulator holds at most 64 MiB)", 1, 1ull << 26));
  }
};

struct MemoryConflictConfig {
  OnChipMemory memory = OnChipMemory::sbuf;
  std::vector<Engine> engines;
  ConflictScope scope = ConflictScope::memory;
  ConflictCondition condition = ConflictCondition::always;
  template <class V>
  void visit(V& v) {
    v.field("memory", memory, info("memory the engines contend for"));
    v.field("engines", engines, info("engines whose accesses serialise"));
    v.field("scope", scope, info("memory: any two accesses conflict; bank: only accesses to the same PSUM bank"));
    v.field("condition", condition, info("always, or only while the Vector engine is in a performance mode"));
  }
};

struct MemoryAccessConfig {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) std::vector<Engine> name##_engines;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  std::vector<MemoryConflictConfig> conflicts;
  template <class V>
  void visit(V& v) {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) \
  v.field(#name "_engines", name##_engines, info("engines that may read or write the " doc));
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
    v.field("conflicts", conflicts, info("engine pairs whose accesses to one memory serialise"));
  }
  const std::vector<Engine>& engines_reaching(OnChipMemory memory) const {
    switch (memory) {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) \
  case OnChipMemory::name:                           \
    return name##_engines;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
    }
    throw std::logic_error("internal: unregistered on-chip memory");
  }
};

struct DmaConfig {
  uint32_t engines_per_core = 0;
  uint32_t queues_per_engine = 0;
  double bandwidth_per_engine_gbps = 0;
  double start_latency_ns = 0;
  double fixed_latency_ns = 0;
  double descriptor_processing_ns = 0;
  uint32_t min_chunk_bytes = 1;
  uint32_t hardware_dge_per_core = 0;
  double hardware_dge_instruction_ns = 0;
  double software_dge_cycles_per_descriptor = 0;
  QueueArbitration queue_arbitration = QueueArbitration::round_robin;
  bool transpose_supported = false;
  double transpose_hbm_to_sbuf_efficiency = 0;
  double transpose_sbuf_to_sbuf_efficiency = 0;
  double read_add_write_efficiency = 0;
  template <class V>
  void visit(V& v) {
    v.field("engines_per_core", engines_per_core, info("DMA engines serving one NeuronCore", 1, 1024));
    v.field("queues_per_engine", queues_per_engine, info("hardware queues per DMA engine", 1, 1024));
    v.field("bandwidth_per_engine_gbps", bandwidth_per_engine_gbps,
            info("bytes per ns one engine streams once its descriptors are processed", 0.001, 1e6));
    v.field("start_latency_ns", start_latency_ns,
            info("latency from a transfer's trigger until its engines start it (descriptor setup, synchronization, "
                 "semaphore-to-start); not engine time: hidden behind earlier transfers of the same queue",
                 0, 1e9));
    v.field("fixed_latency_ns", fixed_latency_ns,
            info("start-up time of a transfer on each engine it uses; the engine is busy for it", 0, 1e9));
    v.field("descriptor_processing_ns", descriptor_processing_ns,
            info("time an engine needs per descriptor (a run contiguous on the transfer's less fragmented side; at "
                 "least one per SBUF partition row): an engine's share of a transfer takes max(its descriptors x "
                 "this, its data time), so short rows bound throughput",
                 0, 1e9));
    v.field("min_chunk_bytes", min_chunk_bytes,
            info("bytes of engine time a chunk (a piece contiguous on both sides) takes at least: the data time of "
                 "an engine's share is max(bytes, chunks x this) / bandwidth, so fragmented "
                 "(strided, transposing) patterns move at a fraction of the rate",
                 1, 1 << 20));
    v.field("hardware_dge_per_core", hardware_dge_per_core, info("hardware descriptor-generation engines", 0, 64));
    v.field("hardware_dge_instruction_ns", hardware_dge_instruction_ns,
            info("time a hardware DGE is busy with one DMA instruction (dge_mode=hwdge)", 0, 1e9));
    v.field("software_dge_cycles_per_descriptor", software_dge_cycles_per_descriptor,
            info("GpSimd cycles to build one descriptor for dge_mode=swdge and indirect DMA (after the GpSimd "
                 "fixed overhead); the GpSimd engine is busy for it",
                 0, 1e9));
    v.field("queue_arbitration", queue_arbitration,
            info("how an engine picks among its queues: round_robin (queues share the engine, FIFO within each), "
                 "qos (4 classes of service; one class until the ISA carries a priority: as round_robin), fifo "
                 "(strict issue order across queues)"));
    v.field("transpose_supported", transpose_supported, info("DMA can transpose 2-byte dtypes in flight"));
    v.field("transpose_hbm_to_sbuf_efficiency", transpose_hbm_to_sbuf_efficiency,
            info("fraction of copy throughput a HBM->SBUF transpose reaches", 0, 1));
    v.field("transpose_sbuf_to_sbuf_efficiency", transpose_sbuf_to_sbuf_efficiency,
            info("fraction of copy throughput an SBUF->SBUF transpose reaches", 0, 1));
    v.field("read_add_write_efficiency", read_add_write_efficiency,
            info("fraction of copy throughput of a DMA read-add-write (B += A)", 0, 1));
  }
};

struct CoreConfig {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) config_struct name;
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) config_struct name;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  MemoryAccessConfig memory_access;
  DmaConfig dma;
  template <class V>
  void visit(V& v) {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) v.field(#name, name, info(doc));
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) v.field(#name, name, info(doc));
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
    v.field("memory_access", memory_access, info("which engines reach which on-chip memory"));
    v.field("dma", dma, info("DMA engines and queues of one core"));
  }
};

// Calls f with the typed config of a queued engine (TensorEngineConfig, VectorEngineConfig, ...) and returns what it
// returns: the one switch over engines. Per-engine behaviour is an overload of f on the config struct, so a newly
// registered engine that lacks one does not compile. The DMA engines have no such config: a logic_error.
template <class F>
decltype(auto) with_engine_config(const CoreConfig& core, Engine engine, F&& f) {
  switch (engine) {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) \
  case Engine::name:                                       \
    return f(core.name);
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
    case Engine::dma: break;
  }
  throw std::logic_error("internal: the DMA engines have no engine config");
}

// Calls f(engine, config) for every queued engine, in registration order.
template <class F>
void for_each_engine_config(const CoreConfig& core, F&& f) {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) f(Engine::name, core.name);
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
}

// The typed config of an on-chip memory, as with_engine_config.
template <class F>
decltype(auto) with_onchip_memory_config(const CoreConfig& core, OnChipMemory memory, F&& f) {
  switch (memory) {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) \
  case OnChipMemory::name:                           \
    return f(core.name);
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  }
  throw std::logic_error("internal: unregistered on-chip memory");
}
// The rules of a compute engine (lanes over partitions, dtype widths): every registered engine whose config is a
// ComputeEngineConfig (Vector, Scalar, GpSimd); nullptr for the others.
inline const ComputeEngineConfig* compute_engine_config(const CoreConfig& core, Engine engine) {
  if (engine == Engine::dma) return nullptr;
  return with_engine_config(core, engine, [](const auto& config) -> const ComputeEngineConfig* {
    if constexpr (std::is_base_of_v<ComputeEngineConfig, std::decay_t<decltype(config)>>) return &config;
    return nullptr;
  });
}
inline uint32_t onchip_partitions(const CoreConfig& core, OnChipMemory memory) {
  return with_onchip_memory_config(core, memory, [](const auto& config) { return config.partitions; });
}
inline uint64_t onchip_bytes_per_partition(const CoreConfig& core, OnChipMemory memory) {
  return with_onchip_memory_config(core, memory, [](const auto& config) { return config.bytes_per_partition; });
}

struct HbmConfig {
  uint32_t stacks = 0;
  std::vector<uint32_t> stack_by_core;
  uint64_t capacity_bytes = 0;
  double bandwidth_gbps = 0;
  double latency_ns = 0;
  uint32_t channels_per_stack = 0;
  uint32_t interleave_bytes = 0;
  HbmInterleave interleave = HbmInterleave::hashed;
  template <class V>
  void visit(V& v) {
    v.field("stacks", stacks, info("HBM stacks on the chip", 1, 64));
    v.field("stack_by_core", stack_by_core, info("HBM stack that serves each physical core, by core index", 0, 63));
    v.field("capacity_bytes", capacity_bytes, info("HBM capacity of the chip", 1, 1e15));
    v.field("bandwidth_gbps", bandwidth_gbps, info("HBM bandwidth of the chip, shared evenly by its stacks", 0.001, 1e7));
    v.field("latency_ns", latency_ns, info("access latency seen by a DMA read", 0, 1e6));
    v.field("channels_per_stack", channels_per_stack,
            info("independent channels of one stack, each with an equal share of its bandwidth", 1, 64));
    v.field("interleave_bytes", interleave_bytes,
            info("bytes of consecutive addresses on one channel before the next channel (modular interleave)", 1,
                 1 << 20));
    v.field("interleave", interleave,
            info("how addresses map to channels: modular (a transfer touching few channels gets only their "
                 "bandwidth) or hashed (every pattern spreads over all channels)"));
  }
};

struct HostLinkConfig {
  double bandwidth_gbps = 0;
  double latency_ns = 0;
  template <class V>
  void visit(V& v) {
    v.field("bandwidth_gbps", bandwidth_gbps, info("host <-> device copy bandwidth per chip", 0.001, 1e6));
    v.field("latency_ns", latency_ns, info("fixed latency of one host <-> device copy", 0, 1e9));
  }
};

struct NeuronLinkConfig {
  std::string version;
  uint32_t links_per_chip = 0;
  double bandwidth_per_link_gbps = 0;
  double latency_ns = 0;
  template <class V>
  void visit(V& v) {
    // The systems' per-dimension bandwidths drive the torus links (sim/system); these describe the chip's links.
    v.field("version", version, info("informational: NeuronLink generation"));
    v.field("links_per_chip", links_per_chip,
            info("informational: chip-to-chip links on one chip (a torus system's neighbours follow its dimensions)",
                 0, 1024));
    v.field("bandwidth_per_link_gbps", bandwidth_per_link_gbps,
            info("informational: one link, one direction (a torus link's rate is its dimension's per-chip bandwidth "
                 "over the dimension's two neighbours)",
                 0, 1e6));
    v.field("latency_ns", latency_ns, info("one hop of a torus link: added to each transfer per link it crosses", 0, 1e9));
  }
};

struct SwitchLevelConfig {
  uint32_t chips_per_group = 0;
  double bandwidth_per_chip_gbps = 0;
  double latency_ns = 0;
  template <class V>
  void visit(V& v) {
    v.field("chips_per_group", chips_per_group,
            info("groups of the level below joined by one switch (chips at a switched fabric's first level; tori at "
                 "a torus system's first level)",
                 1, 1 << 20));
    v.field("bandwidth_per_chip_gbps", bandwidth_per_chip_gbps,
            info("per-chip bandwidth into this level, each direction (a chip's port, shared by its transfers)", 0.001,
                 1e6));
    v.field("latency_ns", latency_ns, info("one traversal of this level's switch", 0, 1e9));
  }
};

struct SystemConfig {
  std::string description;
  uint32_t chips = 0;
  Topology topology = Topology::single;
  std::vector<uint32_t> torus_dimensions;
  std::vector<double> bandwidth_per_chip_gbps_by_dimension;
  std::vector<SwitchLevelConfig> switch_levels;
  template <class V>
  void visit(V& v) {
    // The multi-chip model (sim/system) builds its chips and links from these; `config show` prints them.
    v.field("description", description, info("informational: what this system is"));
    v.field("chips", chips, info("Trainium chips in the system", 1, 1 << 20));
    v.field("topology", topology, info("single chip, torus of NeuronLinks, or switched fabric"));
    v.field("torus_dimensions", torus_dimensions, info("ring size along each torus dimension (torus only)", 1, 1 << 20));
    v.field("bandwidth_per_chip_gbps_by_dimension", bandwidth_per_chip_gbps_by_dimension,
            info("per-chip bandwidth along each torus dimension, each direction, split over the dimension's two "
                 "neighbours (torus only)",
                 0.001, 1e6));
    v.field("switch_levels", switch_levels,
            info("switch hierarchy from the innermost level out (switched fabric; or, on a torus system, the network "
                 "joining its tori, e.g. servers over EFA)"));
  }
};

// How the runtime runs a collective across chips (collectives.md §2): the algorithm by message size and the
// per-step cost of the CC-cores' software handshake.
struct CollectivesConfig {
  double step_latency_ns = 0;
  uint64_t mesh_max_bytes = 0;
  uint64_t recursive_max_bytes = 0;
  template <class V>
  void visit(V& v) {
    v.field("step_latency_ns", step_latency_ns,
            info("fixed cost of each step of a collective on a rank (semaphore hand-off and DMA start of the CC-core)",
                 0, 1e9));
    v.field("mesh_max_bytes", mesh_max_bytes,
            info("messages up to this size take the mesh algorithm (one step, every peer directly)", 0,
                 uint64_t{1} << 50));
    v.field("recursive_max_bytes", recursive_max_bytes,
            info("messages up to this size (above mesh_max_bytes) take recursive doubling / halving; larger ones "
                 "the ring",
                 0, uint64_t{1} << 50));
  }
};

struct HardwareConfig {
  std::string name;
  std::string description;
  Generation generation = Generation::trn2;
  ChipConfig chip;
  CoreConfig core;
  HbmConfig hbm;
  HostLinkConfig host_link;
  NeuronLinkConfig neuronlink;
  CollectivesConfig collectives;
  std::map<std::string, SystemConfig> systems;
  std::string default_system;

  template <class V>
  void visit(V& v) {
    v.field("name", name, info("informational: short name of this configuration (named in stats and traces)"));
    v.field("description", description, info("informational: one line on what it describes"));
    v.field("generation", generation, info("Trainium generation whose ISA rules apply"));
    v.field("chip", chip, info("chip-level organisation"));
    v.field("core", core, info("one physical NeuronCore"));
    v.field("hbm", hbm, info("device memory"));
    v.field("host_link", host_link, info("link between host memory and the device"));
    v.field("neuronlink", neuronlink, info("chip-to-chip links"));
    v.field("collectives", collectives, info("how collectives run across the chips of a system"));
    v.field("systems", systems, info("multi-chip systems built from this chip, by name"));
    v.field("default_system", default_system,
            info("informational: the system `trnsim bench collective` and `config show`'s system figures use unless "
                 "another is named"));
  }
};

// A loaded config together with where it came from and its identity.
struct LoadedConfig {
  HardwareConfig hardware;
  std::string source_file;   // the file the user named (after name resolution)
  std::string canonical_yaml;  // the effective config, printed canonically
  std::string hash;          // stable hash of canonical_yaml: 16 hex digits
};

}  // namespace trnsim
