"""The ordered effect that sequences every jaxmpi call.

Every jaxmpi primitive carries one ordered effect. JAX then threads an XLA
token through all of them in program order, inside jit and across
dispatches, so MPI calls are issued in the order the Python program made
them on every rank: no user token is ever needed for correctness.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import jax
import numpy as np

from . import _jax_compat as jc
from ._errors import SHARD_MAP_HELP
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
    # in program order on every device of a shard_map body (docs/devices.md)
    jc.shardable_ordered_effects,
    jc.lowerable_effects,
    jc.control_flow_allowed_effects,
    jc.custom_derivatives_allowed_effects,
    jc.remat_allowed_effects,
    jc.partial_eval_kept_effects,  # keep ops whose results are unused
):
    _effect_types.add_type(MPIEffect)


def _call_name(ctx) -> str:
    name = getattr(getattr(ctx, "primitive", None), "name", "jaxmpi_call")
    return "jaxmpi." + name[len("jaxmpi_"):]


# ---- the mesh a call runs on ------------------------------------------------
# Read here only, from the trace (JAX's abstract mesh: where a call is bound)
# or from the lowering's axis context (where it is compiled).


@dataclass(frozen=True)
class Mesh:
    """The mesh a call is traced or lowered in: its axes, their sizes, and
    those a shard_map body is manual over."""

    names: tuple
    sizes: tuple
    manual: tuple

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    @property
    def all_manual(self) -> bool:
        """Inside shard_map with every mesh axis manual."""
        return bool(self.names) and set(self.manual) == set(self.names)

    def size_of(self, axes) -> int:
        """The number of positions along the axes `axes` (a name or a
        tuple of names)."""
        sizes = dict(zip(self.names, self.sizes))
        return math.prod(sizes[a] for a in (
            axes if isinstance(axes, tuple) else (axes,)))


def manual_axes() -> tuple:
    """The axes of the current trace's mesh that a shard_map body is manual
    over (none outside shard_map): every bind asks, so it is the cheap
    read."""
    return jc.manual_axes(jc.abstract_mesh())


def mesh(ctx=None) -> Mesh | None:
    """The mesh of the current trace (ctx None) or of the lowering `ctx`,
    or None outside any mesh (a lowering over several devices without one
    gives a mesh of one unnamed axis)."""
    if ctx is None:
        m = jc.abstract_mesh()
        if m is None or not m.axis_names:
            return None
        return Mesh(tuple(m.axis_names), tuple(m.axis_sizes),
                    jc.manual_axes(m))
    axis_ctx = ctx.module_context.axis_context
    m = getattr(axis_ctx, "mesh", None)
    if m is None:
        n = getattr(axis_ctx, "num_devices", 1)
        return Mesh((), (n,), ()) if n > 1 else None
    sizes = getattr(m, "axis_sizes", None) or tuple(
        m.shape[a] for a in m.axis_names)
    return Mesh(tuple(m.axis_names), tuple(sizes),
                tuple(getattr(axis_ctx, "manual_axes", ())))


def _manual_mesh(ctx):
    """The mesh of the shard_map body the call is lowered in, where every
    mesh axis is manual; None elsewhere (one device, or an auto-sharded or
    partly manual computation)."""
    m = mesh(ctx)
    return m if m is not None and m.all_manual else None


def _processes(ctx) -> set:
    """The process indices of the devices of the lowering's mesh (empty
    where the mesh is abstract or there is none)."""
    m = getattr(ctx.module_context.axis_context, "mesh", None)
    return {getattr(d, "process_index", 0)
            for d in getattr(getattr(m, "devices", None), "flat", ())}


def _position(ctx, n: int):
    """The position in the mesh of the device running a shard_map body over
    n devices, as an int32 scalar: its partition id, the device's flat index
    in the mesh (JAX lowers axis_index from it the same way)."""
    manual = _manual_mesh(ctx)
    if manual is None or manual.size != n:
        raise ValueError(
            f"{_call_name(ctx)} was traced inside shard_map over {n} devices "
            "but is compiled outside it: keep jaxmpi calls inside the "
            "shard_map body whose mesh they were traced for")
    processes = _processes(ctx)
    if len(processes) > 1:
        # Each position of jaxmpi's mesh pairs with the same position of
        # every other process: a global mesh has each position in one
        # process only, and the call would wait for peers that never come.
        raise ValueError(
            f"{_call_name(ctx)} inside shard_map over a mesh of devices of "
            f"{len(processes)} processes (a global mesh, after "
            "jax.distributed.initialize()): jaxmpi's operations run over a "
            "mesh of each process's own devices, pairing each with the same "
            "position of the other processes' meshes. Over a global mesh use "
            "JAX's collectives (lax.psum, all_gather, ppermute, ...: over MPI "
            "under python -m jaxmpi.distributed), or call jaxmpi on each "
            "process's local data (x.addressable_data(0)) outside it "
            "(docs/native.md)")
    if any(p in ("cuda", "rocm") for p in ctx.module_context.platforms):
        raise NotImplementedError(
            f"{_call_name(ctx)}: several GPUs per process are not supported "
            "yet (the C core would have to read the device's position from "
            "GPU memory): start one process per GPU")
    crashes = jc.persistent_cache_crashes()
    if crashes:
        raise RuntimeError(
            f"{_call_name(ctx)} over {n} devices: JAX's persistent compilation "
            f"cache is on (jax_compilation_cache_dir), and jax {crashes} "
            "crashes (a segmentation fault) writing a program over several "
            "devices with jaxmpi's ordered-effect tokens to it. Turn it off: "
            "jax.config.update('jax_enable_compilation_cache', False), or "
            "JAX_ENABLE_COMPILATION_CACHE=false")
    i32 = jc.mlir.ir.RankedTensorType.get(
        [], jc.mlir.ir.IntegerType.get_signless(32))
    return jc.hlo.convert(i32, jc.hlo.partition_id())


def _one_device(ctx) -> None:
    """A call traced for one device must be compiled for one: under an
    auto-sharded jit JAX's partitioner would have to place it."""
    m = mesh(ctx)
    if m is None or m.all_manual:  # one device, or shard_map's every axis
        return
    n = m.size
    if n > 1:
        raise ValueError(f"{_call_name(ctx)} is compiled for {n} devices "
                         f"outside shard_map. {SHARD_MAP_HELP}")


