"""``nki.language`` (``nl``): buffers, tensor creation, loads and stores, loops, index helpers and the
element-wise / reduction / activation / matmul conveniences, each lowered to the ``nki.isa``
instructions the NKI compiler uses. Engine choices (trainium.md §4, NKI docs):

- activation functions (``exp``, ``tanh``, ``gelu``, ``sigmoid``, ``silu``, ``sqrt``, ``rsqrt``, ``log``,
  ...) -> ``activation`` on the Scalar engine (it owns the function tables);
- arithmetic, comparisons, logic (``add`` ... ``maximum``, ``equal``, ``logical_and``, ...) ->
  ``tensor_tensor`` (two tiles) or ``tensor_scalar`` (a tile and a number or a [P, 1] column) on Vector;
- reductions over free axes (``sum``, ``max``, ``min``, ``mean``, ``prod``, ``all``, ``any``) ->
  ``tensor_reduce`` on Vector; ``reciprocal`` -> ``reciprocal`` on Vector; ``copy`` -> ``tensor_copy``;
- ``matmul`` -> ``nc_matmul`` on Tensor (``transpose_x=False`` transposes x on Tensor first);
  ``transpose`` -> ``nc_transpose`` on Tensor (into PSUM);
- ``softmax`` -> max reduce (Vector), exp with bias = -max and a sum reduce (Scalar), reciprocal and
  a per-row multiply (Vector); ``rms_norm`` -> square with a sum reduce (Scalar), then Vector;
- ``load`` / ``store`` -> ``dma_copy``; ``zeros`` in SBUF -> ``memset`` (Vector), in PSUM folded into
  the first ``nc_matmul``.

Both the current namespace (NKI 0.3-0.7) and the beta-1 ``neuronxcc.nki.language`` extras
(``arange``, ``mgrid``, ``mask=``, ``par_dim``, ``loop_reduce``, ``static_cast``) live here.
"""
import builtins as _builtins
import numpy as np
from math import prod as _prod

from . import _core, _cse, _emit, _schedule_api, _trace
from ._core import DTYPES, IndexExpr, IndexVar, View, as_dtype, fail, user_location

# ---- dtypes
for _name, _d in DTYPES.items():
    globals()[_name] = _d
bool_ = DTYPES["bool_"]
fp32 = DTYPES["float32"]


# ---- buffers

class Buffer:
    __slots__ = ("name", "space")

    def __init__(self, name, space):
        self.name, self.space = name, space

    def __repr__(self):
        return f"nl.{self.name}"

    def view(self, dtype, shape, **_):
        return ndarray(shape, dtype, buffer=self)


sbuf = Buffer("sbuf", "sbuf")
psum = Buffer("psum", "psum")
hbm = Buffer("hbm", "hbm")
shared_hbm = Buffer("shared_hbm", "hbm")
private_hbm = Buffer("private_hbm", "hbm")


def buffer_object(space):
    return {"sbuf": sbuf, "psum": psum, "hbm": hbm}[space]


class par_dim:
    """Beta-1: marks the partition dim of a tile shape with block dims, ``(4, nl.par_dim(128), 512)``."""

    def __init__(self, size):
        self.size = int(size)

    def __int__(self):
        return self.size

    def __index__(self):
        return self.size


def _shape(shape):
    if isinstance(shape, (int, np.integer, par_dim)):
        shape = (shape,)
    pdim = next((i for i, s in enumerate(shape) if isinstance(s, par_dim)), 0)
    return tuple(int(s) for s in shape), pdim


# ---- creation

def ndarray(shape, dtype, buffer=None, name=None, address=None, **_ignored):
    shape, pdim = _shape(shape)
    buffer = sbuf if buffer is None else buffer
    if not isinstance(buffer, Buffer):
        fail(f"buffer={buffer!r}: one of nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm, nl.private_hbm")
    trace = _trace.current()
    if buffer.space == "hbm":
        if address is not None:
            fail("nl.ndarray(address=...) places on-chip tiles; HBM tensors have no address to give")
        # nl.hbm is private_hbm ("only visible to each individual kernel instance"): each core of an LNC launch has
        # its own copy; a shared_hbm tensor is one for all of them.
        role = "output" if buffer is shared_hbm else "private"
        return trace.hbm_tensor(shape, dtype, name, role=role).full_view()
    st = trace.tile(shape, dtype, buffer.space, pdim, user_location())
    # A placed SBUF tile starts on an element boundary (AWS's kernel library places tiles 2 and 4 bytes apart;
    # the timing model's dependencies are exact to the byte, so nothing coarser is needed).
    if address is not None and buffer.space == "sbuf" and int(address[1]) % _core.as_dtype(dtype).size_bytes:
        fail(f"address={address}: an SBUF tile of {_core.as_dtype(dtype).nki_name} starts on a "
             f"{_core.as_dtype(dtype).size_bytes}-byte element boundary")
    if address is not None:
        partition, byte = (int(a) for a in address)
        if partition + st.partitions > (trace.target.pmax if buffer.space == "sbuf" else trace.target.psum_partitions):
            fail(f"address={address}: partitions {partition}..{partition + st.partitions - 1} do not exist")
        if buffer.space == "psum" and byte % trace.target.psum_bank_bytes:
            fail(f"address={address}: a PSUM tile starts on a {trace.target.psum_bank_bytes}-byte bank boundary")
        st.address = (partition, byte)
    return st.full_view()


def empty_like(t, dtype=None, buffer=None, **kw):
    if isinstance(t, BlockGrid):
        return alloc_blocks(tile_shape=t.tile_shape, block_shape=t.block_shape, element_shape=t.element_shape,
                            buffer=buffer or t.buffer, dtype=dtype or t.dtype, **kw)
    if isinstance(t, TileGrid):
        return alloc_tiles(tile_shape=t.tile_shape, element_shape=t.element_shape, buffer=buffer or t.buffer,
                           dtype=dtype or t.dtype, **kw)
    return ndarray(t.shape, dtype or t.dtype, buffer=buffer or t.buffer, **kw)


# ---- tile grids (nl.tiles / nl.alloc_tiles: a tensor navigated in tile coordinates)

class NkiGrid:
    """What nl.tiles and nl.blocks return (isinstance checks)."""


class TileGrid(NkiGrid):
    """``nl.tiles(src, tile_shape=(128, 256))``: ``grid[i, j]`` / ``grid[i, :]`` select tiles (an int
    keeps the grid; on the untiled leading dims it picks one slab), ``.data`` is the selection as one
    tensor operand, ``.shape`` counts tiles, ``.element_shape`` the selected elements (a last tile
    clipped at the tensor's edge)."""

    def __init__(self, view, tile_shape, ranges=None, picked=None):
        self._view, self.tile_shape = view, tuple(int(t) for t in tile_shape)
        n, k = view.ndim, len(self.tile_shape)
        if k < 2 or k > n:
            fail(f"nl.tiles: tile_shape {list(self.tile_shape)} needs 2..{n} dims")
        self._prefix = n - k
        counts = list(view.shape[:self._prefix]) + [-(-s // t) for s, t in zip(view.shape[self._prefix:],
                                                                                self.tile_shape)]
        self._ranges = ranges or [(0, c) for c in counts]
        self._picked = picked or [False] * n

    dtype = property(lambda self: self._view.dtype)
    buffer = property(lambda self: self._view.buffer)

    @property
    def shape(self):
        return tuple(b - a for (a, b), p in zip(self._ranges, self._picked) if not p)

    def _extent(self, d):
        a, b = self._ranges[d]
        if d < self._prefix:
            return a, b
        t, size = self.tile_shape[d - self._prefix], self._view.shape[d]
        return a * t, (b * t if b * t < size else size)   # (min is nl.min here)

    @property
    def element_shape(self):
        out = []
        for d in range(self._view.ndim):
            if d < self._prefix and self._picked[d]:
                continue
            lo, hi = self._extent(d)
            out.append(hi - lo)
        return tuple(out)

    @property
    def is_remainder(self):
        return _builtins.any(hi - lo < (b - a) * self.tile_shape[d - self._prefix]
                   for d in range(self._prefix, self._view.ndim)
                   for (a, b), (lo, hi) in [(self._ranges[d], self._extent(d))])

    @property
    def data(self):
        key = []
        for d in range(self._view.ndim):
            lo, hi = self._extent(d)
            key.append(lo if d < self._prefix and self._picked[d] else slice(lo, hi))
        return self._view[tuple(key)]


    def __repr__(self):
        return f"<nki tile grid {list(self.shape)} of {list(self.tile_shape)} tiles over {self._view!r}>"

    @property
    def is_data_representable(self):
        return True   # a selection is a rectangle of one tensor: one access pattern

    @property
    def index_step_elements(self):
        """Elements one grid index step moves along each grid dim."""
        steps = [1] * self._prefix + list(self.tile_shape)
        return tuple(s for s, p in zip(steps, self._picked) if not p)


