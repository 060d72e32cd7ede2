"""``torch.neuron``: the device module of the simulated Trainium device (registered by
``import trnsim``). Mirrors the parts of ``torch.cuda`` that generic PyTorch code calls."""
import contextlib
import types

import torch

from . import _C

_initialized = True


def _lazy_init():
    pass


def is_initialized():
    return _initialized


def _is_in_bad_fork():
    return False


def is_available():
    return _C.device_count() > 0


def device_count():
    """Logical NeuronCores of the configured system."""
    return _C.device_count()


def _index(device=None):
    if device is None:
        return _C.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "neuron":
        raise ValueError(f"expected a neuron device, got {device}")
    return _C.current_device() if device.index is None else device.index


def current_device():
    return _C.current_device()


def set_device(device):
    _C.set_device(_index(device))


@contextlib.contextmanager
def device(dev):
    previous = _C.current_device()
    _C.set_device(_index(dev))
    try:
        yield
    finally:
        _C.set_device(previous)


def synchronize(device=None):
    """The host waits for every stream of the device: its default stream continues after the
    latest of them (the simulator runs each op to completion; only the clocks move)."""
    _C.synchronize(_index(device))


# --- streams and events ----------------------------------------------------------------------
# torch.cuda's stream surface, which stream-aware code (FSDP2, pipelining) calls. Each stream has
# its own simulated clock (DeviceRuntime): an op runs on the current stream, after that stream's
# earlier work, on the core as soon as the core is free (ops of all streams share it; a side
# stream's op may fill a gap the default stream left while it waited). wait_stream / wait_event
# order streams as on the hardware; a collective issued on a stream (trnsim.distributed) starts
# at that stream's clock. trnsim.simulated_ns() is the default stream's clock. An event records
# its stream's clock, so elapsed_time() is simulated milliseconds.

class Stream:
    _next_id = [1]

    def __init__(self, device=None, priority=0, **kwargs):
        self.device = torch.device("neuron", _index(device))
        self.device_index = self.device.index
        self.priority = priority
        self.stream_id = kwargs.get("_stream_id")
        if self.stream_id is None:
            self.stream_id = Stream._next_id[0]
            Stream._next_id[0] += 1

    def wait_stream(self, stream):
        _C.stream_wait(self.device_index, self.stream_id, _C.stream_clock(_device_of(stream), stream.stream_id),
                       f"stream {stream.stream_id}", stream.stream_id)

    def wait_event(self, event):
        if event._ns is not None:
            _C.stream_wait(self.device_index, self.stream_id, event._ns, "event", event._stream_id)

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self):
        return True

    def synchronize(self):
        pass

    def __eq__(self, other):
        return isinstance(other, Stream) and (self.device_index, self.stream_id) == (other.device_index,
                                                                                     other.stream_id)

    def __hash__(self):
        return hash((self.device_index, self.stream_id))

    def __repr__(self):
        return f"<torch.neuron.Stream device={self.device} id={self.stream_id} priority={self.priority}>"


class Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self._device = None
        self._ns = None
        self._stream_id = None  # the stream it was recorded on: a wait for it waits for that stream's clock

    def record(self, stream=None):
        stream = current_stream() if stream is None else stream
        index = _device_of(stream)
        self._device, self._ns, self._stream_id = index, _C.stream_clock(index, stream.stream_id), stream.stream_id

    def wait(self, stream=None):
        (current_stream() if stream is None else stream).wait_event(self)

    def query(self):
        return True

    def synchronize(self):
        pass

    def elapsed_time(self, end_event):
        """Simulated milliseconds from this event to `end_event` (both recorded)."""
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("elapsed_time: both events must be recorded")
        return (end_event._ns - self._ns) / 1e6


_streams = {}  # (device, id) -> Stream, so current_stream() returns the object that was set


def _device_of(stream):
    """A stream's device index; torch.Stream("neuron") has none (-1): the current device's."""
    index = stream.device_index
    return _C.current_device() if index is None or index < 0 else index


def _stream_object(index, stream_id):
    key = (index, stream_id)
    if key not in _streams:
        _streams[key] = Stream(index, _stream_id=stream_id)
    return _streams[key]


def current_stream(device=None):
    index = _index(device)
    return _stream_object(index, _C.current_stream(index))


def default_stream(device=None):
    return _stream_object(_index(device), 0)


def set_stream(stream):
    """Make `stream` (a torch.neuron.Stream or a torch.Stream of the device) current on its device."""
    index = _device_of(stream)
    _streams[(index, stream.stream_id)] = stream
    _C.set_stream(index, stream.stream_id)


