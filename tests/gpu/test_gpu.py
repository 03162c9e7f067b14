"""Every op on GPU arrays, on every rank, against NumPy: the CUDA handlers,
the staging through pinned host memory (buffers shared by aliased inputs
and results, templates never copied, the buffer cache), gradients and vmap
on the GPU, CUDA errors and MPI errors surfacing as Python exceptions.

tests/mpi runs unchanged on a GPU too (its arrays then live there); this file
adds what is specific to the GPU path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import _core
from jaxmpi import notoken as mpx
from util import (DTYPE_IDS, DTYPES, REDUCTION_CASES, REDUCTION_IDS, RANK,
                  SIZE, all_data, check, data, kind, reduce_ref)

RIGHT, LEFT = (RANK + 1) % SIZE, (RANK - 1) % SIZE
ROOT = SIZE - 1
CORE = _core.get()
needs2 = pytest.mark.skipif(SIZE < 2, reason="needs 2 ranks")
# A ring over every rank (periodic: at 1 rank a block is its own neighbour).
WORLD_CART = MPI.COMM_WORLD.Create_cart([SIZE], periods=[True])


def on_gpu(x):
    x = jnp.asarray(x)
    assert {d.platform for d in x.devices()} == {"gpu"}, x.devices()
    return x


def gpu_check(result, expected):
    on_gpu(result)
    check(result, expected)


def test_driver_and_build():
    assert jaxmpi.has_cuda_support()
    n, what = CORE.cuda_driver()
    assert n >= 1, what


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_op_in_one_program(dtype):
    """All twelve data-moving ops in one jitted program, on GPU arrays."""
    shape = (SIZE, 3)
    x = on_gpu(data(RANK, shape, dtype, small=True))
    op = MPI.LOR if kind(dtype) == "bool" else MPI.SUM
    opname = "LOR" if kind(dtype) == "bool" else "SUM"

    def f(x):
        out = {}
        out["allreduce"] = mpx.allreduce(x, op)
        out["reduce"] = mpx.reduce(x, op, ROOT)
        out["scan"] = mpx.scan(x, op)
        out["bcast"] = mpx.bcast(x, ROOT)
        out["gather"] = mpx.gather(x, ROOT)
        out["scatter"] = mpx.scatter(x if RANK == ROOT else x[0], ROOT)
        out["allgather"] = mpx.allgather(x)
        out["alltoall"] = mpx.alltoall(x)
        out["sendrecv"] = mpx.sendrecv(x, x, LEFT, RIGHT)
        a, b = mpx.neighbor_exchange([x, x[:1]], [x, x[:1]], [LEFT, RIGHT],
                                     [RIGHT, LEFT], tag=3)
        out["exchange"] = a, b
        mpx.barrier()
        if SIZE > 1:  # send/recv ring, even ranks first
            if RANK % 2 == 0:
                mpx.send(x, RIGHT, tag=9)
                out["recv"] = mpx.recv(x, LEFT, tag=9)
            else:
                out["recv"] = mpx.recv(x, LEFT, tag=9)
                mpx.send(x, RIGHT, tag=9)
        return out

    out = jax.jit(f)(x)
    X = all_data(shape, dtype, small=True)
    total = reduce_ref(X, opname, dtype)
    gpu_check(out["allreduce"], total)
    gpu_check(out["reduce"], total if RANK == ROOT else X[RANK])
    gpu_check(out["scan"], reduce_ref(X[: RANK + 1], opname, dtype))
    gpu_check(out["bcast"], X[ROOT])
    gpu_check(out["gather"], np.stack(X) if RANK == ROOT else X[RANK])
    gpu_check(out["scatter"], X[ROOT][RANK])
    gpu_check(out["allgather"], np.stack(X))
    gpu_check(out["alltoall"], np.stack([X[s][RANK] for s in range(SIZE)]))
    gpu_check(out["sendrecv"], X[LEFT])
    gpu_check(out["exchange"][0], X[LEFT])
    gpu_check(out["exchange"][1], X[RIGHT][:1])
    if SIZE > 1:
        gpu_check(out["recv"], X[LEFT])


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_newer_collectives_in_one_program(dtype):
    """The collectives added after the first twelve, and a pytree, in one
    jitted program on GPU arrays: variable counts that differ per rank,
    reduce_scatter even and uneven, exscan, a halo and a neighbourhood
    exchange whose two directions carry different rows."""
    op = MPI.LOR if kind(dtype) == "bool" else MPI.SUM
    opname = "LOR" if kind(dtype) == "bool" else "SUM"
    counts = [r % 3 + 1 for r in range(SIZE)]  # rows of rank r: 1, 2, 3, 1, ...
    offs = np.concatenate([[0], np.cumsum(counts)])
    total = int(offs[-1])

    def sendcounts(r):  # rows rank r sends to each rank (never all equal)
        return [(r + j) % 2 + 1 for j in range(SIZE)]

    def rows(r, n, seed):
        return data(r, (n, 2), dtype, seed=seed, small=True)

    cart = WORLD_CART
    x_rs = on_gpu(rows(RANK, SIZE, 1))
    x_rv = on_gpu(rows(RANK, total, 2))
    x_v = on_gpu(rows(RANK, counts[RANK], 3))
    x_a2a = on_gpu(rows(RANK, sum(sendcounts(RANK)), 4))
    x_halo = on_gpu(rows(RANK, 4, 5))
    x_nbr = on_gpu(rows(RANK, 3, 6))
    tree = {"a": x_rs, "b": [x_halo[:1], x_nbr]}

    def f(x_rs, x_rv, x_v, x_a2a, x_halo, x_nbr, tree):
        return {
            "reduce_scatter": mpx.reduce_scatter(x_rs, op),
            "reduce_scatterv": mpx.reduce_scatter(x_rv, op, counts=counts),
            "exscan": mpx.exscan(x_rs, op),
            "allgatherv": mpx.allgatherv(x_v, counts),
            "gatherv": mpx.gatherv(x_v, counts, ROOT),
            "scatterv": mpx.scatterv(x_rv if RANK == ROOT else x_v, counts, ROOT),
            "alltoallv": mpx.alltoallv(x_a2a, sendcounts(RANK),
                                       [sendcounts(i)[RANK] for i in range(SIZE)]),
            "halo": mpx.halo_exchange(x_halo, cart, 1),
            # one row to the left neighbour, two to the right one
            "neighbor": mpx.neighbor_alltoallv(x_nbr, [1, 2], [2, 1], comm=cart),
            "tree": mpx.allreduce(tree, op),
        }

    out = jax.jit(f)(x_rs, x_rv, x_v, x_a2a, x_halo, x_nbr, tree)
    RS = [rows(r, SIZE, 1) for r in range(SIZE)]
    RV = [rows(r, total, 2) for r in range(SIZE)]
    V = [rows(r, counts[r], 3) for r in range(SIZE)]
    A = [rows(r, sum(sendcounts(r)), 4) for r in range(SIZE)]
    H = [rows(r, 4, 5) for r in range(SIZE)]
    N = [rows(r, 3, 6) for r in range(SIZE)]
    gpu_check(out["reduce_scatter"], reduce_ref(RS, opname, dtype)[RANK])
    gpu_check(out["reduce_scatterv"],
              reduce_ref(RV, opname, dtype)[offs[RANK]:offs[RANK + 1]])
    identity = np.zeros((SIZE, 2), dtype)  # SUM's and LOR's
    gpu_check(out["exscan"],
              reduce_ref(RS[:RANK], opname, dtype) if RANK else identity)
    gpu_check(out["allgatherv"], np.concatenate(V))
    gpu_check(out["gatherv"], np.concatenate(V) if RANK == ROOT else V[RANK])
    gpu_check(out["scatterv"], RV[ROOT][offs[RANK]:offs[RANK + 1]])
    blocks = []
    for i in range(SIZE):
        start = sum(sendcounts(i)[:RANK])
        blocks.append(A[i][start:start + sendcounts(i)[RANK]])
    gpu_check(out["alltoallv"], np.concatenate(blocks))
    gpu_check(out["halo"], np.concatenate([H[LEFT][2:3], H[RANK][1:3], H[RIGHT][1:2]]))
    gpu_check(out["neighbor"], np.concatenate([N[LEFT][1:3], N[RIGHT][:1]]))
    gpu_check(out["tree"]["a"], reduce_ref(RS, opname, dtype))
    gpu_check(out["tree"]["b"][0], reduce_ref([h[:1] for h in H], opname, dtype))
    gpu_check(out["tree"]["b"][1], reduce_ref(N, opname, dtype))


@pytest.mark.parametrize("dtype,opname", REDUCTION_CASES, ids=REDUCTION_IDS)
def test_allreduce_every_op(dtype, opname):
    x = on_gpu(data(RANK, (5, 2), dtype, small=True))
    y = jax.jit(lambda a: mpx.allreduce(a, getattr(MPI, opname)))(x)
    ref = reduce_ref(all_data((5, 2), dtype, small=True), opname, dtype)
    if kind(dtype) == "half":  # jaxmpi's ops round once per pair in float32
        np.testing.assert_allclose(np.asarray(y, np.float32),
                                   ref.astype(np.float32), rtol=1e-2)
        on_gpu(y)
    else:
        gpu_check(y, ref)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128, np.int16],
                         ids=str)
def test_eager(dtype):
    """Outside jit every op is its own small GPU program."""
    x = on_gpu(data(RANK, (4,), dtype))
    X = all_data((4,), dtype)
    gpu_check(mpx.allreduce(x, MPI.SUM), reduce_ref(X, "SUM", dtype))
    gpu_check(mpx.bcast(x, 0), X[0])
    gpu_check(mpx.sendrecv(x, x, LEFT, RIGHT), X[LEFT])
    gpu_check(mpx.allgather(x), np.stack(X))
    y, token = jaxmpi.allreduce(x, MPI.PROD)
    gpu_check(y, reduce_ref(X, "PROD", dtype))


@pytest.mark.parametrize("n", [7, 1 << 20, 4 << 20], ids=["28B", "4MiB", "16MiB"])
def test_in_place_allreduce_in_loop(n):
    """The result aliased to the input shares one staging buffer: a loop that
    carries the result through allreduce(..., SUM) * 0.5 + 1."""
    x = on_gpu(jnp.arange(n, dtype=jnp.float32) % 13 + RANK)

    @jax.jit
    def f(a):
        return lax.fori_loop(0, 6, lambda i, a: mpx.allreduce(a, MPI.SUM) * 0.5 + 1,
                             a)

    # Step 1 sums the ranks' inputs; then every rank holds the same v, and
    # allreduce gives SIZE * v.
    v = sum(np.arange(n, dtype=np.float64) % 13 + r for r in range(SIZE))
    v = v * 0.5 + 1
    for _ in range(5):
        v = SIZE * v * 0.5 + 1
    y = f(x)
    on_gpu(y)
    np.testing.assert_allclose(np.asarray(y), v, rtol=1e-6)
    # The input is still intact (XLA copied it for the loop, not jaxmpi).
    check(x, np.arange(n, dtype=np.float32) % 13 + RANK)


def test_allreduce_donated_input():
    x = on_gpu(data(RANK, (1000,), np.float64))
    y = jax.jit(lambda a: mpx.allreduce(a, MPI.SUM), donate_argnums=0)(x)
    gpu_check(y, reduce_ref(all_data((1000,), np.float64), "SUM", np.float64))


def test_rooted_pass_through():
    x = on_gpu(data(RANK, (3, 2), np.float32))
    X = all_data((3, 2), np.float32)
    for root in range(SIZE):
        r, g, b = jax.jit(lambda a: (mpx.reduce(a, MPI.SUM, root),
                                     mpx.gather(a, root), mpx.bcast(a, root)))(x)
        gpu_check(r, reduce_ref(X, "SUM", np.float32) if RANK == root else X[RANK])
        gpu_check(g, np.stack(X) if RANK == root else X[RANK])
        gpu_check(b, X[root])


def test_proc_null_gives_zeros():
    x = on_gpu(jnp.full((4,), 7.0, jnp.float32))
    status = MPI.Status()
    y = jax.jit(lambda a: mpx.recv(a, MPI.PROC_NULL, status=status))(x)
    gpu_check(y, np.zeros(4, np.float32))
    assert status.Get_source() == MPI.PROC_NULL
    z = jax.jit(lambda a: mpx.sendrecv(a, a, MPI.PROC_NULL, MPI.PROC_NULL))(x)
    gpu_check(z, np.zeros(4, np.float32))


def test_exchange_same_array_twice_and_edges():
    """One device buffer sent to two peers (one staging buffer for both), and
    non-periodic edges (PROC_NULL: zeros)."""
    x = on_gpu(data(RANK, (2, 3), np.float64))
    left = RANK - 1 if RANK > 0 else MPI.PROC_NULL
    right = RANK + 1 if RANK < SIZE - 1 else MPI.PROC_NULL
    a, b = jax.jit(lambda v: mpx.neighbor_exchange(
        [v, v], [v, v], [left, right], [right, left], tag=11))(x)
    zero = np.zeros((2, 3))
    gpu_check(a, data(left, (2, 3), np.float64) if RANK > 0 else zero)
    gpu_check(b, data(right, (2, 3), np.float64) if RANK < SIZE - 1 else zero)


@pytest.mark.parametrize("shape", [(0,), (3, 0), ()], ids=str)
def test_empty_and_scalar(shape):
    x = on_gpu(data(RANK, shape, np.float32))
    X = all_data(shape, np.float32)
    y, g, s = jax.jit(lambda a: (mpx.allreduce(a, MPI.SUM), mpx.allgather(a),
                                 mpx.sendrecv(a, a, LEFT, RIGHT)))(x)
    gpu_check(y, reduce_ref(X, "SUM", np.float32))
    gpu_check(g, np.stack(X))
    gpu_check(s, X[LEFT])


@needs2
def test_status_and_order_of_p2p():
    """Messages with different tags received in the opposite order of their
    sends: only correct if the calls run in program order on the GPU."""
    status = MPI.Status()
    x = on_gpu(data(RANK, (3,), np.int32))

    @jax.jit
    def f(a):
        if RANK % 2 == 0:
            mpx.send(a, RIGHT, tag=1)
            mpx.send(a * 2, RIGHT, tag=2)
            r = mpx.recv(a, LEFT, tag=1, status=status)
            return r, mpx.recv(a, LEFT, tag=2)
        r = mpx.recv(a, LEFT, tag=1, status=status)
        s = mpx.recv(a, LEFT, tag=2)
        mpx.send(a, RIGHT, tag=1)
        mpx.send(a * 2, RIGHT, tag=2)
        return r, s

    r, s = f(x)
    gpu_check(r, data(LEFT, (3,), np.int32))
    gpu_check(s, data(LEFT, (3,), np.int32) * 2)
    assert status.Get_source() == LEFT and status.Get_tag() == 1


def test_mismatched_message_raises():
    """An error of the op comes back as a Python exception naming op and rank.
    XLA:GPU marks every output of the failed program with the error, the
    ordered effect's token included, so the next jaxmpi call raises it again
    (docs/gpu.md); clearing JAX's runtime token lets this test go on."""
    x = on_gpu(jnp.ones(3, jnp.float32))
    err = rf"jaxmpi\.sendrecv: rank {RANK} received 12 bytes"
    with pytest.raises(jax.errors.JaxRuntimeError, match=err):
        jax.block_until_ready(jax.jit(
            lambda a: mpx.sendrecv(a, jnp.zeros(4, jnp.float32), LEFT, RIGHT))(x))
    f = jax.jit(lambda a: mpx.allreduce(a, MPI.SUM))
    with pytest.raises(jax.errors.JaxRuntimeError, match=err):
        jax.block_until_ready(f(x))
    from jax._src import dispatch
    dispatch.runtime_tokens.clear()
    gpu_check(f(x), np.full(3, SIZE, np.float32))


