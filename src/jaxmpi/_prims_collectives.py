"""The collectives as primitives (csrc/collectives.c), one section per
op: its shape rule, JVP, transpose and batching rule, and beside them its
non-blocking start's row (csrc/starts.c): the start's buffers, results,
backward request and batch axes. The variable-count ops and reduce_scatter
come last: allgatherv's transpose is a reduce_scatter with counts,
reduce_scatter's an allgather (allgatherv with counts), and reduce_scatter's
JVP is allreduce's, block by block."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np

from . import _jax_compat as jc
from ._primitives import (Backward, aval, blocking_backward, cotangent,
                          define_blocking, define_start, elementwise_batcher,
                          linear, lower_call, register_lowering, rooted,
                          rooted_axes, rooted_batcher, sum_only,
                          sum_only_check, sum_only_jvp, sum_op, to_front,
                          wait_p, zeros_from)


# ---- what the reductions share ----------------------------------------------


def reduction_jvp(prim, fn, spread=None, hint=""):
    """The JVP of a reduction over ranks of x with `op` (allreduce,
    reduce_scatter: `prim`, whose result is y), for x's tangent t.
    ``spread(r, **params)`` gives a reduced value in x's layout (None:
    itself; reduce_scatter: every rank's block). SUM is linear; MAX and MIN
    send the tangent of the rank(s) holding the extreme value, split evenly
    between ties; PROD is the product of the other ranks' x, also where
    x_r == 0."""

    def jvp(primals, tangents, **params):
        (x,), (t,), op = primals, tangents, params["op"]
        (y,) = prim.bind(x, **params)
        if type(t) is jc.ad.Zero:
            return [y], [jc.ad.Zero.from_primal_value(y)]
        t = jc.ad.instantiate_zeros(t)
        reduce = lambda v, op: prim.bind(v, **{**params, "op": op})[0]
        total = partial(reduce, op=sum_op(x.dtype))
        full = (lambda v: spread(v, **params)) if spread else (lambda v: v)
        if op.name == "SUM":
            return [y], [reduce(t, op=op)]
        if op.name in ("MAX", "MIN"):
            mask = x == full(y)
            count = total(mask.astype(x.dtype))
            dy = total(jnp.where(mask, t, jnp.zeros_like(t)))
            return [y], [dy / count]
        if op.name == "PROD":
            zero = x == 0
            one = jnp.ones_like(x)
            nonzero_prod = reduce(jnp.where(zero, one, x), op=op)
            nzeros = reduce(zero.astype(np.int32), op=sum_op(np.int32))
            y_all, nzp_all, nz_all = full(y), full(nonzero_prod), full(nzeros)
            others = jnp.where(nz_all == 0, y_all / jnp.where(zero, one, x),
                               jnp.where((nz_all == 1) & zero, nzp_all,
                                         jnp.zeros_like(x)))
            return [y], [total(t * others)]
        raise NotImplementedError(
            f"jaxmpi.{fn}: derivatives are defined for MPI.SUM, MPI.PROD, "
            f"MPI.MAX and MPI.MIN, not {op}{hint}")

    jc.ad.primitive_jvps[prim] = jvp


def sum_only_start(fn, blocking):
    """jvp_check of a start whose blocking op has more derivatives than it
    (MPI.SUM only)."""
    def check(*, op, **_):
        if op.name != "SUM":
            raise NotImplementedError(
                f"jaxmpi.{fn}: derivatives are defined for MPI.SUM only, "
                f"not {op} (the blocking {blocking} also has PROD, MAX and "
                "MIN)")

    return check


# ---- allreduce: every rank gets the reduction of all ranks' x -------------
# In place: the result shares the input's buffer (MPI_IN_PLACE in the core;
# reduce, scan, bcast and alltoall too, gather off the root, recv and
# sendrecv their template's).
allreduce_p = define_blocking("allreduce", lambda x, *, comm, op, adjoint: [x],
                              aliases={0: 0})


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


reduction_jvp(allreduce_p, "allreduce", hint=" (mpi4jax: The adjoint of "
              "allreduce is only defined for op=MPI.SUM)")
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
    aliases={0: 0}, results=(0,),
    jvp_check=sum_only_start("iallreduce", "allreduce"),
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


# ---- variable counts along axis 0 ------------------------------------------
# counts, sendcounts, recvcounts: static tuples of row counts, one per rank,
# the same on every rank; they reach the C core as int64 array attributes.
# Rows along axis 0 are what the ranks split; a batch axis goes second (one
# MPI call for the whole batch: a row then holds every batch element's).


def _rows(x, n):
    return aval((n, *x.shape[1:]), x.dtype)


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

    jc.batching.primitive_batchers[prim] = batcher


# ---- allgatherv: every rank gets sum(counts) rows, rank r's counts[r] -----
allgatherv_p = define_blocking(
    "allgatherv", lambda x, *, comm, counts: [_rows(x, sum(counts))])


def _allgatherv_transpose(cts, x, *, comm, counts):
    # Reduce-scatter with counts: x̄_r = Σ_s ȳ_s[rows of r], one MPI call
    # (MPI_Reduce_scatter), exact like allgather's transpose.
    ct = cotangent(cts[0], _rows(x.aval, sum(counts)))
    return reduce_scatter_p.bind(ct, comm=comm, op=sum_op(ct.dtype),
                                 counts=counts)


linear(allgatherv_p, _allgatherv_transpose)
_rows_batching(allgatherv_p)

# iallgatherv: buffers [x, y (sum(counts) rows)], result y. The
# variable-count starts are out of place, with the derivatives and the
# batch axes of their blocking op: the batch goes second in every buffer on
# every rank (a row holds the whole batch's elements, the counts stay as
# given).
iallgatherv_p = define_start(
    "iallgatherv",
    buffers=lambda x, *, comm, counts: [x, _rows(x, sum(counts))],
    aliases={0: 0}, results=(1,), backward=blocking_backward(allgatherv_p),
    batch_axes=lambda **_: (1, [1, 1]))              # [x, y]

# ---- gatherv: the root gets sum(counts) rows; elsewhere x passes through --
gatherv_p = define_blocking(
    "gatherv",
    lambda x, *, comm, counts, root: [
        _rows(x, sum(counts)) if comm.rank == root else x],
    aliases=lambda *, comm, counts, root: None if comm.rank == root else {0: 0},
)


def _gatherv_transpose(cts, x, *, comm, counts, root):
    # x̄_r = ȳ_root[rows of r] (a scatterv; off the root ct is only its
    # template), plus its own cotangent off the root.
    if comm.rank == root:
        ct = cotangent(cts[0], _rows(x.aval, sum(counts)))
    else:
        ct = cotangent(cts[0], x)
    (part,) = scatterv_p.bind(ct, comm=comm, counts=counts, root=root)
    return [part if comm.rank == root else part + ct]


linear(gatherv_p, _gatherv_transpose)
_rows_batching(gatherv_p)

# igatherv: root buffers [x, y (sum(counts) rows)], result y; elsewhere
# [x], passed through, as gatherv.
igatherv_p = define_start(
    "igatherv", **rooted(lambda x, comm, counts: _rows(x, sum(counts))),
    backward=blocking_backward(gatherv_p),
    batch_axes=lambda *, comm, root, **_: (
        1, [1, 1] if comm.rank == root else [1]))   # [x, y] / [x]

# ---- scatterv: rank r gets counts[r] rows of the root's x ------------------
# Elsewhere x is a template of the result (counts[r] rows), as in scatter.
scatterv_p = define_blocking(
    "scatterv",
    lambda x, *, comm, counts, root: [_rows(x, counts[comm.rank])],
)


def _scatterv_transpose(cts, x, *, comm, counts, root):
    # The root collects every rank's cotangent; elsewhere x was a template.
    ct = cotangent(cts[0], _rows(x.aval, counts[comm.rank]))
    (y,) = gatherv_p.bind(ct, comm=comm, counts=counts, root=root)
    return [y if comm.rank == root else zeros_from(y, x)]


linear(scatterv_p, _scatterv_transpose)
_rows_batching(scatterv_p)

# iscatterv: root buffers [x (sum(counts) rows), y (counts[root] rows)],
# result y; elsewhere [y] (the template's buffer, counts[rank] rows).
iscatterv_p = define_start(
    "iscatterv", **rooted(lambda x, comm, counts: _rows(x, counts[comm.rank])),
    backward=blocking_backward(scatterv_p),
    batch_axes=lambda *, comm, root, **_: (
        1, [1, 1] if comm.rank == root else [1]))   # [x, y] / [y]

# ---- alltoallv: block j of x (sendcounts[j] rows) goes to rank j ----------


def _alltoallv_aliases(*, comm, sendcounts, recvcounts):
    """The result shares x's buffer where the exchange can run in place
    (otherwise XLA copies the new result into a loop's carry every
    iteration): equal counts per peer, and at most 2 ranks, where a rank's
    counts are equal exactly when its peer's are (docs/design.md, "Results
    in place"). The C core takes the same decision from the counts."""
    if comm.size <= 2 and tuple(sendcounts) == tuple(recvcounts):
        return {0: 0}
    return None


