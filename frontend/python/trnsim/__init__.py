"""trnsim: PyTorch on a simulated AWS Trainium device, ``"neuron"``.

``import trnsim`` renames PyTorch's PrivateUse1 backend to ``neuron`` and registers the device
module ``torch.neuron``, so ``x.to("neuron")``, ``torch.randn(3, device="neuron")``,
``x.neuron()`` and ``model.to("neuron")`` work.

First slice (issue 6): device memory is simulated HBM (capacity from the hardware config, CUDA-like
out-of-memory errors, ``torch.neuron.memory_allocated()``), copies and views are native, and every
compute op without a lowering runs on the CPU through a counting fallback
(``trnsim.fallback_report()``; ``TRNSIM_FALLBACK=allow|warn|error``, default ``warn`` once per op).
Second slice: mm, addmm, bmm, add/sub/mul/div and relu/gelu/silu/sigmoid/tanh/exp run on the
simulator (kernel library; values from the interpreter, time from the timing model), advancing
``trnsim.simulated_ns()`` and logged in ``trnsim.op_log()``.

The hardware is ``$TRNSIM_CONFIG`` (a name such as ``trn3`` or a path), default ``trn2``;
``trnsim.set_config(name_or_path, **overrides)`` changes it.

``trnsim.record("step.trnrec")`` records every launch of a block; ``trnsim replay step.trnrec
[--config trn3]`` re-times it without PyTorch (see ``trnsim.record``).

``dist.init_process_group("neuron")`` runs torch.distributed on the simulated multi-chip system
(``trnsim.distributed``; ``trnsim.simulate_world(64)`` times a symmetric world of 64 ranks in one process).

``trnsim.run_program(program, {"x": array}, config="trn2")`` runs a ``.tasm`` program on NumPy arrays
in-process, as ``trnsim run`` does from files: outputs, ``latency_ns``, busy ns per engine, stats.
"""
import os as _os

import torch  # must precede the native module: it loads libtorch and registers PrivateUse1's peers

from . import _C
from . import device as _device_module
from .compile import compile_backend
from .profiler import Profile, profile
from .record import Recording, record
from .run import ConfigError, InputError, ProgramError, RunResult, run_program, run_ranks

if torch.distributed.is_available():
    # Registers the c10d backend "neuron" (trnsim.distributed).
    from . import distributed
    from .distributed import simulate_world

__all__ = ["set_config", "config", "timing_only", "values_enabled", "timing_cache_stats", "reset_timing_cache_stats", "fallback_report", "reset_fallback_report", "set_fallback_mode",
           "simulated_ns", "reset_simulated_time", "op_log", "profile", "Profile", "record", "Recording",
           "compile_backend", "run_program", "run_ranks", "simulate_world", "RunResult", "ProgramError", "ConfigError", "InputError"]

DEVICE_NAME = "neuron"


def _overrides_list(overrides, kwargs):
    items = list(overrides or [])
    for key, value in kwargs.items():
        # set_config("trn2", hbm__capacity_bytes=1<<30) or set_config("trn2", **{"hbm.capacity_bytes": 1<<30})
        items.append(f"{key.replace('__', '.')}={value}")
    return items


def set_config(name_or_path="trn2", overrides=None, values=None, **kwargs):
    """Choose the simulated hardware: a shipped config name ("trn2", "trn3"), a YAML path or a
    what-if, plus overrides as "a.b=v" strings or keyword arguments (dots spelled "__").
    ``values=False`` switches the device to timing-only mode (see :func:`timing_only`),
    ``values=True`` back; None keeps the current mode."""
    if values is not None and not isinstance(values, bool):
        raise TypeError(f"set_config(values=...) takes True, False or None, not {values!r}")
    _C.set_config(str(name_or_path), _overrides_list(overrides, kwargs))
    if values is not None:
        _C.set_values_enabled(values)
    return config()


def values_enabled():
    """False in timing-only mode (:func:`timing_only`), True when the device computes values."""
    return _C.values_enabled()


class timing_only:
    """``with trnsim.timing_only(): ...`` runs the block in timing-only mode (also
    ``set_config(cfg, values=False)`` or ``TRNSIM_VALUES=0``): every lowered op builds and times its
    kernels exactly as with values (the same simulated times) but computes nothing, so a model of
    real size costs no host memory for its tensors and a step simulates in seconds.

    - Device tensors keep shape, dtype, strides and their simulated HBM (capacity, OOM and
      ``torch.neuron.memory_allocated`` / ``max_memory_allocated`` as usual) but hold no values:
      reading one on the host (``.cpu()``, ``.item()``, ``.tolist()``, printing) raises, in this
      mode and after it (a tensor written here stays without values until rewritten). Except: a
      copy from the host of a whole storage up to 1 MiB keeps its bytes and can be read back (the
      index and metadata tensors frameworks send through the device, e.g. DDP's bucket order);
      what a kernel computes from it has none.
    - A kernel already timed (same program: op, shapes, dtypes, layout, split, config) takes its
      time from the timing cache; ``prof.totals()["timing_cache_hit_rate"]``.
    - An op with no kernel runs PyTorch's meta function for its result shapes and is charged an
      estimate: ``chip.kernel_launch_ns`` + its bytes read and written at the device's share of
      the HBM bandwidth (kind ``"estimate"`` in ``op_log`` and the profiler table). An op whose
      result shape depends on values (``nonzero``, ``unique``, masked selection) raises.
    - Random ops draw nothing (the generator does not advance); their pass is timed.
    - A lowering's host-side checks on integer inputs (index ranges, ignore_index) take every id
      as valid, and a scatter's device ids (index_add, a large vocabulary's embedding backward)
      count as repeating: its tiles stay on one core, where distinct ids with values split over
      the cores."""

    def __enter__(self):
        self._previous = _C.values_enabled()
        _C.set_values_enabled(False)
        return self

    def __exit__(self, *exc):
        _C.set_values_enabled(self._previous)
        return False


