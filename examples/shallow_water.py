"""A nonlinear shallow-water model on an MPI-decomposed grid, in JAX.

A zonal jet in geostrophic balance in a channel (periodic in x, walls in y)
on a beta plane, nudged off balance by a small meander. The jet is
barotropically unstable: the meander grows, breaks into eddies and, after a
few model days, into two-dimensional turbulence.

Numerics: the vector-invariant equations

    du/dt =  q (h v) - d/dx (g h + K) + nu lap(u)
    dv/dt = -q (h u) - d/dy (g h + K) + nu lap(v)
    dh/dt = -d/dx (h u) - d/dy (h v)

with potential vorticity q = (f + zeta) / h and kinetic energy K, on an
Arakawa C grid (h at cell centres, u on east faces, v on north faces, q at
north-east corners) with Sadourny's energy-conserving Coriolis term,
third-order Adams-Bashforth time stepping and Laplacian lateral viscosity,
all in float32. Free-slip walls; v = 0 on the walls.

Parallelism: the grid is split into px x py blocks, one per rank, each with
a one-cell halo. The stencils are arranged so that a single halo exchange of
(h, u, v) per time step suffices; many steps run in one jitted call through
lax.fori_loop, so Python is out of the loop and MPI is called from inside the
compiled program. The halo exchange is either

  * halo (the default with jaxmpi): jaxmpi.notoken.halo_exchange of the three
    fields on a Cartesian communicator (periodic in x), one call per step
    that posts every message (4 sides and 4 corners, all three fields) at
    once and fills corners too,
  * fused: the same messages written by hand as one
    jaxmpi.notoken.neighbor_exchange call (kept to compare with), or
  * sendrecv: a sequence of plain sendrecv calls, x direction first, then y
    (with the freshly filled corners), one per field and direction, or
  * overlap: halo_exchange's non-blocking form
    (jaxmpi.notoken.ihalo_exchange, the same messages, started without
    waiting); the tendencies of every cell but the rim are computed while
    the messages are in flight, and only the rim's wait for the halo.
    Bitwise the same result as the other exchanges.

`--backend mpi4jax` runs the same model on mpi4jax (sendrecv exchange).

Several devices per process: `--devices n` gives each process a mesh of n
JAX devices (n CPU devices: it sets XLA's host device count) and each
device a block of its own, the blocks of P * n single-device ranks. The
model runs inside jax.shard_map over the mesh; its halo exchange
(halo or overlap) is jaxmpi's on a jaxmpi.DeviceCart, the grid of blocks
over processes x devices, where a block's neighbour may be another device
of the same process or a device of another process. The result is bitwise
that of P * n ranks with one device each.

Run (any rank count that splits the grid into equal blocks):

    mpiexec -n 2 python examples/shallow_water.py                 # 10 days -> shallow_water.png
    mpiexec -n 4 python examples/shallow_water.py --days 3 --animate
    mpiexec -n 2 python examples/shallow_water.py --benchmark     # 3600 x 1800, 0.1 day, no output
    mpiexec -n 2 python examples/shallow_water.py --backend mpi4jax --exchange sendrecv
    mpiexec -n 2 python examples/shallow_water.py --exchange fused   # hand-written exchange
    mpiexec -n 2 python examples/shallow_water.py --exchange overlap # compute while in flight
    mpiexec -n 2 python examples/shallow_water.py --devices 2     # 2 processes x 2 devices
"""

import argparse
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

DAY = 86400.0


# ---------------------------------------------------------------- set-up ---


@dataclass(frozen=True)
class Physics:
    """The physical set-up; everything else follows from the grid."""

    nx: int = 360  # interior cells in x (periodic)
    ny: int = 180  # interior cells in y (walls)
    dx: float = 5e3  # m
    dy: float = 5e3  # m
    gravity: float = 9.81  # m s^-2
    depth: float = 100.0  # m, mean layer depth
    f0: float = 1e-4  # s^-1, Coriolis parameter at mid-channel
    beta: float = 1.6e-11  # m^-1 s^-1, its meridional gradient
    jet_speed: float = 3.0  # m/s, peak of the sech^2 jet
    jet_width: float = 30e3  # m, its half width (sech^2(y / width))
    meander: float = 0.1  # initial axis displacement, in jet widths

    @property
    def wave_speed(self):
        return math.sqrt(self.gravity * self.depth)

    @property
    def dt(self):
        # Gravity-wave CFL number 0.125: well inside AB3's stability region.
        return 0.125 * min(self.dx, self.dy) / self.wave_speed

    @property
    def viscosity(self):
        # Grid Reynolds number jet_speed * dx / nu = 100: enough to damp
        # grid-scale noise, small next to the jet's own dynamics.
        return self.jet_speed * min(self.dx, self.dy) / 100.0


