// nc_matmul_mx (trn3): MX x4 packing through CoreState, the MX matmul against an independent double reference
// (own element decoders, own scale layout), accumulation, and the legality rules.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "config/config_loader.h"
#include "isa/builder.h"
#include "isa/interpreter.h"
#include "isa/legality.h"
#include "isa/text_form.h"

namespace trnsim::isa {
namespace {

using ::testing::HasSubstr;

const HardwareConfig& config(Generation generation) {
  static const HardwareConfig trn2 = load_config("trn2").hardware;
  static const HardwareConfig trn3 = load_config("trn3").hardware;
  return generation == Generation::trn3 ? trn3 : trn2;
}

// ---- independent element decoders (OCP MX v1.0 element formats) ----
double decode_e4m3fn(uint8_t b) {
  int s = b >> 7, e = (b >> 3) & 0xF, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -v : v;
}
double decode_e5m2(uint8_t b) {
  int s = b >> 7, e = (b >> 2) & 0x1F, m = b & 3;
  if (e == 31) return m ? NAN : (s ? -INFINITY : INFINITY);
  double v = e == 0 ? std::ldexp(m, -16) : std::ldexp(4 + m, e - 17);
  return s ? -v : v;
}
double decode_e2m1(uint8_t c) {
  int s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
  double v = e == 0 ? 0.5 * m : std::ldexp(2 + m, e - 2);
  return s ? -v : v;
}
double decode_element(DType dtype, uint8_t code) {
  return dtype == DType::mxfp8_e4m3 ? decode_e4m3fn(code) : dtype == DType::mxfp8_e5m2 ? decode_e5m2(code)
                                                                                       : decode_e2m1(code);
}
uint32_t slot_bytes(DType dtype) { return dtype == DType::mxfp4_e2m1 ? 2 : 4; }

// An MX operand as the test keeps it: codes[p][4f + j] is value j of the slot at (p, f).
struct MxData {
  DType dtype;
  uint32_t partitions;
  uint32_t columns;
  std::vector<std::vector<uint8_t>> codes;
  // The packed bytes of partition p: fp8 value j = byte j; fp4 value j = nibble j, low nibble first.
  std::vector<uint8_t> bytes(uint32_t p) const {
    std::vector<uint8_t> out(size_t(columns) * slot_bytes(dtype), 0);
    for (uint32_t f = 0; f < columns; ++f) {
      for (uint32_t j = 0; j < 4; ++j) {
        uint8_t c = codes[p][4 * f + j];
        if (dtype == DType::mxfp4_e2m1) {
          out[2 * f + j / 2] |= uint8_t((c & 0xF) << (4 * (j % 2)));
        } else {
          out[4 * f + j] = c;
        }
      }
    }
    return out;
  }
  double value(uint32_t k, uint32_t column) const { return decode_element(dtype, codes[k / 4][4 * column + k % 4]); }
};

MxData random_mx(DType dtype, uint32_t partitions, uint32_t columns, std::mt19937& rng) {
  MxData d{dtype, partitions, columns, {}};
  std::uniform_int_distribution<int> byte(0, dtype == DType::mxfp4_e2m1 ? 15 : 255);
  d.codes.assign(partitions, std::vector<uint8_t>(size_t(columns) * 4));
  for (auto& row : d.codes) {
    for (uint8_t& c : row) {
      do c = uint8_t(byte(rng));
      while (!std::isfinite(decode_element(dtype, c)));  // NaN/inf data would swamp every sum
    }
  }
  return d;
}

// Writes raw bytes into the rows of an SBUF tensor through a uint8 view of the same bytes.
void store_bytes(CoreState& state, const Program& program, uint32_t allocation, uint32_t first_partition,
                 const std::vector<std::vector<uint8_t>>& rows) {
  AccessPattern ap = slice_allocation(program, allocation, {});
  ap.dtype = DType::uint8;
  ap.start_partition = first_partition;
  ap.partition.size = static_cast<uint32_t>(rows.size());
  ap.offset = 0;
  ap.num_free_dims = 1;
  ap.free[0] = ApDim{1, static_cast<uint32_t>(rows[0].size())};
  Tile tile(ap.partitions(), rows[0].size());
  for (uint32_t p = 0; p < rows.size(); ++p) {
    for (size_t i = 0; i < rows[p].size(); ++i) tile.at(p, i) = rows[p][i];
  }
  state.write(ap, tile);
}

// Scale codes [group][column]; the SBUF layout (group g at row 32*(g/4) + g%4 + offset) is the test's own.
std::vector<std::vector<uint8_t>> scale_rows(const std::vector<std::vector<uint8_t>>& scales, uint32_t rows) {
  std::vector<std::vector<uint8_t>> out(rows, std::vector<uint8_t>(scales[0].size(), 0x7F));
  for (uint32_t g = 0; g < scales.size(); ++g) out[32 * (g / 4) + g % 4] = scales[g];
  return out;
}

double e8m0(uint8_t code) { return code == 0xFF ? NAN : std::ldexp(1.0, int(code) - 127); }

// ref[m][n] = sum_k deq(st)[k][m] * deq(mv)[k][n]; also the sum of |terms| for the tolerance.
void reference(const MxData& st, const std::vector<std::vector<uint8_t>>& st_scale, const MxData& mv,
               const std::vector<std::vector<uint8_t>>& mv_scale, std::vector<double>& ref, std::vector<double>& mag) {
  uint32_t k_total = st.partitions * 4;
  ref.assign(size_t(st.columns) * mv.columns, 0.0);
  mag.assign(ref.size(), 0.0);
  for (uint32_t m = 0; m < st.columns; ++m) {
    for (uint32_t n = 0; n < mv.columns; ++n) {
      double sum = 0, abs_sum = 0;
      for (uint32_t k = 0; k < k_total; ++k) {
        uint32_t g = k / 32;
        double a = st.value(k, m) * e8m0(st_scale[g][m]);
        double b = mv.value(k, n) * e8m0(mv_scale[g][n]);
        // A NaN scale poisons its group even where the element is zero.
        double term = std::isnan(a) || std::isnan(b) ? NAN : a * b;
        sum += term;
        abs_sum += std::fabs(term);
      }
      ref[size_t(m) * mv.columns + n] = sum;
      mag[size_t(m) * mv.columns + n] = abs_sum;
    }
  }
}

struct MxCase {
  DType stationary, moving, dst;
  uint32_t partitions, m, n;
  uint32_t scale_offset;  // partition offset of the scale tiles within their quadrant
  DType scale_dtype;
};

class MatmulMxTest : public ::testing::TestWithParam<MxCase> {};

TEST_P(MatmulMxTest, MatchesDoubleReferenceOverTwoAccumulatingInstructions) {
  const MxCase c = GetParam();
  std::mt19937 rng(1234 + c.partitions + c.n + uint32_t(c.stationary) * 7 + uint32_t(c.dst));
  ProgramBuilder b("mx", Generation::trn3);
  uint32_t scale_rows_count = 32 * (c.partitions / 32 - 1) + 4;
  uint32_t st[2], mv[2], st_s[2], mv_s[2];
  for (int t = 0; t < 2; ++t) {
    std::string i = std::to_string(t);
    st[t] = b.sbuf("st" + i, c.stationary, {c.partitions, c.m});
    mv[t] = b.sbuf("mv" + i, c.moving, {c.partitions, c.n});
    st_s[t] = b.sbuf("st_scale" + i, c.scale_dtype, {128, c.m});
    mv_s[t] = b.sbuf("mv_scale" + i, c.scale_dtype, {128, c.n});
  }
  uint32_t acc = b.psum("acc", c.dst, {c.m, c.n});
  auto scale_view = [&](uint32_t id) {
    return b.view(id, {Slice::range(c.scale_offset, c.scale_offset + scale_rows_count)});
  };
  for (int t = 0; t < 2; ++t) {
    b.emit(Opcode::nc_matmul_mx)
        .tensor("dst", b.view(acc))
        .tensor("stationary", b.view(st[t]))
        .tensor("moving", b.view(mv[t]))
        .tensor("stationary_scale", scale_view(st_s[t]))
        .tensor("moving_scale", scale_view(mv_s[t]))
        .word("accumulate", t == 0 ? "false" : "auto");
  }
  Program program = b.finish();
  const HardwareConfig& trn3 = config(Generation::trn3);
  ASSERT_THAT(find_legality_issues(program, trn3), ::testing::IsEmpty());

  CoreState state(trn3.core, program);
  uint32_t groups = c.partitions / 8;
  std::uniform_int_distribution<int> near(117, 137);
  std::vector<double> total, magnitude, first;
  for (int t = 0; t < 2; ++t) {
    MxData s = random_mx(c.stationary, c.partitions, c.m, rng), x = random_mx(c.moving, c.partitions, c.n, rng);
    std::vector<std::vector<uint8_t>> ss(groups, std::vector<uint8_t>(c.m)), xs(groups, std::vector<uint8_t>(c.n));
    for (auto& row : ss) for (auto& v : row) v = uint8_t(near(rng));
    for (auto& row : xs) for (auto& v : row) v = uint8_t(near(rng));
    if (t == 0) {
      // Extreme exponents: column 0 of stationary at 2^127, column 1 at 2^-127; moving column 2 at 2^-126 and
      // column 3 at 2^126 (products overflow or underflow fp32, or cancel back into range).
      for (uint32_t g = 0; g < groups; ++g) {
        ss[g][0] = 254;
        ss[g][1] = 0;
        xs[g][2] = 1;
        xs[g][3] = 253;
      }
    } else {
      ss[groups - 1][4] = 0xFF;  // NaN scale: row 4 of the result is NaN
      xs[0][5] = 0xFF;           // and column 5
    }
    std::vector<std::vector<uint8_t>> s_bytes(c.partitions), x_bytes(c.partitions);
    for (uint32_t p = 0; p < c.partitions; ++p) {
      s_bytes[p] = s.bytes(p);
      x_bytes[p] = x.bytes(p);
    }
    store_bytes(state, program, st[t], 0, s_bytes);
    store_bytes(state, program, mv[t], 0, x_bytes);
    store_bytes(state, program, st_s[t], c.scale_offset, scale_rows(ss, scale_rows_count));
    store_bytes(state, program, mv_s[t], c.scale_offset, scale_rows(xs, scale_rows_count));
    std::vector<double> ref, mag;
    reference(s, ss, x, xs, ref, mag);
    if (t == 0) {
      total = ref;
      magnitude = mag;
      first = ref;
    } else {
      for (size_t i = 0; i < ref.size(); ++i) {
        total[i] += ref[i];
        magnitude[i] += mag[i];
      }
    }
  }
  interpret(program, state, trn3);
  Tile out = state.read(slice_allocation(program, acc, {}));
  ASSERT_EQ(out.values.size(), total.size());
  size_t checked = 0, nans = 0, infs = 0;
  for (uint32_t m = 0; m < c.m; ++m) {
    for (uint32_t n = 0; n < c.n; ++n) {
      size_t i = size_t(m) * c.n + n;
      double expected = total[i];
      float got = out.values[i];
      SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n));
      if (m == 4 || n == 5) {
        EXPECT_TRUE(std::isnan(got)) << got;
        ++nans;
        continue;
      }
      if (std::isnan(expected) || std::isinf(float(first[i])) || std::isinf(float(expected))) {
        // Overflowed rows: fp32 saturates to inf in the first instruction already.
        if (std::isinf(float(first[i]))) {
          EXPECT_TRUE(std::isinf(got) || std::isnan(got)) << got;
          ++infs;
        }
        continue;
      }
      double tolerance = std::ldexp(magnitude[i], -20) + std::ldexp(1.0, -149);
      if (c.dst == DType::bf16) tolerance += std::ldexp(std::fabs(first[i]) + std::fabs(expected), -8);
      EXPECT_NEAR(got, expected, tolerance);
      ++checked;
    }
  }
  EXPECT_GT(checked, out.values.size() / 2);
  EXPECT_GT(infs, 0u);
  EXPECT_GT(nans, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, MatmulMxTest,
    ::testing::Values(
        MxCase{DType::mxfp8_e4m3, DType::mxfp8_e4m3, DType::fp32, 128, 128, 512, 0, DType::fp8_e8m0},
        MxCase{DType::mxfp8_e5m2, DType::mxfp8_e5m2, DType::fp32, 64, 32, 96, 4, DType::uint8},
        MxCase{DType::mxfp4_e2m1, DType::mxfp4_e2m1, DType::fp32, 128, 64, 128, 0, DType::uint8},
        MxCase{DType::mxfp4_e2m1, DType::mxfp8_e5m2, DType::bf16, 96, 16, 64, 8, DType::fp8_e8m0},
        MxCase{DType::mxfp8_e4m3, DType::mxfp8_e4m3, DType::bf16, 32, 128, 256, 28, DType::fp8_e8m0}),
    [](const ::testing::TestParamInfo<MxCase>& info) {
      return std::string(dtype_name(info.param.stationary)) + "_" + std::string(dtype_name(info.param.moving)) +
             "_" + std::string(dtype_name(info.param.dst)) + "_p" + std::to_string(info.param.partitions);
    });

// Packing: CoreState unpacks x4 slots to 4 values in order (fp8 byte j, fp4 nibble j low first) and packs them back.
TEST(MatmulMx, PackingRoundTripsThroughCoreState) {
  for (DType dtype : {DType::mxfp8_e4m3, DType::mxfp8_e5m2, DType::mxfp4_e2m1}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    ProgramBuilder b("pack", Generation::trn3);
    uint32_t t = b.sbuf("t", dtype, {4, 6});
    uint32_t u = b.sbuf("u", dtype, {4, 6});
    Program program = b.finish();
    CoreState state(config(Generation::trn3).core, program);
    std::mt19937 rng(7);
    MxData d = random_mx(dtype, 4, 6, rng);
    std::vector<std::vector<uint8_t>> rows(4);
    for (uint32_t p = 0; p < 4; ++p) rows[p] = d.bytes(p);
    store_bytes(state, program, t, 0, rows);
    AccessPattern view = slice_allocation(program, t, {});
    Tile values = state.read(view);
    ASSERT_EQ(values.partitions, 4u);
    ASSERT_EQ(values.free, 24u);  // 6 slots x 4 values
    for (uint32_t p = 0; p < 4; ++p) {
      for (uint32_t i = 0; i < 24; ++i) EXPECT_EQ(values.at(p, i), float(decode_element(dtype, d.codes[p][i])));
    }
    // Strided view: every other slot.
    Tile odd = state.read(slice_allocation(program, t, {Slice::all(), Slice::range(1, 6, 2)}));
    ASSERT_EQ(odd.free, 12u);
    EXPECT_EQ(odd.at(2, 4), values.at(2, 12));
    // Write the values to u and compare the bytes.
    AccessPattern u_view = slice_allocation(program, u, {});
    state.write(u_view, values);
    AccessPattern u_bytes = u_view, t_bytes = view;
    u_bytes.dtype = t_bytes.dtype = DType::uint8;
    u_bytes.free[0] = t_bytes.free[0] = ApDim{1, 6 * slot_bytes(dtype)};
    EXPECT_EQ(state.read(u_bytes).values, state.read(t_bytes).values);
    // A wrong value count is refused.
    Tile short_tile(4, 6);
    EXPECT_THROW(state.write(u_view, short_tile), IsaError);
  }
  // Explicit byte order: value j of an fp8 slot is byte j; of an fp4 slot nibble j (low nibble of byte 0 first).
  ProgramBuilder b("order", Generation::trn3);
  uint32_t f8 = b.sbuf("f8", DType::mxfp8_e4m3, {1, 1});
  uint32_t f4 = b.sbuf("f4", DType::mxfp4_e2m1, {1, 1});
  Program program = b.finish();
  CoreState state(config(Generation::trn3).core, program);
  Tile v(1, 4);
  v.values = {1.0f, 2.0f, -0.5f, 6.0f};
  state.write(slice_allocation(program, f8, {}), v);
  state.write(slice_allocation(program, f4, {}), v);
  AccessPattern f8_bytes = slice_allocation(program, f8, {}), f4_bytes = slice_allocation(program, f4, {});
  f8_bytes.dtype = f4_bytes.dtype = DType::uint8;
  f8_bytes.free[0] = ApDim{1, 4};
  f4_bytes.free[0] = ApDim{1, 2};
  // e4m3fn: 1 = 0x38, 2 = 0x40, -0.5 = 0xB0, 6 = 0x4C. e2m1: 1 = 0x2, 2 = 0x4, -0.5 = 0x9, 6 = 0x7.
  EXPECT_EQ(state.read(f8_bytes).values, (std::vector<float>{0x38, 0x40, 0xB0, 0x4C}));
  EXPECT_EQ(state.read(f4_bytes).values, (std::vector<float>{0x42, 0x79}));
}

// ---- legality ----
struct MxProgram {
  ProgramBuilder b;
  uint32_t st, mv, st_scale, mv_scale, acc;
  explicit MxProgram(Generation generation = Generation::trn3, uint32_t n = 512, DType dst = DType::fp32,
                     uint32_t scale_rows = 128, DType scale_dtype = DType::fp8_e8m0)
      : b("mx", generation) {
    st = b.sbuf("st", DType::mxfp8_e4m3, {128, 128});
    mv = b.sbuf("mv", DType::mxfp8_e5m2, {128, n});
    st_scale = b.sbuf("st_scale", scale_dtype, {scale_rows, 128});
    mv_scale = b.sbuf("mv_scale", scale_dtype, {128, n});
    acc = b.psum("acc", dst, {128, n});
  }
  InstructionBuilder matmul() {
    return b.emit(Opcode::nc_matmul_mx, 3)
        .tensor("dst", b.view(acc))
        .tensor("stationary", b.view(st))
        .tensor("moving", b.view(mv))
        .tensor("stationary_scale", b.view(st_scale))
        .tensor("moving_scale", b.view(mv_scale));
  }
  std::vector<std::string> issues(Generation generation = Generation::trn3) {
    std::vector<std::string> out;
    for (const LegalityIssue& issue : find_legality_issues(b.program(), config(generation))) {
      out.push_back(format_legality_issue(b.program(), issue));
    }
    return out;
  }
};

TEST(MatmulMxLegality, FullTileIsLegalOnTrn3) {
  MxProgram p;
  p.matmul();
  EXPECT_THAT(p.issues(), ::testing::IsEmpty());
  // Scales packed at partition offset 4 of each quadrant (124 partitions from partition 4) are legal too.
  MxProgram q;
  q.matmul().tensor("stationary_scale", q.b.view(q.st_scale, {Slice::range(4, 128)}));
  EXPECT_THAT(q.issues(), ::testing::IsEmpty());
  // Row tiling: the bottom 32-row tile.
  MxProgram r;
  uint32_t small = r.b.sbuf("small", DType::mxfp4_e2m1, {32, 128});
  uint32_t small_mv = r.b.sbuf("small_mv", DType::mxfp4_e2m1, {32, 512});
  r.b.emit(Opcode::nc_matmul_mx)
      .tensor("dst", r.b.view(r.acc))
      .tensor("stationary", r.b.view(small))
      .tensor("moving", r.b.view(small_mv))
      .tensor("stationary_scale", r.b.view(r.st_scale, {Slice::range(0, 4)}))
      .tensor("moving_scale", r.b.view(r.mv_scale, {Slice::range(0, 4)}))
      .word("tile_position", "[96, 0]")
      .word("tile_size", "[32, 128]");
  EXPECT_THAT(r.issues(), ::testing::IsEmpty());
}

TEST(MatmulMxLegality, WrongGeneration) {
  MxProgram p(Generation::trn2);
  p.matmul();
  auto issues = p.issues(Generation::trn2);
  EXPECT_THAT(issues, ::testing::Contains(HasSubstr("the tensor engine of trn2 does not run nc_matmul_mx [engine-opcode]")));
  EXPECT_THAT(issues, ::testing::Contains(HasSubstr("the Tensor engine of trn2 does not take mxfp8_e4m3 [matmul-mx-dtype]")));
}

TEST(MatmulMxLegality, WrongScaleShapeAndDtype) {
  MxProgram p(Generation::trn3, 512, DType::fp32, 64);
  p.matmul();
  EXPECT_THAT(p.issues(), ::testing::Contains(HasSubstr(
                              "operand 'stationary_scale' is [64, 128] at quadrant offset 0; 128 data partitions need "
                              "at least 100 scale partitions (4 per 32-partition quadrant, at the same offset <= 28) "
                              "and 128 columns [matmul-mx-scale]")));
  MxProgram q;
  q.matmul().tensor("moving_scale", q.b.view(q.mv_scale, {Slice::all(), Slice::range(0, 256)}));
  EXPECT_THAT(q.issues(), ::testing::Contains(HasSubstr("operand 'moving_scale' is [128, 256]")));
  MxProgram r(Generation::trn3, 512, DType::fp32, 128, DType::bf16);
  r.matmul();
  EXPECT_THAT(r.issues(), ::testing::Contains(HasSubstr(
                              "operand 'stationary_scale' must be fp8_e8m0 (float8_e8m0fnu) or uint8, not bf16")));
  // A quadrant offset past 28 leaves no room for 4 scale rows.
  MxProgram s;
  s.matmul().tensor("stationary_scale", s.b.view(s.st_scale, {Slice::range(30, 128)}));
  EXPECT_THAT(s.issues(), ::testing::Contains(HasSubstr("at quadrant offset 30")));
}

TEST(MatmulMxLegality, MovingTooWideAndOtherShapes) {
  MxProgram p(Generation::trn3, 4097);
  p.matmul();
  EXPECT_THAT(p.issues(), ::testing::Contains(HasSubstr(
                              "moving free size 4097 exceeds the 4096 allowed with a fp32 PSUM output on trn3 "
                              "[matmul-moving-size]")));
  MxProgram q(Generation::trn3, 512, DType::fp8_e4m3);
  q.matmul();
  EXPECT_THAT(q.issues(), ::testing::Contains(HasSubstr("nc_matmul_mx writes fp32 or bf16, not fp8_e4m3")));
  MxProgram r;
  uint32_t plain = r.b.sbuf("plain", DType::bf16, {128, 128});
  r.matmul().tensor("stationary", r.b.view(plain)).word("tile_position", "[0, 64]").word("tile_size", "[64, 64]");
  auto issues = r.issues();
  EXPECT_THAT(issues, ::testing::Contains(HasSubstr("operand 'stationary' must be mxfp8_e4m3, mxfp8_e5m2 or mxfp4_e2m1")));
  EXPECT_THAT(issues, ::testing::Contains(HasSubstr("tile_size column must be 128 and tile_position column 0")));
  MxProgram s;
  s.matmul().tensor("stationary", s.b.view(s.st, {Slice::range(0, 48)})).tensor("moving", s.b.view(s.mv, {Slice::range(0, 48)}));
  EXPECT_THAT(s.issues(), ::testing::Contains(HasSubstr("contracts over a multiple of 32 partitions")));
  // Plain nc_matmul refuses the x4 dtypes.
  MxProgram t;
  t.b.emit(Opcode::nc_matmul).tensor("dst", t.b.view(t.acc, {Slice::range(0, 128), Slice::range(0, 512)}))
      .tensor("stationary", t.b.view(t.st)).tensor("moving", t.b.view(t.mv));
  EXPECT_THAT(t.issues(), ::testing::Contains(HasSubstr("mxfp8_e4m3 is an MX x4 dtype; use nc_matmul_mx")));
}

TEST(MatmulMx, TextFormRoundTrip) {
  const char* text = R"(kernel mx
target trn3
sbuf st : mxfp8_e4m3[128, 128]
sbuf mv : float4_e2m1fn_x4[128, 512]
sbuf scales : float8_e8m0fnu[128, 512]
psum acc : bf16[128, 512]
nc_matmul_mx dst=acc, stationary=st, moving=mv, stationary_scale=scales[4:128, 0:128], moving_scale=scales, accumulate=true, tile_position=[0, 0], tile_size=[128, 128]
)";
  Program program = parse_tasm(text, "mx.tasm");
  ASSERT_EQ(program.instructions.size(), 1u);
  EXPECT_EQ(program.instructions[0].opcode, Opcode::nc_matmul_mx);
  EXPECT_EQ(program.instructions[0].engine, Engine::tensor);
  std::string printed = print_tasm(program);
  EXPECT_EQ(print_tasm(parse_tasm(printed, "printed.tasm")), printed);
  EXPECT_THAT(printed, HasSubstr("sbuf mv : mxfp4_e2m1[128, 512]"));
  EXPECT_THAT(printed, HasSubstr("nc_matmul_mx dst=acc, stationary=st, moving=mv, stationary_scale=scales[4:128, 0:128], "
                                 "moving_scale=scales, accumulate=true"));
  std::string json = to_json_lines(program);
  EXPECT_EQ(to_json_lines(parse_json_lines(json, "mx.jsonl")), json);
  EXPECT_THAT(find_legality_issues(program, config(Generation::trn3)), ::testing::IsEmpty());
}

}  // namespace
}  // namespace trnsim::isa
