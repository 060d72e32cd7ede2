#!/usr/bin/env python3
"""Benchmark sweeps (not tests) over the kernel library's timing model, written as one CSV + PNG.

    .venv/bin/python tools/bench/sweep.py matmul --csv out/matmul.csv [--png out/matmul.png]
        [--models llama3-8b,...] [--projections q,k,...] [--m 1,128,2048] [--configs trn2,trn3]
        [--dtype bf16] [--jobs N] [--ray-address ADDR] [--force]

`matmul` runs `trnsim bench matmul` once per (model, projection, M, config) point, each into its own
temporary CSV, and merges the rows into --csv with three more columns, `model`, `projection` and
`weight_layout`. A projection ("linear" layer) computes x[M, K] @ W^T with W stored [N, K]
(PyTorch's nn.Linear layout), so by default every point passes --transpose-b; `--weight-layout kn`
models weights pre-transposed offline to [K, N] (no --transpose-b). M is the number of tokens.

    .venv/bin/python tools/bench/sweep.py attention --csv out/attention.csv [--batch 1,4]
        [--seq 512,...,8192] [--head-dim 64,128] [--causal 0,1] [--direction forward,backward]
        [--heads H] [--kv-heads G] [--configs trn2,trn3] [--jobs N] [--force]

`attention` runs `trnsim bench attention [--backward] --csv` per point (the tool's own columns);
the plot shows achieved TFLOPS and time against sequence length, forward and backward side by side.

    .venv/bin/python tools/bench/sweep.py kernels --csv out/kernels.csv [--kernels softmax,...]
        [--sizes small,large] [--configs trn2,trn3] [--jobs N] [--force]

`kernels` times each library kernel at a few sizes: matmul and attention through `trnsim bench`,
the element-wise / normalization / loss / optimizer kernels through `kernel_runner KERNEL ...
--bench` (one JSON line). Kernels the built kernel_runner does not know are skipped with a note,
since the library grows. Columns: config, dtype, kernel, shape, time_ns, gflop, tflops, mfu,
gbps, bandwidth_utilization (of the core's HBM share), bottleneck (the busiest engine).
The binary is $TRNSIM_BUILD_DIR/bin/trnsim (default build/).

Points run on Ray through tools/sweeps/fanout.py (the path replay_sweep.py uses too): a local Ray
of --jobs CPUs, or the cluster at --ray-address (default $RAY_ADDRESS), whose workers get the
binaries and the effective configs by value. A point that fails does not stop the others: the CSV
and plot hold the points that succeeded, each failure is reported with its command and the tail
of its stderr, and the exit status is 1.
"""
import argparse
import csv
import io
import os
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO_ROOT / "tools" / "sweeps"))
import fanout  # noqa: E402  (tools/sweeps/fanout.py: the Ray fan-out every sweep shares)

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


def point_label(point):
    return " ".join(f"{k}={v}" for k, v in point.items())


def effective_configs(trnsim, configs):
    """Each config as one self-contained YAML (fanout.effective_config), read before any point runs
    so that an unknown config is one error up front, not one failure per point."""
    try:
        return {c: fanout.effective_config(trnsim, c) for c in dict.fromkeys(configs)}
    except fanout.FanOutError as e:
        sys.exit(f"error: {e}")


def run_tasks(args, desc, tools, configs, count, make_task):
    """Runs make_task(index, shipped tools, shipped configs) for index in range(count) on the
    fan-out; returns the results in index order. tools: name -> binary path and configs: name ->
    effective YAML, both sent to the workers by value."""
    # --jobs sizes a local Ray (default 1, as before Ray); on a cluster it only caps the points in
    # flight, and by default the cluster's size decides.
    address = fanout.ray_address(args.ray_address)
    try:
        jobs = args.jobs if args.jobs is not None else None if address else 1
        with fanout.FanOut(jobs=jobs, address=address) as fan:
            shipped_tools = {name: fan.file(path, executable=True) for name, path in tools.items()}
            shipped = {c: fan.text("config.yaml", text, shown=c) for c, text in configs.items()}
            return fan.run([make_task(i, shipped_tools, shipped) for i in range(count)], desc)
    except fanout.FanOutError as e:
        sys.exit(f"error: {e}")


