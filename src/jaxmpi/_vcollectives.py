"""The variable-count collectives and reduce_scatter, each blocking
operation beside its non-blocking form: allgatherv, gatherv, scatterv,
alltoallv, reduce_scatter. Counts are static sequences of ints, one per
rank, the same on every rank: rows along axis 0 (a row is x[i], of shape
x.shape[1:]). Zeros allowed."""

from __future__ import annotations

from . import _core, _pytree
from . import _validate as v
from ._prims_vcollectives import (allgatherv_p, alltoallv_p, gatherv_p,
                                  reduce_scatter_p, scatterv_p)
from ._requests import Request, compose_one
from ._steps import begin, join, passed_through, reduction_args


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
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts = v.allgatherv_args(x, counts, fn, info)
    join(tok)
    return allgatherv_p.bind(x, comm=info, counts=counts)[0]


def iallgatherv(x, counts, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from every rank, on
    every rank.

    MPI_Iallgatherv. The non-blocking form of ``allgatherv``; it matches
    only ``iallgatherv`` on the other ranks. Rank r contributes
    ``counts[r]`` rows; every rank gets all of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank. The request sends from its
            own buffer (XLA copies ``x`` first where it is still used after
            the start).
        counts: the number of rows of every rank (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iallgatherv in flight and its
        buffers; ``wait`` on it returns an array of shape
        ``(sum(counts), *s)``: rank 0's rows, then rank 1's, and so on, on
        every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the error
            names the argument, its shape and the count), ``x`` is a scalar,
            or an array lives on more than one device.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``), on every rank
            alike (``UNIMPLEMENTED``, see docs/nonblocking.md). Errors of
            the communication itself are raised by ``wait``.

    Example:
        ``mpirun -n 3``, rank r has r + 1 rows::

            counts = [1, 2, 3]
            x = jnp.full((rank + 1, 2), rank)
            req = mpx.iallgatherv(x, counts)
            z = compute(w)                   # while the rows travel
            y = mpx.wait(req)                # [[0 0] [1 1] [1 1] [2 2] ...]
            req, token = jaxmpi.iallgatherv(x, counts)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "iallgatherv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts = v.allgatherv_args(x, counts, fn, info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, counts=counts))


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
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.gatherv_args(x, counts, root, fn, info)
    join(tok)
    (y,) = gatherv_p.bind(x, comm=info, counts=counts, root=root)
    return y if info.rank == root else passed_through(x, y)


