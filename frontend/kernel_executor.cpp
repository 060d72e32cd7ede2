// Kernel-program execution for the PyTorch device (see kernel_executor.h). Torch-free.
#include "frontend/kernel_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "isa/numerics/float_format.h"
#include "kernels/kernel_common.h"
#include "sim/simulator.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::frontend {
namespace {

using ProgramParts = std::vector<std::shared_ptr<const isa::Program>>;  // one per physical core

constexpr size_t kMaxCachedPrograms = 1024;
std::mutex g_mutex;
std::mutex g_simulate_mutex;  // SystemC keeps one global context: one simulation at a time
std::unique_ptr<HardwareConfig> g_config;
std::string g_hash;
std::map<std::string, ProgramParts> g_cache;
std::map<int, double> g_clock;
std::vector<OpRecord> g_log;
bool g_timeline_enabled = false;
std::unique_ptr<sim::TraceWriter> g_timeline;
std::map<int, double> g_timeline_origin;  // each device's clock when the timeline was reset

void copy_converted(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size_bytes(src_dtype));
    return;
  }
  std::vector<float> tmp(count);
  numerics::convert_to_fp32(src_dtype, src, tmp.data(), count);
  numerics::convert_from_fp32(dst_dtype, tmp.data(), dst, count, numerics::RoundingMode::nearest_even);
}

std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes) {
  std::ostringstream s;
  for (size_t i = 0; i < shapes.size(); ++i) {
    s << (i ? ", " : "") << "[";
    for (size_t j = 0; j < shapes[i].size(); ++j) s << (j ? ", " : "") << shapes[i][j];
    s << "]";
  }
  return s.str();
}

std::string device_process(int device) { return "neuron:" + std::to_string(device); }

// Under g_mutex: places the record on the device's clock, logs it and, while profiling, adds its
// slice to the device's ops (or host link) track.
void commit_locked(OpRecord& record) {
  record.start_ns = g_clock[record.device];
  g_clock[record.device] += record.ns;
  g_log.push_back(record);
  if (!g_timeline_enabled) return;
  if (!g_timeline) g_timeline = std::make_unique<sim::TraceWriter>();
  const int process = g_timeline->find_or_add_process(device_process(record.device), record.device * 100);
  const int ops = g_timeline->find_or_add_track(process, "ops", 0);
  std::vector<std::pair<std::string, std::string>> args = {
      {"kind", record.kind}, {"shapes", shapes_text(record.shapes)}, {"dtype", record.dtype},
      {"simulated_ns", std::to_string(record.ns)}};
  if (record.kind == "kernel") {
    args.push_back({"flops", std::to_string(record.flops)});
    args.push_back({"mfu", std::to_string(record.mfu)});
    args.push_back({"bottleneck", record.bottleneck});
  } else {
    args.push_back({"host_link_bytes", std::to_string(record.bytes)});
  }
  const std::string name = record.kind == "fallback" ? "fallback " + record.op : record.op;
  // Host seconds are left out of the trace so that it is the same bit for bit on every run.
  const double start = record.start_ns - g_timeline_origin[record.device];
  g_timeline->slice(process, ops, start, record.ns, name, args);
  if (record.kind != "kernel" && record.bytes > 0) {
    const int link = g_timeline->find_or_add_track(process, "host link", 1);
    g_timeline->slice(process, link, start, record.ns, name, {{"bytes", std::to_string(record.bytes)}});
  }
}

double host_link_ns(const HardwareConfig& config, uint64_t bytes) {
  if (bytes == 0) return 0;
  return config.host_link.latency_ns + double(bytes) / config.host_link.bandwidth_gbps;  // GB/s = bytes/ns
}

}  // namespace

void executor_set_hardware(const HardwareConfig& config, const std::string& hash) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_config = std::make_unique<HardwareConfig>(config);
  g_hash = hash;
  g_cache.clear();
}

uint32_t cores_per_device(const HardwareConfig& config) {
  return std::max<uint32_t>(1, std::min(config.chip.default_logical_core_size, config.chip.physical_cores));
}