def test_staging_cache_reuses_buffers():
    x = on_gpu(jnp.ones((256, 1024), jnp.float32))  # 1 MiB
    f = jax.jit(lambda a: mpx.sendrecv(mpx.allreduce(a, MPI.SUM), a, LEFT, RIGHT))
    jax.block_until_ready(f(x))
    before = CORE.cuda_staging_stats()
    for _ in range(20):
        y = f(x)
    gpu_check(y, np.full((256, 1024), SIZE, np.float32))
    after = CORE.cuda_staging_stats()
    assert after["allocs"] == before["allocs"], (before, after)


def test_staging_cache_limit_frees_idle_buffers():
    CORE.lib.jaxmpi_cuda_configure(int(CORE.cuda_aware_mode), 1 << 20)
    try:
        x = on_gpu(jnp.arange(3 << 20, dtype=jnp.float32) + RANK)  # 12 MiB
        X = [np.arange(3 << 20, dtype=np.float32) + r for r in range(SIZE)]
        for _ in range(3):
            y = jax.jit(lambda a: mpx.sendrecv(a, a, LEFT, RIGHT))(x)
        gpu_check(y, X[LEFT])
        stats = CORE.cuda_staging_stats()
        assert stats["frees"] > 0, stats
        # what is left held is at most the limit plus buffers in use (none now)
        assert stats["held_bytes"] <= 1 << 20, stats
    finally:
        CORE.lib.jaxmpi_cuda_configure(int(CORE.cuda_aware_mode), 0)


