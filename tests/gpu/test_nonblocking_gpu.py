"""Every non-blocking start on GPU arrays, on every rank, against NumPy and
the blocking op: the CUDA starts (staging on jaxmpi's copy stream after an
event of XLA's stream) and the CUDA wait (found by its buffers' addresses,
copies back that XLA's stream waits for), with GPU work between start and
wait, in loops, eagerly, with gradients and vmap, and CUDA-aware mode.

tests/mpi/test_nonblocking*.py run unchanged on a GPU too (their arrays
then live there); this file puts every start on the GPU in one program per
dtype, with a computation between the starts and the waits."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

from jaxmpi import _core
from jaxmpi import notoken as mpx
from util import (COUNTS, DOWN, DTYPE_IDS, DTYPES, LEFT, RANK, RIGHT, SIZE, UP,
                  Later, all_data, check, data, exscan_ref, kind, on_line,
                  reduce_ref)

ROOT = SIZE - 1
CORE = _core.get()
WORLD_CART = MPI.COMM_WORLD.Create_cart([SIZE], periods=[True])


def on_gpu(x):
    x = jnp.asarray(x)
    assert {d.platform for d in x.devices()} == {"gpu"}, x.devices()
    return x


def work(w, n=8):
    """GPU computation independent of the messages, between start and
    wait: n dependent matrix products."""
    return lax.fori_loop(0, n, lambda i, a: jnp.tanh(a @ w), w)


W = None


def weights():
    global W
    if W is None:
        W = on_gpu(jnp.asarray(np.random.default_rng(RANK).standard_normal(
            (256, 256)) / 16, jnp.float32))
    return W


def op_for(dtype):
    return ("LOR", MPI.LOR) if kind(dtype) == "bool" else ("SUM", MPI.SUM)


def sendcounts(r):
    """Rows rank r sends to each rank for ialltoallv (never all equal)."""
    return [(r + j) % 2 + 1 for j in range(SIZE)]


# Rows of the variable-count starts: rank r has VC[r] rows (1, 2, 3, 1, ...).
VC = [r % 3 + 1 for r in range(SIZE)]
VOFF = np.concatenate([[0], np.cumsum(VC)]).astype(int)
NV = int(VOFF[-1])
RS_OFF = np.concatenate([[0], np.cumsum(COUNTS)]).astype(int)


def inputs(dtype):
    """Rank-dependent inputs of every start, on the GPU (seed per start)."""
    d = lambda shape, seed: on_gpu(data(RANK, shape, dtype, seed=seed, small=True))
    return {
        "p2p": d((SIZE, 3), 1), "x": d((SIZE, 3), 2),
        "rs": d((SIZE, 3), 3), "rsv": d((int(RS_OFF[-1]), 3), 4),
        "v": d((VC[RANK], 2), 5), "sv": d((NV, 2) if RANK == ROOT else
                                          (VC[RANK], 2), 6),
        "a2a": d((sum(sendcounts(RANK)), 2), 7), "nb": d((3,), 8),
    }


def expected(dtype):
    """NumPy's results of every start, from every rank's inputs."""
    opname, _ = op_for(dtype)
    X = lambda shape, seed: all_data(shape, dtype, seed=seed, small=True)
    P, A, RS = X((SIZE, 3), 1), X((SIZE, 3), 2), X((SIZE, 3), 3)
    RSV = X((int(RS_OFF[-1]), 3), 4)
    V = [data(r, (VC[r], 2), dtype, seed=5, small=True) for r in range(SIZE)]
    SV = data(ROOT, (NV, 2), dtype, seed=6, small=True)
    A2A = [data(r, (sum(sendcounts(r)), 2), dtype, seed=7, small=True)
           for r in range(SIZE)]
    NB = X((3,), 8)
    blocks = []
    for i in range(SIZE):
        at = sum(sendcounts(i)[:RANK])
        blocks.append(A2A[i][at:at + sendcounts(i)[RANK]])
    return {
        "irecv": P[LEFT], "isendrecv": P[RIGHT],
        "iallreduce": reduce_ref(A, opname, dtype),
        "ireduce": reduce_ref(A, opname, dtype) if RANK == ROOT else A[RANK],
        "iscan": reduce_ref(A[:RANK + 1], opname, dtype),
        "iexscan": exscan_ref(A, opname, dtype),
        "ireduce_scatter": reduce_ref(RS, opname, dtype)[RANK],
        "ireduce_scatter counts": reduce_ref(RSV, opname, dtype)[
            RS_OFF[RANK]:RS_OFF[RANK + 1]],
        "ibcast": A[ROOT],
        "igather": np.stack(A) if RANK == ROOT else A[RANK],
        "iscatter": A[ROOT][RANK],
        "iallgather": np.stack(A), "ialltoall": np.stack([a[RANK] for a in A]),
        "iallgatherv": np.concatenate(V),
        "igatherv": np.concatenate(V) if RANK == ROOT else V[RANK],
        "iscatterv": SV[VOFF[RANK]:VOFF[RANK + 1]],
        "ialltoallv": np.concatenate(blocks),
        "ineighbor_exchange": (NB[LEFT], NB[RIGHT][:1]),
        "ibarrier": None,
    }


def start_all(a, op):
    """Every start (the point-to-point ones on the ring), in a fixed order
    that is the same on every rank; returns {name: request}."""
    recvcounts = [sendcounts(i)[RANK] for i in range(SIZE)]
    r = {}
    r["irecv"] = mpx.irecv(a["p2p"], LEFT, tag=11)
    r["isend"] = mpx.isend(a["p2p"], RIGHT, tag=11)
    r["isendrecv"] = mpx.isendrecv(a["p2p"], a["p2p"], RIGHT, LEFT,
                                   sendtag=12, recvtag=12)
    r["iallreduce"] = mpx.iallreduce(a["x"], op)
    r["ireduce"] = mpx.ireduce(a["x"], op, ROOT)
    r["iscan"] = mpx.iscan(a["x"], op)
    r["iexscan"] = mpx.iexscan(a["x"], op)
    r["ireduce_scatter"] = mpx.ireduce_scatter(a["rs"], op)
    r["ireduce_scatter counts"] = mpx.ireduce_scatter(a["rsv"], op,
                                                      counts=COUNTS)
    r["ibcast"] = mpx.ibcast(a["x"], ROOT)
    r["igather"] = mpx.igather(a["x"], ROOT)
    r["iscatter"] = mpx.iscatter(a["x"] if RANK == ROOT else a["x"][0], ROOT)
    r["iallgather"] = mpx.iallgather(a["x"])
    r["ialltoall"] = mpx.ialltoall(a["x"])
    r["iallgatherv"] = mpx.iallgatherv(a["v"], VC)
    r["igatherv"] = mpx.igatherv(a["v"], VC, ROOT)
    r["iscatterv"] = mpx.iscatterv(a["sv"], VC, ROOT)
    r["ialltoallv"] = mpx.ialltoallv(a["a2a"], sendcounts(RANK), recvcounts)
    r["ineighbor_exchange"] = mpx.ineighbor_exchange(
        [a["nb"], a["nb"][:1]], [a["nb"], a["nb"][:1]], [LEFT, RIGHT],
        [RIGHT, LEFT], tag=3)
    r["ibarrier"] = mpx.ibarrier()
    return r


def blocking_all(a, op):
    """The blocking twin of every collective start (the point-to-point ones
    are checked against NumPy alone: their twins would match their
    messages)."""
    recvcounts = [sendcounts(i)[RANK] for i in range(SIZE)]
    return {
        "iallreduce": mpx.allreduce(a["x"], op),
        "ireduce": mpx.reduce(a["x"], op, ROOT),
        "iscan": mpx.scan(a["x"], op),
        "iexscan": mpx.exscan(a["x"], op),
        "ireduce_scatter": mpx.reduce_scatter(a["rs"], op),
        "ireduce_scatter counts": mpx.reduce_scatter(a["rsv"], op,
                                                     counts=COUNTS),
        "ibcast": mpx.bcast(a["x"], ROOT),
        "igather": mpx.gather(a["x"], ROOT),
        "iscatter": mpx.scatter(a["x"] if RANK == ROOT else a["x"][0], ROOT),
        "iallgather": mpx.allgather(a["x"]),
        "ialltoall": mpx.alltoall(a["x"]),
        "iallgatherv": mpx.allgatherv(a["v"], VC),
        "igatherv": mpx.gatherv(a["v"], VC, ROOT),
        "iscatterv": mpx.scatterv(a["sv"], VC, ROOT),
        "ialltoallv": mpx.alltoallv(a["a2a"], sendcounts(RANK), recvcounts),
    }


def every_start(a, w, op):
    """Every start in flight at once, the GPU computing meanwhile, waited in
    the reverse order; the blocking twins after the waits."""
    reqs = start_all(a, op)
    z = work(w)
    names = list(reqs)[::-1]
    done = dict(zip(names, mpx.waitall([reqs[n] for n in names])))
    return done, blocking_all(a, op), z


def check_all(out, blocking, dtype, later):
    ref = expected(dtype)
    for name, want in ref.items():
        if name in ("isend", "ibarrier"):
            later.true(out[name] is None, f"{name} returns None")
            continue
        if name == "ineighbor_exchange":
            for k in range(2):
                later.check(out[name][k], want[k], f"{name}[{k}]")
                later.true(all(d.platform == "gpu"
                               for d in out[name][k].devices()), name)
            continue
        later.check(out[name], want, name)
        later.true(all(d.platform == "gpu" for d in out[name].devices()),
                   f"{name} on the GPU")
        if name in blocking:
            later.check(out[name], np.asarray(blocking[name]),
                        f"{name} against the blocking op")


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_every_start_in_one_program(dtype):
    """All 19 starts in flight at once in one jitted program on GPU arrays,
    a GPU computation between starts and waits; every result against NumPy
    and the blocking op, on every rank."""
    _, op = op_for(dtype)
    a = inputs(dtype)
    w = weights()
    out, blocking, z = jax.jit(lambda a, w: every_start(a, w, op))(a, w)
    later = Later()
    check_all(out, blocking, dtype, later)
    # (loose: XLA may fuse the products differently in the bigger program)
    later.close(z, work(w), "the computation between start and wait",
                rtol=1e-3, atol=1e-4)
    later.done()


@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=str)
def test_every_start_eager(dtype):
    """Outside jit: each start and each wait a GPU program of its own (the
    wait finds its request by the addresses of the arrays it is handed)."""
    _, op = op_for(dtype)
    a = inputs(dtype)
    reqs = start_all(a, op)
    z = work(weights())
    names = list(reqs)[::-1]
    out = dict(zip(names, [mpx.wait(reqs[n]) for n in names]))
    blocking = blocking_all(a, op)
    later = Later()
    check_all(out, blocking, dtype, later)
    later.true(np.isfinite(np.asarray(z)).all(), "the computation ran")
    later.done()


def test_ihalo_exchange_and_ineighbor_alltoallv():
    """The starts made of ineighbor_exchange requests, on a ring (at 1
    rank a block is its own neighbour), with GPU work in flight."""
    h = on_gpu(data(RANK, (4, 2), np.float32, seed=1))
    n = on_gpu(data(RANK, (3, 2), np.int32, seed=2))
    H = all_data((4, 2), np.float32, seed=1)
    N = all_data((3, 2), np.int32, seed=2)
    w = weights()

    def f(h, n, w):
        rh = mpx.ihalo_exchange(h, WORLD_CART, 1)
        # one row to the left neighbour, two to the right one
        rn = mpx.ineighbor_alltoallv(n, [1, 2], [2, 1], comm=WORLD_CART)
        z = work(w)
        return mpx.wait(rh), mpx.wait(rn), z, (
            mpx.halo_exchange(h, WORLD_CART, 1),
            mpx.neighbor_alltoallv(n, [1, 2], [2, 1], comm=WORLD_CART))

    halo, nbr, z, (bhalo, bnbr) = jax.jit(f)(h, n, w)
    later = Later()
    later.check(on_gpu(halo), np.concatenate([H[LEFT][2:3], H[RANK][1:3],
                                              H[RIGHT][1:2]]), "halo")
    later.check(on_gpu(nbr), np.concatenate([N[LEFT][1:3], N[RIGHT][:1]]),
                "neighbours")
    later.check(halo, np.asarray(bhalo), "halo against halo_exchange")
    later.check(nbr, np.asarray(bnbr), "against neighbor_alltoallv")
    later.done()


def test_line_both_ways_and_proc_null():
    """Up and down a non-periodic line at once (directions differ at every
    rank count; PROC_NULL at the ends gives zeros), different shapes each
    way."""
    a = on_gpu(data(RANK, (5, 3), np.float32, seed=1))
    b = on_gpu(data(RANK, (7,), np.int64, seed=2))

    def f(a, b, w):
        up = mpx.isendrecv(a, a, DOWN, UP, sendtag=1, recvtag=1)
        down = mpx.isendrecv(b, b, UP, DOWN, sendtag=2, recvtag=2)
        z = work(w)
        return mpx.wait(up), mpx.wait(down), z

    up, down, _ = jax.jit(f)(a, b, weights())
    later = Later()
    later.check(on_gpu(up), on_line(DOWN, (5, 3), np.float32, seed=1), "up")
    later.check(on_gpu(down), on_line(UP, (7,), np.int64, seed=2), "down")
    later.done()


@pytest.mark.parametrize("n", [3, 1 << 20, 8 << 20], ids=["12B", "4MiB",
                                                          "32MiB"])
def test_fori_loop_ring_with_compute(n):
    """A loop carrying x: each step starts a ring shift of x and an
    allreduce, computes on the GPU, waits and combines: the requests'
    buffers are loop-carried and reused every step."""
    x = on_gpu(jnp.arange(n, dtype=jnp.float32) % 7 + RANK)
    w = weights()

    def body(i, c):
        x, z = c
        r = mpx.isendrecv(x, x, LEFT, RIGHT)
        s = mpx.iallreduce(x, MPI.SUM)
        z = jnp.tanh(z @ w)
        return mpx.wait(r) + 0 * mpx.wait(s)[0], z

    steps = 3
    y, _ = jax.jit(lambda x, w: lax.fori_loop(0, steps, body, (x, w)))(x, w)
    # after k ring shifts rank r holds the data of rank r - k
    ref = np.arange(n, dtype=np.float32) % 7 + (RANK - steps) % SIZE
    check(on_gpu(y), ref)


def test_input_changed_and_donated_while_in_flight():
    """The program overwrites the send buffer's input after the start and
    the receive template is used again: the request keeps its own buffers
    (XLA copies them), so the messages are the values at the start."""
    x = on_gpu(data(RANK, (1000,), np.float32))
    X = all_data((1000,), np.float32)

    def f(x, w):
        r = mpx.isendrecv(x, x, LEFT, RIGHT)
        x2 = x * 2 + 1           # x read again after the start
        z = work(w)
        t = jnp.zeros_like(x)
        q = mpx.irecv(t, RIGHT, tag=4)
        s = mpx.isend(x2, LEFT, tag=4)
        y = mpx.wait(r)
        v = mpx.wait(q)
        mpx.wait(s)
        return y, v, t + 1, x2, z

    y, v, t1, x2, _ = jax.jit(f, donate_argnums=0)(x, weights())
    later = Later()
    later.check(on_gpu(y), X[LEFT], "message sent before the input changed")
    later.check(on_gpu(v), X[RIGHT] * 2 + 1, "the changed input")
    later.check(t1, np.ones(1000, np.float32), "the template reused")
    later.check(x2, X[RANK] * 2 + 1, "x2")
    later.done()


def test_many_requests_in_flight():
    """Forty requests in flight at once, each owning its pinned buffer
    until its wait, waited in the reverse order."""
    xs = [on_gpu(data(RANK, (64,), np.float32, seed=k)) for k in range(40)]

    def f(*xs):
        reqs = [mpx.isendrecv(x, x, LEFT, RIGHT, sendtag=k, recvtag=k)
                for k, x in enumerate(xs)]
        return mpx.waitall(reqs[::-1])[::-1]

    ys = jax.jit(f)(*xs)
    later = Later()
    for k, y in enumerate(ys):
        later.check(on_gpu(y), data(LEFT, (64,), np.float32, seed=k), str(k))
    later.done()


def test_grad_and_jvp_match_blocking():
    """Reverse and forward mode through GPU requests equal the blocking
    ops' derivatives (the backward requests are GPU requests too)."""
    x = on_gpu(jnp.asarray([0.5, -1.0, 2.0]) + RANK)
    wv = jnp.asarray([1.0, 2.0, 3.0]) * (RANK + 1)

    def nb(a):
        r = mpx.isendrecv(a, a, LEFT, RIGHT)
        s = mpx.iallreduce(a * a, MPI.SUM, adjoint="sum")
        b = mpx.ibcast(a, ROOT)
        return jnp.sum(wv * (mpx.wait(r) + mpx.wait(s) + mpx.wait(b)))

    def bl(a):
        return jnp.sum(wv * (mpx.sendrecv(a, a, LEFT, RIGHT)
                             + mpx.allreduce(a * a, MPI.SUM, adjoint="sum")
                             + mpx.bcast(a, ROOT)))

    g_nb = jax.jit(jax.grad(nb))(x)
    g_bl = jax.jit(jax.grad(bl))(x)
    t = jnp.asarray([1.0, -0.5, 0.25])
    j_nb = jax.jit(lambda a: jax.jvp(nb, (a,), (t,)))(x)
    j_bl = jax.jit(lambda a: jax.jvp(bl, (a,), (t,)))(x)
    later = Later()
    later.close(on_gpu(g_nb), np.asarray(g_bl), "grad", rtol=1e-6)
    later.close(j_nb[1], np.asarray(j_bl[1]), "jvp", rtol=1e-6)
    # the ring's cotangent comes back from the right neighbour
    g_ring = jax.jit(jax.grad(lambda a: jnp.sum(
        wv * mpx.wait(mpx.isendrecv(a, a, LEFT, RIGHT)))))(x)
    later.close(g_ring, np.asarray([1.0, 2.0, 3.0]) * (RIGHT + 1), "ring")
    later.done()


