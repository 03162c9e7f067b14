"""The arguments of every public operation, parsed once for its blocking
and its non-blocking form: ``Args`` makes what every operation checks first
(no request left unwaited, its ``comm`` and ``token``) and reads the rest
as the operation's own parse asks (arrays, reduction ops, ranks, tags),
each checked with an error naming the function, the argument and its
value; ``Args.call`` then joins a traced token to the order of calls and
gives the ``Call`` that both forms share: the blocking form binds its
primitive (``Call.bind``; or ``Call.direct``, the eager direct path), the
non-blocking one starts its request (``Call.start``). Also the join of a
token alone (``join``) and a rooted op's result where MPI delivers nothing
(``passed_through``)."""

from __future__ import annotations

from dataclasses import dataclass

from mpi4py import MPI

from . import _core, _eager
from . import _jax_compat as jc
from . import _validate as v
from ._primitives import join_token_p
from ._requests import check_no_leaks, compose_one


def join(tok):
    # A concrete token outside any trace is already complete, and eager calls
    # are ordered by JAX's runtime tokens: only traced tokens need joining.
    if tok is not None and not jc.trace_state_clean():
        join_token_p.bind(tok)


def passed_through(x, y):
    """Where a rooted op's MPI call delivers nothing, the op gives back x.
    Called eagerly with no transformation, that is x itself (as in mpi4jax);
    under jit, grad or vmap it is the primitive's copy of x, so that every
    rank's program stays linear in the same values (docs/autodiff.md)."""
    return x if jc.trace_state_clean() else y


@dataclass(frozen=True)
class Call:
    """An operation's call, parsed: the function's name, the communicator
    as primitives see it, and the primitive's operands and parameters."""

    fn: str
    info: object
    operands: tuple
    params: dict

    def bind(self, prim) -> list:
        """The blocking form: its primitive's results."""
        return prim.bind(*self.operands, **self.params)

    def start(self):
        """The non-blocking form (`fn` names its start primitive): its
        Request."""
        return compose_one(self.fn, self.operands, self.params)

    def direct(self, run, arg, comm):
        """The eager direct path (_eager.py): ``run(x, arg, comm)`` outside
        any trace where it applies, else None (the compiled path runs)."""
        (x,) = self.operands
        if jc.trace_state_clean() and _eager.usable(x):
            return run(x, arg, v.default_comm() if comm is None else comm)
        return None

    def rooted(self, x, y, root_gets):
        """A rooted op's result: `y` where MPI delivers it (on the root if
        `root_gets`, elsewhere if not), else x passed through."""
        here = self.info.rank == self.params["root"]
        return y if here == root_gets else passed_through(x, y)


class Args:
    """The arguments of one call of operation `fn`, checked as they are
    read. Made first: no request left unwaited, then ``comm`` (its info;
    a DeviceCart where ``grid_ok``: the topology operations) and
    ``token``."""

    def __init__(self, fn: str, comm, token, grid_ok: bool = False):
        check_no_leaks(fn)
        self.fn = fn
        self.info = v.comm_info(comm, fn, grid_ok)
        self.tok = v.token_arg(token, fn)

    def array(self, x, name: str = "x"):
        return v.array(x, self.fn, name)

    def op(self, op, x):
        """A reduction op defined for x's dtype."""
        return v.reduction_op(op, x.dtype, self.fn, _core.get().half_ops)

    def rank(self, value, name: str = "root", allow=()) -> int:
        return v.rank_arg(value, self.fn, name, self.info, allow=allow)

    def source(self, value, name: str = "source") -> int:
        """A rank to receive from, MPI.ANY_SOURCE or MPI.PROC_NULL."""
        return self.rank(value, name, (MPI.ANY_SOURCE, MPI.PROC_NULL))

    def peer(self, value, name: str = "dest") -> int:
        """A rank, or MPI.PROC_NULL (a dest, or an exchange's source)."""
        return self.rank(value, name, (MPI.PROC_NULL,))

    def tag(self, value, name: str = "tag", allow_any: bool = False) -> int:
        return v.tag_arg(value, self.fn, name, self.info, allow_any=allow_any)

    def done(self) -> None:
        """Every argument checked: a traced token joins the order of
        calls."""
        join(self.tok)

    def call(self, *operands, **params) -> Call:
        """The parsed call (after every check, ``done``): the primitive's
        operands, and its parameters with the communicator's info."""
        self.done()
        return Call(self.fn, self.info, tuple(operands),
                    {"comm": self.info, **params})
