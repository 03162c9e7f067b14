"""reduce_scatter (both forms) and exscan: every dtype and op against NumPy,
jit, eager, loops, derivatives (exact adjoints: dot-product tests), vmap,
bad input, and counts that differ between ranks under the cross-rank check.

Few compilations: one jitted program computes every dtype and op case."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from jaxmpi._validate import is_token
from util import (COUNTS, DTYPES, OPS_FOR_KIND, RANK, SIZE, Later, all_data,
                  bfloat16, check, check_mode, data, exscan_ref, kind,
                  reduce_ref)

# The suites this file belongs to (tests/suites.py).
SUITES = ("large_count", "across_hosts", "c_core")

two_ranks = pytest.mark.skipif(SIZE < 2, reason="ranks must disagree")

OFFSETS = np.concatenate([[0], np.cumsum(COUNTS)]).astype(int)
CASES = [(d, op) for d in DTYPES for op in OPS_FOR_KIND[kind(d)]]


def _block_input(dtype, opname, seed):
    small = opname == "PROD"
    return [data(r, (SIZE, 2, 5), dtype, seed=seed, small=small)
            for r in range(SIZE)]


def _v_input(dtype, opname, seed):
    small = opname == "PROD"
    return [data(r, (sum(COUNTS), 5), dtype, seed=seed, small=small)
            for r in range(SIZE)]


def _scan_input(dtype, opname, seed):
    small = opname == "PROD"
    return [data(r, (3, 5), dtype, seed=seed, small=small)
            for r in range(SIZE)]


def _refs(dtype, opname, seed):
    blocks = _block_input(dtype, opname, seed)
    block = reduce_ref([b[RANK] for b in blocks], opname, dtype)
    vs = _v_input(dtype, opname, seed)
    lo, hi = OFFSETS[RANK], OFFSETS[RANK + 1]
    v = reduce_ref([a[lo:hi] for a in vs], opname, dtype)
    return block, v, exscan_ref(_scan_input(dtype, opname, seed), opname,
                                dtype)


def _all_cases(inputs):
    out = []
    for (dtype, opname), (b, v, s) in zip(CASES, inputs):
        op = getattr(MPI, opname)
        out.append((mpx.reduce_scatter(b, op),
                    mpx.reduce_scatter(v, op, counts=COUNTS),
                    mpx.exscan(s, op)))
    return out


def test_every_dtype_and_op_in_one_program():
    inputs = [(_block_input(d, op, i)[RANK], _v_input(d, op, i)[RANK],
               _scan_input(d, op, i)[RANK]) for i, (d, op) in enumerate(CASES)]
    results = jax.jit(_all_cases)(inputs)
    later = Later()
    for i, ((dtype, opname), got) in enumerate(zip(CASES, results)):
        for what, g, ref in zip(("reduce_scatter", "reduce_scatter counts",
                                 "exscan"), got, _refs(dtype, opname, i)):
            later.check(g, ref, f"{what} {dtype} {opname}")
    later.done()


EAGER = [(np.dtype(np.float32), "SUM"), (bfloat16, "SUM"),
         (np.dtype(np.int16), "MAX"), (np.dtype(np.float16), "MIN")]


@pytest.mark.parametrize("dtype,opname", EAGER, ids=[f"{d}-{o}" for d, o in EAGER])
def test_eager_and_token_api(dtype, opname):
    i = CASES.index((dtype, opname))
    b, v, s = (f(dtype, opname, i)[RANK] for f in (_block_input, _v_input,
                                                   _scan_input))
    op = getattr(MPI, opname)
    y1, tok = jaxmpi.reduce_scatter(b, op)
    y2, tok = jaxmpi.reduce_scatter(v, op, counts=list(COUNTS), token=tok)
    y3, tok = jaxmpi.exscan(s, op, token=tok)
    later = Later()
    for g, ref in zip((y1, y2, y3), _refs(dtype, opname, i)):
        later.check(g, ref)
    later.true(is_token(tok), "a token comes back")
    later.done()


def test_fori_loop():
    # Carry (SIZE, 2): each step sums block RANK over ranks and adds the
    # exclusive prefix of the carry; NumPy runs the same steps on all ranks.
    steps = 3

    def body(_, c):
        y = mpx.reduce_scatter(c, MPI.SUM)
        yv = mpx.reduce_scatter(c, MPI.SUM, counts=(1,) * SIZE)
        return mpx.exscan(c, MPI.SUM) + y + 2 * yv

    x0 = [data(r, (SIZE, 2), np.int64) for r in range(SIZE)]
    got = jax.jit(lambda c: jax.lax.fori_loop(0, steps, body, c))(x0[RANK])
    cs = [a.copy() for a in x0]
    for _ in range(steps):
        total = sum(cs)
        cs = [sum(cs[:r], np.zeros_like(cs[0])) + 3 * total[r]
              for r in range(SIZE)]
    check(got, cs[RANK])


def _global_dot(a, b):
    """Sum over ranks of <a, b> (through mpi4py, not jaxmpi)."""
    return MPI.COMM_WORLD.allreduce(float(np.vdot(np.asarray(a),
                                                  np.asarray(b)).real))


LINEAR = {
    "block": (lambda x: mpx.reduce_scatter(x, MPI.SUM), (SIZE, 2, 3), (2, 3)),
    "counts": (lambda x: mpx.reduce_scatter(x, MPI.SUM, counts=COUNTS),
               (sum(COUNTS), 3), (COUNTS[RANK], 3)),
    "exscan": (lambda x: mpx.exscan(x, MPI.SUM), (4, 3), (4, 3)),
}


@pytest.mark.parametrize("name", list(LINEAR))
def test_transpose_is_exact_adjoint_and_jvp_is_the_op(name):
    f, xshape, yshape = LINEAR[name]
    rng = np.random.default_rng(100 + RANK)
    x = rng.standard_normal(xshape)
    w = rng.standard_normal(yshape)
    t = rng.standard_normal(xshape)
    ax = jax.jit(f)(x)
    (atw,) = jax.jit(jax.linear_transpose(f, x))(w)
    _, jv = jax.jit(lambda a, b: jax.jvp(f, (a,), (b,)))(x, t)
    ft = jax.jit(f)(t)
    grad = jax.jit(jax.grad(lambda a: jnp.vdot(f(a), w)))(x)
    # The adjoint explicitly: x̄_s = the cotangents of the ranks that use s's
    # entries, gathered with mpi4py.
    ws = MPI.COMM_WORLD.allgather(w)
    if name == "block":
        ref = np.stack(ws)
    elif name == "counts":
        ref = np.concatenate(ws, axis=0)
    else:
        ref = sum(ws[RANK + 1:], np.zeros_like(w))
    lhs, rhs = _global_dot(ax, w), _global_dot(x, atw)
    later = Later()
    later.close(lhs, rhs, "<Ax, w> == <x, A^T w>", rtol=1e-12)
    later.close(atw, ref, "A^T w", rtol=1e-12, atol=1e-12)
    later.close(grad, ref, "grad", rtol=1e-12, atol=1e-12)
    later.close(jv, ft, "jvp", rtol=0, atol=0)
    later.done()


def test_jvp_of_max_min_prod_as_allreduce():
    # As allreduce: MAX/MIN send the tangent of the rank(s) holding the
    # extreme value (ties split evenly), PROD is exact also at zeros. The
    # data has ties and zeros across ranks.
    xs = [data(r, (SIZE, 6), np.float64) for r in range(SIZE)]
    ts = [data(r, (SIZE, 6), np.float64, seed=3) + 0.25 * r
          for r in range(SIZE)]
    vx = [data(r, (sum(COUNTS), 6), np.float64, seed=1) for r in range(SIZE)]
    vt = [data(r, (sum(COUNTS), 6), np.float64, seed=4) + 0.25 * r
          for r in range(SIZE)]
    for a in xs + vx:  # column 0: a tie of every rank (at 2 ranks too)
        a[..., 0] = 1.5
    ops = ("MAX", "MIN", "PROD")

    def f(x, t, v, w):
        out = []
        for name in ops:
            op = getattr(MPI, name)
            out.append(jax.jvp(lambda a: mpx.reduce_scatter(a, op), (x,),
                               (t,))[1])
            out.append(jax.jvp(lambda a: mpx.reduce_scatter(
                a, op, counts=COUNTS), (v,), (w,))[1])
        return out

    got = jax.jit(f)(xs[RANK], ts[RANK], vx[RANK], vt[RANK])
    lo, hi = OFFSETS[RANK], OFFSETS[RANK + 1]
    later = Later()
    k = 0
    for name in ops:
        for xx, tt in ((np.stack([a[RANK] for a in xs]),
                        np.stack([a[RANK] for a in ts])),
                       (np.stack([a[lo:hi] for a in vx]),
                        np.stack([a[lo:hi] for a in vt]))):
            if name == "PROD":
                ref = sum(tt[s] * np.prod(np.delete(xx, s, axis=0), axis=0)
                          for s in range(SIZE))
            else:
                ext = xx.max(0) if name == "MAX" else xx.min(0)
                hit = xx == ext
                ref = (tt * hit).sum(0) / hit.sum(0)
            later.close(got[k], ref, f"jvp {name} #{k}", rtol=1e-12, atol=0)
            k += 1
    later.done()


def test_derivative_of_other_ops_is_a_clear_error():
    x = jnp.ones((SIZE, 2))
    with pytest.raises(NotImplementedError, match="exscan.*MPI.SUM"):
        jax.grad(lambda a: mpx.exscan(a, MPI.PROD).sum())(x)
    with pytest.raises(NotImplementedError, match="reduce_scatter: MPI.MAX "
                       "is not linear; transpose needs MPI.SUM"):
        jax.linear_transpose(lambda a: mpx.reduce_scatter(a, MPI.MAX), x)(
            jnp.ones(2))


def test_vmap_one_call_per_batch():
    # Batch axis last (blocks) or first (counts); one MPI call per batch.
    nb = 2
    xs = [np.stack([data(r, (SIZE, 3), np.float32, seed=k) for k in range(nb)],
                   axis=2) for r in range(SIZE)]  # (SIZE, 3, nb)
    vs = [np.stack([data(r, (sum(COUNTS), 3), np.float32, seed=k)
                    for k in range(nb)]) for r in range(SIZE)]  # (nb, sum, 3)
    fb = jax.vmap(lambda a: mpx.reduce_scatter(a, MPI.SUM), in_axes=2)
    fv = jax.vmap(lambda a: mpx.reduce_scatter(a, MPI.SUM, counts=COUNTS))
    fe = jax.vmap(lambda a: mpx.exscan(a, MPI.SUM), in_axes=2)

    def calls(fn, arg):
        text = str(jax.make_jaxpr(fn)(arg))
        return len(re.findall(r"jaxmpi_(?:reduce_scatter|exscan)\[", text))

    got = jax.jit(lambda a, b: (fb(a), fv(b), fe(a)))(xs[RANK], vs[RANK])
    n_calls = [calls(fb, xs[RANK]), calls(fv, vs[RANK]), calls(fe, xs[RANK])]
    lo, hi = OFFSETS[RANK], OFFSETS[RANK + 1]
    ref_fb = np.stack([sum(x[RANK, :, k] for x in xs) for k in range(nb)])
    ref_fv = sum(v[:, lo:hi] for v in vs)
    ref_fe = np.stack([sum((x[:, :, k] for x in xs[:RANK]),
                           np.zeros((SIZE, 3), np.float32)) for k in range(nb)])
    later = Later()
    later.check(got[0], ref_fb.astype(np.float32), "vmap reduce_scatter")
    later.check(got[1], ref_fv.astype(np.float32), "vmap reduce_scatter counts")
    later.check(got[2], ref_fe.astype(np.float32), "vmap exscan")
    later.true(n_calls == [1, 1, 1], f"one call each, got {n_calls}")
    later.done()


BAD = [
    (dict(counts=(1,) * (SIZE + 1)), ValueError,
     rf"reduce_scatter: counts=\[{', '.join(['1'] * (SIZE + 1))}\] has "
     rf"{SIZE + 1} items: it needs one per rank of the communicator "
     rf"\({SIZE}\)"),
    (dict(counts=(-1,) + (2,) * (SIZE - 1)), ValueError,
     r"reduce_scatter: counts\[0\]=-1 must be a count of rows, 0 or more"),
    (dict(counts=(3,) * SIZE), ValueError,
     rf"reduce_scatter: x has {SIZE} rows \(shape \({SIZE}, 2\)\) but "
     rf"sum\(counts\)={3 * SIZE} \(counts=\[.*\]\): the count and the array "
     r"disagree"),
    (dict(counts=(1.5,) * SIZE), TypeError,
     r"reduce_scatter: counts\[0\] must be an int, got float: 1.5"),
    (dict(counts=3), TypeError,
     r"reduce_scatter: counts must be a list or tuple of ints, one per rank, "
     r"got int: 3"),
    (dict(counts=jnp.ones(SIZE, int)), TypeError,
     r"reduce_scatter: counts must be a static sequence of Python ints"),
]


# The blocking ops and their non-blocking forms ("i"), validated alike.
FORMS = pytest.mark.parametrize("i", ["", "i"], ids=["blocking", "nonblocking"])


@FORMS
@pytest.mark.parametrize("kw,exc,msg", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_counts_raise_before_mpi(kw, exc, msg, i):
    x = jnp.ones((SIZE, 2))
    rs = getattr(mpx, i + "reduce_scatter")
    msg = f"(?<!i){i}{msg}"
    with pytest.raises(exc, match=msg):
        rs(x, MPI.SUM, **kw)
    with pytest.raises(exc, match=msg):
        jax.jit(lambda a: rs(a, MPI.SUM, **kw))(x)


@FORMS
def test_other_bad_input(i):
    rs, ex = getattr(mpx, i + "reduce_scatter"), getattr(mpx, i + "exscan")
    with pytest.raises(ValueError, match=rf"(?<!i){i}reduce_scatter: x must "
                       rf"have leading dimension equal to the communicator "
                       rf"size {SIZE}, got shape \({SIZE + 1}, 2\)"):
        rs(jnp.ones((SIZE + 1, 2)), MPI.SUM)
    with pytest.raises(ValueError, match="leading dimension"):
        rs(jnp.float32(1), MPI.SUM)
    with pytest.raises(TypeError, match=rf"(?<!i){i}reduce_scatter: MPI.MAX "
                       "is not defined for dtype complex64"):
        rs(jnp.ones((SIZE, 2), jnp.complex64), MPI.MAX)
    with pytest.raises(TypeError, match=rf"(?<!i){i}exscan: MPI.SUM is not "
                       "defined for dtype bool"):
        ex(jnp.ones(2, bool), MPI.SUM)
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    try:
        with pytest.raises(TypeError, match=rf"(?<!i){i}exscan: op is a "
                           rf"user-defined MPI.Op; {i}exscan needs a "
                           "predefined op"):
            ex(jnp.ones(2), op)
    finally:
        op.Free()


def _reduce_scatter(nonblocking):
    if nonblocking:
        return lambda *a, **kw: mpx.wait(mpx.ireduce_scatter(*a, **kw))
    return mpx.reduce_scatter


@two_ranks
@pytest.mark.parametrize("nonblocking", [False, True],
                         ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("mode", ["sparse", "all"])
def test_counts_that_differ_between_ranks_are_reported(mode, nonblocking):
    # Same total rows (so the arrays agree), counts reversed on the last
    # rank: every rank raises before MPI runs (ireduce_scatter: at the
    # start), naming the counts.
    rs = _reduce_scatter(nonblocking)
    counts = tuple(range(1, SIZE + 1))
    mine = counts[::-1] if RANK == SIZE - 1 else counts
    with check_mode(mode):
        comm = MPI.COMM_WORLD.Clone()
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        try:
            x = jnp.ones((sum(counts), 2))
            try:
                jax.block_until_ready(jax.jit(lambda a: rs(
                    a, MPI.SUM, counts=mine, comm=comm))(x))
                msg = ""
            except jax.errors.JaxRuntimeError as e:
                msg = str(e)
            # The communicator still works afterwards.
            after = rs(x, MPI.SUM, counts=counts, comm=comm)
        finally:
            comm.Free()
    fmt = lambda c: "counts=[" + ",".join(map(str, c)) + "]"
    assert "differs across ranks (JAXMPI_CHECK)" in msg, msg
    assert "the counts: rank" in msg, msg
    assert f"rank {SIZE - 1} has {fmt(counts[::-1])}" in msg, msg
    assert fmt(counts) in msg, msg
    check(after, np.full((counts[RANK], 2), float(SIZE)))
