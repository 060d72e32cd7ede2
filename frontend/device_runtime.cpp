#include "frontend/device_runtime.h"

#include <algorithm>
#include <cmath>
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

double DeviceState::default_clock() const {
  if (current_stream == 0) return clock_ns;
  auto it = stream_clocks.find(0);
  return it == stream_clocks.end() ? 0 : it->second;
}

double DeviceState::earliest_clock() const {
  double earliest = clock_ns;
  for (const auto& [stream, clock] : stream_clocks) earliest = std::min(earliest, clock);
  return earliest;
}

namespace {
// The earliest start >= ready_ns of an op of `length_ns` on the core, between its busy intervals (sorted by
// start, disjoint); books it. Intervals every stream has passed are dropped.
double book_core(DeviceState& device, double ready_ns, double length_ns) {
  auto& busy = device.busy;
  const double horizon = device.earliest_clock();
  busy.erase(std::remove_if(busy.begin(), busy.end(), [&](const auto& b) { return b.second <= horizon; }), busy.end());
  double start = ready_ns;
  for (const auto& [begin, end] : busy) {
    if (end <= start) continue;
    if (begin >= start + length_ns) break;
    start = end;
  }
  busy.insert(std::upper_bound(busy.begin(), busy.end(), std::make_pair(start, start + length_ns)),
              {start, start + length_ns});
  return start;
}
}  // namespace

void DeviceRuntime::commit(OpRecord& record, record::Launch& launch, const sim::TraceWriter* core_trace,
                           const std::vector<MemoryRange>* touched) {
  std::lock_guard<std::mutex> lock(m_mutex);
  wait_for_collectives_locked(record.device, touched);
  DeviceState& device = m_devices[record.device];
  const double start =
      device.stream_clocks.empty() || record.ns <= 0 ? device.clock_ns : book_core(device, device.clock_ns, record.ns);
  record.start_ns = start;
  launch.start_ns = start;
  device.clock_ns = start + record.ns;
  m_log.push_back(record);
  if (m_timeline_enabled) {
    if (!m_timeline) m_timeline = std::make_unique<sim::TraceWriter>();
    record::add_launch_to_timeline(*m_timeline, launch, record.start_ns - device.timeline_origin_ns, core_trace);
  }
  if (m_recorder) m_recorder->add(launch);
}

namespace {
bool overlaps(const PendingCollective& pending, const std::vector<MemoryRange>* buffers) {
  if (!buffers) return true;
  for (const MemoryRange& range : *buffers) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data);
    if (range.bytes > 0 && begin < pending.end && pending.begin < begin + range.bytes) return true;
  }
  return false;
}
}  // namespace

void DeviceRuntime::add_collective(const OpRecord& record, const std::vector<MemoryRange>& buffers,
                                   const std::vector<std::pair<std::string, std::string>>& trace_args,
                                   const std::vector<std::pair<std::string, double>>& link_bytes) {
  std::lock_guard<std::mutex> lock(m_mutex);
  DeviceState& device = m_devices[record.device];
  const double end_ns = record.start_ns + record.ns;
  for (const MemoryRange& range : buffers) {
    if (range.bytes == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data);
    device.pending.push_back(PendingCollective{begin, begin + range.bytes, end_ns, record.op});
  }
  m_log.push_back(record);
  if (m_timeline_enabled) {
    if (!m_timeline) m_timeline = std::make_unique<sim::TraceWriter>();
    const std::string name = "neuron:" + std::to_string(record.device);
    const int process = m_timeline->find_or_add_process(name, record.device * 100);
    const int track = m_timeline->find_or_add_track(process, "collectives", 3);
    std::vector<std::pair<std::string, std::string>> args = {{"bytes", std::to_string(record.bytes)},
                                                              {"algorithm", record.bottleneck},
                                                              {"dtype", record.dtype},
                                                              {"simulated_ns", std::to_string(record.ns)}};
    args.insert(args.end(), trace_args.begin(), trace_args.end());
    m_timeline->slice(process, track, record.start_ns - device.timeline_origin_ns, record.ns, record.op, args);
    if (record.ns > 0) {
      for (const auto& [link, bytes] : link_bytes) {
        device.link_traffic[link].push_back({record.start_ns - device.timeline_origin_ns,
                                             end_ns - device.timeline_origin_ns, bytes / record.ns});
      }
    }
  }
}

