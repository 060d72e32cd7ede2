"""The NKI tracer's core: tensors and their access patterns, on-chip allocation, and the program
being traced (``.tasm`` lines, each remembering the kernel's ``file.py:line`` it came from).

A kernel runs as ordinary Python once per call (shapes and dtypes fixed by its arguments); every
``nki.isa`` / ``nki.language`` call appends instructions here. Values and time come afterwards from
the same core ``trnsim run`` uses (``trnsim.run_program``).

On-chip memory is allocated as the NKI compiler does it, after tracing, from liveness: a tile lives
from the first to the last instruction that touches it (not while Python holds it), and takes a
region of SBUF (a byte range on all partitions, 256-byte aligned) or of PSUM (whole 2 KiB banks).
A region freed longest ago is reused first, and a tile avoids the bytes of the previous tile made at
the same source line, so a tile allocated in a loop gets another buffer on the next iteration (the
next load does not wait for this iteration's reader): the multi-buffering the compiler gives
loop-local tiles. A kernel that fits only with one buffer per line gets that placement. Tiles whose
live ranges do not fit even so are a
KernelError at the line that created the tile, listing what else is live.
"""
import heapq
import os
import sys
import weakref

import numpy as np
from math import prod as _prod

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
SBUF_ALIGN_BYTES = 256    # assumed: the allocation granule of the NKI compiler's SBUF allocator


class KernelError(Exception):
    """An NKI kernel that cannot run: names the kernel's ``file.py:line``, what and the rule."""


# ---------------------------------------------------------------------------------------------
# dtypes

class DType:
    """An NKI dtype (``nl.bfloat16`` ...): its trnsim name, size and NumPy type where one exists."""
    __slots__ = ("nki_name", "name", "size_bytes", "numpy", "is_float")

    def __init__(self, nki_name, name, size_bytes, numpy_dtype, is_float):
        self.nki_name, self.name, self.size_bytes = nki_name, name, size_bytes
        self.numpy, self.is_float = numpy_dtype, is_float

    def __repr__(self):
        return f"nl.{self.nki_name}"

    def __str__(self):
        # NumPy's name, as NKI's dtypes print (kernels compare dtypes by str(): "float32", "bfloat16").
        return self.nki_name

    @property
    def dtype(self):
        """The NumPy dtype, so that np.zeros(..., dtype=nl.bfloat16) and x.astype(nl.float32) work."""
        if self.numpy is None:
            raise TypeError(f"{self.nki_name} has no host type")
        return self.numpy

    def __reduce__(self):
        # One object per dtype: a copy or an unpickled dtype is the same object (dataclasses.asdict deep-copies).
        return (as_dtype, (self.nki_name,))

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __eq__(self, other):
        try:
            return as_dtype(other) is self
        except (TypeError, KeyError):
            return False

    def __hash__(self):
        return hash(self.name)

    @property
    def min(self):
        """The least finite value (``nl.fp32.min``, the samples' stand-in for -inf)."""
        return self._info().min.item()

    @property
    def max(self):
        return self._info().max.item()

    def _info(self):
        import ml_dtypes
        if self.numpy is None:
            raise TypeError(f"{self.nki_name} has no host type")
        return ml_dtypes.finfo(self.numpy) if self.is_float else ml_dtypes.iinfo(self.numpy)


def _make_dtypes():
    import ml_dtypes
    rows = [
        ("float32", "fp32", 4, np.float32, True), ("tfloat32", "tf32", 4, np.float32, True),
        ("bfloat16", "bf16", 2, ml_dtypes.bfloat16, True), ("float16", "fp16", 2, np.float16, True),
        ("float8_e4m3", "fp8_e4m3", 1, ml_dtypes.float8_e4m3, True),
        ("float8_e4m3fn", "fp8_e4m3fn", 1, ml_dtypes.float8_e4m3fn, True),
        ("float8_e5m2", "fp8_e5m2", 1, ml_dtypes.float8_e5m2, True),
        ("float8_e3m4", "fp8_e3m4", 1, ml_dtypes.float8_e3m4, True),
        ("float8_e8m0fnu", "fp8_e8m0", 1, None, True),
        # MX data, four values packed per element (trn3's quantize_mx / nc_matmul_mx): no host type.
        ("float8_e4m3fn_x4", "mxfp8_e4m3", 4, None, True), ("float8_e5m2_x4", "mxfp8_e5m2", 4, None, True),
        ("float4_e2m1fn_x4", "mxfp4_e2m1", 2, None, True),
        ("int32", "int32", 4, np.int32, False), ("int16", "int16", 2, np.int16, False),
        ("int8", "int8", 1, np.int8, False), ("uint32", "uint32", 4, np.uint32, False),
        ("uint16", "uint16", 2, np.uint16, False), ("uint8", "uint8", 1, np.uint8, False),
    ]
    table = {}
    for nki_name, name, size, np_type, is_float in rows:
        table[nki_name] = DType(nki_name, name, size, np.dtype(np_type) if np_type is not None else None, is_float)
    # NKI's bool_ is "Boolean (True or False) stored as a byte": uint8 on the device, its own dtype here so that a
    # result declared bool reads back as NumPy bool and arithmetic on it keeps NumPy's bool logic (language.binary).
    table["bool_"] = DType("bool_", "uint8", 1, np.dtype(np.bool_), False)
    return table


DTYPES = _make_dtypes()
_BY_NUMPY = {}
for _d in DTYPES.values():
    if _d.numpy is not None and _d.numpy not in _BY_NUMPY and _d.nki_name != "tfloat32":
        _BY_NUMPY[_d.numpy] = _d
_BY_NUMPY[np.dtype(np.float64)] = DTYPES["float32"]   # NKI's host arrays of float64 become fp32 tiles
_BY_NUMPY[np.dtype(np.int64)] = DTYPES["int32"]


def as_dtype(value):
    """``nl.bfloat16``, ``np.float32``, ``"bfloat16"``, ``torch.bfloat16`` -> DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        for d in DTYPES.values():
            if value in (d.nki_name, d.name):
                return d
        raise KeyError(f"unknown dtype {value!r}")
    mod = type(value).__module__
    if mod.startswith("torch"):
        name = str(value).replace("torch.", "")
        name = {"float": "float32", "half": "float16", "int": "int32", "bool": "bool_", "long": "int32",
                "float64": "float32", "int64": "int32", "double": "float32"}.get(name, name)
        return as_dtype(name)
    try:
        return _BY_NUMPY[np.dtype(value)]
    except (TypeError, KeyError):
        raise TypeError(f"not a dtype NKI knows: {value!r}") from None


# ---------------------------------------------------------------------------------------------
# source locations

def user_location():
    """(file, line) of the innermost frame outside trnsim.nki: the kernel's line that made this call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


def where(location=None):
    file, line = location or user_location()
    return f"{os.path.basename(file)}:{line}"


