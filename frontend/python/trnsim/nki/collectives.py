"""``nki.collectives``: collectives across ranks, each call one trnsim ISA collective per (src, dst) pair
(``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``collective_permute``; isa/instructions.def).
Run a kernel that uses them with ``kernel.run_ranks([args_rank0, args_rank1, ...])``: each rank is a physical
core with its own memory, values move between the ranks and the time comes from trnsim's system model.

A ``ReplicaGroup`` is a list of rank-lists; a collective runs within the list that holds the calling rank.
``collective_dim`` 0 is supported (the tensors' row-major order); ``priority`` (QoS, NeuronCore-v4) is accepted
and not modelled. Not here yet: ``all_to_all_v``, ``collective_permute_implicit*``, ``rank_id``.
"""
import enum

from . import _emit
from ._core import fail, user_location

# nki.collectives functions of NKI 0.7 not here yet (trnsim.nki.missing_api()).
MISSING = ["all_to_all_v", "collective_permute_implicit", "collective_permute_implicit_reduce",
           "collective_permute_implicit_current_processing_rank_id", "rank_id", "self_index_in_replica_group"]

__all__ = ["ReplicaGroup", "rg_partition_op", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
           "collective_permute"]


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
