// Launch records (record/): the recording format round trip, the .tasm text form's fidelity for
// kernel-library programs (structure and simulated time), replay reproducing recorded times bit for
// bit, and the errors a user meets (existing paths, damaged files, illegal programs on a target).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>

#include <unistd.h>

#include "config/config_loader.h"
#include "isa/host_workers.h"
#include "isa/memory_image.h"
#include "isa/numerics/float_format.h"
#include "isa/text_form.h"
#include "kernels/attention.h"
#include "kernels/attention_backward.h"
#include "kernels/conv.h"
#include "kernels/data_movement.h"
#include "kernels/matmul.h"
#include "kernels/normalization.h"
#include "kernels/optimizer.h"
#include "record/gzip.h"
#include "record/launch_timing.h"
#include "record/program_store.h"
#include "record/recording_reader.h"
#include "record/recording_writer.h"
#include "record/replay.h"
#include "record_test_support.h"

namespace trnsim::record {
namespace {

namespace fs = std::filesystem;
using MakeProgram = std::function<isa::Program(const HardwareConfig&, uint32_t core, uint32_t cores)>;

using testing_support::trn2;

// A fresh directory per test, removed afterwards.
struct TempDir : testing_support::TempDir {
  TempDir() : testing_support::TempDir("trnsim-record-") {}
};

std::vector<std::shared_ptr<const isa::Program>> build(const MakeProgram& make, const HardwareConfig& hw, uint32_t cores) {
  std::vector<std::shared_ptr<const isa::Program>> parts;
  for (uint32_t core = 0; core < cores; ++core) parts.push_back(std::make_shared<const isa::Program>(make(hw, core, cores)));
  return parts;
}

using testing_support::raw;

// Everything of a program the timing model or the interpreter reads (source lines excepted).
void expect_same_program(const isa::Program& a, const isa::Program& b, const std::string& what) {
  ASSERT_EQ(a.name, b.name) << what;
  ASSERT_EQ(a.generation, b.generation) << what;
  ASSERT_EQ(a.allocations.size(), b.allocations.size()) << what;
  for (size_t i = 0; i < a.allocations.size(); ++i) {
    const isa::Allocation &x = a.allocations[i], &y = b.allocations[i];
    EXPECT_TRUE(x.name == y.name && x.space == y.space && x.dtype == y.dtype && x.shape == y.shape && x.role == y.role &&
                x.base_partition == y.base_partition && x.base_byte == y.base_byte)
        << what << ": allocation " << x.name;
  }
  ASSERT_EQ(a.instructions.size(), b.instructions.size()) << what;
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    const isa::Instruction &x = a.instructions[i], &y = b.instructions[i];
    bool same = x.opcode == y.opcode && x.engine == y.engine && x.present_mask == y.present_mask &&
                x.tensors == y.tensors && x.lists == y.lists && x.scalars.size() == y.scalars.size();
    for (size_t s = 0; same && s < x.scalars.size(); ++s) {
      same = std::memcmp(&x.scalars[s], &y.scalars[s], sizeof(double)) == 0 ||
             (std::isnan(x.scalars[s]) && std::isnan(y.scalars[s]));
    }
    ASSERT_TRUE(same) << what << ": instruction " << i << " " << x.spec().name << " differs after the text round trip";
  }
}

void expect_same_stats(const sim::SimStats& a, const sim::SimStats& b, const std::string& what) {
  EXPECT_EQ(a.total_ns, b.total_ns) << what;  // exact: bit for bit
  EXPECT_EQ(a.flops, b.flops) << what;
  ASSERT_EQ(a.engines.size(), b.engines.size()) << what;
  for (const auto& [name, engine] : a.engines) EXPECT_EQ(engine.busy_ns, b.engines.at(name).busy_ns) << what << " " << name;
}

// Kernel-library programs of several families, split over two cores as the device runs them.
std::vector<std::pair<std::string, MakeProgram>> library_kernels() {
  using namespace kernels;
  MatmulSpec mm;
  mm.m = 512, mm.k = 512, mm.n = 1024, mm.a_transposed = true, mm.output_dtype = DType::bf16;
  MatmulSpec mm_bias = mm;
  mm_bias.a_transposed = false, mm_bias.bias = true, mm_bias.activation = isa::ActivationFunc::gelu;
  AttentionSpec att;
  att.batch = 1, att.heads = 2, att.seq_q = att.seq_k = 256, att.head_dim = 64, att.causal = true, att.write_lse = true;
  NormSpec ln;
  ln.kind = NormKind::layernorm, ln.shape = {512, 512}, ln.input_dtype = ln.output_dtype = DType::bf16;
  ln.param_dtype = DType::bf16, ln.save_stats = true;
  SoftmaxSpec sm;
  sm.shape = {256, 4096}, sm.log = true;
  AdamWSpec adamw;
  adamw.elements = 1 << 18, adamw.param_dtype = adamw.grad_dtype = adamw.state_dtype = DType::bf16;
  Conv2dSpec conv;
  conv.n = 2, conv.c = 32, conv.h = conv.w = 16, conv.o = 64, conv.kh = conv.kw = 3, conv.pad_h = conv.pad_w = 1;
  PermuteSpec permute;
  permute.shape = {8, 64, 96}, permute.perm = {2, 0, 1}, permute.dtype = DType::bf16;
  return {
      {"matmul", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return matmul_program(mm, hw, c, n); }},
      {"matmul_bias_gelu", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return matmul_program(mm_bias, hw, c, n); }},
      {"attention_fwd", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return flash_attention_forward_program(att, hw, c, n); }},
      {"attention_bwd", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return flash_attention_backward_program(att, hw, c, n); }},
      {"layernorm", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return norm_program(ln, hw, c, n); }},
      {"log_softmax", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return softmax_program(sm, hw, c, n); }},
      {"adamw", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return adamw_program(adamw, hw, c, n); }},
      {"conv2d", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return conv2d_program(conv, hw, c, n); }},
      {"permute", [=](const HardwareConfig& hw, uint32_t c, uint32_t n) { return permute_program(permute, hw, c, n); }},
  };
}