namespace {
// The parts of [begin, end) inside `intervals` (any order, may overlap): sorted, disjoint.
std::vector<std::pair<double, double>> parts_inside(const std::vector<std::pair<double, double>>& intervals,
                                                    double begin, double end) {
  std::vector<std::pair<double, double>> clipped;
  for (const auto& [b, e] : intervals) {
    const double lo = std::max(b, begin), hi = std::min(e, end);
    if (lo < hi) clipped.emplace_back(lo, hi);
  }
  std::sort(clipped.begin(), clipped.end());
  std::vector<std::pair<double, double>> merged;
  for (const auto& piece : clipped) {
    if (!merged.empty() && piece.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, piece.second);
    else
      merged.push_back(piece);
  }
  return merged;
}
}  // namespace

// The caller holds m_mutex. Stream `stream` of `device` waits until `until_ns`. The default stream's wait is logged
// as "wait" records, one per piece: bottleneck "collective" where it waited on a collective (exposed
// communication: `source_stream` is kCollective, or that stream was itself waiting on one then), "stream" where it
// waited on another stream's compute. A side stream's wait is not logged; its collective part is kept for the
// streams that wait for it.
void DeviceRuntime::advance_stream_locked(DeviceState& device, int device_index, int stream, double until_ns,
                                          const std::string& op, int source_stream) {
  double& clock = stream == device.current_stream ? device.clock_ns : device.stream_clocks[stream];
  if (until_ns > clock) {
    std::vector<std::pair<double, double>> communication;
    if (source_stream == kCollective) {
      communication.emplace_back(clock, until_ns);
    } else {
      auto it = device.communication_waits.find(source_stream);
      if (it != device.communication_waits.end()) communication = parts_inside(it->second, clock, until_ns);
    }
    auto& own = device.communication_waits[stream];
    own.insert(own.end(), communication.begin(), communication.end());
    if (stream == 0) {
      auto log_wait = [&](double start_ns, double end_ns, const char* cause) {
        OpRecord wait;
        wait.op = "wait " + op;
        wait.kind = "wait";
        wait.device = device_index;
        wait.start_ns = start_ns;
        wait.ns = end_ns - start_ns;
        wait.bottleneck = cause;
        m_log.push_back(wait);
        if (m_timeline_enabled) {
          if (!m_timeline) m_timeline = std::make_unique<sim::TraceWriter>();
          const int process =
              m_timeline->find_or_add_process("neuron:" + std::to_string(device_index), device_index * 100);
          // Its own track: a side stream's ops run on the core while the default stream waits.
          const int waits = m_timeline->find_or_add_track(process, "waits (default stream)", 4);
          m_timeline->slice(process, waits, wait.start_ns - device.timeline_origin_ns, wait.ns, wait.op,
                            {{"kind", "wait"}, {"cause", cause}, {"simulated_ns", std::to_string(wait.ns)}});
        }
      };
      double at = clock;
      for (const auto& [begin, end] : communication) {
        if (begin > at) log_wait(at, begin, "stream");
        log_wait(begin, end, "collective");
        at = end;
      }
      if (at < until_ns) log_wait(at, until_ns, "stream");
    }
    clock = until_ns;
  }
  const double horizon = device.earliest_clock();
  auto& pending = device.pending;
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [&](const PendingCollective& p) { return p.end_ns <= horizon; }),
                pending.end());
  // No stream's wait starts before its own clock: intervals every stream has passed are never asked for again.
  for (auto& [id, intervals] : device.communication_waits)
    intervals.erase(std::remove_if(intervals.begin(), intervals.end(),
                                   [&](const std::pair<double, double>& w) { return w.second <= horizon; }),
                    intervals.end());
}

void DeviceRuntime::wait_locked(int device_index, double until_ns, const std::string& op) {
  DeviceState& device = m_devices[device_index];
  advance_stream_locked(device, device_index, device.current_stream, until_ns, op, kCollective);
}

void DeviceRuntime::set_stream(int device_index, int stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  DeviceState& device = m_devices[device_index];
  if (stream == device.current_stream) return;
  auto it = device.stream_clocks.find(stream);
  const double next_clock = it == device.stream_clocks.end() ? device.clock_ns : it->second;
  if (it != device.stream_clocks.end()) device.stream_clocks.erase(it);
  device.stream_clocks[device.current_stream] = device.clock_ns;
  device.current_stream = stream;
  device.clock_ns = next_clock;
}

int DeviceRuntime::current_stream(int device_index) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_devices.find(device_index);
  return it == m_devices.end() ? 0 : it->second.current_stream;
}

