// Kernel invocations (kernel_invocation.h): the strict read of a spec's JSON, building through the
// registry, and the per-core split the device and replay share.
#include "kernels/kernel_invocation.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/kernel_common.h"
#include "kernels/kernel_registry.h"

namespace trnsim::kernels {
namespace {

using Json = nlohmann::json;

// JSON has no inf or NaN (nlohmann writes them as null, which reads back as no number at all), yet
// specs hold them (masked_fill(-inf), clamp bounds): they travel as these strings. No spec has a
// string field or enum value of these names. A NaN's sign and payload are not kept.
Json encode_non_finite(Json j) {
  if (j.is_number_float()) {
    const double v = j.get<double>();
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  } else if (j.is_structured()) {
    for (auto& item : j) item = encode_non_finite(std::move(item));
  }
  return j;
}

Json decode_non_finite(Json j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  } else if (j.is_structured()) {
    for (auto& item : j) item = decode_non_finite(std::move(item));
  }
  return j;
}

const KernelEntry& entry_of(const std::string& kernel) {
  const auto& registry = kernel_registry();
  auto it = registry.find(kernel);
  if (it == registry.end()) throw InvocationError("unknown kernel '" + kernel + "' (not in the kernel registry)");
  return it->second;
}

// The spec as its struct reads it; every field given must be one the struct has and read back as
// written (nlohmann's enum conversion maps an unknown name to the first value, and its readers
// ignore unknown keys: both would otherwise build another kernel than the one recorded). A field
// left out takes the struct's default.
Json read_spec(const std::string& kernel, const KernelEntry& entry, const Json& recorded) {
  if (!recorded.is_object()) throw InvocationError("kernel '" + kernel + "': the spec is not a JSON object");
  Json spec = recorded;
  for (const std::string& field : entry.retired_fields) spec.erase(field);
  Json decoded = decode_non_finite(spec);
  Json back;
  try {
    back = encode_non_finite(entry.normalize(decoded));
  } catch (const std::exception& e) {  // nlohmann's type errors, an unknown dtype name
    throw InvocationError("kernel '" + kernel + "': spec " + spec.dump() + " does not read: " + e.what());
  }
  for (const auto& [field, value] : spec.items()) {
    if (!back.contains(field)) throw InvocationError("kernel '" + kernel + "': the spec has no field '" + field + "'");
    if (back.at(field) != value) {
      throw InvocationError("kernel '" + kernel + "': spec field '" + field + "' = " + value.dump() +
                            " reads back as " + back.at(field).dump());
    }
  }
  return decoded;
}

}  // namespace

std::vector<std::string> registered_kernels() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : kernel_registry()) names.push_back(name);
  return names;  // sorted: the registry is a std::map
}

namespace detail {
const std::string& registered_name(const std::function<bool(const std::any& builder)>& is_builder) {
  for (const auto& [name, entry] : kernel_registry()) {
    if (is_builder(entry.builder)) return name;
  }
  throw std::logic_error("a kernel builder missing from the kernel registry (kernels/kernel_registry.cpp)");
}

KernelInvocation make_invocation(const std::string& kernel, nlohmann::json spec) {
  return KernelInvocation{kernel, encode_non_finite(std::move(spec))};
}
}  // namespace detail

isa::Program build_kernel(const KernelInvocation& invocation, const HardwareConfig& config, uint32_t core,
                          uint32_t cores) {
  const KernelEntry& entry = entry_of(invocation.kernel);
  const Json spec = read_spec(invocation.kernel, entry, invocation.spec);
  return entry.build(spec, config, core, cores);
}

uint32_t logical_core_size(const HardwareConfig& config) {
  return std::max<uint32_t>(1, std::min(config.chip.default_logical_core_size, config.chip.physical_cores));
}

ProgramParts build_parts(const PartBuilder& build, const HardwareConfig& config, uint32_t cores) {
  ProgramParts parts;
  try {
    for (uint32_t core = 0; core < cores; ++core) {
      parts.push_back(std::make_shared<const isa::Program>(build(config, core, cores)));
    }
  } catch (const SplitUnsupported&) {
    if (cores == 1) throw;
    // Some kernels cannot split some shapes (e.g. a matmul whose transposing pass would race
    // between cores): the whole kernel on the first core, the others idle.
    parts.clear();
    isa::Program whole = build(config, 0, 1);
    isa::Program idle = whole;
    idle.instructions.clear();
    parts.push_back(std::make_shared<const isa::Program>(std::move(whole)));
    for (uint32_t core = 1; core < cores; ++core) parts.push_back(std::make_shared<const isa::Program>(idle));
  }
  return parts;
}

ProgramParts build_parts(const KernelInvocation& invocation, const HardwareConfig& config, uint32_t cores) {
  return build_parts([&invocation](const HardwareConfig& hw, uint32_t core,
                                   uint32_t n) { return build_kernel(invocation, hw, core, n); },
                     config, cores);
}

}  // namespace trnsim::kernels
