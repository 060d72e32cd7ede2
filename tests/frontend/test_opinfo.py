"""PyTorch's own OpInfo sample inputs (torch.testing._internal.common_methods_invocations) for the
ops the device lowers (and a few common ones it does not, which must fall back correctly): every sample that runs on the CPU must give the same values on "neuron"
(lowered, or falling back through the counted CPU fallback — never a wrong answer or a crash)."""
import pytest
import torch

from test_ops import strict_lowering, trnsim  # noqa: F401

common_methods_invocations = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = ["add", "sub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid",
       "tanh", "erf", "sign", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "softmax",
       "log_softmax", "sum", "mean", "amax", "amin", "argmax", "argmin", "max.reduction_no_dim", "max.reduction_with_dim", "max.binary",
       "min.reduction_no_dim", "min.reduction_with_dim", "min.binary", "mm", "bmm", "addmm", "baddbmm",
       "matmul", "cat", "stack", "where", "clamp", "clamp_min", "clamp_max", "masked_fill", "pow", "maximum", "minimum",
       "nn.functional.layer_norm", "nn.functional.embedding", "index_select", "eq", "ne", "lt", "gt", "le", "ge",
       "isnan", "isinf", "all", "any", "lerp", "addcmul", "addcdiv", "nn.functional.cross_entropy",
       "nn.functional.mse_loss", "nn.functional.conv2d", "nn.functional.batch_norm", "transpose", "permute",
       "nn.functional.linear", "t", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
       "nn.functional.group_norm", "nn.functional.interpolate.nearest", "triu", "tril",
       "nn.functional.scaled_dot_product_attention", "nn.functional.rms_norm", "nn.functional.conv1d",
       "nn.functional.adaptive_avg_pool2d", "nn.functional.nll_loss", "expand", "repeat", "flatten", "squeeze",
       "unsqueeze", "narrow", "split", "chunk", "roll", "flip", "repeat_interleave", "reshape", "contiguous",
       "logsumexp", "var_mean", "nn.functional.softplus", "prod", "cumsum"]


def opinfo_key(op):
    return op.name if op.variant_test_name in ("", "default") else f"{op.name}.{op.variant_test_name}"


OPINFOS = {opinfo_key(op): op for op in common_methods_invocations.op_db if opinfo_key(op) in OPS}
MAX_SAMPLES = 16


def move(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(move(i, device) for i in x)
    if isinstance(x, dict):
        return {k: move(v, device) for k, v in x.items()}
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", OPS)
def test_opinfo_samples_match_the_cpu(name, dtype):
    op = OPINFOS.get(name)
    if op is None or dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"no OpInfo for {name} in {dtype} on this torch")
    tol = 1e-3 if dtype == torch.float32 else 2e-2
    ran = 0
    for sample in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES]:
        try:
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - samples the CPU rejects are not ours to judge
            continue
        got = op(move(sample.input, "neuron"), *move(sample.args, "neuron"), **move(sample.kwargs, "neuron"))
        torch.testing.assert_close(move(got, "cpu"), expected, rtol=tol, atol=tol, equal_nan=True, check_stride=False,
                                   msg=lambda m: f"{name} {dtype} sample {sample.summary() if hasattr(sample, 'summary') else ''}: {m}")
        ran += 1
    assert ran > 0


def tensors_of(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in tensors_of(i)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_of(v)]
    return []


@pytest.mark.parametrize("name", OPS)
def test_opinfo_gradients_match_the_cpu(name):
    """The backward of each sample (autograd on the device: the lowered backward ops) against the CPU's."""
    op = OPINFOS.get(name)
    if op is None or not op.supports_autograd:
        pytest.skip(f"{name}: no differentiable OpInfo")
    ran = 0
    for sample in list(op.sample_inputs("cpu", torch.float32, requires_grad=True))[:10]:
        try:
            outs = [o for o in tensors_of(op(sample.input, *sample.args, **sample.kwargs))
                    if o.requires_grad and o.is_floating_point()]
            leaves = [t for t in tensors_of([sample.input, sample.args, sample.kwargs]) if t.requires_grad]
            if not outs or not leaves:
                continue
            grads = [torch.randn_like(o) for o in outs]
            expected = torch.autograd.grad(outs, leaves, grads, allow_unused=True)
        except Exception:  # noqa: BLE001 - samples the CPU rejects are not ours to judge
            continue
        on_device = {id(t): t.detach().to("neuron").requires_grad_() for t in leaves}

        def to_device(x):
            if isinstance(x, torch.Tensor):
                return on_device.get(id(x), x.detach().to("neuron"))
            if isinstance(x, (list, tuple)):
                return type(x)(to_device(i) for i in x)
            if isinstance(x, dict):
                return {k: to_device(v) for k, v in x.items()}
            return x

        douts = [o for o in tensors_of(op(to_device(sample.input), *to_device(sample.args), **to_device(sample.kwargs)))
                 if o.requires_grad and o.is_floating_point()]
        got = torch.autograd.grad(douts, [on_device[id(t)] for t in leaves], [g.to("neuron") for g in grads],
                                  allow_unused=True)
        for g, e in zip(got, expected):
            assert (g is None) == (e is None)
            if g is not None:
                torch.testing.assert_close(g.cpu(), e, rtol=1e-3, atol=1e-3, equal_nan=True)
        ran += 1
    if ran == 0:
        pytest.skip(f"{name}: no sample with a differentiable output")


def significant_strides(t):
    """Strides of the dims that have more than one element (others do not affect the layout)."""
    return tuple(s for s, n in zip(t.stride(), t.shape) if n > 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", OPS)
def test_opinfo_results_have_the_meta_layout(name, dtype):
    """Every result has the dtype, shape and strides PyTorch's meta function gives for the same
    inputs (torch.compile traces with those and reinterprets the device's buffers by them)."""
    op = OPINFOS.get(name)
    if op is None or dtype not in op.supported_dtypes("cpu"):
        pytest.skip(f"no OpInfo for {name} in {dtype} on this torch")
    ran = 0
    for sample in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES]:
        try:
            meta = op(move(sample.input, "meta"), *move(sample.args, "meta"), **move(sample.kwargs, "meta"))
            op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - no meta function, or a sample the CPU rejects
            continue
        got = op(move(sample.input, "neuron"), *move(sample.args, "neuron"), **move(sample.kwargs, "neuron"))
        assert len(tensors_of(got)) == len(tensors_of(meta)), f"{name}: {len(tensors_of(got))} results vs meta's {len(tensors_of(meta))}"
        for m, g in zip(tensors_of(meta), tensors_of(got)):
            assert (g.dtype, g.shape) == (m.dtype, m.shape), f"{name}: {g.dtype} {g.shape} vs meta {m.dtype} {m.shape}"
            assert significant_strides(g) == significant_strides(m), \
                f"{name} {tuple(m.shape)}: strides {g.stride()} vs meta {m.stride()}"
        ran += 1
    if ran == 0:
        pytest.skip(f"{name}: no sample has a meta function")
