"""halo_exchange on Cartesian communicators and neighbor_alltoallv on
distributed-graph and Cartesian ones, against NumPy references built from
the global picture (every rank knows every rank's data), at any rank count.

halo: 1-, 2- and 3-D grids from MPI.Compute_dims, and the degenerate (1, n)
and (n, 1) grids (a rank its own neighbour, left and right the same rank at
2 ranks), periodic, not and mixed, widths 1, (2, 1, ...) and 0 on an axis,
trailing component axes; the reference maps each halo cell to its global
cell independently of the implementation. All cases run in one jitted
program. neighbor_alltoallv: a ring and an irregular multigraph with
rank-dependent counts including zeros (also checked against mpi4py's
Neighbor_alltoallv), and a Cartesian grid. Both: exact dot-product adjoint
tests summed over ranks, JVP, vmap in one call, validation on every rank.
"""

import itertools
import re
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx

# The suites this file belongs to (tests/suites.py).
SUITES = ("across_hosts", "c_core", "mpi_errors")

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()


# ---- halo_exchange ----------------------------------------------------------

def _grids():
    """(name, dims, periods, widths, interior, comps, dtype) of every case."""
    cases = []
    for nd, interior, dtype in ((1, (5,), np.float32), (2, (4, 3), np.int32),
                                (3, (3, 4, 3), np.float64)):
        dims = tuple(MPI.Compute_dims(SIZE, nd))
        for periods in ((True,) * nd, (False,) * nd,
                        tuple(i % 2 == 0 for i in range(nd))):
            for widths in ((1,) * nd, (2, 1, 1)[:nd] if nd > 1 else (2,),
                           (0, *(1,) * (nd - 1)) if nd > 1 else (0,)):
                if any(n < w for n, w in zip(interior, widths)):
                    continue
                cases.append((f"{nd}d-p{periods}-w{widths}", dims, periods,
                              widths, interior, (), dtype))
    # A rank its own neighbour along one axis, and a trailing component axis.
    for dims in ((1, SIZE), (SIZE, 1)):
        for periods in ((True, True), (True, False), (False, True)):
            cases.append((f"{dims}-p{periods}", dims, periods, (1, 2), (3, 4),
                          (2,), np.float32))
    return cases


CASES = _grids()


def _block(case, rank, cart):
    """This rank's block with its halo: interior cells from the global
    array, halo cells a rank- and position-dependent sentinel (negative)."""
    name, dims, periods, widths, interior, comps, dtype = case
    coords = cart.Get_coords(rank)
    glob = _global(case)
    shape = tuple(n + 2 * w for n, w in zip(interior, widths)) + comps
    x = -(1 + (rank * 10000 + np.arange(np.prod(shape))) % 30000)
    x = x.reshape(shape).astype(dtype)
    inner = tuple(slice(w, w + n) for n, w in zip(interior, widths))
    own = tuple(slice(c * n, (c + 1) * n) for c, n in zip(coords, interior))
    x[inner] = glob[own]
    return x


def _global(case):
    name, dims, periods, widths, interior, comps, dtype = case
    shape = tuple(d * n for d, n in zip(dims, interior)) + comps
    return (1 + np.arange(np.prod(shape))).reshape(shape).astype(dtype)


def _halo_reference(case, rank, cart):
    """Each cell of the block, from the global array: local index l along
    axis i is global cell c_i * n_i + l - w_i, wrapped on periodic axes;
    outside a non-periodic axis the cell keeps its value."""
    name, dims, periods, widths, interior, comps, dtype = case
    x = _block(case, rank, cart)
    glob = _global(case)
    coords = cart.Get_coords(rank)
    idx, ok = [], []
    for i, (n, w) in enumerate(zip(interior, widths)):
        g = coords[i] * n + np.arange(n + 2 * w) - w
        valid = (g >= 0) & (g < dims[i] * n)
        if periods[i]:
            g, valid = g % (dims[i] * n), np.ones_like(valid)
        idx.append(np.clip(g, 0, dims[i] * n - 1))
        ok.append(valid)
    mask = np.ones(x.shape[:len(dims)], bool)
    for i, v in enumerate(ok):
        mask = mask & v.reshape([-1 if k == i else 1 for k in range(len(dims))])
    mask = mask.reshape(mask.shape + (1,) * len(comps))
    return np.where(mask, glob[np.ix_(*idx)], x)


@pytest.fixture(scope="module")
def carts():
    out = [WORLD.Create_cart(c[1], c[2], reorder=False) for c in CASES]
    yield out
    for c in out:
        c.Free()


