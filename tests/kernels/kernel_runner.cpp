// Test driver for the element-wise / normalization kernel builders: builds one kernel from
// `KERNEL key=value...`, checks its legality, and either writes it as .tasm (--tasm PATH, run by
// the pytest through `trnsim run`) or simulates it timing-only (--bench) and prints one JSON line
// with the time and the achieved HBM bandwidth against the core's share.
//
//   kernel_runner unary shape=300x7 dtype=bf16 op=gelu --tasm k.tasm
//   kernel_runner binary a_shape=8192x4096 b_shape=4096 dtype=bf16 op=add --bench config=trn3
// Keys: shape, a_shape, b_shape, dtype, out_dtype, a_dtype, b_dtype, param_dtype, cond_dtype, op,
// scale, bias, a_scalar, b_scalar, eps, weight (0/1), has_bias (0/1), config.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>

#include "config/config_loader.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "kernels/elementwise.h"
#include "kernels/normalization.h"
#include "sim/simulator.h"

using namespace trnsim;
using namespace trnsim::kernels;

namespace {

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, 'x')) shape.push_back(std::stoll(item));
  return shape;
}

DType dtype_of(const std::map<std::string, std::string>& kv, const std::string& key, const std::string& fallback) {
  auto it = kv.find(key);
  std::string name = it == kv.end() ? fallback : it->second;
  auto d = parse_dtype(name);
  if (!d) throw std::invalid_argument("unknown dtype " + name);
  return *d;
}

