"""NKI's scheduling API recorded on the trace for the list scheduler (issue 37; NKI guide "How to Use the NKI
Scheduling APIs", see /work/shared/reference/nki-api.md section 5): ``nl.no_reorder()`` blocks as instruction-index
ranges (``trace.keep_order``), ``name=`` on nisa calls (``trace.instruction_names``) and ``kernel.with_schedule``
pairs as (later, earlier) index pairs (``trace.schedule_edges``). Indices are positions in the traced order."""
import inspect
import os

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
import trnsim.nki
from conftest import source_line


@pytest.fixture(autouse=True)
def trn2(monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")


def line_of(fn, marker):
    return "%s:%d" % source_line(fn, marker)


def opcode(trace, index):
    return trace.body[index].split()[0]


def traced(kernel, *args):
    """The Trace of kernel(*args)'s last run."""
    kernel(*args)
    (entry,) = kernel._cache.values()
    return entry.trace


# Program order, so that trace.body stays in the traced order the indices refer to.
@nki.jit(schedule="program-order")
def plus_then_recip(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, name="load")
    nisa.tensor_scalar(dst=a, data=t, op0=nl.add, operand0=1.0, name="plus1")
    nisa.activation(dst=r, op=nl.exp, data=t, name="recip")
    with nl.no_reorder():
        nisa.tensor_tensor(dst=a, data1=a, data2=r, op=nl.add, name="sum")
        for _ in range(2):   # a static loop: unrolled, allowed inside
            nisa.tensor_scalar(dst=a, data=a, op0=nl.multiply, operand0=0.5)
    nisa.dma_copy(dst=out, src=a, name="store")
    return out


def expected(x):
    return ((x + 1.0) + np.exp(x)) * 0.25


def test_names_record_their_instruction_index(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    trace = traced(plus_then_recip, x)
    names = trace.instruction_names
    assert set(names) == {"load", "plus1", "recip", "sum", "store"}
    assert [opcode(trace, names[n]) for n in ("load", "plus1", "recip", "sum", "store")] == \
        ["dma_copy", "tensor_scalar", "activation", "tensor_tensor", "dma_copy"]
    assert names["load"] < names["plus1"] < names["recip"] < names["sum"] < names["store"]
    assert trace.schedule_edges == []


def test_no_reorder_records_the_block_range(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    trace = traced(plus_then_recip, x)
    (begin, end), = trace.keep_order
    assert begin == trace.instruction_names["sum"]
    assert end == trace.instruction_names["store"]
    assert [opcode(trace, i) for i in range(begin, end)] == ["tensor_tensor", "tensor_scalar", "tensor_scalar"]


def test_with_schedule_records_edges_later_first(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    scheduled = plus_then_recip.with_schedule([("plus1", "recip"), ("store", ["sum", "load"])])
    np.testing.assert_allclose(scheduled(x), expected(x), rtol=1e-5)
    (entry,) = scheduled._cache.values()
    names = entry.trace.instruction_names
    assert entry.trace.schedule_edges == [(names["plus1"], names["recip"]), (names["store"], names["sum"]),
                                          (names["store"], names["load"])]
    # The kernel it came from has no edges.
    assert traced(plus_then_recip, x).schedule_edges == []


def test_an_unknown_name_is_an_error_naming_it(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    with pytest.raises(trnsim.nki.KernelError, match=r"'plus2'.*\[schedule-name\]"):
        plus_then_recip.with_schedule([("plus2", "recip")])(x)
    with pytest.raises(trnsim.nki.KernelError, match=r"'nowhere'.*\[schedule-name\]"):
        plus_then_recip.with_schedule([("plus1", ["recip", "nowhere"])])(x)


@pytest.mark.parametrize("pairs", ["plus1", [("plus1",)], [("plus1", 3)], [(1, "recip")], [("a", [])]])
def test_malformed_pairs_are_refused(pairs):
    with pytest.raises(trnsim.nki.KernelError, match="with_schedule"):
        plus_then_recip.with_schedule(pairs)


@nki.jit
def named_twice(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x, name="copy")  # first
    nisa.dma_copy(dst=out, src=t, name="copy")  # second
    return out


def test_a_name_used_twice_names_both_lines():
    with pytest.raises(trnsim.nki.KernelError) as info:
        named_twice(np.zeros((4, 4), np.float32))
    message = str(info.value)
    assert line_of(named_twice.__wrapped__, "first") in message and line_of(named_twice.__wrapped__, "second") \
        in message, message
    assert "[instruction-name]" in message


@nki.jit
def dynamic_loop_inside(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    count = nisa.register_alloc(n)
    with nl.no_reorder():
        for _ in nl.dynamic_range(count):  # dynamic
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_a_dynamic_loop_inside_no_reorder_is_refused():
    with pytest.raises(trnsim.nki.KernelError) as info:
        dynamic_loop_inside(np.zeros((4, 4), np.float32), 3)
    assert line_of(dynamic_loop_inside.__wrapped__, "dynamic") in str(info.value)
    assert "[no-reorder-dynamic-loop]" in str(info.value)


@nki.jit(schedule="program-order")
def nested_blocks(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    with nl.no_reorder():
        nisa.dma_copy(dst=t, src=x)
        with nl.no_reorder():
            nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0)
    with nl.no_reorder():
        pass   # empty: nothing recorded
    nisa.dma_copy(dst=out, src=t)
    return out


def test_nested_blocks_each_record_their_range():
    x = np.zeros((4, 4), np.float32)
    trace = traced(nested_blocks, x)
    assert trace.keep_order == [(1, 2), (0, 2)]
    np.testing.assert_array_equal(nested_blocks(x), x + 1)


@nki.jit(schedule="program-order")
def register_calls_named(x, flag):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    cell = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    col = nl.ndarray((x.shape[0], 1), dtype=x.dtype, buffer=nl.sbuf)
    r = nisa.register_alloc(3, name="init")
    nisa.scalar_store(cell, r, name="store_r")
    loaded = nisa.scalar_load(cell, name="load_r")
    nisa.dma_copy(dst=t, src=x)
    nisa.tensor_reduce(dst=col, op=nl.maximum, data=t[:, 0:1], axis=1, name="reduce_one")
    nisa.dma_copy(dst=out, src=t)
    del loaded
    return out


def test_names_on_register_calls_and_one_element_reductions():
    trace = traced(register_calls_named, np.ones((4, 4), np.float32), np.zeros(1, np.int32))
    names = trace.instruction_names
    assert {n: opcode(trace, i) for n, i in names.items()} == {
        "init": "register_move", "store_r": "register_store", "load_r": "register_load", "reduce_one": "tensor_copy"}