def test_grad_and_vmap():
    w = jnp.asarray([1.0, 2.0, 3.0]) * (RANK + 1)
    x = on_gpu(jnp.asarray([0.5, -1.0, 2.0]) + RANK)
    # grad of a ring shift: the cotangent comes back from the right neighbour
    g = jax.jit(jax.grad(lambda a: jnp.sum(w * mpx.sendrecv(a, a, LEFT, RIGHT))))(x)
    gpu_check(g, np.asarray([1.0, 2.0, 3.0]) * (RIGHT + 1))
    # exact adjoint of a sum over ranks: the sum of every rank's weights
    g = jax.jit(jax.grad(lambda a: jnp.sum(
        w * mpx.allreduce(a, MPI.SUM, adjoint="sum"))))(x)
    gpu_check(g, np.asarray([1.0, 2.0, 3.0]) * sum(range(1, SIZE + 1)))
    # bcast's transpose is a reduction onto the root
    g = jax.jit(jax.grad(lambda a: jnp.sum(w * mpx.bcast(a, ROOT))))(x)
    ref = np.asarray([1.0, 2.0, 3.0]) * sum(range(1, SIZE + 1))
    gpu_check(g, ref if RANK == ROOT else np.zeros(3))
    # vmap: one message for the whole batch
    xs = on_gpu(jnp.stack([x, 2 * x, 3 * x]))
    y = jax.jit(jax.vmap(lambda a: mpx.allreduce(a, MPI.SUM)))(xs)
    tot = sum(np.asarray([0.5, -1.0, 2.0]) + r for r in range(SIZE))
    np.testing.assert_allclose(np.asarray(on_gpu(y)), np.stack([tot, 2 * tot, 3 * tot]))
    y = jax.jit(jax.vmap(lambda a: mpx.sendrecv(a, a, LEFT, RIGHT)))(xs)
    xl = np.asarray([0.5, -1.0, 2.0]) + LEFT
    np.testing.assert_allclose(np.asarray(on_gpu(y)), np.stack([xl, 2 * xl, 3 * xl]))
    y = jax.jit(jax.vmap(lambda a: mpx.gather(a, ROOT), in_axes=1))(xs)
    if RANK == ROOT:
        X = [np.stack([v, 2 * v, 3 * v]) for v in
             (np.asarray([0.5, -1.0, 2.0]) + r for r in range(SIZE))]
        # batch axis (the input's axis 1) first, then ranks
        np.testing.assert_allclose(np.asarray(y), np.stack([np.stack(X)[:, :, i]
                                   for i in range(3)]))
    else:
        np.testing.assert_allclose(np.asarray(y), np.asarray(xs).T)
    on_gpu(y)


