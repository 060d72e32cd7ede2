"""``trnsim.run_program``: run a ``.tasm`` program on NumPy arrays in-process, as ``trnsim run``
does from files (the same core, ``sim/program_run.h``): the config is loaded with its overrides, the
program checked against its legality rules, simulated with values (unless ``timing_only``), and the
outputs and timing returned.

Inputs follow ``trnsim run --input``'s rules (``tools/cli/npy.h``): float arrays are cast to the
tensor's float dtype with round-to-nearest-even, integer arrays must fit the tensor's integer dtype,
ml_dtypes ``bfloat16`` arrays go into bf16 tensors bit for bit (and widen exactly to fp32 for
others). Outputs come back in each tensor's dtype (bf16 / fp8 e4m3fn / e5m2 as ml_dtypes types);
dtypes NumPy has no type for (tf32, the legacy fp8 e4m3, e3m4, e8m0) come back as float32.
"""
import json
import os

import ml_dtypes
import numpy as np

from . import _C

ProgramError = _C.ProgramError    # the program does not parse or breaks a legality rule (RuntimeError)
ConfigError = _C.ConfigError      # the config cannot be found or loaded (RuntimeError)
InputError = _C.InputError        # an input's shape or dtype does not fit its tensor (ValueError)

_NUMPY_DTYPES = {
    "fp32": np.dtype(np.float32), "bf16": np.dtype(ml_dtypes.bfloat16), "fp16": np.dtype(np.float16),
    "fp8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "fp8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "int32": np.dtype(np.int32), "int16": np.dtype(np.int16), "int8": np.dtype(np.int8),
    "uint32": np.dtype(np.uint32), "uint16": np.dtype(np.uint16), "uint8": np.dtype(np.uint8),
}
_ML_FLOATS = {np.dtype(t) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2,
                                    ml_dtypes.float8_e4m3, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2fnuz)}


class RunResult:
    """What a run gave: ``outputs`` (tensor name -> array; empty when timing-only), ``latency_ns``
    (the simulated program body), ``launch_ns`` (the kernel execution's fixed cost before it, config
    ``chip.kernel_launch_ns``; ``execution_ns`` = both), ``engines`` (engine -> busy ns, e.g. ``"core0.tensor"``), ``stats`` (the dict
    ``trnsim run --stats`` writes: flops, mfu, utilisation, DMA bytes, ...), ``name``, ``config_hash``."""

    def __init__(self, outputs, stats, name, config_hash):
        self.outputs = outputs
        self.stats = stats
        self.name = name
        self.config_hash = config_hash
        self.latency_ns = stats["total_ns"]
        self.launch_ns = stats.get("launch_ns", 0.0)
        self.execution_ns = self.launch_ns + self.latency_ns
        self.engines = {name: e["busy_ns"] for name, e in stats["engines"].items()}

    def __repr__(self):
        return (f"RunResult({self.name!r}, latency_ns={self.latency_ns:.1f}, "
                f"outputs={sorted(self.outputs)}, mfu={self.stats.get('mfu', 0):.3f})")


def _input_tuple(name, array):
    a = np.asarray(array)
    if a.dtype == ml_dtypes.bfloat16:
        # Its bits travel as "bf16": into a bf16 tensor bit for bit, widened exactly to fp32 for others.
        return (str(name), "bf16", [int(n) for n in a.shape], np.ascontiguousarray(a).view(np.uint16).tobytes())
    if a.dtype in _ML_FLOATS:
        a = a.astype(np.float32)  # exact
    if a.dtype.kind == "b":
        a = a.astype(np.uint8)
    a = np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a)
    return (str(name), a.dtype.str, [int(n) for n in a.shape], a.tobytes())


