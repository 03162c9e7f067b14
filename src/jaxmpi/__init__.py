"""jaxmpi: MPI communication of JAX arrays from inside jax.jit.

Zero-copy, ordered without tokens, on every dtype JAX has. The functions here
follow the seed documents of mpi4jax: each returns ``(result, token)``;
``send`` and ``barrier`` return a token. The non-blocking starts return
``(request, token)`` and ``wait`` returns ``(result, token)`` (a token for
a request of ``isend`` or ``ibarrier``). ``jaxmpi.notoken`` has the same
operations returning bare results (mpi4jax >= 0.8; also importable as
``jaxmpi.experimental.notoken``, mpi4jax 0.7's path). Which to import:

* code for mpi4jax < 0.8: ``import jaxmpi as mpi4jax``
* code for mpi4jax >= 0.8: ``import jaxmpi.notoken as mpi4jax``
* new code: ``import jaxmpi.notoken as mpx`` (tokens are never needed)

See docs/apis.md.
"""

from __future__ import annotations

# First: python -m jaxmpi.record / jaxmpi.trace read files; importing
# _commands runs them and exits, before MPI or JAX is loaded (it says why).
from . import _commands  # noqa: F401
from . import _boot  # then: the plain-JAX route acts before jax is imported
import atexit as _atexit
import functools as _functools
import inspect as _inspect
import sys as _sys

from mpi4py import MPI as _MPI  # initialises MPI first

import jax as _jax

from . import _core, _effect, _faults, _recorder, _registry, _validate, notoken
from . import _jax_compat as jc
from ._errors import MPIConfigurationError
from ._region import jit
from ._version import __version__

_core.check_thread_level()
_core.check_launch(_MPI.COMM_WORLD.Get_size())
# Every primitive is defined (notoken imported them all): the C core's table
# must be the registry's; then its handlers are registered.
_registry.check_table(_core.get().table())
_core.get().register_handlers()

# jaxmpi's own communicator: its traffic never meets the user's mpi4py traffic.
_default_comm = _MPI.COMM_WORLD.Clone()
_default_comm.Set_errhandler(_MPI.ERRORS_RETURN)
_validate.set_default_comm(_default_comm)
# The flight recorder (and JAXMPI_TRACE's timeline): one allgather over the
# default communicator, unless both are off.
_recorder.get().start(_default_comm)


def _stop_progress():
    left = _core.get().lib.jaxmpi_requests_shutdown()
    if left:
        print(f"jaxmpi: {left} non-blocking request(s) were never waited "
              "(their MPI calls are abandoned at exit)", file=_sys.stderr)


# Registered after mpi4py's finalizer, so they run first (last registered,
# first run): queued MPI calls complete, then jaxmpi's progress thread stops
# calling MPI, before MPI_Finalize; exiting never hangs.
_atexit.register(_stop_progress)
_atexit.register(_jax.effects_barrier)
# An uncaught exception on one rank ends the whole job (see _faults.py).
_faults.install()

_eager_token = None


def _token():
    """A token for the caller to pass on (ordering is already guaranteed)."""
    global _eager_token
    if not jc.trace_state_clean():
        return _jax.lax.create_token()
    if _eager_token is None:
        _eager_token = _jax.lax.create_token()
    return _eager_token


# The token API's docstring of each operation: what it returns, pointing to
# the operation's own docstring in jaxmpi.notoken (the API reference).
_TOKEN_DOC = """``jaxmpi.notoken.{name}`` with a token: the same arguments.

Returns ``(result, token)``: what ``jaxmpi.notoken.{name}`` returns (a
``Request`` for a non-blocking start) and a token for later calls'
``token=`` argument (optional: calls are ordered without it); a token alone
where it returns None (``send``, ``barrier``, and ``wait`` of a request of
``isend`` or ``ibarrier``). The arguments, errors and an example are in
``jaxmpi.notoken.{name}``'s docstring (docs/api.md).
"""


def _with_token(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return _token() if out is None else (out, _token())

    wrapper.__doc__ = _TOKEN_DOC.format(name=fn.__name__)
    return wrapper


# Every operation (a name of notoken's one list that takes ``token=``): the
# token API's form wraps the bare one.
_OPERATIONS = tuple(
    n for n in notoken.__all__ if "token" in _inspect.signature(
        getattr(notoken, n)).parameters)
for _name in _OPERATIONS:
    globals()[_name] = _with_token(getattr(notoken, _name))
del _name
Request = notoken.Request
DeviceCart = notoken.DeviceCart
has_cuda_support = notoken.has_cuda_support


def set_check(on=True) -> None:
    """Choose the cross-rank checks (default: ``JAXMPI_CHECK``, else sparse).

    Before a checked collective the ranks of its communicator compare the
    operation, dtype, shape, reduction op, root and call number (one small
    MPI_Allgather on a duplicate of the communicator); any difference raises on
    every rank, naming the ranks and what differs. A receive probes the message
    first and reports a size mismatch. ``"sparse"`` checks the first 16
    collectives of each communicator, then those whose number is a power of two
    or a multiple of 65536, and folds the others into a digest compared at the
    next checked call. Call it on every rank at the same point of the program;
    it applies to the calls executed from then on.

    Args:
        on: ``True`` (every call), ``"sparse"`` or ``False`` (off).

    Returns:
        None.

    Raises:
        TypeError: ``on`` is none of these.

    Example:
        Check every collective from here on:

            jaxmpi.set_check(True)          # on every rank
            mpx.allreduce(x, MPI.SUM)       # ranks with other shapes: an error
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
    """Set the deadlock watchdog (default: ``JAXMPI_TIMEOUT``).

    With a timeout, every jaxmpi MPI call that has not completed after
    ``seconds`` raises on its rank, saying what it waited for. The abandoned
    call leaves its communicator unusable: end the job.

    Args:
        seconds: a positive number of seconds, or None or 0 (off).

    Returns:
        None.

    Raises:
        TypeError: ``seconds`` is a bool.
        ValueError: ``seconds`` is not a number, or is negative or infinite.

    Example:
        Turn the watchdog on, then off:

            jaxmpi.set_timeout(60)          # a call stuck for 60 s raises
            jaxmpi.set_timeout(None)        # off
    """
    _core.get().set_timeout(_core.parse_timeout(seconds, "set_timeout: seconds"))


def get_default_comm():
    """The communicator jaxmpi uses when ``comm=None``.

    A clone of ``MPI.COMM_WORLD`` made when jaxmpi is imported, with
    ``MPI.ERRORS_RETURN``: jaxmpi's messages never match the program's own
    mpi4py messages on ``COMM_WORLD``.

    Returns:
        mpi4py.MPI.Intracomm: the default communicator.

    Example:
        Its ranks are ``MPI.COMM_WORLD``'s:

            comm = jaxmpi.get_default_comm()
            comm.Get_rank() == MPI.COMM_WORLD.Get_rank()   # True
    """
    return _default_comm


__all__ = [
    *_OPERATIONS, "Request", "DeviceCart",
    "has_cuda_support", "jit", "get_default_comm", "set_check",
    "set_timeout",
    "MPIConfigurationError", "notoken",
]
