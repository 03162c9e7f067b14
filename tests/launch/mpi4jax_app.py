"""A program of mpi4jax_lib, run unchanged on jaxmpi: ``python -m
jaxmpi.mpi4jax tests/launch/mpi4jax_app.py STEPS`` (mpi4jax_lib is found
next to this file, as Python finds a script's own package), or
mpi4jax_app_import.py (``import jaxmpi.mpi4jax`` first). Every rank checks
its results against NumPy on the global field, records what it saw, and
prints one line per finding; a rank with a wrong result exits 1 after all
its calls."""

import importlib.util
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

jax.config.update("jax_enable_x64", True)  # float64, as ocean models run

from mpi4jax_lib import grid as grid_mod
from mpi4jax_lib import halo, solver

NY, NX = 12, 12


def global_field():
    # Different along each axis and at every cell: a swapped direction or
    # neighbour changes the result.
    i, j = np.meshgrid(np.arange(NY), np.arange(NX), indexing="ij")
    return (100.0 * i + j + 1.0)


def step_ref(g):
    p = np.pad(g, 1, mode="edge")  # walls: the ghost copies the edge
    return p[1:-1, 1:-1] + p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:]


def main(argv):
    import mpi4jax  # the program's own import, after the library's

    steps = int(argv[1])
    grid = grid_mod.Grid(NY, NX)
    rank, size = grid.rank, grid.size
    g = global_field()
    rows, cols = grid.rows(), grid.cols()
    lines, bad = [], []

    def check(name, got, want):
        if not np.array_equal(np.asarray(got), want):
            bad.append(name)

    # The halo: eagerly, then a jitted model run (integer values in
    # float64: every sum is exact, so results are compared bitwise).
    f = np.zeros((grid.by + 2, grid.bx + 2))
    f[1:-1, 1:-1] = g[rows, cols]
    f = jnp.asarray(f)
    padded = np.pad(g, 1, mode="edge")
    halo_slice = (slice(rows.start, rows.stop + 2), slice(cols.start, cols.stop + 2))
    check("eager halo", halo.exchange(f, grid), padded[halo_slice])
    g_after = g
    for _ in range(steps):
        g_after = step_ref(g_after)
    check("jitted run", halo.run(f, grid, steps)[1:-1, 1:-1], g_after[rows, cols])

    # The solver: eager send/recv to rank 0, NumPy there, eager bcast; a
    # jitted allreduce of integer-valued products.
    block = jnp.asarray(g_after[rows, cols])
    field = solver.gather_to_root(block, grid)
    if rank == 0:
        check("gathered field", field, g_after)
    x = solver.solve_on_root(field, grid)
    check("solution", x, np.linalg.solve(solver.system(NY), g_after.sum(axis=1)))
    weights = (np.arange(NY)[:, None] + 2.0 * np.arange(NX)[None, :])
    total = solver.weighted_total(block, jnp.asarray(weights[rows, cols]))
    check("weighted total", total, np.sum(g_after * weights))

    # A failing call inside the library reaches the program as jaxmpi's
    # error, on every rank (before any MPI call, so no rank waits).
    try:
        solver.notify(jnp.ones(2), size)
        lines.append("notify: no error")
    except ValueError as e:
        lines.append(f"notify: ValueError: {e}")

    # What the program sees of mpi4jax.
    lines.append(f"mpi4jax {mpi4jax.__version__} from {mpi4jax.__file__}, "
                 f"cuda {mpi4jax.has_cuda_support()}, "
                 f"sycl {mpi4jax.has_sycl_support()}")
    spec = importlib.util.find_spec("mpi4jax")
    lines.append(f"find_spec origin {spec.origin}")
    main_file = os.path.basename(sys.modules["__main__"].__file__)
    lines.append(f"argv {argv[1:]} main {main_file}")
    try:
        mpi4jax.allreduce(jnp.ones(2), MPI.SUM, token=None)
        lines.append("token=: no error")
    except RuntimeError as e:
        lines.append(f"token=: RuntimeError: {e}")
    try:
        import mpi4jax.notoken  # noqa: F401  (mpi4jax < 0.8's)
        lines.append("mpi4jax.notoken: no error")
    except ImportError as e:
        lines.append(f"mpi4jax.notoken: {type(e).__name__}: {e}")

    lines.append(f"grid {grid.py}x{grid.px}, {steps} steps: "
                 f"{'OK' if not bad else 'FAILED ' + ', '.join(bad)}")
    # One write per line: the launcher forwards whole writes of each rank.
    for line in lines:
        sys.stdout.write(f"rank {rank}: {line}\n")
        sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
