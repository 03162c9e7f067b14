"""Non-blocking operations: a start primitive per op, one wait primitive, the
Request value that joins them, and the checks against misuse.

A start ``jaxmpi_i<op>`` posts the MPI_I* call and returns the request's
handle (a float32 scalar, see csrc/request.h) and every buffer the request
uses: send buffers aliased to their inputs, receive buffers aliased to their
templates. Those buffers are results of the start that only the Request
holds, so no other operation of the program can read a half-received buffer
or overwrite one MPI still sends from; XLA copies an input first where it is
still needed afterwards (donate it to avoid the copy). ``jaxmpi_wait``
takes the handle and all of those buffers (XLA keeps them alive until the
wait), and returns the op's results aliased to their receive buffers. Starts
and waits carry jaxmpi's ordered effect: they are issued in program order on
every rank. The wait is an asynchronous XLA FFI handler: a request not yet
complete does not hold XLA:CPU's executor.

Per op, side by side: the start's shape rule and aliases, the buffers that
are results, the JVP (the tangents travel as a second request started and
waited next to the primal one) and the transpose (a backward request started
where the forward wait was and waited where the forward start was, so the
backward program overlaps in the same places), batching (one request for
the whole batch, the batch axis in front, as the blocking ops do).
"""

from __future__ import annotations

import itertools
import re
import sys
import textwrap
import weakref
from dataclasses import dataclass
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _core, _ops
from . import _jax_compat as _jcore
from ._jax_compat import ShapedArray, Primitive, ad, apply_primitive, batching, mlir
from . import _validate as v
from ._effect import lower_with_token, mpi_effect
from ._validate import ANY_SOURCE, ANY_TAG

HANDLE = ShapedArray((), np.dtype(np.float32))


# ---- misuse: requests dropped, waited twice, or leaving their function ------

_next_rid = itertools.count(1)
_dropped: dict[int, _State] = {}  # rid -> state, traced requests never waited
_leaked: list[str] = []         # eager requests collected without a wait
_graveyard: list = []           # their buffers, kept alive: MPI may write them


@dataclass(eq=False)
class _State:
    op: str
    where: str
    rid: int
    trace: object
    waited: bool = False


def _describe(state):
    return f"a request of jaxmpi.{state.op} started at {state.where}"


def _on_drop(state, bufs):
    if state.waited:
        return
    if state.trace is None:
        _leaked.append(_describe(state))
        _graveyard.append(bufs)
    else:
        _dropped[state.rid] = state


def check_no_leaks(fn: str) -> None:
    """Raise if a request was dropped without a wait (called by every jaxmpi
    operation before anything else)."""
    if _leaked or _dropped:
        what = _leaked + [_describe(st) for st in _dropped.values()]
        _leaked.clear()
        _dropped.clear()
        raise RuntimeError(
            f"jaxmpi.{fn}: {what[0]} was never waited"
            + (f" (and {len(what) - 1} more)" if len(what) > 1 else "")
            + ". Every request must be passed to jaxmpi.wait (or waitall) in "
            "the function that started it; its MPI call is still pending and "
            "its buffers are kept alive.")


def _caller():
    f = sys._getframe(1)
    here = __file__.rsplit("/", 1)[0]
    while f is not None and (f.f_code.co_filename.startswith(here)):
        f = f.f_back
    return "?" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


class Request:
    """A started non-blocking operation: what a start (``isend``, ``irecv``,
    ...) returns and ``wait`` (or ``waitall``) completes.

    A JAX value made by the starts, not by the caller. It holds the
    handle of each request in flight (a float32 scalar; one for most
    starts, one per ``ineighbor_exchange`` it is made of for
    ``ihalo_exchange`` and ``ineighbor_alltoallv``) and every buffer MPI
    uses until the wait: send buffers aliased to the inputs, receive
    buffers to the templates, results of the start that only the Request
    holds, so no other operation of the program can read a half-received
    buffer or overwrite one MPI still sends from; and what the wait does
    with the messages (``ihalo_exchange``: the block whose halo they fill).
    It must be waited exactly once, in the function that started it (the
    same ``jit``, loop body, ``cond`` branch or transformation). Misuse is
    an error that names the op and where the request was started:

    * returned from a jitted function, or passed into an inner ``jit``,
      loop body or ``cond`` branch: ``TypeError`` at trace time (a Request
      is a pytree only outside transformations);
    * waited twice, or waited in another function: ``RuntimeError`` at
      trace time;
    * never waited in a jitted function: ``RuntimeError`` when the function
      is compiled (nothing of it runs);
    * dropped without a wait in eager code: ``RuntimeError`` at the next
      jaxmpi call (its MPI call stays pending and its buffers are kept
      alive: MPI may still write them).

    Example:
        ::

            req = mpx.irecv(jnp.zeros(3), 0)
            req                  # Request(jaxmpi.irecv, in flight)
            req.op               # 'irecv'
            y = mpx.wait(req)
            req                  # Request(jaxmpi.irecv, waited)
    """

    __slots__ = ("_parts", "_keep", "_finish", "_state", "__weakref__")

    def __init__(self, parts, keep, finish, state):
        self._parts = tuple(parts)  # _Part per start primitive, in order
        self._keep = tuple(keep)    # arrays finish needs besides the messages
        self._finish = finish       # (each part's results, keep) -> result
        self._state = state

    @property
    def op(self) -> str:
        """The name of the start that made this request, e.g. ``"irecv"``."""
        return self._state.op

    def __repr__(self):
        return (f"Request(jaxmpi.{self._state.op}, "
                f"{'waited' if self._state.waited else 'in flight'})")


@dataclass(frozen=True, eq=False)
class _Part:
    """One start primitive's request: its handle, its buffers, its spec."""

    handle: object
    bufs: tuple
    spec: object


def _leaves(req):
    return [leaf for p in req._parts for leaf in (p.handle, *p.bufs)] + list(
        req._keep)


def _flatten(req):
    if not _jcore.trace_state_clean():
        # The trace fails: nothing of it runs, so nothing is left in flight.
        req._state.waited = True
        raise TypeError(
            f"{_describe(req._state)} cannot leave the function that started "
            "it (returned from jit, or passed into an inner jit, loop body or "
            "cond branch): wait it in that function. Requests are issued and "
            "completed in program order; their buffers are in use by MPI.")
    shape = tuple((p.spec, len(p.bufs)) for p in req._parts)
    return _leaves(req), (shape, req._finish, req._state)


def _unflatten(aux, leaves):
    shape, finish, state = aux
    parts, at = [], 0
    for spec, n in shape:
        parts.append(_Part(leaves[at], tuple(leaves[at + 1:at + 1 + n]), spec))
        at += 1 + n
    return Request(parts, leaves[at:], finish, state)


jax.tree_util.register_pytree_node(Request, _flatten, _unflatten)


# ---- the primitives -------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """What a wait needs to know of its start (static, hashable)."""

    op: str
    params: tuple          # the start's parameters, as sorted items
    results: tuple         # indices of the buffers that are the op's results

    def param(self, name):
        return dict(self.params)[name]


START: dict[str, Primitive] = {}
# C starts that a start primitive's lowering picks besides its own name
# (ireduce_scatter_p: equal blocks go to ireduce_scatter_block).
EXTRA_TARGETS = ("ireduce_scatter_block",)
_BACKWARD: dict[str, object] = {}


def _define_start(name, bufs_rule, aliases, target=None):
    """Start primitive jaxmpi_<name>: results [handle, *bufs_rule(...)]
    (`aliases`: operand -> buffer index, each buffer sharing its operand's
    memory; `target`: a function of the parameters giving the C start to
    call where that is not `name`, one of EXTRA_TARGETS)."""
    prim = Primitive(f"jaxmpi_{name}")
    prim.multiple_results = True

    def impl(*args, rid, **params):
        # Eagerly a request is tracked by its Request object, not by rid
        # (which would defeat the compilation cache).
        return apply_primitive(prim, *args, rid=0, **params)

    prim.def_impl(impl)
    prim.def_effectful_abstract_eval(
        lambda *avals, rid, **params: ([HANDLE, *bufs_rule(*avals, **params)],
                                       {mpi_effect}))
    def rule_for(aliases, c_name=name):
        return jax.ffi.ffi_lowering(
            f"jaxmpi_{c_name}", has_side_effect=True,
            operand_output_aliases={i: 1 + o for i, o in aliases.items()})

    fixed = None if callable(aliases) or target else rule_for(aliases)

    def lowering(ctx, *operands, rid, **params):
        rule = fixed or rule_for(
            aliases(len(operands), **params) if callable(aliases) else aliases,
            target(**params) if target else name)
        if rid in _dropped:
            state = _dropped.pop(rid)
            raise RuntimeError(
                f"jaxmpi.{state.op}: {_describe(state)} was never waited in "
                "the function that started it: pass it to jaxmpi.wait (or "
                "waitall) there.")
        # A parameter that is None (counts of equal blocks) is no attribute.
        return lower_with_token(ctx, rule, *operands, **_ops._attributes(
            {k: p for k, p in params.items() if p is not None}))

    # One custom call for both platforms: the C core registers a CPU and a
    # CUDA handler under its name (the CUDA one stages through pinned memory
    # that the request owns until its wait).
    for platform in _ops.LOWERING_PLATFORMS:
        mlir.register_lowering(prim, lowering, platform=platform)
    START[name] = prim
    return prim


