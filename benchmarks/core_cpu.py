"""CPU time per op of jaxmpi's C core, for comparing two builds of it on a
busy machine: a jitted fori_loop of N ops at 1 rank, timed with the
process's CPU clock (time.process_time), which other jobs' load barely
moves, unlike wall-clock time (at 2 ranks the peer's busy polling is CPU
time too, hence 1 rank). One sample is (T(2N) - T(N)) / N.

    mpiexec -n 1 python benchmarks/core_cpu.py [--iters N] [--repeats R]

Prints one line per op: the median and the minimum over R samples, in us.
Put each build's jaxmpi first on PYTHONPATH and alternate the builds'
runs (A, B, B, A, ...); benchmarks/README.md has the comparison of the
gcc-built core with the Zig-built one (the release wheel's).
"""

import argparse
import statistics
import time

import jax
import jax.numpy as jnp
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx

OPS = {
    "allreduce": lambda y: mpx.allreduce(y, MPI.SUM) * 0.5,
    "bcast": lambda y: mpx.bcast(y, 0) + 1,
    "sendrecv": lambda y: mpx.sendrecv(y, y, 0, 0) + 1,
    "allgather": lambda y: mpx.allgather(y)[0] + 1,
    "alltoall": lambda y: mpx.alltoall(y[None])[0] + 1,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--elements", type=int, default=1, help="float32 elements per op")
    args = ap.parse_args()
    if MPI.COMM_WORLD.Get_size() != 1:
        raise SystemExit("core_cpu.py runs at 1 rank (mpiexec -n 1)")
    x = jnp.arange(args.elements, dtype=jnp.float32)
    print(f"jaxmpi from {jaxmpi.__file__}; {args.elements * 4} B, "
          f"{args.iters} ops per sample, {args.repeats} samples; CPU us per op")
    for name, op in OPS.items():
        f = jax.jit(lambda x, n, op=op: jax.lax.fori_loop(0, n, lambda i, y: op(y), x))

        def cpu(n):
            f(x, n).block_until_ready()  # compiled once: n is traced
            t = time.process_time()
            f(x, n).block_until_ready()
            return time.process_time() - t

        cpu(10)
        samples = [(cpu(2 * args.iters) - cpu(args.iters)) / args.iters * 1e6
                   for _ in range(args.repeats)]
        print(f"{name:>10s} median {statistics.median(samples):7.3f} min {min(samples):7.3f}")


if __name__ == "__main__":
    main()
