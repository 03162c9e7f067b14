"""The collectives as primitives (csrc/collectives.c), one section per
op: its shape rule, JVP, transpose and batching rule, and beside them its
non-blocking start's row (csrc/request.c): the start's buffers, results,
backward request and batch axes."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np

from . import _jax_compat as jc
from ._define import (Backward, aval, blocking_backward, cotangent,
                      define_blocking, define_start, elementwise_batcher,
                      linear, lower_call, register_lowering, rooted,
                      rooted_axes, rooted_batcher, sum_only, sum_only_check,
                      sum_only_jvp, sum_op, to_front, zeros_from)
from ._requests import wait_p


# ---- allreduce: every rank gets the reduction of all ranks' x -------------
# In place: the result shares the input's buffer (MPI_IN_PLACE in the core;
# reduce, scan, bcast and alltoall too, gather off the root, recv and
# sendrecv their template's).
allreduce_p = define_blocking("allreduce", lambda x, *, comm, op, adjoint: [x],
                              aliases={0: 0})


def _allreduce_jvp(primals, tangents, *, comm, op, adjoint):
    (x,), (t,) = primals, tangents
    (y,) = allreduce_p.bind(x, comm=comm, op=op, adjoint=adjoint)
    if type(t) is jc.ad.Zero:
        return [y], [jc.ad.Zero.from_primal_value(y)]
    t = jc.ad.instantiate_zeros(t)
    total = partial(allreduce_p.bind, comm=comm, op=sum_op(x.dtype),
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
                                     op=sum_op(np.int32), adjoint=adjoint)
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
    ct = cotangent(ct, x)
    if adjoint == "sum":
        return allreduce_p.bind(ct, comm=comm, op=op, adjoint=adjoint)
    return replicated_ct_p.bind(ct, comm=comm, op=op)


jc.ad.primitive_jvps[allreduce_p] = _allreduce_jvp
jc.ad.primitive_transposes[allreduce_p] = _allreduce_transpose
elementwise_batcher(allreduce_p)

# The transpose of allreduce under the default convention: the identity on
# the cotangent, no communication; its own transpose is allreduce again.
replicated_ct_p = jc.Primitive("jaxmpi_replicated_ct")
replicated_ct_p.multiple_results = True
replicated_ct_p.def_impl(lambda x, **_: [x])
replicated_ct_p.def_abstract_eval(lambda x, **_: [x])
jc.mlir.register_lowering(replicated_ct_p, lambda ctx, x, **_: [x])
linear(replicated_ct_p, lambda cts, x, *, comm, op: allreduce_p.bind(
    cotangent(cts[0], x), comm=comm, op=op, adjoint="replicated"))
jc.batching.primitive_batchers[replicated_ct_p] = (
    lambda args, dims, **p: (replicated_ct_p.bind(*args, **p), [dims[0]]))

# Rooted ops: where MPI delivers nothing (reduce and gather off the root,
# bcast on it) the result is x passed through, so every rank's program is
# linear in the same values and transposes of transposes make the same calls
# on every rank.


# iallreduce: buffers [y] (in place: aliased to x); result y. Derivatives for
# MPI.SUM, with allreduce's conventions: adjoint="replicated" (default), the
# transpose is the identity (no communication); "sum": an allreduce of the
# cotangents, as a backward request.
def _iallreduce_check(*, op, **_):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.iallreduce: derivatives are defined for MPI.SUM only, "
            f"not {op} (the blocking allreduce also has PROD, MAX and MIN)")


def _iallreduce_bw_start(cts, bufs, spec):
    if spec.param("adjoint") == "replicated":
        return jnp.zeros((), np.float32), [cts[0]]
    h, y = iallreduce_p.bind(cts[0], rid=0, **dict(spec.params))
    return h, [y]


def _iallreduce_bw_finish(bh, bbufs, operands, spec):
    if spec.param("adjoint") == "replicated":
        return [bbufs[0]]
    (y,) = wait_p.bind(bh, *bbufs, spec=spec)
    return [y]


iallreduce_p = define_start(
    "iallreduce", buffers=lambda x, *, comm, op, adjoint: [x],
    aliases={0: 0}, results=(0,), jvp_check=_iallreduce_check,
    backward=Backward(_iallreduce_bw_start, _iallreduce_bw_finish))

# ---- reduce: the root gets the reduction; elsewhere x passes through ------
reduce_p = define_blocking("reduce", lambda x, *, comm, op, root: [x],
                           aliases={0: 0})


def _reduce_transpose(cts, x, *, comm, op, root):
    # y_root = sum of all x, y_r = x_r elsewhere: every x gets the root's
    # cotangent (a bcast; off the root ct is only its template), plus its
    # own off the root.
    sum_only("reduce", op)
    ct = cotangent(cts[0], x)
    (b,) = bcast_p.bind(ct, comm=comm, root=root)
    return [b if comm.rank == root else b + ct]


sum_only_jvp(reduce_p, "reduce")
jc.ad.primitive_transposes[reduce_p] = _reduce_transpose
rooted_batcher(reduce_p)

# ireduce: buffers [y] (x's buffer: the root reduces in place into it,
# elsewhere it is sent from and passed through as reduce does).
ireduce_p = define_start(
    "ireduce", buffers=lambda x, *, comm, op, root: [x], aliases={0: 0},
    results=(0,), jvp_check=sum_only_check("ireduce"),
    backward=blocking_backward(reduce_p))

# ---- scan: rank r gets the reduction over ranks 0..r -----------------------
scan_p = define_blocking("scan", lambda x, *, comm, op: [x], aliases={0: 0})


def _scan_transpose(cts, x, *, comm, op):
    # x̄_r = sum over s >= r of ȳ_s = total - inclusive scan + own.
    sum_only("scan", op)
    ct = cotangent(cts[0], x)
    (total,) = allreduce_p.bind(ct, comm=comm, op=op, adjoint="sum")
    (upto,) = scan_p.bind(ct, comm=comm, op=op)
    return [total - upto + ct]


sum_only_jvp(scan_p, "scan")
jc.ad.primitive_transposes[scan_p] = _scan_transpose
elementwise_batcher(scan_p)

# iscan: buffers [y] (in place).
iscan_p = define_start(
    "iscan", buffers=lambda x, *, comm, op: [x], aliases={0: 0},
    results=(0,), jvp_check=sum_only_check("iscan"),
    backward=blocking_backward(scan_p))

# ---- exscan: rank r gets op over ranks 0..r-1, rank 0 the op's identity ----
exscan_p = define_blocking("exscan", lambda x, *, comm, op: [x], aliases={0: 0})


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
    (y,) = lower_call(ctx, "exscan", [x], dict(comm=comm, op=op), {0: 0})
    if comm.rank != 0:
        return [y]
    # MPI leaves rank 0's result undefined: it is the op's identity.
    out = ctx.avals_out[0]
    ident = exscan_identity(op.name, out.dtype)
    fill = jc.mlir.lower_fun(lambda: [jnp.full(out.shape, ident, out.dtype)],
                             multiple_results=True)
    return fill(ctx.replace(avals_in=[], tokens_out=None))


register_lowering(exscan_p, _exscan_lowering)


def _exscan_transpose(cts, x, *, comm, op):
    # x̄_r = sum over s > r of ȳ_s (a reverse exclusive scan): total minus
    # the inclusive scan.
    sum_only("exscan", op)
    ct = cotangent(cts[0], x)
    (total,) = allreduce_p.bind(ct, comm=comm, op=op, adjoint="sum")
    (upto,) = scan_p.bind(ct, comm=comm, op=op)
    return [total - upto]


sum_only_jvp(exscan_p, "exscan")
jc.ad.primitive_transposes[exscan_p] = _exscan_transpose
elementwise_batcher(exscan_p)


# iexscan: buffers [y] (in place). MPI leaves rank 0's result undefined: the
# wait gives it the op's identity, as exscan does.
def _identity_on_rank_0(outs, spec):
    """exscan's rank 0 result: the op's identity (a constant of the trace:
    its tangent is zero and its cotangent goes nowhere, as exscan's)."""
    comm, op = spec.param("comm"), spec.param("op")
    if comm.rank != 0:
        return outs
    return [jnp.full(y.shape, exscan_identity(op.name, y.dtype), y.dtype)
            for y in outs]


iexscan_p = define_start(
    "iexscan", buffers=lambda x, *, comm, op: [x], aliases={0: 0},
    results=(0,), jvp_check=sum_only_check("iexscan"),
    backward=blocking_backward(exscan_p), after_wait=_identity_on_rank_0)

# ---- bcast: every rank gets the root's x (the root: x passed through) -----
bcast_p = define_blocking("bcast", lambda x, *, comm, root: [x], aliases={0: 0})


def _bcast_transpose(cts, x, *, comm, root):
    # The root's x reaches every rank: it collects all their cotangents;
    # elsewhere x was a template and gets zero.
    ct = cotangent(cts[0], x)
    (total,) = reduce_p.bind(ct, comm=comm, op=sum_op(ct.dtype), root=root)
    return [total if comm.rank == root else zeros_from(total, x)]


linear(bcast_p, _bcast_transpose)
rooted_batcher(bcast_p)

# ibcast: buffers [y] (aliased to x: the root sends from it); result y.
# Backward: the root collects every rank's cotangent (a blocking reduce where
# the forward wait was: collectives keep the same order on every rank).


def _ibcast_bw_start(cts, bufs, spec):
    comm, root = spec.param("comm"), spec.param("root")
    ct = cts[0]
    (total,) = reduce_p.bind(ct, comm=comm, op=sum_op(ct.dtype),
                             root=root)
    out = total if comm.rank == root else zeros_from(total, bufs[0])
    return jnp.zeros((), np.float32), [out]


ibcast_p = define_start(
    "ibcast", buffers=lambda x, *, comm, root: [x], aliases={0: 0},
    results=(0,), backward=Backward(
        _ibcast_bw_start, lambda bh, bbufs, operands, spec: [bbufs[0]]))

# ---- gather: the root gets (size, *x.shape); elsewhere x passes through --
gather_p = define_blocking(
    "gather",
    lambda x, *, comm, root: [
        aval((comm.size, *x.shape), x.dtype) if comm.rank == root else x
    ],
    aliases=lambda *, comm, root: None if comm.rank == root else {0: 0},
)


def _gather_transpose(cts, x, *, comm, root):
    # x̄_r = ȳ_root[r] (a scatter; off the root ct is only its template),
    # plus its own cotangent off the root.
    if comm.rank == root:
        ct = cotangent(cts[0], aval((comm.size, *x.aval.shape), x.aval.dtype))
    else:
        ct = cotangent(cts[0], x)
    (part,) = scatter_p.bind(ct, comm=comm, root=root)
    return [part if comm.rank == root else part + ct]


def _gather_batcher(args, dims, *, comm, root):
    (x,), (d,) = args, dims
    (y,) = gather_p.bind(to_front(x, d), comm=comm, root=root)
    return [y], [1 if comm.rank == root else 0]


linear(gather_p, _gather_transpose)
jc.batching.primitive_batchers[gather_p] = _gather_batcher

# igather: root buffers [x, y (size, *x.shape)], result y; elsewhere [x],
# passed through.
igather_p = define_start(
    "igather", **rooted(lambda x, comm: aval((comm.size, *x.shape), x.dtype)),
    backward=blocking_backward(gather_p),
    batch_axes=rooted_axes([0, 1], [0]))             # [x, y (size, n, ...)]

# ---- scatter: rank r gets the root's x[r]; elsewhere x is a template ------
scatter_p = define_blocking(
    "scatter",
    lambda x, *, comm, root: [
        aval(x.shape[1:], x.dtype) if comm.rank == root else x
    ],
)


def _scatter_transpose(cts, x, *, comm, root):
    # The root collects every rank's cotangent; elsewhere x was a template.
    ct = cotangent(cts[0], aval(x.aval.shape[1:] if comm.rank == root
                                else x.aval.shape, x.aval.dtype))
    (y,) = gather_p.bind(ct, comm=comm, root=root)
    return [y if comm.rank == root else zeros_from(y, x)]


def _scatter_batcher(args, dims, *, comm, root):
    (x,), (d,) = args, dims
    # On the root the batch axis goes second (the first is split over ranks).
    x = jnp.moveaxis(x, d, 1) if comm.rank == root else to_front(x, d)
    return scatter_p.bind(x, comm=comm, root=root), [0]


linear(scatter_p, _scatter_transpose)
jc.batching.primitive_batchers[scatter_p] = _scatter_batcher

# iscatter: root buffers [x (size, ...), y (x.shape[1:])], result y;
# elsewhere [y] (the template's buffer).
iscatter_p = define_start(
    "iscatter", **rooted(lambda x, comm: aval(x.shape[1:], x.dtype)),
    backward=blocking_backward(scatter_p),
    batch_axes=rooted_axes([1, 0], [0], 1))          # [x (size, n, ...), y]

# ---- allgather: every rank gets (size, *x.shape) --------------------------
allgather_p = define_blocking(
    "allgather", lambda x, *, comm: [aval((comm.size, *x.shape), x.dtype)]
)


def _allgather_transpose(cts, x, *, comm):
    # Reduce-scatter: x̄_r = sum over s of ȳ_s[r].
    ct = cotangent(cts[0], aval((comm.size, *x.aval.shape), x.aval.dtype))
    (parts,) = alltoall_p.bind(ct, comm=comm)
    return [parts.sum(axis=0).astype(ct.dtype)]


def _allgather_batcher(args, dims, *, comm):
    (x,), (d,) = args, dims
    (y,) = allgather_p.bind(x, comm=comm)
    return [y], [d + 1]


linear(allgather_p, _allgather_transpose)
jc.batching.primitive_batchers[allgather_p] = _allgather_batcher

# iallgather: buffers [x, y (size, *x.shape)], result y.
iallgather_p = define_start(
    "iallgather",
    buffers=lambda x, *, comm: [x, aval((comm.size, *x.shape), x.dtype)],
    aliases={0: 0}, results=(1,), backward=blocking_backward(allgather_p),
    batch_axes=lambda **_: (0, [0, 1]))              # [x, y (size, n, ...)]

# ---- alltoall: block j of rank i's x goes to block i of rank j ------------
alltoall_p = define_blocking("alltoall", lambda x, *, comm: [x], aliases={0: 0})


def _alltoall_batcher(args, dims, *, comm):
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 1)  # the first axis is split over ranks
    return alltoall_p.bind(x, comm=comm), [1]


linear(alltoall_p, lambda cts, x, *, comm: alltoall_p.bind(
    cotangent(cts[0], x), comm=comm))
jc.batching.primitive_batchers[alltoall_p] = _alltoall_batcher

# ialltoall: buffers [x, y] (out of place: MPI_Ialltoall), result y.
ialltoall_p = define_start(
    "ialltoall", buffers=lambda x, *, comm: [x, x], aliases={0: 0},
    results=(1,), backward=blocking_backward(alltoall_p),
    batch_axes=lambda **_: (1, [1, 1]))              # [x, y] (size, n, ...)

# ---- barrier --------------------------------------------------------------
barrier_p = define_blocking("barrier", lambda *, comm: [])

# ibarrier: no buffers, no results, nothing to differentiate.
ibarrier_p = define_start(
    "ibarrier", buffers=lambda *, comm: [], aliases={}, results=(),
    backward=Backward(lambda cts, bufs, spec: (jnp.zeros((), np.float32), []),
                      lambda bh, bbufs, operands, spec: []))
