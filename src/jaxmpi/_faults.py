"""What happens when one rank fails while the others wait in jaxmpi calls.

An uncaught exception on one rank would leave it in MPI_Finalize (run at
exit) while its peers wait forever for it in a collective or a receive: the
job hangs. So in a non-interactive job of two or more processes, jaxmpi
chains an exception hook that prints the traceback as usual and then calls
MPI_Abort, which makes the launcher end every rank with a non-zero status
(what ``python -m mpi4py script.py`` does). ``JAXMPI_ABORT_ON_ERROR=0``
turns this off; ``=1`` turns it on at any size.
"""

from __future__ import annotations

import os
import sys
import time

from mpi4py import MPI

_installed = False
_GRACE_S = 1.0


def _wanted() -> bool:
    value = os.environ.get("JAXMPI_ABORT_ON_ERROR", "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    interactive = hasattr(sys, "ps1") or sys.flags.interactive
    return not interactive and MPI.COMM_WORLD.Get_size() > 1


def install() -> None:
    global _installed
    if _installed or not _wanted():
        return
    previous = sys.excepthook

    def abort_on_uncaught(kind, value, tb):
        try:
            previous(kind, value, tb)
        finally:
            rank = MPI.COMM_WORLD.Get_rank()
            sys.stderr.write(
                f"jaxmpi: uncaught {kind.__name__} on rank {rank}: calling "
                "MPI_Abort so that the other ranks do not wait for it "
                "forever (JAXMPI_ABORT_ON_ERROR=0 turns this off)\n")
            sys.stderr.flush()
            sys.stdout.flush()
            # Give the launcher a moment to forward this output: MPI_Abort
            # ends every process at once, and what is still in a pipe is lost.
            time.sleep(_GRACE_S)
            if MPI.Is_initialized() and not MPI.Is_finalized():
                MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort_on_uncaught
    _installed = True
