"""The PyTorch device "neuron": embedding / index_select (embedding gather kernel) on the simulator
against the CPU, with no fallback op."""
import pytest
import torch

from test_ops import DTYPES, check, no_fallback, rand, strict_lowering, trnsim  # noqa: F401


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ids_shape,vocab,dim", [((7,), 50, 33), ((3, 131), 1000, 64), ((2, 5), 17, 300)])
def test_embedding_forward(ids_shape, vocab, dim, dtype):
    table = rand((vocab, dim), dtype, 51)
    ids = torch.randint(0, vocab, ids_shape, generator=torch.Generator().manual_seed(52))
    y = torch.nn.functional.embedding(ids.to("neuron"), table.to("neuron"))
    assert torch.equal(y.cpu(), torch.nn.functional.embedding(ids, table))
    no_fallback("embedding")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,n", [((50, 33), 7), ((300, 4, 5), 130), ((9,), 20)])
def test_index_select_dim0(shape, n, dtype):
    x = rand(shape, dtype, 53)
    idx = torch.randint(0, shape[0], (n,), generator=torch.Generator().manual_seed(54))
    y = x.to("neuron").index_select(0, idx.to("neuron"))
    assert torch.equal(y.cpu(), x.index_select(0, idx))
    no_fallback("index_select")


def test_embedding_out_of_range_raises():
    table = torch.randn(10, 8).to("neuron")
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([3, 10]).to("neuron"), table)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_nn_embedding_forward_backward(padding_idx, dtype):
    """nn.Embedding forward (gather) and embedding_dense_backward (one-hot^T @ grad on the matmul kernel)."""
    ids = torch.randint(0, 40, (4, 9), generator=torch.Generator().manual_seed(70))
    ids[0, :3] = 3
    weight = rand((40, 16), dtype, 71)
    wd = weight.to("neuron").requires_grad_()
    wc = weight.clone().requires_grad_()
    out_dev = torch.nn.functional.embedding(ids.to("neuron"), wd, padding_idx=padding_idx)
    out = torch.nn.functional.embedding(ids, wc, padding_idx=padding_idx)
    check(out_dev, out, dtype)
    grad = rand(out.shape, dtype, 72)
    out_dev.backward(grad.to("neuron"))
    out.backward(grad)
    check(wd.grad, wc.grad, dtype, 36)
    no_fallback("embedding", "embedding_dense_backward")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding_idx", [None, 3])
def test_large_vocabulary_embedding_backward_adds_rows(padding_idx, dtype):
    """A vocabulary too large for the one-hot matmul (V * N > 2^26): embedding_dense_backward adds grad rows into
    the rows their ids name (scatter kernel), repeats and the padding row included; no fallback."""
    vocab, n = 70_000, 1_000
    ids = torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(73))  # many repeats
    ids[::7] = torch.randint(0, vocab, ids[::7].shape, generator=torch.Generator().manual_seed(74))
    ids[:5] = 3
    weight = rand((vocab, 8), dtype, 75)
    wd = weight.to("neuron").requires_grad_()
    wc = weight.clone().requires_grad_()
    grad = rand((n, 8), dtype, 76)
    torch.nn.functional.embedding(ids.to("neuron"), wd, padding_idx=padding_idx).backward(grad.to("neuron"))
    torch.nn.functional.embedding(ids, wc, padding_idx=padding_idx).backward(grad)
    assert wd.grad is not None and wd.grad.device.type == "neuron"
    check(wd.grad, wc.grad, dtype, n)
    if padding_idx is not None:
        assert not wd.grad[padding_idx].cpu().any()
    no_fallback("embedding", "embedding_dense_backward")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("n,c", [(33, 10), (130, 257), (1, 3), (70, 5000)])
def test_nll_loss_forward_backward(n, c, reduction, dtype):
    x = rand((n, c), dtype, 55).log_softmax(1)
    t = torch.randint(0, c, (n,), generator=torch.Generator().manual_seed(56))
    if n > 1:
        t[::4] = -100
    xd = x.to("neuron").requires_grad_()
    xc = x.clone().requires_grad_()
    loss = torch.nn.functional.nll_loss(xd, t.to("neuron"), reduction=reduction)
    expected = torch.nn.functional.nll_loss(xc, t, reduction=reduction)
    check(loss.detach(), expected.detach(), dtype, n)
    grad = rand(expected.shape, dtype, 57).to("neuron")
    trnsim.reset_simulated_time()
    loss.backward(grad)
    # The gradient is built on the device (one-hot kernel): nothing crosses the host link.
    assert [r["kind"] for r in trnsim.op_log()] == ["kernel"] * len(trnsim.op_log())
    expected.backward(grad.cpu())
    check(xd.grad, xc.grad, dtype)
    no_fallback("nll_loss_forward", "nll_loss_backward")


