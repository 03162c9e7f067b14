"""Element types: what jaxmpi supports, their XLA type numbers, their MPI
datatypes, and which reduction ops MPI defines for them."""

from __future__ import annotations

import numpy as np
import ml_dtypes

bfloat16 = np.dtype(ml_dtypes.bfloat16)

# XLA_FFI_DataType numbers (xla::PrimitiveType).
XLA_TYPE = {
    np.dtype(np.bool_): 1,
    np.dtype(np.int8): 2, np.dtype(np.int16): 3, np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.uint8): 6, np.dtype(np.uint16): 7, np.dtype(np.uint32): 8,
    np.dtype(np.uint64): 9,
    np.dtype(np.float16): 10, np.dtype(np.float32): 11, np.dtype(np.float64): 12,
    np.dtype(np.complex64): 15, bfloat16: 16, np.dtype(np.complex128): 18,
}
N_XLA_TYPES = 34
SUPPORTED = tuple(XLA_TYPE)

# Predefined MPI datatypes (mpi4py names). float16/bfloat16 have none: the C
# core makes its own 2-byte types and reduction ops for them.
MPI_TYPES = {
    np.dtype(np.bool_): "C_BOOL",
    np.dtype(np.int8): "INT8_T", np.dtype(np.int16): "INT16_T",
    np.dtype(np.int32): "INT32_T", np.dtype(np.int64): "INT64_T",
    np.dtype(np.uint8): "UINT8_T", np.dtype(np.uint16): "UINT16_T",
    np.dtype(np.uint32): "UINT32_T", np.dtype(np.uint64): "UINT64_T",
    np.dtype(np.float32): "FLOAT", np.dtype(np.float64): "DOUBLE",
    np.dtype(np.complex64): "C_FLOAT_COMPLEX",
    np.dtype(np.complex128): "C_DOUBLE_COMPLEX",
}
HALF = (np.dtype(np.float16), bfloat16)

# Which predefined reduction ops the MPI standard defines for each kind of
# type (MPI-4.1 section 6.9.2); float16/bfloat16 get jaxmpi's own four.
_ARITH = ("SUM", "PROD")
_MINMAX = ("MAX", "MIN")
_LOGICAL = ("LAND", "LOR", "LXOR")
_BITWISE = ("BAND", "BOR", "BXOR")
ALLOWED_OPS = {
    "bool": _LOGICAL,
    "int": _MINMAX + _ARITH + _LOGICAL + _BITWISE,
    "float": _MINMAX + _ARITH,
    "half": _MINMAX + _ARITH,
    "complex": _ARITH,
}


def kind(dtype: np.dtype) -> str:
    # Memoised: np.issubdtype costs ~1.5 us, a third of an eager call's
    # validation.
    k = _KINDS.get(dtype)
    if k is None:
        k = _KINDS[dtype] = _kind(dtype)
    return k


_KINDS: dict = {}


def _kind(dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "bool"
    if dtype in HALF:
        return "half"
    if np.issubdtype(dtype, np.integer):
        return "int"
    if np.issubdtype(dtype, np.complexfloating):
        return "complex"
    return "float"


def supported_names() -> str:
    return ", ".join(str(d) for d in SUPPORTED)
