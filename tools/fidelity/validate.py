"""trnsim's fidelity table: the published hardware figures trnsim is calibrated or validated on
(../shared/reference/trainium.md §9), each run as a trnsim workload written for it, printed as
simulated vs published with the error and the band the project holds it to.

    PYTHONPATH=build/python python tools/fidelity/validate.py [--only V1,V8] [--json FILE] [--check]

- V1: the NKI tutorial's bf16 matmul [4096, 8192] @ [8192, 8192] in its four stages on trn1
  (examples/nki/matmul_kernels.py, beta-1 NKI, run through trnsim.nki): each stage's latency within
  15 %, and each stage-to-stage speed-up within 15 % of the published one.
- P (with ``--nki-tutorials PATH``, the Neuron docs' nki/examples folder): published tutorial kernels run unmodified
  through trnsim.nki beside the latency their tutorial publishes (the fused-Mamba tutorial's v1 / v2 / v3 at its
  shapes, P_MAMBA_PUBLISHED_MS); simulated / published within 0.8 - 1.25. Hand mirrors alone are no evidence.
- V2 (informational since issue 37, its sources contradict each other): the trn2 "kernel optimization" tutorial's four stages of the same matmul (a different set of kernels:
  examples/nki/matmul_kernels_trn2.py, current NKI, run through trnsim.nki): the published engine-active
  percentages (DMA, Tensor, Vector) within 10 points (active = merged busy time over the kernel's time, as
  Neuron Explorer counts it). The tutorial's driver makes fp32 inputs; tiled and hoisted run in fp32, blocked
  and optimized in bf16, the only dtype in which they fit trn2's SBUF (see V2_DTYPES).
- V8: one DMA engine moves 32 KiB (bf16 [4, 4096], HBM -> SBUF) on trn2 in 1,416 ns (the engine's span);
  within 2 %.
- V9: dependent one-element ScalarE activations on trn1 issue every 264 cycles; within 2 %.
- C: Neuron's nccom-test all-reduce examples (collectives.md §4) beside `trnsim bench collective` on the trn2
  16-chip torus. Reported, not banded: the doc does not say which instance ran them (r = 16 may be 16 chips or 4
  chips x 4 logical cores), so they cannot calibrate the model yet; r = 2 is mapped to two neighbouring chips.

- S (with ``--nki-samples PATH``): the latencies AWS's nki-samples performance tests carry, measured on hardware,
  beside trnsim's for the same kernels run unmodified (tools/clients/nki_samples/run.py). Reported, not banded.

All runs are timing-only. ``--check`` exits 1 when a figure is outside its band. The golden test tier
runs this table (tests/golden/test_fidelity.py).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# trainium.md §9.
V1_PUBLISHED_MS = {"tiled": 51.80, "hoisted": 42.96, "blocked": 22.07, "optimized": 6.97}
V2_PUBLISHED_ACTIVE = {   # percent of the kernel's time each engine is active
    "tiled": {"dma": 99.93, "tensor": 87.28},
    "hoisted": {"dma": 99.73, "tensor": 99.85},
    "blocked": {"tensor": 99.52, "dma": 95.70},
    "optimized": {"dma": 21.54, "tensor": 99.50, "vector": 10.55},
}
# The dtype of each V2 stage's inputs. The tutorial's driver generates fp32 inputs (rng.random(...,
# dtype=np.float32)), and its shares say fp32: in bf16 the tiled and hoisted stages cannot keep TensorE 87 % /
# 99.85 % active at any DMA rate (a bf16 [128,128]x[128,512] matmul takes ~213 ns in trnsim's trn2 model; the
# tiled stage loads 160 KiB per matmul, the hoisted one 128 KiB: >= 377 / 301 ns at the 16 engines' 435 GB/s
# peak), while at fp32's quarter rate (~854 ns) they can. But in fp32 the blocked stage's operand blocks (2 A^T + 2 B
# columns over K = 8192: 320 KiB per partition) do not fit trn2's 224 KiB of SBUF, and the optimized stage's
# partial sums and operand rows need exactly 224 KiB (all of it, no slack; trnsim's allocator overflows on
# fragmentation): both are KernelErrors in fp32, so they run in bf16. (Their fp32 shares with a larger SBUF,
# a what-if only: blocked DMA 47 % / TensorE 93 %, optimized DMA 12 % / TensorE 95 % / VectorE 9 %.)
V2_DTYPES = {"tiled": "float32", "hoisted": "float32", "blocked": "bfloat16", "optimized": "bfloat16"}
V8_PUBLISHED_NS = 1416.0
V9_PUBLISHED_CYCLES = 264.0

# V2 is informational (issue 37): its sources disagree (two TensorE shares for one profile, an fp32 blocked stage that
# cannot fit trn2's SBUF). P: published tutorial kernels run unmodified, simulated / published within 0.8 - 1.25.
BANDS = {"V1": ("relative", 0.15), "V1-ratio": ("relative", 0.15), "V2": ("report", None), "P": ("ratio", (0.8, 1.25)),
         "V8": ("relative", 0.02), "V9": ("relative", 0.02), "C": ("report", None), "S": ("report", None)}
# collectives.md §4: (ranks, bytes, published us, what it measured).
C_PUBLISHED_US = [
    (2, 1 << 10, 58.0, "r2 all-reduce 1K (floor)"),
    (2, 1 << 30, 18930.0, "r2 all-reduce 1G"),
    (16, 8 << 10, 299.7, "r16 all-reduce 8K (mesh)"),
    (16, 2 << 20, 686.0, "r16 all-reduce 2M (RDH)"),
    (16, 32 << 20, 2754.0, "r16 all-reduce 32M (Kanga)"),
    (16, 512 << 20, 9689.5, "r16 all-reduce 512M (Kanga)"),
]


class Row:
    def __init__(self, case, workload, config, published, simulated, unit, band):
        self.case, self.workload, self.config = case, workload, config
        self.published, self.simulated, self.unit = published, simulated, unit
        self.kind, self.limit = BANDS[band]

    @property
    def error(self):
        if self.kind == "points":
            return self.simulated - self.published
        return (self.simulated - self.published) / self.published

    @property
    def within(self):
        if self.kind == "ratio":
            return self.limit[0] <= self.simulated / self.published <= self.limit[1]
        return self.limit is None or abs(self.error) <= self.limit

    def as_dict(self):
        return {"case": self.case, "workload": self.workload, "config": self.config, "unit": self.unit,
                "published": self.published, "simulated": self.simulated, "error": self.error,
                "band": self.limit, "band_kind": self.kind, "within": self.within}

    def text(self):
        err = f"{self.error:+.1f} pt" if self.kind == "points" else f"{100 * self.error:+.1f} %"
        if self.kind == "report":
            band = "none"
        else:
            band = (f"±{self.limit:.0f} pt" if self.kind == "points" else
                    f"{self.limit[0]}-{self.limit[1]}x" if self.kind == "ratio" else f"±{100 * self.limit:.0f} %")
        return (f"{self.case:<9} {self.workload:<40} {self.config:<5} {self.published:>10.3f} {self.simulated:>10.3f} "
                f"{self.unit:<6} {err:>9} {band:>6}  {'-' if self.kind == 'report' else 'ok' if self.within else 'OUT'}")


def _tutorial_stages(target):
    """(stage, latency_ns, summary) of the four matmul stages at the tutorial's size, timing-only."""
    import ml_dtypes
    import numpy as np
    import trnsim.nki
    trnsim.nki.install()
    sys.path.insert(0, os.path.join(REPO, "examples", "nki"))
    import matmul_kernels
    from neuronxcc import nki
    previous = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = target
    try:
        M, K, N = 4096, 8192, 8192
        lhsT = np.zeros((K, M), dtype=ml_dtypes.bfloat16)
        rhs = np.zeros((K, N), dtype=ml_dtypes.bfloat16)
        out = []
        for name, kernel in matmul_kernels.STAGES:
            bench = nki.benchmark(kernel, warmup=1, iters=1, timing_only=True)
            bench(lhsT, rhs)
            out.append((name, bench.last_latency_ns, bench.last_summary))
        return out
    finally:
        if previous is None:
            os.environ.pop("NEURON_PLATFORM_TARGET_OVERRIDE", None)
        else:
            os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = previous


