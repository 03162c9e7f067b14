"""Pytrees of arrays in every operation, as one generic layer.

``allreduce(grads, MPI.SUM)`` with ``grads`` a model's parameter tree makes
one MPI call per dtype, not one per leaf: the leaves of each dtype are
flattened and concatenated into one buffer, the single-array operation runs
on it, and the result is split and reshaped back into the tree. A model of
100 float32 leaves is one MPI_Allreduce. Everything the single-array
operation has (validation, JVP and transpose, batching, the token API,
``JAXMPI_CHECK``) carries over, because the packing is plain JAX
(``ravel``, ``concatenate``, slicing): it is differentiated and batched by
JAX, and the MPI call is the op's own primitive.

Packing per dtype (not one byte buffer for all dtypes) keeps reductions
exact (MPI reduces typed data) and keeps gradients: a bitcast to bytes has
no derivative.

Two layouts of an array argument (``rows`` in the op's ``Packing``):

* flat: each leaf is raveled; the buffer is 1-D, the concatenation;
* rows: the leaves keep their leading axis (the rank axis of ``scatter``'s
  and ``alltoall``'s inputs, the row axis of the v-forms' counts) and their
  remaining axes are flattened: the buffer is ``(rows, total)``, the leaves
  concatenated along axis 1.

The result's layout follows from its rank: a 2-D result of a flat buffer
(``allgather``, ``gather`` on the root) gained a leading axis, which each
leaf keeps; a 1-D result of a rows buffer (``scatter``) lost it; a 2-D
result of a rows buffer (``alltoall``, the v-forms) keeps a leading axis,
whose length may differ from the input's (``counts``).

An operation's ``Packing`` is given above its definition, by the
dispatch layer's decorator (_dispatch.blocking; _reductions.py, ...)::

    @_dispatch.blocking(rows=True, region=True)
    def reduce_scatter(x, op, *, counts=None, comm=None, token=None):

``trees``: the names of the array arguments (default ``("x",)``; sendrecv:
``("sendbuf", "recvbuf")``, whose dtype groups pair up); ``rows``: False,
True, or a function ``(comm_info, arguments) -> bool`` (``scatter``: rows on
the root only); ``result=False`` for an op that returns None (``send``);
``region``: eager tree calls run as one cached region (below). A single
array (not a pytree) goes straight to the operation, untouched.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from . import _jax_compat as jc
from . import _validate as v
from ._cache import cached, static
from ._region import jit as _region_jit


@dataclass(frozen=True)
class Packing:
    """How an operation's array arguments are packed (see the module doc)."""

    trees: tuple = ("x",)
    rows: object = False  # bool, or (CommInfo, bound arguments) -> bool
    result: bool = True  # False: the op returns None (send)
    region: bool = False  # eager tree calls as one region (_region_call)


_ARRAYS = (jax.Array, np.ndarray, np.generic, int, float, complex)


def is_single(x) -> bool:
    """x goes to the operation as it is: an array, a scalar, a token, or
    anything else that is one leaf (the operation then names what is
    wrong). A (result, token) pair is sent there too, for its message."""
    # The common case first: one array costs two isinstance checks here
    # (the eager direct path of a 4-byte allreduce takes a few us).
    if isinstance(x, _ARRAYS) or x is None or isinstance(x, (str, bytes)):
        return True
    if isinstance(x, (tuple, list)) and any(map(v.is_token, x)):
        return True
    treedef = jax.tree_util.tree_structure(x)
    # An empty container ({}, ()) is a tree of no leaves, not an array.
    return treedef.num_nodes == 1 and treedef.num_leaves == 1


@dataclass
class _Group:
    """The leaves of one dtype of one tree argument."""

    dtype: np.dtype
    index: list  # positions of the leaves in the flattened tree
    leaves: list
    rows: bool

    def inner(self, leaf):
        return tuple(leaf.shape[1:]) if self.rows else tuple(leaf.shape)

    def pack(self):
        if jc.trace_state_clean():  # eager: one dispatch (see _packed)
            return _packed(self.leaves, self.rows)
        return _pack(self.leaves, self.rows)

    def unpack(self, out, packed):
        """The result leaves of the buffer ``out`` (the op's result for
        ``packed``)."""
        if out is packed:  # passed through eagerly: x itself, as for one array
            return list(self.leaves)
        inner = tuple(self.inner(a) for a in self.leaves)
        if jc.trace_state_clean():
            return _unpacked(out, inner)
        return _unpack(out, inner)


