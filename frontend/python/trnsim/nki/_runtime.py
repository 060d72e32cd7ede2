"""Calling a kernel: trace it for its arguments' shapes and dtypes (cached), run the program on the
simulator with values (or timing only), and hand results back in the caller's framework."""
import inspect
import json
import os
import re

import numpy as np

from . import _core, _instruction_mix, _schedule, _schedule_api, _trace
from math import prod as _prod

from ._core import KernelError, View, as_dtype

# NEURON_PLATFORM_TARGET_OVERRIDE names (NKI docs) -> trnsim configs.
_TARGETS = {"trn1": "trn1", "gen2": "trn1", "inf2": "trn1", "trn2": "trn2", "gen3": "trn2", "trn3": "trn3",
            "gen4": "trn3"}
_default_target = {"config": None, "overrides": []}


def set_target(config, overrides=None):
    """The config kernels run on when NEURON_PLATFORM_TARGET_OVERRIDE does not say (default: the
    device's config, ``trnsim.config()``)."""
    _default_target["config"], _default_target["overrides"] = str(config), list(overrides or [])


def _target_config(platform_target=None):
    name = platform_target or os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE")
    if name:
        if name not in _TARGETS:
            raise KernelError(f"platform target {name!r}: one of {', '.join(sorted(_TARGETS))}")
        return _TARGETS[name], []
    if _default_target["config"]:
        return _default_target["config"], _default_target["overrides"]
    import trnsim
    return trnsim.config()["name"], []


def _framework(value):
    mod = type(value).__module__
    if mod.startswith("torch"):
        import torch
        if isinstance(value, torch.Tensor):
            return "torch"
    if isinstance(value, np.ndarray):
        return "numpy"
    return None


def _host_array(value):
    """NumPy view of an argument (torch tensors through .cpu(); bf16 kept as ml_dtypes bf16)."""
    if _framework(value) == "torch":
        import torch
        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if t.dtype == torch.bfloat16:
            import ml_dtypes
            return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.contiguous().numpy()
    return np.asarray(value)


def _to_framework(array, like_framework, device=None):
    if like_framework != "torch":
        return array
    import ml_dtypes
    import torch
    if array.dtype == ml_dtypes.bfloat16:
        t = torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    elif array.dtype in (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)):
        t = torch.from_numpy(array.astype(np.float32))
    else:
        t = torch.from_numpy(array.copy())
    return t.to(device) if device is not None and str(device) != "cpu" else t


class RunSummary:
    """What one call measured: latency, busy time and utilisation per engine, and the Neuron Explorer
    summary figures (PROF): MFU (model matmul FLOPs over peak x time), HFU (also the Tensor engine's
    transposes), MBU (HBM bytes over time x one stack's bandwidth)."""

    def __init__(self, result, trace, target):
        stats = result.stats
        self.latency_ns = result.latency_ns   # the body, which the utilisation figures are over
        self.launch_ns = result.launch_ns     # the execution's fixed cost before it (config chip.kernel_launch_ns)
        self.engines = {k: dict(v) for k, v in stats["engines"].items()}
        self.utilization = {k: v["utilization"] for k, v in stats["engines"].items()}
        self.flops = stats.get("flops", 0)
        peak = stats.get("peak_tflops", 0) * 1e12
        seconds = self.latency_ns * 1e-9
        self.mfu = self.flops / (peak * seconds) if peak and seconds else 0.0
        self.hfu = (self.flops + trace.transpose_flops) / (peak * seconds) if peak and seconds else 0.0
        hbm_bytes = stats.get("dma", {}).get("hbm_bytes", 0)
        stack_gbps = target.hbm_gbps / max(1, target.hbm_stacks)
        self.mbu = hbm_bytes / (self.latency_ns * stack_gbps) if self.latency_ns else 0.0
        self.hbm_bytes = hbm_bytes
        self.instructions = stats.get("instructions", {})
        self.stats = stats

    def __repr__(self):
        busy = ", ".join(f"{k.split('.')[-1]} {v:.0%}" for k, v in sorted(self.utilization.items()) if v > 0)
        return (f"<{self.latency_ns / 1e3:.3f} us; MFU {self.mfu:.1%} HFU {self.hfu:.1%} MBU {self.mbu:.1%}; "
                f"active: {busy}>")


