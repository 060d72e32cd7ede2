"""SPMD grids as the NKI docs place them (issue 37 item 3): a launch's instances split into contiguous shares over the
logical core's physical cores (trn2: LNC = 2), each core's instances one program, all cores one execution with one
launch cost; on trn1 (LNC = 1) every instance is in one core's program."""
import re

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def scale_rows(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
    nisa.activation(dst=t, op=nl.exp, data=t)
    nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=t)
    return out


def _dma_lines(program):
    return len(re.findall(r"^dma_copy ", program, re.M))


@pytest.mark.parametrize("target, cores", [("trn2", 2), ("trn1", 1)])
def test_grid_instances_share_the_cores_programs(rng, monkeypatch, target, cores):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", target)
    x = rng.standard_normal((4 * 128, 512)).astype(np.float32)
    np.testing.assert_allclose(scale_rows[4](x), np.exp(x), rtol=1e-5)
    programs = scale_rows.last_programs
    assert len(programs) == cores
    # Each core's program holds its share of the instances: two DMAs per instance.
    assert [_dma_lines(p) for p in programs] == [2 * 4 // cores] * cores


def test_a_grid_costs_one_launch_and_overlaps_its_instances(rng, monkeypatch):
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    x = rng.standard_normal((4 * 128, 512)).astype(np.float32)
    scale_rows[1](x[:128].copy())
    one_ns, one = scale_rows.last_latency_ns, scale_rows.last_result
    scale_rows[4](x)
    four_ns = scale_rows.last_latency_ns
    launch_ns = one.launch_ns
    # Four instances in one program: one launch, and the body shorter than four bodies (loads overlap compute).
    assert four_ns - launch_ns < 4 * (one_ns - launch_ns)
    assert four_ns > one_ns