def _pack(leaves, rows):
    if len(leaves) == 1 and not rows:
        return jnp.ravel(leaves[0])
    if rows:
        n = leaves[0].shape[0]
        parts = [jnp.reshape(a, (n, int(np.prod(a.shape[1:], dtype=int))))
                 for a in leaves]
        return jnp.concatenate(parts, axis=1)
    return jnp.concatenate([jnp.ravel(a) for a in leaves])


def _unpack(out, inner):
    """The leaves of shapes ``inner`` (each with ``out``'s leading axis if
    ``out`` is 2-D) cut from ``out``."""
    sizes = [int(np.prod(shape, dtype=int)) for shape in inner]
    offsets = np.cumsum([0] + sizes)
    res = []
    for shape, start, stop in zip(inner, offsets[:-1], offsets[1:]):
        if out.ndim == 2:
            res.append(jnp.reshape(out[:, int(start):int(stop)],
                                   (out.shape[0], *shape)))
        else:
            res.append(jnp.reshape(out[int(start):int(stop)], shape))
    return res


# Eager calls pack and unpack each group in one jitted computation: no
# effect, so JAX's C++ dispatch runs them (cached per leaf shapes), and only
# the MPI call itself takes the effectful path (the measurements:
# benchmarks/README.md, pytrees).
_packed = jax.jit(_pack, static_argnums=1)
_unpacked = jax.jit(_unpack, static_argnums=1)


def _groups(tree, fn: str, name: str, rows: bool):
    """(treedef, [groups] in dtype-name order) of one pytree argument, each
    leaf checked as the single-array operation checks its argument, named by
    its path (``x['w'][0]``)."""
    paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves = []
    for path, leaf in paths:
        where = f"{name}{jax.tree_util.keystr(path)}"
        arr = v.array(leaf, fn, where)
        if rows and arr.ndim == 0:
            raise ValueError(
                f"{fn}: {where} is a scalar, but the leaves of {name} need a "
                f"leading axis here (the rank axis), got shape ()")
        leaves.append((where, arr))
    if rows and leaves:
        leads = {arr.shape[0] for _, arr in leaves}
        if len(leads) > 1:
            shapes = ", ".join(f"{w} {tuple(a.shape)}" for w, a in leaves)
            raise ValueError(
                f"{fn}: the leaves of {name} must have the same leading "
                f"dimension (the rank axis), got {shapes}")
    by_dtype: dict = {}
    for i, (_, arr) in enumerate(leaves):
        g = by_dtype.setdefault(np.dtype(arr.dtype),
                                _Group(np.dtype(arr.dtype), [], [], rows))
        g.index.append(i)
        g.leaves.append(arr)
    # The same order on every rank whatever the order of the leaves: the
    # dtype's name.
    return treedef, [by_dtype[d] for d in sorted(by_dtype, key=str)], len(
        leaves)


def _rebuild(treedef, n, groups, outs):
    leaves = [None] * n
    for g, res in zip(groups, outs):
        for i, leaf in zip(g.index, res):
            leaves[i] = leaf
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _arguments(op, spec: Packing, sig, args, kwargs):
    """(name, bound arguments with defaults, comm info, rows) of a call."""
    fn = op.__name__
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    info = v.comm_info(a.get("comm"), fn)
    rows = spec.rows(info, a) if callable(spec.rows) else bool(spec.rows)
    return fn, bound, info, rows


# Eager tree calls of the operations whose Packing says `region` run the
# whole tree call (packing, the MPI call per dtype, unpacking) as one
# jaxmpi.jit region, cached per operation, tree structure and static
# arguments: one C++ dispatch of all leaves (benchmarks/pytree.py).
# Operations whose eager result is an input itself (bcast on the root,
# gather off it, ...) keep the path below, which returns the input
# unchanged as their single-array forms do.
_regions: dict = {}


