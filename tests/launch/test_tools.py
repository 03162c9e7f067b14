"""Bounded runs of the reliability tools: the soak test (scripts/soak.py:
many calls of every op, RSS growth bounded) and the libFuzzer harness over
the FFI decoding (scripts/fuzz.sh; skipped where clang is missing). Full
runs: `mpiexec -n 2 python scripts/soak.py` (10**5 calls per op, in and out
of jit) and `JAXMPI_FUZZ_SECONDS=600 scripts/fuzz.sh`."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


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


@pytest.mark.skipif(shutil.which("clang") is None,
                    reason="clang not installed (apt-get install clang)")
def test_fuzz_ffi_decoding_bounded():
    env = dict(os.environ, JAXMPI_FUZZ_SECONDS="20",
               PYTHON=sys.executable, JAXMPI_FUZZ_DIR=os.path.join(
                   ROOT, "build", "fuzz-test"))
    proc = subprocess.run(["bash", "scripts/fuzz.sh"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert re.search(r"Done \d+ runs", out), out[-4000:]
