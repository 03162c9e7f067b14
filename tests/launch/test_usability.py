"""What a new user meets first: python -m jaxmpi (--help, the diagnostics on
a machine without a GPU, the --check connectivity test and its failures)
and jaxmpi's own error for arrays on several devices, which needs processes
started with their own XLA_FLAGS (tests/mpi runs with one device each)."""

import ctypes
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, san_env

# The suites this file belongs to (tests/suites.py).
SUITES = ("jax_dependent",)


def write(tmp_path, text, name="script.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_help_without_mpi():
    """--help prints the usage and the options, without a launcher."""
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, runpy; sys.argv = ['jaxmpi', "
         "'--help']; runpy.run_module('jaxmpi', run_name='__main__')\n"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, **san_env()})  # a sanitized core: its runtime preloaded
    assert proc.returncode == 0, proc
    out = proc.stdout
    assert out.startswith("usage: python -m jaxmpi"), out
    for option in ("--check", "--timeout SECONDS", "-h, --help"):
        assert option in out, out
    assert "mpirun -n N python -m jaxmpi" in out, out


def test_help_under_launcher(mpirun):
    job = mpirun(1, "-m", "jaxmpi", "--help", timeout=120)
    assert job.returncode == 0, job
    assert "usage: python -m jaxmpi" in job.stdout, job


def test_bad_option_is_an_error(mpirun):
    job = mpirun(1, "-m", "jaxmpi", "--timeout", "-1", "--check", timeout=120)
    assert job.returncode != 0, job
    assert "--timeout must be positive, got -1.0" in job.stderr, job


def _have_cuda_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_diagnostics_say_cpu_only(mpirun):
    job = mpirun(1, "-m", "jaxmpi", timeout=120)
    assert job.returncode == 0, job
    line = re.search(r"^ *CUDA driver: (.*)$", job.stdout, re.M)
    assert line, job
    assert not line.group(1).startswith("not loaded"), job
    if not _have_cuda_driver():
        assert line.group(1) == "none (CPU only)", job
        assert re.search(r"^ *GPU data path: none \(no GPU\)$", job.stdout,
                         re.M), job


@pytest.mark.parametrize("n", [1, 2, 3])
def test_check_passes(mpirun, n):
    job = mpirun(n, "-m", "jaxmpi", "--check", "--timeout", "60", timeout=300)
    assert job.returncode == 0, job
    out = job.stdout
    assert f"jaxmpi connectivity check: {n} rank(s)" in out, job
    for r in range(n):
        assert re.search(rf"^  rank {r}: host \S+, MPI \S+ .*\(.+\), JAX "
                         r"device \S+$", out, re.M), job
    pairs = n * (n - 1) // 2
    assert re.search(rf"pairs: {pairs} of {pairs} exchanged .* allreduce over "
                     rf"{n} rank\(s\): sum {n * (n + 1) // 2},", out), job
    assert f"OK: every rank reaches every other rank ({n} rank(s))" in out, job
    assert "FAILED" not in out + job.stderr, job
    # Rank 0 reports for all: one report, not one per rank.
    assert out.count("jaxmpi connectivity check:") == 1, job


# A broken pair, simulated by patching the exchange of the check on the
# ranks concerned; the rest of the check runs unchanged.
BROKEN = """
    import sys
    import jaxmpi.__main__ as m

    mode, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    real_exchange, real_payload = m.exchange, m.payload

    def exchange(peer, n, comm):
        rank = comm.Get_rank()
        if mode == "silent" and rank == a and peer == b:
            return real_payload(b, a, n)  # a never talks to b: b waits
        if mode == "corrupt" and rank == a and peer == b:
            m.payload = lambda s, d, k: real_payload(s, d, k) + (s == a)
            try:
                return real_exchange(peer, n, comm)
            finally:
                m.payload = real_payload
        return real_exchange(peer, n, comm)

    m.exchange = exchange
    sys.exit(m.main(["--check", "--timeout", "4"]))
"""


