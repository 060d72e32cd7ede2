"""Row-wise kernels at extreme values (issue 10 item 3), built by kernel_runner and run by `trnsim run`,
against torch on the CPU (float64 where torch's fp32 result is itself inaccurate).

Large logit offsets, a row of 1e30, +-inf / NaN entries and a column chunk of only -inf (a masked
vocabulary tail) in both the one-pass and the chunked (rows longer than SBUF) schedules; layernorm at a
large offset and on rows that overflow fp32. NaN must sit exactly where torch puts it.
"""
import numpy as np
import pytest
import torch

from elementwise_test import run_kernel, shape_text

F = torch.nn.functional


def close(out, expected, atol=1e-3, rtol=1e-3):
    out = torch.from_numpy(np.asarray(out, dtype=np.float32)).reshape(expected.shape)
    expected = expected.float()
    assert torch.equal(torch.isnan(out), torch.isnan(expected)), "NaN positions differ"
    torch.testing.assert_close(out, expected, atol=atol, rtol=rtol, equal_nan=True)


def logits_with_specials(rows, cols, offset, seed):
    x = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32) * 3 + np.float32(offset)
    x[0, :] = 1e30                # every logit equal: loss log(C)
    x[1, 5] = np.inf              # NaN row
    x[2, 7] = np.nan              # NaN row
    x[3, :] = -np.inf             # NaN row
    x[4, : cols // 2] = -np.inf   # a masked half: whole chunks of -inf in the chunked schedule
    return x


# One pass (a row fits SBUF) and column chunks (Llama-3's vocabulary).
@pytest.mark.parametrize("cols", [512, 128256])
@pytest.mark.parametrize("offset", [1e6, 1e7])
def test_cross_entropy_extreme(run_trnsim, tmp_path, cols, offset):
    rows = 8
    x = logits_with_specials(rows, cols, offset, 31)
    target = np.random.default_rng(32).integers(0, cols, rows).astype(np.int32)
    target[4] = cols - 1  # a finite logit of the masked row
    params = {"shape": f"{rows}x{cols}", "dtype": "fp32", "reduction": "none", "ignore_index": "none"}
    loss, lse = run_kernel(run_trnsim, tmp_path, "cross_entropy", params, {"logits": x, "target": target},
                           ["loss", "lse"])
    xt, tt = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(target).long()
    expected = F.cross_entropy(xt, tt, reduction="none")
    close(loss, expected)
    assert abs(float(loss[0]) - np.log(cols)) < 1e-5
    # The backward from the forward's own (max, sum exp(x - max)) statistics.
    dloss = np.random.default_rng(33).standard_normal(rows).astype(np.float32)
    expected.backward(torch.from_numpy(dloss))
    (dlogits,) = run_kernel(run_trnsim, tmp_path, "cross_entropy_backward", params,
                            {"logits": x, "target": target, "lse": np.asarray(lse), "dloss": dloss}, ["dlogits"])
    close(dlogits, xt.grad)


@pytest.mark.parametrize("cols", [512, 50000])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_extreme(run_trnsim, tmp_path, cols, log):
    x = logits_with_specials(6, cols, 1e7, 34)
    kernel = "log_softmax" if log else "softmax"
    (y,) = run_kernel(run_trnsim, tmp_path, kernel, {"shape": shape_text(x.shape), "dtype": "fp32"}, {"x": x}, ["y"])
    fn = torch.log_softmax if log else torch.softmax
    close(y, fn(torch.from_numpy(x), -1))


@pytest.mark.parametrize("cols", [64, 40000])  # one pass / chunked rows
def test_layernorm_large_offset_and_overflow(run_trnsim, tmp_path, cols):
    rng = np.random.default_rng(35)
    # The offset rows: 1e4 with the row in SBUF (the mean corrected by a second pass over the tile); 1e3 in
    # the chunked schedule, whose mean is bn_aggr's fp32 sums (~10 ulps of the mean over 40000 columns).
    offset = 1e4 if cols < 8192 else 1e3
    x = (rng.standard_normal((8, cols)) + offset).astype(np.float32)
    x[0, :] = 1e30                                    # mean^2 overflows: NaN as torch's CPU
    x[1, :] = 2e19                                    # likewise
    # mean^2 fits, variance 0: y = b. Only with the whole row in SBUF: the chunked schedule's mean is
    # bn_aggr's (a few ulps off, which a zero variance turns into y = +-w + b).
    x[2, :] = 1e19 if cols < 8192 else 1.0
    x[3, 3] = np.inf                                  # NaN row
    x[4, :] = (rng.standard_normal(cols) * 3e18).astype(np.float32)  # squared deviations overflow: y = 0
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    params = {"shape": shape_text(x.shape), "dtype": "fp32", "has_bias": 1, "save_stats": 1}
    y, mean, rstd = run_kernel(run_trnsim, tmp_path, "layernorm", params, {"x": x, "w": w, "b": b},
                               ["y", "mean", "rstd"])
    xt, wt, bt = (torch.from_numpy(a) for a in (x, w, b))
    cpu = F.layer_norm(xt, (cols,), wt, bt)
    # NaN rows and the overflowing rows exactly as torch's CPU; the offset rows against float64 (torch's
    # fp32 x * rstd - mean * rstd is off by more than the tolerance at 1e4).
    close(np.asarray(y)[:5], cpu[:5])
    close(np.asarray(y)[5:], F.layer_norm(xt[5:].double(), (cols,), wt.double(), bt.double()))
    _, cpu_mean, cpu_rstd = torch.ops.aten.native_layer_norm(xt, (cols,), wt, bt, 1e-5)
    close(np.asarray(rstd)[5:], cpu_rstd.reshape(-1)[5:])
    close(np.asarray(mean)[5:], cpu_mean.reshape(-1)[5:], atol=1e-3, rtol=1e-6)


def error_in_tolerances(out, ref):
    """max |out - ref| / (1e-3 + 1e-3 |ref|): 1 is the edge of PyTorch's fp32 device-vs-CPU tolerance."""
    out = torch.as_tensor(np.asarray(out, dtype=np.float64)).reshape(ref.shape)
    return ((out - ref).abs() / (1e-3 + 1e-3 * ref.abs())).max().item()


# fp32 rows in one SBUF tile / dw wider than the PSUM banks (chunked) / long rows (chunked).
@pytest.mark.parametrize("cols", [64, 4096, 40000])
@pytest.mark.parametrize("weight", [False, True])
def test_layernorm_backward_large_offset(run_trnsim, tmp_path, cols, weight):
    # x = 1e4 + noise: torch's fp32 CPU backward (sum(g * x) - mean * sum(g)) cancels; the kernel forms
    # sum(g * (x - mean)) and (x - mean) * rstd. Must be within the tolerance of float64 or no worse than
    # 1.25x torch's fp32 error, output by output.
    rng = np.random.default_rng(36)
    rows = 8
    x = (rng.standard_normal((rows, cols)) + 1e4).astype(np.float32)
    dy = rng.standard_normal((rows, cols)).astype(np.float32)
    w = rng.standard_normal(cols).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    refs, cpus = [], []
    for dt, out in ((torch.float64, refs), (torch.float32, cpus)):
        xt = torch.from_numpy(x).to(dt).requires_grad_(True)
        wt = torch.from_numpy(w).to(dt).requires_grad_(True) if weight else None
        bt = torch.from_numpy(b).to(dt).requires_grad_(True) if weight else None
        F.layer_norm(xt, (cols,), wt, bt).backward(torch.from_numpy(dy).to(dt))
        out += [xt.grad.double()] + ([wt.grad.double(), bt.grad.double()] if weight else [])
    xd = torch.from_numpy(x).double()
    mean = xd.mean(-1).float().numpy()
    rstd = torch.rsqrt(xd.var(-1, unbiased=False) + 1e-5).float().numpy()
    inputs = {"x": x, "dy": dy, "mean": mean, "rstd": rstd}
    if weight:
        inputs["w"] = w
    outputs = ["dx"] + (["dw", "db"] if weight else [])
    params = {"shape": shape_text(x.shape), "dtype": "fp32", "weight": int(weight), "has_bias": int(weight)}
    got = run_kernel(run_trnsim, tmp_path, "layernorm_backward", params, inputs, outputs)
    for name, g, r, c in zip(outputs, got, refs, cpus):
        e_dev, e_cpu = error_in_tolerances(g, r), error_in_tolerances(c, r)
        assert e_dev <= max(1.0, 1.25 * e_cpu), f"{name}: kernel {e_dev:.2f} tolerances off float64, torch fp32 {e_cpu:.2f}"
