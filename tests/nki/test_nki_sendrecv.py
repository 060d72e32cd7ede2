"""nisa.sendrecv between the two cores of an LNC=2 launch (the exchange AWS's LNC kernels end with: swap partial
results, add), nki.collectives.rank_id and the ring collectives (collective_permute_implicit(_reduce) with
collective_permute_implicit_current_processing_rank_id addressing the chunk by rank); values against NumPy."""
import numpy as np
import pytest

import nki
import nki.collectives as cc
import nki.isa as nisa
import nki.language as nl
from trnsim.nki import KernelError

RANKS = 4


@nki.jit
def split_k_sum(a, b, engine=nisa.dma_engine.dma):
    """c = a.T @ b with the contraction split over the LNC's two cores: each core multiplies its half of K,
    the cores swap their partial products with sendrecv and each adds the other's; core 0 stores c."""
    k, m = a.shape
    n = b.shape[1]
    pid = nl.program_id(0)
    programs = nl.num_programs()
    half = k // programs
    c = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    a_sb = nl.ndarray((half, m), dtype=a.dtype, buffer=nl.sbuf)
    b_sb = nl.ndarray((half, n), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a_sb, src=a[pid * half:(pid + 1) * half, :])
    nisa.dma_copy(dst=b_sb, src=b[pid * half:(pid + 1) * half, :])
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=a_sb, moving=b_sb)
    mine = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=mine, src=acc)
    theirs = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.sendrecv(src=mine, dst=theirs, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0,
                  dma_engine=engine)
    total = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=total, data1=mine, data2=theirs, op=nl.add)
    if pid == 0:
        nisa.dma_copy(dst=c, src=total)
    return c


@pytest.fixture
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def test_the_lnc_cores_swap_partial_products(trn2, rng):
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 256)).astype(np.float32)
    got = split_k_sum[2](a, b)
    np.testing.assert_allclose(got, a.T @ b, rtol=2e-5, atol=2e-4)
    assert split_k_sum.last_result.stats["instructions"]["sendrecv"] == 2
    assert "sendrecv dst=" in split_k_sum.last_program and "send_to_rank=1" in split_k_sum.last_program


def test_gpsimd_dma_gives_the_same_values_and_its_own_time(trn2, rng):
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 512)).astype(np.float32)
    by_dma = split_k_sum[2](a, b)
    dma_ns = split_k_sum.last_latency_ns
    by_gpsimd = split_k_sum[2](a, b, nisa.dma_engine.gpsimd_dma)
    np.testing.assert_array_equal(by_gpsimd, by_dma)
    assert "dma_engine=gpsimd_dma" in split_k_sum.last_program and "engine=gpsimd" in split_k_sum.last_program
    assert split_k_sum.last_latency_ns != dma_ns
    # Timing-only gives the same time as with values.
    with_values = split_k_sum.last_latency_ns
    split_k_sum.values = False
    try:
        split_k_sum[2](a, b, nisa.dma_engine.gpsimd_dma)
    finally:
        split_k_sum.values = True
    assert split_k_sum.last_latency_ns == with_values


def test_sendrecv_without_the_peer_is_an_error_at_the_users_line(trn2, rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 128)).astype(np.float32)
    with pytest.raises(KernelError, match=r"test_nki_sendrecv.py:\d+.*rank 1 is not one of the 1 ranks"):
        split_k_sum(a, b)


def test_sendrecv_checks_its_arguments(trn2):
    @nki.jit
    def bad(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.sendrecv(src=t, dst=t, send_to_rank=nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf),
                      recv_from_rank=0)
        return x
    with pytest.raises(KernelError, match="send_to_rank: an int rank"):
        bad(np.zeros((8, 8), np.float32))


@nki.jit
def whoami(x):
    out = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.shared_hbm)
    res = nl.ndarray((1, 2), dtype=nl.int32, buffer=nl.sbuf)
    nisa.register_store(res[0:1, 0:1], cc.rank_id())
    pairs = cc.ReplicaGroup([[0, 1], [2, 3]])
    nisa.register_store(res[0:1, 1:2], cc.collective_permute_implicit_current_processing_rank_id(1, pairs))
    nisa.dma_copy(dst=out, src=res)
    return out


def test_rank_id_is_each_ranks_own(rng):
    results = whoami.run_ranks([(np.zeros((1, 1), np.float32),) for _ in range(RANKS)])
    for rank, out in enumerate(results):
        assert out.tolist() == [[rank, rank ^ 1]]


