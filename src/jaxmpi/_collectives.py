"""The collectives, each blocking operation beside its non-blocking form:
allreduce, reduce, scan, exscan, bcast, gather, scatter, allgather,
alltoall, barrier. The blocking ones return bare results (the convention
of ``jaxmpi.notoken``); ``jaxmpi`` wraps them to return ``(result,
token)``."""

from __future__ import annotations

from . import _core, _eager, _pytree
from . import _jax_compat as jc
from . import _validate as v
from ._prims_collectives import (allgather_p, allreduce_p, alltoall_p,
                                 barrier_p, bcast_p, exscan_p, gather_p,
                                 reduce_p, scan_p, scatter_p)
from ._requests import Request, compose_one
from ._steps import begin, join, passed_through, reduction_args


def _direct(x, run, arg, comm):
    """The eager direct path (_eager.py): ``run(x, arg, comm)`` outside any
    trace where it applies, else None (the compiled path runs)."""
    if jc.trace_state_clean() and _eager.usable(x):
        return run(x, arg, v.default_comm() if comm is None else comm)
    return None


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
    info, tok, x, opinfo = reduction_args("allreduce", x, op, comm, token)
    join(tok)
    y = _direct(x, _eager.allreduce, opinfo.handle, comm)
    if y is not None:
        return y
    return allreduce_p.bind(x, comm=info, op=opinfo, adjoint=adjoint)[0]


def iallreduce(x, op, *, comm=None, token=None,
               adjoint="replicated") -> Request:
    """Start reducing ``x`` over all ranks with ``op``; every rank gets
    the result.

    MPI_Iallreduce. The non-blocking form of ``allreduce``; it matches only
    ``iallreduce`` on the other ranks (MPI never matches MPI_Iallreduce
    with MPI_Allreduce).

    Args:
        x: the array to reduce (a JAX or NumPy array, or a scalar), the same
            shape and dtype on every rank. Reduced in place in the
            request's buffer (XLA copies ``x`` first where it is still used
            after the start).
        op: an mpi4py reduction op: ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX``,
            ``MPI.MIN``, the logical and bitwise ops for integers and bool,
            or a user-defined ``MPI.Op``. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.
        adjoint: how reverse-mode AD treats the replicated result, as for
            ``allreduce``: ``"replicated"`` (default) counts its cotangent
            once, so the transpose is the identity; ``"sum"`` is the exact
            adjoint (an allreduce of the cotangents, as a backward request).
            See docs/autodiff.md.

    Returns:
        A ``Request`` holding the MPI_Iallreduce in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over every rank's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        ValueError: ``adjoint`` is not ``"replicated"`` or ``"sum"``.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        Overlap a gradient sum with other work, inside ``jax.jit``::

            req = mpx.iallreduce(grads, MPI.SUM)
            loss = more_compute(params)          # while the sum travels
            total = mpx.wait(req)                # the sum over all ranks
            req, token = jaxmpi.iallreduce(grads, MPI.SUM)   # token API
            total, token = jaxmpi.wait(req, token=token)
    """
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"iallreduce: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    info, tok = begin("iallreduce", comm, token)
    x = v.array(x, "iallreduce")
    opinfo = v.reduction_op(op, x.dtype, "iallreduce", _core.get().half_ops)
    join(tok)
    return compose_one("iallreduce", (x,), dict(comm=info, op=opinfo,
                                                adjoint=adjoint))


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
    info, tok, x, opinfo = reduction_args("reduce", x, op, comm, token)
    join(tok)
    root = v.rank_arg(root, "reduce", "root", info)
    (y,) = reduce_p.bind(x, comm=info, op=opinfo, root=root)
    return y if info.rank == root else passed_through(x, y)


def ireduce(x, op, root, *, comm=None, token=None) -> Request:
    """Start reducing ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Ireduce. The non-blocking form of ``reduce``; it matches only
    ``ireduce`` on the other ranks.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ireduce in flight and its buffer;
        ``wait`` on it returns, on ``root``, the reduced array (``x``'s
        shape and dtype) and, on other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``op`` is not
            defined for the dtype, ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``::

            req = mpx.ireduce(jnp.ones(3) * rank, MPI.SUM, 0)
            z = compute(w)
            y = mpx.wait(req)                    # rank 0: [6. 6. 6.]
            req, token = jaxmpi.ireduce(x, MPI.MAX, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = reduction_args("ireduce", x, op, comm, token)
    root = v.rank_arg(root, "ireduce", "root", info)
    join(tok)
    return compose_one("ireduce", (x,), dict(comm=info, op=opinfo, root=root))


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
    info, tok, x, opinfo = reduction_args("scan", x, op, comm, token)
    join(tok)
    y = _direct(x, _eager.scan, opinfo.handle, comm)
    if y is not None:
        return y
    return scan_p.bind(x, comm=info, op=opinfo)[0]


def iscan(x, op, *, comm=None, token=None) -> Request:
    """Start an inclusive prefix reduction: rank r gets ``op`` over
    ranks 0..r.

    MPI_Iscan. The non-blocking form of ``scan``; it matches only ``iscan``
    on the other ranks.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iscan in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over the ``x`` of ranks 0 to this rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``::

            y = mpx.wait(mpx.iscan(jnp.ones(2), MPI.SUM))  # rank r: [r+1, r+1]
            req, token = jaxmpi.iscan(x, MPI.SUM)           # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = reduction_args("iscan", x, op, comm, token)
    join(tok)
    return compose_one("iscan", (x,), dict(comm=info, op=opinfo))


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
    info, tok, x, opinfo = reduction_args("exscan", x, op, comm, token)
    join(tok)
    v.predefined_op(opinfo, "exscan")
    return exscan_p.bind(x, comm=info, op=opinfo)[0]


