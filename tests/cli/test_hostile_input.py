"""A hostile pass over the CLI (issue 10, items 8, 9, 11): every bad input is `error: ...` and exit 1 —
never a terminate, an uncaught exception, a hang or lost data."""
import os

import numpy as np
import pytest

from conftest import REPO_ROOT

KERNELS = REPO_ROOT / "examples" / "kernels"
MATMUL = KERNELS / "matmul_128x128x512.tasm"

HEADER = "kernel k\ntarget trn2\nhbm x : fp32[128, 64] input\nhbm y : fp32[128, 64] output\nsbuf s : fp32[128, 64]\n"


def assert_clean_error(result, *fragments):
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert result.stderr.startswith("error: "), result.stderr
    for crash in ("terminate", "sc_report", "filesystem_error", "what():", "Aborted"):
        assert crash not in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture
def kernel(tmp_path):
    def write(body, name="k.tasm"):
        path = tmp_path / name
        path.write_text(HEADER + body)
        return path
    return write


@pytest.fixture
def matmul_inputs(tmp_path):
    rng = np.random.default_rng(5)
    np.save(tmp_path / "a_t.npy", rng.standard_normal((128, 128), dtype=np.float32))
    np.save(tmp_path / "b.npy", rng.standard_normal((128, 512), dtype=np.float32))
    return ["--input", f"a_t={tmp_path / 'a_t.npy'}", "--input", f"b={tmp_path / 'b.npy'}"]


def mode_args(tmp_path, timing_only):
    """--timing-only, or the --input for the kernel fixture's x tensor (zeros, fp32 [128, 64])."""
    if timing_only:
        return ["--timing-only"]
    np.save(tmp_path / "x.npy", np.zeros((128, 64), np.float32))
    return ["--input", f"x={tmp_path / 'x.npy'}"]


# ---- item 8: errors raised during the simulation ----

@pytest.mark.parametrize("timing_only", [True, False])
def test_unsatisfiable_sem_wait_is_a_clean_error(run_trnsim, kernel, tmp_path, timing_only):
    mode = mode_args(tmp_path, timing_only)
    result = run_trnsim("run", kernel("sem_wait engine=sync, sem=0, value=1\n"), *mode)
    assert_clean_error(result, "sem_wait: waits for semaphore 0 to reach 1")
    result = run_trnsim("run", kernel("sem_wait engine=sync, sem=0, value=1\n"), *mode, "--cores", "0", "1")
    assert_clean_error(result, "sem_wait: waits for semaphore 0 to reach 1")


@pytest.mark.parametrize("timing_only", [True, False])
def test_out_of_range_dma_queue_is_a_clean_error(run_trnsim, kernel, tmp_path, timing_only):
    mode = mode_args(tmp_path, timing_only)
    result = run_trnsim("run", kernel("dma_copy dst=s, src=x, queue=99\n"), *mode)
    assert_clean_error(result, "DMA queue 99 does not exist (the config has 16 per engine)")


def test_shape_rules_hold_in_both_modes(run_trnsim, kernel, tmp_path):
    # A rule that only the interpreter checked: values mode ended in `terminate ... sc_report`,
    # --timing-only accepted the program.
    path = kernel("sbuf t : fp32[128, 32]\ntensor_copy dst=t, src=s\n")
    values = run_trnsim("run", path, *mode_args(tmp_path, False))
    timing = run_trnsim("run", path, *mode_args(tmp_path, True))
    for result in (values, timing):
        assert_clean_error(result, "tensor_copy: dst is [128, 32] but src is [128, 64]", "[operand-shape]")


def test_hbm_tensor_larger_than_hbm(run_trnsim, tmp_path):
    path = tmp_path / "big.tasm"
    path.write_text("kernel big\ntarget trn2\nhbm a : fp32[1000000, 100000] input\nsbuf s : fp32[128, 64]\n"
                    "dma_copy dst=s, src=a[0:128, 0:64]\n")
    assert_clean_error(run_trnsim("run", path, "--timing-only"),
                       "HBM tensor 'a' has 400000000000 bytes, more than the chip's HBM capacity", "[hbm-capacity]")


