#!/usr/bin/env python3
"""A training step (forward, backward, AdamW) of a real model's shapes on one logical core, in
trnsim's timing-only mode (issue 15): the model is built on the device without host memory for its
weights, every op is timed as in values mode, identical layers hit the timing cache.

    PYTHONPATH=build/python python tools/bench/timing_only_step.py --model llama3-8b --config trn2

What it prints:
  1. the whole model's step if it fits the logical core's HBM, else the OOM that says it does not;
  2. for a model truncated to --layers L and L+1 decoder layers: host seconds, peak host RSS,
     simulated step time, MFU, the HBM high-water mark and the timing-cache hit rate;
  3. the per-layer simulated time (the difference of the two) and the whole model's step time
     extrapolated from it (embedding + head + n_layers x per layer), marked as extrapolated;
  4. the per-op table of the L-layer step and the ops charged an estimate (no kernel).
"""
import argparse
import json
import resource
import sys
import time

import torch

import trnsim

MODELS = {
    # Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json)
    "llama3-8b": dict(arch="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      rope_theta=500000.0, tie_word_embeddings=False),
    # Qwen3-32B (Qwen/Qwen3-32B config.json)
    "qwen3-32b": dict(arch="qwen3", vocab_size=151936, hidden_size=5120, intermediate_size=25600,
                      num_hidden_layers=64, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                      rope_theta=1000000.0, tie_word_embeddings=False),
}


def build_config(name, layers, shard=1):
    """The model's config with `layers` decoder layers; `shard` > 1 keeps what one rank of
    `shard`-way tensor parallelism holds (heads, KV heads, FFN and vocabulary divided by it; the
    collectives between the ranks are not part of this single-core step)."""
    import transformers
    spec = dict(MODELS[name])
    arch = spec.pop("arch")
    spec["num_hidden_layers"] = layers
    for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"):
        if spec[key] % shard:
            raise ValueError(f"{name}: {key}={spec[key]} does not divide by --shard {shard}")
        spec[key] //= shard
    spec["max_position_embeddings"] = 40960
    cls = transformers.LlamaConfig if arch == "llama" else transformers.Qwen3Config
    config = cls(**spec)
    config._attn_implementation = "sdpa"
    return config


def build_model(config):
    import transformers
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("neuron"):
            return transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def step(model, seq, batch):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="neuron")
    torch.neuron.reset_peak_memory_stats()
    trnsim.reset_simulated_time()
    with trnsim.profile(trace=False) as prof:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return prof


def run(name, layers, seq, batch, shard=1):
    t0 = time.perf_counter()
    model = build_model(build_config(name, layers, shard))
    prof = step(model, seq, batch)
    totals = prof.totals()
    result = {
        "layers": layers,
        "shard": shard,
        "host_s": time.perf_counter() - t0,
        "simulated_ms": totals["simulated_ns"] / 1e6,
        "mfu": totals["mfu"],
        "hbm_peak_gib": torch.neuron.max_memory_allocated() / 2**30,
        "timing_cache_hit_rate": totals["timing_cache_hit_rate"],
        "kernels": totals["ops"],
        "estimate_ops": totals["estimate_ops"],
        "estimate_ms": totals["estimate_ns"] / 1e6,
    }
    del model
    return result, prof


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="llama3-8b")
    parser.add_argument("--config", default="trn2", help="trnsim config (one logical core of it)")
    parser.add_argument("--layers", type=int, default=1, help="decoder layers of the truncated model (and L+1)")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--shard", default="auto", choices=["auto", "1", "2", "4", "8"],
                        help="tensor-parallel share one core holds (1, 2, 4, 8), or auto: the smallest whose "
                             "truncated model trains in the core's HBM")
    parser.add_argument("--top", type=int, default=15, help="rows of the per-op table")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)

    trnsim.set_config(args.config, values=False)
    trnsim.set_fallback_mode("allow")
    info = trnsim.config()
    full_layers = MODELS[args.model]["num_hidden_layers"]
    print(f"{args.model} on one {info['name']} logical core ({info['cores_per_device']} physical cores, "
          f"{info['hbm_bytes_per_device'] / 2**30:.1f} GiB HBM), seq {args.seq}, batch {args.batch}, bf16, "
          f"timing-only")

    # The whole model's step first: it either fits (and is measured, not extrapolated) or its OOM
    # says how much HBM it wanted.
    t0 = time.perf_counter()
    whole = None
    try:
        whole, _ = run(args.model, full_layers, args.seq, args.batch)
        fits = (f"the whole model ({full_layers} layers) trains in the logical core's HBM: step "
                f"{whole['simulated_ms']:.1f} ms simulated, HBM peak {whole['hbm_peak_gib']:.2f} GiB")
    except torch.OutOfMemoryError as e:
        fits = f"the whole model ({full_layers} layers) does not fit one logical core: {str(e).splitlines()[0]}"
    print(f"  {fits} ({time.perf_counter() - t0:.1f} s host)")

    shards = [1, 2, 4, 8] if args.shard == "auto" else [int(args.shard)]
    for shard in shards:
        try:
            trnsim.reset_timing_cache_stats()
            small, prof = run(args.model, args.layers, args.seq, args.batch, shard)
            large, _ = run(args.model, args.layers + 1, args.seq, args.batch, shard)
            break
        except torch.OutOfMemoryError as e:
            print(f"  {args.layers + 1} layer(s) with shard {shard} do not fit: {str(e).splitlines()[0][:120]}...")
            if shard == shards[-1]:
                return 1
    if shard > 1:
        print(f"  below: what one rank of {shard}-way tensor parallelism holds (heads, KV heads, FFN, vocabulary / "
              f"{shard}), its collectives not included")
    per_layer_ms = large["simulated_ms"] - small["simulated_ms"]
    outside_ms = small["simulated_ms"] - args.layers * per_layer_ms
    whole_ms = outside_ms + full_layers * per_layer_ms
    for r in (small, large):
        print(f"  {r['layers']} layer(s): host {r['host_s']:.1f} s, simulated step {r['simulated_ms']:.2f} ms, "
              f"MFU {100 * r['mfu']:.1f}%, HBM peak {r['hbm_peak_gib']:.2f} GiB, timing cache hit rate "
              f"{100 * r['timing_cache_hit_rate']:.0f}%, {r['kernels']} kernels, {r['estimate_ops']} estimated ops "
              f"({r['estimate_ms']:.3f} ms)")
    print(f"  per decoder layer {per_layer_ms:.2f} ms simulated; embedding + head + optimizer outside the layers "
          f"{outside_ms:.2f} ms; whole {full_layers}-layer step extrapolated (as if its HBM sufficed): "
          f"{whole_ms:.1f} ms ({args.batch * args.seq / (whole_ms / 1e3):.0f} tokens/s)")
    print(f"  peak host RSS {peak_rss_gib():.2f} GiB")
    print()
    print(prof.table(top=args.top))
    estimated = sorted({r["op"] for r in prof.records if r["kind"] == "estimate"})
    print(f"\nops charged an estimate (no kernel in timing-only mode): {', '.join(estimated) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "config": args.config, "fits": fits, "whole": whole, "shard": shard,
                       "runs": [small, large],
                       "per_layer_ms": per_layer_ms, "whole_step_ms_extrapolated": whole_ms,
                       "peak_rss_gib": peak_rss_gib(), "estimated_ops": estimated}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