@contextlib.contextmanager
def stream(stream_to_use):
    if stream_to_use is None:
        yield None
        return
    previous = current_stream(_device_of(stream_to_use))
    set_stream(stream_to_use)
    try:
        yield stream_to_use
    finally:
        set_stream(previous)


# --- memory: simulated HBM -----------------------------------------------------------------

def memory_stats(device=None):
    """The simulated HBM's figures, under trnsim's names and torch.cuda.memory_stats()'s (what
    frameworks such as TorchTitan read): no caching allocator, so reserved = active = allocated."""
    stats = dict(_C.memory_stats(_index(device)))
    for prefix in ("allocated_bytes", "active_bytes", "reserved_bytes"):
        stats[f"{prefix}.all.current"] = stats["allocated_bytes"]
        stats[f"{prefix}.all.peak"] = stats["peak_allocated_bytes"]
    stats["num_alloc_retries"] = 0
    stats["num_device_alloc"] = stats["num_allocs"]
    return stats


def memory_allocated(device=None):
    return _C.memory_stats(_index(device))["allocated_bytes"]


def max_memory_allocated(device=None):
    return _C.memory_stats(_index(device))["peak_allocated_bytes"]


def memory_reserved(device=None):
    # No caching allocator: what is reserved is what is allocated.
    return memory_allocated(device)


def max_memory_reserved(device=None):
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None):
    _C.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def empty_cache():
    pass


def mem_get_info(device=None):
    """(free, total) bytes of the device's simulated HBM."""
    stats = _C.memory_stats(_index(device))
    return stats["capacity_bytes"] - stats["allocated_bytes"], stats["capacity_bytes"]


def get_device_properties(device=None):
    """As torch-neuronx reports them: ``name`` the chip's generation ("trn2"; what frameworks key
    their peak FLOPs on), plus the config's own name and the device's bf16 peak."""
    info = _C.config_info()
    return types.SimpleNamespace(name=_generation(info), config=info["name"], total_memory=info["hbm_bytes_per_device"],
                                 config_hash=info["hash"],
                                 peak_bf16_tflops=info["peak_bf16_tflops_per_device"])


_generations = {}  # config hash -> its generation


def _generation(info):
    if info["hash"] not in _generations:
        _generations[info["hash"]] = _C.config_leaves(info["source_file"], []).get("generation", info["name"])
    return _generations[info["hash"]]


def get_device_name(device=None):
    """"neuron <generation> (simulated by trnsim, config <name>)": the word "neuron" as torch-neuronx's
    device names have it."""
    props = get_device_properties(device)
    return f"neuron {props.name} (simulated by trnsim, config {props.config})"


# --- random numbers ------------------------------------------------------------------------
# The device's random ops (randn, rand, randint, bernoulli, dropout, ...) draw from these
# per-device generators (torch.manual_seed seeds them too; the algorithm is the CPU's, so a seed
# gives the CPU's values).

def get_rng_state(device="neuron"):
    """The device generator's state: 16 uint8 bytes, (seed, offset) as torch.cuda's Philox state (sim_generator.h)."""
    return torch.frombuffer(bytearray(_C.get_rng_state(_index(device))), dtype=torch.uint8)


def set_rng_state(new_state, device="neuron"):
    _C.set_rng_state(_index(device), bytes(new_state.cpu().to(torch.uint8).numpy().tobytes()))


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed):
    _C.manual_seed(_C.current_device(), int(seed))


def manual_seed_all(seed):
    for i in range(device_count()):
        _C.manual_seed(i, int(seed))


def seed():
    manual_seed(torch.seed())


def seed_all():
    manual_seed_all(torch.seed())


def initial_seed():
    return _C.initial_seed(_C.current_device())


# --- autocast: per-op cast policies on AutocastPrivateUse1 (frontend/autocast.cpp) -----------
# The simulator's matmul engine takes bf16 and fp16 (fp32 accumulation), so both are offered; torch's
# default autocast dtype for a PrivateUse1 device stays float16, so pass dtype=torch.bfloat16 for bf16.

def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_autocast_enabled():
    return torch.is_autocast_enabled("neuron")


def set_autocast_enabled(enabled):
    torch.set_autocast_enabled("neuron", enabled)


def get_autocast_dtype():
    return torch.get_autocast_dtype("neuron")


def set_autocast_dtype(dtype):
    torch.set_autocast_dtype("neuron", dtype)


# torch.load(map_location="neuron:1") asks the device module for the index.
def _get_device_index(device, optional=False):
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.index is None:
            if not optional:
                raise ValueError(f"expected a device with an index, got {device}")
            return _C.current_device()
        return device.index
    return int(device)


_utils = types.SimpleNamespace(_get_device_index=_get_device_index)
