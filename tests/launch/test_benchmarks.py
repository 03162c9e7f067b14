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

# The suites this file belongs to (tests/suites.py): its drivers time what
# they run (a value of 0.00 failed a table's check beside another job).
SUITES = ("alone",)

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


def test_devices_benchmark_prints_its_tables_and_targets():
    """benchmarks/devices.py, tiny (2 processes x 2 devices, two sizes, one
    repeat, the loop and jaxmpi.jit modes; (b)'s column of the latter is its
    jax.jit call, measured for it): its three jobs start, each op's result matches NumPy on every
    shard (the driver stops otherwise), and it prints a table per op and
    mode with both ratios, and the TARGET lines (none for the control)."""
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
        del env[k]
    env.update(san_env(), JAXMPI_LAUNCH=shlex.join(launcher()))
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "devices.py"), "--procs", "2",
           "--devices", "2", "--sizes", "4,4096", "--modes", "loop,region", "--repeats", "1",
           "--target", "0.001", "--timeout", "300"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert "2 processes x 2 devices; (c) 4 single-device ranks" in out, out
    lines = out.splitlines()
    titles = [line for line in lines if line.endswith(": median us per op")]
    for op in ("allreduce over the processes", "allreduce over all shards",
               "ring: 1-D periodic halo exchange", "control, no communication"):
        for mode in ("jitted loop (time / k", "per call through jaxmpi.jit"):
            assert sum(t.startswith(op) and mode in t for t in titles) == 1, (op, mode, out)
    # the control's CPU time per op, beside its wall time
    assert sum(t.startswith("control, no communication") and "CPU time per op" in t
               for t in titles) == 1, out
    heads = [i for i, line in enumerate(lines) if line.split()[:1] == ["size"]]
    assert len(heads) == 9, out  # 4 ops x 2 modes, and the control's CPU time
    for i in heads:
        assert lines[i].split()[-2:] == ["(a)/(b)", "(a)/(c)"], lines[i]
        for row, size in zip(lines[i + 1:i + 3], ("4 B", "4 KiB")):
            cells = row.split()
            assert row.strip().startswith(size), (row, out)
            # three times in us (a CPU time per op of the control can print
            # as 0.00: under 5 ns) and two ratios of the unrounded times,
            # positive (so the times were)
            assert len(cells) == 2 + 5, row
            assert all(float(c) >= 0 for c in cells[2:5]), row
            assert all(float(c) > 0 for c in cells[5:]), row
    targets = [line for line in lines if line.startswith("TARGET ")]
    # 10x (b): 3 ops x 2 modes (not the control); 1.2x (c): no size in range
    assert len(targets) == 6 + 1, out
    assert "TARGET at most 1.2x (c) from 1 MiB: not judged" in out, out
    assert "TARGETS 10x faster than (b) up to 64 KiB: met in " in out, out
