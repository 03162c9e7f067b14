"""The steps of the public operations: what every one does first (no
request left unwaited, its ``comm`` and ``token`` checked: ``begin``), the
join of a traced token to the order of calls (``join``, after the other
arguments are checked), and what several share (a reduction's arguments,
a rooted op's result where MPI delivers nothing)."""

from __future__ import annotations

from . import _core
from . import _jax_compat as jc
from . import _validate as v
from ._define import join_token_p
from ._requests import check_no_leaks


def begin(fn, comm, token, grid_ok=False):
    """The checks every jaxmpi operation makes first, blocking or not:
    no request dropped unwaited, ``comm`` (its info; a DeviceCart where
    ``grid_ok``: the topology operations) and ``token``."""
    check_no_leaks(fn)
    info = v.comm_info(comm, fn, grid_ok)
    tok = v.token_arg(token, fn)
    return info, tok


def join(tok):
    # A concrete token outside any trace is already complete, and eager calls
    # are ordered by JAX's runtime tokens: only traced tokens need joining.
    if tok is not None and not jc.trace_state_clean():
        join_token_p.bind(tok)


def reduction_args(fn, x, op, comm, token):
    """begin, then a reduction's array and op: (comm info, token, x, op
    info)."""
    info, tok = begin(fn, comm, token)
    x = v.array(x, fn)
    opinfo = v.reduction_op(op, x.dtype, fn, _core.get().half_ops)
    return info, tok, x, opinfo


def passed_through(x, y):
    """Where a rooted op's MPI call delivers nothing, the op gives back x.
    Called eagerly with no transformation, that is x itself (as in mpi4jax);
    under jit, grad or vmap it is the primitive's copy of x, so that every
    rank's program stays linear in the same values (docs/autodiff.md)."""
    return x if jc.trace_state_clean() else y
