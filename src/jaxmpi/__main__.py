"""python -m jaxmpi: what jaxmpi runs on (MPI, ABI, CUDA, JAX), and with
``--check`` under mpirun, whether every rank reaches every other."""

from __future__ import annotations

import argparse
import socket
import sys
import time

import jax
import jax.numpy as jnp
import jaxlib
import mpi4py
import numpy as np
from mpi4py import MPI

import jaxmpi
from . import _core, _recorder, notoken

DESCRIPTION = """\
Print what jaxmpi runs on: the MPI library and its ABI, the thread level,
CUDA support, JAX and mpi4py versions, and this process's rank.

With --check, run under your MPI launcher (mpirun -n N python -m jaxmpi
--check), every rank exchanges rank-dependent data with every other rank
through jaxmpi (a small and a 2 MiB sendrecv per pair, both ways), then all
ranks take part in an allreduce. Rank 0 prints the host, the MPI and the
JAX device of each rank and the result; a pair that fails or does not
complete within --timeout seconds is named, and the job ends with a
non-zero status."""


def _driver_text(ngpus: int, driver: str) -> str:
    if ngpus >= 0:
        return driver
    if "cannot open shared object file" in driver or "No such file" in driver:
        return "none (CPU only)"
    return f"not usable: {driver}"


def info() -> dict:
    core = _core.get()
    vendor, version = MPI.get_vendor()
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized",
              MPI.THREAD_MULTIPLE: "multiple"}
    aware = core.mpi_cuda_aware
    ngpus, driver = core.cuda_driver()
    return {
        "jaxmpi": jaxmpi.__version__,
        "MPI vendor": f"{vendor} {'.'.join(map(str, version))}",
        "MPI standard": "{}.{}".format(*MPI.Get_version()),
        "MPI library": core.library_path,
        "MPI library version": core.library_version.splitlines()[0],
        "ABI": f"{core.family} (C core {core.lib._name.rsplit('/', 1)[-1]})",
        "thread level": levels.get(MPI.Query_thread(), MPI.Query_thread()),
        "large counts": ("MPI-4 large-count calls" if core.has_large_count
                         and core.use_large_count else "derived datatypes"),
        "CUDA built": "yes" if core.cuda_built else "no",
        "CUDA driver": _driver_text(ngpus, driver),
        "MPI CUDA-aware": {None: "unknown (MPI cannot say)", True: "yes",
                           False: "no"}[aware],
        "GPU data path": ("none (no GPU)" if ngpus <= 0 else
                          "device pointers to MPI (JAXMPI_CUDA_AWARE=1)"
                          if core.cuda_aware_mode else
                          "staged through pinned host memory"),
        "JAX": f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
               f"backend {jax.default_backend()}",
        "mpi4py": mpi4py.__version__,
        "Python": sys.version.split()[0],
        "ranks": f"{MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()}",
        "flight recorder": _recorder_text(_recorder.get()),
    }


def _recorder_text(rec) -> str:
    if not rec.capacity:
        return "off (JAXMPI_RECORD=0)" + (
            f"; trace to {rec.trace_dir}" if rec.trace_dir else "")
    return (f"the last {rec.capacity} calls, written to {rec.dir} on a "
            "timeout, an MPI error, a fatal signal or SIGUSR1"
            + (f"; trace to {rec.trace_dir}" if rec.trace_dir else ""))


# --- the connectivity check ----------------------------------------------

SMALL = 8            # elements of the small message (eager protocol)
LARGE = 1 << 18      # float64 elements: 2 MiB (rendezvous protocol)