alltoallv_p = define_blocking(
    "alltoallv",
    lambda x, *, comm, sendcounts, recvcounts: [_rows(x, sum(recvcounts))],
    aliases=_alltoallv_aliases,
)


def _alltoallv_transpose(cts, x, *, comm, sendcounts, recvcounts):
    # Every block goes back where it came from: counts swapped.
    ct = cotangent(cts[0], _rows(x.aval, sum(recvcounts)))
    return alltoallv_p.bind(ct, comm=comm, sendcounts=recvcounts,
                            recvcounts=sendcounts)


linear(alltoallv_p, _alltoallv_transpose)
_rows_batching(alltoallv_p)

# ialltoallv: buffers [x, y (sum(recvcounts) rows)], result y. Never in
# place (the blocking alltoallv is, with equal counts at up to 2 ranks).
ialltoallv_p = define_start(
    "ialltoallv",
    buffers=lambda x, *, comm, sendcounts, recvcounts: [
        x, _rows(x, sum(recvcounts))],
    aliases={0: 0}, results=(1,), backward=blocking_backward(alltoallv_p),
    batch_axes=lambda **_: (1, [1, 1]))              # [x, y]

# ---- reduce_scatter: rank r gets op over ranks of block r of x -------------
# counts None: x is (size, *s), the blocks its rows, the result s
# (MPI_Reduce_scatter_block). counts (rows per rank, static): x has
# sum(counts) rows, block r the counts[r] rows after those of ranks < r, the
# result (counts[r], *s) (MPI_Reduce_scatter; the C core gets the counts in
# rows, as written, and takes a row's size from x).


