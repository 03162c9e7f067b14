"""The non-blocking topology operations, ihalo_exchange and
ineighbor_alltoallv, at any rank count: each result on every rank against a
NumPy reference built from the global picture (test_halo.py's) and, bitwise,
against the blocking op. 1-, 2- and 3-D grids from MPI.Compute_dims,
periodic or not, widths per axis (all of test_halo's cases in one program,
every request in flight while the blocking exchanges run); many fields of
many dtypes (more messages than one request carries); a fori_loop with
work between start and wait; distributed graphs (a ring, an irregular
multigraph with rank-dependent counts and zeros), a graph and a Cartesian
communicator; grad and jvp, vmap; misuse and bad input with the blocking
op's errors.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx
from test_halo import (CASES, _block, _count, _graph_reference,  # noqa: F401
                       _halo_reference, _in_lists, _rows, _rows_cart, carts,
                       graphs)
from util import RANK, SIZE, WORLD, Later


def _in_flight():
    return jaxmpi._core.get().requests_in_flight()


# ---- ihalo_exchange ---------------------------------------------------------

def test_ihalo_exchange_all_grids(carts):
    # Every case's request is started before any is waited, and the
    # blocking exchanges of the same blocks run on the same communicators
    # (other tags) while they are in flight.
    blocks = [_block(c, RANK, cart) for c, cart in zip(CASES, carts)]

    @jax.jit
    def run(blocks):
        reqs = [mpx.ihalo_exchange(b, cart, c[3], tag=100)
                for b, c, cart in zip(blocks, CASES, carts)]
        blocking = [mpx.halo_exchange(b, cart, c[3])
                    for b, c, cart in zip(blocks, CASES, carts)]
        return mpx.waitall(reqs), blocking

    got, blocking = run(blocks)
    bad = []
    for c, cart, g, b in zip(CASES, carts, got, blocking):
        want = _halo_reference(c, RANK, cart)
        if g.dtype != want.dtype or not np.array_equal(np.asarray(g), want):
            bad.append(f"{c[0]} (NumPy)")
        if not np.array_equal(np.asarray(g), np.asarray(b)):
            bad.append(f"{c[0]} (halo_exchange)")
    assert not bad, f"rank {RANK}: wrong halo in {bad}"


def _case(prefix):
    k = next(i for i, c in enumerate(CASES) if c[0].startswith(prefix))
    return k, CASES[k]


def test_ihalo_exchange_eager_token_api_and_several_fields(carts):
    # Eager calls; a tuple stays a tuple, a list a list; int32 fields share
    # each message, a float32 one and one with a trailing axis ride along.
    k, c = _case("2d-p(True, True)")
    cart = carts[k]
    x = _block(c, RANK, cart)
    want = _halo_reference(c, RANK, cart)
    wide = np.stack([x, 3 * x], -1)
    req, tok = jaxmpi.ihalo_exchange((x, 2 * x, x.astype(np.float32), wide),
                                     cart, c[3], token=jax.lax.create_token())
    later = Later()
    later.true(isinstance(req, jaxmpi.Request) and req.op == "ihalo_exchange",
               "a Request of ihalo_exchange")
    (a, b, f, w), tok = jaxmpi.wait(req, token=tok)
    one = mpx.wait(mpx.ihalo_exchange(x, cart, c[3]))
    lst = mpx.wait(mpx.ihalo_exchange([x], cart, c[3]))
    blocking = mpx.halo_exchange(x, cart, c[3])
    later.true(jaxmpi._validate.is_token(tok), "token")
    later.true(isinstance(lst, list) and len(lst) == 1, "a list")
    later.check(lst[0], want, "list")
    later.check(one, want, "one array")
    later.check(one, np.asarray(blocking), "halo_exchange")
    later.check(a, want)
    later.check(b, 2 * want)
    later.check(f, want.astype(np.float32))
    later.check(w, np.stack([want, 3 * want], -1))
    later.done()


DTYPES = (np.float32, np.float64, np.int32, np.int64, np.int16, np.uint16,
          np.complex64, np.int8)


def test_ihalo_exchange_many_dtypes_in_several_requests():
    # One message per direction and dtype: 8 dtypes on a 1-D grid are 16
    # messages from 2 ranks on (a non-periodic 2-D grid at 4 ranks: 64),
    # more than one ineighbor_exchange request carries (15).
    nd = 1 if SIZE < 4 else 2
    dims = tuple(MPI.Compute_dims(SIZE, nd))
    periods = (True, False)[:nd] if nd == 2 else (True,)
    interior = (4, 3)[:nd]
    cases = [(f"{np.dtype(d)}", dims, periods, (1,) * nd, interior, (), d)
             for d in DTYPES]
    cart = WORLD.Create_cart(dims, periods, reorder=False)
    try:
        xs = tuple(_block(c, RANK, cart) for c in cases)
        f = jax.jit(lambda xs: (mpx.wait(mpx.ihalo_exchange(xs, cart, tag=3)),
                                mpx.halo_exchange(xs, cart, tag=3)))
        got, blocking = f(xs)
        jaxpr = str(jax.make_jaxpr(lambda xs: mpx.wait(mpx.ihalo_exchange(
            xs, cart)))(xs))
        want = [_halo_reference(c, RANK, cart) for c in cases]
    finally:
        cart.Free()
    # Per dtype: left and right (1-D), or the 8 directions of a 2-D grid.
    messages = 0 if SIZE == 1 else len(DTYPES) * (2 if nd == 1 else 8)
    later = Later()
    later.true(type(got) is tuple and len(got) == len(DTYPES), "a tuple")
    for c, g, b, w in zip(cases, got, blocking, want):
        later.check(g, w, f"{c[0]} against NumPy")
        later.check(g, np.asarray(b), f"{c[0]} against halo_exchange")
    later.equal(jaxpr.count("jaxmpi_ineighbor_exchange"),
                max(1, -(-messages // 15)), "requests")
    later.done()


def _stencil_loop(nonblocking, cart, steps=4):
    """An integer stencil on a periodic 2-D grid, the halo refreshed each
    step; with the non-blocking form, a sum over the own cells (no halo
    read) while the halo is in flight."""
    def body(_, carry):
        u, acc = carry
        if nonblocking:
            req = mpx.ihalo_exchange(u, cart)
            acc = acc + jnp.sum(u[1:-1, 1:-1] % 7)  # while in flight
            u = mpx.wait(req)
        else:
            u = mpx.halo_exchange(u, cart)
            acc = acc + jnp.sum(u[1:-1, 1:-1] % 7)
        new = (u[1:-1, 1:-1] + u[:-2, 1:-1] + 2 * u[2:, 1:-1]
               + 3 * u[1:-1, :-2] + 5 * u[1:-1, 2:]) % 1000
        return u.at[1:-1, 1:-1].set(new), acc

    return jax.jit(lambda u: jax.lax.fori_loop(0, steps, body,
                                               (u, jnp.int64(0))))


def test_ihalo_exchange_in_a_loop_with_work_in_flight():
    dims = tuple(MPI.Compute_dims(SIZE, 2))
    cart = WORLD.Create_cart(dims, (True, True), reorder=False)
    n = (5, 4)
    glob = (np.arange(dims[0] * n[0] * dims[1] * n[1]) * 37 % 1000).reshape(
        dims[0] * n[0], dims[1] * n[1]).astype(np.int64)
    cy, cx = cart.Get_coords(RANK)
    try:
        u = np.zeros((n[0] + 2, n[1] + 2), np.int64)
        u[1:-1, 1:-1] = glob[cy * n[0]:(cy + 1) * n[0], cx * n[1]:(cx + 1) * n[1]]
        got, acc = _stencil_loop(True, cart)(u)
        ref, ref_acc = _stencil_loop(False, cart)(u)
    finally:
        cart.Free()
    # NumPy: the same steps on the global grid (periodic: np.roll).
    g, accs = glob.copy(), 0
    for _ in range(4):
        accs += int(np.sum(g[cy * n[0]:(cy + 1) * n[0],
                             cx * n[1]:(cx + 1) * n[1]] % 7))
        g = (g + np.roll(g, 1, 0) + 2 * np.roll(g, -1, 0) + 3 * np.roll(g, 1, 1)
             + 5 * np.roll(g, -1, 1)) % 1000
    later = Later()
    later.equal(np.asarray(got)[1:-1, 1:-1],
                g[cy * n[0]:(cy + 1) * n[0], cx * n[1]:(cx + 1) * n[1]], "NumPy")
    later.equal(acc, accs, "work while in flight")
    later.check(got, np.asarray(ref), "halo_exchange")
    later.equal(acc, ref_acc)
    later.done()


# ---- ineighbor_alltoallv ----------------------------------------------------

def _reference(out, inn, rank):
    """What `rank` receives from its sources inn[rank], in order: from each,
    the block that source lists for `rank`, k-th occurrence with k-th."""
    seen, blocks, counts = {}, [], []
    for s in inn[rank]:
        k = seen.get(s, 0)
        seen[s] = k + 1
        j = [i for i, d in enumerate(out[s]) if d == rank][k]
        blocks.append(_rows(s, j))
        counts.append(_count(s, j))
    return np.concatenate(blocks or [np.zeros((0, 3), np.float32)]), counts


def _cartesian():
    """A 2-D Cartesian communicator, periodic in its first dimension, and
    (x, sendcounts, recvcounts, want) of test_halo's case."""
    cart = WORLD.Create_cart(MPI.Compute_dims(SIZE, 2), (True, False),
                             reorder=False)
    nbrs = [q for i in range(2) for q in cart.Shift(i, 1)]
    sendcounts = [(RANK + k) % 3 for k in range(4)]
    x = np.concatenate([_rows_cart(RANK, k) for k in range(4)])
    want, recvcounts = [], []
    for k, q in enumerate(nbrs):
        if q == MPI.PROC_NULL:  # nothing arrives: zeros
            recvcounts.append(2)
            want.append(np.zeros((2, 3), np.float32))
        else:  # q's block sent the opposite way (k ^ 1)
            recvcounts.append((q + (k ^ 1)) % 3)
            want.append(_rows_cart(q, k ^ 1))
    return cart, (x, sendcounts, recvcounts, np.concatenate(want))


