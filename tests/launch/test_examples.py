"""The seed documents' examples run unchanged but for the import."""

import re

# The suites this file belongs to (tests/suites.py).
SUITES = ("mpi_dependent", "jax_dependent", "sanitized")


def test_allreduce_example_prints_sixes(mpirun):
    job = mpirun(4, "examples/seed_allreduce.py")
    assert job.returncode == 0, job
    numbers = re.findall(r"[-\d.]+", job.stdout)
    assert numbers == ["6."] * 9, job


def test_send_recv_example_swaps(mpirun, tmp_path):
    # Each rank's output goes to a file of its own: launchers forward the
    # ranks' lines interleaved (Open MPI split one rank's printed array around
    # the other's), so stdout cannot tell which rank printed which row.
    wrapper = tmp_path / "per_rank_output.py"
    wrapper.write_text(
        "import runpy, sys\n"
        "from mpi4py import MPI\n"
        f"sys.stdout = open(r'{tmp_path}/out.%d' % MPI.COMM_WORLD.Get_rank(), 'w')\n"
        "runpy.run_path('examples/seed_send_recv.py', run_name='__main__')\n"
        "sys.stdout.close()\n")
    job = mpirun(2, str(wrapper))
    assert job.returncode == 0, job
    r0 = (tmp_path / "out.0").read_text()
    r1 = (tmp_path / "out.1").read_text()
    assert r0.startswith("r0 |") and r1.startswith("r1 |"), (r0, r1)
    assert re.findall(r"[-\d.]+", r0.split("|", 1)[1]) == ["1."] * 9, r0
    assert re.findall(r"[-\d.]+", r1.split("|", 1)[1]) == ["0."] * 9, r1


def test_heat3d_matches_numpy_on_one_process(mpirun):
    # 4 ranks: a 2 x 2 x 1 process grid, periodic in x and y, walls in z; the
    # example compares the gathered field with its single-process NumPy
    # solution itself and exits 1 if they differ by more than 1e-12.
    job = mpirun(4, "examples/heat3d.py", "--check", "--grid", "12", "12", "8",
                 "--steps", "60", "--steps-per-call", "30")
    assert job.returncode == 0, job
    assert "as 2 x 2 x 1 blocks, 60 steps" in job.stdout, job
    assert re.search(r"max \|parallel - numpy\| / max \|numpy\| = \S+ \(OK\)",
                     job.stdout), job