def env_int(name, default, minimum=1):
    """An integer bound or setting from environment variable ``name`` (``default`` when unset); anything else than an
    integer of at least ``minimum`` is an error naming the variable."""
    text = os.environ.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise KernelError(f"{name}={text!r} is not an integer of at least {minimum}")
    return value


def fail(message, location=None):
    raise KernelError(f"{where(location)}: {message}")


# ---------------------------------------------------------------------------------------------
# index expressions (the beta-1 API's nl.arange / nl.mgrid) and masks

class IndexVar:
    """One ``nl.arange(n)``: ``size`` values 0..n-1 on result axis ``axis`` of an index tile. ``grid``: for an
    ``nl.mgrid`` var, the sizes of its whole grid (mgrid's arrays are dense, as NumPy's: each has the grid's
    shape, so an expression of some of its vars still spans the others); None for ``nl.arange``."""
    __slots__ = ("size", "axis", "ndim", "grid")

    def __init__(self, size, axis, ndim, grid=None):
        self.size, self.axis, self.ndim, self.grid = size, axis, ndim, grid


class IndexExpr:
    """An affine index: ``const + sum(coeff * var)``. ``nl.arange(128)[:, None]`` is one var on axis 0."""
    __slots__ = ("const", "terms")

    def __init__(self, const=0, terms=None):
        self.const = const
        self.terms = terms or {}   # IndexVar -> int coefficient

    def _combine(self, other, sign):
        if isinstance(other, IndexExpr):
            terms = dict(self.terms)
            for v, c in other.terms.items():
                terms[v] = terms.get(v, 0) + sign * c
            return IndexExpr(self.const + sign * other.const, {v: c for v, c in terms.items() if c})
        if isinstance(other, (int, np.integer)):
            return IndexExpr(self.const + sign * int(other), dict(self.terms))
        return NotImplemented

    def __add__(self, other):
        return self._combine(other, 1)

    __radd__ = __add__

    def __sub__(self, other):
        return self._combine(other, -1)

    def __rsub__(self, other):
        return (-self)._combine(other, 1)

    def __neg__(self):
        return IndexExpr(-self.const, {v: -c for v, c in self.terms.items()})

    def __mul__(self, other):
        if isinstance(other, (int, np.integer)):
            return IndexExpr(self.const * int(other), {v: c * int(other) for v, c in self.terms.items() if other})
        return NotImplemented

    __rmul__ = __mul__

    def __getitem__(self, key):
        # nl.arange(n)[:, None] / [None, :]: place the var on an axis of a broadcast index tile.
        if not isinstance(key, tuple):
            key = (key,)
        if len(self.terms) != 1 or self.const != 0:
            fail("only a bare nl.arange can be placed on an axis with [:, None]")
        (var, coeff), = self.terms.items()
        slots = [i for i, k in enumerate(key) if isinstance(k, slice)]
        if len(slots) != 1 or any(k is not None for k in key if not isinstance(k, slice)):
            fail("an nl.arange index takes one ':' and Nones, e.g. [:, None]")
        return IndexExpr(0, {IndexVar(var.size, slots[0], len(key)): coeff})

    # Comparisons: a mask (one var against an integer) or an affine predicate (``i_p >= i_f``, for
    # nisa.affine_select); a mask is also usable as a predicate.
    def _bound(self, other, op):
        if isinstance(other, IndexExpr) or len(self.terms) != 1:
            diff = self - other if isinstance(other, IndexExpr) else self - int(other)
            return Mask(None, (diff, op))
        if not isinstance(other, (int, np.integer)):
            fail(f"cannot compare an index expression with {type(other).__name__}")
        (var, coeff), = self.terms.items()
        return Mask({var: (op, coeff, int(other) - self.const)}, (self - int(other), op))

    def __lt__(self, other):
        return self._bound(other, "<")

    def __le__(self, other):
        return self._bound(other, "<=")

    def __gt__(self, other):
        return self._bound(other, ">")

    def __ge__(self, other):
        return self._bound(other, ">=")

    @property
    def shape(self):
        return tuple(v.size if i == v.axis else 1 for v in self.terms for i in range(v.ndim))


class Mask:
    """``(i_p < n) & (i_f < m)``: the ranges of index vars an instruction keeps. ``affine`` is the
    comparison it came from, ``(expression, op)`` meaning ``expression op 0``; a comparison of two
    index expressions (``i_p >= i_f``) is only that (a predicate, not a box a mask can keep)."""
    __slots__ = ("bounds", "affine")

    def __init__(self, bounds, affine=None):
        self.bounds = bounds   # IndexVar -> (op, coeff, rhs), or None for a predicate only
        self.affine = affine

    def __and__(self, other):
        if isinstance(other, (bool, np.bool_)):
            # A Python condition beside index bounds (published kernels write ``(i_f < n) & (tile * 128 < s)``):
            # True keeps this mask, False keeps nothing (the instruction is not emitted).
            return self if other else False
        if self.bounds is None or other.bounds is None:
            fail("masks combine with & only when each compares one nl.arange with an integer")
        merged = dict(self.bounds)
        for v, b in other.bounds.items():
            if v in merged:
                fail("a mask bounds each index once")
            merged[v] = b
        return Mask(merged)

    __rand__ = __and__

    def range_of(self, var):
        """(first, count) of var's values the mask keeps."""
        if self.bounds is None:
            fail("a comparison of two index expressions is not a mask (it keeps no box): use nisa.affine_select")
        if var not in self.bounds:
            return 0, var.size
        op, coeff, rhs = self.bounds[var]
        values = [i for i in range(var.size) if _compare(coeff * i, op, rhs)]
        if not values:
            return 0, 0
        first, last = values[0], values[-1]
        if last - first + 1 != len(values):
            fail("a mask must keep a contiguous range")
        return first, len(values)


def _compare(a, op, b):
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


# ---------------------------------------------------------------------------------------------
# storage and views

