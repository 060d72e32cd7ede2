// Re-times a recording on a hardware config without PyTorch: every kernel launch's per-core
// programs go through the timing model (timing only: values are not recorded, and the timing
// model never reads them), every copy and fallback through the config's host link.
//
// On the recording's own config this reproduces each launch's time bit for bit (the same
// programs and the same simulation, record/launch_timing.h). On another config it answers "this
// step on that hardware" for the same programs: by default the kernels are not rebuilt or re-tuned
// for the target (see rebuild below), programs built for another generation run under the target's
// generation rules, and
// each program must be legal on the target (else a ReplayError naming the launch and the rule).
// On the recording's own config a program is replayed as the device ran it (the device does not
// check legality), with a note for any rule it breaks.
//
// With ReplayOptions::rebuild, each kernel launch that carries its kernel invocation (the builder's
// name and spec, kernels/kernel_invocation.h) is built again for the target config, split across
// the target's LNC (kernels::logical_core_size), and the new programs are simulated: figures that
// only shape how kernels are built (SBUF size, LNC, tile choices) then move the time. Launches
// without an invocation (recordings made before invocations were recorded) are re-timed as
// recorded and counted. Each distinct invocation is built once per replay. A kernel the target
// cannot build (KernelUnsupported, or an unreadable invocation) is a ReplayError naming every such
// launch, its op and the reason. On the recording's own config the rebuilt programs are the
// recorded ones (the builders are deterministic), so the times reproduce bit for bit.
//
// The model is deterministic and launches are independent simulations, so launches with the same
// per-core programs take the same time: each distinct program set is simulated once per replay
// and its result reused (exact, not an approximation).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "record/recording_reader.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::record {

class ReplayError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ReplayOptions {
  bool trace = false;    // build a Perfetto timeline of the whole replay
  bool rebuild = false;  // build kernels again for the target from their invocations
};

struct ReplayResult {
  // The recorded launches with the replayed result (start_ns on the replay's per-device clocks,
  // ns, busy_ns, flops, mfu, bottleneck); index i is the recording's launch i.
  std::vector<Launch> launches;
  double total_ns = 0;           // all launches, all devices
  double recorded_total_ns = 0;
  size_t simulations = 0;        // distinct per-core program sets simulated
  size_t reused = 0;             // kernel launches that reused an identical program set's result
  // With ReplayOptions::rebuild:
  size_t rebuilt = 0;              // kernel launches built again for the target
  size_t rebuilt_as_recorded = 0;  // of those, the ones whose programs equal the recorded ones (by text)
  size_t not_rebuilt = 0;          // kernel launches without an invocation: re-timed as recorded
  size_t builds = 0;               // distinct invocations built
  std::vector<std::string> notes;  // what the reader should know (e.g. programs run on another generation)
  std::unique_ptr<sim::TraceWriter> timeline;  // when ReplayOptions::trace
};

// "launch 12 (mm [512, 512], [512, 2048])"
std::string describe_launch(const Launch& launch);

ReplayResult replay(const Recording& recording, const HardwareConfig& config, const std::string& config_hash,
                    const ReplayOptions& options);

}  // namespace trnsim::record
