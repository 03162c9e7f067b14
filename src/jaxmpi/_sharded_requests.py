"""Eager non-blocking operations on sharded arrays: per shard, as inside
shard_map, with the Request kept outside any trace.

A start called outside any trace on a ``jax.Array`` sharded over several
devices of a mesh runs as ``jax.jit(shard_map(start))`` over the arrays'
mesh: each device starts its own request, between the shards at its
position on every process (docs/devices.md). The per-device Request made
inside that program never leaves it; its handles, buffers and kept arrays
leave as global arrays with one block per device along a leading axis
(``P(every mesh axis)``: each device's own buffer, none dropped as a
replica while MPI may still write it), and an eager ``Request`` holds
them. ``wait`` on it runs ``jax.jit(shard_map(wait))`` over the same mesh,
the buffers donated (the handler gets the very buffers MPI writes), and
gives each result the sharding of the argument it mirrors, as the blocking
operations' eager calls do (``_sharded``).
"""

from __future__ import annotations

import functools
import inspect
import weakref
from dataclasses import dataclass

import jax
from jax.sharding import PartitionSpec

from . import _jax_compat as jc
from . import _registry, _sharded
from ._requests import (_leaves, _on_drop, _State, _unflatten, _user_line,
                        wait_p)


_starts: dict = {}   # cache key -> (the jitted start, its plan)
_waits: dict = {}    # ShardedPlan -> the jitted wait


@dataclass(frozen=True, eq=False)
class ShardedPlan:
    """What the wait of an eager sharded request needs besides its arrays:
    the mesh, each leaf's per-device shape (a 0-d one travels as shape
    (1,)), the specs of the start's array arguments and which of them each
    result mirrors, and the per-device request's structure."""

    fn: str
    mesh: object
    local: tuple          # per-device shape of each leaf, in _leaves order
    shape: tuple          # ((WaitSpec, number of buffers) per part)
    finish: object
    ref_specs: tuple      # the spec of each leaf of the last array argument

    @property
    def requests(self) -> int:
        """How many leaves are the requests' (handles and buffers; the kept
        arrays follow them)."""
        return sum(1 + k for _, k in self.shape)


def _axes(mesh):
    names = tuple(mesh.axis_names)
    return names if len(names) > 1 else names[0]


