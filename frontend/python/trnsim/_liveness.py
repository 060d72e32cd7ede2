"""Whether the members of a ``neuron`` process group are still there (issue 42, D1).

A member waiting on the store for another (a collective's payload, its time, the "all read" marker) would
otherwise wait the whole ``init_process_group`` timeout (30 min) for a rank that has exited. Here:

- every member posts its identity (host, boot, pid namespace, pid, the process's start time) at group
  creation; a member on this host in this pid namespace is gone when ``/proc/<pid>`` no longer names that
  process (or names a zombie);
- every member whose group has a shared segment (``/dev/shm/trnsim-*``: all members on this host) writes a
  heartbeat there (``heartbeat-<rank>``: CLOCK_MONOTONIC ns, rewritten every ``HEARTBEAT_PERIOD_S``); a member
  whose pid cannot be checked (another pid namespace) is gone when its heartbeat is older than
  ``$TRNSIM_DIST_HEARTBEAT_TIMEOUT_S`` (default 10 s). The heartbeat is a Python thread, so a process that holds
  the GIL in one long call stops it too: where the pid can be checked, the pid decides;
- waits poll the store (``check``, backing off to ``POLL_MAX_S``) and look at the members every ``CHECK_PERIOD_S``;
- a segment names its members (``members``), so a group's rank 0 removes the segments whose members are all gone
  (processes killed outright: SIGKILL runs no handler) when it makes its own.
"""
import os
import threading
import time

POLL_MAX_S = 0.002      # assumed: the longest sleep between two looks at the store (the latency a wait may add)
CHECK_PERIOD_S = 0.25   # assumed: how often a waiting member looks at the others
HEARTBEAT_PERIOD_S = 0.5     # assumed: how often a member refreshes its heartbeat (a fraction of the timeout)
GRACE_S = 3.0           # assumed: after a store / segment error, how long to look for the member that caused it


def heartbeat_timeout_s():
    value = os.environ.get("TRNSIM_DIST_HEARTBEAT_TIMEOUT_S", "10")
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"TRNSIM_DIST_HEARTBEAT_TIMEOUT_S={value!r}: must be a positive finite number of seconds")
    return seconds


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _proc_state(pid):
    """(state letter, start time in clock ticks since boot) of process `pid`, or None if there is none."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
    return fields[0].decode(), int(fields[19])


def identity():
    """What another member needs to tell whether this process is still alive."""
    import socket
    boot = (_read("/proc/sys/kernel/random/boot_id") or b"").strip().decode()
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        namespace = ""
    state = _proc_state(os.getpid())
    return {"host": socket.gethostname(), "boot": boot, "pid_namespace": namespace, "pid": os.getpid(),
            "start": state[1] if state else None}


def process_gone(mine, theirs):
    """True when `theirs` (an identity) names a process that has exited, False when it is running, None when this
    process cannot tell (another host or pid namespace)."""
    if not mine["boot"] or not mine["pid_namespace"] or theirs["start"] is None:
        return None
    if (mine["host"], mine["boot"], mine["pid_namespace"]) != (theirs["host"], theirs["boot"], theirs["pid_namespace"]):
        return None
    state = _proc_state(theirs["pid"])
    return state is None or state[1] != theirs["start"] or state[0] in ("Z", "X")


def heartbeat_path(segment, rank):
    return os.path.join(segment, f"heartbeat-{rank}")


def heartbeat_age_s(segment, rank):
    """Seconds since member `rank` last beat in `segment`, or None if it has not beaten there yet."""
    raw = _read(heartbeat_path(segment, rank))
    if raw is None or len(raw) != 8:
        return None
    return (time.monotonic_ns() - int.from_bytes(raw, "little")) / 1e9


class Heartbeat:
    """A daemon thread rewriting this member's heartbeat file; it stops when the file is gone (the segment removed)
    or on stop()."""

    def __init__(self, segment, rank):
        self._path = heartbeat_path(segment, rank)
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name=f"trnsim-heartbeat-{rank}", daemon=True)
        self._thread.start()

    def _beat(self):
        tmp = f"{self._path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(time.monotonic_ns().to_bytes(8, "little"))
        os.replace(tmp, self._path)

    def _run(self):
        while not self._stop.wait(HEARTBEAT_PERIOD_S):
            if not os.path.isdir(os.path.dirname(self._path)):
                return
            try:
                self._beat()
            except OSError:
                return

    def stop(self):
        self._stop.set()


MEMBERS_FILE = "members"  # a segment's members' identities (pickled), what tells later whether it is stale


def write_members(segment, identities):
    import pickle
    tmp = os.path.join(segment, f"{MEMBERS_FILE}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(identities, f)
    os.replace(tmp, os.path.join(segment, MEMBERS_FILE))


def stale_segments(shm, mine):
    """The segments under `shm` whose every member is gone: what groups killed outright (SIGKILL, which no handler
    sees) left behind. A segment without a members file (being made, or of an older trnsim) is left alone."""
    import pickle
    stale = []
    try:
        names = [n for n in os.listdir(shm) if n.startswith("trnsim-")]
    except OSError:
        return stale
    for name in names:
        segment = os.path.join(shm, name)
        raw = _read(os.path.join(segment, MEMBERS_FILE))
        if raw is None:
            continue
        try:
            identities = pickle.loads(raw)
        except Exception:  # noqa: BLE001  not ours to judge: leave it
            continue
        def gone(rank, theirs):
            exited = process_gone(mine, theirs)
            if exited is not None:
                return exited
            age_s = heartbeat_age_s(segment, rank)
            return age_s is not None and age_s > heartbeat_timeout_s()
        if all(gone(r, theirs) for r, theirs in enumerate(identities)):
            stale.append(segment)
    return stale
