#include "record/launch_timing.h"

#include <algorithm>

#include "isa/control_flow.h"
#include "isa/interpreter.h"
#include "isa/isa_error.h"

namespace trnsim::record {

double host_link_ns(const HardwareConfig& config, uint64_t bytes) {
  if (bytes == 0) return 0;
  return config.host_link.latency_ns + double(bytes) / config.host_link.bandwidth_gbps;  // GB/s = bytes/ns
}

double transfers_ns(const HardwareConfig& config, const std::vector<uint64_t>& transfer_bytes) {
  double ns = 0;
  for (uint64_t bytes : transfer_bytes) ns += host_link_ns(config, bytes);
  return ns;
}

double estimate_ns(const HardwareConfig& config, uint32_t cores_per_device, uint64_t bytes_read, uint64_t bytes_written) {
  const double share = double(cores_per_device) / std::max<uint32_t>(1, config.chip.physical_cores);
  const double bytes_per_ns = config.hbm.bandwidth_gbps * share;  // GB/s = bytes/ns
  return config.chip.kernel_launch_ns + double(bytes_read + bytes_written) / bytes_per_ns;
}

sim::SimResult simulate_kernel(const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
                               const std::string& config_hash, bool timing_only, bool trace,
                               const std::function<void(uint32_t core, isa::CoreState& state)>& prepare,
                               const HostResources& host) {
  sim::SimOptions options;
  options.image_pool = host.image_pool;
  options.interpreter.workers = host.workers;
  options.hbm_store = host.hbm_store;
  options.cores.clear();
  for (uint32_t core = 0; core < programs.size(); ++core) options.cores.push_back(core);
  options.timing_only = timing_only;
  options.trace = trace;
  return sim::simulate(programs, config, config_hash, options, timing_only ? nullptr : prepare, /*shared_hbm=*/true);
}

bool values_without_timing_model(const std::vector<const isa::Program*>& programs) {
  for (const isa::Program* program : programs) {
    if (isa::control_depends_on_values(*program)) return false;
    for (const isa::Instruction& inst : program->instructions) {
      if (isa::reaches_other_cores(inst.opcode)) return false;
    }
  }
  return true;
}

std::vector<std::unique_ptr<isa::CoreState>> interpret_kernel(
    const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
    const std::function<void(uint32_t core, isa::CoreState& state)>& prepare, const HostResources& host) {
  std::vector<std::unique_ptr<isa::CoreState>> states;
  for (uint32_t core = 0; core < programs.size(); ++core) {
    std::shared_ptr<isa::HbmStore> store = core > 0 ? states.front()->hbm_store() : host.hbm_store;
    // Only the programs see SBUF/PSUM: the device reads its results from HBM.
    states.push_back(std::make_unique<isa::CoreState>(config.core, *programs[core], store, host.image_pool,
                                                      /*only_program_sees_onchip=*/true));
    if (core == 0 && prepare) prepare(core, *states.back());
  }
  for (uint32_t core = 0; core < programs.size(); ++core) {
    isa::InterpreterOptions options;
    options.stochastic_seed = isa::core_stochastic_seed(options.stochastic_seed, core);  // as sim::NeuronCore
    options.workers = host.workers;
    try {
      isa::interpret(*programs[core], *states[core], config, options);
    } catch (const isa::IsaError& e) {
      throw isa::IsaError("core " + std::to_string(core) + " " + e.what());
    }
  }
  return states;
}

std::string busiest_engine(const std::map<std::string, double>& busy_ns) {
  std::map<std::string, double> by_kind;
  for (const auto& [name, ns] : busy_ns) {
    const size_t dot = name.find('.');
    by_kind[dot == std::string::npos ? name : name.substr(dot + 1)] += ns;
  }
  std::string busiest;
  double most = -1;
  for (const auto& [name, ns] : by_kind) {
    if (ns > most) {
      most = ns;
      busiest = name;
    }
  }
  return busiest;
}

void set_kernel_result(Launch& launch, const sim::SimStats& stats) {
  launch.ns = stats.execution_ns();
  launch.launch_ns = stats.launch_ns;
  launch.flops = stats.flops;
  launch.mfu = stats.mfu();
  launch.busy_ns.clear();
  for (const auto& [name, engine] : stats.engines) launch.busy_ns[name] = engine.busy_ns;
  launch.bottleneck = busiest_engine(launch.busy_ns);
}

}  // namespace trnsim::record
