"""One ``nki.isa`` call -> one ``.tasm`` instruction, driven by the ISA table itself
(``trnsim._C.instruction_specs()``, i.e. ``isa/instructions.def``): operand names, order, kinds and
defaults are read from there, so an instruction added to the ISA is callable from NKI at once."""
import numpy as np
from math import prod as _prod

from . import _core, _cse, _schedule_api, _trace
from ._core import View, fail, merge_dims, user_location

_SPECS = None


def specs():
    global _SPECS
    if _SPECS is None:
        from .. import _C
        _SPECS = {s["name"]: s for s in _C.instruction_specs()}
    return _SPECS


# NKI passes operators as functions (nl.add, np.add, nl.exp, ...): their ISA names.
_NUMPY_OPS = {
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.maximum: "maximum", np.minimum: "minimum", np.power: "power",
    np.equal: "equal", np.not_equal: "not_equal", np.greater: "greater", np.greater_equal: "greater_equal",
    np.less: "less", np.less_equal: "less_equal", np.logical_and: "logical_and", np.logical_or: "logical_or",
    np.logical_xor: "logical_xor", np.bitwise_and: "bitwise_and", np.bitwise_or: "bitwise_or",
    np.bitwise_xor: "bitwise_xor", np.invert: "invert", np.left_shift: "left_shift", np.right_shift: "right_shift",
    np.abs: "abs", np.square: "square", np.mod: "mod", np.exp: "exp", np.log: "log", np.tanh: "tanh",
    np.sin: "sin", np.cos: "cos", np.arctan: "arctan", np.sqrt: "sqrt", np.sign: "sign", np.reciprocal: "reciprocal",
    # Reductions name their NumPy function (``nisa.tensor_reduce(np.max, ...)`` in the NKI samples).
    np.max: "maximum", np.amax: "maximum", np.min: "minimum", np.amin: "minimum", np.sum: "add",
}


def op_name(op, what):
    if op is None:
        return None
    name = getattr(op, "_isa_name", None) or _NUMPY_OPS.get(op) or (op if isinstance(op, str) else None)
    if name is None:
        fail(f"{what}: {op!r} is not an NKI operator")
    return name


def ap_text(v):
    cached = v.text
    if cached is None or cached[0] is not v.st.name:   # a renamed tile (Trace.rename) prints its new name
        cached = v.text = (v.st.name, _ap_text(v))
    return cached[1]


def _ap_text(v):
    st = v.st
    dims = v.dims
    if st.space == "hbm":
        # The outer dim stays the transfer's "partition" dim (as the on-chip side has it); the
        # rest merge where contiguous. The cost model reads runs, not dims, so this is only layout.
        if isinstance(v, _core.TableView):
            # An indirect DMA's table: the rows pair stays first, however many rows.
            dims = dims[:1] + ([d for d in dims[1:] if d[1] != 1] or [[1, 1]])
        else:
            dims = [d for d in dims if d[1] != 1] or [[1, 1]]
        if len(dims) > 2:
            dims = dims[:1] + merge_dims(dims[1:])
        if len(dims) > 5:
            fail(f"an HBM access of {len(dims)} non-contiguous dims: the DMA takes at most 5")
        inner = "".join([f", [{s}, {n}]" for s, n in dims[1:]])
        as_dtype = f"dtype={st.dtype.name}, " if st.base is not None and st.dtype is not st.base.dtype else ""
        return f"{st.name}{{{_offset_text(v.offset)}{as_dtype}ap=[[{dims[0][0]}, {dims[0][1]}]{inner}]}}"
    pdim = v.pdim
    if len(dims) == 2 and pdim == 0:
        s, n = dims[1]
        inner = f", [{s}, {n}]" if n != 1 else ""
    else:
        free = [d for i, d in enumerate(dims) if i != pdim and d[1] != 1]
        if len(free) > 1 and not isinstance(v, _core.ExactView):
            free = merge_dims(free)
        if len(free) > 4:
            fail(f"an access of {len(free)} non-contiguous free dims: engines take at most 4")
        inner = "".join([f", [{s}, {n}]" for s, n in free])
    return f"{st.name}{{{_offset_text(v.offset)}ap=[[{v.pstart}, {dims[pdim][1]}]{inner}]}}"


def _offset_text(offset):
    """'offset=O, ' or, addressed by a register, 'offset=O, scalar_offset=rN, '."""
    if isinstance(offset, _core.DynOffset):
        return f"offset={offset.static}, scalar_offset=r{offset.reg._register}, "
    return f"offset={offset}, "


