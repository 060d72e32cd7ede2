"""The instruction order a kernel compiler gives a traced kernel (issue 37). neuronx-cc "is free to reorder
independent operations" (NKI scheduling guide): program order is not the order the engines run. After tiles have
addresses, the traced program goes through trnsim's list scheduler (sim/schedule/list_scheduler.h, rules stated
there) and the trace's instruction lines take its order; each line keeps its kernel location.

``schedule="list"`` (the default) schedules; ``schedule="program-order"`` keeps the traced order (what-ifs, or a
kernel whose author scheduled it by hand). ``nl.no_reorder()`` blocks and ``kernel.with_schedule`` edges, where the
trace recorded them (``trace.keep_order``, ``trace.schedule_edges``), constrain the list scheduler."""
import os

from ._core import KernelError, env_int

MODES = ("list", "program-order")
# TRNSIM_NKI_SCHEDULE sets the default for kernels that do not pass schedule= (a what-if over a whole script).
DEFAULT_MODE = os.environ.get("TRNSIM_NKI_SCHEDULE") or "list"


def check_mode(mode):
    if mode not in MODES:
        raise KernelError(f"schedule={mode!r}: one of {', '.join(repr(m) for m in MODES)} (the default comes from "
                          f"TRNSIM_NKI_SCHEDULE when set)")
    return mode


def schedule(trace, head_lines):
    """Reorders ``trace.body`` / ``trace.locs`` in place (once) into the scheduled order."""
    mode = check_mode(getattr(trace, "schedule_mode", DEFAULT_MODE))
    if mode == "program-order" or getattr(trace, "scheduled", False) or len(trace.body) < 2:
        return
    from .. import _C
    text = "\n".join(list(head_lines) + trace.body) + "\n"
    keep_order = [(int(b), int(e)) for b, e in getattr(trace, "keep_order", ())]
    edges = [(int(a), int(b)) for a, b in getattr(trace, "schedule_edges", ())]
    order = _C.schedule_order(text, f"<kernel {trace.name}>", trace.target.config, list(trace.target.overrides),
                              keep_order, edges, env_int("TRNSIM_NKI_SCHEDULE_LOOKAHEAD", 0))
    trace.body = [trace.body[i] for i in order]
    trace.locs = [trace.locs[i] for i in order]
    trace.scheduled = True
