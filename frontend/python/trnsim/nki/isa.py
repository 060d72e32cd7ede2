"""``nki.isa`` (NKI 0.2+): every instruction with ``dst`` first, one trnsim instruction per call.

The functions are made from trnsim's ISA table (``isa/instructions.def``): each takes the operands
of its ``.def`` line in that order, positionally or by name, plus ``engine=`` (one of the engines the
table allows) and ``mask=`` (beta-1 masks). An instruction trnsim's ISA lacks raises a KernelError
naming it (see ``missing()``).
"""
import numpy as np

from . import _core, _emit, _trace
from ._core import fail, user_location


class _Word:
    """An enum member NKI passes by attribute (``nisa.engine.vector``): its ISA word."""
    __slots__ = ("_isa_name", "_group", "value")

    def __init__(self, group, name):
        self._group, self._isa_name, self.value = group, name, None

    def __repr__(self):
        return f"nisa.{self._group}.{self._isa_name}"

    @property
    def name(self):  # as an Enum member's (nisa.nc_version.gen3.name == "gen3")
        return self._isa_name

    def __eq__(self, other):
        return isinstance(other, _Word) and other._isa_name == self._isa_name and other._group == self._group

    def __hash__(self):
        return hash((self._group, self._isa_name))

    # Ordered within a group: ``nisa.get_nc_version() >= nisa.nc_version.gen3`` (gen2 < gen3 < gen4).
    def _key(self, other):
        if not isinstance(other, _Word) or other._group != self._group:
            return NotImplemented
        return self._isa_name, other._isa_name

    def __lt__(self, other):
        k = self._key(other)
        return k if k is NotImplemented else k[0] < k[1]

    def __le__(self, other):
        k = self._key(other)
        return k if k is NotImplemented else k[0] <= k[1]

    def __gt__(self, other):
        k = self._key(other)
        return k if k is NotImplemented else k[0] > k[1]

    def __ge__(self, other):
        k = self._key(other)
        return k if k is NotImplemented else k[0] >= k[1]


class _Enum:
    def __init__(self, group, names):
        self._group = group
        for n in names:
            setattr(self, n, _Word(group, n))
        # NKI's numbers for the words (dge_mode.none.value == 3), where a kernel passes the number instead.
        for number, word in _emit.NKI_ENUM_VALUES.get(group, {}).items():
            if word in names:
                getattr(self, word).value = number

    def __iter__(self):
        return (v for k, v in vars(self).items() if not k.startswith("_"))


engine = _Enum("engine", ["tensor", "vector", "scalar", "gpsimd", "sync", "unknown"])
tensor_engine, vector_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.vector, engine.scalar, engine.gpsimd
unknown_engine = engine.unknown
dge_mode = _Enum("dge_mode", ["unknown", "none", "swdge", "hwdge"])
oob_mode = _Enum("oob_mode", ["error", "skip"])
matmul_perf_mode = _Enum("matmul_perf_mode", ["none", "double_row"])
nc_version = _Enum("nc_version", ["gen2", "gen3", "gen4"])
dma_engine = _Enum("dma_engine", ["dma", "gpsimd_dma"])
reduce_cmd = _Enum("reduce_cmd", ["idle", "reset", "reduce", "reset_reduce", "load_reduce"])


def _constants_module():
    """``nki.isa.constants``: the enums, where NKI 0.7 also serves them (``from nki.isa.constants import
    oob_mode``)."""
    import types
    mod = types.ModuleType("nki.isa.constants")
    mod.__doc__ = _constants_module.__doc__
    for name in ("engine", "dge_mode", "oob_mode", "matmul_perf_mode", "nc_version", "dma_engine", "reduce_cmd"):
        setattr(mod, name, globals()[name])
    return mod


constants = _constants_module()
_NC_VERSIONS = {"trn1": nc_version.gen2, "trn2": nc_version.gen3, "trn3": nc_version.gen4}

