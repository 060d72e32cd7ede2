"""Serving ``import nki`` and ``from neuronxcc import nki`` from trnsim, on request only."""
import importlib.machinery
import sys
import types

_ALIASES = {}
_COMPILER = []


def _real_install(name):
    """A Neuron package on sys.path (not one of ours). A bare directory of that name (a namespace
    package: a project's ``tests/nki`` folder on sys.path) is not one."""
    spec = importlib.machinery.PathFinder.find_spec(name)
    return spec is not None and spec.origin is not None


def install(force=False):
    """Make ``nki`` (NKI 0.3+) and ``neuronxcc.nki`` (beta 1) import trnsim's front-end. Refuses
    (RuntimeError) where a real Neuron package is importable, unless ``force=True``."""
    if _ALIASES:
        return
    if not force:
        for name in ("nki", "neuronxcc"):
            if name not in sys.modules and _real_install(name):
                raise RuntimeError(f"a real '{name}' package is installed: trnsim.nki.install() will not shadow "
                                   f"it (pass force=True to run kernels on trnsim anyway)")
    from .. import nki as current
    from . import collectives, isa, language, legacy, legacy_isa, lnc, typing as nki_typing
    neuronxcc = types.ModuleType("neuronxcc")
    neuronxcc.__doc__ = "trnsim's stand-in for the Neuron compiler package (only .nki)"
    neuronxcc.__path__ = []
    neuronxcc.nki = legacy
    compiler = _compiler_module(language)
    legacy.compiler = compiler
    modules = {
        "nki": current, "nki.language": language, "nki.isa": isa, "nki.isa.constants": isa.constants,
        "nki.dtype": current.dtype,
        "nki.typing": nki_typing, "nki.lnc": lnc,
        "nki.collectives": collectives,
        "neuronxcc": neuronxcc, "neuronxcc.nki": legacy, "neuronxcc.nki.language": language,
        "neuronxcc.nki.isa": legacy_isa, "neuronxcc.nki.typing": nki_typing,
        "neuronxcc.nki.compiler": compiler,
    }
    for name, module in modules.items():
        # All checked before any is replaced: a refused install changes nothing.
        if name in sys.modules and not force and sys.modules[name] is not module:
            raise RuntimeError(f"module '{name}' is already imported from elsewhere")
    for name, module in modules.items():
        _ALIASES[name] = sys.modules.get(name)
        sys.modules[name] = module


def _compiler_module(language):
    """``neuronxcc.nki.compiler`` (beta 1's direct allocation, the samples' ``allocated_*`` kernels):
    ``ncc.sbuf.mod_alloc(base_addr=, num_free_tiles=)``, ``ncc.psum.mod_alloc(base_bank=, num_bank_tiles=)``
    and ``auto_alloc()`` are accepted; trnsim places those tensors by liveness as it does any other
    (same values, its own multi-buffering), not at the given addresses. The compiler-pass decorators
    (``skip_middle_end_transformations``, ``enable_stack_allocator``, ``force_auto_alloc``) change nothing."""
    if _COMPILER:
        return _COMPILER[0]
    mod = types.ModuleType("neuronxcc.nki.compiler")
    mod.__doc__ = _compiler_module.__doc__
    _COMPILER.append(mod)

    class _Space:
        def __init__(self, buffer):
            self._buffer = buffer

        def mod_alloc(self, *args, **kwargs):
            return self._buffer

        alloc = auto_alloc = mod_alloc

    def _identity_decorator(fn=None, **_):
        return fn if fn is not None else (lambda f: f)
    mod.sbuf, mod.psum = _Space(language.sbuf), _Space(language.psum)
    mod.skip_middle_end_transformations = mod.enable_stack_allocator = mod.force_auto_alloc = _identity_decorator
    return mod


def uninstall():
    """Undo install(): the names import what they did before."""
    for name, previous in _ALIASES.items():
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
    _ALIASES.clear()
