"""``torch.distributed`` on the simulated system: the c10d backend ``"neuron"``.

``import trnsim`` registers it, so ``dist.init_process_group("neuron")`` (and
``init_process_group()`` on a machine whose accelerator is ``neuron``) gives a process group whose
collectives run on the simulated multi-chip system:

- **Ranks are logical NeuronCores of a system** of the config (``configs/*.yaml`` ``systems``): global
  rank ``r`` is logical core ``r`` (chip ``r // logical cores per chip``). The system is
  ``$TRNSIM_SYSTEM`` or :func:`set_system`, else the config's ``default_system`` when it holds the
  world, else the smallest system that does (said once as a warning). A rank's tensors may sit on any
  of its process's ``neuron`` devices: the device only names the clock the rank's work runs on.
- **Values** really move between the ranks (files in ``/dev/shm`` when every member is on this host,
  else the process group's store), computed the way the ISA's collectives compute them
  (``sim/system/collective_rendezvous``): reductions over the members in group-rank order, accumulated
  in fp32 (fp64 for float64, int64 for integers), rounded once to the dtype; every member gets the same
  bits. PREMUL_SUM multiplies each member's tensor by its factor first.
- **Time** comes from the system model (``sim/system/collectives``: links, CC-cores, algorithms by size).
  A collective starts when its last member arrives (each member's device clock at the call, so a
  straggler delays the others) and runs on the collective engines beside the device's compute: the
  device's clock does not stop for it. Work that touches its buffers afterwards waits for its end, as
  does ``Work.wait()`` (a ``"wait"`` record in ``trnsim.op_log()``: exposed communication). Each
  collective is a ``"collective"`` record (its start and length on the collective engines, bytes,
  algorithm) and a slice on the device's ``collectives`` track of the profiler's trace (with its group,
  busbw, busiest link and that link's utilisation). Streams (``torch.neuron.Stream``) each have a clock:
  a collective issued on one starts at that stream's clock.
- The group's first member times each collective on its own system model and hands the time to the
  others, so concurrent collectives of one group contend on the links as the model says. A group smaller
  than the world is timed together with its translates that tile the world (every TP group of a mesh,
  every DP group): a symmetric program runs them at the same moment, so they share links. Other traffic
  of groups led by other processes is not seen (real ranks; in simulate_world only rank 0's groups exist).

Two ways to run: real ranks (``torchrun --nproc-per-node N``, ``torch.multiprocessing.spawn``), values
and time; or :func:`simulate_world` — one process is rank 0 of a symmetric SPMD world of any size,
timing-only, every member taken to arrive when rank 0 does.

Timing of what the system model has no algorithm for: ``broadcast`` and ``scatter`` are the root
sending to each member directly, ``gather`` each member sending to the root, ``reduce`` an all-reduce
(the runtime's collectives have no rooted reduction), ``barrier`` an all-reduce of 4 bytes.
"""
import atexit
import mmap
import os
import pickle
import shutil
import signal
import socket
import threading
import time
import uuid
import warnings
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp
from torch.futures import Future

from . import _C, _liveness

__all__ = ["BACKEND", "set_system", "system", "simulate_world", "NeuronProcessGroup"]

BACKEND = "neuron"


class _Settings:
    """What the user chose for this process: the system, and whether the world is simulated."""

    def __init__(self):
        self.system = os.environ.get("TRNSIM_SYSTEM") or None
        self.symmetric = False
        self.models = {}  # (config hash, system) -> _C.CollectiveSystem, shared by the process's groups
        self.warned = set()
        self.segments = set()  # the shared-memory folders of this process's groups, removed if it is terminated
        self.terminate_hooked = False

    def own_segment(self, path):
        """Removes `path` should this process be terminated (SIGTERM: what torchrun sends the other ranks when one
        fails, and the default action skips atexit). Only where nobody else handles SIGTERM."""
        self.segments.add(path)
        if self.terminate_hooked or threading.current_thread() is not threading.main_thread() \
                or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        self.terminate_hooked = True

        def on_terminate(signum, frame):
            for segment in self.segments:
                shutil.rmtree(segment, True)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        signal.signal(signal.SIGTERM, on_terminate)


_SETTINGS = _Settings()


def set_system(name):
    """Run the ranks on the config's system ``name`` (e.g. ``"trn2-48xlarge"``); None: choose by the
    world's size. Takes effect for process groups created afterwards."""
    _SETTINGS.system = name


def system():
    """The system chosen with :func:`set_system` or ``$TRNSIM_SYSTEM`` (None: by the world's size)."""
    return _SETTINGS.system


def _choose_system(world_size):
    info = _C.systems()
    per_chip = int(info["logical_cores_per_chip"])
    systems = dict(info["systems"])
    name = _SETTINGS.system
    if name is not None:
        if name not in systems:
            raise ValueError(f"trnsim.distributed: no system {name!r} in config {_C.config_info()['name']!r}; "
                             f"it has {', '.join(sorted(systems))}")
        if systems[name] * per_chip < world_size:
            raise ValueError(f"trnsim.distributed: system {name!r} has {systems[name] * per_chip} logical cores "
                             f"({systems[name]} chips x {per_chip}); the world has {world_size} ranks")
        return name, per_chip
    default = info["default_system"]
    if systems.get(default, 0) * per_chip >= world_size:
        return default, per_chip
    fitting = sorted((chips, n) for n, chips in systems.items() if chips * per_chip >= world_size)
    if not fitting:
        raise ValueError(f"trnsim.distributed: {world_size} ranks do not fit any system of config "
                         f"{_C.config_info()['name']!r} ({per_chip} logical cores per chip; systems: "
                         + ", ".join(f"{n} ({c} chips)" for n, c in sorted(systems.items())) + ")")
    name = fitting[0][1]
    if (name, world_size) not in _SETTINGS.warned:
        _SETTINGS.warned.add((name, world_size))
        warnings.warn(f"trnsim.distributed: {world_size} ranks exceed the default system {default!r}; running them "
                      f"on {name!r} (choose with TRNSIM_SYSTEM or trnsim.distributed.set_system)", stacklevel=3)
    return name, per_chip


