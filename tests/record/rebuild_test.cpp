// replay --rebuild (record/replay.h): launches carrying their kernel invocation are built again for
// the target; on the recording's own config that reproduces the recorded programs and times bit for
// bit; on a target with another LNC the programs and times change; launches without an invocation
// are re-timed as recorded and counted; a kernel the target cannot build is a ReplayError naming
// the launch, the op and the reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "config/config_loader.h"
#include "kernels/kernel_invocation.h"
#include "kernels/matmul.h"
#include "kernels/reduction.h"
#include "kernels/spec_json.h"
#include "record/launch_timing.h"
#include "record/recording_reader.h"
#include "record/recording_writer.h"
#include "record/replay.h"
#include "record_test_support.h"

namespace trnsim::record {
namespace {

namespace fs = std::filesystem;

using testing_support::trn2;

// A fresh directory per test, removed afterwards.
struct TempDir : testing_support::TempDir {
  TempDir() : testing_support::TempDir("trnsim-rebuild-") {}
};

using testing_support::raw;

kernels::KernelInvocation matmul_invocation() {
  kernels::MatmulSpec mm;
  mm.m = 512, mm.k = 512, mm.n = 1024, mm.output_dtype = DType::bf16;
  return kernels::invocation(kernels::matmul_program, mm);
}

// A kernel launch as the device makes it: built from its invocation for the config's LNC, simulated
// with values; `with_invocation` false drops the invocation (a recording made before they were).
Launch kernel_launch(const std::string& op, const kernels::KernelInvocation& invocation, bool with_invocation) {
  const HardwareConfig& hw = trn2().hardware;
  Launch launch;
  launch.op = op;
  launch.shapes = {{512, 512}, {512, 1024}};
  launch.dtype = "BFloat16";
  launch.key = op + "|test";
  launch.programs = kernels::build_parts(invocation, hw, kernels::logical_core_size(hw));
  if (with_invocation) launch.invocation = invocation;
  set_kernel_result(launch, simulate_kernel(raw(launch.programs), hw, trn2().hash, false, false, nullptr).stats);
  return launch;
}

// A copy and two matmul launches (one program, two launches); the matmuls carry their invocation
// unless not asked to.
std::vector<Launch> record_with(const std::string& dir, const std::vector<Launch>& kernels) {
  const LoadedConfig& config = trn2();
  RecordingHeader header;
  header.config = {config.hardware.name, "trn2", config.source_file, {}, config.hash};
  RecordingWriter writer(dir, header, false);
  std::vector<Launch> launches;
  Launch copy;
  copy.op = "copy host->device";
  copy.kind = "copy";
  copy.shapes = {{512, 512}};
  copy.dtype = "BFloat16";
  copy.transfer_bytes = {512 * 512 * 2};
  copy.host_link_bytes = 512 * 512 * 2;
  copy.ns = transfers_ns(config.hardware, copy.transfer_bytes);
  launches.push_back(copy);
  for (const Launch& k : kernels) launches.push_back(k);
  double clock = 0;
  for (Launch& launch : launches) {
    launch.start_ns = clock;
    clock += launch.ns;
    writer.add(launch);
  }
  writer.close(true, "");
  return launches;
}

std::vector<Launch> record_matmuls(const std::string& dir, bool with_invocation) {
  const Launch mm = kernel_launch("mm", matmul_invocation(), with_invocation);
  return record_with(dir, {mm, mm});
}

ReplayOptions rebuild() {
  ReplayOptions options;
  options.rebuild = true;
  return options;
}

TEST(RecordingFormat, AKernelLaunchCarriesItsInvocation) {
  TempDir tmp;
  record_matmuls(tmp / "r.trnrec", true);
  std::ifstream in(tmp / "r.trnrec/manifest.jsonl");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\"kernel\":{\"name\":\"matmul\",\"spec\":{"), std::string::npos) << text.str();
  const Recording read = read_recording(tmp / "r.trnrec");
  EXPECT_FALSE(read.launches[0].invocation.has_value());  // a copy has none
  ASSERT_TRUE(read.launches[1].invocation.has_value());
  EXPECT_EQ(*read.launches[1].invocation, matmul_invocation());
}

TEST(Rebuild, OnItsOwnConfigBuildsTheRecordedProgramsAndTimesBitForBit) {
  TempDir tmp;
  const std::vector<Launch> written = record_matmuls(tmp / "r.trnrec", true);
  const Recording read = read_recording(tmp / "r.trnrec");
  const ReplayResult result = replay(read, trn2().hardware, trn2().hash, rebuild());
  ASSERT_EQ(result.launches.size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(result.launches[i].ns, written[i].ns) << i;
    EXPECT_EQ(result.launches[i].busy_ns, written[i].busy_ns) << i;
  }
  EXPECT_EQ(result.total_ns, result.recorded_total_ns);
  EXPECT_EQ(result.rebuilt, 2u);
  EXPECT_EQ(result.rebuilt_as_recorded, 2u);
  EXPECT_EQ(result.not_rebuilt, 0u);
  EXPECT_EQ(result.builds, 1u);  // one invocation, built once
  EXPECT_EQ(result.simulations, 1u);
  EXPECT_EQ(result.launches[1].program_hashes, read.launches[1].program_hashes);
}

