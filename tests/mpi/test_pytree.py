"""Pytrees of arrays in every blocking operation (_pytree.py): the same
structure back, one MPI call per dtype, values against NumPy on every rank
for every op, gradients (a data-parallel step of a model with float32,
bfloat16 and float64 parameters, scalars and an empty leaf) and vmap
through the pytree layer, both APIs, and clear errors for what is still
wrong. Few compilations: one jitted program runs every op."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import RANK, SIZE, bfloat16
from util import LEFT, RIGHT

# The suites this file belongs to (tests/suites.py).
SUITES = ("across_hosts",)

# send/recv: rank 0 sends first, the others receive first (a chain, no
# deadlock at any size); one rank talks to nobody.
P2P_DEST = RIGHT if SIZE > 1 else MPI.PROC_NULL
P2P_SOURCE = LEFT if SIZE > 1 else MPI.PROC_NULL


def tree_np(r, lead=None):
    """Rank r's tree: mixed dtypes and shapes, a scalar, an empty leaf, a
    nested tuple. lead: give every leaf this leading axis (scatter's and
    alltoall's rank axis)."""
    def a(shape, dtype, seed):
        shape = shape if lead is None else (lead, *shape)
        n = int(np.prod(shape, dtype=int))
        vals = (np.arange(n) * 3 + seed * 7 + r * 11) % 23 - 9
        return vals.reshape(shape).astype(dtype)

    return {
        "dense": {"w": a((3, 4), np.float32, 1), "b": a((4,), np.float32, 2)},
        "emb": a((5, 2), bfloat16, 3),
        "scale": a((), np.float64, 4),
        "empty": a((0, 3), np.float32, 5),
        "count": a((2,), np.int32, 6),
        "pair": (a((2, 2), np.float64, 7), a((), np.float32, 8)),
    }


def to_jax(t):
    return jax.tree.map(jnp.asarray, t)


def leaves(t):
    return jax.tree.leaves(t)


def stack(ts):
    return jax.tree.map(lambda *xs: np.stack(xs), *ts)


RTOL = {bfloat16: 2e-2, np.dtype(np.float32): 1e-6}


def close(got, want, what):
    """Same structure, dtypes and shapes; values exact but for bfloat16."""
    gl, gdef = jax.tree.flatten(got)
    wl, wdef = jax.tree.flatten(want)
    assert gdef == wdef, f"{what}: structure {gdef} != {wdef}"
    for i, (g, w) in enumerate(zip(gl, wl)):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (
            f"{what} leaf {i}: {g.dtype}{g.shape} != {w.dtype}{w.shape}")
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=RTOL.get(w.dtype, 1e-12),
                                   err_msg=f"{what} leaf {i}")


ALL = [tree_np(r) for r in range(SIZE)]
ROWS = [tree_np(r, lead=SIZE) for r in range(SIZE)]
MINE, MY_ROWS = ALL[RANK], ROWS[RANK]


def _programs(t, rows, template):
    out = {
        "allreduce": mpx.allreduce(t, MPI.SUM),
        "reduce": mpx.reduce(t, MPI.SUM, 0),
        "scan": mpx.scan(t, MPI.SUM),
        "bcast": mpx.bcast(t, SIZE - 1),
        "gather": mpx.gather(t, SIZE - 1),
        "allgather": mpx.allgather(t),
        "scatter": mpx.scatter(rows if RANK == 0 else template, 0),
        "alltoall": mpx.alltoall(rows),
        "sendrecv": mpx.sendrecv(t, t, source=LEFT, dest=RIGHT),
    }
    if RANK == 0:
        mpx.send(t, P2P_DEST, tag=3)
        out["recv"] = mpx.recv(t, P2P_SOURCE, tag=3)
    else:
        out["recv"] = mpx.recv(t, P2P_SOURCE, tag=3)
        mpx.send(t, P2P_DEST, tag=3)
    # vmap: a batch of two trees, one call per dtype for the batch.
    batch = jax.tree.map(lambda x: jnp.stack([x, 2 * x]), t)
    out["vmap_allreduce"] = jax.vmap(lambda u: mpx.allreduce(u, MPI.SUM))(batch)
    out["vmap_allgather"] = jax.vmap(mpx.allgather)(batch)
    return out


