"""Non-blocking variable-count collectives (iallgatherv, igatherv,
iscatterv, ialltoallv): every result on every rank against NumPy references
built here from the rank formulae and against the blocking op run while the
requests are in flight; every dtype under jit and a few eagerly, a
fori_loop with work and an in-place update while in flight, gradients and
JVPs against the blocking ops, vmap against a loop in one request per op,
empty results, bad input (the blocking op's errors, before any MPI call),
counts that disagree across ranks under the cross-rank check, and (with a
small JAXMPI_MAX_COUNT, tests/launch) the count limit.

Counts depend on the rank count, hold a zero from 2 ranks on and differ per
rank; few compilations (one jitted program runs every dtype)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxmpi
from jaxmpi import _core
from jaxmpi import notoken as mpx
from util import (COUNTS, DTYPES, RANK, SIZE, WORLD, Later, bfloat16,
                  check_mode, data)

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core",)

GCOUNTS = COUNTS[::-1]  # gatherv's: other counts, the zero elsewhere
GROOT = SIZE - 1        # gatherv's root
SROOT = 0               # scatterv's root
TAIL = (2,)             # the rows' shape


def S(i, j):
    """Rows rank i sends rank j in alltoallv (zeros, asymmetric)."""
    return (i + 2 * j + SIZE) % 3


SEND = tuple(S(RANK, j) for j in range(SIZE))
RECV = tuple(S(i, RANK) for i in range(SIZE))
NAMES = ("iallgatherv", "igatherv", "iscatterv", "ialltoallv")


def rows_of(rank, n, dtype, seed, tail=TAIL):
    return data(rank, (n, *tail), dtype, seed=seed)


def block(i, j, dtype, tail=TAIL):
    """The rows rank i sends rank j (depend on i and j)."""
    return data(i, (S(i, j), *tail), dtype, seed=10 + j)


def inputs(dtype, tail=TAIL):
    """This rank's x of each op, in NAMES' order (NumPy)."""
    full = np.concatenate([rows_of(r, COUNTS[r], dtype, 3, tail)
                           for r in range(SIZE)])
    return (rows_of(RANK, COUNTS[RANK], dtype, 1, tail),
            rows_of(RANK, GCOUNTS[RANK], dtype, 2, tail),
            full if RANK == SROOT else np.zeros((COUNTS[RANK], *tail), dtype),
            np.concatenate([block(RANK, j, dtype, tail) for j in range(SIZE)]))


def references(dtype, tail=TAIL):
    """What each op gives this rank, from the rank formulae."""
    return (np.concatenate([rows_of(r, COUNTS[r], dtype, 1, tail)
                            for r in range(SIZE)]),
            np.concatenate([rows_of(r, GCOUNTS[r], dtype, 2, tail)
                            for r in range(SIZE)]) if RANK == GROOT
            else rows_of(RANK, GCOUNTS[RANK], dtype, 2, tail),
            rows_of(RANK, COUNTS[RANK], dtype, 3, tail),
            np.concatenate([block(i, RANK, dtype, tail) for i in range(SIZE)]))


def starts(xs, comm=None):
    x_ag, x_gv, x_sv, x_av = xs
    return [mpx.iallgatherv(x_ag, COUNTS, comm=comm),
            mpx.igatherv(x_gv, GCOUNTS, GROOT, comm=comm),
            mpx.iscatterv(x_sv, COUNTS, SROOT, comm=comm),
            mpx.ialltoallv(x_av, SEND, RECV, comm=comm)]


def blocking(xs):
    x_ag, x_gv, x_sv, x_av = xs
    return [mpx.allgatherv(x_ag, COUNTS), mpx.gatherv(x_gv, GCOUNTS, GROOT),
            mpx.scatterv(x_sv, COUNTS, SROOT),
            mpx.alltoallv(x_av, SEND, RECV)]


def both(xs):
    """Every request in flight at once, the blocking ops run meanwhile."""
    reqs = starts(xs)
    twins = blocking(xs)
    return mpx.waitall(reqs), twins


def four(nonblocking):
    return (lambda xs: mpx.waitall(starts(xs))) if nonblocking else blocking


# Every dtype under jit, in one program; a few eagerly (each start, wait and
# blocking op there a dispatch compiled per dtype).
EAGER_DTYPES = [np.dtype(d) for d in (np.bool_, bfloat16, np.complex128)]


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_values_every_dtype(mode):
    dtypes = DTYPES if mode == "jit" else EAGER_DTYPES
    args = [tuple(jnp.asarray(a) for a in inputs(d)) for d in dtypes]
    if mode == "jit":
        outs = jax.jit(lambda args: [both(a) for a in args])(args)
    else:
        outs = [both(a) for a in args]
    later = Later()
    for d, (got, twins) in zip(dtypes, outs):
        for name, y, b, want in zip(NAMES, got, twins, references(d)):
            later.check(y, want, f"{name} {d}")
            later.check(y, b, f"{name} {d} against the blocking op")
    later.done()


def test_token_api_3d_rows_and_pass_through():
    tail = (2, 3)
    xs = [jnp.asarray(a) for a in inputs(np.float32, tail)]
    reqs = []
    req, tok = jaxmpi.iallgatherv(xs[0], list(COUNTS))
    reqs.append(req)
    req, tok = jaxmpi.igatherv(xs[1], np.array(GCOUNTS), GROOT, token=tok)
    reqs.append(req)
    req, tok = jaxmpi.iscatterv(xs[2], COUNTS, SROOT, token=tok)
    reqs.append(req)
    req, tok = jaxmpi.ialltoallv(xs[3], SEND, RECV, token=tok)
    reqs.append(req)
    ys = []
    for req in reqs:
        y, tok = jaxmpi.wait(req, token=tok)
        ys.append(y)
    later = Later()
    later.true(type(tok).__name__ == "Token", "token")
    later.true([r.op for r in reqs] == list(NAMES), "Request.op")
    for name, y, want in zip(NAMES, ys, references(np.float32, tail)):
        later.check(y, want, name)
    # Off gatherv's root the wait gives x, as gatherv does.
    later.true(RANK == GROOT or ys[1].shape == xs[1].shape, "passed through")
    later.done()


def test_every_root():
    """igatherv and iscatterv with each rank as the root, in one program."""
    dt = np.dtype(np.int32)
    x = jnp.asarray(rows_of(RANK, GCOUNTS[RANK], dt, 4))
    full = [np.concatenate([rows_of(10 * root + r, COUNTS[r], dt, 5)
                            for r in range(SIZE)]) for root in range(SIZE)]
    tables = [jnp.asarray(full[root]) if RANK == root
              else jnp.zeros((COUNTS[RANK], *TAIL), dt)
              for root in range(SIZE)]

    def f(x, tables):
        reqs = [mpx.igatherv(x, GCOUNTS, root) for root in range(SIZE)]
        reqs += [mpx.iscatterv(t, COUNTS, root)
                 for root, t in enumerate(tables)]
        return mpx.waitall(reqs)

    got = jax.jit(f)(x, tables)
    gathered = np.concatenate([rows_of(r, GCOUNTS[r], dt, 4)
                               for r in range(SIZE)])
    later = Later()
    for root in range(SIZE):
        later.check(got[root], gathered if RANK == root else np.asarray(x),
                    f"igatherv to {root}")
        later.check(got[SIZE + root],
                    rows_of(10 * root + RANK, COUNTS[RANK], dt, 5),
                    f"iscatterv from {root}")
    later.done()


def _loop(nonblocking):
    """A loop whose carry goes through alltoallv and back (counts swapped)
    each step, the other three ops' results summed, work while the requests
    are in flight, and the carry updated in place after the start (the
    request must send the value it started with)."""
    x_ag, x_gv, x_sv, _ = (jnp.asarray(a) for a in inputs(np.float64))

    def body(i, carry):
        x, acc, s = carry
        xs = (x_ag * (i + 1), x_gv + i, x_sv * (i + 1), x)
        if nonblocking:
            reqs = starts(xs)
            x = x.at[:1].set(-7.0)               # in place, while in flight
            s = s + jnp.sum(jnp.cos(x))          # work while in flight
            ag, gv, sv, y = mpx.waitall(reqs)
            y = mpx.wait(mpx.ialltoallv(y * 2.0, RECV, SEND))
        else:
            ag, gv, sv, y = blocking(xs)
            x = x.at[:1].set(-7.0)
            s = s + jnp.sum(jnp.cos(x))
            y = mpx.alltoallv(y * 2.0, RECV, SEND)
        return y + i, acc + ag, s + jnp.sum(gv) + jnp.sum(sv)

    def run(x):
        acc = jnp.zeros((sum(COUNTS), *TAIL))
        return lax.fori_loop(0, 3, body, (x, acc, jnp.float64(0)))

    return jax.jit(run)


def test_fori_loop_overlapping_compute():
    x0 = jnp.asarray(inputs(np.float64)[3])
    x, acc, s = _loop(True)(x0)
    bx, bacc, bs = _loop(False)(x0)
    want_x = np.asarray(x0)
    for i in range(3):
        want_x = want_x * 2.0 + i
    later = Later()
    later.check(x, want_x, "alltoallv round trips (NumPy)")
    later.check(acc, references(np.float64)[0] * 6, "allgatherv sum (NumPy)")
    for name, a, b in (("x", x, bx), ("acc", acc, bacc), ("s", s, bs)):
        later.check(a, b, f"{name} against the blocking loop")
    later.done()


def _loss(nonblocking):
    w = [jnp.asarray(data(RANK, np.shape(y), np.float64, seed=40 + k)) + 0.5
         for k, y in enumerate(references(np.float64))]

    def f(xs):
        ag, gv, sv, av = four(nonblocking)(xs)
        return (jnp.sum(ag * w[0]) + jnp.sum(gv * gv * w[1])
                + jnp.sum(jnp.sin(sv) * w[2]) + jnp.sum(av * av * w[3])
                * (RANK + 1))

    return f


def test_grad_and_jvp_match_blocking():
    xs = tuple(jnp.asarray(a) + 0.25 for a in inputs(np.float64))
    ts = tuple(jnp.asarray(data(RANK, x.shape, np.float64, seed=50 + k))
               for k, x in enumerate(xs))
    g = jax.jit(jax.grad(_loss(True)))(xs)
    gb = jax.jit(jax.grad(_loss(False)))(xs)
    t = jax.jvp(_loss(True), (xs,), (ts,))[1]
    tb = jax.jvp(_loss(False), (xs,), (ts,))[1]
    later = Later()
    for name, a, b in zip(NAMES, g, gb):
        later.close(a, b, f"grad {name}", rtol=1e-13)
        later.true(np.shape(a) == np.shape(b), f"grad {name} shape")
    later.close(t, tb, "jvp", rtol=1e-13)
    # Nonzero somewhere, for every op (the comparison can fail).
    norms = WORLD.allreduce(np.array([float(jnp.sum(jnp.abs(a))) for a in g]))
    later.true(all(norms > 0), f"nonzero gradients: {norms}")
    later.done()


@pytest.mark.parametrize("in_axis", [0, 1])
def test_vmap_equals_loop_in_one_request(in_axis):
    nb = 3
    batch = [inputs(np.float32) for _ in range(nb)]
    xs = tuple(jnp.asarray(np.stack([batch[b][k] + 100 * b
                                     for b in range(nb)], axis=in_axis))
               for k in range(4))
    f = jax.vmap(four(True), in_axes=in_axis)
    calls = [e.primitive.name for e in jax.make_jaxpr(f)(xs).jaxpr.eqns
             if e.primitive.name.startswith("jaxmpi_i")]
    got = jax.jit(f)(xs)
    one = jax.jit(four(True))
    loop = [one(tuple(jnp.take(x, b, axis=in_axis) for x in xs))
            for b in range(nb)]
    later = Later()
    later.true(sorted(calls) == sorted(f"jaxmpi_{n}" for n in NAMES),
               f"one request per op: {calls}")
    for k, (name, want) in enumerate(zip(NAMES, references(np.float32))):
        later.check(got[k], np.stack([np.asarray(r[k]) for r in loop]),
                    f"{name} against a loop")
        later.check(got[k], np.stack([want + 100 * b for b in range(nb)]),
                    f"{name} against NumPy")
    later.done()


def test_vmap_of_grad_matches_blocking():
    xs = tuple(jnp.asarray(np.stack([a + 0.5 * b for b in range(3)], axis=1))
               for a in inputs(np.float64))
    g = [jax.jit(jax.vmap(jax.grad(lambda a: _loss(nb)(a)), in_axes=1,
                          out_axes=1))(xs) for nb in (True, False)]
    later = Later()
    for name, a, b in zip(NAMES, *g):
        later.close(a, b, name, rtol=1e-13)
    later.done()


def test_zero_rows_everywhere():
    zero = (0,) * SIZE
    x = jnp.zeros((0, 4), jnp.int32)
    y = jax.jit(lambda a: mpx.waitall([
        mpx.iallgatherv(a, zero), mpx.igatherv(a, zero, GROOT),
        mpx.iscatterv(a, zero, SROOT), mpx.ialltoallv(a, zero, zero)]))(x)
    later = Later()
    for name, got in zip(NAMES, y):
        later.check(got, np.zeros((0, 4), np.int32), name)
    later.done()


# ---- bad input: the blocking op's errors, on every rank, before any MPI
# call ---------------------------------------------------------------------

def _error(fn):
    try:
        fn()
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return None, ""


def test_bad_input_raises_the_blocking_ops_errors():
    x = jnp.zeros((COUNTS[RANK], 2))
    wrong = tuple(c + 1 for c in COUNTS)
    cases = {  # what is wrong: (blocking op name, args)
        "counts of the wrong length": ("allgatherv", (x, [1] * (SIZE + 1))),
        "a negative count": ("gatherv", (x, [-1] * SIZE, 0)),
        "a count that is not an int": ("scatterv", (x, [1.5] * SIZE, 0)),
        "counts not a sequence": ("allgatherv", (x, 3)),
        "this rank's count disagrees with x": ("allgatherv", (x, wrong)),
        "gatherv's count disagrees with x": ("gatherv", (x, wrong, 0)),
        "the root's x has not sum(counts) rows": (
            "scatterv", (jnp.zeros((sum(wrong) + 1 if RANK == 0
                                    else wrong[RANK] + 1, 2)), wrong, 0)),
        "x has not sum(sendcounts) rows": (
            "alltoallv", (jnp.zeros((sum(SEND) + 1, 2)), SEND, RECV)),
        "recvcounts one short": (
            "alltoallv", (jnp.zeros((sum(SEND), 2)), SEND, RECV[:-1])),
        "a scalar x": ("allgatherv", (jnp.float32(1), (1,) * SIZE)),
        "a root out of range": ("gatherv", (x, COUNTS, SIZE)),
    }
    before = _core.get().requests_in_flight()
    got = {}
    for what, (name, args) in cases.items():
        got[what] = (_error(lambda: getattr(mpx, name)(*args)),
                     _error(lambda: getattr(mpx, "i" + name)(*args)),
                     _error(lambda: jax.jit(
                         lambda: mpx.wait(getattr(mpx, "i" + name)(*args)))()))
    assert _core.get().requests_in_flight() == before
    for what, (b, nb, jitted) in got.items():
        name = cases[what][0]
        assert nb[0] in (TypeError, ValueError), (what, nb)
        assert jitted == nb, (what, jitted, nb)
        assert f"i{name}" in nb[1], (what, nb)
        # The same check as the blocking op's, named after the start.
        assert nb == (b[0], b[1].replace(name, "i" + name)), (what, b, nb)
    assert "counts" in got["counts of the wrong length"][1][1]
    assert "disagree" in got["this rank's count disagrees with x"][1][1]
    # A pytree, which the blocking op takes, is one array too many.
    with pytest.raises(TypeError, match="iallgatherv"):
        mpx.iallgatherv([x], COUNTS)


# ---- counts that disagree across ranks: the cross-rank check ---------------

def _failure(fn):
    try:
        jax.block_until_ready(fn())
    except jax.errors.JaxRuntimeError as e:
        return str(e)
    return ""


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks to disagree")
def test_mismatches_raise_on_every_rank():
    comm = WORLD.Dup()
    errors = {}
    with check_mode("all"):
        # Rank 0 thinks rank 1 has one row more; its own rows still match.
        counts = list(COUNTS)
        if RANK == 0:
            counts[1] += 1
        x = jnp.ones((counts[RANK], 2))
        errors["counts"] = _failure(lambda: jax.jit(lambda a: mpx.wait(
            mpx.iallgatherv(a, counts, comm=comm)))(x))
        errors["gatherv counts"] = _failure(lambda: jax.jit(lambda a: mpx.wait(
            mpx.igatherv(a, counts, GROOT, comm=comm)))(x))
        # Rank 0 sends rank 1 one row more than rank 1 expects.
        send = list(SEND)
        if RANK == 0:
            send[1] += 1
        x = jnp.ones((sum(send), 2))
        errors["pairs"] = _failure(lambda: jax.jit(lambda a: mpx.wait(
            mpx.ialltoallv(a, send, RECV, comm=comm)))(x))
        # Rank 0 calls the blocking allgatherv, the others iallgatherv.
        x = jnp.ones((COUNTS[RANK], 2))
        errors["operation"] = _failure(lambda: jax.jit(
            lambda a: mpx.allgatherv(a, COUNTS, comm=comm) if RANK == 0
            else mpx.wait(mpx.iallgatherv(a, COUNTS, comm=comm)))(x))
        # iscatterv's templates have rows of another shape off the root.
        t = jnp.ones((COUNTS[RANK] if RANK else sum(COUNTS),
                      2 if RANK == 0 else 3))
        errors["rows"] = _failure(lambda: jax.jit(lambda a: mpx.wait(
            mpx.iscatterv(a, COUNTS, 0, comm=comm)))(t))
        # Afterwards the communicator still works (nothing reached MPI).
        y = mpx.wait(mpx.iallgatherv(jnp.ones((COUNTS[RANK], 2)), COUNTS,
                                     comm=comm))
    comm.Free()
    bad = list(COUNTS)
    bad[1] += 1
    later = Later()
    for what, err in errors.items():
        later.true("differs across ranks" in err, f"{what}: {err!r}")
    for what in ("counts", "gatherv counts"):
        later.true(f"counts=[{','.join(map(str, bad))}]" in errors[what],
                   errors[what])
    later.true(f"rank 1 expects {S(0, 1)} rows from rank 0 (its recvcounts[0]"
               f"={S(0, 1)}) but rank 0 sends {S(0, 1) + 1} (its sendcounts"
               f"[1]={S(0, 1) + 1})" in errors["pairs"], errors["pairs"])
    later.true("jaxmpi.allgatherv" in errors["operation"] and
               "jaxmpi.iallgatherv" in errors["operation"],
               errors["operation"])
    later.true("float64[*,2]" in errors["rows"] and
               "float64[*,3]" in errors["rows"], errors["rows"])
    later.check(y, np.ones((sum(COUNTS), 2)), "afterwards")
    later.done()


# ---- the count limit (JAXMPI_MAX_COUNT, read at import: tests/launch runs
# this with a small one) ------------------------------------------------------

LIMIT = _core.get().count_limit


def _over(counts, row):
    """Whether any block of `counts` rows of `row` elements, or the
    displacement of a non-empty one, passes the limit."""
    at = np.cumsum((0,) + tuple(counts))[:-1] * row
    return any(c * row > LIMIT or (c and a > LIMIT)
               for c, a in zip(counts, at))


def T(i, j):
    """alltoallv's rows for the limit: 4-row blocks to itself on odd ranks
    (8 elements: over a limit of 7, within it in rows), a row or none
    elsewhere, so that ranks counting in elements meet ranks counting in
    rows."""
    return 4 if i == j and i % 2 else (i + j) % 2


@pytest.mark.skipif(LIMIT > 64, reason="needs a small JAXMPI_MAX_COUNT "
                    "(tests/launch/test_process.py runs it with 7)")
def test_count_limit():
    row = 2
    big = (4,) * SIZE               # 8 elements per block
    near = (3,) * SIZE              # 6 per block; displacements 6, 12, ...
    send = tuple(T(RANK, j) for j in range(SIZE))
    recv = tuple(T(i, RANK) for i in range(SIZE))
    out = {}
    for name, counts in (("big", big), ("near", near)):
        x = jnp.asarray(data(RANK, (counts[RANK], row), np.float32))
        xs = jnp.asarray(data(RANK, (sum(counts), row), np.float32))
        try:
            out[name] = [mpx.wait(mpx.iallgatherv(x, counts)),
                         mpx.wait(mpx.igatherv(x, counts, 0)),
                         mpx.wait(mpx.iscatterv(xs if RANK == 0 else x,
                                                counts, 0))]
            want = [mpx.allgatherv(x, counts), mpx.gatherv(x, counts, 0),
                    mpx.scatterv(xs if RANK == 0 else x, counts, 0)]
            out[name] = [np.array_equal(a, b) for a, b in zip(out[name], want)]
        except jax.errors.JaxRuntimeError as e:
            out[name] = str(e)
    # ialltoallv: ranks alone choose elements or rows (the same type
    # signature per pair); one element per row cannot count in rows.
    x = jnp.asarray(data(RANK, (sum(send), row), np.float32))
    got = mpx.wait(mpx.ialltoallv(x, send, recv))
    out["rows"] = np.array_equal(got, mpx.alltoallv(x, send, recv))
    ones = (LIMIT + 1,) * SIZE
    try:
        mpx.wait(mpx.ialltoallv(jnp.ones((sum(ones), 1)), ones, ones))
        out["elements"] = ""
    except jax.errors.JaxRuntimeError as e:
        out["elements"] = str(e)
    later = Later()
    for name, counts in (("big", big), ("near", near)):
        if _over(counts, row):
            later.true(isinstance(out[name], str) and "exceed the count "
                       "limit" in out[name] and "use the blocking "
                       "allgatherv" in out[name], f"{name}: {out[name]}")
        else:
            later.true(out[name] == [True] * 3, f"{name}: {out[name]}")
    later.true(out["rows"], "ialltoallv in rows")
    later.true("sendcounts[0] = %d rows of 1 elements" % (LIMIT + 1)
               in out["elements"] and "use the blocking alltoallv"
               in out["elements"], out["elements"])
    later.done()