def _translates(ranks, world):
    """The group and its shifts that tile the world without overlapping it or each other: in a symmetric
    program, the groups that run the same collective at the same time (e.g. every TP group of a (dp, tp)
    mesh, or every DP group). The group itself first."""
    family = [list(ranks)]
    used = set(ranks)
    for shift in range(1, world):
        group = [r + shift for r in ranks]
        if max(group) < world and used.isdisjoint(group):
            family.append(group)
            used.update(group)
    return family


def _link_args(timing):
    """The trace slice's link figures of a collective's timing."""
    if not timing["busiest_link"]:
        return []
    return [("busiest_link", timing["busiest_link"]), ("busiest_link_bytes", f"{timing['busiest_link_bytes']:.0f}"),
            ("busiest_link_utilisation", f"{timing['busiest_link_utilisation']:.4f}"),
            ("busbw_gbps", f"{timing['busbw_gbps']:.3f}")]


def _system_model(name, per_chip):
    key = (_C.config_info()["hash"], name)
    model = _SETTINGS.models.get(key)
    if model is None:
        model = _SETTINGS.models[key] = _C.CollectiveSystem(name, per_chip)
    return model


# --- values --------------------------------------------------------------------------------------

def _now(device):
    """The device's clock on its current stream (where the collective is issued); 0 for host tensors."""
    return _C.stream_clock(device, _C.current_stream(device)) if device is not None else 0.0


def _has_values(t):
    """Whether the host may read the tensor's values: CPU tensors, and neuron tensors with values (in
    timing-only mode only small copies from the host keep theirs: index and metadata tensors)."""
    if t.device.type != "neuron":
        return True
    return t.numel() == 0 or _C.holds_values(t.data_ptr())


def _host(t):
    """The tensor's values as a CPU tensor (a neuron tensor's bytes viewed in place: no simulated copy)."""
    return torch.ops.trnsim.host_alias(t) if t.device.type == "neuron" else t


def _pack(t):
    """The tensor's bytes as a flat uint8 CPU tensor (a view of its values where they are contiguous)."""
    return _host(t).detach().contiguous().reshape(-1).view(torch.uint8)


def _unpack(blob, dtype, shape):
    """A member's tensor from its uint8 bytes (a view, no copy)."""
    if blob.numel() == 0:
        return torch.empty(shape, dtype=dtype)
    return blob.view(dtype).reshape(shape)


def _accumulator(dtype):
    if dtype == torch.float64:
        return torch.float64
    if dtype.is_floating_point or dtype.is_complex:
        return torch.complex64 if dtype.is_complex else torch.float32
    return torch.bool if dtype == torch.bool else torch.int64


class _Reduction:
    """A ReduceOp as the values code needs it: its name and, for PREMUL_SUM, the factor each member's
    tensor is multiplied by before the sum (NCCL's semantics; FSDP2's gradient divide factor)."""

    def __init__(self, op):
        self._factor = None
        for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
            if op == getattr(ReduceOp, name):
                self.name = name
                break
        else:
            raise NotImplementedError(f"trnsim.distributed: reduce op {op} is not supported")
        if self.name == "PREMUL_SUM":
            self._factor = _C.premul_sum_factor(op)
            if self._factor is None:
                raise ValueError("trnsim.distributed: a PREMUL_SUM without its factor")

    @property
    def factor(self):
        """PREMUL_SUM's factor as a float (read from its tensor when it is one: only when values are computed)."""
        f = self._factor
        return float(_host(f).double().item()) if isinstance(f, torch.Tensor) else f

    def __str__(self):
        return self.name


def _reduce(parts, reduction, dtype):
    """The members' tensors (group-rank order) reduced in the accumulator's precision, rounded once."""
    op_name = reduction.name if isinstance(reduction, _Reduction) else reduction
    if op_name == "PREMUL_SUM":
        if not (dtype.is_floating_point or dtype.is_complex):
            raise TypeError(f"trnsim.distributed: PREMUL_SUM needs a floating-point tensor, not {dtype}")
        parts = [p.to(_accumulator(dtype)) * reduction.factor for p in parts]
        op_name = "SUM"
    acc_dtype = _accumulator(dtype)
    if op_name in ("BAND", "BOR", "BXOR") and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"trnsim.distributed: {op_name} needs an integer or bool tensor, not {dtype}")
    if op_name == "AVG" and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"trnsim.distributed: AVG needs a floating-point tensor, not {dtype}")
    if acc_dtype == torch.bool:  # sums and products of bools are or / and
        op_name = {"SUM": "BOR", "AVG": "BOR", "PRODUCT": "BAND"}.get(op_name, op_name)
    # In place on one accumulator (a copy of the first member's tensor), member after member.
    step = {"SUM": torch.Tensor.add_, "AVG": torch.Tensor.add_, "PRODUCT": torch.Tensor.mul_,
            "MIN": lambda a, b: torch.minimum(a, b, out=a), "MAX": lambda a, b: torch.maximum(a, b, out=a),
            "BAND": torch.Tensor.bitwise_and_, "BOR": torch.Tensor.bitwise_or_, "BXOR": torch.Tensor.bitwise_xor_}[op_name]
    acc = parts[0].to(acc_dtype, copy=True)
    for p in parts[1:]:
        step(acc, p.to(acc_dtype))
    if op_name == "AVG":
        acc.div_(len(parts))
    return acc.to(dtype)