def test_sizes_beyond_the_simulator(run_trnsim):
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--set", "core.sbuf.bytes_per_partition=17179869184"),
                       "core.sbuf.bytes_per_partition: value 17179869184 is out of range [1, 67108864]")
    assert_clean_error(run_trnsim("bench", "matmul", "--m", "100000", "--k", "100000", "--n", "100000"),
                       "needs about 119858704 nc_matmul instructions", "at most 8388608")


@pytest.mark.parametrize("source", ["directory", "/dev/zero", "oversized"])
def test_input_that_is_not_an_npy_file(run_trnsim, matmul_inputs, tmp_path, source):
    if source == "directory":
        path, fragment = tmp_path, "not a regular file (a directory)"
    elif source == "/dev/zero":
        path, fragment = "/dev/zero", "not a regular file (a device, pipe or socket)"
    else:
        # Larger than any .npy of a_t's shape can be: refused before it is read.
        path, fragment = tmp_path / "huge.npy", "more than an .npy of the tensor's shape can have"
        with open(path, "wb") as f:
            f.truncate(64 << 20)
    result = run_trnsim("run", MATMUL, "--input", f"a_t={path}", *matmul_inputs[2:])
    assert_clean_error(result, str(path), fragment)


def test_config_paths_the_file_system_refuses(run_trnsim, tmp_path):
    assert_clean_error(run_trnsim("config", "show", "a" * 300), "File name too long")
    (tmp_path / "loop1.yaml").symlink_to(tmp_path / "loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to(tmp_path / "loop1.yaml")
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--config", tmp_path / "loop1.yaml"),
                       "Too many levels of symbolic links")
    base = tmp_path / "long_base.yaml"
    base.write_text("base: " + "b" * 300 + "\n")
    assert_clean_error(run_trnsim("config", "show", base), f"{base}:1:7: base: base config", "File name too long")


def test_yaml_alias_bomb(run_trnsim, tmp_path):
    lines = ["base: trn2", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for previous, level in zip("abcdefghi", "bcdefghij"):
        lines.append(f"{level}: &{level} [" + ", ".join([f"*{previous}"] * 10) + "]")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    result = run_trnsim("config", "validate", bomb)
    assert_clean_error(result, f"{bomb}:", "the document expands to more than")


# ---- item 9: non-finite numbers ----

def test_nan_latency_is_rejected(run_trnsim, tmp_path):
    config = tmp_path / "nan.yaml"
    config.write_text("base: trn2\ncore:\n  dma:\n    fixed_latency_ns: nan\n")
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--config", config),
                       f"{config}:4:23: core.dma.fixed_latency_ns: expected a finite number, got 'nan'")
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--set", "hbm.latency_ns=nan"),
                       "hbm.latency_ns: expected a finite number, got 'nan'")


def test_config_load_bench_reports_each_step(run_trnsim):
    result = run_trnsim("bench", "config-load", "--keys", "1000")
    assert result.returncode == 0, result.stderr
    assert "config load of 1000 keys: parse" in result.stdout and "unknown key 'generated_key_0'" in result.stdout


# ---- item 11: files the run writes ----

@pytest.mark.parametrize("flag", ["--stats", "--trace"])
def test_stats_or_trace_on_the_output_file_is_refused(run_trnsim, matmul_inputs, tmp_path, flag):
    out = tmp_path / "c.npy"
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.npy"
    link.symlink_to(out)
    for spelling in ("c.npy", "./c.npy", "sub/../c.npy", str(out), "link.npy"):
        result = run_trnsim("run", MATMUL, *matmul_inputs, "--output", "c=c.npy", flag, spelling, cwd=tmp_path)
        assert_clean_error(result, "is already the file of another output (--output c)")
        assert not out.exists()
    # --stats and --trace on one file.
    result = run_trnsim("run", MATMUL, *matmul_inputs, "--stats", "s.json", "--trace", "./s.json", cwd=tmp_path)
    assert_clean_error(result, "is already the file of another output (--stats)")