def as_view(value, what):
    """Tiles, views, lazy matmul results (materialised here) -> View."""
    if isinstance(value, View):
        return value
    materialise = getattr(value, "_trnsim_view", None)
    if materialise is not None:
        return materialise()
    fail(f"{what}: expected a tensor, got {type(value).__name__} {value!r}")


def _number(value, what):
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    fail(f"{what}: expected a number, got {type(value).__name__} {value!r}")


_ENGINES = {"tensor", "vector", "scalar", "gpsimd", "sync", "dma", "act", "pe", "pool", "unknown"}
_ENGINE_ALIAS = {"act": "scalar", "pe": "tensor", "pool": "gpsimd"}


# The values NKI 0.7's enums carry (nki.isa's Enum classes), for kernels that pass the number (dge_mode=3, as AWS's
# kernel library does for "none"): operand name -> {value: word}.
NKI_ENUM_VALUES = {
    "dge_mode": {0: "unknown", 1: "swdge", 2: "hwdge", 3: "none"},
    "dma_engine": {1: "dma", 2: "gpsimd_dma"},
    "reduce_cmd": {0: "idle", 1: "reset", 2: "reduce", 3: "reset_reduce", 4: "load_reduce"},
    "engine": {0: "unknown", 1: "tensor", 2: "scalar", 3: "gpsimd", 4: "dma", 5: "vector", 6: "sync"},
}