def run_points(args, points, command_for, desc):
    """Runs one `trnsim` command per point, each writing its own one-row CSV; returns (point, row)
    for the points that succeeded, in point order, and the failed results."""
    trnsim = trnsim_binary()
    configs = effective_configs(trnsim, [p["config"] for p in points])

    def make_task(index, tools, shipped):
        p = points[index]
        return fanout.Task(command_for(p, tools["trnsim"], shipped[p["config"]], "point.csv"),
                           outputs=["point.csv"], label=point_label(p))

    rows, failed = [], []
    for p, result in zip(points, run_tasks(args, desc, {"trnsim": trnsim}, configs, len(points), make_task)):
        if result.ok:
            found = list(csv.DictReader(io.StringIO(result.outputs["point.csv"].decode())))
            if len(found) == 1:
                rows.append((p, found[0]))
                continue
            result.error = f"expected 1 CSV row, got {len(found)}"
        failed.append(result)
    return rows, failed


def finish(csv_path, total, failed):
    """Reports the failed points (after the CSV and plot of the others were written); exits 1 if
    there were any."""
    if failed:
        sys.exit(fanout.report_failures(failed, total, str(csv_path)))


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

    def command_for(p, trnsim, config, out):
        return [trnsim, "bench", "matmul", "--m", str(p["m"]), "--k", str(p["k"]),
                "--n", str(p["n"]), "--dtype", args.dtype, "--config", config,
                *(["--transpose-b"] if args.weight_layout == "nk" else []), "--csv", out]

    rows, failed = run_points(args, points, command_for, "matmul")
    if rows:
        merged = [(row, {"model": p["model"], "projection": p["projection"], "weight_layout": args.weight_layout})
                  for p, row in rows]
        write_csv(csv_path, merged, EXTRA_COLUMNS)
        print(f"{len(rows)} points -> {csv_path}")

        import plot_sweep
        plot_sweep.plot_matmul(csv_path, png_path)
        print(f"plot -> {png_path}")
    finish(csv_path, len(points), failed)


DEFAULT_ATTENTION = {"batch": [1, 4], "seq": [512, 1024, 2048, 4096, 8192], "head_dim": [64, 128],
                     "causal": [0, 1], "direction": ["forward", "backward"]}


def sweep_attention(args):
    trnsim = trnsim_binary()
    if not trnsim.exists():
        sys.exit(f"error: {trnsim} is missing: run `make` first (or set TRNSIM_BUILD_DIR)")
    for direction in args.direction:
        if direction not in ("forward", "backward"):
            sys.exit(f"error: unknown direction {direction!r} (forward, backward)")
    csv_path, png_path = check_outputs(args)
    points = [{"config": c, "direction": di, "batch": b, "seq": s, "head_dim": d, "causal": ca}
              for c in args.configs for di in args.direction for b in args.batch for s in args.seq
              for d in args.head_dim for ca in args.causal]
    if not points:
        sys.exit("error: the selection has no points")

    def command_for(p, trnsim, config, out):
        return [trnsim, "bench", "attention", "--seq", str(p["seq"]), "--head-dim", str(p["head_dim"]),
                "--batch", str(p["batch"]), "--heads", str(args.heads), "--kv-heads", str(args.kv_heads or args.heads),
                "--dtype", args.dtype, "--config", config, *(["--causal"] if p["causal"] else []),
                *(["--backward"] if p["direction"] == "backward" else []), "--csv", out]

    rows, failed = run_points(args, points, command_for, "attention")
    if rows:
        write_csv(csv_path, [(row, {}) for _, row in rows], [])
        print(f"{len(rows)} points -> {csv_path}")

        import plot_sweep
        plot_sweep.plot_attention(csv_path, png_path)
        print(f"plot -> {png_path}")
    finish(csv_path, len(points), failed)


