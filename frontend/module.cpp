// trnsim._C: pybind11 bindings of the neuron device. Plain C++ on this side (neuron_device.h),
// so this TU does not pay for torch headers. `import torch` must come before loading it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fstream>
#include <set>

#include "config/config_loader.h"
#include "config/config_printer.h"
#include "config/config_tree.h"
#include "frontend/kernel_executor.h"
#include "frontend/device_runtime.h"
#include "frontend/distributed_backend.h"
#include "frontend/neuron_device.h"
#include "frontend/program_executor.h"
#include "isa/control_flow.h"
#include "isa/instruction.h"
#include "isa/isa_error.h"
#include "isa/text_form.h"
#include "sim/program_run.h"
#include "sim/schedule/list_scheduler.h"
#include "sim/system/collectives.h"
#include "tools/cli/npy.h"

namespace py = pybind11;
namespace fe = trnsim::frontend;

namespace {

trnsim::cli::NpyType npy_type(const std::string& descr, const std::string& tensor) {
  using trnsim::cli::NpyType;
  for (NpyType t : {NpyType::f2, NpyType::f4, NpyType::f8, NpyType::i1, NpyType::i2, NpyType::i4, NpyType::u1,
                    NpyType::u2, NpyType::u4}) {
    if (descr == trnsim::cli::npy_descr(t)) return t;
  }
  throw trnsim::cli::NpyError("inputs['" + tensor + "']: unsupported dtype " + descr +
                              " (supported: float16/32/64, int8/16/32, uint8/16/32, and ml_dtypes bfloat16)");
}

// Dtypes whose bytes NumPy (with ml_dtypes) holds as they are; the others come back as float32.
bool native_numpy_dtype(trnsim::DType d) {
  using trnsim::DType;
  switch (d) {
    case DType::fp32: case DType::bf16: case DType::fp16: case DType::fp8_e4m3fn: case DType::fp8_e5m2:
    case DType::int32: case DType::int16: case DType::int8: case DType::uint32: case DType::uint16: case DType::uint8:
      return true;
    default:
      return false;
  }
}

// Every leaf of a config as canonical text ("core.sbuf.bytes_per_partition" -> "196608"), plus its
// name and hash: what front-ends that size their work by the hardware read (the NKI tracer).
py::dict config_leaves(const trnsim::HardwareConfig& config, const std::string& hash) {
  py::dict d;
  for (const trnsim::ConfigLeaf& leaf : trnsim::flatten_config(config)) d[py::str(leaf.path)] = leaf.value;
  d["name"] = config.name;
  d["hash"] = hash;
  return d;
}

// An HBM input list [(name, npy descr, shape, bytes)] converted by `trnsim run`'s .npy rules (tools/cli/npy.h) into
// (allocation index, bytes); missing inputs are an error unless timing-only.
std::vector<std::pair<uint32_t, std::vector<uint8_t>>> load_inputs(const trnsim::isa::Program& program,
                                                                   const std::vector<py::tuple>& inputs,
                                                                   bool timing_only) {
  namespace sim = trnsim::sim;
  namespace cli = trnsim::cli;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> loaded;
  std::vector<uint32_t> given;
  for (const py::tuple& input : inputs) {
    std::string name = input[0].cast<std::string>();
    int index = sim::find_hbm_tensor(program, name);
    if (index < 0) {
      std::string valid;
      for (const std::string& n : sim::hbm_tensor_names(program)) valid += (valid.empty() ? "" : ", ") + n;
      throw py::key_error("inputs['" + name + "']: the program has no HBM tensor '" + name + "' (HBM tensors: " +
                          (valid.empty() ? "(none)" : valid) + ")");
    }
    const trnsim::isa::Allocation& a = program.allocations[size_t(index)];
    cli::NpyArray array;
    std::string descr = input[1].cast<std::string>();
    array.shape = input[2].cast<std::vector<uint64_t>>();
    std::string data = input[3].cast<std::string>();
    if (descr == "bf16" && a.dtype != trnsim::DType::bf16) {
      // ml_dtypes bfloat16 into another dtype: widened exactly to fp32 first, then the float rule.
      array.type = cli::NpyType::f4;
      array.data.resize(data.size() * 2);
      for (size_t i = 0; i + 1 < data.size(); i += 2) {
        array.data[2 * i + 2] = uint8_t(data[i]);
        array.data[2 * i + 3] = uint8_t(data[i + 1]);
      }
    } else {
      // bf16 bits into a bf16 tensor: the .npy rule for uint16 (raw bit patterns).
      array.type = descr == "bf16" ? cli::NpyType::u2 : npy_type(descr, name);
      array.data.assign(data.begin(), data.end());
    }
    given.push_back(uint32_t(index));
    // Timing only reads no values, unless loops take their trip counts from tensors (register_load).
    if (timing_only && !trnsim::isa::control_depends_on_values(program)) continue;
    loaded.emplace_back(uint32_t(index), cli::npy_to_tensor_bytes(array, a.dtype, a.shape, "inputs['" + name + "']",
                                                                  name));
  }
  std::vector<std::string> missing = sim::missing_inputs(program, given);
  if (!missing.empty() && !timing_only) {
    std::string text;
    for (const std::string& m : missing) text += (text.empty() ? "" : ", ") + m;
    throw sim::RunUsageError("missing inputs for the program's input tensors: " + text);
  }
  return loaded;
}

// The output HBM tensors of `state` as {name: (dtype, shape, bytes, widened to fp32)}.
py::dict outputs_of(const trnsim::isa::Program& program, const trnsim::isa::CoreState& state) {
  namespace cli = trnsim::cli;
  py::dict outputs;
  for (size_t i = 0; i < program.allocations.size(); ++i) {
    const trnsim::isa::Allocation& a = program.allocations[i];
    if (a.space != trnsim::isa::MemorySpace::hbm || a.role != trnsim::isa::AllocationRole::output) continue;
    if (a.dtype == trnsim::DType::mxfp8_e4m3 || a.dtype == trnsim::DType::mxfp8_e5m2 ||
        a.dtype == trnsim::DType::mxfp4_e2m1) {
      continue;  // packed MX tensors have no NumPy form (as `trnsim run --output` refuses them)
    }
    // One copy of an output (a writable bytearray NumPy views in place): outputs can be most of a run's memory.
    const trnsim::isa::HbmBuffer& buffer = state.hbm(uint32_t(i));
    const bool native = native_numpy_dtype(a.dtype);
    std::vector<uint64_t> shape(a.shape.begin(), a.shape.end());
    py::bytearray data;
    if (native) {
      data = py::bytearray(reinterpret_cast<const char*>(buffer.data()), buffer.size());
    } else {
      const std::vector<uint8_t> widened = cli::tensor_bytes_to_npy(buffer, a.dtype, a.shape).data;
      data = py::bytearray(reinterpret_cast<const char*>(widened.data()), widened.size());
    }
    outputs[py::str(a.name)] = py::make_tuple(std::string(trnsim::dtype_name(a.dtype)), shape, data, !native);
  }
  return outputs;
}

// trnsim.run_program's native half (frontend/python/trnsim/run.py): the core `trnsim run` uses
// (sim/program_run.h), inputs converted by its .npy rules (tools/cli/npy.h).
// More than one program: a kernel split across physical cores 0, 1, ... sharing HBM (an LNC launch).
py::dict run_program(const std::vector<std::string>& program_texts, const std::string& origin, bool is_path,
                     const std::string& config, const std::vector<std::string>& overrides,
                     const std::vector<py::tuple>& inputs, bool timing_only, const std::string& trace_path) {
  namespace sim = trnsim::sim;
  namespace cli = trnsim::cli;
  std::vector<trnsim::isa::Program> parsed;
  for (const std::string& text : program_texts) {
    parsed.push_back(is_path ? trnsim::isa::parse_tasm_file(text) : trnsim::isa::parse_tasm(text, origin));
  }
  sim::PreparedProgram prepared = sim::prepare_programs(std::move(parsed), origin, config, overrides);
  const trnsim::isa::Program& program = prepared.program;

  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> loaded = load_inputs(program, inputs, timing_only);


  sim::SimOptions options;
  options.timing_only = timing_only;
  options.trace = !trace_path.empty();
  sim::SimResult result;
  {
    py::gil_scoped_release release;
    result = sim::run_prepared(prepared, loaded, options);
  }
  if (!trace_path.empty()) {
    std::ofstream out(trace_path);
    if (out) result.trace->write(out);
    if (!out) throw std::runtime_error(trace_path + ": cannot write the trace");
  }

  py::dict d;
  d["outputs"] = timing_only ? py::dict() : outputs_of(program, *result.states.front());
  d["stats_json"] = result.stats.to_json();
  d["name"] = program.name;
  d["config_hash"] = prepared.config.hash;
  return d;
}

// trnsim.run_ranks's native half: the same program on physical cores 0..n-1, each a rank with its own memory and
// its own inputs (SPMD); collectives meet across them, timed on `system` (empty: the config's default system).
py::dict run_ranks(const std::string& program_text, const std::string& origin, bool is_path, const std::string& config,
                   const std::vector<std::string>& overrides, const std::vector<std::vector<py::tuple>>& inputs,
                   bool timing_only, const std::string& system, uint32_t ranks_per_chip) {
  namespace sim = trnsim::sim;
  trnsim::isa::Program parsed =
      is_path ? trnsim::isa::parse_tasm_file(program_text) : trnsim::isa::parse_tasm(program_text, origin);
  sim::PreparedProgram prepared = sim::prepare_program(std::move(parsed), origin, config, overrides);
  const trnsim::isa::Program& program = prepared.program;
  const uint32_t ranks = uint32_t(inputs.size());
  if (ranks == 0 || ranks > prepared.config.hardware.chip.physical_cores) {
    throw sim::RunUsageError("run_ranks: " + std::to_string(ranks) + " ranks; a simulation runs 1.." +
                             std::to_string(prepared.config.hardware.chip.physical_cores) +
                             " (one per physical core of the chip)");
  }
  std::vector<std::vector<std::pair<uint32_t, std::vector<uint8_t>>>> loaded;
  for (const std::vector<py::tuple>& rank_inputs : inputs) loaded.push_back(load_inputs(program, rank_inputs, timing_only));
  sim::SimOptions options;
  options.timing_only = timing_only;
  options.cores.clear();
  for (uint32_t r = 0; r < ranks; ++r) options.cores.push_back(r);
  options.collective_system = system;
  options.collective_ranks_per_chip = ranks_per_chip;
  sim::SimResult result;
  {
    py::gil_scoped_release release;
    result = sim::simulate(program, prepared.config.hardware, prepared.config.hash, options,
                           [&](uint32_t core, trnsim::isa::CoreState& state) {
                             for (const auto& [index, bytes] : loaded.at(core)) state.hbm(index) = bytes;
                           });
  }
  py::list outputs;
  for (uint32_t r = 0; r < ranks; ++r) outputs.append(timing_only ? py::dict() : outputs_of(program, *result.states[r]));
  py::dict d;
  d["outputs"] = outputs;
  d["stats_json"] = result.stats.to_json();
  d["name"] = program.name;
  d["config_hash"] = prepared.config.hash;
  return d;
}

// trnsim.distributed's system model: one CollectiveSimulator on the current config (its runtime kept alive, so a
// set_config later does not pull the config away), links and CC-cores booked by every collective it runs.
class CollectiveSystem {
 public:
  CollectiveSystem(const std::string& system, uint32_t ranks_per_chip)
      : m_runtime(fe::current_runtime()),
        m_simulator(m_runtime->config(), system.empty() ? m_runtime->config().default_system : system,
                    ranks_per_chip) {}