# NKI 0.7's nki.isa functions (../shared/reference/nki-api.md §2); those trnsim's ISA lacks are
# listed by missing().
NKI_FUNCTIONS = [
    "activation", "activation_reduce", "activate2", "affine_select", "bn_aggr", "bn_stats", "core_barrier",
    "dma_compute", "dma_copy", "dma_transpose", "dropout", "exponential", "iota", "local_gather", "max8",
    "memset", "nc_find_index8", "nc_match_replace8", "nc_matmul", "nc_matmul_mx", "nc_n_gather",
    "nc_stream_shuffle", "nc_transpose", "nonzero_with_count", "quantize_mx", "rand2", "rand_get_state",
    "rand_set_state", "range_select", "reciprocal", "register_alloc", "register_load", "register_move",
    "register_store", "rng", "scalar_tensor_tensor", "select_reduce", "sendrecv", "sequence_bounds",
    "set_rng_seed", "tensor_copy", "tensor_copy_predicated", "tensor_partition_reduce", "tensor_reduce",
    "tensor_scalar", "tensor_scalar_cumulative", "tensor_scalar_reduce", "tensor_tensor", "tensor_tensor_scan",
    "topk", "get_nc_version", "dma_gather", "scalar_load", "scalar_store",
]


def _mode_word(mode):
    """A dge_mode given as nisa.dge_mode.X, its word, or NKI's number for it: the word (None when not given)."""
    return getattr(mode, "_isa_name", None) or _emit.enum_number_word("dge_mode", mode) or mode


def _indirect(value):
    return isinstance(value, _core.IndirectRows)


def dma_copy(dst, src, *args, **kwargs):
    """``dst = src`` by DMA. An indirect side (``t.vector_select(0, idx)``, ``t.ap(vector_offset=idx,
    indirect_dim=0)``, beta 1's ``t[idx_tile, :]``) makes it the software DGE's gather (src) or
    scatter (dst), with ``oob_mode`` deciding what an offset outside the tensor does; elsewhere
    ``oob_mode`` has nothing to check (a static access out of bounds is an error when traced)."""
    location = user_location()
    names = ("dst_rmw_op", "oob_mode", "dge_mode")
    if len(args) > len(names):
        fail(f"nisa.dma_copy takes at most {2 + len(names)} positional arguments", location)
    for name, value in zip(names, args):
        if name in kwargs:
            fail(f"nisa.dma_copy: argument {name!r} given twice", location)
        kwargs[name] = value
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    oob = kwargs.pop("oob_mode", None)
    oob_word = getattr(oob, "_isa_name", oob)
    if oob_word not in (None, "error", "skip"):
        fail(f"nisa.dma_copy: oob_mode={oob!r} is not an nisa.oob_mode", location)
    kwargs.pop("priority", None)   # DMA queue priority: no QoS arbitration modelled on these targets
    if kwargs.get("dst_rmw_op") is None:
        kwargs.pop("dst_rmw_op", None)
    if not (_indirect(dst) or _indirect(src)):
        if oob_word == "skip":
            kwargs["oob_mode"] = "skip"   # a register-addressed side outside its tensor: the DMA moves nothing
        return _emit.emit("dma_copy", (dst, src), kwargs, location)
    if _indirect(dst) and _indirect(src):
        fail("nisa.dma_copy: both sides indirect; gather into SBUF, then scatter from it", location)
    mode = _mode_word(kwargs.pop("dge_mode", None))
    if mode not in (None, "unknown", "swdge"):
        fail(f"nisa.dma_copy: an indirect access needs the software DGE (dge_mode=swdge), not {mode}", location)
    extra = {k: v for k, v in kwargs.items() if k in ("engine", "mask", "name")}
    if oob_word == "skip":
        extra["oob_mode"] = "skip"
    if _indirect(src):
        return _emit.emit("dma_gather", (dst, src.table, _emit.as_view(src.indices, "indices")), extra, location)
    if "dst_rmw_op" in kwargs:
        extra["dst_rmw_op"] = kwargs["dst_rmw_op"]
    return _emit.emit("dma_scatter", (dst.table, src, _emit.as_view(dst.indices, "indices")), extra, location)


