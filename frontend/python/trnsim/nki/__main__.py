"""``python -m trnsim.nki script.py [args]``: run a script whose ``import nki`` / ``from neuronxcc
import nki`` are served by trnsim (refused where a real Neuron install exists; ``--force`` overrides)."""
import runpy
import sys


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
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