@nki.jit
def ring_all_gather(x):
    """All-gather around the ring of every rank: at step i this rank holds the chunk of the rank i steps upstream
    (collective_permute_implicit_current_processing_rank_id), written to its place in out by a register offset."""
    p, d = x.shape
    out = nl.ndarray((RANKS * p, d), dtype=x.dtype, buffer=nl.shared_hbm)
    ring = cc.ReplicaGroup([list(range(RANKS))])
    chunks = [nl.ndarray((p, d), dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(RANKS)]
    nisa.dma_copy(dst=chunks[0], src=x)
    for step in range(RANKS):
        owner = cc.collective_permute_implicit_current_processing_rank_id(step, ring)
        nisa.dma_copy(dst=out.ap([[d, p], [1, d]], offset=0, scalar_offset=owner * p), src=chunks[step])
        if step + 1 < RANKS:
            cc.collective_permute_implicit([[chunks[step]]], [[chunks[step + 1]]], ring)
    return out


def test_a_ring_all_gather_places_each_chunk_by_its_rank(rng):
    xs = [rng.standard_normal((32, 64)).astype(np.float32) for _ in range(RANKS)]
    results = ring_all_gather.run_ranks([(x,) for x in xs])
    for out in results:
        np.testing.assert_array_equal(out, np.concatenate(xs))
    assert ring_all_gather.last_program.count("collective_permute") == RANKS - 1
    assert "rank_id dst=" in ring_all_gather.last_program
    with_values = ring_all_gather.last_latency_ns
    assert ring_all_gather.run_ranks([(x,) for x in xs], timing_only=True) is None
    assert ring_all_gather.last_latency_ns == with_values


@nki.jit
def ring_reduce(x, y):
    """One reducing ring step: each rank receives op(x, y) of its predecessor, on two channels (pairs and all)."""
    out0 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    out1 = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ring = cc.ReplicaGroup([[0, 1, 2, 3]])
    cc.collective_permute_implicit_reduce([[x], [y]], [[y], [x]], [[out0], [out1]], ring, nl.maximum,
                                          channel_ids=[0, 1])
    return out0, out1


def test_a_reducing_ring_step_sends_the_reduction(rng):
    xs = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(RANKS)]
    ys = [rng.standard_normal((64, 32)).astype(np.float32) for _ in range(RANKS)]
    results = ring_reduce.run_ranks([(x, y) for x, y in zip(xs, ys)])
    for rank, (out0, out1) in enumerate(results):
        before = (rank - 1) % RANKS
        np.testing.assert_array_equal(out0, np.maximum(xs[before], ys[before]))
        np.testing.assert_array_equal(out1, np.maximum(ys[before], xs[before]))


def test_the_implicit_forms_check_their_channels():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        cc.collective_permute_implicit([[x, x]], [[out, out]], cc.ReplicaGroup([[0, 1]]))
        return out
    with pytest.raises(KernelError, match="exactly one tensor"):
        bad.run_ranks([(np.zeros((8, 8), np.float32),)] * 2)


def test_simulate_takes_the_lnc_as_nki_librarys_harness_does(trn2, rng):
    """``nki.cpu_simulate(kernel)[lnc](**inputs)``: the call AWS's kernel library makes in simulation mode."""
    a = rng.standard_normal((256, 128)).astype(np.float32)
    b = rng.standard_normal((256, 64)).astype(np.float32)
    got = nki.cpu_simulate(split_k_sum)[2](a=a, b=b)
    np.testing.assert_allclose(got, a.T @ b, rtol=2e-5, atol=2e-4)
    assert len(split_k_sum.last_programs) == 2


    @nki.jit
    def doubled(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.multiply(nl.load(x), 2.0))
        return out
    np.testing.assert_array_equal(nki.simulate(doubled)[1](x=b[:128]), 2 * b[:128])   # [1]: a plain call


def test_an_lnc_sendrecv_kernel_is_one_op_on_the_device():
    import torch
    import trnsim
    if trnsim._C.device_config_leaves().get("chip.default_logical_core_size") != "2":
        pytest.skip("the device's config has no LNC=2")
    a, b = torch.randn(256, 128), torch.randn(256, 64)
    seen = len(trnsim.op_log())
    out = split_k_sum[2](a.to("neuron"), b.to("neuron"))
    torch.testing.assert_close(out.cpu(), a.T @ b, rtol=2e-5, atol=2e-4)
    assert [r["op"] for r in trnsim.op_log()[seen:]].count("nki.split_k_sum") == 1
