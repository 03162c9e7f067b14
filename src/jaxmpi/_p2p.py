"""Point-to-point operations, each blocking operation beside its
non-blocking form: send, recv, sendrecv, neighbor_exchange. Each pair
parses its arguments once (``_<op>``), and the two forms differ only in
what they make of the parsed call: the blocking op binds its primitive,
the non-blocking one starts its request."""

from __future__ import annotations

import numpy as np

from . import _dispatch
from . import _validate as v
from ._parse import Args
from ._prims_p2p import neighbor_exchange_p, recv_p, send_p, sendrecv_p
from ._registry import PAIRS_PER_CALL, PAIRS_PER_REQUEST
from ._requests import Request
from ._validate import ANY_SOURCE, ANY_TAG


def _send(fn, x, dest, tag, comm, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, dest=a.peer(dest), tag=a.tag(tag))


@_dispatch.blocking(result=False)
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
    _send("send", x, dest, tag, comm, token).bind(send_p)


@_dispatch.start()
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
    return _send("isend", x, dest, tag, comm, token).start()


def _recv(fn, x, source, tag, comm, status, token):
    a = Args(fn, comm, token)
    x = a.array(x)
    return a.call(x, source=a.source(source), tag=a.tag(tag, allow_any=True),
                  status=v.status_arg(status, fn))


@_dispatch.blocking()
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
    return _recv("recv", x, source, tag, comm, status,
                 token).bind(recv_p)[0]


@_dispatch.start()
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
    return _recv("irecv", x, source, tag, comm, status, token).start()


def _sendrecv(fn, sendbuf, recvbuf, source, dest, sendtag, recvtag, comm,
              status, token):
    a = Args(fn, comm, token)
    sendbuf = a.array(sendbuf, "sendbuf")
    recvbuf = a.array(recvbuf, "recvbuf")
    source, dest = a.source(source), a.peer(dest)
    sendtag = a.tag(sendtag, "sendtag")
    recvtag = a.tag(recvtag, "recvtag", allow_any=True)
    return a.call(
        sendbuf, recvbuf, source=source, dest=dest, sendtag=sendtag,
        recvtag=recvtag, status=v.status_arg(status, fn))


@_dispatch.blocking(trees=("sendbuf", "recvbuf"))
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
    return _sendrecv("sendrecv", sendbuf, recvbuf, source, dest, sendtag,
                     recvtag, comm, status, token).bind(sendrecv_p)[0]


@_dispatch.start(trees=("sendbuf", "recvbuf"))
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
    return _sendrecv("isendrecv", sendbuf, recvbuf, source, dest, sendtag,
                     recvtag, comm, status, token).start()


def _exchange(fn, sendbufs, recvbufs, sources, dests, tag, comm, token,
              least, most):
    """neighbor_exchange's (and ineighbor_exchange's) arguments: the arrays
    to send and the primitive's parameters (``least`` to ``most``
    pairs)."""
    a = Args(fn, comm, token)
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
    xs = [a.array(x, f"sendbufs[{i}]") for i, x in enumerate(seqs["sendbufs"])]
    ts = [a.array(t, f"recvbufs[{i}]") for i, t in enumerate(seqs["recvbufs"])]
    srcs = tuple(a.peer(q, f"sources[{i}]")
                 for i, q in enumerate(seqs["sources"]))
    dsts = tuple(a.peer(d, f"dests[{i}]") for i, d in enumerate(seqs["dests"]))
    tag = a.tag(tag)
    if n:
        a.tag(tag + n - 1, f"tag + {n - 1} (the last pair's tag)")
    return a.call(*xs, sources=srcs, dests=dsts, tag=tag, recv_avals=tuple(
        (tuple(t.shape), np.dtype(t.dtype)) for t in ts))


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
    call = _exchange("neighbor_exchange", sendbufs, recvbufs, sources, dests,
                     tag, comm, token, 0, PAIRS_PER_CALL)
    return tuple(call.bind(neighbor_exchange_p)) if call.operands else ()


@_dispatch.start(trees=("sendbufs", "recvbufs"))
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
    return _exchange("ineighbor_exchange", sendbufs, recvbufs, sources, dests,
                     tag, comm, token, 1, PAIRS_PER_REQUEST).start()