def partner(rank: int, rnd: int, size: int):
    """Rank's partner in round rnd of a round-robin schedule in which every
    pair of ranks meets exactly once (None: no partner this round). Odd
    size: size rounds, partner (rnd - rank) mod size; even size: the same
    over size - 1 ranks, the last rank taking the one left alone."""
    if size % 2:
        p = (rnd - rank) % size
        return None if p == rank else p
    m = size - 1
    if rank == m:
        return (rnd * ((m + 1) // 2)) % m  # the s with 2s = rnd (mod m)
    p = (rnd - rank) % m
    return m if p == rank else p


def rounds(size: int) -> int:
    return size if size % 2 else size - 1


def payload(src: int, dst: int, n: int):
    """What rank src sends to rank dst: distinct for every ordered pair."""
    return np.arange(n, dtype=np.float64) + (src * 1e6 + dst * 1e3)


def exchange(peer: int, n: int, comm):
    """One sendrecv with peer through jaxmpi; returns what peer sent."""
    rank = comm.Get_rank()
    x = jnp.asarray(payload(rank, peer, n))
    y = notoken.sendrecv(x, x, peer, peer, sendtag=rank, recvtag=peer,
                         comm=comm)
    return np.asarray(y)


def _abort(message: str, comm_world) -> None:
    sys.stdout.flush()
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    # Let the launcher forward the message: MPI_Abort ends every process.
    time.sleep(1.0)
    comm_world.Abort(1)


def check(timeout: float) -> int:
    world = MPI.COMM_WORLD
    comm = jaxmpi.get_default_comm()
    rank, size = comm.Get_rank(), comm.Get_size()
    jaxmpi.set_timeout(timeout)
    core = _core.get()
    vendor, version = MPI.get_vendor()
    me = (f"host {socket.gethostname()}, MPI {vendor} "
          f"{'.'.join(map(str, version))} ({core.library_path}), "
          f"JAX device {jax.devices()[0]}")
    start = time.perf_counter()

    bad = []        # what this rank saw go wrong, as text
    peers = []      # ranks this rank exchanged with, in order
    for rnd in range(rounds(size)):
        peer = partner(rank, rnd, size)
        if peer is None:
            continue
        for n in (SMALL, LARGE):
            try:
                got = exchange(peer, n, comm)
            except Exception as e:  # the watchdog, or an MPI error
                _abort(f"jaxmpi check FAILED: rank {rank} <-> rank {peer} "
                       f"({n * 8} B each way): {type(e).__name__}: "
                       f"{' '.join(str(e).split())}", world)
                return 1
            want = payload(peer, rank, n)
            if got.shape != want.shape or not np.array_equal(got, want):
                wrong = int(np.sum(got != want)) if got.shape == want.shape \
                    else "shape"
                bad.append(f"rank {rank} <-> rank {peer}: rank {rank} "
                           f"received wrong data from rank {peer} ({n * 8} B "
                           f"message, {wrong} of {n} elements differ)")
        peers.append(peer)
    try:
        total = float(notoken.allreduce(np.float64(rank + 1), MPI.SUM,
                                        comm=comm))
    except Exception as e:
        _abort(f"jaxmpi check FAILED: allreduce over all {size} ranks, on "
               f"rank {rank}: {type(e).__name__}: {' '.join(str(e).split())}",
               world)
        return 1
    if total != size * (size + 1) / 2:
        bad.append(f"allreduce: rank {rank} got {total}, expected "
                   f"{size * (size + 1) // 2}")
    elapsed = time.perf_counter() - start
    # Reported with mpi4py's own calls on COMM_WORLD.
    reports = world.gather((me, peers, bad), root=0)
    if rank != 0:
        return 0 if world.bcast(None, root=0) else 1
    failures = [b for _, _, bs in reports for b in bs]
    met = {(r, p) for r, (_, ps, _) in enumerate(reports) for p in ps}
    missing = [(i, j) for i in range(size) for j in range(size)
               if i != j and (i, j) not in met]
    failures += [f"rank {i} <-> rank {j}: never exchanged (schedule)"
                 for i, j in missing if i < j]
    print(f"jaxmpi connectivity check: {size} rank(s), jaxmpi "
          f"{jaxmpi.__version__}")
    for r, (text, _, _) in enumerate(reports):
        print(f"  rank {r}: {text}")
    npairs = size * (size - 1) // 2
    print(f"  pairs: {npairs - len(missing) // 2} of {npairs} exchanged "
          f"({SMALL * 8} B and {LARGE * 8 >> 20} MiB each way), allreduce "
          f"over {size} rank(s): sum {total:g}, {elapsed:.2f} s on rank 0")
    if size == 1:
        print("  only one rank: run it under your launcher, e.g. "
              "mpirun -n 2 python -m jaxmpi --check")
    ok = not failures
    for f in failures:
        print(f"jaxmpi check FAILED: {f}")
    if ok:
        print(f"OK: every rank reaches every other rank ({size} rank(s))")
    sys.stdout.flush()
    world.bcast(ok, root=0)
    return 0 if ok else 1


def fastest_safe_thread_level() -> str:
    """The `python -m jaxmpi` line on the thread level (docs/design.md,
    "Thread level")."""
    if MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        # What 'multiple' costs a 4-byte call at 2 ranks, per MPI
        # (benchmarks/thread_level.py; outputs in benchmarks/).
        vendor = MPI.get_vendor()[0]
        cost = {"MPICH": "MPICH: 0.1-1 us more per MPI call than 'serialized'",
                "Open MPI": "Open MPI: about 0.1 us more per call",
                "Intel MPI": "Intel MPI: no measurable difference"}.get(
                    vendor, f"{vendor}: not measured")
        return (f"'serialized' is the fastest safe level ({cost}): set "
                "mpi4py.rc.thread_level = 'serialized' before importing "
                "mpi4py.MPI, dispatch jaxmpi work from one Python thread "
                "(enforced), call jax.effects_barrier() before your own "
                "mpi4py calls")
    return ("'serialized' in use, the fastest safe level: jaxmpi refuses a "
            "second Python thread; call jax.effects_barrier() before your own "
            "mpi4py calls")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jaxmpi", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--check", action="store_true",
        help="check that every rank reaches every other (run under mpirun)")
    parser.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS",
        help="with --check: the longest a pair may take before it is "
             "reported as failed (default: 30)")
    args = parser.parse_args(argv)
    if args.timeout <= 0:
        parser.error(f"--timeout must be positive, got {args.timeout}")
    if args.check:
        return check(args.timeout)
    for key, value in info().items():
        print(f"{key:>20}: {value}")
    print(f"{'fastest safe level':>20}: {fastest_safe_thread_level()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
