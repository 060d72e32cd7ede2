"""The flagship demo: a small decoder-only transformer in plain PyTorch, trained on simulated trn2 and trn3.

The model (token + learned positional embedding, pre-norm blocks of causal self-attention through
F.scaled_dot_product_attention and a GELU MLP, final norm, LM head, cross-entropy) runs in bf16 on
the device "neuron". One warm-up step runs outside the profile; the next training step(s) (forward,
backward, AdamW) run under ``trnsim.profile()``. For each config it prints the per-op table, then the
totals side by side and the trn3/trn2 speed-up, writes a Perfetto trace per config, and checks the
losses against the same model on the CPU.

    .venv/bin/python examples/transformer_demo.py [--layers 2] [--d-model 512] [--seq 256]
        [--batch 2] [--vocab 4096] [--steps 1] [--configs trn2 trn3] [--out build/demo]

Parameters, activations and gradients are bf16 on the device and on the CPU reference (cross-entropy
in fp32 after an explicit cast of the logits). bf16 parameters rather than fp32 master weights with
bf16 compute: the latter needs autocast, and bf16 parameters run every op of a step (embedding,
layer norm, SDPA, GELU, matmuls, cross-entropy, fused AdamW) as a kernel with no CPU fallback. The
linear layers and layer norms carry no bias (as in PaLM/LLaMA-style models): half the parameter
tensors, so half the optimizer kernels. ``--adamw foreach`` shows torch's default multi-tensor
AdamW (about 13 element-wise ops per parameter; several times slower to simulate on the host).

The model class (``TinyGPT``), ``make_model``, ``make_batches``, ``make_optimizer`` and
``train_steps`` are importable without running the demo (tests/frontend/test_training.py).
"""
import argparse
import math
import pathlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # importable without the device (the model class alone needs only torch)
    import trnsim
