#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <charconv>
#include <filesystem>

#include "config/config_printer.h"
#include "config_test_util.h"

namespace trnsim {
namespace {

using testing::load_error;
using testing::shipped;
using testing::TempDir;
using ::testing::HasSubstr;

TEST(ShippedConfigs, EveryShippedConfigLoads) {
  for (const char* name : {"trn1", "trn2", "trn3", "whatif/trn2-2x-sbuf.yaml", "whatif/trn3-hbm-8tbps.yaml"}) {
    std::string path = std::string(name).find('/') == std::string::npos ? name : shipped(name);
    EXPECT_EQ(load_error(path), "") << name;
  }
}

TEST(ShippedConfigs, PublishedValuesArrive) {
  const HardwareConfig trn2 = load_config("trn2").hardware;
  EXPECT_EQ(trn2.generation, Generation::trn2);
  EXPECT_EQ(trn2.chip.physical_cores, 8u);
  EXPECT_EQ(trn2.chip.default_logical_core_size, 2u);
  EXPECT_DOUBLE_EQ(trn2.core.tensor.clock_ghz, 2.4);
  EXPECT_DOUBLE_EQ(trn2.core.vector.clock_ghz, 0.96);
  EXPECT_EQ(trn2.core.sbuf.bytes_per_partition, 224u * 1024);
  EXPECT_EQ(trn2.core.psum.banks, 8u);
  EXPECT_DOUBLE_EQ(trn2.core.tensor.rate_factor_by_dtype.at(DType::fp32), 0.25);
  EXPECT_EQ(trn2.hbm.stack_by_core, (std::vector<uint32_t>{0, 0, 1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(trn2.systems.at("trn2-48xlarge").torus_dimensions, (std::vector<uint32_t>{4, 4}));
  EXPECT_EQ(trn2.core.memory_access.conflicts.at(0).scope, ConflictScope::bank);

  const HardwareConfig trn3 = load_config("trn3").hardware;
  EXPECT_EQ(trn3.core.tensor.max_moving_free_size_by_psum_dtype.at(DType::bf16), 8192u);
  EXPECT_EQ(trn3.systems.at("trn3-ultraserver-gen2").chips, 144u);
  EXPECT_EQ(trn3.core.dma.queue_arbitration, QueueArbitration::qos);

  const HardwareConfig trn1 = load_config("trn1").hardware;
  EXPECT_TRUE(trn1.core.tensor.double_row_dtypes.empty());
  EXPECT_EQ(trn1.core.tensor.rate_factor_by_dtype.count(DType::mxfp8_e4m3), 0u);
}

// --- error classes -------------------------------------------------------------------------

TEST(ConfigErrors, UnknownKeyNamesFileLineColumnAndNearestKey) {
  TempDir dir;
  std::string file = dir.write("typo.yaml", "base: trn2\ncore:\n  tensor:\n    clock_gz: 3.0\n");
  EXPECT_EQ(load_error(file),
            file + ":4:5: core.tensor.clock_gz: unknown key 'clock_gz' (did you mean 'clock_ghz'?)");
}

TEST(ConfigErrors, UnknownKeyWithoutPlausibleSuggestion) {
  TempDir dir;
  std::string file = dir.write("x.yaml", "base: trn2\nzzzzzzzz: 1\n");
  EXPECT_EQ(load_error(file), file + ":2:1: zzzzzzzz: unknown key 'zzzzzzzz'");
}

TEST(ConfigErrors, MissingKeyNamesTheMapThatLacksIt) {
  TempDir dir;
  std::string text = "name: x\ndescription: y\ngeneration: trn2\nchip:\n  physical_cores: 8\n";
  std::string file = dir.write("missing.yaml", text);
  EXPECT_EQ(load_error(file), file + ":5:3: chip.default_logical_core_size: missing required key 'default_logical_core_size'");
}

TEST(ConfigErrors, WrongTypes) {
  TempDir dir;
  std::string quoted = dir.write("q.yaml", "base: trn2\ncore:\n  sbuf:\n    partitions: \"128\"\n");
  EXPECT_EQ(load_error(quoted), quoted + ":4:17: core.sbuf.partitions: expected an integer, got a quoted string");
  std::string fraction = dir.write("f.yaml", "base: trn2\ncore:\n  sbuf:\n    partitions: 12.5\n");
  EXPECT_EQ(load_error(fraction), fraction + ":4:17: core.sbuf.partitions: expected an integer, got '12.5'");
  std::string list = dir.write("l.yaml", "base: trn2\ncore:\n  tensor:\n    clock_ghz: [1, 2]\n");
  EXPECT_EQ(load_error(list), list + ":4:16: core.tensor.clock_ghz: expected a number, got a list");
  std::string boolean = dir.write("b.yaml", "base: trn2\ncore:\n  tensor:\n    background_transpose: yes\n");
  EXPECT_EQ(load_error(boolean),
            boolean + ":4:27: core.tensor.background_transpose: expected true or false, got 'yes'");
  std::string scalar_for_map = dir.write("m.yaml", "base: trn2\ncore: 3\n");
  EXPECT_THAT(load_error(scalar_for_map), HasSubstr(":2:7: core: expected a mapping, got '3'"));
}

TEST(ConfigErrors, OutOfRange) {
  TempDir dir;
  std::string file = dir.write("r.yaml", "base: trn2\ncore:\n  tensor:\n    clock_ghz: -1\n");
  EXPECT_EQ(load_error(file), file + ":4:16: core.tensor.clock_ghz: value -1 is out of range [0.01, 20]");
  std::string negative = dir.write("n.yaml", "base: trn2\nchip:\n  physical_cores: -8\n");
  EXPECT_THAT(load_error(negative), HasSubstr("n.yaml:3:19: chip.physical_cores: expected an integer, got '-8'"));
}

TEST(ConfigErrors, BadEnumAndDtypeNames) {
  TempDir dir;
  std::string topology = dir.write("t.yaml", "base: trn2\nsystems:\n  trn2-48xlarge:\n    topology: mesh\n");
  EXPECT_EQ(load_error(topology), topology +
                                      ":4:15: systems.trn2-48xlarge.topology: expected one of 'single', 'torus', "
                                      "'switched', got 'mesh'");
  std::string dtype = dir.write("d.yaml", "base: trn2\ncore:\n  tensor:\n    rate_factor_by_dtype:\n      bf61: 1\n");
  EXPECT_EQ(load_error(dtype),
            dtype + ":5:7: core.tensor.rate_factor_by_dtype.bf61: unknown dtype 'bf61' (did you mean 'bf16'?)");
}

TEST(ConfigErrors, InconsistentValuesPointAtTheKeyTheUserChanged) {
  TempDir dir;
  std::string file = dir.write("psum.yaml", "base: trn2\ncore:\n  psum:\n    banks: 4\n");
  std::string message = load_error(file);
  EXPECT_THAT(message, HasSubstr(file + ":4:12: core.psum.banks: banks x bank_bytes = 8192 differs from "
                                        "bytes_per_partition = 16384"));
  EXPECT_THAT(message, HasSubstr("core.psum.bank_bytes is set at " + shipped("trn2.yaml") + ":"));
}

TEST(ConfigErrors, CrossFieldRules) {
  TempDir dir;
  struct Case {
    std::string yaml;
    std::string expected;
  };
  std::vector<Case> cases = {
      {"hbm:\n  stack_by_core: [0, 0, 1, 1]\n", "hbm.stack_by_core: lists 4 cores but the chip has 8"},
      {"hbm:\n  stack_by_core: [0, 0, 1, 1, 2, 2, 3, 7]\n", "hbm.stack_by_core[7]: stack 7 does not exist"},
      {"chip:\n  supported_logical_core_sizes: [1, 2, 3]\n", "LNC 3 does not divide the 8 physical cores"},
      {"chip:\n  supported_logical_core_sizes: [1]\n", "must be one of chip.supported_logical_core_sizes"},
      {"chip:\n  default_logical_core_size: 4\n", "must be one of chip.supported_logical_core_sizes"},
      {"systems:\n  trn2-48xlarge:\n    torus_dimensions: [4, 3]\n", "the dimensions multiply to 12, not the 16 chips"},
      {"default_system: nope\n", "default_system: 'nope' is not one of the systems listed"},
      {"core:\n  memory_access:\n    psum_engines: [vector, scalar]\n",
       "the Tensor engine writes its results to PSUM and must be listed"},
      {"core:\n  memory_access:\n    conflicts:\n      - {memory: psum, engines: [vector, gpsimd], scope: bank, "
       "condition: always}\n",
       "conflicts[0].engines[1]: gpsimd does not access psum"},
      {"core:\n  vector:\n    lanes: 64\n", "core.vector.lanes: lanes (64) must equal the SBUF partitions (128)"},
      {"core:\n  vector:\n    performance_modes: [2, 4]\n", "the list must start with 1"},
      {"core:\n  tensor:\n    double_row_dtypes: [int8]\n", "double_row_dtypes[0]: a double_row dtype must be"},
      {"core:\n  tensor:\n    max_moving_free_size_by_psum_dtype: {fp32: 8192}\n", "exceed a PSUM partition"},
      {"core:\n  dma:\n    engines_per_core: 12\n", "so each engine serves whole ones"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string file = dir.write("case" + std::to_string(i) + ".yaml", "base: trn2\n" + cases[i].yaml);
    std::string message = load_error(file);
    EXPECT_THAT(message, HasSubstr(cases[i].expected)) << cases[i].yaml;
    EXPECT_THAT(message, HasSubstr(file + ":")) << "error should point into the user's file: " << message;
  }
}

TEST(ConfigErrors, YamlSyntaxAndDuplicateKeys) {
  TempDir dir;
  std::string syntax = dir.write("s.yaml", "name: x\nchip: [1, 2\n");
  EXPECT_THAT(load_error(syntax), HasSubstr(syntax + ":3:1: YAML syntax error"));
  std::string duplicate = dir.write("dup.yaml", "base: trn2\nname: a\nname: b\n");
  EXPECT_EQ(load_error(duplicate), duplicate + ":3:1: name: duplicate key");
  std::string not_a_map = dir.write("list.yaml", "- 1\n- 2\n");
  EXPECT_THAT(load_error(not_a_map), HasSubstr("a config file must be a mapping of keys"));
}

TEST(ConfigErrors, MissingFilesAndBrokenInheritance) {
  TempDir dir;
  EXPECT_THAT(load_error("no-such-config"), HasSubstr("config 'no-such-config' not found"));
  std::string missing_base = dir.write("mb.yaml", "base: nope.yaml\n");
  EXPECT_EQ(load_error(missing_base), missing_base + ":1:7: base: base config 'nope.yaml' not found");
  dir.write("a.yaml", "base: b.yaml\n");
  std::string b = dir.write("b.yaml", "base: a.yaml\n");
  EXPECT_THAT(load_error(dir.path() + "/a.yaml"), HasSubstr("inheritance cycle"));
}

// --- inheritance and overrides ---------------------------------------------------------------

TEST(ConfigInheritance, WhatIfOverridesOnlyWhatItNames) {
  LoadedConfig base = load_config("trn2");
  LoadedConfig whatif = load_config(shipped("whatif/trn2-2x-sbuf.yaml"));
  EXPECT_EQ(whatif.hardware.core.sbuf.bytes_per_partition, 2 * base.hardware.core.sbuf.bytes_per_partition);
  EXPECT_EQ(whatif.hardware.name, "trn2-2x-sbuf");
  std::vector<ConfigLeaf> a = flatten_config(base.hardware), b = flatten_config(whatif.hardware);
  ASSERT_EQ(a.size(), b.size());
  std::vector<std::string> differing;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].value != b[i].value) differing.push_back(a[i].path);
  }
  EXPECT_EQ(differing, (std::vector<std::string>{"name", "description", "core.sbuf.bytes_per_partition"}));
}

TEST(ConfigInheritance, MapsMergeListsReplaceAndChainsWork) {
  TempDir dir;
  dir.write("mid.yaml", "base: trn2\ncore:\n  tensor:\n    rate_factor_by_dtype:\n      fp32: 0.5\n");
  std::string top = dir.write("top.yaml", "base: mid.yaml\nhbm:\n  stack_by_core: [0, 1, 2, 3, 0, 1, 2, 3]\n");
  HardwareConfig config = load_config(top).hardware;
  EXPECT_DOUBLE_EQ(config.core.tensor.rate_factor_by_dtype.at(DType::fp32), 0.5);
  EXPECT_DOUBLE_EQ(config.core.tensor.rate_factor_by_dtype.at(DType::bf16), 1.0);  // merged, not replaced
  EXPECT_EQ(config.hbm.stack_by_core, (std::vector<uint32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
}

TEST(ConfigOverrides, SetChangesAValueAndIsValidatedLikeAFile) {
  HardwareConfig config = load_config("trn2", {"core.tensor.clock_ghz=2.8", "core.vector.performance_modes=[1, 2, 4, 8]",
                                               "core.memory_access.conflicts.1.condition=always"})
                              .hardware;
  EXPECT_DOUBLE_EQ(config.core.tensor.clock_ghz, 2.8);
  EXPECT_EQ(config.core.vector.performance_modes, (std::vector<uint32_t>{1, 2, 4, 8}));
  EXPECT_THAT(load_error("trn2", {"core.vector.performance_modes=[1, 2]"}),
              HasSubstr("--set core.vector.performance_modes=[1, 2] (column 31): core.vector.performance_modes: "
                        "width 512 exceeds lanes x the fastest performance mode (256)"));
  EXPECT_EQ(config.core.memory_access.conflicts[1].condition, ConflictCondition::always);

  EXPECT_EQ(load_error("trn2", {"core.tensr.clock_ghz=3"}),
            "--set core.tensr.clock_ghz=3 (column 6): core.tensr: unknown key 'tensr' (did you mean 'tensor'?)");
  EXPECT_EQ(load_error("trn2", {"core.tensor.clock_gz=3"}),
            "--set core.tensor.clock_gz=3 (column 13): core.tensor.clock_gz: unknown key 'clock_gz' (did you mean "
            "'clock_ghz'?)");
  EXPECT_EQ(load_error("trn2", {"core.tensor.clock_ghz=fast"}),
            "--set core.tensor.clock_ghz=fast (column 23): core.tensor.clock_ghz: expected a number, got 'fast'");
  EXPECT_EQ(load_error("trn2", {"core.tensor.clock_ghz"}), "--set core.tensor.clock_ghz: expected key.path=value");
  EXPECT_THAT(load_error("trn2", {"core.psum.banks=4"}),
              HasSubstr("--set core.psum.banks=4 (column 17): core.psum.banks: banks x bank_bytes"));
  EXPECT_THAT(load_error("trn2", {"core.memory_access.conflicts.5.scope=bank"}),
              HasSubstr("expected a list index below 2, got '5'"));
}

TEST(ConfigOverrides, SetMayAddADtypeToAPerDtypeMap) {
  HardwareConfig config = load_config("trn2", {"core.tensor.rate_factor_by_dtype.fp8_e4m3fn=1.0"}).hardware;
  EXPECT_DOUBLE_EQ(config.core.tensor.rate_factor_by_dtype.at(DType::fp8_e4m3fn), 1.0);
  EXPECT_THAT(load_error("trn2", {"core.tensor.rate_factor_by_dtype.fp9=1.0"}), HasSubstr("unknown dtype 'fp9'"));
}

// --- identity --------------------------------------------------------------------------------

TEST(ConfigHash, StableAndSensitive) {
  LoadedConfig a = load_config("trn2"), b = load_config("trn2");
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.hash.size(), 16u);
  EXPECT_NE(a.hash, load_config("trn2", {"core.tensor.clock_ghz=2.5"}).hash);
  EXPECT_NE(a.hash, load_config("trn3").hash);
  // The hash covers the effective values, not the files they came from.
  LoadedConfig reverted = load_config(shipped("whatif/trn2-2x-sbuf.yaml"),
                                      {"core.sbuf.bytes_per_partition=229376", "name=trn2",
                                       "description=\"AWS Trainium2: 8 x NeuronCore-v3, 96 GiB HBM\""});
  EXPECT_EQ(reverted.hash, a.hash);
  EXPECT_EQ(stable_hash(""), "cbf29ce484222325");  // FNV-1a 64 offset basis
  EXPECT_EQ(stable_hash("a"), "af63dc4c8601ec8c");  // published FNV-1a 64 test vector
}

TEST(ConfigHash, CanonicalYamlReloadsToTheSameConfig) {
  TempDir dir;
  for (const char* name : {"trn1", "trn2", "trn3"}) {
    LoadedConfig original = load_config(name);
    std::string copy = dir.write(std::string(name) + "_copy.yaml", original.canonical_yaml);
    LoadedConfig reloaded = load_config(copy);
    EXPECT_EQ(reloaded.hash, original.hash) << name;
    EXPECT_EQ(reloaded.canonical_yaml, original.canonical_yaml) << name;
  }
}

TEST(ConfigKeys, EveryKeyIsDocumented) {
  std::vector<ConfigKeyDoc> keys = describe_config_keys();
  EXPECT_GT(keys.size(), 80u);
  for (const ConfigKeyDoc& key : keys) EXPECT_FALSE(std::string(key.doc).empty()) << key.path;
  // Every leaf of a real config appears among the documented keys.
  for (const ConfigLeaf& leaf : flatten_config(load_config("trn3").hardware)) {
    bool found = false;
    for (const ConfigKeyDoc& key : keys) {
      std::string pattern = key.path;
      found = found || leaf.path.rfind(pattern, 0) == 0 || pattern.find('<') != std::string::npos ||
              pattern.find("[]") != std::string::npos;
    }
    EXPECT_TRUE(found) << leaf.path;
  }
}

// --- hostile input: non-finite numbers, alias bombs, bad paths (issue 10, items 8 and 9) ------

// Every float key of a shipped config refuses NaN and infinities by --set, with the key named; integer keys
// refuse them as non-integers. (NaN compares false with both range bounds, so a range check alone let it in.)
TEST(ConfigErrors, NonFiniteNumbersAreRejectedInEveryNumericKey) {
  LoadedConfig trn2 = load_config("trn2");
  size_t float_keys = 0;
  for (const ConfigLeaf& leaf : flatten_config(trn2.hardware)) {
    double number = 0;
    const char* end = leaf.value.data() + leaf.value.size();
    auto parsed = std::from_chars(leaf.value.data(), end, number);
    if (parsed.ec != std::errc() || parsed.ptr != end) continue;  // not a number
    std::string path = leaf.path;
    for (size_t i; (i = path.find('[')) != std::string::npos;) {  // conflicts[0].scope -> conflicts.0.scope
      path.replace(i, 1, ".");
      path.erase(path.find(']', i), 1);
    }
    bool is_float = load_error("trn2", {path + "=0.5"}).find("expected an integer") == std::string::npos;
    float_keys += is_float;
    for (const char* bad : {"nan", "NaN", "inf", "-inf"}) {
      std::string error = load_error("trn2", {path + "=" + bad});
      // The message names the key as the config writes it (switch_levels[0].latency_ns).
      EXPECT_THAT(error, HasSubstr(leaf.path + ": expected " + (is_float ? "a finite number" : "an integer") +
                                   ", got '" + bad + "'"))
          << path;
    }
  }
  EXPECT_GT(float_keys, 20u);  // the walk reached the float keys (clocks, latencies, rates, ...)
  TempDir dir;
  std::string file = dir.write("nan.yaml", "base: trn2\ncore:\n  dma:\n    fixed_latency_ns: nan\n");
  EXPECT_EQ(load_error(file), file + ":4:23: core.dma.fixed_latency_ns: expected a finite number, got 'nan'");
}

// yaml-cpp shares aliased nodes; expanding them must stop at a budget, with the place it stopped.
TEST(ConfigErrors, AliasBombIsRefusedWithoutExhaustingMemory) {
  TempDir dir;
  std::string text = "base: trn2\na: &a [x, x, x, x, x, x, x, x, x, x]\n";
  std::string previous = "a";
  for (const char* level : {"b", "c", "d", "e", "f", "g", "h", "i", "j"}) {  // 10^10 values once expanded
    text += std::string(level) + ": &" + level + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", *" : "*") + previous;
    text += "]\n";
    previous = level;
  }
  std::string file = dir.write("bomb.yaml", text);
  EXPECT_THAT(load_error(file), ::testing::MatchesRegex(".*bomb\\.yaml:[0-9]+:[0-9]+: the document expands to more "
                                                        "than [0-9]+ values \\(YAML aliases nested too deeply\\?\\)"));
  // Modest alias use still loads.
  std::string fine = dir.write("fine.yaml", "base: trn2\ndescription: &d shared text\nname: *d\n");
  EXPECT_EQ(load_error(fine), "");
  std::string deep = dir.write("deep.yaml", "base: trn2\nx: " + std::string(300, '[') + std::string(300, ']') + "\n");
  EXPECT_THAT(load_error(deep), HasSubstr("deep.yaml:2:"));
}

// Names the file system refuses are errors naming the problem, not uncaught filesystem_errors.
TEST(ConfigErrors, OverlongNamesAndSymlinkLoopsAreClearErrors) {
  TempDir dir;
  std::string long_name(300, 'a');
  EXPECT_THAT(load_error(long_name), HasSubstr("(300 bytes)': File name too long"));
  EXPECT_THAT(load_error(dir.path() + "/" + long_name + ".yaml"), HasSubstr("File name too long"));
  std::string long_base = dir.write("lb.yaml", "base: " + long_name + "\n");
  EXPECT_THAT(load_error(long_base), HasSubstr("lb.yaml:1:7: base: base config"));
  EXPECT_THAT(load_error(long_base), HasSubstr("File name too long"));
  std::filesystem::create_symlink("loop2.yaml", dir.path() + "/loop1.yaml");
  std::filesystem::create_symlink("loop1.yaml", dir.path() + "/loop2.yaml");
  EXPECT_THAT(load_error(dir.path() + "/loop1.yaml"), HasSubstr("Too many levels of symbolic links"));
  std::string loop_base = dir.write("loop_base.yaml", "base: loop1.yaml\n");
  EXPECT_THAT(load_error(loop_base), HasSubstr("loop_base.yaml:1:7: base: base config"));
  EXPECT_THAT(load_error(loop_base), HasSubstr("Too many levels of symbolic links"));
}

// What the simulator can hold is part of the range: 2^34 bytes per partition passed validation and then
// failed to allocate.
TEST(ConfigErrors, OnChipMemoryBeyondTheSimulatorIsOutOfRange) {
  EXPECT_THAT(load_error("trn2", {"core.sbuf.bytes_per_partition=17179869184"}),
              HasSubstr("core.sbuf.bytes_per_partition: value 17179869184 is out of range [1, 67108864]"));
  EXPECT_THAT(load_error("trn2", {"core.psum.bytes_per_partition=17179869184"}),
              HasSubstr("core.psum.bytes_per_partition: value 17179869184 is out of range [1, 67108864]"));
}

// Issue 42 (found by config_fuzzer): text with line breaks, tabs or other control characters is printed escaped, so
// the canonical YAML reads back as the same config (a raw line break in a double-quoted scalar is folded).
TEST(ConfigHash, ControlCharactersInTextSurviveTheCanonicalYaml) {
  TempDir dir;
  const std::string user = dir.write("odd.yaml", "base: trn2\ndescription: \"\\n\\nline\\ttab\\x01\\x7f \\\\ \\\" end\\n\"\n");
  LoadedConfig original = load_config(user);
  EXPECT_EQ(original.hardware.description, std::string("\n\nline\ttab\x01\x7f \\ \" end\n"));
  LoadedConfig reloaded = load_config(dir.write("odd_copy.yaml", original.canonical_yaml));
  EXPECT_EQ(reloaded.hardware.description, original.hardware.description);
  EXPECT_EQ(reloaded.hash, original.hash);
}

}  // namespace
}  // namespace trnsim
