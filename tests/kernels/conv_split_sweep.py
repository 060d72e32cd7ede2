"""Kernel-level: conv2d backward split over 2..4 cores, each core's program alone with NaN-preset outputs
(run_conv_split in test_conv_kernel.py): every element written, all against float64 autograd, over a random
grid around the dW tiling's edges (C near multiples of 512, 1x1..3x3, groups). Not a pytest module:
  TRNSIM_BUILD_DIR=build python tests/kernels/conv_split_sweep.py SEED COUNT"""
import os, sys, random, pathlib, tempfile
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE)); sys.path.insert(0, str(HERE.parent))
import subprocess
from test_conv_kernel import run_conv_split
trnsim = str(pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", HERE.parent.parent / "build")) / "bin" / "trnsim")
def run_trnsim(*args):
    return subprocess.run([trnsim, *map(str, args)], capture_output=True, text=True, timeout=600)
rng = random.Random(int(sys.argv[1]))
bad = 0
for i in range(int(sys.argv[2])):
    c = rng.choice([129, 300, 511, 512, 513, 576, 700, 1000, 1024, 1030, 1088, 1152, 1536, 2048, 2100])
    o = rng.choice([1, 64, 96, 128, 129, 200, 320, 520])
    k = rng.choice([1, 1, 2, 3, (1, 3)])
    kh, kw = (k, k) if isinstance(k, int) else k
    cores = rng.choice([2, 3, 4])
    bias = rng.random() < 0.5
    groups = rng.choice([1, 1, 1, 2])
    if c % groups or o % groups: groups = 1
    stride = rng.choice([1, 2]); pad = rng.choice([0, 1]) if kh > 1 else 0
    n, h, w = rng.randint(1, 2), rng.randint(max(1, kh - 2 * pad), 4), rng.randint(max(1, kw - 2 * pad), 4)
    dtype = rng.choice(["fp32", "bf16"])
    tag = f"n{n} c{c} {h}x{w} o{o} k{kh}x{kw} s{stride} p{pad} g{groups} bias{int(bias)} cores{cores} {dtype}"
    with tempfile.TemporaryDirectory() as d:
        try:
            run_conv_split(run_trnsim, pathlib.Path(d), n, c, h, w, o, k, stride, pad, bias=bias, cores=cores,
                                    groups=groups, dtype=dtype, seed=i)
        except AssertionError as e:
            bad += 1
            print(tag, "FAIL", str(e).splitlines()[0][:200], flush=True)
print("done", sys.argv[2], "bad", bad, flush=True)
