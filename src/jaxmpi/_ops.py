"""Every jaxmpi operation as a JAX primitive, one section per op.

A section holds what JAX needs to know of the op: its shape rule (abstract
evaluation) and which attributes its C handler reads. Shared machinery below
turns that into a primitive with the ordered effect, an eager
implementation, and a lowering to the op's FFI handler in the C core.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax._src import dispatch
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ._effect import join_token_lowering, lower_with_token, mpi_effect

PRIMITIVES: dict[str, Primitive] = {}

# Parameters that travel to the C handler as FFI attributes (all int64:
# handles and addresses as their 64-bit pattern, which MLIR's unsigned
# attributes cannot hold above 2**63).
_HANDLE_ATTRS = ("comm", "op", "status")
_INT_ATTRS = ("root", "source", "dest", "tag", "sendtag", "recvtag")


def _as_int64(value: int) -> np.int64:
    value &= 0xFFFFFFFFFFFFFFFF
    return np.int64(value - (1 << 64) if value >= (1 << 63) else value)


def _attributes(params) -> dict:
    attrs = {}
    for k, v in params.items():
        if k in _HANDLE_ATTRS:
            attrs[k] = _as_int64(int(getattr(v, "handle", v)))
        elif k in _INT_ATTRS:
            attrs[k] = np.int64(v)
    return attrs


def _define(name: str, shape_rule) -> Primitive:
    """A primitive for op `name` whose results have the avals shape_rule gives."""
    prim = Primitive(f"jaxmpi_{name}")
    prim.multiple_results = True
    prim.def_impl(partial(dispatch.apply_primitive, prim))
    prim.def_effectful_abstract_eval(
        lambda *avals, **params: (shape_rule(*avals, **params), {mpi_effect})
    )
    rule = jax.ffi.ffi_lowering(f"jaxmpi_{name}", has_side_effect=True)

    def lowering(ctx, *operands, **params):
        return lower_with_token(ctx, rule, *operands, **_attributes(params))

    mlir.register_lowering(prim, lowering, platform="cpu")
    PRIMITIVES[name] = prim
    return prim


def _empty(x):
    return ShapedArray((0,), x.dtype)


def _aval(shape, dtype):
    return ShapedArray(tuple(shape), np.dtype(dtype))


# ---- allreduce: every rank gets the reduction of all ranks' x -------------
allreduce_p = _define("allreduce", lambda x, *, comm, op: [x])

# ---- reduce: the root gets the reduction; elsewhere an empty result -------
reduce_p = _define(
    "reduce",
    lambda x, *, comm, op, root: [x if comm.rank == root else _empty(x)],
)

# ---- scan: rank r gets the reduction over ranks 0..r -----------------------
scan_p = _define("scan", lambda x, *, comm, op: [x])

# ---- bcast: every rank but the root receives the root's x -----------------
bcast_p = _define(
    "bcast",
    lambda x, *, comm, root: [_empty(x) if comm.rank == root else x],
)

# ---- gather: the root gets (size, *x.shape) -------------------------------
gather_p = _define(
    "gather",
    lambda x, *, comm, root: [
        _aval((comm.size, *x.shape), x.dtype) if comm.rank == root else _empty(x)
    ],
)

# ---- scatter: rank r gets the root's x[r]; elsewhere x is a template ------
scatter_p = _define(
    "scatter",
    lambda x, *, comm, root: [
        _aval(x.shape[1:], x.dtype) if comm.rank == root else x
    ],
)

# ---- allgather: every rank gets (size, *x.shape) --------------------------
allgather_p = _define(
    "allgather", lambda x, *, comm: [_aval((comm.size, *x.shape), x.dtype)]
)

# ---- alltoall: block j of rank i's x goes to block i of rank j ------------
alltoall_p = _define("alltoall", lambda x, *, comm: [x])

# ---- barrier --------------------------------------------------------------
barrier_p = _define("barrier", lambda *, comm: [])

# ---- send -----------------------------------------------------------------
send_p = _define("send", lambda x, *, comm, dest, tag: [])

# ---- recv: the result's shape and dtype come from the template ------------
recv_p = _define(
    "recv",
    lambda *, comm, source, tag, status, shape, dtype: [_aval(shape, dtype)],
)

# ---- sendrecv -------------------------------------------------------------
sendrecv_p = _define(
    "sendrecv",
    lambda x, *, comm, source, dest, sendtag, recvtag, status, shape, dtype: [
        _aval(shape, dtype)
    ],
)

# ---- join_token: order later calls after a user-supplied token ------------
join_token_p = Primitive("jaxmpi_join_token")
join_token_p.multiple_results = True
join_token_p.def_impl(partial(dispatch.apply_primitive, join_token_p))
join_token_p.def_effectful_abstract_eval(lambda token: ([], {mpi_effect}))
mlir.register_lowering(join_token_p, join_token_lowering)
