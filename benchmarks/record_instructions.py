"""The flight recorder's and the trace's cost counted in instructions, which
other jobs on the machine do not change: callgrind over the C core's 4-byte
allreduce handler (jaxmpi_ffi_allreduce and all it calls) in a jitted loop
at 1 rank, with the recorder off, on and tracing; and the allocations the
recorder makes (malloc and calloc under jm_record_begin and jm_record_end:
the first call on a communicator only).

    python benchmarks/record_instructions.py [--calls 5000]

First the recorder's own time, which other jobs hardly change either:
benchmarks/record_ns.c (begin and end in a tight loop, the fastest of many
runs; gcc). Needs valgrind. Prints per mode the instructions per call and
the difference to off, and the recorder's allocations over all calls.
benchmarks/record.py measures the time of whole calls.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

PROGRAM = """
import os, sys, tempfile
mode, n = sys.argv[1], int(sys.argv[2])
trace = tempfile.mkdtemp()
if mode == "trace":
    os.environ["JAXMPI_TRACE"] = trace
if mode == "off":
    os.environ["JAXMPI_RECORD"] = "0"
from mpi4py import MPI
import jax, jax.numpy as jnp
from jax import lax
from jaxmpi import _recorder, notoken as mpx
f = jax.jit(lambda x: lax.fori_loop(
    0, n, lambda i, x: mpx.allreduce(x, MPI.SUM) * 0.5, x))
f(jnp.ones(1, jnp.float32)).block_until_ready()
_recorder.get().set_tracing(False)
for name in os.listdir(trace):  # not converted at exit: not measured
    os.remove(os.path.join(trace, name))
"""


def annotate(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes",
                          "--tree=calling", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    total = int(re.search(r"([\d,]+) \([\d.]+%\)\s+PROGRAM TOTALS",
                          out).group(1).replace(",", ""))
    allocs = 0
    block = None
    for line in out.splitlines():
        m = re.match(r"\s*[\d,]+ \([^)]*\)\s+\*\s+\S*:(\w+)", line)
        if m:
            block = m.group(1)
            continue
        m = re.match(r"\s*[\d,]+ \([^)]*\)\s+>\s+\S*:(malloc|calloc|realloc) "
                     r"\((\d+)x\)", line)
        if m and block in ("jm_record_begin", "jm_record_end"):
            allocs += int(m.group(2))
    return total, allocs


def recorder_ns(runs=600, calls=20000):
    """benchmarks/record_ns.c built with the core's flags and run: the
    recorder's own ns a call (the fastest of many runs)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    import jax.ffi  # the FFI header's directory: only for this build
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "record_ns")
        subprocess.run(["gcc", "-std=c11", "-O2", "-I",
                        os.path.join(root, "csrc"), "-I",
                        jax.ffi.include_dir(), "-DJAXMPI_ABI_MPICH=1",
                        os.path.join(here, "record_ns.c"),
                        os.path.join(root, "csrc", "record.c"), "-lpthread",
                        "-o", exe], check=True)
        return subprocess.run([exe, str(runs), str(calls)], check=True,
                              capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=5000)
    args = ap.parse_args()
    print("# benchmarks/record_ns.c: jm_record_begin/end alone")
    print(recorder_ns())
    if not shutil.which("valgrind"):
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as d:
        prog = os.path.join(d, "loop.py")
        with open(prog, "w") as f:
            f.write(PROGRAM)
        rows = {}
        for mode in ("off", "record", "trace"):
            # n and 2 n calls: the difference leaves out what happens once
            # (a communicator's first call, a thread's first use of its
            # thread-local storage).
            runs = []
            for n in (args.calls, 2 * args.calls):
                out = os.path.join(d, f"{mode}{n}.out")
                subprocess.run(
                    ["valgrind", "--tool=callgrind",
                     f"--callgrind-out-file={out}", "--collect-atstart=no",
                     "--toggle-collect=jaxmpi_ffi_allreduce", sys.executable,
                     prog, mode, str(n)],
                    check=True, capture_output=True)
                runs.append(annotate(out))
            rows[mode] = ((runs[1][0] - runs[0][0]) / args.calls, runs[1][1])
    off = rows["off"][0]
    print(f"# callgrind, a 4-byte allreduce in a jitted loop at 1 rank: "
          f"instructions in jaxmpi_ffi_allreduce and below per call (runs of "
          f"{args.calls} and {2 * args.calls} calls, their difference)")
    print(f"{'mode':<8} {'instr/call':>10} {'vs off':>8}  recorder's mallocs")
    for mode, (per_call, allocs) in rows.items():
        print(f"{mode:<8} {per_call:>10.0f} {per_call - off:>+8.0f}  "
              f"{allocs} in {2 * args.calls + 1} calls")


if __name__ == "__main__":
    main()