def test_ineighbor_alltoallv_graphs_and_cartesian(graphs):
    ring = [(r - 1) % SIZE for r in range(SIZE)], [(r + 1) % SIZE
                                                   for r in range(SIZE)]
    nbrs = {r: [ring[0][r], ring[1][r]] for r in range(SIZE)}
    index = np.cumsum([len(nbrs[r]) for r in range(SIZE)])
    graph = WORLD.Create_graph(index, [q for r in range(SIZE) for q in nbrs[r]],
                               reorder=False)
    cart, cart_case = _cartesian()
    cases = {}
    for name in ("ring", "irregular"):
        g, out = graphs[name]
        want, recvcounts = _reference(out, _in_lists(out), RANK)
        cases[name] = (g, np.concatenate([_rows(RANK, j)
                                          for j in range(len(out[RANK]))]),
                       [_count(RANK, j) for j in range(len(out[RANK]))],
                       recvcounts, want)
    want, recvcounts = _reference(nbrs, nbrs, RANK)
    cases["graph"] = (graph, np.concatenate([_rows(RANK, j) for j in range(2)]),
                      [_count(RANK, j) for j in range(2)], recvcounts, want)
    cases["cartesian"] = (cart, *cart_case)
    try:
        @jax.jit
        def run(xs):
            reqs = [mpx.ineighbor_alltoallv(x, c[2], c[3], comm=c[0], tag=50)
                    for x, c in zip(xs, cases.values())]
            blocking = [mpx.neighbor_alltoallv(x, c[2], c[3], comm=c[0])
                        for x, c in zip(xs, cases.values())]
            return mpx.waitall(reqs), blocking

        got, blocking = run([c[1] for c in cases.values()])
        g, x, s, r, _ = cases["irregular"]
        req, tok = jaxmpi.ineighbor_alltoallv(x, s, r, comm=g)
        eager, tok = jaxmpi.wait(req, token=tok)
        jaxpr = str(jax.make_jaxpr(lambda x: mpx.wait(mpx.ineighbor_alltoallv(
            x, s, r, comm=g)))(x))
    finally:
        graph.Free()
        cart.Free()
    later = Later()
    for name, y, b in zip(cases, got, blocking):
        later.check(y, cases[name][4], f"{name} against NumPy")
        later.check(y, np.asarray(b), f"{name} against neighbor_alltoallv")
    later.check(eager, cases["irregular"][4], "eager")
    later.true(jaxmpi._validate.is_token(tok), "token")
    # A graph's exchange: one request per in- or out-neighbour.
    degree = max(len(_in_lists(graphs["irregular"][1])[RANK]),
                 len(graphs["irregular"][1][RANK]))
    later.equal(jaxpr.count("jaxmpi_ineighbor_exchange"), degree, "requests")
    later.done()