class Storage:
    """One tensor: a kernel argument or ``nl.ndarray`` in HBM, or a tile in SBUF / PSUM."""
    __slots__ = ("trace", "space", "dtype", "shape", "pdim", "partitions", "per_partition", "name", "region",
                 "pending_zero", "producer", "written", "base", "first", "last", "location", "_full", "mask", "address",
                 "matmul_written", "carried", "loops", "blocks", "block_of", "tied", "__weakref__")

    def __init__(self, trace, space, dtype, shape, pdim):
        self.trace, self.space, self.dtype, self.shape, self.pdim = trace, space, dtype, tuple(shape), pdim
        self.pending_zero = False   # nl.zeros in PSUM: the first matmul overwrites instead
        self.producer = -1          # index of the instruction that last wrote all of it
        self.written = False
        if space == "hbm":
            self.partitions, self.per_partition = 1, _prod(shape)
        else:
            self.partitions = shape[pdim]
            self.per_partition = _prod([s for i, s in enumerate(shape) if i != pdim])
        self.name = None
        self.region = None
        self.base = None            # the tile this one aliases (view(dtype))
        self.first = self.last = -1  # the instructions that first and last touch it
        self.location = None
        self._full = None
        self.mask = None            # the beta-1 mask its last writer had: only that part holds values
        self.address = None         # nl.ndarray(address=(partition, byte)): placed by the kernel
        self.matmul_written = None  # PSUM: [partitions, per_partition] bools, the elements a matmul has written
        # Whether its values may carry from one run of a compiled loop's body to the next: read before anything
        # wrote it, or written at a register offset or under a mask (not the same elements every run).
        self.carried = False
        self.loops = ()             # the compiled loops open where it was made (each run of the body makes it anew)
        # Beta 1's leading block dims ([B, par_dim(P), F...]): the compiler allocates each block on its own, so an
        # access within one block goes to that block's own tile (blocks: index -> tile; block_of: (tile, index));
        # a block is placed inside its tile only when an instruction touches several blocks at once (tied).
        self.blocks = None
        self.block_of = None
        self.tied = False

    def block_count(self):
        """Blocks of a tile with leading block dims ([B..., par_dim(P), F...]): the product of the dims before P."""
        return _prod(self.shape[:self.pdim]) if self.pdim else 1

    def full_dims(self):
        dims = self._full
        if dims is None:
            dims, stride = [], 1
            for i in range(len(self.shape) - 1, -1, -1):
                if i == self.pdim:
                    dims.append([0, self.shape[i]])
                else:
                    dims.append([stride, self.shape[i]])
                    stride *= self.shape[i]
            dims.reverse()
            self._full = dims
        return dims

    def full_view(self):
        return View(self, 0, [list(d) for d in self.full_dims()], self.pdim, 0)


