"""The collectives, each blocking operation beside its non-blocking form:
allreduce, reduce, scan, exscan, bcast, gather, scatter, allgather,
alltoall, barrier. The blocking ones return bare results (the convention
of ``jaxmpi.notoken``); ``jaxmpi`` wraps them to return ``(result,
token)``."""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from . import _core, _eager, _pytree
from . import _jax_compat as jc
from . import _sharded_requests
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
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"allreduce: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    info, tok, x, opinfo = reduction_args("allreduce", x, op, comm, token)
    join(tok)
    if axis_name is not None:
        names = _over_shards_args("allreduce", axis_name, opinfo.name, adjoint)
        return _over_shards(x, opinfo.name, names, lambda y: allreduce_p.bind(
            y, comm=info, op=opinfo, adjoint=adjoint)[0])
    y = _direct(x, _eager.allreduce, opinfo.handle, comm)
    if y is not None:
        return y
    return allreduce_p.bind(x, comm=info, op=opinfo, adjoint=adjoint)[0]


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
    mesh = jc.abstract_mesh()
    manual = set(jc.manual_axes(mesh)) if mesh is not None else set()
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


def _axis_size(axis_name) -> int:
    mesh = jc.abstract_mesh()
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes))
    names = axis_name if isinstance(axis_name, tuple) else (axis_name,)
    return math.prod(sizes[a] for a in names)


def _over_shards(x, opname: str, axis_name, mpi_allreduce):
    """op over x's shards on the mesh axes `axis_name` of every process;
    mpi_allreduce(y) reduces y across processes (on the device's
    position's communicator)."""
    k = _axis_size(axis_name)
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


@_sharded_requests.start()
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
    info, tok, x, opinfo = reduction_args("reduce", x, op, comm, token)
    join(tok)
    root = v.rank_arg(root, "reduce", "root", info)
    (y,) = reduce_p.bind(x, comm=info, op=opinfo, root=root)
    return y if info.rank == root else passed_through(x, y)


@_sharded_requests.start()
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
    info, tok, x, opinfo = reduction_args("ireduce", x, op, comm, token)
    root = v.rank_arg(root, "ireduce", "root", info)
    join(tok)
    return compose_one("ireduce", (x,), dict(comm=info, op=opinfo, root=root))


@_pytree.tree_op()
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
    info, tok, x, opinfo = reduction_args("scan", x, op, comm, token)
    join(tok)
    y = _direct(x, _eager.scan, opinfo.handle, comm)
    if y is not None:
        return y
    return scan_p.bind(x, comm=info, op=opinfo)[0]


@_sharded_requests.start()
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
    info, tok, x, opinfo = reduction_args("iscan", x, op, comm, token)
    join(tok)
    return compose_one("iscan", (x,), dict(comm=info, op=opinfo))


@_pytree.tree_op()
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
    info, tok, x, opinfo = reduction_args("exscan", x, op, comm, token)
    join(tok)
    v.predefined_op(opinfo, "exscan")
    return exscan_p.bind(x, comm=info, op=opinfo)[0]


@_sharded_requests.start()
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
    info, tok, x, opinfo = reduction_args("iexscan", x, op, comm, token)
    v.predefined_op(opinfo, "iexscan")
    join(tok)
    return compose_one("iexscan", (x,), dict(comm=info, op=opinfo))


@_pytree.tree_op()
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
    info, tok = begin("bcast", comm, token)
    x = v.array(x, "bcast")
    root = v.rank_arg(root, "bcast", "root", info)
    join(tok)
    y = _direct(x, _eager.bcast, root, comm)
    if y is not None:
        return y
    (y,) = bcast_p.bind(x, comm=info, root=root)
    return passed_through(x, y) if info.rank == root else y


@_sharded_requests.start()
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
    info, tok = begin("gather", comm, token)
    x = v.array(x, "gather")
    root = v.rank_arg(root, "gather", "root", info)
    join(tok)
    (y,) = gather_p.bind(x, comm=info, root=root)
    return y if info.rank == root else passed_through(x, y)


@_sharded_requests.start()
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
    info, tok = begin("scatter", comm, token)
    x = v.array(x, "scatter")
    root = v.rank_arg(root, "scatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "scatter", "x (on the root)", info.size)
    join(tok)
    return scatter_p.bind(x, comm=info, root=root)[0]


@_sharded_requests.start()
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
    info, tok = begin("iscatter", comm, token)
    x = v.array(x, "iscatter")
    root = v.rank_arg(root, "iscatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "iscatter", "x (on the root)", info.size)
    join(tok)
    return compose_one("iscatter", (x,), dict(comm=info, root=root))


@_pytree.tree_op()
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
    info, tok = begin("allgather", comm, token)
    x = v.array(x, "allgather")
    join(tok)
    y = _direct(x, lambda x, _, c: _eager.allgather(x, c), None, comm)
    if y is not None:
        return y
    return allgather_p.bind(x, comm=info)[0]


@_sharded_requests.start()
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
    info, tok = begin("iallgather", comm, token)
    x = v.array(x, "iallgather")
    join(tok)
    return compose_one("iallgather", (x,), dict(comm=info))


@_pytree.tree_op(rows=True)
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
    info, tok = begin("alltoall", comm, token)
    x = v.array(x, "alltoall")
    v.leading_dim(x, "alltoall", "x", info.size)
    join(tok)
    y = _direct(x, lambda x, _, c: _eager.alltoall(x, c), None, comm)
    if y is not None:
        return y
    return alltoall_p.bind(x, comm=info)[0]


@_sharded_requests.start()
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
    info, tok = begin("ialltoall", comm, token)
    x = v.array(x, "ialltoall")
    v.leading_dim(x, "ialltoall", "x", info.size)
    join(tok)
    return compose_one("ialltoall", (x,), dict(comm=info))


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
    info, tok = begin("barrier", comm, token)
    join(tok)
    barrier_p.bind(comm=info)


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
    info, tok = begin("ibarrier", comm, token)
    join(tok)
    return compose_one("ibarrier", (), dict(comm=info))
