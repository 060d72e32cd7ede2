"""Opting in to trnsim's ``nki``: install() / uninstall(), ``python -m trnsim.nki script.py`` and
``pytest -p trnsim.nki``."""
import importlib
import os
import subprocess
import sys
import textwrap
import types

import pytest

import trnsim
import trnsim.nki

NAMES = ("nki", "nki.language", "nki.isa", "neuronxcc", "neuronxcc.nki", "neuronxcc.nki.language",
         "neuronxcc.nki.isa")


@pytest.fixture
def no_bare_nki_dirs(monkeypatch):
    """sys.path without entries holding a bare ``nki`` directory (this test folder, tests/nki, is one
    while pytest has tests/ on sys.path: ``import nki`` would find it as a namespace package)."""
    keep = [p for p in sys.path
            if not (os.path.isdir(os.path.join(p or ".", "nki"))
                    and not os.path.exists(os.path.join(p or ".", "nki", "__init__.py")))]
    monkeypatch.setattr(sys, "path", keep)
    importlib.invalidate_caches()


def test_import_fails_before_install_and_works_after(no_bare_nki_dirs):
    trnsim.nki.uninstall()
    for name in NAMES:
        assert name not in sys.modules
    with pytest.raises(ImportError):
        importlib.import_module("nki")
    with pytest.raises(ImportError):
        importlib.import_module("neuronxcc.nki")
    trnsim.nki.install()
    import nki
    import nki.isa
    import nki.language
    from neuronxcc import nki as legacy
    assert nki is trnsim.nki
    assert nki.language is trnsim.nki.language and nki.isa is trnsim.nki.isa
    assert legacy.simulate_kernel is trnsim.nki.simulate_kernel
    assert sys.modules["neuronxcc.nki.isa"] is trnsim.nki.legacy_isa
    assert sys.modules["neuronxcc.nki.language"] is trnsim.nki.language
    trnsim.nki.install()   # a second install is a no-op
    trnsim.nki.uninstall()
    for name in NAMES:
        assert name not in sys.modules
    with pytest.raises(ImportError):
        importlib.import_module("nki")


def test_uninstall_restores_what_was_there(monkeypatch):
    trnsim.nki.uninstall()
    other = types.ModuleType("nki")
    monkeypatch.setitem(sys.modules, "nki", other)
    with pytest.raises(RuntimeError, match="already imported"):
        trnsim.nki.install()
    assert sys.modules["nki"] is other
    trnsim.nki.install(force=True)
    assert sys.modules["nki"] is trnsim.nki
    trnsim.nki.uninstall()
    assert sys.modules["nki"] is other
    assert "nki.language" not in sys.modules


def test_refused_install_changes_nothing(monkeypatch):
    trnsim.nki.uninstall()
    other = types.ModuleType("neuronxcc")
    monkeypatch.setitem(sys.modules, "neuronxcc", other)
    with pytest.raises(RuntimeError, match="neuronxcc"):
        trnsim.nki.install()
    assert "nki" not in sys.modules and "nki.language" not in sys.modules
    monkeypatch.delitem(sys.modules, "neuronxcc")
    trnsim.nki.install()           # works once the conflict is gone
    assert sys.modules["nki"] is trnsim.nki


def _env():
    """The test's environment, with PYTHONPATH absolute (the subprocess runs in tmp_path)."""
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(trnsim.__file__)))
    paths = [package_root] + [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.pop("NEURON_PLATFORM_TARGET_OVERRIDE", None)
    return env


SCRIPT = '''
import sys
import numpy as np
import nki
import nki.language as nl
from neuronxcc import nki as legacy
import neuronxcc.nki.language as lnl


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.multiply(nl.load(a), 2.0))
    return out


def add_one(a, out):
    i_p, i_f = lnl.arange(a.shape[0])[:, None], lnl.arange(a.shape[1])[None, :]
    lnl.store(out[i_p, i_f], value=lnl.add(lnl.load(a[i_p, i_f]), 1.0))


a = np.arange(32, dtype=np.float32).reshape(4, 8)
out = np.zeros_like(a)
legacy.simulate_kernel(add_one, a, out)
ok = np.array_equal(double(a), 2 * a) and np.array_equal(out, a + 1)
print("args", sys.argv[1:], "ok" if ok else "WRONG", double.last_latency_ns > 0)
'''


def test_python_m_runs_a_script(tmp_path):
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, "-m", "trnsim.nki", str(script), "x", "--y"], capture_output=True,
                       text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert "args ['x', '--y'] ok True" in r.stdout, r.stdout + r.stderr


def test_python_m_without_a_script(tmp_path):
    r = subprocess.run([sys.executable, "-m", "trnsim.nki"], capture_output=True, text=True, cwd=tmp_path,
                       env=_env(), timeout=60)
    assert r.returncode == 2
    assert "python -m trnsim.nki" in r.stdout


def test_script_without_trnsim_fails_to_import_nki(tmp_path):
    script = tmp_path / "kernel_script.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=_env(),
                       timeout=60)
    assert r.returncode != 0
    assert "No module named 'nki'" in r.stderr


def test_pytest_plugin(tmp_path):
    test_file = tmp_path / "test_tiny_kernel.py"
    test_file.write_text(textwrap.dedent('''
        import numpy as np
        import nki
        import nki.language as nl


        @nki.jit
        def negate(a):
            out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
            nl.store(out, nl.negative(nl.load(a)))
            return out


        def test_negate():
            a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
            np.testing.assert_array_equal(negate(a), -a)
            assert negate.last_latency_ns > 0
    '''))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "trnsim.nki", "-p", "no:cacheprovider", "-q",
                        str(test_file)], capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "1 passed" in r.stdout
