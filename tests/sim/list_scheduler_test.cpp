// The compiler-like list scheduler (sim/schedule/list_scheduler.h): every dependency keeps its order, fences and
// keep-order ranges hold, and on a program whose engines wait in program order the reordered program is faster by
// exactly the time the waiting instruction no longer spends behind the blocked one (hand-computed from the cost
// model's formulas).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>

#include "config/config_loader.h"
#include "isa/interpreter.h"
#include "isa/text_form.h"
#include "sim/core/instruction_accesses.h"
#include "sim/cost_model.h"
#include "sim/schedule/list_scheduler.h"
#include "sim/simulator.h"

namespace trnsim::sim {
namespace {

HardwareConfig config(const char* name) { return load_config(name).hardware; }

double simulated_ns(const isa::Program& program, const HardwareConfig& hw) {
  SimOptions options;
  options.timing_only = true;
  return simulate(program, hw, "test", options).stats.total_ns;
}

std::vector<size_t> position_of(const std::vector<size_t>& order) {
  std::vector<size_t> position(order.size());
  for (size_t k = 0; k < order.size(); ++k) position[order[k]] = k;
  return position;
}

// A load that takes long, a Vector copy waiting for it, then an independent Vector memset: in program order the
// memset waits behind the copy; scheduled, it runs while the load is in flight.
const char* kBlockedVector = R"(kernel blocked
target trn2
hbm x : fp32[128, 4096] input
sbuf a : fp32[128, 4096] @ 0:0
sbuf b : fp32[128, 4096] @ 0:16384
sbuf c : fp32[128, 4096] @ 0:32768
dma_copy dst=a, src=x
tensor_copy dst=b, src=a
memset dst=c, value=1.0
)";

TEST(ListScheduler, IndependentWorkRunsWhileAnEngineWaits) {
  const HardwareConfig hw = config("trn2");
  const isa::Program program = isa::parse_tasm(kBlockedVector, "blocked");
  const std::vector<size_t> order = list_schedule(program, hw);
  const std::vector<size_t> position = position_of(order);
  EXPECT_LT(position[2], position[1]) << "the memset goes before the copy that waits for the load";
  EXPECT_LT(position[0], position[1]) << "the copy still follows its load";

  // Hand computation: program order = load, copy, memset back to back on the Vector engine after the load; scheduled
  // = the memset hidden under the load, so the program ends when the copy does. The difference is the memset's
  // occupancy plus its latency minus the copy's latency (the last Vector instruction's latency ends the program).
  const ComputeCost copy = compute_cost(program.instructions[1], program, hw);
  const ComputeCost memset = compute_cost(program.instructions[2], program, hw);
  const double in_order_ns = simulated_ns(program, hw);
  const double scheduled_ns = simulated_ns(reorder_program(program, order), hw);
  const double memset_ends_later_ns = memset.occupancy_ns() + memset.latency_ns() - copy.latency_ns();
  EXPECT_NEAR(in_order_ns - scheduled_ns, memset_ends_later_ns, 1e-6);
}

TEST(ListScheduler, KeepOrderRangesKeepProgramOrderPerEngine) {
  const HardwareConfig hw = config("trn2");
  const isa::Program program = isa::parse_tasm(kBlockedVector, "blocked");
  ScheduleOptions options;
  options.keep_order = {{1, 3}};
  const std::vector<size_t> position = position_of(list_schedule(program, hw, options));
  EXPECT_LT(position[1], position[2]);
}

TEST(ListScheduler, WithScheduleEdgesHoldInEitherDirection) {
  const HardwareConfig hw = config("trn2");
  const isa::Program program = isa::parse_tasm(kBlockedVector, "blocked");
  ScheduleOptions options;
  options.edges = {{2, 1}};  // the memset after the copy
  EXPECT_LT(position_of(list_schedule(program, hw, options))[1], position_of(list_schedule(program, hw, options))[2]);
  options.edges = {{0, 2}};  // the load after the memset: an edge against program order
  const std::vector<size_t> position = position_of(list_schedule(program, hw, options));
  EXPECT_LT(position[2], position[0]);
  EXPECT_LT(position[0], position[1]);
  options.edges = {{0, 1}};  // the load after the copy that reads it: a cycle
  EXPECT_THROW(list_schedule(program, hw, options), std::invalid_argument);
}

TEST(ListScheduler, NothingCrossesAFence) {
  const HardwareConfig hw = config("trn2");
  std::string text = kBlockedVector;
  text.replace(text.find("memset"), 0, "barrier\n");
  const isa::Program program = isa::parse_tasm(text, "fenced");
  const std::vector<size_t> order = list_schedule(program, hw);
  std::vector<size_t> identity(order.size());
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_EQ(order, identity);
}

TEST(ListScheduler, LaneAccumulatorUsersKeepTheirOrder) {
  // Two reductions through the Vector accumulator: the second may not pass the first even though their tensors
  // differ (the accumulator is the engine's state).
  const HardwareConfig hw = config("trn2");
  const isa::Program program = isa::parse_tasm(R"(kernel acc
target trn2
hbm x : fp32[128, 4096] input
sbuf a : fp32[128, 4096] @ 0:0
sbuf b : fp32[128, 512] @ 0:16384
sbuf r1 : fp32[128, 1] @ 0:20480
sbuf r2 : fp32[128, 1] @ 0:20544
sbuf d : fp32[128, 512] @ 0:20608
dma_copy dst=a, src=x
tensor_scalar_reduce dst=a, data=a, op0=add, operand0=0.0, reduce_op=add, reduce_res=r1
tensor_scalar_reduce dst=d, data=b, op0=add, operand0=0.0, reduce_op=add, reduce_res=r2
)", "acc");
  const std::vector<size_t> position = position_of(list_schedule(program, hw));
  EXPECT_LT(position[1], position[2]);
}

// Random programs over a few small tiles on every engine and DMA queue: the schedule is a permutation in which every
// pair of instructions touching a common byte (one writing) keeps its order, and values are unchanged.
TEST(ListScheduler, RandomProgramsKeepEveryDependencyAndValues) {
  const HardwareConfig hw = config("trn2");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    std::ostringstream text;
    text << "kernel random\ntarget trn2\nhbm x : fp32[128, 512] input\nhbm y : fp32[128, 512] output\n";
    const int tiles = 6;
    for (int t = 0; t < tiles; ++t) text << "sbuf t" << t << " : fp32[128, 64] @ 0:" << t * 256 << "\n";
    const int count = 40;
    for (int i = 0; i < count; ++i) {
      const int a = int(rng() % tiles), b = int(rng() % tiles), column = int(rng() % 8) * 64;
      switch (rng() % 5) {
        case 0: text << "dma_copy dst=t" << a << ", src=x[:, " << column << ":" << column + 64 << "], queue=" << rng() % 4 << "\n"; break;
        case 1: text << "dma_copy dst=y[:, " << column << ":" << column + 64 << "], src=t" << a << ", queue=" << rng() % 4 << "\n"; break;
        case 2: text << "tensor_tensor dst=t" << a << ", data1=t" << b << ", data2=t" << (a + 1) % tiles << ", op=add\n"; break;
        case 3: text << "activation dst=t" << a << ", op=exp, data=t" << b << ", scale=0.01\n"; break;
        default: text << "memset dst=t" << a << ", value=" << i << "\n"; break;
      }
    }
    const isa::Program program = isa::parse_tasm(text.str(), "random");
    const std::vector<size_t> order = list_schedule(program, hw);
    std::vector<size_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (size_t k = 0; k < sorted.size(); ++k) ASSERT_EQ(sorted[k], k);
    const std::vector<size_t> position = position_of(order);
    for (size_t j = 0; j < order.size(); ++j) {
      std::vector<const isa::AccessPattern*> rj, wj;
      collect_accesses(program.instructions[j], rj, wj);
      for (size_t i = 0; i < j; ++i) {
        std::vector<const isa::AccessPattern*> ri, wi;
        collect_accesses(program.instructions[i], ri, wi);
        auto same_tensor = [](const std::vector<const isa::AccessPattern*>& p,
                              const std::vector<const isa::AccessPattern*>& q) {
          for (const auto* a : p) {
            for (const auto* b : q) {
              if (a->allocation == b->allocation) {
                const auto [alo, ahi] = a->element_range(true);
                const auto [blo, bhi] = b->element_range(true);
                if (alo <= bhi && blo <= ahi) return true;
              }
            }
          }
          return false;
        };
        if (same_tensor(wi, rj) || same_tensor(ri, wj) || same_tensor(wi, wj)) {
          ASSERT_LT(position[i], position[j]) << "trial " << trial << ": instructions " << i << " and " << j;
        }
      }
    }
    // Values: the reordered program computes the same output bytes.
    SimOptions options;
    auto prepare = [](uint32_t, isa::CoreState& state) {
      std::vector<float> input(128 * 512);
      for (size_t k = 0; k < input.size(); ++k) input[k] = float(k % 97) * 0.25f;
      std::memcpy(state.hbm(0).data(), input.data(), input.size() * sizeof(float));
    };
    SimResult in_order = simulate(program, hw, "test", options, prepare);
    SimResult scheduled = simulate(reorder_program(program, order), hw, "test", options, prepare);
    ASSERT_TRUE(in_order.states.front()->hbm(1) == scheduled.states.front()->hbm(1)) << "trial " << trial;
    EXPECT_LE(simulated_ns(reorder_program(program, order), hw), simulated_ns(program, hw) * 1.10) << "trial " << trial;
  }
}

}  // namespace
}  // namespace trnsim::sim
