"""Operations on MPI process topologies: the halo exchange of a Cartesian
communicator's blocks, and the sparse neighbourhood all-to-all of a
distributed-graph or Cartesian one, and their non-blocking forms. All are
compositions: slices of the arrays, a variadic exchange primitive
(``neighbor_exchange_p`` or ``neighbor_alltoallv_p``, every receive and send
posted at once, one MPI_Waitall; for the non-blocking forms
``ineighbor_exchange_p`` requests, completed by the wait), and the received
pieces put in place. The blocking and non-blocking forms share the checks
of their arguments, the packing and the unpacking, so their results are
bitwise the same. JVP, transpose and batching follow from those of the
parts: the transpose of a halo exchange sends each halo's cotangent back to
the rank that owns the cells and adds it into that rank's rim
(docs/autodiff.md).
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import numpy as np
from jax import lax
from mpi4py import MPI

from . import _dispatch
from ._devices import DeviceCart
from ._parse import Args
from ._prims_p2p import neighbor_alltoallv_p, neighbor_exchange_p
from ._registry import PAIRS_PER_CALL, PAIRS_PER_REQUEST
from ._requests import Request, compose


def _static_count(value, fn: str, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer)):
        raise TypeError(f"{fn}: {name} must be a static Python int, got "
                        f"{type(value).__name__}: {value!r}")
    value = operator.index(value)
    if value < 0:
        raise ValueError(f"{fn}: {name} must be >= 0, got {value}")
    return value


def _cart_topo(comm, fn: str):
    """(dims, periods, peer) of a Cartesian communicator or a DeviceCart,
    else TypeError: peer(d) is the rank of the neighbour in direction d (a
    DeviceCart's: a tuple of endpoint ranks, one per mesh position)."""
    if isinstance(comm, DeviceCart):
        return comm.dims, comm.periods, comm.neighbours
    if comm is None or comm.Get_topology() != MPI.CART:
        what = "None (the default communicator has no topology)" if comm is None \
            else f"a communicator without a Cartesian topology ({comm!r})"
        raise TypeError(
            f"{fn}: comm must be a Cartesian communicator "
            f"(MPI.COMM_WORLD.Create_cart(dims, periods)), got {what}")
    dims, periods, coords = comm.Get_topo()
    dims, periods = tuple(dims), tuple(bool(p) for p in periods)

    def peer(d):
        c = []
        for i in range(len(dims)):
            k = coords[i] + d[i]
            if 0 <= k < dims[i]:
                c.append(k)
            elif periods[i]:
                c.append(k % dims[i])
            else:
                return MPI.PROC_NULL
        return comm.Get_cart_rank(c)

    return dims, periods, peer


def _no_peer(peer) -> bool:
    """MPI.PROC_NULL (at every position, for a DeviceCart's tuple)."""
    if isinstance(peer, tuple):
        return all(p == MPI.PROC_NULL for p in peer)
    return peer == MPI.PROC_NULL


def _peers(entries) -> tuple:
    """An exchange's sources or dests attribute from its pairs' peers:
    ranks, one per pair; for a DeviceCart, one row of endpoint ranks per
    mesh position (csrc/ops.h)."""
    if entries and isinstance(entries[0], tuple):
        return tuple(int(e[k]) for k in range(len(entries[0]))
                     for e in entries)
    return tuple(int(e) for e in entries)


def _widths(width, ndim: int, fn: str) -> tuple:
    if isinstance(width, (list, tuple)):
        if len(width) != ndim:
            raise ValueError(
                f"{fn}: width has {len(width)} entries but the communicator's "
                f"grid has {ndim} dimensions: width={width!r}")
        return tuple(_static_count(w, fn, f"width[{i}]")
                     for i, w in enumerate(width))
    w = _static_count(width, fn, "width")
    return (w,) * ndim


def _halo_plan(dims, periods, widths, neighbour):
    """The pieces of the halo, each (direction, kind, source, dest): kind
    'message' (received from source, our rim sent to dest), 'local' (the
    grid wraps onto this block itself: a copy of our own rim). Directions
    where every rank's neighbour is MPI.PROC_NULL, or where a width is 0,
    are left out; the plan's order and length are the same on every rank
    (pair i of the exchange carries tag + i on both sides).

    Along a periodic axis of one block (``wrapped``) the halo is a local
    copy, made first; a message then carries that axis whole, halo
    included, so the directions that also move along it are left out: on a
    1 x 2 grid periodic in x, 2 messages per field instead of 6, as the
    shallow-water demo's hand-written exchange."""
    ndim = len(dims)
    wrapped = {i for i in range(ndim) if dims[i] == 1 and periods[i]}
    plan = []
    for d in itertools.product((-1, 0, 1), repeat=ndim):
        moving = [i for i in range(ndim) if d[i]]
        if not moving or any(widths[i] == 0 for i in moving):
            continue
        if any(dims[i] == 1 and not periods[i] for i in moving):
            continue  # MPI.PROC_NULL on every rank: nothing to fill
        if all(i in wrapped for i in moving):  # periodic onto itself
            plan.append((d, "local", None, None))
            continue
        if any(i in wrapped for i in moving):
            continue  # carried by the message without those axes' moves
        plan.append((d, "message", neighbour(tuple(-k for k in d)),
                     neighbour(d)))
    return plan


def _rim_and_halo(shape, widths, d, whole=()):
    """(start, limit) of the rim sent in direction d and (start,) of the
    halo on side -d it fills, over the decomposed axes; trailing axes and
    the axes in `whole` (where d does not move) whole."""
    rim_lo, rim_hi, halo_lo = [], [], []
    for i, w in enumerate(widths):
        n = shape[i]
        if d[i] == 0 and i in whole:
            rim_lo.append(0), rim_hi.append(n), halo_lo.append(0)
        elif d[i] > 0:
            rim_lo.append(n - 2 * w), rim_hi.append(n - w), halo_lo.append(0)
        elif d[i] < 0:
            rim_lo.append(w), rim_hi.append(2 * w), halo_lo.append(n - w)
        else:
            rim_lo.append(w), rim_hi.append(n - w), halo_lo.append(w)
    rest = tuple(shape[len(widths):])
    return ((*rim_lo, *(0 for _ in rest)), (*rim_hi, *rest),
            (*halo_lo, *(0 for _ in rest)))


@dataclass(frozen=True)
class _Halo:
    """A halo exchange's plan, from the arrays' shapes alone (no array of
    the trace: the non-blocking form's Request holds it for its wait).
    `local`: the pieces copied within the block, (k, lo, hi, at) each;
    `messages`: (source, dest, pieces) each, one per direction and dtype,
    pieces (k, lo, hi, at, shape) raveled one after another where several
    arrays of one dtype share it; `kind`: None for one array, else list or
    x's tuple type."""

    local: tuple
    messages: tuple
    kind: object
    tag: int
    grid: object = None  # the DeviceCart, if any

    def pack(self, arrays):
        """The arrays with the local copies made, and each message's send
        buffer, cut from them."""
        # The local copies first, into the result; the messages' pieces are
        # then slices of the result (whole along the wrapped axes, their
        # halo already filled), as the demo's hand-written exchange does.
        # Slicing the input instead (the wrapped halo rebuilt from its rims
        # by concatenation) made XLA copy every array twice per call and run
        # a fusion per corner cell, 7 times slower (benchmarks/halo.py).
        out = list(arrays)
        for k, lo, hi, at in self.local:  # from the own cells
            out[k] = lax.dynamic_update_slice(out[k],
                                              lax.slice(arrays[k], lo, hi), at)
        sends = []
        for _, _, where in self.messages:
            pieces = []
            for k, lo, hi, _, _ in where:
                pieces.append(lax.slice(out[k], lo, hi))
            sends.append(pieces[0] if len(pieces) == 1 else lax.concatenate(
                [p.reshape(-1) for p in pieces], 0))
        return out, sends

    def pairs(self, sends):
        """(sources, dests, recv_avals) of the messages: each is received
        into a buffer of its send buffer's shape."""
        sources, dests = [], []
        for source, dest, _ in self.messages:
            sources.append(source)
            dests.append(dest)
        avals = [(tuple(b.shape), np.dtype(b.dtype)) for b in sends]
        return sources, dests, avals

    def fill(self, out, got):
        """`out` with the received messages written into its halo."""
        out = list(out)
        for (source, _, where), msg in zip(self.messages, got):
            if _no_peer(source):  # no neighbour: x's cells stay
                continue
            # On a DeviceCart some positions may have none in this direction.
            none = (np.asarray([p == MPI.PROC_NULL for p in source])
                    if isinstance(source, tuple) else None)
            offset = 0
            for k, _, _, at, shape in where:
                size = int(np.prod(shape))
                piece = msg if len(where) == 1 else lax.slice(
                    msg, (offset,), (offset + size,)).reshape(shape)
                offset += size
                if none is not None and none.any():
                    piece = lax.select(
                        lax.broadcast(self.grid.at_position(none), piece.shape),
                        lax.dynamic_slice(out[k], at, piece.shape), piece)
                out[k] = lax.dynamic_update_slice(out[k], piece, at)
        return self.result(out)

    def result(self, out):
        if self.kind is None:
            return out[0]
        return out if self.kind is list else self.kind(out)

    def finish(self, results, keep):
        """ihalo_exchange's wait: its requests' messages, in order, into
        the halo of the block the start kept."""
        return self.fill(keep, [y for ys in results for y in ys])


def _halo_setup(fn, x, comm, width, tag, token):
    """Every check of halo_exchange's (and ihalo_exchange's) arguments, and
    the plan: (comm info, arrays, _Halo)."""
    a = Args(fn, comm, token, grid_ok=True)
    dims, periods, peer = _cart_topo(comm, fn)
    ndim = len(dims)
    widths = _widths(width, ndim, fn)
    many = isinstance(x, (list, tuple))
    arrays = [a.array(y, f"x[{k}]" if many else "x")
              for k, y in enumerate(x if many else [x])]
    for k, y in enumerate(arrays):
        name = f"x[{k}]" if many else "x"
        if y.ndim < ndim:
            raise ValueError(
                f"{fn}: {name} has {y.ndim} axes but the communicator's grid "
                f"has {ndim} dimensions (dims={list(dims)}): shape "
                f"{tuple(y.shape)}")
        for i, w in enumerate(widths):
            if y.shape[i] < 3 * w:
                raise ValueError(
                    f"{fn}: width {w} is too large for {name}'s axis {i} of "
                    f"{y.shape[i]} cells (shape {tuple(y.shape)}): the halo "
                    f"on both sides and a rim of {w} to send need at least "
                    f"{3 * w}")
    plan = _halo_plan(dims, periods, widths, peer)
    # Arrays of one dtype share each direction's message (their pieces
    # raveled one after another): one message per direction and dtype.
    groups = {}
    for k, y in enumerate(arrays):
        groups.setdefault(np.dtype(y.dtype), []).append(k)
    npairs = len(groups) * sum(kind == "message" for _, kind, _, _ in plan)
    tag = a.tag(tag)
    if npairs:
        a.tag(tag + npairs - 1, f"tag + {npairs - 1} (the last piece's tag)")
    a.done()

    wrapped = tuple(i for i in range(ndim) if dims[i] == 1 and periods[i])
    local = []
    for k, y in enumerate(arrays):
        for d, kind, _, _ in plan:
            if kind == "local":
                local.append((k, *_rim_and_halo(y.shape, widths, d)))
    messages = []
    for ks in groups.values():
        for d, kind, source, dest in plan:
            if kind == "local":
                continue
            where = []
            for k in ks:
                lo, hi, at = _rim_and_halo(arrays[k].shape, widths, d,
                                           wrapped)
                where.append((k, lo, hi, at,
                              tuple(b - a for a, b in zip(lo, hi))))
            messages.append((source, dest, tuple(where)))
    kind = None if not many else type(x) if isinstance(x, tuple) else list
    grid = comm if isinstance(comm, DeviceCart) else None
    return a.info, arrays, _Halo(tuple(local), tuple(messages), kind, tag,
                                 grid)


def halo_exchange(x, comm, width=1, *, tag=0, token=None):
    """Fill the halo of this rank's block of a Cartesian grid, in one call.

    The grid is decomposed over a Cartesian communicator; the halo comes from
    the neighbouring blocks. MPI_Irecv and MPI_Isend of every message, one
    MPI_Waitall (``neighbor_exchange``, 32 messages per call). ``x`` is the
    local block including its halo: along grid axis ``i`` its first and last
    ``width[i]`` cells are halo, the rest this rank's own cells. Every halo
    piece (faces, edges and corners) comes from the neighbour in that
    direction, periodic or not as ``comm`` says; where there is none
    (``MPI.PROC_NULL``) the halo keeps ``x``'s values. Axes after the grid's N
    are carried whole. One message per neighbour and dtype (the pieces of
    several arrays of one dtype travel together); a block that is its own
    neighbour (an axis of size 1, periodic) copies its rim locally.
    Differentiable: the transpose sends each halo's cotangent back and adds it
    into the owner's rim. Under ``vmap``, one exchange for the whole batch.

    Args:
        x: the block with its halo (at least N axes), or a list or tuple.
        comm: an mpi4py Cartesian communicator (``Create_cart``).
        width: the halo's width: an int, or one int per grid axis (0: none).
        tag: the messages use tags ``tag`` to ``tag + messages - 1``.
        token: a token to order this call after (optional, never needed).

    Returns:
        ``x`` with its halo filled (a list or tuple where ``x`` is one).

    Raises:
        TypeError: ``comm`` has no Cartesian topology, or ``width`` is not a
            static int (or a sequence of them).
        ValueError: a width is negative, ``width`` has not N entries, ``x`` has
            fewer than N axes or an axis shorter than three widths, or a tag is
            out of range.
        jax.errors.JaxRuntimeError: a neighbour's face has another size.

    Example:
        A periodic 2-D grid over all ranks, 64 x 64 cells and a one-cell halo:

            dims = MPI.Compute_dims(MPI.COMM_WORLD.Get_size(), 2)
            cart = MPI.COMM_WORLD.Create_cart(dims, periods=[True, True])
            u = mpx.halo_exchange(jnp.zeros((66, 66)), cart)
    """
    info, arrays, halo = _halo_setup("halo_exchange", x, comm, width, tag,
                                     token)
    out, sends = halo.pack(arrays)
    sources, dests, avals = halo.pairs(sends)
    got = []
    for start in range(0, len(sends), PAIRS_PER_CALL):
        stop = start + PAIRS_PER_CALL
        got += neighbor_exchange_p.bind(
            *sends[start:stop], comm=info, sources=_peers(sources[start:stop]),
            dests=_peers(dests[start:stop]), tag=halo.tag + start,
            recv_avals=tuple(avals[start:stop]))
    return halo.fill(out, got)


def _neighbours(comm, fn: str):
    """(sources, dests, cartesian) of a topology communicator, in MPI's
    neighbourhood order."""
    if isinstance(comm, DeviceCart):  # 2N face neighbours, as Cartesian
        nbrs = []
        for i in range(len(comm.dims)):
            for sign in (-1, 1):
                nbrs.append(comm.neighbours(tuple(
                    sign if j == i else 0 for j in range(len(comm.dims)))))
        return tuple(nbrs), tuple(nbrs), True
    topo = comm.Get_topology() if comm is not None else MPI.UNDEFINED
    if topo == MPI.DIST_GRAPH:
        sources, dests, _ = comm.Get_dist_neighbors()
        return tuple(sources), tuple(dests), False
    if topo == MPI.GRAPH:
        nbrs = tuple(comm.Get_neighbors(comm.Get_rank()))
        return nbrs, nbrs, False
    if topo == MPI.CART:
        nbrs = []
        for i in range(comm.Get_dim()):
            nbrs += comm.Shift(i, 1)  # (negative, positive) neighbour
        return tuple(nbrs), tuple(nbrs), True
    what = "None (the default communicator has no topology)" if comm is None \
        else f"a communicator without a topology ({comm!r})"
    raise TypeError(
        f"{fn}: comm must be a distributed-graph, graph or Cartesian "
        f"communicator (Create_dist_graph_adjacent, Create_graph, "
        f"Create_cart), got {what}")


def _counts(counts, n: int, fn: str, name: str, whose: str) -> tuple:
    if not isinstance(counts, (list, tuple, np.ndarray)):
        raise TypeError(f"{fn}: {name} must be a sequence of static ints, got "
                        f"{type(counts).__name__}: {counts!r}")
    counts = tuple(_static_count(c, fn, f"{name}[{i}]")
                   for i, c in enumerate(counts))
    if len(counts) != n:
        raise ValueError(f"{fn}: {name} has {len(counts)} entries but this "
                         f"rank has {n} {whose}: {name}={list(counts)}")
    return counts


@dataclass(frozen=True)
class _Neighbourhood:
    """neighbor_alltoallv's checked arguments (and ineighbor_alltoallv's):
    the blocks to send, the neighbours in MPI's order, and how the blocks
    received make the result."""

    info: object
    x: object
    blocks: list
    sources: tuple
    dests: tuple
    recvcounts: tuple
    cartesian: bool
    tag: int

    @property
    def received(self):
        return _Received(len(self.sources), tuple(self.x.shape[1:]),
                         self.x.dtype, self.cartesian)

    def pairs(self):
        """A Cartesian exchange's pairs, (sources, dests, recv avals): pair
        k sends block k towards neighbour k and receives, from the opposite
        neighbour k ^ 1, that rank's block sent the same way (tag + k tells
        the two directions apart where both neighbours are one rank: a
        periodic axis of size 1 or 2)."""
        n = len(self.dests)
        return ([self.sources[k ^ 1] for k in range(n)], list(self.dests),
                [_row_aval(self.x, self.recvcounts[k ^ 1]) for k in range(n)])

    def graph(self, j):
        """A graph's exchange j: it receives from in-neighbour j and sends
        to out-neighbour j (MPI.PROC_NULL and no rows past either list's
        end): (block, source, dest, recv aval)."""
        inn, out = j < len(self.sources), j < len(self.dests)
        # An empty block is x's, so that its tangent is x's too.
        return (self.blocks[j] if out else lax.slice_in_dim(self.x, 0, 0),
                self.sources[j] if inn else MPI.PROC_NULL,
                self.dests[j] if out else MPI.PROC_NULL,
                _row_aval(self.x, self.recvcounts[j] if inn else 0))


def _alltoallv_setup(fn, x, sendcounts, recvcounts, comm, tag, token):
    """Every check of neighbor_alltoallv's (and ineighbor_alltoallv's)
    arguments, and their plan."""
    a = Args(fn, comm, token, grid_ok=True)
    sources, dests, cartesian = _neighbours(comm, fn)
    x = a.array(x)
    if x.ndim == 0:
        raise ValueError(f"{fn}: x must have at least one axis (the rows "
                         f"counted by sendcounts), got a scalar")
    sendcounts = _counts(sendcounts, len(dests), fn, "sendcounts",
                         "out-neighbours (destinations)")
    recvcounts = _counts(recvcounts, len(sources), fn, "recvcounts",
                         "in-neighbours (sources)")
    if sum(sendcounts) != x.shape[0]:
        raise ValueError(
            f"{fn}: sum(sendcounts) = {sum(sendcounts)} but x has "
            f"{x.shape[0]} rows (shape {tuple(x.shape)}): "
            f"sendcounts={list(sendcounts)}")
    for name, n in (("in-neighbours", len(sources)),
                    ("out-neighbours", len(dests))):
        if n > PAIRS_PER_CALL:
            raise ValueError(f"{fn}: at most {PAIRS_PER_CALL} "
                             f"{name} per rank, this rank has {n}")
    tag = a.tag(tag)
    if cartesian and dests:
        a.tag(tag + len(dests) - 1,
              f"tag + {len(dests) - 1} (the last direction's tag)")
    a.done()
    return _Neighbourhood(a.info, x, _blocks(x, sendcounts), sources, dests,
                          recvcounts, cartesian, tag)


def _blocks(x, sendcounts):
    """x cut into the blocks sent to each out-neighbour."""
    offsets = np.concatenate([[0], np.cumsum(sendcounts, dtype=np.int64)])
    return [lax.slice_in_dim(x, int(offsets[j]), int(offsets[j + 1]))
            for j in range(len(sendcounts))]


def _row_aval(x, rows):
    return ((rows, *x.shape[1:]), np.dtype(x.dtype))


@dataclass(frozen=True)
class _Received:
    """neighbor_alltoallv's result from the blocks received: in the order
    of the in-neighbours, ``n`` of them; `rest` and `dtype` make the empty
    result of a rank without any."""

    n: int
    rest: tuple
    dtype: object
    cartesian: bool

    def __call__(self, got):
        # A Cartesian exchange's pair k receives the block sent the same
        # way, from neighbour k ^ 1: in-neighbour i's block is pair i ^ 1's.
        received = [got[i ^ 1] if self.cartesian else got[i]
                    for i in range(self.n)]
        if not received:  # no in-neighbours
            return lax.full((0, *self.rest), 0, self.dtype)
        if len(received) == 1:
            return received[0]
        return lax.concatenate(received, 0)

    def finish(self, results, keep):
        """ineighbor_alltoallv's wait: every request's messages, in order
        (on a graph, exchange j's is in-neighbour j's block)."""
        return self([y for ys in results for y in ys])


def neighbor_alltoallv(x, sendcounts, recvcounts, *, comm, tag=0,
                       token=None):
    """Exchange variable-size blocks with the topology's neighbours.

    MPI_Neighbor_alltoallv's exchange, as MPI_Irecv and MPI_Isend to the
    neighbours only and one MPI_Waitall: the cost grows with the number of
    neighbours, not of ranks. Block ``j`` of ``x`` (``sendcounts[j]`` rows)
    goes to out-neighbour ``j``; block ``i`` of the result (``recvcounts[i]``
    rows) comes from in-neighbour ``i``, in MPI's neighbourhood order: a
    distributed graph's ``Get_dist_neighbors()``, a graph's
    ``Get_neighbors(rank)``, a Cartesian communicator's 2N face neighbours (per
    dimension the negative, then the positive one). A block from
    ``MPI.PROC_NULL`` is zeros. Differentiable (the reverse exchange, counts
    swapped) and batchable.

    Args:
        x: the blocks to send, shape ``(sum(sendcounts), *s)``.
        sendcounts: the rows sent to each out-neighbour (static ints >= 0).
        recvcounts: the rows received from each in-neighbour (static ints).
        comm: a communicator with a (distributed) graph or Cartesian topology.
        tag: the messages' tag (Cartesian: ``tag`` to ``tag + 2N - 1``).
        token: a token to order this call after (optional, never needed).

    Returns:
        The blocks received, in the in-neighbours' order: ``(sum(recvcounts),
        *s)``.

    Raises:
        TypeError: ``comm`` has no topology, or a count is not a static int.
        ValueError: ``x`` is a scalar or has not ``sum(sendcounts)`` rows, a
            count list has not one entry >= 0 per neighbour, a rank has more
            than 32 in- or out-neighbours, or a tag is out of range.
        jax.errors.JaxRuntimeError: a block has another size than its count.

    Example:
        A ring as a distributed graph, rank r sending r + 1 rows right and 2
        left:

            left, right = (rank - 1) % size, (rank + 1) % size
            ring = MPI.COMM_WORLD.Create_dist_graph_adjacent(
                [left, right], [left, right])
            x = jnp.ones((2 + rank + 1, 3))
            y = mpx.neighbor_alltoallv(x, [2, rank + 1], [left + 1, 2],
                                       comm=ring)   # (left + 3, 3) rows
    """
    n = _alltoallv_setup("neighbor_alltoallv", x, sendcounts, recvcounts, comm,
                         tag, token)
    if n.cartesian:
        sources, dests, avals = n.pairs()
        got = neighbor_exchange_p.bind(
            *n.blocks, comm=n.info, sources=_peers(sources),
            dests=_peers(dests), tag=n.tag, recv_avals=tuple(avals))
    elif n.sources or n.dests:
        got = neighbor_alltoallv_p.bind(
            *n.blocks, comm=n.info, sources=n.sources, dests=n.dests,
            tag=n.tag, recv_avals=tuple(_row_aval(n.x, c) for c in n.recvcounts))
    else:
        got = []
    return n.received(got)


# ---- the non-blocking forms --------------------------------------------------
# Each is a Request made of ineighbor_exchange requests (_requests.compose):
# the start makes the blocking op's checks, packs its messages and posts
# them; the wait unpacks them as the blocking op does. Derivatives and vmap
# are those of the parts: ineighbor_exchange's JVP (a tangent request beside
# each), its transpose (a backward request per request, all started where
# the forward wait was), its batching (one request for the whole batch).

def _exchanges(info, sends, sources, dests, avals, tag):
    """The ineighbor_exchange starts of messages paired as in
    neighbor_exchange (pair i with tag + i), 15 pairs per request; one
    without pairs where there is no message, so that every start has a
    request (a Request never waited is then reported as any other)."""
    starts = []
    for a in range(0, len(sends), PAIRS_PER_REQUEST):
        b = a + PAIRS_PER_REQUEST
        starts.append(("ineighbor_exchange", tuple(sends[a:b]), dict(
            comm=info, sources=_peers(sources[a:b]), dests=_peers(dests[a:b]),
            tag=tag + a, recv_avals=tuple(avals[a:b]))))
    return starts or [("ineighbor_exchange", (), dict(
        comm=info, sources=(), dests=(), tag=tag, recv_avals=()))]


@_dispatch.start()
def ihalo_exchange(x, comm, width=1, *, tag=0, token=None) -> Request:
    """Start filling the halo of this rank's block of a Cartesian grid.

    The non-blocking form of ``halo_exchange``, with its arguments and checks:
    the start makes the local periodic copies, cuts the rims and posts every
    message (MPI_Irecv and MPI_Isend; an ``ineighbor_exchange`` request per
    15); the wait writes the received pieces into the halo and returns what
    ``halo_exchange`` returns, bitwise. Between the two, work that does not
    read the halo runs while the messages travel.

    Args:
        x: the block with its halo (at least N axes), or a list or tuple.
        comm: an mpi4py Cartesian communicator (``Create_cart``).
        width: the halo's width: an int, or one int per grid axis (0: none).
        tag: the messages use tags ``tag`` to ``tag + messages - 1``.
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns ``x`` with its halo filled, as
        ``halo_exchange`` does.

    Raises:
        TypeError: ``comm`` has no Cartesian topology, or ``width`` is not a
            static int (or a sequence of them).
        ValueError: a width is negative, ``width`` has not N entries, ``x`` has
            fewer than N axes or an axis shorter than three widths, or a tag is
            out of range.

    Example:
        The interior of a stencil updated while the halo travels:

            req = mpx.ihalo_exchange(u, cart)
            inner = stencil(u)[1:-1, 1:-1]  # reads no halo
            u = mpx.wait(req)               # halo filled
    """
    info, arrays, halo = _halo_setup("ihalo_exchange", x, comm, width, tag,
                                     token)
    out, sends = halo.pack(arrays)
    sources, dests, avals = halo.pairs(sends)
    return compose("ihalo_exchange", _exchanges(
        info, sends, sources, dests, avals, halo.tag), halo.finish, keep=out)


@_dispatch.start()
def ineighbor_alltoallv(x, sendcounts, recvcounts, *, comm, tag=0,
                        token=None) -> Request:
    """Start exchanging variable-size blocks with the topology's neighbours.

    The non-blocking form of ``neighbor_alltoallv``, with its arguments, checks
    and neighbour order, made of ``ineighbor_exchange`` requests (MPI_Irecv and
    MPI_Isend): on a Cartesian communicator one per 15 directions, on a graph
    one per in- or out-neighbour, each with the one tag ``tag`` (repeated edges
    between two ranks match in the order each side lists them). Block ``j`` of
    ``x`` (``sendcounts[j]`` rows) goes to out-neighbour ``j``; block ``i`` of
    the result (``recvcounts[i]`` rows) comes from in-neighbour ``i``, in MPI's
    neighbourhood order: a distributed graph's ``Get_dist_neighbors()``, a
    graph's ``Get_neighbors(rank)``, a Cartesian communicator's 2N face
    neighbours (per dimension the negative, then the positive one). A block
    from ``MPI.PROC_NULL`` is zeros.

    Args:
        x: the blocks to send, shape ``(sum(sendcounts), *s)``.
        sendcounts: the rows sent to each out-neighbour (static ints >= 0).
        recvcounts: the rows received from each in-neighbour (static ints).
        comm: a communicator with a (distributed) graph or Cartesian topology.
        tag: the messages' tag (Cartesian: ``tag`` to ``tag + 2N - 1``).
        token: a token to order this call after (optional, never needed).

    Returns:
        A ``Request``; ``wait`` on it returns the blocks received, in the in-
        neighbours' order, as ``neighbor_alltoallv`` does.

    Raises:
        TypeError: ``comm`` has no topology, or a count is not a static int.
        ValueError: ``x`` is a scalar or has not ``sum(sendcounts)`` rows, a
            count list has not one entry >= 0 per neighbour, a rank has more
            than 32 in- or out-neighbours, or a tag is out of range.

    Example:
        A ring as a distributed graph:

            req = mpx.ineighbor_alltoallv(x, [2, rank + 1], [left + 1, 2],
                                          comm=ring)
            z = compute(w)                  # while the blocks travel
            y = mpx.wait(req)
    """
    n = _alltoallv_setup("ineighbor_alltoallv", x, sendcounts, recvcounts,
                         comm, tag, token)
    if n.cartesian:  # the pairs of neighbor_alltoallv's exchange
        starts = _exchanges(n.info, n.blocks, *n.pairs(), n.tag)
    else:
        # Every message with the one tag: each rank posts its receives from
        # a peer, and its sends to it, in the order of its lists, and MPI
        # matches them in that order. (One exchange of every pair would
        # give pair i tag + i, which a rank's peers, listing it at other
        # places, would not use.)
        starts = []
        for j in range(max(len(n.sources), len(n.dests))):
            block, source, dest, aval = n.graph(j)
            starts.append(("ineighbor_exchange", (block,), dict(
                comm=n.info, sources=(source,), dests=(dest,), tag=n.tag,
                recv_avals=(aval,))))
        starts = starts or _exchanges(n.info, [], [], [], [], n.tag)
    return compose("ineighbor_alltoallv", starts, n.received.finish)
