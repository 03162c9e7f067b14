"""Every collective, every dtype, every op MPI defines for it, every root,
eager and jitted, on every rank, against NumPy."""

import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import (DTYPE_IDS, DTYPES, MODES, RANK, REDUCTION_CASES,
                  REDUCTION_IDS, SIZE, Later, all_data, check, data, reduce_ref,
                  run)

# The suites this file belongs to (tests/suites.py).
SUITES = ("large_count", "across_hosts", "c_core")

SHAPE = (3, 2)
TOTAL = SIZE * (SIZE - 1) // 2  # sum of the ranks


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
    later = Later()
    for root in roots:
        y = run(mode, lambda a: mpx.reduce(a, op, root), x)
        later.check(y, expected if RANK == root else np.asarray(x), f"root {root}")
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_bcast(dtype, mode):
    later = Later()
    for root in range(SIZE):
        x = jnp.asarray(data(RANK, SHAPE, dtype, seed=root))
        y = run(mode, lambda a: mpx.bcast(a, root), x)
        later.check(y, data(root, SHAPE, dtype, seed=root), f"root {root}")
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gather(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    later = Later()
    for root in range(SIZE):
        y = run(mode, lambda a: mpx.gather(a, root), x)
        later.check(y, np.stack(all_data(SHAPE, dtype)) if RANK == root else x,
                    f"root {root}")
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_scatter(dtype, mode):
    later = Later()
    for root in range(SIZE):
        full = np.stack([data(r, SHAPE, dtype, seed=root) for r in range(SIZE)])
        x = jnp.asarray(full if RANK == root else np.zeros(SHAPE, dtype))
        y = run(mode, lambda a: mpx.scatter(a, root), x)
        later.check(y, full[RANK], f"root {root}")
    later.done()


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

    y = run(mode, f, jnp.zeros(2))
    plain = mpx.barrier()
    tok = jaxmpi.barrier()
    check(y, np.ones(2))
    assert plain is None
    assert type(tok).__name__ == "Token"


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1000, 17)],
                         ids=["0d", "empty", "empty2d", "large"])
@pytest.mark.parametrize("mode", MODES)
def test_shapes(shape, mode):
    dtype = np.dtype(np.float32)
    x = jnp.asarray(data(RANK, shape, dtype))
    everyone = all_data(shape, dtype)
    later = Later()
    later.check(run(mode, lambda a: mpx.allreduce(a, MPI.SUM), x),
                reduce_ref(everyone, "SUM", dtype), "allreduce")
    later.check(run(mode, lambda a: mpx.scan(a, MPI.MAX), x),
                reduce_ref(everyone[: RANK + 1], "MAX", dtype), "scan")
    later.check(run(mode, lambda a: mpx.bcast(a, SIZE - 1), x), everyone[-1],
                "bcast")
    later.check(run(mode, mpx.allgather, x), np.stack(everyone), "allgather")
    y = run(mode, lambda a: mpx.gather(a, 0), x)
    later.check(y, np.stack(everyone) if RANK == 0 else x, "gather")
    y = run(mode, lambda a: mpx.reduce(a, MPI.MIN, 0), x)
    later.check(y, reduce_ref(everyone, "MIN", dtype) if RANK == 0 else x,
                "reduce")
    full = np.stack(everyone)
    y = run(mode, lambda a: mpx.scatter(a, 0),
            jnp.asarray(full if RANK == 0 else everyone[RANK]))
    later.check(y, everyone[RANK], "scatter")
    xs = jnp.asarray(data(RANK, (SIZE, *shape), dtype))
    allxs = all_data((SIZE, *shape), dtype)
    later.check(run(mode, mpx.alltoall, xs),
                np.stack([allxs[j][RANK] for j in range(SIZE)]), "alltoall")
    later.done()


def test_python_scalars_and_numpy_inputs():
    y = mpx.allreduce(1.5, MPI.SUM)
    z = mpx.allreduce(np.arange(3, dtype=np.int16) + RANK, MPI.SUM)
    check(y, np.asarray(1.5 * SIZE, dtype=jnp.asarray(1.5).dtype))
    check(z, (np.arange(3) * SIZE + TOTAL).astype(np.int16))


def test_token_api_returns_pairs():
    # Rank-dependent data, every result checked (after the last call).
    dtype = np.dtype(np.float64)
    x = jnp.asarray(data(RANK, (3,), dtype))
    everyone = all_data((3,), dtype)
    root = SIZE - 1
    full = np.stack(all_data((3,), dtype, seed=1))
    blocks = jnp.asarray(data(RANK, (SIZE, 2), dtype, seed=2))
    all_blocks = all_data((SIZE, 2), dtype, seed=2)
    ys = {}
    ys["allreduce"], tok = jaxmpi.allreduce(x, op=MPI.SUM)
    ys["bcast"], tok = jaxmpi.bcast(x, root, token=tok)
    ys["gather"], tok = jaxmpi.gather(x, root, token=tok)
    ys["scatter"], tok = jaxmpi.scatter(jnp.asarray(full) if RANK == root else x,
                                        root, token=tok)
    ys["allgather"], tok = jaxmpi.allgather(x, token=tok)
    ys["alltoall"], tok = jaxmpi.alltoall(blocks, token=tok)
    ys["reduce"], tok = jaxmpi.reduce(x, MPI.SUM, root, token=tok)
    ys["scan"], tok = jaxmpi.scan(x, MPI.SUM, token=tok)
    ys["sendrecv"], tok = jaxmpi.sendrecv(x, x, (RANK - 1) % SIZE,
                                          (RANK + 1) % SIZE, token=tok)
    tok = jaxmpi.barrier(token=tok)
    assert type(tok).__name__ == "Token"
    want = {
        "allreduce": reduce_ref(everyone, "SUM", dtype),
        "bcast": everyone[root],
        "gather": np.stack(everyone) if RANK == root else everyone[RANK],
        "scatter": full[RANK],
        "allgather": np.stack(everyone),
        "alltoall": np.stack([all_blocks[j][RANK] for j in range(SIZE)]),
        "reduce": (reduce_ref(everyone, "SUM", dtype) if RANK == root
                   else everyone[RANK]),
        "scan": reduce_ref(everyone[: RANK + 1], "SUM", dtype),
        "sendrecv": everyone[(RANK - 1) % SIZE],
    }
    later = Later()
    for name, y in ys.items():
        later.check(y, want[name], name)
    later.done()


