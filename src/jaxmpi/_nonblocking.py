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
import sys
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

HANDLE = ShapedArray((), np.dtype(np.float32))


# ---- misuse: requests dropped, waited twice, or leaving their function ------

_next_rid = itertools.count(1)
_dropped: dict[int, str] = {}  # rid -> description, traced requests never waited
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
        _dropped[state.rid] = _describe(state)


def check_no_leaks(fn: str) -> None:
    """Raise if a request was dropped without a wait (called by every jaxmpi
    operation before anything else)."""
    if _leaked or _dropped:
        what = _leaked + list(_dropped.values())
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
    """A started non-blocking operation; pass it to ``wait`` (or
    ``waitall``) in the function that started it.

    A JAX value: it holds the request's handle and the buffers MPI uses
    until the wait. It is a pytree only outside transformations: inside
    ``jit``, ``grad``, ``vmap`` or a loop it must not leave the function that
    started it (returned, or passed into an inner ``jit`` or loop body)."""

    __slots__ = ("_handle", "_bufs", "_spec", "_state", "__weakref__")

    def __init__(self, handle, bufs, spec, state):
        self._handle = handle
        self._bufs = tuple(bufs)
        self._spec = spec
        self._state = state

    @property
    def op(self) -> str:
        return self._spec.op

    def __repr__(self):
        return (f"Request(jaxmpi.{self._spec.op}, "
                f"{'waited' if self._state.waited else 'in flight'})")


def _flatten(req):
    if not _jcore.trace_state_clean():
        # The trace fails: nothing of it runs, so nothing is left in flight.
        req._state.waited = True
        raise TypeError(
            f"{_describe(req._state)} cannot leave the function that started "
            "it (returned from jit, or passed into an inner jit, loop body or "
            "cond branch): wait it in that function. Requests are issued and "
            "completed in program order; their buffers are in use by MPI.")
    return (req._handle, *req._bufs), (req._spec, req._state)


def _unflatten(aux, leaves):
    spec, state = aux
    return Request(leaves[0], leaves[1:], spec, state)


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
_BACKWARD: dict[str, object] = {}


def _define_start(name, bufs_rule, aliases):
    """Start primitive jaxmpi_<name>: results [handle, *bufs_rule(...)]
    (`aliases`: operand -> buffer index, each buffer sharing its operand's
    memory)."""
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
    def rule_for(aliases):
        return jax.ffi.ffi_lowering(
            f"jaxmpi_{name}", has_side_effect=True,
            operand_output_aliases={i: 1 + o for i, o in aliases.items()})

    fixed = None if callable(aliases) else rule_for(aliases)

    def lowering(ctx, *operands, rid, **params):
        rule = fixed or rule_for(aliases(len(operands), **params))
        if rid in _dropped:
            raise RuntimeError(
                f"jaxmpi.{name}: {_dropped.pop(rid)} was never waited in the "
                "function that started it: pass it to jaxmpi.wait (or "
                "waitall) there.")
        return lower_with_token(ctx, rule, *operands,
                                **_ops._attributes(params))

    mlir.register_lowering(prim, lowering, platform="cpu")

    def gpu(ctx, *operands, **params):
        raise NotImplementedError(
            f"jaxmpi.{name}: non-blocking operations run on CPU only so far "
            "(use the blocking operation on GPU)")

    mlir.register_lowering(prim, gpu, platform="cuda")
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


mlir.register_lowering(wait_p, _wait_lowering, platform="cpu")


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
        if name in _NO_VMAP:
            raise NotImplementedError(
                f"jaxmpi.{name}: vmap is not supported yet (use the blocking "
                f"{name[1:]}, or a loop)")
        n = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        args = [_ops._front(a, d) if d is not None
                else jnp.broadcast_to(a, (n, *a.shape))
                for a, d in zip(args, dims)]
        if "recv_avals" in params:
            params["recv_avals"] = tuple(((n, *shape), dtype) for shape, dtype
                                         in params["recv_avals"])
        out = prim.bind(*args, rid=rid, **params)
        return out, [None] + [0] * (len(out) - 1)

    batching.primitive_batchers[prim] = rule


