// `trnsim bench ...`: performance of the kernel library on the timing model. One point per
// invocation here; sweeps (model shapes, CSV, plots) drive this from tools/bench/.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "config/config_loader.h"
#include "config/config_tree.h"
#include "config/derived_figures.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "kernels/attention.h"
#include "kernels/attention_backward.h"
#include "kernels/conv.h"
#include "kernels/matmul.h"
#include "sim/simulator.h"
#include "tools/cli/commands.h"
#include "tools/cli/option_checks.h"
#include "tools/cli/output_files.h"

namespace trnsim::cli {
namespace {

struct MatmulOptions {
  std::string config = "trn2";
  std::vector<std::string> overrides;
  int64_t m = 0, k = 0, n = 0, batch = 1;
  uint32_t cores = 1;
  std::string dtype = "bf16", out_dtype = "fp32", activation;
  bool transpose_a = false, transpose_b = false, bias = false, residual = false, force = false, header = false;
  bool append = false;
  std::string csv, stats, trace, emit_tasm;
};

DType dtype_or_throw(const std::string& name) {
  auto dtype = parse_dtype(name);
  if (!dtype) throw isa::IsaError("unknown dtype '" + name + "'");
  return *dtype;
}

// The engine busiest over the run: where the time goes when MFU is low.
std::string bottleneck_engine(const sim::SimStats& s) {
  std::string bottleneck = "tensor";
  double busiest = 0;
  for (const auto& [name, engine] : s.engines) {
    if (engine.busy_ns > busiest) {
      busiest = engine.busy_ns;
      bottleneck = name.substr(name.find('.') + 1);
    }
  }
  return bottleneck;
}

// The files one benchmark point writes. --csv gets one header line and the point's row; with
// --append an existing CSV of the same columns gets the row alone.
struct PointFiles {
  std::string emit_tasm, stats, trace, csv;
  bool force = false, append = false;
};

template <class Options>
PointFiles point_files(const Options& o) {
  return {o.emit_tasm, o.stats, o.trace, o.csv, o.force, o.append};
}

// Whether --csv --append adds to an existing CSV (else the file is written new, header first); an
// existing file of other columns is refused rather than given rows that do not fit it.
bool appends_to_existing_csv(const PointFiles& files, const std::string& header) {
  if (!files.append || files.csv.empty()) return false;
  std::ifstream in(files.csv, std::ios::binary);
  std::string first_line;
  if (!in || !std::getline(in, first_line)) return false;  // absent or empty: written new
  if (first_line + "\n" != header) {
    throw OutputFileError("--csv: " + files.csv + " has other columns than this benchmark writes (its first line is "
                          "not `" + header.substr(0, header.size() - 1) + "`): not appending to it");
  }
  return true;
}

void write_csv_row(const PointFiles& files, const std::string& header, const std::string& row, bool append) {
  if (files.csv.empty()) return;
  write_text_file("--csv", files.csv, [&](std::ostream& out) { out << (append ? "" : header) << row; },
                  append ? std::ios::out | std::ios::app : std::ios::out | std::ios::trunc);
}

// Checks the program and every file the point writes (none is overwritten without --force, none is
// another's file, the CSV's columns when appending), writes the kernel text and simulates it
// timing-only, then writes the stats and trace. Returns whether the CSV row is appended.
// With several programs, program i runs on physical core i and they share HBM (a split kernel);
// --emit-tasm writes the first core's part.
sim::SimResult simulate_point(const std::vector<isa::Program>& programs, const LoadedConfig& config,
                              const PointFiles& files, const std::string& csv_header, bool& csv_appends) {
  for (const isa::Program& program : programs) isa::check_program(program, config.hardware);
  check_destinations({{"--emit-tasm", files.emit_tasm}, {"--stats", files.stats}, {"--trace", files.trace},
                      {"--csv", files.csv}},
                     files.force, files.append ? std::vector<std::string>{"--csv"} : std::vector<std::string>{});
  csv_appends = appends_to_existing_csv(files, csv_header);
  if (!files.emit_tasm.empty()) {
    write_text_file("--emit-tasm", files.emit_tasm, [&](std::ostream& out) { out << isa::print_tasm(programs.front()); });
  }
  sim::SimOptions options;
  options.timing_only = true;
  options.trace = !files.trace.empty();
  options.cores.clear();
  std::vector<const isa::Program*> parts;
  for (size_t i = 0; i < programs.size(); ++i) {
    options.cores.push_back(uint32_t(i));
    parts.push_back(&programs[i]);
  }
  sim::SimResult result = sim::simulate(parts, config.hardware, config.hash, options, nullptr, true);
  if (!files.stats.empty()) write_text_file("--stats", files.stats, [&](std::ostream& out) { out << result.stats.to_json(); });
  if (!files.trace.empty()) write_text_file("--trace", files.trace, [&](std::ostream& out) { result.trace->write(out); });
  return result;
}

// A shape the kernel accepts can still need more instructions than a host can build and simulate
// (--m 100000 --k 100000 --n 100000 is ~10^8 matmuls): refused up front, naming the count,
// instead of a bad_alloc after minutes of building.
void refuse_oversized_matmul(const MatmulOptions& o, const HardwareConfig& hw) {
  // A simulator limit (assumed, not hardware): each instruction takes a few hundred bytes of
  // program and tracker state, so 2^23 matmuls (plus their loads and evacuations) is several GiB.
  constexpr double kMaxMatmulInstructions = double(1 << 23);
  auto tiles = [](int64_t size, double tile) { return std::ceil(double(std::max<int64_t>(size, 1)) / tile); };
  const double rows = hw.core.tensor.pe_rows, columns = hw.core.tensor.pe_columns;
  const double moving = double(hw.core.psum.bank_bytes / 4);  // one fp32 PSUM bank: the kernel's N tile (matmul.cpp)
  const double matmuls =
      double(std::max<int64_t>(o.batch, 1)) * tiles(o.m, columns) * tiles(o.k, rows) * tiles(o.n, moving);
  if (matmuls > kMaxMatmulInstructions) {
    std::ostringstream text;
    text << "matmul [" << o.m << ", " << o.k << "] x [" << o.k << ", " << o.n << "] (batch " << o.batch
         << ") needs about " << std::fixed << std::setprecision(0) << matmuls
         << " nc_matmul instructions (batch x ceil(M/" << columns << ") x ceil(K/" << rows << ") x ceil(N/" << moving
         << ")); the simulator takes at most " << kMaxMatmulInstructions << " per benchmark";
    throw isa::IsaError(text.str());
  }
}

void bench_matmul(const MatmulOptions& o) {
  LoadedConfig config = load_config(o.config, o.overrides);
  kernels::MatmulSpec spec;
  spec.m = o.m;
  spec.k = o.k;
  spec.n = o.n;
  spec.batch = o.batch;
  spec.input_dtype = dtype_or_throw(o.dtype);
  spec.output_dtype = dtype_or_throw(o.out_dtype);
  spec.a_transposed = o.transpose_a;
  spec.b_transposed = o.transpose_b;
  spec.bias = o.bias;
  spec.residual = o.residual;
  if (!o.activation.empty()) {
    auto func = isa::parse_activation(o.activation);
    if (!func) throw isa::IsaError("unknown activation '" + o.activation + "'");
    spec.activation = *func;
  }
  refuse_oversized_matmul(o, config.hardware);
  std::vector<isa::Program> programs;
  for (uint32_t core = 0; core < o.cores; ++core) {
    programs.push_back(kernels::matmul_program(spec, config.hardware, core, o.cores));
  }
  const std::string header = "config,config_hash,dtype,m,k,n,batch,gflop,time_ns,tflops,mfu,bottleneck,instructions\n";
  bool append = false;
  sim::SimResult result = simulate_point(programs, config, point_files(o), header, append);
  const sim::SimStats& s = result.stats;
  // MFU counts the model FLOPs 2*M*K*N against the peak of the input dtype (transposes excluded).
  double flops = 2.0 * double(o.batch) * o.m * o.k * o.n;
  double peak = peak_tensor_tflops_per_core(config.hardware.core.tensor, spec.input_dtype) * o.cores;
  double tflops = flops / s.total_ns / 1e3;
  double mfu = peak > 0 ? tflops / peak : 0;
  std::string bottleneck = bottleneck_engine(s);
  std::cout << std::fixed << std::setprecision(1) << "matmul [" << o.m << ", " << o.k << "] x [" << o.k << ", " << o.n
            << "] " << o.dtype << " on " << config.hardware.name << ": " << s.total_ns / 1e3 << " us, "
            << std::setprecision(2) << tflops << " TFLOPS, MFU " << std::setprecision(1) << 100 * mfu
            << "% (bottleneck " << bottleneck << ", " << s.simulated_instructions << " instructions)\n";
  if (!o.csv.empty()) {
    std::ostringstream csv;
    csv << std::fixed;
    csv << config.hardware.name << "," << config.hash << "," << o.dtype << "," << o.m << "," << o.k << "," << o.n << ","
        << o.batch << "," << std::setprecision(6) << flops / 1e9 << "," << std::setprecision(1) << s.total_ns << ","
        << std::setprecision(4) << tflops << "," << std::setprecision(5) << mfu << "," << bottleneck << ","
        << s.simulated_instructions << "\n";
    write_csv_row(point_files(o), header, csv.str(), append);
  }
}

struct AttentionOptions {
  std::string config = "trn2";
  std::vector<std::string> overrides;
  int64_t batch = 1, heads = 1, kv_heads = 0, seq = 0, seq_k = 0, head_dim = 128;
  uint32_t cores = 1;  // forward: split by (batch, head, query tile) blocks; backward: by (batch, kv head)
  bool causal = false, force = false, backward = false, lse = false, append = false;
  std::string dtype = "bf16", csv, stats, trace, emit_tasm;
};

void bench_attention(const AttentionOptions& o) {
  LoadedConfig config = load_config(o.config, o.overrides);
  kernels::AttentionSpec spec;
  spec.batch = o.batch;
  spec.heads = o.heads;
  spec.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  spec.seq_q = o.seq;
  spec.seq_k = o.seq_k > 0 ? o.seq_k : o.seq;
  spec.head_dim = o.head_dim;
  spec.causal = o.causal;
  spec.dtype = dtype_or_throw(o.dtype);
  spec.write_lse = o.lse;
  std::vector<isa::Program> programs;
  for (uint32_t core = 0; core < o.cores; ++core) {
    programs.push_back(o.backward ? kernels::flash_attention_backward_program(spec, config.hardware, core, o.cores)
                                  : kernels::flash_attention_forward_program(spec, config.hardware, core, o.cores));
  }
  const std::string header =
      "config,config_hash,dtype,direction,batch,heads,kv_heads,seq,head_dim,causal,gflop,time_ns,tflops,mfu,bottleneck\n";
  bool append = false;
  sim::SimResult result = simulate_point(programs, config, point_files(o), header, append);
  const sim::SimStats& s = result.stats;
  // The backward's model FLOPs are its five matmuls: 2.5x the forward's two.
  double flops = o.backward ? kernels::attention_backward_flops(spec) : kernels::attention_forward_flops(spec);
  double peak = peak_tensor_tflops_per_core(config.hardware.core.tensor, spec.dtype) * o.cores;
  double tflops = flops / s.total_ns / 1e3;
  double mfu = peak > 0 ? tflops / peak : 0;
  std::string bottleneck = bottleneck_engine(s);
  std::cout << std::fixed << std::setprecision(1) << "attention " << (o.backward ? "bwd" : "fwd") << " b" << o.batch << " h" << o.heads << " s" << o.seq
            << " d" << o.head_dim << (o.causal ? " causal" : "") << " on " << config.hardware.name << ": "
            << s.total_ns / 1e3 << " us, " << std::setprecision(2) << tflops << " TFLOPS, MFU "
            << std::setprecision(1) << 100 * mfu << "% (bottleneck " << bottleneck << ")\n";
  if (!o.csv.empty()) {
    std::ostringstream csv;
    csv << std::fixed;
    csv << config.hardware.name << "," << config.hash << "," << o.dtype << (o.backward ? ",backward," : ",forward,") << o.batch << "," << o.heads
        << "," << spec.kv_heads << "," << o.seq << "," << o.head_dim << "," << (o.causal ? 1 : 0) << ","
        << std::setprecision(6) << flops / 1e9 << "," << std::setprecision(1) << s.total_ns << ","
        << std::setprecision(4) << tflops << "," << std::setprecision(5) << mfu << "," << bottleneck << "\n";
    write_csv_row(point_files(o), header, csv.str(), append);
  }
}

struct Conv2dOptions {
  std::string config = "trn2";
  std::vector<std::string> overrides;
  std::string input, weight, dtype = "bf16", csv, stats, trace, emit_tasm;
  int64_t stride = 1, padding = 0, groups = 1;
  uint32_t cores = 1;  // forward / dX split by (image block, pixel tile); dW by (O tile, column tile)
  bool backward = false, force = false, append = false;
};

std::vector<int64_t> conv_shape(const std::string& text, const char* what) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, 'x');) {
    try {
      shape.push_back(std::stoll(item));
    } catch (const std::exception&) {
      shape.clear();
      break;
    }
  }
  if (shape.size() != 4) throw isa::IsaError(std::string(what) + " '" + text + "' is not of the form AxBxCxD");
  return shape;
}