def _expected():
    def red(ts):
        return jax.tree.map(lambda *xs: np.sum(np.stack(xs), axis=0)
                            .astype(xs[0].dtype), *ts)

    def twice(t):
        return jax.tree.map(lambda x: np.stack([x, (2 * x).astype(x.dtype)]), t)

    p2p = ALL[P2P_SOURCE] if SIZE > 1 else jax.tree.map(np.zeros_like, MINE)
    return {
        "allreduce": red(ALL),
        "reduce": red(ALL) if RANK == 0 else MINE,
        "scan": red(ALL[:RANK + 1]),
        "bcast": ALL[SIZE - 1],
        "gather": stack(ALL) if RANK == SIZE - 1 else MINE,
        "allgather": stack(ALL),
        "scatter": jax.tree.map(lambda x: x[RANK], ROWS[0]),
        "alltoall": stack([jax.tree.map(lambda x: x[RANK], ROWS[j])
                           for j in range(SIZE)]),
        "sendrecv": ALL[LEFT],
        "recv": p2p,
        "vmap_allreduce": twice(red(ALL)),
        "vmap_allgather": jax.tree.map(
            lambda *xs: np.stack([np.stack(xs), np.stack(xs) * 2])
            .astype(xs[0].dtype), *ALL),
    }


def test_every_op_jit():
    template = jax.tree.map(lambda x: jnp.zeros(x.shape[1:], x.dtype), MY_ROWS)
    got = jax.jit(_programs)(to_jax(MINE), to_jax(MY_ROWS), template)
    want = _expected()
    assert set(got) == set(want)
    for op in want:
        close(got[op], want[op], op)


def test_eager_and_token_api():
    t = to_jax(MINE)
    y = mpx.allreduce(t, MPI.SUM)
    (z, token) = jaxmpi.allgather(t)
    b, token2 = jaxmpi.bcast(t, 0, token=token)
    b_last = mpx.bcast(t, SIZE - 1)  # another root: another cached program
    g = mpx.gather(t, 0)
    s = jaxmpi.send(t, MPI.PROC_NULL)
    r, _ = jaxmpi.recv(t, MPI.PROC_NULL)
    floats = mpx.allreduce([1.0 + RANK, np.int32(RANK)], MPI.SUM)
    want = _expected()
    close(y, want["allreduce"], "eager allreduce")
    close(z, want["allgather"], "token allgather")
    close(b, ALL[0], "token bcast")
    close(b_last, ALL[SIZE - 1], "eager bcast from the last rank")
    close(r, jax.tree.map(np.zeros_like, MINE), "recv from PROC_NULL")
    assert jaxmpi._validate.is_token(token2) and jaxmpi._validate.is_token(s)
    close(g, stack(ALL) if RANK == 0 else MINE, "eager gather")
    assert isinstance(floats, list) and len(floats) == 2
    assert float(floats[0]) == SIZE * (SIZE + 1) / 2
    assert int(floats[1]) == SIZE * (SIZE - 1) // 2
    assert mpx.allreduce({}, MPI.SUM) == {}
    assert mpx.allreduce([None, ()], MPI.SUM) == [None, ()]
    assert mpx.send({}, P2P_DEST) is None
    assert jaxmpi._validate.is_token(jaxmpi.send({}, P2P_DEST))


try:
    from jax.extend.core import jaxprs_in_params
except ImportError:  # older JAX
    from jax.core import jaxprs_in_params


def _count(jaxpr, name):
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == name
        for sub in jaxprs_in_params(eqn.params):
            n += _count(sub, name)
    return n


