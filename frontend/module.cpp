// trnsim._C: pybind11 bindings of the neuron device. Plain C++ on this side (neuron_device.h),
// so this TU does not pay for torch headers. `import torch` must come before loading it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "frontend/kernel_executor.h"
#include "frontend/neuron_device.h"

namespace py = pybind11;
namespace fe = trnsim::frontend;

PYBIND11_MODULE(_C, m) {
  m.doc() = "trnsim native part: the PyTorch device 'neuron' (PrivateUse1) on simulated Trainium";

  m.def("set_config", &fe::set_config, py::arg("name_or_path"), py::arg("overrides") = std::vector<std::string>{},
        "Load the hardware config the device simulates (a name such as 'trn2' or a path) with 'a.b=v' overrides.");
  m.def("config_info", [] {
    fe::DeviceConfigInfo c = fe::config_info();
    py::dict d;
    d["name"] = c.name;
    d["source_file"] = c.source_file;
    d["hash"] = c.hash;
    d["device_count"] = c.device_count;
    d["hbm_bytes_per_device"] = c.hbm_bytes_per_device;
    d["host_link_gbps"] = c.host_link_gbps;
    d["cores_per_device"] = c.cores_per_device;
    d["peak_bf16_tflops_per_device"] = c.peak_bf16_tflops_per_device;
    d["dma_transpose"] = c.dma_transpose;
    return d;
  });
  m.def("lowered_ops", [] {
    py::list out;
    for (const fe::LoweringInfo& r : fe::lowering_info()) {
      py::dict d;
      d["op"] = r.op;
      d["family"] = r.family;
      d["out_forms"] = r.out_forms;
      out.append(d);
    }
    return out;
  }, "The lowering table: each ATen op the device runs on the kernel library, its family and out= forms.");
  m.def("device_count", &fe::device_count);
  m.def("current_device", &fe::current_device);
  m.def("set_device", &fe::set_device, py::arg("index"));
  m.def("memory_stats", [](int device) {
    fe::MemoryStats s = fe::memory_stats(device);
    py::dict d;
    d["allocated_bytes"] = s.allocated;
    d["peak_allocated_bytes"] = s.peak_allocated;
    d["capacity_bytes"] = s.capacity;
    d["num_allocs"] = s.num_allocs;
    d["num_ooms"] = s.num_ooms;
    return d;
  }, py::arg("device"));
  m.def("reset_peak_memory_stats", &fe::reset_peak_memory_stats, py::arg("device"));
  m.def("set_fallback_mode", &fe::set_fallback_mode, py::arg("mode"));
  m.def("fallback_mode", &fe::fallback_mode);
  m.def("fallback_counts", &fe::fallback_counts);
  m.def("reset_fallback_counts", &fe::reset_fallback_counts);
  m.def("manual_seed", &fe::manual_seed, py::arg("device"), py::arg("seed"));
  m.def("initial_seed", &fe::initial_seed, py::arg("device"));
  m.def("get_rng_state", [](int device) {
    const std::vector<uint8_t> state = fe::get_rng_state(device);
    return py::bytes(reinterpret_cast<const char*>(state.data()), state.size());
  }, py::arg("device"));
  m.def("set_rng_state", [](int device, const std::string& state) {
    fe::set_rng_state(device, std::vector<uint8_t>(state.begin(), state.end()));
  }, py::arg("device"), py::arg("state"));
  m.def("simulated_ns", &fe::simulated_ns, py::arg("device"),
        "Simulated nanoseconds of the ops run on the device (all devices when device < 0).");
  m.def("reset_simulated_time", &fe::reset_simulated_time);
  m.def("op_log", [] {
    py::list out;
    for (const fe::OpRecord& r : fe::op_log()) {
      py::dict d;
      d["op"] = r.op;
      d["kind"] = r.kind;
      d["start_ns"] = r.start_ns;
      d["bytes"] = r.bytes;
      d["host_s"] = r.host_s;
      d["shapes"] = r.shapes;
      d["dtype"] = r.dtype;
      d["device"] = r.device;
      d["ns"] = r.ns;
      d["flops"] = r.flops;
      d["mfu"] = r.mfu;
      d["bottleneck"] = r.bottleneck;
      out.append(d);
    }
    return out;
  });
  m.def("reset_op_log", &fe::reset_op_log);
  m.def("program_cache_size", &fe::program_cache_size);
  m.def("set_timeline_enabled", &fe::set_timeline_enabled, py::arg("enabled"));
  m.def("reset_timeline", &fe::reset_timeline);
  m.def("start_recording", &fe::start_recording, py::arg("path"), py::arg("overwrite"), py::arg("compress"),
        py::arg("trnsim_version"), "Record every launch from now on to the directory `path` (see trnsim.record).");
  m.def("stop_recording", [](bool complete, const std::string& error) {
    fe::RecordingInfo info = fe::stop_recording(complete, error);
    py::dict d;
    d["path"] = info.path;
    d["launches"] = info.launches;
    d["programs"] = info.programs;
    d["complete"] = info.complete;
    return d;
  }, py::arg("complete"), py::arg("error") = std::string());
  m.def("recording", &fe::recording);
  m.def("source_dir", [] { return std::string(TRNSIM_SOURCE_DIR); },
        "The source tree this module was built from (for `git describe` in a recording's header).");
  m.def("write_timeline", &fe::write_timeline, py::arg("path"), py::call_guard<py::gil_scoped_release>(),
        "Write the profiled timeline as Chrome-trace JSON (Perfetto); returns the slice count.");
}
