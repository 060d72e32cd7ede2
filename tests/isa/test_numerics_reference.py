"""trnsim's fp32 -> dtype encoders (isa/numerics) against real implementations: ml_dtypes and torch.

The C++ probe (tests/isa/numerics_probe.cpp) prints, per input, the encoded bits with fp8 saturation on and off.
ml_dtypes/torch casts do not saturate (overflow -> inf, or NaN where the format has no inf), so they are compared
with the non-saturating column, and the saturating column must equal their result clamped to the finite range.
"""
import subprocess
import zlib

import ml_dtypes
import numpy as np
import pytest
import torch

from conftest import build_dir

# Overflowing casts (to float16, float32, the fp8 types) are the point of several inputs.
pytestmark = pytest.mark.filterwarnings("ignore:.*encountered in cast:RuntimeWarning")

RANDOM_COUNT = 50_000
F32_MAX = np.finfo(np.float32).max

# trnsim dtype name -> (ml_dtypes type, bits of one element).
ML_DTYPES = {
    "fp8_e4m3": (ml_dtypes.float8_e4m3, 8),
    "fp8_e4m3fn": (ml_dtypes.float8_e4m3fn, 8),
    "fp8_e5m2": (ml_dtypes.float8_e5m2, 8),
    "fp8_e3m4": (ml_dtypes.float8_e3m4, 8),
    "fp8_e8m0": (ml_dtypes.float8_e8m0fnu, 8),
    "mxfp8_e4m3": (ml_dtypes.float8_e4m3fn, 8),
    "mxfp8_e5m2": (ml_dtypes.float8_e5m2, 8),
    "mxfp4_e2m1": (ml_dtypes.float4_e2m1fn, 4),
    "bf16": (ml_dtypes.bfloat16, 16),
}
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def probe_path():
    path = build_dir() / "bin" / "numerics_probe"
    if not path.exists():
        pytest.fail(f"{path} is missing: build the project first (cmake --build build)")
    return path


def run_probe(dtype_name, values):
    """Returns (saturating, non_saturating) uint64 arrays of the probe's encodings of float32 `values`."""
    lines = "".join(f"{dtype_name} {b:08x}\n" for b in values.view(np.uint32).tolist())
    result = subprocess.run([str(probe_path())], input=lines, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()]
    assert len(rows) == len(values), "probe printed a different number of lines than it was given"
    sat = np.array([int(r[0], 16) for r in rows], dtype=np.uint64)
    ieee = np.array([int(r[1], 16) for r in rows], dtype=np.uint64)
    return sat, ieee


def format_values(ml_type, bits):
    """All finite non-negative values of an ml_dtypes type, sorted."""
    codes = np.arange(2 ** bits, dtype=np.uint8 if bits <= 8 else np.uint16)
    values = codes.view(ml_type).astype(np.float64)
    values = values[np.isfinite(values) & (values >= 0)]
    return np.unique(values)


