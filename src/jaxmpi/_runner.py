"""Running a program as ``__main__`` under a launcher, in the manner of
``python -m mpi4py``: what ``python -m jaxmpi.mpi4jax`` and ``python -m
jaxmpi.distributed`` share.

The target is a script path, ``-m module`` or ``-c command``, run with its
own ``sys.argv`` and ``sys.path[0]`` as ``python <target>`` would set them.
A rank whose target raises, or calls ``sys.exit`` with a non-zero status,
ends the whole job (``MPI_Abort``) instead of leaving the other ranks
waiting for it (``JAXMPI_ABORT_ON_ERROR=0`` turns this off).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys
import time
import types
import zipfile

from mpi4py import MPI

_ABORT_GRACE_S = 1.0


def usage_error(prog: str, usage: str, message: str):
    print(f"python -m {prog}: {message}\n{usage}", file=sys.stderr)
    # Every rank parses the same command line and leaves here alike.
    raise SystemExit(2)


def parse(prog: str, argv, usage: str, help_text: str, flags=()):
    """(flags given, kind, target, args): kind is 'path', 'module' or
    'command'; ``flags`` are the options the runner takes (no values)."""
    given = set()
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("-m", "-c"):
        if argv[i] in ("-h", "--help"):
            print(help_text)
            raise SystemExit(0)
        if argv[i] in flags:
            given.add(argv[i])
        else:
            usage_error(prog, usage, f"unknown option {argv[i]!r}")
        i += 1
    if i == len(argv):
        usage_error(prog, usage, "no script, -m module or -c command to run")
    if argv[i] in ("-m", "-c"):
        if i + 1 == len(argv):
            usage_error(prog, usage, f"{argv[i]} needs an argument")
        kind = "module" if argv[i] == "-m" else "command"
        return given, kind, argv[i + 1], argv[i + 2:]
    return given, "path", argv[i], argv[i + 1:]


def _run(kind: str, target: str, args) -> None:
    """Run the target as __main__, with sys.argv and sys.path[0] set as
    `python <target>` would set them."""
    # Python prepends the script's directory (-m and -c: the current one,
    # already there under -m) unless -I or -P told it not to.
    fix_path = not (sys.flags.isolated or getattr(sys.flags, "safe_path", False))
    if kind == "path":
        sys.argv[:] = [target, *args]
        if fix_path and os.path.isfile(target) and not zipfile.is_zipfile(target):
            sys.path[0] = os.path.dirname(os.path.realpath(target))
        runpy.run_path(target, run_name="__main__")
    elif kind == "module":
        sys.argv[:] = [target, *args]  # runpy puts the module's file first
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv[:] = ["-c", *args]
        code = compile(target, "<string>", "exec")
        main = types.ModuleType("__main__")
        saved = sys.modules["__main__"]
        sys.modules["__main__"] = main
        try:
            exec(code, main.__dict__)
        finally:
            sys.modules["__main__"] = saved


def _missing_target(kind: str, target: str):
    """Python's own message when the target does not exist (every rank sees
    the same), or None."""
    if kind == "path" and not os.path.exists(target):
        return 2, f"can't open file {os.path.abspath(target)!r}: no such file"
    if kind == "module":
        try:
            found = importlib.util.find_spec(target) is not None
        except ImportError:
            found = False
        if not found:
            return 1, f"No module named {target}"
    return None


def _abort_wanted() -> bool:
    # The rule of jaxmpi's exception hook (docs/troubleshooting.md).
    value = os.environ.get("JAXMPI_ABORT_ON_ERROR", "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    return not sys.flags.interactive and MPI.COMM_WORLD.Get_size() > 1


def _abort(status: int, what=None) -> None:
    """End every rank of the job with ``status`` (MPI_Abort), after a
    moment for the launcher to forward what was printed."""
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return
    sys.stdout.flush()
    if what is not None:
        sys.stderr.write(
            f"jaxmpi: {what} on rank {MPI.COMM_WORLD.Get_rank()}: calling "
            f"MPI_Abort({status}) so that the other ranks do not wait for it "
            "forever (JAXMPI_ABORT_ON_ERROR=0 turns this off)\n")
    sys.stderr.flush()
    time.sleep(_ABORT_GRACE_S)
    MPI.COMM_WORLD.Abort(status)


def execute(prog: str, kind: str, target: str, args) -> int:
    """Run the target; end the job with MPI_Abort if it fails on this rank.
    Returns 0, or the status that the target passed to ``sys.exit``."""
    missing = _missing_target(kind, target)
    if missing is not None:
        status, message = missing
        print(f"python -m {prog}: {message}", file=sys.stderr)
        return status
    try:
        _run(kind, target, args)
    except SystemExit as e:
        status = e.code
        if status is not None and not isinstance(status, int):
            print(status, file=sys.stderr)  # sys.exit("message"), as Python does
            status = 1
        if status and _abort_wanted():
            _abort(status, f"sys.exit({e.code!r})")
        return status or 0
    except BaseException as e:
        if not _abort_wanted():
            raise
        # jaxmpi's exception hook prints the traceback, says why and aborts
        # (MPICH's MPI_Abort may return before the launcher ends the
        # process: hence no second message here); a hook the program put in
        # its place only prints.
        sys.excepthook(type(e), e, e.__traceback__)
        _abort(1)
        return 1  # MPI already finalized: the traceback is printed
    return 0