def enum_number_word(operand, value):
    """The word of an NKI enum given as its number (an int, not bool), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return NKI_ENUM_VALUES.get(operand, {}).get(int(value))


def engine_word(engine):
    if engine is None:
        return None
    engine = enum_number_word("engine", engine) or engine
    name = getattr(engine, "_isa_name", None) or (engine if isinstance(engine, str) else None)
    name = _ENGINE_ALIAS.get(name, name)
    if name in (None, "unknown"):
        return None
    if name not in _ENGINES:
        fail(f"engine={engine!r} is not an NKI engine")
    return name


def emit(name, args, kwargs, location=None):
    """Emit instruction ``name`` with NKI-style arguments (dst first). Returns the instruction's index."""
    location = location or user_location()
    trace = _trace.current()
    if trace.pending:
        trace.flush_pending()
    spec = specs().get(name)
    if spec is None:
        fail(f"nki.isa.{name} is not an instruction of trnsim's ISA yet", location)
    plan = spec.get("_plan")
    if plan is None:
        # (name, kind, required, enum words) per operand, made once per instruction.
        plan = spec["_plan"] = tuple((o["name"], o["kind"], not o["optional"] and o["default"] is None,
                                      tuple(o["values"])) for o in spec["operands"])
        spec["_names"] = {o[0]: i for i, o in enumerate(plan)}
    names = spec["_names"]
    engine = mask = label = None
    if kwargs:
        kwargs = dict(kwargs)
        engine = engine_word(kwargs.pop("engine", None))
        label = kwargs.pop("name", None)   # NKI's instruction name (the scheduling API's with_schedule)
        mask = kwargs.pop("mask", None)
    if len(args) > len(plan):
        fail(f"nisa.{name} takes at most {len(plan)} positional arguments, got {len(args)}", location)
    values = list(args) + [None] * (len(plan) - len(args))
    given = [True] * len(args) + [False] * (len(plan) - len(args))
    for k, a in kwargs.items():
        i = names.get(k)
        if i is None:
            fail(f"nisa.{name} has no argument {k!r} (it takes: {', '.join(o[0] for o in plan)})", location)
        if given[i]:
            fail(f"nisa.{name}: argument {k!r} given twice", location)
        values[i], given[i] = a, True
    trace = _trace.current()
    if isinstance(mask, (bool, np.bool_)):
        if mask:
            mask = None
        else:
            # mask=False (a Python condition): no instruction. A fresh result keeps the mask, so that
            # assigning it is skipped too.
            for (oname, kind, _, _), v in zip(plan, values):
                if kind in ("out", "inout") and v is not None:
                    st = as_view(v, f"nisa.{name} {oname}").st
                    if not st.written:
                        st.mask = False
            return -1
    if trace.__dict__.get("_cse"):
        _cse.unalias_writes(trace, _writes_of(plan, values, name, mask),
                            lambda dst, src: emit("tensor_copy", (dst.full_view(), src.full_view()), {}, location))
    if not trace.loops:
        _rename_overwritten(trace, plan, values, names, name, mask)
    parts = []
    written = []
    touched = []
    dynamic = False
    for (oname, kind, required, words), v in zip(plan, values):
        if v is None:
            if required:
                fail(f"nisa.{name}: missing argument {oname!r}", location)
            continue
        if kind == "in" or kind == "out" or kind == "inout":
            view = v if type(v) is View else as_view(v, f"nisa.{name} {oname}")
            if mask is not None or type(view) is _core._UncheckedView:   # an unmasked overreach is an error here
                view = _core.apply_mask(view, mask)
                if view is None:
                    return -1   # the mask keeps nothing
            touched.append(view.st)
            dynamic = dynamic or isinstance(view.offset, _core.DynOffset)
            if kind != "in":
                written.append(view)
            if kind != "out" or (name == "nc_matmul" and oname == "dst" and _accumulates(plan, values)):
                _mark_read(view.st)
            if kind != "in" and (isinstance(view.offset, _core.DynOffset) or mask is not None):
                (view.st.base or view.st).carried = True
            if kind != "out" and view.st.pending_zero:
                _flush_zero(view.st, trace, location)
            text = ap_text(view)
        elif kind == "in|f32":
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
                text = _number(v, f"nisa.{name} {oname}")
            else:
                view = as_view(v, f"nisa.{name} {oname}")
                if mask is not None:
                    view = _core.apply_mask(view, mask)
                    if view is None:
                        return -1
                _flush_zero(view.st, trace, location)
                touched.append(view.st)
                _mark_read(view.st)
                text = ap_text(view)
        elif kind == "f32" or kind == "i64":
            text = _number(v, f"nisa.{name} {oname}")
        elif kind == "bool":
            if not isinstance(v, (bool, np.bool_, int, np.integer)):
                fail(f"nisa.{name} {oname}: expected True / False, got {type(v).__name__} {v!r}", location)
            text = "true" if v else "false"
        elif kind == "alu" or kind == "act":
            text = op_name(v, f"nisa.{name} {oname}")
        elif kind == "enum":
            if isinstance(v, bool):
                text = "true" if v else "false"
            else:
                text = getattr(v, "_isa_name", None) or enum_number_word(oname, v) or _NUMPY_OPS.get(v) or str(v)
            if text not in words:
                fail(f"nisa.{name} {oname}={v!r}: one of {', '.join(words)}", location)
        elif kind == "reg":
            index = getattr(v, "_register", None)
            if index is None:
                fail(f"nisa.{name} {oname}: expected a register (nisa.register_alloc()), got {v!r}", location)
            text = f"r{index}"
        elif kind == "ints":
            text = "[" + ", ".join(str(_integer(x, name, oname, location)) for x in v) + "]"
        elif kind == "pairs":
            text = "[" + ", ".join(f"[{_integer(a, name, oname, location)}, {_integer(b, name, oname, location)}]"
                                   for a, b in v) + "]"
        else:
            fail(f"nisa.{name}: operand kind {kind} not handled", location)
        parts.append(f"{oname}={text}")
    mode = values[names["dge_mode"]] if name == "dma_copy" else None
    mode = getattr(mode, "_isa_name", None) or enum_number_word("dge_mode", mode) or mode
    if dynamic and name == "dma_copy" and mode in (None, "unknown"):
        # A register-addressed DMA needs descriptors made at run time: the hardware DGE where the chip has it
        # (v3+), else the GpSimd's software DGE (what the NKI compiler picks; the ISA wants the mode named).
        parts = [p for p in parts if not p.startswith("dge_mode=")]
        parts.append("dge_mode=" + ("hwdge" if trace.target.hardware_dge else "swdge"))
    if engine is not None:
        if engine not in [e for e, _ in spec["engines"]]:
            fail(f"nisa.{name} cannot run on the {engine} engine (engines: "
                 f"{', '.join(e for e, _ in spec['engines'])}) [engine]", location)
        parts.append(f"engine={engine}")
    for view in written:
        if view.st.pending_zero and name != "nc_matmul":
            _flush_zero(view.st, trace, location)
    if name == "nc_transpose" and engine in (None, "tensor"):
        data = values[names["data"]]
        if isinstance(data, View):
            p = data.dims[data.pdim][1]
            trace.transpose_flops += 2 * p * p * (_prod(data.shape) // p)
    hit, cse_key = _cse.find(trace, name, parts, written, touched, mask, dynamic, label)
    if hit is not None:
        fill = None
        if name == "memset":
            value = values[names["value"]]
            fill = lambda own: emit("memset", (own.full_view(), value), {}, location)  # noqa: E731
        _cse.alias(trace, written[0].st, hit, fill)   # the same values are already in SBUF: not computed again
        return hit.producer
    index = trace.emit(f"{name} " + ", ".join(parts), location)
    _cse.wrote(trace, [view.st for view in written])
    if label is not None:
        _schedule_api.record_name(trace, label, index, location)
    for st in touched:
        if st.space != "hbm":
            trace.touch(st, index)
    for view in written:
        if view.st.base is not None and view.st.space == "hbm":
            view.st.base.written = True   # a write through view(dtype) writes the tensor
        view.st.written = True
        view.st.producer = index if view.is_whole() else -1
        view.st.mask = mask
    _cse.remember(trace, cse_key, written[0].st if written else None)
    return index


def _writes_of(plan, values, name, mask):
    """(view, written whole without being read) for each operand the instruction writes."""
    out = []
    for (oname, kind, _, _), v in zip(plan, values):
        if v is not None and kind in ("out", "inout"):
            view = as_view(v, f"nisa.{name} {oname}")
            out.append((view, kind == "out" and mask is None and view.is_whole()))
    return out


# Instructions whose dst is every element it names, computed from the inputs alone (not a predicated copy, a
# read-add-write, a partial reduce into an accumulator, or a DMA that may skip).
_WHOLE_WRITES = frozenset({"dma_copy", "dma_transpose", "tensor_copy", "activation", "tensor_tensor", "tensor_scalar",
                           "memset", "iota", "tensor_reduce"})


def _rename_overwritten(trace, plan, values, names, name, mask):
    """By default neuronx-cc allocates the traced kernel (nki-compile-config: "neuronx-cc makes both decisions after
    NKI traces the kernel"), so a write of a whole SBUF tile that reads none of it starts a new value with a
    placement of its own: a kernel reusing one tile for a loop's loads does not wait for the previous load's
    readers. Such a write goes to a fresh tile here (Trace.rename); earlier instructions keep the old one."""
    if name not in _WHOLE_WRITES:
        return
    for extra in ("dst_rmw_op", "oob_mode", "indices"):
        i = names.get(extra)
        if i is not None and values[i] is not None:
            return   # dst += src, or a DMA that may skip (out of bounds): the old values may remain
    target = slot = None
    for i, ((oname, kind, _, _), v) in enumerate(zip(plan, values)):
        if v is None or kind not in ("in", "out", "inout", "in|f32"):
            continue
        if type(v) is not View:
            if kind == "in|f32" and isinstance(v, (int, float, np.integer, np.floating)):
                continue
            return   # a lazy result or wrapper: what it reads is not known before it is materialised
        if not isinstance(v.offset, int):
            return   # addressed by a register at run time
        if kind == "out":
            if target is not None:
                return   # two outputs: leave both
            target, slot = v, i
    if target is None:
        return
    st = target.st
    if (st.base is not None or st.space != "sbuf" or st.address is not None or st.first < 0 or st.loops
            or st in trace.aliased or st.blocks is not None):
        return
    written = target if mask is None else _core.apply_mask(target, mask)
    if written is None or not _covers_all(written):
        return   # a part of it: the rest keeps its values
    for i, v in enumerate(values):
        if i != slot and type(v) is View and (v.st.base or v.st) is st:
            return   # it reads (or also writes) the tile
    trace.rename(st)


def _covers_all(view):
    """Whether ``view`` is every element of its tile once (size-1 dims, such as an indexed block dim, aside)."""
    st = view.st
    if type(view.offset) is not int or view.offset != 0 or view.pstart != 0 or view.dims[view.pdim][1] != st.partitions:
        return False
    free = merge_dims([d for i, d in enumerate(view.dims) if i != view.pdim and d[1] != 1])
    full = merge_dims([d for i, d in enumerate(st.full_dims()) if i != st.pdim and d[1] != 1])
    return free == full


def _mark_read(st):
    """A read of a tile nothing has written yet: in a compiled loop its value comes from the previous run."""
    root = st.base or st
    if not (root.written or st.written):
        root.carried = True


def _accumulates(plan, values):
    """Whether an nc_matmul adds to its dst (accumulate true, or auto: the ISA decides by PSUM state)."""
    for (oname, _, _, _), v in zip(plan, values):
        if oname == "accumulate":
            return v is None or getattr(v, "_isa_name", v) not in (False, "false")
    return True


def _integer(x, name, oname, location):
    """An integer operand element; 2.5 is an error, not 2."""
    if isinstance(x, (bool, np.bool_)) or int(x) != x:
        fail(f"nisa.{name} {oname}: {x!r} is not an integer", location)
    return int(x)


def _flush_zero(st, trace, location):
    """A PSUM tile from nl.zeros that something other than a matmul touches is zeroed first."""
    if st.pending_zero:
        st.pending_zero = False
        trace.touch(st, trace.emit(f"memset dst={ap_text(st.full_view())}, value=0", location))
        _cse.wrote(trace, [st])
