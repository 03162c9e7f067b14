"""The communication of an mpi4jax-based ocean model, on jaxmpi (the default
check and JAXMPI_CHECK=0) and on mpi4jax, interleaved in one job.

    mpiexec -n 4 python benchmarks/ocean.py halo                # 2 x 2 blocks
    mpiexec -n 2 python benchmarks/ocean.py halo --layout 2x1   # or 1x2
    mpiexec -n 2 python benchmarks/ocean.py solver

Both patterns are written once, against a module `mpi` with mpi4jax's
send, recv and sendrecv, as a library written for mpi4jax calls them, and
run with `mpi` = jaxmpi.notoken and = mpi4jax.

halo: a basin walled on all four sides (nothing periodic), px x py blocks of
--block NY NX float64 cells plus a one-cell halo, --fields fields (3). One
jitted call fills every field's halo: x first, each direction one sendrecv
whose missing neighbour is MPI.PROC_NULL (the wall); then y, whole rows
(carrying the corners just received in x), where a leg with a wall on one
side is a plain send or a plain recv (the receive-only legs) and a sendrecv
otherwise. Each sample is --calls jitted calls, each waited for (a model
step's exchange as the program sees it); the result is checked against
NumPy once per configuration.

solver: the barotropic solve of such a model at every step: the blocks of
a 2-D float64 field gathered to rank 0 (rank 0 recv's each block in turn,
the others send theirs: one jitted call), solved on rank 0 with SciPy (a
5-point Helmholtz operator on the whole grid, factorised once with splu;
outside jit, as the model calls its solver), the solution's blocks sent
back (one jitted call). Each sample is --calls such steps.

Configurations run in an order that rotates every round, so that a slow
spell of a shared machine hits each of them. Prints every sample, then per
configuration the median, best and worst time per call, the ratio of the
medians to JAXMPI_CHECK=0 and to mpi4jax, and the median of each round's
ratio to the JAXMPI_CHECK=0 sample of the same round (paired: cancels slow
drifts of the machine's load), the median CPU time per call and rank (all
threads: a rank that spins while it waits shows here), and the load average
at the start and end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def parse_layout(text):
    try:
        px, py = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--layout must be PXxPY, e.g. 2x2; got {text!r}") from None
    if px < 1 or py < 1:
        raise argparse.ArgumentTypeError(f"--layout {text!r}: PX and PY must be >= 1")
    return px, py


class Blocks:
    """This rank's block of a px x py walled basin and its four neighbours
    (MPI.PROC_NULL at a wall); x is the column index, y the row index, rank
    = iy * px + ix."""

    def __init__(self, rank, px, py, proc_null):
        self.px, self.py = px, py
        self.ix, self.iy = rank % px, rank // px

        def at(dx, dy):
            jx, jy = self.ix + dx, self.iy + dy
            if 0 <= jx < px and 0 <= jy < py:
                return jy * px + jx
            return proc_null

        self.west, self.east = at(-1, 0), at(1, 0)
        self.south, self.north = at(0, -1), at(0, 1)


def fill_halo(mpi, comm, blocks, a, null):
    """The halo of one (ny + 2, nx + 2) field, written as an mpi4jax-based
    model writes it. Tags: 0 and 1 in x, 2 and 3 in y."""
    rows = slice(1, -1)
    # x: column 1 to the west neighbour while the east halo column comes
    # from the east one, then the other way; a wall is MPI.PROC_NULL.
    for tag, (send, recv, source, dest) in enumerate((
            (1, -1, blocks.east, blocks.west),
            (-2, 0, blocks.west, blocks.east))):
        if source == null and dest == null:
            continue
        got = mpi.sendrecv(a[rows, send], a[rows, recv], source, dest,
                           sendtag=tag, recvtag=tag, comm=comm)
        if source != null:
            a = a.at[rows, recv].set(got)
    # y: whole rows; a leg with a wall on one side sends or receives only.
    for tag, (send, recv, source, dest) in enumerate((
            (1, -1, blocks.north, blocks.south),
            (-2, 0, blocks.south, blocks.north)), start=2):
        if source == null and dest == null:
            continue
        if source == null:
            mpi.send(a[send], dest, tag=tag, comm=comm)
        elif dest == null:
            a = a.at[recv].set(mpi.recv(a[recv], source, tag=tag, comm=comm))
        else:
            a = a.at[recv].set(mpi.sendrecv(a[send], a[recv], source, dest,
                                            sendtag=tag, recvtag=tag, comm=comm))
    return a


def halo_reference(rank, px, py, ny, nx, k):
    """Field k of `rank` with its halo filled: the global field padded with
    the initial halo value (-1) at the walls, this block's window of it."""
    glob = np.arange(py * ny * px * nx, dtype=np.float64).reshape(py * ny, px * nx)
    glob = np.pad(glob + 1e6 * k, 1, constant_values=-1.0)
    ix, iy = rank % px, rank // px
    return glob[iy * ny:iy * ny + ny + 2, ix * nx:ix * nx + nx + 2]