def test_nll_loss_total_weight():
    x = rand((9, 5), torch.float32, 58).log_softmax(1)
    t = torch.tensor([1, -100, 3, 0, 4, 4, -100, 2, 2])
    for r in (0, 1, 2):
        out, tw = torch.ops.aten.nll_loss_forward(x.to("neuron"), t.to("neuron"), None, r, -100)
        eo, etw = torch.ops.aten.nll_loss_forward(x, t, None, r, -100)
        check(out, eo, torch.float32, 9)
        assert tw.cpu().item() == etw.item()
    no_fallback("nll_loss_forward")


def test_nll_loss_with_weight_falls_back():
    x = rand((6, 4), torch.float32, 59).log_softmax(1)
    t = torch.tensor([0, 1, 2, 3, 0, 1])
    w = torch.rand(4)
    out = torch.nn.functional.nll_loss(x.to("neuron"), t.to("neuron"), weight=w.to("neuron"))
    torch.testing.assert_close(out.cpu(), torch.nn.functional.nll_loss(x, t, weight=w))
    assert any("nll_loss_forward" in op for op in trnsim.fallback_report())


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_forward_backward_no_fallback(dtype):
    """F.cross_entropy = _log_softmax + nll_loss: forward and backward with TRNSIM_FALLBACK=error."""
    x = rand((37, 50), dtype, 60)
    t = torch.randint(0, 50, (37,), generator=torch.Generator().manual_seed(61))
    t[3] = -100
    xd = x.to("neuron").requires_grad_()
    xc = x.clone().requires_grad_()
    td = t.to("neuron")
    trnsim.set_fallback_mode("error")
    loss = torch.nn.functional.cross_entropy(xd, td)
    loss.backward()
    trnsim.set_fallback_mode("allow")
    expected = torch.nn.functional.cross_entropy(xc, t)
    expected.backward()
    check(loss.detach(), expected.detach(), dtype, 37)
    check(xd.grad, xc.grad, dtype)
    assert trnsim.fallback_report() == {}


SDPA_CASES = [  # (B, H, Hkv, Sq, Sk, d, causal)
    (1, 2, 2, 130, 130, 64, True),
    (2, 1, 1, 77, 200, 128, False),
    (1, 4, 2, 129, 129, 64, True),  # GQA
    (1, 2, 1, 64, 300, 128, False),  # GQA
]


@pytest.mark.parametrize("b,h,hkv,sq,sk,d,causal", SDPA_CASES)
def test_sdpa_flash_attention_forward_backward(b, h, hkv, sq, sk, d, causal):
    """F.scaled_dot_product_attention in bf16 on the flash attention kernels (overrideable backend)."""
    dtype = torch.bfloat16
    q, k, v = rand((b, h, sq, d), dtype, 62), rand((b, hkv, sk, d), dtype, 63), rand((b, hkv, sk, d), dtype, 64)
    gqa = h != hkv
    qd, kd, vd = (t.to("neuron").requires_grad_() for t in (q, k, v))
    qc, kc, vc = (t.float().requires_grad_() for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(qd, kd, vd, is_causal=causal, enable_gqa=gqa)
    assert "Overrideable" in type(out.grad_fn).__name__
    expected = torch.nn.functional.scaled_dot_product_attention(qc, kc, vc, is_causal=causal, enable_gqa=gqa)
    torch.testing.assert_close(out.detach().cpu().float(), expected.detach(), rtol=3e-2, atol=3e-2)
    grad = rand(out.shape, dtype, 65)
    out.backward(grad.to("neuron"))
    expected.backward(grad.float())
    for dev, ref in ((qd, qc), (kd, kc), (vd, vc)):
        scale = max(1.0, ref.grad.abs().max().item())
        torch.testing.assert_close(dev.grad.cpu().float() / scale, ref.grad / scale, rtol=3e-2, atol=3e-2)
    assert trnsim.fallback_report() == {}


def test_sdpa_unsupported_takes_math_path():
    """fp32 (the kernels need a 2-byte dtype) and an attention mask go the math path: still correct."""
    q, k, v = rand((1, 2, 20, 32), torch.float32, 66), rand((1, 2, 20, 32), torch.float32, 67), rand((1, 2, 20, 32), torch.float32, 68)
    mask = torch.rand(20, 20, generator=torch.Generator().manual_seed(69)) > 0.3
    for kwargs in ({"is_causal": True}, {"attn_mask": mask}):
        dev_kwargs = {key: (val.to("neuron") if torch.is_tensor(val) else val) for key, val in kwargs.items()}
        out = torch.nn.functional.scaled_dot_product_attention(q.to("neuron"), k.to("neuron"), v.to("neuron"), **dev_kwargs)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-4, atol=1e-4)


def test_sdpa_on_trn1_takes_math_path():
    """trn1's DMA cannot transpose (the flash attention kernels need it): SDPA goes the math path."""
    q = rand((1, 2, 40, 64), torch.bfloat16, 73)
    try:
        trnsim.set_config("trn1")
        out = torch.nn.functional.scaled_dot_product_attention(*(q.to("neuron") for _ in range(3)), is_causal=True)
    finally:
        trnsim.set_config("trn2")
    expected = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float(), is_causal=True)
    torch.testing.assert_close(out.cpu().float(), expected, rtol=3e-2, atol=3e-2)
