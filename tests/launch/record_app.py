"""A program with a planted hang, for the flight recorder's tests
(tests/launch/test_record.py): every rank makes the same collectives, then
at collective number AT of the default communicator the last rank goes
astray, as SCENARIO says:

  skip      it skips the allreduce the others wait in, and computes (sleeps)
  mismatch  it calls bcast where the others call allreduce
  recv      rank 1 waits for a message from rank 0 that never comes, while
            rank 0 and the others wait in the allreduce rank 1 never enters

Each line that makes a call is marked with a comment the test looks for.
The watchdog is set to TIMEOUT seconds once every rank is past its first
calls (compiling them can take longer than a hang's timeout on a loaded
machine): the ranks in jaxmpi calls then time out with the flight
recorder's verdict and the job ends (its status is not 0).

    mpiexec -n N python tests/launch/record_app.py SCENARIO AT TIMEOUT
"""

import sys
import time

import jax
import jax.numpy as jnp
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx

scenario, at, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
last = size - 1


@jax.jit
def summed(x):
    return mpx.allreduce(x, MPI.SUM)  # SITE:allreduce


@jax.jit
def spread(x):
    return mpx.bcast(x, 0)  # SITE:bcast


@jax.jit
def receive(x):
    return mpx.recv(x, source=0, tag=7)  # SITE:recv


x = jnp.arange(4, dtype=jnp.float32) + rank
# Collectives 1 .. at-1: bcast and allreduce alternately (the last, at-1,
# a bcast); then collective `at`, an allreduce, where the last rank strays.
assert at % 2 == 0, "AT must be even: collective AT-1 is a bcast"
for n in range(1, at):
    x = spread(x) if n % 2 else summed(x)
x.block_until_ready()
# Every rank is past its first calls (compiling them on a loaded machine
# can outlast TIMEOUT): from here on a call waits only for a peer that
# strays.
MPI.COMM_WORLD.Barrier()
jaxmpi.set_timeout(timeout)
if scenario == "skip" and rank == last:
    time.sleep(120)  # computing, never reaching the allreduce
elif scenario == "mismatch" and rank == last:
    x = spread(x)
elif scenario == "recv" and rank == 1:
    x = receive(x)
else:
    x = summed(x)
x.block_until_ready()
print(f"rank {rank}: no hang?", flush=True)
