# The allreduce example of mpi4jax's README, unchanged but for the import.
# Run: mpirun -n 4 python examples/seed_allreduce.py   (prints a 3x3 array of 6s)
from mpi4py import MPI
import jax
import jax.numpy as jnp
import jaxmpi as mpi4jax

comm = MPI.COMM_WORLD
rank = comm.Get_rank()

@jax.jit
def foo(arr):
   arr = arr + rank
   arr_sum, _ = mpi4jax.allreduce(arr, op=MPI.SUM, comm=comm)
   return arr_sum

a = jnp.zeros((3, 3))
result = foo(a)

if rank == 0:
   print(result)
