"""``nki.lnc`` (the newest NKI's home of the logical-core primitives): ``core_barrier``, the same instruction as
``nki.isa.core_barrier`` (made from the ISA table on first use, as nki.isa's functions are)."""
from . import isa as _isa

__all__ = ["core_barrier"]


def __getattr__(name):
    if name in __all__:
        return getattr(_isa, name)
    raise AttributeError(f"module 'nki.lnc' has no attribute {name!r}")
