"""Spilling (issue 37 item 4): when the tiles live at some instruction need more SBUF than there is, the Neuron
compiler "inserts spills/refills" (trainium.md §4.1; the profiler's qSyncSpillReload / qVectorSpillReload rows) instead
of failing. This is the allocation the trace falls back to after every placement without spills failed
(Trace.allocate), unless the kernel asked for ``strict_allocation=True``.

Rules (assumed; neuronx-cc's spill heuristics are not published):
- Placement walks the program in order, best fit. When a tile does not fit, live SBUF tiles that the current
  instruction does not touch are spilled, the one used again furthest in the future first (Belady's choice), until it
  fits. PSUM is never spilled (its tiles are accumulators): a PSUM overflow stays an error.
- A spill is a DMA of the whole tile to an HBM scratch tensor of its own (``spill_N``) just before the instruction
  that needed the room; the reload a DMA back into a new tile just before the tile's next use, and every later
  instruction names the new tile. Both go to the core's last DMA queue, so they show as their own row in the trace.
  The list scheduler then moves them like any other DMA (the store as early as the tile's last reader allows, the
  reload as early as the bytes it lands in are free).
- Kernel-placed tiles (``address=``), tiles seen through ``view(dtype)`` and tiles whose blocks were placed inside
  them are never spilled.
"""
import bisect
import heapq
import re

from . import _core, _cse
from ._core import LruAllocator

_NAME_AT = re.compile(r"([A-Za-z_]\w*)\{")


def _uses(body, names):
    """Tile name -> sorted instruction indices that name it."""
    uses = {}
    for index, line in enumerate(body):
        for name in set(_NAME_AT.findall(line)):
            if name in names:
                uses.setdefault(name, []).append(index)
    return uses


def _next_use(uses, position):
    k = bisect.bisect_left(uses, position)
    return uses[k] if k < len(uses) else None


def allocate_with_spills(trace):
    """Places every tile, spilling where needed; returns the declaration lines (tiles and spill tensors) and rewrites
    ``trace.body`` / ``trace.locs`` (and the scheduling constraints' indices) with the spill and reload DMAs."""
    roots = [t for t in trace.tiles if t.base is None and t.first >= 0 and not t.tied]
    for t in trace.tiles:
        t.region = None
    origin = {t: t.name for t in roots}     # the name the kernel's instructions use for a tile's values
    uses = _uses(trace.body, set(origin.values()))
    spillable = {t.name for t in roots if t.space == "sbuf" and t.address is None and t not in trace.aliased
                 and t.blocks is None}
    allocators = {"sbuf": LruAllocator(trace.target.sbuf_bytes, _core.SBUF_ALIGN_BYTES, True),
                  "psum": LruAllocator(trace.target.psum_bytes, trace.target.psum_bank_bytes, True)}
    starts, ends, heap = {}, {}, []

    def add_event(table, position, tile):
        if position not in starts and position not in ends:
            heapq.heappush(heap, position)
        table.setdefault(position, []).append(tile)

    for t in roots:
        add_event(starts, t.first, t)
        add_event(ends, t.last, t)
    live, gone = set(), set()
    spills = []        # (position, victim, reload position, reloaded tile, its origin name, hbm tensor name)
    while heap:
        position = heapq.heappop(heap)
        for t in starts.pop(position, ()):
            allocator = allocators[t.space]
            size = allocator.size_of(t.per_partition * t.dtype.size_bytes)
            if t.address is not None:
                if t.space == "sbuf":
                    size = t.per_partition * t.dtype.size_bytes
                start = allocator.take_at(t.address[1], size)
            else:
                start = allocator.take(size, None)
            while start is None and t.address is None:
                victim, reload_at = _victim(live, t.space, position, spillable, origin, uses)
                if victim is None:
                    break
                allocators[victim.space].release(victim.region[0], victim.region[1], position)
                live.discard(victim)
                gone.add(victim)
                reloaded = _core.Storage(trace, victim.space, victim.dtype, victim.shape, victim.pdim)
                reloaded.name = trace.unique(f"{origin[victim]}_reload")
                reloaded.location = victim.location
                reloaded.first, reloaded.last = reload_at, victim.last
                origin[reloaded] = origin[victim]
                spills.append((position, victim, reload_at, reloaded, origin[victim], trace.unique("spill")))
                add_event(starts, reload_at, reloaded)
                add_event(ends, reloaded.last, reloaded)
                start = allocator.take(size, None)
            if start is None:
                trace._overflow(t, size, allocator, live)
            t.region = (start, size)
            live.add(t)
        for t in ends.pop(position, ()):
            if t in gone:
                continue
            allocators[t.space].release(t.region[0], t.region[1], position)
            live.discard(t)
    trace._place_tied_blocks()
    decls = []
    for t in trace.tiles + [s[3] for s in spills]:
        root = t.base or t
        if root.region is None or not _cse.declared(t):
            continue
        partition = root.address[0] if root.address else 0
        decls.append(f"{t.space} {t.name} : {t.dtype.name}[{t.partitions}, {t.per_partition}] "
                     f"@ {partition}:{root.region[0]}")
    for _, victim, _, _, _, hbm in spills:
        decls.append(f"hbm {hbm} : {victim.dtype.name}[{victim.partitions}, {victim.per_partition}]")
    _materialize(trace, spills, uses)
    return decls


