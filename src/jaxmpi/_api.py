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
from jax._src import core as _jcore
from mpi4py import MPI

from . import _core
from . import _ops
from . import _validate as v
from ._nonblocking import check_no_leaks


def _begin(fn, comm, token):
    check_no_leaks(fn)
    info = v.comm_info(comm, fn)
    tok = v.token_arg(token, fn)
    return info, tok


def _join(tok):
    # A concrete token outside any trace is already complete, and eager calls
    # are ordered by JAX's runtime tokens: only traced tokens need joining.
    if tok is not None and not _jcore.trace_state_clean():
        _ops.join_token_p.bind(tok)


def _passed_through(x, y):
    """Where a rooted op's MPI call delivers nothing, the op gives back x.
    Called eagerly with no transformation, that is x itself (as in mpi4jax);
    under jit, grad or vmap it is the primitive's copy of x, so that every
    rank's program stays linear in the same values (docs/autodiff.md)."""
    return x if _jcore.trace_state_clean() else y


def _reduction(fn, x, op, comm, token):
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    _join(tok)
    return info, x, opinfo


def allreduce(x, op, *, comm=None, token=None, adjoint="replicated"):
    """Reduce ``x`` over all ranks with ``op``; every rank gets the result.

    MPI_Allreduce. Returns an array of ``x``'s shape and dtype.

    ``adjoint`` chooses how reverse-mode AD treats the replicated result:
    ``"replicated"`` (default, as mpi4jax and JPI) counts its cotangent once,
    so the transpose is the identity; ``"sum"`` is the exact adjoint of the
    map from all ranks' inputs to all ranks' outputs (an allreduce of the
    cotangents). See docs/autodiff.md.
    """
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"allreduce: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    info, x, opinfo = _reduction("allreduce", x, op, comm, token)
    return _ops.allreduce_p.bind(x, comm=info, op=opinfo, adjoint=adjoint)[0]


def reduce(x, op, root, *, comm=None, token=None):
    """Reduce ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Reduce. The root gets the reduced array; other ranks get ``x`` back
    unchanged.
    """
    info, x, opinfo = _reduction("reduce", x, op, comm, token)
    root = v.rank_arg(root, "reduce", "root", info)
    (y,) = _ops.reduce_p.bind(x, comm=info, op=opinfo, root=root)
    return y if info.rank == root else _passed_through(x, y)


def scan(x, op, *, comm=None, token=None):
    """Inclusive prefix reduction: rank r gets ``op`` over ranks 0..r.

    MPI_Scan. Returns an array of ``x``'s shape and dtype.
    """
    info, x, opinfo = _reduction("scan", x, op, comm, token)
    return _ops.scan_p.bind(x, comm=info, op=opinfo)[0]


def bcast(x, root, *, comm=None, token=None):
    """Broadcast the root's ``x`` to every rank.

    MPI_Bcast. On other ranks ``x`` gives the shape and dtype only. The root
    gets ``x`` itself back.
    """
    info, tok = _begin("bcast", comm, token)
    x = v.array(x, "bcast")
    root = v.rank_arg(root, "bcast", "root", info)
    _join(tok)
    (y,) = _ops.bcast_p.bind(x, comm=info, root=root)
    return _passed_through(x, y) if info.rank == root else y


def gather(x, root, *, comm=None, token=None):
    """Gather every rank's ``x`` on the root, stacked along a new axis 0.

    MPI_Gather. The root gets shape ``(size, *x.shape)``; other ranks get
    ``x`` back unchanged.
    """
    info, tok = _begin("gather", comm, token)
    x = v.array(x, "gather")
    root = v.rank_arg(root, "gather", "root", info)
    _join(tok)
    (y,) = _ops.gather_p.bind(x, comm=info, root=root)
    return y if info.rank == root else _passed_through(x, y)


