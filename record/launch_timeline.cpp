#include "record/launch_timeline.h"

#include <sstream>

namespace trnsim::record {

std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes) {
  std::ostringstream s;
  for (size_t i = 0; i < shapes.size(); ++i) {
    s << (i ? ", " : "") << "[";
    for (size_t j = 0; j < shapes[i].size(); ++j) s << (j ? ", " : "") << shapes[i][j];
    s << "]";
  }
  return s.str();
}

void add_launch_to_timeline(sim::TraceWriter& timeline, const Launch& launch, double start_ns,
                            const sim::TraceWriter* core_trace) {
  const std::string device = "neuron:" + std::to_string(launch.device);
  const int process = timeline.find_or_add_process(device, launch.device * 100);
  const int ops = timeline.find_or_add_track(process, "ops", 0);
  std::vector<std::pair<std::string, std::string>> args = {
      {"kind", launch.kind}, {"shapes", shapes_text(launch.shapes)}, {"dtype", launch.dtype},
      {"simulated_ns", std::to_string(launch.ns)}};
  if (launch.kind == "kernel") {
    args.push_back({"flops", std::to_string(launch.flops)});
    args.push_back({"mfu", std::to_string(launch.mfu)});
    args.push_back({"bottleneck", launch.bottleneck});
    args.push_back({"launch_ns", std::to_string(launch.launch_ns)});
  } else {
    args.push_back({"host_link_bytes", std::to_string(launch.host_link_bytes)});
  }
  const std::string name = launch.kind == "fallback" ? "fallback " + launch.op
                           : launch.kind == "estimate" ? "estimate " + launch.op : launch.op;
  timeline.slice(process, ops, start_ns, launch.ns, name, args);
  if (launch.kind != "kernel" && launch.host_link_bytes > 0) {
    const int link = timeline.find_or_add_track(process, "host link", 1);
    timeline.slice(process, link, start_ns, launch.ns, name, {{"bytes", std::to_string(launch.host_link_bytes)}});
  }
  if (launch.kind == "kernel" && launch.launch_ns > 0) {
    // The execution's fixed cost (config chip.kernel_launch_ns) comes first; the cores' instructions follow it.
    const int track = timeline.find_or_add_track(process, "launch", 2);
    timeline.slice(process, track, start_ns, launch.launch_ns, "launch " + launch.op,
                   {{"launch_ns", std::to_string(launch.launch_ns)}});
  }
  if (core_trace) timeline.append(*core_trace, start_ns + launch.launch_ns, device + " ", launch.device * 100 + 1);
}

}  // namespace trnsim::record
