"""Every collective, every dtype, every op MPI defines for it, every root,
eager and jitted, on every rank, against NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import (DTYPE_IDS, DTYPES, MODES, RANK, REDUCTION_CASES,
                  REDUCTION_IDS, SIZE, all_data, check, data, reduce_ref, run)

SHAPE = (3, 2)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,opname", REDUCTION_CASES, ids=REDUCTION_IDS)
def test_allreduce(dtype, opname, mode):
    small = opname == "PROD"
    x = jnp.asarray(data(RANK, SHAPE, dtype, small=small))
    op = getattr(MPI, opname)
    y = run(mode, lambda a: mpx.allreduce(a, op), x)
    check(y, reduce_ref(all_data(SHAPE, dtype, small=small), opname, dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,opname", REDUCTION_CASES, ids=REDUCTION_IDS)
def test_scan(dtype, opname, mode):
    small = opname == "PROD"
    x = jnp.asarray(data(RANK, SHAPE, dtype, small=small))
    op = getattr(MPI, opname)
    y = run(mode, lambda a: mpx.scan(a, op), x)
    check(y, reduce_ref(all_data(SHAPE, dtype, small=small)[: RANK + 1],
                        opname, dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype,opname", REDUCTION_CASES, ids=REDUCTION_IDS)
def test_reduce(dtype, opname, mode):
    small = opname == "PROD"
    x = jnp.asarray(data(RANK, SHAPE, dtype, small=small))
    op = getattr(MPI, opname)
    expected = reduce_ref(all_data(SHAPE, dtype, small=small), opname, dtype)
    # Every root for SUM-like first op of each dtype; the last root otherwise.
    roots = range(SIZE) if opname in ("SUM", "LAND") else [SIZE - 1]
    for root in roots:
        y = run(mode, lambda a: mpx.reduce(a, op, root), x)
        check(y, expected if RANK == root else np.asarray(x))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bcast(dtype, mode):
    for root in range(SIZE):
        x = jnp.asarray(data(RANK, SHAPE, dtype, seed=root))
        y = run(mode, lambda a: mpx.bcast(a, root), x)
        check(y, data(root, SHAPE, dtype, seed=root))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gather(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    for root in range(SIZE):
        y = run(mode, lambda a: mpx.gather(a, root), x)
        check(y, np.stack(all_data(SHAPE, dtype)) if RANK == root else x)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scatter(dtype, mode):
    for root in range(SIZE):
        full = np.stack([data(r, SHAPE, dtype, seed=root) for r in range(SIZE)])
        x = jnp.asarray(full if RANK == root else np.zeros(SHAPE, dtype))
        y = run(mode, lambda a: mpx.scatter(a, root), x)
        check(y, full[RANK])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_allgather(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, mpx.allgather, x)
    check(y, np.stack(all_data(SHAPE, dtype)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_alltoall(dtype, mode):
    x = jnp.asarray(data(RANK, (SIZE, *SHAPE), dtype))
    y = run(mode, mpx.alltoall, x)
    everyone = all_data((SIZE, *SHAPE), dtype)
    check(y, np.stack([everyone[j][RANK] for j in range(SIZE)]))


@pytest.mark.parametrize("mode", MODES)
def test_barrier(mode):
    def f(a):
        mpx.barrier()
        return a + 1

    check(run(mode, f, jnp.zeros(2)), np.ones(2))
    assert mpx.barrier() is None
    assert type(jaxmpi.barrier()).__name__ == "Token"


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1000, 17)],
                         ids=["0d", "empty", "empty2d", "large"])
@pytest.mark.parametrize("mode", MODES)
def test_shapes(shape, mode):
    dtype = np.dtype(np.float32)
    x = jnp.asarray(data(RANK, shape, dtype))
    everyone = all_data(shape, dtype)
    check(run(mode, lambda a: mpx.allreduce(a, MPI.SUM), x),
          reduce_ref(everyone, "SUM", dtype))
    check(run(mode, lambda a: mpx.scan(a, MPI.MAX), x),
          reduce_ref(everyone[: RANK + 1], "MAX", dtype))
    check(run(mode, lambda a: mpx.bcast(a, SIZE - 1), x), everyone[-1])
    check(run(mode, mpx.allgather, x), np.stack(everyone))
    y = run(mode, lambda a: mpx.gather(a, 0), x)
    check(y, np.stack(everyone) if RANK == 0 else x)
    y = run(mode, lambda a: mpx.reduce(a, MPI.MIN, 0), x)
    check(y, reduce_ref(everyone, "MIN", dtype) if RANK == 0 else x)
    full = np.stack(everyone)
    y = run(mode, lambda a: mpx.scatter(a, 0),
            jnp.asarray(full if RANK == 0 else everyone[RANK]))
    check(y, everyone[RANK])
    xs = jnp.asarray(data(RANK, (SIZE, *shape), dtype))
    allxs = all_data((SIZE, *shape), dtype)
    check(run(mode, mpx.alltoall, xs),
          np.stack([allxs[j][RANK] for j in range(SIZE)]))


def test_python_scalars_and_numpy_inputs():
    y = mpx.allreduce(1.5, MPI.SUM)
    check(y, np.asarray(1.5 * SIZE, dtype=jnp.asarray(1.5).dtype))
    y = mpx.allreduce(np.arange(3, dtype=np.int16), MPI.SUM)
    check(y, (np.arange(3) * SIZE).astype(np.int16))


def test_token_api_returns_pairs():
    x = jnp.ones(3)
    y, tok = jaxmpi.allreduce(x, op=MPI.SUM)
    check(y, np.full(3, float(SIZE)))
    y, tok = jaxmpi.bcast(x, 0, token=tok)
    y, tok = jaxmpi.gather(x, 0, token=tok)
    y, tok = jaxmpi.scatter(jnp.ones((SIZE, 3)) if RANK == 0 else x, 0, token=tok)
    y, tok = jaxmpi.allgather(x, token=tok)
    y, tok = jaxmpi.alltoall(jnp.ones((SIZE, 2)), token=tok)
    y, tok = jaxmpi.reduce(x, MPI.SUM, 0, token=tok)
    y, tok = jaxmpi.scan(x, MPI.SUM, token=tok)
    tok = jaxmpi.barrier(token=tok)
    check(y, np.full(3, float(RANK + 1)))


def test_root_returns_input_itself():
    # As in mpi4jax: rooted ops hand back x where MPI delivers nothing.
    # Every rank makes every call: a collective skipped on some ranks would
    # leave its messages to be matched by a later one.
    x = jnp.arange(4.0)
    b = mpx.bcast(x, 0)
    g = mpx.gather(x, 0)
    r = mpx.reduce(x, MPI.SUM, 0)
    if RANK == 0:
        assert b is x
        check(g, np.tile(np.arange(4.0), (SIZE, 1)))
        check(r, SIZE * np.arange(4.0))
    else:
        assert g is x and r is x
        check(b, np.arange(4.0))


def _subcomms():
    world = MPI.COMM_WORLD
    yield "split", world.Split(RANK % 2, -RANK)  # reversed rank order
    yield "dup", world.Dup()
    yield "cart", world.Create_cart([SIZE], periods=[True])
    yield "self", MPI.COMM_SELF


@pytest.mark.parametrize("mode", MODES)
def test_user_communicators(mode):
    for name, comm in _subcomms():
        r, n = comm.Get_rank(), comm.Get_size()
        members = comm.allgather(RANK)  # world ranks in comm order
        x = jnp.asarray(data(RANK, SHAPE, np.int32))
        y = run(mode, lambda a: mpx.allreduce(a, MPI.SUM, comm=comm), x)
        check(y, reduce_ref([data(w, SHAPE, np.int32) for w in members],
                            "SUM", np.int32))
        y = run(mode, lambda a: mpx.allgather(a, comm=comm), x)
        check(y, np.stack([data(w, SHAPE, np.int32) for w in members]))
        y = run(mode, lambda a: mpx.bcast(a, n - 1, comm=comm), x)
        check(y, data(members[-1], SHAPE, np.int32))
        right, left = (r + 1) % n, (r - 1) % n
        y = run(mode, lambda a: mpx.sendrecv(a, a, left, right, comm=comm), x)
        check(y, data(members[left], SHAPE, np.int32))
        if comm != MPI.COMM_SELF:
            comm.Free()


def test_user_defined_op():
    def absmax(a, b, datatype):
        x = np.frombuffer(a, dtype=np.float32)
        y = np.frombuffer(b, dtype=np.float32)
        np.copyto(y, np.where(np.abs(x) > np.abs(y), x, y))

    op = MPI.Op.Create(absmax, commute=True)
    try:
        x = jnp.asarray(data(RANK, (5,), np.float32))
        y = mpx.allreduce(x, op)
        stack = np.stack(all_data((5,), np.float32))
        idx = np.abs(stack).argmax(axis=0)
        expected = stack[idx, np.arange(5)]
        np.testing.assert_array_equal(np.abs(np.asarray(y)), np.abs(expected))
    finally:
        op.Free()


def test_half_precision_rounds_through_float32():
    # 2048 + 1 + 1 ... is not representable in float16 step by step, but each
    # pairwise sum is computed in float32 and rounded once.
    x = jnp.asarray(np.full(4, 0.1, dtype=np.float16))
    y = mpx.allreduce(x, MPI.SUM)
    ref = np.float16(0.1)
    for _ in range(SIZE - 1):
        ref = np.float16(np.float32(ref) + np.float32(np.float16(0.1)))
    # Tree and linear orders may round differently; stay within one ulp.
    np.testing.assert_allclose(np.asarray(y, np.float32), np.float32(ref),
                               rtol=2 ** -10)
    b = jnp.asarray(np.array([1.0, np.inf, -np.inf, np.nan], dtype="bfloat16"))
    y = np.asarray(mpx.allreduce(b, MPI.MAX), np.float32)
    assert y[0] == 1.0 and y[1] == np.inf and y[2] == -np.inf and np.isnan(y[3])