@pytest.mark.parametrize("n,a,b", [(2, 0, 1), (3, 2, 0)])
def test_check_names_a_silent_pair(mpirun, tmp_path, n, a, b):
    """Rank a never exchanges with rank b: b's exchange times out (the
    watchdog) and the failure names the pair; the job ends, not hangs."""
    job = mpirun(n, write(tmp_path, BROKEN), "silent", str(a), str(b),
                 timeout=240)
    assert job.returncode != 0, job
    out = job.stdout + job.stderr
    assert re.search(rf"jaxmpi check FAILED: rank {b} <-> rank {a} \(64 B "
                     r"each way\): \w+: .*(timed out|DEADLINE_EXCEEDED)",
                     out), job
    assert "OK: every rank" not in out, job


@pytest.mark.parametrize("n,a,b", [(2, 1, 0), (3, 0, 2)])
def test_check_names_a_corrupting_pair(mpirun, tmp_path, n, a, b):
    """Rank a sends wrong data to rank b: the report names the pair and the
    direction, every rank exits with a non-zero status."""
    job = mpirun(n, write(tmp_path, BROKEN), "corrupt", str(a), str(b),
                 timeout=240)
    assert job.returncode != 0, job
    out = job.stdout
    for size in (64, 2097152):
        assert (f"jaxmpi check FAILED: rank {b} <-> rank {a}: rank {b} "
                f"received wrong data from rank {a} ({size} B message, "
                in out), job
    assert out.count("received wrong data") == 2, job
    assert "OK: every rank" not in out, job


# --- arrays on more than one device ------------------------------------

MULTI_DEVICE = """
    import sys
    from mpi4py import MPI
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxmpi
    from jaxmpi import notoken as mpx

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    assert len(jax.devices()) == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("d",))
    sharded = jax.device_put(jnp.arange(4.0) + rank, NamedSharding(mesh, P("d")))

    def case(name):
        if name == "eager":
            return mpx.allreduce(sharded, MPI.SUM)
        if name == "jit":
            return jax.jit(lambda a: mpx.bcast(a, 0))(sharded)
        if name == "jaxmpi.jit":
            return jaxmpi.jit(lambda a: mpx.bcast(a, 0))(sharded)
        if name == "jit-out-shardings":
            return jax.jit(lambda a: mpx.allgather(a) * 2, out_shardings=
                           NamedSharding(mesh, P()))(jnp.arange(4.0))
        if name == "shard_map":
            f = jax.shard_map(lambda a: mpx.allreduce(a, MPI.SUM), mesh=mesh,
                              in_specs=P("d"), out_specs=P("d"))
            return jax.jit(f)(sharded)

    # One file per rank: a launcher may interleave the ranks' output.
    with open(f"{sys.argv[1]}/rank{rank}.txt", "w") as out:
        for name in sys.argv[2:]:
            try:
                case(name)
                print(f"rank {rank} {name}: NO ERROR", file=out)
            except Exception as e:
                text = " ".join(str(e).split())
                print(f"rank {rank} {name}: {type(e).__name__}: {text}",
                      file=out)
        # Nothing reached MPI: a single-device call still works, is right.
        y = mpx.allreduce(jnp.full(3, rank + 1.0), MPI.SUM)
        print(f"rank {rank} after: {np.asarray(y).tolist()}", file=out)
"""

HELP = (r"JAX's partitioner cannot place an MPI call \(a side effect\) in an "
        r"auto-sharded computation\. Write the per-device part with "
        r"jax\.shard_map\(f, mesh=mesh, in_specs=\.\.\., out_specs=\.\.\.\)")


