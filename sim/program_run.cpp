#include "sim/program_run.h"

#include "config/config_loader.h"
#include "isa/control_flow.h"
#include "isa/isa_error.h"
#include "isa/legality.h"

namespace trnsim::sim {

PreparedProgram prepare_program(isa::Program program, const std::string& origin, const std::string& config_name,
                                const std::vector<std::string>& overrides) {
  PreparedProgram prepared{load_config(config_name, overrides), std::move(program)};
  const HardwareConfig& hardware = prepared.config.hardware;
  if (prepared.program.generation != hardware.generation) {
    throw isa::IsaError(origin + ": the kernel targets " + std::string(enum_name(prepared.program.generation)) +
                        " but config '" + hardware.name + "' is " + std::string(enum_name(hardware.generation)));
  }
  isa::check_program(prepared.program, hardware);
  return prepared;
}

PreparedProgram prepare_programs(std::vector<isa::Program> programs, const std::string& origin,
                                 const std::string& config_name, const std::vector<std::string>& overrides) {
  if (programs.empty()) throw isa::IsaError(origin + ": no program to run");
  std::vector<isa::Program> rest(std::make_move_iterator(programs.begin() + 1),
                                 std::make_move_iterator(programs.end()));
  PreparedProgram prepared = prepare_program(std::move(programs.front()), origin, config_name, overrides);
  const HardwareConfig& hardware = prepared.config.hardware;
  if (rest.size() + 1 > hardware.chip.physical_cores) {
    throw isa::IsaError(origin + ": " + std::to_string(rest.size() + 1) + " programs for a chip of " +
                        std::to_string(hardware.chip.physical_cores) + " physical cores");
  }
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string where = origin + " (core " + std::to_string(i + 1) + ")";
    if (rest[i].generation != hardware.generation) {
      throw isa::IsaError(where + ": the kernel targets " + std::string(enum_name(rest[i].generation)) +
                          " but config '" + hardware.name + "' is " + std::string(enum_name(hardware.generation)));
    }
    isa::check_program(rest[i], hardware);
  }
  prepared.other_cores = std::move(rest);
  return prepared;
}

std::string allocation_declaration(const isa::Allocation& a) {
  std::string text = std::string(dtype_name(a.dtype)) + "[";
  for (size_t i = 0; i < a.shape.size(); ++i) text += (i ? ", " : "") + std::to_string(a.shape[i]);
  return text + "]";
}

std::vector<std::string> hbm_tensor_names(const isa::Program& program) {
  std::vector<std::string> names;
  for (const isa::Allocation& a : program.allocations) {
    if (a.space == isa::MemorySpace::hbm) names.push_back(a.name);
  }
  return names;
}

int find_hbm_tensor(const isa::Program& program, const std::string& name) {
  int index = program.find_allocation(name);
  if (index < 0 || program.allocations[size_t(index)].space != isa::MemorySpace::hbm) return -1;
  return index;
}

std::vector<std::string> missing_inputs(const isa::Program& program, const std::vector<uint32_t>& given) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const isa::Allocation& a = program.allocations[i];
    if (a.space != isa::MemorySpace::hbm || a.role != isa::AllocationRole::input) continue;
    bool found = false;
    for (uint32_t g : given) found = found || g == i;
    if (!found) missing.push_back(a.name + ": " + allocation_declaration(a));
  }
  return missing;
}

SimResult run_prepared(const PreparedProgram& prepared,
                       const std::vector<std::pair<uint32_t, std::vector<uint8_t>>>& inputs,
                       const SimOptions& options) {
  if (options.timing_only && isa::control_depends_on_values(prepared.program)) {
    // The trip counts are in the inputs: without them the loops would run on zeros.
    std::vector<uint32_t> given;
    for (const auto& input : inputs) given.push_back(input.first);
    std::vector<std::string> missing = missing_inputs(prepared.program, given);
    if (!missing.empty()) {
      std::string text;
      for (const std::string& m : missing) text += (text.empty() ? "" : ", ") + m;
      throw RunUsageError("the program's loops depend on tensor values (register_load), so a timing-only run needs "
                          "its inputs too; missing: " + text);
    }
  }
  auto load_inputs = [&](uint32_t, isa::CoreState& state) {
    // Also when timing-only: control flow that depends on values is expanded with the inputs.
    for (const auto& [allocation, bytes] : inputs) state.hbm(allocation) = bytes;
  };
  if (prepared.other_cores.empty()) {
    return simulate(prepared.program, prepared.config.hardware, prepared.config.hash, options, load_inputs);
  }
  std::vector<const isa::Program*> programs{&prepared.program};
  SimOptions split = options;
  split.cores = {0};
  for (size_t i = 0; i < prepared.other_cores.size(); ++i) {
    programs.push_back(&prepared.other_cores[i]);
    split.cores.push_back(uint32_t(i + 1));
  }
  return simulate(programs, prepared.config.hardware, prepared.config.hash, split, load_inputs, /*shared_hbm=*/true);
}

}  // namespace trnsim::sim
