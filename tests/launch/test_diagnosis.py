"""Hang diagnosis in whole jobs: the debug log (JAXMPI_DEBUG=1, or mpi4jax's
MPI4JAX_DEBUG=1) writes a line when each call starts and one when it ends,
naming the Python line of the call, so the last line of a hung rank names
the call it waits in; the watchdog's message names that line and the likely
causes; the default check catches a mismatch that MPI would otherwise abort
on (MPICH's truncation in a collective)."""

import re
import textwrap

import pytest

# The suites this file belongs to (tests/suites.py).
SUITES = ("jax_dependent",)


def write(tmp_path, text, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


LOGGED = """
from mpi4py import MPI
import jax, jax.numpy as jnp
from jaxmpi import notoken as mpx
f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM))
f(jnp.ones(5, jnp.float32)).block_until_ready()
mpx.bcast(jnp.ones((2, 3), jnp.int16), 1).block_until_ready()
"""


@pytest.mark.parametrize("var", ["JAXMPI_DEBUG", "MPI4JAX_DEBUG"])
def test_debug_log_start_and_end(mpirun, tmp_path, var):
    script = write(tmp_path, LOGGED)
    env = {"JAXMPI_DEBUG": "", var: "1"}  # the alias alone turns it on
    job = mpirun(2, script, env=env)
    assert job.returncode == 0, job
    for r in (0, 1):
        lines = [l for l in job.stderr.splitlines() if l.startswith(f"jaxmpi r{r}/2 ")]
        # start, the MPI call, end; for each of the two calls, in order.
        assert len(lines) == 6, job
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #1 allreduce float32\[5\] at \S*script\.py:5 "
            r"\(<lambda>\) \| start" % r, lines[0]), lines[0]
        assert re.fullmatch(r"jaxmpi r%d/2 \| MPI_Allreduce count=5 "
                            r"dtype=float32 \| [\d.]+ us" % r, lines[1]), lines[1]
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #1 allreduce at \S*script\.py:5 \(<lambda>\) "
            r"\| done after [\d.]+ us" % r, lines[2]), lines[2]
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #2 bcast int16\[2,3\] at \S*script\.py:7 "
            r"\(<module>\) \| start" % r, lines[3]), lines[3]
        assert lines[4].startswith(f"jaxmpi r{r}/2 | MPI_Bcast root=1 count=6"), lines[4]
        assert re.fullmatch(r"jaxmpi r%d/2 \| call #2 bcast at \S*script\.py:7 "
                            r"\(<module>\) \| done after [\d.]+ us" % r,
                            lines[5]), lines[5]


STARTED = """
from mpi4py import MPI
import jax, jax.numpy as jnp
from jaxmpi import notoken as mpx
def f(x):
    req = mpx.iallreduce(x, MPI.SUM)
    return mpx.wait(req)
jax.jit(f)(jnp.ones(5, jnp.float32)).block_until_ready()
"""


def test_debug_log_of_a_start_and_its_wait(mpirun, tmp_path):
    """A start and its wait are calls like any other (the one path of the
    C core's handlers): each logs its start and end naming its own Python
    line, and the wait names the start it completes."""
    script = write(tmp_path, STARTED)
    job = mpirun(2, script, env={"JAXMPI_DEBUG": "1"})
    assert job.returncode == 0, job
    for r in (0, 1):
        calls = [l for l in job.stderr.splitlines()
                 if l.startswith(f"jaxmpi r{r}/2 | call #")]
        assert len(calls) == 4, job
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #1 iallreduce float32\[5\] at "
            r"\S*script\.py:6 \(f\) \| start" % r, calls[0]), calls[0]
        assert re.fullmatch(r"jaxmpi r%d/2 \| call #1 iallreduce at \S*script"
                            r"\.py:6 \(f\) \| done after [\d.]+ us" % r,
                            calls[1]), calls[1]
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #2 wait of iallreduce \(call #1\) at "
            r"\S*script\.py:7 \(f\) \| start" % r, calls[2]), calls[2]
        assert re.fullmatch(
            r"jaxmpi r%d/2 \| call #2 wait at \S*script\.py:7 \(f\) \| "
            r"(done|pending \(an asynchronous wait\)) after [\d.]+ us" % r,
            calls[3]), calls[3]


