// Benchmark (not a test): .tasm parsing speed, in instructions per host second, on generated
// programs of the two shapes real ones have: slices (the kernel library, sim_speed_bench's
// streaming kernel) and raw access patterns (what the NKI front-end traces). The baseline measured
// in the same run is a scan that only splits the text into lines and skips blanks, the floor any
// parser pays; the ratio parse / scan is what to compare across machines.
//
//   build/bin/parse_bench [--instructions=N] [--benchmark_filter=...]
//
// Peak resident memory of the process after the runs is printed too (the parsed Program of the
// largest run is what holds it).
#include <benchmark/benchmark.h>

#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <unistd.h>

#include "isa/text_form.h"

namespace {

size_t g_instructions = 1'000'000;

// The streaming kernel of tools/bench/sim_speed_bench.py: per step a DMA load, four accumulating
// matmuls, a PSUM evacuation, an activation and a DMA store (8 instructions), all as slices.
std::string sliced_program(size_t instructions) {
  std::string text =
      "kernel parse_bench\ntarget trn2\nhbm x : bf16[128, 4096] input\nhbm w : bf16[128, 128] input\n"
      "hbm y : bf16[128, 4096] output\nsbuf w_sb : bf16[128, 128]\nsbuf x_sb : bf16[128, 4, 64]\n"
      "sbuf t_sb : fp32[128, 4, 64]\nsbuf y_sb : bf16[128, 4, 64]\npsum acc : fp32[128, 4, 512]\n"
      "dma_copy dst=w_sb, src=w\n";
  text.reserve(instructions * 110);
  char line[256];
  for (size_t i = 0; i * 8 < instructions; ++i) {
    const size_t slot = i % 4, col = (i * 64) % 4096;
    std::snprintf(line, sizeof line, "dma_copy dst=x_sb[0:128, %zu, 0:64], src=x[0:128, %zu:%zu], queue=%zu\n", slot,
                  col, col + 64, slot);
    text += line;
    for (int k = 0; k < 4; ++k) {
      std::snprintf(line, sizeof line,
                    "nc_matmul dst=acc[0:128, %zu, 0:64], stationary=w_sb, moving=x_sb[0:128, %zu, 0:64], "
                    "accumulate=%s\n",
                    slot, slot, k ? "true" : "false");
      text += line;
    }
    std::snprintf(line, sizeof line, "tensor_copy dst=t_sb[0:128, %zu, 0:64], src=acc[0:128, %zu, 0:64]\n", slot, slot);
    text += line;
    std::snprintf(line, sizeof line,
                  "activation dst=y_sb[0:128, %zu, 0:64], op=gelu_apprx_tanh, data=t_sb[0:128, %zu, 0:64]\n", slot,
                  slot);
    text += line;
    std::snprintf(line, sizeof line, "dma_copy dst=y[0:128, %zu:%zu], src=y_sb[0:128, %zu, 0:64], queue=%zu\n", col,
                  col + 64, slot, 4 + slot);
    text += line;
  }
  return text;
}

// The same stream as the NKI front-end writes it: every operand a raw {offset=, ap=[...]} pattern.
std::string raw_program(size_t instructions) {
  std::string text =
      "kernel parse_bench_raw\ntarget trn2\nhbm x : bf16[128, 4096] input\nhbm y : bf16[128, 4096] output\n"
      "sbuf x_sb : bf16[128, 256] @ 0:0\nsbuf t_sb : fp32[128, 256] @ 0:512\n";
  text.reserve(instructions * 120);
  char line[256];
  for (size_t i = 0; i * 4 < instructions; ++i) {
    const size_t slot = i % 4, col = (i * 64) % 4096;
    std::snprintf(line, sizeof line,
                  "dma_copy dst=x_sb{offset=%zu, ap=[[0, 128], [1, 64]]}, src=x{offset=%zu, ap=[[4096, 128], [1, 64]]}\n",
                  slot * 64, col);
    text += line;
    std::snprintf(line, sizeof line,
                  "tensor_scalar dst=t_sb{offset=%zu, ap=[[0, 128], [1, 64]]}, data=x_sb{offset=%zu, ap=[[0, 128], [1, "
                  "64]]}, op0=multiply, operand0=0.5\n",
                  slot * 64, slot * 64);
    text += line;
    std::snprintf(line, sizeof line,
                  "activation dst=x_sb{offset=%zu, ap=[[0, 128], [1, 64]]}, op=exp, data=t_sb{offset=%zu, ap=[[0, 128], "
                  "[1, 64]]}\n",
                  slot * 64, slot * 64);
    text += line;
    std::snprintf(line, sizeof line,
                  "dma_copy dst=y{offset=%zu, ap=[[4096, 128], [1, 64]]}, src=x_sb{offset=%zu, ap=[[0, 128], [1, 64]]}\n",
                  col, slot * 64);
    text += line;
  }
  return text;
}

size_t count_instruction_lines(const std::string& text) {
  size_t lines = 0, start = 0;
  while (start < text.size()) {
    size_t stop = text.find('\n', start);
    if (stop == std::string::npos) stop = text.size();
    if (stop > start && std::strncmp(text.data() + start, "hbm", 3) && std::strncmp(text.data() + start, "sbuf", 4) &&
        std::strncmp(text.data() + start, "psum", 4) && std::strncmp(text.data() + start, "kernel", 6) &&
        std::strncmp(text.data() + start, "target", 6)) {
      ++lines;
    }
    start = stop + 1;
  }
  return lines;
}

// Times parse_once() (which returns a Program) over `instructions` instruction lines. state.range(0): host threads
// the parser may use (0 = the host's default, 1 = the calling thread only), so the one-thread figure is the
// same-run baseline of the threaded one.
template <class ParseOnce>
void time_parse(benchmark::State& state, size_t instructions, ParseOnce&& parse_once) {
  if (state.range(0) > 0) {
    setenv("TRNSIM_HOST_THREADS", std::to_string(state.range(0)).c_str(), 1);
  } else {
    unsetenv("TRNSIM_HOST_THREADS");
  }
  for (auto _ : state) {
    auto program = std::make_unique<trnsim::isa::Program>(parse_once());
    benchmark::DoNotOptimize(program->instructions.data());
    state.PauseTiming();  // freeing the program is not parsing
    program.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(int64_t(state.iterations() * instructions));
  state.counters["instructions"] = double(instructions);
}

void parse(benchmark::State& state, const std::string& text) {
  time_parse(state, count_instruction_lines(text), [&] { return trnsim::isa::parse_tasm(text, "bench.tasm"); });
}

void BM_ScanLines(benchmark::State& state) {
  const std::string text = sliced_program(g_instructions);
  for (auto _ : state) benchmark::DoNotOptimize(count_instruction_lines(text));
  state.SetItemsProcessed(int64_t(state.iterations() * count_instruction_lines(text)));
}

void BM_ParseSliced(benchmark::State& state) { parse(state, sliced_program(g_instructions)); }

// The same program read from a file (parse_tasm_file reads it in pieces and never holds all of its text): with
// --benchmark_filter=ParseSlicedFile the peak resident memory printed at the end is the parser's own.
void BM_ParseSlicedFile(benchmark::State& state) {
  char path[] = "/tmp/parse_bench_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    state.SkipWithError("cannot create a temporary file");
    return;
  }
  size_t instructions = 0;
  {
    const std::string text = sliced_program(g_instructions);
    instructions = count_instruction_lines(text);
    FILE* file = fdopen(fd, "w");
    const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
    std::fclose(file);
    if (!written) {
      std::remove(path);
      state.SkipWithError("cannot write the temporary file");
      return;
    }
  }
  time_parse(state, instructions, [&] { return trnsim::isa::parse_tasm_file(path); });
  std::remove(path);
}

void BM_ParseRawPatterns(benchmark::State& state) { parse(state, raw_program(g_instructions)); }

// Wall time: the parser's threads do not show in the calling thread's CPU time.
BENCHMARK(BM_ScanLines)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime();
BENCHMARK(BM_ParseSliced)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->ArgName("threads")->Arg(1)->Arg(0);
BENCHMARK(BM_ParseSlicedFile)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->ArgName("threads")->Arg(1)->Arg(0);
BENCHMARK(BM_ParseRawPatterns)->Unit(benchmark::kMillisecond)->MinTime(1.0)->UseRealTime()->ArgName("threads")->Arg(1)->Arg(0);

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--instructions=", 15) == 0) {
      g_instructions = std::strtoull(argv[i] + 15, nullptr, 10);
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      --i;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("peak resident memory: %.0f MiB (%zu instructions per program)\n", usage.ru_maxrss / 1024.0,
              g_instructions);
  return 0;
}