void bench_conv2d(const Conv2dOptions& o) {
  LoadedConfig config = load_config(o.config, o.overrides);
  const std::vector<int64_t> x = conv_shape(o.input, "--input"), w = conv_shape(o.weight, "--weight");
  if (o.groups < 1 || x[1] % o.groups != 0 || w[0] % o.groups != 0) {
    throw isa::IsaError("--groups " + std::to_string(o.groups) + " must divide the input channels (" +
                        std::to_string(x[1]) + ") and the output channels (" + std::to_string(w[0]) + ")");
  }
  if (x[1] != w[1] * o.groups) {
    throw isa::IsaError("--input has " + std::to_string(x[1]) + " channels, --weight " + std::to_string(w[1]) +
                        " per group (" + std::to_string(o.groups) + " groups)");
  }
  kernels::Conv2dSpec spec;
  spec.n = x[0], spec.c = x[1], spec.h = x[2], spec.w = x[3], spec.o = w[0], spec.kh = w[2], spec.kw = w[3];
  spec.stride_h = spec.stride_w = o.stride;
  spec.pad_h = spec.pad_w = o.padding;
  spec.groups = o.groups;
  spec.input_dtype = dtype_or_throw(o.dtype);
  spec.output_dtype = spec.input_dtype;  // activations and gradients stay in the training dtype
  std::vector<isa::Program> programs;
  for (uint32_t core = 0; core < o.cores; ++core) {
    programs.push_back(o.backward ? kernels::conv2d_backward_program(spec, config.hardware, core, o.cores)
                                  : kernels::conv2d_program(spec, config.hardware, core, o.cores));
  }
  const std::string header =
      "config,config_hash,dtype,n,c,h,w,o,kh,kw,stride,padding,direction,gflop,time_ns,tflops,mfu,bottleneck,groups,"
      "cores\n";
  bool append = false;
  sim::SimResult result = simulate_point(programs, config, point_files(o), header, append);
  const sim::SimStats& s = result.stats;
  // Model FLOPs: 2*N*O*Ho*Wo*C*KH*KW forward; the backward's dX and dW are one forward each.
  double flops = o.backward ? kernels::conv2d_backward_flops(spec) : spec.flops();
  // (Grouped: C / groups per output channel; depthwise convs have little work for the PE's 128 rows.)
  double peak = peak_tensor_tflops_per_core(config.hardware.core.tensor, spec.input_dtype) * o.cores;
  double tflops = flops / s.total_ns / 1e3;
  double mfu = peak > 0 ? tflops / peak : 0;
  std::string bottleneck = bottleneck_engine(s);
  const char* direction = o.backward ? "backward" : "forward";
  const std::string groups = o.groups > 1 ? " g" + std::to_string(o.groups) : "";
  const std::string cores = o.cores > 1 ? " (" + std::to_string(o.cores) + " cores)" : "";
  std::cout << std::fixed << std::setprecision(1) << "conv2d " << (o.backward ? "bwd" : "fwd") << " " << o.input
            << " * " << o.weight << " s" << o.stride << " p" << o.padding << groups << " " << o.dtype << " on "
            << config.hardware.name << cores << ": " << s.total_ns / 1e3 << " us, " << std::setprecision(2) << tflops
            << " TFLOPS, MFU " << std::setprecision(1) << 100 * mfu << "% (bottleneck " << bottleneck << ")\n";
  if (!o.csv.empty()) {
    std::ostringstream csv;
    csv << std::fixed;
    csv << config.hardware.name << "," << config.hash << "," << o.dtype << "," << spec.n << "," << spec.c << ","
        << spec.h << "," << spec.w << "," << spec.o << "," << spec.kh << "," << spec.kw << "," << o.stride << ","
        << o.padding << "," << direction << "," << std::setprecision(6) << flops / 1e9 << "," << std::setprecision(1)
        << s.total_ns << "," << std::setprecision(4) << tflops << "," << std::setprecision(5) << mfu << ","
        << bottleneck << "," << o.groups << "," << o.cores << "\n";
    write_csv_row(point_files(o), header, csv.str(), append);
  }
}

