"""Whole jobs that go wrong: planted deadlocks end with an error on every
rank in bounded time under the watchdog (JAXMPI_TIMEOUT); a rank that
raises, exits or is killed while the others wait ends the whole job with a
non-zero status and leaves no process behind; the suite still passes with
the watchdog and cross-rank checks on."""

import os
import re
import subprocess
import textwrap
import time

import pytest

from conftest import launcher

# The suites this file belongs to (tests/suites.py).
SUITES = ("mpi_dependent", "sanitized")

PRELUDE = """
import os, sys, signal, time
from mpi4py import MPI
import jax, jax.numpy as jnp
import jaxmpi
from jaxmpi import notoken as mpx
rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()

def report(fn, *args):
    # Run a call that must fail; print its error and leave (MPI_Finalize
    # with the abandoned request still pending must not hang either).
    try:
        jax.block_until_ready(fn(*args))
    except Exception as e:
        print(f"rank {rank} error: {e}", flush=True)
        sys.exit(3)
    print(f"rank {rank} no error", flush=True)
"""


def write(tmp_path, body, name="job.py"):
    path = tmp_path / name
    path.write_text(PRELUDE + textwrap.dedent(body))
    return str(path)


def timed(mpirun, n, script, env, timeout=180):
    t0 = time.monotonic()
    job = mpirun(n, script, env=env, timeout=timeout)
    return job, time.monotonic() - t0


