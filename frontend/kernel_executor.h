// Runs kernel-library programs for the PyTorch device with values (interpreter) and time (timing
// model). Plain C++: no torch headers, so the torch TU hands it host pointers and the op's kernel
// invocation (the builder's name and its spec as data).
// The device's state (per-device simulated clock, the per-op log (the profiler's raw material), the
// merged Perfetto timeline while profiling, a cache of built programs keyed by (op, shapes, dtypes),
// the launch recorder) is the current DeviceRuntime (device_runtime.h); these functions forward to it.
//
// A device is a logical NeuronCore: `chip.default_logical_core_size` physical cores (LNC) sharing
// HBM; every op's kernel is built split across them and simulated on all of them.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/dtype.h"
#include "config/hardware_config.h"
#include "isa/program.h"
#include "kernels/kernel_invocation.h"

namespace trnsim::frontend {

// The hardware programs are built for and simulated on; set by set_config: a new runtime with an
// empty program cache (the clocks, op log and timeline carry over). Throws while recording.
void executor_set_hardware(const HardwareConfig& config, const std::string& hash);
// How the user named the current config (set_config's arguments and the file it resolved to), for
// the header of a recording; until called, the config's own name stands for it.
void executor_describe_config(const std::string& name_or_path, const std::vector<std::string>& overrides,
                              const std::string& source_file);
// Physical cores per device: the configured LNC (at least 1, at most the chip's cores;
// kernels::logical_core_size, which replay --rebuild uses too).
uint32_t cores_per_device(const HardwareConfig& config);

// One HBM allocation of the program bound to host memory. `dtype` is the dtype of the host
// bytes; when it differs from the allocation's dtype the values are converted (a cast).
struct HostBuffer {
  std::string allocation;
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::fp32;
};

// Bytes of device memory an op touches.
struct MemoryRange {
  const void* data = nullptr;
  uint64_t bytes = 0;
};

struct OpRecord {
  std::string op;
  // "kernel" (simulated), "copy" (host link), "fallback" (ran on the CPU), "estimate" (timing-only
  // mode: an op with no kernel, its time estimated; record_estimate); "collective" (trnsim.distributed:
  // start_ns / ns on the collective engines, beside the device's clock; bytes its size, bottleneck its
  // algorithm) and "wait" (the device's clock waiting for one: exposed communication)
  std::string kind = "kernel";
  std::vector<std::vector<int64_t>> shapes;  // input shapes
  std::string dtype;
  int device = 0;
  double start_ns = 0;  // on the device's simulated clock
  double ns = 0;         // kernels: launch_ns + the simulated body
  double launch_ns = 0;  // kernels: the execution's fixed cost (config chip.kernel_launch_ns)
  uint64_t flops = 0;
  double mfu = 0;
  uint64_t bytes = 0;      // host-link bytes of a copy or a fallback
  double host_s = 0;       // host seconds spent simulating (or computing, for a fallback)
  std::string bottleneck;  // the busiest engine ("tensor", "vector", ..., "dma"; "host_link")
  uint64_t instructions = 0;   // kernels: instructions simulated (all cores)
  bool timing_only = false;    // run in timing-only mode (no values computed)
  bool timing_cached = false;  // the time came from the timing cache (values, if any, from the interpreter alone)
};

// Timing-only mode (trnsim.timing_only(), set_config(values=False), TRNSIM_VALUES=0): every kernel
// is built and timed exactly as with values, but nothing is computed, and the tensors it writes
// hold no values. The host reading a device tensor's values in this mode (host_alias) throws this;
// a lowering that needs them for a decision is declined to the timing-only fallback.
struct ValuesUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
bool values_enabled();
void set_values_enabled(bool enabled);

struct TimingCacheStats {
  uint64_t hits = 0;     // launches whose timing was reused
  uint64_t misses = 0;   // launches simulated in timing-only mode
  uint64_t entries = 0;  // distinct programs timed
};
TimingCacheStats timing_cache_stats();
void reset_timing_cache_stats();

// The simulated-HBM allocator's record of which blocks hold values (device/memory.cpp): a block
// written in timing-only mode holds none until it is written again with values. `ptr` may point
// anywhere inside a live block; pointers outside every block (host memory) always hold values.
void mark_without_values(const void* ptr);
void mark_with_values(const void* ptr);
bool holds_values(const void* ptr);

// Builds the invoked kernel for the device's config (kernels/kernel_invocation.h; or takes it from
// the cache, by `key`), copies `inputs` into its HBM allocations, simulates it on the device's cores
// with values, copies `outputs` back, advances the device's simulated clock and appends to the op
// log (and to the recording, with the invocation, so that replay --rebuild can build it for another
// config). Returns the op's record.
OpRecord execute_kernel(int device, const std::string& key, const kernels::KernelInvocation& invocation,
                        const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs, OpRecord record);

// A host <-> device copy of `bytes` over the host link (latency + bytes / bandwidth), on the
// device's clock. record.op names the direction.
OpRecord record_host_transfer(int device, uint64_t bytes, OpRecord record);
// An op that ran on the CPU through the fallback: its device inputs went to the host and its
// device outputs came back over the host link (two transfers when both are non-empty).
OpRecord record_fallback(int device, uint64_t bytes_to_host, uint64_t bytes_to_device, double host_s,
                         OpRecord record);

// Timing-only mode, an op with no kernel: its time is record::estimate_ns (a memory-bound pass:
// chip.kernel_launch_ns plus the bytes it reads and writes at the device's share of the chip's HBM
// bandwidth). Nothing is computed; record.kind becomes "estimate".
OpRecord record_estimate(int device, uint64_t bytes_read, uint64_t bytes_written, double host_s, OpRecord record);

// trnsim.distributed: a collective the device's rank took part in (DeviceRuntime::add_collective), and a
// Work.wait() on it (DeviceRuntime::wait_until).
void record_collective(const OpRecord& record, const std::vector<MemoryRange>& buffers,
                       const std::vector<std::pair<std::string, std::string>>& trace_args,
                       const std::vector<std::pair<std::string, double>>& link_bytes = {});
void wait_for_collective(int device, double end_ns, const std::string& op);

double simulated_ns(int device);  // device < 0: all devices together
void reset_simulated_time();
std::vector<OpRecord> op_log();
void reset_op_log();
size_t program_cache_size();

// While enabled every op is simulated with a trace and appended to one timeline: per device an
// "ops" track (one slice per op, copies and fallbacks included) and "host link", then each
// physical core's engines and DMA queues as in `trnsim run --trace`.
void set_timeline_enabled(bool enabled);
void reset_timeline();
// Writes the timeline as Chrome-trace JSON; returns the number of slices written.
size_t write_timeline(const std::string& path);

// trnsim.record(): every launch (kernel, copy, fallback) from start to stop goes to the recording
// directory `path` (record/recording_format.h). An existing path needs `overwrite`; recordings do
// not nest; set_config is refused while recording.
void start_recording(const std::string& path, bool overwrite, bool compress, const std::string& trnsim_version);
struct RecordingInfo {
  std::string path;
  uint64_t launches = 0;
  size_t programs = 0;  // distinct programs stored
  bool complete = false;
};
// Closes the recording; `complete` false (with `error`) marks a block that raised.
RecordingInfo stop_recording(bool complete, const std::string& error);
bool recording();

}  // namespace trnsim::frontend