// A config of `keys` top-level keys on top of trn2, timed in the loader's three steps: YAML into
// a tree (duplicate detection), the merge onto the base, and reading (unknown-key detection,
// which rejects the first generated key: the error is the expected outcome).
void bench_config_load(uint64_t keys) {
  std::string text;
  text.reserve(keys * 24);
  for (uint64_t i = 0; i < keys; ++i) text += "generated_key_" + std::to_string(i) + ": " + std::to_string(i) + "\n";
  ConfigNode base = parse_yaml_file(resolve_config_path("trn2", default_config_dirs()));
  // Process CPU time, not wall time: on a shared host the wall clock measures the neighbours.
  auto now = [] { return std::clock(); };
  auto ms = [](std::clock_t from, std::clock_t to) { return 1e3 * double(to - from) / CLOCKS_PER_SEC; };
  auto t0 = now();
  ConfigNode overlay = parse_yaml(text, "generated.yaml");
  auto t1 = now();
  merge_config_tree(base, overlay);
  auto t2 = now();
  std::string outcome = "accepted";
  try {
    read_hardware_config(base, "generated.yaml");
  } catch (const ConfigError& e) {
    outcome = std::string("rejected: ") + e.what();
  }
  auto t3 = now();
  std::cout << std::fixed << std::setprecision(1) << "config load of " << keys << " keys: parse " << ms(t0, t1)
            << " ms, merge " << ms(t1, t2) << " ms, read " << ms(t2, t3) << " ms, total " << ms(t0, t3)
            << " ms of CPU time ("
            << outcome << ")\n";
}

}  // namespace

