"""Calling kernels: timing, trace caching, torch tensors, in-place outputs, SPMD grids, targets."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def f32(rng, *shape):
    return rng.uniform(-1, 1, size=shape).astype(np.float32)


def gelu_mlp(x, w):
    """x: [128, 128], w: [128, 256] -> gelu(x.T @ w) (an fp32 result)."""
    out = nl.ndarray((x.shape[1], w.shape[1]), nl.float32, buffer=nl.shared_hbm)
    acc = nl.matmul(nl.load(x), nl.load(w), transpose_x=True)
    nl.store(out, nl.gelu(acc))
    return out


def test_timing_sanity_and_timing_only(rng):
    with_values = nki.jit(gelu_mlp)
    timing_only = nki.jit(gelu_mlp, values=False)
    x, w = f32(rng, 128, 128), f32(rng, 128, 256)
    out = with_values(x, w)
    assert out.shape == (128, 256)
    assert with_values.last_latency_ns > 0
    assert timing_only(x, w) is None
    assert timing_only.last_latency_ns == with_values.last_latency_ns
    # One kernel, timing only for one call.
    assert with_values.run((x, w), {}, timing_only=True) is None
    assert with_values.last_latency_ns == timing_only.last_latency_ns
    s = with_values.last_summary
    # The call is one kernel execution: the launch cost (config chip.kernel_launch_ns), then the body the summary
    # describes.
    assert s.launch_ns > 0 and s.launch_ns + s.latency_ns == with_values.last_latency_ns
    assert 0 < s.mfu <= 1 and 0 < s.mbu
    assert s.engines["core0.tensor"]["instructions"] >= 1
    assert s.engines["core0.scalar"]["instructions"] >= 1   # gelu on the Scalar engine


def test_more_work_takes_longer(rng):
    @nki.jit
    def copy_rows(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        for i in nl.affine_range(a.shape[0] // 128):
            nl.store(out[i * 128:(i + 1) * 128], nl.load(a[i * 128:(i + 1) * 128]))
        return out
    copy_rows(f32(rng, 128, 256))
    small = copy_rows.last_latency_ns
    copy_rows(f32(rng, 1024, 256))
    assert copy_rows.last_latency_ns > small


def test_retrace_only_on_new_shapes_or_dtypes(rng):
    kernel = nki.jit(gelu_mlp)
    x, w = f32(rng, 128, 128), f32(rng, 128, 256)
    kernel(x, w)
    assert kernel.trace_count == 1
    kernel(f32(rng, 128, 128), f32(rng, 128, 256))       # new values, same shapes: cached
    assert kernel.trace_count == 1
    kernel(x, f32(rng, 128, 128))                        # new shape
    assert kernel.trace_count == 2
    kernel(x.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16))   # new dtypes
    assert kernel.trace_count == 3
    kernel(x, w)
    assert kernel.trace_count == 3


def test_nki_simulate(rng):
    x, w = f32(rng, 128, 128), f32(rng, 128, 256)
    out = nki.simulate(nki.jit(gelu_mlp))(x, w)
    assert isinstance(out, np.ndarray)
    from math import erf
    ref = x.T.astype(np.float64) @ w
    np.testing.assert_allclose(out, 0.5 * ref * (1 + np.vectorize(erf)(ref / np.sqrt(2))), rtol=3e-3, atol=3e-3)


# ---- torch ----------------------------------------------------------------------------------

def test_torch_tensors_in_and_out(rng):
    torch = pytest.importorskip("torch")
    kernel = nki.jit(gelu_mlp)
    x, w = torch.from_numpy(f32(rng, 128, 128)), torch.from_numpy(f32(rng, 128, 256))
    out = kernel(x, w)
    assert isinstance(out, torch.Tensor) and out.device.type == "cpu" and out.dtype == torch.float32
    torch.testing.assert_close(out, torch.nn.functional.gelu(x.T @ w), rtol=3e-3, atol=3e-3)


def test_torch_bf16(rng):
    torch = pytest.importorskip("torch")

    @nki.jit
    def double(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(a), 2.0))
        return out
    a = torch.from_numpy(f32(rng, 64, 32)).to(torch.bfloat16)
    out = double(a)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out, a * 2)


# ---- in-place outputs -----------------------------------------------------------------------

@nki.jit
def add_into(a, b, out):
    """Stores into its argument ``out`` and returns nothing."""
    nl.store(out, nl.add(nl.load(a), nl.load(b)))


def test_in_place_output_numpy(rng):
    a, b = f32(rng, 128, 64), f32(rng, 128, 64)
    out = np.zeros_like(a)
    assert add_into(a, b, out) is None
    np.testing.assert_allclose(out, a + b, rtol=1e-6)


def test_in_place_output_torch(rng):
    torch = pytest.importorskip("torch")
    a, b = torch.from_numpy(f32(rng, 128, 64)), torch.from_numpy(f32(rng, 128, 64))
    out = torch.zeros(128, 64)
    add_into(a, b, out)
    torch.testing.assert_close(out, a + b)


def test_in_place_partial_update(rng):
    @nki.jit
    def bump_first_rows(a):
        nl.store(a[0:32, :], nl.add(nl.load(a[0:32, :]), 1.0))
    a = f32(rng, 64, 16)
    before = a.copy()
    bump_first_rows(a)
    np.testing.assert_allclose(a[:32], before[:32] + 1.0, rtol=1e-6)
    np.testing.assert_array_equal(a[32:], before[32:])


# ---- SPMD -----------------------------------------------------------------------------------

@nki.jit
def spmd_scale(a):
    """Program i of the grid scales rows [i * 128, (i + 1) * 128) by i + 1."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    n = nl.num_programs(0)
    rows = a.shape[0] // n
    t = nl.load(a[i * rows:(i + 1) * rows, :])
    nl.store(out[i * rows:(i + 1) * rows, :], nl.multiply(t, float(i + 1)))
    return out


