// Kernel-program execution for the PyTorch device (see kernel_executor.h). Torch-free.
#include "frontend/kernel_executor.h"

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>

#include "isa/numerics/float_format.h"
#include "sim/simulator.h"

namespace trnsim::frontend {
namespace {

constexpr size_t kMaxCachedPrograms = 1024;
std::mutex g_mutex;
std::mutex g_simulate_mutex;  // SystemC keeps one global context: one simulation at a time
std::unique_ptr<HardwareConfig> g_config;
std::string g_hash;
std::map<std::string, std::shared_ptr<const isa::Program>> g_cache;
std::map<int, double> g_clock;
std::vector<OpRecord> g_log;

void copy_converted(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size_bytes(src_dtype));
    return;
  }
  std::vector<float> tmp(count);
  numerics::convert_to_fp32(src_dtype, src, tmp.data(), count);
  numerics::convert_from_fp32(dst_dtype, tmp.data(), dst, count, numerics::RoundingMode::nearest_even);
}

}  // namespace

void executor_set_hardware(const HardwareConfig& config, const std::string& hash) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = std::make_unique<HardwareConfig>(config);
  g_hash = hash;
  g_cache.clear();
}

OpRecord execute_program(int device, const std::string& key, const ProgramBuilderFn& build,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record) {
  std::shared_ptr<const isa::Program> program;
  std::shared_ptr<const HardwareConfig> config;
  std::string hash;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_config) throw std::runtime_error("trnsim: no hardware configured for the neuron device");
    config = std::make_shared<const HardwareConfig>(*g_config);
    hash = g_hash;
    auto it = g_cache.find(key);
    if (it != g_cache.end()) program = it->second;
  }
  if (!program) {
    program = std::make_shared<const isa::Program>(build(*config));
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_cache.size() >= kMaxCachedPrograms) g_cache.clear();  // e.g. many distinct immediates
    g_cache.emplace(key, program);
  }
  auto allocation = [&](const HostBuffer& buffer) {
    const int id = program->find_allocation(buffer.allocation);
    if (id < 0) throw std::runtime_error("trnsim: program '" + key + "' has no allocation '" + buffer.allocation + "'");
    return static_cast<uint32_t>(id);
  };
  sim::SimOptions options;
  options.cores = {0};
  std::lock_guard<std::mutex> simulating(g_simulate_mutex);
  sim::SimResult result = sim::simulate(*program, *config, hash, options, [&](uint32_t, isa::CoreState& state) {
    for (const HostBuffer& in : inputs) {
      const uint32_t id = allocation(in);
      const DType dst = program->allocations[id].dtype;
      std::vector<uint8_t>& bytes = state.hbm(id);
      if (bytes.size() < in.count * dtype_size_bytes(dst))
        throw std::runtime_error("trnsim: input '" + in.allocation + "' larger than its allocation");
      copy_converted(in.dtype, in.data, dst, bytes.data(), in.count);
    }
  });
  if (result.states.empty()) throw std::runtime_error("trnsim: the simulation returned no values");
  for (const HostBuffer& out : outputs) {
    const uint32_t id = allocation(out);
    const DType src = program->allocations[id].dtype;
    const std::vector<uint8_t>& bytes = result.states.front()->hbm(id);
    if (bytes.size() < out.count * dtype_size_bytes(src))
      throw std::runtime_error("trnsim: output '" + out.allocation + "' larger than its allocation");
    copy_converted(src, bytes.data(), out.dtype, out.data, out.count);
  }
  const sim::SimStats& stats = result.stats;
  record.device = device;
  record.ns = stats.total_ns;
  record.flops = stats.flops;
  record.mfu = stats.mfu();
  double busiest = -1;
  for (const auto& [name, engine] : stats.engines) {
    if (engine.busy_ns > busiest) {
      busiest = engine.busy_ns;
      const size_t dot = name.find('.');
      record.bottleneck = dot == std::string::npos ? name : name.substr(dot + 1);
    }
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_clock[device] += record.ns;
  g_log.push_back(record);
  return record;
}

double simulated_ns(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (device >= 0) {
    auto it = g_clock.find(device);
    return it == g_clock.end() ? 0 : it->second;
  }
  double total = 0;
  for (const auto& [d, ns] : g_clock) total += ns;
  return total;
}

void reset_simulated_time() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_clock.clear();
}

std::vector<OpRecord> op_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_log;
}

void reset_op_log() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_log.clear();
}

size_t program_cache_size() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_cache.size();
}

}  // namespace trnsim::frontend
