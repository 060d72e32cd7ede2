#include "record/recording_format.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace trnsim::record {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& origin, size_t line, const std::string& message) {
  throw std::runtime_error(origin + ":" + std::to_string(line) + ": " + message);
}

Json parse_object(const std::string& text, const std::string& origin, size_t line) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(origin, line, "not a JSON line");
  if (!j.is_object()) fail(origin, line, "expected a JSON object");
  return j;
}

// Whether a JSON value holds a T exactly: nlohmann converts a floating-point number to an integer type with a plain
// cast, undefined behaviour out of range (found by the recording fuzzer under UBSan), so integers must be integers.
template <class T>
struct JsonHolds {
  static bool check(const Json& value) {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      return value.is_number_integer() && (std::is_signed_v<T> || value.is_number_unsigned());
    } else {
      return true;
    }
  }
};
template <class U>
struct JsonHolds<std::vector<U>> {
  static bool check(const Json& value) {
    if (!value.is_array()) return true;  // get<> reports the wrong type
    for (const Json& element : value) {
      if (!JsonHolds<U>::check(element)) return false;
    }
    return true;
  }
};

// A required field of the expected JSON type, else an error naming it.
template <class T>
T field(const Json& j, const char* key, const std::string& origin, size_t line) {
  auto it = j.find(key);
  if (it == j.end()) fail(origin, line, std::string("missing \"") + key + "\"");
  if (!JsonHolds<T>::check(*it)) fail(origin, line, std::string("\"") + key + "\" has the wrong type");
  try {
    return it->template get<T>();
  } catch (const Json::exception&) {
    fail(origin, line, std::string("\"") + key + "\" has the wrong type");
  }
}

template <class T>
T optional_field(const Json& j, const char* key, T fallback, const std::string& origin, size_t line) {
  return j.contains(key) ? field<T>(j, key, origin, line) : fallback;
}

}  // namespace

std::string header_line(const RecordingHeader& header) {
  Json j;
  j["format"] = kFormatName;
  j["version"] = header.version;
  j["config"] = {{"name", header.config.name},
                 {"name_or_path", header.config.name_or_path},
                 {"source", header.config.source},
                 {"overrides", header.config.overrides},
                 {"hash", header.config.hash}};
  j["trnsim_version"] = header.trnsim_version;
  j["programs"] = header.compressed_programs ? "tasm.gz" : "tasm";
  return j.dump();
}

std::string launch_line(const Launch& launch) {
  Json j;
  j["index"] = launch.index;
  j["op"] = launch.op;
  j["kind"] = launch.kind;
  j["device"] = launch.device;
  j["shapes"] = launch.shapes;
  j["dtype"] = launch.dtype;
  if (launch.kind == "kernel") {
    j["key"] = launch.key;
    if (launch.invocation) {
      // The spec as nlohmann::json holds it (keys sorted), inside this ordered line.
      j["kernel"] = {{"name", launch.invocation->kernel}, {"spec", Json(launch.invocation->spec)}};
    }
    j["programs"] = launch.program_hashes;
    if (!launch.program_bytes.empty()) j["program_bytes"] = launch.program_bytes;
    Json bindings = Json::array();
    for (const Binding& b : launch.bindings) {
      bindings.push_back({{"allocation", b.allocation}, {"elements", b.elements}, {"dtype", b.dtype},
                          {"direction", b.direction}});
    }
    j["bindings"] = bindings;
  } else {
    j["transfer_bytes"] = launch.transfer_bytes;
  }
  j["start_ns"] = launch.start_ns;
  j["ns"] = launch.ns;
  j["launch_ns"] = launch.launch_ns;
  Json busy = Json::object();
  for (const auto& [engine, ns] : launch.busy_ns) busy[engine] = ns;
  j["busy_ns"] = busy;
  j["flops"] = launch.flops;
  j["mfu"] = launch.mfu;
  j["bottleneck"] = launch.bottleneck;
  j["host_link_bytes"] = launch.host_link_bytes;
  return j.dump();
}

std::string footer_line(const RecordingFooter& footer) {
  Json end;
  end["complete"] = footer.complete;
  end["launches"] = footer.launches;
  end["host_s"] = footer.host_s;
  end["error"] = footer.error;
  Json j;
  j["end"] = end;
  return j.dump();
}

LineKind line_kind(const std::string& line, const std::string& origin, size_t line_number) {
  const Json j = parse_object(line, origin, line_number);
  if (j.contains("format")) return LineKind::header;
  if (j.contains("end")) return LineKind::footer;
  if (j.contains("index")) return LineKind::launch;
  fail(origin, line_number, "neither a header, a launch nor the footer");
}