except ImportError:  # pragma: no cover
    trnsim = None


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        # [b, s, d] -> [b, heads, s, head_dim]
        q, k, v = (t.view(b, s, self.n_heads, d // self.n_heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model, bias=False)
        self.attn = CausalSelfAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model, bias=False)
        self.fc1 = nn.Linear(d_model, 4 * d_model, bias=False)
        self.fc2 = nn.Linear(4 * d_model, d_model, bias=False)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyGPT(nn.Module):
    """Decoder-only transformer: head dim ``head_dim`` (64 or 128), no dropout, causal attention."""

    def __init__(self, vocab=4096, d_model=256, n_layers=2, max_seq=256, head_dim=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_seq, d_model)
        self.blocks = nn.ModuleList(Block(d_model, d_model // head_dim) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        # The first S rows of the positional table (a view; same as self.pos(arange(S))).
        x = self.tok(idx) + self.pos.weight[: idx.shape[1]]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def make_model(vocab, d_model, layers, seq, dtype=torch.bfloat16, seed=0):
    torch.manual_seed(seed)
    return TinyGPT(vocab, d_model, layers, seq).to(dtype)


def make_batches(steps, batch, seq, vocab, seed=1):
    """Deterministic token batches (CPU tensors): next-token targets of a random sequence."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        out.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    return out


ADAMW_IMPLS = ("fused", "foreach", "for-loop")


def make_optimizer(model, impl="fused", lr=1e-3):
    """torch.optim.AdamW with one of its three implementations: "fused" (one _fused_adamw_ kernel
    per parameter on the device), "foreach" (torch's default on an accelerator: ~13 _foreach_*
    element-wise ops per parameter) or "for-loop" (per-tensor ops)."""
    flags = {"fused": dict(fused=True), "foreach": dict(foreach=True), "for-loop": dict(foreach=False)}[impl]
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, **flags)


def train_step(model, optimizer, inputs, targets, device):
    loss = model(inputs.to(device), targets.to(device))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_steps(model, optimizer, batches, device):
    return [train_step(model, optimizer, x, y, device) for x, y in batches]


# --- the demo ---------------------------------------------------------------------------------

def _fmt_us(ns):
    return f"{ns / 1e3:,.1f}"


def run_config(config, args, batches, outdir):
    trnsim.set_config(config)
    trnsim.reset_simulated_time()
    trnsim.reset_fallback_report()
    model = make_model(args.vocab, args.d_model, args.layers, args.seq).to("neuron")
    optimizer = make_optimizer(model, args.adamw)
    host0 = time.perf_counter()
    losses = train_steps(model, optimizer, batches[:1], "neuron")  # warm-up, not profiled
    warmup_s = time.perf_counter() - host0
    with trnsim.profile() as prof:
        losses += train_steps(model, optimizer, batches[1:], "neuron")
    trace = outdir / f"transformer_{config}.json"
    slices = prof.export_trace(trace)
    return losses, prof, trace, slices, warmup_s


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=1, help="profiled training steps (after one warm-up step)")
    parser.add_argument("--configs", nargs="+", default=["trn2", "trn3"])
    parser.add_argument("--adamw", choices=ADAMW_IMPLS, default="fused",
                        help="AdamW implementation (fused: one kernel per parameter, the fastest to simulate)")
    parser.add_argument("--out", default="build/demo", help="directory for the Perfetto traces")
    parser.add_argument("--top", type=int, default=15, help="rows of the per-op table")
    args = parser.parse_args(argv)
    if trnsim is None:
        parser.error("`import trnsim` failed: build the project (make) or put build/python on PYTHONPATH")

    outdir = pathlib.Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    batches = make_batches(1 + args.steps, args.batch, args.seq, args.vocab)
    n_params = sum(p.numel() for p in make_model(args.vocab, args.d_model, args.layers, args.seq).parameters())
    print(f"TinyGPT: {args.layers} layers, d_model {args.d_model}, {args.d_model // 64} heads of 64, "
          f"seq {args.seq}, batch {args.batch}, vocab {args.vocab}, {n_params / 1e6:.2f} M params, bf16; "
          f"AdamW ({args.adamw}); 1 warm-up step + {args.steps} profiled step(s)")

    host0 = time.perf_counter()
    cpu_model = make_model(args.vocab, args.d_model, args.layers, args.seq)
    cpu_losses = train_steps(cpu_model, make_optimizer(cpu_model, args.adamw), batches, "cpu")
    cpu_s = time.perf_counter() - host0

    results = {}
    for config in args.configs:
        losses, prof, trace, slices, warmup_s = run_config(config, args, batches, outdir)
        results[config] = (losses, prof, trace, slices, warmup_s)
        print(f"\n=== {config}: {len(batches) - 1} profiled training step(s) (forward, backward, AdamW) ===")
        print(prof.table(top=args.top))

    # --- totals side by side
    names = list(results)
    totals = {c: results[c][1].totals() for c in names}
    steps = max(1, args.steps)
    rows = [
        ("simulated time / step (us)", lambda t: _fmt_us(t["simulated_ns"] / steps)),
        ("  kernels (us)", lambda t: _fmt_us(t["kernel_ns"] / steps)),
        ("  host copies (us)", lambda t: _fmt_us(t["copy_ns"] / steps)),
        ("  CPU fallbacks (us)", lambda t: _fmt_us(t["fallback_ns"] / steps)),
        ("MFU (bf16 peak) %", lambda t: f"{100 * t['mfu']:.1f}"),
        ("matmul GFLOPs / step", lambda t: f"{t['flops'] / steps / 1e9:.2f}"),
        ("kernels / step", lambda t: f"{t['ops'] / steps:.0f}"),
        ("fallback ops / step", lambda t: f"{t['fallback_ops'] / steps:.0f}"),
        ("host seconds (profiled)", lambda t: f"{t['host_s']:.1f}"),
    ]
    width = 14
    print(f"\n=== totals per training step ===")
    print(f"{'':<28}" + "".join(f"{c:>{width}}" for c in names))
    for label, fn in rows:
        print(f"{label:<28}" + "".join(f"{fn(totals[c]):>{width}}" for c in names))
    print(f"{'host seconds (warm-up step)':<28}" + "".join(f"{results[c][4]:>{width}.1f}" for c in names))
    if "trn2" in totals and "trn3" in totals and totals["trn3"]["simulated_ns"] > 0:
        print(f"speed-up trn3 / trn2: {totals['trn2']['simulated_ns'] / totals['trn3']['simulated_ns']:.2f}x "
              f"(kernels only: {totals['trn2']['kernel_ns'] / max(totals['trn3']['kernel_ns'], 1e-9):.2f}x)")

    # --- numbers against the CPU
    print(f"\n=== loss against the CPU (same model, same batches; CPU bf16 took {cpu_s:.1f} s) ===")
    print(f"{'step':<6}{'cpu':>10}" + "".join(f"{c:>10}" for c in names) + f"{'max rel diff':>14}")
    worst = 0.0
    for i, cpu_loss in enumerate(cpu_losses):
        device_losses = [results[c][0][i] for c in names]
        diff = max(abs(l - cpu_loss) / max(abs(cpu_loss), 1e-12) for l in device_losses)
        worst = max(worst, diff)
        label = "warm" if i == 0 else str(i)
        print(f"{label:<6}{cpu_loss:>10.4f}" + "".join(f"{l:>10.4f}" for l in device_losses) + f"{diff:>14.1e}")
    print(f"max relative difference to the CPU: {worst:.1e} ({'OK' if worst < 0.05 else 'TOO LARGE'}; "
          f"bf16 tolerance 5e-02); ln(vocab) = {math.log(args.vocab):.4f}")

    fallbacks = {}
    for c in names:
        for r in results[c][1].records:
            if r["kind"] == "fallback":
                key = (r["op"], ", ".join(str(list(s)) for s in r["shapes"]), r["dtype"])
                fallbacks[key] = fallbacks.get(key, 0) + 1
    if fallbacks:
        print("ops that fell back to the CPU in the profiled steps (all configs):")
        for (op, shapes, dtype), n in sorted(fallbacks.items()):
            print(f"  {op} {shapes} {dtype} x{n}")
    else:
        print("no op fell back to the CPU in the profiled steps")

    print("\nPerfetto traces (open in https://ui.perfetto.dev: 'Open trace file'; tracks: ops, host link, "
          "then each core's engines and DMA queues):")
    for c in names:
        print(f"  {c}: {results[c][2]} ({results[c][3]} slices)")
    return 0 if worst < 0.05 else 1


if __name__ == "__main__":
    raise SystemExit(main())