def leftover_processes(script):
    """Processes still running the script (read from /proc: no procps)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        if script in cmd:
            found.append((pid, cmd.replace("\0", " ")))
    return found


def assert_job_gone(script):
    deadline = time.monotonic() + 10
    while leftover_processes(script) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftover_processes(script), leftover_processes(script)


WATCHDOG = {"JAXMPI_TIMEOUT": "2"}


def timeout_text(op, fn, rank, size, rest=""):
    return (rf"rank {rank} error: DEADLINE_EXCEEDED: jaxmpi\.{op}: timed out "
            rf"after 2 s \(JAXMPI_TIMEOUT\) in {re.escape(fn)} on rank {rank} "
            rf"of {size}{rest}, jaxmpi call #\d+ of this process: the peer\(s\) "
            r"never made the matching call .* The call was abandoned, not "
            r"completed: the communicator cannot be used any more; end the job")


def test_recv_without_send_times_out_everywhere(mpirun, tmp_path):
    # Each rank receives from its left neighbour, nobody sends.
    script = write(tmp_path, """
        mpx.barrier()
        f = jax.jit(lambda x: mpx.recv(x, (rank - 1) % size, tag=7))
        report(f, jnp.ones(3))
    """)
    # (Checks off here; with checks on, the default, the receive waits too,
    # its probe only polls: test_checks_and_watchdog_together.)
    job, took = timed(mpirun, 3, script, {**WATCHDOG, "JAXMPI_CHECK": "0"})
    assert job.returncode != 0, job
    for r in range(3):
        assert re.search(timeout_text("recv", "MPI_Recv", r, 3,
                                      f", source {(r - 1) % 3}, tag 7"),
                         job.stdout), job
    assert took < 90, took
    assert_job_gone(script)


@pytest.mark.parametrize("check", ["0", ""], ids=["checks_off", "default"])
def test_collectives_on_different_communicators_time_out(mpirun, tmp_path, check):
    # Rank 0 reduces over one communicator, the others over a duplicate.
    # The default check has no common communicator to compare on either:
    # the ranks wait in its setup (the shadow's MPI_Comm_idup) instead.
    script = write(tmp_path, """
        dup = MPI.COMM_WORLD.Dup()
        comm = jaxmpi.get_default_comm() if rank == 0 else dup
        report(lambda: mpx.allreduce(jnp.ones(3), MPI.SUM, comm=comm))
    """)
    job, took = timed(mpirun, 3, script, {**WATCHDOG, "JAXMPI_CHECK": check})
    assert job.returncode != 0, job
    fn = "MPI_Allreduce" if check == "0" else "MPI_Comm_idup (JAXMPI_CHECK)"
    for r in range(3):
        assert re.search(timeout_text("allreduce", fn, r, 3),
                         job.stdout), job
    assert took < 90, took
    assert_job_gone(script)


@pytest.mark.parametrize("check", ["1", ""], ids=["every_call", "default"])
def test_different_collectives_with_checks(mpirun, tmp_path, check):
    # Without checks, what ranks calling different collectives do depends on
    # the MPI: MPICH hangs (then the watchdog fires), Open MPI may complete
    # both with wrong results. With checks (JAXMPI_CHECK=1, or the default,
    # which checks call #1) every rank reports the mismatch.
    script = write(tmp_path, """
        if rank == 0:
            report(mpx.allreduce, jnp.ones(3), MPI.SUM)
        else:
            report(mpx.bcast, jnp.ones(3), 1)
    """)
    job, took = timed(mpirun, 3, script, {**WATCHDOG, "JAXMPI_CHECK": check})
    assert job.returncode != 0, job
    for r in range(3):
        op = "allreduce" if r == 0 else "bcast"
        assert re.search(
            rf"rank {r} error: FAILED_PRECONDITION: jaxmpi\.{op}: collective "
            r"call #1 on this communicator differs across ranks \(JAXMPI_CHECK\):"
            r" the operation: rank 0 calls jaxmpi\.allreduce, ranks 1,2 call "
            r"jaxmpi\.bcast", job.stdout), job
    assert took < 90, took


def test_sendrecv_and_barrier_time_out(mpirun, tmp_path):
    # Rank 0 exchanges with rank 1, which waits in a barrier instead.
    script = write(tmp_path, """
        if rank == 0:
            report(lambda: mpx.sendrecv(jnp.ones(2), jnp.ones(2), 1, 1,
                                        sendtag=4, recvtag=5))
        else:
            report(lambda: (mpx.barrier(), jax.effects_barrier()))
    """)
    # Checks off: the barrier itself waits (with the default check, its
    # setup would).
    job, took = timed(mpirun, 2, script, {**WATCHDOG, "JAXMPI_CHECK": "0"})
    assert job.returncode != 0, job
    assert re.search(timeout_text("sendrecv", "MPI_Sendrecv", 0, 2,
                                  ", source 1, dest 1, sendtag 4, recvtag 5"),
                     job.stdout), job
    assert re.search(timeout_text("barrier", "MPI_Barrier", 1, 2), job.stdout), job
    assert took < 90, took


def test_neighbor_exchange_times_out(mpirun, tmp_path):
    # Rank 0 exchanges with rank 1, which never calls.
    script = write(tmp_path, """
        if rank == 0:
            report(lambda: mpx.neighbor_exchange(
                [jnp.ones(2), jnp.ones(2)], [jnp.ones(2), jnp.ones(2)], [1, 1],
                [1, 1], tag=10))
        else:
            time.sleep(4)
    """)
    job, took = timed(mpirun, 2, script, WATCHDOG)
    assert job.returncode != 0, job
    assert re.search(timeout_text("neighbor_exchange", "MPI_Waitall", 0, 2,
                                  ", sources \\[1,1\\], dests \\[1,1\\], "
                                  "tag 10"), job.stdout), job
    assert took < 90, took


def test_checks_and_watchdog_together(mpirun, tmp_path):
    # Rank 0 calls a collective, rank 1 a receive: with checks on, rank 0
    # waits in the check's exchange and rank 1 in the receive (its probe
    # only polls); both time out.
    script = write(tmp_path, """
        mpx.barrier()
        if rank == 0:
            report(mpx.allgather, jnp.ones(3))
        else:
            report(mpx.recv, jnp.ones(3), 0)
    """)
    job, took = timed(mpirun, 2, script, {**WATCHDOG, "JAXMPI_CHECK": "1"})
    assert job.returncode != 0, job
    assert re.search(timeout_text("allgather", "MPI_Allgather (JAXMPI_CHECK)",
                                  0, 2), job.stdout), job
    assert re.search(timeout_text("recv", "MPI_Recv", 1, 2,
                                  ", source 0, tag MPI.ANY_TAG"),
                     job.stdout), job
    assert took < 90, took


def test_uncaught_timeout_aborts_the_job(mpirun, tmp_path):
    # Nobody catches the error: the exception hook aborts the job.
    script = write(tmp_path, """
        jaxmpi.set_timeout(1.5)
        if rank == 1:
            time.sleep(30)    # far behind: the others give up waiting
        mpx.allreduce(jnp.ones(3), MPI.SUM).block_until_ready()
        print(f"rank {rank} finished", flush=True)
    """)
    job, took = timed(mpirun, 3, script, {"JAXMPI_CHECK": "0"})
    assert job.returncode != 0, job
    assert "finished" not in job.stdout, job
    # (JAX before 0.7 names the class XlaRuntimeError.)
    assert re.search(r"jaxmpi: uncaught (Jax|Xla)RuntimeError on rank [02]: calling "
                     r"MPI_Abort", job.stderr), job
    assert "timed out after 1.5 s (JAXMPI_TIMEOUT) in MPI_Allreduce" in job.stderr
    assert took < 25, took   # well before rank 1 wakes up
    assert_job_gone(script)


def test_watchdog_can_be_switched_off(mpirun, tmp_path):
    # A rank late by 4 s is no deadlock: with the watchdog off again, the
    # others wait for it.
    script = write(tmp_path, """
        jaxmpi.set_timeout(None)
        assert jaxmpi._core.get().timeout is None
        if rank == 1:
            time.sleep(4)
        y = mpx.allreduce(jnp.ones(3), MPI.SUM)
        print(f"rank {rank} sum {float(y[0])}", flush=True)
    """)
    job = mpirun(2, script, env={"JAXMPI_TIMEOUT": "1"})
    assert job.returncode == 0, job
    assert job.stdout.count("sum 2.0") == 2, job


# ---- faults ---------------------------------------------------------------

FAULT = """
mpx.allreduce(jnp.ones(2), MPI.SUM).block_until_ready()
# (a file, not output: a launcher that aborts a job may drop its output)
open(os.path.join(os.path.dirname(__file__), f"ready.{{rank}}"), "w").close()
if rank == 1:
    time.sleep(1)
    {action}