TEST(TextFormFidelity, KernelLibraryProgramsRoundTripToTheSameStructureAndTime) {
  const LoadedConfig& config = trn2();
  for (const auto& [name, make] : library_kernels()) {
    SCOPED_TRACE(name);
    const auto parts = build(make, config.hardware, 2);
    std::vector<std::shared_ptr<const isa::Program>> parsed;
    for (size_t core = 0; core < parts.size(); ++core) {
      const std::string text = isa::print_tasm(*parts[core]);
      parsed.push_back(std::make_shared<const isa::Program>(isa::parse_tasm(text, name)));
      EXPECT_EQ(isa::print_tasm(*parsed.back()), text);
      expect_same_program(*parts[core], *parsed.back(), name + " core " + std::to_string(core));
    }
    const sim::SimResult original = simulate_kernel(raw(parts), config.hardware, config.hash, true, false, nullptr);
    const sim::SimResult reparsed = simulate_kernel(raw(parsed), config.hardware, config.hash, true, false, nullptr);
    expect_same_stats(original.stats, reparsed.stats, name);
  }
}

// The device's values path for a launch timed before (kernel_executor.cpp): the interpreter alone, core after
// core, must leave every HBM tensor bit for bit as the timing model's run does, with recycled memories.
TEST(InterpretKernel, LibraryKernelsGiveTheTimingModelsValuesBitForBit) {
  const LoadedConfig& config = trn2();
  isa::MemoryImagePool pool;
  isa::HostWorkers workers(2);
  const HostResources host{&pool, &workers};
  size_t compared = 0;
  for (const auto& [name, make] : library_kernels()) {
    SCOPED_TRACE(name);
    const auto parts = build(make, config.hardware, 2);
    ASSERT_TRUE(values_without_timing_model(raw(parts)));
    const isa::Program& program = *parts.front();
    auto prepare = [&](uint32_t, isa::CoreState& state) {
      std::mt19937 rng(7);
      std::uniform_real_distribution<float> value(-2.0f, 2.0f);
      for (uint32_t id = 0; id < program.allocations.size(); ++id) {
        const isa::Allocation& a = program.allocations[id];
        if (a.space != isa::MemorySpace::hbm) continue;
        std::vector<float> values(a.total_elements());
        for (float& v : values) v = value(rng);
        numerics::convert_from_fp32(a.dtype, values.data(), state.hbm(id).data(), values.size(),
                                    numerics::RoundingMode::nearest_even);
      }
    };
    // Twice each, so the second runs start from images the first ones wrote and the pool cleared.
    for (int round = 0; round < 2; ++round) {
      const sim::SimResult simulated = simulate_kernel(raw(parts), config.hardware, config.hash, false, false, prepare, host);
      const auto interpreted = interpret_kernel(raw(parts), config.hardware, prepare, host);
      ASSERT_EQ(interpreted.size(), parts.size());
      for (uint32_t id = 0; id < program.allocations.size(); ++id) {
        if (program.allocations[id].space != isa::MemorySpace::hbm) continue;
        EXPECT_EQ(interpreted.front()->hbm(id), simulated.states.front()->hbm(id)) << program.allocations[id].name;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 18u);
}

TEST(InterpretKernel, SynchronisingOrValueDependentProgramsNeedTheTimingModel) {
  auto program = [](const std::string& body) {
    return isa::parse_tasm("kernel k\ntarget trn2\nhbm n : int32[1, 1] input\nhbm x : fp32[2, 4] output\n"
                           "sbuf cnt : int32[1, 1]\nsbuf a : fp32[2, 4]\n" + body, "k.tasm");
  };
  // Core-local synchronisation and loops with fixed trip counts: the interpreter alone gives the values.
  const isa::Program local = program("memset dst=a, value=1\nsem_signal sem=0\nbarrier\n"
                                     "loop_begin count=3\ndma_copy dst=x, src=a\nloop_end\n");
  EXPECT_TRUE(values_without_timing_model({&local}));
  // Another core's progress (core_barrier, a collective) or a trip count read from a tensor: the timing model.
  const isa::Program barrier = program("core_barrier data=x\n");
  const isa::Program collective = program("all_reduce dst=a, src=a, op=add\n");
  const isa::Program value_loop = program("dma_copy dst=cnt, src=n\nregister_load dst=r0, src=cnt\n"
                                          "while_begin cond=r0\nregister_add dst=r0, src=r0, imm=-1\nwhile_end\n");
  EXPECT_FALSE(values_without_timing_model({&barrier}));
  EXPECT_FALSE(values_without_timing_model({&collective}));
  EXPECT_FALSE(values_without_timing_model({&value_loop}));
  EXPECT_FALSE(values_without_timing_model({&local, &barrier}));
}

TEST(Gzip, RoundTripsAndRejectsDamage) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "nc_matmul dst=acc[0:128, 0:512], moving=t" + std::to_string(i % 7) + "\n";
  const std::string packed = gzip_compress(text);
  EXPECT_LT(packed.size(), text.size() / 5);
  EXPECT_EQ(gzip_compress(text), packed);  // no time stamp: the same bytes every time
  EXPECT_EQ(gzip_decompress(packed, "x.gz", text.size()), text);
  EXPECT_THROW(gzip_decompress(packed.substr(0, packed.size() / 2), "x.gz", text.size()), std::runtime_error);
  EXPECT_THROW(gzip_decompress("not gzip at all", "x.gz", text.size()), std::runtime_error);
}

// The message of the std::runtime_error `f` throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

// Issue 42 R1: a gzip bomb inflates no further than the bound (the manifest's declared size).
TEST(Gzip, InflatingStopsAtTheBound) {
  const std::string zeros(size_t{64} << 20, '\0');
  const std::string bomb = gzip_compress(zeros);
  EXPECT_LT(bomb.size(), size_t{1} << 20);
  EXPECT_EQ(gzip_decompress(bomb, "b.gz", zeros.size()).size(), zeros.size());  // exactly the bound: read
  EXPECT_NE(error_of([&] { gzip_decompress(bomb, "b.gz", zeros.size() - 1); })
                .find("b.gz: inflates to more than the 67108863 bytes its program may have"),
            std::string::npos);
}

// A small recording: two copies in, a kernel (values mode, as the device runs it), a fallback.
struct Recorded {
  std::vector<Launch> launches;
  std::shared_ptr<const isa::Program> program;
};

Recorded record_small(const std::string& dir, bool compress = true) {
  const LoadedConfig& config = trn2();
  const auto [name, make] = library_kernels().front();
  const auto parts = build(make, config.hardware, 2);
  RecordingHeader header;
  header.config = {config.hardware.name, "trn2", config.source_file, {}, config.hash};
  header.trnsim_version = "test";
  header.compressed_programs = compress;
  RecordingWriter writer(dir, header, false);
  Recorded out;
  double clock = 0;
  auto add = [&](Launch launch) {
    launch.start_ns = clock;
    clock += launch.ns;
    writer.add(launch);
    launch.index = out.launches.size();
    out.launches.push_back(launch);
  };
  Launch copy;
  copy.op = "copy host->device";
  copy.kind = "copy";
  copy.shapes = {{512, 512}};
  copy.dtype = "BFloat16";
  copy.transfer_bytes = {512 * 512 * 2};
  copy.host_link_bytes = 512 * 512 * 2;
  copy.ns = transfers_ns(config.hardware, copy.transfer_bytes);
  copy.bottleneck = "host_link";
  add(copy);
  Launch kernel;
  kernel.op = "mm";
  kernel.shapes = {{512, 512}, {512, 1024}};
  kernel.dtype = "BFloat16";
  kernel.key = "mm|test";
  kernel.programs = parts;
  kernel.bindings = {{"a", 512 * 512, "bf16", "in"}, {"b", 512 * 1024, "bf16", "in"}, {"c", 512 * 1024, "bf16", "out"}};
  // With values, as the device records it (zero inputs): the replay runs timing only.
  set_kernel_result(kernel, simulate_kernel(raw(parts), config.hardware, config.hash, false, false, nullptr).stats);
  add(kernel);
  add(kernel);  // the program cache's case: one program, two launches
  Launch fallback;
  fallback.op = "aten::erfinv";
  fallback.kind = "fallback";
  fallback.shapes = {{512, 1024}};
  fallback.dtype = "Float";
  fallback.transfer_bytes = {2 << 20, 2 << 20};
  fallback.host_link_bytes = 4 << 20;
  fallback.ns = transfers_ns(config.hardware, fallback.transfer_bytes);
  fallback.bottleneck = "host_link";
  add(fallback);
  writer.close(true, "");
  out.program = parts.front();
  return out;
}

TEST(RecordingFormat, RoundTripsEveryField) {
  TempDir tmp;
  const std::string dir = tmp / "small.trnrec";
  const Recorded written = record_small(dir);
  EXPECT_TRUE(fs::is_regular_file(dir + "/manifest.jsonl"));
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir + "/programs")) files += entry.path().extension() == ".gz";
  EXPECT_EQ(files, 2u);  // two per-core programs, stored once though launched twice

  const Recording read = read_recording(dir);
  EXPECT_TRUE(read.complete());
  EXPECT_EQ(read.header.config.name, "trn2");
  EXPECT_EQ(read.header.config.hash, trn2().hash);
  EXPECT_EQ(read.header.trnsim_version, "test");
  ASSERT_EQ(read.launches.size(), written.launches.size());
  EXPECT_EQ(read.footer->launches, written.launches.size());
  for (size_t i = 0; i < read.launches.size(); ++i) {
    const Launch &a = written.launches[i], &b = read.launches[i];
    SCOPED_TRACE(i);
    EXPECT_EQ(b.index, i);
    EXPECT_EQ(a.op, b.op);
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.shapes, b.shapes);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.transfer_bytes, b.transfer_bytes);
    EXPECT_EQ(a.start_ns, b.start_ns);
    EXPECT_EQ(a.ns, b.ns);  // doubles read back exactly
    EXPECT_EQ(a.busy_ns, b.busy_ns);
    EXPECT_EQ(a.flops, b.flops);
    EXPECT_EQ(a.mfu, b.mfu);
    EXPECT_EQ(a.bottleneck, b.bottleneck);
    EXPECT_EQ(a.host_link_bytes, b.host_link_bytes);
    ASSERT_EQ(a.bindings.size(), b.bindings.size());
    for (size_t k = 0; k < a.bindings.size(); ++k) {
      EXPECT_EQ(a.bindings[k].allocation, b.bindings[k].allocation);
      EXPECT_EQ(a.bindings[k].elements, b.bindings[k].elements);
      EXPECT_EQ(a.bindings[k].dtype, b.bindings[k].dtype);
      EXPECT_EQ(a.bindings[k].direction, b.bindings[k].direction);
    }
    ASSERT_EQ(a.programs.size(), b.programs.size());
    for (size_t core = 0; core < a.programs.size(); ++core) expect_same_program(*a.programs[core], *b.programs[core], "program");
  }
  EXPECT_EQ(read.launches[1].programs[0], read.launches[2].programs[0]);  // one program object for both launches
}

