"""Rank-dependent test data and NumPy references."""

import contextlib
import re

import jax
import ml_dtypes
import numpy as np
from mpi4py import MPI

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
# The ring's neighbours, and a non-periodic line (MPI.PROC_NULL at the
# ends): rank r sends up to r + 1 and receives from r - 1. At 2 ranks the
# ring's two neighbours are one rank; the line's directions differ at every
# rank count, so a swapped source and dest (or a transpose that keeps the
# direction) fails from 2 ranks on.
RIGHT, LEFT = (RANK + 1) % SIZE, (RANK - 1) % SIZE
UP = RANK + 1 if RANK < SIZE - 1 else MPI.PROC_NULL
DOWN = RANK - 1 if RANK > 0 else MPI.PROC_NULL

bfloat16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(d) for d in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
    np.uint32, np.uint64, np.float16, bfloat16, np.float32, np.float64,
    np.complex64, np.complex128)]
DTYPE_IDS = [str(d) for d in DTYPES]

MODES = ["eager", "jit"]

# Rows per rank for reduce_scatter's counts: rank-dependent, with a zero from 2 ranks on, different from its reverse
# at every size >= 2.
COUNTS = tuple((2 * j + 1) % 3 if j != 1 else 0 for j in range(SIZE))
if SIZE == 1:
    COUNTS = (2,)


def kind(dtype):
    if dtype == np.bool_:
        return "bool"
    if dtype in (np.dtype(np.float16), bfloat16):
        return "half"
    if np.issubdtype(dtype, np.integer):
        return "int"
    if np.issubdtype(dtype, np.complexfloating):
        return "complex"
    return "float"


OPS_FOR_KIND = {
    "bool": ("LAND", "LOR", "LXOR"),
    "int": ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND", "BOR",
            "BXOR"),
    "float": ("SUM", "PROD", "MAX", "MIN"),
    "half": ("SUM", "PROD", "MAX", "MIN"),
    "complex": ("SUM", "PROD"),
}

REDUCTION_CASES = [(d, op) for d in DTYPES for op in OPS_FOR_KIND[kind(d)]]
REDUCTION_IDS = [f"{d}-{op}" for d, op in REDUCTION_CASES]


def data(rank, shape, dtype, seed=0, small=False):
    """Deterministic, exactly representable values that differ per rank.

    small=True keeps |values| <= 2 so that products over 4 ranks fit int8."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    base = np.arange(n, dtype=np.int64) * 7 + rank * 3 + seed * 5
    if dtype == np.bool_:
        return ((base % 3) == 0).reshape(shape)
    if small:
        vals = np.array([1, 2, -1, -2])[base % 4]
    else:
        vals = base % 11 - 5
    if np.issubdtype(dtype, np.unsignedinteger):
        vals = np.abs(vals)
    if np.issubdtype(dtype, np.integer):
        return vals.astype(dtype).reshape(shape)
    if np.issubdtype(dtype, np.complexfloating):
        imag = np.array([1, -1, 0, 2])[(base // 3) % 4]
        return (vals * 0.5 + 1j * imag).astype(dtype).reshape(shape)
    return (vals * (1.0 if small else 0.5)).astype(dtype).reshape(shape)


def all_data(shape, dtype, **kw):
    return [data(r, shape, dtype, **kw) for r in range(SIZE)]


def reduce_ref(arrays, opname, dtype):
    """What MPI's predefined op gives over the list (rank order)."""
    dtype = np.dtype(dtype)
    stack = np.stack(arrays)
    if len(arrays) == 1:  # MPI applies no op to a single contribution
        return stack[0]
    if opname == "SUM":
        out = stack[0].copy()
        for a in stack[1:]:
            out = (out + a).astype(dtype)
        return out
    if opname == "PROD":
        out = stack[0].copy()
        for a in stack[1:]:
            out = (out * a).astype(dtype)
        return out
    if opname == "MAX":
        return stack.max(axis=0).astype(dtype)
    if opname == "MIN":
        return stack.min(axis=0).astype(dtype)
    nz = stack != 0
    if opname == "LAND":
        return np.logical_and.reduce(nz, axis=0).astype(dtype)
    if opname == "LOR":
        return np.logical_or.reduce(nz, axis=0).astype(dtype)
    if opname == "LXOR":
        return np.logical_xor.reduce(nz, axis=0).astype(dtype)
    if opname == "BAND":
        return np.bitwise_and.reduce(stack, axis=0).astype(dtype)
    if opname == "BOR":
        return np.bitwise_or.reduce(stack, axis=0).astype(dtype)
    if opname == "BXOR":
        return np.bitwise_xor.reduce(stack, axis=0).astype(dtype)
    raise ValueError(opname)