class BlockGrid(NkiGrid):
    """``nl.blocks(src, tile_shape=(128, 256), block_shape=(2, 2))``: a tile grid grouped into blocks
    of ``block_shape`` tiles, the coarser grain one DMA moves. ``grid[i, j]`` selects blocks (an int
    keeps the grid; on the untiled leading dims it picks one slab), ``.shape`` counts blocks,
    ``.data`` is the selection as one tensor operand, ``nl.tiles(block)`` its tiles. Partial blocks
    and tiles at the tensor's edge are clamped to its extent."""

    def __init__(self, view, tile_shape, block_shape, ranges=None, picked=None):
        self._view = view
        self.tile_shape = tuple(int(t) for t in tile_shape)
        self.block_shape = tuple(int(b) for b in block_shape)
        n, k = view.ndim, len(self.tile_shape)
        if k < 2 or k > n:
            fail(f"nl.blocks: tile_shape {list(self.tile_shape)} needs 2..{n} dims")
        if len(self.block_shape) != k or _builtins.min(self.block_shape + self.tile_shape) <= 0:
            fail(f"nl.blocks: block_shape {list(self.block_shape)} needs {k} positive tile counts (one per tiled "
                 f"dim)")
        self._prefix = n - k
        grain = [b * t for b, t in zip(self.block_shape, self.tile_shape)]
        counts = list(view.shape[:self._prefix]) + [-(-s // g) for s, g in zip(view.shape[self._prefix:], grain)]
        self._ranges = ranges or [(0, c) for c in counts]
        self._picked = picked or [False] * n

    dtype = property(lambda self: self._view.dtype)
    buffer = property(lambda self: self._view.buffer)
    shape = TileGrid.shape
    is_data_representable = TileGrid.is_data_representable

    def _grain(self, d):
        k = d - self._prefix
        return self.block_shape[k] * self.tile_shape[k]

    def _extent(self, d):
        a, b = self._ranges[d]
        if d < self._prefix:
            return a, b
        g, size = self._grain(d), self._view.shape[d]
        return a * g, (b * g if b * g < size else size)

    element_shape = TileGrid.element_shape
    data = TileGrid.data

    @property
    def is_remainder(self):
        return _builtins.any(hi - lo < (b - a) * self._grain(d)
                   for d in range(self._prefix, self._view.ndim)
                   for (a, b), (lo, hi) in [(self._ranges[d], self._extent(d))])

    @property
    def index_step_elements(self):
        steps = [1] * self._prefix + [self._grain(d) for d in range(self._prefix, self._view.ndim)]
        return tuple(s for s, p in zip(steps, self._picked) if not p)

    def _rebuild(self, ranges, picked):
        return BlockGrid(self._view, self.tile_shape, self.block_shape, ranges, picked)

    def tiles(self):
        """The selection's tiles: a TileGrid over the same tensor, in tile coordinates."""
        ranges = []
        for d, (a, b) in enumerate(self._ranges):
            if d < self._prefix:
                ranges.append((a, b))
            else:
                k = d - self._prefix
                n_tiles = -(-self._view.shape[d] // self.tile_shape[k])
                ranges.append((a * self.block_shape[k], _builtins.min(b * self.block_shape[k], n_tiles)))
        picked = [p if d < self._prefix else False for d, p in enumerate(self._picked)]
        return TileGrid(self._view, self.tile_shape, ranges, picked)

    def __repr__(self):
        return (f"<nki block grid {list(self.shape)} of {list(self.block_shape)} x {list(self.tile_shape)} tiles over "
                f"{self._view!r}>")


def _grid_getitem(self, key):
    key = key if isinstance(key, tuple) else (key,)
    free = [d for d, p in enumerate(self._picked) if not p]
    if len(key) > len(free):
        fail(f"{len(key)} indices for a grid of {len(free)} dims {list(self.shape)}")
    ranges, picked = list(self._ranges), list(self._picked)
    for d, k in zip(free, key):
        a, b = ranges[d]
        if isinstance(k, slice):
            start, stop, step = k.indices(b - a)
            if step != 1:
                fail("a grid slice takes step 1")
            ranges[d] = (a + start, a + (stop if stop > start else start))
        else:
            i = int(k) + (b - a if int(k) < 0 else 0)
            if not 0 <= i < b - a:
                fail(f"grid index {int(k)} is out of range for a grid dim of {b - a}")
            ranges[d], picked[d] = (a + i, a + i + 1), True
    return self._rebuild(ranges, picked)


TileGrid._rebuild = lambda self, ranges, picked: TileGrid(self._view, self.tile_shape, ranges, picked)
TileGrid.__getitem__ = _grid_getitem
BlockGrid.__getitem__ = _grid_getitem


def tiles(source, tile_shape=None, **kw):
    if isinstance(source, BlockGrid):
        grid = source.tiles()
        return grid if tile_shape is None else TileGrid(grid.data, tile_shape)
    if isinstance(source, TileGrid):
        return source if tile_shape is None else TileGrid(source.data, tile_shape)
    if tile_shape is None:
        fail("nl.tiles of a tensor takes tile_shape=")
    return TileGrid(_operand(source, "nl.tiles"), tile_shape)


def blocks(source, tile_shape=None, block_shape=None, **kw):
    """A block view (NkiBlockGrid) over a tensor, a tile grid or a block grid (regrouped)."""
    if block_shape is None:
        fail("nl.blocks takes block_shape= (tiles per block along each tiled dim)")
    if isinstance(source, (TileGrid, BlockGrid)):
        return BlockGrid(source.data, tile_shape or source.tile_shape, block_shape)
    if tile_shape is None:
        fail("nl.blocks of a tensor takes tile_shape=")
    return BlockGrid(_operand(source, "nl.blocks"), tile_shape, block_shape)


def alloc_tiles(tile_shape, element_shape, buffer, dtype, address=None, name=None, **kw):
    return TileGrid(ndarray(tuple(element_shape), dtype, buffer=buffer, name=name, address=address), tile_shape)


def alloc_blocks(tile_shape, block_shape, element_shape, buffer, dtype, address=None, name=None, **kw):
    return BlockGrid(ndarray(tuple(element_shape), dtype, buffer=buffer, name=name, address=address), tile_shape,
                     block_shape)


NkiTileGrid, NkiBlockGrid = TileGrid, BlockGrid


def zeros(shape, dtype, buffer=None, name=None, **kw):
    return full(shape, 0.0, dtype, buffer=buffer, name=name, **kw)


def zeros_like(t, dtype=None, buffer=None, **kw):
    return zeros(t.shape, dtype or t.dtype, buffer=buffer or t.buffer, **kw)


def ones(shape, dtype, buffer=None, name=None, **kw):
    return full(shape, 1.0, dtype, buffer=buffer, name=name, **kw)


def full(shape, fill_value, dtype, buffer=None, name=None, **kw):
    location = user_location()
    t = ndarray(shape, dtype, buffer=buffer, name=name, **kw)
    if t.st.space == "psum" and fill_value == 0:
        t.st.pending_zero = True    # folded into the first nc_matmul, or a memset when read first
        return t
    if t.st.space == "hbm":
        fail("nl.zeros/full in HBM: fill a tile and store it")
    if t.st.blocks is not None and t.st.address is None:
        # One memset per block, as the compiler fills a tile with block dims: the blocks stay tiles of their own.
        for b in range(t.st.block_count()):
            _emit.emit("memset", (_trace.current().block_tile(t.st, b).full_view(), float(fill_value)), {}, location)
        return t
    _emit.emit("memset", (t, float(fill_value)), {}, location)
    return t


# ---- index helpers

DynSlice = _core.DynSlice


def ds(start, size):
    return DynSlice(start, size)


def arange(*args):
    """Beta 1: an index tile of values start..stop-1 (``nl.arange(128)[:, None]``)."""
    r = range(*[int(a) for a in args])
    if r.step != 1:
        fail("nl.arange with a step: multiply the index instead")
    return IndexExpr(r.start, {IndexVar(len(r), 0, 1): 1})


class _MGridResult(tuple):
    @property
    def p(self):
        return self[0]

    @property
    def x(self):
        return self[1]

    @property
    def y(self):
        return self[2]

    @property
    def z(self):
        return self[3]


class _MGrid:
    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        out = []
        for k in key:
            if k.step not in (None, 1):
                fail("nl.mgrid with a step is not supported")
        grid = tuple(int(k.stop) - int(k.start or 0) for k in key)
        for axis, k in enumerate(key):
            out.append(IndexExpr(int(k.start or 0), {IndexVar(grid[axis], axis, len(key), grid): 1}))
        return _MGridResult(out)


mgrid = _MGrid()


# ---- loops (all unrolled at trace time; the deprecated aliases are Python's range)

def affine_range(*args, **_):
    return range(*args)


sequential_range = static_range = affine_range
no_reorder = _schedule_api.no_reorder


class NKIObject:
    """NKI 0.7's base for the plain Python objects a kernel passes around while it traces (configs, tile
    descriptors, often dataclasses): tracing runs Python, so nothing more is needed of them here. Without an
    ``__init__`` of its own a subclass takes its fields by keyword (``SectionParams(section_idx=0, ...)``)."""

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, value)

    def __init_subclass__(cls, **kwargs):
        # AWS's kernels write @dataclass configs whose fields are bare class attributes (``section_idx = None``)
        # and construct them by keyword: such attributes become fields (annotated Any) before @dataclass runs.
        super().__init_subclass__(**kwargs)
        import typing
        annotations = cls.__dict__.get("__annotations__")
        if annotations is None:
            annotations = {}
            cls.__annotations__ = annotations
        for name, value in list(cls.__dict__.items()):
            if name.startswith("_") or name in annotations or callable(value) or \
                    isinstance(value, (property, staticmethod, classmethod, list, dict, set)):
                continue
            annotations[name] = typing.Any


def _is_register(x):
    return hasattr(x, "_register")


def _enter_loop(trace, location):
    """Before a compiled loop: zeros folded into a first matmul must be real (the body runs again)."""
    _schedule_api.check_compiled_loop(trace, location)
    for t in trace.tiles:
        if t.pending_zero:
            _emit._flush_zero(t, trace, location)
    if trace.pending:
        trace.flush_pending()


def _compiled_loop(lower, upper, step, location):
    """Emits a loop over i in [lower, upper) by ``step`` on the sequencers (the ISA's while_begin on
    i < upper, i advanced by register_add): returns (i, close) where close() ends it."""
    from . import isa
    trace = _trace.current()
    _enter_loop(trace, location)
    i = isa.register_alloc(lower)
    cond = isa.register_alloc()
    bound = upper if _is_register(upper) else isa.register_alloc(int(upper))

    def compare():
        _emit.emit("register_compare", (cond, i, "less"), {"src2": bound}, location)
    compare()
    begin = _emit.emit("while_begin", (cond,), {}, location)
    trace.loops.append(begin)

    def close():
        _emit.emit("register_add", (i, i, int(step)), {}, location)
        compare()
        end = _emit.emit("while_end", (), {}, location)
        trace.loops.pop()
        trace.close_loop(begin, end)
    return i, close


def fori_loop(lower, upper, body, step=1, init=None, unroll=False, **_):
    """``body(i)`` for i in range(lower, upper, step). Static bounds: unrolled while tracing, i an int.
    A register bound (``nisa.register_alloc``): a compiled loop (the ISA's while_begin on i < upper),
    the body traced once with i a register."""
    step = int(step)
    if step <= 0:
        fail("nl.fori_loop: step must be a positive int")
    if (_is_register(lower) or _is_register(upper)) and init is not None:
        fail("nl.fori_loop with a register bound carries no state (init): keep it in SBUF / HBM")
    if not (_is_register(lower) or _is_register(upper)):
        state = init
        for i in range(int(lower), int(upper), step):
            out = body(i, state) if init is not None else body(i)
            state = out if init is not None else state
        return state
    i, close = _compiled_loop(lower, upper, step, user_location())
    body(i)
    close()
    return None


def while_loop(init, body_fun, **_):
    """While register ``init`` != 0: ``r = body_fun(r)`` (the body traced once; the ISA's while_begin /
    while_end), the condition re-read from the register the body returns."""
    from . import isa
    location = user_location()
    if not _is_register(init):
        fail("nl.while_loop: init is a register (nisa.register_alloc / register_load)", location)
    trace = _trace.current()
    _enter_loop(trace, location)
    cond = isa.register_alloc(init)
    begin = _emit.emit("while_begin", (cond,), {}, location)
    trace.loops.append(begin)
    nxt = body_fun(cond)
    if not _is_register(nxt):
        fail("nl.while_loop: the body returns the next condition register", location)
    if nxt is not cond:
        _emit.emit("register_move", (cond,), {"src": nxt}, location)
    end = _emit.emit("while_end", (), {}, location)
    trace.loops.pop()
    trace.close_loop(begin, end)


def if_else(cond, then_fn, else_fn=None, **_):
    """``then_fn()`` when cond is nonzero, else ``else_fn()``. A Python bool / int is decided while
    tracing; a register compiles to two one-pass loops on the sequencers (while_begin on a copy of
    cond, cleared in the body; then the same on cond == 0): the ISA has loops, not branches, and a
    loop run at most once is a branch."""
    from . import isa
    location = user_location()
    if not _is_register(cond):
        if cond:
            then_fn()
        elif else_fn is not None:
            else_fn()
        return None
    trace = _trace.current()
    _enter_loop(trace, location)
    taken = isa.register_alloc(cond)
    otherwise = cond == 0 if else_fn is not None else None
    for flag, branch in ((taken, then_fn), (otherwise, else_fn)):
        if branch is None:
            continue
        begin = _emit.emit("while_begin", (flag,), {}, location)
        trace.loops.append(begin)
        branch()
        _emit.emit("register_move", (flag, 0), {}, location)
        end = _emit.emit("while_end", (), {}, location)
        trace.loops.pop()
        trace.close_loop(begin, end)
    return None


def dynamic_range(start, stop=None, step=1):
    """``for i in nl.dynamic_range(n)``: with a register bound, one compiled loop whose body is traced
    once (i a register); with ints, an ordinary range."""
    if stop is None:
        start, stop = 0, start
    if not (_is_register(start) or _is_register(stop)):
        return range(int(start), int(stop), int(step))
    return _dynamic_iteration(start, stop, int(step), user_location())


def _dynamic_iteration(start, stop, step, location):
    i, close = _compiled_loop(start, stop, step, location)
    yield i
    close()


# ---- SPMD

def program_id(axis=0):
    ids = _trace.current().program_id
    return ids[axis] if axis < len(ids) else 0


def num_programs(axis=None, axes=None):
    axis = axes if axis is None else axis
    n = _trace.current().num_programs
    if axis is None:
        return _prod(n) if n else 1
    return n[axis] if axis < len(n) else 1


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False, **_):
    """Beta 1: ``x`` reduced with ``op`` over the SPMD programs along ``program_axes``, the result in every program.
    The programs must run together, i.e. an LNC launch ``kernel[lnc]`` (its programs share HBM): each writes its
    tile to its slot of a shared HBM scratch tensor, they meet at a core_barrier, and each reduces the slots in
    program order (the same order in every program, so all get the same bits) in an fp32 accumulator on the Vector
    engine. Programs of another grid run one after another here and cannot reduce across one another."""
    from . import isa as nisa
    location = user_location()
    trace = _trace.current()
    axes = tuple(program_axes) if isinstance(program_axes, (tuple, list)) else (program_axes,)
    grid = trace.num_programs
    if mask is not None:
        fail("nl.all_reduce: mask= is not supported", location)
    if axes != (0,) or len(grid) != 1:
        fail(f"nl.all_reduce: program_axes={program_axes!r} over a grid {list(grid)}: trnsim reduces over axis 0 of "
             f"a one-axis LNC launch", location)
    if grid[0] != trace.target.lnc or grid[0] < 2:
        fail(f"nl.all_reduce: the {grid[0]} programs of this grid run one after another here; only the programs of "
             f"an LNC launch kernel[{trace.target.lnc}] run together (sharing HBM) and can reduce across one another",
             location)
    view = _emit.as_view(x, "nl.all_reduce x")
    if view.st.space != "sbuf":
        fail("nl.all_reduce: x is an SBUF tile", location)
    n, pid = grid[0], trace.program_id[0]
    shape = tuple(view.shape)
    slots = trace.hbm_tensor((n,) + shape, view.st.dtype, name="all_reduce").full_view()
    nisa.dma_copy(dst=slots[pid], src=view)
    nisa.core_barrier(slots, tuple(range(n)))
    acc = ndarray(shape, float32, buffer=sbuf)
    nisa.dma_copy(dst=acc, src=slots[0])
    part = ndarray(shape, float32, buffer=sbuf)
    for j in range(1, n):
        nisa.dma_copy(dst=part, src=slots[j])
        nisa.tensor_tensor(dst=acc, data1=acc, data2=part, op=op)
    out = ndarray(shape, dtype or view.st.dtype, buffer=sbuf)
    nisa.tensor_copy(dst=out, src=acc)
    return out


class nc:
    """Beta 1: ``kernel[nl.nc(2)](...)`` launches on 2 NeuronCores (an LNC grid)."""

    def __init__(self, count):
        self.count = int(count)

    def __index__(self):
        return self.count

    def __int__(self):
        return self.count


def spmd_dim(*args):
    """Beta 1: ``kernel[nl.spmd_dim(nl.nc(2), 4)]``: grid dims (the NeuronCore dim first)."""
    return tuple(int(a) for a in args)


def program_ndim():
    return len(_trace.current().num_programs)


# ---- tile sizes of the traced target

class _TileSize:
    def _target(self):
        trace = _trace.active()
        return trace.target if trace else _trace.Target("trn2", [])

    pmax = property(lambda self: self._target().pmax)
    gemm_stationary_fmax = property(lambda self: self._target().stationary_fmax)
    gemm_moving_fmax = property(lambda self: self._target().moving_fmax)
    psum_fmax = property(lambda self: self._target().psum_bank_bytes // 4)
    psum_bank_fmax = psum_fmax
    psum_num_banks = property(lambda self: self._target().psum_banks)
    sbuf_size_bytes = property(lambda self: self._target().sbuf_bytes * self._target().pmax)
    sbuf_fmax_bytes = property(lambda self: self._target().sbuf_bytes)
    # NKI 2.26+: the usable SBUF bytes per partition (total minus what the runtime reserves; trnsim reserves none).
    total_available_sbuf_size = sbuf_fmax_bytes
    bn_stats_fmax = 512
    psum_min_align = property(lambda self: self._target().psum_bank_bytes)
    sbuf_min_align = _core.SBUF_ALIGN_BYTES


tile_size = _TileSize()


# ---- operator objects: callable as nl.add(x, y) and passable as op=nl.add to nki.isa

class _Op:
    __slots__ = ("_isa_name", "_fn", "__name__", "__doc__")

    def __init__(self, isa_name, fn, doc):
        self._isa_name, self._fn, self.__name__, self.__doc__ = isa_name, fn, isa_name, doc

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __repr__(self):
        return f"nl.{self.__name__}"


def _result_tile(like_shape, dtype, location, space="sbuf"):
    return _trace.current().tile(like_shape, dtype, space, 0, location).full_view()


def _tile_shape(view):
    """A result's shape: the operand's dims with the partition dim first."""
    shape = list(view.shape)
    if view.pdim not in (0, None):
        p = shape.pop(view.pdim)
        shape.insert(0, p)
    return tuple(shape)


def _operand(x, what):
    if isinstance(x, View):
        return x
    return _emit.as_view(x, what)


def _out_dtype(dtype, *views):
    if dtype is not None:
        return as_dtype(dtype)
    for v in views:
        if isinstance(v, View) or hasattr(v, "_trnsim_view"):
            d = v.dtype
            return DTYPES["float32"] if d.name in ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn") else d
    return DTYPES["float32"]


def _is_number(x):
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def _is_column(v, like):
    """A [P, 1] operand against a [P, F] tile: a per-partition scalar."""
    return (isinstance(v, View) and v.pdim is not None and v.dims[v.pdim][1] == like.dims[like.pdim][1]
            and _prod(v.shape) == v.dims[v.pdim][1] and _prod(like.shape) > v.dims[v.pdim][1])


# NumPy's logic on bool arrays (NKI's bool_ is a byte holding 0 or 1): + and maximum are or, * and minimum are and,
# so True + True is True, not 2.
_BOOL_OPS = {"add": "logical_or", "maximum": "logical_or", "multiply": "logical_and", "minimum": "logical_and"}


def _binary_dtype(dtype, op, x, y):
    """The result dtype of ``x op y``: ``dtype`` when given; a bool tile with a tile of another dtype takes that one,
    with a number the number's kind (fp32 for a float, int32 for an int), as NumPy promotes bool; else _out_dtype.
    A division of integers is true division, as NumPy's (nl.divide is "similar to numpy.divide"): fp32, so that
    ``nl.floor(iota / w, dtype=nl.int32)`` floors the quotient (nki-samples' resize_nearest) instead of flooring a
    quotient already rounded to the nearest integer."""
    if dtype is not None:
        return as_dtype(dtype)
    if op == "divide":
        out = _binary_dtype(None, None, x, y)
        return out if out.is_float else DTYPES["float32"]
    tiles = [v for v in (x, y) if not _is_number(v)]
    if tiles and _builtins.all(getattr(v, "dtype", None) is DTYPES["bool_"] for v in tiles):
        number = next((v for v in (x, y) if _is_number(v)), None)
        if isinstance(number, (float, np.floating)):
            return DTYPES["float32"]
        return DTYPES["int32"] if number is not None else DTYPES["bool_"]
    others = [v for v in tiles if getattr(v, "dtype", None) is not DTYPES["bool_"]]
    return _out_dtype(None, *others)


def _bool_logic(op, out_dtype, location):
    if out_dtype is not DTYPES["bool_"]:
        return op
    if op == "subtract":
        fail("nl.subtract with a bool result: NumPy refuses to subtract bools (use nl.logical_xor, or give dtype=) "
             "[bool-arithmetic]", location)
    return _BOOL_OPS.get(op, op)


def binary(x, y, op, dtype=None, mask=None, location=None, **_):
    location = location or user_location()
    if _is_number(x) and _is_number(y):
        fail(f"nl.{op} of two numbers: compute it in Python")
    dtype = _binary_dtype(dtype, op, x, y)
    op = _bool_logic(op, dtype, location)
    if _is_number(x) or (isinstance(x, View) and isinstance(y, View) and _is_column(x, y)):
        # number op tile, [P,1] op tile: a tensor_scalar with the operand reversed.
        yv = _operand(y, f"nl.{op}")
        out = _result_tile(_tile_shape(yv), _out_dtype(dtype, yv), location)
        _emit.emit("tensor_scalar", (out, yv, op, x), {"reverse0": True, "mask": mask}, location)
        return out
    xv = _operand(x, f"nl.{op}")
    if _is_number(y) or _is_column(y, xv):
        out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
        _emit.emit("tensor_scalar", (out, xv, op, y), {"mask": mask}, location)
        return out
    yv = _operand(y, f"nl.{op}")
    if xv.ndim == yv.ndim and xv.shape != yv.shape:
        # NumPy broadcasting of size-1 dims, as the compiler lowers it: along free dims a stride-0 view, across
        # partitions a [1, F] tile computed onto P partitions (broadcast_to).
        target = tuple(_builtins.max(a, b) for a, b in zip(xv.shape, yv.shape))
        if (_builtins.all(a in (1, t) for a, t in zip(xv.shape, target))
                and _builtins.all(b in (1, t) for b, t in zip(yv.shape, target))):
            xv = xv if xv.shape == target else broadcast_to(xv, target, location)
            yv = yv if yv.shape == target else broadcast_to(yv, target, location)
    if _prod(xv.shape) != _prod(yv.shape):
        fail(f"nl.{op}: shapes {list(xv.shape)} and {list(yv.shape)} do not match (engines broadcast only a "
             f"[P, 1] column or a number; broadcast across partitions with a DMA of .broadcast(...))", location)
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv, yv), location)
    _emit.emit("tensor_tensor", (out, xv, yv, op), {"mask": mask}, location)
    return out