def halo_fields(rank, px, py, ny, nx, nfields):
    out = []
    for k in range(nfields):
        a = halo_reference(rank, px, py, ny, nx, k).copy()
        a[0, :] = a[-1, :] = a[:, 0] = a[:, -1] = -1.0
        out.append(a)
    return out


def helmholtz(ny, nx):
    """(1 + 4 alpha) I - alpha * (the 5-point neighbours) on an ny x nx grid
    with walls: a stand-in for an ocean model's barotropic operator."""
    import scipy.sparse as sp

    def line(n):
        return sp.diags([-np.ones(n - 1), -np.ones(n - 1)], [-1, 1])

    alpha = 10.0
    lap = sp.kron(sp.eye(ny), line(nx)) + sp.kron(line(ny), sp.eye(nx))
    return (sp.eye(ny * nx) * (1 + 4 * alpha) + alpha * lap).tocsc()


def gather_to_root(mpi, comm, rank, size, blocks, px, block, tag=20):
    """Rank 0: the whole field, the blocks received in rank order; others:
    their block sent (the field unchanged)."""
    import jax.numpy as jnp

    ny, nx = block.shape
    if rank != 0:
        mpi.send(block, 0, tag=tag, comm=comm)
        return block
    whole = jnp.zeros((blocks.py * ny, px * nx), block.dtype)
    whole = whole.at[:ny, :nx].set(block)
    for src in range(1, size):
        got = mpi.recv(block, src, tag=tag, comm=comm)
        iy, ix = divmod(src, px)
        whole = whole.at[iy * ny:(iy + 1) * ny, ix * nx:(ix + 1) * nx].set(got)
    return whole