template <typename E>
E enum_of(const std::string& name, const std::vector<std::pair<const char*, E>>& table) {
  for (const auto& [n, e] : table) {
    if (name == n) return e;
  }
  throw std::invalid_argument("unknown op " + name);
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: kernel_runner KERNEL key=value... (--tasm PATH | --bench)\n";
    return 2;
  }
  std::string kernel = argv[1], tasm;
  bool bench = false;
  std::map<std::string, std::string> kv;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--tasm" && i + 1 < argc) {
      tasm = argv[++i];
    } else if (arg == "--bench") {
      bench = true;
    } else if (auto eq = arg.find('='); eq != std::string::npos) {
      kv[arg.substr(0, eq)] = arg.substr(eq + 1);
    } else {
      throw std::invalid_argument("bad argument " + arg);
    }
  }
  auto get = [&](const std::string& k, const std::string& fallback = "") {
    auto it = kv.find(k);
    return it == kv.end() ? fallback : it->second;
  };
  LoadedConfig config = load_config(get("config", "trn2"));
  const HardwareConfig& hw = config.hardware;
  std::string dtype = get("dtype", "fp32");

  isa::Program program;
  if (kernel == "unary") {
    UnarySpec spec;
    spec.shape = parse_shape(get("shape"));
    spec.op = enum_of<UnaryOp>(get("op", "copy"),
                               {{"copy", UnaryOp::copy}, {"relu", UnaryOp::relu}, {"gelu", UnaryOp::gelu},
                                {"gelu_tanh", UnaryOp::gelu_tanh}, {"silu", UnaryOp::silu},
                                {"sigmoid", UnaryOp::sigmoid}, {"tanh", UnaryOp::tanh}, {"exp", UnaryOp::exp},
                                {"log", UnaryOp::log}, {"sqrt", UnaryOp::sqrt}, {"rsqrt", UnaryOp::rsqrt},
                                {"square", UnaryOp::square}, {"abs", UnaryOp::abs}, {"neg", UnaryOp::neg},
                                {"reciprocal", UnaryOp::reciprocal}, {"affine", UnaryOp::affine}});
    spec.input_dtype = dtype_of(kv, "dtype", "fp32");
    spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
    spec.scale = std::stod(get("scale", "1"));
    spec.bias = std::stod(get("bias", "0"));
    program = unary_program(spec, hw);
  } else if (kernel == "binary") {
    BinarySpec spec;
    spec.a_shape = parse_shape(get("a_shape", "1"));
    spec.b_shape = parse_shape(get("b_shape", "1"));
    spec.op = enum_of<BinaryOp>(
        get("op", "add"), {{"add", BinaryOp::add}, {"subtract", BinaryOp::subtract}, {"multiply", BinaryOp::multiply},
                           {"divide", BinaryOp::divide}, {"maximum", BinaryOp::maximum}, {"minimum", BinaryOp::minimum},
                           {"equal", BinaryOp::equal}, {"not_equal", BinaryOp::not_equal},
                           {"greater", BinaryOp::greater}, {"greater_equal", BinaryOp::greater_equal},
                           {"less", BinaryOp::less}, {"less_equal", BinaryOp::less_equal}});
    spec.a_dtype = dtype_of(kv, "a_dtype", dtype);
    spec.b_dtype = dtype_of(kv, "b_dtype", dtype);
    spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
    if (kv.count("a_scalar")) spec.a_scalar = std::stod(kv["a_scalar"]);
    if (kv.count("b_scalar")) spec.b_scalar = std::stod(kv["b_scalar"]);
    program = binary_program(spec, hw);
  } else if (kernel == "where") {
    WhereSpec spec;
    spec.shape = parse_shape(get("shape"));
    spec.cond_dtype = dtype_of(kv, "cond_dtype", "uint8");
    spec.a_dtype = dtype_of(kv, "a_dtype", dtype);
    spec.b_dtype = dtype_of(kv, "b_dtype", dtype);
    spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
    if (kv.count("a_scalar")) spec.a_scalar = std::stod(kv["a_scalar"]);
    if (kv.count("b_scalar")) spec.b_scalar = std::stod(kv["b_scalar"]);
    program = where_program(spec, hw);
  } else if (kernel == "softmax" || kernel == "log_softmax") {
    SoftmaxSpec spec;
    spec.shape = parse_shape(get("shape"));
    spec.log = kernel == "log_softmax";
    spec.input_dtype = dtype_of(kv, "dtype", "fp32");
    spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
    program = softmax_program(spec, hw);
  } else if (kernel == "layernorm" || kernel == "rmsnorm") {
    NormSpec spec;
    spec.kind = kernel == "rmsnorm" ? NormKind::rmsnorm : NormKind::layernorm;
    spec.shape = parse_shape(get("shape"));
    spec.eps = std::stod(get("eps", "1e-5"));
    spec.weight = get("weight", "1") == "1";
    spec.bias = get("has_bias", "0") == "1";
    spec.input_dtype = dtype_of(kv, "dtype", "fp32");
    spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
    spec.param_dtype = dtype_of(kv, "param_dtype", dtype);
    program = norm_program(spec, hw);
  } else {
    throw std::invalid_argument("unknown kernel " + kernel);
  }
  isa::check_program(program, hw);

  if (!tasm.empty()) {
    std::ofstream out(tasm);
    out << isa::print_tasm(program);
  }
  if (bench) {
    sim::SimOptions options;
    options.timing_only = true;
    sim::SimResult result = sim::simulate(program, hw, config.hash, options);
    const sim::SimStats& s = result.stats;
    // The core's share of the chip's HBM bandwidth: chip bandwidth / cores.
    double share_gbps = hw.hbm.bandwidth_gbps / double(hw.chip.physical_cores);
    double gbps = double(s.hbm_bytes) / s.total_ns;
    std::printf("{\"kernel\": \"%s\", \"config\": \"%s\", \"total_ns\": %.1f, \"hbm_bytes\": %llu, \"gbps\": %.1f, "
                "\"share_gbps\": %.1f, \"percent_of_share\": %.1f",
                kernel.c_str(), hw.name.c_str(), s.total_ns, static_cast<unsigned long long>(s.hbm_bytes), gbps,
                share_gbps, 100.0 * gbps / share_gbps);
    for (const auto& [engine, e] : s.engines) std::printf(", \"%s_busy\": %.3f", engine.c_str(), e.busy_ns / s.total_ns);
    std::printf(", \"sbuf_high_water\": %llu}\n", static_cast<unsigned long long>(s.sbuf_high_water_bytes));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
