"""nl.floor / nl.ceil with an integer dtype floor and ceil exactly, negatives too (issue 37 item 7): nki-samples'
resize_nearest takes ``nl.floor(iota / out_w, dtype=nl.int32)``; the quotient of integers is NumPy's true division
(fp32 here), not an int32 quotient rounded to nearest before the floor (which made 58.53 -> 59 and gathered row
610 of a 600-row image). And an out-of-bounds slice names its rule."""
import inspect
import os

import numpy as np
import pytest

from neuronxcc import nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl
import trnsim.nki


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


@nki.jit
def floor_ceil_of_quotients(like, width, start):
    """iota start..start+127 over the partitions divided by ``width``: the quotient, its floor and ceil as int32."""
    down = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    up = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    quotient = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    pos = nisa.iota(i_p + start, dtype=nl.int32)
    q = pos / width
    nl.store(quotient, value=q)
    nl.store(down, value=nl.floor(q, dtype=nl.int32))
    nl.store(up, value=nl.ceil(pos / width, dtype=nl.int32))
    return down, up, quotient


@pytest.mark.parametrize("width, start", [(12, 0), (7, 0), (600, 599 * 600 - 64), (5, -300), (3, -64)])
def test_floor_and_ceil_of_an_integer_quotient_match_numpy(width, start):
    down, up, quotient = floor_ceil_of_quotients(np.zeros(1, np.float32), width, start)
    pos = np.arange(128) + start
    assert quotient.dtype == np.float32
    np.testing.assert_array_equal(down[:, 0], np.floor_divide(pos, width))
    np.testing.assert_array_equal(up[:, 0], -np.floor_divide(-pos, width))


@nki.jit
def resize_rows(data, out_rows):
    """resize_nearest's index computation: source row = floor(floor(pos / out_w) * scale) of a flattened position."""
    in_h, in_w = data.shape
    out_h, out_w = out_rows.shape
    rows = nl.ndarray((128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    pos = nisa.iota(i_p + (out_h * out_w - 128), dtype=nl.int32)
    out_h_idx = nl.floor(pos / out_w, dtype=nl.int32)
    src = nl.floor(nl.multiply(out_h_idx, in_h / out_h, dtype=nl.float32), dtype=nl.int32)
    nl.store(rows, value=src)
    return rows


def test_resize_nearest_source_rows_stay_inside_the_image():
    in_h, in_w, out_h, out_w = 600, 20, 613, 7
    rows = resize_rows(np.zeros((in_h, in_w), np.float32), np.zeros((out_h, out_w), np.float32))
    pos = np.arange(out_h * out_w - 128, out_h * out_w)
    want = np.floor((pos // out_w).astype(np.float32) * np.float32(in_h / out_h)).astype(np.int32)
    np.testing.assert_array_equal(rows[:, 0], want)
    assert rows.max() < in_h


@nki.jit
def past_the_end(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x[160:288, :]))  # overhang
    return out


@nki.jit
def index_past_the_end(x):
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x[x.shape[0]:x.shape[0] + 1, :]))  # start
    return out


@pytest.mark.parametrize("kernel, marker", [(past_the_end, "overhang"), (index_past_the_end, "start")])
def test_an_out_of_bounds_slice_names_its_line_and_rule(kernel, marker):
    with pytest.raises(trnsim.nki.KernelError) as info:
        kernel(np.zeros((200, 8), np.float32))
    lines, first = inspect.getsourcelines(kernel.__wrapped__)
    line = first + next(i for i, text in enumerate(lines) if f"# {marker}" in text)
    message = str(info.value)
    assert f"{os.path.basename(__file__)}:{line}:" in message, message
    assert message.endswith("[index-bounds]"), message
