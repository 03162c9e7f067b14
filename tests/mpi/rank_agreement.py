"""The pytest hook both MPI test directories share: after each test the
ranks agree on the outcome, so a failure on one rank fails it everywhere
(imported into each conftest.py)."""

import pytest
from mpi4py import MPI


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when != "call":
        return
    world = MPI.COMM_WORLD
    flags = world.allgather(bool(rep.failed))
    others = [r for r, f in enumerate(flags) if f and r != world.Get_rank()]
    if others and not rep.failed:
        rep.outcome = "failed"
        rep.longrepr = f"failed on rank(s) {others}"
