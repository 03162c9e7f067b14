"""Every jaxmpi operation as a JAX primitive, one section per op.

Each section holds what JAX needs to know of the op, side by side: its shape
rule (abstract evaluation), its JVP, its transpose and its batching rule.
Shared machinery turns a shape rule into a primitive with the ordered effect,
an eager implementation and a lowering to the op's FFI handler in the C core.

Autodiff convention (docs/autodiff.md): every op's transpose is its exact
adjoint, except allreduce, whose result is replicated: by default its
cotangent is taken as counted once (transpose = identity, as in mpi4jax and
JPI); ``adjoint="sum"`` gives the exact adjoint (allreduce of cotangents).
Transposed point-to-point messages travel in their own tag space.
"""

from __future__ import annotations

import inspect
import os
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _core
from ._jax_compat import (Primitive, ShapedArray, ad, apply_primitive, batching,
                          lowering_user_frames, mlir)
from ._effect import join_token_lowering, lower_with_token, mpi_effect
from ._region import apply_primitive as region_apply
from ._validate import reserved_tag_bit

PRIMITIVES: dict[str, Primitive] = {}

# Parameters that travel to the C handler as FFI attributes (all int64:
# handles and addresses as their 64-bit pattern, which MLIR's unsigned
# attributes cannot hold above 2**63).
_HANDLE_ATTRS = ("comm", "op", "status")
_INT_ATTRS = ("root", "source", "dest", "tag", "sendtag", "recvtag")
_ARRAY_ATTRS = ("sources", "dests", "counts", "sendcounts", "recvcounts")
# Every attribute a handler may receive (the C core's JM_ATTRS, checked at
# import: _core.check_table), and those that are arrays.
FFI_ATTRS = (*_HANDLE_ATTRS, *_INT_ATTRS, *_ARRAY_ATTRS, "site")
ARRAY_ATTRS = _ARRAY_ATTRS
# C handlers that a primitive's lowering picks besides its own name
# (reduce_scatter_p: equal blocks go to reduce_scatter_block).
EXTRA_TARGETS = ("reduce_scatter_block",)

# XLA:CPU and XLA:GPU (CUDA) lower every op to the same custom call name; the
# C core registers a handler for each platform (csrc/cuda_staging.c moves GPU
# data).
LOWERING_PLATFORMS = ("cpu", "cuda")


def _as_int64(value: int) -> np.int64:
    value &= 0xFFFFFFFFFFFFFFFF
    return np.int64(value - (1 << 64) if value >= (1 << 63) else value)


def _attributes(params) -> dict:
    attrs = {}
    for k, v in params.items():
        if k in _HANDLE_ATTRS:
            attrs[k] = _as_int64(int(getattr(v, "handle", v)))
        elif k in _INT_ATTRS:
            attrs[k] = np.int64(v)
        elif k in _ARRAY_ATTRS:
            attrs[k] = np.asarray(v, np.int64)
    return attrs


def _define(name: str, shape_rule, aliases=None) -> Primitive:
    """A primitive for op `name` whose results have the avals shape_rule gives
    (`aliases`: {operand: result} sharing a buffer, as XLA's
    operand_output_aliases, or a function of the op's parameters giving
    that, for ops whose shapes differ between ranks)."""
    prim = Primitive(f"jaxmpi_{name}")
    prim.multiple_results = True
    prim.def_impl(partial(region_apply, prim))
    prim.def_effectful_abstract_eval(
        lambda *avals, **params: (shape_rule(*avals, **params), {mpi_effect})
    )
    def rule_for(aliases):
        return jax.ffi.ffi_lowering(f"jaxmpi_{name}", has_side_effect=True,
                                    **({"operand_output_aliases": aliases}
                                       if aliases else {}))

    rule = None if callable(aliases) else rule_for(aliases)

    def lowering(ctx, *operands, **params):
        lower = rule or rule_for(aliases(**params))
        attrs = _attributes(params)
        site = _site(ctx)
        if site:
            attrs["site"] = np.int64(site)
        return lower_with_token(ctx, lower, *operands, **attrs)

    for platform in LOWERING_PLATFORMS:
        mlir.register_lowering(prim, lowering, platform=platform,
                               **_UNCACHED)
    PRIMITIVES[name] = prim
    return prim


