"""The operations, written once. These return bare results (the convention
of ``jaxmpi.notoken`` and mpi4jax >= 0.8); ``jaxmpi`` itself wraps them to
return ``(result, token)`` as in the seed documents.

Every function takes ``comm`` (an mpi4py intracommunicator; default: a clone
of ``MPI.COMM_WORLD`` made when jaxmpi is imported) and ``token`` (optional:
calls are ordered by JAX's effect system whether or not tokens are passed; a
token given is joined to that order). Integer arguments (ranks, roots, tags)
must be static Python ints.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _core
from . import _eager
from . import _jax_compat as _jcore
from . import _ops
from . import _pytree
from . import _validate as v
# The checks every operation makes first (leaked requests, comm, token) and
# the join of a traced token: one pair for the blocking, non-blocking and
# topology operations.
from ._nonblocking import _begin, _ops_join as _join
# ANY_SOURCE, ANY_TAG: the defaults that show their names in signatures
# (_MPIConstant stays importable from here for constants pickled before it
# moved to _validate).
from ._validate import ANY_SOURCE, ANY_TAG, _MPIConstant  # noqa: F401


def _passed_through(x, y):
    """Where a rooted op's MPI call delivers nothing, the op gives back x.
    Called eagerly with no transformation, that is x itself (as in mpi4jax);
    under jit, grad or vmap it is the primitive's copy of x, so that every
    rank's program stays linear in the same values (docs/autodiff.md)."""
    return x if _jcore.trace_state_clean() else y


def _direct(x, run, arg, comm):
    """The eager direct path (_eager.py): ``run(x, arg, comm)`` outside any
    trace where it applies, else None (the compiled path runs)."""
    if _jcore.trace_state_clean() and _eager.usable(x):
        return run(x, arg, v.default_comm() if comm is None else comm)
    return None


def _reduction(fn, x, op, comm, token):
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    _join(tok)
    return info, x, opinfo


@_pytree.tree_op()
def allreduce(x, op, *, comm=None, token=None, adjoint="replicated"):
    """Reduce ``x`` over all ranks with ``op``; every rank gets the result.

    MPI_Allreduce.

    Args:
        x: the array to reduce (a JAX or NumPy array, or a scalar), the same
            shape and dtype on every rank.
        op: an mpi4py reduction op: ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX``,
            ``MPI.MIN``, the logical and bitwise ops for integers and bool,
            or a user-defined ``MPI.Op``.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.
        adjoint: how reverse-mode AD treats the replicated result:
            ``"replicated"`` (default, as mpi4jax and JPI) counts its
            cotangent once, so the transpose is the identity; ``"sum"`` is
            the exact adjoint of the map from all ranks' inputs to all
            ranks' outputs (an allreduce of the cotangents). See
            docs/autodiff.md.

    Returns:
        An array of ``x``'s shape and dtype: ``op`` over every rank's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        ValueError: ``adjoint`` is not ``"replicated"`` or ``"sum"``.

    Example:
        Sum over 4 ranks (``mpirun -n 4``), inside ``jax.jit``::

            from mpi4py import MPI
            import jax, jax.numpy as jnp
            import jaxmpi, jaxmpi.notoken as mpx

            f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM))
            f(jnp.ones(3))                      # [4. 4. 4.] on every rank
            y, token = jaxmpi.allreduce(jnp.ones(3), MPI.SUM)  # token API
    """
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"allreduce: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    info, x, opinfo = _reduction("allreduce", x, op, comm, token)
    y = _direct(x, _eager.allreduce, opinfo.handle, comm)
    if y is not None:
        return y
    return _ops.allreduce_p.bind(x, comm=info, op=opinfo, adjoint=adjoint)[0]


@_pytree.tree_op()
def reduce(x, op, root, *, comm=None, token=None):
    """Reduce ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Reduce.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        On ``root``, the reduced array (``x``'s shape and dtype); on other
        ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 4``::

            y = mpx.reduce(jnp.ones(3) * rank, MPI.SUM, 0)  # rank 0: [6. 6. 6.]
            y, token = jaxmpi.reduce(x, MPI.MAX, 0)         # token API
    """
    info, x, opinfo = _reduction("reduce", x, op, comm, token)
    root = v.rank_arg(root, "reduce", "root", info)
    (y,) = _ops.reduce_p.bind(x, comm=info, op=opinfo, root=root)
    return y if info.rank == root else _passed_through(x, y)


