"""The shallow-water example (examples/shallow_water.py) as a parallel
program: the same answer on every decomposition and with either halo
exchange, and a physically sane one (mass kept, energy bounded, the jet's
meander grows).

The grid is 96 x 48 cells, so that 1, 2, 3 and 4 ranks split it as 1 x 1,
1 x 2, 3 x 1 and 2 x 2 blocks: y neighbours, distinct x neighbours, and
corners that travel to diagonal neighbours are all exercised. With
--devices, 1 and 2 processes of 2 devices each split it as 2 and 4 ranks do."""

import importlib.util
import os
import re

import numpy as np
import pytest

GRID = ("96", "48")
SHORT = "0.05"  # model days (216 steps) for the comparisons
LONG = "0.5"  # model days for the physics
_runs = {}


def run_model(mpirun, tmp_path_factory, n, exchange, days, backend="jaxmpi", devices=None):
    """The saved run of n processes (with `devices` JAX devices each, or
    the plain one-device program), and its stdout as "stdout"."""
    key = (n, exchange, days, backend, devices)
    if key not in _runs:
        name = f"n{n}-d{devices}-{backend}-{exchange}-{days}.npz"
        out = str(tmp_path_factory.mktemp("sw") / name)
        more, env = (), None
        if devices is not None:
            # CPU devices (--devices sets their count); several GPUs per
            # process are not supported.
            more, env = ("--devices", str(devices)), {"JAX_PLATFORMS": "cpu"}
        job = mpirun(n, "examples/shallow_water.py", "--grid", *GRID, "--days", days,
                     "--backend", backend, "--exchange", exchange, "--out", out,
                     *more, env=env, timeout=600)
        assert job.returncode == 0, job
        assert os.path.exists(out), job
        with np.load(out) as f:
            _runs[key] = {k: f[k] for k in f.files}
        _runs[key]["stdout"] = job.stdout
    return _runs[key]


def assert_same_state(a, b, what):
    # Bitwise: every decomposition and either exchange compute each cell with
    # the same float32 operations in the same order; only the halo's source
    # differs (README: "bitwise the same").
    for k, name in ((0, "h"), (1, "u"), (2, "v")):
        x, y = a["final"][k], b["final"][k]
        diff = float(np.abs(x.astype(np.float64) - y).max())
        assert np.array_equal(x, y), f"{what}: {name} differs by up to {diff:g}"


def assert_close_state(a, b, what):
    # Another library's model run: no claim of bitwise equality.
    # h ~ 100 m: 1e-4 m is some ten float32 ulps; u, v ~ 3 m/s.
    for k, name, atol in ((0, "h", 1e-4), (1, "u", 1e-5), (2, "v", 1e-5)):
        diff = float(np.abs(a["final"][k] - b["final"][k]).max())
        assert diff <= atol, f"{what}: {name} differs by up to {diff:g}"


@pytest.mark.parametrize("n,layout", [(2, (1, 2)), (3, (3, 1)), (4, (2, 2))])
def test_same_solution_as_one_rank(mpirun, tmp_path_factory, n, layout):
    one = run_model(mpirun, tmp_path_factory, 1, "sendrecv", SHORT)
    many = run_model(mpirun, tmp_path_factory, n, "sendrecv", SHORT)
    assert (int(many["px"]), int(many["py"])) == layout
    assert many["final"].shape == (3, 48, 96)
    assert np.isfinite(many["final"]).all()
    assert_same_state(one, many, f"{n} ranks vs 1")


@pytest.mark.parametrize("n", [2, 4])
def test_fused_exchange_matches_sendrecv(mpirun, tmp_path_factory, n):
    plain = run_model(mpirun, tmp_path_factory, n, "sendrecv", SHORT)
    fused = run_model(mpirun, tmp_path_factory, n, "fused", SHORT)
    assert_same_state(plain, fused, f"fused vs sendrecv on {n} ranks")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_halo_exchange_matches_sendrecv(mpirun, tmp_path_factory, n):
    # jaxmpi.halo_exchange (the default) against the hand-written exchange:
    # 1 x 1 (wrapped locally), 1 x 2 (px == 1: corners from the y
    # neighbours), 3 x 1 and 2 x 2 (diagonal neighbours).
    plain = run_model(mpirun, tmp_path_factory, n, "sendrecv", SHORT)
    halo = run_model(mpirun, tmp_path_factory, n, "halo", SHORT)
    assert_same_state(plain, halo, f"halo_exchange vs sendrecv on {n} ranks")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_overlap_exchange_matches_sendrecv(mpirun, tmp_path_factory, n):
    # Non-blocking: the tendencies off the rim computed while the halo is in
    # flight, the rim's after the wait (1 x 2, 3 x 1 and 2 x 2 blocks).
    plain = run_model(mpirun, tmp_path_factory, n, "sendrecv", SHORT)
    overlap = run_model(mpirun, tmp_path_factory, n, "overlap", SHORT)
    assert_same_state(plain, overlap, f"overlap vs sendrecv on {n} ranks")


