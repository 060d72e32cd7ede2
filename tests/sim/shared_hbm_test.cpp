// Cores sharing one chip's HBM (an LNC launch): the order in which their HBM accesses take effect, and HBM tensors
// each core has to itself (role `private`, NKI's private_hbm). Values are checked against what each core wrote.
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

std::vector<float> input_values() {
  std::vector<float> v(128 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 241) + 1.0f;  // never 0: a lost row reads as zeros
  return v;
}

SimResult run_pair(const isa::Program& a, const isa::Program& b, bool timing_only = false) {
  return testing_support::run_core_pair(a, b, input_values(), timing_only);
}

std::vector<float> output(const SimResult& r, const isa::Program& p) {
  std::vector<float> out(128 * 256);
  const std::vector<uint8_t> bytes = r.states.at(0)->hbm(uint32_t(p.find_allocation("out")));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::string busy_work(int instructions) {
  std::string text;
  for (int i = 0; i < instructions; ++i) text += "tensor_scalar dst=x, data=x, op0=add, operand0=0.0\n";
  return text;
}

// Each core zeroes the whole shared output, then stores its half of the rows after loading and some work. On
// hardware the zeroing DMAs land long before either store; in decoupled threads core 0 could run its store before
// core 1's zeroing, which then erased it (nki-library's cascaded_max utilities).
TEST(SharedHbm, CrossCoreWritesTakeEffectInSimulatedTimeOrder) {
  auto program = [](int core) {
    const std::string mine = core == 0 ? "0:64" : "64:128";
    return isa::parse_tasm(std::string("target trn2\nhbm in : fp32[128, 256] input\nhbm out : fp32[128, 256] output\n"
                                       "sbuf zero : fp32[128, 256]\nsbuf x : fp32[64, 256]\n"
                                       "memset dst=zero, value=0.0\ndma_copy dst=out, src=zero\n"
                                       "dma_copy dst=x, src=in[") + mine + ", :]\n" + busy_work(4) +
                               "dma_copy dst=out[" + mine + ", :], src=x\n",
                           "c" + std::to_string(core) + ".tasm");
  };
  isa::Program core0 = program(0), core1 = program(1);
  SimResult values = run_pair(core0, core1);
  EXPECT_EQ(output(values, core0), input_values());
  // Both modes book HBM in the same order: the same time.
  EXPECT_EQ(values.stats.total_ns, run_pair(core0, core1, /*timing_only=*/true).stats.total_ns);
}

// Each core bounces its half through an HBM scratch tensor: core 0 writes it, works, then reads it back; core 1
// writes it in between. A shared scratch hands core 0 core 1's rows; a private one keeps each core's own.
TEST(SharedHbm, PrivateTensorsAreEachCoresOwn) {
  auto program = [](int core, const std::string& role) {
    const std::string mine = core == 0 ? "0:64" : "64:128";
    const std::string before_write = core == 0 ? "" : busy_work(8), after_write = core == 0 ? busy_work(40) : "";
    return isa::parse_tasm("target trn2\nhbm in : fp32[128, 256] input\nhbm out : fp32[128, 256] output\n"
                           "hbm scratch : fp32[64, 256]" + role + "\nsbuf x : fp32[64, 256]\nsbuf y : fp32[64, 256]\n"
                           "dma_copy dst=x, src=in[" + mine + ", :]\n" + before_write +
                               "dma_copy dst=scratch, src=x\n" + after_write + "dma_copy dst=y, src=scratch\n" +
                               "dma_copy dst=out[" + mine + ", :], src=y\n",
                           "c" + std::to_string(core) + ".tasm");
  };
  const std::vector<float> in = input_values();
  std::vector<float> swapped_first_half(in);  // core 0's rows replaced by core 1's
  std::memcpy(swapped_first_half.data(), in.data() + 64 * 256, 64 * 256 * sizeof(float));
  isa::Program shared0 = program(0, ""), shared1 = program(1, "");
  EXPECT_EQ(output(run_pair(shared0, shared1), shared0), swapped_first_half);
  isa::Program private0 = program(0, " private"), private1 = program(1, " private");
  SimResult r = run_pair(private0, private1);
  EXPECT_EQ(output(r, private0), in);
  // A private tensor is printed back as such.
  EXPECT_NE(isa::print_tasm(private0).find("hbm scratch : fp32[64, 256] private"), std::string::npos);
}

// Control that reads values another core wrote: before they meet, each core stores a trip count taken from the
// input in a shared tensor (core 0 in[0, 0] = 1, core 1 in[0, 1] = 2); after it, each loads the other's into a
// register and runs a while loop that many times, counting its iterations into the output. Each also loops over a
// private tensor that only core 0 sets (3), which core 1 therefore sees as 0.
TEST(SharedHbm, ControlFlowMayReadWhatAnotherCoreWroteBeforeABarrier) {
  const std::string head =
      "target trn2\nhbm in : fp32[128, 256] input\nhbm out : fp32[128, 256] output\nhbm counts : int32[2, 1]\n"
      "hbm mine : int32[1, 1] private\nhbm trips : int32[4, 1] output\nsbuf c : int32[1, 1]\n"
      "sbuf f : fp32[1, 1]\n";
  const std::string count_loop =
      "register_move dst=r1, imm=0\nwhile_begin cond=r0\nregister_add dst=r0, src=r0, imm=-1\n"
      "register_add dst=r1, src=r1, imm=1\nwhile_end\nregister_store dst=c, src=r1\n";
  auto program = [&](int core) {
    const std::string me = std::to_string(core), other = std::to_string(1 - core);
    return isa::parse_tasm(
        head + "dma_copy dst=f, src=in[0:1, " + me + ":" + std::to_string(core + 1) + "]\ntensor_copy dst=c, src=f\n" +
            "dma_copy dst=counts[" + me + ":" + std::to_string(core + 1) + ", :], src=c\n" +
            (core == 0 ? "memset dst=c, value=3\ndma_copy dst=mine, src=c\n" : "") +
            "core_barrier data=counts, cores=[0, 1]\n"
            "dma_copy dst=c, src=counts[" + other + ":" + std::to_string(2 - core) + ", :]\n"
            "register_load dst=r0, src=c\n" + count_loop +
            "dma_copy dst=trips[" + me + ":" + std::to_string(core + 1) + ", :], src=c\n"
            "dma_copy dst=c, src=mine\nregister_load dst=r0, src=c\n" + count_loop +
            "dma_copy dst=trips[" + std::to_string(core + 2) + ":" + std::to_string(core + 3) + ", :], src=c\n",
        "c" + me + ".tasm");
  };
  isa::Program core0 = program(0), core1 = program(1);
  for (bool timing_only : {false, true}) {
    SCOPED_TRACE(timing_only ? "timing only" : "values");
    SimResult r = run_pair(core0, core1, timing_only);
    // Core 0: 2 (core 1's count) + 3 (its private one); core 1: 1 (core 0's count) + 0.
    EXPECT_EQ(r.stats.instructions["while_end"], 2u + 3u + 1u);
    if (timing_only) continue;
    std::vector<int32_t> trips(4);
    const std::vector<uint8_t> bytes = r.states.at(0)->hbm(uint32_t(core0.find_allocation("trips")));
    std::memcpy(trips.data(), bytes.data(), bytes.size());
    EXPECT_EQ(trips, (std::vector<int32_t>{2, 1, 3, 0}));
  }
}

// A core whose values fail while the other waits at a barrier: the error names the failing instruction and nothing
// hangs (the waiting core stops).
TEST(SharedHbm, AnErrorInOneCoresValuesStopsTheOthers) {
  const std::string head = "target trn2\nhbm in : fp32[128, 256] input\nhbm counts : int32[1, 1]\n"
                           "sbuf c : int32[1, 1]\nsbuf f : fp32[1, 1]\nsbuf row : fp32[1, 64]\n";
  // in[0, 5] = 6, times 8192 elements: past the input's 32768.
  isa::Program core0 = isa::parse_tasm(head + "core_barrier data=counts, cores=[0, 1]\n"
                                              "core_barrier data=counts, cores=[0, 1]\n",
                                       "c0.tasm");
  isa::Program core1 = isa::parse_tasm(
      head + "core_barrier data=counts, cores=[0, 1]\n"
             "dma_copy dst=f, src=in[0:1, 5:6]\ntensor_copy dst=c, src=f\nregister_load dst=r1, src=c\n"
             "register_mul dst=r1, src=r1, imm=8192\n"
             "dma_copy dst=row, src=in{offset=0, scalar_offset=r1, ap=[[256, 1], [1, 64]]}, dge_mode=hwdge\n"
             "core_barrier data=counts, cores=[0, 1]\n",
      "c1.tasm");
  EXPECT_THROW(
      {
        try {
          run_pair(core0, core1);
        } catch (const isa::IsaError& e) {
          EXPECT_NE(std::string(e.what()).find("[dynamic-offset-bounds]"), std::string::npos) << e.what();
          throw;
        }
      },
      isa::IsaError);
}

}  // namespace
}  // namespace trnsim::sim
