"""Fan-out of independent command-line tasks on Ray: the one parallel path of trnsim's sweeps.

A task is a command line plus the names of the files it writes. Everything a task reads travels by
value in Ray's object store, never by path: the executable (`trnsim`, `kernel_runner`), the configs
(flattened to one self-contained YAML each, see effective_config) and the recording. A worker
writes its inputs into a fresh scratch directory, runs the command there and sends back its exit
status, stdout, stderr and the output files' bytes. So a worker on another machine needs no copy of
the driver's checkout; what it does need is the same Python and Ray versions as the driver (Ray's
own rule) and the shared libraries the shipped binary links (libsystemc, libyaml-cpp: the packages
of deps/debian-packages.txt), on the same CPU architecture.

    with FanOut(jobs=4) as fan:                          # a local Ray of 4 CPUs
    with FanOut(jobs=None, address="10.0.0.1:6379") as fan:   # join a cluster
        exe = fan.file(trnsim_path, executable=True)     # put in the object store once
        cfg = fan.text("trn2.yaml", effective_config(trnsim_path, "trn2"), shown="trn2")
        results = fan.run([Task([exe, "bench", "matmul", "--config", cfg, "--csv", "out.csv"],
                                outputs=["out.csv"], label="m=128")], desc="matmul")

Results come back in task order whatever order they finish in, so what a sweep writes does not
depend on scheduling. A failed task does not stop the others (on a cluster an hour of good points
is worth keeping); each result says whether it failed and why (format_failure), and the sweep
decides what to do with the failures.
"""
import dataclasses
import logging
import os
import pathlib
import re
import socket
import subprocess
import sys
from typing import Optional, Sequence, Union

STDERR_TAIL_LINES = 20  # of a failed task's stderr, in the failure report
CONNECT_TIMEOUT_S = 10  # to reach a cluster's head before handing the address to Ray


class FanOutError(Exception):
    """A problem with the fan-out itself (Ray missing, a cluster not reachable, a bad input path),
    as opposed to a task that failed."""


@dataclasses.dataclass(frozen=True)
class Input:
    """A file or directory tree in the object store. In a command line it stands for its path in the
    worker's scratch directory; `shown` is how a failure report prints it (the driver's path or name,
    so the reported command can be rerun by hand)."""
    index: int
    name: str
    shown: str


@dataclasses.dataclass(frozen=True)
class Concat:
    """One argument made of several parts, e.g. Concat(("config=", cfg)) for `config=PATH`."""
    parts: tuple


def concat(*parts) -> Concat:
    return Concat(tuple(parts))


Arg = Union[str, Input, Concat]


@dataclasses.dataclass(frozen=True)
class Task:
    argv: Sequence[Arg]
    outputs: Sequence[str] = ()  # files the command writes, relative to its working directory
    label: str = ""              # the point, in the failure report


@dataclasses.dataclass
class Result:
    index: int
    label: str
    command: str                 # the command line with inputs shown as on the driver
    returncode: Optional[int]    # None: the command could not be started
    stdout: str
    stderr: str
    outputs: dict                # output name -> bytes, for the outputs that exist
    error: Optional[str]         # None when the task succeeded

    @property
    def ok(self) -> bool:
        return self.error is None


def shown_command(argv: Sequence[Arg]) -> str:
    def one(arg):
        if isinstance(arg, Input):
            return arg.shown
        if isinstance(arg, Concat):
            return "".join(one(p) for p in arg.parts)
        return str(arg)
    return " ".join(one(a) for a in argv)


def format_failure(result: Result) -> str:
    lines = [f"point {result.label}: {result.error}", f"  command: {result.command}"]
    tail = result.stderr.strip().splitlines()[-STDERR_TAIL_LINES:]
    if tail:
        lines.append("  stderr (last lines):" if len(tail) == STDERR_TAIL_LINES else "  stderr:")
        lines += [f"    {line}" for line in tail]
    return "\n".join(lines)


def report_failures(failed: Sequence[Result], total: int, written: str) -> int:
    """Prints every failed result to stderr, then how many of the `total` points `written` (the
    output's name) holds; returns the exit status of the sweep: 1 when anything failed. A failure
    with the same error and stderr as an earlier one is one line naming that one: a grid of 500
    points run on a binary that lacks the command is 500 lines, not 500 stack traces."""
    first_with = {}
    for r in failed:
        key = (r.error, "\n".join(r.stderr.strip().splitlines()[-STDERR_TAIL_LINES:]))
        if key in first_with:
            print(f"point {r.label}: {r.error}, the same stderr as point {first_with[key]}", file=sys.stderr)
        else:
            first_with[key] = r.label
            print(format_failure(r), file=sys.stderr)
    if failed:
        kept = f"{written} holds the other {total - len(failed)}" if total > len(failed) else "nothing written"
        print(f"error: {len(failed)} of {total} points failed; {kept}", file=sys.stderr)
        return 1
    return 0