def scatter_from_root(mpi, comm, rank, size, px, ny, nx, field, tag=21):
    """Rank 0 sends every other rank its block of `field` (the whole
    solution) and keeps its own; the others receive theirs into `field`
    (their old block: the template)."""
    if rank != 0:
        return mpi.recv(field, 0, tag=tag, comm=comm)
    for dst in range(1, size):
        iy, ix = divmod(dst, px)
        mpi.send(field[iy * ny:(iy + 1) * ny, ix * nx:(ix + 1) * nx], dst,
                 tag=tag, comm=comm)
    return field[:ny, :nx]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pattern", choices=("halo", "solver"))
    ap.add_argument("--layout", type=parse_layout,
                    help="PXxPY blocks (default: 2x2 at 4 ranks, 2x1 at 2, "
                         "Nx1 otherwise)")
    ap.add_argument("--block", type=int, nargs=2, default=None, metavar=("NY", "NX"),
                    help="cells per rank (default: 300 300 for halo, 100 100 "
                         "for solver)")
    ap.add_argument("--fields", type=int, default=3, help="halo: fields per exchange")
    ap.add_argument("--calls", type=int, default=200, help="calls per sample")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--configs", default="default,off,mpi4jax",
                    help="comma-separated among default (jaxmpi, the default "
                         "check), off (jaxmpi, JAXMPI_CHECK=0), all "
                         "(JAXMPI_CHECK=1), mpi4jax")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from mpi4py import MPI

    import jaxmpi
    import jaxmpi.notoken as jm

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    px, py = args.layout or ((2, 2) if size == 4 else (size, 1))
    if px * py != size:
        if rank == 0:
            print(f"--layout {px}x{py} needs {px * py} ranks, not {size}", file=sys.stderr)
        return 2
    ny, nx = args.block or ((300, 300) if args.pattern == "halo" else (100, 100))
    configs = args.configs.split(",")
    unknown = set(configs) - {"default", "off", "all", "mpi4jax"}
    if unknown or not configs:
        if rank == 0:
            print(f"--configs: unknown {sorted(unknown)}", file=sys.stderr)
        return 2
    libs = {"default": jm, "off": jm, "all": jm}
    if "mpi4jax" in configs:
        try:
            import mpi4jax
        except ImportError:
            if rank == 0:
                print("mpi4jax is not installed: skipping it (see "
                      "benchmarks/shallow_water.py for how to build it)", flush=True)
            configs.remove("mpi4jax")
        else:
            libs["mpi4jax"] = mpi4jax
    check = {"default": "sparse", "off": False, "all": True, "mpi4jax": "sparse"}
    comm = world.Clone()  # the data travel here; world only times
    null = MPI.PROC_NULL
    blocks = Blocks(rank, px, py, null)

    if args.pattern == "halo":
        start = tuple(jnp.asarray(a) for a in halo_fields(rank, px, py, ny, nx, args.fields))
        expect = [halo_reference(rank, px, py, ny, nx, k) for k in range(args.fields)]
        steps = {}
        for name in configs:
            mpi = libs[name]
            steps[name] = jax.jit(lambda fs, mpi=mpi: tuple(
                fill_halo(mpi, comm, blocks, a, null) for a in fs))

        def sample(name):
            step, fs = steps[name], start
            for _ in range(args.calls):
                fs = jax.block_until_ready(step(fs))
            return fs

        def verify(name, fs):
            return all(np.array_equal(np.asarray(a), e) for a, e in zip(fs, expect))
        what = (f"halo exchange of {args.fields} float64 fields of {ny} x {nx} cells, "
                f"{px} x {py} blocks, walls all round")
    else:
        import scipy.sparse.linalg as spla

        lu = spla.splu(helmholtz(py * ny, px * nx)) if rank == 0 else None
        glob = np.sin(np.arange(py * ny * px * nx, dtype=np.float64)).reshape(py * ny, px * nx)
        iy, ix = divmod(rank, px)
        rhs = jnp.asarray(glob[iy * ny:(iy + 1) * ny, ix * nx:(ix + 1) * nx])
        want = lu.solve(glob.ravel()).reshape(glob.shape) if rank == 0 else None
        want = world.bcast(want, root=0)
        expect = want[iy * ny:(iy + 1) * ny, ix * nx:(ix + 1) * nx]
        gathers, scatters = {}, {}
        for name in configs:
            mpi = libs[name]
            gathers[name] = jax.jit(lambda b, mpi=mpi: gather_to_root(
                mpi, comm, rank, size, blocks, px, b))
            scatters[name] = jax.jit(lambda f, mpi=mpi: scatter_from_root(
                mpi, comm, rank, size, px, ny, nx, f))

        def sample(name):
            gather, scatter = gathers[name], scatters[name]
            x = rhs
            for _ in range(args.calls):
                whole = gather(rhs)
                if rank == 0:
                    whole = jnp.asarray(lu.solve(np.asarray(whole).ravel())
                                        .reshape(whole.shape))
                x = jax.block_until_ready(scatter(whole if rank == 0 else x))
            return x

        def verify(name, x):
            return np.allclose(np.asarray(x), expect, rtol=1e-12, atol=1e-12)
        what = (f"solver step: gather {px} x {py} blocks of {ny} x {nx} float64 to "
                f"rank 0, splu solve there, scatter back")

    def run(name):
        """(wall, cpu, result): the slowest rank's seconds per call, the
        ranks' mean CPU seconds per call (all threads: a rank spinning while
        it waits shows here)."""
        jaxmpi.set_check(check[name])
        try:
            world.Barrier()
            c0, t0 = time.process_time(), time.perf_counter()
            out = sample(name)
            t, c = time.perf_counter() - t0, time.process_time() - c0
        finally:
            jaxmpi.set_check("sparse")
        return (world.allreduce(t, op=MPI.MAX) / args.calls,
                world.allreduce(c, op=MPI.SUM) / size / args.calls, out)

    # Compile and warm up each configuration; check its result.
    bad = []
    for name in configs:
        _, _, out = run(name)
        if not world.allreduce(verify(name, out), op=MPI.LAND):
            bad.append(name)
    if bad:
        if rank == 0:
            print(f"wrong results: {bad}", file=sys.stderr)
        return 1

    load0 = os.getloadavg()
    if rank == 0:
        print(f"{what}; {size} ranks; {args.calls} calls per sample, "
              f"{args.rounds} rounds; load average at start "
              f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}", flush=True)
    samples = {n: [] for n in configs}
    cpu = {n: [] for n in configs}
    for rnd in range(args.rounds):
        k = rnd % len(configs)
        for name in configs[k:] + configs[:k]:
            t, c, _ = run(name)
            samples[name].append(t)
            cpu[name].append(c)
            if rank == 0:
                print(f"round {rnd} {name:8s} {t * 1e3:9.3f} ms/call, cpu "
                      f"{c * 1e3:9.3f} ms/call per rank", flush=True)
    load1 = os.getloadavg()
    if rank != 0:
        return 0
    print(f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    base = "off" if "off" in samples else configs[0]
    med = {n: statistics.median(s) for n, s in samples.items()}
    print(f"\n{'config':9s} {'median ms':>10s} {'best ms':>9s} {'worst ms':>9s} "
          f"{'/' + base:>9s} {'paired/' + base:>12s} {'/mpi4jax':>9s} "
          f"{'cpu ms/rank':>12s}")
    for n in configs:
        s = samples[n]
        paired = statistics.median(a / b for a, b in zip(s, samples[base]))
        vs4 = f"{med[n] / med['mpi4jax']:9.3f}" if "mpi4jax" in med else f"{'-':>9s}"
        print(f"{n:9s} {med[n] * 1e3:10.3f} {min(s) * 1e3:9.3f} {max(s) * 1e3:9.3f} "
              f"{med[n] / med[base]:9.3f} {paired:12.3f} {vs4} "
              f"{statistics.median(cpu[n]) * 1e3:12.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