def _trn2_tutorial_stages():
    """(stage, latency_ns, summary) of the trn2 tutorial's four stages at its size, timing-only, each with
    its V2_DTYPES inputs (the kernels declare platform_target="trn2")."""
    import ml_dtypes
    import numpy as np
    import trnsim.nki
    trnsim.nki.install()
    sys.path.insert(0, os.path.join(REPO, "examples", "nki"))
    import matmul_kernels_trn2
    import nki
    M, K, N = 4096, 8192, 8192
    out = []
    for name, kernel in matmul_kernels_trn2.STAGES:
        dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[V2_DTYPES[name]]
        bench = nki.benchmark(kernel, warmup=1, iters=1, timing_only=True)
        bench(np.zeros((K, M), dtype=dtype), np.zeros((K, N), dtype=dtype))
        out.append((name, bench.last_latency_ns, bench.last_summary))
    return out


def v1():
    stages = _tutorial_stages("trn1")
    rows = [Row("V1", f"matmul tutorial: {name}", "trn1", V1_PUBLISHED_MS[name], ns / 1e6, "ms", "V1")
            for name, ns, _ in stages]
    for (a, ta, _), (b, tb, _) in zip(stages, stages[1:]):
        rows.append(Row("V1-ratio", f"speed-up {a} -> {b}", "trn1", V1_PUBLISHED_MS[a] / V1_PUBLISHED_MS[b],
                        ta / tb, "x", "V1-ratio"))
    return rows


