"""``trnsim.profile()``: what the simulated device did during a block of PyTorch code.

Every op the device ran is one record of the executor's op log (``trnsim.op_log()``): kernels run
on the simulator, host<->device copies and CPU-fallback ops timed over the host link. The profile
keeps the records made inside the block, aggregates them into a table, sums them into totals, and
(unless ``trace=False``) writes one Perfetto trace: per device an ``ops`` track and a ``host link``
track, then the engines and DMA queues of each physical core, as ``trnsim run --trace`` draws them.
"""
import time

from . import _C

__all__ = ["Profile", "profile"]


def _shape_text(shapes):
    return ", ".join("[" + ", ".join(str(d) for d in s) + "]" for s in shapes)


def _us(ns):
    return ns / 1e3


class Profile:
    """Context manager; see :func:`profile`. After the block: ``records``, ``table()``,
    ``totals()``, ``export_trace(path)``."""

    def __init__(self, trace=True):
        self.trace = trace
        self.records = []
        self.host_s = 0.0
        self.config = None
        self._start_index = 0
        self._start_time = 0.0
        self._active = False
        self._trace_ready = False

    def __enter__(self):
        if _PROFILING[0]:
            raise RuntimeError("trnsim.profile() blocks do not nest")
        _PROFILING[0] = True
        self._active = True
        self.config = dict(_C.config_info())
        self._start_index = len(_C.op_log())
        self._clocks = [_C.simulated_ns(d) for d in range(_C.device_count())]
        if self.trace:
            _C.reset_timeline()
            _C.set_timeline_enabled(True)
        self._start_time = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.host_s = time.perf_counter() - self._start_time
        if self.trace:
            _C.set_timeline_enabled(False)
            self._trace_ready = True
        self._clock_deltas = [_C.simulated_ns(d) - c for d, c in enumerate(self._clocks)]
        log = _C.op_log()
        # reset_simulated_time() inside the block clears the log: keep what is there.
        self.records = [dict(r) for r in log[self._start_index:]] if len(log) >= self._start_index else [
            dict(r) for r in log]
        self._active = False
        _PROFILING[0] = False
        return False

    # --- summaries ---------------------------------------------------------------------------

    def totals(self):
        """Sums over the block: simulated_ns (all devices' records; side streams' records overlap the default
        stream's, simulated_wall_ns is the longest device's clock advance), per-kind ns, host_s (wall time of the
        block), flops (matmul FLOPs the kernels counted), mfu (flops against the bf16 tensor-engine
        peak of the devices over the simulated time), op counts, fallback_ops, host-link bytes."""
        # Collectives (trnsim.distributed) run on the collective engines beside the device's clock: what the
        # default stream's clock waited for them is exposed communication, its "wait" records caused by a collective
        # (directly, or through a stream that was waiting on one); a wait for another stream's compute is not.
        collectives = [r for r in self.records if r["kind"] == "collective"]
        recs = [r for r in self.records if r["kind"] != "collective"]
        simulated_ns = sum(r["ns"] for r in recs)
        flops = sum(r["flops"] for r in recs)
        devices = sorted({r["device"] for r in recs}) or [0]
        peak_tflops = (self.config or {}).get("peak_bf16_tflops_per_device", 0.0)
        # Devices run their ops one after another in this simulator: each device's busy time is
        # the sum of its records, and the block's time is the longest device's.
        per_device_ns = {d: sum(r["ns"] for r in recs if r["device"] == d) for d in devices}
        wall_ns = max(per_device_ns.values()) if per_device_ns else 0.0
        # With side streams (torch.neuron.Stream) records overlap: the devices' default-stream clocks say how
        # long the block took (unless the block reset them).
        deltas = getattr(self, "_clock_deltas", None)
        if deltas and min(deltas) >= 0:
            wall_ns = max(deltas)
        mfu = flops / (simulated_ns * 1e-9 * peak_tflops * 1e12) if simulated_ns > 0 and peak_tflops > 0 else 0.0
        by_kind = {k: sum(r["ns"] for r in recs if r["kind"] == k) for k in ("kernel", "copy", "fallback", "estimate")}
        timed_only = [r for r in recs if r["kind"] == "kernel" and r.get("timing_only")]
        kernels = [r for r in recs if r["kind"] == "kernel"]
        # Both modes use the timing cache: with values a hit runs the interpreter alone.
        cache_hits = sum(1 for r in kernels if r.get("timing_cached"))
        return {
            "config": (self.config or {}).get("name", ""),
            "simulated_ns": simulated_ns,
            "simulated_wall_ns": wall_ns,
            "kernel_ns": by_kind["kernel"],
            "copy_ns": by_kind["copy"],
            "fallback_ns": by_kind["fallback"],
            "host_s": self.host_s,
            "simulate_host_s": sum(r["host_s"] for r in recs if r["kind"] == "kernel"),
            "flops": flops,
            "mfu": mfu,
            "ops": sum(1 for r in recs if r["kind"] == "kernel"),
            "copies": sum(1 for r in recs if r["kind"] == "copy"),
            "fallback_ops": sum(1 for r in recs if r["kind"] == "fallback"),
            # Timing-only mode: ops with no kernel, charged an estimate (trnsim.timing_only); in
            # both modes, the kernels whose timing came from the timing cache.
            "estimate_ns": by_kind["estimate"],
            "estimate_ops": sum(1 for r in recs if r["kind"] == "estimate"),
            "timing_only_kernels": len(timed_only),
            "timing_cache_hits": cache_hits,
            "timing_cache_hit_rate": cache_hits / len(kernels) if kernels else 0.0,
            "host_link_bytes": sum(r["bytes"] for r in recs),
            # trnsim.distributed: collectives this process's ranks took part in, their time on the collective
            # engines, and the part of it the devices' clocks waited for (not hidden behind compute).
            "collectives": len(collectives),
            "collective_ns": sum(r["ns"] for r in collectives),
            "collective_bytes": sum(r["bytes"] for r in collectives),
            "exposed_communication_ns": sum(r["ns"] for r in recs
                                            if r["kind"] == "wait" and r["bottleneck"] == "collective"),
            # The default stream waiting on other streams' compute (wait_stream / wait_event / synchronize).
            "stream_wait_ns": sum(r["ns"] for r in recs if r["kind"] == "wait" and r["bottleneck"] == "stream"),
        }

    def rows(self, group_by_shape=True):
        """One dict per (op, kind, dtype[, shapes]): calls, total/avg simulated ns, flops, MFU over
        the calls, the most frequent bottleneck engine, share of the total; sorted by time."""
        groups = {}
        for r in self.records:
            key = (r["op"], r["kind"], r["dtype"], _shape_text(r["shapes"]) if group_by_shape else "")
            g = groups.setdefault(key, {"op": r["op"], "kind": r["kind"], "dtype": r["dtype"], "shapes": key[3],
                                        "calls": 0, "ns": 0.0, "flops": 0, "_mfu_ns": 0.0, "_bottlenecks": {}})
            g["calls"] += 1
            g["ns"] += r["ns"]
            g["flops"] += r["flops"]
            g["_mfu_ns"] += r["mfu"] * r["ns"]
            g["_bottlenecks"][r["bottleneck"]] = g["_bottlenecks"].get(r["bottleneck"], 0) + r["ns"]
        total = sum(g["ns"] for g in groups.values()) or 1.0
        out = []
        for g in groups.values():
            out.append({
                "op": g["op"], "kind": g["kind"], "dtype": g["dtype"], "shapes": g["shapes"], "calls": g["calls"],
                "ns": g["ns"], "avg_ns": g["ns"] / g["calls"], "flops": g["flops"],
                "mfu": g["_mfu_ns"] / g["ns"] if g["ns"] > 0 else 0.0,
                "bottleneck": max(g["_bottlenecks"].items(), key=lambda kv: (kv[1], kv[0]))[0],
                "fallback": g["kind"] in ("fallback", "estimate"), "estimate": g["kind"] == "estimate",
                "share": g["ns"] / total,
            })
        out.sort(key=lambda row: (-row["ns"], row["op"], row["shapes"]))
        return out

    def table(self, top=None, group_by_shape=True, shape_width=40):
        """The per-op table as text, sorted by simulated time (``top`` rows at most)."""
        rows = self.rows(group_by_shape)
        shown = rows if top is None else rows[:top]
        header = (f"{'op':<34} {'kind':<8} {'shapes':<{shape_width}} {'dtype':<9} {'calls':>5} "
                  f"{'total us':>11} {'avg us':>10} {'%':>6} {'MFU %':>6} {'bottleneck':<10}")
        lines = [header, "-" * len(header)]
        for row in shown:
            shapes = row["shapes"] if len(row["shapes"]) <= shape_width else row["shapes"][:shape_width - 3] + "..."
            mfu = f"{100 * row['mfu']:6.1f}" if row["kind"] == "kernel" else f"{'-':>6}"
            lines.append(f"{row['op'][:34]:<34} {row['kind']:<8} {shapes:<{shape_width}} {row['dtype'][:9]:<9} "
                         f"{row['calls']:>5} {_us(row['ns']):>11.2f} {_us(row['avg_ns']):>10.2f} "
                         f"{100 * row['share']:>6.1f} {mfu} {row['bottleneck']:<10}")
        if top is not None and len(rows) > top:
            rest = rows[top:]
            lines.append(f"... {len(rest)} more rows, {_us(sum(r['ns'] for r in rest)):.2f} us")
        t = self.totals()
        lines.append("-" * len(header))
        lines.append(f"{t['config']}: simulated {_us(t['simulated_ns']):.2f} us (kernels {_us(t['kernel_ns']):.2f}, "
                     f"host copies {_us(t['copy_ns']):.2f}, fallbacks {_us(t['fallback_ns']):.2f}); "
                     f"{t['ops']} kernels, {t['fallback_ops']} fallback ops; MFU {100 * t['mfu']:.1f}%; "
                     f"host {t['host_s']:.2f} s; timing cache hit rate {100 * t['timing_cache_hit_rate']:.1f}%")
        if t["collectives"]:
            lines.append(f"collectives: {t['collectives']}, {_us(t['collective_ns']):.2f} us on the collective engines, "
                         f"{_us(t['exposed_communication_ns']):.2f} us exposed (the devices waited)")
        if t["timing_only_kernels"] or t["estimate_ops"]:
            lines.append(f"timing-only: {t['timing_only_kernels']} kernels timed, timing cache hit rate "
                         f"{100 * t['timing_cache_hit_rate']:.1f}%; {t['estimate_ops']} ops without a kernel "
                         f"charged an estimate ({_us(t['estimate_ns']):.2f} us, kind 'estimate')")
        return "\n".join(lines)

    def export_trace(self, path):
        """Writes the block's Perfetto / Chrome-trace JSON (open in ui.perfetto.dev); returns the
        number of slices."""
        if not self.trace:
            raise RuntimeError("this profile was made with trace=False")
        if self._active:
            raise RuntimeError("export_trace() after the profiled block has ended")
        return _C.write_timeline(str(path))


_PROFILING = [False]


def profile(trace=True):
    """``with trnsim.profile() as prof: ...`` then ``print(prof.table())``, ``prof.totals()``,
    ``prof.export_trace("t.json")``. ``trace=False`` skips the per-instruction trace (faster)."""
    return Profile(trace=trace)
