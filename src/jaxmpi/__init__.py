"""jaxmpi: MPI communication of JAX arrays from inside jax.jit.

Zero-copy, ordered without tokens, on every dtype JAX has. The functions here
follow the seed documents of mpi4jax: each returns ``(result, token)``;
``send`` and ``barrier`` return a token. ``jaxmpi.notoken`` has the same
operations returning bare results (mpi4jax >= 0.8).
"""

from __future__ import annotations

import atexit as _atexit
import functools as _functools

from mpi4py import MPI as _MPI  # initialises MPI first

import jax as _jax
from jax._src import core as _jcore

from . import _api, _core, _faults, _validate
from ._core import MPIConfigurationError

__version__ = "0.1.0"

_core.check_thread_level()
_core.get().register_ffi_targets((*_api.OPERATIONS, "join_token"))

# jaxmpi's own communicator: its traffic never meets the user's mpi4py traffic.
_default_comm = _MPI.COMM_WORLD.Clone()
_default_comm.Set_errhandler(_MPI.ERRORS_RETURN)
_validate.set_default_comm(_default_comm)

# Registered after mpi4py's finalizer, so it runs first: queued MPI calls
# complete before MPI_Finalize and exiting never hangs.
_atexit.register(_jax.effects_barrier)
# An uncaught exception on one rank ends the whole job (see _faults.py).
_faults.install()

_eager_token = None


def _token():
    """A token for the caller to pass on (ordering is already guaranteed)."""
    global _eager_token
    if not _jcore.trace_state_clean():
        return _jax.lax.create_token()
    if _eager_token is None:
        _eager_token = _jax.lax.create_token()
    return _eager_token


def _with_token(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return _token() if out is None else (out, _token())

    wrapper.__doc__ = (fn.__doc__ or "") + (
        "\n    Returns ``(result, token)`` (``send`` and ``barrier``: ``token``);"
        "\n    ``jaxmpi.notoken`` returns the bare result.\n"
    )
    return wrapper


allgather = _with_token(_api.allgather)
allreduce = _with_token(_api.allreduce)
alltoall = _with_token(_api.alltoall)
barrier = _with_token(_api.barrier)
bcast = _with_token(_api.bcast)
gather = _with_token(_api.gather)
neighbor_exchange = _with_token(_api.neighbor_exchange)
recv = _with_token(_api.recv)
reduce = _with_token(_api.reduce)
scan = _with_token(_api.scan)
scatter = _with_token(_api.scatter)
send = _with_token(_api.send)
sendrecv = _with_token(_api.sendrecv)
has_cuda_support = _api.has_cuda_support


def set_check(on=True) -> None:
    """Choose the cross-rank checks (default: ``JAXMPI_CHECK``, else sparse).

    Before a checked collective the ranks of its communicator compare the
    operation, dtype, shape, reduction op, root and call number (one small
    MPI_Allgather on a duplicate of the communicator); any difference raises
    on every rank, naming the ranks and what differs. A receive probes the
    message first and reports a size mismatch.

    Args:
      on: ``True`` checks every collective (``JAXMPI_CHECK=1``); ``"sparse"``
        (the default) checks the first 16 collectives of each communicator,
        then those whose number is a power of two or a multiple of 65536, and
        folds the others into a digest compared at the next checked call;
        ``False`` turns checks off (``JAXMPI_CHECK=0``).

    Raises:
      TypeError: ``on`` is none of these.

    Call it on every rank at the same point of the program (or use the
    environment variable). Takes effect for calls executed from then on,
    jitted or not. Example: ``jaxmpi.set_check(True)``.
    """
    if isinstance(on, str) and on == "sparse":
        mode = "sparse"
    elif isinstance(on, (bool, int)) and not isinstance(on, str):
        mode = "all" if on else "off"
    else:
        raise TypeError("set_check: on must be True, False or 'sparse', got "
                        f"{type(on).__name__}: {on!r}")
    _core.get().set_check(mode)


def set_timeout(seconds) -> None:
    """Set the deadlock watchdog (default: ``JAXMPI_TIMEOUT``); None or 0
    turns it off.

    With a timeout, every jaxmpi MPI call that has not completed after
    ``seconds`` raises on its rank, saying what it waited for. The
    abandoned call leaves its communicator unusable: end the job.
    """
    _core.get().set_timeout(_core.parse_timeout(seconds, "set_timeout: seconds"))


def get_default_comm():
    """The communicator used when ``comm=None`` (a clone of COMM_WORLD)."""
    return _default_comm


__all__ = [
    *_api.OPERATIONS, "has_cuda_support", "get_default_comm", "set_check",
    "set_timeout",
    "MPIConfigurationError", "notoken",
]

from . import notoken  # noqa: E402