def test_one_call_per_dtype():
    """A tree of 4 dtypes (float32, bfloat16, float64, int32) in 8 leaves:
    4 MPI calls, for a 100-leaf float32 tree 1."""
    t = to_jax(MINE)
    jx = jax.make_jaxpr(lambda t: mpx.allreduce(t, MPI.SUM))(t).jaxpr
    assert _count(jx, "jaxmpi_allreduce") == 4
    big = [jnp.ones((i % 5 + 1,), jnp.float32) for i in range(100)]
    jx = jax.make_jaxpr(lambda t: mpx.allreduce(t, MPI.SUM))(big).jaxpr
    assert _count(jx, "jaxmpi_allreduce") == 1
    jx = jax.make_jaxpr(lambda t: mpx.sendrecv(t, t, LEFT, RIGHT))(t).jaxpr
    assert _count(jx, "jaxmpi_sendrecv") == 4


# ---- gradients ---------------------------------------------------------------
# A linear model with parameters of three dtypes; rank r's data X_r, Y_r.
# Data-parallel step: each rank's gradient of its local loss, averaged over
# ranks with one pytree allreduce; the reference is the per-leaf NumPy
# gradient of the mean of the ranks' losses.
N_IN, N_OUT, BATCH = 4, 3, 5


def params_np():
    return {
        "w": (np.arange(N_IN * N_OUT).reshape(N_IN, N_OUT) % 5 - 2)
        .astype(np.float32) / 4,
        "b": np.array([0.5, -1.0, 0.25], np.float32),
        "emb": (np.arange(6).reshape(3, 2) % 4 - 1).astype(bfloat16),
        "scale": np.float64(1.5),
        "empty": np.zeros((0, 2), np.float32),
    }


def data_np(r):
    x = ((np.arange(BATCH * N_IN).reshape(BATCH, N_IN) * 5 + r * 3) % 7 - 3
         ).astype(np.float32) / 2
    y = ((np.arange(BATCH * N_OUT).reshape(BATCH, N_OUT) + r) % 3
         ).astype(np.float32)
    e = ((np.arange(6).reshape(3, 2) + r) % 3).astype(bfloat16)
    return x, y, e


def local_loss(p, x, y, e):
    res = x @ p["w"] + p["b"] - y
    return (0.5 * jnp.sum(res ** 2)
            + jnp.sum(((p["emb"] - e) ** 2).astype(jnp.float32))
            + (p["scale"] * jnp.sum(res)).astype(jnp.float32)
            + jnp.sum(p["empty"]))


def ref_grad(r):
    p = params_np()
    x, y, e = data_np(r)
    res = x.astype(np.float64) @ p["w"] + p["b"] - y
    dres = res + p["scale"]
    return {"w": (x.T @ dres).astype(np.float32),
            "b": dres.sum(0).astype(np.float32),
            "emb": (2 * (p["emb"].astype(np.float64) - e.astype(np.float64))
                    ).astype(bfloat16),
            "scale": np.float64(res.sum()),
            "empty": np.zeros((0, 2), np.float32)}


def _grad_programs(p, data, c):
    x, y, e = data
    # 1. data-parallel: local gradients, averaged in one call per dtype.
    g = jax.grad(local_loss)(p, x, y, e)
    avg = jax.tree.map(lambda s: s / SIZE, mpx.allreduce(g, MPI.SUM))
    # 2. the transpose through the pytree layer: the exact adjoint of
    # allreduce sums every rank's cotangent c_r into each rank's gradient.
    def through(q):
        s = mpx.allreduce(q, MPI.SUM, adjoint="sum")
        return sum(jnp.sum((u * v).astype(jnp.float32))
                   for u, v in zip(leaves(s), leaves(c)))
    g_sum = jax.grad(through)(p)
    # 3. sendrecv to the right: the gradient comes back from the right.
    g_shift = jax.grad(lambda q: sum(
        jnp.sum((u * v).astype(jnp.float32)) for u, v in zip(
            leaves(mpx.sendrecv(q, q, LEFT, RIGHT)), leaves(c))))(p)
    # 4. JVP through allgather: the tangents are gathered as the values.
    _, tan = jax.jvp(mpx.allgather, (p,), (c,))
    return avg, g_sum, g_shift, tan