def _victim(live, space, position, spillable, origin, uses):
    """The live tile to spill and where it is next used: not touched at ``position``, used again furthest away."""
    best, best_next = None, -1
    for t in live:
        name = origin[t]
        if t.space != space or name not in spillable:
            continue
        nxt = _next_use(uses.get(name, ()), position)
        if nxt is None or nxt == position:
            continue
        if nxt > best_next or (nxt == best_next and t.name < best.name):
            best, best_next = t, nxt
    return best, best_next


def _materialize(trace, spills, uses):
    from ._emit import ap_text   # (here: _emit reaches this module through _trace)
    queue = trace.target.dma_queues - 1
    before = {}            # instruction index -> (spill stores, reloads) to insert before it
    renames = {}           # origin name -> [(from index, name)]
    spill_bytes = 0
    for position, victim, reload_at, reloaded, name, hbm in spills:
        p, f = victim.partitions, victim.per_partition
        scratch = f"{hbm}{{offset=0, ap=[[{f}, {p}], [1, {f}]]}}"
        before.setdefault(position, ([], []))[0].append(
            f"dma_copy dst={scratch}, src={ap_text(victim.full_view())}, queue={queue}")
        before.setdefault(reload_at, ([], []))[1].append(
            f"dma_copy dst={ap_text(reloaded.full_view())}, src={scratch}, queue={queue}")
        renames.setdefault(name, []).append((reload_at, reloaded.name))
        spill_bytes += 2 * p * f * victim.dtype.size_bytes
    body, locs = trace.body, trace.locs
    for name, chain in renames.items():
        chain.sort()
        pattern = re.compile(rf"\b{re.escape(name)}\{{")
        for index in uses.get(name, ()):
            k = bisect.bisect_right([start for start, _ in chain], index) - 1
            if k >= 0:
                body[index] = pattern.sub(chain[k][1] + "{", body[index])
    new_body, new_locs, index_map = [], [], []
    for index, line in enumerate(body):
        stores, loads = before.get(index, ((), ()))
        for extra in list(stores) + list(loads):
            new_body.append(extra)
            new_locs.append(locs[index])
        index_map.append(len(new_body))
        new_body.append(line)
        new_locs.append(locs[index])
    index_map.append(len(new_body))
    trace.body, trace.locs = new_body, new_locs
    trace.keep_order = [(index_map[b], index_map[e]) for b, e in getattr(trace, "keep_order", ())]
    trace.schedule_edges = [(index_map[a], index_map[b]) for a, b in getattr(trace, "schedule_edges", ())]
    trace.spill_bytes = spill_bytes
    trace.spill_count = len(spills)
