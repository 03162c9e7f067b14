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

import atexit as _atexit
import functools as _functools
import sys as _sys
import textwrap as _textwrap

from mpi4py import MPI as _MPI  # initialises MPI first

import jax as _jax

from . import _core, _effect, _faults, _registry, _validate, notoken
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
# A sharded jit of jaxmpi calls gets jaxmpi's error, not JAX's bare one.
_effect.install_multi_device_error()

_eager_token = None


def _token():
    """A token for the caller to pass on (ordering is already guaranteed)."""
    global _eager_token
    if not jc.trace_state_clean():
        return _jax.lax.create_token()
    if _eager_token is None:
        _eager_token = _jax.lax.create_token()
    return _eager_token


def _token_returns(doc: str, name: str) -> str:
    """``doc`` (a bare-result docstring from _api or _nonblocking) with its
    Returns section rewritten for the token API: ``(result, token)``,
    ``(request, token)`` for the starts of non-blocking operations,
    ``(results, token)`` for ``waitall``, a token alone for a result of
    None."""
    lines = doc.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "Returns:")
    except StopIteration:
        return doc
    end = start + 1
    while end < len(lines) and lines[end].strip():
        end += 1
    body = " ".join(l.strip() for l in lines[start + 1:end])
    if body == "None.":
        new = ["A token (``send`` and ``barrier`` of the token API return only",
               "a token), for later calls' ``token=`` argument (optional:",
               f"calls are ordered without it). ``jaxmpi.notoken.{name}``",
               "returns None."]
    else:
        what = ("request" if name in _STARTS
                else "results" if name == "waitall" else "result")
        first = f"``({what}, token)``"
        if name == "wait":
            first += ("; a token alone where the result is None (requests of "
                      "``isend`` and ``ibarrier``)")
        new = [f"{first}. {what}: " + body,
               "token: for later calls' ``token=`` argument (optional: calls",
               f"are ordered without it). ``jaxmpi.notoken.{name}`` returns",
               f"the {what} alone."]
    wrapped = []
    for para in new:
        wrapped += _textwrap.wrap(para, 68)
    return "\n".join(lines[:start + 1] + ["        " + w for w in wrapped]
                     + lines[end:])


def _with_token(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return _token() if out is None else (out, _token())

    wrapper.__doc__ = _token_returns(fn.__doc__ or "", fn.__name__)
    return wrapper


# Every operation, from notoken's one list: the token API's form wraps the
# bare one. Non-blocking starts return ``(request, token)``; ``wait``
# returns ``(result, token)`` (a token alone for isend and ibarrier),
# ``waitall`` ``(results, token)`` (docs/nonblocking.md).
OPERATIONS = tuple(n for n in notoken.__all__
                   if n not in ("has_cuda_support", "Request", "jit"))
_STARTS = tuple(n for n in OPERATIONS if getattr(
    notoken, n).__annotations__.get("return") == "Request")
for _name in OPERATIONS:
    globals()[_name] = _with_token(getattr(notoken, _name))
del _name
Request = notoken.Request
has_cuda_support = notoken.has_cuda_support


def set_check(on=True) -> None:
    """Choose the cross-rank checks (default: ``JAXMPI_CHECK``, else sparse).

    Before a checked collective the ranks of its communicator compare the
    operation, dtype, shape, reduction op, root and call number (one small
    MPI_Allgather on a duplicate of the communicator); any difference raises
    on every rank, naming the ranks and what differs. A receive probes the
    message first and reports a size mismatch. Call it on every rank at the
    same point of the program (or use the environment variable). Takes
    effect for calls executed from then on, jitted or not.

    Args:
        on: ``True`` checks every collective (``JAXMPI_CHECK=1``);
            ``"sparse"`` (the default) checks the first 16 collectives of
            each communicator, then those whose number is a power of two or
            a multiple of 65536, and folds the others into a digest compared
            at the next checked call; ``False`` turns checks off
            (``JAXMPI_CHECK=0``).

    Returns:
        None.

    Raises:
        TypeError: ``on`` is none of these.

    Example:
        ::

            jaxmpi.set_check(True)      # on every rank
            mpx.allreduce(x, MPI.SUM)   # ranks with other shapes: an error
                                        # on every rank, before MPI sees it
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
    ``seconds`` raises on its rank, saying what it waited for. The
    abandoned call leaves its communicator unusable: end the job.

    Args:
        seconds: a positive number of seconds, or None or 0 to turn the
            watchdog off.

    Returns:
        None.

    Raises:
        TypeError: ``seconds`` is a bool.
        ValueError: ``seconds`` is not a number, or is negative or
            infinite.

    Example:
        ::

            jaxmpi.set_timeout(60)      # a call stuck for 60 s raises
            jaxmpi.set_timeout(None)    # off
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
        ::

            comm = jaxmpi.get_default_comm()
            comm.Get_rank() == MPI.COMM_WORLD.Get_rank()   # True
    """
    return _default_comm


__all__ = [
    *OPERATIONS, "Request",
    "has_cuda_support", "jit", "get_default_comm", "set_check",
    "set_timeout",
    "MPIConfigurationError", "notoken",
]
