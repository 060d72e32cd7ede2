"""PyTorch's own entry points find the device without `import trnsim` (issue 40 item 1): `import torch`
registers "neuron" through the "torch.backends" entry point (off with TORCH_DEVICE_BACKEND_AUTOLOAD=0,
refused with a warning when the real Neuron backend, torch_neuronx, is installed), torch.compile finds
the dynamo backend "neuron", and torch.accelerator's memory functions work on the device.

Each case runs a fresh interpreter whose script (but the memory one) never imports trnsim; PYTHONPATH names the build's
python folder (its trnsim-<version>+build.dist-info declares the entry points)."""
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

import pytest

from conftest import REPO_ROOT, build_dir

PYTHON_DIR = build_dir() / "python"


def run_python(script, tmp_path, extra_path=(), **env_overrides):
    if not (PYTHON_DIR / "trnsim").is_dir():
        pytest.fail(f"{PYTHON_DIR}/trnsim is missing: run `make` first")
    env = dict(os.environ, TRNSIM_FALLBACK="error")
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), *map(str, extra_path)])
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)


def test_import_torch_registers_neuron(tmp_path):
    proc = run_python("""
        import sys, torch
        x = torch.randn(2, device="neuron")
        assert x.device == torch.device("neuron:0"), x.device
        assert torch.accelerator.current_accelerator().type == "neuron"
        assert torch.equal((x * 2).cpu(), x.cpu() * 2)
        print("trnsim from", sys.modules["trnsim"].__file__)
        """, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith(f"trnsim from {PYTHON_DIR / 'trnsim'}"), proc.stdout


def test_autoload_turned_off(tmp_path):
    proc = run_python("""
        import sys, torch
        assert "trnsim" not in sys.modules
        try:
            torch.randn(2, device="neuron")
        except RuntimeError as err:
            print("refused:", err)
        """, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("refused:"), proc.stdout


def test_autoload_refuses_when_torch_neuronx_is_installed(tmp_path):
    # An importable torch_neuronx is all the check looks for: the real backend owns the name "neuron".
    (tmp_path / "fake" / "torch_neuronx").mkdir(parents=True)
    (tmp_path / "fake" / "torch_neuronx" / "__init__.py").write_text("")
    proc = run_python("""
        import sys, torch
        assert "trnsim" not in sys.modules and "torch_neuronx" not in sys.modules
        assert torch.accelerator.current_accelerator() is None
        print("torch", torch.__version__)
        """, tmp_path, extra_path=[tmp_path / "fake"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.startswith("torch "), proc.stdout
    assert "RuntimeWarning: trnsim: torch_neuronx" in proc.stderr and "`import trnsim`" in proc.stderr, proc.stderr


def test_compile_backend_named_neuron(tmp_path):
    proc = run_python("""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        x = torch.randn(5, 8)
        expected = model(x)
        expected.sum().backward()
        expected_grad = model[0].weight.grad.clone()
        model.zero_grad()
        device_model = model.to("neuron")
        compiled = torch.compile(device_model, backend="neuron")
        out = compiled(x.to("neuron"))
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(device_model[0].weight.grad.cpu(), expected_grad, rtol=1e-5, atol=1e-5)
        import torch._dynamo
        assert "neuron" in torch._dynamo.list_backends()
        print("OK")
        """, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK", proc.stdout


def test_accelerator_memory_functions(tmp_path):
    # A subprocess: before the device had a host allocator, empty_host_cache() segfaulted. The one
    # script here that imports trnsim: these checks do not depend on autoload.
    proc = run_python("""
        import torch, trnsim
        acc = torch.accelerator
        capacity = acc.get_memory_info()[1]
        base = acc.memory_allocated()
        keep = torch.empty(1024, dtype=torch.float32, device="neuron")
        assert acc.memory_allocated() - base == 4096
        acc.reset_peak_memory_stats()
        acc.reset_accumulated_memory_stats()
        scratch = torch.empty(2048, dtype=torch.float32, device="neuron")
        del scratch
        assert acc.memory_allocated() - base == 4096
        assert acc.max_memory_allocated() == base + 4096 + 8192
        assert acc.memory_reserved() == acc.memory_allocated() and acc.max_memory_reserved() == base + 4096 + 8192
        stats = acc.memory_stats()
        assert stats["allocated_bytes.all.allocated"] == 8192 and stats["allocated_bytes.all.freed"] == 8192, stats
        assert stats["allocated_bytes.all.current"] == base + 4096
        free, total = acc.get_memory_info()
        assert total == capacity and free == total - acc.memory_allocated(), (free, total)
        assert acc.memory_allocated("neuron:0") == acc.memory_allocated(0) == torch.neuron.memory_allocated()
        acc.reset_peak_memory_stats()
        assert acc.max_memory_allocated() == base + 4096
        acc.empty_cache()
        acc.empty_host_cache()
        assert acc.memory_allocated() - base == 4096  # nothing cached to release: live tensors stay
        print("OK")
        """, tmp_path)
    assert proc.returncode == 0, f"rc {proc.returncode}\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK", proc.stdout


def test_build_dist_info_declares_pyproject_entry_points():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    info = PYTHON_DIR / f"trnsim-{project['version']}+build.dist-info"  # the local label: frontend/dist_info.py
    text = (info / "entry_points.txt").read_text()
    assert "[torch.backends]\ntrnsim = _trnsim_autoload:autoload\n" in text, text
    assert "[torch_dynamo_backends]\nneuron = _trnsim_autoload:compile_backend\n" in text, text
    assert project["entry-points"]["torch.backends"] == {"trnsim": "_trnsim_autoload:autoload"}
    assert [p.name for p in PYTHON_DIR.glob("trnsim-*.dist-info")] == [info.name]
    assert (PYTHON_DIR / "_trnsim_autoload.py").read_text() == (
        REPO_ROOT / "frontend" / "python" / "_trnsim_autoload.py").read_text()
