#include "config/derived_figures.h"

#include <algorithm>

namespace trnsim {

double tensor_rate_factor(const TensorEngineConfig& tensor, DType dtype) {
  auto it = tensor.rate_factor_by_dtype.find(dtype);
  if (it == tensor.rate_factor_by_dtype.end()) return 0;
  double factor = it->second;
  if (std::find(tensor.double_row_dtypes.begin(), tensor.double_row_dtypes.end(), dtype) !=
      tensor.double_row_dtypes.end()) {
    factor = std::max(factor, tensor.double_row_rate_factor);
  }
  return factor;
}

double peak_tensor_tflops_per_core(const TensorEngineConfig& tensor, DType dtype) {
  constexpr double kFlopsPerMac = 2;
  return double(tensor.pe_rows) * tensor.pe_columns * kFlopsPerMac * tensor.clock_ghz * tensor_rate_factor(tensor, dtype) /
         1e3;
}

DerivedFigures derive_figures(const HardwareConfig& config) {
  DerivedFigures figures;
  const uint32_t cores = config.chip.physical_cores;
  const uint32_t lnc = config.chip.default_logical_core_size;
  for (const auto& entry : config.core.tensor.rate_factor_by_dtype) {
    double per_core = peak_tensor_tflops_per_core(config.core.tensor, entry.first);
    figures.peak_tflops_per_core[entry.first] = per_core;
    figures.peak_tflops_per_logical_core[entry.first] = per_core * lnc;
    figures.peak_tflops_per_chip[entry.first] = per_core * cores;
  }
  figures.logical_cores_per_chip = cores / lnc;
  figures.sbuf_bytes_per_core = uint64_t{config.core.sbuf.partitions} * config.core.sbuf.bytes_per_partition;
  figures.sbuf_bytes_per_chip = figures.sbuf_bytes_per_core * cores;
  figures.psum_bytes_per_core = uint64_t{config.core.psum.partitions} * config.core.psum.bytes_per_partition;
  figures.psum_bytes_per_chip = figures.psum_bytes_per_core * cores;
  figures.hbm_bandwidth_per_stack_gbps = config.hbm.bandwidth_gbps / config.hbm.stacks;
  uint32_t busiest_stack_cores = 0;
  for (uint32_t stack = 0; stack < config.hbm.stacks; ++stack) {
    uint32_t sharing = static_cast<uint32_t>(
        std::count(config.hbm.stack_by_core.begin(), config.hbm.stack_by_core.end(), stack));
    busiest_stack_cores = std::max(busiest_stack_cores, sharing);
  }
  figures.hbm_bandwidth_per_core_gbps = figures.hbm_bandwidth_per_stack_gbps / std::max(1u, busiest_stack_cores);
  figures.dma_bandwidth_per_core_gbps = config.core.dma.engines_per_core * config.core.dma.bandwidth_per_engine_gbps;
  double chip_bf16_flops = figures.peak_tflops_per_chip[DType::bf16] * 1e12;
  figures.hbm_bytes_per_bf16_flop = config.hbm.bandwidth_gbps * 1e9 / chip_bf16_flops;
  const SystemConfig& system = config.systems.at(config.default_system);
  figures.default_system_chips = system.chips;
  figures.default_system_logical_cores = system.chips * figures.logical_cores_per_chip;
  return figures;
}

}  // namespace trnsim