def _wait_batcher(args, dims, *, spec):
    h, *bufs = args
    if dims[0] is not None:
        raise ValueError("jaxmpi.wait: a batch of requests cannot be waited "
                         "as one; start one request for the batch")
    n = next((b.shape[d] for b, d in zip(bufs, dims[1:]) if d is not None),
             None)
    bufs = [_ops._front(b, d) if d is not None
            else jnp.broadcast_to(b, (n, *b.shape))
            for b, d in zip(bufs, dims[1:])]
    out = wait_p.bind(h, *bufs, spec=spec)
    return out, [0] * len(out)


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
    on the root, [x] (also the result) elsewhere."""
    def bufs(x, *, comm, root):
        return [x, root_shape(x, comm)] if comm.rank == root else [x]

    def aliases(nops, *, comm, root):
        return {0: 0}

    def results(nops, *, comm, root):
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

# igather: root buffers [x, y (size, *x.shape)], result y; elsewhere [x],
# passed through.
_b, _a, _r = _rooted(lambda x, comm: _ops._aval((comm.size, *x.shape), x.dtype))
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

# ineighbor_exchange: buffers [*xs, *ys], results ys. Backward: the blocking
# exchange reversed (posts all its messages at once, so it cannot deadlock
# against the other ranks' backward programs).
ineighbor_exchange_p = _define_start(
    "ineighbor_exchange",
    lambda *xs, comm, sources, dests, tag, recv_avals: [
        *xs, *[_ops._aval(s, d) for s, d in recv_avals]],
    lambda nops, **_: {i: i for i in range(nops)})
_spec("ineighbor_exchange", lambda nops, **_: range(nops, 2 * nops))


def _nx_backward():
    def start(cts, bufs, spec):
        params = dict(spec.params)
        n = len(bufs) // 2
        xs = [ad.UndefinedPrimal(b) for b in bufs[:n]]
        cx = ad.primitive_transposes[_ops.neighbor_exchange_p](
            list(cts), *xs, **params)
        cx = [_ops._ct(c, b) for c, b in zip(cx, bufs[:n])]
        return (jnp.zeros((), np.float32),
                [*cx, *[_ops._zeros(b) for b in bufs[n:]]])

    return _Backward(start, lambda bh, bbufs, operands, spec:
                     bbufs[:len(operands)])


_BACKWARD["ineighbor_exchange"] = _nx_backward()

# vmap: the batch axis in front of every buffer suits the elementwise and
# point-to-point ops; the others split or stack their first axis over ranks.
_NO_VMAP = ("igather", "iscatter", "iallgather", "ialltoall")

for _name, _prim in START.items():
    _start_jvp(_prim, _name)
    _start_transpose(_name)
    _start_batcher(_prim, _name)


# ---- the Python functions ----------------------------------------------------


def _begin(fn, comm, token):
    check_no_leaks(fn)
    info = v.comm_info(comm, fn)
    tok = v.token_arg(token, fn)
    return info, tok


def _start(name, operands, params):
    clean = _jcore.trace_state_clean()
    rid = 0 if clean else next(_next_rid)
    handle, *bufs = START[name].bind(*operands, rid=rid, **params)
    spec = _SPECS[name](operands, params)
    state = _State(name, _caller(), rid,
                   None if clean else _jcore.trace_ctx.trace)
    req = Request(handle, bufs, spec, state)
    weakref.finalize(req, _on_drop, state, tuple(bufs))
    return req


def isend(x, dest, *, tag=0, comm=None, token=None) -> Request:
    """Start sending ``x`` to rank ``dest``: MPI_Isend.

    Args:
        x: the array to send. It may be changed or donated afterwards: the
            request sends from its own buffer (XLA copies ``x`` first where
            ``x`` is still used; donate it to avoid the copy).
        dest: the destination rank, or ``MPI.PROC_NULL``.
        tag: the message tag.
        comm: an mpi4py intracommunicator (default: jaxmpi's clone of
            COMM_WORLD).
        token: optional; joined to the order of jaxmpi calls.

    Returns:
        A Request; ``wait(req)`` returns None.

    Raises:
        TypeError, ValueError: a bad argument (named), on every rank before
        any MPI call.

    Example::

        req = isend(x, dest=1, tag=7)
        z = heavy_compute(w)        # runs while the message travels
        wait(req)
    """
    info, tok = _begin("isend", comm, token)
    x = v.array(x, "isend")
    dest = v.rank_arg(dest, "isend", "dest", info, allow=(MPI.PROC_NULL,))
    tag = v.tag_arg(tag, "isend", "tag", info)
    _ops_join(tok)
    return _start("isend", (x,), dict(comm=info, dest=dest, tag=tag))


def irecv(x, source=MPI.ANY_SOURCE, *, tag=MPI.ANY_TAG, comm=None,
          status=None, token=None) -> Request:
    """Start receiving an array of ``x``'s shape and dtype: MPI_Irecv.

    Args:
        x: a template; its data is not used.
        source: the source rank, ``MPI.ANY_SOURCE`` or ``MPI.PROC_NULL``
            (the result is then zeros).
        tag: the tag, or ``MPI.ANY_TAG``.
        comm, token: as for ``isend``.
        status: an ``MPI.Status`` filled in when the wait completes.

    Returns:
        A Request; ``wait(req)`` returns the received array. A message of
        another size is an error at the wait.

    Example::

        req = irecv(jnp.zeros(n), source=0, tag=7)
        z = heavy_compute(w)
        y = wait(req)
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
              recvtag=MPI.ANY_TAG, comm=None, status=None,
              token=None) -> Request:
    """Start sending ``sendbuf`` to ``dest`` and receiving an array of
    ``recvbuf``'s shape and dtype from ``source`` (MPI_Irecv + MPI_Isend,
    completed together by the wait).

    Args: as ``jaxmpi.sendrecv``. Returns: a Request; ``wait(req)`` returns
    the received array.

    Example::

        req = isendrecv(edge, jnp.zeros_like(edge), source=left, dest=right)
        interior = update(interior)
        halo = wait(req)
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
    """Start reducing ``x`` over all ranks with ``op``: MPI_Iallreduce.

    Args: as ``jaxmpi.allreduce`` (derivatives: MPI.SUM only).

    Returns:
        A Request; ``wait(req)`` returns the reduction (``x``'s shape and
        dtype) on every rank.

    Example::

        req = iallreduce(grads, op=MPI.SUM)
        loss = more_compute(params)
        total = wait(req)
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
    """Start broadcasting the root's ``x``: MPI_Ibcast.

    Args: as ``jaxmpi.bcast`` (off the root ``x`` is a template).

    Returns:
        A Request; ``wait(req)`` returns the root's ``x`` on every rank.

    Example::

        req = ibcast(params, root=0)
        y = wait(req)
    """
    info, tok = _begin("ibcast", comm, token)
    x = v.array(x, "ibcast")
    root = v.rank_arg(root, "ibcast", "root", info)
    _ops_join(tok)
    return _start("ibcast", (x,), dict(comm=info, root=root))