def test_ineighbor_alltoallv_without_neighbours():
    # A rank of a graph without edges: an empty result, still a request to
    # wait (not waiting it is an error, as for any start).
    lone = MPI.COMM_SELF.Create_dist_graph_adjacent([], [], reorder=False)
    try:
        x = jnp.zeros((0, 2), jnp.float32)
        y = jax.jit(lambda x: mpx.wait(mpx.ineighbor_alltoallv(
            x, [], [], comm=lone)))(x)
        with pytest.raises(RuntimeError, match=r"jaxmpi.ineighbor_alltoallv "
                           r"started at .* was never waited"):
            jax.jit(lambda x: (mpx.ineighbor_alltoallv(x, [], [], comm=lone),
                               x + 1)[1])(x)
    finally:
        lone.Free()
    assert y.shape == (0, 2) and y.dtype == np.float32


# ---- derivatives and vmap -------------------------------------------------


def test_grad_and_jvp_equal_blocking(carts, graphs):
    # 3-D grids, periodic and not, widths (2, 1, 1); the irregular graph.
    # Small integers: every sum is exact, so the derivatives must be equal.
    halo = [(carts[k], c) for k, c in enumerate(CASES) if c[0].startswith("3d")
            and c[3] == (2, 1, 1) and len(set(c[2])) == 1]
    g, out = graphs["irregular"]
    sendcounts = [_count(RANK, j) for j in range(len(out[RANK]))]
    _, recvcounts = _reference(out, _in_lists(out), RANK)
    rng = np.random.default_rng(RANK + 11)
    xs = [rng.integers(-8, 9, _block(c, RANK, cart).shape).astype(np.float64)
          for cart, c in halo]
    xs.append(rng.integers(-8, 9, (sum(sendcounts), 2)).astype(np.float64))
    ws = [rng.integers(-4, 5, x.shape).astype(np.float64) for x in xs[:-1]]
    ws.append(rng.integers(-4, 5, (sum(recvcounts), 2)).astype(np.float64))

    def loss(nonblocking):
        def f(xs):
            if nonblocking:
                reqs = [mpx.ihalo_exchange(x, cart, c[3])
                        for x, (cart, c) in zip(xs, halo)]
                reqs.append(mpx.ineighbor_alltoallv(xs[-1], sendcounts,
                                                    recvcounts, comm=g))
                ys = mpx.waitall(reqs)
            else:
                ys = [mpx.halo_exchange(x, cart, c[3])
                      for x, (cart, c) in zip(xs, halo)]
                ys.append(mpx.neighbor_alltoallv(xs[-1], sendcounts,
                                                 recvcounts, comm=g))
            return sum(jnp.sum(w * y + y * y / 2) for w, y in zip(ws, ys))

        return f

    @jax.jit
    def run(xs, ts):
        return [(jax.grad(loss(nb))(xs), jax.jvp(loss(nb), (xs,), (ts,))[1])
                for nb in (True, False)]

    ts = [x[::-1].copy() for x in xs]
    (grad, tangent), (grad_b, tangent_b) = run(xs, ts)
    later = Later()
    for k, (a, b) in enumerate(zip(grad, grad_b)):
        later.check(a, np.asarray(b), f"grad #{k}")
    later.check(tangent, np.asarray(tangent_b), "jvp")
    later.done()