wait_p = Primitive("jaxmpi_wait")
wait_p.multiple_results = True


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
    rule = jax.ffi.ffi_lowering(
        "jaxmpi_wait", has_side_effect=True,
        operand_output_aliases={1 + i: k for k, i in enumerate(spec.results)})
    return lower_with_token(ctx, rule, handle, *bufs)


for _platform in _ops.LOWERING_PLATFORMS:
    mlir.register_lowering(wait_p, _wait_lowering, platform=_platform)


# ---- autodiff and batching, shared by every op -----------------------------


def _start_jvp(prim, name):
    def jvp(primals, tangents, *, rid, **params):
        check = _JVP_CHECKS.get(name)
        if check:
            check(**params)
        out = prim.bind(*primals, rid=rid, **params)
        if all(type(t) is ad.Zero for t in tangents):
            return out, [ad.Zero.from_primal_value(o) for o in out]
        # The tangents travel as a second request of the same op, started
        # right after the primal one (same tags: MPI matches in order).
        tangents = [ad.instantiate_zeros(t) for t in tangents]
        return out, prim.bind(*tangents, rid=0, **params)

    ad.primitive_jvps[prim] = jvp


def _wait_jvp(primals, tangents, *, spec):
    out = wait_p.bind(*primals, spec=spec)
    th, *tbufs = tangents
    if type(th) is ad.Zero:
        return out, [ad.Zero.from_primal_value(o) for o in out]
    tbufs = [ad.instantiate_zeros(t) for t in tbufs]
    return out, wait_p.bind(th, *tbufs, spec=spec)


ad.primitive_jvps[wait_p] = _wait_jvp


def _avals(xs):
    return [x.aval if hasattr(x, "aval") else x for x in xs]


def _wait_transpose(cts, th, *tbufs, spec):
    """Start the backward request of the forward tangent request; its handle
    and buffers travel back to the forward start's transpose as the
    cotangents of the tangent handle and buffers."""
    bufs = _avals(tbufs)
    cts = [_ops._ct(ct, bufs[i]) for ct, i in zip(cts, spec.results)]
    bh, bbufs = _BACKWARD[spec.op].start(cts, bufs, spec)
    return [bh, *bbufs]


def _start_transpose(name):
    def transpose(cts, *operands, rid, **params):
        spec = _SPECS[name](operands, params)
        bh, *bbufs = cts
        bufs = _avals(_start_bufs(name, operands, params))
        bbufs = [_ops._ct(b, a) for b, a in zip(bbufs, bufs)]
        if type(bh) is ad.Zero:
            bh = jnp.zeros((), np.float32)
        return _BACKWARD[name].finish(bh, bbufs, operands, spec)

    ad.primitive_transposes[START[name]] = transpose


ad.primitive_transposes[wait_p] = _wait_transpose


def _start_batcher(prim, name):
    def rule(args, dims, *, rid, **params):
        n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        axis, buf_axes = _BATCH_AXES.get(name, _BATCH_IN_FRONT)(**params)
        args = [jnp.moveaxis(a, d, axis) if d is not None
                else jnp.expand_dims(a, axis).repeat(n, axis)
                for a, d in zip(args, dims)]
        if "recv_avals" in params:
            params["recv_avals"] = tuple(((n, *shape), dtype) for shape, dtype
                                         in params["recv_avals"])
        out = prim.bind(*args, rid=rid, **params)
        return out, [None, *(buf_axes or [0] * (len(out) - 1))]

    batching.primitive_batchers[prim] = rule


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


batching.primitive_batchers[wait_p] = _wait_batcher


# ---- the ops ----------------------------------------------------------------
# Per op: the start (buffers: which operand each aliases), the results among
# the buffers, the spec, the backward request (start and finish) for the
# transpose.

_SPECS: dict = {}
_JVP_CHECKS: dict = {}


def _start_bufs(name, operands, params):
    return START[name].abstract_eval(*_avals(operands), rid=0, **params)[0][1:]


def _spec(name, results):
    """results: indices of the buffers that are results, or a function of
    the number of operands and the parameters giving them."""
    def make(operands, params):
        res = results(len(operands), **params) if callable(results) else results
        return _Spec(name, tuple(sorted(params.items())), tuple(res))

    _SPECS[name] = make


class _Backward:
    def __init__(self, start, finish):
        self.start = start
        self.finish = finish


# isend: buffers [x]; no results. Backward: x's cotangent comes from dest.
isend_p = _define_start("isend", lambda x, *, comm, dest, tag: [x], {0: 0})
_spec("isend", ())


def _isend_bw_start(cts, bufs, spec):
    comm = spec.param("comm")
    params = dict(comm=comm, source=spec.param("dest"),
                  tag=_ops._backward_tag(spec.param("tag"), comm), status=0)
    h, y = irecv_p.bind(_ops._zeros(bufs[0]), rid=0, **params)
    return h, [y]


def _isend_bw_finish(bh, bbufs, operands, spec):
    comm = spec.param("comm")
    params = dict(comm=comm, source=spec.param("dest"),
                  tag=_ops._backward_tag(spec.param("tag"), comm), status=0)
    (y,) = wait_p.bind(bh, *bbufs, spec=_SPECS["irecv"]((), params))
    return [y]


_BACKWARD["isend"] = _Backward(_isend_bw_start, _isend_bw_finish)

# irecv: buffers [y] (aliased to the template); result y. Backward: y's
# cotangent goes back to source.
irecv_p = _define_start("irecv", lambda x, *, comm, source, tag, status: [x],
                        {0: 0})
_spec("irecv", (0,))
_JVP_CHECKS["irecv"] = lambda *, source, tag, **_: _ops._no_wildcards(
    "irecv", source, tag)


def _irecv_bw_params(spec):
    comm = spec.param("comm")
    return dict(comm=comm, dest=spec.param("source"),
                tag=_ops._backward_tag(spec.param("tag"), comm))


def _irecv_bw_start(cts, bufs, spec):
    params = _irecv_bw_params(spec)
    h, xs = isend_p.bind(cts[0], rid=0, **params)
    return h, [xs]


def _irecv_bw_finish(bh, bbufs, operands, spec):
    params = _irecv_bw_params(spec)
    wait_p.bind(bh, *bbufs, spec=_SPECS["isend"]((), params))
    return [_ops._zeros(operands[0])]  # the template's data is never used


_BACKWARD["irecv"] = _Backward(_irecv_bw_start, _irecv_bw_finish)

# isendrecv: buffers [xs, y] (aliased to x and the template); result y.
# Backward: roles swapped, as sendrecv's transpose.
isendrecv_p = _define_start(
    "isendrecv",
    lambda x, t, *, comm, source, dest, sendtag, recvtag, status: [x, t],
    {0: 0, 1: 1})
_spec("isendrecv", (1,))
_JVP_CHECKS["isendrecv"] = lambda *, source, **_: _ops._no_wildcards(
    "isendrecv", source)


def _isendrecv_bw_params(spec):
    comm = spec.param("comm")
    sendtag, recvtag = spec.param("sendtag"), spec.param("recvtag")
    back = sendtag if recvtag == MPI.ANY_TAG else recvtag
    return dict(comm=comm, source=spec.param("dest"),
                dest=spec.param("source"),
                sendtag=_ops._backward_tag(back, comm),
                recvtag=_ops._backward_tag(sendtag, comm), status=0)


def _isendrecv_bw_start(cts, bufs, spec):
    # Forward buffers [x-shaped, y-shaped]; the backward request sends y's
    # cotangent and receives into an x-shaped buffer: its buffers are
    # [y-shaped, x-shaped], handed back in the forward order.
    h, cs, bx = isendrecv_p.bind(cts[0], _ops._zeros(bufs[0]), rid=0,
                                 **_isendrecv_bw_params(spec))
    return h, [bx, cs]


def _isendrecv_bw_finish(bh, bbufs, operands, spec):
    params = _isendrecv_bw_params(spec)
    bx, cs = bbufs
    (xbar,) = wait_p.bind(bh, cs, bx, spec=_SPECS["isendrecv"]((), params))
    return [xbar, _ops._zeros(operands[1])]


_BACKWARD["isendrecv"] = _Backward(_isendrecv_bw_start, _isendrecv_bw_finish)

# iallreduce: buffers [y] (in place: aliased to x); result y. Derivatives for
# MPI.SUM, with allreduce's conventions: adjoint="replicated" (default), the
# transpose is the identity (no communication); "sum": an allreduce of the
# cotangents, as a backward request.
iallreduce_p = _define_start("iallreduce",
                             lambda x, *, comm, op, adjoint: [x], {0: 0})
_spec("iallreduce", (0,))


def _iallreduce_check(*, op, **_):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.iallreduce: derivatives are defined for MPI.SUM only, "
            f"not {op} (the blocking allreduce also has PROD, MAX and MIN)")


_JVP_CHECKS["iallreduce"] = _iallreduce_check


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


_BACKWARD["iallreduce"] = _Backward(_iallreduce_bw_start, _iallreduce_bw_finish)

# ibcast: buffers [y] (aliased to x: the root sends from it); result y.
# Backward: the root collects every rank's cotangent (a blocking reduce where
# the forward wait was: collectives keep the same order on every rank).
ibcast_p = _define_start("ibcast", lambda x, *, comm, root: [x], {0: 0})
_spec("ibcast", (0,))


