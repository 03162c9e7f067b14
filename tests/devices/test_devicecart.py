"""DeviceCart: the Cartesian grid over processes x devices. halo_exchange,
ihalo_exchange, neighbor_alltoallv and ineighbor_alltoallv between
positions (a neighbour at another position of this process or of another
process), against a halo cut in NumPy from the global array: 1-D rings
(periodic and not), 2-D grids with corners, widths 1 and 2 and per axis,
several fields of two dtypes with a component axis."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
import util
from devutil import N, RANK, SIZE, Api, make_mesh, spmd, split, stack

# Interior cells per device along grid axes 0 and 1 (different, so that a
# swapped axis changes shapes or values).
BLOCK = (3, 2)


class Grid:
    """The global grid of a DeviceCart, computed here from the process grid
    and the mesh (not from the DeviceCart under test)."""

    def __init__(self, cart, mesh):
        self.pdims, periods, self.pcoords = cart.Get_topo()
        self.periods = [bool(p) for p in periods]
        self.mshape = [mesh.shape[a] for a in mesh.axis_names]
        self.dims = [p * m for p, m in zip(self.pdims, self.mshape)]
        self.ndim = len(self.dims)

    def coords(self, k):
        """Grid coordinates of this process's position k."""
        mc = np.unravel_index(k, self.mshape)
        return [p * m + c for p, m, c in zip(self.pcoords, self.mshape, mc)]

    def wrap(self, g, unit=None):
        """g inside the grid (periodic axes wrapped), or None; g counts
        blocks, or cells of blocks of shape `unit`."""
        out = []
        for i, c in enumerate(g):
            size = self.dims[i] * (unit[i] if unit else 1)
            if 0 <= c < size:
                out.append(c)
            elif self.periods[i]:
                out.append(c % size)
            else:
                return None
        return out

    def block_id(self, g):
        return int(np.ravel_multi_index(g, self.dims))


def field(grid, g, widths, dtype, comps, seed):
    """The block at grid coords g with its halo: interior cells from the
    global array (value of global cell (I, J)), halo cells a sentinel of the
    block's own (negative, per cell)."""
    ndim = grid.ndim
    shape = [BLOCK[i] + 2 * widths[i] for i in range(ndim)]
    idx = np.indices(shape)
    glob = [g[i] * BLOCK[i] - widths[i] + idx[i] for i in range(ndim)]
    inside = np.all([(widths[i] <= idx[i]) & (idx[i] < widths[i] + BLOCK[i])
                     for i in range(ndim)], axis=0)
    val = global_value(glob, seed)
    sentinel = -(1 + grid.block_id(g) * 1000 + np.ravel_multi_index(
        idx, shape)) - seed
    out = np.where(inside, val, sentinel)
    out = np.stack([out * (c + 1) for c in range(comps)], axis=-1) if comps else out
    return out.astype(dtype)


def global_value(glob, seed):
    v = seed * 7 + 1
    for c in glob:
        v = v * 100 + c
    return v


def halo_reference(grid, g, widths, dtype, comps, seed):
    """The block after the exchange, from the global array: each halo cell
    holds the global cell it stands for (wrapped on periodic axes); beyond
    a non-periodic edge it keeps the input's value."""
    mine = field(grid, g, widths, dtype, comps, seed)
    ndim = grid.ndim
    shape = [BLOCK[i] + 2 * widths[i] for i in range(ndim)]
    out = mine.copy()
    for cell in np.ndindex(*shape):
        glob = [g[i] * BLOCK[i] - widths[i] + cell[i] for i in range(ndim)]
        w = grid.wrap(glob, BLOCK)
        if w is None:
            continue
        v = global_value(w, seed)
        out[cell] = (np.array([v * (c + 1) for c in range(comps)]) if comps
                     else v)
    return out.astype(dtype)


# neighbor_alltoallv: rows sent to each face neighbour (per dimension the
# negative, then the positive one), all different, a zero among them.
SENDCOUNTS = {1: [1, 2], 2: [1, 2, 3, 0]}


def nbr_send(grid, g, seed):
    c = SENDCOUNTS[grid.ndim]
    return util.data(grid.block_id(g), (sum(c), 2), np.float64, seed=seed)


