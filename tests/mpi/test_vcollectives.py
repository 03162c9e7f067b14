"""Variable-count collectives (allgatherv, gatherv, scatterv, alltoallv):
every dtype, counts that depend on the rank count, include zeros and differ
per rank, rank-dependent data, eager/jit/fori_loop, exact adjoints (dot
products summed over ranks), JVP, vmap in one MPI call, bad input, and
counts that disagree across ranks under the cross-rank checks; every result
on every rank against NumPy references built here from the rank formulae.

Few compilations: one jitted program runs every dtype and op."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import (DTYPES, RANK, SIZE, WORLD, Later, bfloat16, check,
                  check_mode, data, loop_body_copies)

# The suites this file belongs to (tests/suites.py).
SUITES = ("large_count", "across_hosts", "c_core")

# Rows per rank: zeros at 2+ ranks, differing per rank, depending on SIZE.
COUNTS = tuple((3 * r + 1) % 4 for r in range(SIZE))        # 1,0,3,2
COUNTS2 = tuple((r + 2) % 3 for r in range(SIZE))           # 2,0,1,2


def S(i, j):
    """Rows rank i sends to rank j in alltoallv (zeros, asymmetric)."""
    return (i + 2 * j + SIZE) % 3


SEND = tuple(S(RANK, j) for j in range(SIZE))
RECV = tuple(S(i, RANK) for i in range(SIZE))
TAIL = (2,)
GROOT = SIZE - 1   # gatherv's root
SROOT = 0          # scatterv's root


def rows_of(rank, n, dtype, seed, tail=TAIL):
    """Rank `rank`'s n rows: values depend on the rank and the seed."""
    return data(rank, (n, *tail), dtype, seed=seed)


def block(i, j, dtype, tail=TAIL):
    """The rows rank i sends rank j in alltoallv (depend on i and j)."""
    return data(i, (S(i, j), *tail), dtype, seed=10 + j)


def inputs(dtype, tail=TAIL):
    x_ag = rows_of(RANK, COUNTS[RANK], dtype, 1, tail)
    x_gv = rows_of(RANK, COUNTS2[RANK], dtype, 2, tail)
    full = np.concatenate([rows_of(r, COUNTS[r], dtype, 3, tail)
                           for r in range(SIZE)])
    x_sv = full if RANK == SROOT else np.zeros((COUNTS[RANK], *tail), dtype)
    x_av = np.concatenate([block(RANK, j, dtype, tail) for j in range(SIZE)])
    return x_ag, x_gv, x_sv, x_av


def references(dtype, tail=TAIL):
    """What every op must give on this rank, from the rank formulae."""
    x_ag, x_gv, _, _ = inputs(dtype, tail)
    ag = np.concatenate([rows_of(r, COUNTS[r], dtype, 1, tail)
                         for r in range(SIZE)])
    gv = (np.concatenate([rows_of(r, COUNTS2[r], dtype, 2, tail)
                          for r in range(SIZE)]) if RANK == GROOT else x_gv)
    sv = rows_of(RANK, COUNTS[RANK], dtype, 3, tail)
    av = np.concatenate([block(i, RANK, dtype, tail) for i in range(SIZE)])
    return ag, gv, sv, av


def four_ops(x_ag, x_gv, x_sv, x_av):
    return (mpx.allgatherv(x_ag, COUNTS),
            mpx.gatherv(x_gv, COUNTS2, GROOT),
            mpx.scatterv(x_sv, COUNTS, SROOT),
            mpx.alltoallv(x_av, SEND, RECV))


NAMES = ("allgatherv", "gatherv", "scatterv", "alltoallv")
EAGER_DTYPES = [np.dtype(d) for d in (np.bool_, bfloat16, np.int64,
                                      np.complex128)]


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_values_every_dtype(mode):
    dtypes = DTYPES if mode == "jit" else EAGER_DTYPES
    args = [tuple(jnp.asarray(a) for a in inputs(d)) for d in dtypes]
    if mode == "jit":
        outs = jax.jit(lambda args: [four_ops(*a) for a in args])(args)
    else:
        outs = [four_ops(*a) for a in args]
    later = Later()
    for d, out in zip(dtypes, outs):
        for name, y, want in zip(NAMES, out, references(d)):
            later.check(y, want, f"{name} {d}")
    later.done()


