// How a launch is timed: the one place both the PyTorch device (frontend/kernel_executor.cpp)
// and `trnsim replay` go through, so a replay on the recording's config reproduces the recorded
// time bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "record/launch.h"
#include "sim/simulator.h"

namespace trnsim::record {

// One transfer of `bytes` over the host link: latency + bytes / bandwidth (0 for no bytes).
double host_link_ns(const HardwareConfig& config, uint64_t bytes);
// The time of a copy or fallback launch: its transfers one after another.
double transfers_ns(const HardwareConfig& config, const std::vector<uint64_t>& transfer_bytes);

// Host resources a caller keeps across simulations (not owned; nullptr = made for each run).
struct HostResources {
  isa::MemoryImagePool* image_pool = nullptr;  // recycled SBUF/PSUM images
  isa::HostWorkers* workers = nullptr;         // the interpreter's host threads
  // The first core's HBM buffers, some bound to host memory (sim::SimOptions::hbm_store); nullptr = owned ones.
  std::shared_ptr<isa::HbmStore> hbm_store;
};

// Simulates a kernel's per-core programs on physical cores 0..n-1 sharing HBM. With
// `timing_only` no values are computed (`prepare` is not called); the time is the same.
sim::SimResult simulate_kernel(const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
                               const std::string& config_hash, bool timing_only, bool trace,
                               const std::function<void(uint32_t core, isa::CoreState& state)>& prepare,
                               const HostResources& host = {});

// Whether the values of `programs` (run as simulate_kernel runs them) can be computed by the interpreter alone,
// core after core, once their timing is known: no instruction waits on another core or exchanges data with one
// (isa::reaches_other_cores: core_barrier, collectives), and no control flow depends on tensor values (the timing
// would too).
bool values_without_timing_model(const std::vector<const isa::Program*>& programs);

// The values simulate_kernel computes, without the timing model: the states of cores 0..n-1 (sharing HBM) after
// each ran its program in program order. Only for programs values_without_timing_model accepts. The results are in
// HBM: SBUF/PSUM hold what the programs wrote, and where a program reads only its own writes, the recycled images
// may hold older bytes elsewhere (isa::CoreState's only_program_sees_onchip).
std::vector<std::unique_ptr<isa::CoreState>> interpret_kernel(
    const std::vector<const isa::Program*>& programs, const HardwareConfig& config,
    const std::function<void(uint32_t core, isa::CoreState& state)>& prepare, const HostResources& host = {});

// Timing-only mode, an op with no kernel (kind "estimate"): the launch cost plus the bytes it
// reads and writes at the device's share of the chip's HBM bandwidth (hbm.bandwidth_gbps x
// cores_per_device / chip.physical_cores); the PyTorch device and replay charge the same.
double estimate_ns(const HardwareConfig& config, uint32_t cores_per_device, uint64_t bytes_read, uint64_t bytes_written);

// Fills the launch's measured result (ns, per-engine busy time, flops, MFU, bottleneck) from
// the simulation's statistics.
void set_kernel_result(Launch& launch, const sim::SimStats& stats);

// The busiest engine kind summed over the cores ("core0.vector" + "core1.vector" -> "vector").
std::string busiest_engine(const std::map<std::string, double>& busy_ns);

}  // namespace trnsim::record