def v2():
    rows = []
    for name, _, summary in _trn2_tutorial_stages():
        for engine, published in V2_PUBLISHED_ACTIVE[name].items():
            active = 100 * summary.utilization.get(f"core0.{engine}", 0.0)
            rows.append(Row("V2", f"matmul tutorial: {name}, {engine} active", "trn2", published, active, "%", "V2"))
    return rows


def v8():
    import trnsim
    program = ("kernel v8\ntarget trn2\nhbm a : bf16[4, 4096] input\nsbuf t : bf16[4, 4096]\n"
               "dma_copy dst=t, src=a\n")
    # The published figure is the engine's span in the profile; the trigger reaches it a start latency earlier
    # (core.dma.start_latency_ns), which the kernel's time includes.
    ns = trnsim.run_program(program, timing_only=True, config="trn2").engines["core0.dma"]
    return [Row("V8", "DMA 32 KiB on one engine", "trn2", V8_PUBLISHED_NS, ns, "ns", "V8")]


def v9(count=100):
    import trnsim
    body = "".join("activation dst=t, op=exp, data=t\n" for _ in range(count))
    result = trnsim.run_program("kernel v9\ntarget trn1\nsbuf t : fp32[128, 1]\n" + body, timing_only=True,
                                config="trn1")
    from trnsim import _C
    clock = float(_C.config_leaves("trn1", [])["core.scalar.clock_ghz"])
    cycles = result.latency_ns / count * clock
    return [Row("V9", f"{count} dependent 1-element activations", "trn1", V9_PUBLISHED_CYCLES, cycles, "cycles",
                "V9")]