def _ibcast_bw_start(cts, bufs, spec):
    comm, root = spec.param("comm"), spec.param("root")
    ct = cts[0]
    (total,) = _ops.reduce_p.bind(ct, comm=comm, op=_ops._sum_op(ct.dtype),
                                  root=root)
    out = total if comm.rank == root else _ops._zeros_from(total, bufs[0])
    return jnp.zeros((), np.float32), [out]


_BACKWARD["ibcast"] = _Backward(_ibcast_bw_start,
                                lambda bh, bbufs, operands, spec: [bbufs[0]])

# ibarrier: no buffers, no results, nothing to differentiate.
ibarrier_p = _define_start("ibarrier", lambda *, comm: [], {})
_spec("ibarrier", ())
_BACKWARD["ibarrier"] = _Backward(
    lambda cts, bufs, spec: (jnp.zeros((), np.float32), []),
    lambda bh, bbufs, operands, spec: [])


# ---- the other collectives: linear, so the tangents travel as a second
# request; the transpose is the blocking op's (every rank runs it at the same
# point of the backward program, where the forward wait was), its cotangent
# of x handed to the start's transpose in buffer 0 (x-shaped for all).


def _blocking_backward(blocking_p, nx=1):
    def start(cts, bufs, spec):
        params = dict(spec.params)
        xs = [ad.UndefinedPrimal(b) for b in bufs[:nx]]
        cx = ad.primitive_transposes[blocking_p](list(cts), *xs, **params)
        cx = [_ops._ct(c, b) for c, b in zip(cx, bufs[:nx])]
        return (jnp.zeros((), np.float32),
                [*cx, *[_ops._zeros(b) for b in bufs[nx:]]])

    return _Backward(start, lambda bh, bbufs, operands, spec: bbufs[:nx])


def _rooted(root_shape):
    """Rooted ops whose root has its own buffer beside x's: buffers [x, y]
    on the root (y: root_shape(x, comm, **the other parameters)), [x] (also
    the result) elsewhere."""
    def bufs(x, *, comm, root, **params):
        return ([x, root_shape(x, comm, **params)] if comm.rank == root
                else [x])

    def aliases(nops, *, comm, root, **params):
        return {0: 0}

    def results(nops, *, comm, root, **params):
        return (1,) if comm.rank == root else (0,)

    return bufs, aliases, results


def _sum_check(fn):
    def check(*, op, **_):
        _ops._sum_only(fn, op)

    return check


# ireduce: buffers [y] (x's buffer: the root reduces in place into it,
# elsewhere it is sent from and passed through as reduce does).
ireduce_p = _define_start("ireduce", lambda x, *, comm, op, root: [x], {0: 0})
_spec("ireduce", (0,))
_JVP_CHECKS["ireduce"] = _sum_check("ireduce")
_BACKWARD["ireduce"] = _blocking_backward(_ops.reduce_p)

# iscan: buffers [y] (in place).
iscan_p = _define_start("iscan", lambda x, *, comm, op: [x], {0: 0})
_spec("iscan", (0,))
_JVP_CHECKS["iscan"] = _sum_check("iscan")
_BACKWARD["iscan"] = _blocking_backward(_ops.scan_p)

# iexscan: buffers [y] (in place). MPI leaves rank 0's result undefined: the
# wait gives it the op's identity, as exscan does (_AFTER_WAIT).
iexscan_p = _define_start("iexscan", lambda x, *, comm, op: [x], {0: 0})
_spec("iexscan", (0,))
_JVP_CHECKS["iexscan"] = _sum_check("iexscan")
_BACKWARD["iexscan"] = _blocking_backward(_ops.exscan_p)


def _identity_on_rank_0(outs, spec):
    """exscan's rank 0 result: the op's identity (a constant of the trace:
    its tangent is zero and its cotangent goes nowhere, as exscan's)."""
    comm, op = spec.param("comm"), spec.param("op")
    if comm.rank != 0:
        return outs
    return [jnp.full(y.shape, _ops.exscan_identity(op.name, y.dtype), y.dtype)
            for y in outs]


# What the wait does with its results before returning them, per op.
_AFTER_WAIT = {"iexscan": _identity_on_rank_0}

# igather: root buffers [x, y (size, *x.shape)], result y; elsewhere [x],
# passed through.
_b, _a, _r = _rooted(lambda x, comm: _ops._aval((comm.size, *x.shape),
                                                 x.dtype))
igather_p = _define_start("igather", _b, _a)
_spec("igather", _r)
_BACKWARD["igather"] = _blocking_backward(_ops.gather_p)

# iscatter: root buffers [x (size, ...), y (x.shape[1:])], result y;
# elsewhere [y] (the template's buffer).
_b, _a, _r = _rooted(lambda x, comm: _ops._aval(x.shape[1:], x.dtype))
iscatter_p = _define_start("iscatter", _b, _a)
_spec("iscatter", _r)
_BACKWARD["iscatter"] = _blocking_backward(_ops.scatter_p)

# iallgather: buffers [x, y (size, *x.shape)], result y.
iallgather_p = _define_start(
    "iallgather",
    lambda x, *, comm: [x, _ops._aval((comm.size, *x.shape), x.dtype)],
    {0: 0})
_spec("iallgather", (1,))
_BACKWARD["iallgather"] = _blocking_backward(_ops.allgather_p)

# ialltoall: buffers [x, y] (out of place: MPI_Ialltoall), result y.
ialltoall_p = _define_start("ialltoall", lambda x, *, comm: [x, x], {0: 0})
_spec("ialltoall", (1,))
_BACKWARD["ialltoall"] = _blocking_backward(_ops.alltoall_p)

# ireduce_scatter: buffers [x, y (this rank's block)], result y; out of
# place, as reduce_scatter. Equal blocks start MPI_Ireduce_scatter_block
# (the C start ireduce_scatter_block), counts MPI_Ireduce_scatter.
ireduce_scatter_p = _define_start(
    "ireduce_scatter",
    lambda x, *, comm, op, counts: [x, *_ops._reduce_scatter_shape(
        x, comm=comm, op=op, counts=counts)],
    {0: 0},
    target=lambda *, counts, **_: ("ireduce_scatter_block" if counts is None
                                   else "ireduce_scatter"))
_spec("ireduce_scatter", (1,))


def _ireduce_scatter_check(*, op, **_):
    if op.name != "SUM":
        raise NotImplementedError(
            f"jaxmpi.ireduce_scatter: derivatives are defined for MPI.SUM "
            f"only, not {op} (the blocking reduce_scatter also has PROD, MAX "
            "and MIN)")


_JVP_CHECKS["ireduce_scatter"] = _ireduce_scatter_check
_BACKWARD["ireduce_scatter"] = _blocking_backward(_ops.reduce_scatter_p)

# ---- variable counts along axis 0: the buffers of the blocking v-op's
# operand and result (rows per rank as its counts say), out of place; the
# derivatives and batching of the blocking op.

# iallgatherv: buffers [x, y (sum(counts) rows)], result y.
iallgatherv_p = _define_start(
    "iallgatherv",
    lambda x, *, comm, counts: [x, _ops._rows(x, sum(counts))], {0: 0})
_spec("iallgatherv", (1,))
_BACKWARD["iallgatherv"] = _blocking_backward(_ops.allgatherv_p)

# igatherv: root buffers [x, y (sum(counts) rows)], result y; elsewhere
# [x], passed through, as gatherv.
_b, _a, _r = _rooted(lambda x, comm, counts: _ops._rows(x, sum(counts)))
igatherv_p = _define_start("igatherv", _b, _a)
_spec("igatherv", _r)
_BACKWARD["igatherv"] = _blocking_backward(_ops.gatherv_p)

# iscatterv: root buffers [x (sum(counts) rows), y (counts[root] rows)],
# result y; elsewhere [y] (the template's buffer, counts[rank] rows).
_b, _a, _r = _rooted(lambda x, comm, counts: _ops._rows(x, counts[comm.rank]))
iscatterv_p = _define_start("iscatterv", _b, _a)
_spec("iscatterv", _r)
_BACKWARD["iscatterv"] = _blocking_backward(_ops.scatterv_p)

# ialltoallv: buffers [x, y (sum(recvcounts) rows)], result y. Never in
# place (the blocking alltoallv is, with equal counts at up to 2 ranks).
ialltoallv_p = _define_start(
    "ialltoallv",
    lambda x, *, comm, sendcounts, recvcounts: [
        x, _ops._rows(x, sum(recvcounts))], {0: 0})
_spec("ialltoallv", (1,))
_BACKWARD["ialltoallv"] = _blocking_backward(_ops.alltoallv_p)

# ineighbor_exchange: buffers [*xs, *ys], results ys. Backward: a request of
# every pair reversed (y_i's cotangent goes back to sources[i], x_i's comes
# from dests[i], in the backward tag space, as neighbor_exchange's
# transpose), started where the forward wait was and waited where the
# forward start was. Several exchanges started together (ihalo_exchange's
# parts, ineighbor_alltoallv's one-pair exchanges of a graph) are thus all
# posted before any is waited in the backward program too: a blocking
# exchange per request could wait for a message its peer sends only in a
# later one.
ineighbor_exchange_p = _define_start(
    "ineighbor_exchange",
    lambda *xs, comm, sources, dests, tag, recv_avals: [
        *xs, *[_ops._aval(s, d) for s, d in recv_avals]],
    lambda nops, **_: {i: i for i in range(nops)})
