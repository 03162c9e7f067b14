"""A module written for mpi4jax < 0.8: operations return (result, token),
mpi4jax.notoken (0.7) and mpi4jax.experimental.notoken (0.5, 0.6) return
bare results. Run as a program, it checks itself against NumPy."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

import mpi4jax
from mpi4jax.experimental import notoken as notoken06
from mpi4jax.notoken import allreduce as allreduce07

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
UP = RANK + 1 if RANK + 1 < SIZE else MPI.PROC_NULL
DOWN = RANK - 1 if RANK > 0 else MPI.PROC_NULL


@jax.jit
def shift_both_ways(x):
    """(from the rank below, 10 x from the rank above, their global sum) on
    a line of ranks; a missing neighbour gives x itself."""
    below, token = mpi4jax.sendrecv(x, x, source=DOWN, dest=UP, comm=COMM)
    above, token = mpi4jax.sendrecv(10 * x, x, source=UP, dest=DOWN,
                                    comm=COMM, token=token)
    below = x if DOWN == MPI.PROC_NULL else below
    above = x if UP == MPI.PROC_NULL else above
    total, token = mpi4jax.allreduce(below + above, op=MPI.SUM, comm=COMM,
                                     token=token)
    token = mpi4jax.barrier(comm=COMM, token=token)
    return below, above, total


def main():
    x = jnp.arange(3.0) + 100 * RANK
    below, above, total = shift_both_ways(x)
    eager_max = notoken06.allreduce(x, op=MPI.MAX)
    eager_sum = allreduce07(x, op=MPI.SUM)

    def ref(r):
        return np.arange(3.0) + 100 * r

    want_below = ref(RANK - 1) if RANK > 0 else ref(RANK)
    want_above = 10 * ref(RANK + 1) if RANK + 1 < SIZE else ref(RANK)
    want_total = sum((ref(r - 1) if r > 0 else ref(r))
                     + (10 * ref(r + 1) if r + 1 < SIZE else ref(r))
                     for r in range(SIZE))
    bad = [name for name, got, want in [
        ("below", below, want_below), ("above", above, want_above),
        ("total", total, want_total), ("max", eager_max, ref(SIZE - 1)),
        ("sum", eager_sum, sum(ref(r) for r in range(SIZE)))]
        if not np.array_equal(np.asarray(got), want)]
    sys.stdout.write(f"rank {RANK}: legacy mpi4jax {mpi4jax.__version__}: "
                     f"{'OK' if not bad else 'FAILED ' + ', '.join(bad)}\n")
    sys.stdout.flush()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