OpRecord execute_program(int device, const std::string& key, const ProgramBuilderFn& build,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record) {
  const auto host_start = std::chrono::steady_clock::now();
  ProgramParts parts;
  std::shared_ptr<const HardwareConfig> config;
  std::string hash;
  bool trace = false;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_config) throw std::runtime_error("trnsim: no hardware configured for the neuron device");
    config = std::make_shared<const HardwareConfig>(*g_config);
    hash = g_hash;
    trace = g_timeline_enabled;
    auto it = g_cache.find(key);
    if (it != g_cache.end()) parts = it->second;
  }
  const uint32_t lnc = cores_per_device(*config);
  if (parts.empty()) {
    try {
      for (uint32_t core = 0; core < lnc; ++core)
        parts.push_back(std::make_shared<const isa::Program>(build(*config, core, lnc)));
    } catch (const kernels::SplitUnsupported&) {
      if (lnc == 1) throw;
      // Some kernels cannot split some shapes (e.g. a matmul whose transposing pass would race
      // between cores): the whole kernel on the first core, the others idle. Any other failure of a
      // split build propagates (a bug must not hide behind a slower one-core run).
      parts.clear();
      isa::Program whole = build(*config, 0, 1);
      isa::Program idle = whole;
      idle.instructions.clear();
      parts.push_back(std::make_shared<const isa::Program>(std::move(whole)));
      for (uint32_t core = 1; core < lnc; ++core) parts.push_back(std::make_shared<const isa::Program>(idle));
    }
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_cache.size() >= kMaxCachedPrograms) g_cache.clear();  // e.g. many distinct immediates
    g_cache.emplace(key, parts);
  }
  const isa::Program& program = *parts.front();
  auto allocation = [&](const HostBuffer& buffer) {
    const int id = program.find_allocation(buffer.allocation);
    if (id < 0) throw std::runtime_error("trnsim: program '" + key + "' has no allocation '" + buffer.allocation + "'");
    return static_cast<uint32_t>(id);
  };
  sim::SimOptions options;
  options.cores.clear();
  for (uint32_t core = 0; core < lnc; ++core) options.cores.push_back(core);
  options.trace = trace;
  std::vector<const isa::Program*> programs;
  for (const auto& part : parts) programs.push_back(part.get());
  auto prepare = [&](uint32_t, isa::CoreState& state) {
    for (const HostBuffer& in : inputs) {
      const uint32_t id = allocation(in);
      const DType dst = program.allocations[id].dtype;
      std::vector<uint8_t>& bytes = state.hbm(id);
      if (bytes.size() < in.count * dtype_size_bytes(dst))
        throw std::runtime_error("trnsim: input '" + in.allocation + "' larger than its allocation");
      copy_converted(in.dtype, in.data, dst, bytes.data(), in.count);
    }
  };
  std::unique_lock<std::mutex> simulating(g_simulate_mutex);
  sim::SimResult result = sim::simulate(programs, *config, hash, options, prepare, /*shared_hbm=*/true);
  simulating.unlock();
  if (result.states.empty()) throw std::runtime_error("trnsim: the simulation returned no values");
  for (const HostBuffer& out : outputs) {
    const uint32_t id = allocation(out);
    const DType src = program.allocations[id].dtype;
    const std::vector<uint8_t>& bytes = result.states.front()->hbm(id);
    if (bytes.size() < out.count * dtype_size_bytes(src))
      throw std::runtime_error("trnsim: output '" + out.allocation + "' larger than its allocation");
    copy_converted(src, bytes.data(), out.dtype, out.data, out.count);
  }
  const sim::SimStats& stats = result.stats;
  record.kind = "kernel";
  record.device = device;
  record.ns = stats.total_ns;
  record.flops = stats.flops;
  record.mfu = stats.mfu();
  // The busiest engine kind summed over the device's cores ("core0.vector" + "core1.vector").
  std::map<std::string, double> busy;
  for (const auto& [name, engine] : stats.engines) {
    const size_t dot = name.find('.');
    busy[dot == std::string::npos ? name : name.substr(dot + 1)] += engine.busy_ns;
  }
  double busiest = -1;
  for (const auto& [name, ns] : busy) {
    if (ns > busiest) {
      busiest = ns;
      record.bottleneck = name;
    }
  }
  record.host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  std::lock_guard<std::mutex> lock(g_mutex);
  const double start_ns = g_clock[device];
  commit_locked(record);
  if (trace && result.trace && g_timeline) {
    g_timeline->append(*result.trace, start_ns - g_timeline_origin[device], device_process(device) + " ",
                       device * 100 + 1);
  }
  return record;
}

OpRecord record_host_transfer(int device, uint64_t bytes, OpRecord record) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_config) throw std::runtime_error("trnsim: no hardware configured for the neuron device");
  record.kind = "copy";
  record.device = device;
  record.bytes = bytes;
  record.ns = host_link_ns(*g_config, bytes);
  record.bottleneck = "host_link";
  commit_locked(record);
  return record;
}

OpRecord record_fallback(int device, uint64_t bytes_to_host, uint64_t bytes_to_device, double host_s,
                         OpRecord record) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_config) throw std::runtime_error("trnsim: no hardware configured for the neuron device");
  record.kind = "fallback";
  record.device = device;
  record.bytes = bytes_to_host + bytes_to_device;
  record.ns = host_link_ns(*g_config, bytes_to_host) + host_link_ns(*g_config, bytes_to_device);
  record.host_s = host_s;
  record.bottleneck = "host_link";
  commit_locked(record);
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

void set_timeline_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_timeline_enabled = enabled;
}

void reset_timeline() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_timeline.reset();
  g_timeline_origin = g_clock;
}

size_t write_timeline(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("trnsim: cannot write the trace to '" + path + "'");
  sim::TraceWriter empty;
  const sim::TraceWriter& timeline = g_timeline ? *g_timeline : empty;
  timeline.write(out);
  if (!out) throw std::runtime_error("trnsim: writing the trace to '" + path + "' failed");
  return timeline.slice_count();
}

}  // namespace trnsim::frontend
