"""Backward kernels (layernorm/rmsnorm, softmax/log_softmax), cross-entropy and AdamW against torch
on the CPU.

Each case builds a kernel with build/bin/kernel_runner, runs it with `trnsim run` and compares with
torch autograd / torch.optim.AdamW on the dtype-rounded inputs, computed in fp32. Tolerances follow
the dtypes: the kernels keep every intermediate in fp32, so bf16 outputs are within one bf16 ulp of
the rounded fp32 reference (plus, for results formed by cancellation, a bf16 ulp of the row's largest
term); fp32 outputs within a few fp32 ulps of the largest term they were formed from (reassociated
sums over up to 2049 elements or 300 rows).
"""
import numpy as np
import pytest
import torch

from elementwise_test import TORCH, rounded, run_kernel, shape_text

ULP = {"fp32": 2.0 ** -23, "bf16": 2.0 ** -8}


def check(out, expected, dtype, terms=None, fp32_ulps=64):
    """|out - exp| <= rel * |exp| + rel * scale, rel = 2 ulps (bf16) or fp32_ulps ulps (fp32); scale the
    magnitude of the terms the result was formed from (default: the largest |expected|)."""
    out = np.asarray(out, dtype=np.float64).reshape(-1)
    exp = expected.detach().double().numpy().reshape(-1)
    rel = 2 * ULP["bf16"] if dtype == "bf16" else fp32_ulps * ULP["fp32"]
    scale = np.abs(exp).max() if terms is None else float(terms)
    bad = ~(np.abs(out - exp) <= rel * np.abs(exp) + rel * scale)
    assert not bad.any(), f"{bad.sum()}/{bad.size} mismatches, e.g. out {out[bad][:4]} vs {exp[bad][:4]}"


# ---- layernorm / rmsnorm backward ----

@pytest.mark.parametrize("kind", ["rmsnorm", "layernorm"])
@pytest.mark.parametrize("dtype,shape,weight,bias", [
    ("fp32", (300, 7), True, True), ("bf16", (127, 513), True, False), ("fp32", (1, 2049), False, False),
    ("bf16", (2, 64, 100), True, True), ("fp32", (129, 300), False, True),
    # Rows too long for SBUF: two passes over column chunks (ragged C); dw / db per chunk.
    ("fp32", (5, 40000), True, True), ("bf16", (130, 40001), True, True), ("fp32", (3, 12345), False, False),
    # Rows that fit SBUF but whose dw is wider than the PSUM banks (4096 columns): chunked too.
    ("bf16", (100, 4160), True, False),
])
def test_norm_backward(run_trnsim, tmp_path, kind, dtype, shape, weight, bias):
    rng = np.random.default_rng(21)
    x = (rng.standard_normal(shape) + 0.5).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    w = (rng.standard_normal(shape[-1]) + 1).astype(np.float32)
    b = rng.standard_normal(shape[-1]).astype(np.float32)
    eps = 1e-5
    xr = rounded(x, dtype).requires_grad_(True)
    dyr = rounded(dy, dtype)
    wr = rounded(w, dtype).requires_grad_(True) if weight else None
    br = rounded(b, dtype).requires_grad_(True) if bias and kind == "layernorm" else None
    C = shape[-1]
    with torch.no_grad():
        if kind == "layernorm":
            _, mean, rstd = torch.ops.aten.native_layer_norm(xr, [C], wr, br, eps)
        else:
            mean, rstd = None, torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps)
    if kind == "layernorm":
        y = torch.nn.functional.layer_norm(xr, (C,), wr, br, eps)
    else:
        y = xr * torch.rsqrt(xr.pow(2).mean(-1, keepdim=True) + eps)
        if weight:
            y = y * wr
    y.backward(dyr)

    params = {"shape": shape_text(shape), "dtype": dtype, "weight": int(weight), "has_bias": int(bias)}
    inputs = {"x": x, "dy": dy, "rstd": rstd.reshape(-1).numpy()}
    if kind == "layernorm":
        inputs["mean"] = mean.reshape(-1).numpy()
    if weight:
        inputs["w"] = w
    outputs = ["dx"] + (["dw"] if weight else []) + (["db"] if br is not None else [])
    got = dict(zip(outputs, run_kernel(run_trnsim, tmp_path, f"{kind}_backward", params, inputs, outputs)))
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)): a cancellation, so the tolerance scales with rstd * |g|.
    g = dyr * (wr.detach() if weight else 1)
    terms = (rstd * g.abs()).max().item() * 4
    check(got["dx"], xr.grad.to(TORCH[dtype]).float(), dtype, terms=terms)
    # dw = sum over rows of dy * xhat, db = sum of dy: fp32 sums in another order than torch's, so a few
    # fp32 ulps of the sum of |terms| (64 ulps in the fp32 check, 2 ** -8 of a bf16 ulp's share in bf16).
    rows = tuple(range(len(shape) - 1))
    sum_scale = 1.0 if dtype == "fp32" else 2.0 ** -8
    if weight:
        xhat = (xr.detach() - (mean if mean is not None else 0)) * rstd
        check(got["dw"], wr.grad.to(TORCH[dtype]).float(), dtype,
              terms=(dyr * xhat).abs().sum(dim=rows).max().item() * sum_scale)
    if br is not None:
        check(got["db"], br.grad.to(TORCH[dtype]).float(), dtype, terms=dyr.abs().sum(dim=rows).max().item() * sum_scale)


