"""Whole-process behaviour: exit never hangs, the debug log, diagnostics,
MPI errors become exceptions, and the large-count paths."""

import importlib.util
import os
import re
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The suites this file belongs to (tests/suites.py).
SUITES = ("mpi_dependent", "jax_dependent", "sanitized")

SCRIPT_EXIT = textwrap.dedent("""
    from mpi4py import MPI
    import jax, jax.numpy as jnp
    from jaxmpi import notoken as mpx
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    f = jax.jit(lambda x: mpx.sendrecv(x, x, (rank - 1) % size, (rank + 1) % size))
    x = jnp.ones(1 << 16)
    for _ in range(20):   # queued, never awaited
        x = f(x)
    print(f"queued {rank}", flush=True)
""")


def write(tmp_path, text, name="script.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_exit_with_work_in_flight_does_not_hang(mpirun, tmp_path):
    job = mpirun(3, write(tmp_path, SCRIPT_EXIT), timeout=120)
    assert job.returncode == 0, job
    assert job.stdout.count("queued") == 3, job


def test_debug_log(mpirun, tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        from mpi4py import MPI
        import jax.numpy as jnp
        from jaxmpi import notoken as mpx
        mpx.allreduce(jnp.ones(5, jnp.float32), MPI.SUM).block_until_ready()
        mpx.bcast(jnp.ones((2, 3), jnp.int16), 1).block_until_ready()
    """))
    job = mpirun(2, script, env={"JAXMPI_DEBUG": "1"})
    assert job.returncode == 0, job
    for r in (0, 1):
        assert re.search(rf"jaxmpi r{r}/2 \| MPI_Allreduce count=5 dtype=float32 "
                         r"\| [\d.]+ us", job.stderr), job
        assert re.search(rf"jaxmpi r{r}/2 \| MPI_Bcast root=1 count=6 "
                         r"dtype=int16 \| [\d.]+ us", job.stderr), job


def test_diagnostics(mpirun):
    job = mpirun(1, "-m", "jaxmpi")
    assert job.returncode == 0, job
    for field in ("MPI vendor", "MPI library", "ABI", "CUDA built",
                  "MPI CUDA-aware", "JAX", "thread level",
                  "fastest safe level"):
        assert field in job.stdout, job


def test_wrong_abi_is_a_clear_error(mpirun, tmp_path):
    script = write(tmp_path, "import jaxmpi\n")
    job = mpirun(1, script, env={"JAXMPI_MPI_ABI": "nonsense"})
    assert job.returncode != 0
    assert "JAXMPI_MPI_ABI='nonsense' is not one of" in job.stderr, job


def _suite(name):
    """The files of a suite of tests/mpi (tests/suites.py)."""
    spec = importlib.util.spec_from_file_location(
        "suites", os.path.join(ROOT, "tests", "suites.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.files(name)


# The op suite's files (SUITES = (..., "large_count", ...) in each).
SUITE = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
         *_suite("large_count"), "-k", "not order_without_tokens"]


@pytest.mark.skipif(os.environ.get("JAXMPI_TEST_LARGE_COUNT", "1") == "0",
                    reason="JAXMPI_TEST_LARGE_COUNT=0")
@pytest.mark.parametrize("mode", ["large-count-calls", "derived-datatypes"])
def test_large_count_paths(mpirun, mode):
    # The whole suite again with counts above 7 elements treated as "large":
    # exercises the MPI-4 large-count calls, or (without them) derived
    # datatypes for data movement and chunked reductions (the v-forms:
    # MPI_Alltoallw with a datatype per peer; alltoallv: rows as the unit).
    env = {"JAXMPI_MAX_COUNT": "7"}
    if mode == "derived-datatypes":
        env["JAXMPI_NO_LARGE_COUNT"] = "1"
    # 2 ranks: the suite's own 2-rank run has compiled these programs (a
    # count limit changes no program), so the rerun hits the JAX cache.
    job = mpirun(2, *SUITE, env=env, timeout=1200)
    assert job.returncode == 0, job
    assert re.search(r"\d+ passed", job.stdout), job


@pytest.mark.skipif(os.environ.get("JAXMPI_TEST_LARGE_COUNT", "1") == "0",
                    reason="JAXMPI_TEST_LARGE_COUNT=0")
def test_nonblocking_v_count_limit(mpirun):
    # The non-blocking variable-count starts with counts above 7 elements
    # treated as large: an error on every rank where a count or (at 3 ranks)
    # a displacement passes it, ialltoallv in rows on the ranks whose
    # elements do not fit while the others count elements.
    job = mpirun(3, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                 "tests/mpi/test_nonblocking_v.py", "-k", "count_limit",
                 env={"JAXMPI_MAX_COUNT": "7"})
    assert job.returncode == 0, job
    assert re.search(r"\b1 passed", job.stdout), job


@pytest.mark.skipif(os.environ.get("JAXMPI_TEST_HUGE", "1") == "0",
                    reason="JAXMPI_TEST_HUGE=0")
@pytest.mark.parametrize("mode", ["large-count-calls", "derived-datatypes"])
def test_more_than_2_31_elements(mpirun, tmp_path, mode):
    script = write(tmp_path, textwrap.dedent("""
        from mpi4py import MPI
        import jax, jax.numpy as jnp, numpy as np
        jax.config.update("jax_enable_x64", True)  # indices past 2**31
        from jaxmpi import notoken as mpx
        rank = MPI.COMM_WORLD.Get_rank()
        n = 2**31 + 5
        everywhere = jax.jit(lambda a, v: jnp.all(a == v))  # fused, no copies
        x = jnp.full((n,), rank + 1, jnp.int8)
        y = mpx.allreduce(x, MPI.SUM)
        assert bool(everywhere(y, 3)) and int(y[-1]) == 3
        del y
        z = mpx.sendrecv(x, x, 1 - rank, 1 - rank)
        assert bool(everywhere(z, 2 - rank)) and int(z[-1]) == 2 - rank
        del z
        b = mpx.bcast(x, 1)
        assert bool(everywhere(b, 2)) and int(b[-1]) == 2
        print(f"ok {rank}", flush=True)
    """))
    env = {"JAXMPI_NO_LARGE_COUNT": "1"} if mode == "derived-datatypes" else {}
    job = mpirun(2, script, env=env, timeout=900)
    assert job.returncode == 0, job
    assert job.stdout.count("ok") == 2, job


def test_vmap_makes_one_mpi_call_per_batch(mpirun, tmp_path):
    script = write(tmp_path, textwrap.dedent("""
        from mpi4py import MPI
        import jax, jax.numpy as jnp
        from jaxmpi import notoken as mpx
        rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        xs = jnp.ones((5, 3), jnp.float32)
        jax.block_until_ready(jax.vmap(lambda x: mpx.allreduce(x, MPI.SUM))(xs))
        jax.block_until_ready(jax.vmap(mpx.allgather, in_axes=1)(xs))
        jax.block_until_ready(jax.vmap(
            lambda x: mpx.sendrecv(x, x, (rank - 1) % size, (rank + 1) % size))(xs))
        g = jax.vmap(jax.grad(lambda x: jnp.sum(mpx.allgather(x) ** 2)))(xs)
        jax.block_until_ready(g)
        left, right = (rank - 1) % size, (rank + 1) % size
        jax.block_until_ready(jax.vmap(lambda x: mpx.neighbor_exchange(
            [x, x], [x, x], [left, right], [right, left]))(xs))
    """))
    job = mpirun(2, script, env={"JAXMPI_DEBUG": "1"})
    assert job.returncode == 0, job
    for r in (0, 1):
        lines = [l for l in job.stderr.splitlines()
                 if l.startswith(f"jaxmpi r{r}/") and " | MPI_" in l]
        ops = [l.split("|")[1].split()[0] for l in lines]
        # One call per op for the whole batch of 5 (the grad: allgather
        # forward, alltoall backward).
        # neighbor_exchange: its two pairs posted once, one wait.
        assert ops == ["MPI_Allreduce", "MPI_Allgather", "MPI_Sendrecv",
                       "MPI_Allgather", "MPI_Alltoall", "MPI_Irecv",
                       "MPI_Irecv", "MPI_Isend", "MPI_Isend",
                       "MPI_Waitall"], job
        assert all("count=15" in l for l in lines[5:9]), job
        assert "count=15" in lines[0] and "count=15" in lines[1], job