def dma_transpose(dst, src, *args, **kwargs):
    """``dst = src.T`` by DMA. An indirect src (``t.vector_select(0, idx)``, ``t.ap(pattern, vector_offset=idx)``
    of an HBM tensor) gathers its rows by the software DGE first: dst = (rows idx[p]).T."""
    location = user_location()
    if _indirect(dst):
        fail("nisa.dma_transpose into an indirect (vector_select / vector_offset) tensor is not supported: "
             "transpose into SBUF, then scatter the rows with nisa.dma_copy", location)
    # The DMA transpose's descriptors: the cost model prices the transpose by its efficiency, not
    # by who generates them, so dge_mode does not change it (an indirect source needs the software DGE).
    mode = _mode_word(kwargs.pop("dge_mode", None))
    axes = kwargs.pop("axes", None)
    if not _indirect(src):
        kwargs.update(_transpose_permutation(src, axes, location))
        return _emit.emit("dma_transpose", (dst, src) + args, kwargs, location)
    if mode not in (None, "unknown", "swdge"):
        fail(f"nisa.dma_transpose: an indirect source needs the software DGE (dge_mode=swdge), not {mode}", location)
    oob = getattr(kwargs.pop("oob_mode", None), "_isa_name", None)
    if oob == "skip":
        kwargs["oob_mode"] = "skip"
    kwargs.update(_transpose_permutation(src, axes, location))
    kwargs["indices"] = _emit.as_view(src.indices, "indices")
    return _emit.emit("dma_transpose", (dst, src.table) + args, kwargs, location)


_TRANSPOSE_AXES = {2: (1, 0), 3: (2, 1, 0), 4: (3, 1, 2, 0)}


def _transpose_permutation(src, axes, location):
    """NKI's DMA transpose permutes src's dims by its rank ((1, 0), (2, 1, 0), (3, 1, 2, 0); ``axes`` may only name
    that one). A permutation that moves only the outer and inner dims over size-1 middle ones is the ISA's 2-d
    transpose; any other is the ISA's src_shape / axes form."""
    shape = tuple(int(n) for n in src.shape)
    default = _TRANSPOSE_AXES.get(len(shape))
    if axes is not None and (default is None or tuple(int(a) for a in axes) != default):
        fail(f"nisa.dma_transpose axes={tuple(axes)!r} of a {len(shape)}-d src: NKI's DMA transpose supports (1, 0), "
             f"(2, 1, 0) and (3, 1, 2, 0), each for a src of that rank", location)
    if default is None:
        if len(shape) == 1:
            fail("nisa.dma_transpose of a 1-d src: give it 2 to 4 dims", location)
        fail(f"nisa.dma_transpose of a {len(shape)}-d src: NKI's DMA transpose takes 2 to 4 dims", location)
    if all(n == 1 for n in shape[1:-1]):
        return {}
    return {"src_shape": list(shape), "axes": list(default)}


def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id=0, dma_engine=None, **kwargs):
    """Point to point between the ranks of a launch (an LNC launch's programs, ``nl.program_id()``; the ranks of
    ``kernel.run_ranks``): rank ``send_to_rank``'s ``dst`` gets this rank's ``src`` and this rank's ``dst`` gets
    rank ``recv_from_rank``'s ``src``. Both sides call it (a rendezvous); ``pipe_id`` pairs calls of one channel;
    ``dma_engine=nisa.dma_engine.gpsimd_dma`` makes GpSimd move the tile instead of the DMA queues. Note NKI's order:
    ``src`` first."""
    location = user_location()
    for name, rank in (("send_to_rank", send_to_rank), ("recv_from_rank", recv_from_rank)):
        if not _is_int(rank):
            fail(f"nisa.sendrecv {name}: an int rank (e.g. 1 - nl.program_id(0)), got {type(rank).__name__} "
                 f"{rank!r}", location)
    word = getattr(dma_engine, "_isa_name", dma_engine) or "dma"
    if word not in ("dma", "gpsimd_dma"):
        fail(f"nisa.sendrecv dma_engine={dma_engine!r}: one of nisa.dma_engine.dma, nisa.dma_engine.gpsimd_dma",
             location)
    kwargs.pop("engine", None)   # the engine follows dma_engine
    kwargs.update(send_to_rank=int(send_to_rank), recv_from_rank=int(recv_from_rank), pipe_id=int(pipe_id),
                  dma_engine=word, engine="gpsimd" if word == "gpsimd_dma" else "sync")
    return _emit.emit("sendrecv", (dst, src), kwargs, location)


def get_nc_version():
    return _NC_VERSIONS[_trace.current().target.generation]


def missing():
    """The NKI 0.7 nki.isa functions trnsim cannot run yet."""
    have = set(_emit.specs()) | {n for n in NKI_FUNCTIONS if callable(globals().get(n))}
    return sorted(n for n in NKI_FUNCTIONS if n not in have)


