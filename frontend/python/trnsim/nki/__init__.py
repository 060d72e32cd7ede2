"""trnsim's NKI front-end: unmodified NKI kernels (``import nki`` / ``from neuronxcc import nki``) run
on the simulator, with values and a timeline.

Opt in, never implicitly (a real Neuron install is never shadowed):
- ``python -m trnsim.nki script.py [args]`` runs a script with ``nki`` / ``neuronxcc.nki`` served by trnsim;
- ``pytest -p trnsim.nki`` does the same for a test session;
- ``trnsim.nki.install()`` in a program (``force=True`` to override a real install).

A kernel is ordinary Python traced once per argument shapes/dtypes into trnsim's ISA (one NKI
``nki.isa`` call = one instruction) and run on the configured hardware (``NEURON_PLATFORM_TARGET_OVERRIDE``
= trn1 / trn2 / trn3, else ``trnsim.nki.set_target`` or the device config). Every call leaves
``kernel.last_latency_ns`` (one kernel execution: the launch cost, config ``chip.kernel_launch_ns``, then the
body) and ``kernel.last_summary`` (the body's per-engine busy time, MFU / HFU / MBU; its ``launch_ns``).
"""
import functools
import os

from . import collectives, isa, language, lnc
from . import _core as _core_module


def _dtype_module():
    """``nki.dtype``: the dtypes (``nki.dtype.float32`` ...), also what kernels annotate with (``x: nki.dtype``)."""
    import types
    mod = types.ModuleType("nki.dtype")
    mod.__doc__ = _dtype_module.__doc__
    mod.DType = _core_module.DType
    for name, d in _core_module.DTYPES.items():
        setattr(mod, name, d)
    return mod


dtype = _dtype_module()
from ._core import KernelError
from ._runtime import Kernel, RunSummary, set_target

__all__ = ["jit", "simulate", "cpu_simulate", "simulate_kernel", "benchmark", "baremetal", "profile", "install", "uninstall",
           "language", "isa", "lnc", "collectives", "KernelError", "Kernel", "set_target", "missing_api"]


def jit(fn=None, mode=None, platform_target=None, **options):
    """``@nki.jit`` / ``@nki.jit(mode=..., platform_target=...)``: a kernel called with NumPy arrays
    or torch tensors returns results of the same kind."""
    if fn is None:
        return lambda f: jit(f, mode=mode, platform_target=platform_target, **options)
    if isinstance(fn, Kernel):
        return fn
    kernel = Kernel(fn, mode=mode, platform_target=platform_target, **options)
    functools.update_wrapper(kernel, fn, updated=())
    if mode == "benchmark":   # beta 1: jit(mode="benchmark") is nki.benchmark with its defaults
        return benchmark(kernel)
    return kernel


def _as_kernel(kernel):
    return kernel if isinstance(kernel, Kernel) else jit(kernel)


class _Simulated:
    """What ``nki.simulate(kernel)`` returns: call it to run with values (NumPy in, NumPy out), or index it with
    an LNC / SPMD grid first (``nki.simulate(kernel)[2](...)``, as nki-library's harness calls
    ``nki.cpu_simulate(kernel)[lnc](**inputs)``; ``[1]`` is a plain call)."""

    def __init__(self, kernel, grid=()):
        self._kernel, self._grid = kernel, grid

    def __getitem__(self, grid):
        grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
        return _Simulated(self._kernel, () if grid == (1,) else grid)

    def __call__(self, *args, **kwargs):
        return self._kernel.run(args, kwargs, grid=self._grid)


def simulate(kernel):
    """``nki.simulate(kernel)(*args)``: runs with values (NumPy in, NumPy out); also ``kernel[2]`` and
    ``nki.simulate(kernel)[2]``."""
    if hasattr(kernel, "kernel") and hasattr(kernel, "grid"):
        return _Simulated(kernel.kernel, kernel.grid)
    return _Simulated(_as_kernel(kernel))


cpu_simulate = simulate   # the name nki-library's simulation harness calls


def simulate_kernel(kernel, *args, **kwargs):
    """Beta 1: runs the kernel on NumPy arrays and returns its result; ``simulate_kernel(kernel[2, 2], ...)``
    runs an SPMD grid."""
    if hasattr(kernel, "kernel") and hasattr(kernel, "grid"):
        return kernel.kernel.run(args, kwargs, grid=kernel.grid)
    return _as_kernel(kernel).run(args, kwargs)


class _Latency:
    """``benchmark_result.nc_latency``: the simulation is deterministic, so every iteration has the
    same latency and every percentile is it (in microseconds, as NKI reports)."""

    def __init__(self, latency_ns, iters):
        self._us = latency_ns / 1e3
        self.iters = iters

    def get_latency_percentile(self, percentile):
        if not 0 <= percentile <= 100:
            raise ValueError("a percentile is in 0..100")
        return self._us


class BenchmarkResult:
    def __init__(self, kernel, warmup, iters):
        self.nc_latency = _Latency(kernel.last_latency_ns, iters)
        self.summary = kernel.last_summary
        self.warmup = warmup


