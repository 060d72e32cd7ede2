"""``kernel.explain(*args)`` and ``python -m trnsim.nki --explain FILE.py:KERNEL ARG...`` (issue 37 item 1): a traced
kernel's instruction mix per engine and opcode, DMA bytes and matmul FLOPs, without running it. The figures are
worked out here from the kernel's algorithm (examples/nki/softmax.py's softmax_nl over 3 row tiles of [128, 520]
fp32, matmul_kernels.py's tiled stage)."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import trnsim
import trnsim.nki

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "nki"
sys.path.insert(0, str(EXAMPLES))
import softmax  # noqa: E402


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def test_explain_returns_and_prints_the_mix(capsys):
    kernel = softmax.softmax_nl
    traces, latency = kernel.trace_count, kernel.last_latency_ns
    mix = kernel.explain(np.zeros((384, 520), np.float32))   # a shape no other test traces: a fresh trace
    # Per 128-row tile: a load and a store (DMA), tensor_reduce, reciprocal, tensor_scalar (Vector), exp (Scalar).
    assert mix.engines == {"dma": {"dma_copy": 6}, "vector": {"tensor_reduce": 3, "reciprocal": 3, "tensor_scalar": 3},
                           "scalar": {"activation": 3}}
    assert mix.dma_bytes == 2 * 384 * 520 * 4 and mix.matmul_flops == 0 and mix.instructions == 18
    assert kernel.trace_count == traces + 1 and kernel.last_latency_ns == latency   # traced, not run
    out = capsys.readouterr().out
    assert "softmax_nl: 18 instructions" in out and f"DMA bytes: {2 * 384 * 520 * 4:,}" in out
    assert row("vector", "tensor_reduce", 3) in out and row("vector", "(all)", 9) in out


def row(engine, opcode, count):
    return f"  {engine:<8} {opcode:<24} {count:>9,}"


def _cli(*args):
    env = dict(os.environ)
    root = str(pathlib.Path(trnsim.__file__).parent.parent)   # the trnsim this test imported (not resolved)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-m", "trnsim.nki", "--explain", *map(str, args)], capture_output=True,
                          text=True, env=env, timeout=120)


def test_cli_explains_a_kernel_of_a_file():
    M, K, N = 256, 1024, 1024
    proc = _cli(f"{EXAMPLES / 'matmul_kernels.py'}:matmul_tiled", f"bfloat16[{K},{M}]", f"bfloat16[{K},{N}]",
                "--target", "trn1")
    assert proc.returncode == 0, proc.stderr
    tiles = (M // 128) * (N // 512)            # output tiles
    loads = tiles * (K // 128) * 2             # an A^T and a B tile per k step
    assert f"matmul_tiled: {loads + tiles + tiles * (K // 128) + tiles:,} instructions" in proc.stdout
    assert row("dma", "dma_copy", loads + tiles) in proc.stdout
    assert row("tensor", "nc_matmul", tiles * (K // 128)) in proc.stdout
    assert row("vector", "tensor_copy", tiles) in proc.stdout
    dma_bytes = tiles * (K // 128) * (128 * 128 + 128 * 512) * 2 + M * N * 2
    assert f"DMA bytes: {dma_bytes:,}" in proc.stdout
    assert f"matmul FLOPs: {2 * M * K * N:,}" in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["softmax.py:nope", "float32[256,512]"], "has no 'nope' (kernels: softmax_isa, softmax_nl)"),
    (["softmax.py:softmax_nl", "float99[256,512]"], "unknown dtype 'float99'"),
    (["softmax.py:softmax_nl", "float32[256,"], "neither DTYPE[shape] nor a Python literal"),
    (["softmax.py"], "--explain FILE.py:KERNEL ARG..."),
    (["missing.py:k"], "no file"),
    (["softmax.py:softmax_nl", "float32[256,512]", "--target", "trn9"], "platform target 'trn9'"),
])
def test_cli_errors_name_what_is_wrong(args, message):
    args = [str(EXAMPLES / a) if a.startswith(("softmax.py", "missing.py")) else a for a in args]
    proc = _cli(*args)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
