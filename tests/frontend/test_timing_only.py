"""Timing-only device mode (issue 15): every lowered op is timed exactly as with values (the same
simulated time, op by op, checked here against a values-mode run of the same program), computes
nothing, holds no host memory for its tensors, and refuses to hand values to the host."""
import contextlib
import re

import pytest
import torch
import torch.nn.functional as F

import trnsim


@pytest.fixture(autouse=True)
def _trn2_with_values():
    trnsim.set_config("trn2", values=True)
    mode = trnsim._C.fallback_mode()
    trnsim.set_fallback_mode("allow")
    yield
    trnsim.set_fallback_mode(mode)
    trnsim.set_config("trn2", values=True)


def _kernel_log(program, values):
    """Runs `program()` (which moves its own CPU inputs to the device) in values or timing-only
    mode and returns what the op log says about each launch."""
    torch.manual_seed(0)
    trnsim.reset_simulated_time()
    with contextlib.nullcontext() if values else trnsim.timing_only():
        program()
    return [(r["op"], r["kind"], r["shapes"], r["dtype"], r["ns"]) for r in trnsim.op_log()]


def _dev(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype).to("neuron")


def _mlp_step():
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = _dev(32, 64)
    target = torch.randint(0, 16, (32,)).to("neuron")
    loss = F.cross_entropy(model(x), target)
    loss.backward()
    opt.step()
    opt.zero_grad()


