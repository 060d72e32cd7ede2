#!/usr/bin/env python3
"""OpInfo sweep: PyTorch's own OpInfo samples (torch.testing._internal.common_methods_invocations.op_db)
for every op, on the device "neuron" against the CPU.

For each op: the first --samples samples that the CPU accepts, forward in each of --dtypes, and
the backward (autograd.grad with seeded random cotangents) in fp32 where the op supports autograd.
As in PyTorch's test_compare_cpu, the samples are made for the device (sample_inputs("neuron", ...),
seeded) and copied to the CPU for the reference; where making them on the device fails, they are
made on the CPU and copied to the device.
Every sample gets one class:
  pass-native    ran on the device, matches the CPU, nothing fell back to the CPU
  pass-fallback  ran and matches, but the counted CPU fallback ran (trnsim.fallback_report() delta)
  mismatch       ran, but differs from the CPU (torch.testing.assert_close at PyTorch's device-vs-CPU
                 tolerances: fp32 atol=rtol=1e-3 as test_compare_cpu; bf16 and other dtypes
                 assert_close's defaults for the dtype), or returned a tensor that is not on the device
  crash          the device raised where the CPU did not, the worker died (segfault, abort) or ran
                 past --timeout
(samples the CPU rejects are not judged: class cpu-error.) Ops that PyTorch's own test_compare_cpu
skips (non-deterministic output, undefined order, ...) still run, but only their structure (shapes,
dtypes, devices) is compared; such samples are marked compared=false.

Each op runs in a worker process (a pool of --jobs); a worker that dies or hangs is replaced, the
sample it was on is recorded as a crash and the op resumes at the next sample.

Outputs in --out: samples.csv and samples.jsonl (every sample: op, dtype, kind, index, class,
fallback ops, error), summary.json, summary.md (counts per class, forward float native share over
all ops and over the ~100 ops of tests/frontend/test_opinfo.py, mismatches and crashes grouped by op).

  .venv/bin/python tools/opinfo_sweep.py --jobs 2 --out build/opinfo_sweep
  .venv/bin/python tools/opinfo_sweep.py --ops common --samples 2
  .venv/bin/python tools/opinfo_sweep.py --ops add,mul,nn.functional.conv2d --dtypes float32,bfloat16,int64
"""
import argparse
import ast
import collections
import csv
import json
import os
import pathlib
import random
import select
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLASSES = ["pass-native", "pass-fallback", "mismatch", "crash"]
FLOAT_DTYPES = {"float32", "bfloat16", "float16", "float64"}
DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "fp64": "float64"}