def _binary_op(name):
    def fn(x, y, dtype=None, mask=None, **kw):
        return binary(x, y, name, dtype=dtype, mask=mask, location=user_location(), **kw)
    return _Op(name, fn, f"nl.{name}(x, y, dtype=None, mask=None): tensor_tensor / tensor_scalar on Vector")


for _n in ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "equal", "not_equal", "greater",
           "greater_equal", "less", "less_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and",
           "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "mod"]:
    globals()[_n] = _binary_op(_n)
fmod = globals()["mod"]


def _rounding(name, toward_minus):
    """nl.floor / nl.ceil from the Vector engine's fmod and compare (no rounding ALU operator is documented):
    t = x - fmod(x, 1) truncates; floor = t - (x < t), ceil = t + (x > t). Exact for every finite float (fmod is
    exact, |x| >= 2^23 is integral); an infinity or NaN gives NaN (fmod(inf, 1) is NaN). The result is cast to
    ``dtype`` (default: x's)."""
    def fn(x, dtype=None, mask=None, **kw):
        location = user_location()
        xv = _operand(x, f"nl.{name}")
        f32 = as_dtype("float32")
        fraction = binary(xv, 1.0, "mod", dtype=f32, mask=mask, location=location)
        truncated = binary(xv, fraction, "subtract", dtype=f32, mask=mask, location=location)
        beyond = binary(xv, truncated, "less" if toward_minus else "greater", dtype=f32, mask=mask, location=location)
        return binary(truncated, beyond, "subtract" if toward_minus else "add", dtype=_out_dtype(dtype, xv), mask=mask,
                      location=location)
    return _Op(name, fn, f"nl.{name}(x, dtype=None, mask=None): fmod, subtract, compare and add on Vector")