def test_token_api_and_3d_rows():
    tail = (2, 3)
    x_ag, x_gv, x_sv, x_av = (jnp.asarray(a) for a in inputs(np.float32, tail))
    ys = {}
    ys["allgatherv"], tok = jaxmpi.allgatherv(x_ag, COUNTS)
    ys["gatherv"], tok = jaxmpi.gatherv(x_gv, COUNTS2, GROOT, token=tok)
    ys["scatterv"], tok = jaxmpi.scatterv(x_sv, list(COUNTS), SROOT, token=tok)
    ys["alltoallv"], tok = jaxmpi.alltoallv(x_av, np.array(SEND), RECV,
                                            token=tok)
    later = Later()
    later.true(type(tok).__name__ == "Token", "token")
    for name, want in zip(NAMES, references(np.float32, tail)):
        later.check(ys[name], want, name)
    # Eager off the root: x itself, as gather gives it.
    later.true(RANK == GROOT or ys["gatherv"] is x_gv, "gatherv passes x")
    later.done()


def test_fori_loop():
    # A round trip through alltoallv and back (counts swapped) keeps the
    # carry's shape; allgatherv's total accumulates.
    x_ag, _, _, x_av = (jnp.asarray(a) for a in inputs(np.float64))

    def body(i, carry):
        x, acc = carry
        y = mpx.alltoallv(x, SEND, RECV)
        x = mpx.alltoallv(y * 2.0, RECV, SEND) + i
        acc = acc + mpx.allgatherv(x_ag, COUNTS) * (i + 1)
        return x, acc

    n = 3
    acc0 = jnp.zeros((sum(COUNTS), *TAIL))
    x, acc = jax.jit(lambda x, a: lax.fori_loop(0, n, body, (x, a)))(x_av, acc0)
    want_x = np.asarray(x_av)
    for i in range(n):
        want_x = want_x * 2.0 + i
    ag, _, _, _ = references(np.float64)
    later = Later()
    later.check(x, want_x, "alltoallv round trips")
    later.check(acc, ag * (n * (n + 1) // 2), "allgatherv sum")
    later.done()


def _rank_sum(value):
    return WORLD.allreduce(float(value), op=MPI.SUM)


def test_adjoints_are_exact():
    """<A u, w> = <u, A^T w>, each side summed over ranks, for each op (and
    its transpose's transpose: linear_transpose twice); JVPs are the op on
    the tangent."""
    dt = np.float64
    x_ag, x_gv, x_sv, x_av = (jnp.asarray(a, dt) for a in inputs(dt))
    fns = {
        "allgatherv": (lambda a: mpx.allgatherv(a, COUNTS), x_ag),
        "gatherv": (lambda a: mpx.gatherv(a, COUNTS2, GROOT), x_gv),
        "scatterv": (lambda a: mpx.scatterv(a, COUNTS, SROOT), x_sv),
        "alltoallv": (lambda a: mpx.alltoallv(a, SEND, RECV), x_av),
        # Equal counts: in place up to 2 ranks, and so is its transpose.
        "alltoallv equal counts": (
            lambda a: mpx.alltoallv(a, EQ_COUNTS, EQ_COUNTS),
            jnp.asarray(equal_inputs(EQUAL["symmetric"], dt, 3)[RANK])),
    }
    sides, jvps = {}, {}
    for k, (name, (f, x)) in enumerate(fns.items()):
        u = jnp.asarray(data(RANK, x.shape, dt, seed=20 + k)) + 0.25
        y, pullback = jax.vjp(f, x)
        w = jnp.asarray(data(RANK, y.shape, dt, seed=30 + k)) - 0.5
        (ut,) = jax.jit(pullback)(w)
        lhs = jnp.vdot(f(u), w)
        rhs = jnp.vdot(u, ut)
        tt = jax.linear_transpose(jax.linear_transpose(f, x), y)((u,))[0]
        sides[name] = (lhs, rhs, jnp.vdot(tt, w))
        jvps[name] = (jax.jvp(f, (x,), (u,))[1], f(u))
    sums = {name: [_rank_sum(v) for v in vals] for name, vals in sides.items()}
    later = Later()
    for name, (lhs, rhs, twice) in sums.items():
        later.close(rhs, lhs, f"{name}: <Au,w> vs <u,A^T w>", rtol=1e-12)
        later.close(twice, lhs, f"{name}: transposed twice", rtol=1e-12)
        later.true(abs(lhs) > 0, f"{name}: nonzero test")
    for name, (t, want) in jvps.items():
        later.check(t, want, f"{name} jvp")
    later.done()


def test_grad_by_hand():
    # d/dx of sum(c * allgatherv(x)) with rank-dependent weights c_s: the
    # rows of rank r get sum over s of c_s (by hand, independent of the
    # transpose rule).
    x = jnp.asarray(rows_of(RANK, COUNTS[RANK], np.float32, 1))
    g = jax.jit(jax.grad(lambda a: (RANK + 1.0) * jnp.sum(
        mpx.allgatherv(a, COUNTS) ** 2)))(x)
    total_weight = SIZE * (SIZE + 1) / 2
    check(g, (2 * total_weight * np.asarray(x)).astype(np.float32))


def test_vmap_one_call():
    nb = 3
    tail = TAIL
    dt = np.dtype(np.float32)
    batch = [inputs(dt, tail) for _ in range(nb)]
    # Batch element b adds b * 100: different data per element.
    xs = tuple(jnp.asarray(np.stack([batch[b][k] + 100 * b for b in range(nb)],
                               axis=1 if k != 1 else 0))
          for k in range(4))
    in_axes = ((1, 0, 1, 1),)

    f = jax.vmap(lambda a: four_ops(*a), in_axes=in_axes)
    jaxpr = jax.make_jaxpr(f)(xs)
    outs = jax.jit(f)(xs)
    calls = [e.primitive.name for e in jaxpr.jaxpr.eqns
             if e.primitive.name.startswith("jaxmpi_")]
    g = jax.vmap(jax.grad(lambda a: jnp.sum(mpx.alltoallv(a, SEND, RECV) ** 2)),
                 in_axes=1, out_axes=1)(xs[3])
    later = Later()
    later.true(sorted(calls) == sorted(f"jaxmpi_{n}" for n in NAMES),
               f"one MPI call per op: {calls}")
    refs = references(dt, tail)
    for name, y, want in zip(NAMES, outs, refs):
        later.check(y, np.stack([want + 100 * b for b in range(nb)]), name)
    # d/dx sum(alltoallv(x)^2) = 2x: every row is sent somewhere once.
    later.check(g, 2 * np.asarray(xs[3]), "vmap of grad")
    later.done()


# ---- alltoallv with equal send and receive counts: in place ----------------
# Count patterns c(i, j) = c(j, i), so that every rank's sendcounts equal its
# recvcounts (per peer), differing between peers and ranks; with zeros.
# Up to 2 ranks the result shares x's buffer and the C core swaps the blocks
# pair by pair; from 3 ranks it runs out of place (a rank cannot know that
# the others' counts are equal too): the values are the same.
EQUAL = {  # the counts at 2 ranks: rank 0's, rank 1's
    "symmetric": lambda i, j: (i + j + 1) % 3 + (i == j),  # [2,2] [2,1]
    "zero-pair": lambda i, j: (i + j + 2) % 3 + (i == j),  # [3,0] [0,2]
    "rank-0-empty": lambda i, j: 0 if 0 in (i, j) else (i + j) % 3 + 1,
}
ETAIL = (4,)  # rows of 4 elements: blocks of 8+ elements exist at 2 ranks
ESTEPS = 3
IN_PLACE = SIZE <= 2


def counts_of(c, rank):
    return tuple(c(rank, j) for j in range(SIZE))


EQ_COUNTS = counts_of(EQUAL["symmetric"], RANK)


def equal_inputs(c, dtype, seed):
    """Every rank's x for pattern c: block j tagged by sender and receiver."""
    return [np.concatenate([data(i, (c(i, j), *ETAIL), dtype,
                                 seed=seed + 7 * j) for j in range(SIZE)])
            for i in range(SIZE)]


def exchange(xs, c):
    """The reference alltoallv on every rank's array at once."""
    displ = [np.cumsum([0] + [c(i, j) for j in range(SIZE)])
             for i in range(SIZE)]
    return [np.concatenate([xs[i][displ[i][r]:displ[i][r] + c(i, r)]
                            for i in range(SIZE)]) for r in range(SIZE)]


def test_equal_counts_every_dtype_in_a_loop():
    """ESTEPS exchanges in a fori_loop (the carry is the op's buffer), the
    rows reversed after each, so that the steps do not undo each other; every
    dtype and pattern in one program, against NumPy's steps on every rank's
    data."""
    cases = [(name, d) for name in EQUAL for d in DTYPES]
    starts = [equal_inputs(EQUAL[name], d, seed=k % 5)
              for k, (name, d) in enumerate(cases)]
    counts = [counts_of(EQUAL[name], RANK) for name, _ in cases]

    def body(i, xs):
        return [mpx.alltoallv(x, c, c)[::-1] for x, c in zip(xs, counts)]

    loop = jax.jit(lambda xs: lax.fori_loop(0, ESTEPS, body, xs))
    outs = loop([jnp.asarray(s[RANK]) for s in starts])
    later = Later()
    for (name, d), xs, y in zip(cases, starts, outs):
        for _ in range(ESTEPS):
            xs = [a[::-1] for a in exchange(xs, EQUAL[name])]
        later.check(y, xs[RANK], f"{name} {d}")
    later.done()


@pytest.mark.parametrize("name", list(EQUAL))
def test_equal_counts_leave_a_live_input_alone(name):
    """Eager, jitted and with x still used after the call: the result is
    the exchange, x unchanged (XLA copies it before an in-place call); a
    donated x is the result's buffer."""
    c = EQUAL[name]
    cnt = counts_of(c, RANK)
    xs = equal_inputs(c, np.dtype(np.float32), seed=1)
    want = exchange(xs, c)[RANK]
    x = jnp.asarray(xs[RANK])
    eager = mpx.alltoallv(x, cnt, cnt)
    jitted, same = jax.jit(lambda a: (mpx.alltoallv(a, cnt, cnt), a * 1))(x)
    donated = jax.jit(lambda a: mpx.alltoallv(a, cnt, cnt),
                      donate_argnums=0)(jnp.asarray(xs[RANK]))
    later = Later()
    later.check(eager, want, "eager")
    later.check(jitted, want, "jit")
    later.check(donated, want, "donated")
    later.check(same, xs[RANK], "x used after the call")
    later.check(x, xs[RANK], "x after the calls")
    later.done()


def test_equal_counts_no_copy_in_loop_body():
    """Up to 2 ranks the custom call's result is aliased to its input, and a
    loop carrying it copies nothing; unequal counts (or 3+ ranks) alias
    nothing."""
    cnt = EQ_COUNTS
    x = jnp.ones((sum(cnt), *ETAIL), jnp.float32)
    fn = lambda a: lax.fori_loop(  # noqa: E731
        0, 4, lambda i, b: mpx.alltoallv(b, cnt, cnt) * 0.5, a)
    text = jax.jit(fn).lower(x).compile().as_text()
    aliased = [line for line in text.splitlines()
               if "jaxmpi_alltoallv" in line and "custom-call(" in line]
    assert len(aliased) == 1, aliased
    assert ("output_to_operand_aliasing={{0}: (0, {})}" in aliased[0]) == \
        IN_PLACE, aliased
    if IN_PLACE:
        assert loop_body_copies(fn, x) == 0
    if SEND != RECV:
        y = jnp.ones((sum(SEND), *ETAIL), jnp.float32)
        other = jax.jit(lambda a: mpx.alltoallv(a, SEND, RECV)).lower(y)
        assert "output_to_operand_aliasing" not in other.compile().as_text()


def test_equal_counts_on_some_ranks_only():
    """From 3 ranks a rank's counts can be equal while another's are not:
    rank 0's here, not ranks 1 and 2's (rank 1 sends rank 2 one row more
    than it gets back). Every rank must still meet the others in one
    exchange."""
    def c(i, j):
        return EQUAL["symmetric"](i, j) + ((i, j) == (1, 2))

    send = counts_of(c, RANK)
    recv = tuple(c(i, RANK) for i in range(SIZE))
    xs = equal_inputs(c, np.dtype(np.int32), seed=2)
    x = jnp.asarray(xs[RANK])
    got = jax.jit(lambda a: mpx.alltoallv(a, send, recv))(x)
    check(got, exchange(xs, c)[RANK])
    assert (send == recv) == (RANK not in (1, 2) or SIZE <= 2), (send, recv)


def test_zero_rows_everywhere():
    zero = (0,) * SIZE
    x = jnp.zeros((0, 4), jnp.int32)
    got = [mpx.allgatherv(x, zero), mpx.gatherv(x, zero, 0),
           mpx.scatterv(x, zero, 0), mpx.alltoallv(x, zero, zero)]
    later = Later()
    for y in got:
        later.check(y, np.zeros((0, 4), np.int32))
    later.done()


# ---- bad input: clear errors on every rank, before any MPI call -----------

def _raises(exc, words, fn):
    with pytest.raises(exc) as e:
        fn()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_counts_and_shapes():
    x = jnp.zeros((COUNTS[RANK], 2))
    n = SIZE + 1
    _raises(ValueError, ["allgatherv", "counts", f"{n} items", f"({SIZE})"],
            lambda: mpx.allgatherv(x, [1] * n))
    _raises(ValueError, ["gatherv", "counts[0]=-1"],
            lambda: mpx.gatherv(x, [-1] * SIZE, 0))
    _raises(TypeError, ["scatterv", "counts[0]", "float"],
            lambda: mpx.scatterv(x, [1.5] * SIZE, 0))
    _raises(TypeError, ["allgatherv", "counts", "list or tuple"],
            lambda: mpx.allgatherv(x, 3))
    _raises(TypeError, ["allgatherv", "counts", "static"],
            lambda: jax.jit(lambda c: mpx.allgatherv(x, [c] * SIZE))(1))
    wrong = tuple(c + 1 for c in COUNTS)
    _raises(ValueError, ["allgatherv", "x has", f"counts[{RANK}]={wrong[RANK]}",
                         "disagree"],
            lambda: mpx.allgatherv(x, wrong))
    _raises(ValueError, ["gatherv", f"counts[{RANK}]={wrong[RANK]}"],
            lambda: mpx.gatherv(x, wrong, 0))
    where = "x (on the root)" if RANK == 0 else "x (a template off the root)"
    _raises(ValueError, ["scatterv", where],
            lambda: mpx.scatterv(jnp.zeros((sum(wrong) + 1 if RANK == 0
                                            else wrong[RANK] + 1, 2)), wrong, 0))
    _raises(ValueError, ["alltoallv", "sum(sendcounts)=", "disagree"],
            lambda: mpx.alltoallv(jnp.zeros((sum(SEND) + 1, 2)), SEND, RECV))
    _raises(ValueError, ["alltoallv", "recvcounts", "items"],
            lambda: mpx.alltoallv(jnp.zeros((sum(SEND), 2)), SEND, RECV[:-1]))
    _raises(ValueError, ["allgatherv", "at least one dimension"],
            lambda: mpx.allgatherv(jnp.float32(1), (1,) * SIZE))
    _raises(ValueError, ["gatherv", "root"],
            lambda: mpx.gatherv(x, COUNTS, SIZE))


# ---- counts that disagree across ranks: the cross-rank check ---------------

@pytest.mark.skipif(SIZE < 2, reason="needs two ranks to disagree")
@pytest.mark.parametrize("mode", ["all", "sparse"])
def test_count_mismatch_is_an_error_on_every_rank(mode):
    # A fresh communicator: its first calls are checked in the sparse mode.
    comm = WORLD.Dup()
    errors = {}
    with check_mode(mode):
        # Rank 0 thinks rank 1 has one row more; its own rows still match.
        counts = list(COUNTS)
        if RANK == 0:
            counts[1] += 1
        x = jnp.ones((counts[RANK], 2))
        try:
            jax.block_until_ready(mpx.allgatherv(x, counts, comm=comm))
        except jax.errors.JaxRuntimeError as e:
            errors["allgatherv"] = str(e)
        # alltoallv: rank 0 sends rank 1 one row more than rank 1 expects.
        send = list(SEND)
        if RANK == 0:
            send[1] += 1
        x = jnp.ones((sum(send), 2))
        try:
            jax.block_until_ready(mpx.alltoallv(x, send, RECV, comm=comm))
        except jax.errors.JaxRuntimeError as e:
            errors["alltoallv"] = str(e)
        # Afterwards the communicator still works (nothing reached MPI).
        y = mpx.allgatherv(jnp.ones((COUNTS[RANK], 2)), COUNTS, comm=comm)
    comm.Free()
    assert set(errors) == {"allgatherv", "alltoallv"}, errors
    assert "FAILED_PRECONDITION" in errors["allgatherv"] or \
        "differs across ranks" in errors["allgatherv"], errors
    assert "the counts" in errors["allgatherv"], errors
    bad = list(COUNTS)
    bad[1] += 1
    assert f"counts=[{','.join(map(str, bad))}]" in errors["allgatherv"], errors
    want = (f"rank 1 expects {S(0, 1)} rows from rank 0 (its recvcounts[0]="
            f"{S(0, 1)}) but rank 0 sends {S(0, 1) + 1} (its sendcounts[1]="
            f"{S(0, 1) + 1})")
    assert want in errors["alltoallv"], errors
    check(y, np.ones((sum(COUNTS), 2)))


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks to disagree")
def test_row_shape_mismatch_is_an_error():
    comm = WORLD.Dup()
    with check_mode("all"):
        x = jnp.ones((COUNTS[RANK], 2 if RANK else 3), jnp.float32)
        try:
            jax.block_until_ready(mpx.gatherv(x, COUNTS, 0, comm=comm))
            err = ""
        except jax.errors.JaxRuntimeError as e:
            err = str(e)
    comm.Free()
    assert "the array" in err and "float32[*,3]" in err and \
        "float32[*,2]" in err, err