def test_gradients_data_parallel():
    p = to_jax(params_np())
    cs = [jax.tree.map(lambda v, r=r: (np.ones_like(v) * (r + 1)).astype(v.dtype),
                       params_np()) for r in range(SIZE)]
    x, y, e = data_np(RANK)
    avg, g_sum, g_shift, tan = jax.jit(_grad_programs)(
        p, (jnp.asarray(x), jnp.asarray(y), jnp.asarray(e)), to_jax(cs[RANK]))
    grads = [ref_grad(r) for r in range(SIZE)]
    want_avg = jax.tree.map(
        lambda *gs: (np.sum(np.stack(gs).astype(np.float64), 0) / SIZE)
        .astype(gs[0].dtype), *grads)
    close(avg, want_avg, "data-parallel averaged gradient")
    close(g_sum, jax.tree.map(lambda *xs: np.sum(np.stack(xs), 0)
                              .astype(xs[0].dtype), *cs), "adjoint='sum'")
    close(g_shift, cs[RIGHT], "sendrecv transpose")
    close(tan, stack(cs), "allgather JVP")


# ---- what is still an error --------------------------------------------------
X = jnp.arange(SIZE * 2, dtype=jnp.float32).reshape(SIZE, 2)


def test_leaf_errors_name_the_path():
    with pytest.raises(TypeError, match=r"^allreduce: x\['b'\]\[1\] must be "
                       r"an array, got str: 'no'"):
        mpx.allreduce({"a": X, "b": [X, "no"]}, MPI.SUM)
    token = jax.lax.create_token()
    with pytest.raises(TypeError, match=r"^bcast: x\['t'\] must be an array, "
                       r"got .*This is a token"):
        mpx.bcast({"w": X, "t": token}, 0)
    with pytest.raises(TypeError, match=r"^sendrecv: recvbuf\[0\] has dtype "
                       r"<U1, which jaxmpi does not support"):
        mpx.sendrecv([X], [np.array(["a"])], LEFT, RIGHT)


def test_rank_axis_errors():
    with pytest.raises(ValueError, match=r"^alltoall: the leaves of x must "
                       r"have the same leading dimension \(the rank axis\), "
                       r"got x\[0\] \(%d, 2\), x\[1\] \(%d,\)" % (SIZE, SIZE + 1)):
        mpx.alltoall([X, jnp.zeros(SIZE + 1)])
    with pytest.raises(ValueError, match=r"^alltoall: x\[1\] is a scalar"):
        mpx.alltoall([X, jnp.float32(1)])
    with pytest.raises(ValueError, match=r"^alltoall: x must have leading "
                       r"dimension equal to the communicator size"):
        mpx.alltoall([jnp.zeros((SIZE + 1, 2)), jnp.zeros(SIZE + 1)])


def test_template_mismatch_errors():
    with pytest.raises(ValueError, match=r"^sendrecv: sendbuf and recvbuf must "
                       r"hold leaves of the same dtypes \(one message per "
                       r"dtype\), got sendbuf: \['float32'\], recvbuf: "
                       r"\['float32', 'int32'\]"):
        mpx.sendrecv({"a": X}, {"a": X, "n": jnp.int32(0)}, LEFT, RIGHT)
    with pytest.raises(ValueError, match=r"^recv: a pytree of 2 dtypes "
                       r"\(float32, int32\) is received as one message per "
                       r"dtype; from MPI.ANY_SOURCE"):
        mpx.recv([X, jnp.int32(0)])
    with pytest.raises(ValueError, match=r"^sendrecv: a pytree of 2 dtypes"):
        mpx.sendrecv([X, jnp.int32(0)], [X, jnp.int32(0)], MPI.ANY_SOURCE,
                     RIGHT)


def test_nonblocking_rejects_pytrees():
    """The non-blocking operations take one array (one request per array);
    the message says so and points to the blocking operations."""
    for call, fn in ((lambda: mpx.iallreduce({"a": X}, MPI.SUM), "iallreduce"),
                     (lambda: mpx.ibcast([X, X], 0), "ibcast"),
                     (lambda: mpx.isend((X,), MPI.PROC_NULL), "isend")):
        with pytest.raises(TypeError, match=rf"^{fn}: x must be an array, got "
                           rf".*{fn} takes one array here; pytrees .* are "
                           r"accepted by the blocking operations"):
            call()