def timing_cache_stats():
    """The timing cache: hits, misses (launches simulated) and entries. Both modes use it: in
    timing-only mode a hit simulates nothing; with values a hit runs only the interpreter (the
    same values, core after core in program order) and takes the time from the cache. Kernels
    whose cores meet (core_barrier, collectives) or whose control flow depends on
    tensor values always run the timing model with values."""
    return dict(_C.timing_cache_stats())


def reset_timing_cache_stats():
    """Zero the timing cache's hit and miss counters (its entries stay)."""
    _C.reset_timing_cache_stats()


def config():
    """The configured hardware: name, source file, hash, device count, HBM bytes per device."""
    return _C.config_info()


def lowered_ops():
    """The lowering table: one dict per ATen op the device runs on the kernel library (``op``, e.g.
    ``"add.Tensor"``; ``family``, the lowering file it lives in; ``out_forms``, the out= overloads
    computed by the same lowering). Ops not listed run through the counted CPU fallback."""
    return list(_C.lowered_ops())


def fallback_report():
    """Ops that ran on the CPU through the fallback since the last reset: {op name: calls}."""
    return dict(_C.fallback_counts())


def reset_fallback_report():
    _C.reset_fallback_counts()


def set_fallback_mode(mode):
    """"allow" (silent), "warn" (once per op; the default) or "error" (raise NotImplementedError)."""
    _C.set_fallback_mode(mode)


def simulated_ns(device=None):
    """Simulated nanoseconds on the device's clock (the current device when None; "all" sums every
    device): kernels run on the simulator, host<->device copies and fallback ops' host-link
    transfers."""
    if device == "all":
        return _C.simulated_ns(-1)
    return _C.simulated_ns(_device_module._index(device))


def reset_simulated_time():
    """Zero every device's simulated clock and clear the op log."""
    _C.reset_simulated_time()
    _C.reset_op_log()


def op_log(kind=None):
    """What ran on the device since the last reset, in order: dicts with op, kind ("kernel": run on
    the simulator; "copy": a host<->device copy over the host link; "fallback": an op run on the
    CPU, timed as its host-link transfers; "estimate": timing-only mode, an op with no kernel,
    charged an estimate), timing_only and timing_cached (timing-only mode, the time from the cache), shapes (of the inputs), dtype, device, start_ns and ns
    (simulated), flops, mfu, bytes (host link), host_s and bottleneck (the busiest engine).
    ``kind`` keeps only records of that kind."""
    records = list(_C.op_log())
    return records if kind is None else [r for r in records if r["kind"] == kind]


def _register():
    if getattr(torch, DEVICE_NAME, None) is _device_module:
        return
    torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    torch._register_device_module(DEVICE_NAME, _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True)


# An installed wheel carries the shipped configs; the user's TRNSIM_CONFIG_PATH entries come first.
_PACKAGED_CONFIGS = _os.path.join(_os.path.dirname(__file__), "configs")
if _os.path.isdir(_PACKAGED_CONFIGS):
    _os.environ["TRNSIM_CONFIG_PATH"] = _os.pathsep.join(
        p for p in (_os.environ.get("TRNSIM_CONFIG_PATH"), _PACKAGED_CONFIGS) if p)

# Autograd runs the device's backward ops on the calling thread, not on a per-device worker thread:
# the simulator is synchronous, so the worker buys nothing, and it can still hold the last
# reference to a finished graph task (whose saved thread-local state holds Python objects) while
# the interpreter shuts down, which aborts the process ("terminate called without an active
# exception"). The setting is per thread: this covers the importing (main) thread.
torch._C._set_multithreading_enabled(False)

set_config(_os.environ.get("TRNSIM_CONFIG") or "trn2")
if _os.environ.get("TRNSIM_FALLBACK"):
    set_fallback_mode(_os.environ["TRNSIM_FALLBACK"])
if _os.environ.get("TRNSIM_VALUES") is not None:
    if _os.environ["TRNSIM_VALUES"] not in ("0", "1"):
        raise ValueError(f"TRNSIM_VALUES={_os.environ['TRNSIM_VALUES']!r}: use 1 (values, the default) or 0 "
                         "(timing-only mode, see trnsim.timing_only)")
    _C.set_values_enabled(_os.environ["TRNSIM_VALUES"] == "1")
_register()
