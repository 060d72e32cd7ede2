// Runs a whole ISA program (not a kernel-library invocation) as one op of the PyTorch device: what
// the NKI front-end does with a kernel called on `neuron` tensors. Torch-free; declared apart from
// kernel_executor.h so that only the module's TU sees it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "frontend/kernel_executor.h"
#include "isa/program.h"

namespace trnsim::frontend {

// The program cached under `key` (built by `make_program` the first time: checked for the device's
// generation and legality, IsaError otherwise) is simulated on one core of `device` with values:
// `inputs` copied into its HBM tensors, `outputs` copied back, the clock advanced, the op logged
// (profiler, timeline, recording; a recorded launch carries the program, no invocation).
OpRecord execute_program(int device, const std::string& key, const std::function<isa::Program()>& make_program,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record);

}  // namespace trnsim::frontend