def run_program(program, inputs=None, config="trn2", overrides=None, timing_only=False, trace=None,
                overwrite=False):
    """Run ``program`` (``.tasm`` text, or a path to a ``.tasm`` file / ``os.PathLike``) on ``config``
    (a name such as ``"trn2"`` or a YAML path) with ``overrides`` (``["a.b=v", ...]`` or a dict).
    A list of programs is a kernel split across physical cores (an LNC launch): program i runs on core i,
    all sharing one HBM (they declare the same HBM tensors); the latency is the last core's finish.

    ``inputs`` maps HBM tensor names to arrays; every input tensor is needed unless ``timing_only``
    (then inputs are ignored and the timing is the same). ``trace`` writes a Perfetto trace there; an
    existing file is refused (FileExistsError) unless ``overwrite=True``.
    Raises KeyError for a name the program has no HBM tensor for, ``InputError`` (ValueError) for a
    shape or dtype that does not fit, ValueError for missing inputs, ``ProgramError`` for a program
    that does not parse or is illegal on the config (naming the instruction and rule) and
    ``ConfigError`` for a config that cannot be loaded."""
    programs = list(program) if isinstance(program, (list, tuple)) else [program]
    if not programs:
        raise ValueError("run_program: no program")
    paths = [isinstance(p, os.PathLike) or (isinstance(p, str) and "\n" not in p and p.endswith(".tasm"))
             for p in programs]
    if any(paths) and not all(paths):
        raise ValueError("run_program: give every program as text or every program as a path")
    is_path = paths[0]
    texts = [os.fspath(p) if is_path else str(p) for p in programs]
    origin = texts[0] if is_path else "<program>"
    if trace is not None and os.path.exists(trace) and not overwrite:
        raise FileExistsError(f"{os.fspath(trace)} exists: pass overwrite=True to replace it")
    if isinstance(overrides, dict):
        overrides = [f"{k}={v}" for k, v in overrides.items()]
    packed = [_input_tuple(name, array) for name, array in (inputs or {}).items()]
    raw = _C.run_program(texts, origin, is_path, str(config), list(overrides or []), packed, bool(timing_only),
                         os.fspath(trace) if trace is not None else "")
    outputs = {}
    for name, (dtype, shape, data, as_float32) in raw["outputs"].items():
        np_dtype = np.dtype(np.float32) if as_float32 else _NUMPY_DTYPES[dtype]
        outputs[name] = np.frombuffer(data, dtype=np_dtype).reshape(shape)   # a writable view of its bytearray
    return RunResult(outputs, json.loads(raw["stats_json"]), raw["name"], raw["config_hash"])


def _outputs(raw_outputs):
    outputs = {}
    for name, (dtype, shape, data, as_float32) in raw_outputs.items():
        np_dtype = np.dtype(np.float32) if as_float32 else _NUMPY_DTYPES[dtype]
        outputs[name] = np.frombuffer(data, dtype=np_dtype).reshape(shape)   # a writable view of its bytearray
    return outputs


def run_ranks(program, inputs, config="trn2", overrides=None, timing_only=False, system=None, ranks_per_chip=0):
    """Run one ``.tasm`` program as ranks (SPMD): rank r on physical core r with its own memory and
    ``inputs[r]`` (a dict like run_program's), so the program's collectives (``all_reduce`` ...) exchange
    values between the ranks and are timed on ``system`` (a system of the config; default its
    default_system: on one chip, through its HBM; ``ranks_per_chip`` as sim::SimOptions). Returns
    ``(outputs, result)``: a dict of arrays per rank, and a RunResult with the run's time and stats."""
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise ValueError("run_ranks: inputs is a list with one dict of arrays per rank")
    is_path = isinstance(program, os.PathLike) or (isinstance(program, str) and "\n" not in program
                                                     and program.endswith(".tasm"))
    text = os.fspath(program) if is_path else str(program)
    if isinstance(overrides, dict):
        overrides = [f"{k}={v}" for k, v in overrides.items()]
    packed = [[_input_tuple(name, array) for name, array in (rank or {}).items()] for rank in inputs]
    raw = _C.run_ranks(text, text if is_path else "<program>", is_path, str(config), list(overrides or []), packed,
                       bool(timing_only), system or "", int(ranks_per_chip))
    outputs = [_outputs(o) for o in raw["outputs"]]
    return outputs, RunResult({}, json.loads(raw["stats_json"]), raw["name"], raw["config_hash"])