def start(trees=("x",)):
    """Decorator of a public start whose array arguments are named in
    `trees`: called outside any trace with one of them sharded over several
    devices, it starts per shard (the module docstring)."""
    def wrap(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if jc.trace_state_clean():
                bound = sig.bind(*args, **kwargs)
                if _sharded.is_sharded([bound.arguments.get(t)
                                        for t in trees]):
                    bound.apply_defaults()
                    return _start(fn, bound, trees)
            return fn(*args, **kwargs)

        return wrapper
    return wrap


def _start(fn, bound, trees):
    name = fn.__name__
    args = bound.arguments
    if args.get("status") is not None:
        raise ValueError(
            f"{name}: status= is not supported on sharded arrays (each "
            "device receives its own message): call it inside shard_map")
    leaves, treedef = jax.tree_util.tree_flatten([args[t] for t in trees])
    mesh, leaves, specs = _sharded.placed(name, leaves)
    static = {k: v for k, v in args.items() if k not in trees}
    axes = _axes(mesh)
    plan = {}

    def body(*flat):
        values = jax.tree_util.tree_unflatten(treedef, list(flat))
        req = fn(**static, **dict(zip(trees, values)))
        # This device's Request ends here: its arrays leave the program for
        # the eager Request below, which is the one to wait.
        req._state.waited = True
        out = _leaves(req)
        plan["local"] = tuple(tuple(o.shape) for o in out)
        plan["shape"] = tuple((p.spec, len(p.bufs)) for p in req._parts)
        plan["finish"] = req._finish
        return [o.reshape(1) if o.ndim == 0 else o for o in out]

    key = _sharded.cache_key(fn, treedef, static, leaves, specs, mesh)
    ins = tuple(PartitionSpec(*s) for s in specs)
    hit = _sharded.cached(_starts, key, lambda: [jax.jit(jc.shard_map(
        body, mesh, ins, PartitionSpec(axes), check_vma=False)), None])
    outs = hit[0](*leaves)
    if hit[1] is None:
        # Filled where the start was traced: shapes, the requests' structure
        # and the finish depend on the key's static arguments, shapes and
        # specs only, never on the arrays' values.
        ref = tuple(specs[i] for i in _sharded.last_tree_leaves(treedef))
        hit[1] = ShardedPlan(name, mesh, plan["local"], plan["shape"],
                             plan["finish"], ref)
    sharded = hit[1]
    state = _State(name, _user_line(), 0, None, sharded=sharded)
    # The Request's pytree layout is the per-device one's: rebuilt from it.
    req = _unflatten((sharded.shape, sharded.finish, state), list(outs))
    weakref.finalize(req, _on_drop, state, tuple(outs))
    return req


def wait(request):
    """The eager wait of a request started on sharded arrays (``wait``
    calls it after its checks): one program waits every part's request and
    returns the very buffers MPI wrote, another makes the result."""
    plan = request._state.sharded
    leaves = _leaves(request)
    waiting, finishing = _sharded.cached(
        _waits, plan, lambda: _compile_wait(plan, leaves))
    got = waiting(*leaves[:plan.requests])
    return finishing(*got, *leaves[plan.requests:])


def _compile_wait(plan, leaves):
    axes = PartitionSpec(_axes(plan.mesh))
    n = plan.requests
    local = plan.local

    def waiting(*flat):
        got, at = [], 0
        for spec, k in plan.shape:
            handle = flat[at].reshape(()) if local[at] == () else flat[at]
            got += wait_p.bind(handle, *flat[at + 1:at + 1 + k], spec=spec)
            at += 1 + k
        return tuple(got)

    # Only the results are donated, in the order the wait returns them:
    # JAX pairs a donated argument with the first output of its type, and
    # each must be the output the handler writes in place (XLA copies an
    # argument given to an output that is not its own, and the handler
    # then refuses a buffer that is not the request's).
    donate, at = [], 0
    for spec, k in plan.shape:
        donate += [at + 1 + i for i in spec.results]
        at += 1 + k
    nres = len(donate)
    waiting_run = jax.jit(jc.shard_map(waiting, plan.mesh, (axes,) * n,
                                       (axes,) * nres, check_vma=False),
                          donate_argnums=tuple(donate))

    def finishing(*flat):
        got, keep = flat[:nres], flat[nres:]
        keep = [f.reshape(()) if s == () else f
                for f, s in zip(keep, local[n:])]
        results, at = [], 0
        for spec, _ in plan.shape:
            outs = list(got[at:at + len(spec.results)])
            at += len(spec.results)
            after = _registry.STARTS[spec.op].after_wait
            results.append(after(outs, spec) if after else outs)
        return plan.finish(results, keep)

    ins = (axes,) * (nres + len(leaves) - n)
    results = [leaves[i] for i in donate]  # the wait's outputs, in shape
    # Each device's result shapes (out P(): a global shape is the local one).
    out = jax.eval_shape(jc.shard_map(finishing, plan.mesh, ins,
                                      PartitionSpec(), check_vma=False),
                         *results, *leaves[n:])
    out_leaves, out_tree = jax.tree_util.tree_flatten(out)
    ref = plan.ref_specs
    if len(ref) != len(out_leaves):
        ref = (next(s for s in ref if any(s)),) * len(out_leaves)
    out_specs = jax.tree_util.tree_unflatten(out_tree, [
        _sharded.result_spec(len(o.shape), r, plan.fn)
        for o, r in zip(out_leaves, ref)])
    finishing_run = jax.jit(jc.shard_map(finishing, plan.mesh, ins, out_specs,
                                         check_vma=False))
    return waiting_run, finishing_run
