"""Halo exchange and a stencil step on a block with one ghost cell per
side; at a wall the ghost cell copies the edge (the PROC_NULL leg's result
is never used, as with mpi4jax, where it is undefined)."""

from functools import partial

import jax
from mpi4py import MPI

import mpi4jax


def _swap(low_edge, high_edge, low, high, comm, tag):
    """(ghost below from `low`, ghost above from `high`): low_edge goes to
    `low`, high_edge to `high`; a PROC_NULL end makes a leg send-only or
    receive-only."""
    from_high = mpi4jax.sendrecv(low_edge, low_edge, source=high, dest=low,
                                 sendtag=tag, recvtag=tag, comm=comm)
    from_low = mpi4jax.sendrecv(high_edge, high_edge, source=low, dest=high,
                                sendtag=tag + 1, recvtag=tag + 1, comm=comm)
    return (low_edge if low == MPI.PROC_NULL else from_low,
            high_edge if high == MPI.PROC_NULL else from_high)


def exchange(f, grid):
    """Fill the ghost cells of f (shape (by + 2, bx + 2)): columns first,
    then whole rows, so that corners come from diagonal neighbours."""
    west, east = _swap(f[1:-1, 1], f[1:-1, -2], grid.west, grid.east,
                       grid.comm, 10)
    f = f.at[1:-1, 0].set(west).at[1:-1, -1].set(east)
    north, south = _swap(f[1, :], f[-2, :], grid.north, grid.south,
                         grid.comm, 20)
    return f.at[0, :].set(north).at[-1, :].set(south)


def step(f, grid):
    g = exchange(f, grid)
    new = (g[1:-1, 1:-1] + g[:-2, 1:-1] + g[2:, 1:-1] + g[1:-1, :-2]
           + g[1:-1, 2:])
    return g.at[1:-1, 1:-1].set(new)


@partial(jax.jit, static_argnums=(1, 2))
def run(f, grid, steps):
    for _ in range(steps):
        f = step(f, grid)
    return f
