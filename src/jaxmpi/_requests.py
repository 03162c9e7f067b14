"""The value a non-blocking start returns and its wait completes: the
Request, the checks against its misuse, and compose (a Request made of
start primitives).

A start ``jaxmpi_i<op>`` (_primitives.define_start) posts the MPI_I* call
and returns the request's handle (a float32 scalar, see csrc/request.h)
and every buffer the request uses: send buffers aliased to their inputs,
receive buffers aliased to their templates. Those buffers are results of
the start that only the Request holds, so no other operation of the
program can read a half-received buffer or overwrite one MPI still sends
from; XLA copies an input first where it is still needed afterwards
(donate it to avoid the copy). ``jaxmpi_wait`` (_primitives.wait_p) takes
the handle and all of those buffers (XLA keeps them alive until the wait),
and returns the op's results aliased to their receive buffers. Starts and
waits carry jaxmpi's ordered effect: they are issued in program order on
every rank.

The dispatch layer (_dispatch) and the wait (_wait) see a Request through
this module's functions only: ``parts``, ``leaves``, ``layout``,
``rebuilt``, ``ended``, ``check_waitable``, ``take``, ``finished``.
"""

from __future__ import annotations

import itertools
import sys
import weakref
from dataclasses import dataclass

import jax

from . import _jax_compat as jc
from . import _registry


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
    sharded: object = None  # started eagerly on sharded arrays: the plan


def describe(state):
    return f"a request of jaxmpi.{state.op} started at {state.where}"


def raise_if_dropped(rid: int) -> None:
    """Raise if the traced request `rid` was dropped without a wait (called
    by the lowering of its start: nothing of the function runs)."""
    if rid in _dropped:
        state = _dropped.pop(rid)
        raise RuntimeError(
            f"jaxmpi.{state.op}: {describe(state)} was never waited in "
            "the function that started it: pass it to jaxmpi.wait (or "
            "waitall) there.")


def _on_drop(state, bufs):
    if state.waited:
        return
    if state.trace is None:
        _leaked.append(describe(state))
        _graveyard.append(bufs)
    else:
        _dropped[state.rid] = state


def check_no_leaks(fn: str) -> None:
    """Raise if a request was dropped without a wait (called by every jaxmpi
    operation before anything else)."""
    if _leaked or _dropped:
        what = _leaked + [describe(st) for st in _dropped.values()]
        _leaked.clear()
        _dropped.clear()
        raise RuntimeError(
            f"jaxmpi.{fn}: {what[0]} was never waited"
            + (f" (and {len(what) - 1} more)" if len(what) > 1 else "")
            + ". Every request must be passed to jaxmpi.wait (or waitall) in "
            "the function that started it; its MPI call is still pending and "
            "its buffers are kept alive.")


def _user_line():
    f = sys._getframe(1)
    here = __file__.rsplit("/", 1)[0]
    while f is not None and (f.f_code.co_filename.startswith(here)):
        f = f.f_back
    return "?" if f is None else f"{f.f_code.co_filename}:{f.f_lineno}"