def ibarrier(*, comm=None, token=None) -> Request:
    """Start a barrier: MPI_Ibarrier. ``wait(req)`` returns None once every
    rank of ``comm`` has started it.

    Example::

        req = ibarrier()
        z = compute(w)
        wait(req)
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
    """Start reducing ``x`` with ``op`` onto ``root``: MPI_Ireduce.

    Args: as ``jaxmpi.reduce`` (derivatives: MPI.SUM only).

    Returns:
        A Request; ``wait(req)`` returns the reduction on the root and ``x``
        elsewhere.

    Example::

        req = ireduce(x, MPI.SUM, root=0)
        z = compute(w)
        y = wait(req)
    """
    info, tok, x, opinfo = _reduction_start("ireduce", x, op, comm, token)
    root = v.rank_arg(root, "ireduce", "root", info)
    _ops_join(tok)
    return _start("ireduce", (x,), dict(comm=info, op=opinfo, root=root))


def iscan(x, op, *, comm=None, token=None) -> Request:
    """Start an inclusive prefix reduction: MPI_Iscan.

    Args: as ``jaxmpi.scan``. Returns: a Request; ``wait(req)`` returns
    ``op`` over ranks 0..r on rank r.

    Example::

        y = wait(iscan(x, MPI.SUM))
    """
    info, tok, x, opinfo = _reduction_start("iscan", x, op, comm, token)
    _ops_join(tok)
    return _start("iscan", (x,), dict(comm=info, op=opinfo))


def igather(x, root, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on the root: MPI_Igather.

    Args: as ``jaxmpi.gather``. Returns: a Request; ``wait(req)`` returns
    shape ``(size, *x.shape)`` on the root and ``x`` elsewhere.

    Example::

        y = wait(igather(x, root=0))
    """
    info, tok = _begin("igather", comm, token)
    x = v.array(x, "igather")
    root = v.rank_arg(root, "igather", "root", info)
    _ops_join(tok)
    return _start("igather", (x,), dict(comm=info, root=root))


