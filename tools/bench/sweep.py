#!/usr/bin/env python3
"""Benchmark sweeps (not tests) over the kernel library's timing model, written as one CSV + PNG.

    .venv/bin/python tools/bench/sweep.py matmul --csv out/matmul.csv [--png out/matmul.png]
        [--models llama3-8b,...] [--projections q,k,...] [--m 1,128,2048] [--configs trn2,trn3]
        [--dtype bf16] [--jobs N] [--force]

`matmul` runs `trnsim bench matmul` once per (model, projection, M, config) point, each into its own
temporary CSV, and merges the rows into --csv with three more columns, `model`, `projection` and
`weight_layout`. A projection ("linear" layer) computes x[M, K] @ W^T with W stored [N, K]
(PyTorch's nn.Linear layout), so by default every point passes --transpose-b; `--weight-layout kn`
models weights pre-transposed offline to [K, N] (no --transpose-b). M is the number of tokens.

Further sweeps (`attention`, `kernels`) get their own sub-parser and function here.
The binary is $TRNSIM_BUILD_DIR/bin/trnsim (default build/).
"""
import argparse
import csv
import os
import pathlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

# ---------------------------------------------------------------------------------------------
# Projection shapes of open-weight models: name -> (K = in_features, N = out_features).
# Source: each model's config.json on Hugging Face (hidden_size, intermediate_size,
# num_attention_heads, num_key_value_heads, head_dim, moe_intermediate_size, n_routed_experts /
# num_local_experts, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim),
# and the module names of the model's Hugging Face transformers implementation.
#
#  meta-llama/Meta-Llama-3-8B     hidden 4096, intermediate 14336, heads 32, kv heads 8, head_dim 128
#                                 (= hidden / heads); separate q/k/v/o, gate/up/down.
#  meta-llama/Meta-Llama-3-70B    hidden 8192, intermediate 28672, heads 64, kv heads 8, head_dim 128.
#  Qwen/Qwen3-32B                 hidden 5120, intermediate 25600, heads 64, kv heads 8, head_dim 128
#                                 (q out 64*128 = 8192 != hidden; o is 8192 -> 5120).
#  openai/gpt-oss-20b             hidden 2880, intermediate 2880 (per expert), heads 64, kv heads 8,
#                                 head_dim 64, num_local_experts 32 (4 per token); experts store a
#                                 fused gate_up_proj (2880 -> 2*2880) and down_proj (2880 -> 2880);
#                                 router 2880 -> 32.
#  deepseek-ai/DeepSeek-V3        hidden 7168, heads 128, q_lora_rank 1536, kv_lora_rank 512,
#                                 qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128 (MLA);
#                                 intermediate 18432 (dense MLP, first_k_dense_replace = 3 layers),
#                                 moe_intermediate_size 2048, n_routed_experts 256 (8 per token),
#                                 n_shared_experts 1 (same shape as a routed expert); router (gate)
#                                 7168 -> 256.
#      q_a_proj  7168 -> q_lora_rank 1536
#      q_b_proj  1536 -> heads * (nope + rope) = 128 * 192 = 24576
#      kv_a_proj_with_mqa  7168 -> kv_lora_rank + rope = 512 + 64 = 576
#      kv_b_proj  512 -> heads * (nope + v) = 128 * 256 = 32768
#      o_proj   heads * v = 16384 -> 7168
# ---------------------------------------------------------------------------------------------
MODELS = {
    "llama3-8b": {
        "q": (4096, 4096), "k": (4096, 1024), "v": (4096, 1024), "o": (4096, 4096),
        "gate": (4096, 14336), "up": (4096, 14336), "down": (14336, 4096),
    },
    "llama3-70b": {
        "q": (8192, 8192), "k": (8192, 1024), "v": (8192, 1024), "o": (8192, 8192),
        "gate": (8192, 28672), "up": (8192, 28672), "down": (28672, 8192),
    },
    "qwen3-32b": {
        "q": (5120, 8192), "k": (5120, 1024), "v": (5120, 1024), "o": (8192, 5120),
        "gate": (5120, 25600), "up": (5120, 25600), "down": (25600, 5120),
    },
    "gpt-oss-20b": {
        "q": (2880, 4096), "k": (2880, 512), "v": (2880, 512), "o": (4096, 2880),
        "expert_gate_up": (2880, 5760), "expert_down": (2880, 2880), "router": (2880, 32),
    },
    "deepseek-v3": {
        "q_a": (7168, 1536), "q_b": (1536, 24576), "kv_a": (7168, 576), "kv_b": (512, 32768),
        "o": (16384, 7168),
        "gate": (7168, 18432), "up": (7168, 18432), "down": (18432, 7168),
        "expert_gate": (7168, 2048), "expert_up": (7168, 2048), "expert_down": (2048, 7168),
        "router": (7168, 256),
    },
}

DEFAULT_M = [1, 128, 2048]
DEFAULT_CONFIGS = ["trn2", "trn3"]
EXTRA_COLUMNS = ["model", "projection", "weight_layout"]


def trnsim_binary() -> pathlib.Path:
    build = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", REPO_ROOT / "build"))
    return build / "bin" / "trnsim"


def csv_list(text):
    return [item.strip() for item in text.split(",") if item.strip()]