floor = _rounding("floor", True)
ceil = _rounding("ceil", False)


def activation_op(x, func, dtype=None, mask=None, bias=None, scale=1.0, location=None):
    location = location or user_location()
    xv = _operand(x, f"nl.{func}")
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
    kwargs = {"mask": mask, "scale": scale}
    if bias is not None:
        kwargs["bias"] = bias
    _emit.emit("activation", (out, func, xv), kwargs, location)
    return out


def _activation(name):
    def fn(x, dtype=None, mask=None, **kw):
        return activation_op(x, name, dtype=dtype, mask=mask, location=user_location())
    return _Op(name, fn, f"nl.{name}(x, dtype=None, mask=None): activation on Scalar")


for _n in ["exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_dx", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
           "gelu_apprx_sigmoid_dx", "silu", "silu_dx", "softplus", "mish", "erf", "erf_dx", "sin", "cos", "arctan",
           "sqrt", "rsqrt", "sign"]:
    globals()[_n] = _activation(_n)


def _unary_vector(name, isa_op, operand):
    def fn(x, dtype=None, mask=None, **kw):
        location = user_location()
        xv = _operand(x, f"nl.{name}")
        out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
        _emit.emit("tensor_scalar", (out, xv, isa_op, operand), {"mask": mask}, location)
        return out
    return _Op(isa_op, fn, f"nl.{name}(x): tensor_scalar {isa_op} on Vector")


