"""The library's own test, as its authors wrote it: a subprocess that
spawns the ranks."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_global_mean_and_ring_shift_on_spawned_ranks():
    ranks = 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(HERE), *filter(None, [env.get("PYTHONPATH")])])
    job = subprocess.run(
        [sys.executable, "-m", "mpi4py", os.path.join(HERE, "kernel.py"),
         str(ranks)], env=env, capture_output=True, text=True, timeout=300)
    assert job.returncode == 0, job.stderr[-3000:]
    lines = job.stdout.splitlines()
    assert len(lines) == ranks, job.stdout + job.stderr[-3000:]
    for r, line in enumerate(lines):
        assert line.startswith(f"worker {r} of {ranks}: OK mpi4jax "), line
