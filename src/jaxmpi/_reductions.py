"""The reductions, each blocking operation beside its non-blocking form:
allreduce, reduce, scan, exscan, reduce_scatter. Each takes an ``op``
(an mpi4py reduction op); the blocking ones return bare results (the
convention of ``jaxmpi.notoken``); ``jaxmpi`` wraps them to return
``(result, token)``. Each pair parses its arguments once (``_<op>``), and
the two forms differ only in what they make of the parsed call: the
blocking op binds its primitive, the non-blocking one starts its
request."""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from . import _dispatch, _eager
from . import _validate as v
from ._effect import mesh
from ._parse import Args
from ._prims_collectives import (allreduce_p, exscan_p, reduce_p,
                                 reduce_scatter_p, scan_p)
from ._requests import Request


def _allreduce(fn, x, op, comm, token, adjoint):
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"{fn}: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, op=a.op(op, x), adjoint=adjoint)


@_dispatch.blocking(region=True)
def allreduce(x, op, *, comm=None, token=None, adjoint="replicated",
              axis_name=None):
    """Reduce ``x`` over all ranks with ``op``; every rank gets the result.

    MPI_Allreduce. Derivatives for ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX`` and
    ``MPI.MIN``. ``adjoint`` chooses how reverse mode treats the replicated
    result (docs/autodiff.md): ``"replicated"`` (the default, as in mpi4jax and
    JPI) counts its cotangent once, ``"sum"`` is the exact adjoint. Inside
    ``shard_map``, ``axis_name`` reduces over the shards of those mesh axes
    too: XLA over the local devices, then MPI between the processes
    (docs/devices.md).

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).
        adjoint: ``"replicated"`` (default) or ``"sum"``, as above.
        axis_name: inside ``shard_map``, mesh axes to reduce over as well.

    Returns:
        ``op`` over every rank's ``x``: an array of ``x``'s shape and dtype.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        ValueError: ``adjoint`` is not ``"replicated"`` or ``"sum"``;
            ``axis_name`` names no manual mesh axis of the current
            ``shard_map``, or ``op`` is not SUM, PROD, MAX or MIN with it.
        NotImplementedError: a derivative with any other ``op``;
            ``adjoint="sum"`` with ``axis_name``.

    Example:
        Sum over 4 ranks (``mpirun -n 4``), inside ``jax.jit``:

            f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM))
            f(jnp.ones(3))                  # [4. 4. 4.] on every rank
    """
    call = _allreduce("allreduce", x, op, comm, token, adjoint)
    if axis_name is not None:
        names = _over_shards_args("allreduce", axis_name,
                                  call.params["op"].name, adjoint)
        return _over_shards(call.operands[0], call.params["op"].name, names,
                            lambda y: allreduce_p.bind(y, **call.params)[0])
    y = call.direct(_eager.allreduce, call.params["op"].handle, comm)
    return call.bind(allreduce_p)[0] if y is None else y


# ---- allreduce over every shard: XLA over the local mesh axes, MPI across --
# Small arrays: psum (pmax, pmin; PROD: all_gather and a product), then an
# MPI allreduce of the whole array on every position at once. From
# SCATTER_BYTES a SUM goes by pieces: psum_scatter (each device keeps 1/k of
# the local sum), the MPI allreduce of that piece, all_gather: each device
# moves 1/k of the data through MPI, the k positions' messages at once.
SCATTER_BYTES = 1 << 16


def _over_shards_args(fn: str, axis_name, opname: str, adjoint: str) -> tuple:
    """axis_name as a tuple of manual mesh axes of the current shard_map,
    or a clear error."""
    names = axis_name if isinstance(axis_name, (tuple, list)) else (axis_name,)
    m = mesh()
    manual = set(m.manual) if m is not None else set()
    missing = [a for a in names if a not in manual]
    if not names or missing:
        raise ValueError(
            f"{fn}: axis_name={axis_name!r} must name mesh axes of the "
            f"shard_map this call is traced in (manual axes here: "
            f"{sorted(manual) or 'none: not inside shard_map'})")
    if opname not in ("SUM", "PROD", "MAX", "MIN"):
        raise ValueError(
            f"{fn}: with axis_name, op must be MPI.SUM, MPI.PROD, MPI.MAX or "
            f"MPI.MIN (XLA reduces the local shards), got MPI.{opname}")
    if adjoint != "replicated":
        raise NotImplementedError(
            f"{fn}: with axis_name the local reduction is XLA's, whose "
            "result is replicated over the mesh axes and counted once in "
            "gradients (adjoint='replicated'); adjoint='sum' is not "
            "supported with axis_name")
    return tuple(names)