def iexscan(x, op, *, comm=None, token=None) -> Request:
    """Start an exclusive prefix reduction: rank r gets ``op`` over ranks
    0..r-1; rank 0 gets the identity of ``op``.

    MPI_Iexscan. The non-blocking form of ``exscan``; it matches only
    ``iexscan`` on the other ranks. MPI leaves rank 0's result undefined;
    the wait gives it the identity, as ``exscan`` does: zeros for
    ``MPI.SUM`` (and ``BOR``, ``BXOR``, ``LOR``, ``LXOR``), ones for
    ``MPI.PROD`` (and ``LAND``), all bits set for ``BAND``, the dtype's
    lowest value for ``MPI.MAX`` and its highest for ``MPI.MIN``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
            Reduced in place in the request's buffer (XLA copies ``x``
            first where it is still used after the start).
        op: a predefined mpi4py reduction op (``MPI.SUM``, ``MPI.PROD``,
            ``MPI.MAX``, ``MPI.MIN``, the logical and bitwise ops for
            integers and bool); not a user-defined ``MPI.Op``, whose
            identity jaxmpi cannot know. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iexscan in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over the ``x`` of ranks 0 to this rank - 1 (on rank 0, the identity
        of ``op``).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype or is
            user-defined, ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``, the offset of each rank's rows::

            req = mpx.iexscan(jnp.array(n_local), MPI.SUM)
            z = compute(w)
            offset = mpx.wait(req)                # rank 0: 0
            y = mpx.wait(mpx.iexscan(jnp.ones(2), MPI.SUM))  # rank r: [r, r]
            req, token = jaxmpi.iexscan(x, MPI.SUM)          # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = reduction_args("iexscan", x, op, comm, token)
    v.predefined_op(opinfo, "iexscan")
    join(tok)
    return compose_one("iexscan", (x,), dict(comm=info, op=opinfo))


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
    info, tok = begin("bcast", comm, token)
    x = v.array(x, "bcast")
    root = v.rank_arg(root, "bcast", "root", info)
    join(tok)
    y = _direct(x, _eager.bcast, root, comm)
    if y is not None:
        return y
    (y,) = bcast_p.bind(x, comm=info, root=root)
    return passed_through(x, y) if info.rank == root else y


def ibcast(x, root, *, comm=None, token=None) -> Request:
    """Start broadcasting the root's ``x`` to every rank.

    MPI_Ibcast. The non-blocking form of ``bcast``; it matches only
    ``ibcast`` on the other ranks.

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
        A ``Request`` holding the MPI_Ibcast in flight and its buffer;
        ``wait`` on it returns the root's ``x`` on every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        Give every rank rank 0's parameters while computing::

            req = mpx.ibcast(params, 0)
            z = compute(w)
            params = mpx.wait(req)
            req, token = jaxmpi.ibcast(params, 0)    # token API
            params, token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("ibcast", comm, token)
    x = v.array(x, "ibcast")
    root = v.rank_arg(root, "ibcast", "root", info)
    join(tok)
    return compose_one("ibcast", (x,), dict(comm=info, root=root))


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
    info, tok = begin("gather", comm, token)
    x = v.array(x, "gather")
    root = v.rank_arg(root, "gather", "root", info)
    join(tok)
    (y,) = gather_p.bind(x, comm=info, root=root)
    return y if info.rank == root else passed_through(x, y)


