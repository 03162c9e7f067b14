"""jaxmpi with ranks on several (simulated) hosts, over TCP on eth0.

Each host is a network namespace with its own hostname (scripts/
multihost.py); one launcher daemon runs per host, so the MPI sees them as
distinct nodes: Open MPI uses vader within a host and tcp between hosts;
MPICH uses ch4's shared memory within a host and, between hosts, OFI's tcp
provider on eth0 (the suites) or UCX restricted to tcp on eth0 (the probe
too; unrestricted, UCX finds every process on one kernel "local" and uses
shared memory across the namespaces: 18 KB on eth0 for an 8 MB allreduce
job, measured; and MPICH 5.0.2's UCX netmod hangs in loops of
MPI_ANY_SOURCE receives, which test_p2p.py makes: docs/cluster.md). The byte counters of every host's eth0
prove that the traffic crossed the links:

  * the probe (probe.py) moves a known volume and every host must send and
    receive at least that lower bound;
  * the op and autodiff suites (tests/mpi) must pass unchanged and move at
    least SUITE_FLOOR bytes each way on every host's eth0 (they moved about
    10 MB each way at 2 hosts x 1 rank; a job that only starts and ends
    moves about 20 KB: the launcher's and MPI_Init's control traffic);
  * the shallow-water model gives bitwise the state of the same rank count
    on one host, and its halo exchanges cross the links.
"""

import importlib.util
import json
import os
import re

import numpy as np
import pytest
from hostsetup import RANK_ENV

def _suite(name):
    """The files of a suite of tests/mpi (tests/suites.py)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location(
        "suites", os.path.join(root, "tests", "suites.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.files(name)


# Launched across hosts: the op and autodiff suites of tests/mpi, and the
# newer operations (variable counts, reduce_scatter and exscan, halo
# exchange on Cartesian communicators, pytrees: 10 s more at 2 ranks): the
# files whose SUITES name "across_hosts".
SUITE = _suite("across_hosts")
SUITE_FLOOR = 1 << 20  # bytes each way on every host's eth0
PYTEST = ["-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "--color=no",
          "--timeout-method=thread", "--timeout=300"]
# (hosts, ranks per host); JAXMPI_MULTIHOST_LAYOUTS="2x1,2x2,3x1,3x2" (the
# default; CI runs 2x2) chooses the op/autodiff suite's: each launch took
# 2.5-13 min on the shared 2-core machine (load 3 to 36); 3x2 (6 ranks)
# 5.7-6 min with the newer operations.
LAYOUTS = [(2, 1), (2, 2), (3, 1)]
LAYOUT_IDS = [f"{h}hosts-x{r}" for h, r in LAYOUTS]
# An item "KIND:HxR" is that layout for one MPI only (mpich, openmpi): CI
# runs "mpich:2x2,openmpi:2x1", the suites at 4 ranks with MPICH and over
# Open MPI's TCP at 2 (its 2 x 2 took 326 s of multihost's 1013 beside the
# other configurations, MPICH's 222).
def _layouts(spec):
    out = {}
    for item in spec.split(","):
        kind, _, layout = item.strip().rpartition(":")
        if layout:
            key = tuple(int(v) for v in layout.split("x"))
            out.setdefault(key, set()).add(kind or "any")
    return out


SUITE_LAYOUT_KINDS = _layouts(os.environ.get("JAXMPI_MULTIHOST_LAYOUTS",
                                             "2x1,2x2,3x1,3x2"))
SUITE_LAYOUTS = list(SUITE_LAYOUT_KINDS)


def placements(stdout):
    """rank -> the probe's line for it."""
    out = {}
    # (hydra may join two ranks' lines into one)
    for m in re.finditer(r"probe (\{[^{}]*\})", stdout):
        d = json.loads(m.group(1))
        out[d["rank"]] = d
    return out


