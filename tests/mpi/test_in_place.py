"""Ops whose result shares its input's buffer (allreduce, reduce, scan, bcast,
alltoall in place with MPI_IN_PLACE; recv and sendrecv into their template):
correct where XLA really passes one buffer (a loop's carry, a donated
argument), and no copy left in a loop body."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

from jaxmpi import notoken as mpx
from util import DTYPES as ALL_DTYPES, DTYPE_IDS as ALL_DTYPE_IDS
from util import DOWN, UP
from util import RANK, SIZE, bfloat16, data, loop_body_copies

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core",)

DTYPES = [np.dtype(d) for d in (np.int32, np.uint8, np.float16, bfloat16,
                                np.float32, np.float64)]
IDS = [str(d) for d in DTYPES]
STEPS = 3
SRC, DST = (RANK - 1) % SIZE, (RANK + 1) % SIZE


def keep_small(y):
    """Keeps sums of a few ranks' values exact in every dtype of DTYPES."""
    return y % 7 + 1


# Each case: (the op on one rank's array, the same step on every rank's
# NumPy array at once). Inputs have shape (SIZE, 3) so alltoall fits.
def _cases(root):
    def np_reduce(xs):
        out = list(xs)
        out[root] = sum(xs[1:], xs[0].copy()).astype(xs[0].dtype)
        return out

    def np_alltoall(xs):
        return [np.stack([xs[j][r] for j in range(SIZE)]) for r in range(SIZE)]

    total = lambda xs: [sum(xs[1:], xs[0].copy()).astype(xs[0].dtype)] * SIZE
    return {
        "allreduce": (lambda a: mpx.allreduce(a, MPI.SUM), total),
        "reduce": (lambda a: mpx.reduce(a, MPI.SUM, root), np_reduce),
        "scan": (lambda a: mpx.scan(a, MPI.SUM),
                 lambda xs: [sum(xs[1:r + 1], xs[0].copy()).astype(xs[0].dtype)
                             for r in range(SIZE)]),
        "bcast": (lambda a: mpx.bcast(a, root), lambda xs: [xs[root]] * SIZE),
        "alltoall": (mpx.alltoall, np_alltoall),
        "sendrecv": (lambda a: mpx.sendrecv(a * 1, a, SRC, DST),
                     lambda xs: [xs[(r - 1) % SIZE] for r in range(SIZE)]),
        "sendrecv_shift": (lambda a: mpx.sendrecv(a * 1, a, DOWN, UP),
                           lambda xs: [xs[r - 1] if r > 0 else 0 * xs[r]
                                       for r in range(SIZE)]),
    }


CASE_NAMES = list(_cases(0))
ROOTS = sorted({0, SIZE - 1})


def _reference(step, dtype):
    xs = [data(r, (SIZE, 3), dtype, small=True) for r in range(SIZE)]
    xs = [keep_small(x) for x in xs]
    for _ in range(STEPS):
        xs = [keep_small(y).astype(dtype) for y in step(xs)]
    return xs[RANK]


def _start(dtype):
    return jnp.asarray(keep_small(data(RANK, (SIZE, 3), dtype, small=True)))


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("name", CASE_NAMES)
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_loop_carry(name, dtype, root):
    """The carry of a fori_loop is one buffer: the op runs in place on it."""
    op, step = _cases(root)[name]
    loop = jax.jit(lambda a: lax.fori_loop(
        0, STEPS, lambda i, a: keep_small(op(a)).astype(a.dtype), a))
    got = np.asarray(loop(_start(dtype)))
    np.testing.assert_array_equal(got, _reference(step, dtype))


@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("name", CASE_NAMES)
def test_donated_argument(name, root):
    """A donated argument is the result's buffer; the caller's copy is gone,
    a copy made before the call is untouched."""
    dtype = np.dtype(np.float32)
    op, step = _cases(root)[name]
    xs = [keep_small(data(r, (SIZE, 3), dtype, small=True))
          for r in range(SIZE)]
    x = jnp.asarray(xs[RANK])
    kept = np.asarray(x).copy()
    got = np.asarray(jax.jit(op, donate_argnums=0)(x))
    np.testing.assert_array_equal(got, np.asarray(step(xs)[RANK], dtype))
    np.testing.assert_array_equal(kept, xs[RANK])


