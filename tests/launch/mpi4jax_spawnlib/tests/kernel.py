"""Started as `python -m mpi4py kernel.py RANKS` by the test: spawns RANKS
workers (MPI_Comm_spawn from a singleton) and prints what each found."""

import os
import sys

from mpi4py import MPI

ranks = int(sys.argv[1])
worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
children = MPI.COMM_SELF.Spawn(sys.executable, args=[worker], maxprocs=ranks)
found = [children.recv(source=r, tag=7) for r in range(ranks)]
children.Disconnect()
for line in found:
    print(line, flush=True)