class _Traced:
    __slots__ = ("tasm", "trace", "inputs", "outputs", "written_args", "result_shape", "prints", "constants")


def _structure(value, seen):
    """The kernel's return value: HBM views -> output names (a nested tuple/list/dict of them)."""
    if value is None:
        return None
    if isinstance(value, View):
        if (value.st.space == "hbm" and value.st.base is None and not value.is_whole() and value.offset == 0
                and value.is_contiguous() and _prod(value.shape) == _prod(value.st.shape)):
            # A reshape of a whole tensor (out.reshape(...)): the tensor's values in the view's shape.
            seen.append(value.st)
            return ("reshaped", (value.st.name, tuple(value.shape)))
        if value.st.space != "hbm" or not value.is_whole():
            raise KernelError(f"a kernel returns whole HBM tensors (nl.ndarray(..., buffer=nl.shared_hbm)); got {value!r}")
        if value.st.base is not None:
            # view(dtype) of an HBM tensor: the tensor, its bytes read as the view's dtype.
            seen.append(value.st.base)
            return ("as_dtype", (value.st.name, value.st.dtype, tuple(value.shape)))
        seen.append(value.st)
        return ("tensor", value.st.name)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, [_structure(v, seen) for v in value])
    if isinstance(value, dict):
        return ("dict", {k: _structure(v, seen) for k, v in value.items()})
    raise KernelError(f"a kernel returns HBM tensors, got {type(value).__name__}")


def _as_dtype(array, dtype, shape):
    """A result read as another dtype: a NumPy array's bytes viewed, a torch tensor's through
    Tensor.view(dtype)."""
    if isinstance(array, np.ndarray):
        return array.view(dtype.numpy).reshape(shape)
    return array.view(_torch_dtype(dtype)).reshape(shape)


def _rebuild(structure, arrays):
    if structure is None:
        return None
    kind, payload = structure
    if kind == "tensor":
        return arrays[payload]
    if kind == "as_dtype":
        name, dtype, shape = payload
        return _as_dtype(arrays[name], dtype, shape)
    if kind == "reshaped":
        name, shape = payload
        return arrays[name].reshape(shape)
    if kind in ("tuple", "list"):
        items = [_rebuild(s, arrays) for s in payload]
        return tuple(items) if kind == "tuple" else items
    return {k: _rebuild(s, arrays) for k, s in payload.items()}