mpx.allreduce(jnp.ones(2), MPI.SUM).block_until_ready()
print(f"rank {{rank}} finished", flush=True)
"""


def open_mpi_4_launcher():
    """True when the launcher is Open MPI 4's mpirun (see below)."""
    try:
        out = subprocess.run([*launcher(), "--version"], capture_output=True,
                             text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return re.search(r"Open MPI\)? 4\.", out) is not None


@pytest.mark.parametrize("action,env", [
    ("raise RuntimeError('rank 1 fails')", {}),
    ("os._exit(4)", {}),
    ("os.kill(os.getpid(), signal.SIGKILL)", {}),
    # (ASan would report the signal as an error of its own)
    pytest.param("os.kill(os.getpid(), signal.SIGSEGV)", {},
                 marks=pytest.mark.skipif(bool(os.environ.get("JAXMPI_SAN_ENV")),
                                          reason="sanitized build")),
    # sys.exit leaves rank 1 in MPI_Finalize waiting for the others: only
    # the watchdog ends that job.
    ("sys.exit(4)", {"JAXMPI_TIMEOUT": "3"}),
], ids=["raise", "os_exit", "sigkill", "sigsegv", "sys_exit_with_watchdog"])
def test_a_failing_rank_ends_the_job(mpirun, tmp_path, action, env):
    script = write(tmp_path, FAULT.format(action=action))
    try:
        job, took = timed(mpirun, 3, script, env, timeout=90)
    except subprocess.TimeoutExpired as e:
        if not (action.startswith("sys.exit") and open_mpi_4_launcher()):
            raise
        # Open MPI 4's mpirun can hang in its own shutdown when MPI_Abort
        # kills a rank that waits in MPI_Finalize (PMIx_server_finalize; 6
        # of 40 runs with plain mpi4py and no jaxmpi at all on Debian's
        # 4.1.4). What jaxmpi owes still holds: both waiting ranks timed out
        # and called MPI_Abort, and no rank outlived the job.
        err = e.stderr.decode(errors="replace") if e.stderr else ""
        for rank in (0, 2):
            assert (f"jaxmpi: uncaught JaxRuntimeError on rank {rank}: "
                    "calling MPI_Abort") in err, err[-4000:]
        assert_job_gone(script)
        pytest.xfail("Open MPI 4 mpirun hung after MPI_Abort while a rank "
                     "was in MPI_Finalize (a launcher defect; run the script "
                     "with python -m mpi4py to avoid it)")
    assert job.returncode != 0, job
    assert all((tmp_path / f"ready.{r}").exists() for r in range(3)), job
    assert "rank 0 finished" not in job.stdout, job
    assert took < 60, (took, job)
    if action.startswith("raise"):
        assert "RuntimeError: rank 1 fails" in job.stderr, job
        assert "jaxmpi: uncaught RuntimeError on rank 1: calling MPI_Abort" \
            in job.stderr, job
    assert_job_gone(script)


def test_sys_exit_under_mpi4py_run_ends_the_job(mpirun, tmp_path):
    # python -m mpi4py turns a non-zero sys.exit into MPI_Abort with that
    # status: no rank waits in MPI_Finalize, and no watchdog is needed.
    script = write(tmp_path, FAULT.format(action="sys.exit(4)"))
    t0 = time.monotonic()
    job = mpirun(3, "-m", "mpi4py", script, timeout=90)
    took = time.monotonic() - t0
    assert job.returncode == 4, job
    assert all((tmp_path / f"ready.{r}").exists() for r in range(3)), job
    assert "rank 0 finished" not in job.stdout, job
    assert took < 60, (took, job)
    assert_job_gone(script)


# ---- the suite with both switches on --------------------------------------

SUITE = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         "tests/mpi/test_collectives.py", "tests/mpi/test_p2p.py",
         "tests/mpi/test_ordering.py",
         # these two expect the message of a check that is off
         "-k", "not order_without_tokens and not short_message and not "
         "long_message"]


# JAXMPI_TEST_SWITCHES=0: CI runs this in default (MPICH), openmpi (Open
# MPI 5) and asan (the sanitizers), not again for Intel MPI and Open MPI 4
# (18 and 45 s there).
@pytest.mark.skipif(os.environ.get("JAXMPI_TEST_SWITCHES", "1") == "0",
                    reason="JAXMPI_TEST_SWITCHES=0")
def test_suite_passes_with_switches_on(mpirun):
    # Every op through the nonblocking path and the cross-rank checks.
    env = {"JAXMPI_TIMEOUT": "120", "JAXMPI_CHECK": "1"}
    job = mpirun(2, *SUITE, env=env, timeout=900)
    assert job.returncode == 0, job
    assert re.search(r"\d+ passed", job.stdout), job
