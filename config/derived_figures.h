// Figures that follow from a config by arithmetic: peak FLOPS per dtype, memory totals,
// bandwidth shares. One place computes them so `config show`, MFU and reports agree.
#pragma once

#include <map>

#include "config/hardware_config.h"

namespace trnsim {

// Throughput factor of a matmul input dtype relative to bf16, taking the fastest mode the
// hardware offers (double_row where allowed); 0 when the dtype is no matmul input.
double tensor_rate_factor(const TensorEngineConfig& tensor, DType dtype);

// Dense peak of one physical core's Tensor engine: rows x columns x 2 FLOP/MAC x clock x factor.
double peak_tensor_tflops_per_core(const TensorEngineConfig& tensor, DType dtype);

struct DerivedFigures {
  std::map<DType, double> peak_tflops_per_core;
  std::map<DType, double> peak_tflops_per_logical_core;  // at the default LNC
  std::map<DType, double> peak_tflops_per_chip;
  uint32_t logical_cores_per_chip = 0;  // at the default LNC
  uint64_t sbuf_bytes_per_core = 0;
  uint64_t sbuf_bytes_per_chip = 0;
  uint64_t psum_bytes_per_core = 0;
  uint64_t psum_bytes_per_chip = 0;
  double hbm_bandwidth_per_stack_gbps = 0;
  double hbm_bandwidth_per_core_gbps = 0;  // a stack's bandwidth split among the cores it serves
  double dma_bandwidth_per_core_gbps = 0;
  double hbm_bytes_per_bf16_flop = 0;  // chip HBM bandwidth / chip bf16 peak
  uint32_t default_system_chips = 0;
  uint32_t default_system_logical_cores = 0;
};

DerivedFigures derive_figures(const HardwareConfig& config);

}  // namespace trnsim
