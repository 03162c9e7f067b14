"""jaxmpi's own operations in the same program as native collectives:
interleaved, feeding each other, ordered and right; and the clear error
for jaxmpi inside a shard_map over a mesh of several processes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx
from nutil import ME, N, block, global_data, local, shard_map, sharded

ROWS = 3


def test_interleaved_and_feeding_each_other():
    # Each step: XLA's all-reduce over the global array (dispatched
    # asynchronously), then jaxmpi's calls on this process's block (eager,
    # jitted, non-blocking, a halo exchange) of its result, whose output
    # becomes the next step's global array. Any call out of order or on the
    # wrong data changes the numbers.
    cart = MPI.COMM_WORLD.Create_cart([N], periods=[True])
    a = global_data((ROWS * N, 2), np.dtype(np.float64))
    psum = shard_map(lambda v: jax.lax.psum(v, "p") + 0 * v)
    jitted_max = jax.jit(lambda v: mpx.allreduce(v, MPI.MAX))
    region = jaxmpi.jit(lambda v: mpx.allreduce(v, MPI.SUM) * 0.5)
    x, ref, got, want = sharded(a), a, [], []
    for step in range(3):
        s = psum(x)  # native
        mine = jnp.asarray(local(s)) + ME
        e = mpx.allreduce(mine, MPI.SUM)  # eager jaxmpi
        m = jitted_max(mine)
        req = mpx.iallreduce(mine * 2, MPI.MIN)
        r = region(e)
        w = mpx.wait(req)
        padded = jnp.pad(mine, ((1, 1), (0, 0)))
        h = mpx.halo_exchange(padded, cart, width=(1,))
        nxt = np.asarray(r) + np.asarray(h)[1:-1] * 0.25
        x = sharded(np.concatenate(
            MPI.COMM_WORLD.allgather(np.asarray(nxt))))
        got.append([np.asarray(v) for v in (e, m, w, h)])
        # NumPy: the same steps, from the global array
        total = sum(block(ref, r_) for r_ in range(N))
        mines = [total + r_ for r_ in range(N)]
        esum = sum(mines)
        pad = [np.pad(v, ((1, 1), (0, 0))) for v in mines]
        halo = pad[ME].copy()
        halo[0] = mines[(ME - 1) % N][-1]
        halo[-1] = mines[(ME + 1) % N][0]
        want.append([esum, np.max(mines, axis=0), np.min(mines, axis=0) * 2,
                     halo])
        # the region sums e over the processes and halves it; the halo's
        # interior is the block itself
        ref = np.concatenate([N * esum * 0.5 + mines[q] * 0.25
                              for q in range(N)])
    for g, w_ in zip(got, want):
        for k, (gv, wv) in enumerate(zip(g, w_)):
            assert np.allclose(gv, wv), (k, gv, wv)


def test_jaxmpi_inside_a_global_shard_map_is_an_error():
    if N == 1:
        pytest.skip("a mesh of one process is jaxmpi's own layout")
    x = sharded(global_data((ROWS * N, 2), np.dtype(np.float32)))
    with pytest.raises(ValueError, match="mesh of devices of .* processes"):
        shard_map(lambda v: mpx.allreduce(v, MPI.SUM))(x)
    # the processes go on: nothing was sent
    total = local(shard_map(lambda v: jax.lax.psum(v, "p") + 0 * v)(x))
    assert total.shape == (ROWS, 2)
