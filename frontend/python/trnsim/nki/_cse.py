"""Redundant computation left out, as the compiler's common-subexpression elimination and loop-invariant code motion
leave it out (issue 37 item 1: the traced program is what neuronx-cc emits, no more). Loops are unrolled while
tracing, so a computation the kernel repeats in every iteration of a loop that does not change its inputs (the fused
Mamba tutorial's ``delta * u`` inside its state loop, a broadcast's ones row) arrives here once per iteration: the
second and later copies are not emitted and their result tile becomes the first copy's tile.

Rule (assumed; neuronx-cc's passes are not published, but the Mamba tutorial's v1 -> v2 step is 31 % faster on
hardware only if its Vector work per state drops by the hoisted multiply): an instruction is redundant when it is an
element-wise or reduction instruction of an engine (no DMA, no matmul, no accumulator or PRNG state, no mask, no
register address, not named for with_schedule) that writes the whole of a fresh SBUF tile, and an earlier instruction
with the same operation and operands wrote a tile that nothing has written since, from inputs that nothing has
written since. A later write to the reused tile through the new name gets a tile of its own first (copy on write), so
values never change."""
# Whole-tile writes computed from their inputs alone (reduce_cmd / reduce_res excluded below).
_PURE = frozenset({"tensor_copy", "activation", "tensor_tensor", "tensor_scalar", "memset", "tensor_reduce"})


def _state(trace):
    state = trace.__dict__.get("_cse")
    if state is None:
        # versions: writes per tile; seen: computation -> (tile, its version); aliases: tile -> the tile it names;
        # sharers: tile -> the tiles that name it.
        # fills: an alias of a memset's tile -> how to fill its own tile again.
        state = trace._cse = {"versions": {}, "seen": {}, "aliases": {}, "sharers": {}, "fills": {}}
    return state


def _root(st):
    return st.base or st


def unalias_writes(trace, views_written, emit_copy):
    """Before an instruction writes a tile that a redundant copy shares: the alias gets a tile of its own (holding the
    shared values, copied with ``emit_copy(dst_storage, src_storage)`` unless the write covers it whole), and when the
    written tile is the one others share, each of them gets its own copy of the values first."""
    state = trace.__dict__.get("_cse")
    if not state or not state["aliases"]:
        return
    for view, whole in views_written:
        st = view.st
        shared = state["aliases"].pop(st, None)
        if shared is not None:
            state["sharers"].get(shared, set()).discard(st)
            _own_tile(trace, st)
            if not whole:
                _restore(state, st, shared, emit_copy)
        for sharer in sorted(state["sharers"].pop(_root(st), ()), key=lambda t: t.name):
            state["aliases"].pop(sharer, None)
            _own_tile(trace, sharer)
            _restore(state, sharer, _root(st), emit_copy)


def _restore(state, st, shared, emit_copy):
    """``st``'s values back in its own tile: a constant fill again (no cheaper than a copy, and no read of the shared
    tile), else a copy."""
    fill = state["fills"].pop(st, None)
    emit_copy(st, shared) if fill is None else fill(st)


def _own_tile(trace, st):
    st.base = None
    state = _state(trace)
    state["own"] = state.get("own", 0) + 1
    # A name no other tile has (the tile stayed in trace.tiles, so the next sb_N / ps_N is another tile's).
    st.name = f"{trace._next_tile_name(st.space).split('_')[0]}_own{state['own']}"
    st.first = st.last = -1
    st.region = None
    st.written = True


def declared(t):
    """Whether tile ``t`` has a declaration of its own (a redundant computation's alias names another tile)."""
    return t.base is None or t.name != t.base.name


def shared(trace, st):
    """Whether tile ``st`` names another's values or others name its: a write to it must go through emit() (which
    gives each its own tile first), not rewrite an emitted instruction."""
    state = trace.__dict__.get("_cse")
    return bool(state) and (st in state["aliases"] or bool(state["sharers"].get(_root(st))))


def find(trace, name, parts, written, touched, mask, dynamic, label):
    """(the earlier tile this instruction would recompute, or None; the key to remember it by)."""
    if (name not in _PURE or mask is not None or dynamic or label is not None or trace.loops or len(written) != 1
            or any(p.startswith(("reduce_res=", "reduce_cmd=")) for p in parts)):
        return None, None
    view = written[0]
    st = view.st
    if (st.space != "sbuf" or st.base is not None or st.written or st.first >= 0 or st.address is not None
            or st.blocks is not None or st.block_of is not None or st in trace.aliased or not view.is_whole()):
        return None, None
    state = _state(trace)
    versions = state["versions"]
    from ._emit import ap_text   # (here: _emit imports this module)
    dst_text = ap_text(view)
    # The inputs as (tile, its version) pairs: Storages hashed by identity (a dead tile's id() is reused by a new one).
    inputs = frozenset((_root(other), versions.get(_root(other), 0)) for other in touched if other is not st)
    key = (name, st.dtype.name, tuple(st.shape), tuple(p for p in parts if not p.endswith("=" + dst_text)), inputs)
    earlier = state["seen"].get(key)
    if earlier is None:
        return None, key
    tile, version = earlier
    if versions.get(tile, 0) != version or tile.base is not None:
        return None, key
    return tile, key


def alias(trace, st, tile, fill=None):
    """``st`` (a fresh tile) names ``tile`` from now on (``fill(st)``: how to make its values again, for a constant)."""
    state = _state(trace)
    if fill is not None:
        state["fills"][st] = fill
    st.base = tile
    st.name = tile.name
    st.written = True
    st.producer = tile.producer
    state["aliases"][st] = tile
    state["sharers"].setdefault(tile, set()).add(st)
    # It stays in trace.tiles (removing it from the list would cost a scan per alias); allocation skips it (a base),
    # and its declaration is the tile's (declared(): same name).


def wrote(trace, storages):
    """Every write makes what an earlier computation read or wrote there stale."""
    versions = _state(trace)["versions"]
    for st in storages:
        root = _root(st)
        versions[root] = versions.get(root, 0) + 1


def remember(trace, key, st):
    if key is not None and st is not None:
        _state(trace)["seen"][key] = (st, _state(trace)["versions"].get(st, 0))