@_pytree.tree_op()
def scan(x, op, *, comm=None, token=None):
    """Inclusive prefix reduction: rank r gets ``op`` over ranks 0..r.

    MPI_Scan.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of ``x``'s shape and dtype: ``op`` over the ``x`` of ranks
        0 to this rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 4``::

            y = mpx.scan(jnp.ones(2), MPI.SUM)   # rank r: [r + 1, r + 1]
            y, token = jaxmpi.scan(x, MPI.SUM)   # token API
    """
    info, x, opinfo = _reduction("scan", x, op, comm, token)
    y = _direct(x, _eager.scan, opinfo.handle, comm)
    if y is not None:
        return y
    return _ops.scan_p.bind(x, comm=info, op=opinfo)[0]


@_pytree.tree_op()
def bcast(x, root, *, comm=None, token=None):
    """Broadcast the root's ``x`` to every rank.

    MPI_Bcast.

    Args:
        x: on ``root``, the array to send; on other ranks, a template that
            gives the result's shape and dtype (its data is not used).
        root: the rank whose ``x`` is sent (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        The root's ``x``, on every rank (on the root, ``x`` itself).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        Give every rank rank 0's parameters::

            params = mpx.bcast(params, 0)        # one array
            params, token = jaxmpi.bcast(params, 0)  # token API
    """
    info, tok = _begin("bcast", comm, token)
    x = v.array(x, "bcast")
    root = v.rank_arg(root, "bcast", "root", info)
    _join(tok)
    y = _direct(x, _eager.bcast, root, comm)
    if y is not None:
        return y
    (y,) = _ops.bcast_p.bind(x, comm=info, root=root)
    return _passed_through(x, y) if info.rank == root else y


@_pytree.tree_op()
def gather(x, root, *, comm=None, token=None):
    """Gather every rank's ``x`` on the root, stacked along a new axis 0.

    MPI_Gather.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        On ``root``, an array of shape ``(size, *x.shape)`` whose row ``r``
        is rank r's ``x``; on other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 3``::

            y = mpx.gather(jnp.full(2, rank), 0)  # rank 0: [[0 0] [1 1] [2 2]]
            y, token = jaxmpi.gather(x, 0)        # token API
    """
    info, tok = _begin("gather", comm, token)
    x = v.array(x, "gather")
    root = v.rank_arg(root, "gather", "root", info)
    _join(tok)
    (y,) = _ops.gather_p.bind(x, comm=info, root=root)
    return y if info.rank == root else _passed_through(x, y)