def int_list(text):
    try:
        return [int(item) for item in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def check_outputs(args):
    """Refuse to overwrite --csv/--png unless --force; returns (csv_path, png_path)."""
    csv_path = pathlib.Path(args.csv)
    png_path = pathlib.Path(args.png) if args.png else csv_path.with_suffix(".png")
    for path in (csv_path, png_path):
        if path.exists() and not args.force:
            sys.exit(f"error: {path} exists (pass --force to overwrite)")
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    return csv_path, png_path


def run_points(points, command_for, jobs, desc):
    """Runs one `trnsim` command per point, each appending to its own temporary CSV; returns the
    rows in point order, each extended with the point's extra columns. Exits on the first failure."""
    from tqdm import tqdm

    with tempfile.TemporaryDirectory(prefix="trnsim_sweep_") as tmp:
        def one(index):
            point = points[index]
            out = pathlib.Path(tmp) / f"{index}.csv"
            cmd = command_for(point, out)
            try:
                result = subprocess.run(cmd, capture_output=True, text=True)
            except OSError as e:
                return index, None, f"{' '.join(map(str, cmd))}\n{e}"
            if result.returncode != 0:
                return index, None, f"{' '.join(map(str, cmd))}\n{result.stderr.strip()}"
            with out.open(newline="") as f:
                rows = list(csv.DictReader(f))
            if len(rows) != 1:
                return index, None, f"{' '.join(map(str, cmd))}: expected 1 CSV row, got {len(rows)}"
            return index, rows[0], None

        results = [None] * len(points)
        # Each point is its own trnsim process, so threads are enough to run them in parallel.
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, \
                tqdm(total=len(points), desc=desc, unit="pt", file=sys.stderr) as bar:
            for index, row, error in pool.map(one, range(len(points))):
                if error:
                    pool.shutdown(cancel_futures=True)
                    sys.exit(f"error: point {points[index]} failed:\n{error}")
                results[index] = row
                bar.update(1)
    return results


def write_csv(path, rows, extra_columns):
    """rows: (tool_row, extra) pairs; the tool's columns first, in its order, then extra_columns."""
    tool_columns = list(rows[0][0].keys())
    columns = tool_columns + [c for c in extra_columns if c not in tool_columns]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row, extra in rows:
            writer.writerow({**row, **extra})
    return columns


def sweep_matmul(args):
    models = args.models or list(MODELS)
    for model in models:
        if model not in MODELS:
            sys.exit(f"error: unknown model {model!r} (known: {', '.join(MODELS)})")
    known_projections = sorted({p for m in models for p in MODELS[m]})
    if args.projections:
        for projection in args.projections:
            if projection not in known_projections:
                sys.exit(f"error: no model in {', '.join(models)} has projection {projection!r} "
                         f"(known: {', '.join(known_projections)})")
    trnsim = trnsim_binary()
    if not trnsim.exists():
        sys.exit(f"error: {trnsim} is missing: run `make` first (or set TRNSIM_BUILD_DIR)")
    csv_path, png_path = check_outputs(args)

    points = []
    for model in models:
        for projection, (k, n) in MODELS[model].items():
            if args.projections and projection not in args.projections:
                continue
            for m in args.m:
                for config in args.configs:
                    points.append({"model": model, "projection": projection, "m": m, "k": k, "n": n,
                                   "config": config})
    if not points:
        sys.exit("error: the selection has no points")

    def command_for(p, out):
        return [str(trnsim), "bench", "matmul", "--m", str(p["m"]), "--k", str(p["k"]),
                "--n", str(p["n"]), "--dtype", args.dtype, "--config", p["config"],
                *(["--transpose-b"] if args.weight_layout == "nk" else []), "--csv", str(out)]

    rows = run_points(points, command_for, args.jobs, "matmul")
    merged = [(row, {"model": p["model"], "projection": p["projection"], "weight_layout": args.weight_layout})
              for row, p in zip(rows, points)]
    write_csv(csv_path, merged, EXTRA_COLUMNS)
    print(f"{len(points)} points -> {csv_path}")

    import plot_sweep
    plot_sweep.plot_matmul(csv_path, png_path)
    print(f"plot -> {png_path}")


def add_common(parser):
    parser.add_argument("--csv", required=True, help="output CSV (refused if it exists, unless --force)")
    parser.add_argument("--png", help="output plot (default: the CSV's name with .png)")
    parser.add_argument("--force", action="store_true", help="overwrite existing --csv/--png")
    parser.add_argument("--jobs", type=int, default=1, help="points run in parallel (default 1)")
    parser.add_argument("--configs", type=csv_list, default=DEFAULT_CONFIGS,
                        help=f"hardware configs, comma-separated (default {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--dtype", default="bf16", help="input dtype (default bf16)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="sweep", required=True, metavar="SWEEP")

    matmul = sub.add_parser("matmul", help="projection matmuls of open-weight models")
    add_common(matmul)
    matmul.add_argument("--models", type=csv_list, help=f"comma-separated (default all: {','.join(MODELS)})")
    matmul.add_argument("--projections", type=csv_list, help="comma-separated projection names (default all)")
    matmul.add_argument("--m", type=int_list, default=DEFAULT_M,
                        help=f"token counts, comma-separated (default {','.join(map(str, DEFAULT_M))})")
    matmul.add_argument("--weight-layout", choices=["nk", "kn"], default="nk",
                        help="nk: W stored [N, K] as nn.Linear does, --transpose-b (default); "
                             "kn: W pre-transposed to [K, N]")
    matmul.set_defaults(func=sweep_matmul)

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