def lower_with_token(ctx, rule, *operands, **attrs):
    """Lower through `rule` (an FFI lowering) with the effect token threaded
    through as the custom call's last operand and result; in a program over
    several devices (``devices`` among the attributes) the device's
    position goes before it."""
    token = ctx.tokens_in.get(mpi_effect)
    position = []
    if "devices" in attrs:
        operands = (*operands, _position(ctx, int(attrs["devices"])))
        position = [jc.ShapedArray((), np.int32)]
    else:
        _one_device(ctx)
    inner = ctx.replace(
        avals_in=[*ctx.avals_in, *position, jc.abstract_token],
        avals_out=[*ctx.avals_out, jc.abstract_token],
    )
    outs = rule(inner, *operands, token, **attrs)
    manual = _manual_mesh(ctx)
    if position or (manual is not None and manual.size > 1):
        jc.mark_manual(outs[-1].owner)
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
        if eff is mpi_effect and len(devices) > 1:
            # A program over several devices takes the token resharded: one
            # of a failed computation would fail it too (and every later
            # one). Dropped, JAX makes a fresh one.
            buf = getattr(self.current_tokens.get(eff), "_buf", None)
            if buf is not None and buf.is_ready() and not ended(buf):
                self.current_tokens.pop(eff, None)
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


# The key of jaxmpi.jit's marker among JAX's per-thread output runtime
# tokens (_region; JAX keys its own by device and only reads the values).
MARKER_KEY = "jaxmpi.jit"


def ended(value) -> bool:
    """Wait for a runtime token or marker; False if its computation failed.
    Tokens order calls; they do not carry errors: a failed computation has
    ended, and its error reaches whoever reads its results."""
    try:
        value.block_until_ready()
        return True
    except Exception:  # the computation's error, not this caller's
        return False


def wait_for_dispatched() -> None:
    """Return once every jaxmpi computation this thread dispatched ended:
    the runtime token of jax.jit's, the marker of jaxmpi.jit's (_region).
    A token of a failed computation is dropped, so that later computations
    do not inherit its error (JAX would hand it on as their input)."""
    tokens = jc.dispatch.runtime_tokens
    tok = tokens.current_tokens.get(mpi_effect)
    if tok is not None and not ended(tok):
        tokens.current_tokens.pop(mpi_effect, None)
    marker = tokens.output_runtime_tokens.get(MARKER_KEY)
    if marker is not None and not ended(marker):
        tokens.output_runtime_tokens.pop(MARKER_KEY, None)