_spec("ineighbor_exchange", lambda nops, **_: range(nops, 2 * nops))


def _inx_bw_params(spec, xs):
    comm = spec.param("comm")
    return dict(comm=comm, sources=spec.param("dests"),
                dests=spec.param("sources"),
                tag=_ops._backward_tag(spec.param("tag"), comm),
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
    return list(wait_p.bind(bh, *cs, *xs,
                            spec=_SPECS["ineighbor_exchange"](cs, params)))


_BACKWARD["ineighbor_exchange"] = _Backward(_inx_bw_start, _inx_bw_finish)

# vmap, one request for the whole batch: (the operands' batch axis, each
# buffer's). In front of everything suits the elementwise and point-to-point
# ops; where an op splits its first axis over ranks the batch goes second
# (an operand of alltoall, the root's of scatter), and where it stacks the
# ranks in front of x the result has the batch second, as the blocking ops'
# batching rules do.
def _BATCH_IN_FRONT(**params):
    return 0, None


def _rooted_axes(root_axes, other_axes, axis_at_root=0):
    def axes(*, comm, root, **_):
        if comm.rank == root:
            return axis_at_root, root_axes
        return 0, other_axes

    return axes


_BATCH_AXES = {
    "igather": _rooted_axes([0, 1], [0]),             # [x, y (size, n, ...)]
    "iscatter": _rooted_axes([1, 0], [0], 1),         # [x (size, n, ...), y]
    "iallgather": lambda **_: (0, [0, 1]),            # [x, y (size, n, ...)]
    "ialltoall": lambda **_: (1, [1, 1]),             # [x, y] (size, n, ...)
    # [x (rows, n, ...), y]: y is (n, ...) for equal blocks, else (rows, n,
    # ...), as reduce_scatter's batching rule.
    "ireduce_scatter": lambda *, counts, **_: (
        1, [1, 0 if counts is None else 1]),
    # The variable-count ops split rows over the ranks: the batch goes
    # second in every buffer on every rank (a row holds the whole batch's
    # elements, the counts stay as given), as their blocking ops' rule.
    "iallgatherv": lambda **_: (1, [1, 1]),            # [x, y]
    "igatherv": lambda *, comm, root, **_: (
        1, [1, 1] if comm.rank == root else [1]),      # [x, y] / [x]
    "iscatterv": lambda *, comm, root, **_: (
        1, [1, 1] if comm.rank == root else [1]),      # [x, y] / [y]
    "ialltoallv": lambda **_: (1, [1, 1]),             # [x, y]
}

for _name, _prim in START.items():
    _start_jvp(_prim, _name)
    _start_transpose(_name)
    _start_batcher(_prim, _name)


# ---- the Python functions ----------------------------------------------------


def _begin(fn, comm, token):
    """The checks every jaxmpi operation makes first, blocking or not:
    no request dropped unwaited, ``comm`` (its info) and ``token``."""
    check_no_leaks(fn)
    info = v.comm_info(comm, fn)
    tok = v.token_arg(token, fn)
    return info, tok


def compose(op, starts, finish, keep=()):
    """The Request of the public start `op`, made of start primitives.

    `starts`: (primitive name, operands, parameters) of each, bound in
    order under one request id (a request never waited is reported when
    the first of them is lowered). The wait waits each in order and
    returns ``finish(results, keep)``: results[i] is the list of start i's
    results, `keep` the arrays the finish uses besides them (the Request
    holds them, so they reach the wait in the function that started it).
    Starts built from others (ihalo_exchange, ineighbor_alltoallv) pack
    their messages before calling this and unpack them in `finish`; their
    derivatives and batching are the primitives' and those of the
    packing and unpacking."""
    clean = _jcore.trace_state_clean()
    rid = 0 if clean else next(_next_rid)
    parts = []
    for name, operands, params in starts:
        handle, *bufs = START[name].bind(*operands, rid=rid, **params)
        parts.append(_Part(handle, tuple(bufs),
                           _SPECS[name](operands, params)))
    state = _State(op, _caller(), rid,
                   None if clean else _jcore.trace_ctx.trace)
    req = Request(parts, keep, finish, state)
    weakref.finalize(req, _on_drop, state, tuple(_leaves(req)))
    return req


def _one_result(results, keep):
    """A single start's wait: its one result, or None (isend, ibarrier)."""
    return results[0][0] if results[0] else None


def _every_result(results, keep):
    """ineighbor_exchange's wait: every pair's message, as a tuple."""
    return tuple(results[0])


def _start(name, operands, params):
    return compose(name, [(name, operands, params)],
                   _every_result if name == "ineighbor_exchange"
                   else _one_result)


def isend(x, dest, *, tag=0, comm=None, token=None) -> Request:
    """Start sending ``x`` to rank ``dest``.

    MPI_Isend. The non-blocking form of ``send``: the call returns at once;
    ``wait`` on the request completes the send.

    Args:
        x: the array to send. The request sends from its own buffer (XLA
            copies ``x`` first where ``x`` is still used after the start;
            donate it to avoid the copy), so ``x`` may be changed or
            donated while the message travels.
        dest: the receiving rank (a static int), or ``MPI.PROC_NULL`` (no
            message is sent).
        tag: the message tag, 0 to half of ``MPI.TAG_UB`` (the higher tags
            carry jaxmpi's gradient messages).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Isend in flight and its send buffer;
        ``wait`` on it completes the send and has no result.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank or tag is not a static int, ``comm`` is
            not an intracommunicator, or ``token`` is not a token.
        ValueError: a rank or tag is out of range, or an array lives on more
            than one device (jaxmpi needs one JAX device per process).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message), or 4096
            requests of this process already in flight
            (``RESOURCE_EXHAUSTED``). Errors of the communication itself
            are raised by ``wait``.

    Example:
        ``mpirun -n 2``, inside ``jax.jit``::

            if rank == 0:
                req = mpx.isend(jnp.arange(3.0), 1, tag=7)
                z = heavy_compute(w)     # runs while the message travels
                mpx.wait(req)            # returns None
                req, token = jaxmpi.isend(jnp.arange(3.0), 1, tag=7)  # token
                token = jaxmpi.wait(req, token=token)   # API: a token alone
            else:
                y = mpx.wait(mpx.irecv(jnp.zeros(3), 0, tag=7))
                y = mpx.recv(jnp.zeros(3), 0, tag=7)
    """
    info, tok = _begin("isend", comm, token)
    x = v.array(x, "isend")
    dest = v.rank_arg(dest, "isend", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "isend", "tag", info)
    _ops_join(tok)
    return _start("isend", (x,), dict(comm=info, dest=dest, tag=tag))


def irecv(x, source=ANY_SOURCE, *, tag=ANY_TAG, comm=None,
          status=None, token=None) -> Request:
    """Start receiving an array of ``x``'s shape and dtype from rank
    ``source``.

    MPI_Irecv. The non-blocking form of ``recv``: ``wait`` on the request
    returns the message. A message of another size is an error at the
    wait, not a truncation.

    Args:
        x: a template: the result's shape and dtype (its data is not used).
        source: the sending rank (a static int), ``MPI.ANY_SOURCE``
            (default), or ``MPI.PROC_NULL`` (no message; the result is
            zeros).
        tag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        status: an ``MPI.Status`` filled in when the wait completes
            (source, tag, count), or None.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Irecv in flight and its receive
        buffer; ``wait`` on it returns the received array, of ``x``'s shape
        and dtype.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank or tag is not a static int, ``comm`` is
            not an intracommunicator, ``status`` is not an ``MPI.Status``,
            or ``token`` is not a token.
        ValueError: a rank or tag is out of range, or an array lives on more
            than one device (jaxmpi needs one JAX device per process).
        NotImplementedError: differentiating a receive from
            ``MPI.ANY_SOURCE`` or with ``MPI.ANY_TAG`` (see
            docs/autodiff.md).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message), or 4096
            requests of this process already in flight
            (``RESOURCE_EXHAUSTED``). Errors of the communication itself
            are raised by ``wait``.

    Example:
        ``mpirun -n 2``, inside ``jax.jit``::

            if rank == 1:
                req = mpx.irecv(jnp.zeros(3), 0, tag=7)
                z = heavy_compute(w)     # runs while the message travels
                y = mpx.wait(req)        # rank 0's array
                req, token = jaxmpi.irecv(jnp.zeros(3), 0, tag=7)  # token API
                y, token = jaxmpi.wait(req, token=token)
            else:
                mpx.wait(mpx.isend(jnp.arange(3.0), 1, tag=7))
                mpx.send(jnp.arange(3.0), 1, tag=7)
    """
    info, tok = _begin("irecv", comm, token)
    x = v.array(x, "irecv")
    source = v.rank_arg(source, "irecv", "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    tag = v.tag_arg(tag, "irecv", "tag", info, allow_any=True)
    addr = v.status_arg(status, "irecv")
    _ops_join(tok)
    return _start("irecv", (x,), dict(comm=info, source=source, tag=tag,
                                      status=addr))


def isendrecv(sendbuf, recvbuf, source, dest, *, sendtag=0,
              recvtag=ANY_TAG, comm=None, status=None,
              token=None) -> Request:
    """Start sending ``sendbuf`` to ``dest`` and receiving an array of
    ``recvbuf``'s shape and dtype from ``source``.

    MPI_Irecv and MPI_Isend, completed together by ``wait``. The
    non-blocking form of ``sendrecv`` (deadlock-free in the same way: the
    receive is posted first).

    Args:
        sendbuf: the array to send. The request sends from its own buffer
            (XLA copies it first where it is still used after the start).
        recvbuf: a template: the result's shape and dtype (its data is not
            used).
        source: the rank to receive from (a static int), ``MPI.ANY_SOURCE``
            or ``MPI.PROC_NULL`` (the result is zeros).
        dest: the rank to send to (a static int) or ``MPI.PROC_NULL``.
        sendtag: the tag of the message sent.
        recvtag: the tag to match, or ``MPI.ANY_TAG`` (default).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        status: an ``MPI.Status`` filled in when the wait completes, or
            None.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the receive and the send in flight and their
        buffers; ``wait`` on it returns the received array, of
        ``recvbuf``'s shape and dtype.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a rank or tag is not a static int, ``comm`` is
            not an intracommunicator, ``status`` is not an ``MPI.Status``,
            or ``token`` is not a token.
        ValueError: a rank or tag is out of range, or an array lives on more
            than one device (jaxmpi needs one JAX device per process).
        NotImplementedError: differentiating a receive from
            ``MPI.ANY_SOURCE`` (see docs/autodiff.md).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message), or 4096
            requests of this process already in flight
            (``RESOURCE_EXHAUSTED``). Errors of the communication itself
            are raised by ``wait``.

    Example:
        Shift right around a ring while the interior is updated::

            right, left = (rank + 1) % size, (rank - 1) % size
            req = mpx.isendrecv(edge, jnp.zeros_like(edge), source=left,
                                dest=right)
            interior = update(interior)          # while the halo travels
            halo = mpx.wait(req)                 # left's edge
            req, token = jaxmpi.isendrecv(edge, edge, left, right)  # token API
            halo, token = jaxmpi.wait(req, token=token)
    """
    fn = "isendrecv"
    info, tok = _begin(fn, comm, token)
    sendbuf = v.array(sendbuf, fn, "sendbuf")
    recvbuf = v.array(recvbuf, fn, "recvbuf")
    source = v.rank_arg(source, fn, "source", info,
                        allow=(MPI.ANY_SOURCE, MPI.PROC_NULL))
    dest = v.rank_arg(dest, fn, "dest", info, allow=(MPI.PROC_NULL,))
    sendtag = v.tag_arg(sendtag, fn, "sendtag", info)
    recvtag = v.tag_arg(recvtag, fn, "recvtag", info, allow_any=True)
    addr = v.status_arg(status, fn)
    _ops_join(tok)
    return _start(fn, (sendbuf, recvbuf), dict(
        comm=info, source=source, dest=dest, sendtag=sendtag, recvtag=recvtag,
        status=addr))


def iallreduce(x, op, *, comm=None, token=None,
               adjoint="replicated") -> Request:
    """Start reducing ``x`` over all ranks with ``op``; every rank gets
    the result.

    MPI_Iallreduce. The non-blocking form of ``allreduce``; it matches only
    ``iallreduce`` on the other ranks (MPI never matches MPI_Iallreduce
    with MPI_Allreduce).

    Args:
        x: the array to reduce (a JAX or NumPy array, or a scalar), the same
            shape and dtype on every rank. Reduced in place in the
            request's buffer (XLA copies ``x`` first where it is still used
            after the start).
        op: an mpi4py reduction op: ``MPI.SUM``, ``MPI.PROD``, ``MPI.MAX``,
            ``MPI.MIN``, the logical and bitwise ops for integers and bool,
            or a user-defined ``MPI.Op``. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.
        adjoint: how reverse-mode AD treats the replicated result, as for
            ``allreduce``: ``"replicated"`` (default) counts its cotangent
            once, so the transpose is the identity; ``"sum"`` is the exact
            adjoint (an allreduce of the cotangents, as a backward request).
            See docs/autodiff.md.

    Returns:
        A ``Request`` holding the MPI_Iallreduce in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over every rank's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        ValueError: ``adjoint`` is not ``"replicated"`` or ``"sum"``.
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        Overlap a gradient sum with other work, inside ``jax.jit``::

            req = mpx.iallreduce(grads, MPI.SUM)
            loss = more_compute(params)          # while the sum travels
            total = mpx.wait(req)                # the sum over all ranks
            req, token = jaxmpi.iallreduce(grads, MPI.SUM)   # token API
            total, token = jaxmpi.wait(req, token=token)
    """
    if adjoint not in ("replicated", "sum"):
        raise ValueError(
            f"iallreduce: adjoint={adjoint!r} must be 'replicated' or 'sum'")
    info, tok = _begin("iallreduce", comm, token)
    x = v.array(x, "iallreduce")
    opinfo = v.reduction_op(op, x.dtype, "iallreduce", _core.get().half_ops)
    _ops_join(tok)
    return _start("iallreduce", (x,), dict(comm=info, op=opinfo,
                                           adjoint=adjoint))


def ibcast(x, root, *, comm=None, token=None) -> Request:
    """Start broadcasting the root's ``x`` to every rank.

    MPI_Ibcast. The non-blocking form of ``bcast``; it matches only
    ``ibcast`` on the other ranks.

    Args:
        x: on ``root``, the array to send; on other ranks, a template that
            gives the result's shape and dtype (its data is not used).
        root: the rank whose ``x`` is sent (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ibcast in flight and its buffer;
        ``wait`` on it returns the root's ``x`` on every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        Give every rank rank 0's parameters while computing::

            req = mpx.ibcast(params, 0)
            z = compute(w)
            params = mpx.wait(req)
            req, token = jaxmpi.ibcast(params, 0)    # token API
            params, token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("ibcast", comm, token)
    x = v.array(x, "ibcast")
    root = v.rank_arg(root, "ibcast", "root", info)
    _ops_join(tok)
    return _start("ibcast", (x,), dict(comm=info, root=root))


def ibarrier(*, comm=None, token=None) -> Request:
    """Start a barrier: its wait returns once every rank of ``comm`` has
    started it.

    MPI_Ibarrier. The non-blocking form of ``barrier``; it matches only
    ``ibarrier`` on the other ranks.

    Args:
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ibarrier in flight; ``wait`` on it
        returns once every rank of ``comm`` has started the barrier, with
        no result.

    Raises:
        TypeError: ``comm`` is not an intracommunicator, or ``token`` is
            not a token.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank and MPI's message); with
            ``JAXMPI_CHECK``, ranks making different calls
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``).

    Example:
        ::

            req = mpx.ibarrier()
            z = compute(w)
            mpx.wait(req)                        # returns None
            req, token = jaxmpi.ibarrier()       # token API
            token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("ibarrier", comm, token)
    _ops_join(tok)
    return _start("ibarrier", (), dict(comm=info))


def _reduction_start(fn, x, op, comm, token):
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    return info, tok, x, opinfo


def ireduce(x, op, root, *, comm=None, token=None) -> Request:
    """Start reducing ``x`` over all ranks with ``op`` onto ``root``.

    MPI_Ireduce. The non-blocking form of ``reduce``; it matches only
    ``ireduce`` on the other ranks.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only.
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ireduce in flight and its buffer;
        ``wait`` on it returns, on ``root``, the reduced array (``x``'s
        shape and dtype) and, on other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``op`` is not
            defined for the dtype, ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``::

            req = mpx.ireduce(jnp.ones(3) * rank, MPI.SUM, 0)
            z = compute(w)
            y = mpx.wait(req)                    # rank 0: [6. 6. 6.]
            req, token = jaxmpi.ireduce(x, MPI.MAX, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = _reduction_start("ireduce", x, op, comm, token)
    root = v.rank_arg(root, "ireduce", "root", info)
    _ops_join(tok)
    return _start("ireduce", (x,), dict(comm=info, op=opinfo, root=root))


def iscan(x, op, *, comm=None, token=None) -> Request:
    """Start an inclusive prefix reduction: rank r gets ``op`` over
    ranks 0..r.

    MPI_Iscan. The non-blocking form of ``scan``; it matches only ``iscan``
    on the other ranks.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iscan in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over the ``x`` of ranks 0 to this rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype, ``comm``
            is not an intracommunicator, or ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``::

            y = mpx.wait(mpx.iscan(jnp.ones(2), MPI.SUM))  # rank r: [r+1, r+1]
            req, token = jaxmpi.iscan(x, MPI.SUM)           # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = _reduction_start("iscan", x, op, comm, token)
    _ops_join(tok)
    return _start("iscan", (x,), dict(comm=info, op=opinfo))


def iexscan(x, op, *, comm=None, token=None) -> Request:
    """Start an exclusive prefix reduction: rank r gets ``op`` over ranks
    0..r-1; rank 0 gets the identity of ``op``.

    MPI_Iexscan. The non-blocking form of ``exscan``; it matches only
    ``iexscan`` on the other ranks. MPI leaves rank 0's result undefined;
    the wait gives it the identity, as ``exscan`` does: zeros for
    ``MPI.SUM`` (and ``BOR``, ``BXOR``, ``LOR``, ``LXOR``), ones for
    ``MPI.PROD`` (and ``LAND``), all bits set for ``BAND``, the dtype's
    lowest value for ``MPI.MAX`` and its highest for ``MPI.MIN``.

    Args:
        x: the array to reduce, the same shape and dtype on every rank.
            Reduced in place in the request's buffer (XLA copies ``x``
            first where it is still used after the start).
        op: a predefined mpi4py reduction op (``MPI.SUM``, ``MPI.PROD``,
            ``MPI.MAX``, ``MPI.MIN``, the logical and bitwise ops for
            integers and bool); not a user-defined ``MPI.Op``, whose
            identity jaxmpi cannot know. Derivatives: ``MPI.SUM`` only.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iexscan in flight and its buffer;
        ``wait`` on it returns an array of ``x``'s shape and dtype: ``op``
        over the ``x`` of ranks 0 to this rank - 1 (on rank 0, the identity
        of ``op``).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``op`` is not defined for the dtype or is
            user-defined, ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 4``, the offset of each rank's rows::

            req = mpx.iexscan(jnp.array(n_local), MPI.SUM)
            z = compute(w)
            offset = mpx.wait(req)                # rank 0: 0
            y = mpx.wait(mpx.iexscan(jnp.ones(2), MPI.SUM))  # rank r: [r, r]
            req, token = jaxmpi.iexscan(x, MPI.SUM)          # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok, x, opinfo = _reduction_start("iexscan", x, op, comm, token)
    v.predefined_op(opinfo, "iexscan")
    _ops_join(tok)
    return _start("iexscan", (x,), dict(comm=info, op=opinfo))


def ireduce_scatter(x, op, *, counts=None, comm=None, token=None) -> Request:
    """Start reducing ``x`` over all ranks with ``op`` and scattering the
    result: rank r gets the reduction of every rank's block r.

    MPI_Ireduce_scatter_block (without ``counts``) or MPI_Ireduce_scatter
    (with ``counts``). The non-blocking form of ``reduce_scatter``; it
    matches only ``ireduce_scatter`` (of the same form) on the other ranks.

    Args:
        x: without ``counts``, an array of shape ``(size, *s)`` whose row r
            is the block for rank r; with ``counts``, an array of
            ``sum(counts)`` rows along axis 0, block r being the
            ``counts[r]`` rows after those of ranks 0..r-1. The same shape
            and dtype on every rank. The request sends from its own buffer
            (XLA copies ``x`` first where it is still used after the
            start). At most ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``)
            elements per block.
        op: an mpi4py reduction op (``MPI.SUM``, ``MPI.MAX``, ...), as for
            ``allreduce``. Derivatives: ``MPI.SUM`` only (the blocking
            ``reduce_scatter`` also has ``PROD``, ``MAX`` and ``MIN``).
        counts: optional static sequence of ints, one per rank, equal on
            every rank (zeros allowed): how many rows of the result each
            rank gets.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ireduce_scatter_block (or
        MPI_Ireduce_scatter) in flight and its buffers; ``wait`` on it
        returns, without ``counts``, an array of shape ``x.shape[1:]``:
        ``op`` over every rank's ``x[rank]``; with ``counts``, an array of
        shape ``(counts[rank], *x.shape[1:])``: ``op`` over every rank's
        block ``rank``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``counts`` is not a static sequence of ints,
            ``op`` is not defined for the dtype, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: ``x.shape[0]`` is not the communicator's size (no
            ``counts``) or ``sum(counts)``; ``counts`` has not one entry per
            rank or a negative entry; an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        NotImplementedError: differentiating with an ``op`` other than
            ``MPI.SUM``.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call, ``counts``
            included (``FAILED_PRECONDITION``); 4096 requests of this
            process already in flight (``RESOURCE_EXHAUSTED``); a block
            the non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2``, a gradient summed over ranks, each keeping its
        slice::

            x = jnp.array([[1., 2.], [3., 4.]]) * (rank + 1)
            req = mpx.ireduce_scatter(x, MPI.SUM)
            z = compute(w)
            y = mpx.wait(req)                # rank 0: [3. 6.], rank 1: [9. 12.]
            y = mpx.wait(mpx.ireduce_scatter(jnp.arange(3.) * (rank + 1),
                                             MPI.SUM, counts=(1, 2)))
            # rank 0: [0.], rank 1: [3. 6.]
            req, token = jaxmpi.ireduce_scatter(x, MPI.SUM)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "ireduce_scatter"
    info, tok, x, opinfo = _reduction_start(fn, x, op, comm, token)
    counts = v.reduce_scatter_counts(x, counts, fn, info)
    _ops_join(tok)
    return _start(fn, (x,), dict(comm=info, op=opinfo, counts=counts))


