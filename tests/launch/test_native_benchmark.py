"""benchmarks/native.py still runs: one tiny round (gloo, the route and
its explicit allreduce, the layer's cost at 1 and 2 processes), its tables
and lines printed with numbers."""

import os
import re
import subprocess
import sys

from conftest import ROOT

SUITES = ()  # the default configuration only (about 30 s)


def test_native_benchmark_prints_its_tables():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))}
    job = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "native.py"),
         "--rounds", "1", "--sizes", "4,4096", "--repeats", "1",
         "--target", "0.01"], cwd=ROOT, env=env, capture_output=True,
        text=True, timeout=900)
    assert job.returncode == 0, job.stderr[-3000:]
    out = job.stdout
    assert "gave nothing" not in out, out
    for mode in ("loop", "call"):
        assert f"## {mode}: median us per" in out, out
    rows = re.findall(r"^\| (4|4096) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|",
                      out, re.M)
    assert len(rows) == 4, out  # two sizes in each mode, every number there
    for where in ("1 process (no communication)", "2 processes"):
        assert re.search(rf"own cost, 4-byte MPI_Allreduce in a C loop at "
                         rf"{re.escape(where)}: through the surface [0-9.]+ us",
                         out), out
