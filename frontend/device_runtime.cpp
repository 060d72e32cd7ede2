#include "frontend/device_runtime.h"

#include <algorithm>
#include <fstream>
#include <stdexcept>

#include "record/launch_timeline.h"

namespace trnsim::frontend {
namespace {

constexpr size_t kMaxCachedPrograms = 1024;
constexpr size_t kMaxCachedTimings = 16384;  // a SimStats is a few hundred bytes

// The one global of the device: which runtime is current. Never destroyed: tensors freed while
// static destructors run at exit still account their bytes to it.
std::mutex& g_runtime_mutex = *new std::mutex();
std::shared_ptr<DeviceRuntime>& g_runtime = *new std::shared_ptr<DeviceRuntime>();

}  // namespace

DeviceRuntime::DeviceRuntime(const HardwareConfig& config, const std::string& hash) : m_config(config), m_hash(hash) {
  m_origin.name = config.name;
  m_origin.name_or_path = config.name;
  m_origin.hash = hash;
}

void DeviceRuntime::describe_config(const record::RecordedConfig& origin) {
  if (origin.hash != m_hash) {
    throw std::runtime_error("trnsim: config '" + origin.name_or_path + "' hashes to " + origin.hash +
                             " but the device runs " + m_hash);
  }
  std::lock_guard<std::mutex> lock(m_mutex);
  m_origin = origin;
}

record::RecordedConfig DeviceRuntime::config_origin() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_origin;
}

ProgramParts DeviceRuntime::find_program(const std::string& key) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_cache.find(key);
  return it == m_cache.end() ? ProgramParts{} : it->second;
}

void DeviceRuntime::cache_program(const std::string& key, const ProgramParts& parts) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_cache.size() >= kMaxCachedPrograms) m_cache.clear();  // e.g. many distinct immediates
  m_cache.emplace(key, parts);
}

size_t DeviceRuntime::program_cache_size() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_cache.size();
}

bool DeviceRuntime::values_enabled() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_values_enabled;
}

void DeviceRuntime::set_values_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_values_enabled = enabled;
}

std::optional<DeviceRuntime::CachedTiming> DeviceRuntime::find_timing(const std::string& key, bool need_trace) {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_timing_cache.find(key);
  if (it == m_timing_cache.end() || (need_trace && !it->second.trace)) {
    ++m_timing_stats.misses;
    return std::nullopt;
  }
  ++m_timing_stats.hits;
  return it->second;
}

void DeviceRuntime::cache_timing(const std::string& key, CachedTiming timing) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_timing_cache.size() >= kMaxCachedTimings) m_timing_cache.clear();
  m_timing_cache[key] = std::move(timing);
}

TimingCacheStats DeviceRuntime::timing_cache_stats() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  TimingCacheStats stats = m_timing_stats;
  stats.entries = m_timing_cache.size();
  return stats;
}

void DeviceRuntime::reset_timing_cache_stats() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_timing_stats.hits = m_timing_stats.misses = 0;
}

void DeviceRuntime::commit(OpRecord& record, record::Launch& launch, const sim::TraceWriter* core_trace) {
  std::lock_guard<std::mutex> lock(m_mutex);
  DeviceState& device = m_devices[record.device];
  record.start_ns = device.clock_ns;
  launch.start_ns = device.clock_ns;
  device.clock_ns += record.ns;
  m_log.push_back(record);
  if (m_timeline_enabled) {
    if (!m_timeline) m_timeline = std::make_unique<sim::TraceWriter>();
    record::add_launch_to_timeline(*m_timeline, launch, record.start_ns - device.timeline_origin_ns, core_trace);
  }
  if (m_recorder) m_recorder->add(launch);
}

double DeviceRuntime::simulated_ns(int device) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (device >= 0) {
    auto it = m_devices.find(device);
    return it == m_devices.end() ? 0 : it->second.clock_ns;
  }
  double total = 0;
  for (const auto& [index, state] : m_devices) total += state.clock_ns;
  return total;
}

void DeviceRuntime::reset_simulated_time() {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (auto& [index, state] : m_devices) state.clock_ns = 0;
}

std::vector<OpRecord> DeviceRuntime::op_log() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_log;
}

void DeviceRuntime::reset_op_log() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_log.clear();
}

bool DeviceRuntime::timeline_enabled() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_timeline_enabled;
}

void DeviceRuntime::set_timeline_enabled(bool enabled) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_timeline_enabled = enabled;
}

void DeviceRuntime::reset_timeline() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_timeline.reset();
  for (auto& [index, state] : m_devices) state.timeline_origin_ns = state.clock_ns;
}

size_t DeviceRuntime::write_timeline(const std::string& path) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("trnsim: cannot write the trace to '" + path + "'");
  sim::TraceWriter empty;
  const sim::TraceWriter& timeline = m_timeline ? *m_timeline : empty;
  timeline.write(out);
  if (!out) throw std::runtime_error("trnsim: writing the trace to '" + path + "' failed");
  return timeline.slice_count();
}