class View:
    """An access pattern into a Storage: ``offset`` plus one (stride, size) per logical dim; on chip,
    dim ``pdim`` is the partition dim (``pstart`` + index, stride unused). This is what every NKI
    tile, tensor slice and tensor view is; indexing makes a new View."""
    __slots__ = ("st", "offset", "dims", "pdim", "pstart", "vars", "text")

    def __init__(self, st, offset, dims, pdim, pstart, vars=None):
        self.st, self.offset, self.dims, self.pdim, self.pstart = st, offset, dims, pdim, pstart
        self.vars = vars   # per dim: the IndexVar it was indexed by (masks), or None
        self.text = None   # the .tasm form, once made (a View is not changed after it is made)

    # -- NKI tensor surface
    @property
    def shape(self):
        return tuple([d[1] for d in self.dims])

    @property
    def dtype(self):
        return self.st.dtype

    @property
    def ndim(self):
        return len(self.dims)

    @property
    def buffer(self):
        from . import language
        return language.buffer_object(self.st.space)

    @property
    def itemsize(self):
        return self.st.dtype.size_bytes

    def __len__(self):
        return self.dims[0][1]

    def __repr__(self):
        return f"<nki {self.st.space} tensor {self.st.name or '?'} {self.st.dtype.nki_name}{list(self.shape)}>"

    def __bool__(self):
        # NKI 0.7 traces with Python: a tensor object is true (``if bias:`` asks "was one given?"); its values
        # are not known while tracing (data-dependent choices take nl.where / masks / nl.if_else).
        return True

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def is_whole(self):
        return self.offset == 0 and self.pstart == 0 and self.dims == self.st.full_dims()

    # -- indexing
    def __getitem__(self, key):
        return index_view(self, key)

    def __setitem__(self, key, value):
        from . import language
        # A value nothing else refers to (``t[...] = nl.load(...)``) may be written in place.
        temporary = sys.getrefcount(value) - _pending_refs(value) <= _TEMPORARY_REFS
        target = index_view(self, key)
        language.assign(target, value, temporary=temporary)

    def __iadd__(self, value):
        from . import language
        temporary = sys.getrefcount(value) - _pending_refs(value) <= _TEMPORARY_REFS_IADD
        language.accumulate(self, value, temporary=temporary)
        return _AccumulatedView(self)

    # -- element-wise operators build nl.* calls
    def _binary(self, other, op, reverse=False):
        from . import language
        return language.binary(other, self, op) if reverse else language.binary(self, other, op)

    def __add__(self, o): return self._binary(o, "add")
    def __radd__(self, o): return self._binary(o, "add", True)
    def __sub__(self, o): return self._binary(o, "subtract")
    def __rsub__(self, o): return self._binary(o, "subtract", True)
    def __mul__(self, o): return self._binary(o, "multiply")
    def __rmul__(self, o): return self._binary(o, "multiply", True)
    def __truediv__(self, o): return self._binary(o, "divide")
    def __rtruediv__(self, o): return self._binary(o, "divide", True)
    def __pow__(self, o): return self._binary(o, "power")
    def __gt__(self, o): return self._binary(o, "greater")
    def __ge__(self, o): return self._binary(o, "greater_equal")
    def __lt__(self, o): return self._binary(o, "less")
    def __le__(self, o): return self._binary(o, "less_equal")
    def __and__(self, o): return self._binary(o, "logical_and")
    def __or__(self, o): return self._binary(o, "logical_or")
    def __neg__(self):
        from . import language
        return language.negative(self)

    # -- tensor views (NKI 0.5+)
    def reshape(self, *shape, **kwargs):
        """``t.reshape(a, b)``, ``t.reshape((a, b))`` or beta 1's ``t.reshape(shape=(a, b))``."""
        if "shape" in kwargs:
            if shape:
                fail("reshape: give the shape once, positionally or as shape=")
            shape = (kwargs.pop("shape"),)
        if kwargs:
            fail(f"reshape: unexpected argument(s) {', '.join(sorted(kwargs))}")
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else tuple(shape)
        return reshape_view(self, shape)

    def permute(self, *order):
        order = tuple(order[0]) if len(order) == 1 and isinstance(order[0], (tuple, list)) else tuple(order)
        if sorted(order) != list(range(self.ndim)):
            fail(f"permute({order}) is not a permutation of {self.ndim} dims")
        pdim = order.index(self.pdim) if self.pdim is not None else None
        return View(self.st, self.offset, [list(self.dims[i]) for i in order], pdim, self.pstart)

    def broadcast(self, dim, size):
        if self.dims[dim][1] != 1:
            fail(f"broadcast: dim {dim} has size {self.dims[dim][1]}, not 1")
        dims = [list(d) for d in self.dims]
        dims[dim] = [0, int(size)]
        return View(self.st, self.offset, dims, self.pdim, self.pstart)

    @property
    def data(self):
        """The tensor itself (``t.data`` as the tile-grid API writes operands)."""
        return self

    def broadcast_to(self, shape):
        """Beta 1: size-1 dims repeated to ``shape`` (see nl.broadcast_to)."""
        from . import language
        return language.broadcast_to(self, shape)

    def flatten_dims(self, start, end):
        """Dims start..end (inclusive) as one (they must be contiguous, and not the partition dim)."""
        start, end = start % self.ndim, end % self.ndim
        shape = list(self.shape)
        merged = _prod(shape[start:end + 1])
        return reshape_view(self, tuple(shape[:start] + [merged] + shape[end + 1:]))

    def reshape_dim(self, dim, shape):
        """Dim ``dim`` split into ``shape``."""
        dim = dim % self.ndim
        full = list(self.shape)
        return reshape_view(self, tuple(full[:dim] + list(shape) + full[dim + 1:]))

    def rearrange(self, pattern, **sizes):
        """einops-style ``"a b c -> a (c b)"``: a permutation, then groups merged or split."""
        return rearrange_view(self, pattern, sizes)

    def expand_dim(self, dim):
        dims = [list(d) for d in self.dims]
        dims.insert(dim, [0, 1])
        pdim = self.pdim + 1 if self.pdim is not None and dim <= self.pdim else self.pdim
        return View(self.st, self.offset, dims, pdim, self.pstart)

    def squeeze_dim(self, dim):
        if self.dims[dim][1] != 1 or dim == self.pdim:
            fail(f"squeeze_dim: dim {dim} has size {self.dims[dim][1]}")
        dims = [list(d) for i, d in enumerate(self.dims) if i != dim]
        pdim = self.pdim - 1 if self.pdim is not None and dim < self.pdim else self.pdim
        return View(self.st, self.offset, dims, pdim, self.pstart)

    # -- NkiTensor attributes
    @property
    def name(self):
        return self.st.name

    @property
    def size(self):
        return _prod(self.shape)

    @property
    def strides(self):
        """Element strides per dim; on chip the partition dim steps by the tile's elements per
        partition, as NKI's access patterns write it."""
        return tuple(self.st.per_partition if i == self.pdim else d[0] for i, d in enumerate(self.dims))

    def get_pattern(self):
        """The view's access pattern as [[stride, count], ...] (partition pair first on chip)."""
        return [[st, n] for st, n in zip(self.strides, self.shape)]

    def is_contiguous(self):
        expect = 1
        for i in range(self.ndim - 1, -1, -1):
            stride, n = self.dims[i]
            if i == self.pdim:
                continue
            if n != 1 and stride != expect:
                return False
            expect *= n
        return True

    def is_indirect(self):
        return False

    def reinterpret_cast(self, dtype):
        return self.view(dtype)

    def vector_select(self, dim, indices):
        """The rows of dim ``dim`` that an SBUF tile of offsets ([P, 1] int32 / uint32, one per
        partition) picks: partition p reads index ``indices[p]`` of that dim. An HBM tensor's indirect
        DMA (``nisa.dma_copy`` gathers from it as src, scatters into it as dst; descriptors from the
        indices at run time by the software DGE)."""
        if self.st.space != "hbm":
            fail("vector_select of an on-chip tensor is not supported (NKI: vector_select is for HBM tensors, an "
                 "indirect DMA; Tensor.indirect indexes on-chip columns and is not supported yet)")
        dim = int(dim) % self.ndim
        dims = [list(self.dims[dim])] + [list(d) for i, d in enumerate(self.dims) if i != dim]
        return IndirectRows(TableView(self.st, self.offset, dims, None, 0), indices)

    def slice(self, dim, start, end, step=1):
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        return index_view(self, tuple(key))

    def select(self, dim, index):
        key = [slice(None)] * self.ndim
        key[dim] = index
        return index_view(self, tuple(key))

    def view(self, dtype):
        """The same bytes as another dtype. Between sizes (fp32 -> bf16: 2 elements per element) the last dim
        scales, which needs it contiguous; offsets and the other strides scale with it."""
        dtype = as_dtype(dtype)
        old, new = self.st.dtype.size_bytes, dtype.size_bytes
        alias = self.st.trace.alias(self.st, dtype)
        dims = [list(d) for d in self.dims]
        if old == new:
            return View(alias, self.offset, dims, self.pdim, self.pstart)
        last = len(dims) - 1
        if last == self.pdim or dims[last][0] != 1 and dims[last][1] != 1:
            fail(f"view({dtype.nki_name}) of a tensor whose last dim is not contiguous: the bytes do not regroup")
        if isinstance(self.offset, DynOffset):
            fail(f"view({dtype.nki_name}) of a view addressed by a register: take the dtype view first")
        if new < old:
            k = old // new
            for i, d in enumerate(dims):
                if i != self.pdim:
                    d[0] *= k
            dims[last] = [1, dims[last][1] * k]
            return View(alias, self.offset * k, dims, self.pdim, self.pstart)
        k = new // old
        if dims[last][1] % k or self.offset % k or any(d[0] % k for i, d in enumerate(dims[:last]) if i != self.pdim):
            fail(f"view({dtype.nki_name}) of {self.dtype.nki_name}{list(self.shape)}: the last dim and the offsets "
                 f"must be whole {new}-byte elements")
        for i, d in enumerate(dims[:last]):
            if i != self.pdim:
                d[0] //= k
        dims[last] = [1, dims[last][1] // k]
        return View(alias, self.offset // k, dims, self.pdim, self.pstart)

    def ap(self, pattern=None, offset=None, scalar_offset=None, dtype=None, vector_offset=None, indirect_dim=None,
           **unsupported):
        """``t.ap([[stride, num], ...], offset, scalar_offset=, vector_offset=, indirect_dim=, dtype=)``: an
        explicit access pattern over this tensor's storage (``pattern`` None: this view's own). On chip the first
        pair is [partition step, partitions]. ``offset`` (elements) adds to this view's offset. ``indirect_dim``
        (default 0) names the dim of ``t.shape`` whose stride scales an indirect offset (NKI's rule):
        ``scalar_offset`` (a register, an int, or a one-element integer tensor, read when the instruction issues)
        adds ``value * stride(indirect_dim)`` elements; ``vector_offset`` (an SBUF tile of offsets, [P, 1] int32 /
        uint32) makes partition p read the rest of the pattern from ``offset + stride(indirect_dim) *
        vector_offset[p]`` (the first pair gives the partition count), an HBM tensor's indirect DMA."""
        unsupported = {k: v for k, v in unsupported.items() if v is not None}
        if unsupported:
            fail(f"ap(): {', '.join(sorted(unsupported))} not supported yet")
        if dtype is not None and as_dtype(dtype) is not self.st.dtype:
            return self.view(dtype).ap(pattern, offset, scalar_offset, vector_offset=vector_offset,
                                       indirect_dim=indirect_dim)
        start = self.offset + int(offset or 0)
        pstart = self.pstart
        if self.st.space != "hbm" and offset:
            # On chip NKI counts the offset over the tile's flat [partition, free] elements (the partition pair's
            # step is the elements per partition): whole partitions move the start partition.
            moved, start = divmod(int(offset), self.st.per_partition)
            start += self.offset
            pstart += moved
        scale_dim = int(indirect_dim) if indirect_dim is not None else 0
        if (scalar_offset is not None or vector_offset is not None) and not 0 <= scale_dim < len(self.dims):
            fail(f"ap(indirect_dim={indirect_dim}): the tensor has {len(self.dims)} dims")
        if pattern is None:
            if vector_offset is not None:
                fail("ap(vector_offset=) needs a pattern (its first pair: one row per partition)")
            return View(self.st, offset_plus(start, self._scaled_offset(scalar_offset, scale_dim)),
                        [list(d) for d in self.dims], self.pdim, pstart)
        dims = [[int(s), int(n)] for s, n in pattern]
        if vector_offset is not None:
            return self._indirect_ap(dims, start, scalar_offset, vector_offset, scale_dim)
        if scalar_offset is not None:
            start = offset_plus(start, self._scaled_offset(scalar_offset, scale_dim))
        if self.st.space == "hbm":
            return View(self.st, start, dims, None, 0)
        # The partition pair's step is 0 / 1, or (as NKI writes it) the tile's elements per partition.
        if dims[0][0] not in (0, 1, self.st.per_partition) and dims[0][1] > 1:
            fail("ap(): on-chip partitions are contiguous (partition step 1)")
        dims[0][0] = 0
        if pstart + dims[0][1] > self.st.partitions:
            fail(f"ap(): partitions {pstart}..{pstart + dims[0][1] - 1} leave the tile of {self.st.partitions}")
        return View(self.st, start, dims, 0, pstart)

    def _scaled_offset(self, scalar_offset, scale_dim):
        """scalar_offset (register, int or one-element integer tensor) times the stride of dim scale_dim."""
        if scalar_offset is None:
            return 0
        if isinstance(scalar_offset, View):
            from . import isa
            if scalar_offset.st.dtype.is_float or int(np.prod(scalar_offset.shape)) != 1:
                fail(f"ap(): a scalar_offset tensor holds one integer, got {scalar_offset!r}")
            scalar_offset = isa.scalar_load(scalar_offset)
        elif not is_register(scalar_offset) and not isinstance(scalar_offset, (int, np.integer)):
            fail(f"ap(): scalar_offset is a register (nisa.scalar_load / register_alloc), an int or a one-element "
                 f"integer tensor, got {type(scalar_offset).__name__}")
        if self.st.space != "hbm" and scale_dim == self.pdim:
            fail("ap(scalar_offset=) of an on-chip tensor along its partition dim: a scalar offset moves along the "
                 "free dims only (pass indirect_dim= of a free dim)")
        stride = self.dims[scale_dim][0]
        return scalar_offset if stride == 1 else scalar_offset * stride

    def _indirect_ap(self, dims, start, scalar_offset, vector_offset, scale_dim):
        if self.st.space != "hbm":
            fail("ap(vector_offset=) of an on-chip tensor: tensor indirection of compute operands is not supported "
                 "yet; use it on an HBM tensor (an indirect DMA)")
        if scalar_offset is not None:
            fail("ap(): vector_offset= and scalar_offset= together are not supported")
        count = dims[0][1]
        stride = self.dims[scale_dim][0]
        if stride <= 0:
            fail(f"ap(vector_offset=): the stride of dim {scale_dim} scales the offsets and must be positive, "
                 f"got {stride}")
        # The table's rows: every offset whose access stays inside the tensor (the DGE faults beyond).
        reach = sum(s * (n - 1) for s, n in dims[1:] if s > 0)
        low = sum(s * (n - 1) for s, n in dims[1:] if s < 0)
        if start + low < 0 or start + reach >= self.st.per_partition:
            fail(f"ap(vector_offset=): the pattern [{dims}] at offset {start} leaves the tensor of "
                 f"{self.st.per_partition} elements")
        rows = (self.st.per_partition - 1 - start - reach) // stride + 1
        indices = as_indices(vector_offset)
        if indices.dims[indices.pdim][1] != count:
            fail(f"ap(vector_offset=): {indices.dims[indices.pdim][1]} offsets for an indirect pair of {count}")
        return IndirectRows(TableView(self.st, start, [[stride, rows]] + dims[1:], None, 0), indices)


def as_indices(value):
    from . import _emit
    return _emit.as_view(value, "vector_offset / vector_select indices")


def _temporary_refs():
    """sys.getrefcount of a temporary inside __setitem__ (``x[k] = f()``) and __iadd__ (``x += f()``),
    on this interpreter."""
    seen = {}

    class Probe:
        def __setitem__(self, key, value):
            seen["setitem"] = sys.getrefcount(value)

        def __iadd__(self, value):
            seen["iadd"] = sys.getrefcount(value)
            return self

    probe = Probe()
    probe[0] = object()
    probe += object()
    return seen["setitem"], seen["iadd"]


_TEMPORARY_REFS, _TEMPORARY_REFS_IADD = _temporary_refs()


def _pending_refs(value):
    """References the trace itself holds to a lazy result (its list of results not written yet)."""
    from . import _trace
    trace = _trace.active()
    return sum(1 for p in trace.pending if p is value) if trace is not None and trace.pending else 0


class ExactView(View):
    """A view whose free dims are emitted as they are, not merged where contiguous: for an
    instruction whose other operands number those dims (tensor_reduce's axis list)."""
    __slots__ = ()


class _AccumulatedView(View):
    """What ``t[...] += x`` hands to ``__setitem__``: already written, so the store is a no-op."""
    __slots__ = ()

    def __init__(self, view):
        View.__init__(self, view.st, view.offset, view.dims, view.pdim, view.pstart, view.vars)


class DynSlice:
    """``nl.ds(start, size)``: ``size`` elements from ``start`` (an int, or a register: dynamic addressing)."""
    __slots__ = ("start", "size")

    def __init__(self, start, size):
        self.start = start if is_register(start) else int(start)
        self.size = int(size)


def is_register(x):
    """An NKI scalar (nki.isa's VirtualRegister) rather than a Python int."""
    return hasattr(x, "_register") and hasattr(x, "_scope")


class DynOffset:
    """A view's offset with a run-time part (NKI ``scalar_offset``, indexing by a scalar): ``static`` elements
    plus the value of register ``reg`` when the instruction issues (the ISA's ``scalar_offset=rN``)."""
    __slots__ = ("static", "reg")

    def __init__(self, static, reg):
        self.static, self.reg = int(static), reg

    def __add__(self, other):
        if isinstance(other, DynOffset):
            return DynOffset(self.static + other.static, self.reg + other.reg)
        if is_register(other):
            return DynOffset(self.static, self.reg + other)
        return DynOffset(self.static + int(other), self.reg)

    __radd__ = __add__

    def __eq__(self, other):
        return isinstance(other, DynOffset) and other.static == self.static and other.reg is self.reg

    __hash__ = object.__hash__

    def _static_only(self, *_):
        fail("this view needs its offset known while tracing, but it is addressed by a register (scalar_offset): "
             "take the view first and index by the register last")

    __int__ = __index__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __mod__ = __lt__ = __gt__ = \
        __le__ = __ge__ = _static_only


def offset_plus(offset, term):
    """offset + term, where either may have a run-time (register) part."""
    if is_register(term):
        return DynOffset(offset, term) if not isinstance(offset, DynOffset) else offset + term
    return offset + term


def _norm_index(i, size, what):
    i = int(i)
    if i < 0:
        i += size
    if not 0 <= i < size:
        fail(f"index {i} is out of range for {what} of size {size} [index-bounds]")
    return i


def index_view(view, key):
    """NumPy-style basic indexing (ints, slices, ``nl.ds``, ``...``) and beta-1 index expressions."""
    if key is Ellipsis:
        return view   # t[...]: the same access (a View is not changed once made)
    if type(key) is not tuple:
        key = (key,)
    if key and isinstance(key[0], View) and view.st.space == "hbm":
        return _indirect_rows(view, key)
    if view.st.space == "hbm":
        # Leading integers, then a tile of row indices (nki-samples' resize_nearest: ``data[b, idx_tile, i_f]``):
        # the integers pick the table, the tile its rows.
        lead = 0
        while lead < len(key) and isinstance(key[lead], (int, np.integer)) and not isinstance(key[lead], bool):
            lead += 1
        if 0 < lead < len(key) and isinstance(key[lead], View):
            return index_view(index_view(view, key[:lead]), key[lead:])
    for k in key:
        if type(k) is IndexExpr:
            return _index_expressions(view, key)
    if any(k is Ellipsis for k in key):
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (view.ndim - len(key) + 1) + key[i + 1:]
    if len(key) == 2 and view.ndim == 1 and view.pdim == 0 and view.st.space != "hbm":
        # An on-chip tile narrowed to its partition dim still has one element per partition: NKI takes a trailing
        # index of that element (nki-library's attention_cte: ``ubs[:n, grp]`` then ``[:n, :1]``) as [P, 1].
        view = View(view.st, view.offset, view.dims + [[1, 1]], 0, view.pstart)
    if len(key) > view.ndim:
        fail(f"{len(key)} indices for a tensor of {view.ndim} dims {list(view.shape)}")
    offset, pstart, pdim = view.offset, view.pstart, view.pdim
    dims, vars_out = [], []
    overhang = []  # slices past their dim's end: (output dim, start, size, message), legal only under a mask
    for d, (stride, size) in enumerate(view.dims):
        k = key[d] if d < len(key) else slice(None)
        if isinstance(k, DynSlice) and is_register(k.start):
            # nl.ds(reg, n): n elements from a run-time start; the bounds are checked when it issues.
            if d == pdim:
                fail("a partition range cannot start at a register (dynamic addressing is along the free dims)")
            offset = offset_plus(offset, k.start * stride)
            dims.append([stride, k.size])
            vars_out.append(None)
            continue
        if isinstance(k, DynSlice):
            k = slice(k.start, k.start + k.size)
        if is_register(k):
            if d == pdim:
                fail("a partition cannot be chosen by a register (dynamic addressing is along the free dims)")
            offset = offset_plus(offset, k * stride)
            continue
        if isinstance(k, slice):
            start, stop, step = k.indices(size)
            if k.stop is not None and not isinstance(k.stop, (int, np.integer)):
                fail(f"slice bound {k.stop!r} is not an integer")
            count = max(0, (stop - start + (step - (1 if step > 0 else -1))) // step)
            if k.stop is not None and (k.stop > size if isinstance(k.stop, (int, np.integer)) and k.stop >= 0 else False):
                message = f"slice {start}:{k.stop} exceeds dim {d} of size {size} (tensor {list(view.shape)})"
                if step != 1 or not 0 <= start < size:
                    fail(message + " [index-bounds]")
                # A partial last tile (nki-samples' adaptive_avg_pool2d loads rows 256:384 of 288 under
                # ``mask=(i_p < N * C)``): the whole slice, legal only where a mask keeps it inside (apply_mask).
                count = int(k.stop) - start
                overhang.append((len(dims), start, size, message))
            if count == 0:
                fail(f"slice {k.start}:{k.stop} of dim {d} (size {size}) is empty [index-empty]")
            if d == pdim:
                if step != 1:
                    fail("partitions are contiguous: a partition slice takes step 1")
                pstart += start
                dims.append([0, count])
            else:
                offset += stride * start
                dims.append([stride * step, count])
            vars_out.append(None)
        elif isinstance(k, (int, np.integer)):
            i = int(k)
            if not 0 <= i < size:
                i = _norm_index(k, size, f"dim {d}")
            if d == pdim:
                # One partition: the partition dim stays (size 1) so the tile keeps its layout.
                pstart += i
                dims.append([0, 1])
                vars_out.append(None)
            else:
                offset += stride * i
        else:
            fail(f"cannot index a tensor with {type(k).__name__} {k!r}")
    new_pdim = None
    if pdim is not None:
        kept = 0
        for d in range(pdim):
            k = key[d] if d < len(key) else slice(None)
            if not isinstance(k, (int, np.integer)) and not is_register(k):
                kept += 1
        new_pdim = kept
    if overhang:
        out = _UncheckedView(view.st, offset, dims, new_pdim, pstart)
        out.checks, out.overhang = [], overhang
        return block_local(out)
    return block_local(View(view.st, offset, dims, new_pdim, pstart))


class TableView(View):
    """The HBM side of an indirect DMA: dim 0 is the table's rows (the one the indices pick), emitted
    as the access pattern's outer pair even when it is one row; the other dims are one row's pattern."""
    __slots__ = ()


class IndirectRows:
    """``table[idx_tile, i_f]`` (beta 1's indirect DMA), ``t.vector_select(dim, idx)`` and
    ``t.ap(..., vector_offset=idx, indirect_dim=0)``: the rows of an HBM tensor that an SBUF tile of
    row numbers ([P, 1] int32 / uint32) picks. nl.load / nisa.dma_copy from it is a dma_gather, into it
    (nl.store, nisa.dma_copy dst) a dma_scatter."""
    __slots__ = ("table", "indices")

    def __init__(self, table, indices):
        self.table, self.indices = table, indices

    @property
    def shape(self):
        iv = self.indices
        rows = iv.dims[iv.pdim][1] if isinstance(iv, View) and iv.pdim is not None else None
        return (rows,) + tuple(self.table.shape[1:])

    @property
    def dtype(self):
        return self.table.dtype

    @property
    def ndim(self):
        return self.table.ndim

    def is_indirect(self):
        return True

    def __repr__(self):
        return f"<nki indirect rows of {self.table!r} by {self.indices!r}>"


def _indirect_rows(view, key):
    rest = key[1:]
    exprs = [k for k in rest if type(k) is IndexExpr]
    if exprs:
        ndim = max(v.ndim for k in exprs for v in k.terms) if any(k.terms for k in exprs) else 2
        first = IndexExpr(0, {IndexVar(view.dims[0][1], 0, ndim): 1})
    else:
        first = slice(None)
    table = index_view(view, (first,) + tuple(rest))
    return IndirectRows(TableView(table.st, table.offset, table.dims, None, 0, table.vars), key[0])


def _index_expressions(view, key):
    """``t[k * 128 + i_p, i_f]``: each index an affine expression of index vars; the result has one
    dim per var, in the order of the vars' axes."""
    if len(key) != view.ndim:
        fail(f"{len(key)} index expressions for a tensor of {view.ndim} dims {list(view.shape)}")
    offset, pstart = view.offset, view.pstart
    var_stride = {}
    var_pdim = None
    unchecked = []   # out-of-range indices: an error unless a mask= keeps them in range
    for d, k in enumerate(key):
        stride, size = view.dims[d]
        if isinstance(k, slice):
            fail("do not mix ':' slices with nl.arange index expressions")
        expr = k if isinstance(k, IndexExpr) else IndexExpr(int(k))
        if d == view.pdim:
            if len(expr.terms) > 1 or any(c != 1 for c in expr.terms.values()):
                fail("the partition index must be one nl.arange with coefficient 1 (plus a constant)")
            pstart += expr.const
            if expr.terms:
                (v, _), = expr.terms.items()
                var_pdim = v
                if expr.const < 0 or expr.const + v.size > size:
                    fail(f"partition index {expr.const}..{expr.const + v.size - 1} exceeds {size} partitions "
                         f"[index-bounds]")
            elif not 0 <= expr.const < size:
                fail(f"partition index {expr.const} exceeds {size} partitions [index-bounds]")
        else:
            offset += stride * expr.const
            hi = lo = expr.const
            for v, c in expr.terms.items():
                var_stride[v] = var_stride.get(v, 0) + stride * c
                span = c * (v.size - 1)
                hi, lo = (hi + span, lo) if span > 0 else (hi, lo + span)
            if lo < 0 or hi >= size:
                unchecked.append((expr, size, f"index expression reaches {lo}..{hi} on dim {d} of size {size} "
                                              f"(tensor {list(view.shape)})"))
    all_vars = list(var_stride)
    if var_pdim is not None and var_pdim not in var_stride:
        all_vars.append(var_pdim)
    # The index tiles broadcast as NumPy's do: axes right-aligned (an nl.arange(n)[:, None, None]
    # partition index with an nl.mgrid[0:m, 0:6] free index is [n, m, 6]), the partition index
    # first on a tie, and a size-1 index of the first dim first (``g[i_one, i_f]`` with i_one the
    # size-1 axis of a 3-var mgrid is a [1, F] row, as the tutorials load their parameters).
    first = key[0].terms if type(key[0]) is IndexExpr else {}
    all_vars.sort(key=lambda v: (not (v.size == 1 and v in first), v.axis - v.ndim, v is not var_pdim))
    dims, vars_out, pdim = [], [], None
    for v in all_vars:
        if v is var_pdim:
            pdim = len(dims)
            dims.append([0, v.size])
        else:
            dims.append([var_stride[v], v.size])
        vars_out.append(v)
    if view.pdim is not None and pdim is None:
        pdim = 0
        dims.insert(0, [0, 1])
        vars_out.insert(0, None)
    if not dims:
        dims, vars_out = [[1, 1]], [None]
    if unchecked:
        out = _UncheckedView(view.st, offset, dims, pdim if view.pdim is not None else None, pstart, vars_out)
        out.checks, out.overhang = unchecked, []
        return block_local(out)
    return block_local(View(view.st, offset, dims, pdim if view.pdim is not None else None, pstart, vars_out))


def block_local(view):
    """``view`` on the tile of the one block it lies in, when its tile has leading block dims (Storage.blocks)."""
    st = view.st
    if st.blocks is None or st.address is not None or type(view.offset) is not int:
        return view
    per_block = st.per_partition // st.block_count()
    lo = hi = view.offset
    for i, (stride, size) in enumerate(view.dims):
        if i != view.pdim and size > 1:
            if stride >= 0:
                hi += stride * (size - 1)
            else:
                lo += stride * (size - 1)
    b = lo // per_block
    if lo < 0 or hi // per_block != b:
        return view
    child = st.trace.block_tile(st, b)
    out = type(view)(child, view.offset - b * per_block, view.dims, view.pdim, view.pstart, view.vars)
    if type(view) is _UncheckedView:
        out.checks, out.overhang = view.checks, view.overhang
    return out


class _UncheckedView(View):
    """An index expression or a slice that reaches past its tensor (a partial last tile): legal only
    under a ``mask=`` that keeps every index in range (checked by apply_mask)."""
    __slots__ = ("checks", "overhang")


def _check_masked(view, mask):
    if mask is None and view.overhang:
        fail(view.overhang[0][3] + " [index-bounds]")
    for expr, size, message in view.checks:
        lo = hi = expr.const
        for v, c in expr.terms.items():
            first, count = mask.range_of(v) if mask is not None else (0, v.size)
            if count == 0:
                return
            a, b = c * first, c * (first + count - 1)
            lo, hi = lo + min(a, b), hi + max(a, b)
        if lo < 0 or hi >= size:
            fail(message + (" under its mask" if mask is not None else "") + " [index-bounds]")


def apply_mask(view, mask):
    """The part of ``view`` an instruction with ``mask=`` touches."""
    if isinstance(mask, (bool, np.bool_)):
        # A Python condition as the mask (the samples' ``mask=diagonal`` of tile indices): all or nothing. A false
        # one touches nothing, so its indices may lie outside the tensor (nki-samples' fused RMSNorm-QKV loads the
        # second of two row tiles under ``mask=(tile * 128 < seqlen)``).
        if not mask:
            return None
        if type(view) is _UncheckedView:
            _check_masked(view, None)
        return view
    if type(view) is _UncheckedView:
        _check_masked(view, mask)
    if mask is None:
        return view
    dims = [list(d) for d in view.dims]
    offset, pstart = view.offset, view.pstart
    firsts = [0] * len(dims)
    for d, (stride, size) in enumerate(view.dims):
        var = view.vars[d] if view.vars else None
        if var is None:
            # A whole tile under a mask: an arange var on axis d bounds it.
            var = next((v for v in (mask.bounds or ()) if v.axis == d and v.size == size), None)
        if var is None:
            continue
        first, count = mask.range_of(var)
        if count == 0:
            return None
        if d == view.pdim:
            pstart += first
        else:
            offset += stride * first
        dims[d][1] = count
        firsts[d] = first
    for d, start, size, message in getattr(view, "overhang", ()):
        if start + firsts[d] + dims[d][1] > size:
            fail(message + " under its mask [index-bounds]")
    return View(view.st, offset, dims, view.pdim, pstart, view.vars)


def reshape_view(view, shape):
    if tuple(shape) == view.shape:
        return view
    shape = list(shape)
    if -1 in shape:
        known = _prod([s for s in shape if s != -1])
        shape[shape.index(-1)] = _prod(view.shape) // max(known, 1)
    if _prod(shape) != _prod(view.shape):
        fail(f"cannot reshape {list(view.shape)} into {shape}")
    if view.pdim is not None:
        if shape[0] != view.shape[view.pdim] or view.pdim != 0:
            fail("reshape of an on-chip tile keeps its partition dim first and unchanged")
        free = _reshape_dims([d for i, d in enumerate(view.dims) if i != 0], shape[1:])
        return View(view.st, view.offset, [[0, shape[0]]] + free, 0, view.pstart)
    return View(view.st, view.offset, _reshape_dims(view.dims, shape), None, 0)


def _rearrange_side(text):
    groups, current = [], None
    for token in text.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            current = []
        elif token == ")":
            groups.append(current)
            current = None
        elif current is not None:
            current.append(token)
        else:
            groups.append([token])
    return groups


def rearrange_view(view, pattern, sizes):
    if "->" not in pattern:
        fail(f"rearrange pattern {pattern!r} has no '->'")
    left, right = (_rearrange_side(side) for side in pattern.split("->"))
    if len(left) != view.ndim:
        fail(f"rearrange: {pattern!r} names {len(left)} dims, the tensor has {view.ndim}")
    known = dict(sizes)
    for group, size in zip(left, view.shape):
        unknown = [n for n in group if n not in known]
        rest = _prod([known[n] for n in group if n in known])
        if len(unknown) > 1:
            fail(f"rearrange: sizes of {unknown} are not given")
        if unknown:
            known[unknown[0]] = size // rest
        elif rest != size:
            fail(f"rearrange: {group} is {rest}, the dim is {size}")
    names = [n for g in left for n in g]
    split = reshape_view(view, tuple(known[n] for n in names)) if len(names) != view.ndim else view
    order = [n for g in right for n in g]
    if sorted(order) != sorted(names):
        fail(f"rearrange: {pattern!r} must use each name once on both sides")
    permuted = split.permute(*[names.index(n) for n in order])
    if all(len(g) == 1 for g in right):
        return permuted
    return reshape_view(permuted, tuple(_prod([known[n] for n in g]) for g in right))


def _reshape_dims(dims, shape):
    merged = merge_dims([list(d) for d in dims if d[1] != 1])
    if len(merged) > 1:
        fail("reshape needs a contiguous view (this one has strides " + str([d[0] for d in dims]) + ")")
    stride0 = merged[0][0] if merged else 1
    out, stride = [], stride0
    for s in reversed(shape):
        out.append([stride, s])
        stride *= s
    return list(reversed(out))


def merge_dims(dims):
    """Adjacent (stride, size) pairs that walk one run merge: [[512, 4], [1, 512]] -> [[1, 2048]]."""
    out = []
    for d in dims:
        if out and out[-1][0] == d[0] * d[1]:
            out[-1] = [d[0], out[-1][1] * d[1]]
        else:
            out.append(list(d))
    return out


# ---------------------------------------------------------------------------------------------
# on-chip allocation (after tracing)

class LruAllocator:
    """Free byte ranges of one partition, each remembering when it was freed; an allocation takes
    the range freed longest ago that fits (never-used memory counts as freed at the start). Ranges
    sit in a heap by age; adjacent ones merge only when nothing fits (merging keeps the newer age)."""

    def __init__(self, capacity_bytes, align_bytes, best_fit=False):
        """``best_fit``: take the smallest free range that fits instead (adjacent ranges merged first), which
        fragments least; the tracer's last resort for a kernel that does not fit by age."""
        self.capacity, self.align, self.best_fit = capacity_bytes, align_bytes, best_fit
        self.free = {0: (capacity_bytes, -1)}       # start -> (end, freed_at)
        self.heap = [(-1, 0, capacity_bytes)]       # (freed_at, start, end), stale entries skipped
        self.in_use = 0

    def size_of(self, nbytes):
        return max(self.align, -(-nbytes // self.align) * self.align)

    def take(self, size, avoid=None):
        """``avoid`` = (start, end): bytes to take only when nothing else fits (the previous tile of
        the same allocation site, so that a loop's tiles alternate between buffers)."""
        if self.best_fit:
            return self._take_best_fit(size)
        start = self._take(size, avoid)
        if start is None and self._coalesce():
            start = self._take(size, avoid)
        if start is None and avoid is not None:
            start = self._take(size, None)
        return start

    def _take(self, size, avoid=None):
        aside, found = [], None
        heap, free = self.heap, self.free
        while heap:
            entry = heapq.heappop(heap)
            t, a, b = entry
            if free.get(a) != (b, t):
                continue   # stale
            if avoid is not None and a < avoid[1] and avoid[0] < b:
                # Only the part of the range outside the avoided bytes may serve.
                if (avoid[0] - a >= size) or (b - avoid[1] >= size):
                    found = entry
                    break
                aside.append(entry)
                continue
            if b - a >= size:
                found = entry
                break
            aside.append(entry)
        for entry in aside:
            heapq.heappush(heap, entry)
        if found is None:
            return None
        t, a, b = found
        if avoid is not None and a < avoid[1] and avoid[0] < b and avoid[0] - a < size:
            start = max(a, avoid[1])   # above the avoided bytes (below them does not fit)
        else:
            start = a
        del free[a]
        if a < start:
            free[a] = (start, t)
            heapq.heappush(heap, (t, a, start))
        if start + size < b:
            free[start + size] = (b, t)
            heapq.heappush(heap, (t, start + size, b))
        self.in_use += size
        return start

    def _take_best_fit(self, size):
        self._coalesce()
        fits = [(b - a, a) for a, (b, _) in self.free.items() if b - a >= size]
        if not fits:
            return None
        _, a = min(fits)
        b, t = self.free.pop(a)
        if a + size < b:
            self.free[a + size] = (b, t)
            heapq.heappush(self.heap, (t, a + size, b))
        self.in_use += size
        return a

    def take_at(self, start, size):
        """The range [start, start + size) if it is free (an ``address=`` placement), else None."""
        for attempt in range(2):
            for a, (b, t) in self.free.items():
                if a <= start and start + size <= b:
                    del self.free[a]
                    if a < start:
                        self.free[a] = (start, t)
                        heapq.heappush(self.heap, (t, a, start))
                    if start + size < b:
                        self.free[start + size] = (b, t)
                        heapq.heappush(self.heap, (t, start + size, b))
                    self.in_use += size
                    return start
            if attempt == 0 and not self._coalesce():
                break
        return None

    def release(self, start, size, now):
        self.in_use -= size
        self.free[start] = (start + size, now)
        heapq.heappush(self.heap, (now, start, start + size))

    def _coalesce(self):
        merged = {}
        last = None
        for a in sorted(self.free):
            b, t = self.free[a]
            if last is not None and merged[last][0] == a:
                merged[last] = (b, max(merged[last][1], t))
            else:
                merged[a] = (b, t)
                last = a
        changed = len(merged) != len(self.free)
        self.free = merged
        self.heap = [(t, a, b) for a, (b, t) in merged.items()]
        heapq.heapify(self.heap)
        return changed

    def largest_free(self):
        return max((b - a for a, (b, _) in self.free.items()), default=0)