def common_ops():
    """The OPS list of tests/frontend/test_opinfo.py (read, not imported: it needs pytest and the build)."""
    tree = ast.parse((ROOT / "tests" / "frontend" / "test_opinfo.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "OPS" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise RuntimeError("no OPS list in tests/frontend/test_opinfo.py")


def expand_common(names, all_ops):
    """test_opinfo.py's names as op_db keys: a name with no entry of its own (div, max, min) stands
    for all its variants (div.no_rounding_mode, div.trunc_rounding, ...)."""
    keys = set(all_ops)
    out = []
    for name in names:
        out += [name] if name in keys else [k for k in all_ops if k.startswith(name + ".")]
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------
# Worker: runs one op's samples at a time; protocol on a private fd, one JSON object a line.

def worker_main():
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed (Python or C++) goes to the log, not into the protocol
    sys.stdout = sys.stderr
    build_python = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", ROOT / "build")) / "python"
    if (build_python / "trnsim").is_dir():
        sys.path.insert(0, str(build_python))
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import trnsim
    from torch.testing._internal import common_methods_invocations as cmi
    from torch.testing._internal.opinfo.core import DecorateInfo
    trnsim.set_fallback_mode("allow")
    ops = {opinfo_key(op): op for op in cmi.op_db}

    def send(**msg):
        proto.write(json.dumps(msg) + "\n")
        proto.flush()

    so = pathlib.Path(trnsim._C.__file__)
    send(type="ready", build=f"{so} {so.stat().st_mtime_ns}")
    for line in sys.stdin:
        req = json.loads(line)
        op = ops[req["op"]]
        done = {tuple(k): judged for k, judged in req["done"]}
        try:
            run_op(torch, trnsim, DecorateInfo, op, req, done, send)
        except Exception as e:  # noqa: BLE001 - an op-level failure (sample generation): reported, not fatal
            send(type="op-error", error=short_error(e))
        send(type="done")


def opinfo_key(op):
    return op.name if op.variant_test_name in ("", "default") else f"{op.name}.{op.variant_test_name}"


def short_error(e, limit=300):
    text = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")
    return text[:limit]


def compare_cpu_policy(DecorateInfo, op, dtype):
    """What PyTorch's TestCommon.test_compare_cpu does for this op and dtype: 'skip' (with the
    reason), 'xfail' or 'run'."""
    for d in getattr(op, "decorators", ()) or ():
        if not isinstance(d, DecorateInfo):
            continue
        try:
            active = d.is_active("TestCommon", "test_compare_cpu", "privateuse1", dtype, {})
        except Exception:  # noqa: BLE001 - an active_if callable that needs other kwargs
            active = False
        if not active or d.test_name != "test_compare_cpu":
            continue
        for dec in d.decorators:
            name = getattr(dec, "__qualname__", "")
            if name.startswith("skip"):
                reason = next((c.cell_contents for c in (dec.__closure__ or ()) if isinstance(c.cell_contents, str)), "")
                return "skip", reason
            if name == "expectedFailure":
                return "xfail", ""
    return "run", ""


def run_op(torch, trnsim, DecorateInfo, op, req, done, send):
    import itertools
    n_samples, dtypes, backward = req["samples"], req["dtypes"], req["backward"]
    cap = 4 * n_samples  # samples scanned to find n_samples that the CPU accepts
    supported = op.supported_dtypes("cpu")
    groups = [(d, "fwd") for d in dtypes if getattr(torch, d) in supported]
    if backward and op.supports_autograd and torch.float32 in supported:
        groups.append(("float32", "bwd"))
    for dtype_name, kind in groups:
        dtype = getattr(torch, dtype_name)
        seed = sum(map(ord, f"{opinfo_key(op)}/{dtype_name}/{kind}"))
        # As PyTorch's test_compare_cpu: the samples are made for the device (views keep their
        # base, indices an op wants on the CPU stay there) and copied to the CPU for the reference.
        # Where making them on the device fails, they are made on the CPU and copied over.
        source = "neuron"
        try:
            torch.manual_seed(seed)
            samples = list(itertools.islice(op.sample_inputs("neuron", dtype, requires_grad=(kind == "bwd")), cap))
        except Exception as e:  # noqa: BLE001
            source = f"cpu (making them on the device failed: {short_error(e, 120)})"
            torch.manual_seed(seed)
            samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=(kind == "bwd")), cap))
        policy, reason = compare_cpu_policy(DecorateInfo, op, dtype)
        judged = 0
        for index, sample in enumerate(samples):
            if judged >= n_samples:
                break
            key = (dtype_name, kind, index)
            if key in done:
                judged += done[key]
                continue
            send(type="start", key=key)
            torch.manual_seed(seed + 1000 + index)
            record = (run_forward if kind == "fwd" else run_backward)(torch, trnsim, op, sample, dtype, policy,
                                                                      source == "neuron")
            record.update(dtype=dtype_name, kind=kind, index=index, sample=sample_summary(sample))
            if any(t.layout != torch.strided for t in tensors_of(torch, [sample.input, sample.args, sample.kwargs])):
                record["sparse"] = True  # a sparse layout: the device has no sparse kernels
            if source != "neuron":
                record["source"] = source
            if policy != "run":
                record["policy"] = f"{policy}: {reason}" if reason else policy
            if record["class"] == "mismatch" and opinfo_key(op).split(".")[0] in TIE_OPS and has_ties(torch, sample):
                record["ties"] = True  # which of equal values comes first is not specified (stable=False)
            judged += record["class"] != "cpu-error"
            send(type="result", key=key, record=record)


TIE_OPS = {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode", "max", "min", "argmax",
           "argmin", "unique", "unique_consecutive"}