def nbr_reference(grid, g, seed):
    """Block s of the result: what the neighbour in direction s sent to its
    opposite direction (s ^ 1), zeros from beyond a non-periodic edge."""
    c = SENDCOUNTS[grid.ndim]
    off = np.concatenate([[0], np.cumsum(c)])
    blocks = []
    for s in range(2 * grid.ndim):
        d, sign = divmod(s, 2)
        peer = list(g)
        peer[d] += 1 if sign else -1
        peer = grid.wrap(peer)
        rows = c[s ^ 1]
        if peer is None:
            blocks.append(np.zeros((rows, 2)))
        else:
            sent = nbr_send(grid, peer, seed)
            blocks.append(sent[off[s ^ 1]:off[s ^ 1] + rows])
    return np.concatenate(blocks)


# (process grid dims: 1 or 2, periods, widths, mesh layout, API)
CASES = [
    ("ring-periodic-w1", 1, [True], 1, "1d-reversed", "notoken"),
    ("line-w2", 1, [False], 2, "1d", "token"),
    ("2d-periodic-w1", 2, [True, True], 1, "2d-reversed", "notoken"),
    ("2d-mixed-w21", 2, [True, False], (2, 1), "2d", "token"),
    ("2d-open-w1", 2, [False, False], 1, "2d-t", "notoken"),
]


def run_then_free(body, mesh, ins, dcart, cart):
    """The program's results, then the DeviceCart and its Cartesian
    communicator freed (after the results: freeing a communicator in flight
    is MPI's error)."""
    try:
        return jax.block_until_ready(spmd(body, mesh)(ins))
    finally:
        dcart.free()
        cart.Free()


@pytest.mark.parametrize("name,ndim,periods,width,layout,api", CASES,
                         ids=[c[0] for c in CASES])
def test_halo_and_neighbours(name, ndim, periods, width, layout, api):
    mesh = make_mesh(layout)
    dims = MPI.Compute_dims(SIZE, ndim)
    cart = MPI.COMM_WORLD.Create_cart(dims, periods=periods, reorder=False)
    dcart = jaxmpi.DeviceCart(cart, mesh)
    grid = Grid(cart, mesh)
    widths = [width] * ndim if isinstance(width, int) else list(width)
    coords = [grid.coords(k) for k in range(N)]
    ins = {
        "f": stack([field(grid, g, widths, np.float64, 2, 0) for g in coords]),
        "i": stack([field(grid, g, widths, np.int32, 0, 1) for g in coords]),
        "h": stack([field(grid, g, widths, np.float32, 0, 2) for g in coords]),
        "n": stack([nbr_send(grid, g, 3) for g in coords]),
        "m": stack([nbr_send(grid, g, 4) for g in coords]),
    }
    c = SENDCOUNTS[ndim]
    rc = [c[s ^ 1] for s in range(2 * ndim)]

    def body(t):
        mpx = Api(api)
        req = mpx.ihalo_exchange(t["h"], dcart, width, tag=40)
        nreq = mpx.ineighbor_alltoallv(t["m"], c, rc, comm=dcart, tag=60)
        # Work while the halo travels.
        work = jnp.sum(t["h"] * 2)
        f, i = mpx.halo_exchange([t["f"], t["i"]], dcart, width, tag=10)
        n = mpx.neighbor_alltoallv(t["n"], c, rc, comm=dcart, tag=30)
        h = mpx.wait(req)
        m = mpx.wait(nreq)
        coords = jnp.stack(dcart.coords())
        return {"f": f, "i": i, "h": h, "n": n, "m": m, "work": work,
                "coords": coords}

    got = run_then_free(body, mesh, ins, dcart, cart)
    later = util.Later()
    for k, g in enumerate(coords):
        at = f"position {k} (grid {g}) of rank {RANK}"
        later.check(split(got["coords"])[k], np.array(g, np.int32), f"coords {at}")
        later.check(split(got["f"])[k], halo_reference(grid, g, widths, np.float64, 2, 0),
                    f"halo_exchange field f {at}")
        later.check(split(got["i"])[k], halo_reference(grid, g, widths, np.int32, 0, 1),
                    f"halo_exchange field i {at}")
        later.check(split(got["h"])[k], halo_reference(grid, g, widths, np.float32, 0, 2),
                    f"ihalo_exchange {at}")
        later.check(split(got["n"])[k], nbr_reference(grid, g, 3),
                    f"neighbor_alltoallv {at}")
        later.check(split(got["m"])[k], nbr_reference(grid, g, 4),
                    f"ineighbor_alltoallv {at}")
        later.check(split(got["work"])[k],
                    np.float32(field(grid, g, widths, np.float32, 0, 2).sum() * 2),
                    f"work {at}")
    later.done()