HUNG = """
import sys
from mpi4py import MPI
import jax, jax.numpy as jnp
from jaxmpi import notoken as mpx
rank = MPI.COMM_WORLD.Get_rank()
def step(x):
    x = mpx.allreduce(x, MPI.SUM)
    if rank == 1:
        return mpx.recv(x, 0, tag=4)  # rank 0 never sends
    return x
try:
    jax.block_until_ready(jax.jit(step)(jnp.ones(2)))
    print(f"rank {rank} done", flush=True)
except Exception as e:
    print(f"rank {rank} error: {e}", flush=True)
    sys.exit(3)
"""


def test_hung_rank_last_line_and_watchdog_hints(mpirun, tmp_path):
    script = write(tmp_path, HUNG)
    # (The flight recorder off: its verdict would replace the hints;
    # tests/launch/test_record.py has it.)
    job = mpirun(2, script, env={"JAXMPI_DEBUG": "1", "JAXMPI_TIMEOUT": "2",
                                 "JAXMPI_RECORD": "0"},
                 timeout=180)
    assert job.returncode != 0, job
    assert "rank 0 done" in job.stdout, job
    lines = [l for l in job.stderr.splitlines() if l.startswith("jaxmpi r1/2 ")]
    # Until the watchdog gave up, rank 1's last line named the call it
    # waits in; after it, at most MPI calls' own lines and the failure.
    start = [i for i, l in enumerate(lines) if re.fullmatch(
        r"jaxmpi r1/2 \| call #2 recv float32\[2\] at \S*script\.py:10 "
        r"\(step\) \| start", l)]
    assert len(start) == 1, job
    after = lines[start[0] + 1:]
    assert after and "| failed after" in after[-1], job
    assert all(" | MPI_" in l for l in after[:-1]), job
    m = re.search(r"rank 1 error: .*", job.stdout)
    assert m, job
    msg = m.group(0)
    # (the default check's probe only polls: the receive itself waits)
    assert ("timed out after 2 s (JAXMPI_TIMEOUT) in MPI_Recv on rank 1 of 2, "
            "source 0, tag 4, jaxmpi call #2 of this process: the peer(s) never "
            "made the matching call (this rank's call at ") in msg, msg
    assert re.search(r"script\.py:10 \(step\)\)\. Likely causes: a rank took "
                     r"another branch", msg), msg
    assert "JAXMPI_DEBUG=1" in msg and "The call was abandoned" in msg, msg


def test_default_check_comes_before_mpich_truncation_abort(mpirun, tmp_path):
    # The example: without checks MPICH aborts the rank with the
    # smaller buffer ("Message truncated") despite MPI_ERRORS_RETURN, and the
    # other prints wrong numbers. The default check raises on both first.
    script = write(tmp_path, """
        from mpi4py import MPI
        import jax.numpy as jnp
        from jaxmpi import notoken as mpx
        rank = MPI.COMM_WORLD.Get_rank()
        try:
            y = mpx.allreduce(jnp.ones(5 if rank == 0 else 4), MPI.SUM)
            print(f"rank {rank} result {y}", flush=True)
        except Exception as e:
            print(f"rank {rank} error: {e}", flush=True)
    """)
    job = mpirun(2, script, env={"JAXMPI_CHECK": ""})
    assert job.returncode == 0, job
    for r in (0, 1):
        assert (f"rank {r} error: FAILED_PRECONDITION: jaxmpi.allreduce: "
                "collective call #1 on this communicator differs across ranks "
                "(JAXMPI_CHECK): the array: rank 0 has float32[5], rank 1 has "
                "float32[4]") in job.stdout, job