def has_ties(torch, sample):
    t = sample.input
    try:
        return isinstance(t, torch.Tensor) and t.numel() > 1 and t.detach().cpu().flatten().unique().numel() < t.numel()
    except Exception:  # noqa: BLE001
        return False


def sample_summary(sample, limit=200):
    try:
        return sample.summary()[:limit]
    except Exception:  # noqa: BLE001
        return ""


def move(torch, x, device, leaves=None):
    """A copy of a sample part with its tensors on `device` (detached; requires_grad kept, and the
    copied leaves collected in `leaves`); torch.device values and device strings follow. A tensor
    already elsewhere than the source device (an index an op wants on the CPU) stays where it is."""
    other = "neuron" if device == "cpu" else "cpu"
    if isinstance(x, torch.Tensor):
        if x.device.type != other:
            return x
        y = x.detach().to(device)
        if x.requires_grad:
            y.requires_grad_()
            if leaves is not None:
                leaves.append((x, y))
        return y
    if isinstance(x, torch.device):
        return torch.device(device) if x.type == other else x
    if isinstance(x, str) and x.split(":")[0] == other:
        return device
    if isinstance(x, (list, tuple)):
        moved = [move(torch, i, device, leaves) for i in x]
        return type(x)(*moved) if hasattr(x, "_fields") else type(x)(moved)
    if isinstance(x, dict):
        return {k: move(torch, v, device, leaves) for k, v in x.items()}
    return x


def pair(torch, sample, on_device):
    """(cpu part, device part, [(cpu leaf, device leaf)]) of a sample made on the device
    (`on_device`) or on the CPU."""
    parts = (sample.input, sample.args, sample.kwargs)
    leaves = []
    if on_device:
        cpu = move(torch, parts, "cpu", leaves)
        return cpu, parts, [(c, d) for d, c in leaves]
    dev = move(torch, parts, "neuron", leaves)
    return parts, dev, leaves


def tensors_of(torch, x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for i in x for t in tensors_of(torch, i)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in tensors_of(torch, v)]
    return []


def tolerance(torch, dtype):
    """PyTorch's device-vs-CPU tolerance: test_compare_cpu's 1e-3/1e-3 for fp32; assert_close's
    defaults (rtol, atol) for the other dtypes (bf16: 1.6e-2, 1e-5; integers: exact)."""
    if dtype == torch.float32:
        return 1e-3, 1e-3
    return None, None


def not_on_device(torch, out):
    """A reason when a result tensor of the device run is not on the device (None otherwise)."""
    bad = [t for t in tensors_of(torch, out) if t.device.type != "neuron"]
    if bad:
        return f"output tensor on {bad[0].device} (dtype {bad[0].dtype}, shape {tuple(bad[0].shape)}), not on the device"
    return None


def compare(torch, got, expected, dtype, policy):
    """None when `got` (already on the CPU) matches `expected`, else a one-line reason."""
    if policy == "skip":  # PyTorch does not compare values for this op: structure only
        g, e = tensors_of(torch, got), tensors_of(torch, expected)
        if len(g) != len(e):
            return f"{len(g)} output tensors, the CPU gives {len(e)}"
        for a, b in zip(g, e):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"output {tuple(a.shape)} {a.dtype}, the CPU gives {tuple(b.shape)} {b.dtype}"
        return None
    rtol, atol = tolerance(torch, dtype)
    try:
        torch.testing.assert_close(got, expected, rtol=rtol, atol=atol, equal_nan=True, check_stride=False)
        return None
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return " | ".join(lines[:4])[:400]
    except (TypeError, ValueError) as e:  # outputs assert_close cannot compare (None, strings, ...)
        try:
            return None if got == expected else f"{got!r:.80} != {expected!r:.80}"
        except Exception:  # noqa: BLE001
            return f"not comparable: {short_error(e, 200)}"


