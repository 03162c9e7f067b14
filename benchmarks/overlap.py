"""Overlap of communication with computation inside one jitted program.

Rank 0 starts a request, computes for time C, then waits. Rank 1 is the late
peer: it computes for time M first, then takes part (sends, or joins the
allreduce), so rank 0's message arrives only after M. Rank 0's time T is
then C + M when the wait blocks the computation (the blocking op, or a
wait that holds XLA's executor) and max(C, M) with perfect overlap. Printed
per variant: T, C + M, max(C, M) and the overlap efficiency
(C + M - T) / min(C, M) (1: perfect, 0: none).

    mpiexec -n 2 python benchmarks/overlap.py [--ms 60] [--reps 5]

With --peer prompt the peer communicates at once instead, and M is the
communication's own time (rank 0's blocking op with no computation, the
peer prompt): the case of a slow link, e.g. across simulated hosts with a
capped bandwidth:

    scripts/multihost.py run --hosts 2 --tbf 100mbit -- \
        python benchmarks/overlap.py --peer prompt --elements 65536

Ranks beyond 2 take part in the collective only. Timings on a loaded
machine are indicative only: say so when you report them.

Cross-rank checks (JAXMPI_CHECK, on by default) compare every rank's call
before MPI sees it, so a checked start waits until every rank has started:
in the default sparse mode that is each communicator's first 16 collectives
and then the power-of-two ones, where nothing overlaps. Each program is
therefore warmed up with --warmup calls (default 20, past the dense phase)
before it is timed, and the output says which check mode ran: the numbers
are what a long-running program gets in the default mode.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
ASYNC = True


def work(w, n):
    """n dependent matrix products: a computation of tunable length."""
    return jax.lax.fori_loop(0, n, lambda i, a: jnp.tanh(a @ w), w)


def programs(n_c, n_m, kind):
    """Rank 0's three programs (blocking, non-blocking, compute only) and
    the late peer's (compute n_m, then communicate)."""
    if kind == "p2p":
        def blocking(x, w):
            y = mpx.recv(x, 1, tag=1)
            return y, work(w, n_c)

        def nonblocking(x, w):
            r = mpx.irecv(x, 1, tag=1)
            z = work(w, n_c)
            return mpx.wait(r), z

        def peer(x, w):
            z = work(w, n_m)
            mpx.send(x + z[0, 0], 0, tag=1)  # the message depends on M
            return z
    else:
        def blocking(x, w):
            return mpx.allreduce(x, MPI.SUM), work(w, n_c)

        def nonblocking(x, w):
            r = mpx.iallreduce(x, MPI.SUM)
            z = work(w, n_c)
            return mpx.wait(r), z

        def peer(x, w):
            z = work(w, n_m)
            return mpx.allreduce(x + z[0, 0], MPI.SUM), z

        def peer_nonblocking(x, w):
            # MPI never matches a non-blocking collective with a blocking
            # one: the peer starts and waits at once.
            z = work(w, n_m)
            return mpx.wait(mpx.iallreduce(x + z[0, 0], MPI.SUM)), z

    def compute(x, w):
        return x, work(w, n_c)

    progs = {"blocking": jax.jit(blocking),
             "nonblocking": jax.jit(nonblocking), "compute": jax.jit(compute),
             "peer": jax.jit(peer)}
    progs["peer_nonblocking"] = (jax.jit(peer_nonblocking)
                                 if kind == "allreduce" else progs["peer"])
    return progs


def timed(fn, args, reps):
    times = []
    for _ in range(reps):
        WORLD.Barrier()
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def calibrate(w, target_s):
    """Products needed for about target_s of computation (rank 0's
    measurement, shared)."""
    n = 4
    f = jax.jit(work, static_argnums=1)
    jax.block_until_ready(f(w, n))
    t0 = time.perf_counter()
    jax.block_until_ready(f(w, n))
    per = (time.perf_counter() - t0) / n
    return WORLD.bcast(max(1, int(round(target_s / per))) if RANK == 0 else None)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ms", type=float, default=60.0, help="C and M, ms")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--elements", type=int, default=1 << 16,
                   help="message size (float64 elements)")
    p.add_argument("--dim", type=int, default=192, help="matrix size")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed calls per program (past the dense checks)")
    p.add_argument("--peer", choices=("late", "prompt"), default="late",
                   help="late: the peer computes M before it communicates; "
                        "prompt: at once, M is the communication's time")
    args = p.parse_args()
    if SIZE < 2:
        raise SystemExit("needs at least 2 ranks")
    w = jnp.asarray(np.random.default_rng(RANK).standard_normal(
        (args.dim, args.dim)) / np.sqrt(args.dim), jnp.float32)
    x = jnp.full((args.elements,), float(RANK))
    n = calibrate(w, args.ms / 1e3)
    global ASYNC
    ASYNC = jaxmpi._core.get().async_wait()
    if RANK == 0:
        print(f"# overlap: {SIZE} ranks, message {args.elements * 8} B, "
              f"C = ~{args.ms:g} ms ({n} products of {args.dim}^2), "
              f"M = {'the peer computing as long' if args.peer == 'late' else 'the communication alone'}, "
              f"async wait {jaxmpi._core.get().async_wait()}, "
              f"checks {jaxmpi._core.get().check_mode} after {args.warmup} "
              f"warm-up calls, "
              f"median of {args.reps}")
        print("kind,variant,T_ms,C_ms,M_ms,C_plus_M_ms,max_ms,efficiency")
    late = args.peer == "late"
    for kind in ("p2p", "allreduce"):
        progs = programs(n, n if late else 0, kind)
        # "comm": rank 0's blocking op without computation, the peer prompt
        # (M with --peer prompt).
        idle = programs(0, 0, kind)
        progs["comm"] = idle["blocking"]
        results = {}
        variants = ("compute", "blocking", "nonblocking", "sync_wait")
        for variant in variants if late else ("comm", *variants):
            # sync_wait: the same non-blocking program with the wait
            # blocking inside its handler (JAXMPI_ASYNC_WAIT=0): what the
            # asynchronous FFI handler buys.
            core = jaxmpi._core.get()
            core.set_async(variant != "sync_wait" and ASYNC)
            if variant == "sync_wait":
                variant_prog = "nonblocking"
            else:
                variant_prog = variant
            if RANK == 0:
                fn = progs[variant_prog]
            elif RANK == 1 or kind == "allreduce":
                # A prompt peer does not compute, also while C is measured.
                fn = {"compute": progs["compute"] if late else idle["compute"],
                      "blocking": progs["peer"],
                      "comm": progs["peer"],
                      "nonblocking": progs["peer_nonblocking"]}[variant_prog]
            else:
                fn = progs["compute"]
            for _ in range(max(1, args.warmup)):  # compile, warm up
                jax.block_until_ready(fn(x, w))
            results[variant] = timed(fn, (x, w), args.reps)
        # M: the late peer's compute time (its programs run n products), or
        # the communication's own.
        c = results["compute"]
        m = (WORLD.bcast(results["compute"] if RANK == 1 else None, root=1)
             if late else results["comm"])
        if RANK == 0:
            for variant in ("blocking", "nonblocking", "sync_wait"):
                t = results[variant]
                eff = (c + m - t) / min(c, m)
                print(f"{kind},{variant},{t * 1e3:.1f},{c * 1e3:.1f},"
                      f"{m * 1e3:.1f},{(c + m) * 1e3:.1f},"
                      f"{max(c, m) * 1e3:.1f},{eff:.2f}", flush=True)


if __name__ == "__main__":
    main()
