"""The benchmark harness (benchmarks/run.py) still runs: its quick mode on
tiny sizes for jaxmpi, mpi4py and plain C (when an mpicc is found), with
each op's result first checked against NumPy. Timings are not judged here."""

import csv
import math
import os
import shlex
import subprocess
import sys

from conftest import ROOT, launcher, san_env

OPS = ("allreduce", "sendrecv", "bcast", "allgather", "alltoall", "allgatherv",
       "alltoallv", "reduce_scatter")
SIZES = (4, 1024)


def test_quick_benchmark_runs_and_writes_results(tmp_path):
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
        del env[k]
    env.update(san_env())
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "run.py"), "--quick",
           "--ranks", "2", "--impls", "c,c_mt,mpi4py,jaxmpi,plain", "--require", "mpi4py,jaxmpi",
           "--sizes", ",".join(map(str, SIZES)), "--repeats", "1", "--target", "0.001",
           "--warmup", "1", "--check", "--no-plot", "--outdir", str(tmp_path),
           "--launcher", shlex.join(launcher())]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    with open(tmp_path / "latest.csv") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    got = {(r["impl"], r["mode"], r["op"], int(r["bytes"])) for r in rows}
    impls = [("mpi4py", "loop"), ("jaxmpi", "loop"), ("jaxmpi", "call")]
    if "skipping c" not in out:
        impls += [("c", "loop"), ("c_mt", "loop")]
    want = {(i, m, op, b) for i, m in impls for op in OPS for b in SIZES}
    assert want <= got, (sorted(want - got), out[-4000:])
    for r in rows:
        assert int(r["ranks"]) == 2
        if int(r["samples"]):
            assert math.isfinite(float(r["median_us"])), r
            assert float(r["best_us"]) > 0, r  # the estimator is bounded
        else:  # every sample <= 0 (a preempted batch): flagged, no time
            assert int(r["flagged"]) > 0 and r["median_us"] == "", r
    # The dispatch table: one call at a time at 4 B, jitted and eager.
    for key in [("plain", "block"), ("jaxmpi", "block"), ("jaxmpi", "eager")]:
        assert (*key, "allreduce", 4) in got, (key, out[-4000:])
    assert "Dispatch at 2 ranks" in out, out[-4000:]
    # The tables and the speed-target summary are printed.
    assert "allreduce at 2 ranks: median time per op in us" in out, out[-4000:]
    assert "Speed targets of jaxmpi at 2 ranks" in out, out[-4000:]
    assert (tmp_path / "latest.csv").exists()
    assert any(p.suffix == ".md" for p in tmp_path.iterdir())


def test_shallow_water_weak_scaling_grows_the_grid_with_the_ranks(tmp_path):
    """benchmarks/shallow_water.py --weak: a block per rank, the grid
    growing with the rank count (1 rank 32 x 16, 2 ranks 64 x 16), and the
    weak-scaling table (ms per step, efficiency against 1 rank)."""
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
        del env[k]
    env.update(san_env(), JAXMPI_LAUNCH=shlex.join(launcher()))
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "shallow_water.py"), "--ranks",
           "1,2", "--weak", "32", "16", "--days", "0.002", "--repeats", "1",
           "--configs", "jaxmpi-fused"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "shallow water 32 x 16," in out and "shallow water 64 x 16," in out, out
    assert "weak scaling (32 x 16 cells per rank)" in out, out
    row = [line.split() for line in out.splitlines() if line.startswith("jaxmpi-fused ")][-1]
    assert row[2] == "(1.00)" and float(row[3]) > 0, row
    # ... and benchmarks/plot_scaling.py plots it, and a saved strong-scaling table
    saved = tmp_path / "weak.txt"
    saved.write_text(proc.stdout)
    strong = os.path.join(ROOT, "benchmarks", "16cores", "shallow_water_scaling_one_thread.txt")
    png = tmp_path / "scaling.png"
    plot = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "plot_scaling.py"),
                           str(saved), strong, "-o", str(png)], capture_output=True, text=True,
                          timeout=300)
    assert plot.returncode == 0 and png.stat().st_size > 10000, plot
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import plot_scaling
    assert plot_scaling.parse(str(saved))[:2] == ("weak", [1, 2])
    kind, ranks, series = plot_scaling.parse(strong)
    assert (kind, ranks) == ("strong", [1, 2, 4, 8, 16])
    assert series["jaxmpi-fused"][-1] == 10.4 and series["mpi4jax"][-1] == 8.0, series
