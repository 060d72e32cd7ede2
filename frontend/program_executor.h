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

// The programs cached under `key` (built by `make_programs` the first time: checked for the device's
// generation and legality, IsaError otherwise) are simulated with values, program i on physical core i of
// `device`, all sharing its HBM (one program: one core; an NKI LNC launch: one per core of the logical core):
// `inputs` copied into its HBM tensors, `outputs` copied back, the clock advanced, the op logged
// (profiler, timeline, recording; a recorded launch carries the programs, no invocation).
OpRecord execute_program(int device, const std::string& key,
                         const std::function<std::vector<isa::Program>()>& make_programs,
                         const std::vector<HostBuffer>& inputs, const std::vector<HostBuffer>& outputs,
                         OpRecord record);

}  // namespace trnsim::frontend