class Request:
    """A started non-blocking operation, completed by ``wait`` or ``waitall``.

    What a start (``isend``, ``irecv``, ...) returns: a JAX value made by
    the starts, not by the caller. It holds the
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
        A request's life:

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
    """One start primitive's request: its handle, its buffers, its wait's
    spec."""

    handle: object
    bufs: tuple
    spec: object


def _leaves(req):
    return [leaf for p in req._parts for leaf in (p.handle, *p.bufs)] + list(
        req._keep)


def _flatten(req):
    if not jc.trace_state_clean():
        # The trace fails: nothing of it runs, so nothing is left in flight.
        req._state.waited = True
        raise TypeError(
            f"{describe(req._state)} cannot leave the function that started "
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


# ---- a Request of start primitives -----------------------------------------


def _track(req) -> Request:
    """req, reported if it is dropped without a wait."""
    weakref.finalize(req, _on_drop, req._state, tuple(_leaves(req)))
    return req


def compose(op, starts, finish, keep=()):
    """The Request of the public start `op`, made of start primitives.

    `starts`: (start name, operands, parameters) of each, bound in
    order under one request id (a request never waited is reported when
    the first of them is lowered). The wait waits each in order and
    returns ``finish(results, keep)``: results[i] is the list of start i's
    results, `keep` the arrays the finish uses besides them (the Request
    holds them, so they reach the wait in the function that started it).
    Starts built from others (ihalo_exchange, ineighbor_alltoallv) pack
    their messages before calling this and unpack them in `finish`; their
    derivatives and batching are the primitives' and those of the
    packing and unpacking."""
    clean = jc.trace_state_clean()
    rid = 0 if clean else next(_next_rid)
    parts = []
    for name, operands, params in starts:
        row = _registry.STARTS[name]
        handle, *bufs = row.prim.bind(*operands, rid=rid, **params)
        parts.append(_Part(handle, tuple(bufs),
                           row.wait_spec(operands, params)))
    state = _State(op, _user_line(), rid,
                   None if clean else jc.trace_ctx.trace)
    return _track(Request(parts, keep, finish, state))


def compose_one(name, operands, params):
    """The Request of start primitive `name` alone: its wait returns what
    the start's row says (its one result, None for isend and ibarrier, or
    every pair's for ineighbor_exchange)."""
    return compose(name, [(name, operands, params)],
                   _registry.STARTS[name].finish)


# ---- what the wait and the dispatch layer see of a Request -----------------


def parts(req) -> list:
    """(handle, buffers, WaitSpec) of each start the request is made of, in
    order."""
    return [(p.handle, p.bufs, p.spec) for p in req._parts]


leaves = _leaves  # every array it holds: each part's handle and buffers, kept


def layout(req) -> tuple:
    """What rebuilding the request from its leaves needs besides them."""
    return tuple((p.spec, len(p.bufs)) for p in req._parts), req._finish


def rebuilt(op, layout, arrays, plan) -> Request:
    """An eager Request of the public start `op` with `layout`, holding
    `arrays` (leaves in the order ``leaves`` gives them): a request started
    on sharded arrays (_dispatch), whose wait `plan` says how to run. It is
    reported if dropped without a wait, as compose's."""
    state = _State(op, _user_line(), 0, None, sharded=plan)
    return _track(_unflatten((*layout, state), list(arrays)))


def ended(req) -> None:
    """A request that ends in the trace that made it without a wait: its
    arrays leave that trace for an eager Request that is waited instead
    (_dispatch's per-device requests)."""
    req._state.waited = True


def check_waitable(request, fn: str = "wait") -> None:
    """Raise unless `request` is a Request that may be waited here: not
    waited yet, and in the function that started it."""
    if not isinstance(request, Request):
        raise TypeError(f"{fn}: request must be a jaxmpi Request, got "
                        f"{type(request).__name__}: {request!r}")
    state = request._state
    if state.waited:
        raise RuntimeError(f"jaxmpi.{fn}: {describe(state)} was already "
                           "waited: wait each request once")
    current = None if jc.trace_state_clean() else jc.trace_ctx.trace
    if current is not state.trace:
        state.waited = True  # the trace fails: nothing of it runs
        raise RuntimeError(
            f"jaxmpi.{fn}: {describe(state)} must be waited in the function "
            "that started it (the same jit, loop body, cond branch or "
            "transformation), not in another one")


def take(request):
    """Mark a checked request waited; the plan of its wait where it was
    started eagerly on sharded arrays (_dispatch), else None."""
    request._state.waited = True
    return request._state.sharded


def finished(request, results):
    """The request's result from its parts' results (after their waits)."""
    return request._finish(results, request._keep)


def repeated(requests) -> bool:
    """Whether a request appears twice among `requests`."""
    return len({id(r._state) for r in requests}) != len(requests)