  py::dict run(const std::string& op, uint64_t bytes, const std::vector<uint32_t>& ranks, double start_ns,
               const std::string& algorithm, const std::vector<int64_t>& pairs, int64_t root) {
    namespace sim = trnsim::sim;
    sim::CollectiveRequest request;
    request.op = sim::parse_collective_op(op);
    request.bytes = bytes;
    request.algorithm = sim::parse_collective_algorithm(algorithm);
    request.ranks = ranks;
    request.pairs = pairs;
    request.root = root;
    request.start_ns = start_ns;
    for (uint32_t r : ranks) {
      if (r >= m_simulator.ranks())
        throw sim::RunUsageError("collective rank " + std::to_string(r) + " outside system '" +
                                 m_simulator.topology().name() + "' (" + std::to_string(m_simulator.ranks()) +
                                 " ranks)");
    }
    const sim::CollectiveTiming t = m_simulator.run(request);
    py::dict d;
    d["latency_ns"] = t.latency_ns;
    d["algorithm"] = sim::collective_algorithm_name(t.algorithm);
    d["ranks"] = t.ranks;
    d["steps"] = t.steps;
    d["transfers"] = t.transfers;
    d["algbw_gbps"] = t.algbw_gbps;
    d["busbw_gbps"] = t.busbw_gbps;
    d["busiest_link"] = t.busiest_link;
    d["busiest_link_bytes"] = t.busiest_link_bytes;
    d["busiest_link_utilisation"] = t.busiest_link_utilisation;
    d["link_bytes"] = t.link_bytes;
    return d;
  }
  uint32_t ranks() const { return m_simulator.ranks(); }
  uint32_t chips() const { return m_simulator.topology().chips(); }
  std::string name() const { return m_simulator.topology().name(); }