class _Benchmarked(Kernel):
    def __init__(self, kernel, warmup, iters, save_trace_name, timing_only):
        self.__dict__.update(kernel.__dict__)
        self._warmup, self._iters, self._trace_name = warmup, iters, save_trace_name
        self._timing_only = timing_only

    def run(self, args, kwargs, grid=(), timing_only=None, trace_path=None, overwrite=True):
        out = Kernel.run(self, args, kwargs, grid=grid,
                         timing_only=self._timing_only if timing_only is None else timing_only,
                         trace_path=trace_path or self._trace_name, overwrite=True)
        self.benchmark_result = BenchmarkResult(self, self._warmup, self._iters)
        _save_as_asked(self, trace_path or self._trace_name)
        return out


def _save_as_asked(kernel, trace_path):
    """The files a harness asked for by name, so that its ``os.path.getsize(save_trace_name)`` /
    ``os.rename("file.neff", ...)`` work: the JSON trace copied to an ``.ntff`` name, and the traced
    program (.tasm text; trnsim makes no NEFF) at ``save_neff_name``."""
    import shutil
    asked = getattr(kernel, "_asked_trace", None)
    if asked and trace_path and asked != trace_path and os.path.exists(trace_path):
        shutil.copyfile(trace_path, asked)
    neff = getattr(kernel, "_asked_neff", None)
    if neff and kernel.last_program:
        with open(neff, "w") as f:
            f.write(kernel.last_program)


def _asking(bench, save_trace_name, save_neff_name):
    bench._asked_trace = os.fspath(save_trace_name) if save_trace_name else None
    bench._asked_neff = os.fspath(save_neff_name) if save_neff_name else None
    return bench


def benchmark(kernel=None, warmup=10, iters=100, save_trace_name=None, save_neff_name=None, additional_compile_opt=None,
              timing_only=False, **_hardware_options):
    """Beta 1 ``@nki.benchmark(warmup=, iters=, save_trace_name=)``: ``kernel.benchmark_result.nc_latency
    .get_latency_percentile(p)`` in us. ``save_trace_name`` writes the Perfetto trace (trnsim's JSON
    form, not NTFF). Warm-up and iterations do not change a deterministic simulation: it runs once."""
    if kernel is None:
        return lambda k: benchmark(k, warmup, iters, save_trace_name, save_neff_name, additional_compile_opt,
                                   timing_only)
    return _asking(_Benchmarked(_as_kernel(kernel), warmup, iters, _trace_name(save_trace_name), timing_only),
                   save_trace_name, save_neff_name)


def _trace_name(name):
    if name is None:
        return None
    root, ext = os.path.splitext(os.fspath(name))
    return root + ".json" if ext in (".ntff", "") else os.fspath(name)


def baremetal(kernel=None, save_neff_name=None, save_trace_name=None, additional_compile_opt=None, **_):
    """Beta 1 ``nki.baremetal``: runs the kernel (values and timing); ``save_trace_name`` writes the trace."""
    if kernel is None:
        return lambda k: baremetal(k, save_neff_name, save_trace_name, additional_compile_opt)
    return _asking(_Benchmarked(_as_kernel(kernel), 0, 1, _trace_name(save_trace_name), False),
                   save_trace_name, save_neff_name)


def profile(kernel=None, working_directory=".", save_neff_name=None, save_trace_name="profile.json",
            profile_nth=1, overwrite=False, **_):
    """Beta 1 ``nki.profile``: runs the kernel and writes its Perfetto trace and summary JSON into
    ``working_directory`` (``overwrite=False`` refuses to replace them)."""
    if kernel is None:
        return lambda k: profile(k, working_directory, save_neff_name, save_trace_name, profile_nth, overwrite)
    base = _as_kernel(kernel)
    trace_path = os.path.join(working_directory, _trace_name(save_trace_name))

    class _Profiled(_Benchmarked):
        def run(self, args, kwargs, grid=(), timing_only=None, trace_path_=None, overwrite_=True):
            os.makedirs(working_directory, exist_ok=True)
            if not overwrite and os.path.exists(trace_path):
                raise FileExistsError(f"{trace_path} exists: pass overwrite=True to replace it")
            out = _Benchmarked.run(self, args, kwargs, grid=grid)
            import json
            # A grid's summary is its first instance's (the one the trace shows).
            s = self.last_summary.instances[0] if hasattr(self.last_summary, "instances") else self.last_summary
            with open(os.path.splitext(trace_path)[0] + "_summary.json", "w") as f:
                json.dump({"latency_ns": self.last_latency_ns, "mfu": s.mfu, "hfu": s.hfu, "mbu": s.mbu,
                           "engines": s.engines}, f, indent=1)
            return out
    return _asking(_Profiled(base, 0, 1, trace_path, False), trace_path,
                   os.path.join(working_directory, save_neff_name) if save_neff_name else None)


def missing_api():
    """What of NKI 0.7 trnsim's front-end lacks: ``{"nki.isa": [...], "nki.language": [...],
    "nki.collectives": [...]}``."""
    return {"nki.isa": isa.missing(), "nki.language": sorted(language.MISSING),
            "nki.collectives": sorted(collectives.MISSING)}


from ._install import install, uninstall  # noqa: E402


def pytest_load_initial_conftests(early_config, parser, args):
    """``pytest -p trnsim.nki``: installed before the first conftest loads, so a test suite whose root
    conftest imports ``nki`` at module level (nki-library's does) runs on trnsim."""
    install()


def pytest_configure(config):
    """``pytest -p trnsim.nki``: the session's ``import nki`` / ``neuronxcc.nki`` run on trnsim."""
    install()
