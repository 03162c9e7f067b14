"""A bounded run of the soak test (scripts/soak.py: many calls of every op,
resident memory growth bounded). Full run: `mpiexec -n 2 python
scripts/soak.py` (10**5 calls per op, in and out of jit)."""

import os
import re

import pytest

# The suites this file belongs to (tests/suites.py).
SUITES = ("mpi_dependent",)


@pytest.mark.skipif(bool(os.environ.get("JAXMPI_SAN_ENV")),
                    reason="ASan's quarantine holds freed memory: RSS grows")
@pytest.mark.parametrize("env", [{}, {"JAXMPI_CHECK": "1", "JAXMPI_TIMEOUT": "120"}],
                         ids=["plain", "check-and-watchdog"])
def test_soak_short(mpirun, env):
    job = mpirun(2, "scripts/soak.py", "--calls", "1000", "--eager-calls", "100",
                 "--max-growth-mib", "32", env=env, timeout=900)
    assert job.returncode == 0, job
    assert job.stdout.count("soak ok") == 2, job
    assert re.search(r"rss growth per rank \(MiB\)", job.stdout), job
    for op in ("allreduce", "scatter", "alltoall", "barrier", "send_recv",
               "neighbor_exchange"):
        assert re.search(rf"{op} +jit +1000 calls", job.stdout), job
        assert re.search(rf"{op} +eager +100 calls", job.stdout), job
