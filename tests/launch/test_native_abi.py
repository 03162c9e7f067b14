"""jaxmpi's MPI layer for XLA driven directly from C (native_drive.c), as
XLA's MPI collectives call it, without jaxlib's trampoline: every served
call, every dtype XLA maps, aliased and MPI_IN_PLACE buffers, statuses,
MPI's own errors and the unserved functions, at 1-4 ranks. Under
JAXMPI_SANITIZE (CI's asan) the core, the surface and the driver are built
with the sanitizers, whose runtime refuses the trampoline's RTLD_DEEPBIND:
this is how the layer is checked under them."""

import os
import shutil
import subprocess

import pytest

SUITES = ("mpi_dependent", "sanitized")

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the driver")
    out = str(tmp_path_factory.mktemp("drive") / "native_drive.so")
    flags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-g"]
    sanitize = os.environ.get("JAXMPI_SANITIZE")
    if sanitize:
        flags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer",
                  "-fno-sanitize-recover=undefined"]
    subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", out,
                    os.path.join(HERE, "native_drive.c"), "-ldl"], check=True)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_every_served_call_from_c(mpirun, driver, n):
    job = mpirun(n, os.path.join(HERE, "native_drive.py"), driver,
                 env={"JAXMPI_ABORT_ON_ERROR": "0"}, timeout=240)
    assert job.returncode == 0, job
    for r in range(n):
        assert f"rank {r}: " in job.stdout and "FAIL" not in job.stdout, job
    assert job.stdout.count(" failures\n") == n, job


def test_under_the_watchdog(mpirun, driver):
    # JAXMPI_TIMEOUT makes every call non-blocking and polled: the same
    # results.
    job = mpirun(3, os.path.join(HERE, "native_drive.py"), driver,
                 env={"JAXMPI_TIMEOUT": "60", "JAXMPI_ABORT_ON_ERROR": "0"},
                 timeout=240)
    assert job.returncode == 0 and "FAIL" not in job.stdout, job
