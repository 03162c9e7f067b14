"""jaxmpi's exception types and the words its errors share: mpi4jax's
wording, appended where mpi4jax raises for the same misuse, and the help
for arrays and programs on several devices."""

from __future__ import annotations

import jax


class MPIConfigurationError(ImportError):
    """The running MPI cannot be used by jaxmpi; the message says how to fix it."""


class UnsupportedDtypeError(TypeError, RuntimeError):
    """An array of a dtype jaxmpi has no MPI datatype for. A TypeError (a
    wrong argument), and a RuntimeError as mpi4jax raises for it ("Unknown
    MPI type for dtype ...")."""


MULTI_DEVICE_HELP = (
    "Eagerly, the operations apply per shard of a sharded array (each "
    "device meets the devices at its mesh position on the other "
    "processes), but not here: call it inside jax.shard_map over the "
    "array's mesh, where each device calls it on its shard, e.g. "
    "jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P('d'), out_specs=P('d'))). "
    "See docs/devices.md.")

SHARD_MAP_HELP = (
    "JAX's partitioner cannot place an MPI call (a side effect) in an "
    "auto-sharded computation. Write the per-device part with "
    "jax.shard_map(f, mesh=mesh, in_specs=..., out_specs=...), every mesh "
    "axis manual: inside it each device calls MPI between the shards at its "
    "mesh position on every process (docs/devices.md).")

# ---- mpi4jax's wording (issue 12, item 7) -----------------------------------
# Where mpi4jax raises for a misuse, jaxmpi raises the same exception type and
# its message ends with mpi4jax's words, so code matching mpi4jax's messages
# keeps working. The type checks are mpi4jax's @enforce_types
# (mpi4jax/_src/validation.py): "<fn> got unexpected type for argument
# "<arg>" (expected: <types>, got: <type(value)>)." and, for a tracer, its
# static_argnums hint; <types> as mpi4jax prints them.
MPI4JAX_COMM_TYPES = "['NoneType', 'Intracomm', 'HashableMPIType']"
MPI4JAX_OP_TYPES = "['Op', 'HashableMPIType']"
MPI4JAX_STATUS_TYPES = "['NoneType', 'Status', 'HashableMPIType']"
MPI4JAX_TOKEN_TYPES = "['NoneType', 'Token', 'Tracer']"  # mpi4jax < 0.8
MPI4JAX_TRACER_HINT = (
    "\n\nAn abstract tracer was passed where a concrete value is expected. "
    "Try using the static_argnums argument of jax.jit.")
MPI4JAX_LEADING_DIM = {
    "scatter": " (mpi4jax: Scatter input must have shape (nproc, ...))",
    "alltoall": " (mpi4jax: Alltoall input must have shape (nproc, ...))",
}


def mpi4jax_type(fn: str, arg: str, expected: str, value) -> str:
    """mpi4jax's words for an argument of the wrong type, to append."""
    hint = MPI4JAX_TRACER_HINT if isinstance(value, jax.core.Tracer) else ""
    return (f' (mpi4jax: {fn} got unexpected type for argument "{arg}" '
            f"(expected: {expected}, got: {type(value)}).{hint})")