# JAX >= 0.7 lowers equal equations (same params and shapes) once per module
# and calls the one body from each; ours are lowered each in place, so that
# each call carries its own source line (`site`).
_UNCACHED = ({"cacheable": False} if "cacheable" in
             inspect.signature(mlir.register_lowering).parameters else {})

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _site(ctx) -> int:
    """An id of the Python line that made this call (the innermost frame
    of the user's code, outside JAX and jaxmpi), registered with the C core
    for its messages; 0 when JAX kept no source information. Done once per
    lowering, so the per-call path carries one int64 attribute and no
    strings. Eager calls reuse the executable compiled for the first call
    of the same op and shapes, so they name that call's line."""
    try:
        for frame in lowering_user_frames(ctx):
            if frame.file_name.startswith(_PACKAGE_DIR):
                continue
            name = frame.file_name
            try:
                rel = os.path.relpath(name)
                if not rel.startswith(".."):
                    name = rel
            except ValueError:
                pass
            text = f"{name}:{frame.start_line} ({frame.function_name})"
            return _core.get().register_site(text)
    except Exception:  # source information is a convenience, never an error
        return 0
    return 0


def _aval(shape, dtype):
    return ShapedArray(tuple(shape), np.dtype(dtype))


# ---- shared autodiff and batching helpers ----------------------------------


def _zeros(x):
    """Zeros shaped like x (a value, an aval or an undefined primal)."""
    aval = x.aval if hasattr(x, "aval") else x
    return jnp.zeros(aval.shape, aval.dtype)


def _zeros_from(ct, like):
    """Zeros shaped like `like`, computed linearly from ct (from none of its
    values), so that transposing the transpose keeps the same communication
    on every rank."""
    aval = like.aval if hasattr(like, "aval") else like
    if type(ct) is ad.Zero:
        return _zeros(aval)
    none = jnp.sum(jnp.ravel(ct)[:0])
    return jnp.broadcast_to(none.astype(aval.dtype), aval.shape)


def _ct(ct, like):
    """A cotangent as an array: every rank must take part in the transposed
    communication, also where its cotangent is a symbolic zero."""
    if type(ct) is ad.Zero:
        return _zeros(like)
    return ct


def _linear(prim, transpose, check=None):
    """prim is linear in its operands: its JVP applies prim to the tangents
    (the same communication, so forward mode works everywhere)."""

    def jvp(primals, tangents, **params):
        if check is not None:
            check(**params)
        out = prim.bind(*primals, **params)
        if all(type(t) is ad.Zero for t in tangents):
            return out, [ad.Zero.from_primal_value(o) for o in out]
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return out, prim.bind(*tangents, **params)

    ad.primitive_jvps[prim] = jvp
    ad.primitive_transposes[prim] = transpose


def _front(x, d):
    """Move batch axis d of x to the front (d None: not batched)."""
    return x if d == 0 or d is None else jnp.moveaxis(x, d, 0)


def _elementwise_batcher(prim):
    """For ops that act on each element independently: one call for the
    whole batch, the batch axis stays where it is."""

    def rule(args, dims, **params):
        return prim.bind(*args, **params), [dims[0]] * len(prim.abstract_eval(
            *[ShapedArray(a.shape, a.dtype) for a in args], **params)[0])

    batching.primitive_batchers[prim] = rule


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


def _sum_op(dtype):
    from . import _core, _validate

    return _validate.reduction_op(MPI.SUM, dtype, "allreduce", _core.get().half_ops)


# ---- allreduce: every rank gets the reduction of all ranks' x -------------
# In place: the result shares the input's buffer (MPI_IN_PLACE in the core;
# reduce, scan, bcast and alltoall too, gather off the root, recv and
# sendrecv their template's).
allreduce_p = _define("allreduce", lambda x, *, comm, op, adjoint: [x],
                      aliases={0: 0})


def _allreduce_jvp(primals, tangents, *, comm, op, adjoint):
    (x,), (t,) = primals, tangents
    (y,) = allreduce_p.bind(x, comm=comm, op=op, adjoint=adjoint)
    if type(t) is ad.Zero:
        return [y], [ad.Zero.from_primal_value(y)]
    t = ad.instantiate_zeros(t)
    total = partial(allreduce_p.bind, comm=comm, op=_sum_op(x.dtype),
                    adjoint=adjoint)
    if op.name == "SUM":
        (dy,) = total(t)
    elif op.name in ("MAX", "MIN"):
        # The gradient goes to the rank(s) holding the extreme value, split
        # evenly between ties.
        mask = x == y
        (count,) = total(mask.astype(x.dtype))
        (dy,) = total(jnp.where(mask, t, jnp.zeros_like(t)))
        dy = dy / count
    elif op.name == "PROD":
        # d y / d x_r = product of the other ranks' x, also where x_r == 0.
        zero = x == 0
        one = jnp.ones_like(x)
        (nonzero_prod,) = allreduce_p.bind(jnp.where(zero, one, x), comm=comm,
                                           op=op, adjoint=adjoint)
        (nzeros,) = allreduce_p.bind(zero.astype(np.int32), comm=comm,
                                     op=_sum_op(np.int32), adjoint=adjoint)
        others = jnp.where(nzeros == 0, y / jnp.where(zero, one, x),
                           jnp.where((nzeros == 1) & zero, nonzero_prod,
                                     jnp.zeros_like(x)))
        (dy,) = total(t * others)
    else:
        raise NotImplementedError(
            f"jaxmpi.allreduce: derivatives are defined for MPI.SUM, MPI.PROD, "
            f"MPI.MAX and MPI.MIN, not {op} (mpi4jax: The adjoint of "
            "allreduce is only defined for op=MPI.SUM)"
        )
    return [y], [dy]


