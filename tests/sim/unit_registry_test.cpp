// The unit registrations (config/engine_units.def, config/onchip_memory_units.def, issue 14 item 0): every
// registered engine and on-chip memory reaches each part that enumerates units — its config keys, its queue in the
// NeuronCore, its stats entry, its trace row, its memory space in the ISA — through the one list. The expected
// costs are the hand formula (an instruction's issue on a sequencer = the engine's shortest instruction).
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "config/config_loader.h"
#include "config/config_printer.h"
#include "isa/builder.h"
#include "isa/legality.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

bool has_key(const std::vector<ConfigKeyDoc>& keys, const std::string& path) {
  for (const ConfigKeyDoc& key : keys) {
    if (key.path == path) return true;
  }
  return false;
}

// The shortest instruction of each engine, written out per engine from the config's own fields (not through the
// registry's dispatch, which is what is under test).
double shortest_issue_ns(const CoreConfig& core, Engine engine) {
  switch (engine) {
    case Engine::tensor: return core.tensor.min_initiation_interval_cycles / core.tensor.clock_ghz;
    case Engine::vector: return core.vector.min_initiation_interval_cycles / core.vector.clock_ghz;
    case Engine::scalar: return core.scalar.min_initiation_interval_cycles / core.scalar.clock_ghz;
    case Engine::gpsimd: return core.gpsimd.min_initiation_interval_cycles / core.gpsimd.clock_ghz;
    case Engine::sync: return core.sync.fixed_overhead_cycles / core.sync.clock_ghz;
    case Engine::dma: break;
  }
  ADD_FAILURE() << "a registered engine without an expected issue cost here: " << enum_name(engine);
  return 0;
}

TEST(UnitRegistry, EveryEngineHasKeysAQueueStatsAndATraceRow) {
  const HardwareConfig hw = load_config("trn2", {}).hardware;
  const std::vector<ConfigKeyDoc> keys = describe_config_keys();
  std::set<std::string> rows;
  for (size_t i = 0; i < kQueuedEngineCount; ++i) {
    const auto engine = static_cast<Engine>(i);
    const std::string name(enum_name(engine));
    EXPECT_TRUE(has_key(keys, "core." + name + ".clock_ghz")) << name;
    EXPECT_TRUE(rows.insert(std::string(engine_trace_row(engine))).second) << name << ": a trace row used twice";

    // One semaphore signal issued on the engine: its queue, stats and trace row exist and it costs the engine's
    // shortest instruction.
    isa::ProgramBuilder b("signal_on_" + name, hw.generation);
    b.emit(isa::Opcode::sem_signal).on(engine).imm("sem", 0).imm("value", 1);
    isa::check_program(b.program(), hw);
    SimOptions options;
    options.trace = true;
    options.timing_only = true;
    SimResult result = simulate(b.program(), hw, "test", options);
    const EngineStats& stats = result.stats.engines.at("core0." + name);
    EXPECT_EQ(stats.instructions, 1u) << name;
    EXPECT_NEAR(stats.busy_ns, shortest_issue_ns(hw.core, engine), 1e-9) << name;
    EXPECT_NEAR(result.stats.total_ns, shortest_issue_ns(hw.core, engine), 1e-9) << name;
    std::ostringstream trace;
    result.trace->write(trace);
    EXPECT_NE(trace.str().find("\"" + std::string(engine_trace_row(engine)) + "\""), std::string::npos) << name;
  }
  EXPECT_EQ(enum_name(Engine::dma), "dma");
  EXPECT_EQ(engine_trace_row(Engine::dma), "DMA");
}

TEST(UnitRegistry, EveryOnChipMemoryHasKeysASpaceAModuleAndAHighWaterMark) {
  const HardwareConfig hw = load_config("trn2", {}).hardware;
  const std::vector<ConfigKeyDoc> keys = describe_config_keys();
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    const auto memory = static_cast<OnChipMemory>(m);
    const std::string name(enum_name(memory));
    EXPECT_TRUE(has_key(keys, "core." + name + ".partitions")) << name;
    EXPECT_TRUE(has_key(keys, "core." + name + ".bytes_per_partition")) << name;
    EXPECT_TRUE(has_key(keys, "core.memory_access." + name + "_engines")) << name;
    const std::optional<isa::MemorySpace> space = isa::parse_memory_space(name);
    ASSERT_TRUE(space.has_value()) << name;
    EXPECT_TRUE(isa::is_on_chip(*space)) << name;
    EXPECT_EQ(isa::on_chip_memory(*space), memory) << name;
    EXPECT_EQ(std::string(isa::memory_space_name(*space)), name);
  }
  EXPECT_EQ(isa::parse_memory_space("hbm"), isa::MemorySpace::hbm);
  EXPECT_FALSE(isa::parse_memory_space("none").has_value());
  EXPECT_FALSE(isa::is_on_chip(isa::MemorySpace::hbm));

  // A tile written in SBUF and one in PSUM: each memory's module records its own high-water mark.
  isa::ProgramBuilder b("high_water", hw.generation);
  const uint32_t in_sbuf = b.sbuf("s", DType::fp32, {128, 64});   // 256 B per partition
  const uint32_t in_psum = b.psum("p", DType::fp32, {128, 128});  // 512 B per partition
  b.emit(isa::Opcode::memset).tensor("dst", b.view(in_sbuf)).imm("value", 1.0);
  b.emit(isa::Opcode::memset).tensor("dst", b.view(in_psum)).imm("value", 2.0);
  isa::check_program(b.program(), hw);
  SimOptions options;
  options.timing_only = true;
  SimResult result = simulate(b.program(), hw, "test", options);
  EXPECT_EQ(result.stats.high_water_bytes(OnChipMemory::sbuf), 128u * 256u);
  EXPECT_EQ(result.stats.high_water_bytes(OnChipMemory::psum), 128u * 512u);
  const std::string json = result.stats.to_json();
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    EXPECT_NE(json.find("\"" + std::string(enum_name(static_cast<OnChipMemory>(m))) + "\""), std::string::npos);
  }
}

}  // namespace
}  // namespace trnsim::sim
