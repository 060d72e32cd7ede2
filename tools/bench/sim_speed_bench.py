#!/usr/bin/env python3
"""Benchmark (not a test): simulator speed in simulated instructions per host second, timing-only
and with values, on a generated program of >= 1 million instructions.

    .venv/bin/python tools/bench/sim_speed_bench.py [--instructions 1000000] [--config trn2]

The program streams tiles through every engine the way a fused kernel does: a DMA load into one
of four SBUF slots, a matmul into one of four PSUM banks (accumulating over 4 k-steps), a Vector
evacuation of PSUM, a Scalar activation and a DMA store. The figure reported is the simulator's
own `instructions_per_host_second` from --stats (SystemC elaboration and the run, parsing excluded).
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def generate(instructions, path):
    block = 8  # instructions per step below
    steps = (instructions + block - 1) // block
    lines = ["kernel sim_speed", "target trn2",
             "hbm x : bf16[128, 4096] input", "hbm w : bf16[128, 128] input", "hbm y : bf16[128, 4096] output",
             "sbuf w_sb : bf16[128, 128]", "sbuf x_sb : bf16[128, 4, 64]", "sbuf t_sb : fp32[128, 4, 64]",
             "sbuf y_sb : bf16[128, 4, 64]", "psum acc : fp32[128, 4, 512]",
             "dma_copy dst=w_sb, src=w"]
    for i in range(steps):
        slot, col = i % 4, (i * 64) % 4096
        lines.append(f"dma_copy dst=x_sb[0:128, {slot}, 0:64], src=x[0:128, {col}:{col + 64}], queue={slot}")
        for k in range(4):
            acc = "false" if k == 0 else "true"
            lines.append(f"nc_matmul dst=acc[0:128, {slot}, 0:64], stationary=w_sb, "
                         f"moving=x_sb[0:128, {slot}, 0:64], accumulate={acc}")
        lines.append(f"tensor_copy dst=t_sb[0:128, {slot}, 0:64], src=acc[0:128, {slot}, 0:64]")
        lines.append(f"activation dst=y_sb[0:128, {slot}, 0:64], op=gelu_apprx_tanh, data=t_sb[0:128, {slot}, 0:64]")
        lines.append(f"dma_copy dst=y[0:128, {col}:{col + 64}], src=y_sb[0:128, {slot}, 0:64], queue={4 + slot}")
    path.write_text("\n".join(lines) + "\n")
    return steps * block + 1


def run(trnsim, kernel, tmp, timing_only, config):
    stats = tmp / f"stats_{int(timing_only)}.json"
    args = [str(trnsim), "run", str(kernel), "--config", config, "--stats", str(stats), "--force"]
    if timing_only:
        args.append("--timing-only")
    else:
        rng = np.random.default_rng(0)
        for name, shape in (("x", (128, 4096)), ("w", (128, 128))):
            np.save(tmp / f"{name}.npy", rng.standard_normal(shape).astype(np.float32))
            args += ["--input", f"{name}={tmp / (name + '.npy')}"]
        args += ["--output", f"y={tmp / 'y.npy'}"]
    subprocess.run(args, check=True, capture_output=True, text=True)
    return json.loads(stats.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instructions", type=int, default=1_000_000)
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--build", default=str(REPO_ROOT / "build"))
    args = parser.parse_args()
    trnsim = pathlib.Path(args.build) / "bin" / "trnsim"
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = pathlib.Path(tmp_name)
        kernel = tmp / "sim_speed.tasm"
        count = generate(args.instructions, kernel)
        print(f"program: {count} instructions, config {args.config}")
        for timing_only in (True, False):
            s = run(trnsim, kernel, tmp, timing_only, args.config)
            mode = "timing-only" if timing_only else "with values"
            print(f"  {mode:12s}: {s['instructions_per_host_second'] / 1e6:6.2f} M instructions/s "
                  f"({s['host_seconds']:.2f} s host, {s['total_ns'] / 1e3:.1f} us simulated, "
                  f"tensor {100 * s['engines']['core0.tensor']['utilization']:.0f}% busy)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