# ---- gradients, jvp and vmap -------------------------------------------------

def halo_weights(grid, g, widths, seed=9):
    shape = tuple(BLOCK[i] + 2 * widths[i] for i in range(grid.ndim))
    return util.data(grid.block_id(g), shape, np.float64, seed=seed)


def halo_adjoint(grid, g, widths, seed=9):
    """The transpose of the halo exchange applied to every block's weights,
    at block g, written cell by cell: a filled halo cell's weight goes to
    the cell it was copied from (in whichever block owns it), a halo cell
    without a neighbour keeps its own, an own cell keeps its own."""
    ndim = grid.ndim
    shape = tuple(BLOCK[i] + 2 * widths[i] for i in range(ndim))
    out = np.zeros(shape)

    def interior(c):
        return all(widths[i] <= c[i] < widths[i] + BLOCK[i] for i in range(ndim))

    mine = halo_weights(grid, g, widths, seed)
    for c in np.ndindex(*shape):
        glob = [g[i] * BLOCK[i] - widths[i] + c[i] for i in range(ndim)]
        if interior(c) or grid.wrap(glob, BLOCK) is None:
            out[c] += mine[c]
    for other in np.ndindex(*grid.dims):
        w = halo_weights(grid, list(other), widths, seed)
        for c in np.ndindex(*shape):
            if interior(c):
                continue
            glob = [other[i] * BLOCK[i] - widths[i] + c[i] for i in range(ndim)]
            src = grid.wrap(glob, BLOCK)
            if src is None:
                continue
            owner = [s // BLOCK[i] for i, s in enumerate(src)]
            if owner == list(g):
                at = tuple(s - g[i] * BLOCK[i] + widths[i] for i, s in enumerate(src))
                out[at] += w[c]
    return out


def nbr_weights(grid, g, seed=10):
    c = SENDCOUNTS[grid.ndim]
    rows = sum(c[s ^ 1] for s in range(2 * grid.ndim))
    return util.data(grid.block_id(g), (rows, 2), np.float64, seed=seed)


def nbr_adjoint(grid, g, seed=10):
    """x's cotangent: block j (sent to the neighbour in direction j) gets
    that neighbour's weights of its slot j ^ 1 (where our block landed),
    zeros where there is no neighbour."""
    c = SENDCOUNTS[grid.ndim]
    rc = [c[s ^ 1] for s in range(2 * grid.ndim)]
    roff = np.concatenate([[0], np.cumsum(rc)])
    blocks = []
    for j in range(2 * grid.ndim):
        d, sign = divmod(j, 2)
        peer = list(g)
        peer[d] += 1 if sign else -1
        peer = grid.wrap(peer)
        if peer is None:
            blocks.append(np.zeros((c[j], 2)))
        else:
            w = nbr_weights(grid, peer, seed)
            blocks.append(w[roff[j ^ 1]:roff[j ^ 1] + c[j]])
    return np.concatenate(blocks)


AD_CASES = [("line-w2", 1, [False], 2, "1d-reversed"),
            ("2d-mixed-w21", 2, [False, True], (2, 1), "2d")]


# JAX 0.6's transpose of dynamic_update_slice types the zeros it makes as
# invariant inside shard_map ("Primitive dynamic_update_slice requires
# varying manual axes to match"): the halo of a position without a
# neighbour (a select) trips it. docs/devices.md, "Limits".
OLD_JAX = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 7)