def igather(x, root, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on the root, stacked along a new
    axis 0.

    MPI_Igather. The non-blocking form of ``gather``; it matches only
    ``igather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank (at
            most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``, elements).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Igather in flight and its buffers;
        ``wait`` on it returns, on ``root``, an array of shape
        ``(size, *x.shape)`` whose row ``r`` is rank r's ``x`` and, on
        other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            y = mpx.wait(mpx.igather(jnp.full(2, rank), 0))
            # rank 0: [[0 0] [1 1] [2 2]]
            req, token = jaxmpi.igather(x, 0)        # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("igather", comm, token)
    x = v.array(x, "igather")
    root = v.rank_arg(root, "igather", "root", info)
    _ops_join(tok)
    return _start("igather", (x,), dict(comm=info, root=root))


def iscatter(x, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's ``x[r]`` to rank r.

    MPI_Iscatter. The non-blocking form of ``scatter``; it matches only
    ``iscatter`` on the other ranks.

    Args:
        x: on ``root``, an array of shape ``(size, ...)``; on other ranks, a
            template of the result's shape ``x.shape[1:]`` and dtype (its
            data is not used). At most ``JAXMPI_MAX_COUNT`` (default
            ``INT_MAX``) elements per block.
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iscatter in flight and its buffers;
        ``wait`` on it returns, on every rank r, the root's ``x[r]``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a root is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a root is out of range, or an array lives on more than one
            device (jaxmpi needs one JAX device per process).
        ValueError: on the root, ``x.shape[0]`` is not the communicator's
            size.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else jnp.zeros(2)
            y = mpx.wait(mpx.iscatter(x, 0))     # rank r: [2r, 2r + 1]
            req, token = jaxmpi.iscatter(x, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("iscatter", comm, token)
    x = v.array(x, "iscatter")
    root = v.rank_arg(root, "iscatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "iscatter", "x (on the root)", info.size)
    _ops_join(tok)
    return _start("iscatter", (x,), dict(comm=info, root=root))


def iallgather(x, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on every rank.

    MPI_Iallgather. The non-blocking form of ``allgather``; it matches only
    ``iallgather`` on the other ranks.

    Args:
        x: this rank's array, the same shape and dtype on every rank (at
            most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``, elements).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iallgather in flight and its
        buffers; ``wait`` on it returns an array of shape
        ``(size, *x.shape)`` whose row ``r`` is rank r's ``x``, on every
        rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            y = mpx.wait(mpx.iallgather(jnp.full(2, rank)))
            # [[0 0] [1 1] [2 2]] on every rank
            req, token = jaxmpi.iallgather(x)    # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("iallgather", comm, token)
    x = v.array(x, "iallgather")
    _ops_join(tok)
    return _start("iallgather", (x,), dict(comm=info))


def ialltoall(x, *, comm=None, token=None) -> Request:
    """Start an all-to-all exchange: rank i sends ``x[j]`` to rank j and
    receives rank j's ``x[i]`` into ``result[j]``.

    MPI_Ialltoall. The non-blocking form of ``alltoall``; it matches only
    ``ialltoall`` on the other ranks.

    Args:
        x: an array of shape ``(size, ...)``, the same shape and dtype on
            every rank (at most ``JAXMPI_MAX_COUNT``, default ``INT_MAX``,
            elements per block).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ialltoall in flight and its buffers;
        ``wait`` on it returns an array of ``x``'s shape and dtype whose
        row ``j`` is rank j's ``x[i]`` (i: this rank).

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), ``comm`` is not an intracommunicator, or
            ``token`` is not a token.
        ValueError: an array lives on more than one device (jaxmpi needs one
            JAX device per process).
        ValueError: ``x.shape[0]`` is not the communicator's size.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK``, ranks that disagree on the call
            (``FAILED_PRECONDITION``); 4096 requests of this process
            already in flight (``RESOURCE_EXHAUSTED``); a count the
            non-blocking form cannot post (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2`` (a transpose across ranks)::

            x = jnp.array([10 * rank, 10 * rank + 1])
            y = mpx.wait(mpx.ialltoall(x))   # rank 0: [0 10], rank 1: [1 11]
            req, token = jaxmpi.ialltoall(x) # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    info, tok = _begin("ialltoall", comm, token)
    x = v.array(x, "ialltoall")
    v.leading_dim(x, "ialltoall", "x", info.size)
    _ops_join(tok)
    return _start("ialltoall", (x,), dict(comm=info))


def iallgatherv(x, counts, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from every rank, on
    every rank.

    MPI_Iallgatherv. The non-blocking form of ``allgatherv``; it matches
    only ``iallgatherv`` on the other ranks. Rank r contributes
    ``counts[r]`` rows; every rank gets all of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank. The request sends from its
            own buffer (XLA copies ``x`` first where it is still used after
            the start).
        counts: the number of rows of every rank (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iallgatherv in flight and its
        buffers; ``wait`` on it returns an array of shape
        ``(sum(counts), *s)``: rank 0's rows, then rank 1's, and so on, on
        every rank.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the error
            names the argument, its shape and the count), ``x`` is a scalar,
            or an array lives on more than one device.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``), on every rank
            alike (``UNIMPLEMENTED``, see docs/nonblocking.md). Errors of
            the communication itself are raised by ``wait``.

    Example:
        ``mpirun -n 3``, rank r has r + 1 rows::

            counts = [1, 2, 3]
            x = jnp.full((rank + 1, 2), rank)
            req = mpx.iallgatherv(x, counts)
            z = compute(w)                   # while the rows travel
            y = mpx.wait(req)                # [[0 0] [1 1] [1 1] [2 2] ...]
            req, token = jaxmpi.iallgatherv(x, counts)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "iallgatherv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts = v.allgatherv_args(x, counts, fn, info)
    _ops_join(tok)
    return _start(fn, (x,), dict(comm=info, counts=counts))


def igatherv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start gathering a different number of rows from every rank on the
    root.

    MPI_Igatherv. The non-blocking form of ``gatherv``; it matches only
    ``igatherv`` on the other ranks. Rank r contributes ``counts[r]``
    rows; the root gets all of them in rank order.

    Args:
        x: this rank's rows: an array of shape ``(counts[rank], *s)``, the
            same ``s`` and dtype on every rank. The request sends from its
            own buffer (XLA copies ``x`` first where it is still used after
            the start).
        counts: the number of rows of every rank (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        root: the rank that gets the result (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Igatherv in flight and its buffers;
        ``wait`` on it returns, on ``root``, an array of shape
        ``(sum(counts), *s)``: rank 0's rows, then rank 1's, and so on; on
        other ranks, ``x`` unchanged.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm`` is
            not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the error
            names the argument, its shape and the count), ``x`` is a scalar,
            a root is out of range, or an array lives on more than one
            device.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            of the root's above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``),
            on every rank alike (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            x = jnp.full((rank, 2), rank)            # 0, 1 and 2 rows
            req = mpx.igatherv(x, [0, 1, 2], 0)
            z = compute(w)
            y = mpx.wait(req)        # rank 0: [[1 1] [2 2] [2 2]]; else x
            req, token = jaxmpi.igatherv(x, [0, 1, 2], 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "igatherv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.gatherv_args(x, counts, root, fn, info)
    _ops_join(tok)
    return _start(fn, (x,), dict(comm=info, counts=counts, root=root))


def iscatterv(x, counts, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's rows: rank r gets ``counts[r]`` of them.

    MPI_Iscatterv. The non-blocking form of ``scatterv``; it matches only
    ``iscatterv`` on the other ranks. Rank 0 gets the first ``counts[0]``
    rows of the root's ``x``, rank 1 the next ``counts[1]``, and so on.

    Args:
        x: on ``root``, an array of shape ``(sum(counts), *s)``; on other
            ranks, a template of this rank's result, shape
            ``(counts[rank], *s)`` and the same dtype (its data is not
            used), as ``scatterv`` takes.
        counts: the number of rows each rank gets (a list or tuple of
            ``size`` static ints >= 0, the same on every rank).
        root: the rank whose ``x`` is scattered (a static int).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Iscatterv in flight and its buffers;
        ``wait`` on it returns, on every rank r, an array of shape
        ``(counts[r], *s)``: rows ``sum(counts[:r])`` to
        ``sum(counts[:r + 1])`` of the root's ``x``.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count or root is not a static int, ``comm`` is
            not an intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with its count (the root's
            with ``sum(counts)``, a template's with this rank's count; the
            error names the argument, its shape and the count), ``x`` is a
            scalar, a root is out of range, or an array lives on more than
            one device.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose counts, dtype or row shape disagree, or
            that call another operation (the blocking form included)
            (``FAILED_PRECONDITION``, on every rank, before the MPI call);
            4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); a count or displacement (in elements)
            of the root's above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``),
            on every rank alike (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 3``::

            counts = [2, 0, 1]
            x = jnp.arange(6.0).reshape(3, 2) if rank == 0 else \\
                jnp.zeros((counts[rank], 2))
            req = mpx.iscatterv(x, counts, 0)
            z = compute(w)
            y = mpx.wait(req)                # [[0 1] [2 3]], [], [[4 5]]
            req, token = jaxmpi.iscatterv(x, counts, 0)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "iscatterv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    counts, root = v.scatterv_args(x, counts, root, fn, info)
    _ops_join(tok)
    return _start(fn, (x,), dict(comm=info, counts=counts, root=root))


def ialltoallv(x, sendcounts, recvcounts, *, comm=None,
               token=None) -> Request:
    """Start an exchange where every rank sends a different number of rows
    to every rank.

    MPI_Ialltoallv. The non-blocking form of ``alltoallv``; it matches only
    ``ialltoallv`` on the other ranks. Rank i's ``x`` is ``size`` blocks of
    rows in rank order: block j, ``sendcounts[j]`` rows, goes to rank j.
    The result is the blocks received, in rank order: block i,
    ``recvcounts[i]`` rows, comes from rank i. Rank i's ``sendcounts[j]``
    must equal rank j's ``recvcounts[i]``. Always out of place (the result
    is a buffer of its own, also where ``alltoallv`` would run in place).

    Args:
        x: an array of shape ``(sum(sendcounts), *s)``, the same ``s`` and
            dtype on every rank. The request sends from its own buffer (XLA
            copies ``x`` first where it is still used after the start).
        sendcounts: the rows this rank sends to each rank (a list or tuple
            of ``size`` static ints >= 0).
        recvcounts: the rows this rank receives from each rank (a list or
            tuple of ``size`` static ints >= 0).
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding the MPI_Ialltoallv in flight and its buffers;
        ``wait`` on it returns an array of shape ``(sum(recvcounts), *s)``:
        the rows from rank 0, then those from rank 1, and so on.

    Raises:
        TypeError: an array argument is not one array of a supported dtype
            (a list, tuple, dict, a ``(result, token)`` pair or a token is
            named as such), a count is not a static int, ``comm`` is not an
            intracommunicator, or ``token`` is not a token.
        ValueError: a count list does not have one count per rank, a count
            is negative, ``x``'s rows disagree with ``sum(sendcounts)`` (the
            error names the argument, its shape and the counts), ``x`` is a
            scalar, or an array lives on more than one device.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message); with
            ``JAXMPI_CHECK`` (and on the calls the default sparse check
            covers), ranks whose dtype or row shape disagree, a rank whose
            ``recvcounts[i]`` is not rank i's ``sendcounts[rank]``, or
            ranks that call another operation (the blocking form
            included) (``FAILED_PRECONDITION``, on every rank, before the
            MPI call); 4096 requests of this process already in flight
            (``RESOURCE_EXHAUSTED``); this rank's counts or displacements
            above ``JAXMPI_MAX_COUNT`` (default ``INT_MAX``) even in rows
            (each rank knows only its own counts: raised on the ranks whose
            counts are that large) (``UNIMPLEMENTED``, see
            docs/nonblocking.md). Errors of the communication itself are
            raised by ``wait``.

    Example:
        ``mpirun -n 2``: rank i sends i + j + 1 rows to rank j::

            send = [rank + j + 1 for j in range(2)]
            recv = [i + rank + 1 for i in range(2)]
            req = mpx.ialltoallv(jnp.ones((sum(send), 3)), send, recv)
            z = compute(w)
            y = mpx.wait(req)                    # sum(recv) rows
            req, token = jaxmpi.ialltoallv(x, send, recv)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    fn = "ialltoallv"
    info, tok = _begin(fn, comm, token)
    x = v.array(x, fn)
    sendcounts, recvcounts = v.alltoallv_args(x, sendcounts, recvcounts, fn,
                                              info)
    _ops_join(tok)
    return _start(fn, (x,), dict(comm=info, sendcounts=sendcounts,
                                 recvcounts=recvcounts))


