#!/usr/bin/env python3
"""A training step of a real model's shapes with FSDP2 (and optionally tensor parallelism) on a
simulated multi-chip system, timing-only, in one process (trnsim.simulate_world): this process is
rank 0 of a symmetric world, every collective is timed for its whole group on the system model.

    PYTHONPATH=build/python python examples/distributed/fsdp_step.py --model qwen3-32b \\
        --config trn2 --system trn2-48xlarge --world 64

The model is built on the meta device, each decoder layer wrapped for activation checkpointing
(--ac full, TorchTitan's default for these sizes) and sharded with fully_shard (as TorchTitan does), materialised on the device with to_empty (no values: timing-only), and trained for --steps
steps (AdamW, bf16, seq --seq); the last step is reported: simulated step time, tokens/s, MFU,
communication on the collective engines and the part the compute waited for (exposed), HBM per rank.
"""
import argparse
import os
import sys
import time

import torch

import trnsim

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench"))
from timing_only_step import MODELS, build_config  # noqa: E402  the models' published shapes


def tensor_parallel_plan():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    return {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen3-32b")
    parser.add_argument("--config", default="trn2")
    parser.add_argument("--system", default=None, help="the config's system (default: the smallest that holds --world)")
    parser.add_argument("--world", type=int, default=64, help="ranks (logical cores)")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (FSDP over world / tp)")
    parser.add_argument("--layers", type=int, default=None, help="decoder layers (default: the model's)")
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1, help="sequences per data-parallel rank")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--ac", choices=["full", "none"], default="full",
                        help="activation checkpointing per decoder layer (TorchTitan's 'full': recompute in backward)")
    args = parser.parse_args(argv)

    import torch.distributed as dist
    import transformers
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    t0 = time.perf_counter()
    trnsim.set_config(args.config, values=False)
    trnsim.set_fallback_mode("allow")
    trnsim.simulate_world(args.world, system=args.system)
    if args.world % args.tp:
        raise SystemExit(f"--world {args.world} does not divide by --tp {args.tp}")
    dp = args.world // args.tp
    if args.tp > 1:
        mesh = init_device_mesh("neuron", (dp, args.tp), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    else:
        dp_mesh, tp_mesh = init_device_mesh("neuron", (dp,), mesh_dim_names=("dp",)), None

    config = build_config(args.model, args.layers or MODELS[args.model]["num_hidden_layers"])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    finally:
        torch.set_default_dtype(previous)
    layers = model.model.layers
    if tp_mesh is not None:
        from torch.distributed.tensor.parallel import parallelize_module
        for layer in layers:
            parallelize_module(layer, tp_mesh, tensor_parallel_plan())
    if args.ac == "full":
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
        for i, layer in enumerate(layers):
            layers[i] = checkpoint_wrapper(layer, preserve_rng_state=False)
    # TorchTitan's units: the embedding, each decoder layer, the final norm with the output head, the root.
    fully_shard(model.model.embed_tokens, mesh=dp_mesh)
    for layer in layers:
        fully_shard(layer, mesh=dp_mesh)
    fully_shard([model.model.norm, model.lm_head], mesh=dp_mesh, reshard_after_forward=False)
    fully_shard(model, mesh=dp_mesh)
    model.to_empty(device="neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ids = torch.zeros(args.batch, args.seq, dtype=torch.long, device="neuron")
    setup_s = time.perf_counter() - t0

    for step in range(args.steps):
        torch.neuron.reset_peak_memory_stats()
        t1 = time.perf_counter()
        begin_ns = trnsim.simulated_ns()
        with trnsim.profile(trace=False) as prof:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            torch.neuron.synchronize()
        step_ns = trnsim.simulated_ns() - begin_ns  # the default stream's clock: side streams overlap it
        step_host_s = time.perf_counter() - t1
    totals = prof.totals()
    info = trnsim.config()
    tokens = dp * args.batch * args.seq
    peak_flops = info["peak_bf16_tflops_per_device"] * 1e12
    # Hardware FLOPs utilisation: the matmul FLOPs rank 0's kernels ran (activation recompute included).
    hfu = totals["flops"] / (step_ns * 1e-9 * peak_flops) if step_ns > 0 else 0.0
    # Model FLOPs utilisation as TorchTitan reports it: 6 (N - embedding) + 12 L H Q T per token, per rank's share.
    params = sum(p.numel() for p in model.parameters())  # DTensor numel: the whole parameter
    embedding = model.model.embed_tokens.weight.numel()
    per_token = 6 * (params - embedding) + 12 * config.num_hidden_layers * config.num_attention_heads * \
        config.head_dim * args.seq
    mfu = per_token * tokens / args.world / (step_ns * 1e-9 * peak_flops) if step_ns > 0 else 0.0
    print(f"{args.model} ({config.num_hidden_layers} layers), FSDP2 over {dp} ranks"
          + (f" x TP {args.tp}" if args.tp > 1 else "")
          + f" = {args.world} logical cores of {info['name']} system {dist.group.WORLD.system_name}, "
            f"seq {args.seq}, batch {args.batch} per DP rank, bf16, activation checkpointing {args.ac}, "
            f"timing-only (symmetric world)")
    print(f"  step {step_ns / 1e6:.1f} ms simulated, {tokens / (step_ns * 1e-9):.0f} tokens/s, MFU {100 * mfu:.1f}% "
          f"(TorchTitan's model FLOPs; {params / 1e9:.2f} B parameters), hardware FLOPs utilisation "
          f"{100 * hfu:.1f}% (recompute included)")
    print(f"  collectives {totals['collectives']}: {totals['collective_ns'] / 1e6:.1f} ms on the collective engines, "
          f"{totals['exposed_communication_ns'] / 1e6:.1f} ms exposed (compute waiting), "
          f"{totals['collective_bytes'] / 2**30:.2f} GiB")
    print(f"  HBM per rank: peak {torch.neuron.max_memory_allocated() / 2**30:.2f} GiB of "
          f"{info['hbm_bytes_per_device'] / 2**30:.1f} GiB")
    print(f"  host: set-up {setup_s:.1f} s, last step {step_host_s:.1f} s, total {time.perf_counter() - t0:.1f} s; "
          f"timing cache hit rate {100 * totals['timing_cache_hit_rate']:.0f}%, "
          f"{totals['estimate_ops']} ops charged an estimate")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