def test_halo_exchange_all_grids(carts):
    blocks = [_block(c, RANK, cart) for c, cart in zip(CASES, carts)]

    @jax.jit
    def run(blocks):
        return [mpx.halo_exchange(b, cart, c[3])
                for b, c, cart in zip(blocks, CASES, carts)]

    got = run(blocks)
    bad = []
    for c, cart, g in zip(CASES, carts, got):
        want = _halo_reference(c, RANK, cart)
        if g.dtype != want.dtype or not np.array_equal(np.asarray(g), want):
            bad.append(c[0])
    assert not bad, f"rank {RANK}: wrong halo in {bad}"


def test_halo_exchange_several_fields_token_api_and_eager(carts):
    # Several fields in one call (a tuple stays a tuple), the token API, and
    # eager calls (no jit).
    k = next(i for i, c in enumerate(CASES) if c[0].startswith("2d-p(True, True)"))
    c, cart = CASES[k], carts[k]
    x = _block(c, RANK, cart)
    want = _halo_reference(c, RANK, cart)
    # Two int32 fields share each message, a float32 one and a wider int32
    # one (a trailing axis) ride along.
    wide = np.stack([x, 3 * x], -1)
    (a, b, f, w), tok = jaxmpi.halo_exchange(
        (x, 2 * x, x.astype(np.float32), wide), cart, c[3],
        token=jax.lax.create_token())
    lst = mpx.halo_exchange([x], cart, c[3])
    assert isinstance(lst, list) and np.array_equal(lst[0], want)
    assert np.array_equal(a, want) and np.array_equal(b, 2 * want)
    assert f.dtype == np.float32 and np.array_equal(f, want.astype(np.float32))
    assert np.array_equal(w, np.stack([want, 3 * want], -1))
    assert jaxmpi._validate.is_token(tok)


def _halo_case_3d(carts, periodic):
    k = next(i for i, c in enumerate(CASES)
             if c[0].startswith("3d") and all(c[2]) == periodic
             and any(c[2]) == periodic and c[3] == (2, 1, 1))
    return CASES[k], carts[k]


def _allsum(v):
    return WORLD.allreduce(float(v), MPI.SUM)


@pytest.mark.parametrize("periodic", [True, False])
def test_halo_exchange_adjoint_jvp_vmap(carts, periodic):
    c, cart = _halo_case_3d(carts, periodic)
    shape = _block(c, RANK, cart).shape
    rng = np.random.default_rng(RANK + 7)
    # Small integers: every sum below is exact in float64.
    x = rng.integers(-8, 9, shape).astype(np.float64)
    y = rng.integers(-8, 9, shape).astype(np.float64)
    t = rng.integers(-8, 9, shape).astype(np.float64)
    f = lambda a: mpx.halo_exchange(a, cart, c[3])  # noqa: E731

    @jax.jit
    def run(x, y, t):
        fx, vjp = jax.vjp(f, x)
        (fty,) = vjp(y)
        _, jt = jax.jvp(f, (x,), (t,))
        batch = jax.vmap(f)(jnp.stack([x, y, t]))
        return fx, fty, jt, f(t), batch, f(x), f(y)

    fx, fty, jt, ft, batch, fx2, fy = run(x, y, t)
    lhs = _allsum(np.vdot(np.asarray(fx), y))
    rhs = _allsum(np.vdot(x, np.asarray(fty)))
    jaxpr = str(jax.make_jaxpr(jax.vmap(f))(jnp.stack([x, y])))
    assert lhs == rhs, (lhs, rhs)
    assert np.array_equal(jt, ft)
    assert np.array_equal(batch, np.stack([fx2, fy, ft]))
    assert jaxpr.count("jaxmpi_neighbor_exchange") <= 1, jaxpr


def test_halo_exchange_validation(carts):
    c, cart = _halo_case_3d(carts, True)
    x = jnp.zeros((5, 6, 5))
    with pytest.raises(TypeError, match="Cartesian"):
        mpx.halo_exchange(x, WORLD)
    with pytest.raises(TypeError, match="Cartesian"):
        mpx.halo_exchange(x, None)
    with pytest.raises(ValueError, match=r"width\[1\] must be >= 0, got -1"):
        mpx.halo_exchange(x, cart, (1, -1, 1))
    with pytest.raises(ValueError, match="width 2 is too large for x's axis 0 of 5"):
        mpx.halo_exchange(x, cart, 2)
    with pytest.raises(ValueError, match="x has 2 axes but .* 3 dimensions"):
        mpx.halo_exchange(jnp.zeros((5, 6)), cart)
    with pytest.raises(ValueError, match="width has 2 entries"):
        mpx.halo_exchange(x, cart, (1, 1))
    with pytest.raises(TypeError, match="width must be a static Python int"):
        mpx.halo_exchange(x, cart, 1.0)