# ---------------------------------------------------------------------------------------------
# `kernels`: (kernel, size name) -> how to run it. "bench" points go through `trnsim bench`
# (matmul, attention: MFU), "runner" points through kernel_runner (bandwidth against the core's HBM
# share). Sizes are [rows, columns] of a transformer activation (tokens x hidden 4096).
# ---------------------------------------------------------------------------------------------
ROWS = {"small": 1024, "large": 8192}
KERNELS = {
    "matmul": lambda r: ("bench", ["matmul", "--m", str(r), "--k", "4096", "--n", "4096"], f"{r}x4096x4096"),
    "attention_fwd": lambda r: ("bench", ["attention", "--seq", str(r), "--head-dim", "128"], f"s{r}xd128"),
    "attention_bwd": lambda r: ("bench", ["attention", "--seq", str(r), "--head-dim", "128", "--backward"],
                                f"s{r}xd128"),
    **{f"conv2d_{name}_{d[:3]}": (lambda r, name=name, x=x, w=w, s=s, p=p, d=d: (
        "bench", ["conv2d", "--input", f"{r // 1024}x{x}", "--weight", w, "--stride", str(s), "--padding", str(p),
                  *(["--backward"] if d == "backward" else [])], f"{r // 1024}x{x}*{w}/s{s}"))
       # ResNet-50 layers (batch 1 small, 8 large): conv2_x 3x3, conv3_x strided 3x3, conv4_x 3x3, a 1x1.
       for name, x, w, s, p in [("res2_3x3", "64x56x56", "64x64x3x3", 1, 1),
                                ("res3_3x3s2", "128x56x56", "128x128x3x3", 2, 1),
                                ("res4_3x3", "256x14x14", "256x256x3x3", 1, 1),
                                ("res3_1x1", "512x28x28", "128x512x1x1", 1, 0)]
       for d in ("forward", "backward")},
    "gelu": lambda r: ("runner", ["unary", f"shape={r}x4096", "op=gelu"], f"{r}x4096"),
    "add": lambda r: ("runner", ["binary", f"a_shape={r}x4096", f"b_shape={r}x4096", "op=add"], f"{r}x4096"),
    "softmax": lambda r: ("runner", ["softmax", f"shape={r}x4096"], f"{r}x4096"),
    "layernorm": lambda r: ("runner", ["layernorm", f"shape={r}x4096"], f"{r}x4096"),
    "rmsnorm": lambda r: ("runner", ["rmsnorm", f"shape={r}x4096"], f"{r}x4096"),
    "softmax_backward": lambda r: ("runner", ["softmax_backward", f"shape={r}x4096"], f"{r}x4096"),
    "rmsnorm_backward": lambda r: ("runner", ["rmsnorm_backward", f"shape={r}x4096"], f"{r}x4096"),
    "cross_entropy": lambda r: ("runner", ["cross_entropy", f"shape={r}x4096"], f"{r}x4096"),
    "adamw": lambda r: ("runner", ["adamw", f"elements={r * 4096}", "dtype=fp32"], f"{r * 4096}"),
}
KERNEL_COLUMNS = ["config", "dtype", "kernel", "shape", "time_ns", "gflop", "tflops", "mfu", "gbps",
                  "bandwidth_utilization", "bottleneck"]