@pytest.mark.skipif(OLD_JAX, reason="JAX < 0.7 mistypes the transpose of "
                    "a halo with non-periodic edges inside shard_map")
@pytest.mark.parametrize("name,ndim,periods,width,layout", AD_CASES,
                         ids=[c[0] for c in AD_CASES])
def test_grad_jvp_vmap(name, ndim, periods, width, layout):
    """grad of halo_exchange, ihalo_exchange, neighbor_alltoallv and
    ineighbor_alltoallv against their transposes written out in NumPy; jvp
    and vmap of the halo exchange against the halo of the tangent and of
    each batch member."""
    import jaxmpi.notoken as mpx

    mesh = make_mesh(layout)
    cart = MPI.COMM_WORLD.Create_cart(MPI.Compute_dims(SIZE, ndim),
                                      periods=periods, reorder=False)
    dcart = jaxmpi.DeviceCart(cart, mesh)
    grid = Grid(cart, mesh)
    widths = [width] * ndim if isinstance(width, int) else list(width)
    coords = [grid.coords(k) for k in range(N)]
    c = SENDCOUNTS[ndim]
    rc = [c[s ^ 1] for s in range(2 * ndim)]
    ins = {
        "x": stack([field(grid, g, widths, np.float64, 0, 0) for g in coords]),
        "t": stack([field(grid, g, widths, np.float64, 0, 5) for g in coords]),
        "xb": stack([np.stack([field(grid, g, widths, np.float64, 0, s)
                               for s in (6, 7)]) for g in coords]),
        "hw": stack([halo_weights(grid, g, widths) for g in coords]),
        "n": stack([nbr_send(grid, g, 3) for g in coords]),
        "nw": stack([nbr_weights(grid, g) for g in coords]),
        "nb": stack([np.stack([nbr_send(grid, g, s) for s in (11, 12)])
                     for g in coords]),
    }

    def body(d):
        def halo(x):
            return mpx.halo_exchange(x, dcart, width)

        def ihalo(x):
            return mpx.wait(mpx.ihalo_exchange(x, dcart, width, tag=50))

        def nbr(x):
            return mpx.neighbor_alltoallv(x, c, rc, comm=dcart, tag=20)

        def inbr(x):
            return mpx.wait(mpx.ineighbor_alltoallv(x, c, rc, comm=dcart, tag=70))

        return {
            "grad_halo": jax.grad(lambda x: jnp.sum(d["hw"] * halo(x)))(d["x"]),
            "grad_nbr": jax.grad(lambda x: jnp.sum(d["nw"] * nbr(x)))(d["n"]),
            "jvp_halo": jax.jvp(halo, (d["x"],), (d["t"],))[1],
            "vmap_halo": jax.vmap(halo)(d["xb"]),
            "vmap_inbr": jax.vmap(inbr)(d["nb"]),
            # Last, together: a blocking exchange after a backward request
            # on a DeviceCart in the same program hangs (tests/launch/
            # test_devices.py: test_exchange_after_backward_request).
            **dict(zip(("grad_ihalo", "grad_inbr"), jax.grad(
                lambda x, n: jnp.sum(d["hw"] * ihalo(x))
                + jnp.sum(d["nw"] * inbr(n)), argnums=(0, 1))(d["x"], d["n"]))),
        }

    got = run_then_free(body, mesh, ins, dcart, cart)
    later = util.Later()
    for k, g in enumerate(coords):
        at = f"position {k} (grid {g}) of rank {RANK}"
        want = {
            "grad_halo": halo_adjoint(grid, g, widths),
            "grad_ihalo": halo_adjoint(grid, g, widths),
            "grad_nbr": nbr_adjoint(grid, g),
            "grad_inbr": nbr_adjoint(grid, g),
            "jvp_halo": halo_reference(grid, g, widths, np.float64, 0, 5),
            "vmap_halo": np.stack([halo_reference(grid, g, widths, np.float64, 0, s)
                                   for s in (6, 7)]),
            "vmap_inbr": np.stack([nbr_reference(grid, g, s) for s in (11, 12)]),
        }
        for key, w in want.items():
            later.check(split(got[key])[k], w, f"{key} {at}")
    later.done()
