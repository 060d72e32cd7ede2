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


@nki.jit
def halves_as_uint16(a):
    """fp32 [128, 64] seen as uint16 [128, 128]: each word's two halves, low first (little endian)."""
    out = nl.ndarray((a.shape[0], 2 * a.shape[1]), dtype=nl.uint16, buffer=nl.shared_hbm)
    t = nl.load(a)
    halves = nl.ndarray((a.shape[0], 2 * a.shape[1]), dtype=nl.uint16, buffer=nl.sbuf)
    nki.isa.tensor_copy(dst=halves, src=t.view(nl.uint16))
    nl.store(out, halves)
    return out


@nki.jit
def words_from_bytes(a):
    """uint8 [128, 64] seen as int32 [128, 16], and a column slice of it seen back as uint8."""
    out = nl.ndarray((a.shape[0], 16), dtype=nl.int32, buffer=nl.shared_hbm)
    back = nl.ndarray((a.shape[0], 8), dtype=nl.uint8, buffer=nl.shared_hbm)
    t = nl.load(a)
    words = nl.ndarray((a.shape[0], 16), dtype=nl.int32, buffer=nl.sbuf)
    nki.isa.tensor_copy(dst=words, src=t.view(nl.int32))
    nl.store(out, words)
    part = nl.ndarray((a.shape[0], 8), dtype=nl.uint8, buffer=nl.sbuf)
    nki.isa.tensor_copy(dst=part, src=words[:, 2:4].view(nl.uint8))
    nl.store(back, part)
    return out, back


def test_view_dtype_between_sizes_regroups_the_bytes(rng):
    a = rng.standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(halves_as_uint16(a), a.view(np.uint16))
    b = rng.integers(0, 256, (128, 64), dtype=np.uint8)
    words, back = words_from_bytes(b)
    np.testing.assert_array_equal(words, b.view(np.int32))
    np.testing.assert_array_equal(back, b[:, 8:16])


def test_view_dtype_of_a_strided_last_dim_is_an_error(rng):
    @nki.jit
    def strided(a):
        out = nl.ndarray((128, 32), dtype=nl.uint16, buffer=nl.shared_hbm)
        t = nl.load(a)
        h = nl.ndarray((128, 32), dtype=nl.uint16, buffer=nl.sbuf)
        nki.isa.tensor_copy(dst=h, src=t[:, 0:32:2].view(nl.uint16))
        nl.store(out, h)
        return out
    with pytest.raises(trnsim.nki.KernelError, match="last dim is not contiguous"):
        strided(rng.standard_normal((128, 64)).astype(np.float32))
