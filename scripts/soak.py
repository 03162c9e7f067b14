"""Soak test: many calls of every op, in and out of jit, with the resident
memory of each rank measured before and after; fails if it grew by more
than the bound (a leak in the C core or in jaxmpi's Python layer).

    mpiexec -n 2 python scripts/soak.py                 # 10**5 calls per op
    mpiexec -n 2 python scripts/soak.py --calls 3000 --eager-calls 300
    JAXMPI_CHECK=1 JAXMPI_TIMEOUT=60 mpiexec -n 2 python scripts/soak.py

Each rank prints one line per op and mode, then `soak ok` or raises.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from jaxmpi import notoken as mpx

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
RIGHT, LEFT = (RANK + 1) % SIZE, (RANK - 1) % SIZE
# send/recv pairs 0<->1, 2<->3, ...; an unpaired last rank talks to no one.
PARTNER = RANK ^ 1 if (RANK ^ 1) < SIZE else MPI.PROC_NULL


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def pingpong(x):
    if PARTNER == MPI.PROC_NULL:
        return x
    if RANK % 2 == 0:
        mpx.send(x, PARTNER, tag=1)
        return mpx.recv(x, PARTNER, tag=2)
    y = mpx.recv(x, PARTNER, tag=1)
    mpx.send(y, PARTNER, tag=2)
    return y


# name -> one step x -> x (same shape and dtype), every rank calls it alike
OPS = {
    "allreduce": lambda x: mpx.allreduce(x, MPI.SUM) / SIZE,
    "reduce": lambda x: mpx.reduce(x, MPI.MAX, 0),
    "scan": lambda x: mpx.scan(x, MPI.MIN),
    "bcast": lambda x: mpx.bcast(x, SIZE - 1),
    "gather": lambda x: mpx.gather(x, 0)[0] if RANK == 0 else mpx.gather(x, 0),
    "scatter": lambda x: mpx.scatter(jnp.broadcast_to(x, (SIZE, *x.shape))
                                     if RANK == 0 else x, 0),
    "allgather": lambda x: mpx.allgather(x)[RANK],
    "alltoall": lambda x: mpx.alltoall(jnp.broadcast_to(x, (SIZE, *x.shape)))[0],
    "barrier": lambda x: (mpx.barrier(), x)[1],
    "sendrecv": lambda x: mpx.sendrecv(x, x, LEFT, RIGHT, sendtag=3, recvtag=3),
    "send_recv": pingpong,
    "neighbor_exchange": lambda x: mpx.neighbor_exchange(
        [x, x], [x, x], [LEFT, RIGHT], [RIGHT, LEFT], tag=5)[0],
}


def run_jit(step, x, n):
    f = jax.jit(lambda x: jax.lax.fori_loop(0, n, lambda i, x: step(x), x))
    return jax.block_until_ready(f(x))


def run_eager(step, x, n):
    for _ in range(n):
        x = step(x)
    return jax.block_until_ready(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=10**5,
                   help="calls per op inside jit (default 10**5)")
    p.add_argument("--eager-calls", type=int, default=10**5,
                   help="calls per op outside jit (default 10**5)")
    p.add_argument("--max-growth-mib", type=float, default=32.0,
                   help="allowed RSS growth over the measured phase")
    p.add_argument("--ops", default=",".join(OPS))
    args = p.parse_args()
    x = jnp.arange(16, dtype=jnp.float32).reshape(4, 4) + RANK
    ops = [o for o in args.ops.split(",") if o]
    # Warm up: compile everything and let allocators reach steady state.
    for name in ops:
        run_jit(OPS[name], x, 10)
        run_eager(OPS[name], x, 10)
    WORLD.Barrier()
    before = rss_mib()
    t0 = time.perf_counter()
    for name in ops:
        for mode, runner, n in (("jit", run_jit, args.calls),
                                ("eager", run_eager, args.eager_calls)):
            t = time.perf_counter()
            y = runner(OPS[name], x, n)
            assert y.shape == x.shape and np.all(np.isfinite(np.asarray(y)))
            if RANK == 0:
                print(f"{name:18s} {mode:5s} {n:7d} calls "
                      f"{(time.perf_counter() - t) / max(n, 1) * 1e6:8.1f} us/call "
                      f"rss {rss_mib():8.1f} MiB", flush=True)
    jax.effects_barrier()
    after = rss_mib()
    growth = WORLD.allgather(after - before)
    if RANK == 0:
        print(f"rss growth per rank (MiB): {[round(g, 1) for g in growth]} "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)
    worst = max(growth)
    if worst > args.max_growth_mib:
        raise SystemExit(f"rank {RANK}: RSS grew by {worst:.1f} MiB > "
                         f"{args.max_growth_mib} MiB")
    print(f"soak ok rank {RANK}", flush=True)


if __name__ == "__main__":
    main()