def choose_layout(size, nx, ny, min_block=4):
    """(px, py): px blocks in x times py in y, equal blocks of at least
    min_block x min_block cells, with the fewest halo cells moved over MPI
    per rank (ties: more blocks in y). ValueError if there is none."""
    best = None
    for py in range(1, size + 1):
        if size % py:
            continue
        px = size // py
        if nx % px or ny % py or nx // px < min_block or ny // py < min_block:
            continue
        cost = (2 * (ny // py) if px > 1 else 0) + (min(py - 1, 2) * (nx // px))
        key = (cost, -py)
        if best is None or key < best[0]:
            best = (key, (px, py))
    if best is None:
        raise ValueError(
            f"cannot split the {nx} x {ny} grid over {size} ranks: need "
            f"px * py = {size} with px dividing nx={nx}, py dividing ny={ny} "
            f"and blocks of at least {min_block} x {min_block} cells "
            f"(choose another rank count or --grid)"
        )
    return best[1]


class Decomposition:
    """This rank's block of the global grid and its eight neighbours."""

    def __init__(self, rank, size, nx, ny, proc_null):
        self.px, self.py = choose_layout(size, nx, ny)
        self.rank, self.size = rank, size
        self.ix, self.iy = rank % self.px, rank // self.px
        self.nxl, self.nyl = nx // self.px, ny // self.py
        self.x0, self.y0 = self.ix * self.nxl, self.iy * self.nyl  # global offset
        self.proc_null = proc_null

        def at(dx, dy):  # neighbour dx blocks east, dy north (x periodic)
            jy = self.iy + dy
            if not 0 <= jy < self.py:
                return proc_null
            return jy * self.px + (self.ix + dx) % self.px

        self.west, self.east = at(-1, 0), at(1, 0)
        self.south, self.north = at(0, -1), at(0, 1)
        self.sw, self.se, self.nw, self.ne = at(-1, -1), at(1, -1), at(-1, 1), at(1, 1)
        self.at_south_wall = self.iy == 0
        self.at_north_wall = self.iy == self.py - 1

    def block_of(self, rank):
        ix, iy = rank % self.px, rank // self.px
        return (slice(iy * self.nyl, (iy + 1) * self.nyl),
                slice(ix * self.nxl, (ix + 1) * self.nxl))

    # What the model needs to know of its block (DeviceDecomposition gives
    # the same, traced, where the devices of a process differ).
    def walls(self):
        """(at the south wall, at the north wall)."""
        return self.at_south_wall, self.at_north_wall

    def coriolis(self, phys):
        """f at the block's q points, rows j = 0..nyl, float32."""
        return coriolis_q(phys, self.y0, self.nyl)

    def cart(self, comm):
        """The Cartesian communicator of the blocks: rows are y, columns
        x, dims (py, px), rank = iy * px + ix as above; walls in y,
        periodic in x."""
        return comm.Create_cart((self.py, self.px), periods=(False, True),
                                reorder=False)


def coriolis_q(phys, y0, nyl):
    """The Coriolis parameter at the q points (north-east corners) of
    rows y0..y0+nyl, as a (nyl + 1, 1) float32 column."""
    y_q = (y0 + np.arange(nyl + 1)) * phys.dy
    f = phys.f0 + phys.beta * (y_q - 0.5 * phys.ny * phys.dy)
    return f[:, None].astype(np.float32)


def initial_state(phys, dec):
    """h, u, v on this rank's block including its halo, float64 NumPy.

    A sech^2 jet along the channel's middle in geostrophic balance,
    g dh/dy = -f u, whose axis is displaced by a small meander of a few
    wavelengths near the jet's most unstable one. Computed from global
    coordinates, so every decomposition starts from the same field."""
    p = phys
    gi = dec.x0 + np.arange(dec.nxl + 2)  # global index; 1..nx interior
    gj = dec.y0 + np.arange(dec.nyl + 2)
    x_c, x_u = (gi - 0.5) * p.dx, gi * p.dx  # cell centres / east faces
    y_c, y_v = (gj - 0.5) * p.dy, gj * p.dy  # cell centres / north faces
    lx, ly = p.nx * p.dx, p.ny * p.dy
    y_mid, L = 0.5 * ly, p.jet_width

    # Meander: the most unstable wavelength of a sech^2 jet is about 7 widths.
    m = max(1, round(lx / (7.0 * L)))
    def axis(x):
        k = 2.0 * np.pi / lx
        return p.meander * L * (np.sin(m * k * x) + 0.5 * np.sin((m // 2 + 1) * k * x + 1.0))

    def jet_u(x, y):
        s = (y[:, None] - y_mid - axis(x)[None, :]) / L
        return p.jet_speed / np.cosh(s) ** 2

    def jet_h(x, y):
        # H - (1/g) * integral of f(y) u(y) dy, in closed form for sech^2
        s = (y[:, None] - y_mid - axis(x)[None, :]) / L
        integral = p.jet_speed * L * (
            p.f0 * np.tanh(s) + p.beta * L * (s * np.tanh(s) - np.log(np.cosh(s)))
        )
        return p.depth - integral / p.gravity

    def axis_slope(x):
        k = 2.0 * np.pi / lx
        return p.meander * L * k * (m * np.cos(m * k * x)
                                    + 0.5 * (m // 2 + 1) * np.cos((m // 2 + 1) * k * x + 1.0))

    h = jet_h(x_c, y_c)
    u = jet_u(x_u, y_c)
    v = jet_u(x_c, y_v) * axis_slope(x_c)[None, :]  # the flow follows the axis
    return h, u, v


# ---------------------------------------------------------- halo exchange ---


class Halo:
    """Fills the one-cell halo of a list of (nyl+2, nxl+2) fields, corners
    included, from the neighbouring blocks (the walls are the model's job).

    With px == 1 a block is its own x neighbour: the periodic wrap is a
    local copy, and only the y neighbours are sent messages.
    """

    def __init__(self, dec, mpi, comm, exchange):
        self.dec, self.mpi, self.comm, self.exchange = dec, mpi, comm, exchange
        if exchange in ("halo", "overlap"):
            # halo_exchange (and ihalo_exchange) finds the eight neighbours
            # itself on the blocks' Cartesian communicator (a DeviceCart
            # with several devices per process) and wraps px == 1 locally.
            self.cart = dec.cart(comm)
            self.pairs = []
            return
        d, null = dec, dec.proc_null
        # (send region, receive region, source, dest) of every message
        # this rank posts per field: my west column goes to my west
        # neighbour, while my east halo column comes from my east one, etc.
        inner, full = slice(1, -1), slice(None)
        x_pairs = []
        if d.px > 1:
            x_pairs = [((inner, 1), (inner, -1), d.east, d.west),
                       ((inner, -2), (inner, 0), d.west, d.east)]
        y_rows = []
        if d.py > 1:
            y_rows = [(1, -1, d.north, d.south), (-2, 0, d.south, d.north)]
        # sendrecv, one call after another: x first, then whole rows, which
        # carry the corners just received in x (or wrapped, if px == 1).
        seq = x_pairs + [((s, full), (r, full), src, dst) for s, r, src, dst in y_rows]
        # fused, all at once: rows without corners, and the corners as single
        # cells to and from the diagonal neighbours (unless px == 1: then the
        # wrapped rows carry them).
        if d.px == 1:
            fused = seq
        else:
            cell = {1: slice(1, 2), -2: slice(-2, -1), 0: slice(0, 1), -1: slice(-1, None)}
            fused = x_pairs + [((s, inner), (r, inner), src, dst) for s, r, src, dst in y_rows]
            if d.py > 1:
                fused += [((1, cell[1]), (-1, cell[-1]), d.ne, d.sw),
                          ((1, cell[-2]), (-1, cell[0]), d.nw, d.se),
                          ((-2, cell[1]), (0, cell[-1]), d.se, d.nw),
                          ((-2, cell[-2]), (0, cell[0]), d.sw, d.ne)]
        pairs = seq if exchange == "sendrecv" else fused
        self.pairs = [p for p in pairs if not (p[2] == null and p[3] == null)]

    def start(self, fields):
        """Begin filling the halo of `fields` (overlap exchange): the
        request of ihalo_exchange, for finish(). The messages of the three
        fields to one neighbour travel as one (at most 8 messages, whatever
        the layout)."""
        return self.mpi.ihalo_exchange(list(fields), self.cart, 1)

    def finish(self, pending):
        """The fields of start() with their halo filled, once its messages
        are in."""
        return self.mpi.wait(pending)

    def __call__(self, fields):
        fields = list(fields)
        if self.exchange == "halo":
            return self.mpi.halo_exchange(fields, self.cart, 1)
        if self.exchange == "overlap":
            return self.finish(self.start(fields))
        if self.dec.px == 1:
            fields = [wrap_x(a) for a in fields]
        if self.pairs:
            if self.exchange == "fused":
                fields = self._fused(fields)
            else:
                fields = self._sendrecv(fields)
        return fields

    def _fused(self, fields):
        sends, templates, sources, dests, where = [], [], [], [], []
        for n, a in enumerate(fields):
            for send, recv, source, dest in self.pairs:
                sends.append(a[send])
                templates.append(a[recv])
                sources.append(source)
                dests.append(dest)
                where.append((n, recv, source))
        got = self.mpi.neighbor_exchange(sends, templates, sources, dests, comm=self.comm)
        for (n, recv, source), arr in zip(where, got):
            if source != self.dec.proc_null:
                fields[n] = fields[n].at[recv].set(arr)
        return fields

    def _sendrecv(self, fields):
        out = []
        for a in fields:
            # x before y: the rows sent in y carry the just-filled corners.
            for tag, (send, recv, source, dest) in enumerate(self.pairs):
                got = self.mpi.sendrecv(a[send], a[recv], source, dest,
                                        sendtag=tag, recvtag=tag, comm=self.comm)
                if source != self.dec.proc_null:
                    a = a.at[recv].set(got)
            out.append(a)
        return out


def wrap_x(a):
    return a.at[:, 0].set(a[:, -2]).at[:, -1].set(a[:, 1])


# ------------------------------------------------------------------ model ---


def make_model(phys, dec, halo, jnp, lax):
    p = phys
    f32 = jnp.float32
    g, dx, dy, dt, nu = (f32(v) for v in (p.gravity, p.dx, p.dy, p.dt, p.viscosity))

    # What differs between blocks comes from dec when traced: Python values
    # on one device per process, traced ones where the devices of a process
    # hold different blocks (DeviceDecomposition, inside shard_map).
    def coriolis():
        # Coriolis parameter at the q points (north-east corners), rows j = 0..nyl.
        return jnp.asarray(dec.coriolis(p), f32)

    def pick(flag, wall, inner):
        # The wall's value where the flag is set: a select (bitwise either
        # operand) where the flag is traced.
        return wall if flag is True else jnp.where(flag, wall, inner)

    def walls(h, u, v):
        # Free slip: no normal flow, no gradient of h and u across the wall.
        south, north = dec.walls()
        if south is not False:
            h = h.at[0].set(pick(south, h[1], h[0]))
            u = u.at[0].set(pick(south, u[1], u[0]))
            v = v.at[0].set(pick(south, 0.0, v[0]))
        if north is not False:
            h = h.at[-1].set(pick(north, h[-2], h[-1]))
            u = u.at[-1].set(pick(north, u[-2], u[-1]))
            v = v.at[-2].set(pick(north, 0.0, v[-2])).at[-1].set(pick(north, 0.0, v[-1]))
        return h, u, v

    def tendencies(h, u, v, f_q=None):
        """dh/dt, du/dt, dv/dt on the interior, from fields with a valid
        halo. Indices below are those of the padded arrays, j = 0..nyl+1.
        Every cell's tendency reads only its eight neighbours: on a piece
        of the fields (f_q cut to its rows) it gives the piece's interior."""
        if f_q is None:
            f_q = coriolis()
        # Mass fluxes: hu at u points (all j, i = 0..nxl), hv at v points.
        hu = 0.5 * (h[:, :-1] + h[:, 1:]) * u[:, :-1]
        hv = 0.5 * (h[:-1, :] + h[1:, :]) * v[:-1, :]
        dh = -((hu[1:-1, 1:] - hu[1:-1, :-1]) / dx + (hv[1:, 1:-1] - hv[:-1, 1:-1]) / dy)

        # Potential vorticity at the corners j, i = 0..nyl, 0..nxl.
        zeta = (v[:-1, 1:] - v[:-1, :-1]) / dx - (u[1:, :-1] - u[:-1, :-1]) / dy
        h_q = 0.25 * (h[:-1, :-1] + h[:-1, 1:] + h[1:, :-1] + h[1:, 1:])
        q = (f_q + zeta) / h_q
        # Energy-conserving Coriolis term: q times the mass flux averaged to
        # the corners, then averaged to the u (v) points.
        qv = q * 0.5 * (hv[:, :-1] + hv[:, 1:])
        qu = q * 0.5 * (hu[:-1, :] + hu[1:, :])
        cor_u = 0.5 * (qv[1:, 1:] + qv[:-1, 1:])
        cor_v = -0.5 * (qu[1:, 1:] + qu[1:, :-1])

        # Bernoulli function g h + K at centres j, i = 1..nyl+1, 1..nxl+1.
        ke = 0.25 * (u[1:, :-1] ** 2 + u[1:, 1:] ** 2 + v[:-1, 1:] ** 2 + v[1:, 1:] ** 2)
        b = g * h[1:, 1:] + ke
        grad_x = (b[:-1, 1:] - b[:-1, :-1]) / dx
        grad_y = (b[1:, :-1] - b[:-1, :-1]) / dy

        du = cor_u - grad_x + nu * laplacian(u)
        dv = cor_v - grad_y + nu * laplacian(v)
        return dh, du, dv

    def laplacian(a):
        c = a[1:-1, 1:-1]
        return ((a[1:-1, 2:] - 2 * c + a[1:-1, :-2]) / dx**2
                + (a[2:, 1:-1] - 2 * c + a[:-2, 1:-1]) / dy**2)

    # Adams-Bashforth weights: Euler, then AB2, then AB3.
    ab = jnp.asarray([[1.0, 0.0, 0.0], [1.5, -0.5, 0.0],
                      [23 / 12, -16 / 12, 5 / 12]], f32)

    def step(k, carry):
        fields, prev1, prev2, n = carry
        tend = tendencies(*fields)
        w = ab[jnp.minimum(n, 2)]
        new = []
        for a, t0, t1, t2 in zip(fields, tend, prev1, prev2):
            inc = dt * (w[0] * t0 + w[1] * t1 + w[2] * t2)
            new.append(a.at[1:-1, 1:-1].add(inc))
        new = walls(*halo(new))
        return tuple(new), tend, prev1, n + 1

    # Overlap: the same step with the halo exchange split in two. While the
    # halo's messages are in flight, the tendencies are computed from the
    # fields with the old halo: right everywhere but on the rim (the cells
    # next to the halo). After the wait only the rim's are computed again,
    # from four strips three cells wide, and written over it in place. A
    # strip is the same function on a slice (the same float32 operations per
    # cell), so the result is bitwise that of `step`.
    def fix_rim(tend, fields):
        f_q = coriolis()
        rows = (tendencies(*(a[:3] for a in fields), f_q=f_q[:2]),
                tendencies(*(a[-3:] for a in fields), f_q=f_q[-2:]))
        cols = (tendencies(*(a[:, :3] for a in fields)),
                tendencies(*(a[:, -3:] for a in fields)))
        return tuple(t.at[0].set(rows[0][k][0]).at[-1].set(rows[1][k][0])
                     .at[:, 0].set(cols[0][k][:, 0]).at[:, -1].set(cols[1][k][:, 0])
                     for k, t in enumerate(tend))

    def step_overlap(k, carry):
        fields, tend, prev1, prev2, n = carry
        w = ab[jnp.minimum(n, 2)]
        new = [a.at[1:-1, 1:-1].add(dt * (w[0] * t0 + w[1] * t1 + w[2] * t2))
               for a, t0, t1, t2 in zip(fields, tend, prev1, prev2)]
        pending = halo.start(new)
        # The walls also set one row inside the block (v on the north wall),
        # which the tendencies off the rim read; the halo they see (not yet
        # filled) only the rim's read.
        early = tendencies(*walls(*new))
        new = walls(*halo.finish(pending))
        return tuple(new), fix_rim(early, new), tend, prev1, n + 1

    def multistep(carry, nsteps):
        if halo.exchange != "overlap":
            return lax.fori_loop(0, nsteps, step, carry)
        fields, prev1, prev2, n = carry
        tend = tendencies(*fields)
        fields, _, prev1, prev2, n = lax.fori_loop(
            0, nsteps, step_overlap, (fields, tend, prev1, prev2, n))
        return fields, prev1, prev2, n

    def start(h, u, v):
        fields = walls(*halo([jnp.asarray(a, f32) for a in (h, u, v)]))
        zero = tuple(jnp.zeros_like(a[1:-1, 1:-1]) for a in fields)
        return (tuple(fields), zero, zero, jnp.int32(0))

    return start, multistep


# ---------------------------------------- several devices per process ---
#
# With --devices n each process drives a mesh of n JAX devices, and each
# device holds one block: the same blocks as P * n single-device ranks, so
# the same float32 operations on every cell and a bitwise equal result.
# The processes form a qy x qx Cartesian grid, each process's devices a
# my x mx mesh; jaxmpi.DeviceCart joins them into the py x px grid of
# blocks, whose halo_exchange reaches a neighbour at another position of
# the own process or of another one. The model runs inside jax.shard_map
# over the mesh, written as for one block per process: only the walls and
# the Coriolis parameter of a block depend on where the device sits in the
# grid, so DeviceDecomposition gives them traced.


def device_layout(nprocs, ndev, nx, ny):
    """(px, py, qx, qy, mx, my): the px x py blocks of nprocs * ndev
    single-device ranks (ValueError if there are none), as qx x qy
    processes of mx x my devices each, with the fewest halo cells crossing
    between processes per process (ties: more processes in y). There is
    always such a split: nprocs divides px * py, so qx = gcd(nprocs, px)
    divides px and nprocs / qx divides py."""
    px, py = choose_layout(nprocs * ndev, nx, ny)
    best = None
    for qy in range(1, nprocs + 1):
        if nprocs % qy or py % qy or px % (nprocs // qy):
            continue
        qx = nprocs // qy
        cost = (2 * (ny // qy) if qx > 1 else 0) + min(qy - 1, 2) * (nx // qx)
        key = (cost, -qy)
        if best is None or key < best[0]:
            best = (key, (qx, qy))
    qx, qy = best[1]
    return px, py, qx, qy, px // qx, py // qy


class DeviceDecomposition:
    """This process's blocks when it drives a my x mx mesh of devices
    (mesh axes "y", "x"). `blocks[ay][ax]` is the Decomposition of the
    block at mesh position (ay, ax): that of the single-device rank that
    would hold it. walls() and coriolis() are those of the calling
    device's block: traced (inside shard_map) where the devices of a
    process lie at different rows."""

    def __init__(self, rank, size, mesh, nx, ny, proc_null):
        my, mx = mesh.devices.shape
        self.px, self.py, self.qx, self.qy, self.mx, self.my = device_layout(
            size, mx * my, nx, ny)
        if (self.my, self.mx) != (my, mx):
            raise ValueError(f"the mesh must be {self.my} x {self.mx} devices, "
                             f"got {my} x {mx}")
        self.mesh, self.rank, self.size = mesh, rank, size
        self.nxl, self.nyl = nx // self.px, ny // self.py
        self.cy, self.cx = divmod(rank, self.qx)  # in the process grid
        self.blocks = [[Decomposition((self.cy * my + ay) * self.px + self.cx * mx + ax,
                                      self.px * self.py, nx, ny, proc_null)
                        for ax in range(mx)] for ay in range(my)]

    def cart(self, comm):
        """The grid of blocks over processes x devices: the processes'
        Cartesian grid (dims (qy, qx), rank = cy * qx + cx, walls in y,
        periodic in x), each process's block split over the mesh."""
        import jaxmpi
        procs = comm.Create_cart((self.qy, self.qx), periods=(False, True),
                                 reorder=False)
        return jaxmpi.DeviceCart(procs, self.mesh)

    def _row(self):
        # The block row of this device: static where the mesh has one row.
        if self.my == 1:
            return self.blocks[0][0].iy
        from jax import lax
        return self.cy * self.my + lax.axis_index("y")

    def walls(self):
        row = self._row()
        return row == 0, row == self.py - 1

    def coriolis(self, phys):
        if self.my == 1:
            return self.blocks[0][0].coriolis(phys)
        from jax import lax
        rows = np.stack([b[0].coriolis(phys) for b in self.blocks])
        return lax.dynamic_index_in_dim(rows, lax.axis_index("y"), keepdims=False)

    def initial_state(self, phys):
        """h, u, v of every block, halo included, tiled as the mesh: a
        (my * (nyl + 2), mx * (nxl + 2)) array each, float32."""
        per = [[initial_state(phys, b) for b in row] for row in self.blocks]
        return tuple(np.block([[blk[k] for blk in row] for row in per]).astype(np.float32)
                     for k in range(3))


def on_devices(dec, mpi, comm, start, multistep, summary, jax, jnp):
    """start, multistep, gather and summary over the mesh's devices: the
    one-block functions inside jit(shard_map). A block per device, tiled as
    the mesh (P("y", "x")); the step count is the same on every device."""
    from jax.sharding import NamedSharding, PartitionSpec as P

    blk = P("y", "x")
    carry = (blk, blk, blk, P())  # fields, two tendencies, step count

    def over_mesh(f, in_specs, out_specs):
        return jax.jit(jax.shard_map(f, mesh=dec.mesh, in_specs=in_specs,
                                     out_specs=out_specs))

    start_mesh = over_mesh(start, (blk,) * 3, carry)

    def start_tiled(h, u, v):
        return start_mesh(*(jax.device_put(a, NamedSharding(dec.mesh, blk))
                            for a in (h, u, v)))

    # Each position gathers its block from the same position of every
    # process: on rank 0, process r's whole interior at [r].
    root = dec.rank == 0
    gather_mesh = over_mesh(
        lambda fields: mpi.gather(interior(fields, jnp), 0, comm=comm),
        (blk,), P(None, None, "y", "x") if root else P(None, "y", "x"))

    def gather(fields):
        got = np.asarray(gather_mesh(fields))
        if not root:
            return None
        rows, cols = dec.my * dec.nyl, dec.mx * dec.nxl
        full = np.empty((3, dec.qy * rows, dec.qx * cols), np.float32)
        for r in range(dec.size):
            cy, cx = divmod(r, dec.qx)
            full[:, cy * rows:(cy + 1) * rows, cx * cols:(cx + 1) * cols] = got[r]
        return full

    # Reduced over every block of every process: XLA over the mesh, MPI
    # across processes (allreduce's axis_name).
    summary_mesh = over_mesh(lambda fields: summary(fields, axis_name=("y", "x")),
                             (blk,), (P(), P()))
    return (start_tiled, over_mesh(multistep, (carry, P()), carry), gather,
            summary_mesh)


# ------------------------------------------------------------- driver ---


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("jaxmpi", "mpi4jax"), default="jaxmpi")
    ap.add_argument("--exchange", choices=("halo", "fused", "sendrecv", "overlap"), default=None,
                    help="halo exchange (default: halo where the library has halo_exchange; "
                         "mpi4jax: sendrecv only)")
    ap.add_argument("--days", type=float, default=None,
                    help="model days to run (default 10; 0.1 with --benchmark)")
    ap.add_argument("--grid", type=int, nargs=2, metavar=("NX", "NY"), default=None,
                    help="interior cells (default 360 180; 3600 1800 with --benchmark)")
    ap.add_argument("--steps-per-call", type=int, default=100,
                    help="time steps fused into one jitted call")
    ap.add_argument("--benchmark", action="store_true",
                    help="large domain, no output; print the solve time after a warm-up call")
    ap.add_argument("--out", default="shallow_water.png",
                    help="final state: a .png picture or a .npz of the fields ('none': nothing)")
    ap.add_argument("--animate", nargs="?", const="", default=None, metavar="PATH",
                    help="also write an animation (default: --out with .gif)")
    ap.add_argument("--frames", type=int, default=60, help="animation frames")
    ap.add_argument("--devices", type=int, default=None, metavar="N",
                    help="JAX devices per process: a block on each, inside shard_map "
                         "(CPU devices: sets XLA_FLAGS' host device count to N)")
    args = ap.parse_args(argv)
    if args.devices is not None:
        if args.devices < 1:
            ap.error(f"--devices must be at least 1, got {args.devices}")
        if args.backend != "jaxmpi":
            ap.error("--devices needs --backend jaxmpi (mpi4jax has no several "
                     "devices per process)")
        if args.exchange in ("fused", "sendrecv"):
            ap.error(f"--devices needs --exchange halo or overlap, got {args.exchange} "
                     "(its messages name ranks, not the devices' blocks)")
    if args.backend == "mpi4jax" and args.exchange in ("halo", "fused", "overlap"):
        ap.error(f"--exchange {args.exchange} needs --backend jaxmpi "
                 "(mpi4jax has no halo_exchange, neighbor_exchange or "
                 "non-blocking operations)")
    if args.days is None:
        args.days = 0.1 if args.benchmark else 10.0
    if args.days <= 0:
        ap.error(f"--days must be positive, got {args.days}")
    if args.grid is None:
        args.grid = (3600, 1800) if args.benchmark else (360, 180)
    if args.steps_per_call < 1:
        ap.error(f"--steps-per-call must be at least 1, got {args.steps_per_call}")
    return args


def import_backend(name):
    if name == "jaxmpi":
        import jaxmpi.notoken as mpi
    else:
        import mpi4jax
        mpi = getattr(mpi4jax, "notoken", None)
        if mpi is None:  # mpi4jax >= 0.8: the top-level API returns bare results
            mpi = mpi4jax
    return mpi


def interior(fields, jnp):
    return jnp.stack([a[1:-1, 1:-1] for a in fields])


def make_summary(mpi, comm, jnp):
    """summary(fields): the sum of h and the largest |u| over the whole grid
    (on every rank), from a state it leaves alone. axis_name (several
    devices per process): also over those mesh axes' blocks."""
    from mpi4py import MPI

    def summary(fields, **axis_name):
        h, u = fields[0][1:-1, 1:-1], fields[1][1:-1, 1:-1]
        return (mpi.allreduce(jnp.sum(h), MPI.SUM, comm=comm, **axis_name),
                mpi.allreduce(jnp.max(jnp.abs(u)), MPI.MAX, comm=comm, **axis_name))

    return summary


def gather_fields(mpi, comm, dec, fields, jnp):
    """The interior of (h, u, v), whole, on rank 0 (None elsewhere)."""
    blk = interior(fields, jnp)
    got = np.asarray(mpi.gather(blk, 0, comm=comm))
    if dec.rank != 0:
        return None
    full = np.empty((3, dec.py * dec.nyl, dec.px * dec.nxl), np.float32)
    for r in range(dec.size):
        full[(slice(None), *dec.block_of(r))] = got[r]
    return full


def main(argv=None):
    args = parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    phys = Physics(nx=args.grid[0], ny=args.grid[1])
    try:
        if args.devices is None:
            dec = Decomposition(rank, size, phys.nx, phys.ny, MPI.PROC_NULL)
        else:
            layout = device_layout(size, args.devices, phys.nx, phys.ny)
    except ValueError as e:  # every rank decides alike: all exit
        if rank == 0:
            print(f"shallow_water.py: error: {e}", file=sys.stderr)
        return 2

    if args.devices is not None:
        # n CPU devices per process (XLA reads the flag when JAX starts;
        # other platforms' devices are what the machine has).
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split()
                 if not f.startswith("--xla_force_host_platform_device_count")]
        os.environ["XLA_FLAGS"] = " ".join(
            flags + [f"--xla_force_host_platform_device_count={args.devices}"])
    import jax
    import jax.numpy as jnp
    from jax import lax
    from tqdm import tqdm

    mpi = import_backend(args.backend)
    if args.exchange is None:
        args.exchange = ("halo" if hasattr(mpi, "halo_exchange") else
                         "fused" if hasattr(mpi, "neighbor_exchange") else "sendrecv")
    need = {"halo": "halo_exchange", "fused": "neighbor_exchange",
            "overlap": "ihalo_exchange"}.get(args.exchange)
    if need and not hasattr(mpi, need):
        if rank == 0:
            print(f"shallow_water.py: error: --exchange {args.exchange} needs "
                  f"jaxmpi.notoken.{need}, which this jaxmpi lacks; "
                  "use --exchange sendrecv", file=sys.stderr)
        return 2
    if args.devices is not None:
        devices = jax.devices()
        if len(devices) < args.devices:
            if rank == 0:
                print(f"shallow_water.py: error: --devices {args.devices} needs "
                      f"{args.devices} JAX devices per process, this one has "
                      f"{len(devices)} ({devices[0].platform}; JAX_PLATFORMS=cpu gives "
                      "CPU devices)", file=sys.stderr)
            return 2
        from jax.sharding import Mesh
        mx, my = layout[4:]
        mesh = Mesh(np.array(devices[:args.devices]).reshape(my, mx), ("y", "x"))
        dec = DeviceDecomposition(rank, size, mesh, phys.nx, phys.ny, MPI.PROC_NULL)
    comm = comm.Clone()  # the model's own traffic, apart from the user's
    halo = Halo(dec, mpi, comm, args.exchange)
    start, multistep = make_model(phys, dec, halo, jnp, lax)
    summary = make_summary(mpi, comm, jnp)
    if args.devices is None:
        multistep, summary = jax.jit(multistep), jax.jit(summary)
        h0, u0, v0 = initial_state(phys, dec)

        def gather(fields):
            return gather_fields(mpi, comm, dec, fields, jnp)
    else:
        start, multistep, gather, summary = on_devices(
            dec, mpi, comm, start, multistep, summary, jax, jnp)
        h0, u0, v0 = dec.initial_state(phys)

    nsteps = max(1, round(args.days * DAY / phys.dt))
    if rank == 0:
        where = f"{size} rank(s)"
        if args.devices is not None:
            where = (f"{size} process(es) x {args.devices} device(s) (processes "
                     f"{dec.qx} x {dec.qy}, each with {dec.mx} x {dec.my} devices)")
        print(f"{phys.nx} x {phys.ny} grid on {where} as {dec.px} x {dec.py} "
              f"blocks of {dec.nxl} x {dec.nyl}; {args.backend}, {args.exchange} "
              f"exchange; dt = {phys.dt:.2f} s, {nsteps} steps = {args.days:g} days",
              flush=True)

    carry = start(h0, u0, v0)
    chunk = min(args.steps_per_call, nsteps)

    if args.benchmark:  # compile (one step), then time from the start
        jax.block_until_ready(multistep(carry, 1))
        comm.Barrier()

    animate = args.animate is not None and not args.benchmark
    frames, frame_every = [], max(1, nsteps // max(1, args.frames))
    if animate:
        chunk = min(chunk, frame_every)
        first = gather(carry[0])
        if rank == 0:
            frames.append((0.0, first))

    t0 = time.perf_counter()
    done = 0
    with tqdm(total=nsteps, unit="model day", unit_scale=phys.dt / DAY, disable=rank != 0,
              bar_format="{l_bar}{bar}| {n:.3g}/{total:.3g} days [{elapsed}<{remaining}]") as bar:
        while done < nsteps:
            n = min(chunk, nsteps - done)
            carry = multistep(carry, n)
            jax.block_until_ready(carry)
            done += n
            bar.update(n)
            if animate and (done % frame_every < n or done == nsteps):
                snap = gather(carry[0])
                if rank == 0:
                    frames.append((done * phys.dt / DAY, snap))
    elapsed = time.perf_counter() - t0

    if args.benchmark:
        if rank == 0:  # to 0.1 ms: a small grid's few steps take milliseconds
            print(f"Solution took {elapsed:.4f}s", flush=True)
        return 0

    final = gather(carry[0])
    total_h, max_u = summary(carry[0])
    if rank == 0:
        print(f"Solution took {elapsed:.2f}s", flush=True)
        # max |u| exactly (a float32's value, as a float); the mean depth
        # from a float32 sum in the decomposition's order.
        print(f"mean depth {float(total_h) / (phys.nx * phys.ny):.6f} m, "
              f"max |u| {float(max_u)} m/s", flush=True)
        initial = np.stack([a[1:-1, 1:-1] for a in initial_state(
            phys, Decomposition(0, 1, phys.nx, phys.ny, MPI.PROC_NULL))]).astype(np.float32)
        if args.out.endswith(".npz"):
            np.savez(args.out, final=final, initial=initial, days=done * phys.dt / DAY,
                     dx=phys.dx, dy=phys.dy, gravity=phys.gravity, depth=phys.depth,
                     f0=phys.f0, ranks=size, px=dec.px, py=dec.py,
                     devices=args.devices or 1)
            print(f"wrote {args.out}")
        elif args.out.lower() != "none":
            plot_state(phys, final, done * phys.dt / DAY, args.out)
            print(f"wrote {args.out}")
        if animate:
            path = args.animate or os.path.splitext(args.out)[0] + ".gif"
            write_animation(phys, frames, path)
            print(f"wrote {path}")
    return 0


# ---------------------------------------------------------------- output ---


def vorticity(phys, u, v):
    """Relative vorticity at the corners (periodic in x), over f0."""
    zeta = ((np.roll(v, -1, axis=1) - v) / phys.dx
            - (np.roll(u, -1, axis=0) - u) / phys.dy)
    zeta[-1] = 0.0  # the north wall
    return zeta / phys.f0


def plot_state(phys, state, days, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, u, v = state.astype(np.float64)
    ext = (0, phys.nx * phys.dx / 1e3, 0, phys.ny * phys.dy / 1e3)
    fig, axes = plt.subplots(2, 1, figsize=(9, 2 * 7 * phys.ny / phys.nx + 1.6),
                             constrained_layout=True)
    eta = h - phys.depth
    lim = np.abs(eta).max()
    im = axes[0].imshow(eta, origin="lower", extent=ext, cmap="RdBu_r", vmin=-lim, vmax=lim)
    fig.colorbar(im, ax=axes[0], label="surface elevation h - H (m)")
    zeta = vorticity(phys, u, v)
    lim = max(np.percentile(np.abs(zeta), 99.5), 1e-6)
    im = axes[1].imshow(zeta, origin="lower", extent=ext, cmap="PuOr_r", vmin=-lim, vmax=lim)
    fig.colorbar(im, ax=axes[1], label="relative vorticity / f0")
    for ax in axes:
        ax.set_xlabel("x (km)")
        ax.set_ylabel("y (km)")
    axes[0].set_title(f"shallow-water jet after {days:.2f} model days")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_animation(phys, frames, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import animation

    ext = (0, phys.nx * phys.dx / 1e3, 0, phys.ny * phys.dy / 1e3)
    fig, ax = plt.subplots(figsize=(8, 8 * phys.ny / phys.nx + 0.8), constrained_layout=True)
    zetas = [vorticity(phys, s[1].astype(np.float64), s[2].astype(np.float64)) for _, s in frames]
    lim = max(np.percentile(np.abs(zetas[-1]), 99.5), 1e-6)
    im = ax.imshow(zetas[0], origin="lower", extent=ext, cmap="PuOr_r", vmin=-lim, vmax=lim)
    fig.colorbar(im, ax=ax, label="relative vorticity / f0")
    title = ax.set_title("")

    def draw(i):
        im.set_data(zetas[i])
        title.set_text(f"day {frames[i][0]:.2f}")
        return im, title

    anim = animation.FuncAnimation(fig, draw, frames=len(frames), interval=100)
    writer = "ffmpeg" if path.endswith(".mp4") else "pillow"
    anim.save(path, writer=writer)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
