"""Checks on every argument, made in Python on every rank before any MPI
call, with errors that name the argument, its value and what is allowed."""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _dtypes
from . import _jax_compat as jc
from ._devices import DeviceCart, per_device
from ._errors import (MPI4JAX_COMM_TYPES, MPI4JAX_LEADING_DIM,
                      MPI4JAX_OP_TYPES, MPI4JAX_STATUS_TYPES,
                      MPI4JAX_TOKEN_TYPES, MULTI_DEVICE_HELP,
                      UnsupportedDtypeError, mpi4jax_type)


class _MPIConstant(int):
    """An MPI constant that shows its name: ``recv``'s and ``irecv``'s
    signatures read ``source=MPI.ANY_SOURCE``, not ``source=-2``. It equals
    the constant (an int) and is used as one."""

    def __new__(cls, name: str):
        self = super().__new__(cls, getattr(MPI, name))
        self._name = f"MPI.{name}"
        return self

    def __repr__(self):
        return self._name

    __str__ = __repr__

    def __reduce__(self):
        return (_MPIConstant, (self._name[4:],))


ANY_SOURCE = _MPIConstant("ANY_SOURCE")
ANY_TAG = _MPIConstant("ANY_TAG")


@dataclass(frozen=True)
class CommInfo:
    """A communicator as primitives see it (hashable, static)."""

    handle: int
    rank: int
    size: int
    tag_ub: int
    # Inside shard_map over several devices (_devices): their number and the
    # communicator of each mesh position (a DeviceCart's: of each pair).
    devices: int = 0
    comms: tuple = ()

    def __repr__(self):
        more = f", devices={self.devices}" if self.devices else ""
        return f"Comm(rank={self.rank}, size={self.size}{more})"


@dataclass(frozen=True)
class OpInfo:
    handle: int
    name: str

    def __repr__(self):
        return f"MPI.{self.name}"


_default_comm = None
_TAG_UB = None
_kept_alive: list = []  # status objects whose address an executable holds


def set_default_comm(comm) -> None:
    global _default_comm
    _default_comm = comm


def default_comm():
    return _default_comm


def _expect(value, cls, fn: str, name: str, what: str, mpi4jax_types) -> None:
    """TypeError unless `value` is a `cls` (an mpi4py type): `name` must be
    `what`, and mpi4jax's wording of the same error."""
    if not isinstance(value, cls):
        raise TypeError(
            f"{fn}: {name} must be {what}, got {type(value).__name__}: "
            f"{value!r}" + mpi4jax_type(fn, name, mpi4jax_types, value))


def comm_info(comm, fn: str, grid_ok: bool = False) -> CommInfo:
    """``comm`` as primitives see it; inside shard_map over several devices,
    with the communicators of the mesh positions (``grid_ok``: a
    DeviceCart is welcome, the topology operations')."""
    if comm is None:
        comm = _default_comm
    grid = None
    if isinstance(comm, DeviceCart):
        if not grid_ok:
            raise TypeError(
                f"{fn}: comm is a DeviceCart, which the halo and neighbour "
                "operations take (halo_exchange, ihalo_exchange, "
                "neighbor_alltoallv, ineighbor_alltoallv); pass its process "
                "communicator (DeviceCart.cart) here: inside shard_map each "
                "device calls MPI between the shards at its mesh position")
        grid, comm = comm, comm.cart
    _expect(comm, MPI.Comm, fn, "comm",
            "an mpi4py intracommunicator (MPI.Intracomm) or None",
            MPI4JAX_COMM_TYPES)
    if comm == MPI.COMM_NULL:
        raise TypeError(
            f"{fn}: comm is MPI.COMM_NULL (a null or freed communicator)"
            + mpi4jax_type(fn, "comm", MPI4JAX_COMM_TYPES, comm)
        )
    if isinstance(comm, MPI.Intercomm) or comm.Is_inter():
        raise TypeError(
            f"{fn}: comm is an intercommunicator; jaxmpi supports "
            "intracommunicators only (use Intercomm.Merge())"
            + mpi4jax_type(fn, "comm", MPI4JAX_COMM_TYPES, comm)
        )
    # Handles are recycled after Comm.Free(), so nothing is cached by handle.
    # MPI errors come back as error codes (then Python exceptions), never as
    # an abort.
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    info = CommInfo(MPI._handleof(comm) & 0xFFFFFFFFFFFFFFFF, comm.Get_rank(),
                    comm.Get_size(), _tag_ub())
    return per_device(info, comm if grid is None else grid, fn)


