"""What the flight recorder and the trace cost: a jitted loop of allreduces
with the recorder off, on (the default: JAXMPI_RECORD=256) and tracing
(JAXMPI_TRACE), interleaved in one job.

    mpiexec -n 2 python benchmarks/record.py [--rounds 12] [--sizes 4,1048576]

The trace is opened at import (this script sets JAXMPI_TRACE to a temporary
directory first); the three modes are then switched at run time (the ring
stays allocated, the trace file open), so each round times, for each size,
one ``lax.fori_loop`` of ``--iters`` allreduces (fewer from 64 KiB: about
``--bytes`` per sample) in each mode, in an order that rotates every
round, after a barrier. Prints, on rank 0, every sample, then per size the
median time per call of each mode, the median over the rounds of the
paired differences record - off (us per call) and the median of the
paired ratios trace / record, with the targets: the recorder at most
0.05 us per call at 4 bytes, the trace at most 10 % at 4 bytes and 1 % at
1 MiB. The trace written (its calls and their MPI calls) is deleted at the
end, not converted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TRACE_DIR = tempfile.mkdtemp(prefix="jaxmpi-bench-trace-")
os.environ["JAXMPI_TRACE"] = TRACE_DIR
os.environ.setdefault("JAXMPI_RECORD", "256")

from mpi4py import MPI  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import jaxmpi  # noqa: E402,F401
from jaxmpi import _recorder  # noqa: E402
from jaxmpi import notoken as mpx  # noqa: E402

MODES = ("off", "record", "trace")


def set_mode(mode):
    rec = _recorder.get()
    rec.set_tracing(mode == "trace")
    rec.set_recording(mode != "off")


def loop(iters, n):
    def body(i, x):
        return mpx.allreduce(x, MPI.SUM) * 0.5

    return jax.jit(lambda x: lax.fori_loop(0, iters, body, x)), jnp.ones(
        n, jnp.float32)


def timed(fn, x, comm):
    """Wall time (the slowest rank's) and this process's CPU time, s."""
    comm.Barrier()
    c0, t0 = time.process_time(), time.perf_counter()
    jax.block_until_ready(fn(x))
    t, c = time.perf_counter() - t0, time.process_time() - c0
    return comm.allreduce(t, op=MPI.MAX), c


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20_000,
                    help="allreduces per sample up to 64 KiB")
    ap.add_argument("--bytes", type=float, default=2e9,
                    help="bytes per sample from 64 KiB (fewer iterations)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--sizes", default="4,1048576", help="bytes per call")
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    sizes = [int(s) for s in args.sizes.split(",")]
    loops = {}
    for size in sizes:
        iters = args.iters if size < 65536 else max(
            20, int(args.bytes // size))
        loops[size] = (iters, *loop(iters, max(size // 4, 1)))
        set_mode("off")
        jax.block_until_ready(loops[size][1](loops[size][2]))  # compile
    samples = {(s, m): [] for s in sizes for m in MODES}
    cpu = {(s, m): [] for s in sizes for m in MODES}
    for r in range(args.rounds):
        order = MODES[r % 3:] + MODES[:r % 3]
        for size in sizes:
            iters, fn, x = loops[size]
            for mode in order:
                set_mode(mode)
                t, c = timed(fn, x, world)
                samples[(size, mode)].append(t / iters * 1e6)
                cpu[(size, mode)].append(c / iters * 1e6)
    set_mode("off")
    _recorder.get().set_tracing(False)
    world.Barrier()
    if rank == 0:
        report(samples, sizes, args, loops, world.Get_size(), "wall")
        if world.Get_size() == 1:
            # One rank: no peer to wait for, so CPU time is the core's own
            # work (and XLA's), which other jobs on the machine slow less.
            report(cpu, sizes, args, loops, 1, "CPU")
    # The trace is not what this measures: removed, not converted at exit.
    for name in os.listdir(TRACE_DIR):
        if name == f"rank-{rank}.trace.bin":
            os.remove(os.path.join(TRACE_DIR, name))
    world.Barrier()
    if rank == 0:
        shutil.rmtree(TRACE_DIR, ignore_errors=True)


def report(samples, sizes, args, loops, nranks, clock):
    load = subprocess.run(["uptime"], capture_output=True,
                          text=True).stdout.strip()
    print(f"# benchmarks/record.py --rounds {args.rounds}, {nranks} ranks, "
          f"{MPI.Get_library_version().splitlines()[0].strip()}, jax "
          f"{jax.__version__}; {load}")
    print(f"\n{clock} time, samples (us per call):")
    for (size, mode), v in samples.items():
        print(f"  {size:>8} B {mode:<7} " + " ".join(f"{t:.3f}" for t in v))
    print(f"\n{'bytes':>8}  {'calls':>6}  {'off us':>8}  {'record us':>9}  "
          f"{'trace us':>8}  {'record - off us':>15}  {'trace / record':>14}")
    verdicts = []
    for size in sizes:
        off, rec, tr = (samples[(size, m)] for m in MODES)
        diff = statistics.median(b - a for a, b in zip(off, rec))
        ratio = statistics.median(b / a for a, b in zip(rec, tr))
        print(f"{size:>8}  {loops[size][0]:>6}  {statistics.median(off):>8.3f}  "
              f"{statistics.median(rec):>9.3f}  {statistics.median(tr):>8.3f}  "
              f"{diff:>+15.4f}  {ratio:>14.4f}")
        if size == 4:
            verdicts.append(f"recorder at 4 B: {diff * 1e3:+.1f} ns per call "
                            f"(target <= 50)")
            verdicts.append(f"trace at 4 B: {100 * (ratio - 1):+.1f} % "
                            f"(target <= 10)")
        if size == 1 << 20:
            verdicts.append(f"trace at 1 MiB: {100 * (ratio - 1):+.2f} % "
                            f"(target <= 1)")
    print("\n" + "\n".join(verdicts))


if __name__ == "__main__":
    sys.exit(main())