def igatherv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from every rank on the
    root.

    MPI_Igatherv. The non-blocking form of ``gatherv``; it matches only
    ``igatherv`` on the other ranks. Rank r contributes ``counts[r]``
    rows; the root gets all of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank. The request sends from its
            own buffer (XLA copies ``x`` first where it is still used after
            the start).
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
        A ``Request`` holding the MPI_Igatherv in flight and its buffers;
        ``wait`` on it returns, on ``root``, an array of shape
        ``(sum(counts), *s)``: rank 0's rows, then rank 1's, and so on; on
        other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm`` is
            not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the error
            names the argument, its shape and the count), ``x`` is a scalar,
            a root is out of range, or an array lives on more than one
            device.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            of the root's above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``),
            on every rank alike (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            x = jnp.full((rank, 2), rank)            # 0, 1 and 2 rows
            req = mpx.igatherv(x, [0, 1, 2], 0)
            z = compute(w)
            y = mpx.wait(req)        # rank 0: [[1 1] [2 2] [2 2]]; else x
            req, token = jaxmpi.igatherv(x, [0, 1, 2], 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "igatherv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.gatherv_args(x, counts, root, fn, info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, counts=counts, root=root))


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
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.scatterv_args(x, counts, root, fn, info)
    join(tok)
    return scatterv_p.bind(x, comm=info, counts=counts, root=root)[0]


def iscatterv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's rows: rank r gets ``counts[r]`` of them.

    MPI_Iscatterv. The non-blocking form of ``scatterv``; it matches only
    ``iscatterv`` on the other ranks. Rank 0 gets the first ``counts[0]``
    rows of the root's ``x``, rank 1 the next ``counts[1]``, and so on.

    Args:
        x: on ``root``, an array of shape ``(sum(counts), *s)``; on other
            ranks, a template of this rank's result, shape
            ``(counts[rank], *s)`` and the same dtype (its data is not
            used), as ``scatterv`` takes.
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
        A ``Request`` holding the MPI_Iscatterv in flight and its buffers;
        ``wait`` on it returns, on every rank r, an array of shape
        ``(counts[r], *s)``: rows ``sum(counts[:r])`` to
        ``sum(counts[:r + 1])`` of the root's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm`` is
            not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the root's
            with ``sum(counts)``, a template's with this rank's count; the
            error names the argument, its shape and the count), ``x`` is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            of the root's above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``),
            on every rank alike (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            counts = [2, 0, 1]
            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else \\
                jnp.zeros((counts[rank], 2))
            req = mpx.iscatterv(x, counts, 0)
            z = compute(w)
            y = mpx.wait(req)                # [[0 1] [2 3]], [], [[4 5]]
            req, token = jaxmpi.iscatterv(x, counts, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "iscatterv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.scatterv_args(x, counts, root, fn, info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, counts=counts, root=root))


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
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              info)
    join(tok)
    return alltoallv_p.bind(x, comm=info, sendcounts=sendcounts,
                            recvcounts=recvcounts)[0]


def ialltoallv(x, sendcounts, recvcounts, *, comm=None,
               token=None) -> Request:
    """Start an exchange where every rank sends a different number of rows
    to every rank.

    MPI_Ialltoallv. The non-blocking form of ``alltoallv``; it matches only
    ``ialltoallv`` on the other ranks. Rank i's ``x`` is ``size`` blocks of
    rows in rank order: block j, ``sendcounts[j]`` rows, goes to rank j.
    The result is the blocks received, in rank order: block i,
    ``recvcounts[i]`` rows, comes from rank i. Rank i's ``sendcounts[j]``
    must equal rank j's ``recvcounts[i]``. Always out of place (the result
    is a buffer of its own, also where ``alltoallv`` would run in place).

    Args:
        x: an array of shape ``(sum(sendcounts), *s)``, the same ``s`` and
            dtype on every rank. The request sends from its own buffer (XLA
            copies ``x`` first where it is still used after the start).
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
        A ``Request`` holding the MPI_Ialltoallv in flight and its buffers;
        ``wait`` on it returns an array of shape ``(sum(recvcounts), *s)``:
        the rows from rank 0, then those from rank 1, and so on.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with ``sum(sendcounts)`` (the
            error names the argument, its shape and the counts), ``x`` is a
            scalar, or an array lives on more than one device.
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose dtype or row shape disagree, a rank whose
            ``recvcounts[i]`` is not rank i's ``sendcounts[rank]``, or
            ranks that call another operation (the blocking form
            included) (``FAILED_PRECONDITION``, on every rank, before the
            MPI call); 4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); this rank's counts or displacements
            above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``) even in rows
            (each rank knows only its own counts: raised on the ranks whose
            counts are that large) (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2``: rank i sends i + j + 1 rows to rank j::

            send = [rank + j + 1 for j in range(2)]
            recv = [i + rank + 1 for i in range(2)]
            req = mpx.ialltoallv(jnp.ones((sum(send), 3)), send, recv)
            z = compute(w)
            y = mpx.wait(req)                    # sum(recv) rows
            req, token = jaxmpi.ialltoallv(x, send, recv)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "ialltoallv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, sendcounts=sendcounts,
                                      recvcounts=recvcounts))


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
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    join(tok)
    return reduce_scatter_p.bind(x, comm=info, op=opinfo,
                                 counts=counts)[0]


def ireduce_scatter(x, op, *, counts=None, comm=None, token=None) -> Request:
    """Start reducing ``x`` over all ranks with ``op`` and scattering the
    result: rank r gets the reduction of every rank's block r.

    MPI_Ireduce_scatter_block (without ``counts``) or MPI_Ireduce_scatter
    (with ``counts``). The non-blocking form of ``reduce_scatter``; it
    matches only ``ireduce_scatter`` (of the same form) on the other ranks.

    Args:
        x: without ``counts``, an array of shape ``(size, *s)`` whose row r
            is the block for rank r; with ``counts``, an array of
            ``sum(counts)`` rows along axis 0, block r being the
            ``counts[r]`` rows after those of ranks 0..r-1. The same shape
            and dtype on every rank. The request sends from its own buffer
            (XLA copies ``x`` first where it is still used after the
            start). At most ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``)
            elements per block.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only (the blocking
            ``reduce_scatter`` also has ``PROD``, ``MAX`` and ``MIN``).
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
        A ``Request`` holding the MPI_Ireduce_scatter_block (or
        MPI_Ireduce_scatter) in flight and its buffers; ``wait`` on it
        returns, without ``counts``, an array of shape ``x.shape[1:]``:
        ``op`` over every rank's ``x[rank]``; with ``counts``, an array of
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
        NotImplementedError: the call is compiled for a GPU (non-blocking
            operations run on CPU only so far: use the blocking
            operation).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call, ``counts``
            included (``FAILED_PRECONDITION``); 4096 requests of this
            process already in flight (``RESOURCE_EXHAUSTED``); a block
            the non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2``, a gradient summed over ranks, each keeping its
        slice::

            x = jnp.array([[1., 2.], [3., 4.]]) * (rank + 1)
            req = mpx.ireduce_scatter(x, MPI.SUM)
            z = compute(w)
            y = mpx.wait(req)                # rank 0: [3. 6.], rank 1: [9. 12.]
            y = mpx.wait(mpx.ireduce_scatter(jnp.arange(3.) * (rank + 1),
                                             MPI.SUM, counts=(1, 2)))
            # rank 0: [0.], rank 1: [3. 6.]
            req, token = jaxmpi.ireduce_scatter(x, MPI.SUM)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "ireduce_scatter"
    info, tok, x, opinfo = reduction_args(fn, x, op, comm, token)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, op=opinfo, counts=counts))