class Kernel:
    """An ``@nki.jit`` kernel. ``kernel(*arrays)`` runs it with values and timing; ``kernel[grid]``
    runs an SPMD grid; ``kernel.last_latency_ns`` / ``kernel.last_summary`` describe the last call."""

    def __init__(self, fn, mode=None, platform_target=None, values=True, **options):
        self.fn = fn
        self.__name__ = getattr(fn, "__name__", "kernel")
        self.__doc__ = getattr(fn, "__doc__", None)
        self.__wrapped__ = fn
        self.platform_target = platform_target
        self.values = values
        self.options = options
        self.last_latency_ns = None
        self.last_summary = None
        self.last_result = None
        self.last_program = None
        self.last_programs = []   # one per physical core of the last LNC launch
        self.benchmark_result = None
        self._cache = {}
        self.trace_count = 0
        self.schedule_pairs, self.schedule_location = [], None   # with_schedule's edges

    def __repr__(self):
        return f"<trnsim NKI kernel {self.__name__}>"

    def __getitem__(self, grid):
        return _GridCall(self, _grid_dims(self.__name__, grid))

    def explain(self, *args, **kwargs):
        """Traces ``kernel(*args, **kwargs)`` without running it and prints its instruction mix per engine and
        opcode, DMA bytes and matmul FLOPs (``_instruction_mix.InstructionMix``, also returned)."""
        config, overrides = _target_config(self.platform_target)
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        bound.apply_defaults()
        arrays = {name: (v, _host_array(v)) for name, v in bound.arguments.items() if _framework(v) is not None}
        traced = self._traced(bound, arrays, config, overrides, ((),), ())
        mix = _instruction_mix.mix_of_tasm(traced.tasm, self.__name__)
        print(mix)
        return mix

    def with_schedule(self, pairs):
        """NKI's ``kernel.with_schedule([("a", "b"), ("c", ["d", "e"])])``: this kernel with ordering edges (each
        pair: the first named instruction runs after the second), recorded in each trace (``_schedule_api``)."""
        scheduled = Kernel(self.fn, platform_target=self.platform_target, values=self.values, **self.options)
        scheduled.schedule_pairs = _schedule_api.check_pairs(pairs)
        scheduled.schedule_location = _core.user_location()
        return scheduled

    def __call__(self, *args, **kwargs):
        if _trace.active() is not None:
            # A kernel called from a kernel being traced is inlined (a helper kernel / sub-kernel).
            return self.fn(*args, **kwargs)
        if _trace.active() is not None:
            # A kernel called from a kernel being traced (the samples' ``@nki.jit(mode='trace')``
            # helpers): its instructions join the caller's program.
            return self.fn(*args, **kwargs)
        return self.run(args, kwargs)

    def run(self, args, kwargs, grid=(), timing_only=None, trace_path=None, overwrite=True):
        grid = _grid_dims(self.__name__, grid) if grid != () else ()   # nki.simulate(kernel)[g] comes here directly
        config, overrides = _target_config(self.platform_target)
        timing_only = (not self.values) if timing_only is None else timing_only
        sig = inspect.signature(self.fn)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        arrays, framework, device = {}, None, None
        for name, value in bound.arguments.items():
            fw = _framework(value)
            if fw is not None:
                framework = framework or fw
                if fw == "torch" and device is None:
                    device = value.device
                on_device = fw == "torch" and value.device.type != "cpu"
                arrays[name] = (value, None if on_device else _host_array(value))
        if device is not None and device.type != "cpu":
            return self._run_on_device(bound, arrays, device, grid)
        instances = _instances(grid)
        summaries, state = [], {}
        per_core_ns = {}
        cores = _logical_cores(config, overrides, grid)
        # An LNC launch runs its programs together, one per physical core, sharing HBM (their core_barriers meet,
        # their DMAs contend); other grid instances run one after another, each seeing what earlier ones wrote.
        batches = _batches(instances, cores)
        results = None
        import trnsim
        for index, batch in enumerate(batches):
            traced_batch = [self._traced(bound, arrays, config, overrides, program_id, grid) for program_id in batch]
            inputs = {}
            for traced in traced_batch:
                for arg_name, st_name in traced.inputs.items():
                    inputs[st_name] = state.get(st_name, arrays[arg_name][1])
                inputs.update(traced.constants)
                for st_name in traced.outputs:
                    if st_name in state and st_name not in inputs:
                        inputs[st_name] = state[st_name]
            programs = [t.tasm for t in traced_batch]
            try:
                result = trnsim.run_program(programs if len(programs) > 1 else programs[0], inputs, config=config,
                                            overrides=overrides, timing_only=timing_only,
                                            trace=trace_path if index == 0 else None, overwrite=overwrite)
            except trnsim.ProgramError as e:
                raise KernelError(_explain(traced_batch, str(e))) from None
            if trace_path and index == 0:
                _annotate_trace(trace_path, [t.trace for t in traced_batch])
            state.update(result.outputs)
            core = index % cores
            per_core_ns[core] = per_core_ns.get(core, 0.0) + result.latency_ns
            summaries.append(RunSummary(result, traced_batch[0].trace, traced_batch[0].trace.target))
            self.last_result, self.last_program, self.last_programs = result, programs[0], programs
            if not timing_only:
                for traced in traced_batch:
                    _device_prints(traced, result)
            results = traced_batch[0]
        # Other grid instances share the logical core's physical cores round-robin; contention between
        # them for HBM is not modelled in this mode (an LNC launch's programs do contend: they ran together).
        # One call is one kernel execution: its launch cost once, then the body.
        launch_ns = self.last_result.launch_ns if per_core_ns else 0.0
        self.last_latency_ns = launch_ns + max(per_core_ns.values()) if per_core_ns else 0.0
        self.last_summary = summaries[0] if len(summaries) == 1 else _GridSummary(summaries, self.last_latency_ns)
        if timing_only:
            return None
        for arg_name, st_name in results.written_args.items():
            value, host = arrays[arg_name]
            out = state[st_name]
            if _framework(value) == "torch":
                value.data.copy_(_to_framework(out, "torch").to(value.dtype).reshape(value.shape))
            else:
                np.copyto(host, out.astype(host.dtype, copy=False).reshape(host.shape), casting="unsafe")
        bools = {st.name for st in results.trace.hbm if st.dtype.nki_name == "bool_"}
        arrays_out = {name: _to_framework(state[name] != 0 if name in bools else state[name], framework, device)
                      for name in results.outputs}
        return _rebuild(results.result_shape, arrays_out)

    def run_ranks(self, args_per_rank, system=None, timing_only=None):
        """Run the kernel as ranks (SPMD over physical cores 0..n-1, each with its own memory): rank r gets
        the arguments ``args_per_rank[r]`` (a tuple, or a dict of keyword arguments; the same shapes on every
        rank), so its ``nki.collectives`` calls exchange values with the other ranks, timed on ``system`` (a
        system of the target's config; default its default system). Returns one result per rank, as a call
        would; ``last_latency_ns`` is the run's (the last rank's finish, with the launch)."""
        config, overrides = _target_config(self.platform_target)
        timing_only = (not self.values) if timing_only is None else timing_only
        sig = inspect.signature(self.fn)
        bounds = [sig.bind(**a) if isinstance(a, dict) else sig.bind(*a) for a in args_per_rank]
        if not bounds:
            raise KernelError(f"{self.__name__}.run_ranks: no ranks")
        per_rank_arrays = []
        for bound in bounds:
            bound.apply_defaults()
            arrays = {}
            for name, value in bound.arguments.items():
                if _framework(value) is not None:
                    arrays[name] = (value, _host_array(value))
            per_rank_arrays.append(arrays)
        traced = self._traced(bounds[0], per_rank_arrays[0], config, overrides, ((),), ())
        inputs = []
        for arrays in per_rank_arrays:
            rank_inputs = {st_name: arrays[arg_name][1] for arg_name, st_name in traced.inputs.items()}
            rank_inputs.update(traced.constants)
            inputs.append(rank_inputs)
        import trnsim
        try:
            outputs, result = trnsim.run_ranks(traced.tasm, inputs, config=config, overrides=overrides,
                                               timing_only=timing_only, system=system)
        except trnsim.ProgramError as e:
            raise KernelError(_explain([traced], str(e))) from None
        self.last_result, self.last_program, self.last_programs = result, traced.tasm, [traced.tasm]
        self.last_latency_ns = result.launch_ns + result.latency_ns
        self.last_summary = RunSummary(result, traced.trace, traced.trace.target)
        if timing_only:
            return None
        framework = next((_framework(v) for v, _ in per_rank_arrays[0].values()), None)
        return [_rebuild(traced.result_shape, {name: _to_framework(out[name], framework, None)
                                               for name in traced.outputs}) for out in outputs]

    def _run_on_device(self, bound, arrays, device, grid):
        """Tensors on ``neuron``: the kernel is one op of the PyTorch program, simulated on the device
        (its clock, op log, profiler table, timeline and recordings), reading and writing the device
        tensors' memory in place."""
        import torch
        from .. import _C
        for name, (value, _) in arrays.items():
            if value.device != device:
                raise KernelError(f"argument {name!r} is on {value.device}, others on {device}")
        leaves = _C.device_config_leaves()
        config = ("device", leaves["hash"])
        inputs = {name: value.detach().contiguous() for name, (value, _) in arrays.items()}
        host = {name: _HostShape(t) for name, t in inputs.items()}
        total, outputs, structure = 0.0, None, None
        # An LNC launch is one op on the logical core's physical cores (shared HBM, core_barriers meet); other
        # grid instances are ops one after another, each seeing what earlier ones wrote.
        batches = _batches(_instances(grid), _logical_cores(None, (), grid, leaves))
        for batch in batches:
            traced_batch = [self._traced(bound, host, config[0], [config[1]], program_id, grid, leaves=leaves)
                            for program_id in batch]
            traced = traced_batch[0]
            if outputs is None:
                outputs = {}
                for st in traced.trace.hbm:
                    if st.name in traced.outputs and st.name not in traced.written_args.values():
                        outputs[st.name] = torch.empty(st.shape, dtype=_torch_dtype(st.dtype), device=device)
                structure = traced.result_shape
            by_name = {traced.inputs[n]: t for n, t in inputs.items()}
            by_name.update(outputs)
            ins = [_buffer(name, by_name[name]) for name in traced.inputs.values()]
            consts = {name: _to_framework(a, "torch", device) for name, a in traced.constants.items()}
            ins += [_buffer(name, t) for name, t in consts.items()]   # nl.shared_constant tensors
            if grid:   # later instances see what earlier ones wrote
                ins += [_buffer(name, t) for name, t in outputs.items()]
            outs = [_buffer(name, by_name[name]) for name in traced.outputs]
            shapes = [list(t.shape) for t in inputs.values()]
            dtype = str(next(iter(inputs.values())).dtype).replace("torch.", "") if inputs else ""
            programs = [t.tasm for t in traced_batch]
            try:
                done = _C.execute_program(device.index or 0, f"nki:{self.__name__}:{hash(tuple(programs))}",
                                          programs, f"<nki kernel {self.__name__}>", ins, outs,
                                          f"nki.{self.__name__}", shapes, dtype)
            except RuntimeError as e:
                raise KernelError(_explain(traced_batch, str(e))) from None
            total += done["ns"]
        self.last_latency_ns = total
        self.last_summary = None
        for arg_name, st_name in traced.written_args.items():
            if inputs[arg_name].data_ptr() != arrays[arg_name][0].data_ptr():
                arrays[arg_name][0].data.copy_(inputs[arg_name])
        return _rebuild(structure, outputs)

    def _traced(self, bound, arrays, config, overrides, program_id, grid, leaves=None):
        key = (config, tuple(overrides), program_id, grid)
        for name, value in bound.arguments.items():
            if name in arrays:
                host = arrays[name][1] if isinstance(arrays[name], tuple) else arrays[name]
                key += ((name, host.shape, str(host.dtype)),)
            else:
                try:
                    hash(value)
                    key += ((name, value),)
                except TypeError:
                    key += ((name, repr(value)),)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        target = _trace.Target(config, overrides, leaves)
        group = list(program_id)   # the instances this core's program runs (_batches)
        trace = _trace.Trace(self.__name__, target, group[0], grid)
        trace.schedule_mode = _schedule.check_mode(self.options.get("schedule", _schedule.DEFAULT_MODE))
        # strict_allocation=True: a kernel whose live tiles exceed SBUF fails ([sbuf-capacity]) instead of spilling.
        trace.strict_allocation = bool(self.options.get("strict_allocation", False))
        call_args = {}
        arg_storage = {}
        with trace:
            for name, value in bound.arguments.items():
                if name in arrays:
                    host = arrays[name][1] if isinstance(arrays[name], tuple) else arrays[name]
                    st = trace.hbm_tensor(host.shape, as_dtype(host.dtype), name, role="input")
                    arg_storage[name] = st
                    call_args[name] = st.full_view()
                else:
                    call_args[name] = value
            structure = None
            seen = []
            for index, instance in enumerate(group):
                # Later instances write the shared_hbm tensors the first one made (Trace.hbm_tensor).
                trace.start_instance(index, instance)
                returned = self.fn(**call_args)
                trace.flush_pending()
                if index == 0:
                    structure = _structure(returned, seen)
            _schedule_api.resolve(trace, self.schedule_pairs, self.schedule_location)
        traced = _Traced()
        traced.trace = trace
        traced.result_shape = structure
        traced.inputs = {name: st.name for name, st in arg_storage.items()}
        traced.written_args = {name: st.name for name, st in arg_storage.items() if st.written}
        outputs = [st.name for st in seen]
        for st in trace.hbm:
            role = trace.roles[st.name]
            if st in seen or st.name in traced.written_args.values() or st.name.startswith("print"):
                trace.roles[st.name] = "output"
            elif role == "output":
                trace.roles[st.name] = "internal"
        for name in traced.written_args.values():
            if name not in outputs:
                outputs.append(name)
        traced.outputs = outputs
        traced.prints = list(trace.prints)
        traced.constants = dict(getattr(trace, "constants", {}))   # nl.shared_constant tensors
        traced.tasm = trace.tasm()
        self._cache[key] = traced
        self.trace_count += 1
        return traced