TEST(RecordingFormat, PlainTasmProgramsReadTheSame) {
  TempDir tmp;
  record_small(tmp / "plain.trnrec", /*compress=*/false);
  const Recording read = read_recording(tmp / "plain.trnrec");
  EXPECT_FALSE(read.header.compressed_programs);
  EXPECT_EQ(read.programs.size(), 2u);
  EXPECT_TRUE(read.complete());
}

TEST(Replay, OwnConfigReproducesEveryLaunchBitForBit) {
  TempDir tmp;
  const Recorded written = record_small(tmp / "r.trnrec");
  const Recording read = read_recording(tmp / "r.trnrec");
  const ReplayResult result = replay(read, trn2().hardware, trn2().hash, {});
  ASSERT_EQ(result.launches.size(), written.launches.size());
  for (size_t i = 0; i < result.launches.size(); ++i) {
    EXPECT_EQ(result.launches[i].ns, written.launches[i].ns) << i;
    EXPECT_EQ(result.launches[i].busy_ns, written.launches[i].busy_ns) << i;
    EXPECT_EQ(result.launches[i].start_ns, written.launches[i].start_ns) << i;
  }
  EXPECT_EQ(result.total_ns, result.recorded_total_ns);
  EXPECT_EQ(result.simulations, 1u);  // the second mm launch reuses the first's result
  EXPECT_EQ(result.reused, 1u);
  EXPECT_TRUE(result.notes.empty());
}

