"""The ordered effect that sequences every jaxmpi call.

Every jaxmpi primitive carries one ordered effect. JAX then threads an XLA
token through all of them in program order, inside jit and across
dispatches, so MPI calls are issued in the order the Python program made
them on every rank: no user token is ever needed for correctness.
"""

from __future__ import annotations

import hashlib

from . import _jax_compat as _compat
from ._jax_compat import Effect, abstract_token, mlir


class MPIEffect(Effect):
    """All jaxmpi calls of a program, in order."""

    # The same hash in every process (persistent compilation caches key on it).
    _HASH = int(hashlib.md5(b"jaxmpi.MPIEffect").hexdigest()[:15], 16)

    def __hash__(self):
        return self._HASH

    def __eq__(self, other):
        return isinstance(other, MPIEffect)

    def __repr__(self):
        return "MPIEffect"


mpi_effect = MPIEffect()

for _registry in (
    _compat.ordered_effects,
    _compat.lowerable_effects,
    _compat.control_flow_allowed_effects,
    _compat.custom_derivatives_allowed_effects,
    _compat.remat_allowed_effects,
    _compat.partial_eval_kept_effects,  # keep ops whose results are unused
):
    _registry.add_type(MPIEffect)


def lower_with_token(ctx, rule, *operands, **attrs):
    """Lower through `rule` (an FFI lowering) with the effect token threaded
    through as the custom call's last operand and result."""
    token = ctx.tokens_in.get(mpi_effect)
    inner = ctx.replace(
        avals_in=[*ctx.avals_in, abstract_token],
        avals_out=[*ctx.avals_out, abstract_token],
    )
    outs = rule(inner, *operands, token, **attrs)
    ctx.set_tokens_out(mlir.TokenSet({mpi_effect: outs[-1]}))
    return outs[:-1]


def join_token_lowering(ctx, user_token):
    """Make the effect token depend on a token the user passed in, through a
    no-op custom call of the C core (XLA:CPU orders thunks by buffer use; a
    bare stablehlo.after_all would give it no edge)."""
    import jax

    rule = jax.ffi.ffi_lowering("jaxmpi_join_token", has_side_effect=True)
    return lower_with_token(ctx, rule, user_token)