def test_spmd_grid(rng):
    a = f32(rng, 256, 32)
    out = spmd_scale[2](a)
    np.testing.assert_allclose(out[:128], a[:128], rtol=1e-6)
    np.testing.assert_allclose(out[128:], a[128:] * 2, rtol=1e-6)
    assert spmd_scale.last_latency_ns > 0
    out4 = nki.simulate(spmd_scale[4])(a)
    np.testing.assert_allclose(out4, a * np.repeat(np.arange(1, 5, dtype=np.float32), 64)[:, None], rtol=1e-6)


def test_spmd_two_dim_grid(rng):
    @nki.jit
    def tiles(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        i, j = nl.program_id(0), nl.program_id(1)
        assert nl.program_ndim() == 2
        t = nl.load(a[i * 64:(i + 1) * 64, j * 16:(j + 1) * 16])
        nl.store(out[i * 64:(i + 1) * 64, j * 16:(j + 1) * 16], nl.add(t, float(10 * i + j)))
        return out
    a = f32(rng, 128, 48)
    out = tiles[2, 3](a)
    bump = np.add.outer(10 * np.repeat(np.arange(2), 64), np.repeat(np.arange(3), 16)).astype(np.float32)
    np.testing.assert_allclose(out, a + bump, rtol=1e-6)


# ---- targets --------------------------------------------------------------------------------

@pytest.mark.parametrize("target,version", [("trn1", "gen2"), ("trn2", "gen3"), ("trn3", "gen4")])
def test_platform_target_override(target, version, monkeypatch, rng):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    seen = {}

    @nki.jit
    def probe(a):
        seen["version"] = nisa.get_nc_version()
        seen["pmax"] = nl.tile_size.pmax
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.exp(nl.load(a)))
        return out
    a = f32(rng, 128, 64)
    np.testing.assert_allclose(probe(a), np.exp(a), rtol=1e-3)
    assert seen["version"] == getattr(nisa.nc_version, version)
    assert seen["pmax"] == 128
    assert probe.last_latency_ns > 0
    assert f"target {target}" in probe.last_program or f"target {version}" in probe.last_program


def test_platform_target_changes_trace_key(monkeypatch, rng):
    kernel = nki.jit(gelu_mlp)
    x, w = f32(rng, 128, 128), f32(rng, 128, 256)
    latencies = {}
    for target in ("trn1", "trn2"):
        monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
        kernel(x, w)
        latencies[target] = kernel.last_latency_ns
    assert kernel.trace_count == 2
    assert latencies["trn1"] != latencies["trn2"]


def test_unknown_platform_target(monkeypatch, rng):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn9")
    with pytest.raises(nki.KernelError, match="trn9"):
        nki.jit(gelu_mlp)(f32(rng, 128, 128), f32(rng, 128, 256))


def test_device_print(capsys, rng):
    @nki.jit
    def show(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        t = nl.load(a)
        nl.device_print("tile=", t)
        nl.store(out, t)
        return out
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    show(a)
    printed = capsys.readouterr().out
    assert "tile=" in printed and "7." in printed


@nki.jit
def split_exp(a):
    """The rows split among the grid's programs, 128 at a time."""
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    i, n = nl.program_id(0), nl.num_programs(0)
    rows = a.shape[0] // n
    for j in range(rows // 128):
        s = slice(i * rows + j * 128, i * rows + (j + 1) * 128)
        nl.store(out[s, :], nl.exp(nl.load(a[s, :])))
    return out


@pytest.mark.parametrize("target", ["trn1", "trn2"])
def test_lnc2_grid_uses_both_physical_cores(target, monkeypatch, rng):
    """kernel[2] on trn2 runs its two programs together on the logical core's two physical cores, sharing
    HBM (so not quite twice as fast); trn1 has one core per logical core: the programs run in turn."""
    import trnsim
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    a = f32(rng, 4096, 256)
    np.testing.assert_allclose(split_exp[1](a), np.exp(a), rtol=1e-3)
    one = split_exp.last_latency_ns - split_exp.last_result.launch_ns   # the bodies: one launch each
    np.testing.assert_allclose(split_exp[2](a), np.exp(a), rtol=1e-3)
    two = split_exp.last_latency_ns - split_exp.last_result.launch_ns
    if target == "trn1":
        assert one / two == pytest.approx(1.0, rel=0.05)
        return
    alone = [trnsim.run_program(p, timing_only=True, config="trn2").latency_ns for p in split_exp.last_programs]
    assert max(alone) <= two < sum(alone)
    assert 1.5 < one / two <= 2.0


def test_jit_options_and_missing_api(rng):
    kernel = nki.jit(mode="simulation", platform_target="trn3")(gelu_mlp)
    seen = {}

    @nki.jit(platform_target="trn1")
    def probe(a):
        seen["version"] = nisa.get_nc_version()
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a))
        return out
    probe(f32(rng, 8, 8))
    assert seen["version"] == nisa.nc_version.gen2
    kernel(f32(rng, 128, 128), f32(rng, 128, 256))
    assert "trn3" in kernel.last_program or "gen4" in kernel.last_program
    assert nki.jit(kernel) is kernel
    missing = nki.missing_api()
    assert isinstance(missing["nki.isa"], list) and isinstance(missing["nki.language"], list)
