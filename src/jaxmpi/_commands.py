"""``python -m jaxmpi.record`` and ``python -m jaxmpi.trace``: reading the
flight recorder's files without MPI or JAX.

Running a submodule with ``-m`` imports the package first, and importing
jaxmpi initialises MPI (through mpi4py) and imports JAX. These commands only
read files: a login node may have no MPI able to start, and they must never
wait for one. So the package's first lines ask :func:`requested` whether
this process is one of them and, if so, run it (:func:`run`) and exit before
anything else is imported: the package imports this module first, and its
last lines do that. The C core's reading side (csrc/record_read.c) is
loaded with ctypes: it needs no MPI (only jaxmpi_bind, never called here,
would bind one).
"""

from __future__ import annotations

import ctypes
import glob
import os
import runpy
import sys

COMMANDS = ("jaxmpi.record", "jaxmpi.trace")

# Interpreter options that take a value (python -X importtime -m ...).
_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


def requested(orig_argv=None, argv=None) -> str | None:
    """The command this interpreter was started to run (``python -m
    jaxmpi.record ...``), or None. Only while the package is imported for
    ``-m`` (sys.argv[0] is then "-m")."""
    orig = sys.orig_argv if orig_argv is None else orig_argv
    argv = sys.argv if argv is None else argv
    if not argv or argv[0] != "-m":
        return None
    i = 1
    while i < len(orig):
        a = orig[i]
        if a.startswith("-m"):
            name = a[2:] or (orig[i + 1] if i + 1 < len(orig) else "")
            return name if name in COMMANDS else None
        if a in _WITH_VALUE:
            i += 2
            continue
        if not a.startswith("-") or a in ("-", "-c"):
            return None
        i += 1
    return None


def run(name: str) -> None:
    """Run command `name` as __main__ and exit with its status."""
    sys.argv[0] = name
    try:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    except SystemExit:
        raise
    raise SystemExit(0)


def reader():
    """The C core's reading side, loaded without MPI (any ABI family's
    build: reading uses none of them)."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = sorted(glob.glob(os.path.join(here, "_core_*.so")))
    if not paths:
        raise SystemExit(f"jaxmpi: no C core in {here}: reinstall jaxmpi")
    lib = ctypes.CDLL(paths[0])
    c = ctypes
    lib.jaxmpi_record_report.argtypes = [c.c_char_p, c.c_double, c.c_int,
                                         c.c_int]
    lib.jaxmpi_record_report.restype = c.c_int
    lib.jaxmpi_record_json.argtypes = [c.c_char_p, c.c_int]
    lib.jaxmpi_record_json.restype = c.c_int
    lib.jaxmpi_trace_convert.argtypes = [c.c_char_p, c.c_char_p, c.c_char_p,
                                         c.c_size_t]
    lib.jaxmpi_trace_convert.restype = c.c_int64
    return lib


# Imported first by the package (src/jaxmpi/__init__.py): a command started
# with -m runs now, and the interpreter exits before MPI or JAX is loaded.
_command = requested()
if _command:
    run(_command)
