// Test driver for the element-wise / normalization kernel builders: builds one kernel from
// `KERNEL key=value...`, checks its legality, and either writes it as .tasm (--tasm PATH, run by
// the pytest through `trnsim run`) or simulates it timing-only (--bench) and prints one JSON line
// with the time and the achieved HBM bandwidth against the core's share.
//
//   kernel_runner unary shape=300x7 dtype=bf16 op=gelu --tasm k.tasm
//   kernel_runner binary a_shape=8192x4096 b_shape=4096 dtype=bf16 op=add --bench config=trn3
// Keys: shape, a_shape, b_shape, dtype, out_dtype, a_dtype, b_dtype, param_dtype, cond_dtype, op,
// scale, bias, a_scalar, b_scalar, eps, weight (0/1), has_bias (0/1), config, cores (the kernel split
// across that many cores sharing HBM; --tasm writes core 0's part, or core tasm_core's), core_ids (which
// physical cores).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "config/config_loader.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "kernels/conv.h"
#include "kernels/data_movement.h"
#include "kernels/reduction.h"
#include "kernels/scan.h"
#include "kernels/elementwise.h"
#include "kernels/loss.h"
#include "kernels/normalization.h"
#include "kernels/optimizer.h"
#include "kernels/pooling.h"
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

  double model_flops = 0;  // conv2d: the MFU numerator (2 N O Ho Wo C KH KW)
  // One program per core: with cores=N the kernel is split across N cores sharing HBM (kernels
  // without a split build the whole kernel and only accept cores=1).
  auto build = [&](uint32_t core, uint32_t cores) {
    isa::Program program;
    if (kernel == "unary") {
      UnarySpec spec;
      spec.shape = parse_shape(get("shape"));
      spec.op = enum_of<UnaryOp>(get("op", "copy"),
                                 {{"copy", UnaryOp::copy}, {"relu", UnaryOp::relu}, {"gelu", UnaryOp::gelu},
                                  {"gelu_tanh", UnaryOp::gelu_tanh}, {"gelu_dx", UnaryOp::gelu_dx}, {"silu", UnaryOp::silu},
                                  {"sigmoid", UnaryOp::sigmoid}, {"tanh", UnaryOp::tanh}, {"exp", UnaryOp::exp},
                                  {"log", UnaryOp::log}, {"sqrt", UnaryOp::sqrt}, {"rsqrt", UnaryOp::rsqrt},
                                  {"square", UnaryOp::square}, {"abs", UnaryOp::abs}, {"neg", UnaryOp::neg},
                                  {"reciprocal", UnaryOp::reciprocal}, {"affine", UnaryOp::affine}});
      spec.input_dtype = dtype_of(kv, "dtype", "fp32");
      spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
      spec.scale = std::stod(get("scale", "1"));
      spec.bias = std::stod(get("bias", "0"));
      program = unary_program(spec, hw, core, cores);
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
      spec.runtime_scalar = get("runtime_scalar", "0") == "1";  // the scalar from input a / b, fp32 [1]
      program = binary_program(spec, hw, core, cores);
    } else if (kernel == "where") {
      WhereSpec spec;
      spec.shape = parse_shape(get("shape"));
      spec.cond_dtype = dtype_of(kv, "cond_dtype", "uint8");
      spec.a_dtype = dtype_of(kv, "a_dtype", dtype);
      spec.b_dtype = dtype_of(kv, "b_dtype", dtype);
      spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
      if (kv.count("a_scalar")) spec.a_scalar = std::stod(kv["a_scalar"]);
      if (kv.count("b_scalar")) spec.b_scalar = std::stod(kv["b_scalar"]);
      program = where_program(spec, hw, core, cores);
    } else if (kernel == "softmax" || kernel == "log_softmax") {
      SoftmaxSpec spec;
      spec.shape = parse_shape(get("shape"));
      spec.log = kernel == "log_softmax";
      spec.input_dtype = dtype_of(kv, "dtype", "fp32");
      spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
      program = softmax_program(spec, hw, core, cores);
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
      spec.save_stats = get("save_stats", "0") == "1";
      program = norm_program(spec, hw, core, cores);
    } else if (kernel == "layernorm_backward" || kernel == "rmsnorm_backward") {
      // shape dtype param_dtype weight has_bias: inputs x dy mean rstd w, outputs dx dw db
      NormBackwardSpec spec;
      spec.kind = kernel == "rmsnorm_backward" ? NormKind::rmsnorm : NormKind::layernorm;
      spec.shape = parse_shape(get("shape"));
      spec.weight = get("weight", "1") == "1";
      spec.bias = get("has_bias", "0") == "1";
      spec.input_dtype = dtype_of(kv, "dtype", "fp32");
      spec.param_dtype = dtype_of(kv, "param_dtype", dtype);
      program = norm_backward_program(spec, hw, core, cores);
    } else if (kernel == "softmax_backward" || kernel == "log_softmax_backward") {
      SoftmaxBackwardSpec spec;  // inputs y dy, output dx
      spec.shape = parse_shape(get("shape"));
      spec.log = kernel == "log_softmax_backward";
      spec.input_dtype = dtype_of(kv, "dtype", "fp32");
      spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
      program = softmax_backward_program(spec, hw, core, cores);
    } else if (kernel == "cross_entropy" || kernel == "cross_entropy_backward") {
      // shape=RxC dtype reduction=none|sum|mean ignore_index=N|none
      CrossEntropySpec spec;
      std::vector<int64_t> shape = parse_shape(get("shape"));
      spec.rows = shape.at(0), spec.classes = shape.at(1);
      spec.reduction = enum_of<Reduction>(get("reduction", "mean"),
                                          {{"none", Reduction::none}, {"sum", Reduction::sum}, {"mean", Reduction::mean}});
      std::string ignore = get("ignore_index", "-100");
      spec.ignore_index = ignore == "none" ? std::nullopt : std::optional<int64_t>(std::stoll(ignore));
      spec.logits_dtype = dtype_of(kv, "dtype", "fp32");
      program = kernel == "cross_entropy" ? cross_entropy_program(spec, hw, core, cores)
                                          : cross_entropy_backward_program(spec, hw, core, cores);
    } else if (kernel == "adamw") {
      // elements dtype (param) grad_dtype state_dtype beta1 beta2 eps; tensors param grad exp_avg exp_avg_sq
      // adamw_scalars (lr, weight_decay and step reach the kernel through it: kernels::adamw_scalars)
      AdamWSpec spec;
      spec.elements = std::stoll(get("elements"));
      spec.param_dtype = dtype_of(kv, "dtype", "fp32");
      spec.grad_dtype = dtype_of(kv, "grad_dtype", dtype);
      spec.state_dtype = dtype_of(kv, "state_dtype", "fp32");
      spec.beta1 = std::stod(get("beta1", "0.9"));
      spec.beta2 = std::stod(get("beta2", "0.999"));
      spec.eps = std::stod(get("eps", "1e-8"));
      program = adamw_program(spec, hw, core, cores);
    } else if (kernel == "conv2d") {
      // input=NxCxHxW weight=Ox(C/groups)xKHxKW stride=S|SHxSW padding=P|PHxPW dilation=D|DHxDW groups has_bias
      // backward=0|1; cores=N splits it (forward / dX by input blocks, dW by kernel taps)
      Conv2dSpec spec;
      std::vector<int64_t> in = parse_shape(get("input")), wt = parse_shape(get("weight"));
      if (in.size() != 4 || wt.size() != 4) throw std::invalid_argument("conv2d needs input=NxCxHxW weight=OxCxKHxKW");
      spec.n = in[0], spec.c = in[1], spec.h = in[2], spec.w = in[3];
      spec.o = wt[0], spec.kh = wt[2], spec.kw = wt[3];
      auto pair = [&](const std::string& key, const std::string& fallback) {
        std::vector<int64_t> v = parse_shape(get(key, fallback));
        return std::make_pair(v.at(0), v.size() > 1 ? v[1] : v[0]);
      };
      std::tie(spec.stride_h, spec.stride_w) = pair("stride", "1");
      std::tie(spec.pad_h, spec.pad_w) = pair("padding", "0");
      std::tie(spec.dilation_h, spec.dilation_w) = pair("dilation", "1");
      spec.groups = std::stoll(get("groups", "1"));
      spec.bias = get("has_bias", "0") == "1";
      spec.input_dtype = dtype_of(kv, "dtype", "bf16");
      spec.output_dtype = dtype_of(kv, "out_dtype", "fp32");
      model_flops = spec.flops();
      if (get("backward", "0") == "1") {  // inputs input weight grad_output; outputs grad_input grad_weight (grad_bias)
        model_flops = conv2d_backward_flops(spec);
        program = conv2d_backward_program(spec, hw, core, cores);
      } else {
        program = conv2d_program(spec, hw, core, cores);
      }
    } else if (kernel == "max_pool2d" || kernel == "avg_pool2d") {
      // input=NxCxHxW kernel=K|KHxKW stride=S|SHxSW padding=P|PHxPW dilation=D|DHxDW ceil_mode=0|1
      // count_include_pad=0|1 divisor_override=D dtype backward=0|1. Max: outputs output, indices (int32);
      // backward inputs grad_output (+ indices), output grad_input.
      PoolSpec spec;
      std::vector<int64_t> in = parse_shape(get("input"));
      if (in.size() != 4) throw std::invalid_argument(kernel + " needs input=NxCxHxW");
      spec.n = in[0], spec.c = in[1], spec.h = in[2], spec.w = in[3];
      auto pair = [&](const std::string& key, const std::string& fallback) {
        std::vector<int64_t> v = parse_shape(get(key, fallback));
        return std::make_pair(v.at(0), v.size() > 1 ? v[1] : v[0]);
      };
      std::tie(spec.kh, spec.kw) = pair("kernel", "2");
      std::tie(spec.stride_h, spec.stride_w) = pair("stride", get("kernel", "2"));
      std::tie(spec.pad_h, spec.pad_w) = pair("padding", "0");
      std::tie(spec.dilation_h, spec.dilation_w) = pair("dilation", "1");
      spec.ceil_mode = get("ceil_mode", "0") == "1";
      spec.count_include_pad = get("count_include_pad", "1") == "1";
      spec.divisor_override = std::stoll(get("divisor_override", "0"));
      spec.dtype = dtype_of(kv, "dtype", "bf16");
      const bool backward = get("backward", "0") == "1";
      if (kernel == "max_pool2d") {
        program = backward ? max_pool2d_backward_program(spec, hw, core, cores) : max_pool2d_program(spec, hw, core, cores);
      } else {
        program = backward ? avg_pool2d_backward_program(spec, hw, core, cores) : avg_pool2d_program(spec, hw, core, cores);
      }
    } else if (kernel == "reduce" || kernel == "permute" || kernel == "concat" || kernel == "embedding") {
      // reduce shape=AxBxC dims=0,2 op=sum|mean|max|min|argmax|argmin keepdim=0|1 dtype out_dtype
      // permute shape=AxBxC perm=2,0,1 dtype; concat shapes=2x3,2x5 dim=1 dtype;
      // embedding num_ids=N vocab=V dim=D dtype index_dtype
      auto ints = [&](const std::string& key) {
        std::vector<int64_t> v;
        std::stringstream in(get(key));
        for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoll(item));
        return v;
      };
      if (kernel == "reduce") {
        ReduceSpec spec;
        spec.shape = parse_shape(get("shape"));
        spec.dims = ints("dims");
        spec.op = enum_of<ReduceOp>(get("op", "sum"), {{"sum", ReduceOp::sum}, {"mean", ReduceOp::mean},
                                                        {"max", ReduceOp::max}, {"min", ReduceOp::min},
                                                        {"argmax", ReduceOp::argmax}, {"argmin", ReduceOp::argmin}});
        spec.keepdim = get("keepdim", "0") == "1";
        spec.input_dtype = dtype_of(kv, "dtype", "fp32");
        spec.output_dtype = dtype_of(kv, "out_dtype", dtype);
        program = reduce_program(spec, hw, core, cores);
      } else if (kernel == "permute") {
        program = permute_program({parse_shape(get("shape")), ints("perm"), dtype_of(kv, "dtype", "fp32")}, hw, core,
                                  cores);
      } else if (kernel == "concat") {
        ConcatSpec spec;
        std::stringstream in(get("shapes"));
        for (std::string item; std::getline(in, item, ',');) spec.shapes.push_back(parse_shape(item));
        spec.dim = std::stoll(get("dim", "0"));
        spec.dtype = dtype_of(kv, "dtype", "fp32");
        program = concat_program(spec, hw, core, cores);
      } else {
        EmbeddingSpec spec{std::stoll(get("num_ids")), std::stoll(get("vocab")), std::stoll(get("dim")),
                           dtype_of(kv, "dtype", "fp32"), dtype_of(kv, "index_dtype", "int32")};
        program = embedding_program(spec, hw, core, cores);
      }
    } else if (kernel == "scan" || kernel == "prod") {
      // scan shape=RxC op=sum|prod dtype out_dtype; prod shape=RxC dtype out_dtype (over the last dim)
      const std::vector<int64_t> shape = parse_shape(get("shape"));
      if (shape.size() != 2) throw std::invalid_argument(kernel + ": shape must be RxC");
      if (kernel == "scan") {
        ScanSpec spec{shape[0], shape[1], enum_of<ScanOp>(get("op", "sum"), {{"sum", ScanOp::sum}, {"prod", ScanOp::prod}}),
                      dtype_of(kv, "dtype", "fp32"), dtype_of(kv, "out_dtype", dtype)};
        program = scan_program(spec, hw, core, cores);
      } else {
        ProdSpec spec{shape[0], shape[1], dtype_of(kv, "dtype", "fp32"), dtype_of(kv, "out_dtype", dtype)};
        program = prod_program(spec, hw, core, cores);
      }
    } else {
      throw std::invalid_argument("unknown kernel " + kernel);
    }
    return program;
  };
  const uint32_t cores = uint32_t(std::stoul(get("cores", "1")));
  std::vector<uint32_t> core_ids;
  for (uint32_t c = 0; c < cores; ++c) core_ids.push_back(c);
  if (kv.count("core_ids")) {  // physical cores to run on, e.g. core_ids=0,2 (default 0..cores-1)
    core_ids.clear();
    std::stringstream in(get("core_ids"));
    for (std::string item; std::getline(in, item, ',');) core_ids.push_back(uint32_t(std::stoul(item)));
    if (core_ids.size() != cores) throw std::invalid_argument("core_ids must list `cores` cores");
  }
  std::vector<isa::Program> programs;
  for (uint32_t c = 0; c < cores; ++c) programs.push_back(build(c, cores));
  for (const isa::Program& p : programs) isa::check_program(p, hw);
  // tasm_core=K: --tasm writes core K's part (default 0).
  const isa::Program& program = programs.at(size_t(std::stoul(get("tasm_core", "0"))));

  if (!tasm.empty()) {
    std::ofstream out(tasm);
    out << isa::print_tasm(program);
  }
  if (bench) {
    sim::SimOptions options;
    options.timing_only = true;
    options.cores = core_ids;
    std::vector<const isa::Program*> parts;
    for (const isa::Program& p : programs) parts.push_back(&p);
    sim::SimResult result = sim::simulate(parts, hw, config.hash, options, nullptr, /*shared_hbm=*/true);
    const sim::SimStats& s = result.stats;
    // The cores' share of the chip's HBM bandwidth: chip bandwidth / physical cores, per core used.
    double share_gbps = hw.hbm.bandwidth_gbps / double(hw.chip.physical_cores) * double(cores);
    double gbps = double(s.hbm_bytes) / s.total_ns;
    std::printf("{\"kernel\": \"%s\", \"config\": \"%s\", \"total_ns\": %.1f, \"hbm_bytes\": %llu, \"gbps\": %.1f, "
                "\"share_gbps\": %.1f, \"percent_of_share\": %.1f",
                kernel.c_str(), hw.name.c_str(), s.total_ns, static_cast<unsigned long long>(s.hbm_bytes), gbps,
                share_gbps, 100.0 * gbps / share_gbps);
    for (const auto& [engine, e] : s.engines) std::printf(", \"%s_busy\": %.3f", engine.c_str(), e.busy_ns / s.total_ns);
    if (model_flops > 0) {
      std::printf(", \"mfu\": %.4f, \"peak_tflops\": %.1f", model_flops / s.total_ns / 1e3 / s.peak_tflops,
                  s.peak_tflops);
    }
    std::printf(", \"sbuf_high_water\": %llu}\n", static_cast<unsigned long long>(s.sbuf_high_water_bytes));
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "error: " << e.what() << "\n";
  return 1;
}
