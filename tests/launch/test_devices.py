"""Several devices per process: what needs whole jobs (tests/devices runs
the rest under mpiexec). Processes with different device counts (an MPMD
launch: XLA_FLAGS is per process), MPI below MPI_THREAD_MULTIPLE, the
watchdog and the cross-rank check naming the position; and what
tests/devices found wrong, kept here where a job can fail or hang without
taking a suite with it: calls after a runtime error, and waits followed
by blocking calls (they hung)."""

import os
import re
import subprocess
import sys
import textwrap

import jax
import pytest

from conftest import ROOT, Job, launcher, san_env

SUITES = ("jax_dependent",)

# A failed program over several devices: JaxRuntimeError (JAX 0.6: an
# XlaRuntimeError whose message starts "Buffer Definition Event: ").
ERROR = r"(?:Jax|Xla)RuntimeError: "
EVENT = r"(?:Buffer Definition Event: )?"
JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:2])

PRELUDE = """
import os, sys
import mpi4py
if len(sys.argv) > 1:
    mpi4py.rc.thread_level = sys.argv[1]
from mpi4py import MPI
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
import jaxmpi
import jaxmpi.notoken as mpx
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
n = jax.device_count()
UP = rank + 1 if rank < size - 1 else MPI.PROC_NULL
DOWN = rank - 1 if rank > 0 else MPI.PROC_NULL
mesh = Mesh(np.array(jax.devices()), ("d",))

def spmd(f):
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=P("d"), out_specs=P("d")))

def report(what, fn, *args):
    try:
        out = jax.block_until_ready(fn(*args))
        print(f"rank {rank} {what} ok", flush=True)
        return out
    except Exception as e:
        print(f"rank {rank} {what} error: {type(e).__name__}: {e}", flush=True)
"""


def flags(n):
    return f"--xla_force_host_platform_device_count={n}"


def write(tmp_path, body):
    path = tmp_path / "job.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return str(path)


def run_job(devices, script, args=(), env=None, timeout=240):
    """One process per entry of `devices` (its device count), launched as
    one job (MPMD where the counts differ)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))}
    full_env.update(san_env())
    # JAX's persistent cache (CI's) off: jax 0.10 crashes writing a program
    # over several devices; jaxmpi raises instead (tests/devices tests it).
    full_env.update(JAX_PLATFORMS="cpu", JAX_ENABLE_COMPILATION_CACHE="false",
                    **(env or {}))
    cmd = [*launcher()]
    for i, n in enumerate(devices):
        if i:
            cmd.append(":")
        cmd += ["-n", "1", "env", f"XLA_FLAGS={flags(n)}", sys.executable,
                script, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    return Job(proc)


# What makes a communicator's per-device duplicates: a collective inside
# shard_map, and a DeviceCart (each refuses a bad configuration).
DUPLICATES_JOB = """
        x = np.arange(2.0 * n) + rank
        report("allreduce", spmd(lambda x: mpx.allreduce(x, MPI.SUM)), x)
        cart = MPI.COMM_WORLD.Create_cart([size], periods=[True])
        report("DeviceCart", jaxmpi.DeviceCart, cart, mesh)
"""


def test_unequal_device_counts_are_a_clear_error_on_every_rank(tmp_path):
    script = write(tmp_path, DUPLICATES_JOB)
    job = run_job([2, 4], script)
    assert job.returncode == 0, job
    for r in range(2):
        assert (f"rank {r} allreduce error: ValueError: allreduce: the "
                "processes of the communicator have different devices (rank 0: "
                "2, rank 1: 4): each device pairs with the device at the same "
                "mesh position of every other process, so every process needs "
                "the same mesh.") in job.stdout, job
        assert (f"rank {r} DeviceCart error: ValueError: DeviceCart: the "
                "processes of the communicator have different mesh shapes "
                "(rank 0: (2,), rank 1: (4,))") in job.stdout, job


def test_below_thread_multiple_is_a_clear_error_on_every_rank(tmp_path):
    script = write(tmp_path, DUPLICATES_JOB + """
        # one device per process is still fine at this level
        report("one device", mpx.allreduce, jnp.ones(2), MPI.SUM)
    """)
    job = run_job([2, 2], script, args=["serialized"])
    assert job.returncode == 0, job
    for r in range(2):
        for what in ("allreduce", "DeviceCart"):
            assert re.search(
                rf"rank {r} {what} error: MPIConfigurationError: {what}: a "
                r"program over 2 devices per process calls MPI from 2 threads "
                r"at once, which needs MPI_THREAD_MULTIPLE; MPI was initialised "
                r"at level \d\. Keep mpi4py's default thread "
                r"level \('multiple'\), or run one device per process\.",
                job.stdout), job
        assert f"rank {r} one device ok" in job.stdout, job


def test_watchdog_names_the_position(tmp_path):
    # At position 1 only, rank 0 waits for a message nobody sends; the other
    # positions and ranks have nothing to wait for.
    script = write(tmp_path, """
        def body(x):
            pos = jax.lax.axis_index("d")
            return jax.lax.cond(
                jnp.logical_and(pos == 1, rank == 0),
                lambda x: mpx.recv(x, 1, tag=9), lambda x: x, x)
        report("recv", spmd(body), np.arange(2.0 * n))
    """)
    job = run_job([2, 2], script, env={"JAXMPI_TIMEOUT": "2", "JAXMPI_CHECK": "0"})
    assert "rank 1 recv ok" in job.stdout, job
    assert re.search(
        rf"rank 0 recv error: {ERROR}DEADLINE_EXCEEDED: {EVENT}jaxmpi\.recv "
        r"\(device position 1 of 2\): timed out after 2 s \(JAXMPI_TIMEOUT\) in "
        r"MPI_Recv on rank 0 of 2, source 1, tag 9", job.stdout), job


CHECK_JOB = """
    def body(x):
        # rank 0's last position calls allreduce with 3 elements, every
        # other shard with 2
        odd = jnp.logical_and(jax.lax.axis_index("d") == n - 1, rank == 0)
        return jax.lax.cond(
            odd, lambda x: mpx.allreduce(jnp.concatenate([x, x[:1]]), MPI.SUM)[:2],
            lambda x: mpx.allreduce(x, MPI.SUM), x)
    report("check", spmd(body), np.arange(2.0 * n) + rank)
