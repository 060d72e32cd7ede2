"""``neuronxcc.nki`` (NKI beta 1): the same front-end with the beta-1 entry points
(``simulate_kernel``, ``benchmark``, ``baremetal``, ``profile``) and value-returning ``nki.isa``."""
from . import language, legacy_isa as isa, typing  # noqa: F401
from . import benchmark, baremetal, jit, profile, simulate, simulate_kernel  # noqa: F401
from ._core import KernelError  # noqa: F401
from .typing import tensor  # noqa: F401