abs = _unary_vector("abs", "abs", 0.0)
square = _unary_vector("square", "square", 0.0)
negative = _unary_vector("negative", "multiply", -1.0)
invert = _unary_vector("invert", "invert", 0.0)


def _reciprocal(x, dtype=None, mask=None, **kw):
    location = user_location()
    xv = _operand(x, "nl.reciprocal")
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
    _emit.emit("reciprocal", (out, xv), {"mask": mask}, location)
    return out


reciprocal = _Op("reciprocal", _reciprocal, "nl.reciprocal(x): reciprocal on Vector")


def _copy(x, dtype=None, mask=None, engine=None, **kw):
    location = user_location()
    xv = _operand(x, "nl.copy")
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv) if dtype else xv.dtype, location)
    _emit.emit("tensor_copy", (out, xv), {"mask": mask, "engine": engine}, location)
    return out


# An _Op so that ``nisa.activation(op=nl.copy, ...)`` (the Scalar engine's identity) names it too.
copy = _Op("copy", _copy, "nl.copy(x, dtype=None): tensor_copy (Vector); as an activation op, the identity")


# ---- reductions

def _free_axes(view, axis, what, location):
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    axes = sorted({int(a) % view.ndim for a in axes})
    if view.pdim in axes:
        fail(f"{what}: axis {view.pdim} is the partition dim; reduce across partitions with nl.matmul or "
             f"nisa.tensor_partition_reduce [reduce-partition]", location)
    return axes


def reduce_op(x, op, axis, dtype=None, keepdims=False, mask=None, negate=False, location=None):
    location = location or user_location()
    xv = _operand(x, f"nl.{op}")
    axes = _free_axes(xv, axis, f"reduce {op}", location)
    # tensor_reduce's axis list counts the emitted free dims (1-based): the reduced dims go last so
    # that they are the trailing free dims whatever merging does to the rest.
    kept = [d for d in range(xv.ndim) if d not in axes and d != xv.pdim]
    order = [xv.pdim] + kept + axes
    data = xv.permute(*order) if order != list(range(xv.ndim)) else xv
    reduced = [data.dims[i] for i in range(1 + len(kept), data.ndim) if data.dims[i][1] != 1]
    n_kept = len(_core.merge_dims([data.dims[i] for i in range(1, 1 + len(kept)) if data.dims[i][1] != 1]))
    n_red = len(_core.merge_dims(reduced))
    out_shape = [xv.shape[d] if d not in axes else 1 for d in range(xv.ndim)]
    out = _result_tile(tuple(out_shape) if keepdims else tuple(s for d, s in enumerate(out_shape) if d not in axes)
                       or (xv.shape[xv.pdim], 1), _out_dtype(dtype, xv), location)
    if n_red == 0:
        _emit.emit("tensor_copy", (out, data), {"mask": mask}, location)
        return out
    # Merged dims change the count: emit with explicit dims so that the axis numbers hold.
    red_axes = list(range(1 + n_kept, 1 + n_kept + n_red))
    kept_dims = _core.merge_dims([data.dims[i] for i in range(1, 1 + len(kept)) if data.dims[i][1] != 1])
    red_dims = _core.merge_dims(reduced)
    if len(_core.merge_dims(kept_dims + red_dims)) < n_kept + n_red:
        # The last kept dim and the first reduced one are contiguous: keep them apart.
        data = _core.ExactView(data.st, data.offset, [data.dims[0]] + kept_dims + red_dims, 0, data.pstart)
    _emit.emit("tensor_reduce", (out, op, data, red_axes), {"negate": negate, "mask": mask}, location)
    return out


def _reduction(name, isa_op):
    def fn(x, axis, dtype=None, keepdims=False, mask=None, **kw):
        return reduce_op(x, isa_op, axis, dtype=dtype, keepdims=keepdims, mask=mask, location=user_location())
    return _Op(isa_op, fn, f"nl.{name}(x, axis, dtype=None, keepdims=False): tensor_reduce {isa_op} on Vector")


sum = _reduction("sum", "add")
max = _reduction("max", "maximum")
min = _reduction("min", "minimum")
prod = _reduction("prod", "multiply")
all = _reduction("all", "logical_and")
any = _reduction("any", "logical_or")


def mean(x, axis, dtype=None, keepdims=False, mask=None, **kw):
    location = user_location()
    xv = _operand(x, "nl.mean")
    axes = _free_axes(xv, axis, "nl.mean", location)
    count = _prod([xv.shape[a] for a in axes])
    s = reduce_op(xv, "add", axes, dtype=DTYPES["float32"], keepdims=keepdims, mask=mask, location=location)
    out = _result_tile(s.shape, _out_dtype(dtype, xv), location)
    _emit.emit("tensor_scalar", (out, s, "multiply", 1.0 / count), {}, location)
    return out


# ---- matmul and transpose

class LazyMatmul:
    """``nl.matmul`` / beta-1 ``nisa.nc_matmul`` results: written where they are assigned
    (``psum[...] += ...`` accumulates), or into a fresh PSUM tile when used as an operand."""
    __slots__ = ("stationary", "moving", "kwargs", "location", "_view")

    def __init__(self, stationary, moving, kwargs, location):
        self.stationary, self.moving, self.kwargs, self.location = stationary, moving, kwargs, location
        self._view = None
        # Written at once where it is assigned; if any other instruction comes first, it is
        # materialised before that one (its operands may be about to change).
        _trace.current().pending.append(self)

    @property
    def shape(self):
        return (self.stationary.shape[-1] if self.stationary.ndim > 1 else 1, self.moving.shape[-1])

    @property
    def dtype(self):
        # Transpose mode (trn2+) passes the input dtype through the array; a matmul accumulates fp32.
        if self.kwargs.get("is_transpose") and _trace.current().target.generation != "trn1":
            return self.stationary.dtype
        return DTYPES["float32"]

    def write(self, dst, accumulate):
        kwargs = dict(self.kwargs)
        kwargs["accumulate"] = accumulate
        if accumulate and dst.st.pending_zero and dst.is_whole():
            dst.st.pending_zero = False
            kwargs["accumulate"] = False
        trace = _trace.current()
        if self in trace.pending:
            trace.pending.remove(self)
        if dst.st.pending_zero:   # a part of it, or an overwrite: the zeros are written first
            _emit._flush_zero(dst.st, trace, self.location)
        _emit.emit("nc_matmul", (dst, self.stationary, self.moving), kwargs, self.location)

    def _trnsim_view(self):
        if self._view is None:
            view = _result_tile(self.shape, self.dtype, self.location, "psum")
            self.write(view, False)
            self._view = view
        return self._view

    def __getattr__(self, name):
        return getattr(self._trnsim_view(), name)

    def __getitem__(self, key):
        return self._trnsim_view()[key]


