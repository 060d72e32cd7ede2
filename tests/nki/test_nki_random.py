"""nl.dropout / nl.rand / nl.random_seed on the engines' PRNGs: statistics right, and the same
program gives the same numbers bit for bit (the simulator's PRNG is deterministic)."""
import numpy as np
import pytest

import nki
import nki.language as nl


@nki.jit
def dropout_and_uniform(a):
    dropped = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    uniform = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(dropped, nl.dropout(nl.load(a), 0.25))
    nl.store(uniform, nl.rand(a.shape))
    return dropped, uniform


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_dropout_and_rand(monkeypatch, target):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    a = np.full((128, 512), 3.0, np.float32)
    dropped, uniform = dropout_and_uniform(a)
    kept = dropped != 0
    assert np.all(dropped[kept] == 3.0)          # not rescaled
    assert abs((~kept).mean() - 0.25) < 0.01     # 65536 draws: 4 sigma is 0.7 %
    assert uniform.min() >= 0 and uniform.max() < 1
    assert abs(uniform.mean() - 0.5) < 0.01
    again_dropped, again_uniform = dropout_and_uniform(a)
    assert np.array_equal(again_dropped, dropped) and np.array_equal(again_uniform, uniform)


@nki.jit
def seeded(seed):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.random_seed(nl.load(seed))
    nl.store(out, nl.rand((128, 64)))
    return out


def test_random_seed_changes_the_stream():
    one = seeded(np.array([[1]], np.uint32))
    two = seeded(np.array([[2]], np.uint32))
    assert not np.array_equal(one, two)
    assert np.array_equal(one, seeded(np.array([[1]], np.uint32)))