def identity_ref(opname, dtype):
    """What rank 0 of exscan must get, written out per op (not jaxmpi's)."""
    dtype = np.dtype(dtype)
    table = {"SUM": 0, "PROD": 1, "LAND": 1, "LOR": 0, "LXOR": 0, "BOR": 0,
             "BXOR": 0}
    if opname in table:
        return np.array(table[opname]).astype(dtype)
    if opname == "BAND":
        return np.array(-1).astype(dtype)  # all bits (wraps for unsigned)
    if kind(dtype) == "int":
        info = np.iinfo(dtype)
        return np.array(info.min if opname == "MAX" else info.max, dtype)
    return np.array(-np.inf if opname == "MAX" else np.inf).astype(dtype)


def exscan_ref(arrays, opname, dtype):
    """What exscan gives this rank over the list (rank order): the
    reduction of the ranks before it, the op's identity on rank 0."""
    if RANK == 0:
        return np.full(np.shape(arrays[0]), identity_ref(opname, dtype))
    return reduce_ref(arrays[:RANK], opname, dtype)


def run(mode, fn, *args):
    """Call fn eagerly or through jax.jit."""
    if mode == "jit":
        return jax.jit(fn)(*args)
    return fn(*args)


def check(result, expected):
    result = np.asarray(result)
    expected = np.asarray(expected)
    assert result.dtype == expected.dtype, (result.dtype, expected.dtype)
    assert result.shape == expected.shape, (result.shape, expected.shape)
    np.testing.assert_array_equal(result, expected)


class Later:
    """Assertions kept until every communicating call of a test is made.

    A rank whose assert fails leaves the test at once; its peers, still in
    the test's next call (a collective, a receive), would wait for it for
    ever. So a test that communicates after checking records its checks
    here and raises once, at the end, on every rank that saw a failure (the
    rank-agreement hook then fails the test on the others):

        later = Later()
        later.equal(mpx.bcast(x, 0), x0)
        later.close(mpx.allreduce(x, MPI.SUM), total, rtol=1e-12)
        later.done()
    """

    def __init__(self):
        self.failures = []

    def _run(self, what, fn, *args, **kw):
        try:
            fn(*args, **kw)
        except AssertionError as e:
            self.failures.append(f"{what or 'check'} #{len(self.failures) + 1}: {e}")

    def check(self, result, expected, what=""):
        """util.check: same dtype, shape and values."""
        self._run(what, check, result, expected)

    def equal(self, result, expected, what=""):
        self._run(what, np.testing.assert_array_equal, np.asarray(result),
                  np.asarray(expected))

    def close(self, result, expected, what="", **kw):
        self._run(what, np.testing.assert_allclose, np.asarray(result),
                  np.asarray(expected), **kw)

    def true(self, cond, what=""):
        if not cond:
            self.failures.append(f"{what or 'condition'} is false")

    def done(self):
        if self.failures:
            raise AssertionError("\n".join(self.failures))


@contextlib.contextmanager
def check_mode(mode):
    """Cross-rank checks in `mode` ("off", "sparse", "all") for the block,
    then as they were. Every rank enters and leaves at the same point."""
    from jaxmpi import _core

    core = _core.get()
    before = core.check_mode
    core.set_check(mode)
    try:
        yield mode
    finally:
        core.set_check(before)


def on_line(peer, shape, dtype, seed=0):
    """What comes from peer on the line: its data(), zeros from PROC_NULL."""
    if peer == MPI.PROC_NULL:
        return np.zeros(shape, dtype)
    return data(peer, shape, dtype, seed=seed)


def loop_body_copies(fn, *args):
    """copy instructions in the while bodies of fn's optimised HLO."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    blocks = {}
    for block in text.split("\n\n"):
        for line in block.splitlines():
            m = re.match(r"^(?:ENTRY )?%(\S+) \(", line)
            if m:
                blocks[m.group(1)] = block
                break
    bodies = re.findall(r"body=%([\w.\-]+)", text)
    assert bodies, "no while loop in the compiled program"
    return sum(blocks[b].count(" copy(") for b in bodies)


def error_or_none(call):
    """The exception `call()` raises (its result waited for), else None."""
    try:
        jax.block_until_ready(call())
    except Exception as e:  # noqa: BLE001 (the caller checks it afterwards)
        return e
    return None


def sender_first(send, receive, sender=0, delay=0.0):
    """`sender` runs send() to completion while the others wait at a barrier
    of COMM_WORLD, then the others run receive(): the message is at its
    receiver before the receive starts (the default check's probe finds
    it). With `delay` the order is the other way round: everyone meets
    first, and the sender sleeps `delay` seconds before sending, so that
    the receive starts first and the message comes late. Returns this
    rank's exception, or None."""
    import time

    error = None
    if delay:
        MPI.COMM_WORLD.Barrier()
        if MPI.COMM_WORLD.Get_rank() == sender:
            time.sleep(delay)
            return error_or_none(send)
        return error_or_none(receive)
    if MPI.COMM_WORLD.Get_rank() == sender:
        error = error_or_none(send)
        jax.effects_barrier()
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() != sender:
        error = error_or_none(receive)
    return error
