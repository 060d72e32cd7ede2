// Kernel-program execution for the PyTorch device (see kernel_executor.h). Torch-free. The
// device's state lives in the current DeviceRuntime (device_runtime.h); these functions run an
// op against it.
#include "frontend/kernel_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>

#include "frontend/device_runtime.h"
#include "frontend/program_executor.h"
#include "config/enum_names.h"
#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/write_coverage.h"
#include "isa/numerics/float_format.h"
#include "record/launch_timing.h"

namespace trnsim::frontend {
namespace {

void copy_converted(DType src_dtype, const void* src, DType dst_dtype, void* dst, size_t count) {
  if (src_dtype == dst_dtype) {
    std::memcpy(dst, src, count * dtype_size_bytes(src_dtype));
    return;
  }
  std::vector<float> tmp(count);
  numerics::convert_to_fp32(src_dtype, src, tmp.data(), count);
  numerics::convert_from_fp32(dst_dtype, tmp.data(), dst, count, numerics::RoundingMode::nearest_even);
}

// The launch of an op: its metadata and measured result as the record has them.
record::Launch launch_of(const OpRecord& record) {
  record::Launch launch;
  launch.op = record.op;
  launch.kind = record.kind;
  launch.device = record.device;
  launch.shapes = record.shapes;
  launch.dtype = record.dtype;
  launch.ns = record.ns;
  launch.flops = record.flops;
  launch.mfu = record.mfu;
  launch.bottleneck = record.bottleneck;
  launch.host_link_bytes = record.bytes;
  return launch;
}

// The op's kernel built once per physical core (or taken from the runtime's cache).
ProgramParts build_parts(DeviceRuntime& runtime, const std::string& key, const kernels::KernelInvocation& invocation) {
  ProgramParts parts = runtime.find_program(key);
  if (!parts.empty()) return parts;
  const HardwareConfig& config = runtime.config();
  parts = kernels::build_parts(invocation, config, cores_per_device(config));
  runtime.cache_program(key, parts);
  return parts;
}

// The HBM allocations a program writes (out / inout tensor operands).
void mark_written(const isa::Program& program, std::vector<bool>& written) {
  for (const isa::Instruction& inst : program.instructions) {
    const isa::InstructionSpec& spec = inst.spec();
    for (const isa::OperandSpec& o : spec.operands) {
      if (o.tensor_slot < 0 || (o.kind != isa::OperandKind::tensor_out && o.kind != isa::OperandKind::tensor_inout))
        continue;
      const isa::AccessPattern& ap = inst.tensors[o.tensor_slot];
      if (ap.present() && ap.space == isa::MemorySpace::hbm && ap.allocation < written.size()) written[ap.allocation] = true;
    }
  }
}

// The launch's HBM buffers with the host buffers bound in place of copies where that is exact
// (isa::HbmBuffer::bind): same dtype and size as the allocation; an input only if the programs never
// write its allocation, or write it as the same memory's output (in place); an output only if its
// memory overlaps no other allocation's buffer. Bound outputs start zeroed, as owned ones do. Nothing is
// bound when control flow reads tensor values (its scratch run would write the host memory).
struct Bindings {
  std::shared_ptr<isa::HbmStore> store;  // nullptr: nothing bound
  std::vector<bool> bound;               // by allocation
};

Bindings bind_host_buffers(const std::vector<const isa::Program*>& programs, const std::vector<HostBuffer>& inputs,
                           const std::vector<HostBuffer>& outputs) {
  const isa::Program& program = *programs.front();
  Bindings out;
  for (const isa::Program* p : programs) {
    if (isa::control_depends_on_values(*p)) return out;
  }
  const size_t n = program.allocations.size();
  std::vector<bool> written(n, false);
  for (const isa::Program* p : programs) mark_written(*p, written);
  struct Candidate {
    int id;
    uint8_t* begin;
    uint8_t* end;
  };
  auto candidate = [&](const HostBuffer& b) -> Candidate {
    const int id = program.find_allocation(b.allocation);
    if (id < 0 || !b.data) return {-1, nullptr, nullptr};
    const isa::Allocation& a = program.allocations[size_t(id)];
    const size_t bytes = size_t(a.total_elements()) * dtype_size_bytes(a.dtype);
    if (a.space != isa::MemorySpace::hbm || b.dtype != a.dtype || b.count * dtype_size_bytes(b.dtype) != bytes || !bytes)
      return {-1, nullptr, nullptr};
    auto* p = static_cast<uint8_t*>(b.data);
    return {id, p, p + bytes};
  };
  std::vector<Candidate> ins, outs;
  for (const HostBuffer& b : inputs) ins.push_back(candidate(b));
  for (const HostBuffer& b : outputs) outs.push_back(candidate(b));
  auto overlaps = [](const Candidate& a, const Candidate& b) { return a.begin < b.end && b.begin < a.end; };
  std::vector<const Candidate*> bound(n, nullptr);  // the memory each bound allocation reads and writes
  std::vector<bool> zero(n, false);                 // bound outputs start zeroed, as owned buffers do
  for (const Candidate& c : ins) {
    if (c.id < 0) continue;
    bool ok = !written[size_t(c.id)];
    for (const Candidate& o : outs) {
      if (o.id == c.id) ok = o.begin == c.begin && o.end == c.end;  // in place, or a copy it must stay
    }
    if (ok) bound[size_t(c.id)] = &c;
  }
  for (const Candidate& c : outs) {
    if (c.id < 0 || bound[size_t(c.id)]) continue;
    bool ok = true, is_input = false;
    for (const Candidate& other : ins) {
      if (other.id == c.id) is_input = true;
      else if (other.begin && overlaps(c, other)) ok = false;
    }
    for (const Candidate& other : outs) {
      if (other.id != c.id && other.begin && overlaps(c, other)) ok = false;
    }
    if (ok && !is_input) bound[size_t(c.id)] = &c, zero[size_t(c.id)] = true;
  }
  out.bound.assign(n, false);
  for (size_t id = 0; id < n; ++id) {
    const Candidate* c = bound[id];
    if (!c) continue;
    if (!out.store) out.store = std::make_shared<isa::HbmStore>(n);
    const size_t bytes = size_t(c->end - c->begin);
    if (zero[id] && !isa::overwrites_whole(programs, uint32_t(id))) std::memset(c->begin, 0, bytes);
    (*out.store)[id].bind(c->begin, bytes);
    out.bound[id] = true;
  }
  return out;
}

void add_bindings(record::Launch& launch, const std::vector<HostBuffer>& buffers, const char* direction) {
  for (const HostBuffer& b : buffers) {
    launch.bindings.push_back({b.allocation, b.count, std::string(dtype_name(b.dtype)), direction});
  }
}

}  // namespace

void executor_set_hardware(const HardwareConfig& config, const std::string& hash) {
  // Throws (and leaves the current runtime in place) while a recording is open.
  install_runtime(std::make_shared<DeviceRuntime>(config, hash));
}

void executor_describe_config(const std::string& name_or_path, const std::vector<std::string>& overrides,
                              const std::string& source_file) {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  record::RecordedConfig origin;
  origin.name = runtime->config().name;
  origin.name_or_path = name_or_path;
  // Absolute, so that a replay from another directory finds a config named by a relative path.
  std::error_code ec;
  const std::filesystem::path absolute = std::filesystem::absolute(source_file, ec);
  origin.source = ec ? source_file : absolute.lexically_normal().string();
  origin.overrides = overrides;
  origin.hash = runtime->hash();
  runtime->describe_config(origin);
}

uint32_t cores_per_device(const HardwareConfig& config) { return kernels::logical_core_size(config); }

namespace {

// Simulates `parts` on the device's cores with values: inputs into HBM first, outputs back after;
// the launch goes to the op log, the clock, the timeline and the recording.
OpRecord run_on_device(DeviceRuntime& runtime, int device, const std::string& key, const ProgramParts& parts,
                       std::optional<kernels::KernelInvocation> invocation, const std::vector<HostBuffer>& inputs,
                       const std::vector<HostBuffer>& outputs, OpRecord record,
                       std::chrono::steady_clock::time_point host_start) {
  const isa::Program& program = *parts.front();
  std::vector<const isa::Program*> programs;
  for (const auto& part : parts) programs.push_back(part.get());
  const bool trace = runtime.timeline_enabled();
  sim::SimResult result;
  std::shared_ptr<const sim::TraceWriter> core_trace;
  if (!runtime.values_enabled()) {
    // Timing only: nothing goes in or comes out; the outputs' blocks hold no values from here on.
    // A program timed before (with its trace, while the timeline wants one) is not simulated again.
    if (std::optional<DeviceRuntime::CachedTiming> cached = runtime.find_timing(key, trace)) {
      result.stats = std::move(cached->stats);
      core_trace = std::move(cached->trace);
      record.timing_cached = true;
    } else {
      result = record::simulate_kernel(programs, runtime.config(), runtime.hash(), /*timing_only=*/true, trace, {});
      core_trace = std::shared_ptr<const sim::TraceWriter>(std::move(result.trace));
      runtime.cache_timing(key, DeviceRuntime::CachedTiming{result.stats, core_trace});
    }
    for (const HostBuffer& out : outputs) mark_without_values(out.data);
    record.timing_only = true;
  } else {
    auto allocation = [&](const HostBuffer& buffer) {
      const int id = program.find_allocation(buffer.allocation);
      if (id < 0) throw std::runtime_error("trnsim: program '" + key + "' has no allocation '" + buffer.allocation + "'");
      return static_cast<uint32_t>(id);
    };
    // Device tensors' storage in place of staging copies where exact (bind_host_buffers).
    const Bindings bindings = bind_host_buffers(programs, inputs, outputs);
    auto prepare = [&](uint32_t, isa::CoreState& state) {
      for (const HostBuffer& in : inputs) {
        const uint32_t id = allocation(in);
        if (bindings.store && bindings.bound[id]) continue;  // read in place
        const DType dst = program.allocations[id].dtype;
        isa::HbmBuffer& bytes = state.hbm(id);
        if (bytes.size() < in.count * dtype_size_bytes(dst))
          throw std::runtime_error("trnsim: input '" + in.allocation + "' larger than its allocation");
        copy_converted(in.dtype, in.data, dst, bytes.data(), in.count);
      }
    };
    const record::HostResources host{&runtime.image_pool(), &runtime.host_workers(), bindings.store};
    // A launch timed before needs only its values: the interpreter alone computes the same ones (in program
    // order per core, as the timing model executes them), and the timing comes from the cache.
    const bool cacheable = record::values_without_timing_model(programs);
    std::optional<DeviceRuntime::CachedTiming> cached;
    if (cacheable) cached = runtime.find_timing(key, trace);
    if (cached) {
      result.states = record::interpret_kernel(programs, runtime.config(), prepare, host);
      result.stats = std::move(cached->stats);
      core_trace = std::move(cached->trace);
      record.timing_cached = true;
    } else {
      result = record::simulate_kernel(programs, runtime.config(), runtime.hash(), /*timing_only=*/false, trace,
                                       prepare, host);
      core_trace = std::shared_ptr<const sim::TraceWriter>(std::move(result.trace));
      if (cacheable) runtime.cache_timing(key, DeviceRuntime::CachedTiming{result.stats, core_trace});
    }
    if (result.states.empty()) throw std::runtime_error("trnsim: the simulation returned no values");
    for (const HostBuffer& out : outputs) {
      const uint32_t id = allocation(out);
      if (bindings.store && bindings.bound[id]) continue;  // written in place
      const DType src = program.allocations[id].dtype;
      const isa::HbmBuffer& bytes = result.states.front()->hbm(id);
      if (bytes.size() < out.count * dtype_size_bytes(src))
        throw std::runtime_error("trnsim: output '" + out.allocation + "' larger than its allocation");
      copy_converted(src, bytes.data(), out.dtype, out.data, out.count);
    }
    // Values computed from a tensor that has none (written in timing-only mode) are none either.
    const bool inputs_hold_values =
        std::all_of(inputs.begin(), inputs.end(), [](const HostBuffer& in) { return holds_values(in.data); });
    if (!inputs_hold_values)
      for (const HostBuffer& out : outputs) mark_without_values(out.data);
  }
  record.kind = "kernel";
  record.device = device;
  record::Launch launch = launch_of(record);
  launch.key = key;
  launch.invocation = std::move(invocation);
  launch.programs = parts;
  add_bindings(launch, inputs, "in");
  add_bindings(launch, outputs, "out");
  record::set_kernel_result(launch, result.stats);
  record.ns = launch.ns;
  record.launch_ns = launch.launch_ns;
  record.instructions = result.stats.simulated_instructions;
  record.flops = launch.flops;
  record.mfu = launch.mfu;
  record.bottleneck = launch.bottleneck;
  record.host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  if (!core_trace && result.trace) core_trace = std::shared_ptr<const sim::TraceWriter>(std::move(result.trace));
  // A launch starts after the collectives whose buffers it reads or writes (trnsim.distributed).
  std::vector<MemoryRange> touched;
  for (const auto* buffers : {&inputs, &outputs})
    for (const HostBuffer& b : *buffers) touched.push_back({b.data, b.count * dtype_size_bytes(b.dtype)});
  runtime.commit(record, launch, trace ? core_trace.get() : nullptr, &touched);
  return record;
}

}  // namespace

OpRecord execute_kernel(int device, const std::string& key, const kernels::KernelInvocation& invocation,
                        const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                        OpRecord record) {
  const auto host_start = std::chrono::steady_clock::now();
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  const ProgramParts parts = build_parts(*runtime, key, invocation);
  return run_on_device(*runtime, device, key, parts, invocation, inputs, outputs, std::move(record), host_start);
}

OpRecord execute_program(int device, const std::string& key,
                         const std::function<std::vector<isa::Program>()>& make_programs,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record) {
  const auto host_start = std::chrono::steady_clock::now();
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  ProgramParts parts = runtime->find_program(key);
  if (parts.empty()) {
    std::vector<isa::Program> programs = make_programs();
    if (programs.empty() || programs.size() > cores_per_device(runtime->config())) {
      throw isa::IsaError("key '" + key + "': " + std::to_string(programs.size()) + " programs for a device of " +
                          std::to_string(cores_per_device(runtime->config())) + " physical cores");
    }
    // Program i runs on core i; with fewer programs than cores the others idle.
    for (isa::Program& program : programs) {
      if (program.generation != runtime->config().generation) {
        throw isa::IsaError("program '" + program.name + "' targets " + std::string(enum_name(program.generation)) +
                            " but the device simulates " + runtime->config().name);
      }
      isa::check_program(program, runtime->config());
      parts.push_back(std::make_shared<const isa::Program>(std::move(program)));
    }
    runtime->cache_program(key, parts);
  }
  return run_on_device(*runtime, device, key, parts, std::nullopt, inputs, outputs, std::move(record), host_start);
}

OpRecord record_host_transfer(int device, uint64_t bytes, OpRecord record) {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  record.kind = "copy";
  record.device = device;
  record.bytes = bytes;
  record.ns = record::host_link_ns(runtime->config(), bytes);
  record.bottleneck = "host_link";
  record::Launch launch = launch_of(record);
  launch.transfer_bytes = {bytes};
  runtime->commit(record, launch, nullptr, /*touched: any memory*/ nullptr);
  return record;
}

OpRecord record_fallback(int device, uint64_t bytes_to_host, uint64_t bytes_to_device, double host_s,
                         OpRecord record) {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  record.kind = "fallback";
  record.device = device;
  record.bytes = bytes_to_host + bytes_to_device;
  record.ns = record::transfers_ns(runtime->config(), {bytes_to_host, bytes_to_device});
  record.host_s = host_s;
  record.bottleneck = "host_link";
  record::Launch launch = launch_of(record);
  launch.transfer_bytes = {bytes_to_host, bytes_to_device};
  runtime->commit(record, launch, nullptr, /*touched: any memory*/ nullptr);
  return record;
}

OpRecord record_estimate(int device, uint64_t bytes_read, uint64_t bytes_written, double host_s, OpRecord record) {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime();
  record.kind = "estimate";
  record.timing_only = true;
  record.device = device;
  const HardwareConfig& config = runtime->config();
  record.ns = record::estimate_ns(config, cores_per_device(config), bytes_read, bytes_written);
  record.launch_ns = config.chip.kernel_launch_ns;
  record.host_s = host_s;
  record.bottleneck = "estimate";
  record::Launch launch = launch_of(record);
  launch.launch_ns = record.launch_ns;
  launch.transfer_bytes = {bytes_read, bytes_written};  // HBM bytes (not the host link): replay re-estimates
  runtime->commit(record, launch, nullptr, /*touched: any memory*/ nullptr);
  return record;
}

bool values_enabled() {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null();
  return !runtime || runtime->values_enabled();
}
void set_values_enabled(bool enabled) { current_runtime()->set_values_enabled(enabled); }

TimingCacheStats timing_cache_stats() {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null();
  return runtime ? runtime->timing_cache_stats() : TimingCacheStats{};
}
void reset_timing_cache_stats() {
  if (auto runtime = current_runtime_or_null()) runtime->reset_timing_cache_stats();
}

// Before any config is set there is nothing on the clocks, the log or the timeline.
void record_collective(const OpRecord& record, const std::vector<MemoryRange>& buffers,
                       const std::vector<std::pair<std::string, std::string>>& trace_args,
                       const std::vector<std::pair<std::string, double>>& link_bytes) {
  current_runtime()->add_collective(record, buffers, trace_args, link_bytes);
}

void wait_for_collective(int device, double end_ns, const std::string& op) {
  current_runtime()->wait_until(device, end_ns, op);
}

double simulated_ns(int device) {
  auto runtime = current_runtime_or_null();
  return runtime ? runtime->simulated_ns(device) : 0;
}
void reset_simulated_time() {
  if (auto runtime = current_runtime_or_null()) runtime->reset_simulated_time();
}
std::vector<OpRecord> op_log() {
  auto runtime = current_runtime_or_null();
  return runtime ? runtime->op_log() : std::vector<OpRecord>{};
}
void reset_op_log() {
  if (auto runtime = current_runtime_or_null()) runtime->reset_op_log();
}
size_t program_cache_size() {
  auto runtime = current_runtime_or_null();
  return runtime ? runtime->program_cache_size() : 0;
}
void set_timeline_enabled(bool enabled) { current_runtime()->set_timeline_enabled(enabled); }
void reset_timeline() { current_runtime()->reset_timeline(); }
size_t write_timeline(const std::string& path) { return current_runtime()->write_timeline(path); }

void start_recording(const std::string& path, bool overwrite, bool compress, const std::string& trnsim_version) {
  current_runtime()->start_recording(path, overwrite, compress, trnsim_version);
}

RecordingInfo stop_recording(bool complete, const std::string& error) {
  return current_runtime()->stop_recording(complete, error);
}

bool recording() {
  std::shared_ptr<DeviceRuntime> runtime = current_runtime_or_null();
  return runtime && runtime->recording();
}

}  // namespace trnsim::frontend