def test_input_still_used_is_not_overwritten():
    """Where the input stays live, XLA copies it before the in-place call."""
    x = jnp.asarray(data(RANK, (SIZE, 3), np.float32))
    f = jax.jit(lambda a: (mpx.allreduce(a, MPI.SUM), mpx.alltoall(a), a * 1))
    total, swapped, same = f(x)
    np.testing.assert_array_equal(np.asarray(same), np.asarray(x))
    everyone = [data(r, (SIZE, 3), np.float32) for r in range(SIZE)]
    np.testing.assert_array_equal(np.asarray(total), sum(everyone))
    np.testing.assert_array_equal(
        np.asarray(swapped), np.stack([everyone[j][RANK] for j in range(SIZE)]))


def test_sendrecv_two_buffers_swapping_roles():
    """The exchange pattern of a halo update: send from one buffer, receive
    into another, then the other way round."""
    x = jnp.asarray(data(RANK, (5,), np.float32))

    def body(i, xy):
        a, b = xy
        b = mpx.sendrecv(a, b, SRC, DST)
        return mpx.sendrecv(b, a, SRC, DST) + 1, b

    a, b = jax.jit(lambda x: lax.fori_loop(0, 2, body, (x, x * 0)))(x)
    shift = lambda k: data((RANK - k) % SIZE, (5,), np.float32)
    np.testing.assert_array_equal(np.asarray(b), shift(3) + 1)
    np.testing.assert_array_equal(np.asarray(a), shift(4) + 2)


def test_sendrecv_two_buffers_up_and_down():
    """The halo pattern on a line: up from one buffer into the other, then
    down back into the first (other values, so directions tell apart)."""
    x = jnp.asarray(data(RANK, (5,), np.float32))

    def body(i, ab):
        a, b = ab
        b = mpx.sendrecv(a, b, DOWN, UP)        # b_r = a_{r-1} (0 at 0)
        a = mpx.sendrecv(b * 2 + 1, a, UP, DOWN)  # a_r = 2 b_{r+1} + 1
        return a, b

    a, b = jax.jit(lambda x: lax.fori_loop(0, 1, body, (x, x * 0)))(x)
    xs = [data(r, (5,), np.float32) for r in range(SIZE)]
    bs = [xs[r - 1] if r > 0 else 0 * xs[r] for r in range(SIZE)]
    want_a = 2 * bs[RANK + 1] + 1 if RANK < SIZE - 1 else 0 * xs[RANK]
    np.testing.assert_array_equal(np.asarray(b), bs[RANK])
    np.testing.assert_array_equal(np.asarray(a), want_a)


def test_recv_into_carried_template():
    """recv writes into its template's buffer, here a loop's carry."""
    x = jnp.asarray(data(RANK, (4,), np.float32))

    def body(i, a):
        if RANK % 2 == 0:  # even ranks send first: no blocking self-pairs
            mpx.send(a + 1, DST)
            return mpx.recv(a, SRC)
        b = mpx.recv(a, SRC)
        mpx.send(a + 1, DST)
        return b

    if SIZE == 1:
        pytest.skip("a blocking send to oneself may wait for its receive")
    got = jax.jit(lambda a: lax.fori_loop(0, 2, body, a))(x)
    want = data((RANK - 2) % SIZE, (4,), np.float32) + 2
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_no_copy_in_loop_body(name):
    op, _ = _cases(0)[name]
    x = jnp.ones((SIZE, 64), jnp.float32)
    if name.startswith("sendrecv"):  # two buffers; sendrecv(a, a) copies one
        src, dst = (SRC, DST) if name == "sendrecv" else (DOWN, UP)

        def fn(x):
            def body(i, ab):
                a, b = ab
                b = mpx.sendrecv(a, b, src, dst)
                return mpx.sendrecv(b, a, src, dst), b
            return lax.fori_loop(0, 4, body, (x, x * 0))
    else:
        def fn(x):
            return lax.fori_loop(0, 4, lambda i, a: op(a) * 0.5, x)
    assert loop_body_copies(fn, x) == 0