 private:
  std::shared_ptr<fe::DeviceRuntime> m_runtime;
  trnsim::sim::CollectiveSimulator m_simulator;
};

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "trnsim native part: the PyTorch device 'neuron' (PrivateUse1) on simulated Trainium";

  py::register_local_exception<trnsim::isa::IsaError>(m, "ProgramError", PyExc_RuntimeError);
  py::register_local_exception<trnsim::ConfigError>(m, "ConfigError", PyExc_RuntimeError);
  py::register_local_exception<trnsim::cli::NpyError>(m, "InputError", PyExc_ValueError);
  py::register_local_exception<trnsim::sim::RunUsageError>(m, "RunUsageError", PyExc_ValueError);
  m.def("run_program", &run_program, py::arg("program"), py::arg("origin"), py::arg("is_path"), py::arg("config"),
        py::arg("overrides"), py::arg("inputs"), py::arg("timing_only"), py::arg("trace_path"),
        "Run a .tasm program (text, or a path when is_path) on a config with HBM inputs "
        "[(name, npy descr, shape, bytes)]; see trnsim.run_program.");
  m.def("run_ranks", &run_ranks, py::arg("program"), py::arg("origin"), py::arg("is_path"), py::arg("config"),
        py::arg("overrides"), py::arg("inputs"), py::arg("timing_only"), py::arg("system"), py::arg("ranks_per_chip"),
        "Run a .tasm program on one rank per physical core, each with its own inputs; see trnsim.run_ranks.");

