"""Gradients, JVPs and vmap of every op, compared with a single-process
reference: the global function of all ranks' inputs, written in plain JAX,
differentiated in one process. Cotangents and tangents differ per rank."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.test_util import check_grads
from mpi4py import MPI

from jaxmpi import notoken as mpx
from util import DOWN, LEFT, RANK, RIGHT, SIZE, UP, Later

# The suites this file belongs to (tests/suites.py).
SUITES = ("across_hosts",)


def _below(X, r):
    """Rank r's input on the line going up: rank r - 1's, zeros at 0."""
    return X[r - 1] if r > 0 else jnp.zeros_like(X[r])


def _above(X, r):
    return X[r + 1] if r < SIZE - 1 else jnp.zeros_like(X[r])
SHAPE = (3,)
F = jnp.float64


def inputs(shape=SHAPE, seed=0):
    """Every rank's input (rank r: row r), distinct values."""
    n = int(np.prod(shape))
    base = np.arange(SIZE * n, dtype=np.float64).reshape(SIZE, *shape)
    return jnp.asarray(np.sin(base * 1.3 + seed) * 3 + 0.1 * seed)


def weights(shape):
    """Rank-dependent cotangents: rank r seeds r + 1 + position."""
    return [jnp.asarray((r + 1.0) + np.arange(int(np.prod(shape)), dtype=float)
                        .reshape(shape) * 0.5) for r in range(SIZE)]


# op name -> (local jaxmpi function of this rank's x, global reference
# mapping all ranks' inputs (list) to all ranks' outputs (list), input shape
# per rank)
def _cases():
    root = SIZE - 1
    return {
        "allreduce_sum": (lambda x: mpx.allreduce(x, MPI.SUM, adjoint="sum"),
                          lambda X: [sum(X)] * SIZE, lambda r: SHAPE),
        "reduce": (lambda x: mpx.reduce(x, MPI.SUM, root),
                   lambda X: [sum(X) if r == root else X[r] for r in range(SIZE)],
                   lambda r: SHAPE),
        "scan": (lambda x: mpx.scan(x, MPI.SUM),
                 lambda X: [sum(X[: r + 1]) for r in range(SIZE)], lambda r: SHAPE),
        "bcast": (lambda x: mpx.bcast(x, root), lambda X: [X[root]] * SIZE,
                  lambda r: SHAPE),
        "gather": (lambda x: mpx.gather(x, root),
                   lambda X: [jnp.stack(X) if r == root else X[r]
                              for r in range(SIZE)], lambda r: SHAPE),
        "scatter": (lambda x: mpx.scatter(x, root),
                    lambda X: [X[root][r] for r in range(SIZE)],
                    lambda r: (SIZE, *SHAPE) if r == root else SHAPE),
        "allgather": (mpx.allgather, lambda X: [jnp.stack(X)] * SIZE,
                      lambda r: SHAPE),
        "alltoall": (mpx.alltoall,
                     lambda X: [jnp.stack([X[s][r] for s in range(SIZE)])
                                for r in range(SIZE)],
                     lambda r: (SIZE, *SHAPE)),
        "sendrecv": (lambda x: mpx.sendrecv(x, x, LEFT, RIGHT, sendtag=4, recvtag=4),
                     lambda X: [X[(r - 1) % SIZE] for r in range(SIZE)],
                     lambda r: SHAPE),
        "sendrecv_anytag": (lambda x: mpx.sendrecv(x, x, LEFT, RIGHT, sendtag=3),
                     lambda X: [X[(r - 1) % SIZE] for r in range(SIZE)],
                     lambda r: SHAPE),
        "sendrecv_shift": (
            lambda x: mpx.sendrecv(x, x, DOWN, UP, sendtag=6, recvtag=6),
            lambda X: [_below(X, r) for r in range(SIZE)], lambda r: SHAPE),
        "neighbor_exchange_shift": (
            _exchange_shift,
            lambda X: [jnp.concatenate([_below(X, r), 2 * _above(X, r)[:2]])
                       for r in range(SIZE)], lambda r: SHAPE),
        "send_recv_shift": (
            _send_recv_shift, lambda X: [_below(X, r) for r in range(SIZE)],
            lambda r: SHAPE),
        "neighbor_exchange": (
            _exchange,
            lambda X: [jnp.concatenate([X[(r - 1) % SIZE],
                                        2 * X[(r + 1) % SIZE][:2]])
                       for r in range(SIZE)], lambda r: SHAPE),
        "send_recv": (_send_recv_ring,
                      lambda X: [X[(r - 1) % SIZE] if SIZE > 1 else X[r]
                                 for r in range(SIZE)], lambda r: SHAPE),
        "allreduce_max": (lambda x: mpx.allreduce(x, MPI.MAX, adjoint="sum"),
                          lambda X: [jnp.max(jnp.stack(X), axis=0)] * SIZE,
                          lambda r: SHAPE),
        "allreduce_min": (lambda x: mpx.allreduce(x, MPI.MIN, adjoint="sum"),
                          lambda X: [jnp.min(jnp.stack(X), axis=0)] * SIZE,
                          lambda r: SHAPE),
        "allreduce_prod": (lambda x: mpx.allreduce(x, MPI.PROD, adjoint="sum"),
                           lambda X: [jnp.prod(jnp.stack(X), axis=0)] * SIZE,
                           lambda r: SHAPE),
    }