def _reduce_scatter_shape(x, *, comm, op, counts):
    if counts is None:
        return [aval(x.shape[1:], x.dtype)]
    return [aval((counts[comm.rank], *x.shape[1:]), x.dtype)]


reduce_scatter_p = define_blocking("reduce_scatter", _reduce_scatter_shape,
                                   targets=("reduce_scatter_block",))


def _reduce_scatter_lowering(ctx, x, *, comm, op, counts):
    # Equal blocks (no counts) go to the C core's reduce_scatter_block.
    target = "reduce_scatter_block" if counts is None else "reduce_scatter"
    return lower_call(ctx, target, [x], dict(comm=comm, op=op, counts=counts))


register_lowering(reduce_scatter_p, _reduce_scatter_lowering)


def _gather_blocks(y, comm, counts):
    """Every rank's block y_r, in x's layout: an allgather (allgatherv for
    counts), one MPI call."""
    if counts is None:
        return allgather_p.bind(y, comm=comm)[0]
    return allgatherv_p.bind(y, comm=comm, counts=counts)[0]


def _reduce_scatter_transpose(cts, x, *, comm, op, counts):
    # x̄_s[block r] = ȳ_r on every rank s: an allgather of the cotangents
    # (exact with counts too).
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.reduce_scatter: {op} is not linear; transpose needs "
            "MPI.SUM")
    shape, dtype = x.aval.shape, x.aval.dtype
    ct = cotangent(cts[0], _reduce_scatter_shape(
        aval(shape, dtype), comm=comm, op=op, counts=counts)[0])
    return [_gather_blocks(ct, comm, counts)]


def _reduce_scatter_batcher(args, dims, *, comm, op, counts):
    # One call for the batch: it goes inside each block (second axis); the
    # result keeps it first (blocks of equal size) or second (counts).
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 1)
    return (reduce_scatter_p.bind(x, comm=comm, op=op, counts=counts),
            [0 if counts is None else 1])


# Its JVP is allreduce's, with each rank's block (docs/autodiff.md).
reduction_jvp(reduce_scatter_p, "reduce_scatter",
              lambda v, *, comm, counts, **_: _gather_blocks(v, comm, counts))
jc.ad.primitive_transposes[reduce_scatter_p] = _reduce_scatter_transpose
jc.batching.primitive_batchers[reduce_scatter_p] = _reduce_scatter_batcher


# ireduce_scatter: buffers [x, y (this rank's block)], result y; out of
# place, as reduce_scatter. Equal blocks start MPI_Ireduce_scatter_block
# (the C start ireduce_scatter_block), counts MPI_Ireduce_scatter.
ireduce_scatter_p = define_start(
    "ireduce_scatter",
    buffers=lambda x, *, comm, op, counts: [x, *_reduce_scatter_shape(
        x, comm=comm, op=op, counts=counts)],
    aliases={0: 0}, results=(1,),
    jvp_check=sum_only_start("ireduce_scatter", "reduce_scatter"),
    backward=blocking_backward(reduce_scatter_p),
    # [x (rows, n, ...), y]: y is (n, ...) for equal blocks, else (rows, n,
    # ...), as reduce_scatter's batching rule.
    batch_axes=lambda *, counts, **_: (1, [1, 0 if counts is None else 1]),
    target=lambda *, counts, **_: ("ireduce_scatter_block" if counts is None
                                   else "ireduce_scatter"),
    targets=("ireduce_scatter_block",))