def _region_call(op, spec: Packing, sig, args, kwargs):
    """The eager tree call as one cached region, or None where it does not
    apply (an operation that is not run so, a token, a leaf that is not a
    jax Array, an argument with no hashable stand-in)."""
    if not spec.region:
        return None
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    if a.get("token") is not None:
        return None
    leaves, treedef = jax.tree_util.tree_flatten([a[t] for t in spec.trees])
    if not leaves or not all(isinstance(x, jax.Array) for x in leaves):
        return None
    try:
        key = (op, spec, treedef, tuple(
            (k, static(x)) for k, x in a.items() if k not in spec.trees))
    except TypeError:
        return None
    static_args = {k: x for k, x in a.items() if k not in spec.trees}

    def whole(*flat):
        trees = jax.tree_util.tree_unflatten(treedef, flat)
        return call_tree(op, spec, sig, (),
                         {**static_args, **dict(zip(spec.trees, trees))})

    return cached(_regions, key, lambda: _region_jit(whole))(*leaves)


def call_tree(op, spec: Packing, sig, args, kwargs):
    """``op`` (a single-array operation) called with pytrees for the
    arguments named in ``spec.trees`` (the module docstring)."""
    if jc.trace_state_clean():
        out = _region_call(op, spec, sig, args, kwargs)
        if out is not None:
            return out
    fn, bound, info, rows = _arguments(op, spec, sig, args, kwargs)
    a = bound.arguments
    trees = [_groups(a[t], fn, t, rows and i == 0)
             for i, t in enumerate(spec.trees)]
    if len(trees) == 2:
        return _call_pair(op, fn, spec, bound, trees)
    treedef, groups, n = trees[0]
    if not groups:  # an empty tree: nothing to communicate
        return jax.tree_util.tree_unflatten(treedef, []) if spec.result else None
    _check_source(fn, a, groups)
    packed = [g.pack() for g in groups]
    outs = []
    for g, buf in zip(groups, packed):
        a[spec.trees[0]] = buf
        outs.append(op(*bound.args, **bound.kwargs))
    if all(o is None for o in outs):  # send
        return None
    return _rebuild(treedef, n, groups,
                    [g.unpack(o, b) for g, o, b in zip(groups, outs, packed)])


def _check_source(fn, a, groups):
    source = a.get("source")
    if (len(groups) > 1 and isinstance(source, int)
            and source == MPI.ANY_SOURCE):
        raise ValueError(_any_source_message(fn, groups))


def _any_source_message(fn, groups):
    return (
        f"{fn}: a pytree of {len(groups)} dtypes "
        f"({', '.join(str(g.dtype) for g in groups)}) is received as one "
        "message per dtype; from MPI.ANY_SOURCE these could come from "
        "different ranks. Name the source rank, or receive one dtype per "
        "call")


def _call_pair(op, fn, spec, bound, trees):
    """sendrecv: the send tree's and the receive template's groups pair up
    by dtype, one MPI_Sendrecv per dtype."""
    (_, sgroups, _), (rdef, rgroups, n) = trees
    sname, rname = spec.trees
    a = bound.arguments
    sd = [str(g.dtype) for g in sgroups]
    rd = [str(g.dtype) for g in rgroups]
    if sd != rd:
        raise ValueError(
            f"{fn}: {sname} and {rname} must hold leaves of the same dtypes "
            f"(one message per dtype), got {sname}: {sd or 'no leaves'}, "
            f"{rname}: {rd or 'no leaves'}")
    if not rgroups:
        return jax.tree_util.tree_unflatten(rdef, [])
    _check_source(fn, a, rgroups)
    outs = []
    for sg, rg in zip(sgroups, rgroups):
        a[sname], a[rname] = sg.pack(), rg.pack()
        outs.append(rg.unpack(op(*bound.args, **bound.kwargs), None))
    return _rebuild(rdef, n, rgroups, outs)


def rows_on_root(info, arguments) -> bool:
    """``scatter``: the root's x has the rank axis; the others' template
    does not."""
    root = arguments["root"]
    # A root of the wrong type is the operation's error to raise.
    return (isinstance(root, (int, np.integer)) and not isinstance(root, bool)
            and info.rank == root)
