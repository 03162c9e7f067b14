"""The shallow-water model of shallow_water.py, in plain JAX: no jaxmpi call.

The same model (its numerics are shallow_water.py's make_model, imported
from it) on the same blocks, but written as JAX's own sharded code: one
global (py, px) mesh over every process's devices after
jax.distributed.initialize(), the whole model inside jax.jit(shard_map)
over it, and the halo exchange as jax.lax.ppermute along the mesh axes (x
periodic, then y with the corners just filled, as shallow_water.py's
sendrecv exchange). Started with jaxmpi's route, its ppermutes are XLA's
collective-permutes over MPI (jaxmpi's MPI layer for XLA):

    mpiexec -n 2 python -m jaxmpi.distributed examples/shallow_water_jax.py
    mpiexec -n 4 python -m jaxmpi.distributed examples/shallow_water_jax.py --days 3
    mpiexec -n 2 python -m jaxmpi.distributed examples/shallow_water_jax.py --benchmark

At the same layout (ranks) the final state is bitwise shallow_water.py's
(tests/launch/test_shallow_water_jax.py compares them): the same float32
operations on every cell, only the messages travel another way.
"""

import argparse
import importlib.util
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "shallow_water", os.path.join(HERE, "shallow_water.py"))
sw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sw)  # the model's numerics (it imports no jaxmpi)


class Blocks:
    """What the model needs of a device's block, traced inside shard_map
    over the (py, px) mesh: the block row decides the walls and the
    Coriolis parameter."""

    def __init__(self, phys, px, py, lax):
        self.px, self.py, self.lax = px, py, lax
        self.nxl, self.nyl = phys.nx // px, phys.ny // py

    def _row(self):
        return 0 if self.py == 1 else self.lax.axis_index("y")

    def walls(self):
        if self.py == 1:
            return True, True
        row = self._row()
        return row == 0, row == self.py - 1

    def coriolis(self, phys):
        rows = np.stack([sw.coriolis_q(phys, iy * self.nyl, self.nyl)
                         for iy in range(self.py)])
        if self.py == 1:
            return rows[0]
        return self.lax.dynamic_index_in_dim(rows, self._row(), keepdims=False)


