"""Eager operations on sharded arrays: per shard, as inside shard_map.

An operation called outside any trace on a ``jax.Array`` sharded over
several devices of a mesh (a ``NamedSharding``) runs as
``jax.jit(shard_map(op, mesh, in_specs, out_specs))``: each device applies
it to its shard, between the shards at its position on every process
(docs/devices.md). The in_specs are the arrays' own; a NumPy array or a
scalar is replicated. Each result keeps the sharding of the argument it
mirrors (the last array argument's leaf at the same place of the tree,
e.g. ``recvbuf``'s for ``sendrecv``): the same axes where the per-shard
result has its rank, a new leading axis unsharded (``allgather``), the
leading axis dropped (``scatter``). The per-shard shapes come from tracing
the operation on one shard's shapes (``jax.eval_shape``); the compiled call
is cached per operation, static arguments, shapes and shardings.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from . import _jax_compat as jc
from ._cache import cached, static

_cache: dict = {}


def _sharding(x):
    """x's sharding over several devices, or None (one device, or not a jax
    Array)."""
    if not isinstance(x, jax.Array):
        return None
    sharding = x.sharding
    if type(sharding) is SingleDeviceSharding or len(sharding.device_set) < 2:
        return None
    return sharding


def is_sharded(values) -> bool:
    """Whether any leaf of `values` lives on several devices."""
    return any(_sharding(x) is not None
               for x in jax.tree_util.tree_leaves(values))


def _spec(sharding, ndim, fn, name):
    if not isinstance(sharding, NamedSharding):
        raise ValueError(
            f"{fn}: {name} is sharded over {len(sharding.device_set)} devices "
            f"by a {type(sharding).__name__}; jaxmpi applies operations per "
            "shard of a NamedSharding (jax.sharding.NamedSharding(mesh, "
            "PartitionSpec(...))): reshard it with jax.device_put, or call "
            "jaxmpi inside shard_map")
    spec = tuple(sharding.spec)
    return spec + (None,) * (ndim - len(spec))


def result_spec(out_ndim, ref_spec, fn):
    """The spec of a result of `out_ndim` axes that mirrors an argument
    sharded as `ref_spec`."""
    m = len(ref_spec)
    if out_ndim == m:
        return PartitionSpec(*ref_spec)
    if out_ndim == m + 1:
        return PartitionSpec(None, *ref_spec)
    if out_ndim == m - 1 and ref_spec[0] is None:
        return PartitionSpec(*ref_spec[1:])
    raise ValueError(
        f"{fn}: the per-shard result has {out_ndim} axes against the "
        f"argument's {m} (sharded as {PartitionSpec(*ref_spec)}), and the "
        "result cannot keep that sharding: call it inside shard_map with "
        "the out_specs you want")


def out_specs(out, specs, treedef, fn):
    """The out_specs of a per-shard call whose results `out` (a pytree of
    shapes) mirror its array arguments (their specs `specs`, the flattened
    leaves of `treedef`): each result the last tree argument's leaf at its
    place; where their numbers differ, every result the first sharded
    argument."""
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref = [specs[i] for i in last_tree_leaves(treedef)]
    if len(ref) != len(out_leaves):
        ref = [next(s for s in specs if any(s))] * len(out_leaves)
    return jax.tree_util.tree_unflatten(out_tree, [
        result_spec(len(o.shape), r, fn) for o, r in zip(out_leaves, ref)])


def placed(fn, leaves):
    """(mesh, leaves, specs) of an operation's array leaves: their one
    mesh, the leaves with NumPy arrays and scalars replicated on it, and
    each leaf's spec as a tuple of one entry per axis."""
    mesh = None
    specs = []
    for x in leaves:
        sharding = _sharding(x)
        if sharding is None:
            specs.append(None)
            continue
        spec = _spec(sharding, np.ndim(x), fn, "an argument")
        if mesh is None:
            mesh = sharding.mesh
        elif sharding.mesh != mesh:
            raise ValueError(
                f"{fn}: its arrays are sharded over different meshes "
                f"({mesh} and {sharding.mesh}): put them on one mesh")
        specs.append(spec)
    leaves = [jax.device_put(np.asarray(x), NamedSharding(mesh, PartitionSpec()))
              if s is None else x for x, s in zip(leaves, specs)]
    specs = [s if s is not None else (None,) * np.ndim(x)
             for x, s in zip(leaves, specs)]
    return mesh, leaves, specs


def last_tree_leaves(treedef) -> list:
    """The indices, among all array leaves, of the last tree argument's:
    the arguments a result mirrors (``recvbuf``'s for ``sendrecv``)."""
    return jax.tree_util.tree_flatten(jax.tree_util.tree_unflatten(
        treedef, list(range(treedef.num_leaves)))[-1])[0]


def call(fn, op, bound, trees):
    """``op(**bound)`` per shard of the sharded leaves of the arguments
    named in `trees` (the other arguments static)."""
    args = bound.arguments
    leaves, treedef = jax.tree_util.tree_flatten([args[t] for t in trees])
    mesh, leaves, specs = placed(fn, leaves)
    static_args = {k: v for k, v in args.items() if k not in trees}
    key = cache_key(op, treedef, static_args, leaves, specs, mesh)
    run = cached(_cache, key, lambda: _compile(
        fn, op, mesh, treedef, trees, static_args, leaves, specs))
    return run(*leaves)


def cache_key(op, treedef, static_args, leaves, specs, mesh):
    """The key of a compiled per-shard call: the operation, its static
    arguments, the arrays' shapes, dtypes and specs, the mesh (None where a
    static argument cannot be hashed: not cached)."""
    try:
        key = (op, treedef, tuple(sorted(
            (k, static(v)) for k, v in static_args.items())),
            tuple((x.shape, str(x.dtype), tuple(s))
                  for x, s in zip(leaves, specs)), mesh)
        hash(key)
    except TypeError:
        return None
    return key


def _compile(fn, op, mesh, treedef, trees, static_args, leaves, specs):
    def body(*flat):
        values = jax.tree_util.tree_unflatten(treedef, list(flat))
        return op(**static_args, **dict(zip(trees, values)))

    local = [jax.ShapeDtypeStruct(
        tuple(d // _factor(mesh, a) for d, a in zip(x.shape, s)), x.dtype)
        for x, s in zip(leaves, specs)]
    outs = out_specs(jax.eval_shape(body, *local), specs, treedef, fn)
    # Unchecked: a result may be replicated over a mesh axis its argument
    # is (every copy along it makes the same call with the same data, so
    # its result is the same), which a message's type cannot say.
    mapped = jc.shard_map(body, mesh, tuple(PartitionSpec(*s) for s in specs),
                          outs, check_vma=False)
    return jax.jit(mapped)


def _factor(mesh, axes):
    if axes is None:
        return 1
    names = axes if isinstance(axes, tuple) else (axes,)
    return int(np.prod([mesh.shape[a] for a in names]))
