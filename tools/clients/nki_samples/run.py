"""Runs the performance tests of AWS's NKI samples (aws-neuron/nki-samples, test/unit, the tests that call
``benchmark``) on trnsim, unmodified, and prints each kernel's simulated latency beside the latency the test
carries as its published hardware figure (its ``latency`` / ``max_p99_latency`` parameter, in us).

    python tools/clients/nki_samples/run.py --checkout ~/src/nki-samples [--target trn2] [--json F] [-- -k pool]

These figures were measured on hardware, not by trnsim's calibration: they check the timing model on kernels
nobody here wrote (trnsim never fits them). The tests run timing-only (they read only the latency). The
suite does not say which instance measured each figure; --target picks the config they are compared on.
A parameter above 10^7 us (flash_attn_fwd's 8.7e10) is not a latency of these shapes and is reported without
a ratio. The suite's test-only packages (requirements.txt beside this file) are installed once into --deps,
outside trnsim's environment."""
import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
NOT_A_LATENCY_US = 1e7


def install_deps(deps):
    stamp = deps / ".installed"
    requirements = HERE / "requirements.txt"
    if stamp.exists() and stamp.read_text() == requirements.read_text():
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(deps), "-r", str(requirements)],
                   check=True)
    # What trnsim's environment already has stays its own (pip --target brings its own numpy).
    for shadow in ("numpy", "numpy-*", "numpy.libs"):
        for path in deps.glob(shadow):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    stamp.write_text(requirements.read_text())


def table(rows):
    lines = [f"{'published us':>13} {'simulated us':>13} {'sim/pub':>8}  test"]
    for r in rows:
        published = r["published_us"]
        ratio = f"{r['simulated_us'] / published:8.2f}" if published and published < NOT_A_LATENCY_US else "       -"
        shown = f"{published:13.1f}" if published and published < NOT_A_LATENCY_US else f"{'(none)':>13}"
        lines.append(f"{shown} {r['simulated_us']:13.1f} {ratio}  {r['test'].split('::')[-1]}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", required=True, type=pathlib.Path, help="an nki-samples source tree")
    parser.add_argument("--deps", type=pathlib.Path, default=pathlib.Path.home() / ".cache/trnsim/nki-samples-deps",
                        help="where its test-only packages are installed (default: %(default)s)")
    parser.add_argument("--target", default="trn2", choices=["trn1", "trn2", "trn3"],
                        help="the config the kernels run on (default: %(default)s)")
    parser.add_argument("--json", type=pathlib.Path, help="also write the rows as JSON")
    parser.add_argument("pytest_args", nargs="*", help="after --: more arguments for pytest (e.g. -k pool)")
    args = parser.parse_args(argv)
    checkout = args.checkout.resolve()
    if not (checkout / "test" / "unit" / "conftest.py").exists():
        parser.error(f"{checkout} has no test/unit/conftest.py: not an nki-samples checkout")
    install_deps(args.deps)
    with tempfile.TemporaryDirectory(prefix="trnsim-nki-samples-") as work:
        record = pathlib.Path(work) / "latencies.jsonl"
        env = dict(os.environ, TRNSIM_NKI_SAMPLES_RECORD=str(record), NEURON_PLATFORM_TARGET_OVERRIDE=args.target)
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(args.deps), str(checkout / "src")]
                                            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        extra, select = list(args.pytest_args), "perf"
        while "-k" in extra:   # pytest keeps only the last -k: the caller's narrows the performance tests
            at = extra.index("-k")
            select = f"{select} and ({extra[at + 1]})"
            del extra[at:at + 2]
        command = [sys.executable, "-m", "pytest", "-p", "trnsim.nki", "-p", "trnsim_nki_samples_perf",
                   "-k", select, "-q", "--tb=line", "-p", "no:cacheprovider", "--rootdir", str(checkout),
                   str(checkout / "test" / "unit")] + extra
        rc = subprocess.run(command, cwd=work, env=env).returncode
        rows = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    for r in rows:
        r["target"] = args.target
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rc if rc != 5 else 0


if __name__ == "__main__":
    sys.exit(main())
