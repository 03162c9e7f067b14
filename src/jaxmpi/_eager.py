"""Eager calls without compiling: the direct path for a concrete CPU array.

``jaxmpi.allreduce(x)`` outside any trace would run as a one-op compiled
computation: JAX's dispatch, many times the MPI call's own cost
(docs/design.md, "Dispatch", has the measurements). Here the same MPI call
runs at once on the array's host buffer (``allreduce``, ``scan``,
``bcast``, ``allgather``, ``alltoall``):

1. order: the calls of previously dispatched jaxmpi computations of this
   Python thread finish first (JAX's runtime token of the effect, the token
   every later jaxmpi computation waits for), so the program order of MPI
   calls on this rank is kept; nothing dispatched later can start before
   this call returns, because the call is synchronous;
2. the call: mpi4py's ``Allreduce`` on the same communicator, with the MPI
   datatype and op handle the C core would use (the array's buffer is read
   in place: ``np.asarray`` of a CPU jax Array is zero-copy);
3. the result: a new jax Array on x's device, with x's sharding and commit.

It applies only where the compiled call would do exactly this and nothing
more: x a ready-to-read jax Array on one CPU device (NumPy inputs become one
first), a predefined MPI datatype (not float16/bfloat16, whose ops live in
the C core), a count under ``JAXMPI_MAX_COUNT``, and none of the C core's
extra duties switched on (the deadlock watchdog; the debug log). The
cross-rank check (the sparse default, or every call) is the C core's own,
called here before MPI (``jaxmpi_check_eager``): the same count, digest and
signatures as the compiled op's handler. Anything else takes the compiled
path. ``JAXMPI_EAGER_DIRECT=0``
turns the direct path off.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from mpi4py import MPI

from . import _core, _dtypes, _recorder
from . import _jax_compat as jc
from ._effect import wait_for_dispatched
from ._threads import guard

_ENABLED = os.environ.get("JAXMPI_EAGER_DIRECT", "1").strip().lower() not in (
    "0", "false", "no", "off")

# mpi4py's Datatype and Op objects, by dtype and handle (made once each).
_mpi_datatypes: dict = {}
_mpi_ops: dict = {}


def _datatype(dtype):
    mpitype = _mpi_datatypes.get(dtype)
    if mpitype is None:
        name = _dtypes.MPI_TYPES.get(dtype)
        if name is None:
            return None
        mpitype = _mpi_datatypes[dtype] = getattr(MPI, name)
    return mpitype


def _op(handle: int):
    op = _mpi_ops.get(handle)
    if op is None:
        op = _mpi_ops[handle] = MPI.Op.fromhandle(handle)
    return op


def usable(x) -> bool:
    """Whether x (a jax Array, outside any trace) can take the direct path."""
    if not _ENABLED:
        return False
    core = _core.get()
    # The watchdog and the debug log live in the C core's handlers: with
    # either on, the compiled path. Cross-rank checks (the sparse default
    # included) are made here by the C core's own check (allreduce below),
    # so that a rank calling eagerly and one running compiled code count and
    # compare the same calls.
    if core.debug or core.timeout is not None:
        return False
    try:
        sharding = x.sharding
        if len(sharding.device_set) != 1:
            return False
        (device,) = sharding.device_set
    except AttributeError:
        return False
    return device.platform == "cpu" and x.size <= core.count_limit


def _new_array(x, data: np.ndarray):
    (device,) = x.sharding.device_set
    aval = x.aval if data.shape == x.shape else x.aval.update(shape=data.shape)
    return jc.xla_client.batched_device_put(aval, x.sharding, [data], [device],
                                            x._committed)


def _failure(fn: str, mpi_fn: str, comm, e: MPI.Exception):
    return jax.errors.JaxRuntimeError(
        f"INTERNAL: jaxmpi.{fn}: {mpi_fn} failed on rank {comm.Get_rank()} "
        f"of {comm.Get_size()}: {e.Get_error_string()} (MPI error code "
        f"{e.Get_error_code()}, class {e.Get_error_class()})")


def _direct(fn, mpi_fn, x, comm, op_handle, root, shape, call):
    """The direct path of collective ``fn``: order, check, ``call(send,
    recv, mpitype)`` (mpi4py; recv of ``shape``, None for no result buffer),
    the result as a new jax Array on x's device. None when x's dtype has no
    predefined MPI datatype (the compiled path then runs)."""
    mpitype = _datatype(np.dtype(x.dtype))
    if mpitype is None:
        return None
    guard()
    wait_for_dispatched()
    _core.get().check_eager(fn, comm, op_handle, x, root)
    send = np.asarray(x)
    if send.ndim:  # a 0-d array has no strides to check
        send = np.ascontiguousarray(send)
    recv = None if shape is None else np.empty(shape, send.dtype)
    # The flight recorder sees this call as the C core's handler would
    # (csrc/record_ops.h): numbered on its communicator, timed, its failure.
    recorder = _recorder.get()
    ref = recorder.eager_begin(fn, comm, root if fn == "bcast" else -1, x)
    try:  # also at size 0: every rank makes the same MPI calls
        call(send, recv, mpitype)
    except MPI.Exception as e:
        failure = _failure(fn, mpi_fn, comm, e)
        recorder.eager_end(ref, str(failure))
        raise failure from None
    recorder.eager_end(ref)
    return x if recv is None else _new_array(x, recv)


def allreduce(x, op_handle: int, comm):
    """MPI_Allreduce of x's data; None when the direct path does not apply."""
    return _direct(
        "allreduce", "MPI_Allreduce", x, comm, op_handle, 0, x.shape,
        lambda s, r, t: comm.Allreduce([s, s.size, t], [r, r.size, t],
                                       _op(op_handle)))


def scan(x, op_handle: int, comm):
    """MPI_Scan (inclusive) of x's data."""
    return _direct(
        "scan", "MPI_Scan", x, comm, op_handle, 0, x.shape,
        lambda s, r, t: comm.Scan([s, s.size, t], [r, r.size, t],
                                  _op(op_handle)))


def bcast(x, root: int, comm):
    """MPI_Bcast from root: the root gets x itself (as the compiled op
    called eagerly), the others a new array."""
    here = comm.Get_rank() == root

    def call(s, r, t):
        buf = s if here else r
        comm.Bcast([buf, buf.size, t], root)

    return _direct("bcast", "MPI_Bcast", x, comm, 0, root,
                   None if here else x.shape, call)


def allgather(x, comm):
    """MPI_Allgather: every rank's x stacked along a new leading axis."""
    return _direct(
        "allgather", "MPI_Allgather", x, comm, 0, 0,
        (comm.Get_size(), *x.shape),
        lambda s, r, t: comm.Allgather([s, s.size, t], [r, s.size, t]))


def alltoall(x, comm):
    """MPI_Alltoall of x's blocks along axis 0 (one per rank)."""
    n = comm.Get_size()
    return _direct(
        "alltoall", "MPI_Alltoall", x, comm, 0, 0, x.shape,
        lambda s, r, t: comm.Alltoall([s, s.size // n, t], [r, r.size // n, t]))
