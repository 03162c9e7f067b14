"""Completing requests: wait and waitall."""

from __future__ import annotations

from . import _jax_compat as jc
from . import _registry
from . import _validate as v
from ._requests import Request, describe, wait_p
from ._steps import join


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
        raise RuntimeError(f"jaxmpi.wait: {describe(state)} was already "
                           "waited: wait each request once")
    clean = jc.trace_state_clean()
    current = None if clean else jc.trace_ctx.trace
    if current is not state.trace:
        state.waited = True  # the trace fails: nothing of it runs
        raise RuntimeError(
            f"jaxmpi.wait: {describe(state)} must be waited in the function "
            "that started it (the same jit, loop body, cond branch or "
            "transformation), not in another one")
    tok = v.token_arg(token, "wait")
    join(tok)
    state.waited = True
    results = []
    for part in request._parts:
        outs = wait_p.bind(part.handle, *part.bufs, spec=part.spec)
        after = _registry.STARTS[part.spec.op].after_wait
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
    join(tok)
    return [wait(r) for r in requests]
