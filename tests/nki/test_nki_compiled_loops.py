"""Compiled loops (NKI 0.6+): registers from tensors drive nl.fori_loop / nl.while_loop /
nl.dynamic_range, which run on the sequencers (the ISA's while_begin ... while_end): the body is
traced once, its trip count is known only when the kernel runs."""
import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim.nki


@nki.jit
def add_n_times(x, n):
    """out = x + n, one add per iteration, n read from a tensor at run time."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.load(x)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    upper = nisa.register_alloc()
    nisa.register_load(upper, n_sb)

    def body(i):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=1.0)
    nl.fori_loop(0, upper, body)
    nl.store(out, acc)
    return out


@nki.jit
def count_down(x, n):
    """A while loop on a counter kept in SBUF: out = x * 2^n."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.load(x)
    counter = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=counter, src=n)
    cond = nisa.register_alloc()
    nisa.register_load(cond, counter)

    def body(r):
        nisa.tensor_scalar(dst=acc, data=acc, op0=nl.multiply, operand0=2.0)
        nisa.tensor_scalar(dst=counter, data=counter, op0=nl.subtract, operand0=1, engine=nisa.engine.gpsimd)
        nisa.register_load(r, counter)
        return r
    nl.while_loop(cond, body)
    nl.store(out, acc)
    return out


@nki.jit
def dynamic_range_kernel(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    tile = nl.load(x)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, n_sb)
    for _ in nl.dynamic_range(reg):
        nisa.tensor_tensor(dst=acc, data1=acc, data2=tile, op=nl.add)
    nl.store(out, acc)
    return out


@pytest.mark.parametrize("n", [0, 1, 5])
def test_trip_counts_from_tensors(rng, n):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    count = np.array([[n]], np.int32)
    np.testing.assert_allclose(add_n_times(x, count), x + n, rtol=1e-6)
    np.testing.assert_allclose(count_down(x, count), x * 2.0 ** n, rtol=1e-6)
    np.testing.assert_allclose(dynamic_range_kernel(x, count), x * n, rtol=1e-5, atol=1e-6)
    # One trace for every n: the loop is compiled, not unrolled.
    assert add_n_times.trace_count == 1 and "while_begin" in add_n_times.last_program


def test_more_iterations_take_longer(rng):
    x = rng.standard_normal((128, 32)).astype(np.float32)
    times = []
    for n in (1, 4, 16):
        add_n_times(x, np.array([[n]], np.int32))
        times.append(add_n_times.last_latency_ns)
    assert times[0] < times[1] < times[2]
    # Timing only needs the trip count too: it reads the inputs and gives the same time.
    add_n_times.run((x, np.array([[16]], np.int32)), {}, timing_only=True)
    assert add_n_times.last_latency_ns == times[2]


def test_static_bounds_still_unroll(rng):
    @nki.jit
    def unrolled(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.load(x)
        nl.fori_loop(0, 3, lambda i: nisa.tensor_scalar(dst=acc, data=acc, op0=nl.add, operand0=float(i)))
        nl.store(out, acc)
        return out
    x = rng.standard_normal((128, 8)).astype(np.float32)
    np.testing.assert_allclose(unrolled(x), x + 3.0, rtol=1e-6)
    assert "while_begin" not in unrolled.last_program


def test_a_register_in_python_control_flow_is_an_error():
    @nki.jit
    def misuse(x):
        r = nisa.register_alloc(3)
        if r:
            pass
        return x
    with pytest.raises(trnsim.nki.KernelError, match="not known while tracing"):
        misuse(np.zeros((128, 4), np.float32))


@nki.jit
def branch_on_flag(flag, data):
    out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    flag_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=flag_sb, src=flag)
    condition = nisa.scalar_load(flag_sb) > 0
    result = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=result, src=data)

    def then_branch():
        nisa.tensor_scalar(result, result, op0=nl.add, operand0=10.0)

    def else_branch():
        nisa.tensor_scalar(result, result, op0=nl.multiply, operand0=-1.0)
    nl.if_else(condition, then_branch, else_branch)
    nl.store(out, result)
    return out


@pytest.mark.parametrize("flag", [-3, 0, 1, 7])
def test_if_else_on_a_loaded_flag(rng, flag):
    data = rng.standard_normal((128, 16)).astype(np.float32)
    got = branch_on_flag(np.array([[flag]], np.int32), data)
    np.testing.assert_allclose(got, data + 10.0 if flag > 0 else -data, rtol=1e-6)
    assert branch_on_flag.trace_count == 1


def test_if_else_with_a_python_condition_is_resolved_while_tracing(rng):
    @nki.jit
    def static_branch(data, flag):
        out = nl.ndarray(data.shape, dtype=data.dtype, buffer=nl.shared_hbm)
        t = nl.load(data)
        nl.if_else(flag, lambda: nisa.tensor_scalar(t, t, op0=nl.add, operand0=1.0))
        nl.store(out, t)
        return out
    data = rng.standard_normal((128, 4)).astype(np.float32)
    np.testing.assert_allclose(static_branch(data, True), data + 1, rtol=1e-6)
    np.testing.assert_allclose(static_branch(data, False), data, rtol=1e-6)
    assert "while_begin" not in static_branch.last_program


@nki.jit
def transposes_in_a_compiled_loop(x, n):
    """nki-library's bwmm_shard_on_I: a compiled loop's body transposes eight [128, 128] blocks through a new PSUM
    tile each (more tiles than PSUM has banks), written before they are read. Each is a temporary of one run, so the
    body's tiles share banks; the accumulator, read before the body writes it, stays live across runs."""
    out = nl.ndarray((128, 128), dtype=x.dtype, buffer=nl.shared_hbm)
    blocks = nl.ndarray((128, 8, 128), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=blocks, src=x.reshape((8, 128, 128)).permute((1, 0, 2)))
    acc = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n)
    reg = nisa.register_alloc()
    nisa.register_load(reg, n_sb)
    identity = nl.shared_identity_matrix(128, dtype=nl.float32)
    for _ in nl.dynamic_range(reg):
        for b in range(16):
            t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
            if b % 2:
                nisa.nc_transpose(dst=t[:, 0:128], data=blocks[:, b % 8, :])
            else:   # as bwmm writes it: a matmul against the identity, accumulate left to inference
                nisa.nc_matmul(dst=t[:, 0:128], stationary=blocks[:, b % 8, :], moving=identity)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=t[:, 0:128], op=nl.add)
    nisa.dma_copy(dst=out, src=acc)
    return out


@pytest.mark.parametrize("n", [0, 2])
def test_a_compiled_loops_temporaries_share_memory(rng, n):
    x = rng.standard_normal((8 * 128, 128)).astype(np.float32)
    want = n * 2 * sum(x[128 * b:128 * (b + 1)].T for b in range(8))
    np.testing.assert_allclose(transposes_in_a_compiled_loop(x, np.array([[n]], np.int32)), want, rtol=1e-5,
                               atol=1e-4)
