"""``nki.collectives``: collectives across ranks, each call one trnsim ISA collective per (src, dst) pair
(``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``collective_permute`` and the ring forms
``collective_permute_implicit(_reduce)``; isa/instructions.def). Run a kernel that uses them with
``kernel.run_ranks([args_rank0, args_rank1, ...])``: each rank is a physical core with its own memory, values move
between the ranks and the time comes from trnsim's system model.

A ``ReplicaGroup`` is a list of rank-lists; a collective runs within the list that holds the calling rank; a ring
(``collective_permute_implicit``) runs around each list in its order. ``rank_id()`` and
``collective_permute_implicit_current_processing_rank_id()`` return registers (ISA ``rank_id``) to address data by
rank at run time (``t.ap(..., scalar_offset=reg)``). ``collective_dim`` 0 is supported (the tensors' row-major
order); ``priority`` (QoS, NeuronCore-v4) is accepted and not modelled; each channel of the implicit forms is its own
collective on the links. ``all_to_all_v`` / ``all_gather_v`` move the counts their uint32 metadata tensor holds
(values exact) and are timed as the fixed-size collective of the whole buffers (an upper bound: the counts are data,
and timing-only has none).
"""
import enum

from . import _emit
from . import isa as _isa
from ._core import fail, user_location

# nki.collectives functions of NKI 0.7 not here yet (trnsim.nki.missing_api()).
MISSING = []

__all__ = ["ReplicaGroup", "rg_partition_op", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "collective_permute", "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "rank_id", "all_to_all_v", "all_gather_v"]


class rg_partition_op(enum.Enum):
    """How ReplicaGroup.from_partition_op maps rank r to its rank-list: r & operand, r // operand, r % operand."""
    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


class ReplicaGroup:
    """The ranks a collective runs on, as rank-lists that do not overlap: ``ReplicaGroup([[0, 1], [2, 3]])``."""

    def __init__(self, rank_lists):
        lists = [[int(r) for r in ranks] for ranks in rank_lists]
        seen = set()
        for ranks in lists:
            if seen & set(ranks):
                fail(f"ReplicaGroup {lists}: rank-lists overlap", user_location())
            seen |= set(ranks)
        if not lists or len({len(ranks) for ranks in lists}) != 1:
            fail(f"ReplicaGroup {lists}: the rank-lists must be non-empty and of one size", user_location())
        self.rank_lists = lists

    @staticmethod
    def from_partition_op(world_size, op, operand):
        op = rg_partition_op(op.value if isinstance(op, rg_partition_op) else op)
        key = {rg_partition_op.bitwise_and: lambda r: r & operand, rg_partition_op.div: lambda r: r // operand,
               rg_partition_op.mod: lambda r: r % operand}[op]
        lists = {}
        for rank in range(int(world_size)):
            lists.setdefault(key(rank), []).append(rank)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def __repr__(self):
        return f"ReplicaGroup({self.rank_lists})"


def _group(replica_group, location):
    if isinstance(replica_group, ReplicaGroup):
        lists = replica_group.rank_lists
    elif isinstance(replica_group, (list, tuple)) and replica_group and isinstance(replica_group[0], (list, tuple)):
        lists = ReplicaGroup(replica_group).rank_lists
    else:
        fail(f"replica_group: expected a ReplicaGroup, got {replica_group!r}", location)
    return {"group": [r for ranks in lists for r in ranks], "group_size": len(lists[0])}


def _pairs(srcs, dsts, what, location):
    srcs = list(srcs) if isinstance(srcs, (list, tuple)) else [srcs]
    dsts = list(dsts) if isinstance(dsts, (list, tuple)) else [dsts]
    if len(srcs) != len(dsts) or not srcs:
        fail(f"nki.collectives.{what}: srcs and dsts are lists of one length ({len(srcs)} and {len(dsts)})", location)
    return zip(srcs, dsts)


def _dim(collective_dim, what, location):
    if int(collective_dim) != 0:
        fail(f"nki.collectives.{what}: collective_dim {collective_dim} is not supported by trnsim yet (0 is: the "
             f"tensors' row-major order)", location)


def _each(what, srcs, dsts, operands, location, collective_dim=0):
    """One ISA collective `what` per (src, dst) pair: NKI's coalesced lists become consecutive instructions."""
    _dim(collective_dim, what, location)
    for src, dst in _pairs(srcs, dsts, what, location):
        _emit.emit(what, (dst, src), operands, location)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None):
    """Every rank's dst = op (nl.add, nl.minimum or nl.maximum) over its rank-list's src."""
    location = user_location()
    _each("all_reduce", srcs, dsts, dict(op=op, **_group(replica_group, location)), location)


def all_gather(srcs, dsts, replica_group, collective_dim=0, priority=None, name=None):
    """Every rank's dst = its rank-list's src, concatenated along dim 0."""
    location = user_location()
    _each("all_gather", srcs, dsts, _group(replica_group, location), location, collective_dim)


def reduce_scatter(srcs, dsts, replica_group, op, collective_dim=0, priority=None, name=None):
    """The i-th member's dst = op over its rank-list's src, block i along dim 0."""
    location = user_location()
    _each("reduce_scatter", srcs, dsts, dict(op=op, **_group(replica_group, location)), location, collective_dim)


