"""Auto-sharded jax.jit over global arrays: the collectives XLA's
partitioner inserts run over jaxmpi's MPI layer for XLA."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding

from nutil import MESH, N, P, block, global_data, local, sharded

ROWS = 2 * N


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32,
                                   np.complex64], ids=str)
def test_reductions(dtype):
    dtype = np.dtype(dtype)
    a = global_data((ROWS * N, 3), dtype)
    x = sharded(a)
    total = jax.jit(jnp.sum)(x)
    cols = jax.jit(lambda v: v.sum(axis=0))(x)
    big = jax.jit(lambda v: jnp.max(jnp.abs(v)))(x)
    assert np.allclose(np.asarray(total), a.sum(), rtol=1e-6)
    assert np.allclose(np.asarray(cols), a.sum(axis=0), rtol=1e-6)
    assert np.allclose(np.asarray(big), np.abs(a).max(), rtol=1e-6)


def test_matmul_over_the_sharded_contraction():
    # x sharded by columns, w by rows: each process multiplies its slices
    # and XLA sums the partial products across processes.
    a = global_data((5, 3 * N), np.dtype(np.float64))
    w = global_data((3 * N, 4), np.dtype(np.float64), salt=2)
    x = sharded(a, P(None, "p"))
    y = sharded(w, P("p", None))
    got = jax.jit(lambda u, v: u @ v,
                  out_shardings=NamedSharding(MESH, P()))(x, y)
    assert np.allclose(np.asarray(got.addressable_data(0)), a @ w)


def test_resharding_and_roll():
    # A transpose to the other axis (all-to-all), a roll across shards
    # (collective-permute) and a replicated result (all-gather).
    a = global_data((ROWS * N, 2 * N), np.dtype(np.float32))
    x = sharded(a)
    t = jax.jit(lambda v: v.T, out_shardings=NamedSharding(MESH, P("p")))(x)
    r = jax.jit(lambda v: jnp.roll(v, 3, axis=0),
                out_shardings=NamedSharding(MESH, P("p")))(x)
    g = jax.jit(lambda v: v * 2, out_shardings=NamedSharding(MESH, P()))(x)
    assert np.array_equal(local(t), block(a.T))
    assert np.array_equal(local(r), block(np.roll(a, 3, axis=0)))
    assert np.array_equal(np.asarray(g.addressable_data(0)), a * 2)


def test_a_training_step():
    # Data-parallel least squares: a batch split over the processes, the
    # gradient averaged by the partitioner's all-reduce.
    xs = global_data((4 * N, 3), np.dtype(np.float64))
    ys = global_data((4 * N,), np.dtype(np.float64), salt=4)
    w0 = np.array([0.5, -0.25, 1.0])

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    step = jax.jit(lambda w, x, y: w - 0.1 * jax.grad(loss)(w, x, y),
                   out_shardings=NamedSharding(MESH, P()))
    w = step(jnp.asarray(w0), sharded(xs), sharded(ys))
    want = w0 - 0.1 * (2 / (4 * N)) * xs.T @ (xs @ w0 - ys)
    assert np.allclose(np.asarray(w.addressable_data(0)), want)