def _tag_ub() -> int:
    global _TAG_UB
    if _TAG_UB is None:
        _TAG_UB = int(MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767)
    return _TAG_UB


def is_token(x) -> bool:
    """A JAX token, concrete or traced."""
    if isinstance(x, jax.core.Tracer):
        return isinstance(getattr(x, "aval", None), jc.AbstractToken)
    return isinstance(x, jc.Token)


def _short(x, limit: int = 200) -> str:
    text = " ".join(repr(x).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _not_an_array(x, fn: str, name: str) -> None:
    """Raise the clear error for a token, a (result, token) pair or a pytree
    passed where one array is expected; return if x is none of these."""
    what = f"{fn}: {name} must be an array, got {type(x).__name__}: {_short(x)}"
    if is_token(x):
        raise TypeError(
            f"{what}. This is a token: in the token API (import jaxmpi) "
            "send and barrier return only a token, and the other operations "
            "return (result, token); pass the result, or use jaxmpi.notoken, "
            "whose operations return bare results"
        )
    if isinstance(x, (tuple, list)) and any(
            is_token(leaf) for leaf in x):
        raise TypeError(
            f"{what}. This looks like the (result, token) pair that the "
            "token API returns (import jaxmpi; jaxmpi.<op> returns "
            "(result, token)): unpack it, e.g. `y, token = jaxmpi.allreduce(x, "
            "MPI.SUM)`, or use jaxmpi.notoken (`import jaxmpi.notoken as "
            "mpi4jax`, as in mpi4jax >= 0.8), whose operations return bare "
            "results"
        )
    if isinstance(x, (tuple, list, dict)) or (
            x is not None and not isinstance(x, (str, bytes))
            and not jax.tree_util.treedef_is_leaf(
                jax.tree_util.tree_structure(x))):
        # The blocking operations take pytrees (_pytree.py) before they
        # get here; the non-blocking ones and neighbor_exchange's buffers
        # take one array each.
        raise TypeError(
            f"{what}. {fn} takes one array here; pytrees (lists, tuples, "
            "dicts, dataclasses) are accepted by the blocking operations "
            "(jaxmpi.notoken.allreduce, bcast, ..., sendrecv: one MPI call "
            "per dtype), not by the non-blocking ones or neighbor_exchange's "
            "buffers: call it once per leaf, e.g. jax.tree.map(lambda a: "
            f"jaxmpi.notoken.{fn}(a, ...), tree), or use the blocking "
            "operation"
        )


def single_device(x, fn: str, name: str) -> None:
    """A concrete array must live on one device: jaxmpi's calls are
    sequenced per process by an ordered effect, which XLA cannot split
    across the devices of a sharded array."""
    sharding = getattr(x, "sharding", None)
    devices = getattr(sharding, "device_set", None)
    if devices is not None and len(devices) > 1:
        raise ValueError(
            f"{fn}: {name} is an array sharded over {len(devices)} devices "
            f"({', '.join(sorted(map(str, devices)))}; sharding {sharding}). "
            + MULTI_DEVICE_HELP
        )


def array(x, fn: str, name: str = "x"):
    """x as a JAX array (or tracer) of a supported element type."""
    if isinstance(x, jax.core.Tracer):
        arr = x
        if is_token(x):
            _not_an_array(x, fn, name)
    elif isinstance(x, jax.Array):
        arr = x
        single_device(x, fn, name)
    else:
        _not_an_array(x, fn, name)
        dtype = getattr(x, "dtype", None)
        if isinstance(dtype, np.dtype) and dtype not in _dtypes.XLA_TYPE:
            raise UnsupportedDtypeError(
                f"{fn}: {name} has dtype {dtype}, which jaxmpi does not "
                f"support; supported: {_dtypes.supported_names()}"
                f" (mpi4jax: Unknown MPI type for dtype {dtype.name})"
            )
        try:
            arr = jnp.asarray(x)
        except (TypeError, ValueError, OverflowError) as e:
            raise TypeError(
                f"{fn}: {name} must be an array, got {type(x).__name__}: "
                f"{x!r} ({e})"
            ) from e
    dtype = np.dtype(arr.dtype)
    if dtype not in _dtypes.XLA_TYPE:
        raise UnsupportedDtypeError(
            f"{fn}: {name} has dtype {dtype}, which jaxmpi does not support; "
            f"supported: {_dtypes.supported_names()}"
            f" (mpi4jax: Unknown MPI type for dtype {dtype.name})"
        )
    return arr


def static_int(value, fn: str, name: str) -> int:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{fn}: {name} must be a static Python int, got a traced value "
            f"({value!r}). Ranks, roots and tags decide which MPI call is made, "
            "so they must be known when the function is traced: pass it via "
            "jax.jit(f, static_argnums=...) or static_argnames=..., or close "
            "over it." + mpi4jax_type(fn, name, "integer", value)
        )
    if isinstance(value, (bool, np.bool_)) or not isinstance(
        value, (numbers.Integral, np.integer)
    ):
        raise TypeError(
            f"{fn}: {name} must be an int, got {type(value).__name__}: {value!r}"
            + mpi4jax_type(fn, name, "integer", value)
        )
    return int(value)


