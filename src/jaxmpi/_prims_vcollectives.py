"""The variable-count collectives and reduce_scatter as primitives
(csrc/collectives.c), one section per op: its shape rule, JVP, transpose
and batching rule, and beside them its non-blocking start's row
(csrc/request.c). reduce_scatter is here because allgatherv's transpose
is a reduce_scatter with counts and reduce_scatter's transpose an
allgatherv."""

from __future__ import annotations

from functools import partial

import jax.numpy as jnp
import numpy as np

from . import _jax_compat as jc
from ._define import (aval, blocking_backward, cotangent, define_blocking,
                      define_start, linear, lower_call, register_lowering,
                      rooted, sum_op, zeros_from)
from ._prims_collectives import allgather_p


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


reduce_scatter_p = define_blocking("reduce_scatter", _reduce_scatter_shape)


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


def _reduce_scatter_jvp(primals, tangents, *, comm, op, counts):
    # As allreduce's (docs/autodiff.md), with each rank's block: SUM is
    # linear; MAX/MIN send the tangent of the rank(s) holding the extreme
    # value (ties split evenly); PROD is exact also where some x_s = 0.
    (x,), (t,) = primals, tangents
    rs = partial(reduce_scatter_p.bind, comm=comm, counts=counts)
    (y,) = rs(x, op=op)
    if type(t) is jc.ad.Zero:
        return [y], [jc.ad.Zero.from_primal_value(y)]
    t = jc.ad.instantiate_zeros(t)
    total = partial(rs, op=sum_op(x.dtype))
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
        (nzeros,) = rs(zero.astype(np.int32), op=sum_op(np.int32))
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


jc.ad.primitive_jvps[reduce_scatter_p] = _reduce_scatter_jvp
jc.ad.primitive_transposes[reduce_scatter_p] = _reduce_scatter_transpose
jc.batching.primitive_batchers[reduce_scatter_p] = _reduce_scatter_batcher


# ireduce_scatter: buffers [x, y (this rank's block)], result y; out of
# place, as reduce_scatter. Equal blocks start MPI_Ireduce_scatter_block
# (the C start ireduce_scatter_block), counts MPI_Ireduce_scatter.
def _ireduce_scatter_check(*, op, **_):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.ireduce_scatter: derivatives are defined for MPI.SUM "
            f"only, not {op} (the blocking reduce_scatter also has PROD, MAX "
            "and MIN)")


ireduce_scatter_p = define_start(
    "ireduce_scatter",
    buffers=lambda x, *, comm, op, counts: [x, *_reduce_scatter_shape(
        x, comm=comm, op=op, counts=counts)],
    aliases={0: 0}, results=(1,), jvp_check=_ireduce_scatter_check,
    backward=blocking_backward(reduce_scatter_p),
    # [x (rows, n, ...), y]: y is (n, ...) for equal blocks, else (rows, n,
    # ...), as reduce_scatter's batching rule.
    batch_axes=lambda *, counts, **_: (1, [1, 0 if counts is None else 1]),
    target=lambda *, counts, **_: ("ireduce_scatter_block" if counts is None
                                   else "ireduce_scatter"))
