"""Below MPI_THREAD_MULTIPLE, one Python thread only: checked, not hoped.

With MPI_THREAD_SERIALIZED (``mpi4py.rc.thread_level = "serialized"``,
cheaper per MPI call than MPI_THREAD_MULTIPLE with MPICH: docs/design.md,
"Thread level"),
jaxmpi's MPI calls are safe when they never run two at a time. They come
from XLA's threads (the dispatching thread, PJRT's worker, Eigen's pool), but
one jaxmpi ordered effect chains every call of a computation, JAX chains the
computations one Python thread dispatches (its runtime token), one CPU
device runs its programs in enqueue order, and eager calls wait for that
thread's dispatched work. What would break it is a second Python thread
dispatching jaxmpi work (runtime tokens are per thread): below
MPI_THREAD_MULTIPLE, jaxmpi refuses that with MPIConfigurationError. What
jaxmpi cannot see is the program's own mpi4py calls while jitted jaxmpi
work may still run: call ``jax.effects_barrier()`` before them.
"""

from __future__ import annotations

import threading

from mpi4py import MPI

from ._errors import MPIConfigurationError

_owner: int | None = None
_serialized: bool | None = None


def guard() -> None:
    """Raise if MPI is below MPI_THREAD_MULTIPLE and jaxmpi work was already
    dispatched from another Python thread (cost: a few dict and int
    compares per dispatch)."""
    global _owner, _serialized
    if _serialized is None:
        _serialized = MPI.Query_thread() < MPI.THREAD_MULTIPLE
    if not _serialized:
        return
    me = threading.get_ident()
    if _owner is None:
        _owner = me
    elif _owner != me:
        raise MPIConfigurationError(
            "jaxmpi: MPI was initialised below MPI_THREAD_MULTIPLE (e.g. "
            "mpi4py.rc.thread_level = 'serialized'), and jaxmpi work was "
            f"dispatched from Python thread {me} after thread {_owner}: two "
            "threads' MPI calls could then run at the same time. Dispatch "
            "every jaxmpi call from one thread, or keep mpi4py's default "
            "thread level ('multiple').")