def test_mpi4jax_backend_gives_the_same_solution(mpirun, tmp_path_factory):
    # The same model code on mpi4jax (an optional install, for the benchmark).
    if importlib.util.find_spec("mpi4jax") is None:  # no import: no MPI_Init here
        pytest.skip("mpi4jax is not installed")
    ours = run_model(mpirun, tmp_path_factory, 2, "sendrecv", SHORT)
    theirs = run_model(mpirun, tmp_path_factory, 2, "sendrecv", SHORT, backend="mpi4jax")
    assert_close_state(ours, theirs, "mpi4jax vs jaxmpi on 2 ranks")


@pytest.mark.parametrize("procs,devices,exchange,layout", [
    # 1 process, a 2 x 1 mesh: the y neighbour is the other device, x wraps.
    (1, 2, "halo", (1, 2)),
    # 1 x 2 processes of 1 x 2 devices: the x neighbours are the process's
    # other device, the y one the other process's device at the same
    # position, the corners its device at the other position.
    (2, 2, "halo", (2, 2)),
    (2, 2, "overlap", (2, 2)),   # ihalo_exchange, computing while in flight
])
def test_devices_per_process_same_as_one_device_per_rank(mpirun, tmp_path_factory,
                                                         procs, devices, exchange, layout):
    # P processes x n devices hold the blocks of P * n one-device ranks: the
    # same float32 operations per cell, so bitwise the same state.
    ranks = run_model(mpirun, tmp_path_factory, procs * devices, exchange, SHORT)
    mesh = run_model(mpirun, tmp_path_factory, procs, exchange, SHORT, devices=devices)
    assert (int(mesh["px"]), int(mesh["py"]), int(mesh["devices"])) == (*layout, devices)
    assert np.isfinite(mesh["final"]).all()
    assert_same_state(ranks, mesh, f"{procs} processes x {devices} devices vs "
                                   f"{procs * devices} ranks, {exchange} exchange")
    # The summary reduces over every block (allreduce with axis_name): the
    # largest |u| exactly, the mean depth to float32 sums' round-off.
    for run in (ranks, mesh):
        got = re.search(r"mean depth (\S+) m, max \|u\| (\S+) m/s", run["stdout"])
        assert got, run["stdout"]
        h, u = run["final"][0], run["final"][1]
        assert np.float32(got[2]) == np.abs(u).max(), (got[0], np.abs(u).max())
        assert abs(float(got[1]) - h.astype(np.float64).mean()) < 1e-4, (got[0], h.mean())


def test_devices_need_a_halo_exchange_on_the_blocks(mpirun):
    job = mpirun(1, "examples/shallow_water.py", "--devices", "2", "--exchange",
                 "sendrecv", "--out", "none", timeout=300)
    assert job.returncode == 2, job
    assert "--devices needs --exchange halo or overlap, got sendrecv" in job.stderr, job


def diagnostics(state, f):
    h, u, v = state.astype(np.float64)
    mass = h.mean()
    energy = (0.5 * f["gravity"] * (h - f["depth"]) ** 2 + 0.5 * h * (u**2 + v**2)).mean()
    # kinetic energy of the departure from the zonal mean flow
    u_eddy = u - u.mean(axis=1, keepdims=True)
    eddy = 0.5 * (u_eddy**2 + v**2).mean()
    return mass, energy, eddy


def test_physics_mass_energy_meander(mpirun, tmp_path_factory):
    f = run_model(mpirun, tmp_path_factory, 2, "sendrecv", LONG)
    assert abs(float(f["days"]) - float(LONG)) < 1e-3
    m0, e0, k0 = diagnostics(f["initial"], f)
    m1, e1, k1 = diagnostics(f["final"], f)
    assert np.isfinite(f["final"]).all()
    # The flux form keeps the mass to float32 round-off.
    assert abs(m1 - m0) / m0 < 1e-5, (m0, m1)
    # No forcing and only viscous loss: the energy may only fall, and slowly.
    assert 0.95 * e0 < e1 <= 1.0001 * e0, (e0, e1)
    # The jet is barotropically unstable: its meander grows, roughly
    # doubling its kinetic energy in half a day.
    assert k1 > 1.5 * k0, (k0, k1)
    # ... while the jet itself survives.
    assert 2.0 < np.abs(f["final"][1]).max() < 4.0


def test_rank_count_that_does_not_split_the_grid(mpirun):
    job = mpirun(5, "examples/shallow_water.py", "--grid", *GRID, "--days", SHORT,
                 "--out", "none", timeout=300)
    assert job.returncode != 0, job
    assert "cannot split the 96 x 48 grid over 5 ranks" in job.stderr, job