RecordingHeader parse_header(const std::string& line, const std::string& origin, size_t n) {
  const Json j = parse_object(line, origin, n);
  if (field<std::string>(j, "format", origin, n) != kFormatName) {
    fail(origin, n, "not a trnsim recording (\"format\" is not \"" + std::string(kFormatName) + "\")");
  }
  RecordingHeader header;
  header.version = field<int>(j, "version", origin, n);
  if (header.version != kFormatVersion) {
    fail(origin, n, "recording format version " + std::to_string(header.version) + "; this trnsim reads version " +
                        std::to_string(kFormatVersion));
  }
  const Json config = field<Json>(j, "config", origin, n);
  header.config.name = field<std::string>(config, "name", origin, n);
  header.config.name_or_path = optional_field<std::string>(config, "name_or_path", header.config.name, origin, n);
  header.config.source = field<std::string>(config, "source", origin, n);
  header.config.overrides = field<std::vector<std::string>>(config, "overrides", origin, n);
  header.config.hash = field<std::string>(config, "hash", origin, n);
  header.trnsim_version = optional_field<std::string>(j, "trnsim_version", "", origin, n);
  const std::string programs = optional_field<std::string>(j, "programs", "tasm.gz", origin, n);
  if (programs != "tasm.gz" && programs != "tasm") fail(origin, n, "\"programs\" must be \"tasm.gz\" or \"tasm\"");
  header.compressed_programs = programs == "tasm.gz";
  return header;
}

Launch parse_launch(const std::string& line, const std::string& origin, size_t n) {
  const Json j = parse_object(line, origin, n);
  Launch launch;
  launch.index = field<uint64_t>(j, "index", origin, n);
  launch.op = field<std::string>(j, "op", origin, n);
  launch.kind = field<std::string>(j, "kind", origin, n);
  if (launch.kind != "kernel" && launch.kind != "copy" && launch.kind != "fallback" && launch.kind != "estimate") {
    fail(origin, n, "\"kind\" must be kernel, copy, fallback or estimate, not \"" + launch.kind + "\"");
  }
  launch.device = field<int>(j, "device", origin, n);
  launch.shapes = field<std::vector<std::vector<int64_t>>>(j, "shapes", origin, n);
  launch.dtype = field<std::string>(j, "dtype", origin, n);
  if (launch.kind == "kernel") {
    launch.key = optional_field<std::string>(j, "key", "", origin, n);
    if (j.contains("kernel")) {
      // Read as data here; whether the spec builds is replay --rebuild's question (kernel_invocation.h).
      const Json kernel = field<Json>(j, "kernel", origin, n);
      if (!kernel.is_object()) fail(origin, n, "\"kernel\" must be an object {\"name\": ..., \"spec\": {...}}");
      const Json spec = field<Json>(kernel, "spec", origin, n);
      if (!spec.is_object()) fail(origin, n, "\"kernel\".\"spec\" must be an object");
      launch.invocation =
          kernels::KernelInvocation{field<std::string>(kernel, "name", origin, n), nlohmann::json(spec)};
    }
    launch.program_hashes = field<std::vector<std::string>>(j, "programs", origin, n);
    if (launch.program_hashes.empty()) fail(origin, n, "a kernel launch without programs");
    for (const std::string& hash : launch.program_hashes) {
      // A hash names a file under programs/: nothing else (no path) may stand there.
      const bool hex = !hash.empty() && hash.find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!hex) fail(origin, n, "program hash '" + hash + "' is not a lower-case hex digest");
    }
    // Absent in recordings made before sizes were declared (the reader then bounds each program by a fixed limit).
    launch.program_bytes = optional_field<std::vector<uint64_t>>(j, "program_bytes", {}, origin, n);
    if (!launch.program_bytes.empty() && launch.program_bytes.size() != launch.program_hashes.size()) {
      fail(origin, n, "\"program_bytes\" has " + std::to_string(launch.program_bytes.size()) + " sizes for " +
                          std::to_string(launch.program_hashes.size()) + " programs");
    }
    for (const Json& b : field<Json>(j, "bindings", origin, n)) {
      Binding binding;
      binding.allocation = field<std::string>(b, "allocation", origin, n);
      binding.elements = field<uint64_t>(b, "elements", origin, n);
      binding.dtype = field<std::string>(b, "dtype", origin, n);
      binding.direction = field<std::string>(b, "direction", origin, n);
      launch.bindings.push_back(binding);
    }
  } else {
    launch.transfer_bytes = field<std::vector<uint64_t>>(j, "transfer_bytes", origin, n);
  }
  launch.start_ns = field<double>(j, "start_ns", origin, n);
  launch.ns = field<double>(j, "ns", origin, n);
  // Recordings made before launch costs were modelled have none: their ns is the body alone.
  launch.launch_ns = optional_field<double>(j, "launch_ns", 0.0, origin, n);
  launch.busy_ns = field<std::map<std::string, double>>(j, "busy_ns", origin, n);
  launch.flops = field<uint64_t>(j, "flops", origin, n);
  launch.mfu = field<double>(j, "mfu", origin, n);
  launch.bottleneck = field<std::string>(j, "bottleneck", origin, n);
  launch.host_link_bytes = field<uint64_t>(j, "host_link_bytes", origin, n);
  return launch;
}

RecordingFooter parse_footer(const std::string& line, const std::string& origin, size_t n) {
  const Json end = field<Json>(parse_object(line, origin, n), "end", origin, n);
  RecordingFooter footer;
  footer.complete = field<bool>(end, "complete", origin, n);
  footer.launches = field<uint64_t>(end, "launches", origin, n);
  footer.host_s = field<double>(end, "host_s", origin, n);
  footer.error = optional_field<std::string>(end, "error", "", origin, n);
  return footer;
}

}  // namespace trnsim::record
