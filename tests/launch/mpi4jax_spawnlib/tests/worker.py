"""A spawned rank: uses the library (whose `import mpi4jax` is the point)
and checks it against NumPy, then reports to the kernel."""

import numpy as np
from mpi4py import MPI

parent = MPI.Comm.Get_parent()
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
try:
    import jax.numpy as jnp
    import mpi4jax

    import spawnlib

    x = np.arange(3.0) * (rank + 1)
    mean = np.asarray(spawnlib.global_mean(jnp.asarray(x)))
    shifted = np.asarray(spawnlib.ring_shift(jnp.asarray(x)))
    ok = (np.allclose(mean, np.arange(3.0) * (size + 1) / 2)
          and np.array_equal(shifted, np.arange(3.0) * ((rank - 1) % size + 1)))
    line = (f"worker {rank} of {size}: {'OK' if ok else 'WRONG'} mpi4jax "
            f"{mpi4jax.__version__} from {mpi4jax.__file__}")
except Exception as e:  # reported, not raised: the kernel waits for it
    line = f"worker {rank} of {size}: {type(e).__name__}: {e}"
parent.send(line, dest=0, tag=7)
parent.Disconnect()