@pytest.mark.parametrize("netmod", ["ofi", "ucx"])
@pytest.mark.parametrize("hosts,per_host", LAYOUTS, ids=LAYOUT_IDS)
def test_ranks_on_distinct_hosts_and_traffic_crosses(run_across, mpi, hosts, per_host, netmod):
    # netmod: MPICH's (the harness's default is OFI; UCX is the wheel's own).
    if mpi.kind != "mpich" and netmod != "ofi":
        pytest.skip("MPICH's netmods only")
    count, iters = 1 << 17, 4  # 1 MiB of float64 per message
    env = {"MPIR_CVAR_CH4_NETMOD": netmod} if mpi.kind == "mpich" else {}
    res = run_across(hosts, per_host, ["python", "tests/multihost/probe.py", str(count),
                                       str(iters)], timeout=300, env=env)
    assert res.returncode == 0 and not res.timed_out, res
    where = placements(res.stdout)
    n = hosts * per_host
    assert sorted(where) == list(range(n)), res
    for r, d in where.items():
        host = r // per_host + 1  # blocks of per_host ranks per host
        assert d["size"] == n
        assert d["hostname"] == f"jmh{host}", (r, d)
        assert d["processor"] == f"jmh{host}", (r, d)
    # Ranks share a network namespace exactly when they share a host.
    for a in where:
        for b in where:
            same_host = a // per_host == b // per_host
            assert (where[a]["netns"] == where[b]["netns"]) == same_host, (a, b, where)
    # See probe.py: every host sends and receives at least 16 count iters bytes.
    need = 16 * count * iters
    for h in range(1, hosts + 1):
        moved = res.eth0(h)
        assert moved["rx"] >= need and moved["tx"] >= need, (h, moved, need, res)


@pytest.mark.parametrize("hosts,per_host", SUITE_LAYOUTS,
                         ids=[f"{h}hosts-x{r}" for h, r in SUITE_LAYOUTS])
def test_op_and_autodiff_suites_across_hosts(run_across, mpi, hosts, per_host):
    if not SUITE_LAYOUT_KINDS[hosts, per_host] & {"any", mpi.kind}:
        pytest.skip(f"{hosts}x{per_host} is not among JAXMPI_MULTIHOST_LAYOUTS "
                    f"for {mpi.kind}")
    res = run_across(hosts, per_host, ["python", *PYTEST, *SUITE], timeout=1500)
    assert res.returncode == 0 and not res.timed_out, res
    m = re.search(r"(\d+) passed", res.stdout)
    assert m and int(m.group(1)) > 100, res
    assert not re.search(r"\d+ (failed|error)", res.stdout), res
    for h in range(1, hosts + 1):
        moved = res.eth0(h)
        assert moved["rx"] >= SUITE_FLOOR and moved["tx"] >= SUITE_FLOOR, (h, moved, res)


# tests/devices at 2 hosts x 1 process x 2 forced host devices: every device
# meets the device at its mesh position on the other host, over TCP (with
# MPICH: 32 passed, 1 xfailed in 46 s, 1.67 MB each way on each host's eth0;
# load 16 on the shared 2-core machine).
DEVICES_FLOOR = 1 << 20  # bytes each way on every host's eth0


def test_several_devices_per_process_across_hosts(run_across):
    res = run_across(2, 1, ["python", *PYTEST, "tests/devices"], timeout=1500,
                     env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2",
                          "JAX_ENABLE_COMPILATION_CACHE": "false"})
    assert res.returncode == 0 and not res.timed_out, res
    m = re.search(r"(\d+) passed", res.stdout)
    assert m and int(m.group(1)) >= 30, res
    assert not re.search(r"\d+ (failed|error)", res.stdout), res
    # 2 devices per process: no test of the suite skipped for lack of them
    assert not re.search(r"\d+ skipped", res.stdout), res
    for h in (1, 2):
        moved = res.eth0(h)
        assert moved["rx"] >= DEVICES_FLOOR and moved["tx"] >= DEVICES_FLOOR, (h, moved, res)


