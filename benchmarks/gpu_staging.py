#!/usr/bin/env python
"""What the GPU path costs: jaxmpi on GPU arrays (staged through pinned host
memory, or device pointers with JAXMPI_CUDA_AWARE=1) against the same MPI
call from mpi4py on host NumPy arrays (the floor staging cannot beat), and
optionally mpi4jax on GPU arrays.

    XLA_PYTHON_CLIENT_PREALLOCATE=false mpiexec -n 2 python benchmarks/gpu_staging.py
        [--sizes 4,1024,...] [--repeats 5] [--csv out.csv] [--mpi4jax]

Per op and message size: the median over --repeats batches of the time per
op, each batch a jitted lax.fori_loop of many calls (allreduce in place,
x -> allreduce(x) * 0.5; sendrecv around a ring). Rank 0 prints the table.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import _core
from jaxmpi import notoken as mpx

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
RIGHT, LEFT = (RANK + 1) % SIZE, (RANK - 1) % SIZE
SIZES = [4 * 16**k for k in range(7)]  # 4 B .. 64 MiB


def iterations(nbytes):
    return int(min(2000, max(10, 4e8 / max(nbytes, 1) / 50)))


def timed(run, reps):
    """Median and best seconds per op over reps batches (after a warm-up)."""
    run()
    out = []
    for _ in range(reps):
        COMM.Barrier()
        t0 = time.perf_counter()
        n = run()
        out.append((time.perf_counter() - t0) / n)
    # the slowest rank's time is the op's time
    med = COMM.allreduce(statistics.median(out), op=MPI.MAX)
    best = COMM.allreduce(min(out), op=MPI.MAX)
    return med, best


def bench_jax(module, op, nbytes, reps):
    n = max(nbytes // 4, 1)
    iters = iterations(nbytes)
    x = jnp.ones(n, jnp.float32)
    if op == "allreduce":
        body = lambda i, a: module.allreduce(a, MPI.SUM) * (1.0 / SIZE)  # noqa: E731
    else:
        body = lambda i, a: module.sendrecv(a, a, LEFT, RIGHT)  # noqa: E731
    f = jax.jit(lambda a: lax.fori_loop(0, iters, body, a))

    def run():
        jax.block_until_ready(f(x))
        return iters

    return timed(run, reps)


def bench_mpi4py(op, nbytes, reps):
    n = max(nbytes // 4, 1)
    iters = iterations(nbytes)
    a = np.ones(n, np.float32)
    b = np.empty_like(a)

    def run():
        for _ in range(iters):
            if op == "allreduce":
                COMM.Allreduce(MPI.IN_PLACE, a, op=MPI.SUM)
                a[:1] *= 1.0 / SIZE  # touch it, as the jitted loop does
            else:
                COMM.Sendrecv(a, RIGHT, 0, b, LEFT, 0)
        return iters

    return timed(run, reps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--csv", default=None)
    ap.add_argument("--mpi4jax", action="store_true",
                    help="also time mpi4jax (built with CUDA) on GPU arrays")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    core = _core.get()
    impls = [("jaxmpi", "GPU, aware" if core.cuda_aware_mode else "GPU, staged"),
             ("mpi4py", "host NumPy")]
    if args.mpi4jax:
        impls.append(("mpi4jax", "GPU"))
        import mpi4jax
    rows = []
    for op in ("allreduce", "sendrecv"):
        for nbytes in sizes:
            row = {"op": op, "bytes": nbytes}
            for impl, _ in impls:
                if impl == "mpi4py":
                    med, best = bench_mpi4py(op, nbytes, args.repeats)
                else:
                    module = mpx if impl == "jaxmpi" else mpi4jax
                    med, best = bench_jax(module, op, nbytes, args.repeats)
                row[f"{impl}_us"] = med * 1e6
                row[f"{impl}_best_us"] = best * 1e6
            rows.append(row)
            if RANK == 0:
                cells = "  ".join(f"{impl} {row[f'{impl}_us']:10.2f}" for impl, _ in impls)
                print(f"{op:9s} {nbytes:>9d} B  {cells}", flush=True)
    if RANK == 0:
        dev = jax.devices()[0]
        print(f"\n{SIZE} ranks, {getattr(dev, 'device_kind', dev.platform)}, "
              f"{MPI.Get_library_version().splitlines()[0].strip()}, "
              f"jax {jax.__version__}, jaxmpi {jaxmpi.__version__}; median us "
              "per op (" + ", ".join(f"{i}: {d}" for i, d in impls) + ")")
        print(f"staging cache: {core.cuda_staging_stats()}")
        head = "| op | size | " + " | ".join(i for i, _ in impls) + " | jaxmpi / mpi4py |"
        print("\n" + head + "\n|" + "---|" * (head.count("|") - 1))
        for r in rows:
            print(f"| {r['op']} | {r['bytes']} B | " + " | ".join(
                f"{r[f'{i}_us']:.1f}" for i, _ in impls)
                + f" | {r['jaxmpi_us'] / r['mpi4py_us']:.2f} |")
        if args.csv:
            with open(args.csv, "w", newline="") as fh:
                w = csv.DictWriter(fh, fieldnames=list(rows[0]))
                w.writeheader()
                w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