# ---- softmax / log_softmax backward ----

@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype,shape", [("fp32", (300, 7)), ("bf16", (127, 513)), ("fp32", (1, 2049)),
                                         ("bf16", (2, 3, 129)),
                                         # rows too long for SBUF: two passes over column chunks (ragged C)
                                         ("fp32", (5, 40000)), ("bf16", (130, 40001))])
def test_softmax_backward(run_trnsim, tmp_path, log, dtype, shape):
    rng = np.random.default_rng(22)
    x = torch.from_numpy((rng.standard_normal(shape) * 3).astype(np.float32))
    fn = torch.log_softmax if log else torch.softmax
    y = fn(x, dim=-1).to(TORCH[dtype]).float()  # the forward's output as the kernel gets it
    dy = rng.standard_normal(shape).astype(np.float32)
    dyr = rounded(dy, dtype)
    if log:
        expected = torch.ops.aten._log_softmax_backward_data(dyr, y, -1, torch.float32)
        terms = (y.exp() * dyr.sum(-1, keepdim=True).abs()).max().item() + dyr.abs().max().item()
    else:
        expected = torch.ops.aten._softmax_backward_data(dyr, y, -1, torch.float32)
        terms = (y * dyr.abs()).max().item() * 2
    (dx,) = run_kernel(run_trnsim, tmp_path, f"{'log_' if log else ''}softmax_backward",
                       {"shape": shape_text(shape), "dtype": dtype}, {"y": y.numpy(), "dy": dy}, ["dx"])
    check(dx, expected.to(TORCH[dtype]).float(), dtype, terms=terms)


# ---- cross-entropy ----

CE_CASES = [
    ("fp32", 300, 513, "mean", -100, "trn2"), ("bf16", 127, 7, "none", -100, "trn2"),
    ("fp32", 1, 2049, "sum", None, "trn2"), ("fp32", 129, 300, "mean", 3, "trn3"),
    ("bf16", 300, 513, "sum", -100, "trn1"),
    # Vocabularies too long for SBUF rows: column chunks (Llama-3's 128256 classes; ragged chunks).
    ("bf16", 6, 128256, "mean", -100, "trn2"), ("fp32", 130, 40001, "none", -100, "trn2"),
    ("fp32", 3, 50000, "sum", None, "trn1"), ("bf16", 4, 151936, "mean", 3, "trn3"),
]


def ce_inputs(rows, classes, ignore, seed):
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal((rows, classes)) * 4).astype(np.float32)
    target = rng.integers(0, classes, rows).astype(np.int32)
    if ignore is not None:
        target[rng.random(rows) < 0.2] = ignore  # some rows ignored (ignore_index 3 is also a class)
    return logits, target


def ce_row_stats(x):
    """The forward's saved statistics: (max, sum exp(x - max)) per row, fp32 [R, 2]."""
    m = x.max(-1, keepdim=True).values
    return torch.cat([m, (x - m).exp().sum(-1, keepdim=True)], -1)


def ce_params(dtype, rows, classes, reduction, ignore, config):
    return {"shape": f"{rows}x{classes}", "dtype": dtype, "reduction": reduction,
            "ignore_index": "none" if ignore is None else ignore, "config": config}


@pytest.mark.parametrize("dtype,rows,classes,reduction,ignore,config", CE_CASES)
def test_cross_entropy(run_trnsim, tmp_path, dtype, rows, classes, reduction, ignore, config):
    logits, target = ce_inputs(rows, classes, ignore, 23)
    loss, lse = run_kernel(run_trnsim, tmp_path, "cross_entropy", ce_params(dtype, rows, classes, reduction, ignore, config),
                           {"logits": logits, "target": target}, ["loss", "lse"])
    xr = rounded(logits, dtype)
    tt = torch.from_numpy(target).long()
    kwargs = {"ignore_index": ignore} if ignore is not None else {}
    expected = torch.nn.functional.cross_entropy(xr, tt, reduction=reduction, **kwargs)
    # lse is the pair (max, sum exp(x - max)) per row: the max exactly, the sum within a few ulps.
    lse = np.asarray(lse).reshape(rows, 2)
    np.testing.assert_array_equal(lse[:, 0], xr.max(-1).values.numpy())
    check(lse[:, 1], ce_row_stats(xr)[:, 1], "fp32", fp32_ulps=64)
    check(loss, expected.reshape(-1), "fp32", terms=torch.logsumexp(xr, -1).abs().max().item(), fp32_ulps=64)