TEST(Rebuild, AnotherLncBuildsOtherProgramsWhereRetimingCannotTell) {
  TempDir tmp;
  const std::vector<Launch> written = record_matmuls(tmp / "r.trnrec", true);
  ASSERT_EQ(written[1].programs.size(), 2u);  // trn2: LNC 2
  const Recording read = read_recording(tmp / "r.trnrec");
  const LoadedConfig lnc1 = load_config("trn2", {"chip.default_logical_core_size=1"});
  // Re-timing keeps the two recorded per-core programs, so LNC moves nothing.
  const ReplayResult retimed = replay(read, lnc1.hardware, lnc1.hash, {});
  EXPECT_EQ(retimed.launches[1].ns, written[1].ns);
  // Rebuilt: the whole matmul on one core, slower.
  const ReplayResult rebuilt = replay(read, lnc1.hardware, lnc1.hash, rebuild());
  EXPECT_EQ(rebuilt.launches[1].programs.size(), 1u);
  EXPECT_GT(rebuilt.launches[1].ns, written[1].ns);
  EXPECT_EQ(rebuilt.launches[1].ns, rebuilt.launches[2].ns);
  EXPECT_EQ(rebuilt.rebuilt, 2u);
  EXPECT_EQ(rebuilt.rebuilt_as_recorded, 0u);
  EXPECT_EQ(rebuilt.launches[0].ns, written[0].ns);  // the copy: same host link
  ASSERT_FALSE(rebuilt.notes.empty());
  EXPECT_NE(rebuilt.notes.back().find("2 kernel launches rebuilt for trn2"), std::string::npos) << rebuilt.notes.back();
}

TEST(Rebuild, LaunchesWithoutAnInvocationAreRetimedAsRecordedAndCounted) {
  TempDir tmp;
  const std::vector<Launch> written = record_matmuls(tmp / "old.trnrec", false);
  const Recording read = read_recording(tmp / "old.trnrec");
  const LoadedConfig lnc1 = load_config("trn2", {"chip.default_logical_core_size=1"});
  const ReplayResult result = replay(read, lnc1.hardware, lnc1.hash, rebuild());
  EXPECT_EQ(result.rebuilt, 0u);
  EXPECT_EQ(result.not_rebuilt, 2u);
  EXPECT_EQ(result.launches[1].programs.size(), 2u);  // as recorded
  EXPECT_EQ(result.launches[1].ns, written[1].ns);
  ASSERT_FALSE(result.notes.empty());
  EXPECT_NE(result.notes.back().find("2 kernel launches carry no kernel invocation"), std::string::npos)
      << result.notes.back();
}

TEST(Rebuild, AKernelTheTargetCannotBuildNamesEveryLaunchItsOpAndTheReason) {
  TempDir tmp;
  // Recorded with an invocation the library declines (argmax over two dims), as a recording from
  // a trnsim whose kernels took more would hold.
  kernels::ReduceSpec argmax{{512, 64}, {0, 1}, kernels::ReduceOp::argmax, false, DType::fp32, DType::int32};
  Launch declined = kernel_launch("mm", matmul_invocation(), true);
  declined.op = "argmax";
  declined.invocation = kernels::invocation(kernels::reduce_program, argmax);
  record_with(tmp / "r.trnrec", {declined, declined});
  const Recording read = read_recording(tmp / "r.trnrec");
  try {
    replay(read, trn2().hardware, trn2().hash, rebuild());
    FAIL() << "rebuilt a kernel the library declines";
  } catch (const ReplayError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 kernel launch(es) cannot be rebuilt for config 'trn2'"), std::string::npos) << what;
    EXPECT_NE(what.find("launch 1 (argmax [512, 512], [512, 1024]): kernel 'reduce' cannot be built for config "
                        "'trn2': argmax/argmin reduce exactly one dim"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("launch 2 (argmax"), std::string::npos) << what;
  }
  // Without --rebuild the recorded programs replay.
  EXPECT_NO_THROW(replay(read, trn2().hardware, trn2().hash, {}));
}

TEST(Rebuild, AnUnreadableInvocationIsAClearError) {
  TempDir tmp;
  Launch launch = kernel_launch("mm", matmul_invocation(), true);
  launch.invocation->spec["m"] = "five hundred";
  record_with(tmp / "r.trnrec", {launch});
  const Recording read = read_recording(tmp / "r.trnrec");
  try {
    replay(read, trn2().hardware, trn2().hash, rebuild());
    FAIL() << "rebuilt an unreadable invocation";
  } catch (const ReplayError& e) {
    EXPECT_NE(std::string(e.what()).find("launch 1 (mm [512, 512], [512, 1024]): kernel 'matmul' has an invocation "
                                         "this trnsim cannot read"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace trnsim::record
