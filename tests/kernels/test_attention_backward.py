"""Flash attention backward (kernel library) against torch autograd of scaled_dot_product_attention
(fp32 math on bf16-rounded inputs): causal or not, grouped-query heads, head dims 64 and 128,
ragged sequence lengths, seq_q != seq_k."""
import math

import numpy as np
import pytest
import torch


def bf16(array):
    return torch.from_numpy(array.astype(np.float32)).bfloat16().float()


@pytest.mark.parametrize("seq,seq_k,head_dim,heads,kv_heads,causal", [
    (128, 128, 64, 1, 1, False),
    (300, 300, 128, 2, 1, False),   # ragged, two query heads summed into one kv head
    (640, 640, 64, 4, 2, True),     # causal across two key blocks, GQA
    (200, 200, 128, 1, 1, True),    # causal, ragged
    (256, 700, 64, 1, 1, False),    # more keys than queries, ragged key block
])
def test_flash_attention_backward_matches_autograd(run_trnsim, tmp_path, seq, seq_k, head_dim, heads, kv_heads,
                                                   causal):
    kernel = tmp_path / "fab.tasm"
    args = ["bench", "attention", "--backward", "--seq", seq, "--seq-k", seq_k, "--head-dim", head_dim,
            "--heads", heads, "--kv-heads", kv_heads, "--config", "trn2", "--emit-tasm", kernel,
            "--force"] + ["--causal"] * causal
    built = run_trnsim(*args)
    assert built.returncode == 0, built.stderr
    assert "attention bwd" in built.stdout

    rng = np.random.default_rng(seq * 7 + seq_k + head_dim)
    q = bf16(rng.standard_normal((1, heads, seq, head_dim)))
    k = bf16(rng.standard_normal((1, kv_heads, seq_k, head_dim)))
    v = bf16(rng.standard_normal((1, kv_heads, seq_k, head_dim)))
    d_out = bf16(rng.standard_normal((1, heads, seq, head_dim)))
    group = heads // kv_heads
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), is_causal=causal)
    out.backward(d_out)
    # What the forward keeps for the backward: O (as bf16) and the row logsumexp of the scaled scores.
    with torch.no_grad():
        scores = q @ k.repeat_interleave(group, dim=1).transpose(-1, -2) / math.sqrt(head_dim)
        if causal:
            scores = scores.masked_fill(torch.ones(seq, seq_k, dtype=torch.bool).triu(1), float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)
    inputs = {"q": q.detach(), "k": k.detach(), "v": v.detach(), "o": out.detach().bfloat16().float(),
              "do": d_out, "lse": lse}
    run_args = ["run", kernel, "--config", "trn2"]
    for name, tensor in inputs.items():
        np.save(tmp_path / f"{name}.npy", tensor.numpy())
        run_args += ["--input", f"{name}={tmp_path / (name + '.npy')}"]
    for name in ("dq", "dk", "dv"):
        run_args += ["--output", f"{name}={tmp_path / (name + '.npy')}"]
    result = run_trnsim(*run_args)
    assert result.returncode == 0, result.stderr

    for name, expected in (("dq", q.grad), ("dk", k.grad), ("dv", v.grad)):
        got = torch.from_numpy(np.load(tmp_path / f"{name}.npy")).float()
        assert got.shape == expected.shape, name
        # P and dS are rounded to bf16 before their matmuls (as on hardware) and the gradients are
        # written as bf16: errors of ~1% of the gradient's scale.
        err = float((got - expected).abs().max() / expected.abs().max())
        assert err < 1.5e-2, (name, err)
        rel = float((got - expected).norm() / expected.norm())
        assert rel < 1e-2, (name, rel)