def _write(dst, value):
    _host(dst).copy_(value)
    if dst.device.type == "neuron" and dst.numel() > 0 and dst.is_contiguous() \
            and dst.nbytes == dst.untyped_storage().nbytes():
        _C.mark_values(dst.data_ptr(), True)  # a write of the whole block gives it values (in timing-only mode too)


# --- work ----------------------------------------------------------------------------------------

class _Work(dist._Work):
    """A collective's handle. Its values are in place when it is returned; ``wait()`` makes the device's
    later work follow its end on the simulated clock."""

    def __init__(self, result, device, end_ns, op):
        super().__init__()
        self._result = result
        self._device = device
        self._end_ns = end_ns
        self._op = op
        self._future = Future()
        self._future.set_result(result)

    def wait(self, timeout=None):
        if self._device is not None:
            _C.wait_collective(self._device, self._end_ns, self._op)
        return True

    def is_completed(self):
        return True

    def is_success(self):
        return True

    def exception(self):
        return None

    def result(self):
        return self._result

    def get_future(self):
        return self._future

    def source_rank(self):
        return getattr(self, "_src", -1)

    def _source_rank(self):  # what dist.recv(src=None) asks the work of recv_anysource
        return getattr(self, "_src", -1)

    def synchronize(self):
        self.wait()


# --- the process group ---------------------------------------------------------------------------

def _overlap(inputs, outputs):
    """Whether an output shares memory with an input (an all-gather into the tensor its input is part of)."""
    def span(t):
        begin = t.data_ptr()
        return begin, begin + t.numel() * t.element_size()
    spans = [span(t) for t in inputs if t.numel()]
    return any(b0 < e1 and b1 < e0 for t in outputs if t.numel() for b0, e0 in [span(t)] for b1, e1 in spans)


def _buffers(tensors):
    """(data_ptr, bytes) of the neuron tensors: what a collective's engines read and write."""
    return [(t.data_ptr(), t.numel() * t.element_size()) for t in tensors if t.device.type == "neuron"]


def _mark_without_values(tensors):
    """What a collective wrote without values to move (timing-only mode) holds none."""
    for t in tensors:
        if t.device.type == "neuron" and t.numel() > 0:
            _C.mark_values(t.data_ptr(), False)


def _nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


