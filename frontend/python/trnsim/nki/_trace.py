"""The program a kernel call traces: HBM tensors, on-chip tiles and the instruction stream, turned
into ``.tasm`` text whose every instruction line maps back to the kernel's ``file.py:line``."""
import re
import threading

from . import _core, _cse, _schedule, _spill
from ._core import KernelError, LruAllocator, Storage, fail, user_location

_local = threading.local()


def current():
    trace = getattr(_local, "trace", None)
    if trace is None:
        raise KernelError(f"{_core.where()}: an NKI call outside a kernel: call it from an @nki.jit function")
    return trace


def active():
    return getattr(_local, "trace", None)


def _dtype_at(dtype, location):
    """as_dtype, its error naming the kernel's line."""
    try:
        return _core.as_dtype(dtype)
    except (KeyError, TypeError) as e:
        fail(str(e).strip("'\""), location)


class ConfigKeyError(KernelError):
    """A config the front-end cannot read: a key missing or not of its type (a config the C++ loader accepted always
    has them all, so this means the leaves came from somewhere else or the loader changed)."""


def _leaf(leaves, key, kind):
    """Config leaf ``key`` (``trnsim._C.config_leaves``: every value printed as text) as ``kind``: int, float or bool.
    A missing or malformed key is an error naming it, never a default."""
    text = leaves.get(key)
    if text is None:
        raise ConfigKeyError(f"config {leaves.get('name', '?')!r}: key {key!r} is missing (the NKI front-end reads it "
                             f"as {kind.__name__}) [config-key]")
    try:
        if kind is bool:
            if text not in ("true", "false"):
                raise ValueError(text)
            return text == "true"
        if kind is int:
            return int(text, 10)
        return float(text)
    except (TypeError, ValueError):
        raise ConfigKeyError(f"config {leaves.get('name', '?')!r}: key {key!r} = {text!r} is not a "
                             f"{kind.__name__} [config-key]") from None


# What the tracer reads from the hardware config: attribute -> (config key, type). The one place the front-end
# turns the loader's leaves into values; every key here is one the C++ loader requires (config/hardware_config.h).
TARGET_KEYS = {
    "generation": ("generation", str),
    "pmax": ("core.sbuf.partitions", int),
    "sbuf_bytes": ("core.sbuf.bytes_per_partition", int),
    "psum_partitions": ("core.psum.partitions", int),
    "psum_bytes": ("core.psum.bytes_per_partition", int),
    "psum_banks": ("core.psum.banks", int),
    "psum_bank_bytes": ("core.psum.bank_bytes", int),
    "stationary_fmax": ("core.tensor.max_stationary_free_size", int),
    "moving_fmax": ("core.tensor.max_moving_free_size_by_psum_dtype.fp32", int),
    "pe_rows": ("core.tensor.pe_rows", int),
    "cores": ("chip.physical_cores", int),
    "hbm_gbps": ("hbm.bandwidth_gbps", float),
    "dma_transpose": ("core.dma.transpose_supported", bool),
    "hbm_stacks": ("hbm.stacks", int),
    "hardware_dge_count": ("core.dma.hardware_dge_per_core", int),
    "lnc": ("chip.default_logical_core_size", int),
    "hbm_capacity_bytes": ("hbm.capacity_bytes", int),
    "dma_queues": ("core.dma.queues_per_engine", int),
}


class Target:
    """What the tracer needs from the hardware config (``trnsim._C.config_leaves``), typed (TARGET_KEYS)."""

    def __init__(self, config, overrides, leaves=None):
        from .. import _C
        if leaves is None:
            leaves = _C.config_leaves(str(config), list(overrides or []))
        self.config, self.overrides = str(config), list(overrides or [])
        for key in ("name", "hash"):
            if key not in leaves:
                raise ConfigKeyError(f"config leaves lack {key!r} [config-key]")
        self.name, self.hash = leaves["name"], leaves["hash"]
        for attribute, (key, kind) in TARGET_KEYS.items():
            if kind is str:
                if not leaves.get(key):
                    raise ConfigKeyError(f"config {self.name!r}: key {key!r} is missing [config-key]")
                setattr(self, attribute, leaves[key])
            else:
                setattr(self, attribute, _leaf(leaves, key, kind))
        self.hardware_dge = self.hardware_dge_count > 0