def collectives():
    import csv
    import subprocess
    import tempfile
    build = os.environ.get("TRNSIM_BUILD_DIR", os.path.join(REPO, "build"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for ranks, nbytes, published, what in C_PUBLISHED_US:
            out = os.path.join(tmp, f"{ranks}_{nbytes}.csv")
            group = ["--group", "0-1"] if ranks == 2 else []
            subprocess.run([os.path.join(build, "bin", "trnsim"), "bench", "collective", "--system", "trn2-16",
                            "--sizes", str(nbytes), "--csv", out] + group, check=True, capture_output=True)
            with open(out, newline="") as f:
                point = next(csv.DictReader(f))
            rows.append(Row("C", f"nccom {what}", "trn2", published, float(point["time_ns"]) / 1e3, "us", "C"))
    return rows


def nki_samples(checkout, deps=None, target="trn2"):
    """S: nki-samples' performance tests (tools/clients/nki_samples/run.py) on a checkout of that repository: each
    kernel's latency beside the one its test carries. Reported, not banded: nothing is fitted to them, and the
    suite does not say which instance measured each figure."""
    import subprocess
    import tempfile
    runner = os.path.join(REPO, "tools", "clients", "nki_samples", "run.py")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        command = [sys.executable, runner, "--checkout", checkout, "--target", target, "--json", out]
        if deps:
            command += ["--deps", deps]
        # The suite's own failures (kernels trnsim cannot run yet) still leave the rows of those that ran.
        run = subprocess.run(command, check=False, capture_output=True, text=True)
        if not os.path.exists(out):
            raise SystemExit(f"case S: {runner} wrote no rows (exit {run.returncode}):\n"
                             + "\n".join((run.stderr or run.stdout).splitlines()[-15:]))
        with open(out) as f:
            found = json.load(f)
    rows = []
    for r in found:
        published = r["published_us"]
        if published and published < 1e7:   # flash_attn_fwd's parameters are not latencies (run.py)
            test = r["test"].split("::")[-1].replace("test_", "", 1).replace("_perf[", "[")
            rows.append(Row("S", test[:40], target, float(published), r["simulated_us"], "us", "S"))
    return rows


# P: the fused-Mamba NKI tutorial (Neuron docs, nki/guides/tutorials/fused_mamba.rst; kernels in
# nki/examples/fused_mamba/mamba_nki_kernels.py, fp32, batch 1, state 16): (kernel, seq_len, channels, published ms).
# The tutorial (first published with SDK 2.20, Sept 2024) does not name its instance: run on trn1, assumed.
P_MAMBA_PUBLISHED_MS = [
    ("mamba_v1", 512, 256, 0.17293), ("mamba_v1", 512, 4096, 2.34), ("mamba_v2", 512, 4096, 1.61),
    ("mamba_v2", 1024, 4096, 4.4), ("mamba_v3", 1024, 4096, 3.3), ("mamba_v2", 2048, 4096, 8.9),
    ("mamba_v3", 2048, 4096, 6.6), ("mamba_v2", 8192, 4096, 53.33), ("mamba_v3", 8192, 4096, 27.8),
]


def published_kernels(tutorials, target="trn1"):
    """P: published tutorial kernels run unmodified through trnsim.nki (timing-only), beside the latency their
    tutorial publishes. ``tutorials``: a folder holding the Neuron docs' ``fused_mamba/mamba_nki_kernels.py`` (the
    docs repository's nki/examples), never copied here."""
    import importlib.util
    import numpy as np
    import trnsim.nki
    trnsim.nki.install()
    path = os.path.join(tutorials, "fused_mamba", "mamba_nki_kernels.py")
    if not os.path.exists(path):
        raise SystemExit(f"case P: {path} does not exist (--nki-tutorials names the docs' nki/examples folder)")
    spec = importlib.util.spec_from_file_location("mamba_nki_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from trnsim.nki._runtime import Kernel
    rows = []
    for name, seq, channels, published in P_MAMBA_PUBLISHED_MS:
        fn = getattr(module, name)
        kernel = Kernel(getattr(fn, "fn", fn), platform_target=target, values=False)
        state = 16
        kernel(np.ones((1, channels, seq), np.float32), np.ones((1, channels, seq), np.float32),
               -np.ones((channels, state), np.float32), np.ones((1, state, seq), np.float32),
               np.ones((1, state, seq), np.float32))
        rows.append(Row("P", f"{name} seq {seq} ch {channels}", target, published, kernel.last_latency_ns / 1e6, "ms",
                        "P"))
    return rows


CASES = {"V1": v1, "V2": v2, "V8": v8, "V9": v9, "C": collectives, "S": None, "P": None}


def table(only=None, samples=None, samples_deps=None, tutorials=None):
    rows = []
    for case, run in CASES.items():
        if only and case not in only:
            continue
        if case == "S":
            if samples:
                rows.extend(nki_samples(samples, samples_deps))
            continue
        if case == "P":
            if tutorials:
                rows.extend(published_kernels(tutorials))
            continue
        rows.extend(run())
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated cases (V1,V2,V8,V9,C,S,P)")
    parser.add_argument("--nki-samples", metavar="PATH",
                        help="a checkout of aws-neuron/nki-samples: adds case S (its published kernel latencies)")
    parser.add_argument("--nki-samples-deps", metavar="PATH", help="where run.py installs that suite's test packages")
    parser.add_argument("--nki-tutorials", metavar="PATH",
                        help="the Neuron docs' nki/examples folder: adds case P (published tutorial kernels, unmodified)")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a figure is outside its band")
    args = parser.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    unknown = (only or set()) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}: one of {', '.join(CASES)}")
    if only and "S" in only and not args.nki_samples:
        parser.error("case S needs --nki-samples PATH (a checkout of aws-neuron/nki-samples)")
    if only and "P" in only and not args.nki_tutorials:
        parser.error("case P needs --nki-tutorials PATH (the Neuron docs' nki/examples folder)")
    rows = table(only, args.nki_samples, args.nki_samples_deps, args.nki_tutorials)
    print(f"{'case':<9} {'workload':<40} {'cfg':<5} {'published':>10} {'simulated':>10} {'unit':<6} {'error':>9} "
          f"{'band':>6}")
    for row in rows:
        print(row.text())
    outside = [r for r in rows if not r.within]
    banded = [r for r in rows if r.kind != "report"]
    print(f"{len(banded) - len(outside)} of {len(banded)} within their band"
          + (f" ({len(rows) - len(banded)} reported without a band)" if len(rows) > len(banded) else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.as_dict() for r in rows], f, indent=1)
    return 1 if args.check and outside else 0


if __name__ == "__main__":
    sys.exit(main())
