"""The variable-count collectives and reduce_scatter, each blocking
operation beside its non-blocking form: allgatherv, gatherv, scatterv,
alltoallv, reduce_scatter. Counts are static sequences of ints, one per
rank, the same on every rank: rows along axis 0 (a row is x[i], of shape
x.shape[1:]). Zeros allowed."""

from __future__ import annotations

from . import _core, _pytree
from . import _sharded_requests
from . import _validate as v
from ._prims_vcollectives import (allgatherv_p, alltoallv_p, gatherv_p,
                                  reduce_scatter_p, scatterv_p)
from ._requests import Request, compose_one
from ._steps import begin, join, passed_through, reduction_args


@_pytree.tree_op(rows=True)
def allgatherv(x, counts, *, comm=None, token=None):
    """Gather a different number of rows from every rank, on every rank.

    MPI_Allgatherv. Rank r contributes ``counts[r]`` rows; every rank gets all
    of them in rank order.

    Args:
        x: this rank's rows, ``(counts[rank], *s)``; ``s`` the same on all.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        An array of shape ``(sum(counts), *s)``: rank 0's rows, then rank
        1's...

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it.

    Example:
        ``mpirun -n 3``, rank r has r + 1 rows:

            x = jnp.full((rank + 1, 2), rank)
            y = mpx.allgatherv(x, [1, 2, 3])   # [[0 0] [1 1] [1 1] [2 2] ...]
    """
    fn = "allgatherv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts = v.allgatherv_args(x, counts, fn, info)
    join(tok)
    return allgatherv_p.bind(x, comm=info, counts=counts)[0]