@pytest.mark.parametrize("n", [1, 2])
def test_arrays_on_several_devices(mpirun, tmp_path, n):
    """Eagerly on a sharded array and inside shard_map: per shard. A jit
    over several devices without shard_map (sharded arguments, jaxmpi.jit,
    out_shardings): jaxmpi's error saying how to write it, not JAX's or
    XLA's, before any MPI call; a one-device call works after it."""
    cases = ["eager", "jit", "jaxmpi.jit", "jit-out-shardings", "shard_map"]
    job = mpirun(n, write(tmp_path, MULTI_DEVICE), str(tmp_path), *cases,
                 timeout=300,
                 env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                      "JAX_PLATFORMS": "cpu"})
    assert job.returncode == 0, job
    expect = {
        "eager": None,
        "jit": r"ValueError: jaxmpi.bcast is compiled for 2 devices outside "
               r"shard_map\.",
        "jaxmpi.jit": r"ValueError: jaxmpi.bcast is compiled for 2 devices "
                      r"outside shard_map\.",
        "jit-out-shardings": r"ValueError: jaxmpi.allgather is compiled for 2 "
                             r"devices outside shard_map\.",
        "shard_map": None,
    }
    for r in range(n):
        out = (tmp_path / f"rank{r}.txt").read_text()
        for name, pattern in expect.items():
            line = re.search(rf"^rank {r} {name}: (.*)$", out, re.M)
            assert line, out
            if pattern is None:
                assert line.group(1) == "NO ERROR", line.group(1)
                continue
            assert re.search(pattern, line.group(1)), line.group(1)
            assert re.search(HELP, line.group(1)), line.group(1)
            assert "ordered effects are not supported" not in line.group(1)
        total = float(n * (n + 1) // 2)
        assert f"rank {r} after: {[total] * 3}" in out, out


def test_data_parallel_example_runs(mpirun):
    """The recipe of docs/autodiff.md as a script (its numbers are tested
    in tests/mpi/test_recipes.py)."""
    job = mpirun(2, "examples/data_parallel.py", "--steps", "5", timeout=300)
    assert job.returncode == 0, job
    assert "2 rank(s): parameters identical on every rank: True" in job.stdout, job
    diff = re.search(r"largest difference from single-process training: "
                     r"(\S+)", job.stdout)
    assert diff and float(diff.group(1)) < 1e-5, job
    losses = [float(v) for v in re.findall(r"loss (\S+)", job.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0], job


@pytest.mark.parametrize("env,who", [
    ({"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "2"}, "srun started 4 processes"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "Open MPI's mpirun started 2 processes"),
    ({"PMI_SIZE": "3"}, "started 3 processes (PMI_SIZE=3)"),
])
def test_a_singleton_whose_launcher_started_several_is_an_error(env, who):
    """Each process of a job whose MPI did not reach the launcher runs alone
    (srun without --mpi, another MPI's mpirun): jaxmpi's import says so
    instead of letting every collective return the rank's own data. Here
    the launcher's variables are set on a process started alone; the real
    case (srun without --mpi) is in tests/multihost/test_slurm.py."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("PMI_", "PMIX_", "OMPI_", "SLURM_", "JAXMPI_SINGLETON"))}
    base.update(san_env(), JAX_PLATFORMS="cpu")
    code = "import jaxmpi; print('imported')"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**base, **env})
    assert proc.returncode != 0 and "imported" not in proc.stdout, proc
    err = proc.stderr
    assert "MPIConfigurationError" in err and who in err, err
    assert "MPI_COMM_WORLD here has 1 rank" in err and "JAXMPI_SINGLETON=1" in err, err
    if "SLURM_STEP_NUM_TASKS" in env:
        assert "srun --mpi=pmi2" in err, err
    # Meant to run alone: allowed; and a count of 1, or srun's count outside
    # a task (a batch script's own process), is no launch of several.
    for ok in ({**env, "JAXMPI_SINGLETON": "1"}, {k: "1" for k in env},
               {"SLURM_STEP_NUM_TASKS": "4"}):
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={**base, **ok})
        assert proc.returncode == 0 and "imported" in proc.stdout, (ok, proc)
