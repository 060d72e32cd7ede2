"""Regressions of conv2d on the PyTorch device (issue 10): nn.Conv2d moved with .to("neuron"), trained one
backward step, against the same module on the CPU (weight.grad, input.grad, bias.grad)."""
import pytest
import torch

from test_ops import no_fallback, strict_lowering, trnsim  # noqa: F401


def conv_grads(conv, x, dy):
    """Output, input / weight / bias gradients of `conv` (on x's device) for grad_output dy."""
    x = x.clone().requires_grad_()
    conv.zero_grad(set_to_none=True)
    y = conv(x)
    y.backward(dy)
    return [t.detach().cpu() for t in (y, x.grad, conv.weight.grad, conv.bias.grad)]


def device_and_cpu_grads(c, o, k, n, h, w, stride, padding, groups=1, dtype=torch.float32, seed=0):
    """conv_grads of one nn.Conv2d (seeded init, input and grad_output) on the device and on the CPU; no fallback."""
    torch.manual_seed(seed)
    cpu = torch.nn.Conv2d(c, o, k, stride=stride, padding=padding, groups=groups).to(dtype)
    x = torch.randn(n, c, h, w).to(dtype)
    with torch.no_grad():
        dy = torch.randn(cpu(x).shape).to(dtype)
    expected = conv_grads(cpu, x, dy)
    dev = torch.nn.Conv2d(c, o, k, stride=stride, padding=padding, groups=groups).to(dtype)
    dev.load_state_dict(cpu.state_dict())
    got = conv_grads(dev.to("neuron"), x.to("neuron"), dy.to("neuron"))
    no_fallback("convolution", "convolution_backward")
    return got, expected


def compare_with_cpu(c, o, k, n, h, w, stride=1, padding=0, dtype=torch.float32, seed=0):
    got, expected = device_and_cpu_grads(c, o, k, n, h, w, stride, padding, dtype=dtype, seed=seed)
    ho, wo = expected[0].shape[2:]
    # Sums of c*k*k (y, dX), n*ho*wo (dW, db) products: fp32 to a few ulps of the terms' magnitude; bf16 outputs
    # are rounded once more and summed by the CPU in another order (its own bf16 rounding of partial sums).
    for name, g, e, terms in zip(["output", "grad_input", "grad_weight", "grad_bias"], got, expected,
                                 [c * k * k, o * k * k, n * ho * wo, n * ho * wo]):
        assert g.shape == e.shape and g.dtype == e.dtype, name
        scale = float(e.abs().max()) + 1.0
        atol = (1e-5 if dtype == torch.float32 else 2e-2) * scale * max(1.0, terms ** 0.5) / 8
        rtol = 1e-4 if dtype == torch.float32 else 2e-2
        torch.testing.assert_close(g.float(), e.float(), rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


# Issue 10.2: 1x1 convs whose dW (split across the LNC=2 cores by [128 O, 512 column] accumulators) had a core
# own a run of columns that starts on a tap and ends inside it (C > 512): that run was never stored, leaving
# an all-zero [128, 512] block. 512->96 and 576->160 were right (one accumulator; whole rows per core).
POINTWISE = [(576, 96), (640, 96), (1024, 96), (1088, 64), (1152, 320), (1280, 320), (2048, 128), (512, 96),
             (576, 160)]


@pytest.mark.parametrize("c,o", POINTWISE)
def test_pointwise_conv_grads_match_cpu(c, o):
    compare_with_cpu(c, o, 1, n=2, h=3, w=3)


@pytest.mark.parametrize("config", ["trn2", "trn3"])
def test_pointwise_conv_grads_match_cpu_on_every_generation(config):
    try:
        trnsim.set_config(config)
        compare_with_cpu(1280, 320, 1, n=1, h=2, w=3, seed=1)
        compare_with_cpu(600, 40, 3, n=1, h=3, w=3, padding=1, dtype=torch.bfloat16, seed=2)
    finally:
        trnsim.set_config("trn2")


# Issue 10.12: conv backward with large weights (512->512 3x3, fp32 at any size, seen at 2x2) fell back to the
# CPU: dW's buffers did not fit SBUF. It runs on the device in rounds (kernels/conv_builder.h).
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_large_weight_conv_backward_runs_on_the_device(dtype):
    trnsim.reset_fallback_report()
    compare_with_cpu(512, 512, 3, n=2, h=2, w=2, padding=1, dtype=dtype, seed=3)
    report = trnsim.fallback_report()
    assert not any("convolution" in op for op in report), report


# Forward weights too large for one O tile's raw and transposed rows (fp32 C x 5x5 with C >= ~500) fell back
# to the CPU too; the kernel streams the raw rows by channel chunk (and narrows the O blocks).
def test_large_weight_conv_forward_runs_on_the_device():
    trnsim.reset_fallback_report()
    compare_with_cpu(1030, 70, 5, n=1, h=5, w=6, padding=1, seed=4)
    report = trnsim.fallback_report()
    assert not any("convolution" in op for op in report), report


# A fixed sample of the grid swept for issue 10.2 (channels around multiples of 512, kernels 1x1 to 5x5, strides,
# padding, batch, spatial sizes, groups): every output and gradient against the CPU on the 2-core device.
GRID = [
    # c, o, k, n, h, w, stride, padding, groups
    (513, 129, 1, 2, 3, 2, 1, 0, 1),
    (1030, 96, 3, 1, 3, 4, 2, 1, 1),
    (1536, 320, 1, 1, 2, 2, 1, 0, 1),
    (700, 160, (1, 3), 2, 3, 5, 1, 1, 1),
    (1024, 64, 2, 1, 4, 3, 2, 1, 2),
    (2048, 256, 1, 1, 1, 3, 1, 0, 4),
    (576, 576, 3, 1, 3, 3, 1, 1, 576),
    (130, 1100, 3, 2, 5, 4, 1, 1, 1),
]


@pytest.mark.parametrize("c,o,k,n,h,w,stride,padding,groups", GRID)
def test_conv_grid_matches_cpu(c, o, k, n, h, w, stride, padding, groups):
    compare_with_cpu_general(c, o, k, n, h, w, stride, padding, groups)


def compare_with_cpu_general(c, o, k, n, h, w, stride, padding, groups, seed=5):
    got, expected = device_and_cpu_grads(c, o, k, n, h, w, stride, padding, groups, seed=seed)
    for name, g, e in zip(["output", "grad_input", "grad_weight", "grad_bias"], got, expected):
        assert g.shape == e.shape, name
        torch.testing.assert_close(g, e, rtol=1e-4, atol=2e-5 * (float(e.abs().max()) + 1),
                                   msg=lambda m: f"{name}: {m}")
