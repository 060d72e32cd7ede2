// The ISA's collectives (issue 14): the ranks of a simulation are its physical cores, each with its own memory.
// Values are checked against sums and concatenations worked out here; the time of a collective is the meeting (the
// latest arrival) plus what the system model gives the same collective alone (sim/system/collectives).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/isa_error.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "sim/simulator.h"
#include "sim/system/collectives.h"

namespace trnsim::sim {
namespace {

using testing::HasSubstr;

constexpr uint32_t kRanks = 4;
constexpr size_t kRows = 128, kCols = 64, kElements = kRows * kCols;

const char* const kProgram = R"(target trn2
hbm x : fp32[128, 64] input
hbm summed : fp32[128, 64] output
hbm biggest : fp32[128, 64] output
hbm gathered : fp32[512, 64] output
hbm scattered : fp32[32, 64] output
hbm exchanged : fp32[128, 64] output
hbm shifted : fp32[128, 64] output
hbm pair_summed : fp32[128, 64] output
all_reduce dst=summed, src=x, op=add, group=[0, 1, 2, 3]
all_reduce dst=biggest, src=x, op=maximum
all_gather dst=gathered, src=x, group=[0, 1, 2, 3]
reduce_scatter dst=scattered, src=x, op=add, group=[0, 1, 2, 3]
all_to_all dst=exchanged, src=x, group=[0, 1, 2, 3]
collective_permute dst=shifted, src=x, pairs=[[0, 1], [1, 2], [2, 3], [3, 0]]
all_reduce dst=pair_summed, src=x, op=add, group=[0, 2, 1, 3], group_size=2
)";

float input(uint32_t rank, size_t i) { return float(rank) * 1000.0f + float(i % 97) - 40.0f; }

std::vector<float> hbm_values(const isa::CoreState& state, const isa::Program& program, const char* name) {
  const std::vector<uint8_t>& bytes = state.hbm(uint32_t(program.find_allocation(name)));
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

SimResult run_ranks(const isa::Program& program, bool timing_only = false) {
  HardwareConfig hw = load_config("trn2").hardware;
  isa::check_program(program, hw);
  SimOptions options;
  options.cores = {0, 1, 2, 3};
  options.timing_only = timing_only;
  return simulate(program, hw, "test", options, [&](uint32_t core, isa::CoreState& state) {
    std::vector<float> v(kElements);
    for (size_t i = 0; i < v.size(); ++i) v[i] = input(core, i);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    state.hbm(uint32_t(program.find_allocation("x"))) = bytes;
  });
}

TEST(CollectiveInstructions, EveryRankGetsWhatTheCollectiveDefines) {
  const isa::Program program = isa::parse_tasm(kProgram, "collectives.tasm");
  const SimResult r = run_ranks(program);
  ASSERT_EQ(r.states.size(), kRanks);
  for (uint32_t rank = 0; rank < kRanks; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const isa::CoreState& state = *r.states[rank];
    const std::vector<float> summed = hbm_values(state, program, "summed"), biggest = hbm_values(state, program, "biggest");
    const std::vector<float> gathered = hbm_values(state, program, "gathered");
    const std::vector<float> scattered = hbm_values(state, program, "scattered");
    const std::vector<float> exchanged = hbm_values(state, program, "exchanged");
    const std::vector<float> shifted = hbm_values(state, program, "shifted");
    const std::vector<float> pair_summed = hbm_values(state, program, "pair_summed");
    for (size_t i = 0; i < kElements; i += 13) {
      float sum = 0;
      for (uint32_t other = 0; other < kRanks; ++other) sum += input(other, i);
      ASSERT_EQ(summed[i], sum) << i;
      ASSERT_EQ(biggest[i], input(kRanks - 1, i)) << i;
      for (uint32_t other = 0; other < kRanks; ++other) ASSERT_EQ(gathered[other * kElements + i], input(other, i));
      // all_to_all: block j of this rank's dst is block `rank` of rank j's src (blocks of E / 4).
      const size_t block = kElements / kRanks, j = i / block;
      ASSERT_EQ(exchanged[i], input(uint32_t(j), rank * block + i % block)) << i;
      ASSERT_EQ(shifted[i], input((rank + kRanks - 1) % kRanks, i)) << i;
      // Replica group [[0, 2], [1, 3]]: each rank sums with the other rank of its list.
      ASSERT_EQ(pair_summed[i], input(rank % 2, i) + input(rank % 2 + 2, i)) << i;
    }
    for (size_t i = 0; i < kElements / kRanks; i += 7) {
      float sum = 0;
      for (uint32_t other = 0; other < kRanks; ++other) sum += input(other, rank * (kElements / kRanks) + i);
      ASSERT_EQ(scattered[i], sum) << i;
    }
  }
  EXPECT_EQ(r.stats.instructions.at("all_reduce"), 3u * kRanks);
}

TEST(CollectiveInstructions, TheTimeIsTheMeetingPlusTheSystemModelsCollective) {
  // One all-reduce, every rank ready at once: the program's time is the trigger's issue plus the collective as the
  // system model times it alone (the single-chip system: four ranks on one chip, through its HBM).
  const char* text = R"(target trn2
hbm x : fp32[128, 64] input
hbm y : fp32[128, 64] output
all_reduce dst=y, src=x, op=add
)";
  const isa::Program program = isa::parse_tasm(text, "one.tasm");
  HardwareConfig hw = load_config("trn2").hardware;
  CollectiveSimulator alone(hw, hw.default_system, hw.chip.physical_cores);
  CollectiveRequest request;
  request.op = CollectiveOp::all_reduce;
  request.bytes = kElements * 4;
  request.ranks = {0, 1, 2, 3};
  const double collective = alone.run(request).latency_ns;
  ASSERT_GT(collective, 0);
  const double issue = hw.core.sync.fixed_overhead_cycles / hw.core.sync.clock_ghz;
  for (bool timing_only : {true, false}) {
    const SimResult r = run_ranks(program, timing_only);
    EXPECT_NEAR(r.stats.total_ns, std::max(issue, collective), 1e-6) << timing_only;
  }
}

TEST(CollectiveInstructions, MismatchesAndMissingRanksAreErrors) {
  HardwareConfig hw = load_config("trn2").hardware;
  auto rules = [&](const std::string& line) {
    try {
      isa::check_program(isa::parse_tasm(std::string("target trn2\nhbm x : fp32[128, 64]\nhbm y : fp32[128, 64]\n"
                                                     "hbm big : fp32[256, 64]\nhbm h : bf16[128, 64]\n") + line + "\n",
                                         "bad.tasm"),
                         hw);
      return std::string("legal");
    } catch (const isa::IsaError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_THAT(rules("all_gather dst=y, src=x, group=[0, 1]"), HasSubstr("[collective-shape]"));
  EXPECT_EQ(rules("all_gather dst=big, src=x, group=[0, 1]"), "legal");
  EXPECT_THAT(rules("all_reduce dst=h, src=x, op=add"), HasSubstr("[collective-dtype]"));
  EXPECT_THAT(rules("all_reduce dst=y, src=x, op=add, group=[0, 0]"), HasSubstr("listed twice"));
  EXPECT_THAT(rules("all_reduce dst=y, src=x, op=add, group=[0, 9]"), HasSubstr("[collective-group]"));
  EXPECT_THAT(rules("all_reduce dst=y, src=x, op=bitwise_and"), HasSubstr("[collective-op]"));
  EXPECT_THAT(rules("collective_permute dst=y, src=x, pairs=[[0, 1], [2, 1]]"), HasSubstr("target of two pairs"));
  EXPECT_THAT(rules("all_reduce dst=y, src=x, op=add, group=[0, 1, 2], group_size=2"), HasSubstr("equal rank-lists"));
  EXPECT_EQ(rules("all_gather dst=big, src=x, group=[0, 1, 2, 3], group_size=2"), "legal");

  // A group with a rank the simulation does not run, and a rank that never reaches the collective.
  const isa::Program outside = isa::parse_tasm(
      "target trn2\nhbm x : fp32[128, 64] input\nhbm y : fp32[128, 64] output\n"
      "all_reduce dst=y, src=x, op=add, group=[0, 1, 2, 3, 4]\n", "outside.tasm");
  try {
    run_ranks(outside, true);
    ADD_FAILURE() << "no error";
  } catch (const isa::IsaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not run"));
  }
}

}  // namespace
}  // namespace trnsim::sim
