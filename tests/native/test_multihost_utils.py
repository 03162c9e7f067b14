"""jax.experimental.multihost_utils over jaxmpi's MPI layer for XLA."""

import numpy as np
from jax.experimental import multihost_utils as mu

from nutil import ME, N


def test_sync_allgather_broadcast():
    mu.sync_global_devices("jaxmpi native test")
    gathered = mu.process_allgather(np.array([ME, 10 * ME + 1]))
    stacked = mu.process_allgather(np.full((2, 2), ME, np.int32), tiled=True)
    bcast = mu.broadcast_one_to_all(np.array([ME + 5.0, -ME]))
    assert np.array_equal(np.asarray(gathered),
                          [[r, 10 * r + 1] for r in range(N)])
    assert np.array_equal(np.asarray(stacked),
                          np.repeat(np.arange(N, dtype=np.int32), 2)[:, None]
                          * np.ones((1, 2), np.int32))
    assert np.array_equal(np.asarray(bcast), [5.0, 0.0])
