// The units of a NeuronCore as enums, generated from their registration lists (engine_units.def,
// onchip_memory_units.def). Small on purpose: the ISA's access patterns name memories with it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/enum_names.h"

namespace trnsim {

// Units of a NeuronCore that move or compute data: the queued engines registered in engine_units.def, then "dma",
// which stands for the core's DMA engines.
enum class Engine : uint8_t {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) name,
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
  dma
};
// Engines with a queue of their own (all but dma); Engine values below this index them.
inline constexpr size_t kQueuedEngineCount = static_cast<size_t>(Engine::dma);
template <>
struct EnumNames<Engine> {
  static constexpr std::array<std::string_view, kQueuedEngineCount + 1> names = {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) #name,
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
      "dma"};
};
// The engine's row in traces and profiles (PROF: "TensorMatrix", ...; "DMA" for the DMA engines).
inline std::string_view engine_trace_row(Engine engine) {
  static constexpr std::array<std::string_view, kQueuedEngineCount + 1> rows = {
#define TRNSIM_ENGINE(name, config_struct, trace_row, doc) trace_row,
#include "config/engine_units.def"
#undef TRNSIM_ENGINE
      "DMA"};
  return rows[static_cast<size_t>(engine)];
}

// The on-chip memories registered in onchip_memory_units.def.
enum class OnChipMemory : uint8_t {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) name,
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
};
template <>
struct EnumNames<OnChipMemory> {
  static constexpr std::array names = {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) std::string_view(#name),
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  };
};
inline constexpr size_t kOnChipMemoryCount = EnumNames<OnChipMemory>::names.size();

}  // namespace trnsim