def nc_matmul(dst, stationary, moving, *args, **kwargs):
    """dst[M, N] (+)= stationary[K, M].T @ moving[K, N]. A PSUM tile fresh from nl.zeros is written
    by its first matmul (accumulate=False), as the compiler folds the zeroing in. Without ``accumulate``
    (NKI: None, the compiler infers it) the first matmul into elements of a tensor overwrites them and
    later ones accumulate, per tensor: a new ``nl.ndarray`` placed where an earlier tensor's matmuls left
    PSUM accumulating (nki-library's attention_tkg reuses one PSUM address per batch) starts afresh."""
    location = user_location()
    dst_view = _emit.as_view(dst, "nisa.nc_matmul dst")
    if dst_view.st.pending_zero:
        if dst_view.is_whole() and kwargs.get("accumulate") in (None, True, "auto"):
            dst_view.st.pending_zero = False
            kwargs["accumulate"] = False
        else:
            _emit._flush_zero(dst_view.st, _trace.current(), location)
    first_write = _mark_matmul_written(dst_view)
    if kwargs.get("accumulate") is None and first_write:
        kwargs["accumulate"] = False
    return _emit.emit("nc_matmul", (dst_view, stationary, moving) + args, kwargs, location)


def _mark_matmul_written(view):
    """Marks the PSUM elements a matmul writes in its tensor; True when none of them had been written by a matmul
    of this tensor before. Unknown (a register offset, a matmul in a compiled loop whose body runs many times on a
    tensor made outside it, a tensor viewed as another dtype): False, leaving the ISA's accumulate=auto to decide by
    PSUM state. A tensor made in the loop's body is made anew by each run, which writes the same elements."""
    st = view.st
    if st.space != "psum" or st.base is not None or not isinstance(view.offset, (int, np.integer)):
        return False
    trace = _trace.current()
    if trace is not None and trace.loops and tuple(trace.loops) != st.loops:
        return False
    offsets = np.array([int(view.offset)], dtype=np.int64)
    for d, (stride, size) in enumerate(view.dims):
        if d != view.pdim and size != 1:
            offsets = (offsets[:, None] + int(stride) * np.arange(int(size), dtype=np.int64)).ravel()
    rows = view.dims[view.pdim][1] if view.pdim is not None else 1
    if offsets.min() < 0 or offsets.max() >= st.per_partition or view.pstart + rows > st.partitions:
        return False
    if st.matmul_written is None:
        st.matmul_written = np.zeros((st.partitions, st.per_partition), dtype=bool)
    region = st.matmul_written[view.pstart:view.pstart + rows]
    fresh = not region[:, offsets].any()
    region[:, offsets] = True
    return fresh


def tensor_reduce(dst, op, data, axis, *args, **kwargs):
    """Reduce ``data`` over free axes ``axis`` (an int or a list, NKI's numbering: axis 0 is the
    partition dim, the reduced axes are the trailing free dims). The emitted access pattern merges
    contiguous free dims, so the axes are renumbered to the emitted dims here."""
    location = user_location()
    dv = _emit.as_view(data, "nisa.tensor_reduce data")
    axes = sorted({int(a) % dv.ndim for a in (axis if isinstance(axis, (list, tuple)) else (axis,))})
    if dv.pdim in axes:
        fail("nisa.tensor_reduce: axis 0 is the partition dim; reduce across partitions with nc_matmul or "
             "nisa.tensor_partition_reduce [reduce-partition]", location)
    free = [d for d in range(dv.ndim) if d != dv.pdim]
    kept = [dv.dims[d] for d in free if d not in axes and dv.dims[d][1] != 1]
    red = [dv.dims[d] for d in free if d in axes and dv.dims[d][1] != 1]
    if not red:
        # Only size-1 dims reduced: each result is its one element (negated if asked).
        negate = kwargs.pop("negate", args[0] if args else False)
        kwargs.pop("keepdims", None)
        extra = {k: v for k, v in kwargs.items() if k in ("mask", "name")}
        if negate:
            return _emit.emit("tensor_scalar", (dst, dv, "multiply", -1.0), extra, location)
        return _emit.emit("tensor_copy", (dst, dv), extra, location)
    n_all = len(_core.merge_dims(kept + red))
    n_kept, n_red = len(_core.merge_dims(kept)), len(_core.merge_dims(red))
    if n_all == n_kept + n_red:
        axis = list(range(1 + n_kept, 1 + n_kept + n_red)) or [1]
    elif not kept:
        axis = list(range(1, 1 + n_all))
    elif dv.pdim == 0 and max(d for d in free if d not in axes) < min(axes):
        # The last kept dim and the first reduced one are contiguous (a [P, B, H] tile reduced over H): emit the
        # kept and the reduced dims apart so that the axis numbers still name the reduced ones.
        dv = _core.ExactView(dv.st, dv.offset, [dv.dims[0]] + _core.merge_dims(kept) + _core.merge_dims(red), 0,
                             dv.pstart)
        axis = list(range(1 + n_kept, 1 + n_kept + n_red))
    else:
        fail("nisa.tensor_reduce: the kept and reduced free dims of this access pattern are one contiguous run; "
             "reshape the tile so that they are separate dims", location)
    return _emit.emit("tensor_reduce", (dst, op, dv, axis) + args, kwargs, location)


