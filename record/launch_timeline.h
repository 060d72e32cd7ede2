// A launch drawn on a Perfetto timeline, as trnsim.profile() and `trnsim replay --trace` show
// it: per device an "ops" track (one slice per launch, copies and fallbacks included) and a
// "host link" track, then each physical core's engines and DMA queues.
#pragma once

#include <string>
#include <vector>

#include "record/launch.h"
#include "sim/trace/trace_writer.h"

namespace trnsim::record {

// "[2, 3], [3]"
std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes);

// Adds the launch at `start_ns` (relative to the timeline's origin); `core_trace` is the
// kernel's own trace (its cores' engines), merged under the device's process. Host seconds are
// left out, so the same launches give the same trace bit for bit.
void add_launch_to_timeline(sim::TraceWriter& timeline, const Launch& launch, double start_ns,
                            const sim::TraceWriter* core_trace);

}  // namespace trnsim::record