def rank_arg(value, fn: str, name: str, comm: CommInfo, *, allow=()) -> int:
    """A root, source or dest: a rank of comm, or one of the special values."""
    v = static_int(value, fn, name)
    if 0 <= v < comm.size or v in allow:
        return v
    special = {MPI.ANY_SOURCE: "MPI.ANY_SOURCE", MPI.PROC_NULL: "MPI.PROC_NULL"}
    extra = "".join(f" or {special.get(a, a)}" for a in allow)
    raise ValueError(
        f"{fn}: {name}={v} is not a rank of the communicator (valid: 0 to "
        f"{comm.size - 1}{extra})"
    )


def reserved_tag_bit(tag_ub: int) -> int:
    """Transposed point-to-point messages flip this tag bit, so they never
    match a forward message; user tags stay below it."""
    return 1 << (int(tag_ub).bit_length() - 2)


def tag_arg(value, fn: str, name: str, comm: CommInfo, *, allow_any=False) -> int:
    v = static_int(value, fn, name)
    top = reserved_tag_bit(comm.tag_ub) - 1
    if 0 <= v <= top or (allow_any and v == MPI.ANY_TAG):
        return v
    extra = " or MPI.ANY_TAG" if allow_any else ""
    raise ValueError(
        f"{fn}: {name}={v} is not a valid tag (valid: 0 to {top}{extra}; "
        "higher tags carry jaxmpi's gradient messages)"
    )


def _op_name(op) -> str | None:
    for name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND",
                 "BOR", "BXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP"):
        if op == getattr(MPI, name, None):
            return name
    return None


def reduction_op(op, dtype, fn: str, half_ops) -> OpInfo:
    _expect(op, MPI.Op, fn, "op", "an mpi4py reduction op such as MPI.SUM",
            MPI4JAX_OP_TYPES)
    if op == MPI.OP_NULL:
        raise TypeError(f"{fn}: op is MPI.OP_NULL (a null or freed op)")
    dtype = np.dtype(dtype)
    name = _op_name(op)
    if name is None:  # user-defined op: MPI applies it as the user wrote it
        return OpInfo(MPI._handleof(op) & 0xFFFFFFFFFFFFFFFF, "user-defined op")
    allowed = _dtypes.ALLOWED_OPS[_dtypes.kind(dtype)]
    if name not in allowed:
        raise TypeError(
            f"{fn}: MPI.{name} is not defined for dtype {dtype}; for this "
            f"dtype use one of {', '.join('MPI.' + a for a in allowed)}"
        )
    if dtype in _dtypes.HALF:
        return OpInfo(int(half_ops[(dtype, name)]), name)
    return OpInfo(MPI._handleof(op) & 0xFFFFFFFFFFFFFFFF, name)