@pytest.mark.parametrize("root", ROOTS)
def test_gather_off_the_root_in_place(root):
    """Off the root gather's result is its input: aliased, so a loop carrying
    it copies nothing; on the root the rank's own row comes back."""
    x = jnp.asarray(data(RANK, (5,), np.float32))

    def step(i, a):
        y = mpx.gather(a, root)
        return (y[RANK] if RANK == root else y) * 0.5 + 1

    fn = lambda a: lax.fori_loop(0, STEPS, step, a)
    want = np.asarray(x)
    for _ in range(STEPS):
        want = want * np.float32(0.5) + 1
    np.testing.assert_array_equal(np.asarray(jax.jit(fn)(x)), want)
    if RANK != root:
        assert loop_body_copies(fn, x) == 0


# From 2 MiB per block the core swaps alltoall's blocks pair by pair through
# a cached scratch block instead of MPI_IN_PLACE (csrc/collectives.c).
PAIRWISE_BYTES = 2 << 20


def _tagged_blocks(rank, dtype, extra=0):
    """Rank `rank`'s input: block j, just over the threshold, holds values
    that say which rank sent it to whom (kept exact in every dtype)."""
    n = PAIRWISE_BYTES // dtype.itemsize + extra
    base = np.arange(n) % 61
    blocks = [(base + 3 * rank + 5 * j) % 127 for j in range(SIZE)]
    if dtype == np.bool_:
        blocks = [b % 2 == (rank + j) % 2 for j, b in enumerate(blocks)]
    return np.stack(blocks).astype(dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=ALL_DTYPE_IDS)
def test_alltoall_large_blocks(dtype):
    xs = [_tagged_blocks(r, dtype, extra=3) for r in range(SIZE)]
    want = np.stack([xs[j][RANK] for j in range(SIZE)])
    x = jnp.asarray(xs[RANK])
    eager = np.asarray(mpx.alltoall(x))
    jitted = np.asarray(jax.jit(mpx.alltoall)(x))
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(jitted, want)
    # The input was not touched (XLA copied it before the in-place call).
    np.testing.assert_array_equal(np.asarray(x), xs[RANK])


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_alltoall_large_blocks_loop_carry(steps):
    """Carried through a loop (one buffer, no copy): twice is the identity."""
    dtype = np.dtype(np.float32)
    xs = [_tagged_blocks(r, dtype) for r in range(SIZE)]
    want = (np.stack([xs[j][RANK] for j in range(SIZE)]) if steps % 2
            else xs[RANK])
    fn = jax.jit(lambda a: lax.fori_loop(0, steps, lambda i, b: mpx.alltoall(b),
                                         a))
    np.testing.assert_array_equal(np.asarray(fn(jnp.asarray(xs[RANK]))), want)


def test_alltoall_large_blocks_leave_user_messages_alone():
    """The blocks travel on a private duplicate of the communicator: a user
    message of the same tag on the same communicator (not jaxmpi's default,
    itself a duplicate), sent before and received after, is untouched."""
    comm = MPI.COMM_WORLD
    dtype = np.dtype(np.float32)
    xs = [_tagged_blocks(r, dtype) for r in range(SIZE)]
    note = np.full(4, RANK, np.float32)
    req = comm.Isend(note, dest=DST, tag=0)
    y = mpx.alltoall(jnp.asarray(xs[RANK]), comm=comm)
    got = np.empty(4, np.float32)
    comm.Recv(got, source=SRC, tag=0)
    req.Wait()
    np.testing.assert_array_equal(got, np.full(4, SRC, np.float32))
    np.testing.assert_array_equal(np.asarray(y),
                                  np.stack([xs[j][RANK] for j in range(SIZE)]))
