// Cores sharing one chip's HBM (an LNC launch): the order in which their HBM accesses take effect, and HBM tensors
// each core has to itself (role `private`, NKI's private_hbm). Values are checked against what each core wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "isa/legality.h"
#include "isa/text_form.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

HardwareConfig trn2() { return load_config("trn2", {}).hardware; }

std::vector<float> input_values() {
  std::vector<float> v(128 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 241) + 1.0f;  // never 0: a lost row reads as zeros
  return v;
}

SimResult run_pair(const isa::Program& a, const isa::Program& b, bool timing_only = false) {
  HardwareConfig hw = trn2();
  isa::check_program(a, hw);
  isa::check_program(b, hw);
  SimOptions options;
  options.cores = {0, 1};
  options.timing_only = timing_only;
  std::vector<const isa::Program*> programs{&a, &b};
  return simulate(programs, hw, "test", options, [&](uint32_t, isa::CoreState& state) {
    std::vector<float> v = input_values();
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    state.hbm(uint32_t(a.find_allocation("in"))) = bytes;
  }, /*shared_hbm=*/true);
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

}  // namespace
}  // namespace trnsim::sim
