// Derived figures against hand arithmetic on the published numbers.
#include <gtest/gtest.h>

#include "config/config_loader.h"
#include "config/derived_figures.h"

namespace trnsim {
namespace {

TEST(DerivedFigures, Trn2PeaksMatchHandArithmetic) {
  DerivedFigures d = derive_figures(load_config("trn2").hardware);
  // 128 x 128 PEs x 2 FLOP/MAC x 2.4 GHz = 78.6 TFLOPS (A-V3 publishes 79).
  EXPECT_NEAR(d.peak_tflops_per_core.at(DType::bf16), 128.0 * 128 * 2 * 2.4e9 / 1e12, 1e-9);
  EXPECT_NEAR(d.peak_tflops_per_core.at(DType::bf16), 78.6, 0.05);
  EXPECT_NEAR(d.peak_tflops_per_core.at(DType::fp32), 78.6432 / 4, 1e-9);
  EXPECT_NEAR(d.peak_tflops_per_core.at(DType::fp8_e4m3), 78.6432 * 2, 1e-9);  // double_row
  EXPECT_NEAR(d.peak_tflops_per_logical_core.at(DType::bf16), 78.6432 * 2, 1e-9);  // LNC = 2
  EXPECT_NEAR(d.peak_tflops_per_chip.at(DType::bf16), 78.6432 * 8, 1e-9);
  EXPECT_EQ(d.peak_tflops_per_core.count(DType::mxfp8_e4m3), 0u);
  EXPECT_EQ(d.logical_cores_per_chip, 4u);
  EXPECT_EQ(d.sbuf_bytes_per_core, 28ull << 20);
  EXPECT_EQ(d.sbuf_bytes_per_chip, 224ull << 20);  // S-TRN2: 224 MiB per chip
  EXPECT_EQ(d.psum_bytes_per_core, 2ull << 20);
  EXPECT_DOUBLE_EQ(d.hbm_bandwidth_per_stack_gbps, 2900.0 / 4);
  EXPECT_DOUBLE_EQ(d.hbm_bandwidth_per_core_gbps, 2900.0 / 4 / 2);  // two cores per stack (S-LNC)
  EXPECT_DOUBLE_EQ(d.dma_bandwidth_per_core_gbps, 16 * 27.2);
  EXPECT_NEAR(d.hbm_bytes_per_bf16_flop, 2900e9 / (78.6432e12 * 8), 1e-15);
  EXPECT_EQ(d.default_system_logical_cores, 4u);
}

TEST(DerivedFigures, Trn1AndTrn3) {
  DerivedFigures trn1 = derive_figures(load_config("trn1").hardware);
  EXPECT_NEAR(trn1.peak_tflops_per_core.at(DType::bf16), 128.0 * 128 * 2 * 2.8e9 / 1e12, 1e-9);  // A-V2: 92
  EXPECT_NEAR(trn1.peak_tflops_per_core.at(DType::fp8_e4m3), trn1.peak_tflops_per_core.at(DType::bf16), 1e-9);
  EXPECT_EQ(trn1.sbuf_bytes_per_core, 24ull << 20);
  EXPECT_EQ(trn1.logical_cores_per_chip, 2u);

  DerivedFigures trn3 = derive_figures(load_config("trn3").hardware);
  EXPECT_NEAR(trn3.peak_tflops_per_core.at(DType::mxfp8_e4m3), 78.6432 * 4, 1e-9);  // A-V4: 315
  EXPECT_NEAR(trn3.peak_tflops_per_chip.at(DType::mxfp8_e4m3), 78.6432 * 4 * 8, 1e-9);  // S-TRN3: 2,517
  EXPECT_EQ(trn3.sbuf_bytes_per_chip, 256ull << 20);  // S-TRN3: 256 MiB per chip
}

TEST(DerivedFigures, FollowConfigChanges) {
  DerivedFigures faster = derive_figures(load_config("trn2", {"core.tensor.clock_ghz=4.8"}).hardware);
  EXPECT_NEAR(faster.peak_tflops_per_core.at(DType::bf16), 2 * 78.6432, 1e-9);
  DerivedFigures narrow = derive_figures(load_config("trn2", {"hbm.stack_by_core=[0, 1, 2, 3, 0, 1, 2, 3]"}).hardware);
  EXPECT_DOUBLE_EQ(narrow.hbm_bandwidth_per_core_gbps, 2900.0 / 4 / 2);
  DerivedFigures lnc1 = derive_figures(load_config("trn2", {"chip.default_logical_core_size=1"}).hardware);
  EXPECT_EQ(lnc1.logical_cores_per_chip, 8u);
}

TEST(DTypes, TableMatchesEnumOrderAndNames) {
  for (size_t i = 0; i < all_dtypes().size(); ++i) {
    EXPECT_EQ(static_cast<size_t>(all_dtypes()[i].dtype), i);
    EXPECT_EQ(parse_dtype(all_dtypes()[i].name), all_dtypes()[i].dtype);
    EXPECT_EQ(parse_dtype(all_dtypes()[i].nki_name), all_dtypes()[i].dtype);
  }
  EXPECT_EQ(dtype_size_bytes(DType::bf16), 2u);
  EXPECT_EQ(dtype_size_bytes(DType::fp8_e5m2), 1u);
  EXPECT_FALSE(parse_dtype("float64").has_value());
}

}  // namespace
}  // namespace trnsim