def status_arg(status, fn: str) -> int:
    if status is None:
        return 0
    _expect(status, MPI.Status, fn, "status", "an mpi4py MPI.Status or None",
            MPI4JAX_STATUS_TYPES)
    _kept_alive.append(status)  # compiled code writes into it, keep it alive
    return MPI._addressof(status)


def token_arg(token, fn: str):
    """None, or a JAX token to order this call after."""
    if token is None:
        return None
    if isinstance(token, jax.core.Tracer):
        ok = getattr(token, "aval", None) is jc.abstract_token
    else:
        ok = isinstance(token, jc.Token)
    if not ok:
        hint = ""
        if isinstance(token, (tuple, list)) and any(map(is_token, token)):
            hint = (". This looks like a whole (result, token) pair of the "
                    "token API: pass its token, e.g. `y, token = "
                    "jaxmpi.allreduce(x, MPI.SUM)`, then token=token")
        raise TypeError(
            f"{fn}: token must be a token returned by a jaxmpi call (or by "
            f"jax.lax.create_token()), or None; got {type(token).__name__}: "
            f"{_short(token)}{hint}"
            + mpi4jax_type(fn, "token", MPI4JAX_TOKEN_TYPES, token)
        )
    return token


def leading_dim(x, fn: str, name: str, size: int) -> None:
    if x.ndim == 0 or x.shape[0] != size:
        raise ValueError(
            f"{fn}: {name} must have leading dimension equal to the "
            f"communicator size {size}, got shape {tuple(x.shape)}"
            + MPI4JAX_LEADING_DIM.get(fn, "")
        )


def counts_arg(value, fn: str, name: str, comm: CommInfo) -> tuple:
    """Row counts, one per rank: a static sequence of ints >= 0 (the same on
    every rank, which the caller promises and JAXMPI_CHECK verifies)."""
    if isinstance(value, (jax.core.Tracer, jax.Array)) or (
            isinstance(value, (list, tuple))
            and any(isinstance(c, jax.core.Tracer) for c in value)):
        raise TypeError(
            f"{fn}: {name} must be a static sequence of Python ints, got a "
            f"JAX array ({_short(value)}). Counts decide the MPI call and "
            "the result's shape, so they must be known when the function is "
            "traced: pass them via jax.jit(f, static_argnums=...) or close "
            "over them.")
    if isinstance(value, np.ndarray) and value.ndim == 1 and (
            np.issubdtype(value.dtype, np.integer)):
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{fn}: {name} must be a list or tuple of ints, one per rank, "
            f"got {type(value).__name__}: {_short(value)}")
    if len(value) != comm.size:
        raise ValueError(
            f"{fn}: {name}={_short(list(value))} has {len(value)} items: "
            f"it needs one per rank of the communicator ({comm.size})")
    out = []
    for i, c in enumerate(value):
        if isinstance(c, (bool, np.bool_)) or not isinstance(
                c, (numbers.Integral, np.integer)):
            raise TypeError(
                f"{fn}: {name}[{i}] must be an int, got "
                f"{type(c).__name__}: {c!r}")
        if not 0 <= int(c) < 2**62:
            raise ValueError(
                f"{fn}: {name}[{i}]={int(c)} must be a count of rows, 0 or "
                "more")
        out.append(int(c))
    return tuple(out)