def scatter(x, root, *, comm=None, token=None):
    """Scatter the root's ``x[r]`` to rank r.

    MPI_Scatter. On the root ``x.shape[0]`` must equal the communicator size
    and the result has shape ``x.shape[1:]``; on other ranks ``x`` is a
    template of the result's shape and dtype.
    """
    info, tok = _begin("scatter", comm, token)
    x = v.array(x, "scatter")
    root = v.rank_arg(root, "scatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "scatter", "x (on the root)", info.size)
    _join(tok)
    return _ops.scatter_p.bind(x, comm=info, root=root)[0]


def allgather(x, *, comm=None, token=None):
    """Gather every rank's ``x`` on every rank: shape ``(size, *x.shape)``.

    MPI_Allgather.
    """
    info, tok = _begin("allgather", comm, token)
    x = v.array(x, "allgather")
    _join(tok)
    return _ops.allgather_p.bind(x, comm=info)[0]


def alltoall(x, *, comm=None, token=None):
    """Rank i sends ``x[j]`` to rank j and receives rank j's ``x[i]`` into
    ``result[j]``.

    MPI_Alltoall. ``x.shape[0]`` must equal the communicator size.
    """
    info, tok = _begin("alltoall", comm, token)
    x = v.array(x, "alltoall")
    v.leading_dim(x, "alltoall", "x", info.size)
    _join(tok)
    return _ops.alltoall_p.bind(x, comm=info)[0]


def barrier(*, comm=None, token=None):
    """Block until every rank of ``comm`` has reached the barrier.

    MPI_Barrier.
    """
    info, tok = _begin("barrier", comm, token)
    _join(tok)
    _ops.barrier_p.bind(comm=info)


def send(x, dest, *, tag=0, comm=None, token=None):
    """Send ``x`` to rank ``dest``.

    MPI_Send. ``dest`` may be ``MPI.PROC_NULL`` (no-op).
    """
    info, tok = _begin("send", comm, token)
    x = v.array(x, "send")
    dest = v.rank_arg(dest, "send", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "send", "tag", info)
    _join(tok)
    _ops.send_p.bind(x, comm=info, dest=dest, tag=tag)


def recv(x, source=MPI.ANY_SOURCE, *, tag=MPI.ANY_TAG, comm=None, status=None,
         token=None):
    """Receive an array of ``x``'s shape and dtype from rank ``source``.

    MPI_Recv. ``x`` is only a template: its data is not used. ``source`` may
    be ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL`` (the result is then zeros),
    ``tag`` may be ``MPI.ANY_TAG``. If ``status`` (an ``MPI.Status``) is
    given, it is filled in when the receive completes. A message of another
    size is an error, not a truncation.
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


def sendrecv(sendbuf, recvbuf, source, dest, *, sendtag=0, recvtag=MPI.ANY_TAG,
             comm=None, status=None, token=None):
    """Send ``sendbuf`` to ``dest`` and receive an array of ``recvbuf``'s
    shape and dtype from ``source``, in one deadlock-free call.

    MPI_Sendrecv. ``recvbuf`` is only a template. ``source``/``dest`` may be
    ``MPI.PROC_NULL``; ``source`` may be ``MPI.ANY_SOURCE`` and ``recvtag``
    ``MPI.ANY_TAG``.
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


MAX_EXCHANGE_PAIRS = 32


def neighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0, comm=None,
                      token=None):
    """Many sendrecvs at once: pair ``i`` sends ``sendbufs[i]`` to
    ``dests[i]`` and receives an array of ``recvbufs[i]``'s shape and dtype
    from ``sources[i]``, both with tag ``tag + i``.

    All receives and sends are posted together (MPI_Irecv, MPI_Isend, one
    MPI_Waitall), so a halo exchange in every direction is one call with no
    ordering to get right. A rank's pair ``i`` matches pair ``i`` of its
    peers: in a shift pattern every rank sends in direction ``i`` and
    receives from the opposite one. ``recvbufs`` are templates (their data
    is not used); peers may be ``MPI.PROC_NULL`` (the result is zeros).
    Returns a tuple of the received arrays. At most 32 pairs.
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


def has_cuda_support() -> bool:
    """True if jaxmpi's C core has the CUDA path (GPU arrays work when a CUDA
    driver and JAX's CUDA plugin are present; see docs/gpu.md). Like
    mpi4jax's, this says nothing of whether a GPU is visible."""
    return _core.get().cuda_built


OPERATIONS = ("allgather", "allreduce", "alltoall", "barrier", "bcast",
              "gather", "neighbor_exchange", "recv", "reduce", "scan",
              "scatter", "send", "sendrecv")
