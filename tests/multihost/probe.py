"""Run under a launcher across simulated hosts (tests/multihost): where each
rank is, and a known volume of jaxmpi traffic.

    probe.py COUNT ITERS

Each rank prints one line `probe {json}` with its rank, the size, MPI's
processor name, the UTS hostname and the inode of its network namespace.
Then, ITERS times, from inside jit: an allreduce of COUNT float64 values and
a sendrecv of COUNT float64 values around the ring (rank r sends to r+1).
The data are integers drawn from a seed per rank and iteration, so every
rank computes the exact reference for every other rank's data with NumPy
and checks its results bit for bit; a mismatch raises (non-zero exit).

Bytes that must cross a host's eth0 per iteration, whatever algorithm the
MPI picks, when ranks sit on at least two hosts in blocks (ranks 0..k-1 on
the first host, ...): the allreduce's result on a host depends on the other
hosts' data (at least 8 COUNT bytes in) and theirs on this host's (8 COUNT
out), and the ring sends one message of 8 COUNT bytes out of each host and
one in. So each host's eth0 rx and tx each grow by at least 16 COUNT ITERS
bytes (the random integers do not compress, and MPI does not compress).
"""

import json
import os
import socket
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

import jaxmpi  # noqa: E402

COMM = MPI.COMM_WORLD
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()


def data(rank, it, count):
    rng = np.random.default_rng(1000 * rank + it)
    return rng.integers(-(2**20), 2**20, count).astype(np.float64)


@jax.jit
def step(x):
    s, _ = jaxmpi.allreduce(x, op=MPI.SUM, comm=COMM)
    r, _ = jaxmpi.sendrecv(x, x, source=(RANK - 1) % SIZE, dest=(RANK + 1) % SIZE,
                           comm=COMM)
    return s, r


def main():
    count, iters = int(sys.argv[1]), int(sys.argv[2])
    where = {"rank": RANK, "size": SIZE, "processor": MPI.Get_processor_name(),
             "hostname": socket.gethostname(), "netns": os.readlink("/proc/self/ns/net")}
    print("probe " + json.dumps(where), flush=True)
    bad = []
    for it in range(iters):
        s, r = step(jnp.asarray(data(RANK, it, count)))
        want_s = sum(data(k, it, count) for k in range(SIZE))
        want_r = data((RANK - 1) % SIZE, it, count)
        if not np.array_equal(np.asarray(s), want_s):
            bad.append(f"allreduce at iteration {it}")
        if not np.array_equal(np.asarray(r), want_r):
            bad.append(f"sendrecv at iteration {it}")
    # Compute everything first, then fail: no rank may leave the others
    # waiting in a collective.
    if bad:
        raise SystemExit(f"probe: rank {RANK}: wrong results: {', '.join(bad)}")
    print(f"probe ok rank {RANK}", flush=True)


if __name__ == "__main__":
    main()