def test_two_outputs_spelled_differently(run_trnsim, tmp_path):
    kernel = tmp_path / "two.tasm"
    kernel.write_text("kernel two\ntarget trn2\nhbm x : fp32[128, 64] input\nhbm y : fp32[128, 64] output\n"
                      "hbm z : fp32[128, 64] output\nsbuf s : fp32[128, 64]\n"
                      "dma_copy dst=s, src=x\ndma_copy dst=y, src=s\ndma_copy dst=z, src=s\n")
    np.save(tmp_path / "x.npy", np.ones((128, 64), np.float32))
    result = run_trnsim("run", kernel, "--input", "x=x.npy", "--output", "y=f.npy", "--output", "z=./f.npy",
                        cwd=tmp_path)
    assert_clean_error(result, "./f.npy is already the file of another output (--output y)")


@pytest.mark.parametrize("flag", ["--stats", "--trace"])
def test_existing_stats_or_trace_needs_force(run_trnsim, matmul_inputs, tmp_path, flag):
    target = tmp_path / "keep.json"
    target.write_text("precious")
    assert_clean_error(run_trnsim("run", MATMUL, *matmul_inputs, flag, target), "exists (pass --force to overwrite)")
    assert target.read_text() == "precious"
    result = run_trnsim("run", MATMUL, *matmul_inputs, flag, target, "--force")
    assert result.returncode == 0, result.stderr
    assert target.read_text().startswith("{")


@pytest.mark.parametrize("flag", ["--stats", "--trace", "--output"])
def test_unwritable_destination_fails_before_simulating(run_trnsim, matmul_inputs, tmp_path, flag):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for path, fragment in ((tmp_path / "no" / "such" / "dir" / "f", "cannot be created (no folder"),
                               (tmp_path, "is a directory"),
                               (locked / "f", "cannot be created in")):
            if fragment == "cannot be created in" and os.geteuid() == 0:
                continue  # root writes anywhere
            value = f"c={path}" if flag == "--output" else str(path)
            result = run_trnsim("run", MATMUL, *matmul_inputs, flag, value)
            assert_clean_error(result, str(path), fragment)
            assert "ran " not in result.stdout  # refused before the simulation
    finally:
        locked.chmod(0o700)


def test_duplicate_cores(run_trnsim):
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--cores", "0", "0"), "--cores lists core 0 twice")
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", "--cores", "1", "0", "1"),
                       "--cores lists core 1 twice")