def test_vmap_equals_loop(carts, graphs):
    k, c = _case("3d-p(True, False, True)-w(2, 1, 1)")
    cart = carts[k]
    g, out = graphs["irregular"]
    sendcounts = [_count(RANK, j) for j in range(len(out[RANK]))]
    _, recvcounts = _reference(out, _in_lists(out), RANK)
    a = np.stack([_block(c, RANK, cart) * (s + 1) for s in range(3)])
    b = np.stack([np.concatenate([_rows(RANK, j) for j in range(len(
        out[RANK]))]) + 1000 * s for s in range(3)], 1)  # batch second

    def f(a, b):
        ra = mpx.ihalo_exchange(a, cart, c[3])
        rb = mpx.ineighbor_alltoallv(b, sendcounts, recvcounts, comm=g)
        return mpx.wait(ra), mpx.wait(rb)

    va, vb = jax.jit(jax.vmap(f, in_axes=(0, 1), out_axes=(0, 1)))(a, b)
    loop = [jax.jit(f)(a[s], b[:, s]) for s in range(3)]
    jaxpr = str(jax.make_jaxpr(jax.vmap(f, in_axes=(0, 1)))(a, b))
    later = Later()
    later.check(va, np.stack([np.asarray(y) for y, _ in loop]), "ihalo_exchange")
    later.check(vb, np.stack([np.asarray(y) for _, y in loop], 1),
                "ineighbor_alltoallv")
    later.check(va[1], 2 * _halo_reference(c, RANK, cart), "against NumPy")
    # One start per request for the whole batch, as unbatched.
    unbatched = str(jax.make_jaxpr(f)(a[0], b[:, 0]))
    later.equal(jaxpr.count("jaxmpi_ineighbor_exchange"),
                unbatched.count("jaxmpi_ineighbor_exchange"), "starts")
    later.done()


