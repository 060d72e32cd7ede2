"""Stand-in for AWS's ``neuron_dtypes`` (not on PyPI) for nki-library's test harness run here: NumPy dtypes from
ml_dtypes and the few helpers its tests call (static_cast, sizeinbytes, is_float_type, finfo). The MX x4 packed
host types are placeholders (named objects): tests that build packed MX host arrays cannot run with it."""
import ml_dtypes
import numpy as np

bfloat16 = ml_dtypes.bfloat16
float8_e4m3fn = ml_dtypes.float8_e4m3fn
float8_e4m3 = ml_dtypes.float8_e4m3
float8_e5m2 = ml_dtypes.float8_e5m2
float4_e2m1fn = ml_dtypes.float4_e2m1fn
finfo = ml_dtypes.finfo
_FLOATS = {np.dtype(t) for t in (bfloat16, float8_e4m3fn, float8_e4m3, float8_e5m2, float4_e2m1fn)}


def static_cast(array, dtype):
    return np.asarray(array).astype(np.dtype(dtype))


def sizeinbytes(dtype):
    return np.dtype(dtype).itemsize


def is_float_type(dtype):
    dtype = np.dtype(dtype)
    return np.issubdtype(dtype, np.floating) or dtype in _FLOATS


class _PackedX4:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


float8_e4m3fn_x4 = _PackedX4("float8_e4m3fn_x4")
float8_e5m2_x4 = _PackedX4("float8_e5m2_x4")
float4_e2m1fn_x4 = _PackedX4("float4_e2m1fn_x4")