class _HostShape:
    """Shape and dtype of a device tensor, as the tracer reads them from a host array."""

    def __init__(self, tensor):
        self.shape = tuple(tensor.shape)
        self.dtype = as_dtype(tensor.dtype)


_TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int32": "int32", "int16": "int16",
                 "int8": "int8", "uint8": "uint8", "fp8_e4m3fn": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}


def _torch_dtype(dtype):
    import torch
    name = "bool" if dtype.nki_name == "bool_" else _TORCH_DTYPES.get(dtype.name)
    if name is None:
        raise KernelError(f"a {dtype.nki_name} result has no torch dtype")
    return getattr(torch, name)


def _buffer(name, tensor):
    dtype = as_dtype(tensor.dtype)
    if tensor.element_size() != dtype.size_bytes:
        # int64 / float64 become 4-byte tensors in a kernel: the device memory would be read as the wrong words.
        raise KernelError(f"argument {name!r}: a {tensor.dtype} tensor on the device has no {tensor.element_size()}-byte "
                          f"NKI dtype; convert it (e.g. .to(torch.{'int32' if not dtype.is_float else 'float32'})) first")
    return (name, tensor.data_ptr(), tensor.numel(), dtype.name)


# A bound on an SPMD grid's instances: each instance is traced (into its core's program, _batches) and simulated, so
# a grid of 2**20 would take hours of host time before anything failed. Real launches are far
# smaller (nki-samples: batch x heads, a few hundred). A bound of trnsim's, not of the hardware.
DEFAULT_MAX_GRID_INSTANCES = 1 << 16


