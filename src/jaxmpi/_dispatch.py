"""The one dispatch layer of every public operation, blocking or not: where
a call goes before the operation itself runs.

* Outside any trace, on a ``jax.Array`` sharded over several devices of a
  mesh: per shard, as inside shard_map (docs/devices.md). A blocking
  operation runs as ``jax.jit(shard_map(op))`` over the arrays' mesh
  (_sharded.call), each result with the sharding of the argument it
  mirrors. A start runs as ``jax.jit(shard_map(start))``: each device
  starts its own request, between the shards at its position on every
  process; the per-device Request made inside that program never leaves
  it, its handles, buffers and kept arrays leave as global arrays with one
  block per device along a leading axis (``P(every mesh axis)``: each
  device's own buffer, none dropped as a replica while MPI may still write
  it), and an eager ``Request`` holds them. ``wait`` on it runs
  ``jax.jit(shard_map(wait))`` over the same mesh, the buffers donated (the
  handler gets the very buffers MPI writes), then the finish, each result
  with the sharding of the argument it mirrors, as the blocking
  operations' results.
* A blocking operation given pytrees of arrays: one MPI call per dtype
  (_pytree.call_tree).
* Anything else: the operation itself.

Each operation says which of its arguments are arrays (``trees``) above its
definition: ``@blocking(...)`` (with its pytree Packing) or ``@start(...)``.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass

import jax
from jax.sharding import PartitionSpec

from . import _jax_compat as jc
from . import _requests as rq
from . import _sharded
from ._cache import cached
from ._primitives import delivered, waits
from ._pytree import Packing, call_tree, is_single

_starts: dict = {}   # cache key -> (the jitted start, its plan)
_waits: dict = {}    # ShardedPlan -> (the jitted wait, the jitted finish)


def _dispatching(op, trees, on_sharded, on_tree):
    """`op` behind the dispatch: its arguments named in `trees` sharded
    over several devices (outside any trace) go to ``on_sharded(wrapper,
    bound arguments)``, pytrees to ``on_tree(args, kwargs)`` (None: the
    operation names what is wrong), anything else to op itself."""
    sig = inspect.signature(op)
    positions = [(t, list(sig.parameters).index(t)) for t in trees]

    @functools.wraps(op)
    def wrapper(*args, **kwargs):
        xs = [kwargs[t] if t in kwargs else args[i] if i < len(args) else None
              for t, i in positions]
        if jc.trace_state_clean() and _sharded.is_sharded(xs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            return on_sharded(wrapper, bound)
        if on_tree is not None and not all(map(is_single, xs)):
            return on_tree(sig, args, kwargs)
        return op(*args, **kwargs)

    return wrapper


def blocking(*, trees=("x",), rows=False, result=True, region=False):
    """Decorator of a blocking operation whose array arguments are named in
    `trees`, taking pytrees of arrays as its Packing (_pytree) says: rows,
    result, region."""
    spec = Packing(tuple(trees), rows, result, region)

    def wrap(op):
        return _dispatching(
            op, spec.trees,
            lambda wrapper, bound: _sharded.call(op.__name__, wrapper, bound,
                                                 spec.trees),
            lambda sig, args, kwargs: call_tree(op, spec, sig, args, kwargs))

    return wrap


def start(*, trees=("x",)):
    """Decorator of a non-blocking start whose array arguments are named in
    `trees` (one array each: a start takes no pytree)."""
    def wrap(fn):
        return _dispatching(fn, tuple(trees), lambda wrapper, bound: _start(
            fn.__name__, wrapper, bound, tuple(trees)), None)

    return wrap


# ---- starts on sharded arrays, and their waits ------------------------------


@dataclass(frozen=True, eq=False)
class ShardedPlan:
    """What the wait of an eager sharded request needs besides its arrays:
    the mesh, each leaf's per-device shape (a 0-d one travels as shape
    (1,)), the per-device request's layout (_requests.layout), and the
    specs of the start's array arguments (of its leaves, the flattened
    `treedef`), which its results mirror."""

    fn: str
    mesh: object
    local: tuple          # per-device shape of each leaf, in leaves order
    layout: tuple         # (((WaitSpec, number of buffers) per part), finish)
    specs: tuple
    treedef: object

    @property
    def parts(self) -> tuple:
        return self.layout[0]

    @property
    def requests(self) -> int:
        """How many leaves are the requests' (handles and buffers; the kept
        arrays follow them)."""
        return sum(1 + k for _, k in self.parts)


def _axes(mesh):
    names = tuple(mesh.axis_names)
    return names if len(names) > 1 else names[0]


def _start(name, fn, bound, trees):
    args = bound.arguments
    if args.get("status") is not None:
        raise ValueError(
            f"{name}: status= is not supported on sharded arrays (each "
            "device receives its own message): call it inside shard_map")
    leaves, treedef = jax.tree_util.tree_flatten([args[t] for t in trees])
    mesh, leaves, specs = _sharded.placed(name, leaves)
    static_args = {k: v for k, v in args.items() if k not in trees}
    found = {}

    def body(*flat):
        values = jax.tree_util.tree_unflatten(treedef, list(flat))
        req = fn(**static_args, **dict(zip(trees, values)))
        # This device's Request ends here: its arrays leave the program for
        # the eager Request below, which is the one to wait.
        rq.ended(req)
        out = rq.leaves(req)
        found["local"] = tuple(tuple(o.shape) for o in out)
        found["layout"] = rq.layout(req)
        return [o.reshape(1) if o.ndim == 0 else o for o in out]

    key = _sharded.cache_key(fn, treedef, static_args, leaves, specs, mesh)
    ins = tuple(PartitionSpec(*s) for s in specs)
    hit = cached(_starts, key, lambda: [jax.jit(jc.shard_map(
        body, mesh, ins, PartitionSpec(_axes(mesh)), check_vma=False)), None])
    outs = hit[0](*leaves)
    if hit[1] is None:
        # Filled where the start was traced: shapes, the requests' layout
        # and the finish depend on the key's static arguments, shapes and
        # specs only, never on the arrays' values.
        hit[1] = ShardedPlan(name, mesh, found["local"], found["layout"],
                             tuple(specs), treedef)
    return rq.rebuilt(name, hit[1].layout, outs, hit[1])


def wait_sharded(request, plan):
    """The eager wait of a request started on sharded arrays (``wait``
    calls it after its checks): one program waits every part's request and
    returns the very buffers MPI wrote, another makes the result."""
    leaves = rq.leaves(request)
    waiting, finishing = cached(_waits, plan,
                                lambda: _compile_wait(plan, leaves))
    got = waiting(*leaves[:plan.requests])
    return finishing(*got, *leaves[plan.requests:])


def _compile_wait(plan, leaves):
    axes = PartitionSpec(_axes(plan.mesh))
    n = plan.requests
    local = plan.local

    def as_local(x, shape):  # a 0-d leaf travels as shape (1,)
        return x.reshape(()) if shape == () else x

    def waiting(*flat):
        parts, at = [], 0
        for spec, k in plan.parts:
            parts.append((as_local(flat[at], local[at]),
                          flat[at + 1:at + 1 + k], spec))
            at += 1 + k
        return tuple(o for outs in waits(parts) for o in outs)

    # Only the results are donated, in the order the wait returns them:
    # JAX pairs a donated argument with the first output of its type, and
    # each must be the output the handler writes in place (XLA copies an
    # argument given to an output that is not its own, and the handler
    # then refuses a buffer that is not the request's).
    donate, at = [], 0
    for spec, k in plan.parts:
        donate += [at + 1 + i for i in spec.results]
        at += 1 + k
    nres = len(donate)
    waiting_run = jax.jit(jc.shard_map(waiting, plan.mesh, (axes,) * n,
                                       (axes,) * nres, check_vma=False),
                          donate_argnums=tuple(donate))

    def finishing(*flat):
        got = flat[:nres]
        keep = [as_local(f, s) for f, s in zip(flat[nres:], local[n:])]
        results, at = [], 0
        for spec, _ in plan.parts:
            results.append(list(got[at:at + len(spec.results)]))
            at += len(spec.results)
        specs = [spec for spec, _ in plan.parts]
        return plan.layout[1](delivered(results, specs), keep)

    ins = (axes,) * (nres + len(leaves) - n)
    results = [leaves[i] for i in donate]  # the wait's outputs, in shape
    # Each device's result shapes (out P(): a global shape is the local one).
    out = jax.eval_shape(jc.shard_map(finishing, plan.mesh, ins,
                                      PartitionSpec(), check_vma=False),
                         *results, *leaves[n:])
    finishing_run = jax.jit(jc.shard_map(
        finishing, plan.mesh, ins,
        _sharded.out_specs(out, plan.specs, plan.treedef, plan.fn),
        check_vma=False))
    return waiting_run, finishing_run
