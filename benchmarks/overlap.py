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

On GPU arrays (JAX's default backend is the GPU, or --gpu) rank 0's
computation is a loop of matrix products on the GPU (--dim, default 2048),
and the late peer waits M on the host (a sleep) instead of computing, so
that ranks sharing one GPU do not share its compute: C is the GPU's, M the
message's lateness. The kinds are irecv against recv, isendrecv against
sendrecv and iallreduce against allreduce, for every size of --sizes:

    XLA_PYTHON_CLIENT_PREALLOCATE=false mpiexec -n 2 python benchmarks/overlap.py \
        --gpu --ms 20 --sizes 64,524288,33554432

Ranks sharing one GPU without NVIDIA MPS take turns on it (time slicing):
the output's header says whether MPS was seen.
"""

from __future__ import annotations

import argparse
import subprocess
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


def late(fn, seconds):
    """fn called after `seconds` on the host (the GPU mode's late peer:
    late without taking the GPU from the other rank)."""
    def call(*args):
        time.sleep(seconds)
        return fn(*args)
    return call


def programs(n_c, n_m, kind, gpu=False, m_s=0.0):
    """Rank 0's three programs (blocking, non-blocking, compute only) and
    the late peer's (compute n_m, then communicate; on the GPU: wait m_s on
    the host, then communicate)."""
    peer_work = (lambda w: w) if gpu else (lambda w: work(w, n_m))
    if kind == "p2p":
        def blocking(x, w):
            y = mpx.recv(x, 1, tag=1)
            return y, work(w, n_c)

        def nonblocking(x, w):
            r = mpx.irecv(x, 1, tag=1)
            z = work(w, n_c)
            return mpx.wait(r), z

        def peer(x, w):
            z = peer_work(w)
            mpx.send(x + 0 * z[0, 0], 0, tag=1)  # sent after M
            return z
    elif kind == "sendrecv":
        def blocking(x, w):
            y = mpx.sendrecv(x, x, 1, 1, sendtag=2, recvtag=2)
            return y, work(w, n_c)

        def nonblocking(x, w):
            r = mpx.isendrecv(x, x, 1, 1, sendtag=2, recvtag=2)
            z = work(w, n_c)
            return mpx.wait(r), z

        def peer(x, w):
            z = peer_work(w)
            return mpx.sendrecv(x + 0 * z[0, 0], x, 0, 0, sendtag=2, recvtag=2), z
    else:
        def blocking(x, w):
            return mpx.allreduce(x, MPI.SUM), work(w, n_c)

        def nonblocking(x, w):
            r = mpx.iallreduce(x, MPI.SUM)
            z = work(w, n_c)
            return mpx.wait(r), z

        def peer(x, w):
            z = peer_work(w)
            return mpx.allreduce(x + 0 * z[0, 0], MPI.SUM), z

        def peer_nonblocking(x, w):
            # MPI never matches a non-blocking collective with a blocking
            # one: the peer starts and waits at once.
            z = peer_work(w)
            return mpx.wait(mpx.iallreduce(x + 0 * z[0, 0], MPI.SUM)), z

    def compute(x, w):
        return x, work(w, n_c)

    progs = {"blocking": jax.jit(blocking),
             "nonblocking": jax.jit(nonblocking), "compute": jax.jit(compute),
             "peer": jax.jit(peer)}
    progs["peer_nonblocking"] = (jax.jit(peer_nonblocking)
                                 if kind == "allreduce" else progs["peer"])
    if gpu and m_s > 0:
        for name in ("peer", "peer_nonblocking"):
            progs[name] = late(progs[name], m_s)
        progs["peer_compute"] = late(jax.jit(lambda x, w: (x, w)), m_s)
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
    f = jax.jit(work, static_argnums=1)
    n = 4
    for _ in range(2):  # then again with about the count wanted
        jax.block_until_ready(f(w, n))
        t0 = time.perf_counter()
        jax.block_until_ready(f(w, n))
        per = (time.perf_counter() - t0) / n
        n = max(1, int(round(target_s / per)))
    return WORLD.bcast(n if RANK == 0 else None)


def uses_mps():
    """Whether an NVIDIA MPS control daemon runs on this host."""
    try:
        out = subprocess.run(["pgrep", "-f", "nvidia-cuda-mps-control"],
                             capture_output=True, text=True, timeout=10)
        return out.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def check_result(kind, y):
    """Rank 0's received result against NumPy: the peer sends its x (all
    ones); the allreduce sums every rank's x (all `rank`)."""
    want = 1.0 if kind != "allreduce" else float(sum(range(SIZE)))
    got = np.asarray(y)
    if not np.all(got == np.float32(want)):
        raise SystemExit(f"{kind}: wrong result {got[:4]} (expected {want})")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ms", type=float, default=None,
                   help="C and M, ms (default 60; 20 on the GPU)")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--elements", type=int, default=1 << 16,
                   help="message size (float32 elements); see --sizes")
    p.add_argument("--sizes", default=None,
                   help="message sizes in bytes, comma-separated (float32: "
                        "multiples of 4); one table per size")
    p.add_argument("--dim", type=int, default=None,
                   help="matrix size (default 192; 2048 on the GPU)")
    p.add_argument("--warmup", type=int, default=20,
                   help="untimed calls per program (past the dense checks)")
    p.add_argument("--peer", choices=("late", "prompt"), default="late",
                   help="late: the peer computes M before it communicates; "
                        "prompt: at once, M is the communication's time")
    p.add_argument("--gpu", action="store_true",
                   help="GPU mode (the default where JAX's backend is the GPU)")
    p.add_argument("--kinds", default=None,
                   help="comma-separated: p2p, sendrecv, allreduce (default "
                        "p2p,allreduce; all three on the GPU)")
    args = p.parse_args()
    if SIZE < 2:
        raise SystemExit("needs at least 2 ranks")
    gpu = args.gpu or jax.default_backend() == "gpu"
    ms = args.ms if args.ms is not None else (20.0 if gpu else 60.0)
    dim = args.dim or (2048 if gpu else 192)
    kinds = (args.kinds.split(",") if args.kinds else
             ["p2p", "sendrecv", "allreduce"] if gpu else ["p2p", "allreduce"])
    sizes = ([int(b) // 4 for b in args.sizes.split(",")] if args.sizes
             else [args.elements])
    w = jnp.asarray(np.random.default_rng(RANK).standard_normal(
        (dim, dim)) / np.sqrt(dim), jnp.float32)
    n = calibrate(w, ms / 1e3)
    global ASYNC
    core = jaxmpi._core.get()
    ASYNC = core.async_wait()
    late_peer = args.peer == "late"
    if RANK == 0:
        where = (f"GPU {jax.devices()[0].device_kind}, {SIZE} ranks, "
                 f"{len(jax.devices())} GPU(s) seen per process, NVIDIA MPS "
                 f"{'on' if uses_mps() else 'not seen (time slicing)'}, "
                 "the late peer waits M on the host"
                 if gpu else f"CPU, {SIZE} ranks")
        print(f"# overlap: {where}, "
              f"C = ~{ms:g} ms ({n} products of {dim}^2), "
              f"M = {'the peer late by as long' if late_peer else 'the communication alone'}, "
              f"async wait {core.async_wait()}, "
              f"checks {core.check_mode} after {args.warmup} warm-up calls, "
              f"median of {args.reps}")
        print("bytes,kind,variant,T_ms,C_ms,M_ms,C_plus_M_ms,max_ms,efficiency")
    for elements in sizes:
        x = jnp.full((elements,), float(RANK), jnp.float32)
        for kind in kinds:
            run_kind(kind, x, w, n, ms, late_peer, gpu, args)


def run_kind(kind, x, w, n, ms, late_peer, gpu, args):
    n_m = n if late_peer else 0
    progs = programs(n, n_m, kind, gpu=gpu, m_s=ms / 1e3 if late_peer else 0)
    # "comm": rank 0's blocking op without computation, the peer prompt
    # (M with --peer prompt).
    idle = programs(0, 0, kind, gpu=gpu)
    progs["comm"] = idle["blocking"]
    results = {}
    # sync_wait: the same non-blocking program with the wait blocking inside
    # its handler (JAXMPI_ASYNC_WAIT=0): what the asynchronous FFI handler
    # buys. On the GPU every wait blocks its handler (XLA:GPU takes no
    # future), so that variant is not run there.
    variants = ("compute", "blocking", "nonblocking") + (() if gpu else
                                                        ("sync_wait",))
    core = jaxmpi._core.get()
    for variant in variants if late_peer else ("comm", *variants):
        core.set_async(variant != "sync_wait" and ASYNC)
        variant_prog = "nonblocking" if variant == "sync_wait" else variant
        if RANK == 0:
            fn = progs[variant_prog]
        elif RANK == 1 or kind == "allreduce":
            # A prompt peer does not compute, also while C is measured.
            compute = (progs.get("peer_compute", progs["compute"]) if late_peer
                       else idle["compute"])
            fn = {"compute": compute,
                  "blocking": progs["peer"],
                  "comm": progs["peer"],
                  "nonblocking": progs["peer_nonblocking"]}[variant_prog]
        else:
            fn = progs["compute"]
        for _ in range(max(1, args.warmup)):  # compile, warm up
            out = jax.block_until_ready(fn(x, w))
        if RANK == 0 and variant in ("blocking", "nonblocking"):
            check_result(kind, out[0])
        results[variant] = timed(fn, (x, w), args.reps)
    core.set_async(ASYNC)
    # M: the late peer's compute time (its programs run n products; on the
    # GPU its wait on the host), or the communication's own.
    c = results["compute"]
    m = (WORLD.bcast(results["compute"] if RANK == 1 else None, root=1)
         if late_peer else results["comm"])
    if RANK == 0:
        for variant in variants[1:]:
            t = results[variant]
            eff = (c + m - t) / min(c, m)
            print(f"{x.nbytes},{kind},{variant},{t * 1e3:.1f},{c * 1e3:.1f},"
                  f"{m * 1e3:.1f},{(c + m) * 1e3:.1f},"
                  f"{max(c, m) * 1e3:.1f},{eff:.2f}", flush=True)


if __name__ == "__main__":
    main()