def rows_arg(x, fn: str, name: str, rows: int, why: str) -> None:
    """x has `rows` rows along axis 0 (`why` names the count that says so)."""
    if x.ndim == 0:
        raise ValueError(
            f"{fn}: {name} must have at least one dimension (counts are "
            f"rows along axis 0), got a scalar of shape ()")
    if x.shape[0] != rows:
        raise ValueError(
            f"{fn}: {name} has {x.shape[0]} rows (shape {tuple(x.shape)}) "
            f"but {why}: the count and the array disagree")


# The variable-count ops' arguments, one function per op: the blocking op
# and its non-blocking form (``allgatherv`` and ``iallgatherv``, ...) call
# the same one. Counts are rows along axis 0; x must have the rows they say.

def allgatherv_args(x, counts, fn: str, comm: CommInfo) -> tuple:
    """allgatherv's counts (returned as a tuple); x has this rank's count
    of rows."""
    counts = counts_arg(counts, fn, "counts", comm)
    rows_arg(x, fn, "x", counts[comm.rank],
             f"counts[{comm.rank}]={counts[comm.rank]} (this rank's count)")
    return counts


def gatherv_args(x, counts, root, fn: str, comm: CommInfo) -> tuple:
    """gatherv's counts and root, returned; x has this rank's count of
    rows."""
    counts = counts_arg(counts, fn, "counts", comm)
    root = rank_arg(root, fn, "root", comm)
    rows_arg(x, fn, "x", counts[comm.rank],
             f"counts[{comm.rank}]={counts[comm.rank]} (this rank's count)")
    return counts, root


def scatterv_args(x, counts, root, fn: str, comm: CommInfo) -> tuple:
    """scatterv's counts and root, returned; the root's x has sum(counts)
    rows, the template elsewhere this rank's count."""
    counts = counts_arg(counts, fn, "counts", comm)
    root = rank_arg(root, fn, "root", comm)
    if comm.rank == root:
        rows_arg(x, fn, "x (on the root)", sum(counts),
                 f"sum(counts)={sum(counts)}")
    else:
        rows_arg(x, fn, "x (a template off the root)", counts[comm.rank],
                 f"counts[{comm.rank}]={counts[comm.rank]} (this rank's "
                 "result)")
    return counts, root


def alltoallv_args(x, sendcounts, recvcounts, fn: str,
                   comm: CommInfo) -> tuple:
    """alltoallv's sendcounts and recvcounts, returned; x has
    sum(sendcounts) rows. (Whether rank i's sendcounts[j] is rank j's
    recvcounts[i] only the cross-rank check can tell.)"""
    sendcounts = counts_arg(sendcounts, fn, "sendcounts", comm)
    recvcounts = counts_arg(recvcounts, fn, "recvcounts", comm)
    rows_arg(x, fn, "x", sum(sendcounts),
             f"sum(sendcounts)={sum(sendcounts)} (sendcounts="
             f"{list(sendcounts)})")
    return sendcounts, recvcounts


def predefined_op(opinfo: OpInfo, fn: str) -> None:
    """exscan's op (and iexscan's): rank 0 gets the op's identity, which
    jaxmpi knows for the predefined ops only."""
    if opinfo.name == "user-defined op":
        raise TypeError(
            f"{fn}: op is a user-defined MPI.Op; {fn} needs a predefined op "
            "(MPI.SUM, MPI.PROD, MPI.MAX, MPI.MIN, logical or bitwise), "
            "whose identity jaxmpi gives rank 0 (MPI leaves rank 0's result "
            "undefined)")


def reduce_scatter_counts(x, counts, fn: str, comm: CommInfo):
    """reduce_scatter's x and counts (and ireduce_scatter's): without
    counts, x has one row per rank (None returned); with them, sum(counts)
    rows (the counts returned as a tuple)."""
    if counts is None:
        leading_dim(x, fn, "x", comm.size)
        return None
    counts = counts_arg(counts, fn, "counts", comm)
    rows_arg(x, fn, "x", sum(counts),
             f"sum(counts)={sum(counts)} (counts={list(counts)})")
    return counts
