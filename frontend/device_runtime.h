// The state of the simulated neuron devices for one hardware config: the config (one copy) and
// its hash, the program cache, each device's state (clock, ...), the op log, the profiler's
// timeline and the active launch recorder. set_config builds a new runtime (executor_set_hardware)
// with a fresh cache; the session's history (clocks, op log, timeline) is handed over to it. The
// only global is the pointer to the current one (current_runtime / install_runtime), so an op in
// flight keeps the runtime it started on. Torch-free; the free functions of kernel_executor.h
// forward here.
#pragma once

#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "frontend/kernel_executor.h"
#include "frontend/neuron_device.h"
#include "isa/host_workers.h"
#include "isa/memory_image.h"
#include "isa/program.h"
#include "record/launch.h"
#include "record/recording_format.h"
#include "record/recording_writer.h"
#include "sim/stats.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::frontend {

using ProgramParts = std::vector<std::shared_ptr<const isa::Program>>;  // one per physical core

// The simulated HBM a device's live tensors hold (the allocator, device/memory.cpp, accounts here).
struct MemoryAccount {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;       // since the last reset
  int64_t allocated_bytes = 0;  // cumulative, since the last reset of the accumulated stats
  int64_t freed_bytes = 0;
  uint64_t num_allocs = 0;
  uint64_t num_ooms = 0;
};

// A collective's buffer on a device: its collective engines read or write [begin, end) until end_ns, so work
// of the device that touches those bytes waits for it (trnsim.distributed).
struct PendingCollective {
  uintptr_t begin = 0, end = 0;
  double end_ns = 0;
  std::string op;
};

// What one device (a logical NeuronCore) holds. Per-device data of the runtime goes here.
struct DeviceState {
  double clock_ns = 0;            // the device's simulated clock
  double timeline_origin_ns = 0;  // the clock when the profiler's timeline was reset
  MemoryAccount memory;
  std::vector<PendingCollective> pending;  // collectives not yet waited for
  // Streams (torch.neuron.Stream): clock_ns is the current stream's clock, the others wait here. Once a second
  // stream is used, every stream's ops book the core's busy intervals [start, end): the core runs one op at a time,
  // and an op of one stream may fill a gap another stream left (a side stream's work beside the default stream's
  // waits). With one stream nothing is booked: an op starts at the clock, as it always did.
  int current_stream = 0;
  std::map<int, double> stream_clocks;
  std::vector<std::pair<double, double>> busy;
  // Link traffic of the collectives drawn on the timeline: per link, [start, end) and bytes per ns over it.
  struct LinkTraffic {
    double start_ns, end_ns, bytes_per_ns;
  };
  std::map<std::string, std::vector<LinkTraffic>> link_traffic;
  // Per stream, the intervals [start, end) its clock spent waiting on a collective, directly or by waiting for a
  // stream that was: a wait for that stream is communication only over these, the rest is that stream's compute.
  std::map<int, std::vector<std::pair<double, double>>> communication_waits;
  double default_clock() const;
  double earliest_clock() const;  // of every stream
};

class DeviceRuntime {
 public:
  DeviceRuntime(const HardwareConfig& config, const std::string& hash);

  // Immutable for the runtime's life: read without the lock.
  const HardwareConfig& config() const { return m_config; }
  const std::string& hash() const { return m_hash; }
  // Host resources every op's simulation reuses (each thread-safe on its own): recycled SBUF/PSUM images, so
  // an op does not map and fault in fresh memories, and the interpreter's host threads, kept alive.
  isa::MemoryImagePool& image_pool() { return m_image_pool; }
  isa::HostWorkers& host_workers() { return m_host_workers; }

  // How the user named the config (recorded in a recording's header); the hash must match.
  void describe_config(const record::RecordedConfig& origin);
  record::RecordedConfig config_origin() const;

  // Program cache, keyed by the op's kernel key (op, shapes, dtypes).
  ProgramParts find_program(const std::string& key) const;
  void cache_program(const std::string& key, const ProgramParts& parts);
  size_t program_cache_size() const;

  // Values or timing only (trnsim.timing_only()): without values, kernels are timed but compute
  // nothing, tensors hold no host data, and the host may not read them. Carries over set_config.
  bool values_enabled() const;
  void set_values_enabled(bool enabled);

  // Timing cache of the timing-only mode: the simulated result of a program (by the same key as
  // the program cache, so the same program on the same config) is reused by every later launch
  // of it. Deterministic simulation makes a hit exact; `find_timing` counts hits and misses.
  // With `need_trace` (the profiler's timeline is on) only an entry that kept its trace is a hit.
  struct CachedTiming {
    sim::SimStats stats;
    std::shared_ptr<const sim::TraceWriter> trace;  // null when it was timed without a trace
  };
  std::optional<CachedTiming> find_timing(const std::string& key, bool need_trace);
  void cache_timing(const std::string& key, CachedTiming timing);
  TimingCacheStats timing_cache_stats() const;
  void reset_timing_cache_stats();

  // Places the launch on its device's clock (sets record.start_ns and launch.start_ns), appends
  // the record to the op log, and adds the launch to the timeline (while profiling; `core_trace`
  // is the kernel's own trace) and to the recording (while recording). It starts after the pending
  // collectives whose buffers overlap `touched` (nullptr: any of the device's memory; see add_collective).
  void commit(OpRecord& record, record::Launch& launch, const sim::TraceWriter* core_trace,
              const std::vector<MemoryRange>* touched);

