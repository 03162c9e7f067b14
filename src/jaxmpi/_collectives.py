"""The collectives that move data, each blocking operation beside its
non-blocking form: bcast, gather, scatter, allgather, alltoall, barrier.
The blocking ones return bare results (the convention of
``jaxmpi.notoken``); ``jaxmpi`` wraps them to return ``(result, token)``.
Each pair parses its arguments once (``_<op>``), and the two forms differ
only in what they make of the parsed call: the blocking op binds its
primitive, the non-blocking one starts its request."""

from __future__ import annotations

from . import _dispatch, _eager, _pytree
from . import _validate as v
from ._parse import Args
from ._prims_collectives import (allgather_p, alltoall_p, barrier_p, bcast_p,
                                 gather_p, scatter_p)
from ._requests import Request


def _rooted(fn, x, root, comm, token):
    """bcast's and gather's arguments (and their starts')."""
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, root=a.rank(root))


@_dispatch.blocking()
def bcast(x, root, *, comm=None, token=None):
    """Broadcast the root's ``x`` to every rank.

    MPI_Bcast.

    Args:
        x: on ``root``, the array to send; elsewhere a template of its shape.
        root: the rank whose ``x`` is sent (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        The root's ``x``, on every rank (on the root, ``x`` itself).

    Raises:
        ValueError: ``root`` is not a rank of ``comm``.

    Example:
        Give every rank rank 0's parameters:

            params = mpx.bcast(params, 0)
    """
    call = _rooted("bcast", x, root, comm, token)
    y = call.direct(_eager.bcast, call.params["root"], comm)
    return call.rooted(x, call.bind(bcast_p)[0], root_gets=False) \
        if y is None else y


@_dispatch.start()
def ibcast(x, root, *, comm=None, token=None) -> Request:
    """Start broadcasting the root's ``x`` to every rank.

    MPI_Ibcast, the non-blocking form of ``bcast``; it matches only ``ibcast``
    on the other ranks.

    Args:
        x: on ``root``, the array to send; elsewhere a template of its shape.
        root: the rank whose ``x`` is sent (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the root's ``x``, on every rank.

    Raises:
        ValueError: ``root`` is not a rank of ``comm``.

    Example:
        Give every rank rank 0's parameters while computing:

            req = mpx.ibcast(params, 0)
            z = compute(w)
            params = mpx.wait(req)
    """
    return _rooted("ibcast", x, root, comm, token).start()


@_dispatch.blocking()
def gather(x, root, *, comm=None, token=None):
    """Gather every rank's ``x`` on the root, stacked along a new axis 0.

    MPI_Gather.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        On ``root``, shape ``(size, *x.shape)``, row r rank r's ``x``;
        elsewhere ``x`` unchanged.

    Raises:
        ValueError: ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            y = mpx.gather(jnp.full(2, rank), 0)  # rank 0: [[0 0] [1 1] [2 2]]
    """
    call = _rooted("gather", x, root, comm, token)
    return call.rooted(x, call.bind(gather_p)[0], root_gets=True)


@_dispatch.start()
def igather(x, root, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on the root, along a new axis 0.

    MPI_Igather, the non-blocking form of ``gather``; it matches only
    ``igather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns, on ``root``, every rank's ``x``
        stacked (``(size, *x.shape)``), elsewhere ``x`` unchanged.

    Raises:
        ValueError: ``root`` is not a rank of ``comm``.

    Example:
        ``mpirun -n 3``:

            y = mpx.wait(mpx.igather(jnp.full(2, rank), 0))
            # rank 0: [[0 0] [1 1] [2 2]]
    """
    return _rooted("igather", x, root, comm, token).start()


def _scatter(fn, x, root, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    root = a.rank(root)
    if a.info.rank == root:
        v.leading_dim(x, fn, "x (on the root)", a.info.size)
    return a.call(x, root=root)


@_dispatch.blocking(rows=_pytree.rows_on_root)
def scatter(x, root, *, comm=None, token=None):
    """Scatter the root's ``x[r]`` to rank r.

    MPI_Scatter.

    Args:
        x: on ``root``, shape ``(size, ...)``; elsewhere a template of a row.
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        The root's ``x[r]`` on rank r (shape ``x.shape[1:]`` of the root's).

    Raises:
        ValueError: ``root`` is not a rank of ``comm``, or the root's ``x`` has
            not ``size`` rows.

    Example:
        ``mpirun -n 3``:

            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else jnp.zeros(2)
            y = mpx.scatter(x, 0)           # rank r: [2r, 2r + 1]
    """
    return _scatter("scatter", x, root, comm, token).bind(scatter_p)[0]


@_dispatch.start()
def iscatter(x, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's ``x[r]`` to rank r.

    MPI_Iscatter, the non-blocking form of ``scatter``; it matches only
    ``iscatter`` on the other ranks.

    Args:
        x: on ``root``, shape ``(size, ...)``; elsewhere a template of a row.
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the root's ``x[r]`` on rank r.

    Raises:
        ValueError: ``root`` is not a rank of ``comm``, or the root's ``x`` has
            not ``size`` rows.

    Example:
        ``mpirun -n 3``:

            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else jnp.zeros(2)
            y = mpx.wait(mpx.iscatter(x, 0))  # rank r: [2r, 2r + 1]
    """
    return _scatter("iscatter", x, root, comm, token).start()