def _over_shards(x, opname: str, axis_name, mpi_allreduce):
    """op over x's shards on the mesh axes `axis_name` of every process;
    mpi_allreduce(y) reduces y across processes (on the device's
    position's communicator)."""
    k = mesh().size_of(axis_name)
    if opname == "SUM":
        if k > 1 and x.size >= k and x.size * x.dtype.itemsize >= SCATTER_BYTES:
            flat = x.reshape(-1)
            pad = (-flat.size) % k
            if pad:
                flat = jnp.concatenate([flat, jnp.zeros(pad, flat.dtype)])
            piece = lax.psum_scatter(flat, axis_name, tiled=True)
            whole = lax.all_gather(mpi_allreduce(piece), axis_name, tiled=True)
            return whole[:x.size].reshape(x.shape)
        return mpi_allreduce(lax.psum(x, axis_name))
    if opname == "MAX":
        return mpi_allreduce(lax.pmax(x, axis_name))
    if opname == "MIN":
        return mpi_allreduce(lax.pmin(x, axis_name))
    if opname == "PROD":
        every = lax.all_gather(x, axis_name)  # (k, *x.shape), local shards
        return mpi_allreduce(jnp.prod(every, axis=0).astype(x.dtype))
    raise ValueError(opname)


@_dispatch.start()
def iallreduce(x, op, *, comm=None, token=None,
               adjoint="replicated") -> Request:
    """Start reducing ``x`` over all ranks with ``op``, on every rank.

    MPI_Iallreduce, the non-blocking form of ``allreduce``; it matches only
    ``iallreduce`` on the other ranks (MPI never matches MPI_Iallreduce with
    MPI_Allreduce). Derivatives for ``MPI.SUM``, with ``allreduce``'s
    ``adjoint`` (``"sum"``: the cotangents' allreduce as a backward request).

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).
        adjoint: ``"replicated"`` (default) or ``"sum"``, as for ``allreduce``.

    Returns:
        A ``Request``; ``wait`` on it returns ``op`` over every rank's ``x``.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        ValueError: ``adjoint`` is not ``"replicated"`` or ``"sum"``.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        Overlap a gradient sum with other work, inside ``jax.jit``:

            req = mpx.iallreduce(grads, MPI.SUM)
            loss = more_compute(params)     # while the sum travels
            total = mpx.wait(req)           # the sum over all ranks
    """
    return _allreduce("iallreduce", x, op, comm, token, adjoint).start()


def _reduce(fn, x, op, root, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, op=a.op(op, x), root=a.rank(root))


@_dispatch.blocking()
def reduce(x, op, root, *, comm=None, token=None):
    """Reduce ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Reduce. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        On ``root``, ``op`` over every rank's ``x``; elsewhere ``x`` unchanged.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        ValueError: ``root`` is not a rank of ``comm``.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``:

            y = mpx.reduce(jnp.full(3, rank), MPI.SUM, 0)  # rank 0: [6 6 6]
    """
    call = _reduce("reduce", x, op, root, comm, token)
    return call.rooted(x, call.bind(reduce_p)[0], root_gets=True)


@_dispatch.start()
def ireduce(x, op, root, *, comm=None, token=None) -> Request:
    """Start reducing ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Ireduce, the non-blocking form of ``reduce``; it matches only
    ``ireduce`` on the other ranks. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns, on ``root``, ``op`` over every
        rank's ``x``, elsewhere ``x`` unchanged.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        ValueError: ``root`` is not a rank of ``comm``.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``:

            req = mpx.ireduce(jnp.ones(3) * rank, MPI.SUM, 0)
            z = compute(w)                  # while the reduction runs
            y = mpx.wait(req)               # rank 0: [6. 6. 6.]
    """
    return _reduce("ireduce", x, op, root, comm, token).start()