def ray_address(flag: Optional[str]) -> Optional[str]:
    """The cluster a sweep joins: --ray-address, else $RAY_ADDRESS (Ray's own convention, which
    `ray job submit` sets for the job it runs), else None for a local Ray. Deliberately not Ray's
    further fallback, the last cluster started on this machine: that may be someone else's."""
    return flag or os.environ.get("RAY_ADDRESS") or None


def check_reachable(address: str):
    """A TCP connection to host:port of `address` (optionally ray://), since ray.init retries an
    address nothing listens on for ever, printing warnings: a mistyped --ray-address would hang."""
    match = re.fullmatch(r"(?:ray://)?(\[[^\]]+\]|[^:/\[\]]+):(\d+)", address)
    if not match:
        return  # "auto" and other forms Ray resolves itself
    host, port = match.group(1).strip("[]"), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        raise FanOutError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}")


def effective_config(trnsim: pathlib.Path, config: str) -> str:
    """The config `config` (a name such as trn2 or a file path) as one self-contained YAML, from
    `trnsim config show --effective-only`: bases merged, nothing left to look up in the driver's
    configs/ folder. It loads to the same config hash as the original."""
    result = subprocess.run([str(trnsim), "config", "show", config, "--effective-only"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        message = result.stderr.strip() or f"exit status {result.returncode}"
        raise FanOutError(f"config {config}: {message}")
    return result.stdout


# ---------------------------------------------------------------------------------------------
# The worker side. This function (and only the standard library it imports) is sent to workers by
# value, so a cluster's workers need no copy of this file.
# ---------------------------------------------------------------------------------------------
def _run_in_scratch(argv, outputs, input_names, *payloads):
    import pathlib
    import shutil
    import subprocess
    import tempfile

    def safe_relative(rel):
        # Payloads are built by FanOut.tree from a real directory, but a path that would leave the
        # scratch directory is refused rather than trusted.
        parts = pathlib.PurePosixPath(rel).parts
        if not parts or parts[0] == "/" or ".." in parts:
            raise ValueError(f"input path {rel!r} leaves the scratch directory")
        return pathlib.Path(*parts)

    scratch = pathlib.Path(tempfile.mkdtemp(prefix="trnsim-fanout-"))
    try:
        paths = []
        for index, (name, payload) in enumerate(zip(input_names, payloads)):
            root = scratch / "inputs" / str(index)
            kind, entries = payload
            for rel, data, mode in entries:
                path = root / name / safe_relative(rel) if kind == "tree" else root / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(mode)
            if kind == "tree":
                (root / name).mkdir(parents=True, exist_ok=True)  # an empty tree is still a directory
            paths.append(str(root / name))

        def resolve(arg):
            if isinstance(arg, tuple) and arg and arg[0] == "input":
                return paths[arg[1]]
            if isinstance(arg, tuple) and arg and arg[0] == "concat":
                return "".join(resolve(p) for p in arg[1])
            return arg

        cwd = scratch / "work"
        cwd.mkdir()
        command = [resolve(a) for a in argv]
        try:
            done = subprocess.run(command, cwd=cwd, capture_output=True)
        except OSError as e:
            return {"returncode": None, "stdout": "", "stderr": "", "outputs": {},
                    "error": f"could not start: {e}"}
        files = {}
        for name in outputs:
            path = cwd / name
            if path.is_file():
                files[name] = path.read_bytes()
        stdout = done.stdout.decode(errors="replace")
        stderr = done.stderr.decode(errors="replace")
        error = None
        if done.returncode != 0:
            error = (f"exit status {done.returncode}" if done.returncode > 0
                     else f"killed by signal {-done.returncode}")
        else:
            missing = [n for n in outputs if n not in files]
            if missing:
                error = f"exit status 0 but it wrote no {', '.join(missing)}"
        return {"returncode": done.returncode, "stdout": stdout, "stderr": stderr, "outputs": files,
                "error": error}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _wire(arg):
    """A command-line argument as plain data for the worker."""
    if isinstance(arg, Input):
        return ("input", arg.index)
    if isinstance(arg, Concat):
        return ("concat", tuple(_wire(p) for p in arg.parts))
    if isinstance(arg, (str, int, float, pathlib.PurePath)):
        return str(arg)
    raise TypeError(f"a command-line argument must be a str, Input or Concat, got {type(arg).__name__}")


def _used_inputs(argv):
    for arg in argv:
        if isinstance(arg, Input):
            yield arg
        elif isinstance(arg, Concat):
            yield from _used_inputs(arg.parts)


class FanOut:
    """A Ray session: a local Ray of `jobs` CPUs (address None), or a cluster joined at `address`
    (see ray_address), where `jobs` (if given) caps the tasks in flight. Shuts down only a Ray it started itself; a Ray
    the caller already initialised is used as it is."""

    def __init__(self, jobs: Optional[int] = None, address: Optional[str] = None):
        if jobs is not None and jobs < 1:
            raise FanOutError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self.address = address
        self._inputs = []    # index -> (name, ObjectRef)
        self._started = False

    def __enter__(self):
        try:
            import ray
            import ray.cloudpickle
        except ImportError as e:
            raise FanOutError(f"Ray is not installed ({e}): .venv/bin/pip install -r deps/requirements.txt")
        self._ray = ray
        # Send this module's code with the task instead of asking the workers to import it.
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        if not ray.is_initialized():
            options = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
            try:
                if self.address:
                    check_reachable(self.address)
                    ray.init(address=self.address, **options)
                else:
                    # "local": a new Ray for this sweep, never one Ray finds by itself.
                    ray.init(address="local", num_cpus=self.jobs or os.cpu_count(), **options)
            except (ConnectionError, ValueError, RuntimeError) as e:
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray"
                raise FanOutError(f"could not start {where}: {e}") from e
            self._started = True
        self._remote = ray.remote(num_cpus=1)(_run_in_scratch)
        return self

    def __exit__(self, *exc):
        if self._started:
            self._ray.shutdown()
        return False

    # -- inputs -----------------------------------------------------------------------------
    def _put(self, name, payload, shown) -> Input:
        ref = self._ray.put(payload)
        self._inputs.append((name, ref))
        return Input(len(self._inputs) - 1, name, shown)

    def file(self, path, executable=False, shown=None) -> Input:
        path = pathlib.Path(path)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise FanOutError(f"cannot read {path}: {e.strerror}")
        mode = 0o755 if executable else 0o644
        return self._put(path.name, ("file", [("", data, mode)]), shown or str(path))

    def text(self, name, text, shown=None) -> Input:
        return self._put(name, ("file", [("", text.encode(), 0o644)]), shown or name)

    def tree(self, path, shown=None) -> Input:
        """A directory with everything under it. Symbolic links to files are sent as the files they
        name; a link to a directory is refused (following it could pull in anything)."""
        root = pathlib.Path(path)
        if not root.is_dir():
            raise FanOutError(f"{root} is not a directory")
        entries = []
        for dirpath, dirnames, filenames in os.walk(root):
            for d in sorted(dirnames):
                if (pathlib.Path(dirpath) / d).is_symlink():
                    raise FanOutError(f"{pathlib.Path(dirpath) / d} is a link to a directory: "
                                      "pass a directory of plain files")
            dirnames.sort()
            for f in sorted(filenames):
                full = pathlib.Path(dirpath) / f
                try:
                    entries.append((full.relative_to(root).as_posix(), full.read_bytes(),
                                    full.stat().st_mode & 0o777))
                except OSError as e:
                    raise FanOutError(f"cannot read {full}: {e.strerror}")
        return self._put(root.name, ("tree", entries), shown or str(root))

    # -- running ----------------------------------------------------------------------------
    def run(self, tasks: Sequence[Task], desc: str = "tasks") -> list:
        """Runs every task; returns one Result per task, in task order. A progress bar on stderr
        advances as tasks finish (in whatever order they finish)."""
        from tqdm import tqdm

        ray = self._ray
        wired = []
        for task in tasks:
            used = sorted({i.index for i in _used_inputs(task.argv)})
            local = {old: new for new, old in enumerate(used)}

            def renumber(arg):
                if isinstance(arg, Input):
                    return ("input", local[arg.index])
                if isinstance(arg, Concat):
                    return ("concat", tuple(renumber(p) for p in arg.parts))
                return _wire(arg)

            # A task gets only the inputs its command names, as top-level arguments so that Ray
            # resolves the references (and fetches each object to a worker's node once).
            wired.append(([renumber(a) for a in task.argv], list(task.outputs),
                          [self._inputs[i][0] for i in used], [self._inputs[i][1] for i in used]))

        results = [None] * len(tasks)
        limit = self.jobs if self.address and self.jobs else len(tasks)
        pending = {}
        next_task = 0
        with tqdm(total=len(tasks), desc=desc, unit="pt", file=sys.stderr) as bar:
            try:
                while next_task < len(tasks) or pending:
                    while next_task < len(tasks) and len(pending) < limit:
                        argv, outputs, names, refs = wired[next_task]
                        pending[self._remote.remote(argv, outputs, names, *refs)] = next_task
                        next_task += 1
                    done, _ = ray.wait(list(pending), num_returns=1)
                    for ref in done:
                        index = pending.pop(ref)
                        results[index] = self._result(index, tasks[index], ref)
                        bar.update(1)
            except KeyboardInterrupt:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        return results

    def _result(self, index, task, ref) -> Result:
        command = shown_command(task.argv)
        label = task.label or str(index)
        try:
            out = self._ray.get(ref)
        except Exception as e:  # the worker process or its node died (Ray's error says which)
            return Result(index, label, command, None, "", "", {}, f"Ray task failed: {e}")
        return Result(index, label, command, out["returncode"], out["stdout"], out["stderr"],
                      out["outputs"], out["error"])
