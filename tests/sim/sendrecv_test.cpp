// ISA sendrecv (NKI nisa.sendrecv) and rank_id (nki.collectives.rank_id and the ring's current processing rank).
// sendrecv values: each rank's dst is its source rank's src, checked element by element. Time: the send starts at
// the later of the two ranks' arrivals; on one chip (an LNC launch) it takes what the same SBUF-to-SBUF dma_copy
// (or, with dma_engine=gpsimd_dma, the same GpSimd tensor_copy) takes alone on the core; across the ranks of a
// system it takes what the system model gives a send_recv of its bytes. Unmatched calls are errors, not hangs.
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

HardwareConfig trn2() { return load_config("trn2", {}).hardware; }

const char* const kDecl = R"(target trn2
hbm in : fp32[128, 512] input
hbm out : fp32[128, 512] output
sbuf x : fp32[64, 512]
sbuf y : fp32[64, 512]
)";

std::vector<float> input_values() {
  std::vector<float> v(128 * 512);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 251) - 100.0f;
  return v;
}

std::vector<float> hbm_values(const isa::CoreState& state, const isa::Program& program, const char* name) {
  const std::vector<uint8_t>& bytes = state.hbm(uint32_t(program.find_allocation(name)));
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Programs on cores 0..n-1; `lnc`: one chip's cores sharing HBM (an LNC launch), else ranks with their own memory.
SimResult run(const std::vector<const isa::Program*>& programs, bool lnc, bool timing_only = false) {
  HardwareConfig hw = trn2();
  SimOptions options;
  options.cores.clear();
  for (size_t i = 0; i < programs.size(); ++i) {
    isa::check_program(*programs[i], hw);
    options.cores.push_back(uint32_t(i));
  }
  options.timing_only = timing_only;
  return simulate(programs, hw, "test", options, [&](uint32_t, isa::CoreState& state) {
    const std::vector<float> v = input_values();
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    const int in = programs[0]->find_allocation("in");
    if (in >= 0) state.hbm(uint32_t(in)) = bytes;
  }, lnc);
}

double alone_ns(const std::string& text) {
  isa::Program p = isa::parse_tasm(text, "alone.tasm");
  SimOptions options;
  options.timing_only = true;
  return simulate(p, trn2(), "test", options).stats.total_ns;
}

// Core c loads its half of `in`, swaps it with the other core, and stores what it received into its half of `out`:
// out[c half] = in[other half].
std::string swap_halves(int core, const std::string& extra = "", const std::string& engine = "dma") {
  const std::string mine = core == 0 ? "0:64" : "64:128";
  return std::string(kDecl) + "dma_copy dst=x, src=in[" + mine + ", :]\n" + extra +
         "sendrecv dst=y, src=x, send_to_rank=" + std::to_string(1 - core) +
         ", recv_from_rank=" + std::to_string(1 - core) + ", dma_engine=" + engine +
         (engine == "gpsimd_dma" ? ", engine=gpsimd" : "") + "\n" + "dma_copy dst=out[" + mine + ", :], src=y\n";
}

TEST(SendRecv, TheTwoCoresOfAnLncLaunchSwapTiles) {
  std::string slow;
  for (int i = 0; i < 30; ++i) slow += "tensor_scalar dst=x, data=x, op0=add, operand0=0.0\n";
  for (const char* engine : {"dma", "gpsimd_dma"}) {
    SCOPED_TRACE(engine);
    const isa::Program core0 = isa::parse_tasm(swap_halves(0, "", engine), "c0.tasm");
    const isa::Program core1 = isa::parse_tasm(swap_halves(1, slow, engine), "c1.tasm");
    const SimResult r = run({&core0, &core1}, /*lnc=*/true);
    const std::vector<float> in = input_values(), out = hbm_values(*r.states.at(0), core0, "out");
    for (size_t p = 0; p < 128; ++p) {
      const size_t other = p < 64 ? p + 64 : p - 64;
      for (size_t j = 0; j < 512; j += 37) ASSERT_EQ(out[p * 512 + j], in[other * 512 + j]) << p << " " << j;
    }
    EXPECT_EQ(r.stats.instructions.at("sendrecv"), 2u);
  }
}

TEST(SendRecv, OnOneChipTheSendStartsAtTheLaterArrivalAndTakesWhatItsCopyTakes) {
  // Core 1 arrives once its tile is loaded and doubled; core 0 arrives at once (its src was never written), so
  // its send waits for core 1; core 0 then stores what it received. Core 1 does nothing after, so nothing else
  // moves while core 0's store runs.
  const std::string core1_before = std::string(kDecl) + "dma_copy dst=x, src=in[64:128, :]\n"
                                                         "tensor_scalar dst=x, data=x, op0=multiply, operand0=2.0\n";
  const std::string after = std::string(kDecl) + "dma_copy dst=out[0:64, :], src=y\n";
  const double arrival1 = alone_ns(core1_before), after0 = alone_ns(after);
  ASSERT_GT(arrival1, 1000.0);
  struct Case {
    const char* engine;
    std::string copy;  // what moves one tile, alone
  };
  for (const Case& c : {Case{"dma", "dma_copy dst=y, src=x\n"},
                        Case{"gpsimd_dma", "tensor_copy dst=y, src=x, engine=gpsimd\n"}}) {
    SCOPED_TRACE(c.engine);
    const double copy_ns = alone_ns(std::string(kDecl) + c.copy);
    const std::string call = std::string("sendrecv dst=y, src=x, send_to_rank=1, recv_from_rank=1, dma_engine=") +
                             c.engine + (std::string(c.engine) == "gpsimd_dma" ? ", engine=gpsimd" : "") + "\n";
    const std::string call1 = std::string("sendrecv dst=y, src=x, send_to_rank=0, recv_from_rank=0, dma_engine=") +
                              c.engine + (std::string(c.engine) == "gpsimd_dma" ? ", engine=gpsimd" : "") + "\n";
    const isa::Program core0 = isa::parse_tasm(std::string(kDecl) + call + "dma_copy dst=out[0:64, :], src=y\n", "c0");
    const isa::Program core1 = isa::parse_tasm(core1_before + call1, "c1");
    for (bool timing_only : {true, false}) {
      SCOPED_TRACE(timing_only ? "timing only" : "values");
      const SimResult r = run({&core0, &core1}, /*lnc=*/true, timing_only);
      EXPECT_NEAR(r.stats.total_ns, arrival1 + copy_ns + after0, 1e-6);
    }
  }
}

TEST(SendRecv, BetweenRanksOfASystemTheLinksTimeIt) {
  // Two ranks with their own memory swap a tile at once (nothing before): each send is a send_recv on the system
  // model (one chip: through its HBM), the two booked together; both ranks finish when the later transfer does.
  const std::string decl = "target trn2\nsbuf x : fp32[64, 512]\nsbuf y : fp32[64, 512]\n";
  const isa::Program rank0 = isa::parse_tasm(decl + "sendrecv dst=y, src=x, send_to_rank=1, recv_from_rank=1\n", "r0");
  const isa::Program rank1 = isa::parse_tasm(decl + "sendrecv dst=y, src=x, send_to_rank=0, recv_from_rank=0\n", "r1");
  HardwareConfig hw = trn2();
  CollectiveSimulator links(hw, hw.default_system, hw.chip.physical_cores);
  double transfers_ns = 0;
  for (uint32_t from : {0u, 1u}) {
    CollectiveRequest request;
    request.op = CollectiveOp::send_recv;
    request.bytes = 64 * 512 * 4;
    request.ranks = {from, 1 - from};
    transfers_ns = std::max(transfers_ns, links.run(request).latency_ns);
  }
  ASSERT_GT(transfers_ns, 100.0);
  const double issue = hw.core.sync.fixed_overhead_cycles / hw.core.sync.clock_ghz;
  for (bool timing_only : {true, false}) {
    const SimResult r = run({&rank0, &rank1}, /*lnc=*/false, timing_only);
    EXPECT_NEAR(r.stats.total_ns, std::max(issue, transfers_ns), 1e-6) << timing_only;
  }
}

TEST(SendRecv, ARingOfRanksEachReceivesFromItsPredecessor) {
  const uint32_t ranks = 4;
  std::vector<isa::Program> programs;
  for (uint32_t r = 0; r < ranks; ++r) {
    programs.push_back(isa::parse_tasm(
        std::string(kDecl) + "dma_copy dst=x, src=in[" + std::to_string(16 * r) + ":" + std::to_string(16 * r + 64) +
            ", :]\nsendrecv dst=y, src=x, send_to_rank=" + std::to_string((r + 1) % ranks) +
            ", recv_from_rank=" + std::to_string((r + ranks - 1) % ranks) + ", pipe_id=3\n"
            "dma_copy dst=out[0:64, :], src=y\n",
        "ring.tasm"));
  }
  std::vector<const isa::Program*> pointers;
  for (const isa::Program& p : programs) pointers.push_back(&p);
  const SimResult r = run(pointers, /*lnc=*/false);
  const std::vector<float> in = input_values();
  for (uint32_t rank = 0; rank < ranks; ++rank) {
    const uint32_t from = (rank + ranks - 1) % ranks;
    const std::vector<float> out = hbm_values(*r.states.at(rank), programs[rank], "out");
    for (size_t p = 0; p < 64; p += 5) {
      for (size_t j = 0; j < 512; j += 41) ASSERT_EQ(out[p * 512 + j], in[(16 * from + p) * 512 + j]) << rank;
    }
  }
}

TEST(SendRecv, UnmatchedOrMismatchedCallsAreErrorsNotHangs) {
  auto error = [](const std::vector<std::string>& texts, bool lnc) {
    std::vector<isa::Program> programs;
    for (const std::string& t : texts) programs.push_back(isa::parse_tasm(t, "bad.tasm"));
    std::vector<const isa::Program*> pointers;
    for (const isa::Program& p : programs) pointers.push_back(&p);
    try {
      run(pointers, lnc, true);
      return std::string("no error");
    } catch (const isa::IsaError& e) {
      return std::string(e.what());
    }
  };
  const std::string decl = "target trn2\nsbuf x : fp32[64, 512]\nsbuf y : fp32[64, 512]\nsbuf z : fp32[32, 512]\n"
                           "sbuf w : fp32[32, 512]\n";
  const std::string to1 = "sendrecv dst=y, src=x, send_to_rank=1, recv_from_rank=1\n";
  const std::string to0 = "sendrecv dst=y, src=x, send_to_rank=0, recv_from_rank=0\n";
  EXPECT_THAT(error({decl + to1, decl}, true), HasSubstr("finished without a sendrecv receiving from rank 0"));
  EXPECT_THAT(error({decl + to1, decl + "sendrecv dst=y, src=x, send_to_rank=0, recv_from_rank=0, pipe_id=1\n"},
                    true),
              HasSubstr("(the program would hang) [deadlock]"));
  EXPECT_THAT(error({decl + to1, decl + "sendrecv dst=w, src=z, send_to_rank=0, recv_from_rank=0\n"}, false),
              HasSubstr("[sendrecv]"));
  EXPECT_THAT(error({decl + "sendrecv dst=y, src=x, send_to_rank=2, recv_from_rank=1\n", decl + to0}, true),
              HasSubstr("rank 2 is not one of the 2 ranks"));
  EXPECT_EQ(error({decl + to1, decl + to0}, true), "no error");

  HardwareConfig hw = trn2();
  auto rules = [&](const std::string& line) {
    try {
      isa::check_program(isa::parse_tasm(decl + "psum p : fp32[64, 512]\nsbuf h : bf16[64, 512]\n" + line, "r"), hw);
      return std::string("legal");
    } catch (const isa::IsaError& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(rules(to1), "legal");
  EXPECT_THAT(rules("sendrecv dst=p, src=x, send_to_rank=1, recv_from_rank=1\n"), HasSubstr("[sendrecv]"));
  EXPECT_THAT(rules("sendrecv dst=h, src=x, send_to_rank=1, recv_from_rank=1\n"), HasSubstr("does not cast"));
  EXPECT_THAT(rules("sendrecv dst=z, src=x, send_to_rank=1, recv_from_rank=1\n"), HasSubstr("row by row"));
}

TEST(RankId, EachRankReadsItsRankAndItsRingsUpstreamRanks) {
  // r0 = rank; r1 = the rank one step upstream in its pair ([0, 1], [2, 3]); r2 = two steps upstream around the
  // ring of all four (rank - 2 mod 4), from a register.
  const std::string text = R"(target trn2
hbm mine : int32[1] output
hbm upstream_pair : int32[1] output
hbm upstream_ring : int32[1] output
rank_id dst=r0
rank_id dst=r1, group=[0, 1, 2, 3], group_size=2, back=1
register_move dst=r3, imm=2
rank_id dst=r2, group=[0, 1, 2, 3], back_reg=r3
register_store dst=mine, src=r0
register_store dst=upstream_pair, src=r1
register_store dst=upstream_ring, src=r2
)";
  const isa::Program program = isa::parse_tasm(text, "rank.tasm");
  const SimResult r = run({&program, &program, &program, &program}, /*lnc=*/false);
  auto value = [&](uint32_t rank, const char* name) {
    int32_t v = 0;
    std::memcpy(&v, r.states.at(rank)->hbm(uint32_t(program.find_allocation(name))).data(), 4);
    return v;
  };
  for (int32_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(value(uint32_t(rank), "mine"), rank);
    EXPECT_EQ(value(uint32_t(rank), "upstream_pair"), rank ^ 1);
    EXPECT_EQ(value(uint32_t(rank), "upstream_ring"), (rank + 2) % 4);
  }
}

TEST(CollectivePermute, WithSrc2TheSendersReductionMoves) {
  const std::string text = R"(target trn2
hbm in : fp32[128, 512] input
hbm out : fp32[128, 512] output
collective_permute dst=out, src=in, pairs=[[0, 1], [1, 2], [2, 0]], src2=in, op=add
)";
  const isa::Program program = isa::parse_tasm(text, "permute.tasm");
  const SimResult r = run({&program, &program, &program}, /*lnc=*/false);
  const std::vector<float> in = input_values();
  for (uint32_t rank = 0; rank < 3; ++rank) {
    const std::vector<float> out = hbm_values(*r.states.at(rank), program, "out");
    for (size_t i = 0; i < out.size(); i += 101) ASSERT_EQ(out[i], 2.0f * in[i]) << rank;  // in + in, exact
  }
  HardwareConfig hw = trn2();
  try {
    isa::check_program(isa::parse_tasm("target trn2\nhbm a : fp32[8]\nhbm b : fp32[8]\n"
                                       "collective_permute dst=b, src=a, pairs=[[0, 1]], src2=a\n", "bad"),
                       hw);
    ADD_FAILURE() << "no error";
  } catch (const isa::IsaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("takes both src2 and op"));
  }
}

}  // namespace
}  // namespace trnsim::sim