def sweep_kernels(args):
    import json

    trnsim = trnsim_binary()
    runner = trnsim.parent / "kernel_runner"
    for tool in (trnsim, runner):
        if not tool.exists():
            sys.exit(f"error: {tool} is missing: run `make` first (or set TRNSIM_BUILD_DIR)")
    kernels = args.kernels or list(KERNELS)
    for name in kernels:
        if name not in KERNELS:
            sys.exit(f"error: unknown kernel {name!r} (known: {', '.join(KERNELS)})")
    for size in args.sizes:
        if size not in ROWS:
            sys.exit(f"error: unknown size {size!r} (known: {', '.join(ROWS)})")
    csv_path, png_path = check_outputs(args)
    points = [{"config": c, "kernel": k, "size": z} for c in args.configs for k in kernels for z in args.sizes]

    configs = effective_configs(trnsim, args.configs)

    def make_task(index, tools, shipped):
        p = points[index]
        kind, cli, _ = KERNELS[p["kernel"]](ROWS[p["size"]])
        if kind == "bench":
            argv = [tools["trnsim"], "bench", *cli, "--dtype", args.dtype, "--config", shipped[p["config"]],
                    "--csv", "point.csv"]
            return fanout.Task(argv, outputs=["point.csv"], label=point_label(p))
        dtype = [] if any(a.startswith("dtype=") for a in cli) else [f"dtype={args.dtype}"]
        argv = [tools["kernel_runner"], *cli, *dtype, "--bench", fanout.concat("config=", shipped[p["config"]])]
        return fanout.Task(argv, label=point_label(p))

    def row_of(p, result):
        """The CSV row of a point that ran; None for a kernel this kernel_runner does not know."""
        kind, cli, shape = KERNELS[p["kernel"]](ROWS[p["size"]])
        row = {"config": p["config"], "dtype": args.dtype, "kernel": p["kernel"], "shape": shape}
        if kind == "bench":
            tool = next(csv.DictReader(io.StringIO(result.outputs["point.csv"].decode())))
            row.update(time_ns=tool["time_ns"], gflop=tool["gflop"], tflops=tool["tflops"], mfu=tool["mfu"],
                       bottleneck=tool["bottleneck"])
            return row
        stats = json.loads(result.stdout.strip().splitlines()[-1])
        busy = {k[:-len("_busy")].split(".")[-1]: v for k, v in stats.items() if k.endswith("_busy")}
        row.update(time_ns=f"{stats['total_ns']:.1f}", gbps=f"{stats['gbps']:.1f}",
                   bandwidth_utilization=f"{stats['percent_of_share'] / 100:.4f}",
                   bottleneck=max(busy, key=busy.get) if busy else "")
        if "mfu" in stats:  # kernels with matmuls (conv2d) report it
            row["mfu"] = stats["mfu"]
        return row

    results = run_tasks(args, "kernels", {"trnsim": trnsim, "kernel_runner": runner}, configs, len(points),
                        make_task)
    rows, skipped, failed = [], set(), []
    for p, result in zip(points, results):
        kind, cli, _ = KERNELS[p["kernel"]](ROWS[p["size"]])
        if not result.ok and kind == "runner" and "unknown kernel" in result.stderr:
            skipped.add(cli[0])  # not (yet) in this build's kernel_runner
        elif not result.ok:
            failed.append(result)
        else:
            rows.append(row_of(p, result))
    if skipped:
        print(f"note: kernel_runner does not know {', '.join(sorted(skipped))}: skipped", file=sys.stderr)
    if not rows and not failed:
        sys.exit("error: the selection has no points")
    if rows:
        with csv_path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=KERNEL_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        print(f"{len(rows)} points -> {csv_path}")

        import plot_sweep
        plot_sweep.plot_kernels(csv_path, png_path)
        print(f"plot -> {png_path}")
    finish(csv_path, len(rows) + len(failed), failed)  # skipped kernels are not points


def add_common(parser):
    parser.add_argument("--csv", required=True, help="output CSV (refused if it exists, unless --force)")
    parser.add_argument("--png", help="output plot (default: the CSV's name with .png)")
    parser.add_argument("--force", action="store_true", help="overwrite existing --csv/--png")
    parser.add_argument("--jobs", type=int,
                        help="points run in parallel: the CPUs of the local Ray (default 1); with --ray-address, "
                             "the most points in flight at once (default: as many as the cluster runs)")
    parser.add_argument("--ray-address", metavar="ADDR",
                        help="join this Ray cluster (host:port of its head; default $RAY_ADDRESS if set) instead "
                             "of starting a local Ray; binaries and configs are sent to its workers by value")
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

    attention = sub.add_parser("attention", help="flash attention forward and backward over sequence lengths")
    add_common(attention)
    a = DEFAULT_ATTENTION
    attention.add_argument("--batch", type=int_list, default=a["batch"], help="default 1,4")
    attention.add_argument("--seq", type=int_list, default=a["seq"], help="default 512,1024,2048,4096,8192")
    attention.add_argument("--head-dim", type=int_list, default=a["head_dim"], help="default 64,128")
    attention.add_argument("--causal", type=int_list, default=a["causal"], help="0 and/or 1 (default 0,1)")
    attention.add_argument("--direction", type=csv_list, default=a["direction"], help="default forward,backward")
    attention.add_argument("--heads", type=int, default=1, help="query heads (default 1)")
    attention.add_argument("--kv-heads", type=int, help="key/value heads (default: --heads)")
    attention.set_defaults(func=sweep_attention)

    kernels = sub.add_parser("kernels", help="each library kernel at a few sizes")
    add_common(kernels)
    kernels.add_argument("--kernels", type=csv_list, help=f"comma-separated (default all: {','.join(KERNELS)})")
    kernels.add_argument("--sizes", type=csv_list, default=list(ROWS),
                         help=f"comma-separated ({', '.join(f'{k}: {v} rows' for k, v in ROWS.items())})")
    kernels.set_defaults(func=sweep_kernels)

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