def _attention_block():
    q, k, v = (_dev(1, 4, 256, 64, dtype=torch.bfloat16) for _ in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    o = F.layer_norm(o, (64,))
    F.softmax(o.float(), dim=-1).sum(dim=-1)


# One program per lowering family; each must run on kernels in values mode (no fallback) so the
# comparison is kernel against kernel.
PROGRAMS = {
    "mm": lambda: _dev(128, 256) @ _dev(256, 512),
    "addmm_bf16": lambda: torch.addmm(_dev(512, dtype=torch.bfloat16), _dev(128, 256, dtype=torch.bfloat16),
                                      _dev(256, 512, dtype=torch.bfloat16)),
    "bmm": lambda: torch.bmm(_dev(4, 64, 128), _dev(4, 128, 64)),
    "elementwise": lambda: torch.where(_dev(64, 64) > 0, _dev(64, 64) * 3 - _dev(64, 1), _dev(64, 64) / 2),
    "activations": lambda: [f(_dev(128, 256)) for f in (torch.relu, F.gelu, F.silu, torch.sigmoid, torch.tanh,
                                                         torch.exp, torch.rsqrt)],
    "softmax": lambda: (F.softmax(_dev(64, 300), dim=-1), F.log_softmax(_dev(64, 300), dim=1)),
    "norms": lambda: (F.layer_norm(_dev(32, 256), (256,)), F.rms_norm(_dev(32, 256), (256,))),
    "reductions": lambda: (_dev(64, 128).sum(dim=1), _dev(64, 128).mean(dim=0), _dev(64, 128).amax(dim=-1)),
    "embedding": lambda: F.embedding(torch.randint(0, 1000, (8, 16)).to("neuron"), _dev(1000, 64)),
    # V * N beyond the one-hot matmul's bound: the backward adds rows on the scatter kernel.
    "embedding_backward_large_vocab": lambda: F.embedding(torch.randint(0, 70_000, (1000,)).to("neuron"),
                                                          _dev(70_000, 8).requires_grad_(), padding_idx=3).sum().backward(),
    "index_add": lambda: torch.zeros(500, 8, device="neuron").index_add_(0, torch.randint(0, 500, (300,)).to("neuron"),
                                                                         _dev(300, 8)),
    "transpose_cat_cast": lambda: torch.cat([_dev(64, 32).t().contiguous(), _dev(32, 64)]).to(torch.bfloat16),
    "conv_pool_bn": lambda: F.max_pool2d(F.batch_norm(F.conv2d(_dev(2, 3, 16, 16), _dev(8, 3, 3, 3)), None, None,
                                                      training=True), 2),
    "mlp_training_step": _mlp_step,
    "attention_block": _attention_block,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_simulated_time_op_by_op(name):
    with_values = _kernel_log(PROGRAMS[name], values=True)
    timed = _kernel_log(PROGRAMS[name], values=False)
    assert not [r for r in with_values if r[1] == "fallback"], "the program must run on kernels"
    assert [r for r in with_values if r[1] == "kernel"], "the program must launch kernels"
    assert timed == with_values


def test_a_tiny_llama_training_step_has_the_same_timeline():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)

    def step():
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to("neuron")
        ids = torch.randint(0, 256, (2, 32)).to("neuron")
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()

    with_values = _kernel_log(step, values=True)
    timed = _kernel_log(step, values=False)
    kernels = [r for r in with_values if r[1] == "kernel"]
    assert len(kernels) > 50
    # Where values mode falls back to the CPU, timing-only charges an estimate instead: the two
    # runs launch the same ops in the same order, and every kernel has the same time.
    assert [r[:4] for r in timed if r[1] == "kernel"] == [r[:4] for r in kernels]
    assert [r[4] for r in timed if r[1] == "kernel"] == [r[4] for r in kernels]
    assert [r[0] for r in timed if r[1] == "estimate"] == [r[0] for r in with_values if r[1] == "fallback"]


def test_timing_cache_reuses_a_program_timed_before():
    trnsim.set_config("trn2")  # a fresh runtime: an empty timing cache
    with trnsim.timing_only():
        a, b = _dev(256, 512), _dev(512, 256)
        trnsim.reset_simulated_time()
        before = trnsim.timing_cache_stats()
        a @ b
        a @ b
        first, second = trnsim.op_log("kernel")
        after = trnsim.timing_cache_stats()
    assert not first["timing_cached"] and second["timing_cached"] and second["ns"] == first["ns"]
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"] + 1
    assert after["entries"] == before["entries"] + 1
    with trnsim.timing_only(), trnsim.profile() as prof:
        a @ b  # the profile wants a trace: the entry timed without one is timed again, with it
        a @ b
    totals = prof.totals()
    assert totals["timing_only_kernels"] == 2 and totals["timing_cache_hits"] == 1
    assert totals["timing_cache_hit_rate"] == 0.5
    assert "timing cache hit rate 50.0%" in prof.table()


def test_with_values_a_cached_timing_runs_only_the_interpreter_and_gives_the_same_values_and_time():
    trnsim.set_config("trn2")  # a fresh runtime: an empty timing cache
    torch.manual_seed(3)
    x_cpu, w_cpu = torch.randn(300, 200), torch.randn(200, 96)
    x, w = x_cpu.to("neuron"), w_cpu.to("neuron")
    trnsim.reset_simulated_time()
    with trnsim.profile() as prof:
        outs = [F.gelu(x @ w).cpu() for _ in range(3)]
    log = trnsim.op_log("kernel")
    mm = [r for r in log if r["op"] == "mm"]
    gelu = [r for r in log if r["op"] == "gelu"]
    assert len(mm) == 3 and len(gelu) == 3
    for runs in (mm, gelu):
        assert [r["timing_cached"] for r in runs] == [False, True, True]
        assert len({r["ns"] for r in runs}) == 1 and not any(r["timing_only"] for r in runs)
    # The interpreter alone computes what the timing model's run computed, bit for bit, and matches torch.
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    torch.testing.assert_close(outs[0], F.gelu(x_cpu @ w_cpu), rtol=2e-5, atol=2e-5)
    assert prof.totals()["timing_cache_hit_rate"] == pytest.approx(4 / 6)


def test_an_op_without_a_kernel_is_charged_the_documented_estimate():
    leaves = dict(trnsim._C.config_leaves("trn2", []))
    info = trnsim.config()
    bytes_per_ns = float(leaves["hbm.bandwidth_gbps"]) * info["cores_per_device"] / float(leaves["chip.physical_cores"])
    with trnsim.timing_only():
        x, y = _dev(1000), _dev(1000)
        trnsim.reset_simulated_time()
        z = torch.fmax(x, y)  # not lowered
        (record,) = trnsim.op_log()
    assert z.shape == (1000,) and z.device.type == "neuron"
    assert record["kind"] == "estimate" and record["op"] == "aten::fmax.out"
    # reads x and y, writes the out= result: 3 x 4000 bytes
    assert record["ns"] == pytest.approx(float(leaves["chip.kernel_launch_ns"]) + 12000 / bytes_per_ns)
    assert "aten::fmax.out" in trnsim.fallback_report()


def test_the_host_cannot_read_values_in_timing_only_mode():
    with trnsim.timing_only():
        x = _dev(4, 4) * 2
        for read in (lambda: x.cpu(), lambda: x.sum().item(), lambda: x.tolist(), lambda: print(x)):
            with pytest.raises(RuntimeError, match="timing-only mode"):
                read()
        with pytest.raises(NotImplementedError, match=re.compile("nonzero.*timing-only|timing-only.*nonzero", re.S)):
            torch.nonzero(x)
    # Outside the block the tensor still has none: a clear error, not zeros.
    with pytest.raises(RuntimeError, match="written in timing-only mode"):
        x.cpu()
    # Rewritten with values, it reads again.
    x.copy_(torch.ones(4, 4))
    assert torch.equal(x.cpu(), torch.ones(4, 4))
    # Values computed from a tensor without values have none either.
    with trnsim.timing_only():
        w = _dev(4, 4) * 3
    with pytest.raises(RuntimeError, match="written in timing-only mode"):
        (w + 1).cpu()


def test_a_small_copy_from_the_host_keeps_its_values_in_timing_only_mode():
    # Index and metadata tensors frameworks send to the device and read back (DDP's bucket order): up to
    # 1 MiB of a whole storage; what a kernel computes from them has none, and large copies move nothing.
    host = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    with trnsim.timing_only():
        small = host.to("neuron")
        assert torch.equal(small.cpu(), host)
        assert small[1, 2].item() == 6
        with pytest.raises(RuntimeError, match="timing-only mode"):
            (small + 1).cpu()
        big = torch.zeros(1 << 19, dtype=torch.float32).to("neuron")  # 2 MiB
        with pytest.raises(RuntimeError, match="timing-only mode"):
            big.cpu()


def _rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def test_big_tensors_cost_no_host_memory_but_are_accounted():
    with trnsim.timing_only():
        base = torch.neuron.memory_allocated()
        rss = _rss_bytes()
        x = torch.empty(1 << 30, dtype=torch.bfloat16, device="neuron")  # 2 GiB
        y = x * 2  # a 2 GiB kernel result
        assert torch.neuron.memory_allocated() == base + 2 * (2 << 30)
        assert torch.neuron.max_memory_allocated() >= base + 2 * (2 << 30)
        assert _rss_bytes() - rss < 256 << 20
        capacity = trnsim.config()["hbm_bytes_per_device"]
        with pytest.raises(torch.OutOfMemoryError, match="NEURON out of memory"):
            torch.empty(capacity, dtype=torch.uint8, device="neuron")
        del x, y
        assert torch.neuron.memory_allocated() == base


def test_model_construction_needs_no_host_memory_for_weights():
    with trnsim.timing_only():
        rss = _rss_bytes()
        with torch.device("neuron"):
            big = torch.nn.Linear(8192, 8192, dtype=torch.bfloat16)  # 128 MiB of weights, initialised on device
        assert big.weight.device.type == "neuron"
        meta = torch.nn.Linear(8192, 8192, device="meta", dtype=torch.bfloat16)
        moved = meta.to_empty(device="neuron")
        assert moved.weight.device.type == "neuron" and moved.weight.shape == (8192, 8192)
        assert _rss_bytes() - rss < 128 << 20
        trnsim.reset_simulated_time()
        moved(torch.empty(16, 8192, dtype=torch.bfloat16, device="neuron"))
        assert [r["kind"] for r in trnsim.op_log()] == ["kernel"]


def test_modes_by_set_config_and_environment(tmp_path):
    trnsim.set_config("trn2", values=False)
    assert not trnsim.values_enabled()
    trnsim.set_config("trn3")  # the mode carries over a config change
    assert not trnsim.values_enabled()
    trnsim.set_config("trn2", values=True)
    assert trnsim.values_enabled()
    with pytest.raises(TypeError):
        trnsim.set_config("trn2", values="no")
    import subprocess
    import sys
    code = "import trnsim; print(trnsim.values_enabled())"
    env = dict(__import__("os").environ, TRNSIM_VALUES="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr
    env["TRNSIM_VALUES"] = "maybe"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "TRNSIM_VALUES='maybe'" in out.stderr


# ---- every lowered op of the OpInfo tier, sample by sample ------------------------------------

def _opinfo_samples(name, dtype, limit):
    from test_opinfo import OPINFOS
    op = OPINFOS.get(name)
    if op is None or dtype not in op.supported_dtypes("cpu"):
        return None, []
    samples = []
    for sample in list(op.sample_inputs("cpu", dtype, requires_grad=False))[:limit]:
        try:
            op(sample.input, *sample.args, **sample.kwargs)
        except Exception:  # noqa: BLE001 - samples the CPU rejects are not ours to judge
            continue
        samples.append(sample)
    return op, samples


def _opinfo_names():
    try:
        from test_opinfo import OPS
    except pytest.skip.Exception:
        return []
    return OPS


@pytest.mark.parametrize("name", _opinfo_names())
def test_opinfo_samples_have_the_same_time_in_both_modes(name):
    """Each OpInfo sample of the lowered ops, run with values and in timing-only mode: the same
    launches with the same simulated times; where values mode falls back to the CPU, timing-only
    charges an estimate; a sample whose result needs values raises the mode's clear error."""
    from test_opinfo import move
    op, samples = _opinfo_samples(name, torch.float32, 8)
    if not samples:
        pytest.skip(f"no fp32 OpInfo samples for {name}")
    compared = 0
    for sample in samples:
        def program():
            op(move(sample.input, "neuron"), *move(sample.args, "neuron"), **move(sample.kwargs, "neuron"))
        with_values = _kernel_log(program, values=True)
        try:
            timed = _kernel_log(program, values=False)
        except (RuntimeError, NotImplementedError) as e:
            assert "timing-only mode" in str(e), f"{name}: an unclear error in timing-only mode: {e}"
            continue
        as_estimates = [(r[0], "estimate" if r[1] == "fallback" else r[1], r[2], r[3]) for r in with_values
                        if r[1] != "copy"]
        assert [r[:4] for r in timed if r[1] != "copy"] == as_estimates, f"{name}: other launches"
        assert [r[4] for r in timed if r[1] == "kernel"] == [r[4] for r in with_values if r[1] == "kernel"], \
            f"{name}: another simulated time"
        compared += 1
    assert compared > 0 or name in _NEEDS_VALUES, f"{name}: no sample could be compared"


# Ops whose every sample needs values on the host in timing-only mode (data-dependent shapes).
_NEEDS_VALUES = {"repeat_interleave"}


def test_a_timing_only_recording_replays_with_its_estimates(tmp_path, trnsim_bin):
    import subprocess
    with trnsim.timing_only():
        x = _dev(64, 64)
        with trnsim.record(str(tmp_path / "step.trnrec")):
            torch.fmax(x @ x, x).sum()
    same = subprocess.run([str(trnsim_bin), "replay", str(tmp_path / "step.trnrec")], capture_output=True, text=True,
                          timeout=120)
    assert same.returncode == 0, same.stderr
    assert "1 timing-only estimates" in same.stdout and "bit for bit" in same.stdout
    # On trn3 the estimate is recomputed from its bytes with trn3's HBM share and launch cost.
    other = subprocess.run([str(trnsim_bin), "replay", str(tmp_path / "step.trnrec"), "--config", "trn3"],
                           capture_output=True, text=True, timeout=120)
    assert other.returncode == 0, other.stderr
    leaves = dict(trnsim._C.config_leaves("trn3", []))
    bytes_per_ns = float(leaves["hbm.bandwidth_gbps"]) * float(leaves["chip.default_logical_core_size"]) / float(
        leaves["chip.physical_cores"])
    expected_us = (float(leaves["chip.kernel_launch_ns"]) + 3 * 64 * 64 * 4 / bytes_per_ns) / 1e3
    row = next(line for line in other.stdout.splitlines() if line.startswith("aten::fmax.out"))
    assert float(row.split()[4]) == pytest.approx(expected_us, abs=1e-3)


def test_adamw_steps_share_one_program_and_its_timing():
    """The step number and the learning rate (a scheduler moves it) are the AdamW kernel's runtime
    input, not part of its program: after step 1 every step hits the program and timing caches,
    with values as with timing only, and the scheduled lr still reaches the update."""
    trnsim.set_config("trn2")  # a fresh runtime: empty caches
    torch.manual_seed(5)
    w_cpu = torch.randn(64, 96)
    w = w_cpu.clone().to("neuron").requires_grad_(True)
    ref = w_cpu.clone().requires_grad_(True)
    opt = torch.optim.AdamW([w], lr=1e-2, fused=True)
    opt_ref = torch.optim.AdamW([ref], lr=1e-2, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    sched_ref = torch.optim.lr_scheduler.StepLR(opt_ref, step_size=1, gamma=0.5)
    trnsim.reset_simulated_time()
    for step in range(4):
        g = torch.randn(64, 96)
        w.grad, ref.grad = g.to("neuron"), g.clone()
        opt.step(), opt_ref.step()
        sched.step(), sched_ref.step()
    adamw = [r for r in trnsim.op_log("kernel") if "adamw" in r["op"]]
    assert len(adamw) == 4
    assert [r["timing_cached"] for r in adamw] == [False, True, True, True]
    assert len({r["ns"] for r in adamw}) == 1
    torch.testing.assert_close(w.detach().cpu(), ref.detach(), rtol=2e-6, atol=2e-6)


def test_foreach_adamw_with_a_scheduler_reuses_every_program_after_the_first_step():
    """torch.optim.AdamW's default (foreach) path passes the bias corrections and the scheduled lr as
    Python scalars that change every step; the foreach kernels take them as runtime inputs, so from
    the second step on every launch reuses its program's timing, and the values follow the CPU."""
    trnsim.set_config("trn2")  # a fresh runtime: empty caches
    torch.manual_seed(6)
    cpu = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.Linear(96, 16))
    dev = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.Linear(96, 16))
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) for m in (cpu, dev)]
    scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.7) for o in opts]
    cached = []
    for step in range(4):
        grads = [torch.randn_like(p) for p in cpu.parameters()]
        for model in (cpu, dev):
            for p, g in zip(model.parameters(), grads):
                p.grad = g.to(p.device)
        trnsim.reset_simulated_time()
        for o, s in zip(opts, scheds):
            o.step()
            s.step()
        cached.append([r["timing_cached"] for r in trnsim.op_log("kernel")])
    assert len(cached[0]) > 20 and not all(cached[0])
    for later in cached[1:]:
        assert len(later) == len(cached[0]) and all(later)
    for p_cpu, p_dev in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(p_dev.detach().cpu(), p_cpu.detach(), rtol=3e-6, atol=3e-6)