@pytest.mark.parametrize("dtype,rows,classes,reduction,ignore,config", CE_CASES)
def test_cross_entropy_backward(run_trnsim, tmp_path, dtype, rows, classes, reduction, ignore, config):
    logits, target = ce_inputs(rows, classes, ignore, 24)
    # fp32: the reference in float64 (exact, then rounded once), not torch's fp32 CPU kernel, whose
    # error over 40K-class rows (~1e-5 relative) depends on the host's vector ISA.
    xr = rounded(logits, dtype)
    lse_input = xr
    xr = (xr.double() if dtype == "fp32" else xr).requires_grad_(True)
    tt = torch.from_numpy(target).long()
    kwargs = {"ignore_index": ignore} if ignore is not None else {}
    loss = torch.nn.functional.cross_entropy(xr, tt, reduction=reduction, **kwargs)
    dloss = torch.from_numpy(np.asarray(np.random.default_rng(25).standard_normal(loss.shape) + 0.5, np.float32))
    loss.backward(dloss.to(xr.dtype))
    lse = ce_row_stats(lse_input.detach())
    (dlogits,) = run_kernel(run_trnsim, tmp_path, "cross_entropy_backward",
                            ce_params(dtype, rows, classes, reduction, ignore, config),
                            {"logits": logits, "target": target, "lse": lse.numpy(),
                             "dloss": dloss.reshape(-1).numpy()}, ["dlogits"])
    # (softmax - onehot) * scale: the onehot entry cancels against a softmax of up to 1.
    check(dlogits, xr.grad.to(TORCH[dtype]).float(), dtype, terms=xr.grad.abs().max().item(), fp32_ulps=16)


# ---- AdamW ----

@pytest.mark.parametrize("dtype,elements,weight_decay,state_dtype", [
    ("fp32", 128 * 513 + 77, 1e-2, "fp32"), ("bf16", 300 * 7, 0.1, "fp32"), ("fp32", 127, 0.0, "fp32"),
    # bf16 state (torch keeps exp_avg / exp_avg_sq in the parameter's dtype), several column tiles and a tail.
    ("bf16", 128 * 1500 + 3, 1e-2, "bf16"),
])
def test_adamw(run_trnsim, tmp_path, dtype, elements, weight_decay, state_dtype):
    rng = np.random.default_rng(26)
    hyper = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": weight_decay}
    param = rounded(rng.standard_normal(elements).astype(np.float32), dtype)
    m = np.zeros(elements, np.float32)
    v = np.zeros(elements, np.float32)
    # torch's step on an fp32 copy of the (rounded) parameter; the bf16 case rounds after each step as
    # the kernel does (parameter, and with bf16 state also exp_avg / exp_avg_sq, stored in bf16).
    ref = param.clone().requires_grad_(True)
    opt = torch.optim.AdamW([ref], lr=hyper["lr"], betas=(hyper["beta1"], hyper["beta2"]), eps=hyper["eps"],
                            weight_decay=weight_decay, foreach=False)
    p = param.numpy()
    for step in range(1, 4):
        grad = rounded(rng.standard_normal(elements).astype(np.float32) * (10.0 ** -step), dtype)
        ref.grad = grad.clone()
        opt.step()
        state = opt.state[ref]
        with torch.no_grad():
            ref.copy_(ref.to(TORCH[dtype]).float())
            for key in ("exp_avg", "exp_avg_sq"):
                state[key].copy_(state[key].to(TORCH[state_dtype]).float())
        step_dir = tmp_path / f"step{step}"
        step_dir.mkdir()
        # The step-dependent scalars are the kernel's runtime input, formed in double as torch's
        # _single_tensor_adamw does and rounded to fp32: one program for every step.
        b1, b2, lr = hyper["beta1"], hyper["beta2"], hyper["lr"]
        scalars = np.array([-(lr / (1 - b1 ** step)), (1 - b2 ** step) ** 0.5, 1 - lr * weight_decay], np.float32)
        p, m, v = run_kernel(run_trnsim, step_dir, "adamw",
                             {"elements": elements, "dtype": dtype, "state_dtype": state_dtype, "beta1": b1,
                              "beta2": b2, "eps": hyper["eps"]},
                             {"param": p, "grad": grad.numpy(), "exp_avg": m, "exp_avg_sq": v,
                              "adamw_scalars": scalars},
                             ["param", "exp_avg", "exp_avg_sq"])
        if step == 1:
            first_program = (step_dir / "k.tasm").read_text()
        else:
            assert (step_dir / "k.tasm").read_text() == first_program   # the step is not in the program
        # State: a few fp32 ulps (torch's lerp is a fused multiply-add), or one bf16 ulp when stored in bf16.
        # Parameter: one bf16 ulp, or in fp32 a few ulps of the parameter plus of the update
        # lr * m_hat / sqrt(v_hat) (<= ~lr * 10).
        check(m, state["exp_avg"], state_dtype, fp32_ulps=8)
        check(v, state["exp_avg_sq"], state_dtype, fp32_ulps=8)
        check(p, ref.detach(), dtype, terms=0 if dtype == "bf16" else hyper["lr"], fp32_ulps=8)