@_pytree.tree_op(rows=_pytree.rows_on_root)
def scatter(x, root, *, comm=None, token=None):
    """Scatter the root's ``x[r]`` to rank r.

    MPI_Scatter.

    Args:
        x: on ``root``, an array of shape ``(size, ...)``; on other ranks, a
            template of the result's shape ``x.shape[1:]`` and dtype (its
            data is not used).
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        On every rank r, the root's ``x[r]`` (shape ``x.shape[1:]`` on the
        root; on the other ranks, their template's shape).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        ValueError: on the root, ``x.shape[0]`` is not the communicator's
            size.

    Example:
        ``mpirun -n 3``::

            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else jnp.zeros(2)
            y = mpx.scatter(x, 0)                 # rank r: [2r, 2r + 1]
            y, token = jaxmpi.scatter(x, 0)       # token API
    """
    info, tok = _begin("scatter", comm, token)
    x = v.array(x, "scatter")
    root = v.rank_arg(root, "scatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "scatter", "x (on the root)", info.size)
    _join(tok)
    return _ops.scatter_p.bind(x, comm=info, root=root)[0]


@_pytree.tree_op()
def allgather(x, *, comm=None, token=None):
    """Gather every rank's ``x`` on every rank.

    MPI_Allgather.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of shape ``(size, *x.shape)`` whose row ``r`` is rank r's
        ``x``, on every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 3``::

            y = mpx.allgather(jnp.full(2, rank))  # [[0 0] [1 1] [2 2]]
            y, token = jaxmpi.allgather(x)        # token API
    """
    info, tok = _begin("allgather", comm, token)
    x = v.array(x, "allgather")
    _join(tok)
    y = _direct(x, lambda x, _, c: _eager.allgather(x, c), None, comm)
    if y is not None:
        return y
    return _ops.allgather_p.bind(x, comm=info)[0]


@_pytree.tree_op(rows=True)
def alltoall(x, *, comm=None, token=None):
    """Rank i sends ``x[j]`` to rank j and receives rank j's ``x[i]`` into
    ``result[j]``.

    MPI_Alltoall.

    Args:
        x: an array of shape ``(size, ...)``, the same shape and dtype on
            every rank.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of ``x``'s shape and dtype whose row ``j`` is rank j's
        ``x[i]`` (i: this rank).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        ValueError: ``x.shape[0]`` is not the communicator's size.

    Example:
        ``mpirun -n 2`` (a transpose across ranks)::

            x = jnp.array([10 * rank, 10 * rank + 1])
            y = mpx.alltoall(x)            # rank 0: [0 10], rank 1: [1 11]
            y, token = jaxmpi.alltoall(x)  # token API
    """
    info, tok = _begin("alltoall", comm, token)
    x = v.array(x, "alltoall")
    v.leading_dim(x, "alltoall", "x", info.size)
    _join(tok)
    y = _direct(x, lambda x, _, c: _eager.alltoall(x, c), None, comm)
    if y is not None:
        return y
    return _ops.alltoall_p.bind(x, comm=info)[0]


def barrier(*, comm=None, token=None):
    """Block until every rank of ``comm`` has reached the barrier.

    MPI_Barrier.

    Args:
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        None.

    Raises:
        TypeError: ``comm`` is not an intracommunicator, or ``token`` is
            not a token.
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks making different calls
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ::

            mpx.barrier()               # returns None
            token = jaxmpi.barrier()    # token API: returns a token
    """
    info, tok = _begin("barrier", comm, token)
    _join(tok)
    _ops.barrier_p.bind(comm=info)


@_pytree.tree_op(result=False)
def send(x, dest, *, tag=0, comm=None, token=None):
    """Send ``x`` to rank ``dest``.

    MPI_Send (standard mode: it may wait until ``dest`` receives the
    message, as large messages do).

    Args:
        x: the array to send.
        dest: the receiving rank (a static int), or ``MPI.PROC_NULL`` (no
            message is sent).
        tag: the message tag, 0 to half of ``MPI.TAG_UB`` (the higher tags
            carry jaxmpi's gradient messages).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        None.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 2``::

            if rank == 0:
                mpx.send(jnp.arange(3.0), 1, tag=7)   # returns None
                token = jaxmpi.send(jnp.arange(3.0), 1, tag=7)  # token API
            else:
                y = mpx.recv(jnp.zeros(3), 0, tag=7)
                y, token = jaxmpi.recv(jnp.zeros(3), 0, tag=7)
    """
    info, tok = _begin("send", comm, token)
    x = v.array(x, "send")
    dest = v.rank_arg(dest, "send", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "send", "tag", info)
    _join(tok)
    _ops.send_p.bind(x, comm=info, dest=dest, tag=tag)


@_pytree.tree_op()
def recv(x, source=ANY_SOURCE, *, tag=ANY_TAG, comm=None, status=None,
         token=None):
    """Receive an array of ``x``'s shape and dtype from rank ``source``.

    MPI_Recv. A message of another size is an error, not a truncation.

    Args:
        x: a template: the result's shape and dtype (its data is not used).
        source: the sending rank (a static int), ``MPI.ANY_SOURCE``
            (default), or ``MPI.PROC_NULL`` (no message; the result is
            zeros).
        tag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        status: an ``MPI.Status`` filled in when the receive completes
            (source, tag, count), or None.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        The received array, of ``x``'s shape and dtype.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        NotImplementedError: differentiating a receive from
            ``MPI.ANY_SOURCE``, or in reverse mode from ``MPI.ANY_TAG``
            (see docs/autodiff.md).

    Example:
        ``mpirun -n 2``::

            if rank == 1:
                y = mpx.recv(jnp.zeros(3), 0)          # from rank 0, any tag
                y, token = jaxmpi.recv(jnp.zeros(3), source=0, tag=7)
            else:
                mpx.send(jnp.arange(3.0), 1)
                jaxmpi.send(jnp.arange(3.0), 1, tag=7)
    """
    info, tok = _begin("recv", comm, token)
    x = v.array(x, "recv")
    source = v.rank_arg(source, "recv", "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    tag = v.tag_arg(tag, "recv", "tag", info, allow_any=True)
    addr = v.status_arg(status, "recv")
    _join(tok)
    return _ops.recv_p.bind(x, comm=info, source=source, tag=tag,
                            status=addr)[0]


@_pytree.tree_op(trees=("sendbuf", "recvbuf"))
def sendrecv(sendbuf, recvbuf, source, dest, *, sendtag=0, recvtag=ANY_TAG,
             comm=None, status=None, token=None):
    """Send ``sendbuf`` to ``dest`` and receive an array of ``recvbuf``'s
    shape and dtype from ``source``, in one deadlock-free call.

    MPI_Sendrecv.

    Args:
        sendbuf: the array to send.
        recvbuf: a template: the result's shape and dtype (its data is not
            used).
        source: the rank to receive from (a static int), ``MPI.ANY_SOURCE``
            or ``MPI.PROC_NULL`` (the result is zeros).
        dest: the rank to send to (a static int) or ``MPI.PROC_NULL``.
        sendtag: the tag of the message sent.
        recvtag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        status: an ``MPI.Status`` filled in when the receive completes, or
            None.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        The received array, of ``recvbuf``'s shape and dtype.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        NotImplementedError: differentiating a receive from
            ``MPI.ANY_SOURCE`` (see docs/autodiff.md).

    Example:
        Shift right around a ring::

            right, left = (rank + 1) % size, (rank - 1) % size
            y = mpx.sendrecv(x, x, source=left, dest=right)  # left's x
            y, token = jaxmpi.sendrecv(x, x, left, right)    # token API
    """
    fn = "sendrecv"
    info, tok = _begin(fn, comm, token)
    sendbuf = v.array(sendbuf, fn, "sendbuf")
    recvbuf = v.array(recvbuf, fn, "recvbuf")
    source = v.rank_arg(source, fn, "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    dest = v.rank_arg(dest, fn, "dest", info, allow=(MPI.PROC_NULL,))
    sendtag = v.tag_arg(sendtag, fn, "sendtag", info)
    recvtag = v.tag_arg(recvtag, fn, "recvtag", info, allow_any=True)
    addr = v.status_arg(status, fn)
    _join(tok)
    return _ops.sendrecv_p.bind(
        sendbuf, recvbuf, comm=info, source=source, dest=dest, sendtag=sendtag,
        recvtag=recvtag, status=addr,
    )[0]


MAX_EXCHANGE_PAIRS = _ops.MAX_EXCHANGE_PAIRS  # 32: the core's limit per call


def neighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0, comm=None,
                      token=None):
    """Many sendrecvs at once: pair ``i`` sends ``sendbufs[i]`` to
    ``dests[i]`` and receives an array of ``recvbufs[i]``'s shape and dtype
    from ``sources[i]``, both with tag ``tag + i``.

    All receives and sends are posted together (MPI_Irecv, MPI_Isend, one
    MPI_Waitall), so a halo exchange in every direction is one call with no
    ordering to get right. A rank's pair ``i`` matches pair ``i`` of its
    peers: in a shift pattern every rank sends in direction ``i`` and
    receives from the opposite one.

    Args:
        sendbufs: a list or tuple of arrays to send (at most 32).
        recvbufs: a list or tuple of templates, one per pair (their data is
            not used).
        sources: the rank each pair receives from (static ints), or
            ``MPI.PROC_NULL`` (that result is zeros).
        dests: the rank each pair sends to (static ints), or
            ``MPI.PROC_NULL``.
        tag: pair ``i`` uses tag ``tag + i``.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A tuple of the received arrays, one per pair.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank, root or tag is not a static int, ``op``
            is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a rank, root or tag is out of range, or an array lives
            on more than one device (jaxmpi needs one JAX device per
            process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).
        ValueError: the four sequences differ in length, or hold more than
            32 pairs.

    Example:
        A 1-D halo exchange in both directions::

            left, right = (rank - 1) % size, (rank + 1) % size
            from_left, from_right = mpx.neighbor_exchange(
                [u[-1:], u[:1]], [u[:1], u[-1:]],
                sources=[left, right], dests=[right, left])
            (from_left, from_right), token = jaxmpi.neighbor_exchange(
                [u[-1:], u[:1]], [u[:1], u[-1:]], [left, right], [right, left])
    """
    fn = "neighbor_exchange"
    info, tok = _begin(fn, comm, token)
    seqs = {}
    for name, value in (("sendbufs", sendbufs), ("recvbufs", recvbufs),
                        ("sources", sources), ("dests", dests)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{fn}: {name} must be a list or tuple, got "
                            f"{type(value).__name__}: {value!r}")
        seqs[name] = tuple(value)
    n = len(seqs["sendbufs"])
    lengths = {name: len(s) for name, s in seqs.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{fn}: sendbufs, recvbufs, sources and dests must "
                         f"have the same length, got {lengths}")
    if n > MAX_EXCHANGE_PAIRS:
        raise ValueError(f"{fn}: at most {MAX_EXCHANGE_PAIRS} pairs in one "
                         f"call, got {n}")
    xs = [v.array(x, fn, f"sendbufs[{i}]")
          for i, x in enumerate(seqs["sendbufs"])]
    ts = [v.array(t, fn, f"recvbufs[{i}]")
          for i, t in enumerate(seqs["recvbufs"])]
    srcs = tuple(v.rank_arg(s, fn, f"sources[{i}]", info,
                            allow=(MPI.PROC_NULL,))
                 for i, s in enumerate(seqs["sources"]))
    dsts = tuple(v.rank_arg(d, fn, f"dests[{i}]", info, allow=(MPI.PROC_NULL,))
                 for i, d in enumerate(seqs["dests"]))
    tag = v.tag_arg(tag, fn, "tag", info)
    if n:
        v.tag_arg(tag + n - 1, fn, f"tag + {n - 1} (the last pair's tag)", info)
    _join(tok)
    if n == 0:
        return ()
    return tuple(_ops.neighbor_exchange_p.bind(
        *xs, comm=info, sources=srcs, dests=dsts, tag=tag,
        recv_avals=tuple((tuple(t.shape), np.dtype(t.dtype)) for t in ts)))


@_pytree.tree_op(rows=True)
def reduce_scatter(x, op, *, counts=None, comm=None, token=None):
    """Reduce ``x`` over all ranks with ``op`` and scatter the result: rank
    r gets the reduction of every rank's block r.

    MPI_Reduce_scatter_block (without ``counts``) or MPI_Reduce_scatter
    (with ``counts``). The building block of sharded optimisers: a
    gradient summed over ranks, each rank keeping its own slice.

    Args:
        x: without ``counts``, an array of shape ``(size, *s)`` whose row r
            is the block for rank r; with ``counts``, an array of
            ``sum(counts)`` rows along axis 0, block r being the
            ``counts[r]`` rows after those of ranks 0..r-1. The same shape
            and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``.
        counts: optional static sequence of ints, one per rank, equal on
            every rank (zeros allowed): how many rows of the result each
            rank gets.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        Without ``counts``, an array of shape ``s`` (``x.shape[1:]``):
        ``op`` over every rank's ``x[rank]``. With ``counts``, an array of
        shape ``(counts[rank], *x.shape[1:])``: ``op`` over every rank's
        block ``rank``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``counts`` is not a static sequence of ints,
            ``op`` is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: ``x.shape[0]`` is not the communicator's size (no
            ``counts``) or ``sum(counts)``; ``counts`` has not one entry per
            rank or a negative entry; an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and at the calls the default sparse check
            compares), ranks that disagree on the call, ``counts`` included
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 2``::

            x = jnp.array([[1., 2.], [3., 4.]]) * (rank + 1)
            y = mpx.reduce_scatter(x, MPI.SUM)  # rank 0: [3. 6.], rank 1: [9. 12.]
            z = mpx.reduce_scatter(jnp.arange(3.) * (rank + 1), MPI.SUM,
                                   counts=(1, 2))  # rank 0: [0.], rank 1: [3. 6.]
            y, token = jaxmpi.reduce_scatter(x, MPI.SUM)  # token API
    """
    fn = "reduce_scatter"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    _join(tok)
    return _ops.reduce_scatter_p.bind(x, comm=info, op=opinfo,
                                      counts=counts)[0]


@_pytree.tree_op()
def exscan(x, op, *, comm=None, token=None):
    """Exclusive prefix reduction: rank r gets ``op`` over ranks 0..r-1;
    rank 0 gets the identity of ``op``.

    MPI_Exscan. MPI leaves rank 0's result undefined; jaxmpi gives it the
    identity: zeros for ``MPI.SUM`` (and ``BOR``, ``BXOR``, ``LOR``,
    ``LXOR``), ones for ``MPI.PROD`` (and ``LAND``), all bits set for
    ``BAND``, the dtype's lowest value for ``MPI.MAX`` and its highest for
    ``MPI.MIN`` (``-inf``/``+inf`` for floating types, ``iinfo`` bounds for
    integers). Typical use: the offset of each rank's variable-size data,
    ``exscan(n_local, MPI.SUM)``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: a predefined mpi4py reduction op (``MPI.SUM``, ``MPI.PROD``,
            ``MPI.MAX``, ``MPI.MIN``, the logical and bitwise ops for
            integers and bool); not a user-defined ``MPI.Op``, whose
            identity jaxmpi cannot know.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of ``x``'s shape and dtype: ``op`` over the ``x`` of ranks
        0 to this rank - 1 (on rank 0, the identity of ``op``).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype or is
            user-defined, ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs
            one JAX device per process).
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a call that did not complete
            (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 4``::

            y = mpx.exscan(jnp.ones(2), MPI.SUM)   # rank r: [r, r]
            y, token = jaxmpi.exscan(x, MPI.SUM)   # token API
    """
    info, x, opinfo = _reduction("exscan", x, op, comm, token)
    v.predefined_op(opinfo, "exscan")
    return _ops.exscan_p.bind(x, comm=info, op=opinfo)[0]


def has_cuda_support() -> bool:
    """Whether jaxmpi's C core was built with its CUDA path.

    GPU arrays work when this is True and a CUDA driver and JAX's CUDA
    plugin are present (see docs/gpu.md). Like mpi4jax's, this says nothing
    of whether a GPU is visible: ``python -m jaxmpi`` shows the driver.

    Returns:
        bool: True if the CUDA handlers are built in (they always are: the
        core needs no CUDA toolkit to build them).

    Example:
        ::

            jaxmpi.has_cuda_support()   # True: every build has the CUDA path
    """
    return _core.get().cuda_built


# ---- variable counts along axis 0 -------------------------------------------
# Counts are static sequences of ints, one per rank, the same on every rank:
# rows along axis 0 (a row is x[i], of shape x.shape[1:]). Zeros allowed.

@_pytree.tree_op(rows=True)
def allgatherv(x, counts, *, comm=None, token=None):
    """Gather a different number of rows from every rank, on every rank.

    MPI_Allgatherv. Rank r contributes ``counts[r]`` rows; every rank gets
    all of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank.
        counts: the number of rows of every rank (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of shape ``(sum(counts), *s)``: rank 0's rows, then rank
        1's, and so on, on every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, an array's rows disagree with its count (the error
            names the argument, its shape and the count), an array is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            with a watchdog timeout (``jaxmpi.set_timeout``), a call that
            did not complete (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 3``, rank r has r + 1 rows::

            counts = [1, 2, 3]
            x = jnp.full((rank + 1, 2), rank)
            y = mpx.allgatherv(x, counts)    # [[0 0] [1 1] [1 1] [2 2] ...]
            y, token = jaxmpi.allgatherv(x, counts)   # token API
    """
    fn = "allgatherv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts = v.allgatherv_args(x, counts, fn, info)
    _join(tok)
    return _ops.allgatherv_p.bind(x, comm=info, counts=counts)[0]


@_pytree.tree_op(rows=True)
def gatherv(x, counts, root, *, comm=None, token=None):
    """Gather a different number of rows from every rank on the root.

    MPI_Gatherv. Rank r contributes ``counts[r]`` rows; the root gets all
    of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank.
        counts: the number of rows of every rank (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        On ``root``, an array of shape ``(sum(counts), *s)``: rank 0's rows,
        then rank 1's, and so on; on other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, an array's rows disagree with its count (the error
            names the argument, its shape and the count), an array is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            with a watchdog timeout (``jaxmpi.set_timeout``), a call that
            did not complete (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 3``::

            x = jnp.full((rank, 2), rank)            # 0, 1 and 2 rows
            y = mpx.gatherv(x, [0, 1, 2], 0)         # rank 0: [[1 1] [2 2] [2 2]]
            y, token = jaxmpi.gatherv(x, [0, 1, 2], 0)   # token API
    """
    fn = "gatherv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.gatherv_args(x, counts, root, fn, info)
    _join(tok)
    (y,) = _ops.gatherv_p.bind(x, comm=info, counts=counts, root=root)
    return y if info.rank == root else _passed_through(x, y)


@_pytree.tree_op(rows=True)
def scatterv(x, counts, root, *, comm=None, token=None):
    """Scatter the root's rows: rank r gets ``counts[r]`` of them.

    MPI_Scatterv. Rank 0 gets the first ``counts[0]`` rows of the root's
    ``x``, rank 1 the next ``counts[1]``, and so on.

    Args:
        x: on ``root``, an array of shape ``(sum(counts), *s)``; on other
            ranks, a template of this rank's result, shape
            ``(counts[rank], *s)`` and the same dtype (its data is not
            used), as ``scatter`` takes.
        counts: the number of rows each rank gets (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        On every rank r, an array of shape ``(counts[r], *s)``: rows
        ``sum(counts[:r])`` to ``sum(counts[:r + 1])`` of the root's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, an array's rows disagree with its count (the error
            names the argument, its shape and the count), an array is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            with a watchdog timeout (``jaxmpi.set_timeout``), a call that
            did not complete (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 3``::

            counts = [2, 0, 1]
            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else \\
                jnp.zeros((counts[rank], 2))
            y = mpx.scatterv(x, counts, 0)   # [[0 1] [2 3]], [], [[4 5]]
            y, token = jaxmpi.scatterv(x, counts, 0)   # token API
    """
    fn = "scatterv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.scatterv_args(x, counts, root, fn, info)
    _join(tok)
    return _ops.scatterv_p.bind(x, comm=info, counts=counts, root=root)[0]


@_pytree.tree_op(rows=True)
def alltoallv(x, sendcounts, recvcounts, *, comm=None, token=None):
    """Every rank sends a different number of rows to every rank.

    MPI_Alltoallv. Rank i's ``x`` is ``size`` blocks of rows in rank
    order: block j, ``sendcounts[j]`` rows, goes to rank j. The result is
    the blocks received, in rank order: block i, ``recvcounts[i]`` rows,
    comes from rank i. Rank i's ``sendcounts[j]`` must equal rank j's
    ``recvcounts[i]``. At up to 2 ranks, equal ``sendcounts`` and
    ``recvcounts`` exchange in place (the result shares ``x``'s buffer: no
    copy in loops).

    Args:
        x: an array of shape ``(sum(sendcounts), *s)``, the same ``s`` and
            dtype on every rank.
        sendcounts: the rows this rank sends to each rank (a list or tuple
            of ``size`` static ints >= 0).
        recvcounts: the rows this rank receives from each rank (a list or
            tuple of ``size`` static ints >= 0).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        An array of shape ``(sum(recvcounts), *s)``: the rows from rank 0,
        then those from rank 1, and so on.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, an array's rows disagree with its count (the error
            names the argument, its shape and the count), an array is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        jax.errors.JaxRuntimeError: when the call runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            with a watchdog timeout (``jaxmpi.set_timeout``), a call that
            did not complete (``DEADLINE_EXCEEDED``).

    Example:
        ``mpirun -n 2``: rank i sends i + j + 1 rows to rank j::

            send = [rank + j + 1 for j in range(2)]
            recv = [i + rank + 1 for i in range(2)]
            y = mpx.alltoallv(jnp.ones((sum(send), 3)), send, recv)
            y, token = jaxmpi.alltoallv(x, send, recv)   # token API
    """
    fn = "alltoallv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              info)
    _join(tok)
    return _ops.alltoallv_p.bind(x, comm=info, sendcounts=sendcounts,
                                 recvcounts=recvcounts)[0]


# The public blocking operations, written once (a literal list, which the
# documentation's reader can follow): jaxmpi (token API) and jaxmpi.notoken
# are made from it (adding an operation: docs/design.md).
__all__ = ["allgather", "allreduce", "alltoall", "barrier", "bcast",
           "gather", "neighbor_exchange", "recv", "reduce", "scan",
           "scatter", "send", "sendrecv", "has_cuda_support",
           "halo_exchange", "neighbor_alltoallv", "allgatherv", "gatherv",
           "scatterv", "alltoallv", "reduce_scatter", "exscan"]
OPERATIONS = tuple(n for n in __all__ if n != "has_cuda_support")

# Operations on process topologies (Cartesian, graph), written in
# _topology.py on top of the primitives, beside their non-blocking forms.
from ._topology import halo_exchange, neighbor_alltoallv  # noqa: E402

