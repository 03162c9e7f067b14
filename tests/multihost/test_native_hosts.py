"""Plain JAX programs across simulated hosts over jaxmpi's MPI layer for
XLA: `python -m jaxmpi.distributed` under each MPI's own launcher and under
Slurm's srun, with PyPI's MPICH and Debian's Open MPI. The coordinator is
rank 0's address on eth0 (its host name resolves there; 127.0.0.1 would
fail across hosts), every all-reduce is right, and the traffic of XLA's
collectives crossed the links (eth0's byte counters: far more than JAX's
coordination service moves)."""

import json
import re

import pytest
from hostsetup import RANK_ENV, ROOT
from test_across_hosts import PYTEST
from test_slurm import slurm_cluster  # noqa: F401 (the fixture)

ROUTE = ["python", "-m", "jaxmpi.distributed"]
COUNT, ITERS = 1 << 19, 4  # 4 MiB of float64 per process, 4 all-reduces


def lines(res):
    return {d["process"]: d for d in (
        json.loads(m.group(1)) for m in re.finditer(r"native (\{[^{}]*\})",
                                                   res.stdout))}


def check_probe(res, hosts):
    assert res.returncode == 0 and not res.timed_out, res
    found = lines(res)
    assert sorted(found) == list(range(hosts)), res
    coordinator = found[0]["coordinator"]
    for p, d in found.items():
        assert d["ok"] and d["processes"] == hosts, (p, d)
        assert d["hostname"] == f"jmh{p + 1}", (p, d)
        assert d["coordinator"] == coordinator, found
        assert d["native_calls"] >= ITERS, (p, d)
    # rank 0's address on the hosts' network, not loopback
    assert re.fullmatch(r"192\.0\.2\.1:\d+", coordinator), coordinator
    # each all-reduce moves at least the payload into and out of a host
    need = COUNT * 8 * ITERS
    for h in range(1, hosts + 1):
        moved = res.eth0(h)
        assert moved["rx"] >= need and moved["tx"] >= need, (h, moved, need)


def test_plain_jax_across_hosts(run_across):
    res = run_across(2, 1, [*ROUTE, "tests/multihost/native_probe.py",
                            str(COUNT), str(ITERS)], timeout=300)
    check_probe(res, 2)


def test_plain_jax_under_srun(slurm_cluster, mpi):  # noqa: F811
    c = slurm_cluster(2)
    res = c.launch([*ROUTE, "tests/multihost/native_probe.py", str(COUNT),
                    str(ITERS)], mpi, ranks_per_host=1, env=RANK_ENV,
                   timeout=300, cwd=ROOT, via="srun")
    check_probe(res, 2)


def test_native_suite_across_hosts(run_across):
    res = run_across(2, 1, [*ROUTE, *PYTEST, "tests/native"], timeout=900)
    assert res.returncode == 0 and not res.timed_out, res
    summaries = [int(n) for n in re.findall(r"(\d+) passed", res.stdout)]
    assert summaries and min(summaries) >= 25, res
    assert not re.search(r"\d+ (failed|error)", res.stdout), res