def dma_compute(dst, srcs, reduce_op=None, scales=None, unique_indices=None, **kwargs):
    """dst = srcs[0] + srcs[1] + ...: trnsim's ISA has no list operand, so the DMA engines do it as
    the hardware's read-add-write path: a copy of srcs[0], then ``dma_copy(dst_rmw_op=add)`` for each
    other source (each costed as a read-modify-write DMA). Only ``add`` and no ``scales`` yet."""
    location = user_location()
    op = _emit.op_name(reduce_op, "nisa.dma_compute reduce_op") if reduce_op is not None else "add"
    unit_scales = scales is None or all(isinstance(x, (int, float, np.number)) and float(x) == 1.0 for x in scales)
    if op != "add" or not unit_scales or unique_indices is not None:
        fail("nisa.dma_compute: only reduce_op=add with unit (or no) scales and no indices is supported", location)
    srcs = list(srcs)
    if scales is not None and len(scales) != len(srcs):
        fail(f"nisa.dma_compute: {len(scales)} scales for {len(srcs)} sources", location)
    if not srcs:
        fail("nisa.dma_compute needs at least one source", location)
    _emit.emit("dma_copy", (dst, srcs[0]), dict(kwargs), location)
    kwargs.pop("name", None)   # the call's name is its first instruction's
    for src in srcs[1:]:
        _emit.emit("dma_copy", (dst, src), dict(kwargs, dst_rmw_op="add"), location)


class VirtualRegister:
    """``nisa.register_alloc()`` / ``nisa.scalar_load()``: one of the core's 64 int32 registers (ISA r0..r63),
    NKI's ``NkiScalar``. Arithmetic (+, -, * with ints or registers) is traced into register instructions
    (int32, wrapping); comparisons give a 0/1 register. A register whose object is gone is reused."""
    __slots__ = ("_register", "_trace", "_scope")

    def __init__(self, index, trace=None, scope=()):
        self._register, self._trace, self._scope = index, trace, scope

    def __del__(self):
        trace = getattr(self, "_trace", None)
        if trace is not None:
            trace.release_register(self._register, self._scope)

    def __repr__(self):
        return f"<nki register r{self._register}>"

    def __bool__(self):
        fail("a register's value is not known while tracing: use nl.if_else / nl.while_loop / nl.fori_loop, "
             "not Python if/while")

    def _compare(self, other, op):
        """A new register holding 1 where ``self op other`` holds (signed int32), else 0."""
        if not isinstance(other, VirtualRegister) and not _is_int(other):
            return NotImplemented   # ``x in (Ellipsis, ...)``: not a traced comparison
        location = user_location()
        out = register_alloc()
        if isinstance(other, VirtualRegister):
            _emit.emit("register_compare", (out, self, op), {"src2": other}, location)
        else:
            _emit.emit("register_compare", (out, self, op, _int32(other, op)), {}, location)
        return out

    def __lt__(self, other): return self._compare(other, "less")
    def __le__(self, other): return self._compare(other, "less_equal")
    def __gt__(self, other): return self._compare(other, "greater")
    def __ge__(self, other): return self._compare(other, "greater_equal")
    def __eq__(self, other): return self._compare(other, "equal")
    def __ne__(self, other): return self._compare(other, "not_equal")
    __hash__ = object.__hash__

    def _arith(self, other, opcode, what):
        location = user_location()
        out = register_alloc()
        if isinstance(other, VirtualRegister):
            _emit.emit(opcode, (out, self), {"src2": other}, location)
        else:
            _emit.emit(opcode, (out, self, _int32(other, what)), {}, location)
        return out

    def __add__(self, other): return self if _is_zero(other) else self._arith(other, "register_add", "+")
    __radd__ = __add__
    def __sub__(self, other): return self if _is_zero(other) else self._arith(other, "register_sub", "-")
    def __mul__(self, other): return self if _is_int(other) and int(other) == 1 else \
        self._arith(other, "register_mul", "*")
    __rmul__ = __mul__

    def __rsub__(self, other):
        location = user_location()
        out = register_alloc(_int32(other, "-"))
        _emit.emit("register_sub", (out, out), {"src2": self}, location)
        return out

    def __neg__(self):
        return 0 - self

    def __index__(self):
        fail("a register's value is not known while tracing: use nl.fori_loop / nl.dynamic_range, not range()")


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _is_zero(x):
    return _is_int(x) and int(x) == 0


