"""What the default cross-rank check costs: JAXMPI_CHECK=0 against the
sparse default (and JAXMPI_CHECK=1), interleaved in one job.

    mpiexec -n 2 python benchmarks/check_cost.py [--iters 100000] [--rounds 5]

Per round and mode: a fresh communicator (a clone of COMM_WORLD, so that the
default's dense first checks and its shadow's creation are paid in every
measured run), then one jitted ``lax.fori_loop`` of ``--iters`` 4-byte
allreduces, and a loop of ``--p2p-iters`` 4-byte send/recv ping-pongs (the
default probes every receive). The modes alternate within a round, in an
order that flips every round, so that a load change on a shared machine
hits both. Prints, on rank 0, every sample, then per mode the best and the
median time per call, their ratio to JAXMPI_CHECK=0, and the median of the
rounds' own ratios (each round's sample against the JAXMPI_CHECK=0 sample
next to it).
"""

from __future__ import annotations

import argparse
import statistics
import time

from mpi4py import MPI

import jax
import jax.numpy as jnp
from jax import lax

import jaxmpi
from jaxmpi import notoken as mpx


def allreduce_loop(comm, iters):
    def body(i, x):
        return mpx.allreduce(x, MPI.SUM, comm=comm) * 0.5

    f = jax.jit(lambda x: lax.fori_loop(0, iters, body, x))
    return f


def pingpong_loop(comm, iters):
    rank = comm.Get_rank()
    peer = 1 - rank if rank < 2 else None

    def body(i, x):
        if peer is None:
            return x
        if rank == 0:
            mpx.send(x, peer, tag=1, comm=comm)
            return mpx.recv(x, peer, tag=2, comm=comm)
        y = mpx.recv(x, peer, tag=1, comm=comm)
        mpx.send(y, peer, tag=2, comm=comm)
        return y

    return jax.jit(lambda x: lax.fori_loop(0, iters, body, x))


def timed(fn, x, comm):
    comm.Barrier()
    t0 = time.perf_counter()
    jax.block_until_ready(fn(x))
    t = time.perf_counter() - t0
    return comm.allreduce(t, op=MPI.MAX)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=100_000)
    ap.add_argument("--p2p-iters", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default="off,sparse",
                    help="comma-separated among off, sparse, all")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    modes = args.modes.split(",")
    setting = {"off": False, "sparse": "sparse", "all": True}
    x = jnp.ones((), jnp.float32)  # 4 bytes
    samples = {(k, m): [] for k in ("allreduce", "pingpong") for m in modes}
    for rnd in range(-1, args.rounds):  # round -1: compile and warm up
        order = modes if rnd % 2 == 0 else modes[::-1]
        for mode in order:
            comm = world.Clone()
            comm.Set_errhandler(MPI.ERRORS_RETURN)
            jaxmpi.set_check(setting[mode])
            try:
                for kind, make, n in (("allreduce", allreduce_loop, args.iters),
                                      ("pingpong", pingpong_loop, args.p2p_iters)):
                    if kind == "pingpong" and world.Get_size() < 2:
                        continue
                    fn = make(comm, n)
                    fn.lower(x).compile()  # not timed
                    t = timed(fn, x, world)
                    if rnd >= 0:
                        samples[(kind, mode)].append(t / n)
                        if rank == 0:
                            print(f"round {rnd} {kind:9s} {mode:6s} "
                                  f"{t / n * 1e6:8.3f} us/call", flush=True)
            finally:
                jaxmpi.set_check("sparse")
                comm.Free()
    if rank != 0:
        return
    print(f"\n{world.Get_size()} ranks, {args.iters} allreduces / "
          f"{args.p2p_iters} ping-pongs per sample, {args.rounds} rounds")
    # paired/off: the median over rounds of each round's ratio to the first
    # mode's sample of the same round (run next to it), which cancels the
    # slow drifts of a shared machine that the separate medians keep.
    print(f"{'op':10s} {'mode':7s} {'best us':>9s} {'median us':>10s} "
          f"{'best/off':>9s} {'median/off':>11s} {'paired/off':>11s}")
    for kind in ("allreduce", "pingpong"):
        base = samples[(kind, modes[0])]
        if not base:
            continue
        for mode in modes:
            s = samples[(kind, mode)]
            paired = statistics.median(a / b for a, b in zip(s, base))
            print(f"{kind:10s} {mode:7s} {min(s) * 1e6:9.3f} "
                  f"{statistics.median(s) * 1e6:10.3f} "
                  f"{min(s) / min(base):9.4f} "
                  f"{statistics.median(s) / statistics.median(base):11.4f} "
                  f"{paired:11.4f}")


if __name__ == "__main__":
    main()