def _allreduce_transpose(cts, x, *, comm, op, adjoint):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.allreduce: {op} is not linear; transpose needs MPI.SUM "
            "(mpi4jax: The linear transpose of allreduce is only defined for "
            "op=MPI.SUM)")
    (ct,) = cts
    ct = _ct(ct, x)
    if adjoint == "sum":
        return allreduce_p.bind(ct, comm=comm, op=op, adjoint=adjoint)
    return replicated_ct_p.bind(ct, comm=comm, op=op)


ad.primitive_jvps[allreduce_p] = _allreduce_jvp
ad.primitive_transposes[allreduce_p] = _allreduce_transpose
_elementwise_batcher(allreduce_p)

# The transpose of allreduce under the default convention: the identity on
# the cotangent, no communication; its own transpose is allreduce again.
replicated_ct_p = Primitive("jaxmpi_replicated_ct")
replicated_ct_p.multiple_results = True
replicated_ct_p.def_impl(lambda x, **_: [x])
replicated_ct_p.def_abstract_eval(lambda x, **_: [x])
mlir.register_lowering(replicated_ct_p, lambda ctx, x, **_: [x])
_linear(replicated_ct_p, lambda cts, x, *, comm, op: allreduce_p.bind(
    _ct(cts[0], x), comm=comm, op=op, adjoint="replicated"))
batching.primitive_batchers[replicated_ct_p] = (
    lambda args, dims, **p: (replicated_ct_p.bind(*args, **p), [dims[0]]))


def _sum_only(fn, op):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.{fn}: derivatives are defined for MPI.SUM only, not {op} "
            "(allreduce also supports MPI.PROD, MPI.MAX and MPI.MIN)"
        )


def _sum_only_jvp(prim, fn):
    def jvp(primals, tangents, **params):
        _sum_only(fn, params["op"])
        out = prim.bind(*primals, **params)
        if type(tangents[0]) is ad.Zero:
            return out, [ad.Zero.from_primal_value(o) for o in out]
        return out, prim.bind(ad.instantiate_zeros(tangents[0]), **params)

    ad.primitive_jvps[prim] = jvp


# Rooted ops: where MPI delivers nothing (reduce and gather off the root,
# bcast on it) the result is x passed through, so every rank's program is
# linear in the same values and transposes of transposes make the same calls
# on every rank.

# ---- reduce: the root gets the reduction; elsewhere x passes through ------
reduce_p = _define("reduce", lambda x, *, comm, op, root: [x],
                   aliases={0: 0})


def _reduce_transpose(cts, x, *, comm, op, root):
    # y_root = sum of all x, y_r = x_r elsewhere: every x gets the root's
    # cotangent (a bcast; off the root ct is only its template), plus its
    # own off the root.
    _sum_only("reduce", op)
    ct = _ct(cts[0], x)
    (b,) = bcast_p.bind(ct, comm=comm, root=root)
    return [b if comm.rank == root else b + ct]


