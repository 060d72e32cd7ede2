"""NKI's scheduling API as the trace records it for the list scheduler (_schedule.py; NKI guide "How to Use the NKI
Scheduling APIs"):

- ``with nl.no_reorder():`` keeps program order inside the block: the block's instruction-index range
  [begin, end) goes to ``trace.keep_order``. Static loops may be inside it (they are unrolled); a compiled loop
  (``fori_loop`` / ``while_loop`` / ``dynamic_range`` / ``if_else`` on a register) may not, as in NKI.
- ``name=`` on an ``nki.isa`` call names its instruction: ``trace.instruction_names[name]`` = its index (a call that
  emits several instructions names its first); a name used twice is an error naming both lines.
- ``kernel.with_schedule([("a", "b"), ("c", ["d", "e"])])``: each pair says the first named instruction runs after
  the second (or after each of a list). Resolved when the kernel is traced into ``trace.schedule_edges``, a list of
  (later_index, earlier_index) pairs; a name no instruction carries is an error naming it.

Indices are positions in the traced program order (``trace.body`` before the scheduler reorders it)."""
import contextlib

from . import _core, _trace
from ._core import fail, user_location


def _state(trace):
    """The trace's scheduling records, made on first use."""
    if not hasattr(trace, "keep_order"):
        trace.keep_order = []            # [(begin, end)] instruction-index ranges kept in program order
        trace.instruction_names = {}     # name -> instruction index
        trace.schedule_edges = []        # [(later_index, earlier_index)]
        trace.no_reorder_depth = 0
        trace._name_locations = {}
    return trace


@contextlib.contextmanager
def no_reorder():
    """``with nl.no_reorder():``: the instructions traced inside the block keep their program order."""
    trace = _state(_trace.current())
    if trace.pending:
        trace.flush_pending()   # lazy results made before the block are not part of it
    begin = len(trace.body)
    trace.no_reorder_depth += 1
    try:
        yield
        if trace.pending:
            trace.flush_pending()   # nor are those made in it left for later
    finally:
        trace.no_reorder_depth -= 1
    end = len(trace.body)
    if end > begin:
        trace.keep_order.append((begin, end))


def check_compiled_loop(trace, location):
    """A compiled loop opening: refused inside nl.no_reorder (NKI allows only static loops there)."""
    if getattr(trace, "no_reorder_depth", 0):
        fail("a dynamic loop (nl.fori_loop / nl.while_loop / nl.dynamic_range / nl.if_else on a register) inside "
             "nl.no_reorder(): only static loops, which are unrolled, keep an order [no-reorder-dynamic-loop]",
             location)


def record_name(trace, name, index, location):
    """``name=`` of the instruction at ``index``."""
    if not isinstance(name, str) or not name:
        fail(f"name={name!r}: an instruction name is a non-empty str [instruction-name]", location)
    trace = _state(trace)
    if name in trace.instruction_names:
        fail(f"instruction name {name!r} used twice: at {_core.where(trace._name_locations[name])} and here (a name "
             f"in an unrolled loop names one instruction per iteration; make it unique, e.g. f\"{name}_{{i}}\") "
             f"[instruction-name]", location)
    trace.instruction_names[name] = index
    trace._name_locations[name] = location


def check_pairs(pairs):
    """``with_schedule``'s argument as [(later, [earlier, ...])], checked for its shape."""
    if isinstance(pairs, (str, bytes)) or not hasattr(pairs, "__iter__"):
        raise _core.KernelError(f"with_schedule: a list of (name, name or [names]) pairs, got {pairs!r}")
    out = []
    for pair in pairs:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise _core.KernelError(f"with_schedule: {pair!r} is not a (name, name or [names]) pair")
        later, earlier = pair
        earlier = [earlier] if isinstance(earlier, str) else list(earlier) if isinstance(earlier, (tuple, list)) \
            else None
        if not isinstance(later, str) or earlier is None or not earlier or \
                not all(isinstance(e, str) for e in earlier):
            raise _core.KernelError(f"with_schedule: {pair!r}: the first is an instruction name, the second a name "
                                    f"or a list of names")
        out.append((later, earlier))
    return out


def resolve(trace, pairs, location=None):
    """The (later, earlier) index pairs of ``pairs`` (check_pairs' form) in ``trace``."""
    trace = _state(trace)
    names = trace.instruction_names
    for later, earlier in pairs:
        for name in [later] + earlier:
            if name not in names:
                known = ", ".join(sorted(names)[:10]) or "none"
                fail(f"with_schedule names instruction {name!r}, which no nisa call of kernel {trace.name} carries "
                     f"as name= (names: {known}) [schedule-name]", location)
        for name in earlier:
            trace.schedule_edges.append((names[later], names[name]))
    return trace.schedule_edges
