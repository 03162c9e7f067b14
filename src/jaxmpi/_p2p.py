"""Point-to-point operations, each blocking operation beside its
non-blocking form: send, recv, sendrecv, neighbor_exchange."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from . import _pytree
from . import _sharded_requests
from . import _validate as v
from ._prims_p2p import neighbor_exchange_p, recv_p, send_p, sendrecv_p
from ._registry import PAIRS_PER_CALL, PAIRS_PER_REQUEST
from ._requests import Request, compose_one
from ._steps import begin, join
from ._validate import ANY_SOURCE, ANY_TAG


@_pytree.tree_op(result=False)
def send(x, dest, *, tag=0, comm=None, token=None):
    """Send ``x`` to rank ``dest``.

    MPI_Send (standard mode: it may wait until ``dest`` receives the message,
    as large messages do).

    Args:
        x: the array to send.
        dest: the receiving rank (a static int), or ``MPI.PROC_NULL`` (no-op).
        tag: the message tag, 0 to half of ``MPI.TAG_UB``.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        None.

    Raises:
        ValueError: ``dest`` is not a rank of ``comm``, or ``tag`` is out of
            range.

    Example:
        ``mpirun -n 2``:

            if rank == 0:
                mpx.send(jnp.arange(3.0), 1, tag=7)
            else:
                y = mpx.recv(jnp.zeros(3), 0, tag=7)   # [0. 1. 2.]
    """
    info, tok = begin("send", comm, token)
    x = v.array(x, "send")
    dest = v.rank_arg(dest, "send", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "send", "tag", info)
    join(tok)
    send_p.bind(x, comm=info, dest=dest, tag=tag)


@_sharded_requests.start()
def isend(x, dest, *, tag=0, comm=None, token=None) -> Request:
    """Start sending ``x`` to rank ``dest``.

    MPI_Isend, the non-blocking form of ``send``. The request sends from its
    own buffer (XLA copies ``x`` first where it is still used after the start),
    so ``x`` may change while the message travels.

    Args:
        x: the array to send.
        dest: the receiving rank (a static int), or ``MPI.PROC_NULL`` (no-op).
        tag: the message tag, 0 to half of ``MPI.TAG_UB``.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it completes the send and returns None.

    Raises:
        ValueError: ``dest`` is not a rank of ``comm``, or ``tag`` is out of
            range.

    Example:
        ``mpirun -n 2``, inside ``jax.jit``:

            if rank == 0:
                req = mpx.isend(jnp.arange(3.0), 1, tag=7)
                z = heavy_compute(w)        # runs while the message travels
                mpx.wait(req)               # returns None
            else:
                y = mpx.wait(mpx.irecv(jnp.zeros(3), 0, tag=7))
    """
    info, tok = begin("isend", comm, token)
    x = v.array(x, "isend")
    dest = v.rank_arg(dest, "isend", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "isend", "tag", info)
    join(tok)
    return compose_one("isend", (x,), dict(comm=info, dest=dest, tag=tag))


@_pytree.tree_op()
def recv(x, source=ANY_SOURCE, *, tag=ANY_TAG, comm=None, status=None,
         token=None):
    """Receive an array of ``x``'s shape and dtype from rank ``source``.

    MPI_Recv. A message of another size is an error, not a truncation.
    Derivatives need a ``source`` rank (and, in reverse mode, a ``tag``): the
    cotangent goes back to it (docs/autodiff.md).

    Args:
        x: a template: the result's shape and dtype (its data is not used).
        source: the sending rank, ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL``.
        tag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        status: an ``MPI.Status`` to fill in (source, tag, count), or None.
        token: a token to order this call after (optional, never needed).

    Returns:
        The message, of ``x``'s shape and dtype (zeros from ``MPI.PROC_NULL``).

    Raises:
        TypeError: ``status`` is not an ``MPI.Status``.
        ValueError: ``source`` is not a rank of ``comm`` (or
            ``MPI.ANY_SOURCE``, ``MPI.PROC_NULL``), or ``tag`` is out of range.
        NotImplementedError: a derivative of a receive from ``MPI.ANY_SOURCE``,
            or in reverse mode with ``MPI.ANY_TAG``.
        jax.errors.JaxRuntimeError: the message has another size than ``x``.

    Example:
        ``mpirun -n 2``:

            if rank == 1:
                y = mpx.recv(jnp.zeros(3), 0)    # rank 0's array
            else:
                mpx.send(jnp.arange(3.0), 1)
    """
    info, tok = begin("recv", comm, token)
    x = v.array(x, "recv")
    source = v.rank_arg(source, "recv", "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    tag = v.tag_arg(tag, "recv", "tag", info, allow_any=True)
    addr = v.status_arg(status, "recv")
    join(tok)
    return recv_p.bind(x, comm=info, source=source, tag=tag,
                       status=addr)[0]


@_sharded_requests.start()
def irecv(x, source=ANY_SOURCE, *, tag=ANY_TAG, comm=None,
          status=None, token=None) -> Request:
    """Start receiving an array of ``x``'s shape and dtype from ``source``.

    MPI_Irecv, the non-blocking form of ``recv``. A message of another size is
    an error at the wait, not a truncation. Derivatives need a ``source`` rank
    and a ``tag``.

    Args:
        x: a template: the result's shape and dtype (its data is not used).
        source: the sending rank, ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL``.
        tag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        status: an ``MPI.Status`` to fill in (source, tag, count), or None.
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the message, of ``x``'s shape and
        dtype (zeros from ``MPI.PROC_NULL``).

    Raises:
        TypeError: ``status`` is not an ``MPI.Status``.
        ValueError: ``source`` is not a rank of ``comm`` (or
            ``MPI.ANY_SOURCE``, ``MPI.PROC_NULL``), or ``tag`` is out of range.
        NotImplementedError: a derivative of a receive from ``MPI.ANY_SOURCE``
            or with ``MPI.ANY_TAG``.

    Example:
        ``mpirun -n 2``, inside ``jax.jit``:

            if rank == 1:
                req = mpx.irecv(jnp.zeros(3), 0, tag=7)
                z = heavy_compute(w)        # runs while the message travels
                y = mpx.wait(req)           # rank 0's array
            else:
                mpx.wait(mpx.isend(jnp.arange(3.0), 1, tag=7))
    """
    info, tok = begin("irecv", comm, token)
    x = v.array(x, "irecv")
    source = v.rank_arg(source, "irecv", "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    tag = v.tag_arg(tag, "irecv", "tag", info, allow_any=True)
    addr = v.status_arg(status, "irecv")
    join(tok)
    return compose_one("irecv", (x,), dict(comm=info, source=source, tag=tag,
                                           status=addr))


@_pytree.tree_op(trees=("sendbuf", "recvbuf"))
def sendrecv(sendbuf, recvbuf, source, dest, *, sendtag=0, recvtag=ANY_TAG,
             comm=None, status=None, token=None):
    """Send ``sendbuf`` to ``dest`` and receive from ``source``, in one call.

    MPI_Sendrecv: deadlock-free; the result has ``recvbuf``'s shape and dtype.
    With ``recvtag=MPI.ANY_TAG`` the derivative's message is taken to carry the
    peer's ``sendtag`` (every rank calling the same sendrecv, the usual
    exchange pattern).

    Args:
        sendbuf: the array to send.
        recvbuf: a template: the result's shape and dtype (data not used).
        source: the sender, or ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL``.
        dest: the rank to send to, or ``MPI.PROC_NULL``.
        sendtag: the tag of the message sent.
        recvtag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        status: an ``MPI.Status`` to fill in (source, tag, count), or None.
        token: a token to order this call after (optional, never needed).

    Returns:
        The message from ``source``, of ``recvbuf``'s shape and dtype.

    Raises:
        TypeError: ``status`` is not an ``MPI.Status``.
        ValueError: ``source`` or ``dest`` is not a rank of ``comm`` (or a
            special rank it allows), or a tag is out of range.
        NotImplementedError: a derivative of a receive from ``MPI.ANY_SOURCE``.
        jax.errors.JaxRuntimeError: the message has another size than
            ``recvbuf``.

    Example:
        Shift right around a ring:

            right, left = (rank + 1) % size, (rank - 1) % size
            y = mpx.sendrecv(x, x, source=left, dest=right)   # left's x
    """
    fn = "sendrecv"
    info, tok = begin(fn, comm, token)
    sendbuf = v.array(sendbuf, fn, "sendbuf")
    recvbuf = v.array(recvbuf, fn, "recvbuf")
    source = v.rank_arg(source, fn, "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    dest = v.rank_arg(dest, fn, "dest", info, allow=(MPI.PROC_NULL,))
    sendtag = v.tag_arg(sendtag, fn, "sendtag", info)
    recvtag = v.tag_arg(recvtag, fn, "recvtag", info, allow_any=True)
    addr = v.status_arg(status, fn)
    join(tok)
    return sendrecv_p.bind(
        sendbuf, recvbuf, comm=info, source=source, dest=dest, sendtag=sendtag,
        recvtag=recvtag, status=addr,
    )[0]


@_sharded_requests.start(trees=("sendbuf", "recvbuf"))
def isendrecv(sendbuf, recvbuf, source, dest, *, sendtag=0,
              recvtag=ANY_TAG, comm=None, status=None,
              token=None) -> Request:
    """Start sending ``sendbuf`` to ``dest`` and receiving from ``source``.

    MPI_Irecv and MPI_Isend, completed together by ``wait``: the non-blocking
    form of ``sendrecv`` (deadlock-free in the same way: the receive is posted
    first).

    Args:
        sendbuf: the array to send (the request sends from its own copy).
        recvbuf: a template: the result's shape and dtype (data not used).
        source: the sender, or ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL``.
        dest: the rank to send to, or ``MPI.PROC_NULL``.
        sendtag: the tag of the message sent.
        recvtag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        status: an ``MPI.Status`` to fill in (source, tag, count), or None.
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the message from ``source``.

    Raises:
        TypeError: ``status`` is not an ``MPI.Status``.
        ValueError: ``source`` or ``dest`` is not a rank of ``comm`` (or a
            special rank it allows), or a tag is out of range.
        NotImplementedError: a derivative of a receive from ``MPI.ANY_SOURCE``.

    Example:
        Shift right around a ring while the interior is updated:

            right, left = (rank + 1) % size, (rank - 1) % size
            req = mpx.isendrecv(edge, jnp.zeros_like(edge), left, right)
            interior = update(interior)     # while the halo travels
            halo = mpx.wait(req)            # left's edge
    """
    fn = "isendrecv"
    info, tok = begin(fn, comm, token)
    sendbuf = v.array(sendbuf, fn, "sendbuf")
    recvbuf = v.array(recvbuf, fn, "recvbuf")
    source = v.rank_arg(source, fn, "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    dest = v.rank_arg(dest, fn, "dest", info, allow=(MPI.PROC_NULL,))
    sendtag = v.tag_arg(sendtag, fn, "sendtag", info)
    recvtag = v.tag_arg(recvtag, fn, "recvtag", info, allow_any=True)
    addr = v.status_arg(status, fn)
    join(tok)
    return compose_one(fn, (sendbuf, recvbuf), dict(
        comm=info, source=source, dest=dest, sendtag=sendtag, recvtag=recvtag,
        status=addr))


def neighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0, comm=None,
                      token=None):
    """Many sendrecvs at once, pair ``i`` with tag ``tag + i``.

    Pair ``i`` sends ``sendbufs[i]`` to ``dests[i]`` and receives an array of
    ``recvbufs[i]``'s shape and dtype from ``sources[i]``. MPI_Irecv and
    MPI_Isend of every pair, one MPI_Waitall: a halo exchange in every
    direction is one call with no ordering to get right. A rank's pair ``i``
    matches pair ``i`` of its peers.

    Args:
        sendbufs: a list or tuple of arrays to send (at most 32).
        recvbufs: a list or tuple of templates, one per pair.
        sources: the rank each pair receives from, or ``MPI.PROC_NULL``.
        dests: the rank each pair sends to, or ``MPI.PROC_NULL``.
        tag: pair ``i`` uses tag ``tag + i``.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A tuple of the received arrays, one per pair (zeros from
        ``MPI.PROC_NULL``).

    Raises:
        TypeError: ``sendbufs``, ``recvbufs``, ``sources`` or ``dests`` is not
            a list or tuple.
        ValueError: the four sequences differ in length or hold more than 32
            pairs, a rank is not a rank of ``comm``, or a tag is out of range.
        jax.errors.JaxRuntimeError: a message has another size than its
            template.

    Example:
        A 1-D halo exchange in both directions:

            left, right = (rank - 1) % size, (rank + 1) % size
            from_left, from_right = mpx.neighbor_exchange(
                [u[-1:], u[:1]], [u[:1], u[-1:]],
                sources=[left, right], dests=[right, left])
    """
    fn = "neighbor_exchange"
    info, tok = begin(fn, comm, token)
    xs, params = _exchange_args(fn, sendbufs, recvbufs, sources, dests, tag,
                                info, 0, PAIRS_PER_CALL)
    join(tok)
    if not xs:
        return ()
    return tuple(neighbor_exchange_p.bind(*xs, **params))


@_sharded_requests.start(trees=("sendbufs", "recvbufs"))
def ineighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0,
                       comm=None, token=None) -> Request:
    """Start many sendrecvs at once, pair ``i`` with tag ``tag + i``.

    MPI_Irecv and MPI_Isend of every pair, completed together by ``wait``: the
    non-blocking form of ``neighbor_exchange``. Pair ``i`` sends
    ``sendbufs[i]`` to ``dests[i]`` and receives an array of ``recvbufs[i]``'s
    shape and dtype from ``sources[i]``.

    Args:
        sendbufs: a list or tuple of arrays to send (1 to 15).
        recvbufs: a list or tuple of templates, one per pair.
        sources: the rank each pair receives from, or ``MPI.PROC_NULL``.
        dests: the rank each pair sends to, or ``MPI.PROC_NULL``.
        tag: pair ``i`` uses tag ``tag + i``.
        comm: an mpi4py intracommunicator (None: ``get_default_comm()``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns a tuple of the received arrays,
        one per pair.

    Raises:
        TypeError: ``sendbufs``, ``recvbufs``, ``sources`` or ``dests`` is not
            a list or tuple.
        ValueError: the four sequences differ in length or hold no pair or more
            than 15, a rank is not a rank of ``comm``, or a tag is out of
            range.

    Example:
        A 1-D halo exchange in both directions, overlapping the interior:

            left, right = (rank - 1) % size, (rank + 1) % size
            req = mpx.ineighbor_exchange([u[-1:], u[:1]], [u[:1], u[-1:]],
                                         [left, right], [right, left])
            interior = update(u)            # while the halos travel
            from_left, from_right = mpx.wait(req)
    """
    fn = "ineighbor_exchange"
    info, tok = begin(fn, comm, token)
    xs, params = _exchange_args(fn, sendbufs, recvbufs, sources, dests, tag,
                                info, 1, PAIRS_PER_REQUEST)
    join(tok)
    return compose_one(fn, tuple(xs), params)


def _exchange_args(fn, sendbufs, recvbufs, sources, dests, tag, info, least,
                   most):
    """neighbor_exchange's (and ineighbor_exchange's) arguments checked:
    the arrays to send and the primitive's parameters (``least`` to
    ``most`` pairs)."""
    seqs = {}
    for name, value in (("sendbufs", sendbufs), ("recvbufs", recvbufs),
                        ("sources", sources), ("dests", dests)):
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{fn}: {name} must be a list or tuple, got "
                            f"{type(value).__name__}: {value!r}")
        seqs[name] = tuple(value)
    n = len(seqs["sendbufs"])
    lengths = {name: len(q) for name, q in seqs.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{fn}: sendbufs, recvbufs, sources and dests must "
                         f"have the same length, got {lengths}")
    if not least <= n <= most:
        limit = f"at most {most}" if least == 0 else f"{least} to {most}"
        raise ValueError(f"{fn}: {limit} pairs in one call, got {n}")
    xs = [v.array(x, fn, f"sendbufs[{i}]")
          for i, x in enumerate(seqs["sendbufs"])]
    ts = [v.array(t, fn, f"recvbufs[{i}]")
          for i, t in enumerate(seqs["recvbufs"])]
    srcs = tuple(v.rank_arg(q, fn, f"sources[{i}]", info,
                            allow=(MPI.PROC_NULL,))
                 for i, q in enumerate(seqs["sources"]))
    dsts = tuple(v.rank_arg(d, fn, f"dests[{i}]", info, allow=(MPI.PROC_NULL,))
                 for i, d in enumerate(seqs["dests"]))
    tag = v.tag_arg(tag, fn, "tag", info)
    if n:
        v.tag_arg(tag + n - 1, fn, f"tag + {n - 1} (the last pair's tag)", info)
    return xs, dict(
        comm=info, sources=srcs, dests=dsts, tag=tag,
        recv_avals=tuple((tuple(t.shape), np.dtype(t.dtype)) for t in ts))
