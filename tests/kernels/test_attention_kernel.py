"""Flash attention forward (kernel library) against torch's scaled_dot_product_attention on the
CPU, causal or not, grouped-query heads, head dims 64 and 128, ragged sequence lengths."""
import numpy as np
import pytest
import torch


@pytest.mark.parametrize("seq,head_dim,heads,kv_heads,causal", [
    (128, 64, 1, 1, False), (300, 128, 2, 1, False), (640, 64, 4, 2, True), (200, 128, 1, 1, True),
    # one-section tiles over several kv heads (K/V buffers reused two heads later); ragged 1024-key
    # sections with the causal diagonal in the second one
    (100, 128, 4, 4, False), (1100, 64, 2, 2, True), (1300, 128, 1, 1, False)])
def test_flash_attention_forward_matches_sdpa(run_trnsim, tmp_path, seq, head_dim, heads, kv_heads, causal):
    kernel = tmp_path / "fa.tasm"
    args = ["bench", "attention", "--seq", seq, "--head-dim", head_dim, "--heads", heads, "--kv-heads", kv_heads,
            "--config", "trn2", "--emit-tasm", kernel, "--force"] + ["--causal"] * causal
    built = run_trnsim(*args)
    assert built.returncode == 0, built.stderr
    rng = np.random.default_rng(seq + head_dim)
    q = torch.from_numpy(rng.standard_normal((1, heads, seq, head_dim)).astype(np.float32)).bfloat16().float()
    k = torch.from_numpy(rng.standard_normal((1, kv_heads, seq, head_dim)).astype(np.float32)).bfloat16().float()
    v = torch.from_numpy(rng.standard_normal((1, kv_heads, seq, head_dim)).astype(np.float32)).bfloat16().float()
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", tensor.numpy())
    result = run_trnsim("run", kernel, "--config", "trn2", "--input", f"q={tmp_path / 'q.npy'}",
                        "--input", f"k={tmp_path / 'k.npy'}", "--input", f"v={tmp_path / 'v.npy'}",
                        "--output", f"o={tmp_path / 'o.npy'}")
    assert result.returncode == 0, result.stderr
    got = torch.from_numpy(np.load(tmp_path / "o.npy"))
    group = heads // kv_heads
    expected = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1), is_causal=causal)
    # P is rounded to bf16 before P V (as on hardware) and O is written as bf16: ~2^-8 relative.
    assert torch.allclose(got, expected, atol=2e-2, rtol=2e-2), float((got - expected).abs().max())


@pytest.mark.parametrize("causal", [False, True])
def test_forward_writes_the_logsumexp_the_backward_needs(run_trnsim, tmp_path, causal):
    seq, d = 300, 64
    kernel = tmp_path / "fa.tasm"
    built = run_trnsim("bench", "attention", "--seq", seq, "--head-dim", d, "--lse", "--config", "trn2",
                       "--emit-tasm", kernel, "--force", *(["--causal"] if causal else []))
    assert built.returncode == 0, built.stderr
    rng = np.random.default_rng(5)
    q, k, v = (torch.from_numpy(rng.standard_normal((1, 1, seq, d)).astype(np.float32)).bfloat16().float()
               for _ in range(3))
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        np.save(tmp_path / f"{name}.npy", tensor.numpy())
    result = run_trnsim("run", kernel, "--config", "trn2", *[f"--input={n}={tmp_path / (n + '.npy')}" for n in "qkv"],
                        "--output", f"o={tmp_path / 'o.npy'}", "--output", f"lse={tmp_path / 'lse.npy'}")
    assert result.returncode == 0, result.stderr
    scores = (q @ k.transpose(-1, -2)) / d ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.logsumexp(scores, dim=-1)
    got = torch.from_numpy(np.load(tmp_path / "lse.npy"))
    assert torch.allclose(got, expected, atol=1e-4, rtol=1e-5), float((got - expected).abs().max())