# A bound on the instructions one trace records, so that a kernel far beyond what the host can hold (a sweep's
# "invalid" size) is an error, not the OOM killer: a traced instruction holds about 4 KiB of host memory through
# tracing and simulation (measured: the 166k-instruction tiled matmul of examples/nki), so the default is ~8 GiB.
DEFAULT_MAX_TRACED_INSTRUCTIONS = 1 << 21


# A bound on the host memory behind one trace's HBM tensors: the simulator holds every HBM tensor's bytes in host
# memory from the start (isa/core_state.cpp), and a values run copies the outputs back once more, so a kernel whose
# HBM tensors are near the host's memory is refused when traced, naming the tensor's line, instead of failing in
# the allocator. A bound of trnsim's host, not of the hardware (the simulated HBM's own bound is hbm.capacity_bytes).
DEFAULT_MAX_HOST_HBM_BYTES = 4 << 30


def max_host_hbm_bytes():
    return _core.env_int("TRNSIM_NKI_MAX_HOST_HBM_BYTES", DEFAULT_MAX_HOST_HBM_BYTES)


def _gib(n):
    return f"{n / (1 << 30):,.2f} GiB"


def max_traced_instructions():
    return _core.env_int("TRNSIM_NKI_MAX_TRACED_INSTRUCTIONS", DEFAULT_MAX_TRACED_INSTRUCTIONS)