MAX_EXCHANGE_PAIRS = 15  # 1 + 2 * 15 buffers: the core's limit per call


def ineighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0,
                       comm=None, token=None) -> Request:
    """Start many sendrecvs at once: pair ``i`` sends ``sendbufs[i]`` to
    ``dests[i]`` and receives an array of ``recvbufs[i]``'s shape and
    dtype from ``sources[i]``, both with tag ``tag + i``.

    MPI_Irecv and MPI_Isend for every pair, completed together by
    ``wait``. The non-blocking form of ``neighbor_exchange``: a rank's pair
    ``i`` matches pair ``i`` of its peers.

    Args:
        sendbufs: a list or tuple of arrays to send (1 to 15 pairs). The
            request sends from its own buffers (XLA copies an array first
            where it is still used after the start).
        recvbufs: a list or tuple of templates, one per pair (their data is
            not used).
        sources: the rank each pair receives from (static ints), or
            ``MPI.PROC_NULL`` (that result is zeros).
        dests: the rank each pair sends to (static ints), or
            ``MPI.PROC_NULL``.
        tag: pair ``i`` uses tag ``tag + i``.
        comm: an mpi4py intracommunicator; None (default) is a clone of
            ``MPI.COMM_WORLD`` made when jaxmpi is imported
            (``jaxmpi.get_default_comm()``).
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A ``Request`` holding every pair's receive and send in flight and
        their buffers; ``wait`` on it returns a tuple of the received
        arrays, one per pair.

    Raises:
        TypeError: ``sendbufs``, ``recvbufs``, ``sources`` or ``dests`` is
            not a list or tuple, an array argument is not one array of a
            supported dtype (a list, tuple, dict, a ``(result, token)`` pair
            or a token is named as such), a rank or tag is not a static int,
            ``comm`` is not an intracommunicator, or ``token`` is not a
            token.
        ValueError: a rank or tag is out of range, or an array lives on more
            than one device (jaxmpi needs one JAX device per process).
        ValueError: the four sequences differ in length, or hold no pair
            or more than 15 pairs.
        jax.errors.JaxRuntimeError: when the start runs: an MPI error
            (naming the op, the rank, the peer and MPI's message), or 4096
            requests of this process already in flight
            (``RESOURCE_EXHAUSTED``). Errors of the communication itself
            are raised by ``wait``.

    Example:
        A 1-D halo exchange in both directions, overlapping the interior
        update::

            left, right = (rank - 1) % size, (rank + 1) % size
            req = mpx.ineighbor_exchange(
                [u[-1:], u[:1]], [u[:1], u[-1:]],
                sources=[left, right], dests=[right, left])
            interior = update(u)                 # while the halos travel
            from_left, from_right = mpx.wait(req)
            req, token = jaxmpi.ineighbor_exchange(      # token API
                [u[-1:], u[:1]], [u[:1], u[-1:]], [left, right], [right, left])
            (from_left, from_right), token = jaxmpi.wait(req, token=token)
    """
    fn = "ineighbor_exchange"
    info, tok = _begin(fn, comm, token)
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
    if not 1 <= n <= MAX_EXCHANGE_PAIRS:
        raise ValueError(f"{fn}: 1 to {MAX_EXCHANGE_PAIRS} pairs in one "
                         f"call, got {n}")
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
    v.tag_arg(tag + n - 1, fn, f"tag + {n - 1} (the last pair's tag)", info)
    _ops_join(tok)
    return _start(fn, tuple(xs), dict(
        comm=info, sources=srcs, dests=dsts, tag=tag,
        recv_avals=tuple((tuple(t.shape), np.dtype(t.dtype)) for t in ts)))


