"""A known program for the timeline's tests (tests/launch/test_record.py):
ROUNDS rounds of one jitted step, then one eager allreduce. Each round,
every rank calls, in this order:

  allreduce   4 float32, MPI.SUM
  bcast       4 float32 from rank 1 % size
  sendrecv    4 float32 to rank + 1, from rank - 1 (a ring), tag 3
  iallreduce  8 float32, its wait after a matmul (overlap)
  barrier

    JAXMPI_TRACE=DIR mpiexec -n N python tests/launch/trace_app.py ROUNDS
"""

import sys

import jax
import jax.numpy as jnp
from mpi4py import MPI

import jaxmpi.notoken as mpx

rounds = int(sys.argv[1])
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()


@jax.jit
def step(x, y, m):
    x = mpx.allreduce(x, MPI.SUM)
    x = mpx.bcast(x, 1 % size)
    x = mpx.sendrecv(x, x, source=(rank - 1) % size, dest=(rank + 1) % size,
                     sendtag=3, recvtag=3)
    request = mpx.iallreduce(y, MPI.SUM)
    m = m @ m / 64.0
    y = mpx.wait(request)
    mpx.barrier()
    return x, y, m


x = jnp.arange(4, dtype=jnp.float32) + rank
y = jnp.ones(8, jnp.float32)
m = jnp.eye(64, dtype=jnp.float32)
for _ in range(rounds):
    x, y, m = step(x, y, m)
z = mpx.allreduce(jnp.arange(3, dtype=jnp.int32) + rank, MPI.SUM)
jax.block_until_ready((x, y, m, z))
print(f"rank {rank} done", flush=True)