def _exchange(x):
    # Two pairs of different shapes: x to the right, 2 x[:2] to the left.
    a, b = mpx.neighbor_exchange([x, 2 * x[:2]], [x, x[:2]], [LEFT, RIGHT],
                                 [RIGHT, LEFT], tag=5)
    return jnp.concatenate([a, b])


def _exchange_shift(x):
    # x up the line, 2 x[:2] down it.
    a, b = mpx.neighbor_exchange([x, 2 * x[:2]], [x, x[:2]], [DOWN, UP],
                                 [UP, DOWN], tag=8)
    return jnp.concatenate([a, b])


def _send_recv_shift(x):
    # Receive from below, then send up: the message ripples up the line
    # (the transpose: receive from above, then send down).
    y = mpx.recv(x, DOWN, tag=9)
    mpx.send(x, UP, tag=9)
    return y


def _send_recv_ring(x):
    if SIZE == 1:
        return x
    if RANK % 2 == 0:
        mpx.send(x, RIGHT, tag=2)
        return mpx.recv(x, LEFT, tag=2)
    y = mpx.recv(x, LEFT, tag=2)
    mpx.send(x, RIGHT, tag=2)
    return y


CASES = list(_cases())


def _all_inputs(in_shape, seed=0):
    return [jnp.asarray(np.sin(np.arange(int(np.prod(in_shape(r))))
                               .reshape(in_shape(r)) * 1.7 + r * 2.3 + seed) * 3)
            for r in range(SIZE)]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", CASES)