def test_half_reductions_and_bytes():
    for dt in (jnp.float16, jnp.bfloat16):
        x = on_gpu(jnp.asarray([1.5, -2.0, 0.25], dt) * (RANK + 1))
        y = jax.jit(lambda a: mpx.allreduce(a, MPI.SUM))(x)
        ref = np.asarray([1.5, -2.0, 0.25]) * sum(range(1, SIZE + 1))
        np.testing.assert_allclose(np.asarray(on_gpu(y), np.float64), ref)
        z = jax.jit(lambda a: mpx.sendrecv(a, a, LEFT, RIGHT))(x)
        gpu_check(z, np.asarray(jnp.asarray([1.5, -2.0, 0.25], dt) * (LEFT + 1)))


def _cuda_aware_reason():
    aware = CORE.mpi_cuda_aware
    if aware:
        return None
    return ("this MPI is not CUDA-aware (MPIX_Query_cuda_support() "
            f"{'== 0' if aware is False else 'not available'}): device pointers "
            "would crash it; the staging path is tested instead")


@pytest.mark.skipif(_cuda_aware_reason() is not None,
                    reason=str(_cuda_aware_reason()))
def test_cuda_aware_mode():
    """Device pointers straight to MPI (the mode JAXMPI_CUDA_AWARE=1 sets),
    every op, plus the half-precision reductions that stay staged."""
    CORE.lib.jaxmpi_cuda_configure(1, 0)
    try:
        assert CORE.cuda_aware_mode
        test_every_op_in_one_program(np.dtype(np.float32))
        test_every_op_in_one_program(np.dtype(np.complex128))
        test_rooted_pass_through()
        test_proc_null_gives_zeros()
        test_in_place_allreduce_in_loop(1 << 20)
        test_half_reductions_and_bytes()
    finally:
        CORE.lib.jaxmpi_cuda_configure(0, 0)
