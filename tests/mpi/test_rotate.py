"""rotate and irotate (a throwaway operation: docs/design.md, "Adding an
operation"): rank-dependent data against NumPy, jit, grad, vmap, the
start."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

from jaxmpi import notoken as mpx

SUITES = ("c_core",)
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def data(r, n=3, dtype=np.float32):
    return (np.arange(n) + 10 * r).astype(dtype)


@pytest.mark.parametrize("offset", [1, -1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex64])
def test_rotate_values(offset, dtype):
    x = jnp.asarray(data(rank, dtype=dtype))
    eager = mpx.rotate(x, offset)
    jitted = jax.jit(lambda x: mpx.rotate(x, offset))(x)
    started = jax.jit(lambda x: mpx.wait(mpx.irotate(x, offset)))(x)
    want = data((rank - offset) % size, dtype=dtype)
    for got in (eager, jitted, started):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_rotate_grad_and_vmap():
    x = jnp.asarray(data(rank))
    w = jnp.asarray(data(rank) + 1.0)
    g = jax.grad(lambda x: jnp.sum(mpx.rotate(x, 1) * w))(x)
    gs = jax.grad(lambda x: jnp.sum(mpx.wait(mpx.irotate(x, 1)) * w))(x)
    xb = jnp.stack([x, 2 * x])
    vb = jax.vmap(lambda x: mpx.rotate(x, 1))(xb)
    # d/dx_r of sum_s rotate(x)_s * w_s = w_{r + 1}
    want = data((rank + 1) % size) + 1.0
    np.testing.assert_array_equal(np.asarray(g), want)
    np.testing.assert_array_equal(np.asarray(gs), want)
    left = data((rank - 1) % size)
    np.testing.assert_array_equal(np.asarray(vb), np.stack([left, 2 * left]))


def test_rotate_offset_must_be_static():
    with pytest.raises(TypeError, match="rotate: offset must be an int"):
        mpx.rotate(jnp.zeros(2), 1.5)
