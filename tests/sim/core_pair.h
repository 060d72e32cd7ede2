// Two programs run together on cores 0 and 1 of one trn2 chip, sharing its HBM (an LNC launch), with the fp32 HBM
// tensor `in` loaded from `in_values` (through the first core, as the simulator loads shared inputs).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "config/config_loader.h"
#include "isa/legality.h"
#include "sim/simulator.h"

namespace trnsim::sim::testing_support {

inline SimResult run_core_pair(const isa::Program& a, const isa::Program& b, const std::vector<float>& in_values,
                               bool timing_only) {
  HardwareConfig hw = load_config("trn2", {}).hardware;
  isa::check_program(a, hw);
  isa::check_program(b, hw);
  SimOptions options;
  options.cores = {0, 1};
  options.timing_only = timing_only;
  std::vector<const isa::Program*> programs{&a, &b};
  return simulate(programs, hw, "test", options, [&](uint32_t, isa::CoreState& state) {
    std::vector<uint8_t> bytes(in_values.size() * 4);
    std::memcpy(bytes.data(), in_values.data(), bytes.size());
    state.hbm(uint32_t(a.find_allocation("in"))) = bytes;
  }, /*shared_hbm=*/true);
}

}  // namespace trnsim::sim::testing_support
