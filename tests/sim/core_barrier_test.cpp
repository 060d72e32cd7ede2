// ISA core_barrier (NKI nisa.core_barrier): cores sharing HBM meet. Values: a core reads what the other wrote
// before the barrier. Time: the meeting is at the later arrival, then the barrier's issue and its remote
// semaphore update (cost_model.cpp: the engine's MIN_II + dma.fixed_latency_ns, assumed). Mismatched barriers
// are errors, not hangs.
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

#include "core_pair.h"

namespace trnsim::sim {
namespace {

using testing::HasSubstr;

HardwareConfig trn2() { return load_config("trn2", {}).hardware; }

// Both cores declare the same HBM tensors (HBM is shared); each has its own SBUF tiles.
const char* const kHbm = R"(target trn2
hbm in : fp32[128, 512] input
hbm data : fp32[128, 512]
hbm out : fp32[128, 512] output
sbuf x : fp32[64, 512]
sbuf y : fp32[64, 512]
)";

// Core c doubles its half of `in` into `data`, meets the other core, then copies the other core's half of
// `data` into its half of `out`: out[c half] = 2 * in[other half].
std::string swap_halves(int core, const std::string& extra_work = "", bool barrier = true) {
  const std::string mine = core == 0 ? "0:64" : "64:128", theirs = core == 0 ? "64:128" : "0:64";
  return std::string(kHbm) + "dma_copy dst=x, src=in[" + mine + ", :]\n" + extra_work +
         "tensor_scalar dst=x, data=x, op0=multiply, operand0=2.0\n"
         "dma_copy dst=data[" + mine + ", :], src=x\n" +
         (barrier ? "core_barrier data=data, cores=[0, 1]\n" : "") + "dma_copy dst=y, src=data[" + theirs +
         ", :]\n"
         "dma_copy dst=out[" + mine + ", :], src=y\n";
}

std::vector<float> input_values() {
  std::vector<float> v(128 * 512);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 251) - 100.0f;
  return v;
}

SimResult run_pair(const isa::Program& a, const isa::Program& b, bool timing_only = false) {
  return testing_support::run_core_pair(a, b, input_values(), timing_only);
}

TEST(CoreBarrier, EachCoreReadsWhatTheOtherWroteBeforeTheBarrier) {
  // Core 1 has much more to do before it writes: without the barrier core 0 would read stale zeros.
  std::string slow;
  for (int i = 0; i < 40; ++i) slow += "tensor_scalar dst=x, data=x, op0=add, operand0=0.0\n";
  isa::Program core0 = isa::parse_tasm(swap_halves(0), "c0.tasm");
  isa::Program core1 = isa::parse_tasm(swap_halves(1, slow), "c1.tasm");
  SimResult r = run_pair(core0, core1);
  std::vector<float> in = input_values(), out(128 * 512);
  const std::vector<uint8_t>& bytes = r.states.at(0)->hbm(uint32_t(core0.find_allocation("out")));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  for (size_t p = 0; p < 128; ++p) {
    size_t other = p < 64 ? p + 64 : p - 64;
    for (size_t j = 0; j < 512; j += 97) ASSERT_EQ(out[p * 512 + j], 2.0f * in[other * 512 + j]) << p << " " << j;
  }
  EXPECT_EQ(r.stats.instructions["core_barrier"], 2u);
}

TEST(CoreBarrier, TheMeetingIsAtTheLaterArrivalPlusTheBarrierCost) {
  // Core 1 arrives at the barrier when its write to data completes; core 0 has nothing before its barrier, so it
  // waits for core 1 and its post-barrier copies (no other traffic then) take what they take alone.
  const std::string decl = std::string(kHbm);
  std::string core1_before = decl + "dma_copy dst=x, src=in[64:128, :]\n"
                                    "tensor_scalar dst=x, data=x, op0=multiply, operand0=2.0\n"
                                    "dma_copy dst=data[64:128, :], src=x\n";
  std::string core0_after = decl + "dma_copy dst=y, src=data[64:128, :]\ndma_copy dst=out[0:64, :], src=y\n";
  HardwareConfig hw = trn2();
  auto alone = [&](const std::string& text) {
    isa::Program p = isa::parse_tasm(text, "alone.tasm");
    SimOptions options;
    options.timing_only = true;
    return simulate(p, hw, "test", options).stats.total_ns;
  };
  const double arrival1 = alone(core1_before), after0 = alone(core0_after);
  // sync_cost on GpSimd (its MIN_II) + the remote semaphore update (dma.fixed_latency_ns).
  const double barrier_ns = hw.core.gpsimd.min_initiation_interval_cycles / hw.core.gpsimd.clock_ghz +
                            hw.core.dma.fixed_latency_ns;
  isa::Program core0 = isa::parse_tasm(decl + "core_barrier data=data, cores=[0, 1]\n" +
                                           "dma_copy dst=y, src=data[64:128, :]\ndma_copy dst=out[0:64, :], src=y\n",
                                       "c0.tasm");
  isa::Program core1 = isa::parse_tasm(core1_before + "core_barrier data=data, cores=[0, 1]\n", "c1.tasm");
  for (bool timing_only : {true, false}) {
    SCOPED_TRACE(timing_only ? "timing only" : "values");
    SimResult r = run_pair(core0, core1, timing_only);
    EXPECT_GT(arrival1, 1000.0);
    EXPECT_NEAR(r.stats.total_ns, arrival1 + barrier_ns + after0, 1e-6);
  }
}

TEST(CoreBarrier, MismatchedBarriersAreErrorsNotHangs) {
  isa::Program two = isa::parse_tasm(std::string(kHbm) + "core_barrier data=data, cores=[0, 1]\n"
                                                           "core_barrier data=data, cores=[0, 1]\n",
                                     "two.tasm");
  isa::Program one = isa::parse_tasm(std::string(kHbm) + "core_barrier data=data, cores=[0, 1]\n", "one.tasm");
  EXPECT_THAT([&] { run_pair(two, one, true); },
              testing::ThrowsMessage<isa::IsaError>(
                  HasSubstr("core_barrier #2 of core 0 waits for core 1, which reached only 1 core_barrier(s) (the "
                            "program would hang) [core-barrier]")));
  // One core alone cannot meet another.
  HardwareConfig hw = trn2();
  SimOptions options;
  options.timing_only = true;
  EXPECT_THAT([&] { simulate(one, hw, "test", options); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("meets core 1, which this simulation does not run")));
  // Legality: the shared tensor is in HBM; the cores exist; trn1 has no core_barrier.
  auto legality = [&](const std::string& text, const char* config) {
    try {
      isa::check_program(isa::parse_tasm(text, "b.tasm"), load_config(config, {}).hardware);
    } catch (const isa::IsaError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // An on-chip tensor is accepted, as by the NKI compiler (nki-library meets on an SBUF counter).
  EXPECT_EQ(legality(std::string(kHbm) + "core_barrier data=x, cores=[0, 1]\n", "trn2"), "");
  EXPECT_THAT(legality(std::string(kHbm) + "core_barrier data=data, cores=[0, 9]\n", "trn2"),
              HasSubstr("core 9 does not exist (the chip has 8) [core-barrier]"));
  std::string trn1 = std::string(kHbm);
  trn1.replace(trn1.find("trn2"), 4, "trn1");
  EXPECT_THAT([&] { isa::parse_tasm(trn1 + "core_barrier data=data, cores=[0, 1]\n", "b.tasm"); },
              testing::ThrowsMessage<isa::IsaError>(HasSubstr("core_barrier")));
}

}  // namespace
}  // namespace trnsim::sim