  // A collective of the device's rank (kind "collective"; record.start_ns / ns: when it ran on the collective
  // engines, concurrently with the device's compute): logged and drawn on the device's "collectives" track, not
  // on its clock. Until it ends, work touching `buffers` waits for it (commit).
  // `trace_args` go on its trace slice (the busiest link and its utilisation); `link_bytes` become the
  // device's per-link traffic counters in the timeline (GB/s, summed over the collectives in flight).
  void add_collective(const OpRecord& record, const std::vector<MemoryRange>& buffers,
                      const std::vector<std::pair<std::string, std::string>>& trace_args = {},
                      const std::vector<std::pair<std::string, double>>& link_bytes = {});
  // Work.wait(): the device's later work follows a collective that ends at `end_ns` (a "wait" record when it
  // ends after the clock).
  void wait_until(int device, double end_ns, const std::string& op);
  // Streams: the device's ops go to stream `stream` from now (a stream first used starts at the current one's
  // clock); a stream's clock; a stream waiting (wait_event / wait_stream) until `until_ns` (a "wait" record when
  // it is the default stream: exposed communication over the part of the wait that is a collective's, a stream wait
  // over the rest); synchronize (the default stream after every stream's work).
  void set_stream(int device, int stream);
  int current_stream(int device) const;
  double stream_clock(int device, int stream) const;
  // stream_wait's `until_ns` is a clock of `source_stream` (wait_stream: now; wait_event: when the event was recorded).
  void stream_wait(int device, int stream, double until_ns, const std::string& op, int source_stream);
  void synchronize(int device);

  double simulated_ns(int device) const;  // device < 0: all devices together
  void reset_simulated_time();
  std::vector<OpRecord> op_log() const;
  void reset_op_log();

  bool timeline_enabled() const;
  void set_timeline_enabled(bool enabled);
  void reset_timeline();
  size_t write_timeline(const std::string& path) const;

  // A recording of every launch from now until stop_recording (trnsim.record()).
  void start_recording(const std::string& path, bool overwrite, bool compress, const std::string& trnsim_version);
  RecordingInfo stop_recording(bool complete, const std::string& error);
  bool recording() const;

  // The device as the user sees it (device count, HBM per device, ...), derived from the config.
  void set_device_info(const DeviceConfigInfo& info);
  DeviceConfigInfo device_info() const;

  // Simulated HBM: an allocation of `bytes` on `device` if it fits the device's capacity (else the
  // OOM is counted and false returned; `used_bytes` says what was in use), and its release.
  bool allocate_memory(int device, uint64_t bytes, uint64_t* used_bytes);
  void release_memory(int device, uint64_t bytes);
  MemoryAccount memory(int device) const;
  void reset_peak_memory(int device);
  void reset_accumulated_memory(int device);

  // The CPU fallback's mode and its per-operator counts; count_fallback says whether this was the
  // op's first fallback since the last reset (the warning is given once per op).
  void set_fallback_mode(FallbackMode mode);
  FallbackMode fallback_mode() const;
  bool count_fallback(const std::string& op);
  std::map<std::string, int64_t> fallback_counts() const;
  void reset_fallback_counts();

  // Before `next` replaces this runtime (set_config): the devices' state, the op log and the
  // profiler's timeline, the memory accounts and the fallback's mode and counts carry over (live
  // tensors outlive a config); the cache does not. Throws while recording: a recording holds
  // the launches of one config.
  void hand_over_to(DeviceRuntime& next);

 private:
  void wait_locked(int device, double until_ns, const std::string& op);
  // Work about to run on `device` that touches `buffers` (nullptr: any of its memory) follows the pending
  // collectives it overlaps: when one ends after the device's clock, a "wait" record of the gap (exposed
  // communication) is logged and the clock moves to its end.
  void wait_for_collectives_locked(int device, const std::vector<MemoryRange>* buffers);
  // `source_stream`: the stream whose clock `until_ns` is (its waits on collectives are communication, the rest of
  // the wait is not); kCollective: `until_ns` is a collective's end (all of the wait is communication).
  static constexpr int kCollective = -1;
  void advance_stream_locked(DeviceState& state, int device, int stream, double until_ns, const std::string& op,
                             int source_stream);

  const HardwareConfig m_config;
  const std::string m_hash;
  isa::MemoryImagePool m_image_pool;
  isa::HostWorkers m_host_workers;
  mutable std::mutex m_mutex;  // everything below
  record::RecordedConfig m_origin;
  std::map<std::string, ProgramParts> m_cache;
  bool m_values_enabled = true;
  std::map<std::string, CachedTiming> m_timing_cache;
  TimingCacheStats m_timing_stats;
  std::map<int, DeviceState> m_devices;
  std::vector<OpRecord> m_log;
  bool m_timeline_enabled = false;
  std::unique_ptr<sim::TraceWriter> m_timeline;
  std::unique_ptr<record::RecordingWriter> m_recorder;
  DeviceConfigInfo m_info;
  FallbackMode m_fallback_mode = FallbackMode::warn;
  std::map<std::string, int64_t> m_fallback_counts;
  std::set<std::string> m_fallback_warned;
};

// The runtime ops run on; throws when no config has been set.
std::shared_ptr<DeviceRuntime> current_runtime();
// Makes `runtime` current (the previous one lives on while an op still holds it).
void install_runtime(std::shared_ptr<DeviceRuntime> runtime);
// The current runtime, or null (no throw).
std::shared_ptr<DeviceRuntime> current_runtime_or_null();

}  // namespace trnsim::frontend