def max_grid_instances():
    return _core.env_int("TRNSIM_NKI_MAX_GRID_INSTANCES", DEFAULT_MAX_GRID_INSTANCES)


def _grid_dims(name, grid):
    """``kernel[grid]``'s dims, checked: positive ints, at most max_grid_instances() instances in all."""
    grid = grid if isinstance(grid, tuple) else (grid,)
    if len(grid) == 1 and isinstance(grid[0], tuple):
        grid = grid[0]   # nl.spmd_dim(...)
    where = _core.where()
    if not grid:
        raise KernelError(f"{where}: {name}[()]: an SPMD grid needs at least one dim [grid]")
    dims = []
    for g in grid:
        try:
            n = g.__index__()   # ints, NumPy ints, nl.nc(2); not 2.5 or "2"
        except (AttributeError, TypeError):
            raise KernelError(f"{where}: {name}[{grid!r}]: grid dims are ints, got {type(g).__name__} {g!r} "
                              f"[grid]") from None
        if isinstance(g, bool) or n < 1:
            raise KernelError(f"{where}: {name}[{', '.join(map(str, grid))}]: grid dim {g!r} launches no instance; "
                              f"each dim is an int >= 1 [grid]")
        dims.append(n)
    count, bound = _prod(dims), max_grid_instances()
    if count > bound:
        raise KernelError(f"{where}: {name}[{', '.join(map(str, dims))}]: {count:,} SPMD instances, more than trnsim "
                          f"traces and simulates ({bound:,}, one after another on the host); this is a bound of "
                          f"trnsim's, not of the hardware: set TRNSIM_NKI_MAX_GRID_INSTANCES to raise it [grid-size]")
    return tuple(dims)