def matmul(x, y, transpose_x=False, mask=None, **kw):
    """x @ y on the Tensor engine into PSUM (fp32). With ``transpose_x=True`` x is given as [K, M]."""
    location = user_location()
    xv, yv = _operand(x, "nl.matmul x"), _operand(y, "nl.matmul y")
    if mask is not None:
        xv, yv = _core.apply_mask(xv, mask), _core.apply_mask(yv, mask)
        if xv is None or yv is None:
            fail("nl.matmul: the mask keeps nothing of an operand", location)
    if not transpose_x:
        xv = _transpose_to_sbuf(xv, location)
    # The Tensor engine reads its operands from SBUF only: one in PSUM (an nl.transpose, an earlier matmul's result)
    # is copied out first, as the compiler must.
    xv, yv = _in_sbuf(xv, location), _in_sbuf(yv, location)
    return LazyMatmul(xv, yv, {}, location)


def _in_sbuf(view, location):
    if view.st.space != "psum":
        return view
    out = _result_tile(_tile_shape(view), view.dtype, location)
    _emit.emit("tensor_copy", (out, view), {}, location)
    return out


def _transpose_to_sbuf(xv, location):
    t = transpose(xv, location=location)
    out = _result_tile(t.shape, xv.dtype, location)
    _emit.emit("tensor_copy", (out, t), {}, location)
    return out


def transpose(x, dtype=None, mask=None, engine=None, location=None, **kw):
    """x.T of a tile of at most 128 x 128: nc_transpose on Tensor into PSUM (Vector: 32 x 32)."""
    location = location or user_location()
    xv = _operand(x, "nl.transpose")
    shape = _tile_shape(xv)
    if len(shape) != 2:
        fail(f"nl.transpose of a {len(shape)}-d tile: transpose 2-d tiles", location)
    space = "sbuf" if _emit.engine_word(engine) == "vector" else "psum"
    out = _result_tile((shape[1], shape[0]), _out_dtype(dtype, xv) if dtype else
                       (DTYPES["float32"] if space == "psum" and xv.dtype.name == "fp32" else xv.dtype), location, space)
    _emit.emit("nc_transpose", (out, xv), {"engine": engine}, location)
    return out


def broadcast_to(x, shape, location=None):
    """``t.broadcast_to(shape)`` / ``nl.broadcast_to``: size-1 dims repeated. Along free dims and in
    HBM a stride-0 view; a one-partition on-chip tile onto P partitions is computed, as the compiler
    does it: the Tensor engine multiplies a ones row (out[P, F] = ones[1, P].T @ x[1, F], 512 columns
    a matmul, into PSUM) and the Scalar engine copies the result back to SBUF."""
    location = location or user_location()
    xv = _operand(x, "broadcast_to")
    shape = tuple(int(s) for s in (shape.shape if hasattr(shape, "shape") else shape))
    if xv.ndim == 1 and xv.pdim == 0 and len(shape) > 1 and xv.st.space != "hbm":
        # An on-chip tile narrowed to its partitions (``s[grp, i_p, 0]``) is one element per partition: [P, 1]
        # (nki-samples' allocated attention broadcasts its softmax sums so).
        xv = View(xv.st, xv.offset, xv.dims + [[1, 1]] * (len(shape) - 1), 0, xv.pstart)
    if len(shape) != xv.ndim:
        fail(f"broadcast_to{list(shape)} of a {xv.ndim}-d tensor {list(xv.shape)}", location)
    v = xv
    for d, (have, want) in enumerate(zip(xv.shape, shape)):
        if have == want or (d == xv.pdim and xv.st.space != "hbm"):
            continue
        if have != 1:
            fail(f"broadcast_to{list(shape)}: dim {d} of {list(xv.shape)} is {have}, not 1", location)
        v = v.broadcast(d, want)
    if v.pdim is None or v.st.space == "hbm" or shape[v.pdim] == v.shape[v.pdim]:
        return v
    if v.shape[v.pdim] != 1 or v.ndim != 2 or v.pdim != 0:
        fail(f"broadcast_to{list(shape)}: across partitions from a [1, F] tile only (got {list(v.shape)})",
             location)
    if not v.dtype.is_float:
        fail("broadcast_to across partitions of an integer tile: broadcast it in HBM (a stride-0 load)", location)
    parts, width = shape
    ones = _ones_row(parts, v.dtype, location)
    out = _result_tile((parts, width), v.dtype, location)
    step = _trace.current().target.moving_fmax
    for c0 in range(0, width, step):
        w = step if width - c0 > step else width - c0   # (min is nl.min here)
        acc = _result_tile((parts, w), DTYPES["float32"], location, "psum")
        _emit.emit("nc_matmul", (acc, ones, v[:, c0:c0 + w]), {}, location)
        # The PSUM evacuation on the Scalar engine (its identity), not Vector: the compiler keeps the engines a kernel
        # saturates free of work the kernel did not write. Evidence: the fused-Mamba tutorial's v2 kernel (two
        # partition broadcasts per four Vector passes) runs 99.6 % VectorE-active at the time of its four Vector
        # passes alone (trnsim's fidelity table, tier P).
        _emit.emit("activation", (out[:, c0:c0 + w], "copy", acc), {}, location)
    return out


def _ones_row(parts, dtype, location):
    """The ones row a partition broadcast multiplies by."""
    ones = _result_tile((1, parts), dtype, location)
    _emit.emit("memset", (ones, 1.0), {}, location)
    return ones


# ---- loads, stores, assignment

def _hbm_2d(v):
    """A 0-d or 1-d HBM view as the tile it loads into / stores from: one element is [1, 1], a contiguous vector a [1, F] row;
    a strided one that fits the partitions (a column ``A[c0:c1, j]`` of a matrix, the per-partition
    scale or bias the samples load this way) is a [P, 1] column."""
    if v.ndim > 1:
        return v
    if v.ndim == 0:
        return View(v.st, v.offset, [[0, 1], [1, 1]], None, 0)   # one element (t[b, h]): a [1, 1] tile
    stride, n = v.dims[0]
    if stride not in (0, 1) and n <= _trace.current().target.pmax:
        return View(v.st, v.offset, [[stride, n], [1, 1]], None, 0)
    return View(v.st, v.offset, [[0, 1], v.dims[0]], None, 0)


def load(src, mask=None, dtype=None, **kw):
    location = user_location()
    if isinstance(src, _core.IndirectRows):
        # Rows picked by an SBUF index tile: the DMA's gather (descriptors from the indices at run time).
        tv, iv = src.table, _operand(src.indices, "nl.load indices")
        if tv.ndim < 2:
            fail("nl.load of indirect rows: a table view of rows and columns", location)
        t = _trace.current().tile((iv.shape[iv.pdim],) + tuple(tv.shape[1:]), tv.dtype, "sbuf", 0,
                                  location).full_view()
        dst = _core.apply_mask(t, mask)
        if dst is None:
            return t
        # The mask keeps the same partitions of the index tile as of the rows (a partial last tile).
        _emit.emit("dma_gather", (dst, tv, iv if mask is None else _core.apply_mask(iv, mask)), {}, location)
        if dtype is not None and as_dtype(dtype) is not tv.dtype:
            out = _result_tile(t.shape, dtype, location)
            _emit.emit("tensor_copy", (out, t), {"mask": mask}, location)
            return out
        return t
    sv = _operand(src, "nl.load")
    if sv.st.space != "hbm":
        fail("nl.load reads HBM; copy on-chip tiles with nl.copy", location)
    sv = _hbm_2d(sv)
    shape = sv.shape
    t = _trace.current().tile(shape, sv.dtype, "sbuf", 0, location).full_view()
    t.vars = sv.vars
    # The mask goes with the instruction: a false one (a Python condition) loads nothing, and the result keeps
    # the mask, so assigning it is skipped too.
    _emit.emit("dma_copy", (t, sv), {"mask": mask}, location)
    if dtype is not None and as_dtype(dtype) is not sv.dtype:
        out = _result_tile(shape, dtype, location)
        _emit.emit("tensor_copy", (out, t), {"mask": mask}, location)
        return out
    return t


