"""Tensor views (rearrange, flatten_dims, reshape_dim) and kernel-placed tiles (address=)."""
import numpy as np
import pytest

import nki
import nki.language as nl
import trnsim.nki


@nki.jit
def transpose_inner(a):
    out = nl.ndarray((a.shape[0], a.shape[1] * a.shape[2]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a.rearrange("p a b -> p b a"))        # the DMA reads the permuted HBM view
    nl.store(out, nl.copy(t.flatten_dims(1, 2)))
    return out


@nki.jit
def split_and_merge(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)                                     # [128, 64]
    u = t.reshape_dim(1, (8, 8))                       # [128, 8, 8]
    nl.store(out, nl.copy(u.rearrange("p a b -> p (a b)")))
    return out


def test_rearrange_flatten_reshape(rng):
    a = rng.standard_normal((128, 8, 4)).astype(np.float32)
    np.testing.assert_array_equal(transpose_inner(a), a.transpose(0, 2, 1).reshape(128, 32))
    b = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(split_and_merge(b), b)


@nki.jit
def placed(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf, address=(0, 8192))
    t[...] = nl.load(a)
    nl.store(out, nl.exp(t))
    return out


def test_address_places_the_tile(rng):
    a = rng.standard_normal((128, 256)).astype(np.float32)
    np.testing.assert_allclose(placed(a), np.exp(a), rtol=1e-5)
    assert "@ 0:8192" in placed.last_program


@nki.jit
def clashing(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf, address=(0, 0))
    u = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf, address=(0, 512))   # CLASH
    t[...] = nl.load(a)
    u[...] = nl.load(a)
    nl.store(out, nl.add(t, u))
    return out


def test_overlapping_addresses_are_an_error_at_the_line():
    with open(__file__) as f:
        line = next(i for i, text in enumerate(f, 1) if "# CLASH" in text)
    with pytest.raises(trnsim.nki.KernelError, match=rf"test_nki_views.py:{line}: .*\[sbuf-address\]"):
        clashing(np.zeros((128, 256), np.float32))