def exactness(torch, op, cpu_parts, got, expected):
    """For a low-precision mismatch: the largest error of the device and of the CPU against the op
    run in fp32 on the same (rounded) inputs on the CPU, as 'device X, CPU Y'; None if not computable."""
    def up(x):
        if isinstance(x, torch.Tensor):
            return x.detach().float() if x.dtype in (torch.bfloat16, torch.float16) else x
        if isinstance(x, (list, tuple)):
            return type(x)(*map(up, x)) if hasattr(x, "_fields") else type(x)(map(up, x))
        if isinstance(x, dict):
            return {k: up(v) for k, v in x.items()}
        return x
    try:
        exact = op(up(cpu_parts[0]), *up(cpu_parts[1]), **up(cpu_parts[2]))
        pairs = list(zip(tensors_of(torch, got), tensors_of(torch, expected), tensors_of(torch, exact)))
        dev_err = max(((g.double() - x.double()).abs().nan_to_num(0).max().item() for g, _, x in pairs
                       if g.is_floating_point() and g.numel() and g.shape == x.shape), default=None)
        cpu_err = max(((e.double() - x.double()).abs().nan_to_num(0).max().item() for _, e, x in pairs
                       if e.is_floating_point() and e.numel() and e.shape == x.shape), default=None)
        if dev_err is None or cpu_err is None:
            return None
        return dev_err, cpu_err
    except Exception:  # noqa: BLE001
        return None


def classify(error, fallbacks):
    if error:
        return "mismatch"
    return "pass-fallback" if fallbacks else "pass-native"


def run_forward(torch, trnsim, op, sample, dtype, policy, on_device):
    # Both copies are taken first: an op that writes its input must not change what the other run sees.
    try:
        cpu, dev, _ = pair(torch, sample, on_device)
    except Exception as e:  # noqa: BLE001 - the copy between the devices is the device's
        return {"class": "crash", "error": "copying the sample between the devices: " + short_error(e), "fallbacks": []}
    try:
        expected = sample.output_process_fn_grad(op(cpu[0], *cpu[1], **cpu[2]))
    except Exception as e:  # noqa: BLE001 - samples the CPU rejects are not judged
        return {"class": "cpu-error", "error": short_error(e), "fallbacks": []}
    trnsim.reset_fallback_report()
    try:
        out = sample.output_process_fn_grad(op(dev[0], *dev[1], **dev[2]))
        fallbacks = sorted(trnsim.fallback_report())
        wrong_device = not_on_device(torch, out)
        got = move(torch, out, "cpu")
    except Exception as e:  # noqa: BLE001
        return {"class": "crash", "error": short_error(e), "fallbacks": sorted(trnsim.fallback_report())}
    error = wrong_device or compare(torch, got, expected, dtype, policy)
    rec = {"class": classify(error, fallbacks), "error": error or "", "fallbacks": fallbacks,
           "compared": policy != "skip"}
    if error and not wrong_device and dtype in (torch.bfloat16, torch.float16):
        errs = exactness(torch, op, cpu, got, expected)
        if errs:
            rec["error"] = f"vs fp32: device err {errs[0]:.3g}, CPU err {errs[1]:.3g} | " + rec["error"]
            rec["device_closer"] = errs[0] <= errs[1]
            # In bf16 / fp16 the CPU is no reference to a rounding error: both are judged against the
            # op in fp32 on the same inputs, and the device passes when its error is at most twice the
            # CPU's (the model-zoo tier's rule). Counted apart in the summary, never hidden.
            if errs[0] <= 2 * errs[1] + 1e-6:
                rec["class"] = classify(None, fallbacks)
                rec["within_cpu_rounding"] = True
    return rec


