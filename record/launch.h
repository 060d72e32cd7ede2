// One launch: an op the device ran, with what is needed to time it again without PyTorch.
//
// A kernel launch holds one program per physical core of the device (the kernel split across
// the logical core's LNC cores; they share HBM) plus the bindings of host tensors to the
// programs' HBM allocations. A copy or a CPU-fallback launch holds its host-link transfers. Both
// carry the op's metadata and the time measured when it ran. A kernel launch also carries its
// kernel invocation (builder name + spec as data) when the device made it from one, so that replay
// --rebuild can build the kernel again for another config. Tensor values are not part of a
// launch: the timing model never reads them (timing-only runs give the same time), so the
// programs and the config determine the time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "isa/program.h"
#include "kernels/kernel_invocation.h"

namespace trnsim::record {

// A host tensor bound to one HBM allocation of the launch's programs.
struct Binding {
  std::string allocation;
  uint64_t elements = 0;
  std::string dtype;      // of the host bytes (the allocation's own dtype is in the program)
  std::string direction;  // "in" (copied into HBM before the run) or "out" (copied back after)
};

struct Launch {
  uint64_t index = 0;            // position in the recording (0, 1, ...)
  std::string op;                // ATen op, "copy host->device", ...
  // "kernel" (simulated), "copy" (host link), "fallback" (ran on the CPU), "estimate" (timing-only
  // mode, no kernel: transfer_bytes holds [HBM bytes read, written], record::estimate_ns)
  std::string kind = "kernel";
  int device = 0;
  std::vector<std::vector<int64_t>> shapes;  // input shapes
  std::string dtype;
  std::string key;               // the executor's program-cache key (kernels)
  // Kernels: what built the programs (absent in recordings made before invocations were recorded).
  std::optional<kernels::KernelInvocation> invocation;

  // Kernels: one program per physical core, core i runs programs[i] (kept in memory while
  // recording and replaying; a recording stores each distinct program once, by content hash).
  std::vector<std::shared_ptr<const isa::Program>> programs;
  std::vector<std::string> program_hashes;
  // The bytes of each program's .tasm text, as the manifest declares them: a program file is read (and
  // decompressed) no further than that. Empty in recordings made before sizes were declared.
  std::vector<uint64_t> program_bytes;
  std::vector<Binding> bindings;
  // Copies and fallbacks: each transfer over the host link (a fallback: to the host, then back).
  std::vector<uint64_t> transfer_bytes;

  // The measured result.
  double start_ns = 0;  // on the device's simulated clock
  double ns = 0;         // kernels: launch_ns + the body
  double launch_ns = 0;  // kernels: the execution's fixed cost (config chip.kernel_launch_ns), first
  std::map<std::string, double> busy_ns;  // per engine of each core ("core0.tensor", "core1.dma")
  uint64_t flops = 0;
  double mfu = 0;
  std::string bottleneck;  // the busiest engine kind summed over cores; "host_link" for transfers
  uint64_t host_link_bytes = 0;
};

}  // namespace trnsim::record
