"""How jaxmpi's primitives are made, each from its row: ``define_blocking``
(a blocking op: its shape rule, eager implementation, and lowering to the
op's FFI handler), ``define_start`` (a non-blocking start: the row of
properties its wait, JVP, transpose and batching read), the wait primitive
that completes every start, one lowering for all three (``lower_call``:
the op's attributes, the call's site and the effect's token), and the
autodiff and batching rules they share.

Autodiff convention (docs/autodiff.md): every op's transpose is its exact
adjoint, except allreduce, whose result is replicated: by default its
cotangent is taken as counted once (transpose = identity, as in mpi4jax and
JPI); ``adjoint="sum"`` gives the exact adjoint (allreduce of cotangents).
Transposed point-to-point messages travel in their own tag space.

A start's JVP sends the tangents as a second request of the same op,
started right after the primal one and waited next to it; its transpose is
a backward request started where the forward wait was and waited where the
forward start was, so the backward program overlaps in the same places;
its batching is one request for the whole batch, the batch axis where its
blocking op's rule puts it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _core, _devices, _registry, _validate
from . import _jax_compat as jc
from ._effect import join_token_lowering, lower_with_token, mpi_effect
from ._region import apply_in_region
from ._requests import raise_if_dropped

# XLA:CPU and XLA:GPU (CUDA) lower every op to the same custom call name; the
# C core registers a handler for each platform (csrc/cuda_staging.c moves GPU
# data).
LOWERING_PLATFORMS = ("cpu", "cuda")


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _as_int64(value: int) -> np.int64:
    value &= 0xFFFFFFFFFFFFFFFF
    return np.int64(value - (1 << 64) if value >= (1 << 63) else value)


def attributes(params) -> dict:
    """The FFI attributes among an op's parameters, as the C core reads
    them (_registry's kinds); a parameter that is None is none. A call
    traced over several devices also gets their number and the
    communicator of each position (``devices``, ``comms``)."""
    attrs = {}
    comm = params.get("comm")
    if getattr(comm, "devices", 0):
        attrs["devices"] = np.int64(comm.devices)
        attrs["comms"] = np.asarray([_as_int64(h) for h in comm.comms],
                                    np.int64)
    for k, v in params.items():
        if v is None:
            continue
        if k in _registry.HANDLE_ATTRS:
            attrs[k] = _as_int64(int(getattr(v, "handle", v)))
        elif k in _registry.INT_ATTRS:
            attrs[k] = np.int64(v)
        elif k in _registry.ARRAY_ATTRS:
            attrs[k] = np.asarray(v, np.int64)
    return attrs


def site(ctx) -> int:
    """An id of the Python line that made this call (the innermost frame
    of the user's code, outside JAX and jaxmpi), registered with the C core
    for its messages; 0 when JAX kept no source information. Done once per
    lowering, so the per-call path carries one int64 attribute and no
    strings. Eager calls reuse the executable compiled for the first call
    of the same op and shapes, so they name that call's line."""
    try:
        for frame in jc.lowering_user_frames(ctx):
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


def lower_call(ctx, target, operands, params, aliases=None):
    """The call of C handler jaxmpi_<target> on `operands`, with the FFI
    attributes among `params`, the call's site and the effect's token
    (`aliases`: XLA's operand_output_aliases): every blocking op, start and
    wait is lowered here."""
    rule = jax.ffi.ffi_lowering(f"jaxmpi_{target}", has_side_effect=True,
                                **({"operand_output_aliases": aliases}
                                   if aliases else {}))
    attrs = attributes(params)
    where = site(ctx)
    if where:
        attrs["site"] = np.int64(where)
    return lower_with_token(ctx, rule, *operands, **attrs)


def register_lowering(prim, lowering) -> None:
    """`lowering` for both platforms, lowered at each call (its site)."""
    for platform in LOWERING_PLATFORMS:
        jc.mlir.register_lowering(prim, lowering, platform=platform,
                                  **jc.UNCACHED)


class MPIPrimitive(jc.Primitive):
    """A jaxmpi primitive: inside shard_map its operands are first made to
    vary over the mesh axes its results will (_devices.vary_operands), so
    that its transpose gives each operand a cotangent of its own type.
    `messages`: its results are messages from peers (its row says)."""

    def __init__(self, name, messages=False):
        super().__init__(name)
        self.multiple_results = True
        self.messages = messages

    def bind(self, *args, **params):
        return super().bind(*_devices.vary_operands(args, self.messages),
                            **params)


def define_blocking(name: str, shape_rule, aliases=None, *, messages=False,
                    targets=()):
    """The primitive jaxmpi_<name> of a blocking op, registered in
    _registry.BLOCKING: its results have the avals `shape_rule` gives, it
    runs eagerly as a cached one-op region, and it lowers to the C handler
    of the same name (`aliases`: {operand: result} sharing a buffer, as
    XLA's operand_output_aliases, or a function of the op's parameters
    giving that, for ops whose shapes differ between ranks; `messages`: its
    results are messages from peers, typed inside shard_map as varying over
    every manual axis). An op whose lowering differs registers its own with
    ``register_lowering``, and names the other C handlers it calls in
    `targets`."""
    prim = MPIPrimitive(f"jaxmpi_{name}", messages)
    prim.def_impl(partial(apply_in_region, prim))
    prim.def_effectful_abstract_eval(
        lambda *avals, **params: (_devices.typed(
            shape_rule(*avals, **params), avals, messages), {mpi_effect}))

    def lowering(ctx, *operands, **params):
        return lower_call(ctx, name, operands, params,
                          aliases(**params) if callable(aliases) else aliases)

    register_lowering(prim, lowering)
    _registry.BLOCKING[name] = prim
    _registry.TARGETS["blocking"] |= {name, *targets}
    return prim


def aval(shape, dtype):
    return jc.ShapedArray(tuple(shape), np.dtype(dtype))


# ---- autodiff and batching of the blocking ops -------------------------------


def zeros(x):
    """Zeros shaped like x (a value, an aval or an undefined primal);
    inside shard_map typed as varying where x does (a cotangent must have
    its primal's type)."""
    aval = x.aval if hasattr(x, "aval") else x
    z = jnp.zeros(aval.shape, aval.dtype)
    axes = jc.vma(aval) - jc.vma(z.aval) if hasattr(z, "aval") else ()
    return jc.pvary(z, axes) if axes else z


def zeros_from(ct, like):
    """Zeros shaped like `like`, computed linearly from ct (from none of its
    values), so that transposing the transpose keeps the same communication
    on every rank."""
    aval = like.aval if hasattr(like, "aval") else like
    if type(ct) is jc.ad.Zero:
        return zeros(aval)
    none = jnp.sum(jnp.ravel(ct)[:0])
    return jnp.broadcast_to(none.astype(aval.dtype), aval.shape)


def cotangent(ct, like):
    """A cotangent as an array: every rank must take part in the transposed
    communication, also where its cotangent is a symbolic zero."""
    if type(ct) is jc.ad.Zero:
        return zeros(like)
    return ct


def linear(prim, transpose, check=None):
    """prim is linear in its operands: its JVP applies prim to the tangents
    (the same communication, so forward mode works everywhere)."""

    def jvp(primals, tangents, **params):
        if check is not None:
            check(**params)
        out = prim.bind(*primals, **params)
        if all(type(t) is jc.ad.Zero for t in tangents):
            return out, [jc.ad.Zero.from_primal_value(o) for o in out]
        tangents = [jc.ad.instantiate_zeros(t) for t in tangents]
        return out, prim.bind(*tangents, **params)

    jc.ad.primitive_jvps[prim] = jvp
    jc.ad.primitive_transposes[prim] = transpose


def to_front(x, d):
    """Move batch axis d of x to the front (d None: not batched)."""
    return x if d == 0 or d is None else jnp.moveaxis(x, d, 0)


def elementwise_batcher(prim):
    """For ops that act on each element independently: one call for the
    whole batch, the batch axis stays where it is."""

    def rule(args, dims, **params):
        return prim.bind(*args, **params), [dims[0]] * len(prim.abstract_eval(
            *[jc.ShapedArray(a.shape, a.dtype) for a in args], **params)[0])

    jc.batching.primitive_batchers[prim] = rule


def rooted_batcher(prim):
    """Rooted ops: the batch axis goes first, one call for the whole batch."""

    def rule(args, dims, **params):
        (x,), (d,) = args, dims
        return prim.bind(to_front(x, d), **params), [0]

    jc.batching.primitive_batchers[prim] = rule


def sum_op(dtype):
    """MPI.SUM for dtype, as the reductions' derivatives need it."""
    return _validate.reduction_op(MPI.SUM, dtype, "allreduce",
                                  _core.get().half_ops)


def sum_only(fn, op):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.{fn}: derivatives are defined for MPI.SUM only, not {op} "
            "(allreduce also supports MPI.PROD, MPI.MAX and MPI.MIN)"
        )


def sum_only_jvp(prim, fn):
    def jvp(primals, tangents, **params):
        sum_only(fn, params["op"])
        out = prim.bind(*primals, **params)
        if type(tangents[0]) is jc.ad.Zero:
            return out, [jc.ad.Zero.from_primal_value(o) for o in out]
        return out, prim.bind(jc.ad.instantiate_zeros(tangents[0]), **params)

    jc.ad.primitive_jvps[prim] = jvp


# ---- join_token: order later calls after a user-supplied token ------------
join_token_p = jc.Primitive("jaxmpi_join_token")
join_token_p.multiple_results = True
join_token_p.def_impl(partial(jc.apply_primitive, join_token_p))
join_token_p.def_effectful_abstract_eval(lambda token: ([], {mpi_effect}))
for _platform in LOWERING_PLATFORMS:
    jc.mlir.register_lowering(join_token_p, join_token_lowering,
                              platform=_platform)


# ---- non-blocking starts -----------------------------------------------------

# The abstract value of a request's handle (csrc/request.h): a float32
# scalar, so that a tangent request travels with its primal through JAX's
# autodiff (integers get empty float0 tangents).
HANDLE_AVAL = jc.ShapedArray((), np.dtype(np.float32))


@dataclass(frozen=True)
class Backward:
    """A start's transpose: ``start(cts, bufs, spec)`` -> (handle, buffers)
    where the forward wait was; ``finish(handle, buffers, operands, spec)``
    -> the operands' cotangents where the forward start was."""

    start: Callable
    finish: Callable


def batch_in_front(**params):
    """vmap, one request for the whole batch: (the operands' batch axis,
    each buffer's, None: all 0). In front of everything suits the
    elementwise and point-to-point ops; where an op splits its first axis
    over ranks the batch goes second (an operand of alltoall, the root's of
    scatter), and where it stacks the ranks in front of x the result has
    the batch second, as the blocking ops' batching rules do."""
    return 0, None


def one_result(results, keep):
    """A start's wait: its one result, or None (isend, ibarrier)."""
    return results[0][0] if results[0] else None


def every_result(results, keep):
    """A start's wait: every result, as a tuple (ineighbor_exchange's
    pairs)."""
    return tuple(results[0])


@dataclass(frozen=True)
class WaitSpec:
    """What a wait needs to know of its start (static, hashable): the
    start's name, its parameters and which of its buffers are results."""

    op: str
    params: tuple          # the start's parameters, as sorted items
    results: tuple         # indices of the buffers that are the op's results

    def param(self, name):
        return dict(self.params)[name]


@dataclass(frozen=True)
class Start:
    """A non-blocking start, one row (_registry.STARTS[name]): its
    primitive and what the wait, the JVP, the transpose and vmap need to
    know of it (define_start's arguments)."""

    name: str
    prim: object
    results: object
    backward: Backward
    jvp_check: Callable | None
    batch_axes: Callable
    after_wait: Callable | None
    finish: Callable

    def wait_spec(self, operands, params) -> WaitSpec:
        res = self.results
        if callable(res):
            res = res(len(operands), **params)
        return WaitSpec(self.name, tuple(sorted(params.items())), tuple(res))

    def buffers(self, operands, params):
        """The avals of the start's buffers for these operands."""
        return self.prim.abstract_eval(*_avals(operands), rid=0,
                                       **params)[0][1:]


def define_start(name, *, buffers, aliases, results, backward,
                 jvp_check=None, batch_axes=batch_in_front, after_wait=None,
                 finish=one_result, target=None, targets=(),
                 messages=False):
    """The start primitive jaxmpi_<name> and its row in _registry.STARTS.

    buffers: the shape rule of the buffers the request uses (avals, from the
        operands' and the parameters); the start returns [handle, *buffers].
    aliases: {operand: buffer} sharing memory, or a function of the number
        of operands and the parameters giving that.
    results: the indices of the buffers that are the wait's results, or a
        function of the number of operands and the parameters.
    backward: the transpose's backward request (Backward).
    jvp_check: raises for parameters that have no derivative.
    batch_axes: (**params) -> (operand axis, buffer axes), batch_in_front's
        form.
    after_wait: (results, WaitSpec) -> results, what the wait makes of its
        results (iexscan: rank 0's identity).
    finish: (each start's results, kept arrays) -> what the wait of this
        start alone returns (one_result, every_result).
    target: a function of the parameters naming the C start where it is
        not `name`; `targets`, the C starts it may name.
    messages: its results are messages from peers (define_blocking's).
    """
    prim = MPIPrimitive(f"jaxmpi_{name}", messages)

    def impl(*args, rid, **params):
        # Eagerly a request is tracked by its Request object, not by rid
        # (which would defeat the compilation cache).
        return jc.apply_primitive(prim, *args, rid=0, **params)

    prim.def_impl(impl)
    prim.def_effectful_abstract_eval(
        lambda *avals, rid, **params: (_devices.typed(
            [HANDLE_AVAL, *buffers(*avals, **params)], avals, messages,
            extra=(0,)), {mpi_effect}))

    def lowering(ctx, *operands, rid, **params):
        raise_if_dropped(rid)
        shared = aliases(len(operands), **params) if callable(aliases) \
            else aliases
        # A parameter that is None (counts of equal blocks) is no attribute.
        return lower_call(ctx, target(**params) if target else name, operands,
                          params, {i: 1 + o for i, o in shared.items()})

    register_lowering(prim, lowering)
    row = Start(name, prim, results, backward, jvp_check, batch_axes,
                after_wait, finish)
    _registry.STARTS[name] = row
    _registry.TARGETS["start"] |= {name, *targets}
    jc.ad.primitive_jvps[prim] = partial(_start_jvp, row)
    jc.ad.primitive_transposes[prim] = partial(_start_transpose, row)
    jc.batching.primitive_batchers[prim] = partial(_start_batcher, row)
    return prim


def _avals(xs):
    return [x.aval if hasattr(x, "aval") else x for x in xs]


def _start_jvp(row, primals, tangents, *, rid, **params):
    if row.jvp_check:
        row.jvp_check(**params)
    out = row.prim.bind(*primals, rid=rid, **params)
    if all(type(t) is jc.ad.Zero for t in tangents):
        return out, [jc.ad.Zero.from_primal_value(o) for o in out]
    # The tangents travel as a second request of the same op, started
    # right after the primal one (same tags: MPI matches in order).
    tangents = [jc.ad.instantiate_zeros(t) for t in tangents]
    return out, row.prim.bind(*tangents, rid=0, **params)


def _start_transpose(row, cts, *operands, rid, **params):
    spec = row.wait_spec(operands, params)
    bh, *bbufs = cts
    bufs = _avals(row.buffers(operands, params))
    bbufs = [cotangent(b, a) for b, a in zip(bbufs, bufs)]
    if type(bh) is jc.ad.Zero:
        bh = jnp.zeros((), np.float32)
    return row.backward.finish(bh, bbufs, operands, spec)


def _start_batcher(row, args, dims, *, rid, **params):
    n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    axis, buf_axes = row.batch_axes(**params)
    args = [jnp.moveaxis(a, d, axis) if d is not None
            else jnp.expand_dims(a, axis).repeat(n, axis)
            for a, d in zip(args, dims)]
    if "recv_avals" in params:
        params["recv_avals"] = tuple(((n, *shape), dtype) for shape, dtype
                                     in params["recv_avals"])
    out = row.prim.bind(*args, rid=rid, **params)
    return out, [None, *(buf_axes or [0] * (len(out) - 1))]


# ---- the wait ---------------------------------------------------------------
# jaxmpi_wait(handle, every buffer of the request, token) -> the op's
# results, aliased to their buffers (csrc/request.h): the buffers reach it
# as the start left them (XLA keeps them alive until here), and the wait is
# an asynchronous XLA FFI handler: a request not yet complete does not hold
# XLA:CPU's executor.

wait_p = jc.Primitive("jaxmpi_wait")
wait_p.multiple_results = True
_registry.WAITS["wait"] = wait_p
_registry.TARGETS["wait"].add("wait")


def _wait_abstract(handle, *bufs, spec):
    return [bufs[i] for i in spec.results], {mpi_effect}


wait_p.def_effectful_abstract_eval(_wait_abstract)


@lru_cache(maxsize=None)
def _eager_wait(spec):
    # Eagerly the buffers are arguments of the wait's own program: donated,
    # so that XLA hands the handler the very buffers MPI writes (an aliased
    # argument not donated would be copied before the call).
    donate = tuple(1 + i for i in spec.results)
    return jax.jit(lambda h, *bufs: wait_p.bind(h, *bufs, spec=spec),
                   donate_argnums=donate)


wait_p.def_impl(lambda *args, spec: _eager_wait(spec)(*args))


def _wait_lowering(ctx, handle, *bufs, spec):
    return lower_call(ctx, "wait", (handle, *bufs), {},
                      {1 + i: k for k, i in enumerate(spec.results)})


def _computed_since(value):
    """The tensors computed after `value`'s operation in the current block
    and not used there yet: every operation emitted since (what the program
    computes between a start and its wait) either has one of them among its
    results or feeds one of them. Empty where `value` is not an operation's
    result in this block."""
    start = value.owner
    block = jc.ir.InsertionPoint.current.block
    if not isinstance(start, (jc.ir.Operation, jc.ir.OpView)):
        return []
    start = start.operation
    found, since = False, []
    for op in block.operations:
        op = op.operation
        if not found:
            found = op == start
            continue
        since.extend(r for r in op.results
                     if str(r.type).startswith("tensor<")
                     and next(iter(r.uses), None) is None)
    return since


def _wait_lowering_gpu(ctx, handle, *bufs, spec):
    """The wait on XLA:GPU, after everything its program computes between
    the start and the wait. A GPU wait blocks XLA's host thread until MPI
    completes (XLA:GPU takes no future), and XLA:GPU runs its thunks in the
    order its scheduler chose, which puts a wait that no data ties to the
    computation before it right after its start: nothing was enqueued on
    the GPU to overlap with (H200, benchmarks/overlap.py --gpu: T = C + M,
    efficiency 0.01-0.02 at 64 B and 512 KiB). The effect token the wait
    takes goes through an optimization barrier with the tensors computed
    since the start (_computed_since), so that the wait comes after them,
    as written."""
    since = _computed_since(handle)
    if not since:
        return _wait_lowering(ctx, handle, *bufs, spec=spec)
    token = ctx.tokens_in.get(mpi_effect)
    barrier = jc.hlo.OptimizationBarrierOp([token, *since])
    inner = ctx.replace(tokens_in=ctx.tokens_in.update_tokens(
        jc.mlir.TokenSet({mpi_effect: barrier.results[0]})))
    outs = _wait_lowering(inner, handle, *bufs, spec=spec)
    ctx.set_tokens_out(inner.tokens_out)
    return outs


# Lowered at each call (its site), with a wait handler in the C core for
# each platform.
jc.mlir.register_lowering(wait_p, _wait_lowering, platform="cpu", **jc.UNCACHED)
jc.mlir.register_lowering(wait_p, _wait_lowering_gpu, platform="cuda",
                          **jc.UNCACHED)


def waits(parts):
    """The wait of each part of a request, in order: the results MPI
    delivered to each (parts: (handle, buffers, WaitSpec) each)."""
    return [wait_p.bind(handle, *bufs, spec=spec)
            for handle, bufs, spec in parts]


def delivered(results, specs):
    """What each part's wait gives: its results as its start's row makes
    them (after_wait)."""
    out = []
    for outs, spec in zip(results, specs):
        after = _registry.STARTS[spec.op].after_wait
        out.append(after(outs, spec) if after else outs)
    return out


def _wait_jvp(primals, tangents, *, spec):
    out = wait_p.bind(*primals, spec=spec)
    th, *tbufs = tangents
    if type(th) is jc.ad.Zero:
        return out, [jc.ad.Zero.from_primal_value(o) for o in out]
    tbufs = [jc.ad.instantiate_zeros(t) for t in tbufs]
    return out, wait_p.bind(th, *tbufs, spec=spec)


def _wait_transpose(cts, th, *tbufs, spec):
    """Start the backward request of the forward tangent request; its handle
    and buffers travel back to the forward start's transpose as the
    cotangents of the tangent handle and buffers."""
    bufs = _avals(tbufs)
    cts = [cotangent(ct, bufs[i]) for ct, i in zip(cts, spec.results)]
    bh, bbufs = _registry.STARTS[spec.op].backward.start(cts, bufs, spec)
    return [bh, *bbufs]


def _wait_batcher(args, dims, *, spec):
    h, *bufs = args
    if dims[0] is not None:
        raise ValueError("jaxmpi.wait: a batch of requests cannot be waited "
                         "as one; start one request for the batch")
    # The buffers stay where the start put them (each batch axis where its
    # op needs it): moving one would hand the wait a copy, not the buffer
    # MPI writes.
    n = next((b.shape[d] for b, d in zip(bufs, dims[1:]) if d is not None),
             None)
    bufs = [b if d is not None else jnp.broadcast_to(b, (n, *b.shape))
            for b, d in zip(bufs, dims[1:])]
    out = wait_p.bind(h, *bufs, spec=spec)
    return out, [dims[1 + i] if dims[1 + i] is not None else 0
                 for i in spec.results]


jc.ad.primitive_jvps[wait_p] = _wait_jvp
jc.ad.primitive_transposes[wait_p] = _wait_transpose
jc.batching.primitive_batchers[wait_p] = _wait_batcher


# ---- what several starts' rows share ----------------------------------------
# The collectives other than iallreduce and ibcast are linear, so the
# tangents travel as a second request; the transpose is the blocking op's
# (every rank runs it at the same point of the backward program, where the
# forward wait was), its cotangent of x handed to the start's transpose in
# buffer 0 (x-shaped for all).


def blocking_backward(blocking_p, nx=1):
    def start(cts, bufs, spec):
        params = dict(spec.params)
        xs = [jc.ad.UndefinedPrimal(b) for b in bufs[:nx]]
        cx = jc.ad.primitive_transposes[blocking_p](list(cts), *xs, **params)
        cx = [cotangent(c, b) for c, b in zip(cx, bufs[:nx])]
        return (jnp.zeros((), np.float32),
                [*cx, *[zeros(b) for b in bufs[nx:]]])

    return Backward(start, lambda bh, bbufs, operands, spec: bbufs[:nx])


def rooted(root_shape) -> dict:
    """define_start's buffers, aliases and results for rooted ops whose
    root has its own buffer beside x's: buffers [x, y] on the root (y:
    root_shape(x, comm, **the other parameters)), [x] (also the result)
    elsewhere; x's buffer is operand 0's."""
    def buffers(x, *, comm, root, **params):
        return ([x, root_shape(x, comm, **params)] if comm.rank == root
                else [x])

    def results(nops, *, comm, root, **params):
        return (1,) if comm.rank == root else (0,)

    return dict(buffers=buffers, aliases={0: 0}, results=results)


def rooted_axes(root_axes, other_axes, axis_at_root=0):
    """batch_axes of a rooted start: its root's and the other ranks'."""
    def axes(*, comm, root, **_):
        if comm.rank == root:
            return axis_at_root, root_axes
        return 0, other_axes

    return axes


def sum_only_check(fn):
    """jvp_check of a start with derivatives for MPI.SUM only."""
    def check(*, op, **_):
        sum_only(fn, op)

    return check