def _allgather(fn, x, comm, token, rows=False):
    """allgather's arguments, and alltoall's (`rows`: x has one row per
    rank)."""
    a = Args(fn, comm, token)
    x = a.array(x)
    if rows:
        v.leading_dim(x, fn, "x", a.info.size)
    return a.call(x)


@_dispatch.blocking(region=True)
def allgather(x, *, comm=None, token=None):
    """Gather every rank's ``x`` on every rank, stacked along a new axis 0.

    MPI_Allgather.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        An array of shape ``(size, *x.shape)`` whose row r is rank r's ``x``.

    Example:
        ``mpirun -n 3``:

            y = mpx.allgather(jnp.full(2, rank))   # [[0 0] [1 1] [2 2]]
    """
    call = _allgather("allgather", x, comm, token)
    y = call.direct(lambda x, _, c: _eager.allgather(x, c), None, comm)
    return call.bind(allgather_p)[0] if y is None else y


@_dispatch.start()
def iallgather(x, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on every rank.

    MPI_Iallgather, the non-blocking form of ``allgather``; it matches only
    ``iallgather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns every rank's ``x`` stacked along
        a new axis 0, on every rank.

    Example:
        ``mpirun -n 3``:

            req = mpx.iallgather(jnp.full(2, rank))
            y = mpx.wait(req)               # [[0 0] [1 1] [2 2]]
    """
    return _allgather("iallgather", x, comm, token).start()


@_dispatch.blocking(rows=True, region=True)
def alltoall(x, *, comm=None, token=None):
    """Exchange ``x``'s rows with every rank: row j goes to rank j.

    MPI_Alltoall: rank i sends ``x[j]`` to rank j and receives rank j's
    ``x[i]`` into row j of its result.

    Args:
        x: an array of shape ``(size, ...)``, the same on every rank.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        An array of ``x``'s shape and dtype whose row j is rank j's ``x[i]``.

    Raises:
        ValueError: ``x.shape[0]`` is not the communicator's size.

    Example:
        ``mpirun -n 2`` (a transpose across ranks):

            x = jnp.array([10 * rank, 10 * rank + 1])
            y = mpx.alltoall(x)             # rank 0: [0 10], rank 1: [1 11]
    """
    call = _allgather("alltoall", x, comm, token, rows=True)
    y = call.direct(lambda x, _, c: _eager.alltoall(x, c), None, comm)
    return call.bind(alltoall_p)[0] if y is None else y


@_dispatch.start()
def ialltoall(x, *, comm=None, token=None) -> Request:
    """Start exchanging ``x``'s rows with every rank: row j to rank j.

    MPI_Ialltoall, the non-blocking form of ``alltoall``; it matches only
    ``ialltoall`` on the other ranks: rank i sends ``x[j]`` to rank j and
    receives rank j's ``x[i]`` into row j of its result.

    Args:
        x: an array of shape ``(size, ...)``, the same on every rank.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns an array of ``x``'s shape whose
        row j is rank j's ``x[i]``.

    Raises:
        ValueError: ``x.shape[0]`` is not the communicator's size.

    Example:
        ``mpirun -n 2`` (a transpose across ranks):

            x = jnp.array([10 * rank, 10 * rank + 1])
            y = mpx.wait(mpx.ialltoall(x))  # rank 0: [0 10], rank 1: [1 11]
    """
    return _allgather("ialltoall", x, comm, token, rows=True).start()


def barrier(*, comm=None, token=None):
    """Return once every rank of ``comm`` has reached the barrier.

    MPI_Barrier.

    Args:
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        None.

    Example:
        Wait for every rank:

            mpx.barrier()
    """
    Args("barrier", comm, token).call().bind(barrier_p)


def ibarrier(*, comm=None, token=None) -> Request:
    """Start a barrier; its wait returns once every rank has started it.

    MPI_Ibarrier, the non-blocking form of ``barrier``; it matches only
    ``ibarrier`` on the other ranks.

    Args:
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns None once every rank started it.

    Example:
        Let the other ranks catch up while computing:

            req = mpx.ibarrier()
            z = compute(w)
            mpx.wait(req)                   # returns None
    """
    return Args("ibarrier", comm, token).call().start()
