"""Point-to-point operations as primitives (csrc/p2p.c), one section per
op: its shape rule, JVP, transpose and batching rule, and beside them its
non-blocking start's row (csrc/starts.c): the start's buffers, results and
backward request. Every result is a message from a peer (``messages``: typed
inside shard_map as varying over every manual axis). Transposed messages
travel in their own tag space."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _jax_compat as jc
from . import _registry
from ._primitives import (Backward, aval, cotangent, define_blocking,
                          define_start, every_result, linear, to_front,
                          wait_p, zeros)
from ._validate import reserved_tag_bit


def _no_wildcards(fn, source=None, tag=None):
    if source == MPI.ANY_SOURCE or tag == MPI.ANY_TAG:
        what = "MPI.ANY_SOURCE" if source == MPI.ANY_SOURCE else "MPI.ANY_TAG"
        raise NotImplementedError(
            f"jaxmpi.{fn}: derivatives through a receive with {what} are not "
            "supported: the derivative's message must be matched to a rank "
            "and tag known when the program is traced. Pass the source rank "
            "and tag explicitly."
        )


def _backward_tag(tag, comm):
    return tag ^ reserved_tag_bit(comm.tag_ub)


# ---- send -----------------------------------------------------------------
send_p = define_blocking("send", lambda x, *, comm, dest, tag: [],
                         messages=True)


def _send_transpose(cts, x, *, comm, dest, tag):
    # The cotangent of what was sent comes back from dest.
    return recv_p.bind(zeros(x), comm=comm, source=dest,
                       tag=_backward_tag(tag, comm), status=0)


def _p2p_batcher(prim):
    """Point-to-point: the batch axis goes first on both sides, one message
    for the whole batch (all ranks must batch alike)."""

    def rule(args, dims, **params):
        args = [to_front(a, d) for a, d in zip(args, dims)]
        return prim.bind(*args, **params), [0] * (prim is not send_p)

    jc.batching.primitive_batchers[prim] = rule


linear(send_p, _send_transpose)
_p2p_batcher(send_p)


# isend: buffers [x]; no results. Backward: x's cotangent comes from dest.
def _isend_bw_start(cts, bufs, spec):
    comm = spec.param("comm")
    params = dict(comm=comm, source=spec.param("dest"),
                  tag=_backward_tag(spec.param("tag"), comm), status=0)
    h, y = irecv_p.bind(zeros(bufs[0]), rid=0, **params)
    return h, [y]


def _isend_bw_finish(bh, bbufs, operands, spec):
    comm = spec.param("comm")
    params = dict(comm=comm, source=spec.param("dest"),
                  tag=_backward_tag(spec.param("tag"), comm), status=0)
    back = _registry.STARTS["irecv"].wait_spec((), params)
    (y,) = wait_p.bind(bh, *bbufs, spec=back)
    return [y]


isend_p = define_start(
    "isend", buffers=lambda x, *, comm, dest, tag: [x], aliases={0: 0},
    results=(), backward=Backward(_isend_bw_start, _isend_bw_finish),
    messages=True)

# ---- recv: the result's shape and dtype come from the template x ----------
recv_p = define_blocking("recv", lambda x, *, comm, source, tag, status: [x],
                         aliases={0: 0}, messages=True)


def _recv_transpose(cts, x, *, comm, source, tag, status):
    _no_wildcards("recv", source, tag)
    send_p.bind(cotangent(cts[0], x), comm=comm, dest=source,
                tag=_backward_tag(tag, comm))
    return [zeros(x)]  # the template's data is never used


linear(recv_p, _recv_transpose,
       check=lambda *, source, **_: _no_wildcards("recv", source))
_p2p_batcher(recv_p)


# irecv: buffers [y] (aliased to the template); result y. Backward: y's
# cotangent goes back to source.
def _irecv_bw_params(spec):
    comm = spec.param("comm")
    return dict(comm=comm, dest=spec.param("source"),
                tag=_backward_tag(spec.param("tag"), comm))


def _irecv_bw_start(cts, bufs, spec):
    params = _irecv_bw_params(spec)
    h, xs = isend_p.bind(cts[0], rid=0, **params)
    return h, [xs]


def _irecv_bw_finish(bh, bbufs, operands, spec):
    params = _irecv_bw_params(spec)
    back = _registry.STARTS["isend"].wait_spec((), params)
    wait_p.bind(bh, *bbufs, spec=back)
    return [zeros(operands[0])]  # the template's data is never used


irecv_p = define_start(
    "irecv", buffers=lambda x, *, comm, source, tag, status: [x],
    aliases={0: 0}, results=(0,),
    jvp_check=lambda *, source, tag, **_: _no_wildcards("irecv", source, tag),
    backward=Backward(_irecv_bw_start, _irecv_bw_finish), messages=True)

# ---- sendrecv -------------------------------------------------------------
sendrecv_p = define_blocking(
    "sendrecv",
    lambda x, template, *, comm, source, dest, sendtag, recvtag, status: [
        template
    ],
    aliases={1: 0}, messages=True,
)


def _sendrecv_transpose(cts, x, template, *, comm, source, dest, sendtag,
                        recvtag, status):
    # Roles swapped: the cotangent goes back to source, ours comes from dest.
    # With recvtag=MPI.ANY_TAG the message is taken to carry our own sendtag
    # (every rank calling the same sendrecv, the usual exchange pattern).
    _no_wildcards("sendrecv", source)
    back = sendtag if recvtag == MPI.ANY_TAG else recvtag
    like = x if jc.ad.is_undefined_primal(x) else jnp.zeros_like(x)
    (xbar,) = sendrecv_p.bind(
        cotangent(cts[0], template), zeros(like), comm=comm, source=dest,
        dest=source, sendtag=_backward_tag(back, comm),
        recvtag=_backward_tag(sendtag, comm), status=0)
    return [xbar if jc.ad.is_undefined_primal(x) else None,
            zeros(template) if jc.ad.is_undefined_primal(template) else None]


def _sendrecv_batcher(args, dims, **params):
    (x, template), (dx, dt) = args, dims
    if dx is None:  # only the template is batched: one exchange, broadcast
        (y,) = sendrecv_p.bind(x, jnp.take(template, 0, axis=dt), **params)
        n = template.shape[dt]
        return [jnp.broadcast_to(y, (n, *y.shape))], [0]
    x = to_front(x, dx)
    n = x.shape[0]
    if dt is None:
        template = jnp.broadcast_to(template, (n, *template.shape))
    else:
        template = to_front(template, dt)
    return sendrecv_p.bind(x, template, **params), [0]


linear(sendrecv_p, _sendrecv_transpose,
       check=lambda *, source, **_: _no_wildcards("sendrecv", source))
jc.batching.primitive_batchers[sendrecv_p] = _sendrecv_batcher


# isendrecv: buffers [xs, y] (aliased to x and the template); result y.
# Backward: roles swapped, as sendrecv's transpose.
def _isendrecv_bw_params(spec):
    comm = spec.param("comm")
    sendtag, recvtag = spec.param("sendtag"), spec.param("recvtag")
    back = sendtag if recvtag == MPI.ANY_TAG else recvtag
    return dict(comm=comm, source=spec.param("dest"),
                dest=spec.param("source"),
                sendtag=_backward_tag(back, comm),
                recvtag=_backward_tag(sendtag, comm), status=0)


def _isendrecv_bw_start(cts, bufs, spec):
    # Forward buffers [x-shaped, y-shaped]; the backward request sends y's
    # cotangent and receives into an x-shaped buffer: its buffers are
    # [y-shaped, x-shaped], handed back in the forward order.
    h, cs, bx = isendrecv_p.bind(cts[0], zeros(bufs[0]), rid=0,
                                 **_isendrecv_bw_params(spec))
    return h, [bx, cs]


def _isendrecv_bw_finish(bh, bbufs, operands, spec):
    params = _isendrecv_bw_params(spec)
    bx, cs = bbufs
    back = _registry.STARTS["isendrecv"].wait_spec((), params)
    (xbar,) = wait_p.bind(bh, cs, bx, spec=back)
    return [xbar, zeros(operands[1])]


isendrecv_p = define_start(
    "isendrecv",
    buffers=lambda x, t, *, comm, source, dest, sendtag, recvtag, status: [
        x, t],
    aliases={0: 0, 1: 1}, results=(1,),
    jvp_check=lambda *, source, **_: _no_wildcards("isendrecv", source),
    backward=Backward(_isendrecv_bw_start, _isendrecv_bw_finish),
    messages=True)

# ---- neighbor_exchange: many sendrecvs in one call --------------------------
# Pair i sends x_i to dests[i] and receives y_i (shape and dtype recv_avals[i])
# from sources[i], both with tag + i; the C core posts every receive and send
# at once and waits once. The recv shapes are parameters, not templates.
def _received(*xs, comm, sources, dests, tag, recv_avals):
    """The variadic exchanges' results: of the shapes and dtypes
    `recv_avals` gives."""
    return [aval(shape, dtype) for shape, dtype in recv_avals]


neighbor_exchange_p = define_blocking("neighbor_exchange", _received,
                                      messages=True)


def _exchange_rules(prim):
    """Transpose and batching of the variadic exchanges (neighbor_exchange,
    neighbor_alltoallv), which differ only in how the C core matches
    messages."""

    def transpose(cts, *xs, comm, sources, dests, tag, recv_avals):
        # Every message reversed: y_i's cotangent goes back to sources[i]
        # (in the order of sources, as the sender listed its dests), and
        # x_j's comes from dests[j], in the backward tag space.
        like = [aval(shape, dtype) for shape, dtype in recv_avals]
        back = [cotangent(ct, a) for ct, a in zip(cts, like)]
        xbars = prim.bind(
            *back, comm=comm, sources=dests, dests=sources,
            tag=_backward_tag(tag, comm),
            recv_avals=tuple((x.aval.shape, x.aval.dtype) for x in xs))
        return [xb if jc.ad.is_undefined_primal(x) else None
                for xb, x in zip(xbars, xs)]

    def batcher(args, dims, *, recv_avals, **params):
        # One exchange for the whole batch: every buffer gets the batch in
        # front.
        n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        args = [to_front(a, d) if d is not None else
                jnp.broadcast_to(a, (n, *a.shape)) for a, d in zip(args, dims)]
        recv_avals = tuple(((n, *shape), dtype) for shape, dtype in recv_avals)
        outs = prim.bind(*args, recv_avals=recv_avals, **params)
        return outs, [0] * len(outs)

    linear(prim, transpose)
    jc.batching.primitive_batchers[prim] = batcher


_exchange_rules(neighbor_exchange_p)


# ineighbor_exchange: buffers [*xs, *ys], results ys. Backward: a request of
# every pair reversed (y_i's cotangent goes back to sources[i], x_i's comes
# from dests[i], in the backward tag space, as neighbor_exchange's
# transpose), started where the forward wait was and waited where the
# forward start was. Several exchanges started together (ihalo_exchange's
# parts, ineighbor_alltoallv's one-pair exchanges of a graph) are thus all
# posted before any is waited in the backward program too: a blocking
# exchange per request could wait for a message its peer sends only in a
# later one.
def _inx_bw_params(spec, xs):
    comm = spec.param("comm")
    return dict(comm=comm, sources=spec.param("dests"),
                dests=spec.param("sources"),
                tag=_backward_tag(spec.param("tag"), comm),
                recv_avals=tuple((tuple(x.shape), np.dtype(x.dtype))
                                 for x in xs))


def _inx_bw_start(cts, bufs, spec):
    # Forward buffers [xs, ys]; the backward request sends the ys'
    # cotangents and receives into xs-shaped buffers: its buffers [ys', xs']
    # are handed back in the forward order.
    n = len(cts)
    h, *bb = ineighbor_exchange_p.bind(*cts, rid=0,
                                       **_inx_bw_params(spec, bufs[:n]))
    return h, [*bb[n:], *bb[:n]]


def _inx_bw_finish(bh, bbufs, operands, spec):
    n = len(operands)
    xs, cs = bbufs[:n], bbufs[n:]
    params = _inx_bw_params(spec, xs)
    back = _registry.STARTS["ineighbor_exchange"].wait_spec(cs, params)
    return list(wait_p.bind(bh, *cs, *xs, spec=back))


ineighbor_exchange_p = define_start(
    "ineighbor_exchange",
    buffers=lambda *xs, **params: [*xs, *_received(*xs, **params)],
    aliases=lambda nops, **_: {i: i for i in range(nops)},
    results=lambda nops, **_: range(nops, 2 * nops),
    backward=Backward(_inx_bw_start, _inx_bw_finish), finish=every_result,
    messages=True)


# ---- neighbor_alltoallv: a sparse neighbourhood, one tag ---------------------
# Result i (shape and dtype recv_avals[i]) comes from sources[i], operand j
# goes to dests[j], every message with the one tag `tag`: MPI's
# non-overtaking order matches repeated edges between two ranks in the order
# each side lists them (a distributed graph's in- and out-neighbours may
# differ in number). The C core posts every receive and send, waits once.
neighbor_alltoallv_p = define_blocking("neighbor_alltoallv", _received,
                                       messages=True)


_exchange_rules(neighbor_alltoallv_p)