def test_root_returns_input_itself():
    # As in mpi4jax: rooted ops hand back x where MPI delivers nothing.
    # Every rank makes every call: a collective skipped on some ranks would
    # leave its messages to be matched by a later one.
    # Rank-dependent x: a bcast that did nothing would fail off the root.
    x = jnp.arange(4.0) + 10 * RANK
    b = mpx.bcast(x, 0)
    g = mpx.gather(x, 0)
    r = mpx.reduce(x, MPI.SUM, 0)
    everyone = np.stack([np.arange(4.0) + 10 * s for s in range(SIZE)])
    if RANK == 0:
        assert b is x
        check(g, everyone)
        check(r, everyone.sum(axis=0))
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
    later = Later()
    for name, comm in _subcomms():
        r, n = comm.Get_rank(), comm.Get_size()
        members = comm.allgather(RANK)  # world ranks in comm order
        x = jnp.asarray(data(RANK, SHAPE, np.int32))
        y = run(mode, lambda a: mpx.allreduce(a, MPI.SUM, comm=comm), x)
        later.check(y, reduce_ref([data(w, SHAPE, np.int32) for w in members],
                                  "SUM", np.int32), f"{name} allreduce")
        y = run(mode, lambda a: mpx.allgather(a, comm=comm), x)
        later.check(y, np.stack([data(w, SHAPE, np.int32) for w in members]),
                    f"{name} allgather")
        y = run(mode, lambda a: mpx.bcast(a, n - 1, comm=comm), x)
        later.check(y, data(members[-1], SHAPE, np.int32), f"{name} bcast")
        right, left = (r + 1) % n, (r - 1) % n
        y = run(mode, lambda a: mpx.sendrecv(a, a, left, right, comm=comm), x)
        later.check(y, data(members[left], SHAPE, np.int32), f"{name} sendrecv")
        # A line within the communicator: directions differ at 2 members.
        up = r + 1 if r < n - 1 else MPI.PROC_NULL
        down = r - 1 if r > 0 else MPI.PROC_NULL
        y = run(mode, lambda a: mpx.sendrecv(a, a, down, up, comm=comm), x)
        later.check(y, data(members[down], SHAPE, np.int32) if r > 0
                    else np.zeros(SHAPE, np.int32), f"{name} sendrecv line")
        if comm != MPI.COMM_SELF:
            comm.Free()
    later.done()


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
    # MPI has no float16 sum: jaxmpi's op adds each pair in float32 and
    # rounds the sum once to float16, which is float16 addition itself.
    # Values whose every partial sum is a float16 (multiples of 1/4 below
    # 512): exact whatever order MPI combines the ranks in.
    exact = np.array([RANK + 0.25, -2.0 * RANK, 0.75 * RANK, 100.0 + RANK],
                     np.float16)
    # 2048 + 1 is not a float16 (the spacing there is 2): the sum rounds to
    # even, 2048. Only rank 1 adds 1 (the others 0), so every order of
    # pairwise sums meets that one rounding: 2048 at any rank count (with a
    # 1 on every rank, a tree would add 1 + 1 first and give 2050).
    rounded = np.array([2048.0 if RANK == 0 else float(RANK == 1)],
                       np.float16)
    # 0.1 is not a float16 either; a sum of SIZE of them rounds once per
    # pairwise sum (SIZE - 1 times, each within half an ulp, 2**-11, on top
    # of 0.1's own rounding to float16), and tree and linear orders may
    # round differently.
    tenth = np.full(3, 0.1, np.float16)
    ys = [mpx.allreduce(jnp.asarray(v), MPI.SUM) for v in (exact, rounded, tenth)]
    b = jnp.asarray(np.array([1.0, np.inf, -np.inf, np.nan, RANK],
                             dtype="bfloat16"))
    m = np.asarray(mpx.allreduce(b, MPI.MAX), np.float32)
    everyone = [np.array([r + 0.25, -2.0 * r, 0.75 * r, 100.0 + r])
                for r in range(SIZE)]
    check(ys[0], np.sum(everyone, axis=0).astype(np.float16))
    check(ys[1], np.array([2048.0], np.float16))
    np.testing.assert_allclose(np.asarray(ys[2], np.float64),
                               np.full(3, 0.1 * SIZE),
                               rtol=(SIZE - 1) * 2 ** -11 + 2 ** -11)
    assert m[0] == 1.0 and m[1] == np.inf and m[2] == -np.inf and np.isnan(m[3])
    assert m[4] == SIZE - 1
