"""Failures of a plain JAX program over jaxmpi's MPI layer for XLA, under
the launcher: a process that never reaches a collective (JAXMPI_TIMEOUT:
the others raise, naming the MPI call and XLA's collective, instead of
waiting forever as jax#38503), and a killed process (the job ends)."""

import re
import time

SUITES = ("mpi_dependent",)

ROUTE = ["-m", "jaxmpi.distributed"]


STALL = r"""
import sys, time, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:
    from jax.experimental.shard_map import shard_map
jax.distributed.initialize()
me, n = jax.process_index(), jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("p",))
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("p")),
                                 lambda i: np.ones(n, np.float32)[i])
f = jax.jit(shard_map(lambda v: jax.lax.psum(v, "p"), mesh=mesh,
                      in_specs=P("p"), out_specs=P("p")))
sys.stdout.write(f"{me} warm {float(f(x).addressable_data(0)[0])}\n")
sys.stdout.flush()
if me == n - 1:
    if sys.argv[1] == "kill":
        import os, signal
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
t = time.monotonic()
try:
    f(x * 2).block_until_ready()
finally:
    sys.stdout.write(f"{me} after {round(time.monotonic() - t, 1)}\n")
    sys.stdout.flush()
"""


def test_a_process_that_never_comes_is_a_timeout_naming_the_call(mpirun):
    # The last process never reaches the second all-reduce: the others
    # raise within JAXMPI_TIMEOUT, naming the MPI call and XLA's collective
    # (jax#38503: JAX would wait forever), and the job ends.
    t = time.monotonic()
    job = mpirun(3, *ROUTE, "-c", STALL, "stall",
                 env={"JAXMPI_TIMEOUT": "3"}, timeout=200)
    took = time.monotonic() - t
    assert job.returncode != 0, job
    assert ("jaxmpi: MPI_Allreduce (XLA's all-reduce of MPI_FLOAT x 1, 4 "
            "bytes, MPI_SUM) on native communicator") in job.stderr, job
    assert "did not complete within JAXMPI_TIMEOUT=3 s" in job.stderr, job
    assert "3 processes: world ranks 0, 1, 2" in job.stderr, job
    after = [float(l.split()[-1]) for l in job.stdout.splitlines()
             if re.fullmatch(r"[01] after [0-9.]+", l)]
    assert after and all(2.9 <= a < 20 for a in after), (after, job)
    assert took < 150, took


def test_a_killed_process_ends_the_job(mpirun):
    t = time.monotonic()
    job = mpirun(2, *ROUTE, "-c", STALL, "kill", env={}, timeout=200)
    assert job.returncode != 0, job
    assert "1 warm 2.0" in job.stdout, job
    assert time.monotonic() - t < 120
