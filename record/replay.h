// Re-times a recording on a hardware config without PyTorch: every kernel launch's per-core
// programs go through the timing model (timing only: values are not recorded, and the timing
// model never reads them), every copy and fallback through the config's host link.
//
// On the recording's own config this reproduces each launch's time bit for bit (the same
// programs and the same simulation, record/launch_timing.h). On another config it answers "this
// step on that hardware" for the same programs: the kernels are not rebuilt or re-tuned for the
// target, programs built for another generation run under the target's generation rules, and
// each program must be legal on the target (else a ReplayError naming the launch and the rule).
// On the recording's own config a program is replayed as the device ran it (the device does not
// check legality), with a note for any rule it breaks.
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
  bool trace = false;  // build a Perfetto timeline of the whole replay
};

struct ReplayResult {
  // The recorded launches with the replayed result (start_ns on the replay's per-device clocks,
  // ns, busy_ns, flops, mfu, bottleneck); index i is the recording's launch i.
  std::vector<Launch> launches;
  double total_ns = 0;           // all launches, all devices
  double recorded_total_ns = 0;
  size_t simulations = 0;        // distinct per-core program sets simulated
  size_t reused = 0;             // kernel launches that reused an identical program set's result
  std::vector<std::string> notes;  // what the reader should know (e.g. programs run on another generation)
  std::unique_ptr<sim::TraceWriter> timeline;  // when ReplayOptions::trace
};

// "launch 12 (mm [512, 512], [512, 2048])"
std::string describe_launch(const Launch& launch);

ReplayResult replay(const Recording& recording, const HardwareConfig& config, const std::string& config_hash,
                    const ReplayOptions& options);

}  // namespace trnsim::record