def _instances(grid):
    if not grid:
        return [()]
    out = [()]
    for g in grid:
        out = [ids + (i,) for ids in out for i in range(g)]
    return out


def _logical_cores(config, overrides, grid, leaves=None):
    """The physical cores a launch's instances are spread over: the logical core's (config
    chip.default_logical_core_size), at most one per instance."""
    if leaves is None:
        from .. import _C
        leaves = _C.config_leaves(config, list(overrides))
    lnc = _trace.Target(config, overrides, leaves).lnc
    return max(1, min(lnc, len(_instances(grid))))


def _batches(instances, cores):
    """How a launch runs (issue 37 item 3), as the NKI docs describe SPMD grids (nki.language.nc / spmd_dim: "the
    instances of spmd kernel will be distributed to different physical neuron cores"; a grid larger than the cores
    puts several instances on each, the first dimension-major share on core 0: "Physical NC [0]: kernel[0, 0],
    kernel[0, 1], kernel[1, 0], kernel[1, 1]"): the instances split into contiguous shares, one per physical core of
    the logical core, and the instances of one core compiled into one program (one after another in program order,
    so the compiler's scheduler overlaps them as it overlaps a loop's iterations). One batch: every core's program
    runs together, sharing HBM, as one kernel execution (one launch cost). ``kernel[2]`` on an LNC = 2 core is the
    case of one instance per core."""
    share, extra = divmod(len(instances), cores)
    groups, start = [], 0
    for core in range(cores):
        size = share + (1 if core < extra else 0)
        groups.append(tuple(instances[start:start + size]))
        start += size
    return [groups]