def test_vmap_equals_loop():
    """vmap starts one request for the batch: equal to a loop of single
    requests, for a point-to-point and a rooted start."""
    xs = on_gpu(jnp.stack([data(RANK, (4,), np.float32, seed=k)
                           for k in range(3)]))
    f = lambda a: mpx.wait(mpx.isendrecv(a, a, LEFT, RIGHT))
    g = lambda a: mpx.wait(mpx.igather(a, ROOT))
    vf = jax.jit(jax.vmap(f))(xs)
    vg = jax.jit(jax.vmap(g))(xs)
    lf = jnp.stack([jax.jit(f)(xs[k]) for k in range(3)])
    lg = jnp.stack([jax.jit(g)(xs[k]) for k in range(3)])
    later = Later()
    later.check(on_gpu(vf), np.asarray(lf), "isendrecv")
    later.check(on_gpu(vg), np.asarray(lg), "igather")
    later.check(vf, np.stack([data(LEFT, (4,), np.float32, seed=k)
                              for k in range(3)]), "against NumPy")
    later.done()


def test_staging_returned_to_the_cache():
    """A request's pinned buffer goes back to the cache at its wait: the
    same program run again allocates nothing."""
    x = on_gpu(jnp.ones((256, 1024), jnp.float32) * (RANK + 1))  # 1 MiB
    f = jax.jit(lambda a: mpx.wait(mpx.isendrecv(a, a, LEFT, RIGHT)))
    jax.block_until_ready(f(x))
    before = CORE.cuda_staging_stats()
    for _ in range(10):
        y = f(x)
    check(on_gpu(y), np.full((256, 1024), LEFT + 1, np.float32))
    after = CORE.cuda_staging_stats()
    assert after["allocs"] == before["allocs"], (before, after)


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
    """Device pointers straight to MPI, every start (float16 reductions stay
    staged)."""
    CORE.lib.jaxmpi_cuda_configure(1, 0)
    try:
        assert CORE.cuda_aware_mode
        test_every_start_in_one_program(np.dtype(np.float32))
        test_every_start_in_one_program(np.dtype(np.float16))
        test_line_both_ways_and_proc_null()
    finally:
        CORE.lib.jaxmpi_cuda_configure(0, 0)