class PermuteHalo:
    """Fills the one-cell halo of each field from the neighbouring blocks
    with lax.ppermute: columns in x (periodic), then whole rows in y (walls:
    no neighbour, the halo keeps its values and the model's walls set it),
    which carry the corners just received."""

    exchange = "ppermute"

    def __init__(self, px, py, jnp, lax):
        self.px, self.py, self.jnp, self.lax = px, py, jnp, lax

    def _shift(self, a, axis, size, step, periodic):
        pairs = [(i, (i + step) % size) for i in range(size)
                 if periodic or 0 <= i + step < size]
        return self.lax.ppermute(a, axis, pairs)

    def __call__(self, fields):
        jnp, lax = self.jnp, self.lax
        out = []
        for a in fields:
            inner = slice(1, -1)
            # x: my column 1 goes west into my west neighbour's last column,
            # my column -2 east into my east neighbour's column 0
            a = a.at[inner, -1].set(self._shift(a[inner, 1], "x", self.px, -1, True))
            a = a.at[inner, 0].set(self._shift(a[inner, -2], "x", self.px, 1, True))
            if self.py > 1:
                row = lax.axis_index("y")
                from_north = self._shift(a[1], "y", self.py, -1, False)
                from_south = self._shift(a[-2], "y", self.py, 1, False)
                a = a.at[-1].set(jnp.where(row < self.py - 1, from_north, a[-1]))
                a = a.at[0].set(jnp.where(row > 0, from_south, a[0]))
            out.append(a)
        return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=None,
                    help="model days to run (default 10; 0.1 with --benchmark)")
    ap.add_argument("--grid", type=int, nargs=2, metavar=("NX", "NY"), default=None,
                    help="interior cells (default 360 180; 3600 1800 with --benchmark)")
    ap.add_argument("--steps-per-call", type=int, default=100,
                    help="time steps fused into one jitted call")
    ap.add_argument("--benchmark", action="store_true",
                    help="large domain, no output; print the solve time after a warm-up call")
    ap.add_argument("--out", default="shallow_water_jax.png",
                    help="final state: a .png picture or a .npz of the fields ('none': nothing)")
    args = ap.parse_args(argv)
    if args.days is None:
        args.days = 0.1 if args.benchmark else 10.0
    if args.grid is None:
        args.grid = (3600, 1800) if args.benchmark else (360, 180)
    if args.days <= 0 or args.steps_per_call < 1:
        ap.error("--days and --steps-per-call must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    import jax

    jax.distributed.initialize()  # under jaxmpi's route: no arguments needed
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    try:
        from jax import shard_map
    except ImportError:  # JAX < 0.7
        from jax.experimental.shard_map import shard_map

    rank, ndev = jax.process_index(), jax.device_count()
    phys = sw.Physics(nx=args.grid[0], ny=args.grid[1])
    try:
        px, py = sw.choose_layout(ndev, phys.nx, phys.ny)
    except ValueError as e:  # every process decides alike: all exit
        if rank == 0:
            print(f"shallow_water_jax.py: error: {e}", file=sys.stderr)
        return 2
    # Block (iy, ix) on device iy * px + ix: the rank order of
    # shallow_water.py's Decomposition (devices are in process order).
    mesh = Mesh(np.array(jax.devices()).reshape(py, px), ("y", "x"))
    blocks = Blocks(phys, px, py, lax)
    nxl, nyl = blocks.nxl, blocks.nyl
    start_block, step_block = sw.make_model(
        phys, blocks, PermuteHalo(px, py, jnp, lax), jnp, lax)
    blk = P("y", "x")
    carry_specs = (blk, blk, blk, P())

    def over_mesh(f, in_specs, out_specs, **kw):
        return jax.jit(shard_map(f, mesh=mesh, in_specs=in_specs,
                                 out_specs=out_specs), **kw)

    start = over_mesh(start_block, (blk,) * 3, carry_specs)
    multistep = over_mesh(step_block, (carry_specs, P()), carry_specs)
    # Every process gets the whole interior: an all-gather over the mesh.
    gather = over_mesh(lambda *fs: sw.interior(fs, jnp), (blk,) * 3,
                       P(None, "y", "x"),
                       out_shardings=NamedSharding(mesh, P()))
    summary = over_mesh(
        lambda h, u: (lax.psum(jnp.sum(h[1:-1, 1:-1]), ("y", "x")),
                      lax.pmax(jnp.max(jnp.abs(u[1:-1, 1:-1])), ("y", "x"))),
        (blk, blk), (P(), P()))

    # The initial state of each block, halo included, from its global
    # coordinates (shallow_water.initial_state), tiled as the mesh.
    shape = (py * (nyl + 2), px * (nxl + 2))
    cache = {}

    def block_state(iy, ix):
        if (iy, ix) not in cache:
            dec = sw.Decomposition(iy * px + ix, ndev, phys.nx, phys.ny, -1)
            cache[iy, ix] = [a.astype(np.float32) for a in sw.initial_state(phys, dec)]
        return cache[iy, ix]

    def field(k):
        def piece(index):  # (an unsplit axis comes as slice(None))
            iy = (index[0].start or 0) // (nyl + 2)
            ix = (index[1].start or 0) // (nxl + 2)
            return block_state(iy, ix)[k]
        return jax.make_array_from_callback(shape, NamedSharding(mesh, blk), piece)

    nsteps = max(1, round(args.days * sw.DAY / phys.dt))
    if rank == 0:
        print(f"{phys.nx} x {phys.ny} grid on {ndev} device(s) of "
              f"{jax.process_count()} process(es) as {px} x {py} blocks of "
              f"{nxl} x {nyl}; plain JAX (ppermute halo, collectives "
              f"{jax.config.jax_cpu_collectives_implementation}); dt = "
              f"{phys.dt:.2f} s, {nsteps} steps = {args.days:g} days", flush=True)
    carry = start(field(0), field(1), field(2))
    chunk = min(args.steps_per_call, nsteps)
    if args.benchmark:  # compile (one step), then time from the start
        jax.block_until_ready(multistep(carry, 1))
    t0 = time.perf_counter()
    done = 0
    while done < nsteps:
        n = min(chunk, nsteps - done)
        carry = multistep(carry, n)
        jax.block_until_ready(carry)
        done += n
    elapsed = time.perf_counter() - t0
    if args.benchmark:
        if rank == 0:
            print(f"Solution took {elapsed:.4f}s", flush=True)
        return 0
    final = np.asarray(gather(*carry[0]).addressable_data(0))
    total_h, max_u = summary(carry[0][0], carry[0][1])
    if rank == 0:
        print(f"Solution took {elapsed:.2f}s", flush=True)
        print(f"mean depth {float(total_h) / (phys.nx * phys.ny):.6f} m, "
              f"max |u| {float(max_u)} m/s", flush=True)
        initial = np.stack([a[1:-1, 1:-1] for a in sw.initial_state(
            phys, sw.Decomposition(0, 1, phys.nx, phys.ny, -1))]).astype(np.float32)
        if args.out.endswith(".npz"):
            np.savez(args.out, final=final, initial=initial,
                     days=done * phys.dt / sw.DAY, dx=phys.dx, dy=phys.dy,
                     gravity=phys.gravity, depth=phys.depth, f0=phys.f0,
                     ranks=jax.process_count(), px=px, py=py,
                     devices=jax.local_device_count())
            print(f"wrote {args.out}")
        elif args.out.lower() != "none":
            sw.plot_state(phys, final, done * phys.dt / sw.DAY, args.out)
            print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