class _GridSummary:
    def __init__(self, summaries, latency_ns):
        self.instances = summaries
        self.latency_ns = latency_ns

    def __repr__(self):
        return f"<{len(self.instances)} instances, {self.latency_ns / 1e3:.3f} us>"


class _GridCall:
    def __init__(self, kernel, grid):
        self.kernel, self.grid = kernel, grid

    def __call__(self, *args, **kwargs):
        return self.kernel.run(args, kwargs, grid=self.grid)

    def __getattr__(self, name):
        # ``bench[bs](...)`` then ``bench[bs].benchmark_result`` / ``.last_latency_ns``: the kernel's.
        if name in ("kernel", "grid") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.kernel, name)


def _device_prints(traced, result):
    for prefix, name, view in traced.prints:
        if name in result.outputs:
            print(prefix, result.outputs[name])


def _explain(traced_batch, message):
    """A program error at the kernel's line: the program of the core the message names (``core N ...``)."""
    match = re.match(r"core (\d+) ", message)
    core = int(match.group(1)) if match and len(traced_batch) > 1 else 0
    return traced_batch[min(core, len(traced_batch) - 1)].trace.explain(message)


def _annotate_trace(path, traces):
    """Names every instruction slice of the Perfetto trace after the kernel line that issued it (``traces``:
    the kernel trace of each core's program, by the trace's process id = core)."""
    with open(path) as f:
        text = f.read()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    for ev in events:
        args = ev.get("args") or {}
        line = args.get("line")
        if isinstance(line, int):
            pid = ev.get("pid", 0)
            trace = traces[pid] if isinstance(pid, int) and 0 <= pid < len(traces) else traces[0]
            loc = trace.location_of_line(line)
            if loc:
                args["source"] = f"{loc[0]}:{loc[1]}"
                ev["name"] = f"{ev.get('name', '')} {os.path.basename(loc[0])}:{loc[1]}"
    with open(path, "w") as f:
        json.dump(doc, f)
