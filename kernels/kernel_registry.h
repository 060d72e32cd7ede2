// The kernel registry behind kernel_invocation.h (internal to kernels/): each kernel builder of
// the library by name, with two type-erased steps on the spec's JSON.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::kernels {

struct KernelEntry {
  std::any builder;  // the KernelBuilder<Spec> itself, how invocation() finds the name
  // The spec read into its struct and written back (what a strict read compares with the input).
  std::function<nlohmann::json(const nlohmann::json& spec)> normalize;
  std::function<isa::Program(const nlohmann::json& spec, const HardwareConfig&, uint32_t core, uint32_t cores)> build;
  // Fields an earlier trnsim wrote into this kernel's spec that no longer shape its program (they
  // became runtime inputs): a recorded spec holding them still reads, without them.
  std::vector<std::string> retired_fields = {};
};

// Every kernel of the library, by name (`<name>_program`).
const std::map<std::string, KernelEntry>& kernel_registry();

}  // namespace trnsim::kernels