def iscatter(x, root, *, comm=None, token=None) -> Request:
    """Start scattering the root's ``x[r]`` to rank r: MPI_Iscatter.

    Args: as ``jaxmpi.scatter`` (off the root ``x`` is a template of the
    result). Returns: a Request; ``wait(req)`` returns the rank's block.

    Example::

        y = wait(iscatter(blocks if rank == 0 else template, root=0))
    """
    info, tok = _begin("iscatter", comm, token)
    x = v.array(x, "iscatter")
    root = v.rank_arg(root, "iscatter", "root", info)
    if info.rank == root:
        v.leading_dim(x, "iscatter", "x (on the root)", info.size)
    _ops_join(tok)
    return _start("iscatter", (x,), dict(comm=info, root=root))


def iallgather(x, *, comm=None, token=None) -> Request:
    """Start gathering every rank's ``x`` on every rank: MPI_Iallgather.

    Returns: a Request; ``wait(req)`` returns shape ``(size, *x.shape)``.

    Example::

        y = wait(iallgather(x))
    """
    info, tok = _begin("iallgather", comm, token)
    x = v.array(x, "iallgather")
    _ops_join(tok)
    return _start("iallgather", (x,), dict(comm=info))


def ialltoall(x, *, comm=None, token=None) -> Request:
    """Start an all-to-all exchange: MPI_Ialltoall. ``x.shape[0]`` must
    equal the communicator size; rank i's ``x[j]`` lands in rank j's
    ``result[i]``.

    Example::

        y = wait(ialltoall(x))
    """
    info, tok = _begin("ialltoall", comm, token)
    x = v.array(x, "ialltoall")
    v.leading_dim(x, "ialltoall", "x", info.size)
    _ops_join(tok)
    return _start("ialltoall", (x,), dict(comm=info))


MAX_EXCHANGE_PAIRS = 15  # 1 + 2 * 15 buffers: the core's limit per call


def ineighbor_exchange(sendbufs, recvbufs, sources, dests, *, tag=0,
                       comm=None, token=None) -> Request:
    """Start many sendrecvs at once, as ``jaxmpi.neighbor_exchange``: pair
    ``i`` sends ``sendbufs[i]`` to ``dests[i]`` and receives an array of
    ``recvbufs[i]``'s shape and dtype from ``sources[i]``, with tag
    ``tag + i``. At most 15 pairs.

    Returns: a Request; ``wait(req)`` returns the tuple of received arrays.

    Example::

        req = ineighbor_exchange([edge_l, edge_r], [t, t], [left, right],
                                 [left, right])
        interior = update(interior)      # while the halos travel
        halo_l, halo_r = wait(req)
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
    if tok is not None and not _jcore.trace_state_clean():
        _ops.join_token_p.bind(tok)


def wait(request, *, token=None):
    """Complete a request: MPI_Wait(all) of its MPI requests.

    Args:
        request: a Request from ``isend``, ``irecv``, ... started in this
            function (the same ``jit``, loop body or transformation), not yet
            waited.
        token: optional; joined to the order of jaxmpi calls.

    Returns:
        The blocking operation's result (None for ``isend`` and
        ``ibarrier``).

    Raises:
        TypeError: not a Request; RuntimeError: waited twice, or started in
        another function.

    Example::

        req = irecv(template, source=1, tag=7)
        z = compute(w)
        y = wait(req)
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
    outs = wait_p.bind(request._handle, *request._bufs, spec=request._spec)
    if request._spec.op == "ineighbor_exchange":
        return tuple(outs)
    return outs[0] if outs else None


def waitall(requests, *, token=None):
    """Complete several requests, in order; returns the list of their
    results (None for ``isend``/``ibarrier``).

    Example::

        reqs = [irecv(t, left), isend(x, right)]
        y, _ = waitall(reqs)
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


OPERATIONS = ("isend", "irecv", "isendrecv", "iallreduce", "ibcast",
              "ibarrier", "ireduce", "iscan", "igather", "iscatter",
              "iallgather", "ialltoall", "ineighbor_exchange")
