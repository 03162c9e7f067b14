# The send/recv example of mpi4jax's usage docs, unchanged but for the import.
# Run: mpirun -n 2 python examples/seed_send_recv.py   (each rank prints the other's array)
from mpi4py import MPI
import jax
import jax.numpy as jnp
import jaxmpi as mpi4jax

comm = MPI.COMM_WORLD
size = comm.Get_size()
rank = comm.Get_rank()
assert size == 2  # make sure we are on 2 processes

@jax.jit
def foo(arr):
    arr = arr + rank
    # note: this could also use mpi4jax.sendrecv
    if rank == 0:
        # send, then receive
        token = mpi4jax.send(arr, dest=1, comm=comm)
        other_arr, token = mpi4jax.recv(arr, source=1, comm=comm, token=token)
    else:
        # receive, then send
        other_arr, token = mpi4jax.recv(arr, source=0, comm=comm)
        token = mpi4jax.send(arr, dest=0, comm=comm, token=token)

    return other_arr

a = jnp.zeros((3, 3))
result = foo(a)

print(f'r{rank} | {result}')