# ---- misuse and bad input ---------------------------------------------------


@pytest.fixture(scope="module")
def alone():
    """A Cartesian communicator and a graph of this rank alone, without
    neighbours: requests that send nothing, safe to leave unwaited."""
    cart = MPI.COMM_SELF.Create_cart([1], [False], reorder=False)
    graph = MPI.COMM_SELF.Create_dist_graph_adjacent([], [], reorder=False)
    yield cart, graph
    cart.Free()
    graph.Free()


def test_misuse_is_an_error(carts, alone):
    k, c = _case("2d-p(True, True)")
    cart = carts[k]
    x = jnp.asarray(_block(c, RANK, cart))
    before = _in_flight()
    with pytest.raises(RuntimeError, match=r"jaxmpi.ihalo_exchange started at "
                       r".*test_nonblocking_topology.py:\d+ was never waited"):
        jax.jit(lambda a: (mpx.ihalo_exchange(a, cart), a + 1)[1])(x)
    after_never = _in_flight()

    def twice(a):
        req = mpx.ihalo_exchange(a, cart)
        mpx.wait(req)
        return mpx.wait(req)

    with pytest.raises(RuntimeError, match=r"jaxmpi.ihalo_exchange .* already "
                       r"waited"):
        jax.jit(twice)(x)
    with pytest.raises(TypeError, match=r"jaxmpi.ihalo_exchange .*cannot "
                       r"leave"):
        jax.jit(lambda a: mpx.ihalo_exchange(a, cart))(x)

    def twice_v(a):
        req = mpx.ineighbor_alltoallv(a, [], [], comm=alone[1])
        return mpx.waitall([req]), mpx.wait(req)

    with pytest.raises(RuntimeError, match=r"jaxmpi.ineighbor_alltoallv .* "
                       r"already waited"):
        jax.jit(twice_v)(x[:0])
    # Eagerly (requests on communicators of one rank: nothing is sent), a
    # request dropped is reported by the next call, one waited twice at
    # once.
    lone, graph = alone
    mpx.ihalo_exchange(jnp.zeros(4), lone)
    with pytest.raises(RuntimeError, match=r"jaxmpi.ineighbor_alltoallv: a "
                       r"request of jaxmpi.ihalo_exchange started at .* was "
                       r"never waited"):
        mpx.ineighbor_alltoallv(jnp.zeros((0, 2)), [], [], comm=graph)
    req = mpx.ineighbor_alltoallv(jnp.zeros((0, 2)), [], [], comm=graph)
    first = mpx.wait(req)
    with pytest.raises(RuntimeError, match=r"already waited"):
        mpx.wait(req)
    assert first.shape == (0, 2)
    assert after_never == before  # nothing of the failed program ran


