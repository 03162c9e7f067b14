"""Every piece of JAX that jaxmpi uses beyond ``jax``, ``jax.numpy``,
``jax.lax`` and ``jax.ffi``, imported here and nowhere else.

Public names where JAX has them (``jax.extend.core``, ``jax.core``,
``jax.interpreters.ad``/``batching``/``mlir``); the rest comes from
``jax._src`` because JAX has no public name for it. Version switches live
here only. Checked against JAX 0.6.2 (the oldest pyproject.toml allows),
0.10.2 and 0.12.0.1, with ``-W error::DeprecationWarning``
(tests/launch/test_packaging.py).
"""

from __future__ import annotations

import inspect

# Public.
import jax
from jax.sharding import NamedSharding, PartitionSpec
from jax.core import ShapedArray, Tracer
from jax.extend.core import ClosedJaxpr, Primitive, Token, jaxpr_as_fun
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import ad, batching, mlir

# No public name in any JAX we support:
# - the effect registries (which effect types may be ordered, lowered, used
#   in control flow, custom derivatives and remat, kept by partial eval);
from jax._src import effects as _effects
# - the eager implementation of a primitive (bind outside any trace);
from jax._src.dispatch import apply_primitive
# - whether any trace (jit, grad, vmap) is active; jax.core's alias was
#   deprecated in 0.6 and removed;
from jax._src.core import trace_state_clean
# - whether JAX's persistent compilation cache is on (jaxlib 0.10 crashes
#   writing a program over several devices with ordered-effect tokens);
from jax._src import compilation_cache as _compilation_cache
# - the abstract value of a token: jax.extend.core has the class
#   (AbstractToken) but not the instance that token avals are (jaxmpi checks
#   identity, as JAX does).
from jax._src.core import abstract_token
# - the jaxprs inside an equation's parameters (a loop's body, a cond's
#   branches), to name the jaxmpi calls of a program in errors;
from jax._src.core import jaxprs_in_params
# - JAX's dispatch internals: the per-thread runtime tokens of ordered
#   effects (RuntimeTokenSet: jaxmpi hands a one-device token on as it is,
#   and eager calls wait on it; jaxmpi.jit's marker is kept among its
#   output runtime tokens, which jax.effects_barrier waits for), and the
#   lowering function that raises the several-devices error jaxmpi rewords;
from jax._src import dispatch
from jax._src.interpreters import pxla
# - making a jax Array from a host buffer without a trace (the eager path).
from jax._src.lib import xla_client
# - the user's frame of a traced call (the Python line named in debug logs
#   and watchdog reports).
from jax._src import source_info_util
# - the cluster environments jax.distributed.initialize() detects (jaxmpi's
#   own answers from MPI under `python -m jaxmpi.distributed`), and the
#   flag of the number of CPU devices (0.6.2: jax_num_cpu_devices too).
from jax._src.clusters import ClusterEnv


# JAX >= 0.7 lowers equal equations (same params and shapes) once per module
# and calls the one body from each; jaxmpi's are lowered each in place (the
# keyword arguments of mlir.register_lowering that say so), so that each call
# carries its own source line (`site`) and a GPU wait sees the operations
# before it.
UNCACHED = ({"cacheable": False} if "cacheable" in
            inspect.signature(mlir.register_lowering).parameters else {})


def lowering_user_frames(ctx):
    """The user's frames of the equation being lowered (innermost first).
    JAX >= 0.7 keeps its traceback on the lowering context and
    ``user_frames`` takes a traceback; JAX 0.6 lowers each equation inside
    ``source_info_util.user_context`` of its source information, and
    ``user_frames`` takes that SourceInfo."""
    tb = getattr(ctx, "traceback", None)
    if tb is not None:
        return source_info_util.user_frames(tb)
    info = source_info_util._source_info_context.context
    return source_info_util.user_frames(info)

try:  # jax.extend.core.Effect and AbstractToken: newer than JAX 0.6.2
    from jax.extend.core import AbstractToken, Effect
except ImportError:  # JAX 0.6
    from jax._src.core import AbstractToken
    Effect = _effects.Effect

# - the current trace (non-blocking requests belong to the trace that
#   started them).
from jax._src.core import trace_ctx

