"""halo_exchange against the shallow-water demo's hand-written exchanges.

    mpiexec -n 2 python benchmarks/halo.py                 # blocks of 64^2 and 512^2 cells
    mpiexec -n 4 python benchmarks/halo.py --sizes 32 256 1024 --iters 500

The three exchanges of examples/shallow_water.py (its Halo class, the same
code the model runs): `halo` (jaxmpi.notoken.halo_exchange of the three
fields, one call), `fused` (the former hand-written neighbor_exchange of the
same messages, one call) and `sendrecv` (one sendrecv per field and
direction, x first, then y). Each runs --iters exchanges of three float32
fields of N x N cells plus halo inside one jitted lax.fori_loop; the time
per exchange is the median (and the minimum) over --repeats calls, after a
warm-up call, with the ranks lined up by a barrier before each call (the
slowest rank's time). Prints microseconds per exchange and the ratios of the
medians and of the minima to `fused` (on a busy machine the minima are the
steadier).
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "examples"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=(64, 512))
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from jax import lax
    from mpi4py import MPI

    import jaxmpi.notoken as mpx
    import shallow_water as sw

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    comm = world.Clone()
    kinds = ("halo", "fused", "sendrecv")
    if rank == 0:
        print(f"halo exchange of 3 float32 fields, {size} ranks, {args.iters} "
              f"exchanges per jitted call, median of {args.repeats} calls",
              flush=True)
        print(f"{'block':>11s} {'layout':>7s} " + " ".join(
            f"{k + ' us':>12s}" for k in kinds) + f" {'halo/fused':>11s} "
            f"{'sendrecv/fused':>15s} {'min: halo/fused':>16s} "
            f"{'sendrecv/fused':>15s}", flush=True)
    for n in args.sizes:
        dec = sw.Decomposition(rank, size, n * size, n * size, MPI.PROC_NULL)
        fields = [jnp.asarray(np.full((dec.nyl + 2, dec.nxl + 2), rank + k,
                                      np.float32)) for k in range(3)]
        per, low = {}, {}
        for kind in kinds:
            halo = sw.Halo(dec, mpx, comm, kind)

            @jax.jit
            def loop(fs, halo=halo):
                return lax.fori_loop(0, args.iters,
                                     lambda _, f: tuple(halo(list(f))),
                                     tuple(fs))

            jax.block_until_ready(loop(fields))
            times = []
            for _ in range(args.repeats):
                world.Barrier()
                t0 = time.perf_counter()
                jax.block_until_ready(loop(fields))
                times.append(time.perf_counter() - t0)
            per[kind] = world.allreduce(statistics.median(times),
                                        MPI.MAX) / args.iters * 1e6
            low[kind] = world.allreduce(min(times), MPI.MAX) / args.iters * 1e6
        if rank == 0:
            print(f"{dec.nyl:>5d}x{dec.nxl:<5d} {dec.px:>3d}x{dec.py:<3d} "
                  + " ".join(f"{per[k]:12.1f}" for k in kinds)
                  + f" {per['halo'] / per['fused']:11.3f} "
                  f"{per['sendrecv'] / per['fused']:15.3f} "
                  f"{low['halo'] / low['fused']:16.3f} "
                  f"{low['sendrecv'] / low['fused']:15.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
