"""Completing requests: wait and waitall."""

from __future__ import annotations

from . import _dispatch
from . import _requests as rq
from . import _validate as v
from ._parse import join
from ._primitives import delivered, waits


def wait(request, *, token=None):
    """Complete a request and return its operation's result.

    MPI_Wait's counterpart. Inside ``jit`` the wait is an asynchronous XLA FFI
    handler: while the request is not complete, XLA:CPU may run other work that
    does not depend on it (below ``MPI_THREAD_MULTIPLE`` or with
    ``JAXMPI_ASYNC_WAIT=0`` it blocks in its handler; docs/nonblocking.md).

    Args:
        request: a ``Request`` started in this function and not yet waited.
        token: a token to order this call after (optional, never needed).

    Returns:
        The result of the request's operation, as its blocking form returns it
        (None for ``isend`` and ``ibarrier``).

    Raises:
        TypeError: ``request`` is not a ``Request``.
        RuntimeError: at trace time, ``request`` was already waited or was
            started in another function (``jit``, loop body, ``cond`` branch).
        jax.errors.JaxRuntimeError: a message of another size than its
            template; a request not complete within the watchdog's timeout
            (``DEADLINE_EXCEEDED``; its receives are cancelled).

    Example:
        Inside ``jax.jit``:

            req = mpx.irecv(template, source=1, tag=7)
            z = compute(w)                  # while the message travels
            y = mpx.wait(req)
    """
    rq.check_waitable(request)
    join(v.token_arg(token, "wait"))
    plan = rq.take(request)
    if plan is not None:  # started eagerly on sharded arrays
        return _dispatch.wait_sharded(request, plan)
    parts = rq.parts(request)
    return rq.finished(request, delivered(waits(parts),
                                          [spec for _, _, spec in parts]))


def waitall(requests, *, token=None):
    """Complete several requests, in the order given; return their results.

    The same as ``wait`` on each request in turn (MPI_Wait's counterpart).

    Args:
        requests: a list or tuple of ``Request`` objects, none of them twice.
        token: a token to order this call after (optional, never needed).

    Returns:
        A list of the requests' results, in their order, each as ``wait``
        returns it.

    Raises:
        TypeError: ``requests`` is not a list or tuple of ``Request`` objects.
        RuntimeError: at trace time, a request appears twice, or one is misused
            as ``wait`` says.
        jax.errors.JaxRuntimeError: as ``wait``.

    Example:
        A ring shift, inside ``jax.jit``:

            reqs = [mpx.irecv(t, left), mpx.isend(x, right)]
            y, _ = mpx.waitall(reqs)        # [left's x, None]
    """
    if not isinstance(requests, (list, tuple)):
        raise TypeError(f"waitall: requests must be a list or tuple of "
                        f"Requests, got {type(requests).__name__}")
    for i, r in enumerate(requests):
        if not isinstance(r, rq.Request):
            raise TypeError(f"waitall: requests[{i}] must be a jaxmpi "
                            f"Request, got {type(r).__name__}: {r!r}")
    if rq.repeated(requests):
        raise RuntimeError("jaxmpi.waitall: the same request appears twice")
    join(v.token_arg(token, "waitall"))
    return [wait(r) for r in requests]