# - the abstract mesh of a trace (inside shard_map: its manual axes), pvary
#   and the ManualAxisType of avals (shard_map's check_vma typing);
from jax._src import core as _core_internal
from jax._src import mesh as _mesh

ordered_effects = _effects.ordered_effects
lowerable_effects = _effects.lowerable_effects
control_flow_allowed_effects = _effects.control_flow_allowed_effects
custom_derivatives_allowed_effects = _effects.custom_derivatives_allowed_effects
remat_allowed_effects = _effects.remat_allowed_effects
partial_eval_kept_effects = _effects.partial_eval_kept_effects
# - effects in program order per device of a shard_map body
shardable_ordered_effects = _effects.shardable_ordered_effects


# Several devices per process (_devices.py): the mesh of the current trace,
# its manual axes, and the typing of values by the manual axes they vary
# over (shard_map's check_vma; JAX >= 0.8 keeps it in a ManualAxisType).

def abstract_mesh():
    """The mesh of the current trace (JAX's abstract mesh; empty outside
    shard_map and meshes)."""
    return _mesh.get_abstract_mesh()


def manual_axes(mesh) -> tuple:
    """The names of the mesh axes a shard_map body is manual over."""
    manual = getattr(mesh, "manual_axes", None)
    if manual is not None:
        return tuple(manual)
    return tuple(a for a, t in zip(mesh.axis_names, mesh.axis_types)
                 if "Manual" in str(t))


def vma(aval) -> frozenset:
    """The manual mesh axes over which a traced value varies (shard_map's
    check_vma typing; empty outside shard_map)."""
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()))


def varying(aval, axes):
    """`aval` typed as varying over the manual mesh axes `axes`."""
    axes = frozenset(axes)
    if not axes or vma(aval) == axes:
        return aval
    mat_type = getattr(_core_internal, "ManualAxisType", None)
    if mat_type is not None:  # JAX >= 0.8: a sharding over the abstract mesh
        return ShapedArray(aval.shape, aval.dtype, aval.weak_type,
                           sharding=NamedSharding(abstract_mesh(),
                                                  PartitionSpec()),
                           manual_axis_type=mat_type(varying=axes))
    return ShapedArray(aval.shape, aval.dtype, aval.weak_type, vma=axes)


def mark_manual(op) -> None:
    """Mark a custom call of a shard_map body as manual for GSPMD (JAX's
    partitioner before Shardy: a side-effecting call whose operands carry
    no sharding, a token join, fails "Side-effect HLO must have
    sharding"); Shardy needs no mark."""
    if not getattr(jax.config, "jax_use_shardy_partitioner", False):
        op.attributes["mhlo.sharding"] = mlir.ir.StringAttr.get("{manual}")


def pvary(x, axes):
    """x made varying over the manual mesh axes `axes` (its transpose sums
    the cotangents over them)."""
    return _core_internal.pvary(x, tuple(axes))


def persistent_cache_crashes() -> str | None:
    """The jaxlib version, where JAX's persistent compilation cache is on
    and this jaxlib crashes writing a program over several devices that
    carries an ordered effect's tokens (a segmentation fault in the
    serialization of its layouts: jaxlib 0.10.2; 0.6.2 writes it), else
    None."""
    version = tuple(int(p) for p in jax.__version__.split(".")[:2])
    if version >= (0, 10) and _compilation_cache.is_persistent_cache_enabled():
        return jax.__version__
    return None


def shard_map(f, mesh, in_specs, out_specs, check_vma=True):
    """jax.shard_map over every axis of mesh."""
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                         check_vma=check_vma)


__all__ = [
    "AbstractToken", "ClosedJaxpr", "Effect", "Primitive", "dispatch", "hlo",
    "jaxpr_as_fun",
    "jaxprs_in_params", "lowering_user_frames", "pxla", "source_info_util", "xla_client", "ShapedArray", "Token", "Tracer", "abstract_token",
    "ad", "apply_primitive", "batching", "control_flow_allowed_effects",
    "custom_derivatives_allowed_effects", "lowerable_effects", "mlir",
    "ordered_effects", "partial_eval_kept_effects", "remat_allowed_effects",
    "shardable_ordered_effects", "abstract_mesh", "manual_axes", "vma",
    "varying", "pvary", "shard_map", "persistent_cache_crashes",
    "trace_ctx", "trace_state_clean",
]
