// Drives LLVMFuzzerTestOneInput without libFuzzer (GCC builds, ctest): every corpus file, then
// seeded random mutations of them until the count or the time limit is reached. Deterministic
// for a given corpus, so a failure reproduces by rerunning. The same driver runs each fuzz target
// (tasm_fuzz_smoke, config_fuzz_smoke, recording_fuzz_smoke), EXTENSION choosing its corpus files.
//   *_fuzz_smoke CORPUS_DIR [MUTATIONS=20000] [SECONDS=20] [EXTENSION=.tasm]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

int run(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// Bytes that matter to the grammar, so that mutations reach past the first token more often.
constexpr char kInteresting[] = "[]{}:,=@#-+ \n\t0123456789_aeinfxp.";

std::string mutate(std::string text, const std::vector<std::string>& corpus_lines, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  int rounds = 1 + static_cast<int>(pick(4));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(6)) {
      case 0:  // flip a byte to anything
        if (!text.empty()) text[pick(text.size())] = static_cast<char>(rng());
        break;
      case 1:  // replace a byte with a grammar character
        if (!text.empty()) text[pick(text.size())] = kInteresting[pick(sizeof kInteresting - 1)];
        break;
      case 2:  // insert grammar characters
        text.insert(pick(text.size() + 1), std::string(1 + pick(3), kInteresting[pick(sizeof kInteresting - 1)]));
        break;
      case 3:  // delete a run
        if (!text.empty()) {
          size_t at = pick(text.size());
          text.erase(at, 1 + pick(std::min<size_t>(16, text.size() - at)));
        }
        break;
      case 4:  // splice in a line from any corpus file
        if (!corpus_lines.empty()) {
          std::vector<std::string> lines = lines_of(text);
          lines.insert(lines.begin() + static_cast<long>(pick(lines.size() + 1)), corpus_lines[pick(corpus_lines.size())]);
          text.clear();
          for (const std::string& line : lines) text += line + "\n";
        }
        break;
      default:  // replace a number with an extreme one
        for (size_t at = pick(text.size() + 1); at < text.size(); ++at) {
          if (text[at] >= '0' && text[at] <= '9') {
            static const char* const kNumbers[] = {"0", "-1", "4294967295", "4294967296", "9223372036854775807",
                                                   "-9223372036854775808", "99999999999999999999", "1e308", "nan"};
            text.replace(at, 1, kNumbers[pick(sizeof kNumbers / sizeof kNumbers[0])]);
            break;
          }
        }
        break;
    }
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [MUTATIONS] [SECONDS] [EXTENSION]\n", argv[0]);
    return 2;
  }
  long mutations = argc > 2 ? std::atol(argv[2]) : 20000;
  double seconds = argc > 3 ? std::atof(argv[3]) : 20;
  const std::string extension = argc > 4 ? argv[4] : ".tasm";
  std::vector<std::string> corpus, corpus_lines;
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    if (entry.path().extension() == extension) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());  // directory order varies; determinism needs a fixed one
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    corpus.push_back(buffer.str());
    for (const std::string& line : lines_of(corpus.back())) corpus_lines.push_back(line);
    run(corpus.back());
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "no %s files in %s\n", extension.c_str(), argv[1]);
    return 2;
  }
  std::mt19937_64 rng(0x7a5d);
  auto start = std::chrono::steady_clock::now();
  long done = 0;
  for (; done < mutations; ++done) {
    if (done % 256 == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) {
      break;
    }
    // Mutating the previous mutant now and then walks further from the seeds.
    std::string input = mutate(corpus[rng() % corpus.size()], corpus_lines, rng);
    if (rng() % 4 == 0) input = mutate(input, corpus_lines, rng);
    run(input);
  }
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("fuzz smoke (%s): %zu seeds, %ld mutations in %.1f s, no failures\n", extension.c_str(), corpus.size(), done, elapsed);
  return 0;
}