GRID = ("96", "48")
DAYS = "0.05"  # 216 time steps


def shallow_water(c, mpi, per_host, out, env, via="mpiexec"):
    res = c.launch(["python", "examples/shallow_water.py", "--grid", *GRID, "--days", DAYS,
                    "--out", out], mpi, ranks_per_host=per_host, env=env, timeout=600,
                   cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                       os.path.abspath(__file__)))), via=via)
    assert res.returncode == 0 and not res.timed_out, res
    with np.load(out) as f:
        return res, {k: f[k] for k in f.files}


# The one-host run of the model per (MPI, ranks): the reference of every
# comparison with a multi-host run, here and in test_slurm.py (made once per
# session: each run costs 20-40 s of the CI's multihost minutes).
_ONE_HOST = {}


def one_host_reference(cluster, mpi, n, out):
    key = (mpi.kind, n)
    if key not in _ONE_HOST:
        _ONE_HOST[key] = shallow_water(cluster(1), mpi, n, out, RANK_ENV)[1]
    return _ONE_HOST[key]


@pytest.mark.parametrize("hosts,per_host", [(2, 1), (2, 2), (3, 1)],
                         ids=["2hosts-x1", "2hosts-x2", "3hosts-x1"])
def test_shallow_water_across_hosts_equals_one_host(cluster, mpi, hosts, per_host, tmp_path):
    n = hosts * per_host
    here = one_host_reference(cluster, mpi, n, str(tmp_path / "one.npz"))
    many = cluster(hosts)
    res, there = shallow_water(many, mpi, per_host, str(tmp_path / "many.npz"), RANK_ENV)
    assert int(there["ranks"]) == n and (int(there["px"]), int(there["py"])) == (
        {2: (1, 2), 3: (3, 1), 4: (2, 2)}[n])
    assert np.isfinite(there["final"]).all()
    assert sorted(here) == sorted(there)
    for k in here:
        assert here[k].dtype == there[k].dtype and here[k].shape == there[k].shape, k
        assert np.array_equal(here[k], there[k]), (
            f"{k} differs across hosts: up to "
            f"{np.abs(here[k].astype(np.float64) - there[k]).max():g}")
    # Each step sends at least one halo row or column of h, u and v (float32)
    # across the boundary between the hosts' blocks: at least 200 steps x
    # 3 fields x 4 bytes x the shorter block side, each way.
    nx, ny = int(GRID[0]), int(GRID[1])
    px, py = int(there["px"]), int(there["py"])
    need = 200 * 3 * 4 * min(nx // px, ny // py)
    for h in range(1, hosts + 1):
        moved = res.eth0(h)
        assert moved["rx"] >= need and moved["tx"] >= need, (h, moved, need)


def test_hosts_benchmark_compares_one_host_with_two(tmp_path):
    """benchmarks/hosts.py: run.py's jobs on one host, then across two, and
    the summary line per op and size (MPICH, the venv running pytest)."""
    import subprocess
    import sys

    from hostsetup import ROOT, multihost
    if multihost.can_run():
        pytest.skip(multihost.can_run())
    r = subprocess.run([sys.executable, "benchmarks/hosts.py", "--hosts", "2",
                        "--outdir", str(tmp_path), "--quick", "--sizes", "4,65536",
                        "--impls", "c,jaxmpi", "--ops", "sendrecv", "--check"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [w for w in (line.split() for line in r.stdout.splitlines())
            if len(w) == 9 and w[0] == "sendrecv" and w[1].isdigit()]
    assert [int(w[1]) for w in rows] == [4, 65536], r.stdout[-3000:]
    # the two-host layout's traffic crossed eth0 (at least the 64 KiB messages)
    tx = [int(m) for m in re.findall(r"jmh\d eth0: tx (\d+) B", r.stdout)]
    assert len(tx) == 2 and min(tx) >= 65536, r.stdout[-3000:]
