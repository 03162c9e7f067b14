"""examples/shallow_water_jax.py (the model in plain JAX: shard_map and a
ppermute halo, under python -m jaxmpi.distributed) gives bitwise the state
of examples/shallow_water.py (jaxmpi's halo exchange) at the same layout:
the same float32 operations on every cell, the messages over XLA's
collective-permutes on jaxmpi's MPI layer."""

import numpy as np
import pytest

# (default configuration only: both models' compilations make it a minute;
# 4 ranks are a 2 x 2 grid: the periodic x and the walls in y both cross
# processes; run by hand at 2 and 3 too)
SUITES = ()

GRID = ("96", "48")
DAYS = "0.05"  # 216 time steps


def run(mpirun, n, script, out, route):
    args = (["-m", "jaxmpi.distributed"] if route else []) + [
        f"examples/{script}", "--grid", *GRID, "--days", DAYS, "--out", out]
    job = mpirun(n, *args, env={}, timeout=600)
    assert job.returncode == 0, job
    with np.load(out) as f:
        return job, {k: f[k] for k in f.files}


@pytest.mark.parametrize("n", [4])
def test_plain_jax_model_equals_jaxmpi_model(mpirun, tmp_path, n):
    job, plain = run(mpirun, n, "shallow_water_jax.py",
                     str(tmp_path / "plain.npz"), route=True)
    assert "plain JAX (ppermute halo, collectives mpi)" in job.stdout, job
    _, ref = run(mpirun, n, "shallow_water.py", str(tmp_path / "ref.npz"),
                 route=False)
    assert (int(plain["px"]), int(plain["py"])) == (int(ref["px"]),
                                                    int(ref["py"]))
    assert int(plain["ranks"]) == n and np.isfinite(plain["final"]).all()
    assert not np.array_equal(plain["final"], plain["initial"])
    assert plain["final"].dtype == ref["final"].dtype == np.float32
    assert np.array_equal(plain["final"], ref["final"]), (
        "differs by up to "
        f"{np.abs(plain['final'].astype(np.float64) - ref['final']).max():g}")