def run_backward(torch, trnsim, op, sample, dtype, policy, on_device):
    def float_outs(out):
        return [o for o in tensors_of(torch, out) if o.requires_grad and (o.is_floating_point() or o.is_complex())]

    try:
        cpu, dev, leaves = pair(torch, sample, on_device)
    except Exception as e:  # noqa: BLE001
        return {"class": "crash", "error": "copying the sample between the devices: " + short_error(e), "fallbacks": []}
    try:
        outs = float_outs(sample.output_process_fn_grad(op(cpu[0], *cpu[1], **cpu[2])))
        if not outs or not leaves:
            return {"class": "cpu-error", "error": "no differentiable output", "fallbacks": []}
        cotangents = [torch.randn_like(o) for o in outs]
        expected = torch.autograd.grad(outs, [c for c, _ in leaves], cotangents, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return {"class": "cpu-error", "error": short_error(e), "fallbacks": []}
    trnsim.reset_fallback_report()
    try:
        douts = float_outs(sample.output_process_fn_grad(op(dev[0], *dev[1], **dev[2])))
        if len(douts) != len(outs):
            return {"class": "mismatch", "error": f"{len(douts)} differentiable outputs, the CPU gives {len(outs)}",
                    "fallbacks": sorted(trnsim.fallback_report()), "compared": True}
        got = torch.autograd.grad(douts, [d for _, d in leaves], [c.to(d.device) for c, d in zip(cotangents, douts)],
                                  allow_unused=True)
        fallbacks = sorted(trnsim.fallback_report())
        wrong_device = not_on_device(torch, [g for g in got if g is not None])
        got = [None if g is None else g.cpu() for g in got]
    except Exception as e:  # noqa: BLE001
        return {"class": "crash", "error": short_error(e), "fallbacks": sorted(trnsim.fallback_report())}
    error = wrong_device
    for i, (g, e) in enumerate(zip(got, expected)):
        if error:
            break
        if (g is None) != (e is None):
            error = f"gradient {i}: {'None' if g is None else 'a tensor'}, the CPU gives {'None' if e is None else 'a tensor'}"
        elif g is not None:
            error = compare(torch, g, e, dtype, policy)
            if error:
                error = f"gradient {i}: {error}"
    return {"class": classify(error, fallbacks), "error": error or "", "fallbacks": fallbacks,
            "compared": policy != "skip"}


# ---------------------------------------------------------------------------------------------
# Driver: a pool of workers, each replaced when it dies or hangs.

class Worker:
    def __init__(self, log):
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=ROOT,
                                     start_new_session=True)
        self.buf = b""
        self.ready = False
        self.task = None  # {"op", "done": {key: judged}, "current": key or None, "since": time}
        self.since = time.monotonic()
        self.ops_run = 0

    def fileno(self):
        return self.proc.stdout.fileno()

    def send(self, req):
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()

    def read_lines(self):
        chunk = os.read(self.fileno(), 1 << 16)
        if not chunk:
            return None  # EOF: the worker died
        self.buf += chunk
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def kill(self):
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        self.proc.wait()


def death_reason(proc):
    rc = proc.wait()
    if rc < 0:
        import signal
        try:
            return f"worker killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"worker killed by signal {-rc}"
    return f"worker exited with status {rc}"