def igather(x, root, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on the root, stacked along a new
    axis 0.

    MPI_Igather. The non-blocking form of ``gather``; it matches only
    ``igather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank (at
            most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``, elements).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Igather in flight and its buffers;
        ``wait`` on it returns, on ``root``, an array of shape
        ``(size, *x.shape)`` whose row ``r`` is rank r's ``x`` and, on
        other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            y = mpx.wait(mpx.igather(jnp.full(2, rank), 0))
            # rank 0: [[0 0] [1 1] [2 2]]
            req, token = jaxmpi.igather(x, 0)        # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("igather", comm, token)
    x = v.array(x, "igather")
    root = v.rank_arg(root, "igather", "root", info)
    join(tok)
    return compose_one("igather", (x,), dict(comm=info, root=root))


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
    info, tok = begin("scatter", comm, token)
    x = v.array(x, "scatter")
    root = v.rank_arg(root, "scatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "scatter", "x (on the root)", info.size)
    join(tok)
    return scatter_p.bind(x, comm=info, root=root)[0]


def iscatter(x, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's ``x[r]`` to rank r.

    MPI_Iscatter. The non-blocking form of ``scatter``; it matches only
    ``iscatter`` on the other ranks.

    Args:
        x: on ``root``, an array of shape ``(size, ...)``; on other ranks, a
            template of the result's shape ``x.shape[1:]`` and dtype (its
            data is not used). At most ``JAXMPI_MAX_COUNT`` (default
            ``INT_MAX``) elements per block.
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iscatter in flight and its buffers;
        ``wait`` on it returns, on every rank r, the root's ``x[r]``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        ValueError: on the root, ``x.shape[0]`` is not the communicator's
            size.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else jnp.zeros(2)
            y = mpx.wait(mpx.iscatter(x, 0))     # rank r: [2r, 2r + 1]
            req, token = jaxmpi.iscatter(x, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("iscatter", comm, token)
    x = v.array(x, "iscatter")
    root = v.rank_arg(root, "iscatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "iscatter", "x (on the root)", info.size)
    join(tok)
    return compose_one("iscatter", (x,), dict(comm=info, root=root))


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
    info, tok = begin("allgather", comm, token)
    x = v.array(x, "allgather")
    join(tok)
    y = _direct(x, lambda x, _, c: _eager.allgather(x, c), None, comm)
    if y is not None:
        return y
    return allgather_p.bind(x, comm=info)[0]


def iallgather(x, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on every rank.

    MPI_Iallgather. The non-blocking form of ``allgather``; it matches only
    ``iallgather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank (at
            most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``, elements).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iallgather in flight and its
        buffers; ``wait`` on it returns an array of shape
        ``(size, *x.shape)`` whose row ``r`` is rank r's ``x``, on every
        rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            y = mpx.wait(mpx.iallgather(jnp.full(2, rank)))
            # [[0 0] [1 1] [2 2]] on every rank
            req, token = jaxmpi.iallgather(x)    # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("iallgather", comm, token)
    x = v.array(x, "iallgather")
    join(tok)
    return compose_one("iallgather", (x,), dict(comm=info))


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
    info, tok = begin("alltoall", comm, token)
    x = v.array(x, "alltoall")
    v.leading_dim(x, "alltoall", "x", info.size)
    join(tok)
    y = _direct(x, lambda x, _, c: _eager.alltoall(x, c), None, comm)
    if y is not None:
        return y
    return alltoall_p.bind(x, comm=info)[0]


def ialltoall(x, *, comm=None, token=None) -> Request:
    """Start an all-to-all exchange: rank i sends ``x[j]`` to rank j and
    receives rank j's ``x[i]`` into ``result[j]``.

    MPI_Ialltoall. The non-blocking form of ``alltoall``; it matches only
    ``ialltoall`` on the other ranks.

    Args:
        x: an array of shape ``(size, ...)``, the same shape and dtype on
            every rank (at most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``,
            elements per block).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ialltoall in flight and its buffers;
        ``wait`` on it returns an array of ``x``'s shape and dtype whose
        row ``j`` is rank j's ``x[i]`` (i: this rank).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        ValueError: ``x.shape[0]`` is not the communicator's size.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2`` (a transpose across ranks)::

            x = jnp.array([10 * rank, 10 * rank + 1])
            y = mpx.wait(mpx.ialltoall(x))   # rank 0: [0 10], rank 1: [1 11]
            req, token = jaxmpi.ialltoall(x) # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("ialltoall", comm, token)
    x = v.array(x, "ialltoall")
    v.leading_dim(x, "ialltoall", "x", info.size)
    join(tok)
    return compose_one("ialltoall", (x,), dict(comm=info))


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
    info, tok = begin("barrier", comm, token)
    join(tok)
    barrier_p.bind(comm=info)


def ibarrier(*, comm=None, token=None) -> Request:
    """Start a barrier: its wait returns once every rank of ``comm`` has
    started it.

    MPI_Ibarrier. The non-blocking form of ``barrier``; it matches only
    ``ibarrier`` on the other ranks.

    Args:
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ibarrier in flight; ``wait`` on it
        returns once every rank of ``comm`` has started the barrier, with
        no result.

    Raises:
        TypeError: ``comm`` is not an intracommunicator, or ``token`` is
            not a token.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank and MPI's message); with
            ``JAXMPI_CHECK``, ranks making different calls
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``).

    Example:
        ::

            req = mpx.ibarrier()
            z = compute(w)
            mpx.wait(req)                        # returns None
            req, token = jaxmpi.ibarrier()       # token API
            token = jaxmpi.wait(req, token=token)
    """
    info, tok = begin("ibarrier", comm, token)
    join(tok)
    return compose_one("ibarrier", (), dict(comm=info))