void DeviceRuntime::start_recording(const std::string& path, bool overwrite, bool compress,
                                    const std::string& trnsim_version) {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (m_recorder) {
    throw record::RecordingError("trnsim.record() blocks do not nest (already recording to " + m_recorder->path() + ")");
  }
  record::RecordingHeader header;
  header.config = m_origin;
  header.trnsim_version = trnsim_version;
  header.compressed_programs = compress;
  m_recorder = std::make_unique<record::RecordingWriter>(path, header, overwrite);
}

RecordingInfo DeviceRuntime::stop_recording(bool complete, const std::string& error) {
  std::unique_ptr<record::RecordingWriter> recorder;
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    recorder = std::move(m_recorder);
  }
  if (!recorder) throw record::RecordingError("trnsim: not recording");
  RecordingInfo summary{recorder->path(), recorder->launches(), recorder->distinct_programs(), complete};
  recorder->close(complete, error);
  return summary;
}

bool DeviceRuntime::recording() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_recorder != nullptr;
}

void DeviceRuntime::hand_over_to(DeviceRuntime& next) {
  std::scoped_lock lock(m_mutex, next.m_mutex);
  if (m_recorder) {
    throw record::RecordingError("trnsim.set_config() inside a trnsim.record() block (recording to " +
                                 m_recorder->path() + "): a recording holds the launches of one config");
  }
  // What describes the session rather than the hardware carries over: the devices' clocks (and
  // timeline origins), the op log and the profiler's timeline, as they did before set_config.
  next.m_devices = m_devices;
  next.m_log = std::move(m_log);
  next.m_timeline_enabled = m_timeline_enabled;
  next.m_timeline = std::move(m_timeline);
  next.m_fallback_mode = m_fallback_mode;
  next.m_values_enabled = m_values_enabled;
  // The timings belong to the config (the key is the program's): only the counters carry over.
  next.m_timing_stats = m_timing_stats;
  next.m_fallback_counts = std::move(m_fallback_counts);
  next.m_fallback_warned = std::move(m_fallback_warned);
}

void DeviceRuntime::set_device_info(const DeviceConfigInfo& info) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_info = info;
}

DeviceConfigInfo DeviceRuntime::device_info() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_info;
}

bool DeviceRuntime::allocate_memory(int device, uint64_t bytes, uint64_t* used_bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  MemoryAccount& mem = m_devices[device].memory;
  *used_bytes = static_cast<uint64_t>(mem.current_bytes);
  if (*used_bytes + bytes > m_info.hbm_bytes_per_device) {
    ++mem.num_ooms;
    return false;
  }
  mem.current_bytes += static_cast<int64_t>(bytes);
  mem.allocated_bytes += static_cast<int64_t>(bytes);
  mem.peak_bytes = std::max(mem.peak_bytes, mem.current_bytes);
  ++mem.num_allocs;
  return true;
}

void DeviceRuntime::release_memory(int device, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  MemoryAccount& mem = m_devices[device].memory;
  mem.current_bytes -= static_cast<int64_t>(bytes);
  mem.freed_bytes += static_cast<int64_t>(bytes);
}

MemoryAccount DeviceRuntime::memory(int device) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_devices.find(device);
  return it == m_devices.end() ? MemoryAccount{} : it->second.memory;
}

void DeviceRuntime::reset_peak_memory(int device) {
  std::lock_guard<std::mutex> lock(m_mutex);
  MemoryAccount& mem = m_devices[device].memory;
  mem.peak_bytes = mem.current_bytes;
}

void DeviceRuntime::reset_accumulated_memory(int device) {
  std::lock_guard<std::mutex> lock(m_mutex);
  MemoryAccount& mem = m_devices[device].memory;
  mem.allocated_bytes = mem.freed_bytes = 0;
  mem.num_allocs = mem.num_ooms = 0;
}

void DeviceRuntime::set_fallback_mode(FallbackMode mode) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_fallback_mode = mode;
}

FallbackMode DeviceRuntime::fallback_mode() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_fallback_mode;
}

bool DeviceRuntime::count_fallback(const std::string& op) {
  std::lock_guard<std::mutex> lock(m_mutex);
  ++m_fallback_counts[op];
  return m_fallback_warned.insert(op).second;
}

std::map<std::string, int64_t> DeviceRuntime::fallback_counts() const {
  std::lock_guard<std::mutex> lock(m_mutex);
  return m_fallback_counts;
}

void DeviceRuntime::reset_fallback_counts() {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_fallback_counts.clear();
  m_fallback_warned.clear();
}

std::shared_ptr<DeviceRuntime> current_runtime() {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null();
  if (!runtime) throw std::runtime_error("trnsim: no hardware configured for the neuron device");
  return runtime;
}

std::shared_ptr<DeviceRuntime> current_runtime_or_null() {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  return g_runtime;
}

void install_runtime(std::shared_ptr<DeviceRuntime> runtime) {
  std::lock_guard<std::mutex> lock(g_runtime_mutex);
  if (g_runtime) g_runtime->hand_over_to(*runtime);
  g_runtime = std::move(runtime);
}

}  // namespace trnsim::frontend
