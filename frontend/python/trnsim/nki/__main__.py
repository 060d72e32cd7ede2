"""``python -m trnsim.nki script.py [args]``: run a script whose ``import nki`` / ``from neuronxcc
import nki`` are served by trnsim (refused where a real Neuron install exists; ``--force`` overrides).

``python -m trnsim.nki --explain FILE.py:KERNEL ARG... [--target trn1|trn2|trn3]``: trace kernel KERNEL of FILE.py
for the given arguments, without running it, and print its instruction mix per engine and opcode, the bytes its DMAs
move and its matmul FLOPs. An ARG is a tensor ``DTYPE[D0,D1,...]`` (zeros of that NKI / NumPy dtype, e.g.
``bfloat16[4096,8192]``) or a Python literal (``128``, ``1e-6``, ``(2, 3)``, ``name=literal`` for a keyword)."""
import ast
import os
import re
import runpy
import sys


def _argument(text):
    m = re.fullmatch(r"\s*(\w+)\[([\d,\s]*)\]\s*", text)
    if m:
        import numpy as np
        from ._core import as_dtype
        try:
            dtype = as_dtype(m.group(1))
        except KeyError:
            raise SystemExit(f"error: --explain argument {text!r}: unknown dtype {m.group(1)!r}")
        if dtype.numpy is None:
            raise SystemExit(f"error: --explain argument {text!r}: {dtype.nki_name} has no host type")
        return np.zeros(tuple(int(n) for n in m.group(2).split(",") if n.strip()), dtype=dtype.numpy)
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise SystemExit(f"error: --explain argument {text!r}: neither DTYPE[shape] nor a Python literal")


def explain(argv):
    """``--explain FILE.py:KERNEL ARG...``: prints the mix; returns the exit status."""
    if "--target" in argv:
        i = argv.index("--target")
        if i + 1 >= len(argv):
            raise SystemExit("error: --target needs trn1, trn2 or trn3")
        os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"] = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    if not argv or ":" not in argv[0]:
        raise SystemExit("error: --explain FILE.py:KERNEL ARG... (e.g. examples/nki/softmax.py:softmax_nl "
                         "'float32[256,512]')")
    path, _, name = argv[0].rpartition(":")
    if not os.path.isfile(path):
        raise SystemExit(f"error: --explain {argv[0]}: no file {path!r}")
    namespace = runpy.run_path(path, run_name="__trnsim_explain__")
    if name not in namespace:
        found = sorted(k for k, v in namespace.items() if type(v).__name__ == "Kernel")
        raise SystemExit(f"error: --explain {argv[0]}: {path} has no {name!r} (kernels: {', '.join(found) or 'none'})")
    from . import jit
    kernel = jit(namespace[name])
    args, kwargs = [], {}
    for text in argv[1:]:
        key, eq, value = text.partition("=")
        if eq and key.isidentifier():
            kwargs[key] = _argument(value)
        else:
            args.append(_argument(text))
    kernel.explain(*args, **kwargs)
    return 0


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    force = False
    if argv and argv[0] == "--force":
        force, argv = True, argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    from . import install
    install(force=force)
    if argv[0] == "--explain":
        from ._core import KernelError
        try:
            return explain(argv[1:])
        except KernelError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
