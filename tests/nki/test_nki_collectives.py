"""nki.collectives (issue 14): a kernel run as ranks (kernel.run_ranks, one physical core each with its own memory)
exchanges values with the ISA's collectives; checked against NumPy, and the time against the system model's."""
import ml_dtypes
import numpy as np
import pytest

import nki
import nki.collectives as cc
import nki.isa as nisa
import nki.language as nl
import trnsim
from trnsim.nki import KernelError

RANKS = 4


@nki.jit
def reduce_and_gather(x):
    summed = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pair_max = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    gathered = nl.ndarray((RANKS * x.shape[0], x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    scattered = nl.ndarray((x.shape[0] // RANKS, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    shifted = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    everyone = cc.ReplicaGroup([list(range(RANKS))])
    cc.all_reduce([x], [summed], everyone, nl.add)
    cc.all_reduce([x], [pair_max], cc.ReplicaGroup.from_partition_op(RANKS, cc.rg_partition_op.mod, 2), nl.maximum)
    cc.all_gather([x], [gathered], everyone, collective_dim=0)
    cc.reduce_scatter([x], [scattered], everyone, nl.add)
    cc.collective_permute([x], [shifted], [(r, (r + 1) % RANKS) for r in range(RANKS)])
    return summed, pair_max, gathered, scattered, shifted


@nki.jit
def reduce_in_sbuf(x):
    """An all-reduce of an SBUF tile, then compute on the result."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tile = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    total = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=tile, src=x)
    cc.all_reduce([tile], [total], cc.ReplicaGroup([[0, 1, 2, 3]]), nl.add)
    nisa.activation(dst=total, op=nl.exp, data=total, scale=0.01)
    nisa.dma_copy(dst=out, src=total)
    return out


def test_collectives_exchange_values_between_ranks(rng):
    xs = [rng.standard_normal((128, 64)).astype(np.float32) for _ in range(RANKS)]
    results = reduce_and_gather.run_ranks([(x,) for x in xs])
    assert len(results) == RANKS
    total = xs[0] + xs[1] + xs[2] + xs[3]   # in rank order, fp32, as the rendezvous reduces
    for rank, (summed, pair_max, gathered, scattered, shifted) in enumerate(results):
        np.testing.assert_array_equal(summed, total)
        # from_partition_op(4, mod, 2) = [[0, 2], [1, 3]]
        np.testing.assert_array_equal(pair_max, np.maximum(xs[rank % 2], xs[rank % 2 + 2]))
        np.testing.assert_array_equal(gathered, np.concatenate(xs))
        np.testing.assert_array_equal(scattered, total[rank * 32:(rank + 1) * 32])
        np.testing.assert_array_equal(shifted, xs[(rank - 1) % RANKS])
    assert "all_reduce" in reduce_and_gather.last_program and "group_size=2" in reduce_and_gather.last_program
    assert reduce_and_gather.last_latency_ns > 0


def test_an_sbuf_all_reduce_feeds_compute(rng):
    xs = [rng.standard_normal((128, 256)).astype(np.float32) for _ in range(RANKS)]
    results = reduce_in_sbuf.run_ranks([(x,) for x in xs])
    expected = np.exp(0.01 * (xs[0] + xs[1] + xs[2] + xs[3]))
    for out in results:
        np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_timing_only_gives_the_same_time(rng):
    xs = [rng.standard_normal((128, 256)).astype(np.float32) for _ in range(RANKS)]
    reduce_in_sbuf.run_ranks([(x,) for x in xs])
    with_values = reduce_in_sbuf.last_latency_ns
    assert reduce_in_sbuf.run_ranks([(x,) for x in xs], timing_only=True) is None
    assert reduce_in_sbuf.last_latency_ns == with_values


def test_run_ranks_on_tasm_and_its_errors(rng):
    program = ("kernel k\ntarget trn2\nhbm x : fp32[128, 64] input\nhbm y : fp32[128, 64] output\n"
               "all_reduce dst=y, src=x, op=add\n")
    xs = [{"x": rng.standard_normal((128, 64)).astype(np.float32)} for _ in range(2)]
    outputs, result = trnsim.run_ranks(program, xs, config="trn2")
    np.testing.assert_array_equal(outputs[0]["y"], xs[0]["x"] + xs[1]["x"])
    np.testing.assert_array_equal(outputs[1]["y"], outputs[0]["y"])
    assert result.latency_ns > 0
    with pytest.raises(ValueError, match="ranks"):
        trnsim.run_ranks(program, [xs[0]] * 9, config="trn2")   # trn2 has 8 physical cores
    bad = program.replace("op=add", "op=bitwise_and")
    with pytest.raises(trnsim.ProgramError, match="collective-op"):
        trnsim.run_ranks(bad, xs, config="trn2")


def test_what_is_missing_is_listed():
    missing = trnsim.nki.missing_api()["nki.collectives"]
    assert "rank_id" not in missing and "all_to_all_v" not in missing and "all_reduce" not in missing
    assert missing == []   # NKI 0.7's nki.collectives, every function
    for name in missing:
        assert not hasattr(cc, name), name


def test_replica_groups_are_checked():
    with pytest.raises(KernelError, match="overlap"):
        cc.ReplicaGroup([[0, 1], [1, 2]])
    assert cc.ReplicaGroup.from_partition_op(8, cc.rg_partition_op.div, 4).rank_lists == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert cc.ReplicaGroup.from_partition_op(8, cc.rg_partition_op.bitwise_and, 0).rank_lists == [list(range(8))]


# Every collective, every reduce op and dtype, on 3 ranks (not a power of two) of a trn2 chip, against NumPy: the
# reduction is in fp32 over the ranks in group order, rounded once to the dtype (isa/instructions.def).
DTYPES = {"fp32": np.float32, "bf16": ml_dtypes.bfloat16, "fp16": np.float16}
COLLECTIVE_RANKS = 3


def _run_collective(line, dtype_name, src_rows, dst_rows, rng):
    program = (f"kernel k\ntarget trn2\nhbm x : {dtype_name}[{src_rows}, 32] input\n"
               f"hbm y : {dtype_name}[{dst_rows}, 32] output\n{line}\n")
    xs = [rng.standard_normal((src_rows, 32)).astype(DTYPES[dtype_name]) for _ in range(COLLECTIVE_RANKS)]
    outputs, result = trnsim.run_ranks(program, [{"x": x} for x in xs], config="trn2")
    assert result.latency_ns > 0
    return xs, [out["y"] for out in outputs]


@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
@pytest.mark.parametrize("op,reduce", [("add", np.add), ("minimum", np.minimum), ("maximum", np.maximum)])
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter"])
def test_every_reduction_and_dtype(collective, op, reduce, dtype_name, rng):
    rows = 6
    dst_rows = rows if collective == "all_reduce" else rows // COLLECTIVE_RANKS
    xs, ys = _run_collective(f"{collective} dst=y, src=x, op={op}", dtype_name, rows, dst_rows, rng)
    total = xs[0].astype(np.float32)
    for x in xs[1:]:
        total = reduce(total, x.astype(np.float32))
    expected = total.astype(DTYPES[dtype_name])
    for rank, y in enumerate(ys):
        assert y.dtype == DTYPES[dtype_name]
        mine = expected if collective == "all_reduce" else expected[rank * dst_rows:(rank + 1) * dst_rows]
        np.testing.assert_array_equal(y.astype(np.float32), mine.astype(np.float32))


@pytest.mark.parametrize("dtype_name", sorted(DTYPES))
def test_every_data_movement_and_dtype(dtype_name, rng):
    n = COLLECTIVE_RANKS
    xs, ys = _run_collective("all_gather dst=y, src=x", dtype_name, 2, 2 * n, rng)
    for y in ys:
        np.testing.assert_array_equal(y, np.concatenate(xs))
    xs, ys = _run_collective("all_to_all dst=y, src=x", dtype_name, 2 * n, 2 * n, rng)
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y, np.concatenate([x[2 * i:2 * i + 2] for x in xs]))
    xs, ys = _run_collective("collective_permute dst=y, src=x, pairs=[[0, 2], [2, 1], [1, 0]]", dtype_name, 4, 4, rng)
    for source, target in [(0, 2), (2, 1), (1, 0)]:
        np.testing.assert_array_equal(ys[target], xs[source])


@nki.jit
def variable_exchange(x, meta):
    """all_to_all_v and all_gather_v of flat buffers by the counts in uint32 metadata (rows 2 written back)."""
    group = cc.ReplicaGroup([list(range(RANKS))])
    slot = 16
    out = nl.ndarray((RANKS * slot,), dtype=x.dtype, buffer=nl.shared_hbm)
    gathered = nl.ndarray((RANKS * slot,), dtype=x.dtype, buffer=nl.shared_hbm)
    m = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray(meta.shape, dtype=meta.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=m, src=meta)
    nisa.dma_copy(dst=g, src=meta)
    cc.all_to_all_v([x], [out], group, m)
    cc.all_gather_v([x], [gathered], group, g)
    return out, gathered, m, g


def test_variable_length_collectives_move_the_counted_elements(rng):
    slot = 16
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(RANKS)]
    counts = rng.integers(0, slot + 1, size=(RANKS, RANKS))
    displs = np.array([[rng.integers(0, 64 - c + 1) for c in row] for row in counts])
    metas = [np.stack([counts[i], displs[i], np.zeros(RANKS, np.int64)]).astype(np.uint32) for i in range(RANKS)]
    results = variable_exchange.run_ranks([(x, m) for x, m in zip(xs, metas)])
    for j, (out, gathered, m, g) in enumerate(results):
        for i in range(RANKS):
            c, d = counts[i, j], displs[i, j]
            np.testing.assert_array_equal(out[i * slot:i * slot + c], xs[i][d:d + c])
            c0, d0 = counts[i, 0], displs[i, 0]   # all_gather_v: the first column's chunk to everyone
            np.testing.assert_array_equal(gathered[i * slot:i * slot + c0], xs[i][d0:d0 + c0])
        np.testing.assert_array_equal(m[2], counts[:, j])   # received counts, per sender
        np.testing.assert_array_equal(g[2], counts[:, 0])
        np.testing.assert_array_equal(m[:2], metas[j][:2])
    with_values = variable_exchange.last_latency_ns
    assert variable_exchange.run_ranks([(x, m) for x, m in zip(xs, metas)], timing_only=True) is None
    assert variable_exchange.last_latency_ns == with_values


def test_a_count_that_does_not_fit_is_an_error(rng):
    xs = [np.zeros(64, np.float32) for _ in range(RANKS)]
    metas = [np.array([[17] * RANKS, [0] * RANKS, [0] * RANKS], np.uint32) for _ in range(RANKS)]
    with pytest.raises(KernelError, match=r"do not fit its dst .*\[collective-shape\]"):
        variable_exchange.run_ranks([(x, m) for x, m in zip(xs, metas)])