def _int32(x, what):
    if not _is_int(x):
        fail(f"register arithmetic ({what}) takes an int or a register, got {type(x).__name__} {x!r}")
    x = int(x)
    if not -2 ** 31 <= x < 2 ** 31:
        fail(f"register arithmetic ({what}): {x} does not fit an int32 register")
    return x


def register_alloc(init=None, name=None, **_):
    """A fresh register, set to ``init`` (an int, or another register's value) when given (``name=`` names that
    register_move for the scheduling API)."""
    location = user_location()
    named = {"name": name} if name is not None else {}
    trace = _trace.current()
    index = trace.allocate_register()
    if index is None:
        fail("more than 64 registers live at once: the ISA has 64 per core [register-index]", location)
    reg = VirtualRegister(index, trace, tuple(trace.loops))
    if isinstance(init, VirtualRegister):
        _emit.emit("register_move", (reg,), {"src": init, **named}, location)
    elif init is not None:
        _emit.emit("register_move", (reg, _int32(init, "register_alloc")), named, location)
    return reg


def scalar_load(src, name=None, **_):
    """A one-element integer tensor's value in a fresh register (``nisa.scalar_load``)."""
    location = user_location()
    reg = register_alloc()
    _emit.emit("register_load", (reg, src), {"name": name} if name is not None else {}, location)
    return reg


def scalar_store(dst, src, name=None, **_):
    """``nisa.scalar_store``: a register's value into a one-element integer tensor."""
    _emit.emit("register_store", (dst, src), {"name": name} if name is not None else {}, user_location())


def register_move(dst, imm=None, src=None, **kwargs):
    """dst = imm (an int) or the value of register src."""
    location = user_location()
    if isinstance(imm, VirtualRegister):
        imm, src = None, imm
    if imm is None and src is None:
        fail("nisa.register_move: give imm (an int) or src (a register)", location)
    _emit.emit("register_move", (dst,), dict(kwargs, **({"src": src} if src is not None else {"imm": int(imm or 0)})),
               location)


def _make(name):
    def instruction(*args, **kwargs):
        _emit.emit(name, args, kwargs, user_location())
    instruction.__name__ = instruction.__qualname__ = name
    spec = _emit.specs()[name]
    ops = ", ".join(o["name"] + ("" if o["default"] is None and not o["optional"] else "=" +
                                 (o["default"] if o["default"] is not None else "None")) for o in spec["operands"])
    instruction.__doc__ = f"nisa.{name}({ops}): {spec['doc']}"
    return instruction


def __getattr__(name):
    specs = _emit.specs()
    if name in specs:
        fn = _make(name)
        globals()[name] = fn
        return fn
    if name in NKI_FUNCTIONS:
        def unavailable(*args, **kwargs):
            fail(f"nki.isa.{name} is not supported by trnsim yet (trnsim.nki.isa.missing() lists what is not)")
        return unavailable
    raise AttributeError(f"module 'nki.isa' has no attribute {name!r}")