# ---- neighbor_alltoallv -----------------------------------------------------

def _ring():
    left, right = (RANK - 1) % SIZE, (RANK + 1) % SIZE
    return {r: [(r - 1) % SIZE, (r + 1) % SIZE] for r in range(SIZE)}


def _irregular():
    # A multigraph: rank r sends to (2r + 1) % size, to (r + 3) % size twice
    # and to itself; at 1-2 ranks most edges repeat.
    return {r: [(2 * r + 1) % SIZE, (r + 3) % SIZE, r, (r + 3) % SIZE]
            for r in range(SIZE)}


def _in_lists(out):
    """Each rank's sources: in rank order, each sender as often as it lists
    the receiver."""
    return {q: [r for r in range(SIZE) for d in out[r] if d == q]
            for q in range(SIZE)}


def _count(r, j):
    return (3 * r + j) % 4  # rows rank r sends in its block j: zeros too


def _rows(r, j, ncols=3):
    n = _count(r, j)
    return (1000 * r + 100 * j + np.arange(n * ncols).reshape(n, ncols)
            ).astype(np.float32)


def _graph_reference(out, rank):
    """What `rank` receives: from each source, in order, the block that
    source lists for `rank`, k-th occurrence matched with k-th."""
    inn = _in_lists(out)
    seen, blocks, counts = {}, [], []
    for s in inn[rank]:
        k = seen.get(s, 0)
        seen[s] = k + 1
        j = [i for i, d in enumerate(out[s]) if d == rank][k]
        blocks.append(_rows(s, j))
        counts.append(_count(s, j))
    return np.concatenate(blocks or [np.zeros((0, 3), np.float32)]), counts


@pytest.fixture(scope="module")
def graphs():
    made = {}
    for name, out in (("ring", _ring()), ("irregular", _irregular())):
        inn = _in_lists(out)
        g = WORLD.Create_dist_graph_adjacent(inn[RANK], out[RANK],
                                             reorder=False)
        made[name] = (g, out)
    yield made
    for g, _ in made.values():
        g.Free()


@pytest.mark.parametrize("name", ["ring", "irregular"])
def test_neighbor_alltoallv_graph(graphs, name):
    g, out = graphs[name]
    x = np.concatenate([_rows(RANK, j) for j in range(len(out[RANK]))])
    sendcounts = [_count(RANK, j) for j in range(len(out[RANK]))]
    want, recvcounts = _graph_reference(out, RANK)
    got = jax.jit(lambda x: mpx.neighbor_alltoallv(
        x, sendcounts, recvcounts, comm=g))(x)
    eager, tok = jaxmpi.neighbor_alltoallv(x, sendcounts, recvcounts, comm=g)
    # mpi4py's own MPI_Neighbor_alltoallv on the same graph and counts.
    theirs = np.zeros_like(want)
    g.Neighbor_alltoallv([x, [3 * c for c in sendcounts], MPI.FLOAT],
                         [theirs, [3 * c for c in recvcounts], MPI.FLOAT])
    assert got.shape == want.shape and np.array_equal(got, want)
    assert np.array_equal(eager, want) and jaxmpi._validate.is_token(tok)
    assert np.array_equal(theirs, want)


def test_neighbor_alltoallv_cartesian():
    dims = MPI.Compute_dims(SIZE, 2)
    cart = WORLD.Create_cart(dims, (True, False), reorder=False)
    try:
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
        want = np.concatenate(want)
        got = jax.jit(lambda x: mpx.neighbor_alltoallv(
            x, sendcounts, recvcounts, comm=cart))(x)
    finally:
        cart.Free()
    assert np.array_equal(got, want), (RANK, got, want)


def _rows_cart(r, k):
    n = (r + k) % 3
    return (1000 * r + 100 * k + np.arange(3 * n).reshape(n, 3)).astype(
        np.float32)


def test_neighbor_alltoallv_adjoint_jvp_vmap(graphs):
    g, out = graphs["irregular"]
    sendcounts = [_count(RANK, j) for j in range(len(out[RANK]))]
    _, recvcounts = _graph_reference(out, RANK)
    rng = np.random.default_rng(RANK)
    x = rng.integers(-8, 9, (sum(sendcounts), 2)).astype(np.float64)
    y = rng.integers(-8, 9, (sum(recvcounts), 2)).astype(np.float64)
    f = lambda a: mpx.neighbor_alltoallv(a, sendcounts, recvcounts, comm=g)  # noqa: E731

    @jax.jit
    def run(x, y):
        fx, vjp = jax.vjp(f, x)
        (fty,) = vjp(y)
        _, jx = jax.jvp(f, (x,), (2 * x,))
        batch = jax.vmap(f, in_axes=1, out_axes=1)(x)
        return fx, fty, jx, batch

    fx, fty, jx, batch = run(x, y)
    lhs = _allsum(np.vdot(np.asarray(fx), y))
    rhs = _allsum(np.vdot(x, np.asarray(fty)))
    jaxpr = str(jax.make_jaxpr(jax.vmap(f, in_axes=1, out_axes=1))(x))
    assert lhs == rhs, (lhs, rhs)
    assert np.array_equal(jx, 2 * np.asarray(fx))
    assert np.array_equal(batch, fx)
    assert jaxpr.count("jaxmpi_neighbor_alltoallv") == 1, jaxpr