def _rooted_batcher(prim):
    """Rooted ops: the batch axis goes first, one call for the whole batch."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return prim.bind(_front(x, d), **params), [0]

    batching.primitive_batchers[prim] = rule


_sum_only_jvp(reduce_p, "reduce")
ad.primitive_transposes[reduce_p] = _reduce_transpose
_rooted_batcher(reduce_p)

# ---- scan: rank r gets the reduction over ranks 0..r -----------------------
scan_p = _define("scan", lambda x, *, comm, op: [x], aliases={0: 0})


def _scan_transpose(cts, x, *, comm, op):
    # x̄_r = sum over s >= r of ȳ_s = total - inclusive scan + own.
    _sum_only("scan", op)
    ct = _ct(cts[0], x)
    (total,) = allreduce_p.bind(ct, comm=comm, op=op, adjoint="sum")
    (upto,) = scan_p.bind(ct, comm=comm, op=op)
    return [total - upto + ct]


_sum_only_jvp(scan_p, "scan")
ad.primitive_transposes[scan_p] = _scan_transpose
_elementwise_batcher(scan_p)

# ---- bcast: every rank gets the root's x (the root: x passed through) -----
bcast_p = _define("bcast", lambda x, *, comm, root: [x], aliases={0: 0})


def _bcast_transpose(cts, x, *, comm, root):
    # The root's x reaches every rank: it collects all their cotangents;
    # elsewhere x was a template and gets zero.
    ct = _ct(cts[0], x)
    (total,) = reduce_p.bind(ct, comm=comm, op=_sum_op(ct.dtype), root=root)
    return [total if comm.rank == root else _zeros_from(total, x)]


_linear(bcast_p, _bcast_transpose)
_rooted_batcher(bcast_p)

# ---- gather: the root gets (size, *x.shape); elsewhere x passes through --
gather_p = _define(
    "gather",
    lambda x, *, comm, root: [
        _aval((comm.size, *x.shape), x.dtype) if comm.rank == root else x
    ],
    aliases=lambda *, comm, root: None if comm.rank == root else {0: 0},
)


def _gather_transpose(cts, x, *, comm, root):
    # x̄_r = ȳ_root[r] (a scatter; off the root ct is only its template),
    # plus its own cotangent off the root.
    if comm.rank == root:
        ct = _ct(cts[0], _aval((comm.size, *x.aval.shape), x.aval.dtype))
    else:
        ct = _ct(cts[0], x)
    (part,) = scatter_p.bind(ct, comm=comm, root=root)
    return [part if comm.rank == root else part + ct]


def _gather_batcher(args, dims, *, comm, root):
    (x,), (d,) = args, dims
    (y,) = gather_p.bind(_front(x, d), comm=comm, root=root)
    return [y], [1 if comm.rank == root else 0]


_linear(gather_p, _gather_transpose)
batching.primitive_batchers[gather_p] = _gather_batcher

# ---- scatter: rank r gets the root's x[r]; elsewhere x is a template ------
scatter_p = _define(
    "scatter",
    lambda x, *, comm, root: [
        _aval(x.shape[1:], x.dtype) if comm.rank == root else x
    ],
)


def _scatter_transpose(cts, x, *, comm, root):
    # The root collects every rank's cotangent; elsewhere x was a template.
    ct = _ct(cts[0], _aval(x.aval.shape[1:] if comm.rank == root
                           else x.aval.shape, x.aval.dtype))
    (y,) = gather_p.bind(ct, comm=comm, root=root)
    return [y if comm.rank == root else _zeros_from(y, x)]


def _scatter_batcher(args, dims, *, comm, root):
    (x,), (d,) = args, dims
    # On the root the batch axis goes second (the first is split over ranks).
    x = jnp.moveaxis(x, d, 1) if comm.rank == root else _front(x, d)
    return scatter_p.bind(x, comm=comm, root=root), [0]


_linear(scatter_p, _scatter_transpose)
batching.primitive_batchers[scatter_p] = _scatter_batcher

# ---- allgather: every rank gets (size, *x.shape) --------------------------
allgather_p = _define(
    "allgather", lambda x, *, comm: [_aval((comm.size, *x.shape), x.dtype)]
)


def _allgather_transpose(cts, x, *, comm):
    # Reduce-scatter: x̄_r = sum over s of ȳ_s[r].
    ct = _ct(cts[0], _aval((comm.size, *x.aval.shape), x.aval.dtype))
    (parts,) = alltoall_p.bind(ct, comm=comm)
    return [parts.sum(axis=0).astype(ct.dtype)]


def _allgather_batcher(args, dims, *, comm):
    (x,), (d,) = args, dims
    (y,) = allgather_p.bind(x, comm=comm)
    return [y], [d + 1]


_linear(allgather_p, _allgather_transpose)
batching.primitive_batchers[allgather_p] = _allgather_batcher

# ---- alltoall: block j of rank i's x goes to block i of rank j ------------
alltoall_p = _define("alltoall", lambda x, *, comm: [x], aliases={0: 0})


def _alltoall_batcher(args, dims, *, comm):
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 1)  # the first axis is split over ranks
    return alltoall_p.bind(x, comm=comm), [1]


_linear(alltoall_p, lambda cts, x, *, comm: alltoall_p.bind(
    _ct(cts[0], x), comm=comm))
batching.primitive_batchers[alltoall_p] = _alltoall_batcher

# ---- barrier --------------------------------------------------------------
barrier_p = _define("barrier", lambda *, comm: [])

# ---- send -----------------------------------------------------------------
send_p = _define("send", lambda x, *, comm, dest, tag: [])


def _send_transpose(cts, x, *, comm, dest, tag):
    # The cotangent of what was sent comes back from dest.
    return recv_p.bind(_zeros(x), comm=comm, source=dest,
                       tag=_backward_tag(tag, comm), status=0)


def _p2p_batcher(prim):
    """Point-to-point: the batch axis goes first on both sides, one message
    for the whole batch (all ranks must batch alike)."""

    def rule(args, dims, **params):
        args = [_front(a, d) for a, d in zip(args, dims)]
        return prim.bind(*args, **params), [0] * (prim is not send_p)

    batching.primitive_batchers[prim] = rule


_linear(send_p, _send_transpose)
_p2p_batcher(send_p)

# ---- recv: the result's shape and dtype come from the template x ----------
recv_p = _define("recv", lambda x, *, comm, source, tag, status: [x],
                 aliases={0: 0})


def _recv_transpose(cts, x, *, comm, source, tag, status):
    _no_wildcards("recv", source, tag)
    send_p.bind(_ct(cts[0], x), comm=comm, dest=source,
                tag=_backward_tag(tag, comm))
    return [_zeros(x)]  # the template's data is never used


_linear(recv_p, _recv_transpose,
        check=lambda *, source, **_: _no_wildcards("recv", source))
_p2p_batcher(recv_p)

# ---- sendrecv -------------------------------------------------------------
sendrecv_p = _define(
    "sendrecv",
    lambda x, template, *, comm, source, dest, sendtag, recvtag, status: [
        template
    ],
    aliases={1: 0},
)


def _sendrecv_transpose(cts, x, template, *, comm, source, dest, sendtag,
                        recvtag, status):
    # Roles swapped: the cotangent goes back to source, ours comes from dest.
    # With recvtag=MPI.ANY_TAG the message is taken to carry our own sendtag
    # (every rank calling the same sendrecv, the usual exchange pattern).
    _no_wildcards("sendrecv", source)
    back = sendtag if recvtag == MPI.ANY_TAG else recvtag
    like = x if ad.is_undefined_primal(x) else jnp.zeros_like(x)
    (xbar,) = sendrecv_p.bind(
        _ct(cts[0], template), _zeros(like), comm=comm, source=dest,
        dest=source, sendtag=_backward_tag(back, comm),
        recvtag=_backward_tag(sendtag, comm), status=0)
    return [xbar if ad.is_undefined_primal(x) else None,
            _zeros(template) if ad.is_undefined_primal(template) else None]


def _sendrecv_batcher(args, dims, **params):
    (x, template), (dx, dt) = args, dims
    if dx is None:  # only the template is batched: one exchange, broadcast
        (y,) = sendrecv_p.bind(x, jnp.take(template, 0, axis=dt), **params)
        n = template.shape[dt]
        return [jnp.broadcast_to(y, (n, *y.shape))], [0]
    x = _front(x, dx)
    n = x.shape[0]
    if dt is None:
        template = jnp.broadcast_to(template, (n, *template.shape))
    else:
        template = _front(template, dt)
    return sendrecv_p.bind(x, template, **params), [0]


_linear(sendrecv_p, _sendrecv_transpose,
        check=lambda *, source, **_: _no_wildcards("sendrecv", source))
batching.primitive_batchers[sendrecv_p] = _sendrecv_batcher

# ---- join_token: order later calls after a user-supplied token ------------
join_token_p = Primitive("jaxmpi_join_token")
join_token_p.multiple_results = True
join_token_p.def_impl(partial(apply_primitive, join_token_p))
join_token_p.def_effectful_abstract_eval(lambda token: ([], {mpi_effect}))
for _platform in LOWERING_PLATFORMS:
    mlir.register_lowering(join_token_p, join_token_lowering, platform=_platform)

# ---- neighbor_exchange: many sendrecvs in one call --------------------------
# Pair i sends x_i to dests[i] and receives y_i (shape and dtype recv_avals[i])
# from sources[i], both with tag + i; the C core posts every receive and send
# at once and waits once. The recv shapes are parameters, not templates.
MAX_EXCHANGE_PAIRS = 32  # pairs per call: the core's limit (JM_MAX_BUFFERS)
neighbor_exchange_p = _define(
    "neighbor_exchange",
    lambda *xs, comm, sources, dests, tag, recv_avals: [
        _aval(shape, dtype) for shape, dtype in recv_avals],
)


def _exchange_rules(prim):
    """Transpose and batching of the variadic exchanges (neighbor_exchange,
    neighbor_alltoallv), which differ only in how the C core matches
    messages."""

    def transpose(cts, *xs, comm, sources, dests, tag, recv_avals):
        # Every message reversed: y_i's cotangent goes back to sources[i]
        # (in the order of sources, as the sender listed its dests), and
        # x_j's comes from dests[j], in the backward tag space.
        like = [_aval(shape, dtype) for shape, dtype in recv_avals]
        back = [_ct(ct, a) for ct, a in zip(cts, like)]
        xbars = prim.bind(
            *back, comm=comm, sources=dests, dests=sources,
            tag=_backward_tag(tag, comm),
            recv_avals=tuple((x.aval.shape, x.aval.dtype) for x in xs))
        return [xb if ad.is_undefined_primal(x) else None
                for xb, x in zip(xbars, xs)]

    def batcher(args, dims, *, recv_avals, **params):
        # One exchange for the whole batch: every buffer gets the batch in
        # front.
        n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        args = [_front(a, d) if d is not None else
                jnp.broadcast_to(a, (n, *a.shape)) for a, d in zip(args, dims)]
        recv_avals = tuple(((n, *shape), dtype) for shape, dtype in recv_avals)
        outs = prim.bind(*args, recv_avals=recv_avals, **params)
        return outs, [0] * len(outs)

    _linear(prim, transpose)
    batching.primitive_batchers[prim] = batcher


_exchange_rules(neighbor_exchange_p)

# ---- neighbor_alltoallv: a sparse neighbourhood, one tag ---------------------
# Result i (shape and dtype recv_avals[i]) comes from sources[i], operand j
# goes to dests[j], every message with the one tag `tag`: MPI's
# non-overtaking order matches repeated edges between two ranks in the order
# each side lists them (a distributed graph's in- and out-neighbours may
# differ in number). The C core posts every receive and send, waits once.
neighbor_alltoallv_p = _define(
    "neighbor_alltoallv",
    lambda *xs, comm, sources, dests, tag, recv_avals: [
        _aval(shape, dtype) for shape, dtype in recv_avals],
)


_exchange_rules(neighbor_alltoallv_p)


# ---- variable counts along axis 0 ------------------------------------------
# counts, sendcounts, recvcounts: static tuples of row counts, one per rank,
# the same on every rank; they reach the C core as int64 array attributes.
# Rows along axis 0 are what the ranks split; a batch axis goes second (one
# MPI call for the whole batch: a row then holds every batch element's).


def _rows(x, n):
    return _aval((n, *x.shape[1:]), x.dtype)


def _second(x, d):
    """Batch axis d of x moved to position 1 (axis 0 is split over ranks)."""
    return jnp.moveaxis(x, d, 1)


def _rows_batching(prim):
    """The batching rule of the variable-count ops: the batch axis goes
    second, so a row holds the whole batch's elements and the counts stay
    as given (one MPI call); the result has it second too."""

    def batcher(args, dims, **params):
        (x,), (d,) = args, dims
        return prim.bind(_second(x, d), **params), [1]

    batching.primitive_batchers[prim] = batcher


# ---- allgatherv: every rank gets sum(counts) rows, rank r's counts[r] -----
allgatherv_p = _define(
    "allgatherv", lambda x, *, comm, counts: [_rows(x, sum(counts))])


def _allgatherv_transpose(cts, x, *, comm, counts):
    # Reduce-scatter with counts: x̄_r = Σ_s ȳ_s[rows of r], one MPI call
    # (MPI_Reduce_scatter), exact like allgather's transpose.
    ct = _ct(cts[0], _rows(x.aval, sum(counts)))
    return reduce_scatter_p.bind(ct, comm=comm, op=_sum_op(ct.dtype),
                                 counts=counts)


_linear(allgatherv_p, _allgatherv_transpose)
_rows_batching(allgatherv_p)

# ---- gatherv: the root gets sum(counts) rows; elsewhere x passes through --
gatherv_p = _define(
    "gatherv",
    lambda x, *, comm, counts, root: [
        _rows(x, sum(counts)) if comm.rank == root else x],
    aliases=lambda *, comm, counts, root: None if comm.rank == root else {0: 0},
)


def _gatherv_transpose(cts, x, *, comm, counts, root):
    # x̄_r = ȳ_root[rows of r] (a scatterv; off the root ct is only its
    # template), plus its own cotangent off the root.
    if comm.rank == root:
        ct = _ct(cts[0], _rows(x.aval, sum(counts)))
    else:
        ct = _ct(cts[0], x)
    (part,) = scatterv_p.bind(ct, comm=comm, counts=counts, root=root)
    return [part if comm.rank == root else part + ct]


_linear(gatherv_p, _gatherv_transpose)
_rows_batching(gatherv_p)

# ---- scatterv: rank r gets counts[r] rows of the root's x ------------------
# Elsewhere x is a template of the result (counts[r] rows), as in scatter.
scatterv_p = _define(
    "scatterv",
    lambda x, *, comm, counts, root: [_rows(x, counts[comm.rank])],
)


def _scatterv_transpose(cts, x, *, comm, counts, root):
    # The root collects every rank's cotangent; elsewhere x was a template.
    ct = _ct(cts[0], _rows(x.aval, counts[comm.rank]))
    (y,) = gatherv_p.bind(ct, comm=comm, counts=counts, root=root)
    return [y if comm.rank == root else _zeros_from(y, x)]


_linear(scatterv_p, _scatterv_transpose)
_rows_batching(scatterv_p)

# ---- alltoallv: block j of x (sendcounts[j] rows) goes to rank j ----------
def _alltoallv_aliases(*, comm, sendcounts, recvcounts):
    """The result shares x's buffer where the exchange can run in place:
    equal counts per peer (each block comes back into the place it left,
    MPI_IN_PLACE's alltoallv), and at most 2 ranks. Otherwise XLA copies the
    new result into a loop's carry every iteration: 161 us against
    alltoall's 74 at 1 MiB, 2 ranks. From 3 ranks a rank's equal counts say
    nothing of the other ranks' (rank 0 can have them while rank 1 has
    not), and an exchange in place on some ranks cannot meet MPI_Alltoallv
    on others; at 2 ranks rank 0's counts are equal exactly when rank 1's
    are (both say sendcounts[peer] == recvcounts[peer] of the one pair).
    The C core takes the same decision from the counts (collectives.c)."""
    if comm.size <= 2 and tuple(sendcounts) == tuple(recvcounts):
        return {0: 0}
    return None


alltoallv_p = _define(
    "alltoallv",
    lambda x, *, comm, sendcounts, recvcounts: [_rows(x, sum(recvcounts))],
    aliases=_alltoallv_aliases,
)


def _alltoallv_transpose(cts, x, *, comm, sendcounts, recvcounts):
    # Every block goes back where it came from: counts swapped.
    ct = _ct(cts[0], _rows(x.aval, sum(recvcounts)))
    return alltoallv_p.bind(ct, comm=comm, sendcounts=recvcounts,
                            recvcounts=sendcounts)


_linear(alltoallv_p, _alltoallv_transpose)
_rows_batching(alltoallv_p)


# ---- reduce_scatter: rank r gets op over ranks of block r of x -------------
# counts None: x is (size, *s), the blocks its rows, the result s
# (MPI_Reduce_scatter_block). counts (rows per rank, static): x has
# sum(counts) rows, block r the counts[r] rows after those of ranks < r, the
# result (counts[r], *s) (MPI_Reduce_scatter; the C core gets the counts in
# rows, as written, and takes a row's size from x).
def _reduce_scatter_shape(x, *, comm, op, counts):
    if counts is None:
        return [_aval(x.shape[1:], x.dtype)]
    return [_aval((counts[comm.rank], *x.shape[1:]), x.dtype)]


reduce_scatter_p = _define("reduce_scatter", _reduce_scatter_shape)


def _reduce_scatter_lowering(ctx, x, *, comm, op, counts):
    attrs = _attributes({"comm": comm, "op": op})
    if counts is None:
        target = "jaxmpi_reduce_scatter_block"
    else:
        target = "jaxmpi_reduce_scatter"
        attrs["counts"] = np.asarray(counts, np.int64)
    site = _site(ctx)
    if site:
        attrs["site"] = np.int64(site)
    rule = jax.ffi.ffi_lowering(target, has_side_effect=True)
    return lower_with_token(ctx, rule, x, **attrs)


for _platform in LOWERING_PLATFORMS:
    mlir.register_lowering(reduce_scatter_p, _reduce_scatter_lowering,
                           platform=_platform, **_UNCACHED)


def _gather_blocks(y, comm, counts):
    """Every rank's block y_r, in x's layout: an allgather (allgatherv for
    counts), one MPI call."""
    if counts is None:
        return allgather_p.bind(y, comm=comm)[0]
    return allgatherv_p.bind(y, comm=comm, counts=counts)[0]


def _reduce_scatter_jvp(primals, tangents, *, comm, op, counts):
    # As allreduce's (docs/autodiff.md), with each rank's block: SUM is
    # linear; MAX/MIN send the tangent of the rank(s) holding the extreme
    # value (ties split evenly); PROD is exact also where some x_s = 0.
    (x,), (t,) = primals, tangents
    rs = partial(reduce_scatter_p.bind, comm=comm, counts=counts)
    (y,) = rs(x, op=op)
    if type(t) is ad.Zero:
        return [y], [ad.Zero.from_primal_value(y)]
    t = ad.instantiate_zeros(t)
    total = partial(rs, op=_sum_op(x.dtype))
    if op.name == "SUM":
        (dy,) = rs(t, op=op)
    elif op.name in ("MAX", "MIN"):
        mask = x == _gather_blocks(y, comm, counts)
        (count,) = total(mask.astype(x.dtype))
        (dy,) = total(jnp.where(mask, t, jnp.zeros_like(t)))
        dy = dy / count
    elif op.name == "PROD":
        zero = x == 0
        one = jnp.ones_like(x)
        (nonzero_prod,) = rs(jnp.where(zero, one, x), op=op)
        (nzeros,) = rs(zero.astype(np.int32), op=_sum_op(np.int32))
        full = lambda v: _gather_blocks(v, comm, counts)
        y_all, nzp_all, nz_all = full(y), full(nonzero_prod), full(nzeros)
        others = jnp.where(nz_all == 0, y_all / jnp.where(zero, one, x),
                           jnp.where((nz_all == 1) & zero, nzp_all,
                                     jnp.zeros_like(x)))
        (dy,) = total(t * others)
    else:
        raise NotImplementedError(
            f"jaxmpi.reduce_scatter: derivatives are defined for MPI.SUM, "
            f"MPI.PROD, MPI.MAX and MPI.MIN, not {op}"
        )
    return [y], [dy]


def _reduce_scatter_transpose(cts, x, *, comm, op, counts):
    # x̄_s[block r] = ȳ_r on every rank s: an allgather of the cotangents
    # (exact with counts too).
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.reduce_scatter: {op} is not linear; transpose needs "
            "MPI.SUM")
    shape, dtype = x.aval.shape, x.aval.dtype
    ct = _ct(cts[0], _reduce_scatter_shape(
        _aval(shape, dtype), comm=comm, op=op, counts=counts)[0])
    return [_gather_blocks(ct, comm, counts)]


def _reduce_scatter_batcher(args, dims, *, comm, op, counts):
    # One call for the batch: it goes inside each block (second axis); the
    # result keeps it first (blocks of equal size) or second (counts).
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 1)
    return (reduce_scatter_p.bind(x, comm=comm, op=op, counts=counts),
            [0 if counts is None else 1])


ad.primitive_jvps[reduce_scatter_p] = _reduce_scatter_jvp
ad.primitive_transposes[reduce_scatter_p] = _reduce_scatter_transpose
batching.primitive_batchers[reduce_scatter_p] = _reduce_scatter_batcher

# ---- exscan: rank r gets op over ranks 0..r-1, rank 0 the op's identity ----
exscan_p = _define("exscan", lambda x, *, comm, op: [x], aliases={0: 0})


def exscan_identity(opname: str, dtype) -> np.ndarray:
    """The identity of a predefined op for dtype (what rank 0 gets): 0 for
    SUM, BOR, BXOR, LOR, LXOR; 1 for PROD and LAND; all bits set for BAND;
    the lowest value (-inf for floating types) for MAX, the highest (+inf)
    for MIN."""
    dtype = np.dtype(dtype)
    if opname in ("MAX", "MIN"):
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            value = info.min if opname == "MAX" else info.max
        else:
            value = -np.inf if opname == "MAX" else np.inf
    elif opname in ("PROD", "LAND"):
        value = 1
    elif opname == "BAND":
        value = ~np.zeros((), dtype)
    else:
        value = 0
    return np.asarray(value).astype(dtype)


def _exscan_lowering(ctx, x, *, comm, op):
    rule = jax.ffi.ffi_lowering("jaxmpi_exscan", has_side_effect=True,
                                operand_output_aliases={0: 0})
    attrs = _attributes({"comm": comm, "op": op})
    site = _site(ctx)
    if site:
        attrs["site"] = np.int64(site)
    (y,) = lower_with_token(ctx, rule, x, **attrs)
    if comm.rank != 0:
        return [y]
    # MPI leaves rank 0's result undefined: it is the op's identity.
    aval = ctx.avals_out[0]
    ident = exscan_identity(op.name, aval.dtype)
    fill = mlir.lower_fun(lambda: [jnp.full(aval.shape, ident, aval.dtype)],
                          multiple_results=True)
    return fill(ctx.replace(avals_in=[], tokens_out=None))


for _platform in LOWERING_PLATFORMS:
    mlir.register_lowering(exscan_p, _exscan_lowering, platform=_platform,
                           **_UNCACHED)


def _exscan_transpose(cts, x, *, comm, op):
    # x̄_r = sum over s > r of ȳ_s (a reverse exclusive scan): total minus
    # the inclusive scan.
    _sum_only("exscan", op)
    ct = _ct(cts[0], x)
    (total,) = allreduce_p.bind(ct, comm=comm, op=op, adjoint="sum")
    (upto,) = scan_p.bind(ct, comm=comm, op=op)
    return [total - upto]


_sum_only_jvp(exscan_p, "exscan")
ad.primitive_transposes[exscan_p] = _exscan_transpose
_elementwise_batcher(exscan_p)