def sweep(args, ops):
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "workers.log", "ab")
    jsonl = open(out / "samples.jsonl", "w")
    records, op_errors = [], {}
    queue = collections.deque(ops)
    workers = [Worker(log) for _ in range(min(args.jobs, len(ops)))]
    started, finished = time.monotonic(), 0

    def record(op, rec):
        rec = {"op": op, **rec}
        records.append(rec)
        jsonl.write(json.dumps(rec) + "\n")
        jsonl.flush()

    def replace(w, reason):
        nonlocal finished
        task = w.task
        w.kill()
        if task and task["current"] is not None:
            dtype, kind, index = task["current"]
            record(task["op"], {"dtype": dtype, "kind": kind, "index": index, "class": "crash", "error": reason,
                                "fallbacks": [], "sample": ""})
            task["done"][tuple(task["current"])] = 1
            task["current"] = None
            task["restarts"] = task.get("restarts", 0) + 1
            if task["restarts"] <= 2 * args.samples * (len(args.dtypes) + 1):
                queue.appendleft(task)  # resume this op at its next sample
            else:
                finished += 1
        elif task:
            op_errors[task["op"]] = reason
            finished += 1
        if not w.ready:
            startup_failures[0] += 1
            if startup_failures[0] > 3:
                raise SystemExit(f"opinfo_sweep: workers die at startup ({reason}); see {out / 'workers.log'}")
        workers[workers.index(w)] = Worker(log)

    startup_failures = [0]
    builds = set()  # the trnsim builds the workers loaded (path and mtime): more than one = rebuilt mid-sweep
    while queue or any(w.task for w in workers):
        for w in workers:
            if w.ready and w.task is None and queue:
                item = queue.popleft()
                task = item if isinstance(item, dict) else {"op": item, "done": {}, "current": None}
                if w.ops_run >= args.recycle:  # a fresh process now and then: no state builds up
                    queue.appendleft(task)
                    w.kill()
                    workers[workers.index(w)] = Worker(log)
                    continue
                task["since"] = time.monotonic()
                w.task, w.since = task, time.monotonic()
                w.send({"op": task["op"], "done": [[list(k), j] for k, j in task["done"].items()],
                        "samples": args.samples, "dtypes": args.dtypes, "backward": not args.no_backward})
        readable, _, _ = select.select(workers, [], [], 1.0)
        for w in readable:
            lines = w.read_lines()
            if lines is None:
                replace(w, death_reason(w.proc))
                continue
            for msg in lines:
                if msg["type"] == "ready":
                    w.ready, startup_failures[0] = True, 0
                    builds.add(msg.get("build", ""))
                elif msg["type"] == "start":
                    w.task["current"], w.since = tuple(msg["key"]), time.monotonic()
                elif msg["type"] == "result":
                    rec = msg["record"]
                    record(w.task["op"], rec)
                    w.task["done"][tuple(msg["key"])] = int(rec["class"] != "cpu-error")
                    w.task["current"], w.since = None, time.monotonic()
                elif msg["type"] == "op-error":
                    op_errors[w.task["op"]] = msg["error"]
                elif msg["type"] == "done":
                    w.task, w.ops_run = None, w.ops_run + 1
                    finished += 1
                    if args.progress:
                        print(f"[{finished}/{len(ops)} ops, {time.monotonic() - started:.0f} s]", file=sys.stderr,
                              flush=True)
        now = time.monotonic()
        for w in list(workers):
            if w.task and now - w.since > args.timeout:
                replace(w, f"timeout: no result in {args.timeout:.0f} s")
            elif not w.ready and now - w.since > 180:  # startup (importing op_db) hangs
                replace(w, "worker startup timed out")
    for w in workers:
        w.proc.stdin.close()
        w.kill()
    if len(builds) > 1:
        op_errors["(build)"] = f"the trnsim build changed during the sweep ({len(builds)} versions loaded): rerun"
    return records, op_errors, time.monotonic() - started


# ---------------------------------------------------------------------------------------------
# Reports

