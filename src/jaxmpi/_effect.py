"""The ordered effect that sequences every jaxmpi call.

Every jaxmpi primitive carries one ordered effect. JAX then threads an XLA
token through all of them in program order, inside jit and across
dispatches, so MPI calls are issued in the order the Python program made
them on every rank: no user token is ever needed for correctness.
"""

from __future__ import annotations

import hashlib

import jax

from . import _jax_compat as jc
from ._errors import MULTI_DEVICE_HELP
from ._threads import guard


class MPIEffect(jc.Effect):
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

for _effect_types in (
    jc.ordered_effects,
    jc.lowerable_effects,
    jc.control_flow_allowed_effects,
    jc.custom_derivatives_allowed_effects,
    jc.remat_allowed_effects,
    jc.partial_eval_kept_effects,  # keep ops whose results are unused
):
    _effect_types.add_type(MPIEffect)


def lower_with_token(ctx, rule, *operands, **attrs):
    """Lower through `rule` (an FFI lowering) with the effect token threaded
    through as the custom call's last operand and result."""
    token = ctx.tokens_in.get(mpi_effect)
    inner = ctx.replace(
        avals_in=[*ctx.avals_in, jc.abstract_token],
        avals_out=[*ctx.avals_out, jc.abstract_token],
    )
    outs = rule(inner, *operands, token, **attrs)
    # The other ordered effects' tokens pass through (JAX hands every rule
    # the whole set: an ordered jax.debug.callback in the same program).
    ctx.set_tokens_out(ctx.tokens_in.update_tokens(
        jc.mlir.TokenSet({mpi_effect: outs[-1]})))
    return outs[:-1]


def join_token_lowering(ctx, user_token):
    """Make the effect token depend on a token the user passed in, through a
    no-op custom call of the C core (XLA:CPU orders thunks by buffer use; a
    bare stablehlo.after_all would give it no edge)."""
    rule = jax.ffi.ffi_lowering("jaxmpi_join_token", has_side_effect=True)
    return lower_with_token(ctx, rule, user_token)


_MULTI_DEVICE_TEXT = "ordered effects are not supported for more than 1 device"


class SeveralDevices(ValueError):
    """Raised by a lowering that finds jaxmpi calls compiled for several
    devices (jaxmpi.jit's region, which JAX's own check does not see);
    reworded with the devices by install_multi_device_error's wrapper."""


def _jaxmpi_calls(jaxpr, found, depth=0):
    """Names of the jaxmpi primitives in a (closed) jaxpr, sub-jaxprs too."""
    if depth > 20:
        return found
    for eqn in getattr(jaxpr, "eqns", ()):
        if mpi_effect in eqn.effects and eqn.primitive.name.startswith(
                "jaxmpi_") and eqn.primitive.name != "jaxmpi_join_token":
            name = eqn.primitive.name[len("jaxmpi_"):]
            if name not in found:
                found.append(name)
        subs = jc.jaxprs_in_params
        for sub in (subs(eqn.params) if subs else ()):
            _jaxmpi_calls(sub, found, depth + 1)
    return found


def multi_device_error(closed_jaxpr, devices):
    """jaxmpi's error for a program with jaxmpi calls compiled for several
    devices (a sharded jit): JAX's own says only that ordered effects are
    not supported for more than 1 device."""
    calls = _jaxmpi_calls(getattr(closed_jaxpr, "jaxpr", closed_jaxpr), [])
    what = ", ".join(f"jaxmpi.{c}" for c in calls[:4]) or "jaxmpi"
    if len(calls) > 4:
        what += f" and {len(calls) - 4} more"
    where = (f"{len(devices)} devices ({', '.join(map(str, devices))})"
             if devices else "several devices")
    return ValueError(
        f"a computation that calls {what} was compiled for {where} (a "
        "jax.jit of arrays sharded over several devices, in_shardings or "
        "out_shardings over several devices, or shard_map). "
        + MULTI_DEVICE_HELP)


def install_multi_device_error():
    """Reword JAX's error for ordered effects over several devices. It is
    raised while a computation is lowered, after tracing: no jaxmpi code
    runs between, so the function that raises it is wrapped. Only that
    error is touched; anything else (and a JAX without that function)
    passes through unchanged."""
    pxla = jc.pxla
    inner = getattr(pxla, "_cached_lowering_to_hlo", None)
    if inner is None or getattr(inner, "_jaxmpi_wrapped", False):
        return

    def find(args, kwargs):
        """The jaxpr and the devices among the arguments (found by type:
        JAX passes them positionally, and the cached function has no
        signature to read)."""
        jaxpr, devices = None, None
        for a in (*args, *kwargs.values()):
            if jaxpr is None and isinstance(a, jc.ClosedJaxpr):
                jaxpr = a
            if devices is None and isinstance(a, (tuple, list)) and a and all(
                    isinstance(d, jax.Device) for d in a):
                devices = tuple(a)
            for sh in getattr(a, "shardings", None) or ():
                ds = getattr(sh, "device_set", None)
                if devices is None and ds is not None and len(ds) > 1:
                    devices = tuple(sorted(ds, key=lambda d: d.id))
        return jaxpr, devices

    def wrapper(*args, **kwargs):
        try:
            return inner(*args, **kwargs)
        except ValueError as e:
            if not isinstance(e, SeveralDevices) and (
                    _MULTI_DEVICE_TEXT not in str(e) or "MPIEffect" not in str(e)):
                raise
            jaxpr, devices = find(args, kwargs)
            raise multi_device_error(jaxpr, devices) from e

    wrapper._jaxmpi_wrapped = True
    wrapper.__wrapped__ = inner
    for attr in ("cache_clear", "cache_info"):
        if hasattr(inner, attr):
            setattr(wrapper, attr, getattr(inner, attr))
    pxla._cached_lowering_to_hlo = wrapper


# ---- dispatch: the runtime token of a one-device computation ---------------
# Every call of a jitted computation with an ordered effect takes the token the
# previous such call returned (JAX's RuntimeTokenSet, per Python thread). JAX
# 0.10.2 re-places that token with api.device_put onto a sharding built afresh
# per call (NamedSharding(Mesh(devices, 'x'), P('x'))), which for a one-device
# program is the device the token already lives on: half of a jitted 4-byte
# allreduce's cost (docs/design.md, "Dispatch"). For jaxmpi's effect on one
# device, the token array is handed on as it is: the same buffer, so the next
# program still waits for it (PJRT waits for its inputs' definition events),
# hence the same order. Anything else takes JAX's own path. Every dispatch of
# jaxmpi work passes here, which is where _threads.guard refuses a second
# Python thread below MPI_THREAD_MULTIPLE.


def _install_token_fastpath() -> bool:
    dispatch = jc.dispatch

    cls = getattr(dispatch, "RuntimeTokenSet", None)
    orig = getattr(cls, "get_token_input", None)
    if orig is None or getattr(orig, "_jaxmpi", False):
        return False

    def get_token_input(self, eff, devices):
        if eff is mpi_effect:
            guard()
        if eff is mpi_effect and len(devices) == 1:
            tok = self.current_tokens.get(eff)
            buf = getattr(tok, "_buf", None)
            try:
                placed = buf.sharding._device_assignment
            except AttributeError:
                placed = None
            if placed is not None and len(placed) == 1 and placed[0] == devices[0]:
                return tok
        return orig(self, eff, devices)

    get_token_input._jaxmpi = True
    get_token_input.__wrapped__ = orig
    cls.get_token_input = get_token_input
    return True


token_fastpath = _install_token_fastpath()