def test_bench_checks_its_files_like_run(run_trnsim, tmp_path):
    point = ["bench", "matmul", "--m", "128", "--k", "128", "--n", "512"]
    assert_clean_error(run_trnsim(*point, "--stats", "s.json", "--trace", "./s.json", cwd=tmp_path),
                       "is already the file of another output (--stats)")
    assert_clean_error(run_trnsim(*point, "--stats", tmp_path / "no" / "s.json"), "cannot be created (no folder")
    assert_clean_error(run_trnsim(*point, "--emit-tasm", tmp_path), "is a directory")
    result = run_trnsim(*point, "--stats", "s.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert_clean_error(run_trnsim(*point, "--stats", "s.json", cwd=tmp_path), "exists (pass --force to overwrite)")


@pytest.mark.parametrize("args,message", [
    (["--sizes", "1K:1G:x"], "--sizes: factor 'x' is not a number"),
    (["--sizes", "1K:1G:1"], "--sizes: the factor must be above 1"),
    (["--sizes", "4K,1Q"], "--sizes: '1Q' is not a size"),
    (["--sizes", "1K:2K:3:4"], "--sizes: FROM:TO or FROM:TO:FACTOR"),
    (["--group", "0-x"], "--group: 'x' in '0-x' is not a rank"),
    (["--group", "0,,3"], "--group: '' in '0,,3' is not a rank"),
    (["--group", "99999999999"], "is not a rank"),
    (["--group", "5-2"], "--group: '5-2' runs backwards"),
    (["--group", "0,16"], "rank 16 is not in the system (16 ranks)"),
    (["--group", "0,3,0"], "rank 0 is in the group twice"),
    (["--algorithm", "fast"], "no collective algorithm 'fast'"),
    (["--op", "broadcast", "--group", "0-3", "--root", "7"], "root rank 7 is not in the group"),
    (["--op", "broadcast", "--root", "-2"], "--root: -2 is not a rank"),
    (["--op", "all_reduce", "--root", "3"], "a root is for broadcast and reduce, not all_reduce"),
    (["--system", "nope", "--config", "trn2"], "config trn2 has no system 'nope' (it has: single-chip"),
])
def test_bench_collective_bad_arguments(run_trnsim, args, message):
    system = [] if "--system" in args else ["--system", "trn2-16"]
    assert_clean_error(run_trnsim("bench", "collective", *system, *args), message)


def test_bench_collective_broadcast_takes_its_root(run_trnsim):
    """--root picks the broadcast's root. In the group of chips 0, 1 and 5 of the 4 x 4 torus, chip 1 neighbours
    both others while chip 0 is two hops from chip 5: a direct broadcast (mesh) from chip 1 is one NeuronLink hop
    latency shorter than from chip 0, the group's first rank and the default root."""
    def time_us(*extra):
        out = run_trnsim("bench", "collective", "--system", "trn2-16", "--op", "broadcast", "--sizes", "64K",
                         "--group", "0,1,5", *extra)
        assert out.returncode == 0, out.stderr
        row = out.stdout.strip().splitlines()[-1].split()
        assert row[0] == "64K" and row[1] == "mesh"
        return float(row[2])
    default, first, middle = time_us(), time_us("--root", "0"), time_us("--root", "1")
    assert default == first
    assert middle < first


# ---- issue 42, B1-B4: bench collective's sizes, groups and empty options ----

@pytest.mark.parametrize("sizes,message", [
    ("nan", "--sizes: 'nan' is not a size (a finite number of bytes"),
    ("inf", "--sizes: 'inf' is not a size"),
    ("-inf", "--sizes: '-inf' is not a size"),
    ("4K,infK", "--sizes: 'infK' is not a size"),
    ("18446744073709551616", "--sizes: '18446744073709551616' is 2^64 bytes or more"),
    ("17179869184G", "--sizes: '17179869184G' is 2^64 bytes or more"),
    ("0.5", "--sizes: '0.5' is less than one byte"),
    ("1K:1G:nan", "--sizes: factor 'nan' is not a finite number"),
    ("1K:1G:inf", "--sizes: factor 'inf' is not a finite number"),
    ("1K:nan:2", "--sizes: 'nan' is not a size"),
    # B2: ~1.4e8 identical rows before; refused from the count before any point is built.
    ("1K:1G:1.0000001", "--sizes: '1K:1G:1.0000001' makes 138629443 sizes, more than the 1024 one command runs"),
    ("1:64:1.5", "--sizes: factor 1.5 does not step from 1 bytes to a larger whole number of bytes"),
    (",".join(["4K"] * 1025), "--sizes: 1025 sizes, more than the 1024 one command runs"),
])
def test_bench_collective_sizes_that_are_not_sizes(run_trnsim, sizes, message):
    result = run_trnsim("bench", "collective", "--system", "trn2-16", "--sizes", sizes)
    assert_clean_error(result, message)
    assert "algorithm" not in result.stdout  # refused before the first point


@pytest.mark.parametrize("group,message", [
    # B3: the range was built (bad_alloc, or a uint32 loop that never ends) before it was checked.
    ("0-999999999", "--group: rank 999999999 is not in the system (16 ranks)"),
    ("0-4294967295", "--group: rank 4294967295 is not in the system (16 ranks)"),
    ("0-15,0-15", "--group: rank 0 is in the group twice"),
    ("0,", "--group: '' in '0,' is not a rank"),
])
def test_bench_collective_group_checked_against_the_system(run_trnsim, group, message):
    assert_clean_error(run_trnsim("bench", "collective", "--system", "trn2-16", "--sizes", "4K", "--group", group),
                       message)


def test_bench_collective_group_bound_follows_ranks_per_chip(run_trnsim):
    args = ["bench", "collective", "--system", "trn2-16", "--sizes", "4K", "--ranks-per-chip", "2"]
    result = run_trnsim(*args, "--group", "0-31")
    assert result.returncode == 0, result.stderr
    assert "32 ranks" in result.stdout
    assert_clean_error(run_trnsim(*args, "--group", "0-32"), "--group: rank 32 is not in the system (32 ranks)")


@pytest.mark.parametrize("args,message", [
    # B4: each of these ran (printing nothing, the default root, or a 1-rank system) with exit 0.
    (["--algorithm", ""], "--algorithm: an empty value"),
    (["--algorithm", "ring,"], "--algorithm: no collective algorithm ''"),
    (["--op", "broadcast", "--root", ""], "--root: an empty value"),
    (["--op", "broadcast", "--root", "-1"], "--root: -1 is not a rank"),
    (["--op", "broadcast", "--root", "1.5"], "--root: 1.5 is not a rank"),
    (["--system", ""], "--system: an empty value"),
    (["--config", ""], "--config: an empty value"),
    (["--group", ""], "--group: an empty value"),
    (["--csv", ""], "--csv: an empty value"),
])
def test_bench_collective_empty_or_negative_options(run_trnsim, args, message):
    system = [] if "--system" in args else ["--system", "trn2-16"]
    result = run_trnsim("bench", "collective", *system, "--sizes", "4K", *args)
    assert_clean_error(result, message)
    assert result.stdout == ""


# ---- issue 42, B5: bench matmul | attention | conv2d --csv goes through the output-file checks ----

BENCH_POINTS = {
    "matmul": ["bench", "matmul", "--m", "128", "--k", "128", "--n", "512"],
    "attention": ["bench", "attention", "--seq", "128", "--head-dim", "64"],
    "conv2d": ["bench", "conv2d", "--input", "1x8x8x8", "--weight", "8x8x3x3", "--padding", "1"],
}


@pytest.mark.parametrize("kind", list(BENCH_POINTS))
def test_bench_csv_destination_is_checked_before_simulating(run_trnsim, tmp_path, kind):
    point = BENCH_POINTS[kind]
    result = run_trnsim(*point, "--csv", tmp_path / "nodir" / "c.csv")
    assert_clean_error(result, "--csv: ", "cannot be created (no folder")
    assert result.stdout == ""
    assert_clean_error(run_trnsim(*point, "--csv", tmp_path), "--csv: ", "is a directory")
    # /dev/full exists (so it needs --force) and takes no bytes: an error, not exit 0 with nothing written.
    assert_clean_error(run_trnsim(*point, "--csv", "/dev/full"), "--csv: /dev/full exists (pass --force")
    assert_clean_error(run_trnsim(*point, "--csv", "/dev/full", "--force"), "--csv: cannot write /dev/full")


@pytest.mark.parametrize("kind", list(BENCH_POINTS))
def test_bench_csv_is_not_another_output_of_the_command(run_trnsim, tmp_path, kind):
    point = BENCH_POINTS[kind]
    result = run_trnsim(*point, "--emit-tasm", "e.tasm", "--csv", "./e.tasm", cwd=tmp_path)
    assert_clean_error(result, "--csv: ./e.tasm is already the file of another output (--emit-tasm)")
    assert not (tmp_path / "e.tasm").exists()
    # --append does not lift the rule: appending a row to the kernel text the command writes.
    result = run_trnsim(*point, "--emit-tasm", "e.tasm", "--csv", "e.tasm", "--append", "--force", cwd=tmp_path)
    assert_clean_error(result, "--csv: e.tasm is already the file of another output (--emit-tasm)")
    result = run_trnsim(*point, "--stats", "s.json", "--csv", "s.json", cwd=tmp_path)
    assert_clean_error(result, "--csv: s.json is already the file of another output (--stats)")


@pytest.mark.parametrize("kind", list(BENCH_POINTS))
def test_bench_existing_csv_needs_force_or_append(run_trnsim, tmp_path, kind):
    point = BENCH_POINTS[kind]
    csv = tmp_path / "points.csv"
    first = run_trnsim(*point, "--csv", csv)
    assert first.returncode == 0, first.stderr
    header, row = csv.read_text().splitlines()
    assert header.startswith("config,config_hash,dtype,")
    # Existing: refused, left as it was.
    assert_clean_error(run_trnsim(*point, "--csv", csv), "exists (pass --force to overwrite)")
    assert csv.read_text().splitlines() == [header, row]
    # --force: written new (one header, one row); --append: the row added.
    assert run_trnsim(*point, "--csv", csv, "--force").returncode == 0
    assert csv.read_text().splitlines() == [header, row]
    assert run_trnsim(*point, "--csv", csv, "--append").returncode == 0
    assert csv.read_text().splitlines() == [header, row, row]
    # --append to a new file writes its header; to a file of other columns it is refused.
    fresh = tmp_path / "fresh.csv"
    assert run_trnsim(*point, "--csv", fresh, "--append").returncode == 0
    assert fresh.read_text().splitlines() == [header, row]
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    assert_clean_error(run_trnsim(*point, "--csv", other, "--append"), "has other columns than this benchmark writes")
    assert other.read_text() == "a,b\n1,2\n"


# ---- issue 42, K1: loops bounded by an instruction budget and a host-time budget ----

COUNTDOWN = ("register_move dst=r0, imm=-1\nwhile_begin cond=r0\nregister_add dst=r0, src=r0, imm=-1\n"
             "while_end\n")  # cond != 0 for 2^32 - 1 iterations


@pytest.mark.parametrize("timing_only", [True, False])
def test_a_loop_past_the_instruction_budget_is_refused_at_its_start(run_trnsim, kernel, tmp_path, timing_only):
    # Ran to the 2^24 cap before (3.5-31 s, 2-4 GB of host memory).
    path = kernel("loop_begin count=4294967295\nregister_add dst=r0, src=r0, imm=1\nloop_end\n")
    result = run_trnsim("run", path, *mode_args(tmp_path, timing_only))
    assert_clean_error(result, "loop_begin: count 4294967295 runs at least 4294967295 instructions",
                       "more than 2^24 instructions", "--max-instructions", "[execution-limit]")


@pytest.mark.parametrize("timing_only", [True, False])
def test_the_budgets_are_options_of_run(run_trnsim, kernel, tmp_path, timing_only):
    path = kernel(COUNTDOWN)
    mode = mode_args(tmp_path, timing_only)
    assert_clean_error(run_trnsim("run", path, *mode, "--max-instructions", "1000"),
                       "the program executes more than 1000 instructions", "[execution-limit]")
    result = run_trnsim("run", path, *mode, "--max-instructions", str(1 << 40), "--max-host-seconds", "0.3")
    assert_clean_error(result, "s of host time (the host-time budget: trnsim run --max-host-seconds", "[execution-limit]")


@pytest.mark.parametrize("args,message", [
    (["--max-instructions", "0"], "--max-instructions: must be 1 or more"),
    (["--max-host-seconds", "0"], "--max-host-seconds: must be a finite number of seconds above 0"),
    (["--max-host-seconds", "nan"], "--max-host-seconds: must be a finite number of seconds above 0"),
    (["--max-host-seconds", "inf"], "--max-host-seconds: must be a finite number of seconds above 0"),
    (["--stats", ""], "--stats: an empty value"),
])
def test_run_budget_options_that_are_not_budgets(run_trnsim, args, message):
    assert_clean_error(run_trnsim("run", MATMUL, "--timing-only", *args), message)


@pytest.mark.parametrize("timing_only", [True, False])
def test_a_negative_loop_count_register_is_an_error(run_trnsim, kernel, tmp_path, timing_only):
    path = kernel("register_move dst=r2, imm=-3\nloop_begin count_reg=r2\ndma_copy dst=s, src=x\nloop_end\n")
    assert_clean_error(run_trnsim("run", path, *mode_args(tmp_path, timing_only)),
                       "loop_begin: count_reg r2 holds -3: a loop count must be 0 or more [loop-count]")


# ---- issue 42, S1: a wait for the value semaphores start at ----

@pytest.mark.parametrize("timing_only", [True, False])
def test_sem_wait_for_zero_holds_from_the_start(run_trnsim, kernel, tmp_path, timing_only):
    path = kernel("sem_wait engine=sync, sem=0, value=0\ndma_copy dst=s, src=x\n")
    for cores in (["0"], ["0", "1"]):
        result = run_trnsim("run", path, *mode_args(tmp_path, timing_only), "--cores", *cores)
        assert result.returncode == 0, result.stderr
