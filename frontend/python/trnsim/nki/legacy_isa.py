"""``neuronxcc.nki.isa`` (NKI beta 1): the instructions return their result instead of taking ``dst``.
Each call allocates the result tile (shape from the operands, ``dtype=`` or the input's dtype,
SBUF unless the instruction writes PSUM) and emits the same instruction as ``nki.isa``."""
import numpy as np
from math import prod as _prod

from . import _core, _emit, _trace, language
from ._core import IndexExpr, fail, user_location
from .isa import (dge_mode, engine, get_nc_version, gpsimd_engine, matmul_perf_mode, nc_version,  # noqa: F401
                  scalar_engine, tensor_engine, unknown_engine, vector_engine)


def _first_tensor(args, kwargs, names):
    for n, a in list(zip(names, args)) + [(k, kwargs.get(k)) for k in names]:
        if a is not None and (isinstance(a, _core.View) or hasattr(a, "_trnsim_view")):
            return _emit.as_view(a, n)
    fail("no tensor operand")


def _shape_same(src):
    return language._tile_shape(src)


def _shape_reduce(src, kwargs, args):
    axis = kwargs.get("axis", args[2] if len(args) > 2 else None)
    axes = axis if isinstance(axis, (list, tuple)) else (axis,)
    axes = {int(a) % src.ndim for a in axes}
    keep = kwargs.get("keepdims", False)
    shape = [1 if d in axes else s for d, s in enumerate(src.shape)] if keep else \
        [s for d, s in enumerate(src.shape) if d not in axes]
    return tuple(shape) if len(shape) > 1 else (src.shape[src.pdim], 1)


_OUT = {
    # name: (input names in order after dst, shape rule, result dtype, space)
    "activation": (("op", "data"), "same", None, "sbuf"),
    "activation_reduce": (("op", "data"), "same", None, "sbuf"),
    "tensor_tensor": (("data1", "data2"), "same", None, "sbuf"),
    "tensor_scalar": (("data",), "same", None, "sbuf"),
    "tensor_scalar_reduce": (("data",), "same", None, "sbuf"),
    "scalar_tensor_tensor": (("data",), "same", None, "sbuf"),
    "tensor_copy": (("src",), "same", None, "sbuf"),
    "tensor_reduce": (("op", "data"), "reduce", None, "sbuf"),
    "reciprocal": (("data",), "same", None, "sbuf"),
    "bn_stats": (("data",), (6,), "float32", "sbuf"),
    "bn_aggr": (("data",), (2,), "float32", "sbuf"),
    "max8": (("src",), (8,), None, "sbuf"),
    "nc_find_index8": (("data", "vals"), (8,), "uint32", "sbuf"),
    "tensor_tensor_scan": (("data0", "data1"), "same", None, "sbuf"),
    "select_reduce": (("predicate", "on_true"), "same", None, "sbuf"),
    "range_select": (("on_true_tile",), "same", None, "sbuf"),
    "tensor_copy_predicated": (("src", "predicate"), "same", None, "sbuf"),
    "tensor_partition_reduce": (("op", "data"), "partitions", None, "sbuf"),
}


def _make(name):
    inputs, rule, out_dtype, space = _OUT[name]

    def instruction(*args, dtype=None, buffer=None, **kwargs):
        location = user_location()
        src = _first_tensor(args, kwargs, [n for n in inputs if n not in ("op",)] + list(inputs))
        if rule == "same":
            shape = _shape_same(src)
        elif rule == "reduce":
            shape = _shape_reduce(src, kwargs, args)
        elif rule == "partitions":   # reduced over its partitions: one partition, the free dims kept
            shape = (1,) + tuple(n for d, n in enumerate(src.shape) if d != src.pdim)
        else:
            shape = (src.shape[src.pdim],) + rule
        d = dtype or out_dtype or language._out_dtype(None, src)
        out = _trace.current().tile(shape, _core.as_dtype(d), buffer.space if buffer is not None else space, 0,
                                    location).full_view()
        if name == "tensor_reduce":
            # axis as an int or a list, renumbered to the emitted dims (nki.isa.tensor_reduce).
            from . import isa
            isa.tensor_reduce(out, *args, **kwargs)
            return out
        _emit.emit(name, (out,) + args, kwargs, location)
        return out
    instruction.__name__ = name
    instruction.__doc__ = f"beta-1 nisa.{name}(...) -> tile (see nki.isa.{name})"
    return instruction