def test_vjp_matches_global_reference(name, jit):
    local, glob, in_shape = _cases()[name]
    X = _all_inputs(in_shape)
    Y = glob(X)
    W = weights(Y[RANK].shape) if False else [weights(y.shape)[r] for r, y in enumerate(Y)]
    loss = lambda x: jnp.sum(W[RANK] * local(x))
    g = (jax.jit(jax.grad(loss)) if jit else jax.grad(loss))(X[RANK])
    ref = jax.grad(lambda X: sum(jnp.sum(w * y) for w, y in zip(W, glob(X))))(X)
    np.testing.assert_allclose(g, ref[RANK], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_jvp_matches_global_reference(name):
    local, glob, in_shape = _cases()[name]
    X = _all_inputs(in_shape)
    T = _all_inputs(in_shape, seed=5)
    y, t = jax.jit(lambda x, t: jax.jvp(local, (x,), (t,)))(X[RANK], T[RANK])
    Yr, Tr = jax.jvp(glob, (X,), (T,))
    np.testing.assert_allclose(y, Yr[RANK], rtol=1e-12)
    np.testing.assert_allclose(t, Tr[RANK], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", CASES)
def test_check_grads_forward(name):
    local, glob, in_shape = _cases()[name]
    check_grads(local, (_all_inputs(in_shape)[RANK],), order=1, modes=("fwd",))


LINEAR = [c for c in CASES if c.split("_")[-1] not in ("max", "min", "prod")]


@pytest.mark.parametrize("name", LINEAR)
def test_linear_transpose(name):
    local, glob, in_shape = _cases()[name]
    x = _all_inputs(in_shape)[RANK]
    ct = weights(local(x).shape)[RANK]
    (xt,) = jax.linear_transpose(local, x)(ct)
    # The explicit adjoint: the matrix A of the global map (every rank's
    # input to every rank's output, its columns the global reference on
    # unit inputs, plain JAX with no jaxmpi rule), A^T applied in NumPy to
    # every rank's cotangent.
    shapes = [in_shape(r) for r in range(SIZE)]
    offs = np.cumsum([0] + [int(np.prod(s)) for s in shapes])

    def flat_glob(v):
        X = [v[offs[r]:offs[r + 1]].reshape(shapes[r]) for r in range(SIZE)]
        return jnp.concatenate([jnp.ravel(y) for y in glob(X)])

    a_t = np.asarray(jax.vmap(flat_glob)(jnp.eye(int(offs[-1]))))  # row k: A e_k
    Y = glob(_all_inputs(in_shape))
    w = np.concatenate([np.ravel(weights(y.shape)[r]) for r, y in enumerate(Y)])
    ref = (a_t @ w)[offs[RANK]:offs[RANK + 1]].reshape(shapes[RANK])
    np.testing.assert_allclose(xt, ref, rtol=1e-12, atol=1e-12)


# Transposing twice gives back the op. Not for plain send/recv: a send has
# no result, so its transpose (a receive) has no local linear input, and
# transposing that again sees a constant (docs/autodiff.md).
@pytest.mark.parametrize("name", ["allreduce_sum", "reduce", "scan", "bcast",
                                  "gather", "scatter", "allgather", "alltoall",
                                  "sendrecv", "sendrecv_anytag",
                                  "neighbor_exchange", "sendrecv_shift",
                                  "neighbor_exchange_shift"])
def test_double_transpose(name):
    local, glob, in_shape = _cases()[name]
    x = _all_inputs(in_shape)[RANK]
    y = local(x)
    ct = weights(y.shape)[RANK]
    tt = jax.linear_transpose(jax.linear_transpose(local, x), ct)
    np.testing.assert_allclose(tt((x,))[0], y, rtol=1e-12)


def test_allreduce_default_convention_counts_replicated_once():
    x = inputs()[RANK]
    # mpi4jax's behaviour: grad(sum(allreduce(x))) is all ones.
    g1 = jax.grad(lambda x: jnp.sum(mpx.allreduce(x, MPI.SUM)))(x)
    # With a rank-dependent cotangent the exact adjoint sums them.
    w = weights(SHAPE)
    g2 = jax.grad(lambda x: jnp.sum(w[RANK] * mpx.allreduce(x, MPI.SUM)))(x)
    g3 = jax.grad(lambda x: jnp.sum(w[RANK] * mpx.allreduce(x, MPI.SUM,
                                                             adjoint="sum")))(x)
    np.testing.assert_array_equal(g1, np.ones(SHAPE))
    np.testing.assert_allclose(g2, w[RANK])
    np.testing.assert_allclose(g3, sum(w))


def test_max_ties_split_evenly():
    x = jnp.asarray([1.0, float(RANK), 7.0])  # element 0 and 2 tie everywhere
    g = jax.grad(lambda x: jnp.sum(mpx.allreduce(x, MPI.MAX)))(x)
    np.testing.assert_allclose(g, [1.0 / SIZE, 1.0 if RANK == SIZE - 1 else 0.0,
                                   1.0 / SIZE])


def test_prod_with_zeros():
    x = jnp.asarray([0.0 if RANK == 0 else 2.0, 3.0])
    g = jax.grad(lambda x: jnp.sum(mpx.allreduce(x, MPI.PROD, adjoint="sum")))(x)
    X = [jnp.asarray([0.0 if r == 0 else 2.0, 3.0]) for r in range(SIZE)]
    ref = jax.grad(lambda X: SIZE * jnp.sum(jnp.prod(jnp.stack(X), axis=0)))(X)
    np.testing.assert_allclose(g, ref[RANK])


def test_unsupported_op_gradient_is_clear():
    with pytest.raises(NotImplementedError, match=r"jaxmpi.reduce: derivatives "
                       r"are defined for MPI.SUM only, not MPI.MAX"):
        jax.grad(lambda x: jnp.sum(mpx.reduce(x, MPI.MAX, 0)))(jnp.ones(2))
    with pytest.raises(NotImplementedError, match=r"jaxmpi.sendrecv: derivatives "
                       r"through a receive with MPI.ANY_SOURCE are not supported"):
        jax.grad(lambda x: jnp.sum(mpx.sendrecv(x, x, MPI.ANY_SOURCE, RIGHT)))(
            jnp.ones(2))
    with pytest.raises(NotImplementedError, match=r"jaxmpi.recv: .*MPI.ANY_TAG"):
        jax.linear_transpose(lambda x: mpx.recv(x, LEFT), jnp.ones(2))(jnp.ones(2))


def test_jpi_example():
    """JPI's README example with mpi4jax's scatter shapes, on any size."""
    x = (jnp.arange(2 * SIZE, dtype=jnp.float32).reshape(SIZE, 2)
         if RANK == 0 else jnp.zeros(2, jnp.float32))

    def f(x):
        y = mpx.scatter(x, 0)
        if RANK == SIZE - 1:
            y = y * 2
        return jnp.sum(mpx.allreduce(y, MPI.SUM))

    vals = np.arange(2 * SIZE, dtype=np.float32).reshape(SIZE, 2)
    vals[-1] *= 2
    y = float(jax.jit(f)(x))
    g = jax.grad(f)(x)
    assert y == vals.sum()
    if RANK == 0:
        expected = np.ones((SIZE, 2), np.float32)
        expected[-1] = 2
        np.testing.assert_array_equal(g, expected)  # 4 ranks: [[1,1],[1,1],[1,1],[2,2]]
    else:
        np.testing.assert_array_equal(g, np.zeros(2, np.float32))


def test_grad_in_loops_and_hessian():
    def body_local(i, c):
        return jnp.sin(mpx.sendrecv(c, c, LEFT, RIGHT)) + mpx.allreduce(
            c, MPI.SUM, adjoint="sum") / SIZE

    def body_global(i, C):  # all ranks at once: C[r] is rank r's carry
        return jnp.sin(jnp.roll(C, 1, axis=0)) + jnp.sum(C, axis=0) / SIZE

    f = lambda x: jnp.sum(lax.fori_loop(0, 3, body_local, x) ** 2)
    X = inputs()
    g = jax.jit(jax.grad(f))(X[RANK])
    # Forward mode over the same loop: every rank moves along its own tangent.
    T = inputs(seed=3)
    _, t = jax.jvp(f, (X[RANK],), (T[RANK],))
    h = jax.hessian(lambda x: jnp.sum(mpx.allreduce(x, MPI.SUM) ** 3))(X[RANK])
    hs = jax.hessian(lambda x: jnp.sum(
        mpx.allreduce(x, MPI.SUM, adjoint="sum") ** 3))(X[RANK])
    jr = jax.jacrev(mpx.allgather)(X[RANK])
    jf = jax.jacfwd(mpx.allgather)(X[RANK])
    # References, after every communicating call.
    ref = jax.grad(lambda X: jnp.sum(lax.fori_loop(0, 3, body_global, X) ** 2))(X)
    _, tref = jax.jvp(lambda X: jnp.sum(lax.fori_loop(0, 3, body_global, X) ** 2,
                                        axis=1), (X,), (T,))
    # jax.hessian is jacfwd of jacrev, and jacfwd/jacrev seed every rank
    # with the same unit vector e_j at once. S = sum of all ranks' x.
    # Default convention: gradient 3 S^2 (the cotangent counted once); its
    # tangent along e_j on every rank is 6 S (SIZE e_j): H = diag(6 SIZE S).
    # adjoint="sum": gradient SIZE 3 S^2, H = diag(6 SIZE^2 S).
    S = np.sum(np.asarray(X), axis=0)
    # allgather: jacrev's cotangent e_(s,i) on every rank sums over the
    # ranks (reduce-scatter): d x_r = SIZE e_i where s = r, else 0; jacfwd:
    # every block s of the result moves with the tangent, J[s] = I.
    jr_ref = np.zeros((SIZE, 3, 3))
    jr_ref[RANK] = SIZE * np.eye(3)
    later = Later()
    later.close(g, ref[RANK], "grad", rtol=1e-10)
    later.close(t, tref[RANK], "jvp", rtol=1e-10)
    later.close(h, np.diag(6 * SIZE * S), "hessian", rtol=1e-12, atol=1e-12)
    later.close(hs, np.diag(6 * SIZE ** 2 * S), "hessian (adjoint=sum)",
                rtol=1e-12, atol=1e-12)
    later.equal(jr, jr_ref, "jacrev")
    later.equal(jf, np.broadcast_to(np.eye(3), (SIZE, 3, 3)), "jacfwd")
    later.done()


def test_distributed_cg_differentiated():
    # A = sum over ranks of A_r (SPD); matvec = allreduce(A_r @ x).
    n = 5
    rng = np.random.default_rng(0)
    parts = [rng.normal(size=(n, n)) for _ in range(SIZE)]
    parts = [p @ p.T / SIZE + np.eye(n) for p in parts]
    A_full = sum(parts)
    b = jnp.asarray(rng.normal(size=n))
    c = jnp.asarray(rng.normal(size=n))

    def loss(A_r, b):
        matvec = lambda v: mpx.allreduce(A_r @ v, MPI.SUM)
        x, _ = jax.scipy.sparse.linalg.cg(matvec, b, tol=1e-12)
        return jnp.dot(c, x)

    def ref(A, b):
        x, _ = jax.scipy.sparse.linalg.cg(lambda v: A @ v, b, tol=1e-12)
        return jnp.dot(c, x)

    val, (gA, gb) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(
        jnp.asarray(parts[RANK]), b)
    rval, (rA, rb) = jax.value_and_grad(ref, argnums=(0, 1))(jnp.asarray(A_full), b)
    np.testing.assert_allclose(val, rval, rtol=1e-8)
    np.testing.assert_allclose(gb, rb, rtol=1e-6)
    np.testing.assert_allclose(gA, rA, rtol=1e-6, atol=1e-9)


# ---- vmap -------------------------------------------------------------------

VMAP_CASES = ["allreduce_sum", "reduce", "scan", "bcast", "gather", "scatter",
              "allgather", "alltoall", "sendrecv", "send_recv",
              "neighbor_exchange", "sendrecv_shift", "send_recv_shift",
              "neighbor_exchange_shift"]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", VMAP_CASES)
def test_vmap_equals_loop(name, axis):
    local, glob, in_shape = _cases()[name]
    batch = [_all_inputs(in_shape, seed=s)[RANK] for s in range(4)]
    xs = jnp.stack(batch, axis=axis)
    ys = jax.jit(jax.vmap(local, in_axes=axis))(xs)
    one_by_one = [local(x) for x in batch]  # every call made, then compared
    Ys = [glob(_all_inputs(in_shape, seed=s))[RANK] for s in range(4)]
    later = Later()
    for i in range(len(batch)):
        later.close(ys[i], one_by_one[i], f"vmap vs loop [{i}]", rtol=1e-12)
        later.close(ys[i], Ys[i], f"vmap vs reference [{i}]", rtol=1e-12)
    later.done()


def test_vmap_sendrecv_different_in_axes():
    x = jnp.stack([inputs(seed=s)[RANK] for s in range(3)], axis=1)  # (3, B)
    t = jnp.zeros(SHAPE)
    ys = jax.vmap(lambda a, b: mpx.sendrecv(a, b, DOWN, UP), in_axes=(1, None))(x, t)
    # Only the template batched: one exchange, broadcast.
    tb = jnp.zeros((2, *SHAPE))
    zs = jax.vmap(lambda b: mpx.sendrecv(inputs()[RANK], b, DOWN, UP))(tb)
    later = Later()
    for i in range(3):
        later.close(ys[i], _below(inputs(seed=i), RANK))
    later.close(zs, np.broadcast_to(_below(inputs(), RANK), (2, *SHAPE)))
    later.done()


@pytest.mark.parametrize("name", ["reduce", "bcast", "gather", "scatter",
                                  "neighbor_exchange", "sendrecv_shift",
                                  "neighbor_exchange_shift"])
def test_vmap_of_grad_rooted_and_exchange(name):
    # Where a rooted op delivers nothing its result is x passed through, so
    # every rank's cotangents are batched alike.
    local, glob, in_shape = _cases()[name]
    loss = jax.grad(lambda x: jnp.sum(jnp.sin(local(x))))
    xs = jnp.stack([_all_inputs(in_shape, seed=s)[RANK] for s in range(3)])
    g = jax.jit(jax.vmap(loss))(xs)
    one_by_one = [loss(xs[i]) for i in range(3)]  # every call, then compare
    # The global reference: every rank's loss summed, differentiated in one
    # process (a rank whose rule is wrong fails here alone: the others must
    # not wait for it).
    refs = [jax.grad(lambda X: sum(jnp.sum(jnp.sin(y)) for y in glob(X)))(
        _all_inputs(in_shape, seed=s))[RANK] for s in range(3)]
    later = Later()
    for i in range(3):
        later.close(g[i], one_by_one[i], f"vmap vs loop [{i}]", rtol=1e-12)
        later.close(g[i], refs[i], f"vs reference [{i}]", rtol=1e-12,
                    atol=1e-12)
    later.done()


def test_vmap_of_grad():
    x = jnp.stack([inputs(seed=s)[RANK] for s in range(3)])
    g = jax.vmap(jax.grad(lambda x: jnp.sum(mpx.allgather(x) ** 2)))(x)
    gs = [jax.grad(lambda x: jnp.sum(mpx.allgather(x) ** 2))(x[i])
          for i in range(3)]
    # d/dx_r sum_s sum(x_s^2) summed over every rank's cotangent: 2 SIZE x_r.
    later = Later()
    for i in range(3):
        later.close(g[i], gs[i], f"vmap vs loop [{i}]", rtol=1e-12)
        later.close(g[i], 2 * SIZE * np.asarray(x[i]), f"reference [{i}]",
                    rtol=1e-12)
    later.done()


def test_vmap_neighbor_exchange_mixed_batching():
    # One buffer batched, the other not: both travel once, batched.
    xs = jnp.stack([inputs(seed=s)[RANK] for s in range(3)], axis=1)  # (3, B)
    c = inputs(seed=7)[RANK]

    def f(a):
        return mpx.neighbor_exchange([a, c], [a, c], [LEFT, RIGHT],
                                     [RIGHT, LEFT])

    ys, zs = jax.vmap(f, in_axes=1)(xs)
    for i in range(3):  # no call below: plain asserts cannot strand a peer
        np.testing.assert_allclose(ys[i], inputs(seed=i)[LEFT])
        np.testing.assert_allclose(zs[i], inputs(seed=7)[RIGHT])


@pytest.mark.skipif(SIZE < 2, reason="needs 2 ranks")
def test_zero_template_that_carries_the_dependency():
    # docs/autodiff.md: a receiver's template computed from the
    # differentiated input (x * 0) lets both ends differentiate the message.
    def f(x):
        if RANK == 0:
            mpx.send(x * 2, 1, tag=1)
            return jnp.sum(x)
        if RANK == 1:
            return jnp.sum(mpx.recv(x * 0, 0, tag=1) * x)
        return jnp.sum(x)

    xs = _all_inputs(lambda r: SHAPE)
    g = jax.grad(f)(xs[RANK])
    _, t = jax.jvp(f, (xs[RANK],), (jnp.ones(SHAPE),))
    expected = {0: 1 + 2 * xs[1], 1: 2 * xs[0]}.get(RANK, jnp.ones(SHAPE))
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    if RANK == 1:
        np.testing.assert_allclose(t, jnp.sum(2 * xs[1]) + jnp.sum(2 * xs[0]),
                                   rtol=1e-12)


def test_transposed_messages_have_their_own_tags():
    # A user message of the same tag and peer, sent before the backward pass
    # and received after it: the transposed sendrecv must not take it
    # (transposes flip a reserved tag bit, jaxmpi._validate.reserved_tag_bit).
    import jaxmpi

    comm = jaxmpi.get_default_comm()
    x = inputs()[RANK]
    w = weights(SHAPE)
    note = np.full(SHAPE, 100.0 + RANK)
    req = comm.Isend(note, dest=DOWN, tag=5)
    g = jax.grad(lambda x: jnp.sum(
        w[RANK] * mpx.sendrecv(x, x, DOWN, UP, sendtag=5, recvtag=5)))(x)
    got = np.zeros(SHAPE)
    comm.Recv(got, source=UP, tag=5)
    req.Wait()
    # Rank r's x reaches r + 1, whose weights come back: w[r + 1] (0 at top).
    np.testing.assert_array_equal(g, w[RANK + 1] if RANK < SIZE - 1
                                  else np.zeros(SHAPE))
    np.testing.assert_array_equal(got, np.full(SHAPE, 100.0 + UP) if UP >= 0
                                  else np.zeros(SHAPE))