@_sharded_requests.start()
def iallgatherv(x, counts, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from each rank, everywhere.

    MPI_Iallgatherv, the non-blocking form of ``allgatherv``; it matches only
    ``iallgatherv`` on the other ranks.

    Args:
        x: this rank's rows, ``(counts[rank], *s)``; ``s`` the same on all.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns every rank's rows in rank order,
        shape ``(sum(counts), *s)``.

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it.

    Example:
        ``mpirun -n 3``, rank r has r + 1 rows:

            req = mpx.iallgatherv(jnp.full((rank + 1, 2), rank), [1, 2, 3])
            z = compute(w)                  # while the rows travel
            y = mpx.wait(req)               # [[0 0] [1 1] [1 1] [2 2] ...]
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

    MPI_Gatherv. Rank r contributes ``counts[r]`` rows; the root gets all of
    them in rank order.

    Args:
        x: this rank's rows, ``(counts[rank], *s)``; ``s`` the same on all.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        On ``root``, every rank's rows in rank order (``(sum(counts), *s)``);
        elsewhere ``x`` unchanged.

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it, or ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            x = jnp.full((rank, 2), rank)             # 0, 1 and 2 rows
            y = mpx.gatherv(x, [0, 1, 2], 0)  # rank 0: [[1 1] [2 2] [2 2]]
    """
    fn = "gatherv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.gatherv_args(x, counts, root, fn, info)
    join(tok)
    (y,) = gatherv_p.bind(x, comm=info, counts=counts, root=root)
    return y if info.rank == root else passed_through(x, y)


@_sharded_requests.start()
def igatherv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from every rank on root.

    MPI_Igatherv, the non-blocking form of ``gatherv``; it matches only
    ``igatherv`` on the other ranks.

    Args:
        x: this rank's rows, ``(counts[rank], *s)``; ``s`` the same on all.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns, on ``root``, every rank's rows
        in rank order, elsewhere ``x`` unchanged.

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it, or ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            req = mpx.igatherv(jnp.full((rank, 2), rank), [0, 1, 2], 0)
            z = compute(w)
            y = mpx.wait(req)               # rank 0: [[1 1] [2 2] [2 2]]
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

    MPI_Scatterv. Rank 0 gets the first ``counts[0]`` rows of the root's ``x``,
    rank 1 the next ``counts[1]``, and so on.

    Args:
        x: on ``root``, ``sum(counts)`` rows; elsewhere a result template.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        On rank r, ``counts[r]`` rows of the root's ``x`` (``(counts[r],
        *s)``).

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it, or ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            counts = [2, 0, 1]
            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else \\
                jnp.zeros((counts[rank], 2))
            y = mpx.scatterv(x, counts, 0)  # [[0 1] [2 3]], [], [[4 5]]
    """
    fn = "scatterv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.scatterv_args(x, counts, root, fn, info)
    join(tok)
    return scatterv_p.bind(x, comm=info, counts=counts, root=root)[0]


@_sharded_requests.start()
def iscatterv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's rows: rank r gets ``counts[r]`` of them.

    MPI_Iscatterv, the non-blocking form of ``scatterv``; it matches only
    ``iscatterv`` on the other ranks.

    Args:
        x: on ``root``, ``sum(counts)`` rows; elsewhere a result template.
        counts: the rows of every rank, ``size`` static ints >= 0 (see above).
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns, on rank r, ``counts[r]`` rows of
        the root's ``x``.

    Raises:
        TypeError: ``counts`` is not a sequence of static ints.
        ValueError: ``counts`` has not one entry >= 0 per rank, or ``x``'s rows
            disagree with it, or ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            counts = [2, 0, 1]
            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else \\
                jnp.zeros((counts[rank], 2))
            req = mpx.iscatterv(x, counts, 0)
            y = mpx.wait(req)               # [[0 1] [2 3]], [], [[4 5]]
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

    MPI_Alltoallv. Rank i's ``x`` is ``size`` blocks of rows in rank order:
    block j, ``sendcounts[j]`` rows, goes to rank j; block i of the result,
    ``recvcounts[i]`` rows, comes from rank i, whose ``sendcounts[i]`` it must
    equal. At up to 2 ranks, equal ``sendcounts`` and ``recvcounts`` exchange
    in place (no copy in loops).

    Args:
        x: an array of shape ``(sum(sendcounts), *s)``, the same ``s`` on all.
        sendcounts: the rows sent to each rank (``size`` static ints >= 0).
        recvcounts: the rows received from each rank (``size`` static ints).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        The blocks received in rank order, shape ``(sum(recvcounts), *s)``.

    Raises:
        TypeError: ``sendcounts`` or ``recvcounts`` is not a sequence of static
            ints.
        ValueError: a count list has not one entry >= 0 per rank, or ``x`` has
            not ``sum(sendcounts)`` rows.

    Example:
        ``mpirun -n 2``: rank i sends i + j + 1 rows to rank j:

            send = [rank + j + 1 for j in range(2)]
            recv = [i + rank + 1 for i in range(2)]
            y = mpx.alltoallv(jnp.ones((sum(send), 3)), send, recv)
    """
    fn = "alltoallv"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              info)
    join(tok)
    return alltoallv_p.bind(x, comm=info, sendcounts=sendcounts,
                            recvcounts=recvcounts)[0]


@_sharded_requests.start()
def ialltoallv(x, sendcounts, recvcounts, *, comm=None,
               token=None) -> Request:
    """Start sending a different number of rows to every rank.

    MPI_Ialltoallv, the non-blocking form of ``alltoallv``; it matches only
    ``ialltoallv`` on the other ranks. Rank i's ``x`` is ``size`` blocks of
    rows in rank order: block j, ``sendcounts[j]`` rows, goes to rank j; block
    i of the result, ``recvcounts[i]`` rows, comes from rank i, whose
    ``sendcounts[i]`` it must equal. Never in place.

    Args:
        x: an array of shape ``(sum(sendcounts), *s)``, the same ``s`` on all.
        sendcounts: the rows sent to each rank (``size`` static ints >= 0).
        recvcounts: the rows received from each rank (``size`` static ints).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the blocks received in rank
        order, shape ``(sum(recvcounts), *s)``.

    Raises:
        TypeError: ``sendcounts`` or ``recvcounts`` is not a sequence of static
            ints.
        ValueError: a count list has not one entry >= 0 per rank, or ``x`` has
            not ``sum(sendcounts)`` rows.

    Example:
        ``mpirun -n 2``: rank i sends i + j + 1 rows to rank j:

            send = [rank + j + 1 for j in range(2)]
            recv = [i + rank + 1 for i in range(2)]
            req = mpx.ialltoallv(jnp.ones((sum(send), 3)), send, recv)
            z = compute(w)
            y = mpx.wait(req)               # sum(recv) rows
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
    """Reduce ``x``'s blocks over all ranks with ``op``; rank r gets block r.

    MPI_Reduce_scatter_block (without ``counts``) or MPI_Reduce_scatter (with
    ``counts``). Without ``counts``, ``x`` has ``size`` rows and block r is row
    r; with ``counts``, ``x`` has ``sum(counts)`` rows and block r is the
    ``counts[r]`` rows after those of ranks 0..r-1. The building block of
    sharded optimisers. Derivatives for ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX``
    and ``MPI.MIN``.

    Args:
        x: the blocks, the same shape and dtype on every rank (see above).
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        counts: None, or the rows of each rank's block (``size`` static ints).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        ``op`` over every rank's block r (rank r): shape ``x.shape[1:]``, or
        ``(counts[r], *x.shape[1:])`` with ``counts``.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype, or
            ``counts`` is not a sequence of static ints.
        ValueError: ``x`` has not ``size`` (or ``sum(counts)``) rows, or
            ``counts`` has not one entry >= 0 per rank.
        NotImplementedError: a derivative with any other ``op``.

    Example:
        ``mpirun -n 2``, a gradient summed over ranks, each keeping its slice:

            x = jnp.array([[1., 2.], [3., 4.]]) * (rank + 1)
            y = mpx.reduce_scatter(x, MPI.SUM)  # rank 0: [3 6], rank 1: [9 12]
    """
    fn = "reduce_scatter"
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    join(tok)
    return reduce_scatter_p.bind(x, comm=info, op=opinfo,
                                 counts=counts)[0]


@_sharded_requests.start()
def ireduce_scatter(x, op, *, counts=None, comm=None, token=None) -> Request:
    """Start reducing ``x``'s blocks over all ranks; rank r gets block r.

    MPI_Ireduce_scatter_block (without ``counts``) or MPI_Ireduce_scatter (with
    ``counts``), the non-blocking form of ``reduce_scatter``; it matches only
    ``ireduce_scatter`` of the same form on the other ranks. Without
    ``counts``, ``x`` has ``size`` rows and block r is row r; with ``counts``,
    ``x`` has ``sum(counts)`` rows and block r is the ``counts[r]`` rows after
    those of ranks 0..r-1. Derivatives for ``MPI.SUM``.

    Args:
        x: the blocks, the same shape and dtype on every rank (see above).
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        counts: None, or the rows of each rank's block (``size`` static ints).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns, on rank r, ``op`` over every
        rank's block r.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype, or
            ``counts`` is not a sequence of static ints.
        ValueError: ``x`` has not ``size`` (or ``sum(counts)``) rows, or
            ``counts`` has not one entry >= 0 per rank.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 2``, a gradient summed over ranks, each keeping its slice:

            x = jnp.array([[1., 2.], [3., 4.]]) * (rank + 1)
            req = mpx.ireduce_scatter(x, MPI.SUM)
            z = compute(w)
            y = mpx.wait(req)               # rank 0: [3. 6.], rank 1: [9. 12.]
    """
    fn = "ireduce_scatter"
    info, tok, x, opinfo = reduction_args(fn, x, op, comm, token)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    join(tok)
    return compose_one(fn, (x,), dict(comm=info, op=opinfo, counts=counts))