def summarize(records, op_errors, ops, common, elapsed, args):
    judged = [r for r in records if r["class"] in CLASSES]
    counts = collections.Counter((r["dtype"], r["kind"], r["class"]) for r in judged)
    groups = sorted({(r["dtype"], r["kind"]) for r in judged}, key=lambda g: (g[1], g[0]))

    def share(selected):
        fwd = [r for r in judged if r["kind"] == "fwd" and r["dtype"] in FLOAT_DTYPES and r["op"] in selected]
        by_op = collections.defaultdict(list)
        for r in fwd:
            by_op[r["op"]].append(r["class"] == "pass-native")
        return {"samples": len(fwd), "native_samples": sum(r["class"] == "pass-native" for r in fwd),
                "sample_share": (sum(r["class"] == "pass-native" for r in fwd) / len(fwd)) if fwd else None,
                "ops": len(by_op), "all_native_ops": sum(all(v) for v in by_op.values()),
                "op_share": (sum(all(v) for v in by_op.values()) / len(by_op)) if by_op else None,
                "mean_op_share": (sum(sum(v) / len(v) for v in by_op.values()) / len(by_op)) if by_op else None}

    def share_any(selected):
        fwd = [r for r in judged if r["kind"] == "fwd" and r["op"] in selected]
        return (sum(r["class"] == "pass-native" for r in fwd) / len(fwd)) if fwd else None

    selected_common = [o for o in ops if o in set(common)]
    summary = {
        "ops": len(ops), "ops_with_judged_samples": len({r["op"] for r in judged}), "elapsed_s": round(elapsed, 1),
        "samples_per_op": args.samples, "dtypes": args.dtypes, "backward": not args.no_backward,
        "counts": {f"{d}/{k}": {c: counts[(d, k, c)] for c in CLASSES} for d, k in groups},
        "totals": {c: sum(1 for r in judged if r["class"] == c) for c in CLASSES},
        "cpu_error_samples": sum(1 for r in records if r["class"] == "cpu-error"),
        "uncompared_samples": sum(1 for r in judged if r.get("compared") is False),
        "forward_float_native": {"all": share(set(ops)), "common": share(set(selected_common))},
        "forward_native_share_all_dtypes": {"all": share_any(set(ops)), "common": share_any(set(selected_common))},
        "common_ops_run": len(selected_common),
        "op_errors": op_errors,
    }
    bad = collections.defaultdict(list)
    for r in judged:
        if r["class"] in ("mismatch", "crash"):
            bad[(r["class"], r["op"])].append(r)
    def line(r):
        tags = [t for t, on in (("PyTorch xfails test_compare_cpu", r.get("policy") == "xfail"),
                                ("sparse layout", r.get("sparse")), ("fell back", bool(r["fallbacks"])),
                                ("input has ties: the order of equal values is unspecified", r.get("ties"))) if on]
        return f"{r['dtype']}/{r['kind']}#{r['index']}{' [' + '; '.join(tags) + ']' if tags else ''}: {r['error']}"

    summary["mismatches"] = {op: [line(r) for r in rs] for (c, op), rs in sorted(bad.items()) if c == "mismatch"}
    summary["crashes"] = {op: [line(r) for r in rs] for (c, op), rs in sorted(bad.items()) if c == "crash"}
    summary["sparse_samples"] = {c: sum(1 for r in judged if r["class"] == c and r.get("sparse")) for c in CLASSES}
    mism = [r for r in judged if r["class"] == "mismatch"]
    summary["mismatch_tags"] = {"pytorch_xfail": sum(r.get("policy") == "xfail" for r in mism),
                                "ties": sum(bool(r.get("ties")) for r in mism),
                                "fell_back": sum(bool(r["fallbacks"]) for r in mism)}
    low = [r for r in judged if r["class"] == "mismatch" and "device_closer" in r]
    summary["low_precision_mismatches"] = {"total": len(low), "device_closer_to_fp32": sum(r["device_closer"] for r in low)}
    summary["low_precision_within_cpu_rounding"] = sum(1 for r in judged if r.get("within_cpu_rounding"))
    summary["native_mismatches"] = sum(1 for r in judged if r["class"] == "mismatch" and not r["fallbacks"])
    fb = collections.Counter(f for r in judged if r["class"] == "pass-fallback" for f in r["fallbacks"])
    summary["top_fallbacks"] = fb.most_common(40)
    return summary


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f} %"


def markdown(summary):
    lines = [f"# OpInfo sweep: {summary['ops']} ops, {summary['samples_per_op']} samples per op and dtype, "
             f"dtypes {', '.join(summary['dtypes'])}{', fp32 backward' if summary['backward'] else ''} "
             f"({summary['elapsed_s']:.0f} s)", "",
             "| dtype/kind | " + " | ".join(CLASSES) + " |", "|---|" + "---|" * len(CLASSES)]
    for g, c in summary["counts"].items():
        lines.append(f"| {g} | " + " | ".join(str(c[k]) for k in CLASSES) + " |")
    lines.append("| total | " + " | ".join(str(summary["totals"][k]) for k in CLASSES) + " |")
    lines += ["", f"Not judged: {summary['cpu_error_samples']} samples the CPU rejects; "
              f"{summary['uncompared_samples']} judged samples compared by structure only (PyTorch's test_compare_cpu "
              f"skips their values). Mismatches among samples that ran natively: {summary['native_mismatches']}; "
              f"mismatches on ops PyTorch's own test_compare_cpu expects to fail: {summary['mismatch_tags']['pytorch_xfail']}, "
              f"in the order of tied values: {summary['mismatch_tags']['ties']}. "
              f"Low-precision mismatches: {summary['low_precision_mismatches']['total']}, of which the device is closer "
              f"to the fp32 answer than the CPU in {summary['low_precision_mismatches']['device_closer_to_fp32']}; "
              f"bf16/fp16 samples outside assert_close's defaults but within twice the CPU's own error against the "
              f"fp32 answer (counted as passes): {summary.get('low_precision_within_cpu_rounding', 0)}. "
              f"Samples with a sparse layout (no sparse kernels on the device): "
              + ", ".join(f"{k} {v}" for k, v in summary["sparse_samples"].items()) + ".", ""]
    for scope, label in (("all", "all ops"), ("common", f"the {summary['common_ops_run']} common ops (test_opinfo.py)")):
        s = summary["forward_float_native"][scope]
        lines.append(f"- Forward float native share over {label}: {pct(s['sample_share'])} of {s['samples']} samples; "
                     f"{s['all_native_ops']}/{s['ops']} ops all-native ({pct(s['op_share'])}); mean per-op share "
                     f"{pct(s['mean_op_share'])}; counting every swept dtype: "
                     f"{pct(summary['forward_native_share_all_dtypes'][scope])}")
    if summary["op_errors"]:
        lines += ["", "## Ops that could not be swept", ""]
        lines += [f"- {op}: {e}" for op, e in sorted(summary["op_errors"].items())]
    for key, title in (("mismatches", "Mismatches"), ("crashes", "Crashes")):
        lines += ["", f"## {title} ({sum(map(len, summary[key].values()))} samples, {len(summary[key])} ops)", ""]
        for op, items in summary[key].items():
            lines.append(f"- **{op}**")
            lines += [f"  - {i}" for i in items]
    lines += ["", "## Most frequent fallback ops (samples)", ""]
    lines += [f"- {op}: {n}" for op, n in summary["top_fallbacks"]]
    return "\n".join(lines) + "\n"