  m.def("config_leaves", [](const std::string& config, const std::vector<std::string>& overrides) {
    trnsim::LoadedConfig loaded = trnsim::load_config(config, overrides);
    return config_leaves(loaded.hardware, loaded.hash);
  }, py::arg("config"), py::arg("overrides") = std::vector<std::string>{});
  m.def("schedule_order", [](const std::string& program_text, const std::string& origin, const std::string& config,
                             const std::vector<std::string>& overrides,
                             const std::vector<std::pair<size_t, size_t>>& keep_order,
                             const std::vector<std::pair<size_t, size_t>>& edges, size_t lookahead) {
    // The order a kernel compiler issues the program's instructions in (sim/schedule/list_scheduler.h). "device":
    // the config of the PyTorch device the kernel runs on (trnsim.nki on neuron tensors).
    trnsim::LoadedConfig loaded;
    if (config == "device") {
      fe::config_info();
      loaded.hardware = fe::current_runtime()->config();
    } else {
      loaded = trnsim::load_config(config, overrides);
    }
    const trnsim::isa::Program program = trnsim::isa::parse_tasm(program_text, origin);
    trnsim::sim::ScheduleOptions options;
    options.keep_order = keep_order;
    options.edges = edges;
    if (lookahead) options.lookahead_instructions = lookahead;
    py::gil_scoped_release release;
    return trnsim::sim::list_schedule(program, loaded.hardware, options);
  }, py::arg("program"), py::arg("origin"), py::arg("config"), py::arg("overrides"), py::arg("keep_order"),
     py::arg("edges"), py::arg("lookahead") = 0,
     "The scheduled order of a .tasm program's instructions (a permutation of their indices).");
  m.def("instruction_specs", [] {
    // The ISA table (isa/instructions.def) as data: front-ends that emit .tasm (trnsim.nki) build
    // their per-instruction calls from it rather than keeping a second list.
    namespace isa = trnsim::isa;
    py::list out;
    for (const isa::InstructionSpec& spec : isa::all_instruction_specs()) {
      py::dict d;
      d["name"] = spec.name;
      py::list engines;
      for (const isa::EngineAvailability& e : spec.engines) {
        engines.append(py::make_tuple(std::string(trnsim::enum_name(e.engine)), std::string(trnsim::enum_name(e.since))));
      }
      d["engines"] = engines;
      py::list operands;
      for (const isa::OperandSpec& o : spec.operands) {
        py::dict od;
        od["name"] = o.name;
        od["kind"] = isa::operand_kind_name(o.kind);
        od["optional"] = o.optional;
        od["default"] = o.has_default ? py::object(py::str(o.default_text)) : py::object(py::none());
        od["values"] = o.enum_values;
        operands.append(od);
      }
      d["operands"] = operands;
      d["doc"] = spec.doc;
      out.append(d);
    }
    return out;
  });
  m.def("device_config_leaves", [] {
    fe::config_info();  // loads the device's config if nothing has yet
    return config_leaves(fe::current_runtime()->config(), fe::current_runtime()->hash());
  });
  m.def("execute_program", [](int device, const std::string& key, const std::vector<std::string>& tasm,
                              const std::string& origin,
                              const std::vector<py::tuple>& inputs, const std::vector<py::tuple>& outputs,
                              const std::string& op, const std::vector<std::vector<int64_t>>& shapes,
                              const std::string& dtype) {
    // A traced NKI kernel on `neuron` tensors: buffers are (HBM tensor, host address of the device
    // tensor's data, elements, dtype name); see trnsim/nki/_runtime.py.
    auto buffers = [](const std::vector<py::tuple>& items) {
      std::vector<fe::HostBuffer> out;
      for (const py::tuple& t : items) {
        fe::HostBuffer b;
        b.allocation = t[0].cast<std::string>();
        b.data = reinterpret_cast<void*>(t[1].cast<uintptr_t>());
        b.count = t[2].cast<size_t>();
        auto dtype = trnsim::parse_dtype(t[3].cast<std::string>());
        if (!dtype) throw py::value_error("unknown dtype " + t[3].cast<std::string>());
        b.dtype = *dtype;
        out.push_back(b);
      }
      return out;
    };
    std::vector<fe::HostBuffer> in = buffers(inputs), out = buffers(outputs);
    fe::OpRecord record;
    record.op = op;
    record.shapes = shapes;
    record.dtype = dtype;
    fe::OpRecord done;
    {
      py::gil_scoped_release release;
      // One program per physical core of an LNC launch (a list of one otherwise).
      done = fe::execute_program(device, key, [&] {
        std::vector<trnsim::isa::Program> programs;
        for (const std::string& text : tasm) programs.push_back(trnsim::isa::parse_tasm(text, origin));
        return programs;
      }, in, out, record);
    }
    py::dict d;
    d["start_ns"] = done.start_ns;
    d["ns"] = done.ns;
    d["launch_ns"] = done.launch_ns;
    d["flops"] = done.flops;
    d["mfu"] = done.mfu;
    d["bottleneck"] = done.bottleneck;
    return d;
  }, py::arg("device"), py::arg("key"), py::arg("tasm"), py::arg("origin"), py::arg("inputs"), py::arg("outputs"),
     py::arg("op"), py::arg("shapes"), py::arg("dtype"));
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
  py::class_<CollectiveSystem>(m, "CollectiveSystem")
      .def(py::init<const std::string&, uint32_t>(), py::arg("system"), py::arg("ranks_per_chip"))
      .def("run", &CollectiveSystem::run, py::arg("op"), py::arg("bytes"), py::arg("ranks"), py::arg("start_ns"),
           py::arg("algorithm") = "auto", py::arg("pairs") = std::vector<int64_t>{}, py::arg("root") = -1)
      .def_property_readonly("ranks", &CollectiveSystem::ranks)
      .def_property_readonly("chips", &CollectiveSystem::chips)
      .def_property_readonly("name", &CollectiveSystem::name);
  m.def("systems", [] {
    // The current config's multi-chip systems: name -> chips, and which is the default.
    const trnsim::HardwareConfig& config = fe::current_runtime()->config();
    py::dict d;
    for (const auto& [name, system] : config.systems) d[py::str(name)] = system.chips;
    py::dict out;
    out["systems"] = d;
    out["default_system"] = config.default_system;
    out["logical_cores_per_chip"] = config.chip.physical_cores / fe::config_info().cores_per_device;
    return out;
  });
  m.def("record_collective", [](int device, const std::string& op, const std::string& dtype,
                                const std::vector<std::vector<int64_t>>& shapes, uint64_t bytes, double start_ns,
                                double latency_ns, const std::string& algorithm,
                                const std::vector<std::pair<uintptr_t, uint64_t>>& buffers,
                                const std::vector<std::pair<std::string, std::string>>& trace_args,
                                const std::vector<std::pair<std::string, double>>& link_bytes) {
    fe::OpRecord r;
    r.op = op;
    r.kind = "collective";
    r.device = device;
    r.dtype = dtype;
    r.shapes = shapes;
    r.bytes = bytes;
    r.start_ns = start_ns;
    r.ns = latency_ns;
    r.bottleneck = algorithm;
    std::vector<fe::MemoryRange> ranges;
    for (const auto& [ptr, size] : buffers) ranges.push_back({reinterpret_cast<const void*>(ptr), size});
    fe::record_collective(r, ranges, trace_args, link_bytes);
  }, py::arg("device"), py::arg("op"), py::arg("dtype"), py::arg("shapes"), py::arg("bytes"), py::arg("start_ns"),
     py::arg("latency_ns"), py::arg("algorithm"), py::arg("buffers"),
     py::arg("trace_args") = std::vector<std::pair<std::string, std::string>>{},
     py::arg("link_bytes") = std::vector<std::pair<std::string, double>>{},
     "A collective of this rank on its device's collective engines (beside its clock); later work touching "
     "`buffers` [(data_ptr, bytes)] waits for its end. `link_bytes` [(link, bytes)]: the traffic it put on "
     "the links the trace draws for this rank (GB/s counters over its span).");
  fe::bind_distributed_backend(m);
  // Streams (torch.neuron.Stream, frontend/python/trnsim/device.py): DeviceRuntime keeps a clock per stream.
  m.def("set_stream", [](int device, int stream) { fe::current_runtime()->set_stream(device, stream); },
        py::arg("device"), py::arg("stream"));
  m.def("current_stream", [](int device) { return fe::current_runtime()->current_stream(device); }, py::arg("device"));
  m.def("stream_clock", [](int device, int stream) { return fe::current_runtime()->stream_clock(device, stream); },
        py::arg("device"), py::arg("stream"));
  m.def("stream_wait", [](int device, int stream, double until_ns, const std::string& op, int source_stream) {
    fe::current_runtime()->stream_wait(device, stream, until_ns, op, source_stream);
  }, py::arg("device"), py::arg("stream"), py::arg("until_ns"), py::arg("op"), py::arg("source_stream"),
     "Stream `stream` waits until `until_ns`, a clock of `source_stream` (wait_stream, wait_event).");
  m.def("synchronize", [](int device) { fe::current_runtime()->synchronize(device); }, py::arg("device"));
  m.def("holds_values", [](uintptr_t ptr) { return fe::holds_values(reinterpret_cast<const void*>(ptr)); },
        py::arg("data_ptr"), "Whether the device block holding data_ptr has values (timing-only mode writes none).");
  m.def("mark_values", [](uintptr_t ptr, bool has_values) {
    if (has_values) fe::mark_with_values(reinterpret_cast<const void*>(ptr));
    else fe::mark_without_values(reinterpret_cast<const void*>(ptr));
  }, py::arg("data_ptr"), py::arg("has_values"), "Mark the device block holding data_ptr as holding values or not.");
  m.def("wait_collective", &fe::wait_for_collective, py::arg("device"), py::arg("end_ns"), py::arg("op"),
        "Work.wait(): the device's later work follows the collective ending at end_ns.");
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
      d["launch_ns"] = r.launch_ns;
      d["flops"] = r.flops;
      d["mfu"] = r.mfu;
      d["bottleneck"] = r.bottleneck;
      d["instructions"] = r.instructions;
      d["timing_only"] = r.timing_only;
      d["timing_cached"] = r.timing_cached;
      out.append(d);
    }
    return out;
  });
  m.def("reset_op_log", &fe::reset_op_log);
  m.def("set_values_enabled", &fe::set_values_enabled, py::arg("enabled"));
  m.def("values_enabled", &fe::values_enabled);
  m.def("timing_cache_stats", [] {
    const fe::TimingCacheStats s = fe::timing_cache_stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["entries"] = s.entries;
    return d;
  });
  m.def("reset_timing_cache_stats", &fe::reset_timing_cache_stats);
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
