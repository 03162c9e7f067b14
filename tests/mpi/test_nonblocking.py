"""Non-blocking operations: every op against NumPy in and out of jit and in
loops, buffers that XLA may not touch while a request is in flight,
misuse errors, the watchdog, gradients and vmap against the blocking ops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import (COUNTS, DOWN, DTYPE_IDS, DTYPES, LEFT, MODES, RANK,
                  REDUCTION_CASES, RIGHT, SIZE, UP, Later,
                  all_data, check, data, exscan_ref, kind, on_line, reduce_ref, run)

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core", "mpi_errors")

SHAPE = (4, 3)
# reduce_scatter's counts (uneven, a zero from 2 ranks on): block r of an
# input of NV rows is its rows LO:HI on rank r.
NV = sum(COUNTS)
LO, HI = sum(COUNTS[:RANK]), sum(COUNTS[:RANK + 1])


def ring(a):
    """Receive from the left, send to the right: both in flight at once,
    started receive first on even ranks and send first on odd ones."""
    if RANK % 2:
        s = mpx.isend(a, RIGHT, tag=5)
        r = mpx.irecv(a, LEFT, tag=5)
    else:
        r = mpx.irecv(a, LEFT, tag=5)
        s = mpx.isend(a, RIGHT, tag=5)
    y, none = mpx.waitall([r, s])
    assert none is None
    return y


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_isend_irecv_ring(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    check(run(mode, ring, x), data(LEFT, SHAPE, dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_isendrecv(dtype, mode):
    # Shapes of sent and received arrays differ: the received shape comes
    # from the template alone.
    x = jnp.asarray(data(RANK, (6,), dtype))
    t = jnp.zeros((2, 3), dtype)
    y = run(mode, lambda a, b: mpx.wait(mpx.isendrecv(a, b, LEFT, RIGHT)), x, t)
    check(y, data(LEFT, (6,), dtype).reshape(2, 3))


@pytest.mark.parametrize("mode", MODES)
def test_isendrecv_line_both_ways(mode):
    # Up and down the line at once, different data and shapes each way:
    # a swapped source and dest fails at 2 ranks.
    a = jnp.asarray(data(RANK, SHAPE, np.float32, seed=1))
    b = jnp.asarray(data(RANK, (5,), np.int32, seed=2))

    def f(a, b):
        up = mpx.isendrecv(a, a, DOWN, UP, sendtag=1, recvtag=1)
        down = mpx.isendrecv(b, b, UP, DOWN, sendtag=2, recvtag=2)
        return tuple(mpx.waitall([up, down]))

    up, down = run(mode, f, a, b)
    later = Later()
    later.check(up, on_line(DOWN, SHAPE, np.float32, seed=1), "up")
    later.check(down, on_line(UP, (5,), np.int32, seed=2), "down")
    later.done()


# The reducing collectives that take every predefined op: the start, its
# blocking twin, the input's shape and the NumPy reference (from every
# rank's input, in rank order).
REDUCING = {
    "iallreduce": (mpx.iallreduce, mpx.allreduce, SHAPE, reduce_ref),
    "iexscan": (mpx.iexscan, mpx.exscan, SHAPE, exscan_ref),
    "ireduce_scatter": (
        mpx.ireduce_scatter, mpx.reduce_scatter, (SIZE, *SHAPE),
        lambda xs, *a: reduce_ref([x[RANK] for x in xs], *a)),
    "ireduce_scatter counts": (
        lambda x, op: mpx.ireduce_scatter(x, op, counts=COUNTS),
        lambda x, op: mpx.reduce_scatter(x, op, counts=COUNTS), (NV, 3),
        lambda xs, *a: reduce_ref([x[LO:HI] for x in xs], *a)),
}


# Eager (each start and wait a dispatch of its own, compiled per dtype and
# op) on every dtype with its kind's first op and every op with its kind's
# first dtype; jit on every pair. The C path is the same in both modes;
# every pair in both modes added 1-2 minutes to each CI configuration that
# runs this file.
_FIRST_OF_KIND = {}
for _d, _op in REDUCTION_CASES:
    _FIRST_OF_KIND.setdefault(("dtype", _d), _op)
    _FIRST_OF_KIND.setdefault(("op", kind(_d), _op), _d)
REDUCING_CASES = [(d, op, "jit") for d, op in REDUCTION_CASES] + [
    (d, op, "eager") for d, op in REDUCTION_CASES
    if _FIRST_OF_KIND[("dtype", d)] == op or _FIRST_OF_KIND[("op", kind(d), op)] == d]


@pytest.mark.parametrize("dtype,opname,mode", REDUCING_CASES,
                         ids=[f"{d}-{op}-{m}" for d, op, m in REDUCING_CASES])
def test_reducing_collectives(dtype, opname, mode):
    # Every request in flight at once, the blocking ops run meanwhile; each
    # result equals NumPy's and the blocking op's on every rank.
    op = getattr(MPI, opname)
    xs = {name: all_data(shape, dtype, small=True, seed=k)
          for k, (name, (_, _, shape, _)) in enumerate(REDUCING.items())}

    def f(inputs):
        reqs = [start(inputs[name], op)
                for name, (start, _, _, _) in REDUCING.items()]
        blocking = [twin(inputs[name], op)
                    for name, (_, twin, _, _) in REDUCING.items()]
        return mpx.waitall(reqs), blocking

    got, blocking = run(mode, f, {name: jnp.asarray(x[RANK])
                                  for name, x in xs.items()})
    later = Later()
    for (name, (_, _, _, ref)), y, b in zip(REDUCING.items(), got, blocking):
        later.check(y, ref(xs[name], opname, dtype), name)
        later.check(y, b, f"{name} against the blocking op")
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("root", sorted({0, SIZE - 1}))
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_ibcast(dtype, root, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    check(run(mode, lambda a: mpx.wait(mpx.ibcast(a, root)), x),
          data(root, SHAPE, dtype))


@pytest.mark.parametrize("mode", MODES)
def test_ibarrier_and_token_forms(mode):
    x = jnp.asarray(data(RANK, SHAPE, np.float64))

    def f(a):
        req, tok = jaxmpi.ibarrier()
        tok = jaxmpi.wait(req, token=tok)
        req, tok = jaxmpi.iallreduce(a, op=MPI.SUM, token=tok)
        y, tok = jaxmpi.wait(req, token=tok)
        (ys, tok) = jaxmpi.waitall([jaxmpi.irecv(a, LEFT, tag=1)[0],
                                    jaxmpi.isend(a, RIGHT, tag=1)[0]],
                                   token=tok)
        return y, ys[0]

    y, z = run(mode, f, x)
    check(y, reduce_ref(all_data(SHAPE, np.float64), "SUM", np.float64))
    check(z, data(LEFT, SHAPE, np.float64))


@pytest.mark.parametrize("mode", MODES)
def test_tags_matched_not_order(mode):
    # Two messages in flight to the same rank, received in the other order.
    x = jnp.asarray(data(RANK, SHAPE, np.int64))

    def f(a):
        s1 = mpx.isend(a, RIGHT, tag=1)
        s2 = mpx.isend(a * 10, RIGHT, tag=2)
        r2 = mpx.irecv(a, LEFT, tag=2)
        r1 = mpx.irecv(a, LEFT, tag=1)
        y2 = mpx.wait(r2)
        y1 = mpx.wait(r1)
        mpx.waitall([s2, s1])
        return y1, y2

    y1, y2 = run(mode, f, x)
    check(y1, data(LEFT, SHAPE, np.int64))
    check(y2, data(LEFT, SHAPE, np.int64) * 10)


def test_fori_loop_ring_shift():
    # After SIZE + 1 shifts every rank holds its left neighbour's data.
    x = jnp.asarray(data(RANK, SHAPE, np.float32))
    y = jax.jit(lambda a: jax.lax.fori_loop(0, SIZE + 1, lambda i, b: ring(b), a))(x)
    check(y, data(LEFT, SHAPE, np.float32))


def test_fori_loop_iallreduce_overlapping_compute():
    x = jnp.asarray(data(RANK, SHAPE, np.float64))

    def body(i, carry):
        a, acc = carry
        req = mpx.iallreduce(a, MPI.SUM)
        acc = acc + jnp.sin(a).sum()  # independent work while in flight
        return mpx.wait(req) / SIZE, acc

    y, _ = jax.jit(lambda a: jax.lax.fori_loop(0, 3, body, (a, 0.0)))(x)
    mean = reduce_ref(all_data(SHAPE, np.float64), "SUM", np.float64) / SIZE
    np.testing.assert_allclose(np.asarray(y), mean, rtol=1e-12)


def _lowered_wait(f, *args, platform):
    """The wait's line in f's StableHLO for `platform` (lowered here, no
    such device needed) and the line defining its token, its last operand."""
    text = jax.jit(f).trace(*args).lower(lowering_platforms=(platform,)).as_text()
    lines = text.splitlines()
    wait = next(l for l in lines if "@jaxmpi_wait(" in l)
    token = wait.split("@jaxmpi_wait(")[1].split(")")[0].split(", ")[-1]
    name = token.split("#")[0]
    return wait, next(l for l in lines if l.strip().startswith(f"{name}:")
                      or l.strip().startswith(f"{name} ="))


def test_gpu_wait_is_lowered_after_the_work_written_before_it():
    # XLA:GPU runs thunks in its scheduler's order and a GPU wait blocks the
    # host until MPI completes: a wait tied to nothing came right after its
    # start, before the work between them (no overlap). On CUDA the wait's
    # token goes through an optimization barrier with that work's results.
    x = jnp.asarray(data(RANK, SHAPE, np.float32))
    w = jnp.eye(3, dtype=np.float32)

    def f(a, m):
        req = mpx.iallreduce(a, MPI.SUM)
        z = jax.lax.fori_loop(0, 4, lambda i, b: jnp.tanh(b @ m), m)
        s = jnp.sin(a).sum()
        return mpx.wait(req), z, s

    wait, token = _lowered_wait(f, x, w, platform="cuda")
    assert "stablehlo.optimization_barrier" in token, (wait, token)
    # the loop's results and the sum: tensors besides the token
    assert token.count("tensor<3x3xf32>") >= 1 and "tensor<f32>" in token, token
    _, token = _lowered_wait(f, x, w, platform="cpu")  # CPU's wait is async
    assert "optimization_barrier" not in token and "jaxmpi_iallreduce" in token


def _reducing_loop(nonblocking):
    """A loop whose (SIZE, 2) carry goes through exscan and both forms of
    reduce_scatter each step, with independent work while the requests are
    in flight."""
    def body(_, carry):
        c, acc = carry
        v = jnp.tile(c, (2, 1))[:NV]  # NV <= 2 * SIZE rows
        if nonblocking:
            reqs = [mpx.iexscan(c, MPI.SUM), mpx.ireduce_scatter(c, MPI.SUM),
                    mpx.ireduce_scatter(v, MPI.SUM, counts=COUNTS)]
            acc = acc + jnp.sum(c * c)  # while in flight
            e, y, yv = mpx.waitall(reqs)
        else:
            e, y, yv = (mpx.exscan(c, MPI.SUM), mpx.reduce_scatter(c, MPI.SUM),
                        mpx.reduce_scatter(v, MPI.SUM, counts=COUNTS))
            acc = acc + jnp.sum(c * c)
        return e + c * (RANK + 1) + y + yv.sum(0), acc

    return jax.jit(lambda c: jax.lax.fori_loop(0, 3, body, (c, 0 * c[0, 0])))


def test_fori_loop_iexscan_ireduce_scatter_equal_blocking_and_numpy():
    x0 = all_data((SIZE, 2), np.int64)
    got, acc = _reducing_loop(True)(x0[RANK])
    ref, ref_acc = _reducing_loop(False)(x0[RANK])
    cs, accs = [a.copy() for a in x0], [0] * SIZE
    lo = np.cumsum((0,) + COUNTS)
    for _ in range(3):
        accs = [accs[r] + int(np.sum(cs[r] * cs[r])) for r in range(SIZE)]
        total = sum(cs)
        vtotal = sum(np.tile(c, (2, 1))[:NV] for c in cs)
        cs = [sum(cs[:r], np.zeros_like(cs[0])) + cs[r] * (r + 1) + total[r]
              + vtotal[lo[r]:lo[r + 1]].sum(0) for r in range(SIZE)]
    later = Later()
    later.check(got, cs[RANK], "NumPy")
    later.check(got, ref, "blocking")
    later.equal(acc, accs[RANK], "work while in flight")
    later.equal(acc, ref_acc)
    later.done()


# ---- the request's buffers stay untouched until the wait --------------------


def test_send_buffer_overwritten_in_program_after_start():
    # x is changed in place after the start; the peer must get the original.
    x = jnp.asarray(data(RANK, SHAPE, np.float64))

    def f(a):
        r = mpx.irecv(a, LEFT, tag=3)
        s = mpx.isend(a, RIGHT, tag=3)
        a = a.at[:].set(-1.0)             # may reuse a's buffer in place
        a = a * 2 + jnp.cos(a)
        y = mpx.wait(r)
        mpx.wait(s)
        return y, a

    for donate in ((), (0,)):
        y, a = jax.jit(f, donate_argnums=donate)(jnp.array(x))
        check(y, data(LEFT, SHAPE, np.float64))
        check(a, np.full(SHAPE, -2.0 + np.cos(-1.0)))


def test_receive_template_reused_after_start():
    # The template's value is used after the start: the receive must not
    # write into it, and the template's uses see the template.
    x = jnp.asarray(data(RANK, SHAPE, np.int32))

    def f(a, t):
        r = mpx.irecv(t, LEFT, tag=4)
        s = mpx.isend(a, RIGHT, tag=4)
        u = t + 1                      # uses the template while in flight
        y = mpx.wait(r)
        mpx.wait(s)
        return y, u

    t = jnp.full(SHAPE, 7, np.int32)
    for donate in ((), (1,)):
        y, u = jax.jit(f, donate_argnums=donate)(x, jnp.array(t))
        check(y, data(LEFT, SHAPE, np.int32))
        check(u, np.full(SHAPE, 8, np.int32))


def test_loop_carry_changed_while_in_flight():
    # In a loop the carry is updated in place between start and wait.
    x = jnp.asarray(data(RANK, (64,), np.float64))

    def body(i, carry):
        a, got = carry
        r = mpx.irecv(a, LEFT, tag=6)
        s = mpx.isend(a, RIGHT, tag=6)
        a = a.at[0].add(1.0)           # in place on the carry
        got = got + mpx.wait(r)
        mpx.wait(s)
        return a, got

    a, got = jax.jit(lambda v: jax.lax.fori_loop(
        0, 3, body, (v, jnp.zeros_like(v))))(x)
    left = data(LEFT, (64,), np.float64)
    bump = np.zeros(64)
    bump[0] = 1.0
    check(got, 3 * left + (0 + 1 + 2) * bump)
    check(a, data(RANK, (64,), np.float64) + 3 * bump)


# ---- misuse --------------------------------------------------------------------


def test_request_returned_from_jit_is_an_error():
    x = jnp.ones(3)
    with pytest.raises(TypeError, match=r"jaxmpi.iallreduce .*cannot leave"):
        jax.jit(lambda a: mpx.iallreduce(a, MPI.SUM))(x)
    with pytest.raises(TypeError, match=r"jaxmpi.irecv .*cannot leave"):
        jax.jit(lambda a: jax.lax.fori_loop(
            0, 2, lambda i, c: mpx.irecv(a, LEFT), mpx.irecv(a, LEFT)))(x)


def test_waited_twice_is_an_error():
    def f(a):
        req = mpx.ibarrier()
        mpx.wait(req)
        mpx.wait(req)

    with pytest.raises(RuntimeError, match=r"jaxmpi.ibarrier .* already waited"):
        jax.jit(f)(jnp.ones(2))
    with pytest.raises(RuntimeError, match=r"jaxmpi.ibarrier .* already waited"):
        f(jnp.ones(2))


def test_never_waited_in_jit_is_an_error():
    def f(a):
        mpx.iallreduce(a, MPI.SUM)
        return a + 1

    before = jaxmpi._core.get().requests_in_flight()
    with pytest.raises(RuntimeError,
                       match=r"jaxmpi.iallreduce started at .*test_nonblocking"
                             r".py:\d+ was never waited"):
        jax.jit(f)(jnp.ones(2))
    # Nothing was posted.
    assert jaxmpi._core.get().requests_in_flight() == before


def test_waited_in_another_function_is_an_error():
    def f(a):
        req = mpx.iallreduce(a, MPI.SUM)
        return jax.jit(lambda b: mpx.wait(req) + b)(a)

    with pytest.raises(RuntimeError, match=r"must be waited in the function"):
        jax.jit(f)(jnp.ones(2))
    jaxmpi.notoken.allreduce(jnp.ones(2), MPI.SUM)  # nothing left behind


def test_eager_request_dropped_is_an_error_at_the_next_call():
    mpx.irecv(jnp.ones(2), MPI.PROC_NULL)  # dropped at once
    with pytest.raises(RuntimeError, match=r"jaxmpi.allreduce: a request of "
                       r"jaxmpi.irecv started at .* was never waited"):
        mpx.allreduce(jnp.ones(2), MPI.SUM)
    check(mpx.allreduce(jnp.ones(2), MPI.SUM), np.full(2, float(SIZE)))


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match=r"wait: request must be a jaxmpi "
                       r"Request, got int"):
        mpx.wait(3)
    with pytest.raises(ValueError, match=r"isend: dest"):
        mpx.isend(jnp.ones(2), SIZE + 5)
    with pytest.raises(TypeError, match=r"waitall: requests\[0\]"):
        mpx.waitall([None])


def test_proc_null_receive_is_zeros():
    y = jax.jit(lambda a: mpx.wait(mpx.irecv(a, MPI.PROC_NULL)))(
        jnp.full(SHAPE, 3.0))
    check(y, np.zeros(SHAPE))


def test_size_mismatch_is_an_error_at_the_wait():
    comm = MPI.COMM_WORLD.Clone()
    try:
        def f(a, t):
            r = mpx.irecv(t, LEFT, tag=9, comm=comm)
            s = mpx.isend(a, RIGHT, tag=9, comm=comm)
            mpx.wait(s, )
            return mpx.wait(r)

        with pytest.raises(jax.errors.JaxRuntimeError,
                           match=r"jaxmpi.irecv: rank \d+ received 16 bytes "
                                 r"from rank \d+ .*expected 3 elements"):
            jax.block_until_ready(jax.jit(f)(jnp.zeros(2), jnp.zeros(3)))
    finally:
        comm.Free()


def test_watchdog_ends_a_wait_that_never_completes():
    comm = MPI.COMM_WORLD.Clone()
    before = jaxmpi._core.get().requests_in_flight()
    jaxmpi.set_timeout(0.5)
    try:
        f = jax.jit(lambda a: mpx.wait(mpx.irecv(a, RANK, tag=77, comm=comm)))
        with pytest.raises(jax.errors.JaxRuntimeError,
                           match=r"jaxmpi.irecv: timed out after 0.5 s "
                                 r"\(JAXMPI_TIMEOUT\) in the wait of "
                                 r"MPI_Irecv on rank \d+ of \d+, source \d+, "
                                 r"tag 77"):
            jax.block_until_ready(f(jnp.zeros(3)))
    finally:
        jaxmpi.set_timeout(None)
        comm.Free()
    assert jaxmpi._core.get().requests_in_flight() == before


def test_blocking_wait_mode_gives_the_same_results():
    core = jaxmpi._core.get()
    was = core.async_wait()
    core.set_async(False)
    try:
        x = jnp.asarray(data(RANK, SHAPE, np.float64))
        check(jax.jit(ring)(x), data(LEFT, SHAPE, np.float64))
    finally:
        core.set_async(was)


# ---- gradients and vmap, against the blocking ops ---------------------------


def _pair(nonblocking, adjoint="replicated"):
    def f(x, w):
        if nonblocking:
            r = mpx.irecv(x, LEFT, tag=2)
            s = mpx.isend(x * w, RIGHT, tag=2)
            y = mpx.wait(r)
            mpx.wait(s)
            z = mpx.wait(mpx.isendrecv(jnp.sin(x), x, RIGHT, LEFT))
            t = mpx.wait(mpx.iallreduce(x * y, MPI.SUM, adjoint=adjoint))
        else:
            y = mpx.sendrecv(x * w, x, LEFT, RIGHT, sendtag=2, recvtag=2)
            z = mpx.sendrecv(jnp.sin(x), x, RIGHT, LEFT)
            t = mpx.allreduce(x * y, MPI.SUM, adjoint=adjoint)
        return jnp.sum(y * w + z * z + t * (RANK + 1))

    return f


@pytest.mark.parametrize("jit", [False, True])
def test_grad_matches_blocking(jit):
    x = jnp.asarray(data(RANK, (5,), np.float64)) + 0.25
    w = jnp.asarray(data(RANK, (5,), np.float64, seed=1)) - 0.5
    wrap = jax.jit if jit else (lambda g: g)
    g = wrap(jax.grad(_pair(True), argnums=(0, 1)))(x, w)
    ref = jax.grad(_pair(False), argnums=(0, 1))(x, w)
    for a, b in zip(g, ref):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12)
    t = jax.jvp(_pair(True), (x, w), (w, x))[1]
    tref = jax.jvp(_pair(False), (x, w), (w, x))[1]
    np.testing.assert_allclose(float(t), float(tref), rtol=1e-12)


def _line(nonblocking):
    # Up and down a line with different weights each way: the backward
    # rules must send the cotangents back the way each value came
    # (sendrecv's arguments: send, template, source, dest).
    def f(x, w):
        if nonblocking:
            up = mpx.wait(mpx.isendrecv(x * w, x, DOWN, UP))
            down = mpx.wait(mpx.isendrecv(jnp.sin(x), x, UP, DOWN))
            r = mpx.irecv(x, DOWN, tag=3)
            s = mpx.isend(x * x, UP, tag=3)
            v = mpx.wait(r)
            mpx.wait(s)
        else:
            up = mpx.sendrecv(x * w, x, DOWN, UP)
            down = mpx.sendrecv(jnp.sin(x), x, UP, DOWN)
            v = mpx.sendrecv(x * x, x, DOWN, UP, sendtag=3, recvtag=3)
        return jnp.sum(up * w * (RANK + 1) + down * down * (RANK + 3)
                       + v * (RANK + 5))

    return f


def test_grad_on_a_line_matches_blocking():
    x = jnp.asarray(data(RANK, (5,), np.float64)) + 0.25
    w = jnp.asarray(data(RANK, (5,), np.float64, seed=1)) - 0.5
    g = jax.grad(_line(True), argnums=(0, 1))(x, w)
    ref = jax.grad(_line(False), argnums=(0, 1))(x, w)
    t = jax.jvp(_line(True), (x, w), (w, x))[1]
    tref = jax.jvp(_line(False), (x, w), (w, x))[1]
    later = Later()
    for name, a, b in (("dx", g[0], ref[0]), ("dw", g[1], ref[1]),
                       ("jvp", t, tref)):
        later.close(a, b, name, rtol=1e-12)
    later.done()


def test_check_grads_forward_and_global_adjoint():
    # Forward mode numerically, rank by rank (as for the blocking ops);
    # reverse mode as the global adjoint identity, which only holds summed
    # over ranks: sum_r <ct_r, J t> = sum_r <J^T ct, t_r>.
    x = jnp.asarray(data(RANK, (3,), np.float64)) + 0.25
    w = jnp.asarray(data(RANK, (3,), np.float64, seed=1)) - 0.5
    f = _pair(True, "sum")
    check_grads(f, (x, w), order=1, modes=("fwd",), eps=1e-4)
    tx = jnp.asarray(data(RANK, (3,), np.float64, seed=2))
    tw = jnp.asarray(data(RANK, (3,), np.float64, seed=3))
    _, jt = jax.jvp(f, (x, w), (tx, tw))
    ct = 0.5 + RANK
    _, vjp = jax.vjp(f, x, w)
    gx, gw = vjp(jnp.float64(ct))
    lhs = MPI.COMM_WORLD.allreduce(float(ct * jt))
    rhs = MPI.COMM_WORLD.allreduce(float(jnp.vdot(gx, tx) + jnp.vdot(gw, tw)))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)


def test_grad_iallreduce_sum_adjoint():
    x = jnp.asarray(data(RANK, (4,), np.float64))

    def f(nonblocking, a):
        if nonblocking:
            y = mpx.wait(mpx.iallreduce(a * a, MPI.SUM, adjoint="sum"))
        else:
            y = mpx.allreduce(a * a, MPI.SUM, adjoint="sum")
        return jnp.sum(y * (RANK + 1))

    g = jax.jit(jax.grad(lambda a: f(True, a)))(x)
    check(g, np.asarray(jax.grad(lambda a: f(False, a))(x)))
    # Exact adjoint: d/dx_r of sum_s (s+1) * sum_q x_q^2 = 2 x_r * sum(s+1).
    check(g, 2 * np.asarray(x) * SIZE * (SIZE + 1) / 2)


@pytest.mark.parametrize("name,opname", [("iallreduce", "MAX"),
                                         ("iexscan", "PROD"),
                                         ("ireduce_scatter", "MAX")])
def test_grad_of_non_sum_is_clear(name, opname):
    start = getattr(mpx, name)
    with pytest.raises(NotImplementedError, match=rf"{name}: derivatives "
                       r"are defined for MPI.SUM only"):
        jax.grad(lambda a: mpx.wait(start(a, getattr(MPI, opname))).sum())(
            jnp.ones((SIZE, 2)))


def test_vmap_equals_loop():
    xs = jnp.asarray(np.stack([data(RANK, SHAPE, np.float64, seed=s)
                               for s in range(3)]))

    def f(a):
        r = mpx.irecv(a, LEFT, tag=8)
        s = mpx.isend(a, RIGHT, tag=8)
        y = mpx.wait(r)
        mpx.wait(s)
        return y + mpx.wait(mpx.iallreduce(a, MPI.SUM))

    got = jax.jit(jax.vmap(f, in_axes=1, out_axes=1))(jnp.moveaxis(xs, 0, 1))
    ref = jnp.stack([jax.jit(f)(xs[i]) for i in range(3)], axis=1)
    check(got, np.asarray(ref))


# ---- the other collectives and the neighbour exchange ------------------------

SOME = [np.dtype(d) for d in (np.int32, np.float64, np.complex64)] + [
    d for d in DTYPES if d.name == "bfloat16"]
ROOTS = sorted({0, SIZE - 1})


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("opname", ["SUM", "MAX"])
@pytest.mark.parametrize("root", ROOTS)
def test_ireduce(root, opname, mode):
    x = jnp.asarray(data(RANK, SHAPE, np.int64))
    y = run(mode, lambda a: mpx.wait(mpx.ireduce(a, getattr(MPI, opname),
                                                 root)), x)
    ref = (reduce_ref(all_data(SHAPE, np.int64), opname, np.int64)
           if RANK == root else data(RANK, SHAPE, np.int64))
    check(y, ref)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME, ids=str)
def test_iscan(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, lambda a: mpx.wait(mpx.iscan(a, MPI.SUM)), x)
    check(y, reduce_ref(all_data(SHAPE, dtype)[:RANK + 1], "SUM", dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("root", ROOTS)
@pytest.mark.parametrize("dtype", SOME, ids=str)
def test_igather_iscatter(dtype, root, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, lambda a: mpx.wait(mpx.igather(a, root)), x)
    check(y, np.stack(all_data(SHAPE, dtype)) if RANK == root
          else data(RANK, SHAPE, dtype))
    blocks = jnp.asarray(np.stack([data(RANK * 10 + r, SHAPE, dtype)
                                   for r in range(SIZE)]))
    src = blocks if RANK == root else jnp.zeros(SHAPE, dtype)
    z = run(mode, lambda a: mpx.wait(mpx.iscatter(a, root)), src)
    check(z, data(root * 10 + RANK, SHAPE, dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME, ids=str)
def test_iallgather_ialltoall(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, lambda a: mpx.wait(mpx.iallgather(a)), x)
    check(y, np.stack(all_data(SHAPE, dtype)))
    blocks = jnp.asarray(np.stack([data(RANK * 10 + r, SHAPE, dtype)
                                   for r in range(SIZE)]))
    z = run(mode, lambda a: mpx.wait(mpx.ialltoall(a)), blocks)
    check(z, np.stack([data(r * 10 + RANK, SHAPE, dtype)
                       for r in range(SIZE)]))


@pytest.mark.parametrize("mode", MODES)
def test_ineighbor_exchange(mode):
    # Pair 0 shifts right, pair 1 shifts left with another shape and dtype.
    a = jnp.asarray(data(RANK, (5,), np.float32))
    b = jnp.asarray(data(RANK, (2, 2), np.int16))

    def f(a, b):
        req = mpx.ineighbor_exchange([a, b], [a, b], [LEFT, RIGHT],
                                     [RIGHT, LEFT], tag=20)
        return mpx.wait(req)

    ya, yb = run(mode, f, a, b)
    check(ya, data(LEFT, (5,), np.float32))
    check(yb, data(RIGHT, (2, 2), np.int16))


@pytest.mark.parametrize("mode", MODES)
def test_ineighbor_exchange_open_ends(mode):
    # The line: pair 0 goes up, pair 1 (another shape and dtype) down; the
    # ends talk to MPI.PROC_NULL and get zeros. Tells the directions apart
    # from 2 ranks (the ring above does from 3).
    a = jnp.asarray(data(RANK, (5,), np.float32, seed=4))
    b = jnp.asarray(data(RANK, (2, 2), np.int16, seed=5))

    def f(a, b):
        return mpx.wait(mpx.ineighbor_exchange([a, b], [a, b], [DOWN, UP],
                                               [UP, DOWN], tag=21))

    up, down = run(mode, f, a, b)
    later = Later()
    later.check(up, on_line(DOWN, (5,), np.float32, seed=4), "up")
    later.check(down, on_line(UP, (2, 2), np.int16, seed=5), "down")
    later.done()


def _collectives(nonblocking):
    root = SIZE - 1

    def f(x):
        w = mpx.wait if nonblocking else (lambda y: y)
        i = (lambda name: getattr(mpx, "i" + name)) if nonblocking else (
            lambda name: getattr(mpx, name))
        r = w(i("reduce")(x * x, MPI.SUM, root))
        s = w(i("scan")(jnp.sin(x), MPI.SUM))
        e = w(i("exscan")(x * s, MPI.SUM))
        rs = w(i("reduce_scatter")(jnp.stack([x * (k + 2) for k in range(SIZE)])
                                   * s, MPI.SUM))
        rv = w(i("reduce_scatter")(jnp.resize(x * e, (NV,)), MPI.SUM,
                                   counts=COUNTS))
        g = w(i("gather")(x * r, root))
        blocks = jnp.stack([x * (k + 1) for k in range(SIZE)])
        sc = w(i("scatter")(blocks if RANK == root else x, root))
        ag = w(i("allgather")(x + s))
        at = w(i("alltoall")(blocks * x))
        (nx,) = w(i("neighbor_exchange")([x * 3], [x], [LEFT], [RIGHT]))
        return (jnp.sum(r * (RANK + 1)) + jnp.sum(g) + jnp.sum(sc * x)
                + jnp.sum(ag * (RANK + 2)) + jnp.sum(at * at) + jnp.sum(nx * x)
                + jnp.sum(e * e * (RANK + 3)) + jnp.sum(rs * (RANK + 1))
                + jnp.sum(rv * rv))

    return f


def test_collectives_grad_and_jvp_match_blocking():
    x = jnp.asarray(data(RANK, (3,), np.float64)) + 0.5
    g = jax.jit(jax.grad(_collectives(True)))(x)
    ref = jax.grad(_collectives(False))(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-12)
    t = jnp.asarray(data(RANK, (3,), np.float64, seed=4))
    tj = jax.jvp(_collectives(True), (x,), (t,))[1]
    tr = jax.jvp(_collectives(False), (x,), (t,))[1]
    np.testing.assert_allclose(float(tj), float(tr), rtol=1e-12)


def test_vmap_reduce_scan_exchange_equal_loop():
    xs = jnp.asarray(np.stack([data(RANK, SHAPE, np.float64, seed=s)
                               for s in range(3)]))

    def f(a):
        r = mpx.wait(mpx.ireduce(a, MPI.SUM, 0))
        s = mpx.wait(mpx.iscan(a, MPI.SUM))
        (n,) = mpx.wait(mpx.ineighbor_exchange([a], [a], [LEFT], [RIGHT]))
        e = mpx.wait(mpx.iexscan(a, MPI.MAX))
        return r + 2 * s + 3 * n, e

    got = jax.jit(jax.vmap(f))(xs)
    refs = [jax.jit(f)(xs[i]) for i in range(3)]
    later = Later()
    for k, g in enumerate(got):
        later.check(g, np.stack([np.asarray(r[k]) for r in refs]), f"#{k}")
    later.check(got[1], np.stack([exscan_ref(
        all_data(SHAPE, np.float64, seed=s), "MAX", np.float64)
        for s in range(3)]), "iexscan against NumPy")
    later.done()


def test_vmap_of_grad_and_jvp_of_gather_family_equal_blocking():
    xs = jnp.asarray(np.stack([data(RANK, (SIZE, 2), np.float64, seed=s)
                               for s in range(3)]))
    w = jnp.arange(SIZE * SIZE * 2.0).reshape(SIZE, SIZE, 2) + RANK

    def loss(nonblocking):
        def f(a):
            if nonblocking:
                g, t = mpx.wait(mpx.iallgather(a)), mpx.wait(mpx.ialltoall(a))
                r = mpx.wait(mpx.igather(a, SIZE - 1))
                s = mpx.wait(mpx.iscatter(a if RANK == SIZE - 1 else a[0], SIZE - 1))
                rs = mpx.wait(mpx.ireduce_scatter(a * a, MPI.SUM))
            else:
                g, t, r = mpx.allgather(a), mpx.alltoall(a), mpx.gather(a, SIZE - 1)
                s = mpx.scatter(a if RANK == SIZE - 1 else a[0], SIZE - 1)
                rs = mpx.reduce_scatter(a * a, MPI.SUM)
            return ((g * w).sum() + (t * w[0]).sum()
                    + (r * (w if RANK == SIZE - 1 else 1.0)).sum() + (s * w[0, 0]).sum()
                    + (rs * w[0, 0]).sum())

        return f

    grads = [jax.jit(jax.vmap(jax.grad(loss(nb))))(xs) for nb in (True, False)]
    tangents = [jax.jit(jax.vmap(lambda a, t: jax.jvp(loss(nb), (a,), (t,))[1]))(
        xs, xs * 0.5 + 1) for nb in (True, False)]
    np.testing.assert_allclose(np.asarray(grads[0]), np.asarray(grads[1]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(tangents[0]), np.asarray(tangents[1]),
                               rtol=1e-12)


@pytest.mark.parametrize("in_axis", [0, 1])
def test_vmap_gather_scatter_allgather_alltoall_equal_loop(in_axis):
    """The ops that split or stack their first axis over ranks: one request
    for the batch, each batch axis where the op needs it, every root; and
    ireduce_scatter's blocks (its batch axis second, as reduce_scatter's)."""
    xs = jnp.asarray(np.stack([data(RANK, (SIZE, 2), np.float64, seed=s)
                               for s in range(3)]))

    def f(a):
        out = [mpx.wait(mpx.iallgather(a)), mpx.wait(mpx.ialltoall(a))]
        for root in range(SIZE):
            out.append(mpx.wait(mpx.igather(a, root)))
            out.append(mpx.wait(mpx.iscatter(a if RANK == root else a[0],
                                             root)))
        out.append(mpx.wait(mpx.ireduce_scatter(a, MPI.SUM)))
        out.append(mpx.wait(mpx.ireduce_scatter(
            jnp.tile(a, (2, 1))[:NV], MPI.MAX, counts=COUNTS)))
        return out

    got = jax.jit(jax.vmap(f, in_axes=in_axis))(jnp.moveaxis(xs, 0, in_axis))
    refs = [jax.jit(f)(xs[i]) for i in range(3)]
    for k, g in enumerate(got):
        check(g, np.stack([np.asarray(r[k]) for r in refs]))
    # Against NumPy too (the blocking-free reference of the loop above).
    X = [np.stack([data(r, (SIZE, 2), np.float64, seed=s) for s in range(3)])
         for r in range(SIZE)]  # X[rank][batch]
    check(got[0], np.stack(X, axis=1))
    check(got[1], np.stack([X[s][:, RANK] for s in range(SIZE)], axis=1))
    for root in range(SIZE):
        check(got[2 + 2 * root],
              np.stack(X, axis=1) if RANK == root else X[RANK])
        check(got[3 + 2 * root], X[root][:, RANK])
    check(got[-2], sum(X[s][:, RANK] for s in range(SIZE)))
    check(got[-1], np.max([np.tile(X[s], (1, 2, 1))[:, LO:HI]
                           for s in range(SIZE)], axis=0))
