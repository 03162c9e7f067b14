"""Pytree allreduce of a model's parameter tree: one call per dtype
(jaxmpi's pytree allreduce) against one call per leaf (jaxmpi, and mpi4jax
when it is installed), in one run on the same ranks.

    mpiexec -n 2 python benchmarks/pytree.py [--leaves 100] [--iters 200]
                                             [--repeats 5]

The tree: ``--leaves`` float32 leaves of a small MLP's shapes (weights and
biases, 16 to 4096 elements, 237 KiB for 100 leaves). Modes:

* loop: ``--iters`` allreduces of the whole tree in one jitted
  ``fori_loop`` (the time per step of a training loop's gradient average);
* eager: one call from Python per step, outside ``jit``.

Printed per mode: the median time per tree allreduce (us) over
``--repeats`` runs, and the ratio of per-leaf calls to the pytree call (the
target of issue 12: at least 10x for 100 leaves). The row "one array
(floor)" is one allreduce of the tree's bytes as a single array, no
packing: no pytree allreduce can be faster, so per-leaf time / floor bounds
what any one-call design could gain. Timings on a loaded
machine are indicative only: say so when you report them.
"""

from __future__ import annotations

import argparse
import importlib.util
import time

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

from jaxmpi import notoken as mpx

WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()


def param_tree(n_leaves):
    """n float32 leaves shaped like an MLP's layers: (w, b) pairs."""
    widths = [16, 32, 64]
    tree = {}
    for i in range(n_leaves):
        a, b = widths[i % 3], widths[(i + 1) % 3]
        shape = (a, b) if i % 2 == 0 else (b,)
        tree[f"p{i:03d}"] = jnp.full(shape, RANK + 1.0, jnp.float32)
    return tree


def per_leaf(allreduce):
    return lambda t: jax.tree.map(lambda x: allreduce(x, MPI.SUM), t)


def tree_call(t):
    return mpx.allreduce(t, MPI.SUM)


def loop(step, iters):
    scale = 1.0 / SIZE

    @jax.jit
    def run(t):
        return jax.lax.fori_loop(
            0, iters, lambda i, u: jax.tree.map(lambda x: x * scale, step(u)), t)

    return run


def timeit(fn, arg, repeats, per):
    jax.block_until_ready(fn(arg))  # compile, warm up
    times = []
    for _ in range(repeats):
        WORLD.Barrier()
        t0 = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append((time.perf_counter() - t0) / per)
    # The slowest rank's time is the collective's.
    return WORLD.allreduce(float(np.median(times)), op=MPI.MAX)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--leaves", type=int, default=100)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--eager-iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    tree = param_tree(args.leaves)
    nbytes = sum(x.nbytes for x in jax.tree.leaves(tree))
    impls = {"jaxmpi pytree": tree_call, "jaxmpi per leaf": per_leaf(mpx.allreduce)}
    # The floor of any pytree allreduce: one allreduce of the tree's bytes
    # as a single array (no packing); per-leaf calls can be no more than
    # (their time / this) times slower than a pytree call.
    flat = {"flat": jnp.full((nbytes // 4,), RANK + 1.0, jnp.float32)}
    args_of = {"one array (floor)": flat}
    impls["one array (floor)"] = tree_call
    if importlib.util.find_spec("mpi4jax") is not None:
        import mpi4jax

        allreduce = mpi4jax.allreduce
        impls["mpi4jax per leaf"] = per_leaf(
            lambda x, op: _bare(allreduce(x, op)))
    else:
        if RANK == 0:
            print("mpi4jax: not installed, skipped")

    # Check the results once: every leaf is the sum over ranks.
    want = SIZE * (SIZE + 1) / 2
    for name, f in impls.items():
        out = jax.jit(f)(args_of.get(name, tree))
        ok = all(bool(jnp.all(x == want)) for x in jax.tree.leaves(out))
        assert ok, f"{name}: wrong result"

    rows = []
    for name, f in impls.items():
        arg = args_of.get(name, tree)
        t_loop = timeit(loop(f, args.iters), arg, args.repeats, args.iters)

        def eager(t, f=f):
            for _ in range(args.eager_iters):
                t = f(t)
            return t

        t_eager = timeit(eager, arg, args.repeats, args.eager_iters)
        rows.append((name, t_loop, t_eager))

    if RANK == 0:
        mpi = MPI.Get_library_version().splitlines()[0][:40]
        print(f"pytree allreduce: {args.leaves} float32 leaves, {nbytes} B, "
              f"{SIZE} ranks, jax {jax.__version__}, MPI {mpi}")
        base = dict((r[0], r) for r in rows)["jaxmpi pytree"]
        print(f"{'implementation':<20} {'loop us':>10} {'x pytree':>9} "
              f"{'eager us':>10} {'x pytree':>9}")
        for name, tl, te in rows:
            print(f"{name:<20} {tl * 1e6:10.1f} {tl / base[1]:9.1f} "
                  f"{te * 1e6:10.1f} {te / base[2]:9.1f}")
        floor = dict((r[0], r) for r in rows)["one array (floor)"]
        for name, tl, te in rows:
            if "per leaf" in name:
                print(f"{name}: at most {tl / floor[1]:.1f}x (loop) and "
                      f"{te / floor[2]:.1f}x (eager) the floor, the most any "
                      f"one-call pytree allreduce could gain")


def _bare(out):
    """mpi4jax < 0.8 returns (result, token)."""
    return out[0] if isinstance(out, tuple) else out


if __name__ == "__main__":
    main()