def inputs_for(dtype_name, seed):
    """~50k random fp32 values (all bit patterns, plus log-uniform in the format's range) and edge values."""
    rng = np.random.default_rng(seed)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, F32_MAX, -F32_MAX,
             np.finfo(np.float32).tiny, np.finfo(np.float32).smallest_subnormal,
             -np.finfo(np.float32).smallest_subnormal,
             1.0, -1.0, 65504.0, 65520.0, 65519.99, 1e-45, 3.0, 1.5, 0.75]
    parts = [np.array(edges, dtype=np.float32),
             rng.integers(0, 2 ** 32, RANDOM_COUNT // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    if dtype_name in ML_DTYPES and ML_DTYPES[dtype_name][1] <= 8:
        ml_type, bits = ML_DTYPES[dtype_name]
        values = format_values(ml_type, bits)
        mids = (values[:-1] + values[1:]) / 2
        finfo = ml_dtypes.finfo(ml_type)
        top = float(finfo.max)
        beyond = [top + (top - values[-2]) / 2, top * 1.5, top * 2]  # overflow ties and beyond
        special = np.concatenate([values, mids, beyond]).astype(np.float32)
        near = np.concatenate([special, np.nextafter(special, np.float32(np.inf)),
                               np.nextafter(special, np.float32(0))])
        parts += [near, -near]
        lo, hi = np.log2(float(values[values > 0][0])) - 3, np.log2(top) + 2
    elif dtype_name in ("bf16", "fp16"):
        # Exact ties between random adjacent codes (and one fp32 ulp either side), subnormals included.
        storage = ml_dtypes.bfloat16 if dtype_name == "bf16" else np.float16
        codes = rng.integers(0, 0x7C00 if dtype_name == "fp16" else 0x7F80, 5000).astype(np.uint16)
        lower = codes.view(storage).astype(np.float64)
        upper = (codes + 1).astype(np.uint16).view(storage).astype(np.float64)
        mids = ((lower + upper) / 2).astype(np.float32)
        near = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))])
        parts += [near, -near]
        lo, hi = -30.0, 20.0
    else:
        lo, hi = -30.0, 20.0
    mags = np.exp2(rng.uniform(lo, hi, RANDOM_COUNT // 2)).astype(np.float32)
    parts.append(np.where(rng.random(mags.size) < 0.5, -mags, mags).astype(np.float32))
    return np.concatenate(parts).astype(np.float32)


def ml_encode(ml_type, bits, values):
    out = values.astype(ml_type)
    if bits == 4:  # ml_dtypes stores a float4 in one byte, the code in the low nibble
        return out.view(np.uint8).astype(np.uint64) & 0xF
    return out.view(np.uint8 if bits == 8 else np.uint16).astype(np.uint64)


def ml_decode(ml_type, bits, codes):
    storage = np.uint8 if bits <= 8 else np.uint16
    return codes.astype(storage).view(ml_type).astype(np.float64)


@pytest.mark.parametrize("dtype_name", sorted(ML_DTYPES))
def test_matches_ml_dtypes(dtype_name):
    ml_type, bits = ML_DTYPES[dtype_name]
    x = inputs_for(dtype_name, seed=zlib.crc32(dtype_name.encode()))
    assert x.size >= RANDOM_COUNT
    sat, ieee = run_probe(dtype_name, x)
    ref = ml_encode(ml_type, bits, x)
    is_nan = np.isnan(x)
    if dtype_name == "fp8_e8m0":
        # ml_dtypes 0.6.0 rounds fp32 subnormals in (2^-127, 2^-126) as if code 0 were a zero (e.g. 1.01 * 2^-127
        # -> 2^-126). E8M0 has no zero: code 0 is 2^-127, so the nearest code is 0 below 1.5 * 2^-127, else 1.
        window = (x > 2.0 ** -127) & (x < 2.0 ** -126)
        assert np.count_nonzero(window) > 10, "the inputs must exercise the corrected window"
        ref = np.where(window, np.where(x.astype(np.float64) >= 1.5 * 2.0 ** -127, 1, 0).astype(np.uint64), ref)

    # Non-saturating column = ml_dtypes, bit for bit. NaN inputs: compare NaN-ness only where the format has one
    # (bf16 NaN payloads differ by implementation); e2m1 has no NaN, trnsim documents NaN -> +0.
    if dtype_name == "mxfp4_e2m1":
        assert np.all(ieee[is_nan] == 0)
        assert np.all(sat[is_nan] == 0)
        check = ~is_nan
    elif dtype_name == "bf16":
        assert np.all(np.isnan(ml_decode(ml_type, bits, ieee[is_nan])))
        check = ~is_nan
    else:
        check = np.ones(x.size, dtype=bool)
    bad = np.nonzero(check & (ieee != ref))[0]
    assert bad.size == 0, [(float(x[i]), hex(int(x.view(np.uint32)[i])), hex(int(ieee[i])), hex(int(ref[i])))
                           for i in bad[:8]]

    # Saturating column = ml_dtypes' result clamped to the finite range (fp8 only; bf16 never saturates).
    if dtype_name == "bf16":
        assert np.all(sat == ieee)
        return
    ref_val = ml_decode(ml_type, bits, ref)
    top = float(ml_dtypes.finfo(ml_type).max)
    overflowed = ~is_nan & (np.isinf(ref_val) | np.isnan(ref_val))
    if dtype_name == "fp8_e8m0":  # unsigned: overflow -> max, non-positive -> the lowest value (code 0)
        clamped_val = np.where(x > 0, top, float(ml_dtypes.finfo(ml_type).smallest_normal))
    else:
        clamped_val = np.copysign(top, x)
    expected_val = np.where(overflowed, clamped_val, ref_val)
    expected = ml_encode(ml_type, bits, expected_val.astype(np.float32))
    expected = np.where(is_nan, ref if dtype_name != "mxfp4_e2m1" else 0, expected)
    bad = np.nonzero(sat != expected)[0]
    assert bad.size == 0, [(float(x[i]), hex(int(sat[i])), hex(int(expected[i]))) for i in bad[:8]]
    assert np.all(np.isfinite(ml_decode(ml_type, bits, sat[~is_nan])))


@pytest.mark.parametrize("dtype_name", sorted(TORCH_DTYPES))
def test_matches_torch(dtype_name):
    x = inputs_for(dtype_name, seed=7)
    sat, ieee = run_probe(dtype_name, x)
    assert np.all(sat == ieee), "bf16/fp16 must ignore the fp8 saturation flag"
    ref = torch.from_numpy(x).to(TORCH_DTYPES[dtype_name]).view(torch.int16).numpy().view(np.uint16).astype(np.uint64)
    is_nan = np.isnan(x)
    ours_f = torch.from_numpy(ieee.astype(np.uint16).view(np.int16)).view(TORCH_DTYPES[dtype_name]).float().numpy()
    assert np.all(np.isnan(ours_f[is_nan]))
    bad = np.nonzero(~is_nan & (ieee != ref))[0]
    assert bad.size == 0, [(float(x[i]), hex(int(ieee[i])), hex(int(ref[i]))) for i in bad[:8]]
    if dtype_name == "fp16":  # numpy's own cast as a second opinion
        np_ref = x.astype(np.float16).view(np.uint16).astype(np.uint64)
        assert np.all((ieee == np_ref) | is_nan)


INT_RANGES = [("int8", -128, 127), ("int16", -32768, 32767), ("int32", -2**31, 2**31 - 1),
              ("uint8", 0, 255), ("uint16", 0, 65535), ("uint32", 0, 2**32 - 1)]


@pytest.mark.parametrize("dtype_name,lo,hi", INT_RANGES)
def test_integers_round_half_even_and_saturate(dtype_name, lo, hi):
    rng = np.random.default_rng(11)
    ties = (rng.integers(-70000, 70000, 5000) + 0.5).astype(np.float32)
    x = np.concatenate([inputs_for(dtype_name, seed=5)[:20000], ties,
                        np.array([2.5, 3.5, -2.5, -0.5, 0.5, 2**31, -2**31, 2**32, 1e10, -1e10], dtype=np.float32)])
    sat, ieee = run_probe(dtype_name, x)
    assert np.all(sat == ieee)
    expected = np.clip(np.rint(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=np.inf, neginf=-np.inf)), lo, hi)
    width = {"int8": 8, "int16": 16, "int32": 32, "uint8": 8, "uint16": 16, "uint32": 32}[dtype_name]
    expected_bits = expected.astype(np.int64) & ((1 << width) - 1)
    bad = np.nonzero(ieee.astype(np.int64) != expected_bits)[0]
    assert bad.size == 0, [(float(x[i]), int(ieee[i]), int(expected_bits[i])) for i in bad[:8]]
