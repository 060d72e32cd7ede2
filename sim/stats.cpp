#include "sim/stats.h"

#include <cstdio>
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
  j["sbuf"] = {{"high_water_bytes", sbuf_high_water_bytes}};
  j["psum"] = {{"high_water_bytes", psum_high_water_bytes}};
  j["host_seconds"] = host_seconds;
  j["instructions_per_host_second"] = instructions_per_host_second();
  return j.dump(2) + "\n";
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
  std::snprintf(line, sizeof line, "  DMA: %.1f MB moved, %.1f GB/s; high water: SBUF %.1f KiB, PSUM %.1f KiB\n",
                dma_bytes / 1e6, dma_achieved_gbps(), sbuf_high_water_bytes / 1024.0, psum_high_water_bytes / 1024.0);
  out << line;
  std::snprintf(line, sizeof line, "  simulator: %.3f s host, %.2f M instructions per host second\n", host_seconds,
                instructions_per_host_second() / 1e6);
  out << line;
  return out.str();
}

}  // namespace trnsim::sim