def all_to_all(srcs, dsts, replica_group, collective_dim=0, priority=None, name=None):
    """The i-th member's dst block j = the j-th member's src block i (blocks along dim 0)."""
    location = user_location()
    _each("all_to_all", srcs, dsts, _group(replica_group, location), location, collective_dim)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None):
    """For each (source, target): target's dst = source's src."""
    location = user_location()
    _each("collective_permute", srcs, dsts, {"pairs": [[int(a), int(b)] for a, b in source_target_pairs]}, location)


def _ring_pairs(replica_group, location):
    """Each rank-list as a ring in its order: every member sends to the next (the last to the first)."""
    lists = _lists(replica_group, location)
    return [[ranks[i], ranks[(i + 1) % len(ranks)]] for ranks in lists for i in range(len(ranks))]


def _lists(replica_group, location):
    group = _group(replica_group, location)
    size = group["group_size"]
    return [group["group"][i:i + size] for i in range(0, len(group["group"]), size)]


def _channels(what, per_channel, channel_ids, location):
    """The one tensor of each channel's inner list."""
    per_channel = list(per_channel)
    ids = list(channel_ids) if channel_ids is not None else [0]
    if ids != list(range(len(ids))):
        fail(f"nki.collectives.{what}: channel_ids must be consecutive from 0, got {ids}", location)
    if len(per_channel) != len(ids):
        fail(f"nki.collectives.{what}: {len(per_channel)} channel lists for channel_ids {ids}", location)
    tensors = []
    for channel in per_channel:
        inner = list(channel) if isinstance(channel, (list, tuple)) else [channel]
        if len(inner) != 1:
            fail(f"nki.collectives.{what}: each channel's list holds exactly one tensor, got {len(inner)}", location)
        tensors.append(inner[0])
    return tensors


def collective_permute_implicit(srcs_by_channel, dsts_by_channel, replica_group, channel_ids=None, priority=None,
                                name=None):
    """Around each rank-list's ring: every rank's dst = its predecessor's src, per channel."""
    location = user_location()
    pairs = _ring_pairs(replica_group, location)
    srcs = _channels("collective_permute_implicit", srcs_by_channel, channel_ids, location)
    dsts = _channels("collective_permute_implicit", dsts_by_channel, channel_ids, location)
    for src, dst in zip(srcs, dsts):
        _emit.emit("collective_permute", (dst, src), {"pairs": pairs}, location)


def collective_permute_implicit_reduce(srcs0_by_channel, srcs1_by_channel, dsts_by_channel, replica_group, op,
                                       channel_ids=None, priority=None, name=None):
    """Around each rank-list's ring: every rank's dst = op(src0, src1) of its predecessor, per channel."""
    location = user_location()
    pairs = _ring_pairs(replica_group, location)
    what = "collective_permute_implicit_reduce"
    srcs0 = _channels(what, srcs0_by_channel, channel_ids, location)
    srcs1 = _channels(what, srcs1_by_channel, channel_ids, location)
    dsts = _channels(what, dsts_by_channel, channel_ids, location)
    for src0, src1, dst in zip(srcs0, srcs1, dsts):
        _emit.emit("collective_permute", (dst, src0), {"pairs": pairs, "src2": src1, "op": op}, location)


def rank_id(name=None):
    """A register holding this rank's ID (its position among the ranks the kernel runs on)."""
    location = user_location()
    reg = _isa.register_alloc()
    _emit.emit("rank_id", (reg,), {}, location)
    return reg


def collective_permute_implicit_current_processing_rank_id(iteration_id, replica_group, channel_id=0, name=None):
    """A register holding the rank whose data a ring step ``iteration_id`` (an int or a register) holds here: this
    rank's own at 0, then the rank one more step upstream each iteration."""
    location = user_location()
    group = _group(replica_group, location)
    reg = _isa.register_alloc()
    operands = dict(group=group["group"], group_size=group["group_size"])
    if isinstance(iteration_id, _isa.VirtualRegister):
        operands["back_reg"] = iteration_id
    else:
        operands["back"] = _isa._int32(iteration_id, "iteration_id")
    _emit.emit("rank_id", (reg,), operands, location)
    return reg


def _one(what, tensors, kind, location):
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if len(tensors) != 1:
        fail(f"nki.collectives.{what}: {kind} holds exactly one tensor, got {len(tensors)}", location)
    return tensors[0]


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Each rank sends ``send_counts[r]`` elements from ``send_displs[r]`` of its flat src to every rank r of its
    rank-list (metadata rows 0, 1), landing at ``recv_displs`` (row 3, with has_rdispls) or at equal slots of dst;
    row 2 gets the counts received unless ``recv_counts_known``."""
    location = user_location()
    src, dst = _one("all_to_all_v", srcs, "srcs", location), _one("all_to_all_v", dsts, "dsts", location)
    operands = dict(_group(replica_group, location), metadata=metadata_tensor,
                    recv_counts_known=bool(recv_counts_known), has_rdispls=bool(has_rdispls))
    _emit.emit("all_to_all_v", (dst, src), operands, location)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None):
    """Each rank's chunk ``src[send_displ : send_displ + send_count]`` (metadata rows 0, 1, first column) lands in
    every rank's dst slot of its index; row 2 gets the counts received unless ``recv_counts_known``."""
    location = user_location()
    if has_rdispls:
        fail("nki.collectives.all_gather_v: has_rdispls=True is not supported (as in NKI)", location)
    src, dst = _one("all_gather_v", srcs, "srcs", location), _one("all_gather_v", dsts, "dsts", location)
    operands = dict(_group(replica_group, location), metadata=metadata_tensor,
                    recv_counts_known=bool(recv_counts_known))
    _emit.emit("all_gather_v", (dst, src), operands, location)
