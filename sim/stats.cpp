#include "sim/stats.h"

#include <cctype>
#include <cstdio>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <sstream>

namespace trnsim::sim {

double SimStats::utilization(const std::string& engine) const {
  auto it = engines.find(engine);
  return it == engines.end() || total_ns <= 0 ? 0 : it->second.busy_ns / total_ns;
}

std::string SimStats::to_json() const {
  nlohmann::ordered_json j;
  j["total_ns"] = total_ns;
  j["launch_ns"] = launch_ns;
  j["execution_ns"] = execution_ns();
  j["total_cycles"] = total_cycles;
  j["config"] = config_name;
  j["config_hash"] = config_hash;
  j["cores"] = cores;
  nlohmann::ordered_json by_opcode = nlohmann::ordered_json::object();
  for (const auto& [opcode, count] : instructions) by_opcode[opcode] = count;
  j["instructions"] = by_opcode;
  nlohmann::ordered_json engine_json = nlohmann::ordered_json::object();
  for (const auto& [name, e] : engines) {
    engine_json[name] = {{"busy_ns", e.busy_ns}, {"utilization", utilization(name)}, {"instructions", e.instructions}};
  }
  j["engines"] = engine_json;
  j["flops"] = flops;
  j["flops_dtype"] = flops_dtype;
  j["peak_tflops"] = peak_tflops;
  j["achieved_tflops"] = achieved_tflops();
  j["mfu"] = mfu();
  j["dma"] = {{"bytes", dma_bytes}, {"hbm_bytes", hbm_bytes}, {"achieved_gbps", dma_achieved_gbps()}};
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    const auto memory = static_cast<OnChipMemory>(m);
    j[std::string(enum_name(memory))] = {{"high_water_bytes", high_water_bytes(memory)}};
  }
  j["host_seconds"] = host_seconds;
  j["instructions_per_host_second"] = instructions_per_host_second();
  return j.dump(2) + "\n";
}

uint64_t& SimStats::high_water_bytes(OnChipMemory memory) {
  switch (memory) {
#define TRNSIM_ONCHIP_MEMORY(name, config_struct, doc) \
  case OnChipMemory::name:                           \
    return name##_high_water_bytes;
#include "config/onchip_memory_units.def"
#undef TRNSIM_ONCHIP_MEMORY
  }
  throw std::logic_error("internal: unregistered on-chip memory");
}

std::string SimStats::summary() const {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line,
                "simulated %.3f us (%.0f cycles at the base clock) on %u core(s), config %s (%s); a launch adds %.3f us\n",
                total_ns / 1e3, total_cycles, cores, config_name.c_str(), config_hash.c_str(), launch_ns / 1e3);
  out << line;
  for (const auto& [name, e] : engines) {
    std::snprintf(line, sizeof line, "  %-14s %6.1f%% busy  %8llu instructions\n", name.c_str(),
                  100 * utilization(name), static_cast<unsigned long long>(e.instructions));
    out << line;
  }
  std::snprintf(line, sizeof line, "  matmul: %.3f TFLOPS achieved (%s), MFU %.1f%% of %.1f TFLOPS\n",
                achieved_tflops(), flops_dtype.empty() ? "-" : flops_dtype.c_str(), 100 * mfu(), peak_tflops);
  out << line;
  std::snprintf(line, sizeof line, "  DMA: %.1f MB moved, %.1f GB/s; high water:", dma_bytes / 1e6, dma_achieved_gbps());
  out << line;
  for (size_t m = 0; m < kOnChipMemoryCount; ++m) {
    const auto memory = static_cast<OnChipMemory>(m);
    std::string name(enum_name(memory));
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::snprintf(line, sizeof line, "%s %s %.1f KiB", m ? "," : "", name.c_str(), high_water_bytes(memory) / 1024.0);
    out << line;
  }
  out << "\n";
  std::snprintf(line, sizeof line, "  simulator: %.3f s host, %.2f M instructions per host second\n", host_seconds,
                instructions_per_host_second() / 1e6);
  out << line;
  return out.str();
}

}  // namespace trnsim::sim