double DeviceRuntime::stream_clock(int device_index, int stream) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  auto it = m_devices.find(device_index);
  if (it == m_devices.end()) return 0;
  const DeviceState& device = it->second;
  if (stream == device.current_stream) return device.clock_ns;
  auto s = device.stream_clocks.find(stream);
  return s == device.stream_clocks.end() ? device.clock_ns : s->second;  // unused yet: it would start here
}

void DeviceRuntime::stream_wait(int device_index, int stream, double until_ns, const std::string& op,
                                int source_stream) {
  std::lock_guard<std::mutex> lock(m_mutex);
  DeviceState& device = m_devices[device_index];
  if (stream != device.current_stream && !device.stream_clocks.count(stream))
    device.stream_clocks[stream] = device.clock_ns;
  advance_stream_locked(device, device_index, stream, until_ns, op, source_stream);
}

void DeviceRuntime::synchronize(int device_index) {
  std::lock_guard<std::mutex> lock(m_mutex);
  DeviceState& device = m_devices[device_index];
  double latest = device.clock_ns;
  int last_stream = device.current_stream;  // the stream the default one waits for last
  for (const auto& [stream, clock] : device.stream_clocks) {
    if (clock > latest) {
      latest = clock;
      last_stream = stream;
    }
  }
  advance_stream_locked(device, device_index, 0, latest, "synchronize", last_stream);
}

void DeviceRuntime::wait_for_collectives_locked(int device_index, const std::vector<MemoryRange>* buffers) {
  auto it = m_devices.find(device_index);
  if (it == m_devices.end() || it->second.pending.empty()) return;
  const PendingCollective* latest = nullptr;
  for (const PendingCollective& pending : it->second.pending)
    if (overlaps(pending, buffers) && (!latest || pending.end_ns > latest->end_ns)) latest = &pending;
  if (latest) {
    const std::string op = latest->op;
    wait_locked(device_index, latest->end_ns, op);
  }
}

void DeviceRuntime::wait_until(int device, double end_ns, const std::string& op) {
  std::lock_guard<std::mutex> lock(m_mutex);
  wait_locked(device, end_ns, op);
}

double DeviceRuntime::simulated_ns(int device) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  if (device >= 0) {
    auto it = m_devices.find(device);
    return it == m_devices.end() ? 0 : it->second.default_clock();
  }
  double total = 0;
  for (const auto& [index, state] : m_devices) total += state.default_clock();
  return total;
}

void DeviceRuntime::reset_simulated_time() {
  std::lock_guard<std::mutex> lock(m_mutex);
  for (auto& [index, state] : m_devices) {
    state.clock_ns = 0;
    for (auto& [stream, clock] : state.stream_clocks) clock = 0;
    state.busy.clear();
    state.pending.clear();
  }
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
  for (auto& [index, state] : m_devices) {
    state.timeline_origin_ns = state.default_clock();
    state.link_traffic.clear();
  }
}

size_t DeviceRuntime::write_timeline(const std::string& path) const {
  std::lock_guard<std::mutex> lock(m_mutex);
  std::ofstream out(path, std::ios::binary);
  if (!out) throw std::runtime_error("trnsim: cannot write the trace to '" + path + "'");
  sim::TraceWriter timeline = m_timeline ? *m_timeline : sim::TraceWriter();
  // Each device's link traffic as counters: GB/s (= bytes/ns) on each link, the sum over the collectives in
  // flight, stepping at every start and end.
  for (const auto& [index, device] : m_devices) {
    if (device.link_traffic.empty()) continue;
    const int process = timeline.find_or_add_process("neuron:" + std::to_string(index), index * 100);
    for (const auto& [link, spans] : device.link_traffic) {
      std::vector<std::pair<double, double>> steps;  // (time, change of the rate)
      for (const DeviceState::LinkTraffic& span : spans) {
        steps.emplace_back(span.start_ns, span.bytes_per_ns);
        steps.emplace_back(span.end_ns, -span.bytes_per_ns);
      }
      std::sort(steps.begin(), steps.end());
      double rate = 0;
      for (size_t i = 0; i < steps.size(); ++i) {
        rate += steps[i].second;
        if (i + 1 < steps.size() && steps[i + 1].first == steps[i].first) continue;
        timeline.counter(process, "link " + link + " GB/s", steps[i].first, std::abs(rate) < 1e-9 ? 0.0 : rate);
      }
    }
  }
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