for _n in _OUT:
    globals()[_n] = _make(_n)


def nc_matmul(stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, mask=None,
              is_transpose=False, tile_position=(), tile_size=(), perf_mode=None, **_):
    """stationary[K, M].T @ moving[K, N] -> a PSUM result; ``psum[...] += nisa.nc_matmul(...)`` accumulates."""
    location = user_location()
    s, m = _emit.as_view(stationary, "stationary"), _emit.as_view(moving, "moving")
    if isinstance(mask, (bool, np.bool_)) and not mask:
        # A false Python condition: no matmul; where the result is assigned nothing is written either.
        return language.LazyMatmul(s, m, {"is_transpose": is_transpose, "mask": False}, location)
    if mask is not None:
        s, m = _core.apply_mask(s, mask), _core.apply_mask(m, mask)
        if s is None or m is None:
            fail("nisa.nc_matmul: the mask keeps nothing of an operand", location)
    # Beta 1 lets an operand be a PSUM result (a Tensor-engine transpose's, as published flash-attention backward
    # kernels pass it): the Tensor engine reads SBUF, so the compiler copies it there first (Vector).
    s, m = _staged_in_sbuf(s, location), _staged_in_sbuf(m, location)
    kwargs = {"is_stationary_onezero": is_stationary_onezero, "is_moving_onezero": is_moving_onezero,
              "is_transpose": is_transpose}
    if tile_position:
        kwargs["tile_position"], kwargs["tile_size"] = list(tile_position), list(tile_size)
    if perf_mode is not None:
        kwargs["perf_mode"] = perf_mode
    return language.LazyMatmul(s, m, kwargs, location)


def _staged_in_sbuf(view, location, mask=None):
    """``view`` itself when it is not in PSUM, else an SBUF copy of it (tensor_copy on the Vector engine)."""
    if view.st.space != "psum":
        return view
    staged = language._result_tile(language._tile_shape(view), view.dtype, location)
    _emit.emit("tensor_copy", (staged, view), {"mask": mask}, location)
    return staged


def nc_transpose(data, mask=None, dtype=None, engine=None, **_):
    location = user_location()
    return language.transpose(data, dtype=dtype, mask=mask, engine=engine, location=location)


def memset(shape, value, dtype, mask=None, engine=None, buffer=None, **_):
    location = user_location()
    t = _trace.current().tile(language._shape(shape)[0], _core.as_dtype(dtype),
                              buffer.space if buffer is not None else "sbuf", 0, location).full_view()
    _emit.emit("memset", (t, float(value)), {"mask": mask, "engine": engine}, location)
    return t


def iota(expr, dtype, mask=None, **_):
    """Beta 1: the values of an affine index expression (``nl.arange(128)[:, None] * 4 + ...``) as a
    tile, by GpSimd's iota (offset, partition multiplier, one (step, count) per free axis)."""
    location = user_location()
    if not isinstance(expr, IndexExpr):
        fail("nisa.iota takes an nl.arange / nl.mgrid expression", location)
    vars_ = sorted(expr.terms, key=lambda v: v.axis)
    grids = {v.grid for v in vars_}
    if vars_ and len(grids) == 1 and None not in grids:
        # Vars of one nl.mgrid: the tile has the whole grid's shape (mgrid is dense, as NumPy's), constant along
        # the axes the expression leaves out (nki-samples' select_and_scatter: ``nisa.iota(3 * window.y +
        # window.z)`` over ``mgrid[0:p, 0:w, 0:3, 0:3]`` is a [p, w, 3, 3] tile).
        grid = grids.pop()
        coeff = {v.axis: c for v, c in expr.terms.items()}
        shape = grid
        pattern = [[coeff.get(axis, 0), size] for axis, size in enumerate(grid) if axis > 0] or [[0, 1]]
        multiplier = coeff.get(0, 0)
    else:
        part = next((v for v in vars_ if v.axis == 0), None)
        free = [v for v in vars_ if v is not part]
        shape = (part.size if part else 1,) + tuple(v.size for v in free)
        pattern = [[expr.terms[v], v.size] for v in free] or [[0, 1]]
        multiplier = expr.terms[part] if part else 0
    if len(shape) == 1:
        shape += (1,)   # a partition index alone: one element per partition, [P, 1]
    t = _trace.current().tile(shape, _core.as_dtype(dtype), "sbuf", 0, location).full_view()
    _emit.emit("iota", (t, pattern), {"offset": expr.const, "channel_multiplier": multiplier, "mask": mask}, location)
    return t