"""


def test_check_names_the_position(tmp_path):
    """JAXMPI_CHECK compares the calls of one position: shapes that differ
    at position 1 only are reported there, on every process, naming it."""
    script = write(tmp_path, CHECK_JOB)
    job = run_job([2, 2, 2], script, env={"JAXMPI_CHECK": "1"})
    assert job.returncode == 0, job
    for r in range(3):
        assert re.search(
            rf"rank {r} check error: {ERROR}FAILED_PRECONDITION: {EVENT}"
            + re.escape("jaxmpi.allreduce (device position 1 of 2): collective "
                        "call #1 on this communicator differs across ranks "
                        "(JAXMPI_CHECK): the array: rank 0 has float32[3], "
                        "ranks 1,2 have float32[2]"), job.stdout), job


def test_calls_after_an_error_run(tmp_path):
    script = write(tmp_path, CHECK_JOB + """
    report("after", spmd(lambda x: mpx.allreduce(x, MPI.SUM)), np.arange(2.0 * n))
    report("eager", mpx.allreduce, jnp.ones(2), MPI.SUM)
    """)
    job = run_job([2, 2], script, env={"JAXMPI_CHECK": "1"})
    assert "rank 0 check error" in job.stdout, job
    for r in range(2):
        assert f"rank {r} after ok" in job.stdout, job
        assert f"rank {r} eager ok" in job.stdout, job


# ---- what tests/devices found: waits over several devices block in their
# handler (a shared completion thread deadlocked positions), and a failed
# computation's token is dropped (it failed every later call) ------------

def test_waits_then_blocking_calls_in_a_loop(tmp_path):
    script = write(tmp_path, """
        def body(x):
            def step(c, i):
                xi = x * (i + 1)
                req = mpx.iallreduce(xi, MPI.MAX)
                y = mpx.wait(req)
                return c, y + mpx.sendrecv(xi, xi, DOWN, UP)
            return jax.lax.scan(step, x[0] * 0, jnp.arange(100))[1]
        f = spmd(body)
        for i in range(5):
            out = report(f"loop {i}", f, np.arange(4.0 * n) + 10 * rank)
        print(f"rank {rank} done", flush=True)
    """)
    job = run_job([2, 2, 2], script, env={"JAXMPI_TIMEOUT": "10",
                                          "JAXMPI_CHECK": "1"})
    for r in range(3):
        for i in range(5):
            assert f"rank {r} loop {i} ok" in job.stdout, job


@pytest.mark.skipif(JAX_VERSION < (0, 7), reason="gradients through a "
                    "DeviceCart halo with non-periodic edges need JAX 0.7 "
                    "(docs/devices.md, Limits)")
def test_exchange_after_backward_request(tmp_path):
    script = write(tmp_path, """
        cart = MPI.COMM_WORLD.Create_cart([size], periods=[False])
        dc = jaxmpi.DeviceCart(cart, mesh)
        def body(x):
            g = jax.grad(lambda x: jnp.sum(
                mpx.wait(mpx.ihalo_exchange(x, dc, 2, tag=50)) ** 2))(x)
            return g + mpx.halo_exchange(x, dc, 2)
        report("grad then halo", spmd(body), np.arange(7.0 * n))
        dc.free()
    """)
    job = run_job([2], script, env={"JAXMPI_TIMEOUT": "10"})
    assert "rank 0 grad then halo ok" in job.stdout, job
