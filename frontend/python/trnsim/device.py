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
    """The simulator runs each op to completion: nothing is in flight."""


# --- memory: simulated HBM -----------------------------------------------------------------

def memory_stats(device=None):
    return dict(_C.memory_stats(_index(device)))


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
    info = _C.config_info()
    return types.SimpleNamespace(name=f"simulated {info['name']} logical NeuronCore",
                                 total_memory=info["hbm_bytes_per_device"], config_hash=info["hash"])


def get_device_name(device=None):
    return get_device_properties(device).name


# --- random numbers ------------------------------------------------------------------------
# The device's random ops (randn, rand, randint, bernoulli, dropout, ...) draw from these
# per-device generators (torch.manual_seed seeds them too; the algorithm is the CPU's, so a seed
# gives the CPU's values).

def get_rng_state(device="neuron"):
    """The device generator's state as a uint8 CPU tensor (like torch.cuda.get_rng_state)."""
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