_CMP = {"<": "less", "<=": "less_equal", ">": "greater", ">=": "greater_equal"}


def affine_select(pred, on_true_tile, on_false_value, mask=None, dtype=None, **_):
    """Beta 1: ``pred`` an affine comparison of index expressions (``i_p >= i_f``): on_true_tile
    where it holds, else on_false_value (GpSimd's affine_select: offset + multiplier * p + sum of
    step * i, compared with 0)."""
    location = user_location()
    if not isinstance(pred, _core.Mask) or pred.affine is None:
        fail("nisa.affine_select takes a comparison of nl.arange / nl.mgrid expressions as pred", location)
    expr, op = pred.affine
    src = _emit.as_view(on_true_tile, "on_true_tile")
    # GpSimd does not reach PSUM: a tile there (a matmul result) is copied to SBUF first (Vector).
    src = _staged_in_sbuf(src, location, mask)
    shape = language._tile_shape(src)
    multiplier, pattern = 0, []
    free_axes = {}
    for var, coeff in expr.terms.items():
        if var.axis == 0:
            multiplier += coeff
        else:
            free_axes[var.axis] = free_axes.get(var.axis, 0) + coeff
    for axis in range(1, len(shape)):
        pattern.append([free_axes.pop(axis, 0), shape[axis]])
    if free_axes:
        fail(f"nisa.affine_select: the predicate uses axes {sorted(free_axes)} the tile {list(shape)} lacks", location)
    out = _trace.current().tile(shape, _core.as_dtype(dtype) if dtype else src.dtype, "sbuf", 0,
                                location).full_view()
    _emit.emit("affine_select", (out, pattern or [[0, 1]], multiplier, src, float(on_false_value), _CMP[op]),
               {"offset": expr.const, "mask": mask}, location)
    return out


def dma_transpose(src, axes=None, mask=None, dtype=None, **_):
    """Beta 1: src [A, B] (HBM or SBUF, a 2-byte dtype) -> an SBUF tile [B, A], transposed by DMA
    (trn2+; the samples gate it on ``nisa.get_nc_version() >= nisa.nc_version.gen3``)."""
    location = user_location()
    sv = _emit.as_view(src, "nisa.dma_transpose src")
    if mask is not None:
        sv = _core.apply_mask(sv, mask)
        if sv is None:
            fail("nisa.dma_transpose: the mask keeps nothing", location)
    shape = language._tile_shape(sv) if sv.pdim is not None else sv.shape
    if len(shape) != 2 or (axes is not None and tuple(axes) != (1, 0)):
        fail(f"nisa.dma_transpose of a {list(shape)} tensor: 2-d, axes (1, 0)", location)
    out = _trace.current().tile((shape[1], shape[0]), sv.dtype, "sbuf", 0, location).full_view()
    _emit.emit("dma_transpose", (out, sv), {}, location)
    if dtype is not None and _core.as_dtype(dtype) is not sv.dtype:
        cast = language._result_tile(out.shape, dtype, location)
        _emit.emit("tensor_copy", (cast, out), {}, location)
        return cast
    return out


def dma_copy(dst=None, src=None, **kwargs):
    location = user_location()
    _emit.emit("dma_copy", (dst, src), kwargs, location)


def __getattr__(name):
    from . import isa
    fn = getattr(isa, name)
    return fn
