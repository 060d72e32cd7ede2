"""``trnsim.record(path)``: every launch of a block of PyTorch code, written to a recording that
``trnsim replay`` re-times without PyTorch, on the recording's config (bit for bit) or another one.

A launch is one op the device ran: a kernel (its program for each physical core of the device,
the bindings of tensors to its HBM allocations), a host<->device copy or a CPU-fallback op (their
host-link transfers), with the op's metadata (op, kind, device, shapes, dtype) and the time measured
when it ran (start and duration in simulated ns, busy ns per engine, FLOPs, host-link bytes).
Tensor values are not recorded: the timing model never reads them, so a replay is always timing
only and still gives the same times.

The recording is a directory::

    step.trnrec/manifest.jsonl          header (format version, config name, source, overrides and
                                        hash, trnsim version), one line per launch, a footer
    step.trnrec/programs/<hash>.tasm.gz each distinct program once (its .tasm text, gzip)
"""
import os
import pathlib
import subprocess

from . import _C

__all__ = ["Recording", "record"]


def _trnsim_version():
    """``git describe`` of the source tree this build came from, or "" (not a git checkout, no git)."""
    source = _C.source_dir()
    if not os.path.exists(os.path.join(source, ".git")):
        return ""
    try:
        proc = subprocess.run(["git", "-C", source, "describe", "--always", "--dirty", "--tags"],
                              capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


class Recording:
    """Context manager; see :func:`record`. After the block: ``path``, ``launches`` (how many),
    ``programs`` (distinct programs stored), ``complete`` (False when the block raised)."""

    def __init__(self, path, overwrite=False, compress=True):
        self.path = pathlib.Path(path)
        self.overwrite = bool(overwrite)
        self.compress = bool(compress)
        self.launches = 0
        self.programs = 0
        self.complete = False
        self._active = False

    def __enter__(self):
        if _C.recording():
            raise RuntimeError("trnsim.record() blocks do not nest (a recording is already open)")
        if os.path.lexists(self.path) and not self.overwrite:
            raise FileExistsError(f"trnsim.record: {self.path} exists (pass overwrite=True to replace it)")
        _C.start_recording(str(self.path), self.overwrite, self.compress, _trnsim_version())
        self._active = True
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._active:
            return False
        self._active = False
        error = "" if exc_type is None else f"{exc_type.__name__}: {exc}"
        info = _C.stop_recording(exc_type is None, error)
        self.launches, self.programs, self.complete = info["launches"], info["programs"], info["complete"]
        return False  # an exception of the block propagates

    def __repr__(self):
        state = "open" if self._active else ("complete" if self.complete else "incomplete")
        return f"<trnsim.Recording {str(self.path)!r}: {self.launches} launches, {state}>"


def record(path, overwrite=False, compress=True):
    """``with trnsim.record("step.trnrec"): ...`` writes every launch of the block (kernels,
    host<->device copies, CPU fallbacks) to the directory ``path``; then
    ``trnsim replay step.trnrec [--config trn3] [--set k=v] [--diff]`` re-times it without PyTorch.

    - An existing ``path`` raises ``FileExistsError`` unless ``overwrite=True``; even then only a
      file, an empty directory or an earlier recording is replaced, never a directory holding
      anything else.
    - Blocks do not nest (``RuntimeError``), and ``trnsim.set_config()`` inside the block raises
      (a recording holds the launches of one config).
    - The recording is complete and flushed when the block ends. When the block raises, the
      exception propagates and the recording is kept, marked incomplete with the error (``trnsim
      replay`` warns about it); launches are flushed one by one, so even a killed process leaves
      the launches recorded so far.
    - Values are not recorded (the timing model does not read them), so a replay is timing only.
    - ``compress=False`` stores programs as plain ``.tasm`` text instead of ``.tasm.gz``.
    """
    return Recording(path, overwrite=overwrite, compress=compress)