TEST(Replay, AnotherConfigRetimesKernelsAndTransfers) {
  TempDir tmp;
  const Recorded written = record_small(tmp / "r.trnrec");
  const Recording read = read_recording(tmp / "r.trnrec");
  const LoadedConfig slow_link = load_config("trn2", {"host_link.bandwidth_gbps=8", "core.dma.fixed_latency_ns=5000"});
  const ReplayResult result = replay(read, slow_link.hardware, slow_link.hash, {});
  EXPECT_GT(result.launches[0].ns, written.launches[0].ns);  // copy over a slower link
  EXPECT_GT(result.launches[1].ns, written.launches[1].ns);  // kernel with slower DMAs
  EXPECT_EQ(result.launches[3].ns, transfers_ns(slow_link.hardware, {2 << 20, 2 << 20}));
  EXPECT_FALSE(result.notes.empty());  // the programs were not rebuilt for the target
}

TEST(Replay, IllegalOnTheTargetNamesTheLaunchAndTheRule) {
  TempDir tmp;
  record_small(tmp / "r.trnrec");
  const Recording read = read_recording(tmp / "r.trnrec");
  const LoadedConfig small_sbuf = load_config("trn2", {"core.sbuf.bytes_per_partition=8192"});
  try {
    replay(read, small_sbuf.hardware, small_sbuf.hash, {});
    FAIL() << "replay on an 8 KiB SBUF passed";
  } catch (const ReplayError& e) {
    EXPECT_NE(std::string(e.what()).find("launch 1 (mm [512, 512], [512, 1024])"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[memory-bounds]"), std::string::npos) << e.what();
  }
  const LoadedConfig one_core = load_config(
      "trn2", {"chip.physical_cores=1", "chip.default_logical_core_size=1", "chip.supported_logical_core_sizes=[1]",
               "hbm.stack_by_core=[0]", "hbm.stacks=1"});
  try {
    replay(read, one_core.hardware, one_core.hash, {});
    FAIL() << "replay of two per-core programs on one core passed";
  } catch (const ReplayError& e) {
    EXPECT_NE(std::string(e.what()).find("2 per-core programs"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[physical-cores]"), std::string::npos) << e.what();
  }
}

TEST(Replay, OnItsOwnConfigABrokenRuleIsNotedNotFatal) {
  // The device does not check legality, so a recording may hold a program that breaks a rule of
  // its own config: the replay reproduces it as it ran and says so.
  TempDir tmp;
  const std::string dir = tmp / "r.trnrec";
  record_small(dir);
  const LoadedConfig small_sbuf = load_config("trn2", {"core.sbuf.bytes_per_partition=8192"});
  Recording read = read_recording(dir);
  read.header.config.hash = small_sbuf.hash;  // as if recorded on it
  const ReplayResult result = replay(read, small_sbuf.hardware, small_sbuf.hash, {});
  ASSERT_EQ(result.launches.size(), 4u);
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes.front().find("breaks rules of its own config"), std::string::npos) << result.notes.front();
  EXPECT_NE(result.notes.front().find("[memory-bounds]"), std::string::npos) << result.notes.front();
}

TEST(RecordingWriter, RefusesExistingPathsUnlessAskedAndNeverAForeignDirectory) {
  TempDir tmp;
  const std::string dir = tmp / "r.trnrec";
  record_small(dir);
  RecordingHeader header;
  EXPECT_THROW(RecordingWriter(dir, header, false), RecordingError);
  { RecordingWriter again(dir, header, true); again.close(true, ""); }  // an earlier recording is replaced
  EXPECT_EQ(read_recording(dir).launches.size(), 0u);

  const std::string foreign = tmp / "mine";
  fs::create_directories(foreign);
  std::ofstream(foreign + "/notes.txt") << "keep me";
  try {
    RecordingWriter writer(foreign, header, true);
    FAIL() << "replaced a directory that is not a recording";
  } catch (const RecordingError& e) {
    EXPECT_NE(std::string(e.what()).find("not a trnsim recording"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(foreign + "/notes.txt"));
}

TEST(RecordingReader, IncompleteAndDamagedRecordingsAreClear) {
  TempDir tmp;
  const std::string dir = tmp / "r.trnrec";
  {
    RecordingHeader header;
    header.config = {"trn2", "trn2", "", {}, trn2().hash};
    RecordingWriter writer(dir, header, false);
    writer.close(false, "RuntimeError: boom");
  }
  Recording failed = read_recording(dir);
  EXPECT_FALSE(failed.complete());
  EXPECT_NE(failed.incomplete_reason().find("boom"), std::string::npos);

  // No footer: the process stopped while recording.
  const std::string cut = tmp / "cut.trnrec";
  record_small(cut);
  std::ifstream in(cut + "/manifest.jsonl");
  std::stringstream all;
  all << in.rdbuf();
  std::string text = all.str();
  text.erase(text.rfind("{\"end\""));
  std::ofstream(cut + "/manifest.jsonl", std::ios::trunc) << text;
  Recording stopped = read_recording(cut);
  EXPECT_FALSE(stopped.footer.has_value());
  EXPECT_EQ(stopped.launches.size(), 4u);

  // A program edited after recording no longer matches its hash.
  const std::string program = (*fs::directory_iterator(cut + "/programs")).path().string();
  std::ofstream(program, std::ios::binary | std::ios::trunc) << gzip_compress("target trn2\n");
  try {
    read_recording(cut);
    FAIL() << "read a changed program";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("changed after recording"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_recording(tmp / "missing.trnrec"), std::runtime_error);
  std::ofstream(tmp / "bad.jsonl") << "x";
  fs::create_directories(tmp / "bad.trnrec");
  std::ofstream(tmp / "bad.trnrec/manifest.jsonl") << "{\"format\": \"trnsim-recording\", \"version\": 99}\n";
  try {
    read_recording(tmp / "bad.trnrec");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("version 99"), std::string::npos) << e.what();
  }
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream all;
  all << in.rdbuf();
  return all.str();
}

// Issue 42 R1: the manifest declares each program's text size; a program file is read and inflated no further.
TEST(RecordingReader, ProgramsAreReadNoFurtherThanTheManifestDeclares) {
  TempDir tmp;
  const std::string dir = tmp / "r.trnrec";
  const Recorded written = record_small(dir);
  const std::string manifest = read_text(dir + "/manifest.jsonl");
  const std::string size = std::to_string(isa::print_tasm(*written.program).size());
  EXPECT_NE(manifest.find("\"program_bytes\":[" + size + ","), std::string::npos) << manifest;
  const Recording before = read_recording(dir);
  ASSERT_EQ(before.launches[1].program_bytes.size(), 2u);
  const std::string hash = before.launches[1].program_hashes[0];

  // A recording made before sizes were declared still reads (bounded by kMaxUndeclaredProgramBytes).
  const std::string old_dir = tmp / "old.trnrec";
  record_small(old_dir);
  std::string undeclared = read_text(old_dir + "/manifest.jsonl");
  for (size_t at; (at = undeclared.find(",\"program_bytes\":[")) != std::string::npos;) {
    undeclared.erase(at, undeclared.find(']', at) + 1 - at);
  }
  ASSERT_EQ(undeclared.find("program_bytes"), std::string::npos);
  std::ofstream(old_dir + "/manifest.jsonl", std::ios::trunc) << undeclared;
  EXPECT_EQ(read_recording(old_dir).launches.size(), 4u);

  // A bomb in place of the first core's program (4 KiB of gzip: within the file bound): stopped at the declared
  // size, long before its 4 MiB.
  const std::string program = dir + "/programs/" + hash + ".tasm.gz";
  std::ofstream(program, std::ios::binary | std::ios::trunc) << gzip_compress(std::string(size_t{4} << 20, 'x'));
  EXPECT_NE(error_of([&] { read_recording(dir); })
                .find(program + ": inflates to more than the " + size + " bytes its program may have"),
            std::string::npos);
  // A plain program file larger than declared is refused before it is read.
  fs::remove(program);
  const std::string plain = dir + "/programs/" + hash + ".tasm";
  std::ofstream(plain, std::ios::binary | std::ios::trunc) << std::string(size_t{1} << 20, '#');
  EXPECT_NE(error_of([&] { read_recording(dir); })
                .find(plain + ": 1048576 bytes, more than the " + size + " its program may take"),
            std::string::npos);
  // Declared sizes that disagree with the programs or each other are errors.
  fs::remove(plain);
  record_small(tmp / "lie.trnrec");
  std::string lie = read_text(tmp / "lie.trnrec/manifest.jsonl");
  lie.replace(lie.find("\"program_bytes\":[") + 17, size.size(), std::to_string(std::stoull(size) + 1));
  std::ofstream(tmp / "lie.trnrec/manifest.jsonl", std::ios::trunc) << lie;
  EXPECT_NE(error_of([&] { read_recording(tmp / "lie.trnrec"); }).find("but the manifest declares"), std::string::npos);
}

}  // namespace
}  // namespace trnsim::record