def main():
    if "--worker" in sys.argv:
        worker_main()
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default="all", help="comma-separated op names (op_db keys: name or name.variant), "
                   "'all' (default) or 'common' (test_opinfo.py's list; div/max/min with all their variants)")
    p.add_argument("--random-subset", type=int, default=0, metavar="N",
                   help="with --ops all: the common ops plus N other ops drawn at random (seeded by --seed)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtypes", default="float32,bfloat16", help="forward dtypes (fp32, bf16, int64, bool, ...)")
    p.add_argument("--samples", type=int, default=3, help="samples per op and dtype (default 3)")
    p.add_argument("--no-backward", action="store_true", help="skip the fp32 backward")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--timeout", type=float, default=120, help="seconds one sample may take (default 120)")
    p.add_argument("--recycle", type=int, default=40, help="ops per worker process before a fresh one (default 40)")
    p.add_argument("--out", default=str(ROOT / "build" / "opinfo_sweep"), help="output folder")
    p.add_argument("--progress", action="store_true", help="print progress to stderr")
    args = p.parse_args()
    args.dtypes = [DTYPE_ALIASES.get(d.strip(), d.strip()) for d in args.dtypes.split(",") if d.strip()]

    build_python = pathlib.Path(os.environ.get("TRNSIM_BUILD_DIR", ROOT / "build")) / "python"
    if (build_python / "trnsim").is_dir():
        sys.path.insert(0, str(build_python))
    from torch.testing._internal import common_methods_invocations as cmi
    all_ops = list(dict.fromkeys(opinfo_key(op) for op in cmi.op_db))
    common = expand_common(common_ops(), all_ops)
    if args.ops == "all":
        ops = all_ops
        if args.random_subset:
            rest = [o for o in all_ops if o not in set(common)]
            picked = set(random.Random(args.seed).sample(rest, min(args.random_subset, len(rest))))
            ops = [o for o in all_ops if o in set(common) or o in picked]
    elif args.ops == "common":
        ops = [o for o in all_ops if o in set(common)]
    else:
        ops = [o.strip() for o in args.ops.split(",") if o.strip()]
        unknown = [o for o in ops if o not in set(all_ops)]
        if unknown:
            p.error(f"not in op_db: {', '.join(unknown)}")
    records, op_errors, elapsed = sweep(args, ops)
    out = pathlib.Path(args.out)
    with open(out / "samples.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "dtype", "kind", "index", "class", "compared", "fallbacks", "error", "sample"])
        for r in records:
            w.writerow([r["op"], r["dtype"], r["kind"], r["index"], r["class"], r.get("compared", ""),
                        " ".join(r["fallbacks"]), r["error"], r.get("sample", "")])
    summary = summarize(records, op_errors, ops, common, elapsed, args)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    text = markdown(summary)
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