class Trace:
    def __init__(self, name, target, program_id=(), num_programs=()):
        self.name = re.sub(r"[^A-Za-z0-9_.-]", "_", name) or "kernel"
        self.target = target
        self.program_id, self.num_programs = tuple(program_id), tuple(num_programs)
        self.hbm = []            # Storage, in declaration order
        self.roles = {}          # hbm name -> "input" | "output" | "private" | internal
        self.body = []           # instruction lines
        self.locs = []           # (file, line) per instruction
        self.prints = []         # nl.device_print: (instruction index, prefix, storage name)
        self._names = set()
        self.tiles = []          # on-chip Storage, in creation order
        self.transpose_flops = 0   # HFU: the Tensor engine's transposes (identity matmuls)
        self.pending = []          # lazy matmul results not written yet (language.LazyMatmul)
        self.registers = 0         # registers handed out (nisa.register_alloc); the ISA has 64 per core
        self.free_registers = []   # registers whose VirtualRegister died where no open loop reads them again
        self.loops = []            # instruction indices of the open compiled loops' begins
        self.aliased = set()       # tiles seen through view(dtype): never renamed (their aliases keep the name)
        self.max_instructions = max_traced_instructions()
        self.hbm_bytes = 0         # bytes of the HBM tensors declared so far (inputs, outputs, internal)

    # -- context
    def __enter__(self):
        self._previous = active()
        _local.trace = self
        return self

    def __exit__(self, *exc):
        _local.trace = self._previous
        return False

    # -- names
    def unique(self, base):
        base = re.sub(r"[^A-Za-z0-9_]", "_", base) or "t"
        if base[0].isdigit():
            base = "t" + base
        name, n = base, 0
        while name in self._names:
            n += 1
            name = f"{base}_{n}"
        self._names.add(name)
        return name

    # -- HBM
    def start_instance(self, index, program_id):
        """The next SPMD instance of this program (``nl.program_id`` reads it); its ``nl.shared_hbm`` tensors are
        the first instance's (one tensor for every instance, NKI: "visible to all kernel instances")."""
        self.program_id = tuple(program_id)
        self.instance_index = index
        self.instance_shared = 0
        if index == 0:
            self.first_instance_shared = []

    def hbm_tensor(self, shape, dtype, name=None, role="internal"):
        if role == "output" and getattr(self, "instance_index", 0) > 0:
            shared = self.first_instance_shared
            k = self.instance_shared
            self.instance_shared += 1
            if k >= len(shared) or tuple(shared[k].shape) != tuple(shape) or shared[k].dtype is not _dtype_at(
                    dtype, user_location()):
                fail(f"SPMD instance {self.program_id} makes a shared_hbm tensor {list(shape)} the first instance did "
                     f"not make in that order: every instance must allocate the same shared tensors [grid]")
            return shared[k]
        location = user_location()
        st = Storage(self, "hbm", _dtype_at(dtype, location), shape, None)
        self._check_hbm_bytes(st, location)
        base = name or f"hbm{len(self.hbm)}"
        if re.match(r"^(sb|ps)_\d", base):
            base = "h_" + base   # on-chip tiles are named sb_N / ps_N
        st.name = self.unique(base)
        self.hbm.append(st)
        self.roles[st.name] = role
        if role == "output" and getattr(self, "instance_index", None) == 0:
            self.first_instance_shared.append(st)
        return st

    def _check_hbm_bytes(self, st, location):
        """A new HBM tensor within the simulated HBM (hbm.capacity_bytes) and the host bound (max_host_hbm_bytes)."""
        size = st.dtype.size_bytes
        for n in st.shape:
            size *= int(n)
        total = self.hbm_bytes + size
        what = f"HBM tensor {st.dtype.nki_name}{list(st.shape)} ({_gib(size)})"
        if total > self.target.hbm_capacity_bytes:
            fail(f"{what}: the kernel's HBM tensors would hold {_gib(total)}, more than the {self.target.name} HBM "
                 f"({_gib(self.target.hbm_capacity_bytes)}, hbm.capacity_bytes) [hbm-capacity]", location)
        bound = max_host_hbm_bytes()
        if total > bound:
            fail(f"{what}: the kernel's HBM tensors would hold {_gib(total)}, more host memory than trnsim gives one "
                 f"kernel ({_gib(bound)}; the simulator holds every HBM tensor in host memory); this is a bound of "
                 f"trnsim's, not of the hardware: set TRNSIM_NKI_MAX_HOST_HBM_BYTES to raise it [host-memory]",
                 location)
        self.hbm_bytes = total

    # -- on-chip
    def tile(self, shape, dtype, space, pdim=0, location=None):
        """A tile; its address is chosen after tracing (allocate())."""
        location = location or user_location()
        if type(dtype) is not _core.DType:
            dtype = _dtype_at(dtype, location)
        shape = tuple([int(s) for s in shape])
        if not shape:
            fail("a tile needs at least a partition dim", location)
        if min(shape) <= 0:
            fail(f"tile shape {list(shape)} has an empty dim", location)
        limit = self.target.pmax if space == "sbuf" else self.target.psum_partitions
        if shape[pdim] > limit:
            fail(f"tile {dtype.nki_name}{list(shape)}: partition dim {shape[pdim]} exceeds {limit} partitions "
                 f"[partition-limit]", location)
        st = Storage(self, space, dtype, shape, pdim)
        capacity = self.target.sbuf_bytes if space == "sbuf" else self.target.psum_bytes
        # A tile with leading block dims is placed block by block (below): one block must fit, not all of them
        # at once (nki-samples' allocated attention: a [2, 8, 128, 512] fp32 PSUM tile of 16 one-bank blocks on
        # a PSUM of 8 banks, live a few at a time).
        blocks = max(1, st.block_count())
        if st.per_partition // blocks * dtype.size_bytes > capacity:
            what = f"each of its {blocks} blocks" if blocks > 1 else "it"
            fail(f"{space.upper()} overflow: tile {dtype.nki_name}{list(shape)}: {what} needs "
                 f"{st.per_partition // blocks * dtype.size_bytes} bytes per partition, the {space.upper()} has "
                 f"{capacity} [{space}-capacity]", location)
        st.location = location
        st.loops = tuple(self.loops)
        st.name = self._next_tile_name(space)
        self.tiles.append(st)
        if st.block_count() > 1:
            st.blocks = {}
        return st

    def _next_tile_name(self, space):
        return f"{'sb' if space == 'sbuf' else 'ps'}_{len(self.tiles)}"

    def block_tile(self, st, index):
        """Block ``index`` of tile ``st`` (leading block dims) as a tile of its own, made on first use."""
        child = st.blocks.get(index)
        if child is None:
            child = Storage(self, st.space, st.dtype, st.shape[st.pdim:], 0)
            child.location, child.loops = st.location, st.loops
            child.name = self._next_tile_name(st.space)
            child.block_of = (st, index)
            self.tiles.append(child)
            st.blocks[index] = child
        return child

    def rename(self, st):
        """Tile ``st`` gets a new name and starts a new live range; the instructions already emitted keep its old
        name, now a tile of its own (placed separately by allocate())."""
        old = _core.Storage.__new__(_core.Storage)
        for slot in _core.Storage.__slots__:
            if slot != "__weakref__":
                setattr(old, slot, getattr(st, slot))
        new_name = self._next_tile_name(st.space)
        self.tiles.append(old)
        st.name = new_name
        st.first = st.last = st.producer = -1
        st.region = st.mask = st.matmul_written = None
        st.written = st.pending_zero = False

    def alias(self, st, dtype):
        """The same bytes seen as another dtype (``t.view(dtype)``): the last dim scales by the size ratio."""
        root = st.base or st
        shape = list(st.shape)
        if dtype.size_bytes != st.dtype.size_bytes:
            last = len(shape) - 1
            if last == st.pdim:
                fail("view(dtype) to another size needs a free dim last")
            if shape[last] * st.dtype.size_bytes % dtype.size_bytes:
                fail(f"view({dtype.nki_name}): the last dim of {st.dtype.nki_name}{list(st.shape)} is not a whole "
                     f"number of {dtype.size_bytes}-byte elements")
            shape[last] = shape[last] * st.dtype.size_bytes // dtype.size_bytes
        alias = Storage(self, st.space, dtype, shape, st.pdim)
        alias.base = root
        self.aliased.add(root)
        alias.location = user_location()
        if st.space == "hbm":
            # The same allocation: its access patterns name the tensor and read it as this dtype
            # (``name{offset=O, dtype=D, ap=...}``), so the kernel's inputs and outputs stay one tensor.
            alias.name = root.name
            return alias
        alias.name = f"{root.name}_as_{dtype.name}"
        for t in self.tiles:
            if t.name == alias.name:
                return t   # one declaration per (tile, dtype)
        self.tiles.append(alias)
        return alias

    def allocate_register(self):
        """A register number: a freed one first (the ISA has 64 per core), else a new one."""
        if self.free_registers:
            return self.free_registers.pop()
        if self.registers >= 64:
            return None
        self.registers += 1
        return self.registers - 1

    def release_register(self, index, scope):
        """A VirtualRegister allocated with open loops ``scope`` is gone. Its number is reused unless a loop
        opened after it is still open (that loop's body runs again and may read the old value)."""
        loops = tuple(self.loops)
        if len(loops) > len(scope) and loops[:len(scope)] == scope:
            return
        self.free_registers.append(index)

    def close_loop(self, begin, end):
        """A compiled loop's body runs again after its last instruction: a tile it touches stays live from the
        loop's begin to its end, unless the body writes it before reading it and uses it nowhere else (a
        temporary of one run: its bytes may serve other temporaries of the body)."""
        for t in self.tiles:
            root = t.base or t
            if root.first >= 0 and root.first <= end and root.last >= begin:
                if begin <= root.first and root.last <= end and not root.carried:
                    continue
                root.first, root.last = min(root.first, begin), max(root.last, end)

    def touch(self, st, index):
        root = st.base or st
        if root.first < 0:
            root.first = index
        root.last = index

    def allocate(self):
        """Addresses from live ranges, in program order: at each instruction the tiles it touches
        first are placed, then those it touches last are freed. A kernel that only fits when a loop's
        tiles share one buffer gets that placement instead (as the NKI compiler would)."""
        # Last resort, for a kernel that fits only when packed tightly: best fit, which fragments least (the
        # age order above spreads a loop's tiles to keep them independent, at the cost of fragmentation).
        # Blocks placed apart fragment memory more; a kernel that does not fit so keeps each tile's blocks inside
        # it (one allocation, as before blocks were split) before it gives up multi-buffering.
        ranges = {t: (t.first, t.last) for t in self.tiles if t.blocks}
        attempts = [dict(alternate_buffers=True), dict(alternate_buffers=False),
                    dict(alternate_buffers=False, best_fit=True)]
        if any(t.blocks for t in ranges):
            attempts.insert(0, dict(alternate_buffers=True, blocks_apart=True))
        for i, attempt in enumerate(attempts):
            self._tie_blocks(ranges, everywhere=not attempt.pop("blocks_apart", False))
            try:
                return self._allocate(**attempt)
            except KernelError as e:
                if i == len(attempts) - 1:
                    if getattr(self, "strict_allocation", False) or "[sbuf-capacity]" not in str(e):
                        raise
                    # The compiler spills rather than fails (trainium.md §4.1): nki._spill states its rules.
                    for t in self.tiles:
                        t.region = None
                    return _spill.allocate_with_spills(self)
                for t in self.tiles:
                    t.region = None

    def _tie_blocks(self, ranges, everywhere):
        """A tile that an instruction touched as a whole (several blocks at once), or every tile with blocks when
        ``everywhere``, keeps its blocks inside it: each block's tiles are placed at the block's bytes, and the tile
        lives as long as any of them. ``ranges``: each such tile's own live range."""
        for t, (first, last) in ranges.items():
            t.first, t.last = first, last
        for t in self.tiles:
            t.tied = False
            if t.block_of is None:
                continue
            parent = t.block_of[0]
            if everywhere or ranges[parent][0] >= 0:
                t.tied = True
                if t.first >= 0:
                    parent.first = t.first if parent.first < 0 else min(parent.first, t.first)
                    parent.last = max(parent.last, t.last)

    def _place_tied_blocks(self):
        for t in self.tiles:
            if t.tied and t.first >= 0:
                parent, index = t.block_of
                size = t.per_partition * t.dtype.size_bytes
                t.region = (parent.region[0] + index * size, size)

    def _allocate(self, alternate_buffers, best_fit=False):
        allocators = {"sbuf": LruAllocator(self.target.sbuf_bytes, _core.SBUF_ALIGN_BYTES, best_fit),
                      "psum": LruAllocator(self.target.psum_bytes, self.target.psum_bank_bytes, best_fit)}
        roots = [t for t in self.tiles if t.base is None and t.first >= 0 and not t.tied]
        starts, ends = {}, {}
        for t in roots:
            starts.setdefault(t.first, []).append(t)
            ends.setdefault(t.last, []).append(t)
        live = set()
        # The NKI compiler gives a tile allocated in a loop body more than one buffer when memory
        # allows, so one iteration's loads overlap the previous one's compute. Tiles here are traced
        # per iteration; a tile avoids the bytes of the previous tile from the same source line.
        last_by_site = {}
        for i in sorted(set(starts) | set(ends)):
            for t in starts.get(i, ()):
                allocator = allocators[t.space]
                size = allocator.size_of(t.per_partition * t.dtype.size_bytes)
                if t.address is not None and t.space == "sbuf":
                    size = t.per_partition * t.dtype.size_bytes   # a placed SBUF tile holds exactly its bytes
                if t.address is not None:
                    # A kernel-placed tile takes its bytes on every partition (conservative).
                    start = allocator.take_at(t.address[1], size)
                    if start is None:
                        clash = [_core.where(o.location) for o in live if o.space == t.space
                                 and o.region[0] < t.address[1] + size and t.address[1] < o.region[0] + o.region[1]]
                        fail(f"address={t.address}: bytes {t.address[1]}..{t.address[1] + size - 1} are held by live "
                             f"tiles ({', '.join(clash[:5]) or 'fragmented'}) [{t.space}-address]", t.location)
                else:
                    previous = last_by_site.get((t.space, t.location)) if alternate_buffers else None
                    start = allocator.take(size, (previous[0], previous[0] + previous[1]) if previous else None)
                if start is None:
                    self._overflow(t, size, allocator, live)
                t.region = (start, size)
                last_by_site[(t.space, t.location)] = t.region
                live.add(t)
            for t in ends.get(i, ()):
                allocators[t.space].release(t.region[0], t.region[1], i)
                live.discard(t)
        self._place_tied_blocks()
        decls = []
        for t in self.tiles:
            root = t.base or t
            if root.region is None or not _cse.declared(t):
                continue   # never touched (a temporary folded into its assignment), or a CSE alias (nki._cse)
            partition = root.address[0] if root.address else 0
            decls.append(f"{t.space} {t.name} : {t.dtype.name}[{t.partitions}, {t.per_partition}] "
                         f"@ {partition}:{root.region[0]}")
        return decls

    def _overflow(self, tile, size, allocator, live):
        space = tile.space.upper()
        by_line = {}
        for t in live:
            if t.space == tile.space:
                key = _core.where(t.location)
                by_line[key] = by_line.get(key, 0) + t.region[1]
        held = ", ".join(f"{k}: {v} B" for k, v in sorted(by_line.items(), key=lambda kv: -kv[1])[:5])
        unit = "in 2 KiB banks" if tile.space == "psum" else "per partition"
        fail(f"{space} overflow: tile {tile.dtype.nki_name}{list(tile.shape)} needs {size} bytes {unit}, "
             f"{allocator.capacity - allocator.in_use} of {allocator.capacity} free (largest run "
             f"{allocator.largest_free()}) while live tiles hold the rest ({held}) [{tile.space}-capacity]",
             tile.location)

    def flush_pending(self):
        """Lazy results written before another instruction may change their operands."""
        pending, self.pending = self.pending, []
        for lazy in pending:
            lazy._trnsim_view()

    # -- instructions
    def emit(self, text, location):
        if len(self.body) >= self.max_instructions:
            fail(f"kernel {self.name} traces more than {self.max_instructions:,} instructions (about "
                 f"{self.max_instructions * 4 / (1 << 20):.0f} GiB of host memory to trace and simulate); this is a "
                 f"bound of trnsim's, not of the hardware: set TRNSIM_NKI_MAX_TRACED_INSTRUCTIONS to raise it "
                 f"[trace-size]", location)
        self.body.append(text)
        self.locs.append(location)
        return len(self.body) - 1

    def tasm(self):
        head = [f"kernel {self.name}", f"target {self.target.generation}"]
        for st in self.hbm:
            role = self.roles[st.name]
            shape = ", ".join(str(s) for s in st.shape) if st.shape else "1"
            head.append(f"hbm {st.name} : {st.dtype.name}[{shape}]" + (f" {role}" if role != "internal" else ""))
        lines = head + self.allocate()
        _schedule.schedule(self, lines)
        self.first_body_line = len(lines) + 1
        return "\n".join(lines + self.body) + "\n"

    def location_of_line(self, line):
        i = line - self.first_body_line
        return self.locs[i] if 0 <= i < len(self.locs) else None

    def explain(self, message):
        """A ProgramError's text with each '(line N)' of the .tasm replaced by the kernel's file:line."""
        def repl(m):
            loc = self.location_of_line(int(m.group(2)))
            return f"{_core.where(loc)}: " if loc else m.group(0)
        out = re.sub(r"instruction (\d+) \(line (\d+)\) ", lambda m: repl(m), message)
        return out
