"""The data-parallel training recipe (examples/data_parallel.py,
docs/autodiff.md), tested: after training on rank-dependent shards, the
parameters are bitwise identical on every rank (compared through allgather)
and equal, to rounding, a single-process training on the concatenated data
(NumPy/JAX without MPI)."""

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi.notoken as mpx
from util import RANK, SIZE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))


def _example():
    spec = importlib.util.spec_from_file_location(
        "data_parallel", os.path.join(ROOT, "examples", "data_parallel.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


dp = _example()
STEPS, LR, PER_RANK, DIM, HIDDEN = 6, 0.2, 24, 5, 7


def _flat(params):
    return jnp.concatenate([jnp.ravel(p) for p in jax.tree.leaves(params)])


@pytest.fixture(scope="module")
def trained():
    X, y = dp.make_data(PER_RANK * SIZE, DIM, seed=3)
    X_local, y_local = dp.shard(X, RANK, SIZE), dp.shard(y, RANK, SIZE)
    params0 = dp.init_params(DIM, HIDDEN, seed=4)
    params, losses = dp.train(params0, X_local, y_local, LR, STEPS)
    return X, y, params0, params, losses


def test_shards_differ_by_rank(trained):
    """The premise: each rank trains on different data."""
    X, _, _, _, _ = trained
    mine = dp.shard(X, RANK, SIZE)
    assert mine.shape == (PER_RANK, DIM)
    np.testing.assert_array_equal(mine, X[RANK * PER_RANK:(RANK + 1) * PER_RANK])
    firsts = np.asarray(mpx.allgather(jnp.asarray(mine[0])))
    assert len({tuple(r) for r in firsts}) == SIZE


def test_parameters_identical_on_every_rank(trained):
    _, _, params0, params, _ = trained
    copies = np.asarray(mpx.allgather(_flat(params)))
    assert copies.shape[0] == SIZE
    for r in range(SIZE):
        assert np.array_equal(copies[r], copies[0]), (
            f"rank {r}'s parameters differ from rank 0's by up to "
            f"{np.max(np.abs(copies[r] - copies[0]))}")
    # Training moved them.
    assert not np.allclose(copies[0], np.asarray(_flat(params0)))


def test_matches_single_process_training(trained):
    X, y, params0, params, losses = trained
    ref, want_losses = dp.train_single_process(
        params0, jnp.asarray(X), jnp.asarray(y), LR, STEPS)
    got, want = np.asarray(_flat(params)), np.asarray(_flat(ref))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The loss train() reports is the whole data's loss before each step.
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert losses[-1] < losses[0]


def test_the_pitfall_drifts_apart():
    """Why the recipe averages gradients: differentiating the allreduced
    loss leaves each rank with its own shard's gradient (the documented
    convention), so after one step the copies differ at 2+ ranks."""
    X, y = dp.make_data(PER_RANK * SIZE, DIM, seed=3)
    X_local, y_local = dp.shard(X, RANK, SIZE), dp.shard(y, RANK, SIZE)
    params = dp.init_params(DIM, HIDDEN, seed=4)

    def global_loss(p):
        return mpx.allreduce(dp.loss(p, X_local, y_local), MPI.SUM) / SIZE

    grads = jax.jit(jax.grad(global_loss))(params)
    local = jax.grad(dp.loss)(params, X_local, y_local)
    stepped = jax.tree.map(lambda p, g: p - LR * g, params, grads)
    copies = np.asarray(mpx.allgather(_flat(stepped)))
    np.testing.assert_allclose(np.asarray(_flat(grads)),
                               np.asarray(_flat(local)) / SIZE, rtol=1e-5,
                               atol=1e-7)
    distinct = len({c.tobytes() for c in copies})
    assert distinct == SIZE
