"""Runs AWS's NKI kernel library's own test suite (aws-neuron/nki-library, its ``--test-mode simulation``) on
trnsim, unmodified: every kernel is traced by trnsim's NKI front-end and simulated with values and timing, and
compared by the suite's own torch references and tolerances.

    python tools/clients/nki_library/run.py --checkout ~/src/nki-library -- -n 2 test/integration/nkilib/core/cumsum

The suite's artifacts (a new directory per run) and pytest's cache go under --work (its own log file goes where its conftest puts it, under
the checkout's build/). The suite's test-only packages (requirements.txt beside this file) are installed once into --deps, outside trnsim's
environment. Parametrised sweeps are drawn at random per collection; NEURON_PYTHONHASHSEED=0 (set here unless
given) makes a run repeatable. Shapes the suite marks slow for a CPU simulator are skipped as it does."""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", required=True, type=pathlib.Path, help="an nki-library source tree")
    parser.add_argument("--deps", type=pathlib.Path, default=pathlib.Path.home() / ".cache/trnsim/nki-library-deps",
                        help="where its test-only packages are installed (default: %(default)s)")
    parser.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/trnsim-nki-library"),
                        help="artifacts and pytest cache (default: %(default)s)")
    parser.add_argument("pytest_args", nargs="*", help="after --: arguments for pytest (paths are in the checkout)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "test" / "conftest.py").exists():
        parser.error(f"{checkout} has no test/conftest.py: not an nki-library checkout")
    stamp = args.deps / ".installed"
    requirements = HERE / "requirements.txt"
    if not stamp.exists() or stamp.read_text() != requirements.read_text():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(args.deps),
                        "-r", str(requirements)], check=True)
        # What trnsim's environment already has stays its own (pip --target brings its own numpy and pytest).
        for shadow in ("numpy", "numpy-*", "numpy.libs", "pytest", "pytest-[0-9]*", "_pytest", "py.py", "pluggy",
                       "pluggy-*", "packaging", "packaging-*", "iniconfig", "iniconfig-*"):
            for path in args.deps.glob(shadow):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
        stamp.write_text(requirements.read_text())
    args.work.mkdir(parents=True, exist_ok=True)
    output = pathlib.Path(tempfile.mkdtemp(prefix="output-", dir=args.work))
    env = dict(os.environ)
    env.setdefault("NEURON_PYTHONHASHSEED", "0")
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE / "shims"), str(args.deps), str(checkout / "src"), str(checkout)]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    command = [sys.executable, "-m", "pytest", "-p", "trnsim.nki", "-p", "trnsim_nki_library_plugin",
               "--test-mode", "simulation", "--output-directory", str(output),
               "-o", f"cache_dir={args.work / 'pytest_cache'}", "--rootdir", str(checkout)]
    # Its settings (log level and format the conftest reads) are test/pytest.ini's: named, not left to discovery.
    if (checkout / "test" / "pytest.ini").exists():
        command += ["-c", str(checkout / "test" / "pytest.ini")]
    command += args.pytest_args
    return subprocess.run(command, cwd=checkout, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
