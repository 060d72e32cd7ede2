#!/usr/bin/env python3
"""Records one training step of the demo model (examples/transformer_demo.py, default sizes: 2
layers, d_model 512, seq 256, batch 2, vocab 4096, bf16, fused AdamW) after one warm-up step, with
``trnsim.record``: the recordings under traces/ that the golden tier replays.

    .venv/bin/python tools/record_demo_step.py --config trn2 --out traces/demo_step_trn2.trnrec [--overwrite]

Needs the built package (`make`): `build/python` (or `$TRNSIM_BUILD_DIR/python`) goes on sys.path.
"""
import argparse
import json
import os
import pathlib
import sys
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build")) / "python"))
sys.path.insert(0, str(REPO_ROOT / "examples"))

# The demo's defaults (transformer_demo.py's argparse).
SIZES = dict(vocab=4096, d_model=512, layers=2, seq=256, batch=2)


def record_demo_step(config, out, overwrite=False):
    """Warm-up step, then one recorded step on `config`; returns a summary dict."""
    import trnsim
    import transformer_demo as demo

    trnsim.set_config(config)
    trnsim.reset_simulated_time()
    trnsim.set_fallback_mode("allow")
    batches = demo.make_batches(2, SIZES["batch"], SIZES["seq"], SIZES["vocab"])
    model = demo.make_model(SIZES["vocab"], SIZES["d_model"], SIZES["layers"], SIZES["seq"]).to("neuron")
    optimizer = demo.make_optimizer(model, "fused")
    demo.train_steps(model, optimizer, batches[:1], "neuron")  # warm-up: not recorded
    start = time.perf_counter()
    with trnsim.record(out, overwrite=overwrite) as rec:
        losses = demo.train_steps(model, optimizer, batches[1:], "neuron")
    host_s = time.perf_counter() - start
    return {"config": config, "path": str(out), "launches": rec.launches, "programs": rec.programs,
            "host_s": host_s, "loss": losses[-1], "fallbacks": trnsim.fallback_report()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing recording at --out")
    args = parser.parse_args(argv)
    summary = record_demo_step(args.config, args.out, args.overwrite)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