void add_bench_commands(CLI::App& app, int& exit_code) {
  CLI::App* bench = app.add_subcommand("bench", "Performance of the kernel library on the timing model");
  bench->require_subcommand(1);
  auto o = std::make_shared<MatmulOptions>();
  CLI::App* mm = bench->add_subcommand("matmul", "One matmul point: time, TFLOPS, MFU (timing only)");
  mm->add_option("--m", o->m, "Rows of A and C")->required();
  mm->add_option("--k", o->k, "Contraction")->required();
  mm->add_option("--n", o->n, "Columns of B and C")->required();
  mm->add_option("--batch", o->batch, "Batch (batched matmul)");
  mm->add_option("--cores", o->cores, "Split across this many physical cores (2 = one LNC=2 logical core)")
      ->check(CLI::Range(1, 64));
  mm->add_option("--dtype", o->dtype, "Input dtype (bf16, fp16, fp32, fp8_e4m3, ...)");
  mm->add_option("--out-dtype", o->out_dtype, "Output dtype");
  mm->add_option("--config", o->config, "Hardware config file or name (default trn2)");
  mm->add_option("--set", o->overrides, "Override a config value (repeatable)");
  mm->add_flag("--transpose-a", o->transpose_a, "A is stored [K, M]");
  mm->add_flag("--transpose-b", o->transpose_b, "B is stored [N, K]");
  mm->add_flag("--bias", o->bias, "Fuse + bias[N]");
  mm->add_option("--activation", o->activation, "Fuse an activation (gelu, relu, silu, ...)");
  mm->add_flag("--residual", o->residual, "Fuse + residual[M, N]");
  mm->add_option("--csv", o->csv, "Write the point as CSV (header and row; an existing file needs --force or --append)");
  mm->add_flag("--append", o->append, "Add the --csv row to an existing CSV of the same columns (new: header first)");
  mm->add_option("--stats", o->stats, "Write the simulation statistics as JSON");
  mm->add_option("--trace", o->trace, "Write a Perfetto trace");
  mm->add_option("--emit-tasm", o->emit_tasm, "Write the generated kernel as .tasm");
  mm->add_flag("--force", o->force, "Overwrite existing --csv/--stats/--trace/--emit-tasm files");
  auto a = std::make_shared<AttentionOptions>();
  CLI::App* at = bench->add_subcommand("attention", "One flash-attention forward point: time, TFLOPS, MFU");
  at->add_option("--seq", a->seq, "Query sequence length")->required();
  at->add_option("--seq-k", a->seq_k, "Key sequence length (default: --seq)");
  at->add_option("--head-dim", a->head_dim, "Head dimension (<= 128)");
  at->add_option("--batch", a->batch, "Batch");
  at->add_option("--heads", a->heads, "Query heads");
  at->add_option("--kv-heads", a->kv_heads, "Key/value heads (grouped-query; default: --heads)");
  at->add_flag("--causal", a->causal, "Causal mask");
  at->add_option("--cores", a->cores, "Split across this many physical cores (forward by batch, head, query tile; backward by batch, kv head)")
      ->check(CLI::Range(1, 64));
  at->add_flag("--lse", a->lse, "Forward also writes each row's logsumexp (the backward's input)");
  at->add_flag("--backward", a->backward,
               "Simulate the backward instead (inputs q k v o do lse, outputs dq dk dv; MFU over its 5 matmuls)");
  at->add_option("--dtype", a->dtype, "bf16 or fp16");
  at->add_option("--config", a->config, "Hardware config file or name (default trn2)");
  at->add_option("--set", a->overrides, "Override a config value (repeatable)");
  at->add_option("--csv", a->csv, "Write the point as CSV (header and row; an existing file needs --force or --append)");
  at->add_flag("--append", a->append, "Add the --csv row to an existing CSV of the same columns (new: header first)");
  at->add_option("--stats", a->stats, "Write the simulation statistics as JSON");
  at->add_option("--trace", a->trace, "Write a Perfetto trace");
  at->add_option("--emit-tasm", a->emit_tasm, "Write the generated kernel as .tasm");
  at->add_flag("--force", a->force, "Overwrite existing output files");
  at->callback([a, at, &exit_code] {
    try {
      refuse_empty_values(*at);
      bench_attention(*a);
    } catch (const isa::IsaError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    }
  });
  auto cv = std::make_shared<Conv2dOptions>();
  CLI::App* conv = bench->add_subcommand("conv2d", "One conv2d point (forward or backward): time, TFLOPS, MFU");
  conv->add_option("--input", cv->input, "Input NxCxHxW")->required();
  conv->add_option("--weight", cv->weight, "Weight OxCxKHxKW")->required();
  conv->add_option("--stride", cv->stride, "Stride (both dims)")->check(CLI::Range(1, 64));
  conv->add_option("--padding", cv->padding, "Zero padding (both dims, both sides)")->check(CLI::Range(0, 64));
  conv->add_option("--groups", cv->groups, "Groups (--weight is Ox(C/groups)xKHxKW; groups = C = O: depthwise)")
      ->check(CLI::Range(1, 1 << 20));
  conv->add_option("--cores", cv->cores,
                   "Split across this many physical cores (forward / dX by image block and pixel tile, dW by "
                   "O tile and column tile)")
      ->check(CLI::Range(1, 64));
  conv->add_flag("--backward", cv->backward,
                 "Simulate the backward instead (grad_input and grad_weight; MFU over their model FLOPs)");
  conv->add_option("--dtype", cv->dtype, "bf16, fp16 or fp32 (inputs and outputs; fp32 accumulation)");
  conv->add_option("--config", cv->config, "Hardware config file or name (default trn2)");
  conv->add_option("--set", cv->overrides, "Override a config value (repeatable)");
  conv->add_option("--csv", cv->csv, "Write the point as CSV (header and row; an existing file needs --force or --append)");
  conv->add_flag("--append", cv->append, "Add the --csv row to an existing CSV of the same columns (new: header first)");
  conv->add_option("--stats", cv->stats, "Write the simulation statistics as JSON");
  conv->add_option("--trace", cv->trace, "Write a Perfetto trace");
  conv->add_option("--emit-tasm", cv->emit_tasm, "Write the generated kernel as .tasm");
  conv->add_flag("--force", cv->force, "Overwrite existing output files");
  conv->callback([cv, conv, &exit_code] {
    try {
      refuse_empty_values(*conv);
      bench_conv2d(*cv);
    } catch (const isa::IsaError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    }
  });
  auto keys = std::make_shared<uint64_t>(160000);
  CLI::App* cl = bench->add_subcommand(
      "config-load", "Time to parse, merge and check a config of many keys (the loader must stay near-linear)");
  cl->add_option("--keys", *keys, "Keys in the generated config (each one unknown, so the check rejects it)")
      ->check(CLI::Range(1, 10000000));
  cl->callback([keys] { bench_config_load(*keys); });
  add_collective_bench(*bench, exit_code);
  mm->callback([o, mm, &exit_code] {
    try {
      refuse_empty_values(*mm);
      bench_matmul(*o);
    } catch (const isa::IsaError& e) {
      std::cerr << "error: " << e.what() << "\n";
      exit_code = 1;
    }
  });
}

}  // namespace trnsim::cli