def load_transpose2d(src, mask=None, dtype=None, **kw):
    """Beta 1: HBM src [F, P] into an SBUF tile [P, F]: ``dma_transpose`` where the target's DMA
    transposes (trn2+, 2-byte dtypes), else a DMA whose HBM side walks the columns (element-sized
    descriptors: correct, and as slow as that is)."""
    location = user_location()
    sv = _operand(src, "nl.load_transpose2d")
    if sv.st.space != "hbm" or sv.ndim != 2:
        fail("nl.load_transpose2d reads a 2-d HBM tensor", location)
    if mask is not None:
        sv = _core.apply_mask(sv, mask)
        if sv is None:
            fail("nl.load_transpose2d: the mask keeps nothing", location)
    f, p = sv.shape
    trace = _trace.current()
    t = trace.tile((p, f), sv.dtype, "sbuf", 0, location).full_view()
    if trace.target.dma_transpose and sv.dtype.size_bytes == 2:
        _emit.emit("dma_transpose", (t, sv), {}, location)
    else:
        columns = View(sv.st, sv.offset, [[sv.dims[1][0], p], [sv.dims[0][0], f]], None, 0)
        _emit.emit("dma_copy", (t, columns), {}, location)
    if dtype is not None and as_dtype(dtype) is not sv.dtype:
        out = _result_tile((p, f), dtype, location)
        _emit.emit("tensor_copy", (out, t), {}, location)
        return out
    return t


def store(dst, value, mask=None, **kw):
    location = user_location()
    if isinstance(mask, (bool, np.bool_)) and not mask:
        return   # a Python condition that is false: nothing is stored
    if isinstance(dst, _core.IndirectRows):
        # Rows picked by an SBUF index tile: the DMA's scatter.
        vv = _operand(value, "nl.store value")
        if vv.st.space == "psum" or vv.dtype is not dst.dtype:
            staged = _result_tile(_tile_shape(vv), dst.dtype, location)
            _emit.emit("tensor_copy", (staged, vv), {"mask": mask}, location)
            vv = staged
        _emit.emit("dma_scatter", (dst.table, _core.apply_mask(vv, mask),
                                   _operand(dst.indices, "nl.store indices")), {}, location)
        return
    dv = _operand(dst, "nl.store dst")
    if dv.st.space != "hbm":
        fail("nl.store writes HBM; assign on-chip tiles with t[...] = value", location)
    _store(dv, value, mask, location)


def _store(dv, value, mask, location):
    if _is_number(value):
        tile_ = full(_tile_shape(_hbm_2d(dv)), value, dv.dtype)
        value = tile_
    vv = _operand(value, "nl.store value")
    if vv.st.space == "psum" or vv.dtype is not dv.dtype:
        # DMA neither reads PSUM nor converts: a Vector copy (with the cast) first, as the compiler does.
        staged = _result_tile(_tile_shape(vv), dv.dtype, location)
        _emit.emit("tensor_copy", (staged, vv), {"mask": mask}, location)
        vv = staged
    dv = _hbm_2d(dv)
    _emit.emit("dma_copy", (_core.apply_mask(dv, mask), _core.apply_mask(vv, mask)), {}, location)


class LoopReduce:
    """Beta-1 ``nl.loop_reduce(x, op, loop_indices)``: ``target[...] = loop_reduce(x)`` combines x
    into target (target op= x) on each iteration."""
    __slots__ = ("value", "op", "dtype_")

    def __init__(self, value, op, dtype):
        self.value, self.op, self.dtype_ = value, op, dtype


def loop_reduce(x, op, loop_indices=None, dtype=None, mask=None, **kw):
    return LoopReduce(x, _emit.op_name(op, "nl.loop_reduce"), dtype)


def assign(target, value, mask=None, location=None, temporary=False):
    """``target[...] = value``: writes into target, folding the producing instruction when the value
    is a temporary (``t[...] = nl.load(...)`` is one DMA into t, not a DMA and a copy)."""
    location = location or user_location()
    if isinstance(value, _core._AccumulatedView) and value.st is target.st:
        return
    if isinstance(value, LazyMatmul):
        if value._view is None and temporary:
            value.write(target, False)
            return
        value = value._trnsim_view()   # the kernel keeps the result: it gets its own PSUM tile
    if isinstance(value, LoopReduce):
        v = _operand(value.value, "nl.loop_reduce")
        if target.st.pending_zero:
            _emit._flush_zero(target.st, _trace.current(), location)
        _emit.emit("tensor_tensor", (target, target, v, value.op), {"mask": mask}, location)
        return
    if target.st.space == "hbm":
        _store(target, value, mask, location)
        return
    if _is_number(value):
        _emit.emit("memset", (target, float(value)), {"mask": mask}, location)
        return
    vv = _operand(value, "assignment")
    trace = _trace.current()
    if (vv.st.producer == len(trace.body) - 1 and vv.st.producer >= 0 and vv.is_whole()
            and vv.st.dtype is target.st.dtype and _prod(vv.shape) == _prod(target.shape)
            and vv.dims[vv.pdim][1] == target.dims[target.pdim][1] and temporary
            and (vv.st.space != "psum" or target.st.space == "psum")
            and not _cse.shared(trace, target.st) and not _cse.shared(trace, vv.st)):
        # (a PSUM temporary, an nc_transpose's, is not folded into an SBUF target: Tensor writes PSUM)
        old = f"dst={_emit.ap_text(vv)}"
        text = trace.body[-1]
        if old in text and vv.st.first == vv.st.last == len(trace.body) - 1:
            trace.body[-1] = text.replace(old, f"dst={_emit.ap_text(target)}", 1)
            _cse.wrote(trace, [vv.st, target.st])   # the value is in the target now, never in the temporary
            target.st.written = True
            vv.st.producer = -1
            vv.st.first = vv.st.last = -1   # the temporary is never touched: it takes no memory
            if target.st.space != "hbm":
                trace.touch(target.st, len(trace.body) - 1)
            return
    if mask is None and vv.st.mask is not None and vv.is_whole():
        mask = vv.st.mask   # a masked result: the masked-off part of the target keeps its values
    if vv.st.space == "hbm":
        _emit.emit("dma_copy", (target, vv), {"mask": mask}, location)
    else:
        _emit.emit("tensor_copy", (target, vv), {"mask": mask}, location)


def accumulate(target, value, location=None, temporary=True):
    """``target += value``: a matmul accumulates in PSUM; anything else is an add on Vector."""
    location = location or user_location()
    if isinstance(value, LazyMatmul) and value._view is None and temporary:
        value.write(target, True)
        return
    vv = _operand(value, "+=")
    if target.st.pending_zero:
        _emit._flush_zero(target.st, _trace.current(), location)
    _emit.emit("tensor_tensor", (target, target, vv, "add"), {}, location)


# ---- compound ops

def softmax(x, axis=-1, dtype=None, mask=None, **kw):
    """Row softmax over the free axis: max (Vector), exp(x - max) with the row sum (Scalar),
    1/sum (Vector), scale (Vector)."""
    location = user_location()
    xv = _operand(x, "nl.softmax")
    rows = xv.shape[xv.pdim]
    neg_max = _result_tile((rows, 1), DTYPES["float32"], location)
    axes = _free_axes(xv, axis, "nl.softmax", location)
    if len(axes) != xv.ndim - 1:
        fail("nl.softmax over some of several free axes is not supported", location)
    _emit.emit("tensor_reduce", (neg_max, "maximum", xv, list(range(1, 1 + len(_core.merge_dims(
        [d for i, d in enumerate(xv.dims) if i != xv.pdim and d[1] != 1]))))), {"negate": True}, location)
    e = _result_tile(_tile_shape(xv), DTYPES["float32"], location)
    total = _result_tile((rows, 1), DTYPES["float32"], location)
    _emit.emit("activation", (e, "exp", xv), {"bias": neg_max, "reduce_op": "add", "reduce_res": total}, location)
    inv = _result_tile((rows, 1), DTYPES["float32"], location)
    _emit.emit("reciprocal", (inv, total), {}, location)
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
    _emit.emit("tensor_scalar", (out, e, "multiply", inv), {}, location)
    return out


def rms_norm(x, w, axis=-1, n=None, epsilon=1e-6, dtype=None, **kw):
    """x / sqrt(mean(x^2) + eps) * w over the free axis in three instructions, as a hand-scheduled kernel does it
    (examples/nki/rmsnorm.py's rmsnorm_isa; tests/nki/test_nki_lowering_parity.py): the mean of squares by one Scalar
    pass (square of x / sqrt(n), summed by the activation's accumulator), 1 / sqrt(ms + eps) by one two-op
    tensor_scalar, and (x * rrms) * w by one scalar_tensor_tensor (Vector). w is [P, F] or a [1, F] row that the
    kernel broadcast (``w.broadcast(0, P)`` or a broadcast load)."""
    location = user_location()
    xv = _operand(x, "nl.rms_norm")
    rows = xv.shape[xv.pdim]
    count = n or _prod([s for i, s in enumerate(xv.shape) if i != xv.pdim])
    sq = _result_tile(_tile_shape(xv), DTYPES["float32"], location)
    mean_sq = _result_tile((rows, 1), DTYPES["float32"], location)
    _emit.emit("activation", (sq, "square", xv), {"scale": 1.0 / float(np.sqrt(count)), "reduce_op": "add",
                                                   "reduce_res": mean_sq}, location)
    rrms = _result_tile((rows, 1), DTYPES["float32"], location)
    _emit.emit("tensor_scalar", (rrms, mean_sq, "add", float(epsilon)), {"op1": "power", "operand1": -0.5}, location)
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
    wv = _operand(w, "nl.rms_norm w")
    _emit.emit("scalar_tensor_tensor", (out, xv, "multiply", rrms, "multiply", wv), {}, location)
    return out