def _ops_join(tok):
    # A concrete token outside any trace is already complete, and eager calls
    # are ordered by JAX's runtime tokens: only traced tokens need joining.
    if tok is not None and not _jcore.trace_state_clean():
        _ops.join_token_p.bind(tok)


def wait(request, *, token=None):
    """Complete a request: wait until its MPI requests are done and
    return the operation's result.

    The counterpart of MPI_Wait. Inside ``jit`` the wait is an asynchronous
    XLA FFI handler: while the request is not complete, XLA:CPU may run
    other work that does not depend on it (with less than
    ``MPI_THREAD_MULTIPLE`` or ``JAXMPI_ASYNC_WAIT=0`` the wait blocks in
    its handler instead; see docs/nonblocking.md).

    Args:
        request: a ``Request`` from one of the starts (``isend``,
            ``irecv``, ...), started in this function (the same ``jit``,
            loop body, ``cond`` branch or transformation) and not yet
            waited. Each request is waited exactly once.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        The result of the request's operation, as its blocking form
        returns it: an array, a tuple of arrays for ``ineighbor_exchange``,
        a list or tuple of arrays for ``ihalo_exchange`` of a list or
        tuple, or None for ``isend`` and ``ibarrier``.

    Raises:
        TypeError: ``request`` is not a ``Request``, or ``token`` is not a
            token.
        RuntimeError: at trace time (nothing of the function runs):
            ``request`` was already waited, or was started in another
            function (another ``jit``, loop body, ``cond`` branch or
            transformation).
        jax.errors.JaxRuntimeError: when the wait runs: an MPI error
            completing the request (naming the op, the rank, the peer and
            MPI's message); a received message whose size differs from its
            template's (``FAILED_PRECONDITION``); with a watchdog timeout
            (``jaxmpi.set_timeout``), a request not complete in time
            (``DEADLINE_EXCEEDED``; its receives are cancelled).

    Example:
        Inside ``jax.jit``::

            req = mpx.irecv(template, source=1, tag=7)
            z = compute(w)                  # while the message travels
            y = mpx.wait(req)
            req, token = jaxmpi.irecv(template, 1, tag=7)   # token API
            y, token = jaxmpi.wait(req, token=token)
    """
    if not isinstance(request, Request):
        raise TypeError(f"wait: request must be a jaxmpi Request, got "
                        f"{type(request).__name__}: {request!r}")
    state = request._state
    if state.waited:
        raise RuntimeError(f"jaxmpi.wait: {_describe(state)} was already "
                           "waited: wait each request once")
    clean = _jcore.trace_state_clean()
    current = None if clean else _jcore.trace_ctx.trace
    if current is not state.trace:
        state.waited = True  # the trace fails: nothing of it runs
        raise RuntimeError(
            f"jaxmpi.wait: {_describe(state)} must be waited in the function "
            "that started it (the same jit, loop body, cond branch or "
            "transformation), not in another one")
    tok = v.token_arg(token, "wait")
    _ops_join(tok)
    state.waited = True
    results = []
    for part in request._parts:
        outs = wait_p.bind(part.handle, *part.bufs, spec=part.spec)
        after = _AFTER_WAIT.get(part.spec.op)
        results.append(after(outs, part.spec) if after else outs)
    return request._finish(results, request._keep)