def _scan(fn, x, op, comm, token, predefined=False):
    """scan's and exscan's arguments (exscan: a predefined op, whose
    identity rank 0 gets)."""
    a = Args(fn, comm, token)
    x = a.array(x)
    opinfo = a.op(op, x)
    if predefined:
        v.predefined_op(opinfo, fn)
    return a.call(x, op=opinfo)


@_dispatch.blocking(region=True)
def scan(x, op, *, comm=None, token=None):
    """Inclusive prefix reduction: rank r gets ``op`` over ranks 0..r.

    MPI_Scan. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        ``op`` over the ``x`` of ranks 0 to this rank, of ``x``'s shape and
        dtype.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``:

            y = mpx.scan(jnp.ones(2), MPI.SUM)   # rank r: [r + 1, r + 1]
    """
    call = _scan("scan", x, op, comm, token)
    y = call.direct(_eager.scan, call.params["op"].handle, comm)
    return call.bind(scan_p)[0] if y is None else y


@_dispatch.start()
def iscan(x, op, *, comm=None, token=None) -> Request:
    """Start an inclusive prefix reduction: ``op`` over ranks 0..r.

    MPI_Iscan, the non-blocking form of ``scan``; it matches only ``iscan`` on
    the other ranks. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ...), or a user-defined one.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns ``op`` over the ``x`` of ranks 0
        to this rank.

    Raises:
        TypeError: ``op`` is not a reduction op defined for ``x``'s dtype.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``:

            req = mpx.iscan(jnp.ones(2), MPI.SUM)
            y = mpx.wait(req)               # rank r: [r + 1, r + 1]
    """
    return _scan("iscan", x, op, comm, token).start()


@_dispatch.blocking(region=True)
def exscan(x, op, *, comm=None, token=None):
    """Exclusive prefix reduction: rank r gets ``op`` over ranks 0..r-1.

    MPI_Exscan. MPI leaves rank 0's result undefined; jaxmpi gives it ``op``'s
    identity: zeros for ``MPI.SUM`` (and ``BOR``, ``BXOR``, ``LOR``, ``LXOR``),
    ones for ``MPI.PROD`` (and ``LAND``), all bits set for ``BAND``, the
    dtype's lowest value for ``MPI.MAX`` and its highest for ``MPI.MIN``.
    Typical use: the offset of each rank's variable-size data,
    ``exscan(n_local, MPI.SUM)``. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: a predefined mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        ``op`` over the ``x`` of ranks 0 to this rank - 1 (rank 0: the
        identity), of ``x``'s shape and dtype.

    Raises:
        TypeError: ``op`` is not a predefined reduction op defined for the
            dtype.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``:

            y = mpx.exscan(jnp.ones(2), MPI.SUM)   # rank r: [r, r]
    """
    return _scan("exscan", x, op, comm, token, True).bind(exscan_p)[0]


@_dispatch.start()
def iexscan(x, op, *, comm=None, token=None) -> Request:
    """Start an exclusive prefix reduction: ``op`` over ranks 0..r-1.

    MPI_Iexscan, the non-blocking form of ``exscan``; it matches only
    ``iexscan`` on the other ranks. The wait gives rank 0 ``op``'s identity, as
    ``exscan`` does. Derivatives for ``MPI.SUM``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: a predefined mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns ``op`` over the ``x`` of ranks 0
        to this rank - 1 (rank 0: the identity).

    Raises:
        TypeError: ``op`` is not a predefined reduction op defined for the
            dtype.
        NotImplementedError: a derivative with an ``op`` other than
            ``MPI.SUM``.

    Example:
        ``mpirun -n 4``, the offset of each rank's rows:

            req = mpx.iexscan(jnp.array(n_local), MPI.SUM)
            z = compute(w)
            offset = mpx.wait(req)          # rank 0: 0
    """
    return _scan("iexscan", x, op, comm, token, True).start()


def _reduce_scatter(fn, x, op, counts, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    opinfo = a.op(op, x)
    return a.call(x, op=opinfo,
                  counts=v.reduce_scatter_counts(x, counts, fn, a.info))


@_dispatch.blocking(rows=True, region=True)
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
    return _reduce_scatter("reduce_scatter", x, op, counts, comm,
                           token).bind(reduce_scatter_p)[0]


@_dispatch.start()
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
    return _reduce_scatter("ireduce_scatter", x, op, counts, comm,
                           token).start()
