"""Check that the C core is built in layers: each file of csrc/ calls only
functions (and uses only data) defined in files of a lower layer, so there is
no call cycle between files. Compiles every csrc/*.c to an object file, reads
its defined and undefined symbols with `nm`, and compares the file-to-file
dependencies with LAYERS below (docs/design.md, "Layers", describes them).

    python scripts/c_layers.py [--cc gcc] [--include DIR]

Prints each file's dependencies; exits 1 (naming the offending symbol) if a
file uses one of its own layer or above, or if a file is missing from LAYERS.
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Bottom first. A file may use any file of a lower line, none of its own line
# or above.
LAYERS = [
    ["mpi_api"],                 # the bound MPI function table and constants
    ["watchdog", "halfops",      # deadline-polled waits; float16/bfloat16 ops;
     "record_base"],             # the recorder's clock, sites, communicators
    ["record"],                  # the flight recorder's ring, dumps, trace
    ["mpi_calls",                # large counts, every call through the watchdog
     "ring_read"],               # rings loaded back, text, JSON strings
    ["record_read",              # the verdict, rings as JSON, timeouts' side
     "trace_read"],              # a trace as Chrome trace events
    ["native"],                  # the MPI calls of XLA's own collectives
    ["ffi"],                     # jm_call, frame decoding, errors, debug log
    ["cuda_staging",             # GPU staging, jm_copy / jm_zero
     "record_ops"],              # jaxmpi's calls as the recorder sees them
    ["shadow"],                  # the communicator's private duplicate
    ["check"],                   # cross-rank checks, receive checks
    ["collectives", "p2p"],      # op bodies
    ["request"],                 # the table of requests, its threads
    ["starts", "wait", "request_gpu"],  # the starts, the wait, their GPU path
    ["handlers", "core"],        # exported FFI handlers; ctypes entry points
]


def _ffi_include() -> str:
    import jaxlib

    return os.path.join(os.path.dirname(jaxlib.__file__), "include")


def symbols(obj: str) -> tuple[set[str], set[str]]:
    out = subprocess.run(["nm", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDBRCG":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
    return defined, undefined


def dependencies(cc: str, include: str) -> dict[str, dict[str, set[str]]]:
    """{file: {file it uses: the symbols}} for csrc/*.c (names without .c)."""
    sources = sorted(glob.glob(os.path.join(ROOT, "csrc", "*.c")))
    defined_in, uses = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for src in sources:
            name = os.path.basename(src)[:-2]
            obj = os.path.join(tmp, name + ".o")
            subprocess.run([cc, "-std=c11", "-c", "-fPIC", "-O0",
                            "-I", os.path.join(ROOT, "csrc"), "-I", include,
                            "-DJAXMPI_ABI_MPICH=1", src, "-o", obj],
                           check=True)
            defined, undefined = symbols(obj)
            for sym in defined:
                defined_in[sym] = name
            uses[name] = undefined
    deps = {}
    for name, undefined in uses.items():
        deps[name] = {}
        for sym in undefined:
            other = defined_in.get(sym)
            if other and other != name:
                deps[name].setdefault(other, set()).add(sym)
    return deps


def violations(deps) -> list[str]:
    level = {f: i for i, line in enumerate(LAYERS) for f in line}
    bad = [f"csrc/{f}.c is not in LAYERS (scripts/c_layers.py)"
           for f in sorted(deps) if f not in level]
    for f in sorted(deps):
        for other, syms in sorted(deps[f].items()):
            if f in level and other in level and level[other] >= level[f]:
                bad.append(f"csrc/{f}.c (layer {level[f]}) uses "
                           f"{', '.join(sorted(syms))} of csrc/{other}.c "
                           f"(layer {level[other]})")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--include", default=None,
                    help="the directory holding xla/ffi/api/c_api.h "
                         "(default: jaxlib's)")
    args = ap.parse_args()
    deps = dependencies(args.cc, args.include or _ffi_include())
    level = {f: i for i, line in enumerate(LAYERS) for f in line}
    for f in sorted(deps, key=lambda f: (level.get(f, 99), f)):
        print(f"{level.get(f, '?')} {f}: {', '.join(sorted(deps[f])) or '-'}")
    bad = violations(deps)
    for line in bad:
        print("LAYER VIOLATION:", line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
