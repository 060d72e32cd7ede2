"""The `trnsim config` commands as a user runs them: output, exit codes, error messages."""
import pytest
import yaml

from conftest import REPO_ROOT

CONFIGS = REPO_ROOT / "configs"

BAD_CONFIGS = {
    # name: (file text, expected stderr after "error: <file>")
    "unknown_key": ("base: trn2\ncore:\n  tensor:\n    clock_gz: 3.0\n",
                    ":4:5: core.tensor.clock_gz: unknown key 'clock_gz' (did you mean 'clock_ghz'?)"),
    "wrong_type": ("base: trn2\ncore:\n  sbuf:\n    partitions: many\n",
                   ":4:17: core.sbuf.partitions: expected an integer, got 'many'"),
    "out_of_range": ("base: trn2\ncore:\n  tensor:\n    clock_ghz: 0\n",
                     ":4:16: core.tensor.clock_ghz: value 0 is out of range [0.01, 20]"),
    "inconsistent": ("base: trn2\ncore:\n  psum:\n    bank_bytes: 1024\n",
                     ":4:17: core.psum.bank_bytes: banks x bank_bytes = 8192 differs from bytes_per_partition = 16384"),
    "missing_key": ("name: x\ndescription: y\ngeneration: trn2\n",
                    ":1:1: chip: missing required key 'chip'"),
    "syntax": ("name: [x\n", ":2:1: YAML syntax error"),
    "bad_enum": ("base: trn2\ngeneration: trn4\n",
                 ":2:13: generation: expected one of 'trn1', 'trn2', 'trn3', got 'trn4'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_bad_config_reports_file_line_and_exits_1(case, tmp_path, run_trnsim):
    text, expected = BAD_CONFIGS[case]
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    result = run_trnsim("config", "validate", path)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.startswith(f"error: {path}{expected}"), result.stderr


def test_validate_all_shipped_configs(run_trnsim):
    files = sorted(CONFIGS.glob("*.yaml")) + sorted(CONFIGS.glob("whatif/*.yaml"))
    assert len(files) >= 5
    result = run_trnsim("config", "validate", *files)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok  ") == len(files)


def test_validate_reports_every_bad_file_and_still_checks_the_rest(tmp_path, run_trnsim):
    bad = tmp_path / "bad.yaml"
    bad.write_text("base: trn2\nfoo: 1\n")
    result = run_trnsim("config", "validate", bad, "trn2")
    assert result.returncode == 1
    assert "unknown key 'foo'" in result.stderr
    assert "ok  " in result.stdout and "trn2" in result.stdout


def test_show_prints_loadable_yaml_with_derived_figures(tmp_path, run_trnsim):
    result = run_trnsim("config", "show", "trn2")
    assert result.returncode == 0, result.stderr
    document = yaml.safe_load(result.stdout)
    assert document["core"]["tensor"]["clock_ghz"] == 2.4
    derived = document["derived"]
    assert derived["peak_tflops_per_core"]["bf16"] == pytest.approx(128 * 128 * 2 * 2.4e9 / 1e12, abs=0.01)
    assert derived["peak_tflops_per_chip"]["fp8_e4m3"] == pytest.approx(8 * 2 * 78.6432, abs=0.01)
    assert derived["sbuf_bytes_per_chip"] == 224 * 2**20
    assert len(document["config_hash"]) == 16
    # --effective-only output is itself a valid config with the same hash.
    effective = run_trnsim("config", "show", "trn2", "--effective-only").stdout
    copy = tmp_path / "copy.yaml"
    copy.write_text(effective)
    again = yaml.safe_load(run_trnsim("config", "show", copy).stdout)
    assert again["config_hash"] == document["config_hash"]


def test_show_with_set_override(run_trnsim):
    result = run_trnsim("config", "show", "trn2", "--set", "core.tensor.clock_ghz=1.2", "--set", "chip.physical_cores=4",
                        "--set", "hbm.stack_by_core=[0, 1, 2, 3]")
    assert result.returncode == 0, result.stderr
    derived = yaml.safe_load(result.stdout)["derived"]
    assert derived["peak_tflops_per_core"]["bf16"] == pytest.approx(78.6432 / 2, abs=0.01)
    assert derived["peak_tflops_per_chip"]["bf16"] == pytest.approx(4 * 78.6432 / 2, abs=0.01)

    bad = run_trnsim("config", "show", "trn2", "--set", "core.tensor.clock_ghz=x")
    assert bad.returncode == 1
    assert bad.stderr.startswith("error: --set core.tensor.clock_ghz=x (column 23): core.tensor.clock_ghz: expected a number")


def test_diff_lists_changed_values(run_trnsim):
    result = run_trnsim("config", "diff", "trn2", CONFIGS / "whatif" / "trn2-2x-sbuf.yaml")
    assert result.returncode == 0, result.stderr
    assert "core.sbuf.bytes_per_partition: 229376 -> 458752" in result.stdout
    assert "3 values differ" in result.stdout
    same = run_trnsim("config", "diff", "trn2", "trn2", "--exit-code")
    assert same.returncode == 0 and "identical" in same.stdout
    different = run_trnsim("config", "diff", "trn2", "trn2", "--set-b", "hbm.bandwidth_gbps=3000", "--exit-code")
    assert different.returncode == 1
    assert "hbm.bandwidth_gbps: 2900 -> 3000" in different.stdout


def test_summary_shows_all_three_generations(run_trnsim):
    result = run_trnsim("config", "summary", "trn1", "trn2", "trn3")
    assert result.returncode == 0, result.stderr
    lines = {line.split("  ")[0]: line for line in result.stdout.splitlines()}
    assert "91.8" in lines["bf16 TFLOPS per core"] and "78.6" in lines["bf16 TFLOPS per core"]
    assert "314.6" in lines["mxfp8_e4m3 TFLOPS per core"]


@pytest.mark.parametrize("args", [["--help"], ["config", "--help"], ["config", "validate", "--help"],
                                  ["config", "show", "--help"], ["config", "diff", "--help"],
                                  ["config", "summary", "--help"], ["config", "keys", "--help"]])
def test_help_on_every_command(args, run_trnsim):
    result = run_trnsim(*args)
    assert result.returncode == 0
    assert "Usage" in result.stdout or "usage" in result.stdout.lower()


def test_usage_errors_exit_non_zero(run_trnsim):
    assert run_trnsim().returncode != 0
    assert run_trnsim("config", "show").returncode != 0
    missing = run_trnsim("config", "show", "no-such-config")
    assert missing.returncode == 1 and "config 'no-such-config' not found" in missing.stderr
