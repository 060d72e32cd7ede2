"""PyTorch's device-backend autoload for trnsim: ``import torch`` registers the device ``"neuron"``.

torch 2.13's ``import torch`` calls every entry point of the group ``"torch.backends"``
(``torch._import_device_backends``; ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off). trnsim's
entry point is :func:`autoload` here, a module outside the package so that deciding not to load
trnsim costs nothing: importing anything inside ``trnsim`` would run its ``__init__``, which
registers the device.

The dynamo backend ``"neuron"`` (group ``"torch_dynamo_backends"``) is :func:`compile_backend`
here, so ``torch.compile(m, backend="neuron")`` finds it without ``torch._dynamo`` being imported
at autoload.

Both groups are declared in pyproject.toml (the wheel) and, for the development build, in the
``trnsim-<version>.dist-info`` that CMake writes next to the built package (frontend/dist_info.py).
"""
import importlib.util
import sys
import warnings

# The Neuron SDK's PyTorch backend for real Trainium; it owns the device name "neuron".
REAL_BACKEND_MODULE = "torch_neuronx"


def _real_backend_installed():
    return importlib.util.find_spec(REAL_BACKEND_MODULE) is not None


def autoload():
    """Called by ``import torch``: registers ``neuron`` by importing trnsim, unless the real Neuron
    backend is installed. Never raises: an exception here would make every ``import torch`` in the
    environment fail, so a failure is a warning and ``import trnsim`` shows the full error."""
    if "trnsim" in sys.modules:
        return
    if _real_backend_installed():
        warnings.warn(
            f"trnsim: {REAL_BACKEND_MODULE} (the Neuron SDK's backend for real Trainium) is installed, so the "
            "simulator does not register the device 'neuron' when torch is imported; `import trnsim` "
            "explicitly to use the simulator instead", RuntimeWarning, stacklevel=2)
        return
    try:
        import trnsim  # noqa: F401  (registers the device)
    except Exception as err:  # noqa: BLE001  (see the docstring)
        warnings.warn(
            f"trnsim: autoloading the simulated device 'neuron' failed ({type(err).__name__}: {err}); "
            "`import trnsim` shows the full error, TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns autoloading off",
            RuntimeWarning, stacklevel=2)


def compile_backend(gm, example_inputs):
    """The dynamo backend ``"neuron"``: trnsim.compile_backend (graphs run op by op on the device)."""
    if "trnsim" not in sys.modules and _real_backend_installed():
        raise RuntimeError(
            f"torch.compile(backend='neuron') found trnsim's backend, but {REAL_BACKEND_MODULE} is installed and "
            "trnsim was not imported: `import trnsim` first to compile for the simulator")
    import trnsim

    return trnsim.compile_backend(gm, example_inputs)
