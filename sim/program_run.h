// The core of running one .tasm program, shared by `trnsim run` (tools/cli/run_command.cpp) and
// the Python API `trnsim.run_program` (frontend/module.cpp): load the config, check the program's
// generation and legality, and simulate it with the caller's HBM inputs.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"
#include "sim/simulator.h"

namespace trnsim::sim {

// How a run was asked for (tensor names, missing inputs); the caller reports it as a usage error.
class RunUsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct PreparedProgram {
  LoadedConfig config;
  isa::Program program;
  // The programs of cores 1, 2, ... of a kernel split across the physical cores of a logical core (an LNC launch):
  // each runs on its own core, all sharing core 0's HBM. Empty for a one-core run.
  std::vector<isa::Program> other_cores;
};

// Loads `config_name` with `overrides` (ConfigError), checks that the program targets that config's
// generation and passes isa::check_program (IsaError naming each instruction and rule).
// `origin` names the program in messages (its path, or "<program>").
PreparedProgram prepare_program(isa::Program program, const std::string& origin, const std::string& config_name,
                                const std::vector<std::string>& overrides);

// The same for a kernel split across cores: programs[i] runs on physical core i, all sharing one HBM (their HBM
// tensors must be declared alike).
PreparedProgram prepare_programs(std::vector<isa::Program> programs, const std::string& origin,
                                 const std::string& config_name, const std::vector<std::string>& overrides);

// "fp32[128, 512]"
std::string allocation_declaration(const isa::Allocation& allocation);

// The HBM allocations' names, in declaration order.
std::vector<std::string> hbm_tensor_names(const isa::Program& program);

// The index of the HBM allocation `name`, or -1.
int find_hbm_tensor(const isa::Program& program, const std::string& name);

// "name: fp32[128, 512]" for each HBM input allocation whose index is not in `given`.
std::vector<std::string> missing_inputs(const isa::Program& program, const std::vector<uint32_t>& given);

// Simulates the prepared program with `inputs` (allocation index, bytes in the allocation's dtype)
// copied into every core's HBM before the run (SPMD: each core its own copy), or into the one shared HBM of a split
// kernel (PreparedProgram::other_cores). Timing-only runs of a program
// whose loops depend on tensor values (isa::control_depends_on_values) need every input too (RunUsageError).
SimResult run_prepared(const PreparedProgram& prepared,
                       const std::vector<std::pair<uint32_t, std::vector<uint8_t>>>& inputs,
                       const SimOptions& options);

}  // namespace trnsim::sim
