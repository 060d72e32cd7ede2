// A kernel invocation as data: the kernel builder's name and its spec as JSON (spec_json.h), enough
// to build the kernel again for any config. The PyTorch device builds every kernel from its
// invocation (frontend/kernel_executor.h: execute_kernel) and a recording stores it with the launch,
// so `trnsim replay --rebuild` can build the same kernel for another config (SBUF size, LNC, tile
// choices then move the time, as they would on hardware).
//
// The registry (kernel_registry.cpp) maps each name to its builder, `<name>_program(spec, config,
// core, cores)` of the kernel library; building reads the JSON strictly (an unknown field, a value
// that does not read back as written, or an unknown name is an InvocationError).
#pragma once

#include <any>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/hardware_config.h"
#include "isa/program.h"

namespace trnsim::kernels {

struct KernelInvocation {
  std::string kernel;   // registry name, e.g. "matmul" (matmul_program)
  nlohmann::json spec;  // the spec struct's JSON (non-finite numbers as "inf", "-inf", "nan")

  // A stable text of the whole invocation (keys sorted): what caches of rebuilt programs key on.
  std::string key() const { return kernel + ":" + spec.dump(); }
  bool operator==(const KernelInvocation& other) const { return kernel == other.kernel && spec == other.spec; }
};

// An invocation that cannot be read: unknown kernel, a spec with unknown fields or values, or the
// wrong JSON types. Not KernelUnsupported: it is not the kernel declining a spec.
class InvocationError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The registered kernel names, sorted.
std::vector<std::string> registered_kernels();

// A kernel builder of the library: part `core` of `cores` of the kernel for `spec` on `config`.
template <typename Spec>
using KernelBuilder = isa::Program (*)(const Spec& spec, const HardwareConfig& config, uint32_t core, uint32_t cores);

namespace detail {
// The registered name of the builder `is_builder` accepts (std::logic_error when none: a builder
// missing from kernel_registry.cpp is a bug).
const std::string& registered_name(const std::function<bool(const std::any& builder)>& is_builder);
// Non-finite numbers, which JSON cannot hold, replaced by strings.
KernelInvocation make_invocation(const std::string& kernel, nlohmann::json spec);
}  // namespace detail

// The invocation of `builder` (a registered `kernels::*_program`) on `spec`:
//   execute_kernel(device, key, kernels::invocation(kernels::matmul_program, spec), ...)
// Needs spec_json.h for the spec's JSON form.
template <typename Spec>
KernelInvocation invocation(KernelBuilder<Spec> builder, const Spec& spec) {
  const std::string& name = detail::registered_name([builder](const std::any& registered) {
    const auto* typed = std::any_cast<KernelBuilder<Spec>>(&registered);
    return typed && *typed == builder;
  });
  return detail::make_invocation(name, nlohmann::json(spec));
}

// Part `core` of `cores` of the invoked kernel built for `config` (the builder's own exceptions,
// KernelUnsupported among them, propagate; an unreadable invocation is an InvocationError).
isa::Program build_kernel(const KernelInvocation& invocation, const HardwareConfig& config, uint32_t core,
                          uint32_t cores);

// Physical cores per device: the config's LNC (`chip.default_logical_core_size`), at least 1 and at
// most the chip's physical cores. Every kernel of the device is built split across them.
uint32_t logical_core_size(const HardwareConfig& config);

using ProgramParts = std::vector<std::shared_ptr<const isa::Program>>;  // one per physical core
using PartBuilder = std::function<isa::Program(const HardwareConfig&, uint32_t core, uint32_t cores)>;

// The kernel built once per physical core, `cores` parts. A kernel that cannot split this shape
// (SplitUnsupported) runs whole on the first core, the others idle (empty programs with the same
// allocations); any other failure of a split build propagates, so a bug does not hide behind a
// slower one-core run. The one way the device and replay --rebuild split a kernel.
ProgramParts build_parts(const PartBuilder& build, const HardwareConfig& config, uint32_t cores);
ProgramParts build_parts(const KernelInvocation& invocation, const HardwareConfig& config, uint32_t cores);

}  // namespace trnsim::kernels
