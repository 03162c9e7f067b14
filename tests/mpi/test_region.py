"""jaxmpi.jit: the same programs as jax.jit, dispatched without an effect.

Each test compares with NumPy on every rank and says whether the region
applied (``fast``); the order of calls across dispatches is tested for
both jits in test_ordering_dispatch.py and test_ordering.py (the `jit`
fixture)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import LEFT, RANK, RIGHT, SIZE, Later, bfloat16, check, data

TOTAL = SIZE * (SIZE - 1) // 2


def _effects(fn, *args):
    """The effects of the computation JAX dispatches for fn(*args): none
    is what lets JAX take its C++ dispatch path."""
    return set(jax.make_jaxpr(fn._fast)(*args).effects)


@pytest.mark.parametrize("dtype", [np.dtype(d) for d in (
    np.float32, np.int32, np.complex64, bfloat16)], ids=str)
def test_program_of_several_ops(dtype):
    # One region with collectives, point-to-point and a loop: values equal
    # NumPy's and jax.jit's on every rank; the dispatched program has no
    # effect.
    def prog(x):
        s = mpx.allreduce(x, MPI.SUM)
        ring = mpx.sendrecv(x, x, LEFT, RIGHT)
        b = mpx.bcast(x, SIZE - 1)
        g = mpx.allgather(x)
        loop = lax.fori_loop(0, 3, lambda i, v: mpx.allreduce(v, MPI.SUM) - v, x)
        return {"sum": s, "ring": ring, "bcast": b, "gather": g, "loop": loop}

    f = jaxmpi.jit(prog)
    x = jnp.asarray(data(RANK, (2, 3), dtype))
    got = f(x)
    ref = jax.jit(prog)(x)
    parts = [data(r, (2, 3), dtype) for r in range(SIZE)]
    loop = np.stack(parts)
    for _ in range(3):
        loop = loop.sum(axis=0) - loop
    later = Later()
    later.true(f.fast is True, "fast")
    later.true(_effects(f, x) == set(), "no effect dispatched")
    later.check(got["sum"], np.sum(parts, axis=0).astype(dtype), "sum")
    later.check(got["ring"], parts[LEFT], "ring")
    later.check(got["bcast"], parts[SIZE - 1], "bcast")
    later.check(got["gather"], np.stack(parts), "gather")
    later.check(got["loop"], loop[RANK].astype(dtype), "loop")
    for k in got:
        later.check(got[k], np.asarray(ref[k]), f"{k} as jax.jit")
    later.done()


def test_static_donated_and_keyword_arguments():
    @jaxmpi.jit(static_argnums=1, static_argnames="root", donate_argnums=0)
    def f(x, n, *, root, scale):
        y = x
        for _ in range(n):
            y = mpx.allreduce(y, MPI.SUM)
        return {"y": y * scale, "b": mpx.bcast(x, root)}

    outs = []
    for n, root in ((1, 0), (2, SIZE - 1), (1, 0)):
        x = jnp.full(3, RANK + 1.0)
        outs.append((n, root, f(x, n, root=root, scale=jnp.float64(2.0))))
    later = Later()
    later.true(f.fast is True, "fast")
    for n, root, out in outs:
        y = float(SIZE * (SIZE + 1) // 2) * SIZE ** (n - 1)
        later.check(out["y"], np.full(3, 2 * y))
        later.check(out["b"], np.full(3, root + 1.0))
    later.done()


def test_other_effects_take_jax_jit_dispatch():
    # A debug callback is an effect the region does not carry: the function
    # is compiled as jax.jit compiles it, and still correct, in order (an
    # ordered callback beside jaxmpi calls failed to lower until each
    # jaxmpi lowering passed the other effects' tokens through).
    seen = []

    def prog(x):
        jax.debug.callback(lambda v: seen.append(float(v)), x[0], ordered=True)
        return mpx.allreduce(x, MPI.SUM)

    f = jaxmpi.jit(prog)
    y = f(jnp.full(2, float(RANK)))
    z = f(jnp.full(2, 1.0))
    jax.effects_barrier()
    later = Later()
    later.true(f.fast is False, "fast is False")
    later.check(y, np.full(2, float(TOTAL)))
    later.check(z, np.full(2, float(SIZE)))
    later.true(seen == [float(RANK), 1.0], f"callbacks {seen}")
    later.done()


def test_without_mpi_calls():
    f = jaxmpi.jit(lambda x: x * 2)
    check(f(jnp.arange(3.0)), np.arange(3.0) * 2)
    assert f.fast is False


def test_under_transformations():
    # Under a trace it is jax.jit(fun): grad, vmap, an outer jit, a nested
    # jaxmpi.jit, all with the ordered effect as usual.
    inner = jaxmpi.jit(lambda x: mpx.allreduce(x * x, MPI.SUM))
    x = jnp.float64(RANK + 1)
    g = jax.grad(inner)(x)
    v = jax.vmap(inner)(jnp.arange(3.0) + RANK)
    j = jax.jit(inner)(x)
    outer = jaxmpi.jit(lambda x: inner(x) + mpx.allreduce(x, MPI.MAX))
    o = outer(x)
    total = sum((r + 1) ** 2 for r in range(SIZE))
    later = Later()
    later.close(g, 2 * (RANK + 1))  # the default convention: own share
    later.close(v, [sum((k + r) ** 2 for r in range(SIZE)) for k in range(3)])
    later.close(j, total)
    later.close(o, total + SIZE)
    later.true(outer.fast is True, "outer fast")
    later.done()


def test_nonblocking_inside():
    @jaxmpi.jit
    def f(x):
        req = mpx.iallreduce(x, MPI.SUM)
        r = mpx.irecv(x, LEFT, tag=5)
        s = mpx.isend(x * 2, RIGHT, tag=5)
        z = jnp.tanh(x)  # independent work while the messages travel
        mpx.wait(s)
        return mpx.wait(req) + z, mpx.wait(r)

    x = jnp.full(4, RANK + 1.0)
    a, b = f(x)
    later = Later()
    later.true(f.fast is True, "fast")
    later.close(a, np.full(4, SIZE * (SIZE + 1) / 2 + np.tanh(RANK + 1.0)))
    later.check(b, np.full(4, 2 * (LEFT + 1.0)))
    later.done()


def test_request_cannot_leave():
    f = jaxmpi.jit(lambda x: mpx.iallreduce(x, MPI.SUM))
    with pytest.raises(TypeError, match="cannot leave the function"):
        f(jnp.zeros(2))


def test_token_api_and_names():
    assert jaxmpi.jit is jaxmpi.notoken.jit
    with pytest.raises(TypeError, match="jit: fun must be callable, got int: 3"):
        jaxmpi.jit(3)

    @jaxmpi.jit
    def f(x):
        y, tok = jaxmpi.allreduce(x, MPI.SUM)
        z, tok = jaxmpi.sendrecv(y, y, LEFT, RIGHT, token=tok)
        return z

    check(f(jnp.float32(RANK)), np.float32(TOTAL))
    assert f.fast is True
    assert "jaxmpi.jit" in repr(f) and f.__name__ == "f"


@pytest.mark.skipif(SIZE < 2, reason="ranks must disagree")
def test_errors_have_the_documented_type():
    # A call that fails when it runs raises jax.errors.JaxRuntimeError on
    # every rank, on JAX's C++ path too (which raises a computation's
    # failure as a ValueError): rank 0 runs a signature it ran before.
    from util import check_mode

    f = jaxmpi.jit(lambda x: mpx.allreduce(x, MPI.SUM))
    jax.block_until_ready(f(jnp.ones(3)))
    with check_mode("all"):
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match="FAILED_PRECONDITION: jaxmpi.allreduce"):
            jax.block_until_ready(f(jnp.ones(3 + (RANK > 0))))
