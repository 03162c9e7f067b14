"""A job for fault injection across hosts (tests/multihost/test_faults.py).

    fault_job.py COUNT SECONDS READY_DIR

Every rank runs a jitted allreduce of COUNT float64 values in a loop and
checks each result exactly. After its first iteration each rank creates
READY_DIR/rank-R (the test injects its fault once all exist). After SECONDS
seconds rank 0 raises a flag carried by the allreduce itself, so that all
ranks stop after the same iteration. Each rank then prints `done R ITERS
MAX_MS` (the slowest iteration in ms) and exits 0; a wrong result raises.
"""

import os
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import jaxmpi  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


@jax.jit
def step(x):
    return jaxmpi.allreduce(x, op=MPI.SUM, comm=COMM)[0]


def main():
    count, seconds, ready = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    x = np.full(count + 1, RANK + 1.0)
    want = SIZE * (SIZE + 1) / 2
    t0 = time.monotonic()
    iters, slowest = 0, 0.0
    while True:
        x[-1] = 1.0 if (RANK == 0 and time.monotonic() - t0 > seconds) else 0.0
        t = time.monotonic()
        s = np.asarray(step(jnp.asarray(x)))
        slowest = max(slowest, time.monotonic() - t)
        iters += 1
        if not (s[:-1] == want).all():
            raise SystemExit(f"fault_job: rank {RANK}: wrong allreduce at iteration {iters}")
        if iters == 1:
            open(os.path.join(ready, f"rank-{RANK}"), "w").close()
        if s[-1] > 0:
            break
    print(f"done {RANK} {iters} {slowest * 1e3:.1f}", flush=True)


if __name__ == "__main__":
    main()
