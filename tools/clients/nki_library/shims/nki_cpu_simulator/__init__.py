"""nki-library's ``--test-mode simulation`` imports AWS's CPU simulator as ``nki_cpu_simulator.nki.*`` and swaps
those modules in for ``nki``. For its harness run here (tools/clients/nki_library/run.py, never on sys.path
otherwise) this package serves trnsim's NKI front-end under those names."""
import sys
import types

import trnsim.nki as _trnsim_nki

_trnsim_nki.install()
_nki = sys.modules["nki"]
_language = sys.modules["nki.language"]
# nki.builtin / nki.compiler: the simulation setup aliases them; the kernels under test do not use them.
for _name in ("builtin", "compiler"):
    if not hasattr(_nki, _name):
        setattr(_nki, _name, types.ModuleType(f"nki.{_name}"))
if not hasattr(_nki, "tensor"):
    _nki.tensor = _language
if not hasattr(_nki, "typing"):
    _nki.typing = sys.modules["nki.typing"]
if not hasattr(_language, "dtypes"):
    _language.dtypes = sys.modules["nki.dtype"]
for _name in ("nki", "nki.language", "nki.isa", "nki.isa.constants", "nki.typing"):
    sys.modules[f"nki_cpu_simulator.{_name}"] = sys.modules[_name]
for _name in ("builtin", "compiler", "tensor"):
    sys.modules[f"nki_cpu_simulator.nki.{_name}"] = getattr(_nki, _name)
sys.modules["nki_cpu_simulator.nki.language.dtypes"] = sys.modules["nki.dtype"]
nki = _nki
