"""Calls stay in program order without tokens: under jit, in every lax
control-flow construct, across dispatches, and with user tokens joined;
through jax.jit and jaxmpi.jit (the `jit` fixture)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import RANK, SIZE, check
from util import LEFT, RIGHT

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core",)

TOTAL = SIZE * (SIZE - 1) / 2  # sum of ranks


def test_fori_loop(jit):
    def body(i, x):
        return mpx.allreduce(x, MPI.SUM) / SIZE + mpx.sendrecv(x, x, LEFT, RIGHT)

    x = jnp.full(3, float(RANK))
    y = jit(lambda x: lax.fori_loop(0, 5, body, x))(x)
    expected = np.full(3, float(RANK))
    ranks = np.arange(SIZE, dtype=float)
    vals = ranks.copy()
    for _ in range(5):
        vals = vals.sum() / SIZE + np.roll(vals, 1)
    np.testing.assert_allclose(y, np.full(3, vals[RANK]), rtol=1e-12)
    assert expected.shape == y.shape


def test_scan_and_while(jit):
    def step(carry, _):
        s = mpx.allreduce(carry, MPI.SUM)
        return carry + 1, s

    _, ys = jit(lambda c: lax.scan(step, c, None, length=4))(jnp.float32(RANK))

    def cond(c):
        return c[1] < 3

    def body(c):
        return mpx.allreduce(c[0], MPI.SUM), c[1] + 1

    # Rank r starts from r + 1: the first sum is T = SIZE (SIZE + 1) / 2,
    # then every rank holds T and each sum multiplies by SIZE.
    y, _ = jit(lambda x: lax.while_loop(cond, body, (x, 0)))(
        jnp.float64(RANK + 1))
    check(ys, np.array([TOTAL + SIZE * k for k in range(4)], np.float32))
    assert float(y) == SIZE * (SIZE + 1) / 2 * SIZE ** 2


@pytest.mark.parametrize("pred", [True, False])
def test_cond(pred, jit):
    def f(x, p):
        return lax.cond(p, lambda v: mpx.allreduce(v, MPI.SUM),
                        lambda v: mpx.allgather(v)[RIGHT], x)

    y = jit(f)(jnp.float32(RANK), pred)
    assert float(y) == (TOTAL if pred else float(RIGHT))


def test_unused_results_still_communicate(jit):
    # The result of allreduce is unused and the send has no result; both
    # must still happen, in order, on every rank. A blocking send may wait
    # for its receive (MPICH does, even for 4 bytes to itself), so even
    # ranks send first and odd ranks receive first; alone, a rank talks to
    # MPI.PROC_NULL.
    status = MPI.Status()
    right, left = (RIGHT, LEFT) if SIZE > 1 else (MPI.PROC_NULL,) * 2

    @jit
    def f(x):
        mpx.allreduce(x, MPI.SUM)
        if RANK % 2 == 0:
            mpx.send(x, right, tag=3)
            return mpx.recv(x, left, tag=3, status=status)
        y = mpx.recv(x, left, tag=3, status=status)
        mpx.send(x, right, tag=3)
        return y

    y = f(jnp.float32(RANK))
    if SIZE > 1:
        assert float(y) == LEFT and status.Get_source() == LEFT
    else:
        assert float(y) == 0 and status.Get_source() == MPI.PROC_NULL


def test_many_dispatches_keep_order(jit):
    # Alternate two jitted functions many times without blocking in between.
    f = jit(lambda x: mpx.allreduce(x, MPI.SUM))
    g = jit(lambda x: mpx.sendrecv(x, x, LEFT, RIGHT))
    x = jnp.float32(RANK)
    outs = []
    for _ in range(50):
        outs.append(f(x))
        outs.append(g(x))
    jax.block_until_ready(outs)
    assert all(float(o) == TOTAL for o in outs[::2])
    assert all(float(o) == LEFT for o in outs[1::2])


def test_user_tokens_are_joined(jit):
    @jit
    def f(x):
        tok = lax.create_token()
        y, tok = jaxmpi.allreduce(x, MPI.SUM, token=tok)
        z, tok = jaxmpi.sendrecv(y + x, y, LEFT, RIGHT, token=tok)
        tok = jaxmpi.barrier(token=tok)
        return z, tok

    # The user's token enters the effect chain through the join call.
    hlo = f.lower(jnp.float32(RANK)).as_text()
    outs = [f(jnp.float32(RANK)) for _ in range(20)]  # all calls, then assert
    assert hlo.count("@jaxmpi_join_token(") == 3
    assert all(float(z) == TOTAL + LEFT for z, _ in outs)
    assert all(type(tok).__name__ == "Token" for _, tok in outs)


def test_checkpoint_and_custom_vjp_allowed(jit):
    x = jnp.float32(RANK + 1)  # rank r: r + 1
    total = SIZE * (SIZE + 1) / 2
    f = jax.checkpoint(lambda x: mpx.allreduce(x, MPI.SUM) * 2)
    fx = float(jit(f)(x))
    gf = float(jit(jax.grad(f))(x))  # default convention: 2, not 2 SIZE

    # The backward rule communicates too (rank r's cotangent scaled by its
    # residual x, summed over ranks): it must run, in order, under jit.
    ran = []

    @jax.custom_vjp
    def g(x):
        return mpx.allreduce(x, MPI.SUM)

    def g_bwd(x, ct):
        ran.append(True)
        return (mpx.allreduce(ct * x, MPI.SUM),)

    g.defvjp(lambda x: (g(x), x), g_bwd)
    gx = float(jit(g)(x))
    gg = float(jit(jax.grad(lambda x: 3 * g(x)))(x))
    assert fx == 2 * total
    assert gf == 2.0
    assert gx == total
    assert ran, "the custom VJP's backward rule never ran"
    assert gg == 3 * total  # sum over ranks of 3 (r + 1)


def test_beside_an_ordered_callback(jit):
    # Another ordered effect in the same program: each jaxmpi lowering
    # passes its token through (they failed to lower: "returns incorrect
    # set of output tokens").
    seen = []

    def f(x):
        jax.debug.callback(lambda v: seen.append(float(v)), x, ordered=True)
        y = mpx.allreduce(x, MPI.SUM)
        jax.debug.callback(lambda v: seen.append(float(v)), y, ordered=True)
        return y

    y = jit(f)(jnp.float32(RANK))
    jax.effects_barrier()
    assert float(y) == TOTAL
    assert seen == [RANK, TOTAL]
