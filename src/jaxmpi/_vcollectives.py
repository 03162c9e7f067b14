"""The variable-count collectives, each blocking operation beside its
non-blocking form: allgatherv, gatherv, scatterv, alltoallv. Counts are
static sequences of ints, one per rank, the same on every rank: rows along
axis 0 (a row is x[i], of shape x.shape[1:]). Zeros allowed. Each pair
parses its arguments once (``_<op>``, with _validate's check of its
counts), and the two forms differ only in what they make of the parsed
call."""

from __future__ import annotations

from . import _dispatch
from . import _validate as v
from ._parse import Args
from ._prims_collectives import (allgatherv_p, alltoallv_p, gatherv_p,
                                 scatterv_p)
from ._requests import Request


def _allgatherv(fn, x, counts, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, counts=v.allgatherv_args(x, counts, fn, a.info))


@_dispatch.blocking(rows=True, region=True)
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
    return _allgatherv("allgatherv", x, counts, comm,
                       token).bind(allgatherv_p)[0]


@_dispatch.start()
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
    return _allgatherv("iallgatherv", x, counts, comm, token).start()


def _rooted(fn, x, counts, root, comm, token, check):
    """gatherv's and scatterv's arguments (`check`: their _validate
    function)."""
    a = Args(fn, comm, token)
    x = a.array(x)
    counts, root = check(x, counts, root, fn, a.info)
    return a.call(x, counts=counts, root=root)


@_dispatch.blocking(rows=True)
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
    call = _rooted("gatherv", x, counts, root, comm, token, v.gatherv_args)
    return call.rooted(x, call.bind(gatherv_p)[0], root_gets=True)


@_dispatch.start()
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
    return _rooted("igatherv", x, counts, root, comm, token,
                   v.gatherv_args).start()


@_dispatch.blocking(rows=True)
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
    return _rooted("scatterv", x, counts, root, comm, token,
                   v.scatterv_args).bind(scatterv_p)[0]


@_dispatch.start()
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
    return _rooted("iscatterv", x, counts, root, comm, token,
                   v.scatterv_args).start()


def _alltoallv(fn, x, sendcounts, recvcounts, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              a.info)
    return a.call(x, sendcounts=sendcounts, recvcounts=recvcounts)


@_dispatch.blocking(rows=True, region=True)
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
    return _alltoallv("alltoallv", x, sendcounts, recvcounts, comm,
                      token).bind(alltoallv_p)[0]


@_dispatch.start()
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
    return _alltoallv("ialltoallv", x, sendcounts, recvcounts, comm,
                      token).start()