def where(condition, x, y, dtype=None, mask=None, **kw):
    """condition ? x : y: y copied (Vector), then x copied where condition (tensor_copy_predicated)."""
    location = user_location()
    cv = _operand(condition, "nl.where condition")
    out = _result_tile(_tile_shape(cv), _out_dtype(dtype, *(v for v in (x, y) if isinstance(v, View))), location)
    if _is_number(y):
        _emit.emit("memset", (out, float(y)), {"mask": mask}, location)
    else:
        _emit.emit("tensor_copy", (out, _operand(y, "nl.where y")), {"mask": mask}, location)
    src = float(x) if _is_number(x) else _operand(x, "nl.where x")
    _emit.emit("tensor_copy_predicated", (out, src, cv), {"mask": mask}, location)
    return out


# ---- random numbers (the engines' PRNGs: deterministic per program, isa/rng.h)

def dropout(x, rate, dtype=None, mask=None, **kw):
    """Elements of x zeroed with probability ``rate`` (not rescaled): ``dropout`` on Vector."""
    location = user_location()
    xv = _operand(x, "nl.dropout")
    out = _result_tile(_tile_shape(xv), _out_dtype(dtype, xv), location)
    _emit.emit("dropout", (out, xv, rate if _is_number(rate) else _operand(rate, "nl.dropout rate")),
               {"mask": mask}, location)
    return out


def rand(shape, dtype=None, buffer=None, **kw):
    """Uniform [0, 1) values: ``rand2`` on trn3's Vector engine; before trn3, 32 random bits from
    ``rng`` (Vector), their top 24 kept (a right shift) and scaled by 2^-24, exact in fp32 and so
    below 1 (Vector)."""
    location = user_location()
    dtype = as_dtype(dtype or DTYPES["float32"])
    shape, _ = _shape(shape)
    trace = _trace.current()
    out = trace.tile(shape, dtype, "sbuf", 0, location).full_view()
    if trace.target.generation == "trn3":
        _emit.emit("rand2", (out, 0.0, 1.0), {}, location)
        return out
    bits = trace.tile(shape, DTYPES["uint32"], "sbuf", 0, location).full_view()
    _emit.emit("rng", (bits,), {}, location)
    _emit.emit("tensor_scalar", (bits, bits, "right_shift", 8), {}, location)
    _emit.emit("tensor_scalar", (out, bits, "multiply", 2.0 ** -24), {}, location)
    return out


def random_seed(seed, **kw):
    """Seeds the Vector engine's PRNG from seed[0, 0] (an int32 / uint32 tile): ``set_rng_seed``."""
    location = user_location()
    _emit.emit("set_rng_seed", (_operand(seed, "nl.random_seed"),), {}, location)


def device_print(prefix, x, **kw):
    """Prints the tile's values when the kernel has run (values mode): a DMA of it to a scratch HBM
    tensor at this point of the program (its time is in the kernel's latency)."""
    location = user_location()
    xv = _operand(x, "nl.device_print")
    trace = _trace.current()
    if xv.st.space == "hbm":
        st = xv.st
        trace.prints.append((str(prefix), st.name, xv))
        return
    if xv.st.space == "psum":
        xv = copy(xv)
    st = trace.hbm_tensor(_tile_shape(xv), xv.dtype, f"print{len(trace.prints)}", role="output")
    trace.prints.append((str(prefix), st.name, None))
    _emit.emit("dma_copy", (st.full_view(), xv), {}, location)


def gather_flattened(data, indices, axis=0, mask=None, dtype=None, **kw):
    """out[p, j...] = data[p, indices[p, j...]] with data's free dims flattened (uint32 indices):
    ``nc_n_gather`` on GpSimd (out-of-range indices read garbage on hardware, and fail here)."""
    location = user_location()
    dv, iv = _operand(data, "nl.gather_flattened data"), _operand(indices, "nl.gather_flattened indices")
    for what, v in (("data", dv), ("indices", iv)):
        if v.st.space != "sbuf":
            fail(f"nl.gather_flattened {what}: an SBUF tile (GpSimd reads SBUF)", location)
    out = _result_tile(_tile_shape(iv), dv.dtype, location)
    _emit.emit("nc_n_gather", (out, dv, iv), {"mask": mask}, location)
    if dtype is not None and as_dtype(dtype) is not dv.dtype:
        cast = _result_tile(_tile_shape(iv), dtype, location)
        _emit.emit("tensor_copy", (cast, out), {"mask": mask}, location)
        return cast
    return out


def shared_constant(constant, dtype=None, **kw):
    """An HBM tensor holding a host array known when the kernel is traced (``nl.shared_constant(
    np.identity(128, dtype=np.int8), dtype=nl.bfloat16)``): an input of the program with those values; a path
    names a ``.npy`` file holding them."""
    import os
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(os.fspath(constant))
    arr = np.asarray(constant)
    d = as_dtype(dtype if dtype is not None else arr.dtype)
    if d.numpy is None:
        fail(f"nl.shared_constant: no host type for {d.nki_name}")
    trace = _trace.current()
    st = trace.hbm_tensor(arr.shape if arr.ndim else (1,), d, "const", role="input")
    if not hasattr(trace, "constants"):
        trace.constants = {}
    trace.constants[st.name] = arr.astype(d.numpy).reshape(st.shape)
    return st.full_view()


def shared_identity_matrix(n, dtype=None, **_):
    """An [n, n] identity in SBUF: a view of one 128 x 128 identity per dtype (default uint8), loaded from an HBM
    constant the first time a kernel asks (as the compiler caches it)."""
    location = user_location()
    d = as_dtype(dtype if dtype is not None else DTYPES["uint8"])
    trace = _trace.current()
    if not hasattr(trace, "identity_tiles"):
        trace.identity_tiles = {}
    pmax = 128
    n = int(n)
    if not 0 < n <= pmax:
        fail(f"nl.shared_identity_matrix: n={n} must be 1..{pmax}", location)
    tile = trace.identity_tiles.get(d.nki_name)
    if tile is None:
        const = shared_constant(np.eye(pmax), dtype=d)
        tile = ndarray((pmax, pmax), d, buffer=sbuf)
        _emit.emit("dma_copy", (tile, const), {}, location)
        trace.identity_tiles[d.nki_name] = tile
    return tile[0:n, 0:n]


def finfo(dtype):
    """Machine limits of a float dtype (``nl.finfo(nl.bfloat16).min``), as NumPy / ml_dtypes give them."""
    d = as_dtype(dtype)
    if d.numpy is None or not d.is_float:
        raise TypeError(f"nl.finfo: {d.nki_name} is not a float dtype with a host type")
    import ml_dtypes
    info = ml_dtypes.finfo(d.numpy)

    class _Finfo:
        """The limits as Python floats (usable wherever a kernel passes a number)."""
    limits = _Finfo()
    limits.bits, limits.dtype = int(info.bits), dtype
    for name in ("min", "max", "eps", "tiny", "smallest_normal", "resolution"):
        setattr(limits, name, float(getattr(info, name)))
    return limits


def static_cast(array, dtype):
    """Beta 1, host side: a NumPy array in another dtype (bf16 / fp8 through ml_dtypes)."""
    d = as_dtype(dtype)
    if d.numpy is None:
        raise TypeError(f"nl.static_cast: no host type for {d.nki_name}")
    return np.asarray(array).astype(d.numpy)


# nki.language API of NKI 0.7 that this front-end does not offer yet (trnsim.nki.missing_api()).
MISSING = [
    "Tensor.ap(vector_offset=) of an on-chip tensor (HBM indirect DMA, any indirect_dim, works)",
    "Tensor.indirect: tensor indirection of compute-engine operands (trn3 column gather/scatter by a uint16 index "
    "tile; HBM row gathers by an index tile, table[idx_tile, :], work)",
    "nl.all_reduce across programs that run one after another (an SPMD grid that is not an LNC launch; "
    "kernel[lnc] works)",
]


def __getattr__(name):
    # nl.range (NKI 0.7: Python's range, unrolled while tracing) is served here, not bound in this module,
    # where it would shadow the builtin every function above uses.
    if name == "range":
        return _builtins.range
    raise AttributeError(f"module 'nki.language' has no attribute {name!r}")
