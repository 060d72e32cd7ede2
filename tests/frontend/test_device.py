"""The PyTorch device "neuron", first slice: device registration, simulated HBM, native copies
and views, and the counting CPU fallback through which every op without a lowering runs (the ops
on the simulator are tested in test_ops.py)."""
import os
import pathlib
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

# The package the build put in <build>/python (the venv also finds it through trnsim-build.pth;
# TRNSIM_BUILD_DIR picks another build). No conftest.py here: the name `conftest` is taken by
# tests/conftest.py, which other test modules import.
PYTHON_DIR = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", pathlib.Path(__file__).resolve().parents[2] / "build")) / "python"
if not (PYTHON_DIR / "trnsim").is_dir():
    raise ImportError(f"{PYTHON_DIR}/trnsim is missing: run `make` (the frontend is built with the project)")
sys.path.insert(0, str(PYTHON_DIR))

import trnsim  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
          torch.int8, torch.uint8, torch.bool, torch.complex64]


@pytest.fixture
def python_env():
    """Environment for a subprocess that imports the same built trnsim."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(PYTHON_DIR), env.get("PYTHONPATH", "")])
    return env


@pytest.fixture(autouse=True)
def quiet_fallback():
    """Most tests let compute fall back silently; the fallback tests set their own mode."""
    trnsim.set_fallback_mode("allow")
    yield
    trnsim.set_fallback_mode("warn")


def sample(dtype, shape=(5, 7)):
    g = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(0, 100, shape, generator=g).to(dtype)


def test_registration():
    assert torch._C._get_privateuse1_backend_name() == "neuron"
    assert torch.neuron.is_available()
    assert torch.neuron.device_count() == trnsim.config()["device_count"] >= 1
    assert torch.device("neuron:0").type == "neuron"
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    x = torch.ones(2).neuron()
    assert x.is_neuron and x.device == torch.device("neuron:0")
    assert torch.neuron.current_device() == 0


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip(dtype):
    host = sample(dtype)
    dev = host.to("neuron")
    assert dev.device.type == "neuron" and dev.dtype == dtype and dev.shape == host.shape
    back = dev.cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back, host)


def test_non_contiguous_and_device_to_device_copies():
    host = torch.arange(24.0).reshape(4, 6)
    dev = host.to("neuron")
    assert torch.equal(dev.t().cpu(), host.t())
    assert torch.equal(dev[1:, ::2].cpu(), host[1:, ::2])
    assert torch.equal(dev.t().contiguous().cpu(), host.t().contiguous())
    other = dev.to("neuron:1") if torch.neuron.device_count() > 1 else dev.clone()
    assert torch.equal(other.cpu(), host)
    target = torch.empty(4, 6, device="neuron")
    target.copy_(dev)
    assert torch.equal(target.cpu(), host)
    assert dev[2, 3].item() == 15.0


def test_factories_fill_and_zero():
    assert torch.equal(torch.zeros(2, 3, device="neuron").cpu(), torch.zeros(2, 3))
    assert torch.equal(torch.ones(4, dtype=torch.int32, device="neuron").cpu(), torch.ones(4, dtype=torch.int32))
    assert torch.equal(torch.full((3,), 2.5, device="neuron").cpu(), torch.full((3,), 2.5))
    x = torch.arange(12.0).reshape(3, 4).to("neuron")
    x[:, 1].zero_()
    x[2].fill_(-1)
    expected = torch.arange(12.0).reshape(3, 4)
    expected[:, 1] = 0
    expected[2] = -1
    assert torch.equal(x.cpu(), expected)


def test_randn_on_device():
    torch.manual_seed(1234)
    a = torch.randn(3, 4, device="neuron")
    torch.manual_seed(1234)
    b = torch.randn(3, 4, device="neuron")
    assert a.device.type == "neuron" and a.shape == (3, 4)
    assert torch.equal(a.cpu(), b.cpu())
    assert a.cpu().std() > 0


def test_views_alias_storage():
    base = torch.zeros(4, 6).to("neuron")
    row = base[1]
    col = base[:, 2]
    tv = base.t()
    flat = base.view(24)
    for v in (row, col, tv, flat):
        assert v.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    row.add_(1)          # in place on a view: visible in the base
    col.fill_(5)
    flat[0] = 7
    tv[5, 3] = 9
    expected = torch.zeros(4, 6)
    expected[1] += 1
    expected[:, 2] = 5
    expected.view(24)[0] = 7
    expected[3, 5] = 9
    assert torch.equal(base.cpu(), expected)


def test_module_to_and_mlp_forward_backward_match_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev_model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    dev_model.load_state_dict(cpu_model.state_dict())
    dev_model.to("neuron")
    assert all(p.device.type == "neuron" for p in dev_model.parameters())
    x = torch.randn(8, 16)
    out_cpu = cpu_model(x)
    out_dev = dev_model(x.to("neuron"))
    assert out_dev.device.type == "neuron"
    torch.testing.assert_close(out_dev.cpu(), out_cpu)
    out_cpu.square().mean().backward()
    out_dev.square().mean().backward()
    for p_cpu, p_dev in zip(cpu_model.parameters(), dev_model.parameters()):
        assert p_dev.grad.device.type == "neuron"
        torch.testing.assert_close(p_dev.grad.cpu(), p_cpu.grad)


def test_memory_allocated_tracking():
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    t = torch.empty(1024, dtype=torch.float32, device="neuron")
    assert torch.neuron.memory_allocated() - before == 4096
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    torch.neuron.reset_peak_memory_stats()
    u = torch.empty(2048, dtype=torch.float32, device="neuron")
    peak = torch.neuron.max_memory_allocated()
    assert peak >= before + 4096 + 8192
    del u
    assert torch.neuron.memory_allocated() - before == 4096
    assert torch.neuron.max_memory_allocated() == peak
    view = t[10:20]
    assert torch.neuron.memory_allocated() - before == 4096  # a view allocates nothing
    del t, view
    assert torch.neuron.memory_allocated() == before
    free, total = torch.neuron.mem_get_info()
    assert total == trnsim.config()["hbm_bytes_per_device"] and free <= total


def test_out_of_memory_like_cuda():
    try:
        cfg = trnsim.set_config("trn2", **{"hbm.capacity_bytes": 1 << 30})
        capacity = cfg["hbm_bytes_per_device"]
        assert capacity == (1 << 30) // cfg["device_count"]
        keep = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(capacity, dtype=torch.uint8, device="neuron")
        message = str(info.value)
        assert "out of memory" in message
        assert f"Tried to allocate {capacity / 2**20:.2f} MiB" in message
        assert f"total capacity of {capacity / 2**20:.2f} MiB" in message
        assert "is free" in message
        del keep
        ok = torch.empty(capacity // 2, dtype=torch.uint8, device="neuron")  # still usable after the OOM
        del ok
    finally:
        trnsim.set_config("trn2")
    assert trnsim.config()["hbm_bytes_per_device"] > 1 << 30


def test_set_config_chooses_hardware():
    try:
        info = trnsim.set_config("trn3")
        assert info["name"] == "trn3" and torch.neuron.device_count() == info["device_count"]
    finally:
        trnsim.set_config("trn2")
    with pytest.raises(RuntimeError):
        trnsim.set_config("no-such-config")
    assert trnsim.config()["name"] == "trn2"


def test_fallback_report_counts_ops():
    a = torch.randn(4, 4).to("neuron")
    b = torch.randn(4, 4).to("neuron")
    trnsim.reset_fallback_report()
    for _ in range(3):
        c = torch.fmax(a, b)  # not lowered
    torch.log1p(c)  # not lowered either
    report = trnsim.fallback_report()
    assert sum(n for op, n in report.items() if op.startswith("aten::fmax")) == 3
    assert sum(n for op, n in report.items() if op.startswith("aten::log1p")) == 1
    # native ops never fall back
    trnsim.reset_fallback_report()
    a.cpu(), a.t(), a.view(16), a[1:], a.clone(), torch.empty(3, device="neuron"), a[0, 0].item()
    a.reshape(2, 8), a.permute(1, 0).contiguous(), a.unsqueeze(0).expand(2, 4, 4), a.split(2), a.detach()
    a.to(torch.float16), a.to("neuron:1") if torch.neuron.device_count() > 1 else a
    torch.zeros(3, device="neuron"), torch.ones(2, 2, device="neuron"), torch.full((2,), 3.0, device="neuron")
    assert trnsim.fallback_report() == {}


def test_fallback_warns_once_per_op():
    trnsim.set_fallback_mode("warn")
    trnsim.reset_fallback_report()
    a = torch.randn(3).to("neuron")
    with pytest.warns(UserWarning, match="has no neuron kernel"):
        a.log1p()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a.log1p()  # the second call of the same op is silent
    assert trnsim.fallback_report()["aten::log1p.out"] == 2


@pytest.mark.parametrize("mode", ["error", "warn", "allow"])
def test_fallback_mode_from_environment(mode, python_env):
    script = textwrap.dedent("""
        import warnings, torch, trnsim
        x = torch.tensor([1.0, 2.0]).to("neuron")      # native: allowed in every mode
        assert torch.equal(x.cpu(), torch.tensor([1.0, 2.0]))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                y = torch.fmax(x, -x)  # neg runs on the device; fmax falls back (not lowered)
            except NotImplementedError as e:
                print("RAISED", e)
            else:
                print("RESULT", y.cpu().tolist(), "WARNINGS", len([w for w in caught if "neuron kernel" in str(w.message)]))
        print("REPORT", trnsim.fallback_report())
    """)
    env = dict(python_env, TRNSIM_FALLBACK=mode)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if mode == "error":
        assert "RAISED" in proc.stdout and "aten::fmax" in proc.stdout and "TRNSIM_FALLBACK=error" in proc.stdout
        assert "REPORT {}" in proc.stdout
    else:
        assert "RESULT [1.0, 2.0]" in proc.stdout
        assert f"WARNINGS {1 if mode == 'warn' else 0}" in proc.stdout
        assert "'aten::fmax" in proc.stdout and "neg" not in proc.stdout


def test_backward_runs_on_the_calling_thread_and_exits_cleanly(python_env):
    """A large backward's last op used to finish on autograd's device thread while Python shut
    down (abort at exit, rc 134); the device's backward now runs on the calling thread."""
    script = textwrap.dedent("""
        import threading, torch, trnsim
        assert not torch._C._is_multithreading_enabled()
        x = torch.randn(4, 64, 112, 112).to("neuron").requires_grad_()
        threads = set()
        x.register_hook(lambda g: threads.add(threading.get_ident()))
        y = x * 2
        y.backward(torch.ones_like(y))
        assert threads == {threading.get_ident()}, threads
        print("ok")
    """)
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=python_env,
                              timeout=300)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_config_from_environment(python_env):
    env = dict(python_env, TRNSIM_CONFIG="trn3")
    script = "import torch, trnsim; print(trnsim.config()['name'], torch.neuron.device_count())"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "trn3"


def test_save_and_load_with_map_location_round_trip():
    import io
    x = torch.randn(5, 7, dtype=torch.bfloat16)
    buffer = io.BytesIO()
    torch.save(x.to("neuron"), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, map_location="neuron")
    assert loaded.device.type == "neuron"
    assert loaded.dtype == torch.bfloat16
    assert torch.equal(loaded.cpu(), x)
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu, x)
    torch.accelerator.synchronize()