def waitall(requests, *, token=None):
    """Complete several requests, in the order given, and return their
    results.

    The same as calling ``wait`` on each request in turn.

    Args:
        requests: a list or tuple of ``Request`` objects, each started in
            this function and not yet waited, none of them twice.
        token: optional: a token from an earlier jaxmpi call (or
            ``jax.lax.create_token()``) to order this call after. Calls
            are ordered without tokens; one given is joined to that order.

    Returns:
        A list of the requests' results, in their order, each as ``wait``
        returns it (None for ``isend`` and ``ibarrier``).

    Raises:
        TypeError: ``requests`` is not a list or tuple, one of its items
            (named by index) is not a ``Request``, or ``token`` is not a
            token.
        RuntimeError: at trace time (nothing of the function runs): the
            same request appears twice, or one was already waited or
            started in another function (as for ``wait``).
        jax.errors.JaxRuntimeError: when the waits run, as for ``wait``.

    Example:
        A ring shift, inside ``jax.jit``::

            reqs = [mpx.irecv(t, left), mpx.isend(x, right)]
            y, _ = mpx.waitall(reqs)             # [left's x, None]
            r1, token = jaxmpi.irecv(t, left)    # token API
            r2, token = jaxmpi.isend(x, right, token=token)
            (y, _), token = jaxmpi.waitall([r1, r2], token=token)
    """
    if not isinstance(requests, (list, tuple)):
        raise TypeError(f"waitall: requests must be a list or tuple of "
                        f"Requests, got {type(requests).__name__}")
    for i, r in enumerate(requests):
        if not isinstance(r, Request):
            raise TypeError(f"waitall: requests[{i}] must be a jaxmpi "
                            f"Request, got {type(r).__name__}: {r!r}")
    if len({id(r._state) for r in requests}) != len(requests):
        raise RuntimeError("jaxmpi.waitall: the same request appears twice")
    tok = v.token_arg(token, "waitall")
    _ops_join(tok)
    return [wait(r) for r in requests]


# The public non-blocking operations, written once (a literal list, which
# the documentation's reader can follow): jaxmpi (token API) and
# jaxmpi.notoken are made from it.
__all__ = ["isend", "irecv", "isendrecv", "iallreduce", "ibcast", "ibarrier",
           "ireduce", "iscan", "igather", "iscatter", "iallgather",
           "ialltoall", "ineighbor_exchange", "iexscan", "ireduce_scatter",
           "iallgatherv", "igatherv", "iscatterv", "ialltoallv",
           "ihalo_exchange", "ineighbor_alltoallv",
           "wait", "waitall", "Request"]
OPERATIONS = tuple(n for n in __all__ if n != "Request")
# The starts: every operation but wait and waitall returns a Request.
STARTS = tuple(n for n in OPERATIONS if n not in ("wait", "waitall"))

# The non-blocking forms of the topology operations, written in
# _topology.py beside the blocking ones (sharing their checks, packing and
# unpacking) from ineighbor_exchange's requests; it takes compose, Request
# and _begin from here.
from ._topology import ihalo_exchange, ineighbor_alltoallv  # noqa: E402

# What every start raises for a misused Request (the class's docstring says
# more), written once here and put in each start's Raises before its first
# NotImplementedError or JaxRuntimeError entry (every start has one), at that
# entry's indentation (Python 3.13 strips a docstring's common indentation,
# older versions keep it).
_MISUSE_RAISES = """\
TypeError: at trace time, the returned ``Request`` leaves the
    function that started it (returned from ``jit``, or passed into
    an inner ``jit``, loop body or ``cond`` branch).
RuntimeError: a request was dropped without a wait: raised by the
    next jaxmpi call or, for a request never waited inside a jitted
    function, when that function is compiled (nothing of it
    runs).
"""
_RUNTIME_RAISES = re.compile(
    r"^( *)(NotImplementedError|jax\.errors\.JaxRuntimeError): ", re.M)
for _name in STARTS:
    _fn = globals()[_name]
    _at = _RUNTIME_RAISES.search(_fn.__doc__ or "")
    if _at is None:
        raise AssertionError(f"{_name}'s docstring has no entry for "
                             "NotImplementedError or JaxRuntimeError")
    _fn.__doc__ = (_fn.__doc__[:_at.start()]
                   + textwrap.indent(_MISUSE_RAISES, _at.group(1))
                   + _fn.__doc__[_at.start():])
