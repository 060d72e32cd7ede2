"""PyTorch's own OpInfo sample inputs (torch.testing._internal.common_methods_invocations) for the
ops the device lowers: every sample that runs on the CPU must give the same values on "neuron"
(lowered, or falling back through the counted CPU fallback — never a wrong answer or a crash)."""
import pytest
import torch

from test_ops import strict_lowering, trnsim  # noqa: F401

common_methods_invocations = pytest.importorskip("torch.testing._internal.common_methods_invocations")

OPS = ["add", "sub", "mul", "div", "exp", "log", "sin", "cos", "sqrt", "rsqrt", "abs", "neg", "reciprocal", "sigmoid",
       "tanh", "erf", "sign", "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "softmax",
       "log_softmax", "sum", "mean", "amax", "amin", "argmax", "argmin", "max", "min", "mm", "bmm", "addmm", "baddbmm",
       "matmul", "cat", "stack", "where", "clamp", "clamp_min", "clamp_max", "masked_fill", "pow", "maximum", "minimum",
       "nn.functional.layer_norm", "nn.functional.embedding", "index_select", "eq", "ne", "lt", "gt", "le", "ge",
       "isnan", "isinf", "all", "any", "lerp", "addcmul", "addcdiv", "nn.functional.cross_entropy",
       "nn.functional.mse_loss", "nn.functional.conv2d", "nn.functional.batch_norm", "transpose", "permute",
       "nn.functional.linear", "t"]
OPINFOS = {op.name: op for op in common_methods_invocations.op_db
           if op.name in OPS and op.variant_test_name in ("", "default")}
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