def _errors(call):
    try:
        call()
    except Exception as e:  # noqa: BLE001
        return type(e), str(e)
    return None


def test_bad_input_raises_the_blocking_ops_errors(carts, graphs):
    k, c = _case("3d-p(True, True, True)-w(2, 1, 1)")
    cart = carts[k]
    g, _ = graphs["ring"]
    x = jnp.zeros((5, 6, 5))
    rows = jnp.zeros((4, 2))
    halo_calls = [
        lambda f: f(x, WORLD), lambda f: f(x, None),
        lambda f: f(x, cart, (1, -1, 1)), lambda f: f(x, cart, 2),
        lambda f: f(jnp.zeros((5, 6)), cart), lambda f: f(x, cart, (1, 1)),
        lambda f: f(x, cart, 1.0), lambda f: f([x, "no"], cart),
        lambda f: f(x, cart, tag=-1), lambda f: f(x, cart, tag=2 ** 40),
        lambda f: f(x, cart, token=3),
    ]
    alltoallv_calls = [
        lambda f: f(rows, [2, 2], [2, 2], comm=WORLD),
        lambda f: f(rows, [2, 2, 0], [2, 2], comm=g),
        lambda f: f(rows, [2, 2], [2], comm=g),
        lambda f: f(rows, [2, 1], [2, 2], comm=g),
        lambda f: f(rows, [2, 2], [-1, 2], comm=g),
        lambda f: f(rows, [2, jnp.int32(2)], [2, 2], comm=g),
        lambda f: f(jnp.float32(1), [], [], comm=g),
        lambda f: f(rows, [2, 2], [2, 2], comm=g, tag=-3),
    ]
    before = _in_flight()
    bad = []
    for blocking, start, calls in (
            (mpx.halo_exchange, mpx.ihalo_exchange, halo_calls),
            (mpx.neighbor_alltoallv, mpx.ineighbor_alltoallv,
             alltoallv_calls)):
        name = blocking.__name__
        for i, call in enumerate(calls):
            want, got = _errors(lambda: call(blocking)), _errors(
                lambda: call(start))
            if want is None or got != (want[0], re.sub(
                    rf"\b{name}\b", f"i{name}", want[1])):
                bad.append((name, i, want, got))
    assert not bad, bad
    assert _in_flight() == before  # raised before any MPI call