class _Payloads:
    """A collective's payloads between ranks. The store carries them in chunks (its values are limited in size);
    when every member runs on this host, through files in shared memory instead (one write, one read each), the
    store carrying only that the file is there."""

    CHUNK_BYTES = 1 << 20

    def __init__(self, store, rank, size):
        self._store = store
        self._dir = None
        self._heartbeat = None
        # How get() waits for a key (the process group's wait looks at the members meanwhile).
        self.wait = lambda keys, what=None: store.wait(keys)
        host = socket.gethostname()
        token = uuid.uuid4().hex if rank == 0 else None
        store.set(f"trnsim/host/{rank}", pickle.dumps((host, token, _liveness.identity())))
        members = [pickle.loads(store.get(f"trnsim/host/{r}")) for r in range(size)]
        self.identities = [m[2] for m in members]  # what tells whether each member is still there
        shm = "/dev/shm"
        if all(h == host for h, _, _ in members) and os.path.isdir(shm) and os.access(shm, os.W_OK):
            self._dir = os.path.join(shm, f"trnsim-{members[0][1]}")
            if rank == 0:
                for stale in _liveness.stale_segments(shm, self.identities[0]):
                    shutil.rmtree(stale, True)
            os.makedirs(self._dir, exist_ok=True)
            _SETTINGS.own_segment(self._dir)
            if rank == 0:
                _liveness.write_members(self._dir, self.identities)
                atexit.register(shutil.rmtree, self._dir, True)
            self._heartbeat = _liveness.Heartbeat(self._dir, rank)

    @property
    def segment(self):
        """The shared-memory folder of the group's payloads (None: they go through the store)."""
        return self._dir

    def remove_segment(self):
        """Removes the shared-memory folder (a member is gone: the group cannot go on)."""
        if self._dir is not None:
            shutil.rmtree(self._dir, True)

    # A message: 8 bytes of header length, the pickled header (and the blobs' sizes), then each blob at a
    # multiple of 64 bytes (so a view of it as any dtype is aligned).
    @staticmethod
    def _layout(header, blobs):
        head = pickle.dumps((header, [int(b.numel()) for b in blobs]))
        pieces, offset = [len(head).to_bytes(8, "little"), head], 8 + len(head)
        for blob in blobs:
            pad = -offset % 64
            pieces.append(b"\0" * pad)
            pieces.append(memoryview(blob.numpy()) if blob.numel() else b"")
            offset += pad + blob.numel()
        return pieces

    @staticmethod
    def _parse(buffer):
        raw = torch.frombuffer(buffer, dtype=torch.uint8)
        length = int.from_bytes(bytes(buffer[:8]), "little")
        header, sizes = pickle.loads(bytes(buffer[8:8 + length]))
        blobs, offset = [], 8 + length
        for size in sizes:
            offset += -offset % 64
            blobs.append(raw[offset:offset + size])
            offset += size
        return header, blobs

    def put(self, key, header, blobs=()):
        """Posts (header, blobs: flat uint8 CPU tensors) under `key`."""
        pieces = self._layout(header, list(blobs))
        if self._dir is not None:
            path = os.path.join(self._dir, key.replace("/", "_"))
            with open(path + ".tmp", "wb") as f:
                for piece in pieces:
                    f.write(piece)
            os.replace(path + ".tmp", path)
            self._store.set(key, b"shm")
            return
        data = b"".join(bytes(p) for p in pieces)
        chunks = [data[i:i + self.CHUNK_BYTES] for i in range(0, len(data), self.CHUNK_BYTES)] or [b""]
        for i, chunk in enumerate(chunks[1:], 1):
            self._store.set(f"{key}#{i}", chunk)
        self._store.set(key, pickle.dumps(len(chunks)) + b"|" + chunks[0])  # the head last: all are there

    def get(self, key, what=None):
        """(header, blobs) posted under `key` (waits for it: `what` it is, for errors); the blobs are views of one
        buffer read once."""
        self.wait([key], what)
        head = self._store.get(key)
        if self._dir is not None:
            # Mapped, not read: the blobs view the shared-memory pages (a private mapping, so writable for
            # torch.frombuffer and untouched by the writer; it outlives the file's deletion).
            with open(os.path.join(self._dir, key.replace("/", "_")), "rb") as f:
                return self._parse(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
        count_bytes, first = head.split(b"|", 1)
        count = pickle.loads(count_bytes)
        return self._parse(bytearray(first + b"".join(self._store.get(f"{key}#{i}") for i in range(1, count))))

    def delete(self, key):
        if self._dir is not None:
            try:
                os.unlink(os.path.join(self._dir, key.replace("/", "_")))
            except FileNotFoundError:
                pass
            self._store.delete_key(key)
            return
        head = self._store.get(key)
        count = pickle.loads(head.split(b"|", 1)[0])
        for i in range(1, count):
            self._store.delete_key(f"{key}#{i}")
        self._store.delete_key(key)


class NeuronProcessGroup(dist.ProcessGroup):
    """The process group of backend ``"neuron"``; see the module's documentation."""

    def __init__(self, store, rank, size, global_ranks, group_name, timeout):
        super().__init__(rank, size)
        self._store = store
        self._rank = rank
        self._size = size
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._group_name = group_name
        self._timeout = timeout
        self._sequence = 0
        self._p2p_sequence = {}
        self._p2p_received = {}   # (src, tag) -> sequence numbers already received (recv_anysource takes any)
        self._inbox_next = {}     # tag -> the next entry of this rank's inbox recv_anysource reads
        self._symmetric = _SETTINGS.symmetric
        self._payloads = None if self._symmetric else _Payloads(store, rank, size)
        if self._payloads is not None:
            self._payloads.wait = self._await
        world = dist.get_world_size() if dist.is_initialized() else size
        world = max(world, max(self._global_ranks) + 1)
        self._family = _translates(self._global_ranks, world)
        name, per_chip = _choose_system(world)
        self._system = _system_model(name, per_chip)
        self.system_name = name
        # The links this rank's trace draws: its chip's (its outgoing NeuronLinks, switch / EFA ports, on-chip path).
        self._link_prefix = f"chip{self._global_ranks[rank] // per_chip} "
        # What c10d's C++ reaches through the dispatcher (functional collectives) comes back here.
        backend = _C.forwarding_backend(self, rank, size)
        for device in ("neuron", "cpu"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, backend)

    # c10d's Python surface
    def getBackendName(self):
        return BACKEND

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def __repr__(self):
        return f"NeuronProcessGroup(rank={self._rank}, size={self._size}, system={self.system_name!r})"

    # --- members that are gone --------------------------------------------------------------------
    def _await(self, keys, what=None):
        """Waits until the store holds `keys`, looking at the other members meanwhile: one that has exited is an
        error naming it within a fraction of a second, not after the group's timeout."""
        what = what or f"{', '.join(keys)} of collective #{self._sequence}"
        start = time.monotonic()
        deadline = start + self._timeout.total_seconds()
        next_look, sleep_s = start + _liveness.CHECK_PERIOD_S, 0.0
        while True:
            try:
                if self._store.check(keys):
                    return
            except RuntimeError as error:  # the store is unreachable: its host may be the member that is gone
                self._raise_if_gone(what, error)
                raise
            now = time.monotonic()
            if now >= next_look:
                self._raise_if_gone(what)
                next_look = now + _liveness.CHECK_PERIOD_S
            if now >= deadline:
                raise dist.DistStoreError(f"trnsim.distributed: rank {self._rank} of group {self._group_name!r} waited "
                                          f"{self._timeout} (the process group's timeout) for {what}; every member "
                                          "it can see is still running")
            time.sleep(sleep_s)
            sleep_s = min(_liveness.POLL_MAX_S, max(1.5 * sleep_s, 5e-5))

    def _gone(self):
        """[(group rank, how it went)] of the other members that have exited or stopped beating."""
        mine = self._payloads.identities[self._rank]
        segment = self._payloads.segment
        gone = []
        for r, theirs in enumerate(self._payloads.identities):
            if r == self._rank:
                continue
            exited = _liveness.process_gone(mine, theirs)
            if exited:
                gone.append((r, "has exited"))
            elif exited is None and segment is not None:
                age_s = _liveness.heartbeat_age_s(segment, r)
                if age_s is not None and age_s > _liveness.heartbeat_timeout_s():
                    gone.append((r, f"stopped its heartbeat {age_s:.1f} s ago"))
        return gone

    def _raise_if_gone(self, what, cause=None):
        """Raises naming the members that are gone (and removes the group's shared segment: nobody will read it). With
        a `cause` (a store or segment error), looks for such a member for a few seconds (one that is exiting may still
        be there); returns if there is none."""
        gone = self._gone()
        until = time.monotonic() + (_liveness.GRACE_S if cause is not None else 0.0)
        while not gone and time.monotonic() < until:
            time.sleep(_liveness.CHECK_PERIOD_S)
            gone = self._gone()
        if not gone:
            return
        self._payloads.remove_segment()
        agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() in ("1", "true")
        parts = []
        for r, how in gone:
            theirs = self._payloads.identities[r]
            text = (f"rank {r} of group {self._group_name!r} (global rank {self._global_ranks[r]}, pid {theirs['pid']} "
                    f"on {theirs['host']}) {how}")
            if self._global_ranks[r] == 0 and not agent_store:
                text += ("; it hosted the process group's store (torch.distributed's TCPStore lives in global rank "
                         "0's process), so no member can go on")
            parts.append(text)
        raise RuntimeError(f"trnsim.distributed: {'; '.join(parts)}. Rank {self._rank} was waiting for {what}.") \
            from cause

    def _segment_error(self, error, what):
        """A shared-memory payload that vanished: a member that is gone if there is one, else what happened."""
        self._raise_if_gone(what, error)
        raise RuntimeError(f"trnsim.distributed: rank {self._rank} of group {self._group_name!r}: the shared-memory "
                           f"payload of {what} is gone ({error}); rank 0 removes the group's segment when it exits") \
            from error

    # --- the exchange ----------------------------------------------------------------------------
    def _device_of(self, tensors):
        for t in tensors:
            if t.device.type == "neuron":
                return t.device.index if t.device.index is not None else _C.current_device()
        return None

    def _exchange(self, kind, meta, blobs, arrival_ns, snapshot=False):
        """Every member's (arrival, meta, blobs) in group-rank order (real ranks through the store). `snapshot`:
        this rank's blobs are copied (its outputs overlap its inputs, so writing them would change what is read)."""
        self._sequence += 1
        own = [b.clone() for b in blobs] if snapshot else blobs
        if self._symmetric:
            return [(arrival_ns, meta, own)] * self._size, None
        key = f"trnsim/{self._sequence}"
        what = f"{kind} #{self._sequence}"
        try:
            self._payloads.put(f"{key}/{self._rank}", (kind, arrival_ns, meta), blobs)
        except OSError as error:
            self._segment_error(error, what)
        members = []
        for r in range(self._size):
            if r == self._rank:
                got = (kind, arrival_ns, meta, own)
            else:
                part = f"rank {r}'s part of {what}"
                try:
                    header, their_blobs = self._payloads.get(f"{key}/{r}", part)
                except OSError as error:
                    self._segment_error(error, part)
                got = (*header, their_blobs)
            if got[0] != kind:
                raise RuntimeError(f"trnsim.distributed: collective #{self._sequence} of group {self._group_name!r}: "
                                   f"rank {self._rank} calls {kind} but rank {r} calls {got[0]}")
            members.append(got[1:])
        return members, key

    def _finish(self, key):
        """Every member leaves a collective only when all have read it: the store lives in rank 0's process, so
        a rank that returned early and exited would cut the others off. The last to finish deletes its keys
        (and the previous collective's "all" marker, which every member has passed once they all reached this
        one)."""
        if key is None:
            return
        try:
            done = self._store.add(f"{key}/done", 1)
        except RuntimeError as error:  # the store is unreachable
            self._raise_if_gone(f"the other members to read collective #{self._sequence}", error)
            raise
        if done == self._size:
            for r in range(self._size):
                self._payloads.delete(f"{key}/{r}")
            for name in ("time", "done"):
                self._store.delete_key(f"{key}/{name}")
            if self._sequence > 1:
                self._store.delete_key(f"trnsim/{self._sequence - 1}/all")
            self._store.set(f"{key}/all", b"")
        else:
            self._await([f"{key}/all"], f"the other members to read collective #{self._sequence}")

    def _time(self, key, sim_op, nbytes, start_ns, pairs=(), root=None):
        """(latency ns, algorithm, trace args, link bytes) of the collective on the system model, from the group's
        first member."""
        if self._symmetric or self._rank == 0:
            # A symmetric program runs the same collective on every group of the family at once (DeviceMesh's
            # groups of one dimension): they are booked first, this group last, so it meets their traffic on
            # the links they share (booked one after another, the last finishes when the shared links have
            # carried them all: the fair-share end for equal transfers).
            for group in self._family[1:]:
                self._system.run(sim_op, int(nbytes), group, float(start_ns), "auto", [group[p] for p in pairs],
                                 -1 if root is None else group[root])
            t = self._system.run(sim_op, int(nbytes), self._global_ranks, float(start_ns), "auto",
                                 [self._global_ranks[p] for p in pairs],
                                 -1 if root is None else self._global_ranks[root])
            timing = (t["latency_ns"], t["algorithm"], _link_args(t), t["link_bytes"])
            if key is not None:
                self._store.set(f"{key}/time", pickle.dumps(timing))
            return timing
        self._await([f"{key}/time"], f"rank 0's timing of collective #{self._sequence}")
        return pickle.loads(self._store.get(f"{key}/time"))

    def _collective(self, kind, sim_op, inputs, outputs, nbytes, compute, meta=None, pairs=(), root=None):
        """Runs one collective: exchange, values (`compute(members)` writes the outputs), time, record."""
        tensors = inputs + outputs
        device = self._device_of(tensors)
        arrival_ns = _now(device)
        # A symmetric world has only this rank's values: the others' are taken to equal them (what CPU-side
        # bookkeeping such as DDP's shape check needs); device tensors there hold none (timing-only).
        with_values = all(_has_values(t) for t in inputs)
        blobs = [_pack(t) for t in inputs] if with_values else []
        meta = dict(meta or {}, shapes=[list(t.shape) for t in inputs], dtypes=[t.dtype for t in inputs],
                    device=device is not None, values=with_values)
        members, key = self._exchange(kind, meta, blobs, arrival_ns, snapshot=_overlap(inputs, outputs))
        end_ns = 0.0
        try:
            if all(m[1]["values"] for m in members):
                compute(members)
            else:
                _mark_without_values(outputs or inputs)
            if device is not None and all(m[1]["device"] for m in members):
                start_ns = max(m[0] for m in members)
                latency_ns, algorithm, link_args, link_bytes = self._time(key, sim_op, nbytes, start_ns, pairs, root)
                end_ns = start_ns + latency_ns
                _C.record_collective(device, kind, _dtype_name((inputs or outputs)[0]), [list(t.shape) for t in inputs],
                                     int(nbytes), start_ns, latency_ns, algorithm, _buffers(tensors),
                                     link_args + [("group", str(self._global_ranks))], self._own_links(link_bytes))
            else:
                device = None
        except BaseException:
            if key is not None and not self._gone():  # a member that is gone would not come to the "done" count
                self._finish(key)
            raise
        self._finish(key)
        return _Work(outputs or inputs, device, end_ns, kind)

    @staticmethod
    def _parts(members, index):
        """Member tensors number `index` (in group-rank order) from their blobs."""
        out = []
        for _, meta, blobs in members:
            out.append(_unpack(blobs[index], meta["dtypes"][index], meta["shapes"][index]))
        return out

    # --- collectives -----------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _Reduction(opts.reduceOp if opts is not None else ReduceOp.SUM)

        def compute(members):
            for i, t in enumerate(tensors):
                _write(t, _reduce(self._parts(members, i), op, t.dtype))
        return self._collective("all_reduce", "all_reduce", list(tensors), [], _nbytes(tensors), compute)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts=None):
        op = _Reduction(opts.reduceOp if opts is not None else ReduceOp.SUM)
        root = opts.rootRank if opts is not None else 0

        def compute(members):
            if self._rank == root:
                for i, t in enumerate(tensors):
                    _write(t, _reduce(self._parts(members, i), op, t.dtype))
        return self._collective("reduce", "reduce", list(tensors), [], _nbytes(tensors), compute, root=root)

    def allgather(self, output_tensors, input_tensors, opts=None):
        # output_tensors[i][r] receives member r's input_tensors[i]
        def compute(members):
            for i, outs in enumerate(output_tensors):
                for r, part in enumerate(self._parts(members, i)):
                    _write(outs[r], part.reshape(outs[r].shape))
        outs = [t for o in output_tensors for t in o]
        return self._collective("all_gather", "all_gather", list(input_tensors), outs, _nbytes(outs), compute)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        return self.allgather(output_lists, input_tensors, opts)

    def all_gather_single(self, output_tensor, input_tensor, opts=None):
        def compute(members):
            parts = self._parts(members, 0)
            _write(output_tensor, torch.cat([p.reshape(-1) for p in parts]).reshape(output_tensor.shape))
        return self._collective("all_gather", "all_gather", [input_tensor], [output_tensor],
                                _nbytes([output_tensor]), compute)

    def all_gather_single_coalesced(self, output_tensors, input_tensors, opts=None):
        work = None
        for o, i in zip(output_tensors, input_tensors):
            work = self.all_gather_single(o, i, opts)
        return work

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        # output_tensors[i] gets the reduction over members of input_lists[i][rank]
        op = _Reduction(opts.reduceOp if opts is not None else ReduceOp.SUM)
        flat_inputs = [t for lst in input_lists for t in lst]

        def compute(members):
            index = 0
            for i, out in enumerate(output_tensors):
                n = len(input_lists[i])
                _write(out, _reduce(self._parts(members, index + self._rank), op, out.dtype).reshape(out.shape))
                index += n
        return self._collective("reduce_scatter", "reduce_scatter", flat_inputs, list(output_tensors),
                                _nbytes(flat_inputs), compute, {"op": str(op)})

    def reduce_scatter_single(self, output_tensor, input_tensor, opts=None):
        op = _Reduction(opts.reduceOp if opts is not None else ReduceOp.SUM)

        def compute(members):
            parts = [p.reshape(self._size, -1)[self._rank] for p in self._parts(members, 0)]
            _write(output_tensor, _reduce(parts, op, output_tensor.dtype).reshape(output_tensor.shape))
        return self._collective("reduce_scatter", "reduce_scatter", [input_tensor], [output_tensor],
                                _nbytes([input_tensor]), compute, {"op": str(op)})

    def reduce_scatter_single_coalesced(self, output_tensors, input_tensors, opts=None):
        work = None
        for o, i in zip(output_tensors, input_tensors):
            work = self.reduce_scatter_single(o, i, opts)
        return work

    def alltoall(self, output_tensors, input_tensors, opts=None):
        # output_tensors[r] receives member r's input_tensors[rank]
        def compute(members):
            for r, out in enumerate(output_tensors):
                _, meta, blobs = members[r]
                _write(out, _unpack(blobs[self._rank], meta["dtypes"][self._rank],
                                    meta["shapes"][self._rank]).reshape(out.shape))
        return self._collective("all_to_all", "all_to_all", list(input_tensors), list(output_tensors),
                                _nbytes(input_tensors), compute)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        in_splits = list(input_split_sizes) or [input.shape[0] // self._size] * self._size
        out_splits = list(output_split_sizes) or [output.shape[0] // self._size] * self._size

        def compute(members):
            pieces = []
            for r, (_, meta, blobs) in enumerate(members):
                whole = _unpack(blobs[0], meta["dtypes"][0], meta["shapes"][0])
                splits = meta["splits"]
                begin = sum(splits[:self._rank])
                pieces.append(whole[begin:begin + splits[self._rank]])
            result = torch.cat(pieces) if pieces else torch.empty(0)
            _write(output, result.reshape(output.shape))
        return self._collective("all_to_all", "all_to_all", [input], [output], _nbytes([input]), compute,
                                {"splits": in_splits, "out_splits": out_splits})

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        if opts is not None and getattr(opts, "rootTensor", 0):
            raise NotImplementedError("trnsim.distributed: broadcast with rootTensor != 0")

        def compute(members):
            if self._rank != root:
                for i, t in enumerate(tensors):
                    _write(t, self._parts(members[root:root + 1], i)[0])
        return self._collective("broadcast", "broadcast", list(tensors), [], _nbytes(tensors), compute, root=root)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        inputs = [t for lst in input_tensors for t in lst] if self._rank == root else []

        def compute(members):
            _, meta, blobs = members[root]
            for i, out in enumerate(output_tensors):
                index = i * self._size + self._rank
                _write(out, _unpack(blobs[index], meta["dtypes"][index], meta["shapes"][index]).reshape(out.shape))
        pairs = [p for r in range(self._size) if r != root for p in (root, r)]
        return self._collective("scatter", "permute", inputs, list(output_tensors), _nbytes(output_tensors),
                                compute, pairs=pairs)

    def gather(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        outs = [t for lst in output_tensors for t in lst] if self._rank == root else []

        def compute(members):
            if self._rank == root:
                for i, lst in enumerate(output_tensors):
                    for r, part in enumerate(self._parts(members, i)):
                        _write(lst[r], part.reshape(lst[r].shape))
        pairs = [p for r in range(self._size) if r != root for p in (r, root)]
        return self._collective("gather", "permute", list(input_tensors), outs, _nbytes(input_tensors), compute,
                                pairs=pairs)

    def barrier(self, opts=None):
        device = _C.current_device() if torch.neuron.device_count() > 0 else None
        marker = torch.empty(1, device=f"neuron:{device}") if device is not None else torch.empty(1)
        work = self._collective("barrier", "all_reduce", [marker], [], 4, lambda members: None)
        work.wait()
        return work

    # --- point to point --------------------------------------------------------------------------
    def _p2p_key(self, src, dst, tag, n=None):
        """The store key of the n-th message from src to dst with tag (n: the next one this rank sends or, for a
        receive, the first it has not received yet)."""
        if n is None:
            n = self._p2p_sequence.get((src, dst, tag), 0) + 1
            if dst == self._rank:
                while self._received(src, tag, n):
                    n += 1
            self._p2p_sequence[(src, dst, tag)] = n
        if dst == self._rank:
            # Received: every number up to the sequence, and those recv_anysource took beyond it.
            above = self._p2p_received.setdefault((src, tag), set())
            above.add(n)
            floor = self._p2p_sequence.get((src, dst, tag), 0)
            while floor + 1 in above:
                floor += 1
            self._p2p_sequence[(src, dst, tag)] = floor
            above.difference_update([m for m in above if m <= floor])
        return f"trnsim/p2p/{src}>{dst}/{tag}/{n}", n

    def _received(self, src, tag, n):
        return n <= self._p2p_sequence.get((src, self._rank, tag), 0) or n in self._p2p_received.get((src, tag), ())

    def _inbox_key(self, dst, tag, k):
        return f"trnsim/p2p/inbox/{dst}/{tag}/{k}"

    def _p2p_time(self, src, dst, nbytes, start_ns):
        t = self._system.run("send_recv", int(nbytes), [self._global_ranks[src], self._global_ranks[dst]],
                             float(start_ns), "auto", [self._global_ranks[src], self._global_ranks[dst]])
        return t["latency_ns"], t["algorithm"], _link_args(t), t["link_bytes"]

    def _own_links(self, link_bytes):
        """The (link, bytes) of a collective's traffic on this rank's chip."""
        return [(name, b) for name, b in link_bytes if name.startswith(self._link_prefix)]

    def _record_p2p(self, kind, device, tensors, start_ns, latency_ns, algorithm, link_args, link_bytes):
        _C.record_collective(device, kind, _dtype_name(tensors[0]), [list(t.shape) for t in tensors],
                             _nbytes(tensors), start_ns, latency_ns, algorithm, _buffers(tensors), link_args,
                             self._own_links(link_bytes))

    def send(self, tensors, dst, tag=0):
        # The sender does not wait for the receiver: it is timed as if the receiver were ready when it sends
        # (the receiver's own record starts when both are there).
        device = self._device_of(tensors)
        arrival_ns = _now(device)
        with_values = all(_has_values(t) for t in tensors) and not self._symmetric
        blobs = [_pack(t) for t in tensors] if with_values else []
        if not self._symmetric:
            key, n = self._p2p_key(self._rank, dst, tag)
            try:
                self._payloads.put(key, arrival_ns, blobs)
            except OSError as error:
                self._segment_error(error, f"a message to rank {dst} with tag {tag}")
            # The receiver's inbox lists every message in the order it was posted, for recv_anysource.
            k = self._store.add(f"trnsim/p2p/inbox/{dst}/{tag}", 1)
            self._store.set(self._inbox_key(dst, tag, k), f"{self._rank}:{n}")
        end_ns = 0.0
        if device is not None:
            latency_ns, algorithm, link_args, link_bytes = self._p2p_time(self._rank, dst, _nbytes(tensors), arrival_ns)
            self._record_p2p("send", device, tensors, arrival_ns, latency_ns, algorithm, link_args, link_bytes)
            end_ns = arrival_ns + latency_ns
        return _Work(tensors, device, end_ns, "send")

    def recv(self, tensors, src, tag=0, sequence=None):
        device = self._device_of(tensors)
        arrival_ns = _now(device)
        sent_ns = arrival_ns
        if not self._symmetric:
            key, _ = self._p2p_key(src, self._rank, tag, sequence)
            message = f"a message from rank {src} with tag {tag}"
            try:
                sent_ns, blobs = self._payloads.get(key, message)
            except OSError as error:
                self._segment_error(error, message)
            self._payloads.delete(key)
            for t, blob in zip(tensors, blobs):
                _write(t, _unpack(blob, t.dtype, t.shape))
            if not blobs:
                _mark_without_values(tensors)
        end_ns = 0.0
        if device is not None:
            start_ns = max(arrival_ns, sent_ns)
            latency_ns, algorithm, link_args, link_bytes = self._p2p_time(src, self._rank, _nbytes(tensors), start_ns)
            self._record_p2p("recv", device, tensors, start_ns, latency_ns, algorithm, link_args, link_bytes)
            end_ns = start_ns + latency_ns
        work = _Work(tensors, device, end_ns, "recv")
        work._src = src
        return work

    def recv_anysource(self, tensors, tag=0):
        """The first message posted to this rank with ``tag`` that no receive has taken yet, from whichever rank
        (``Work._source_rank()`` names it)."""
        if self._symmetric:
            raise NotImplementedError("trnsim.distributed: recv without a source rank (recv_anysource) needs real "
                                      "ranks; simulate_world runs rank 0 alone and cannot know who sends")
        while True:
            k = self._inbox_next.get(tag, 1)
            self._inbox_next[tag] = k + 1
            key = self._inbox_key(self._rank, tag, k)
            self._await([key], f"a message with tag {tag} from any rank")
            src, n = (int(x) for x in self._store.get(key).decode().split(":"))
            self._store.delete_key(key)
            if not self._received(src, tag, n):
                return self.recv(tensors, src, tag, sequence=n)



def _create(dist_backend_opts, backend_options):
    return NeuronProcessGroup(dist_backend_opts.store, dist_backend_opts.group_rank, dist_backend_opts.group_size,
                              list(dist_backend_opts.global_ranks_in_group), dist_backend_opts.group_id,
                              dist_backend_opts.timeout)


def _register():
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["neuron", "cpu"])



def simulate_world(world_size=None, system=None, timeout=timedelta(minutes=30)):
    """Make this process rank 0 of a symmetric SPMD world of ``world_size`` ranks (default
    ``$TRNSIM_SIMULATE_WORLD``): ``torch.distributed`` is initialised with backend ``"neuron"``, every
    collective is timed for the whole group on the system model with every member arriving when rank 0
    does, and the device switches to timing-only mode (the other ranks' values do not exist). The way to
    time 64 or 144 chips on one machine. Groups rank 0 is not in are not created (their traffic does not
    contend with rank 0's)."""
    if world_size is None:
        env = os.environ.get("TRNSIM_SIMULATE_WORLD")
        if not env:
            raise ValueError("simulate_world: give world_size or set TRNSIM_SIMULATE_WORLD")
        world_size = int(env)
    world_size = int(world_size)
    if world_size < 1:
        raise ValueError(f"simulate_world: world_size {world_size} < 1")
    if dist.is_initialized():
        raise RuntimeError("simulate_world: torch.distributed is already initialised")
    if system is not None:
        set_system(system)
    _C.set_values_enabled(False)
    _SETTINGS.symmetric = True
    try:
        dist.init_process_group(BACKEND, rank=0, world_size=world_size, store=dist.HashStore(), timeout=timeout)
    except BaseException:
        _SETTINGS.symmetric = False
        raise
    return dist.group.WORLD


_register()
