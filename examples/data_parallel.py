"""Data-parallel training with jaxmpi: every rank holds its own shard of the
data and a copy of the same parameters.

Each step, every rank computes the gradient of its own loss (its shard's
mean squared error), the gradients are summed over ranks with allreduce and
divided by the number of ranks, and every rank takes the same SGD step. The
copies of the parameters therefore stay identical (bitwise) on every rank,
and the training is the one a single process would do on the whole data
set: the mean of the shards' mean losses is the whole data's mean loss when
the shards are of equal size.

Why the gradients, and not the loss, are allreduced: each rank's parameters
are its own copy, so ``jax.grad`` on a rank only sees how that rank's loss
depends on that rank's copy. Differentiating ``allreduce(loss) / size``
does not help: with jaxmpi's default adjoint (docs/autodiff.md) it gives
``grad(loss) / size`` on each rank, still only this rank's data; the copies
would drift apart.

The gradient pytree is averaged in one allreduce per dtype: jaxmpi packs
the leaves of each dtype into one buffer.

Run:  mpirun -n 4 python examples/data_parallel.py [--steps 20] [--lr 0.1]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx


def make_data(n_total: int, dim: int, seed: int = 0):
    """A regression problem: y = tanh(X @ w) + noise (float32)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_total, dim)).astype(np.float32)
    w = rng.normal(size=dim).astype(np.float32)
    y = (np.tanh(X @ w) + 0.1 * rng.normal(size=n_total)).astype(np.float32)
    return X, y


def shard(a, rank: int, size: int):
    """Rank's contiguous block of the rows of a (equal blocks)."""
    n = len(a) // size
    return a[rank * n:(rank + 1) * n]


def init_params(dim: int, hidden: int, seed: int = 1):
    """A one-hidden-layer MLP's parameters, as a dict (a pytree)."""
    rng = np.random.default_rng(seed)
    return {
        "w1": jnp.asarray(rng.normal(size=(dim, hidden)) / np.sqrt(dim),
                          jnp.float32),
        "b1": jnp.zeros(hidden, jnp.float32),
        "w2": jnp.asarray(rng.normal(size=(hidden, 1)) / np.sqrt(hidden),
                          jnp.float32),
        "b2": jnp.zeros(1, jnp.float32),
    }


def predict(params, X):
    h = jnp.tanh(X @ params["w1"] + params["b1"])
    return (h @ params["w2"] + params["b2"])[:, 0]


def loss(params, X, y):
    """This rank's loss: the mean squared error over its shard."""
    return jnp.mean((predict(params, X) - y) ** 2)


def average_over_ranks(tree, comm=None):
    """The mean over ranks of every leaf of a pytree (allreduce, then / size)."""
    size = (comm or jaxmpi.get_default_comm()).Get_size()
    return jax.tree.map(lambda g: g / size,
                        mpx.allreduce(tree, MPI.SUM, comm=comm))


def make_train_step(lr: float, comm=None):
    """One SGD step on every rank: local gradients, averaged over ranks.
    Called once per step: ``jaxmpi.jit`` (in place of ``jax.jit``) compiles
    the same program but dispatches it on JAX's C++ path, tens of
    microseconds less per call (docs/api.md, "Fast dispatch")."""

    @jaxmpi.jit
    def step(params, X, y):
        local_loss, grads = jax.value_and_grad(loss)(params, X, y)
        grads = average_over_ranks(grads, comm)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
        # The whole data's loss (before this step), for printing.
        return params, average_over_ranks(local_loss, comm)

    return step


def train(params, X_local, y_local, lr: float, steps: int, comm=None):
    """Train data-parallel; returns the parameters and the losses."""
    # Start from rank 0's parameters: identical copies whatever each rank
    # initialised (here they are identical already: same seed).
    params = mpx.bcast(params, 0, comm=comm)
    step = make_train_step(lr, comm)
    losses = []
    for _ in range(steps):
        params, global_loss = step(params, X_local, y_local)
        losses.append(float(global_loss))
    return params, losses


def train_single_process(params, X, y, lr: float, steps: int):
    """The same SGD on the whole data set in one process, without MPI;
    returns the parameters and the losses, as ``train`` does."""

    @jax.jit
    def step(params):
        value, grads = jax.value_and_grad(loss)(params, X, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads), value

    losses = []
    for _ in range(steps):
        params, value = step(params)
        losses.append(float(value))
    return params, losses


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--per-rank", type=int, default=64,
                        help="samples per rank")
    args = parser.parse_args()

    comm = jaxmpi.get_default_comm()
    rank, size = comm.Get_rank(), comm.Get_size()
    X, y = make_data(args.per_rank * size, dim=8)
    X_local, y_local = shard(X, rank, size), shard(y, rank, size)
    params0 = init_params(8, 16)

    params, losses = train(params0, X_local, y_local, args.lr, args.steps)

    # Every rank's copy, gathered: they must be bitwise identical.
    flat = jnp.concatenate([p.ravel() for p in jax.tree.leaves(params)])
    copies = np.asarray(mpx.allgather(flat))
    identical = all(np.array_equal(copies[0], c) for c in copies)
    if rank == 0:
        ref, _ = train_single_process(params0, X, y, args.lr, args.steps)
        ref_flat = np.concatenate([np.ravel(p) for p in jax.tree.leaves(ref)])
        for i in (0, len(losses) // 2, len(losses) - 1):
            print(f"step {i:3d}: loss {losses[i]:.5f}")
        print(f"{size} rank(s): parameters identical on every rank: "
              f"{identical}")
        print("largest difference from single-process training: "
              f"{np.max(np.abs(copies[0] - ref_flat)):.2e}")


if __name__ == "__main__":
    main()