def test_neighbor_alltoallv_validation(graphs):
    g, out = graphs["ring"]
    x = jnp.zeros((4, 2))
    with pytest.raises(TypeError, match="distributed-graph"):
        mpx.neighbor_alltoallv(x, [2, 2], [2, 2], comm=WORLD)
    with pytest.raises(ValueError, match="sendcounts has 3 entries"):
        mpx.neighbor_alltoallv(x, [2, 2, 0], [2, 2], comm=g)
    with pytest.raises(ValueError, match="recvcounts has 1 entries"):
        mpx.neighbor_alltoallv(x, [2, 2], [2], comm=g)
    with pytest.raises(ValueError, match=r"sum\(sendcounts\) = 3 but x has 4"):
        mpx.neighbor_alltoallv(x, [2, 1], [2, 2], comm=g)
    with pytest.raises(ValueError, match=r"recvcounts\[0\] must be >= 0"):
        mpx.neighbor_alltoallv(x, [2, 2], [-1, 2], comm=g)
    with pytest.raises(TypeError, match=r"sendcounts\[1\] must be a static"):
        mpx.neighbor_alltoallv(x, [2, jnp.int32(2)], [2, 2], comm=g)
    with pytest.raises(ValueError, match="scalar"):
        mpx.neighbor_alltoallv(jnp.float32(1), [], [], comm=g)


@pytest.mark.parametrize("extra", [1, -1])
def test_neighbor_alltoallv_count_mismatch_is_an_error(graphs, extra):
    # Every rank expects one row more (or less) from its left neighbour than
    # that neighbour sends: a clear error on every rank (jaxmpi's check of
    # the bytes received, or MPI's truncation error), no hang.
    g, out = graphs["ring"]
    sendcounts = [2, 2]
    recvcounts = [2 + extra, 2]
    x = jnp.ones((4, 3), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError,
                       match=r"neighbor_alltoallv: .*(received \d+ bytes .* but expected|truncated)"):
        jax.block_until_ready(
            mpx.neighbor_alltoallv(x, sendcounts, recvcounts, comm=g))


@pytest.mark.skipif(SIZE < 3, reason="needs two distinct neighbours")
def test_failed_exchange_returns_when_mpi_is_done_with_its_buffers():
    # Every rank expects one row less from its first source than it gets
    # (MPI's truncation error, at once) while the last rank enters the call
    # late: a rank that also receives from it must not return before that
    # message has landed. MPI may report the truncation with the other
    # receive still posted (Open MPI 5 does); a call that returned then
    # left MPI writing into a result XLA had freed (heap corruption at 3
    # ranks). Afterwards the graph carries a correct exchange: nothing of
    # the failed call is left over.
    delay = 0.5
    out = _ring()
    inn = _in_lists(out)
    g = WORLD.Create_dist_graph_adjacent(inn[RANK], out[RANK], reorder=False)
    late = SIZE - 1

    def block(r):
        return np.arange(12, dtype=np.float32).reshape(4, 3) + 100 * r

    try:
        g.Barrier()
        t0 = time.perf_counter()
        if RANK == late:
            time.sleep(delay)
        msg = ""
        try:
            jax.block_until_ready(mpx.neighbor_alltoallv(
                jnp.asarray(block(RANK)), [2, 2], [1, 2], comm=g))
        except jax.errors.JaxRuntimeError as e:
            msg = str(e)
        elapsed = time.perf_counter() - t0
        got = np.asarray(mpx.neighbor_alltoallv(
            jnp.asarray(block(RANK)), [2, 2], [2, 2], comm=g))
    finally:
        g.Free()
    assert re.search(r"neighbor_alltoallv: .*truncated", msg), msg
    if late in inn[RANK]:
        assert elapsed >= 0.9 * delay, (
            f"returned after {elapsed:.3f} s, before rank {late} sent")
    # Sender s sends rows 2j:2j+2 of its block to out[s][j].
    want = np.concatenate([block(s)[2 * out[s].index(RANK):][:2]
                           for s in inn[RANK]])
    np.testing.assert_array_equal(got, want)
