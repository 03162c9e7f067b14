"""Tests that run MPI jobs across simulated hosts (scripts/multihost.py):
network namespaces joined by a bridge, one launcher daemon per host, TCP on
eth0 between hosts. Run with plain pytest as root, not under mpiexec:

    .venv/bin/python -m pytest -q tests/multihost

Every test is parametrized by MPI:
  mpich    the venv running pytest (the PyPI mpich wheel, hydra's mpiexec)
  openmpi  the venv in $JAXMPI_OPENMPI_VENV (default .venv-openmpi), with
           mpi4py on Debian's Open MPI: make it with
           `JAXMPI_MPI=system JAXMPI_VENV=.venv-openmpi ./run setup`
An MPI without its venv is skipped with the reason; so is everything when
not root or without network namespaces.

Fixtures: `mpi` (the MPI under test), `cluster` (a factory: cluster(n) brings
up n hosts for this test and tears them down after it, whatever happens)
and `run_across` (launch a command with ranks spread over hosts and check
the launcher's outcome).
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostsetup import RANK_ENV, ROOT, multihost  # noqa: E402

_REASON = multihost.can_run()


def _venv_python(kind):
    if kind == "mpich":
        return sys.executable
    venv = os.environ.get("JAXMPI_OPENMPI_VENV", os.path.join(ROOT, ".venv-openmpi"))
    return os.path.join(os.path.abspath(venv), "bin", "python")


_MPIS = {}


def find_mpi(kind):
    """The Mpi for kind, or pytest.skip with the reason it is missing."""
    if _REASON:
        pytest.skip(_REASON)
    if kind not in _MPIS:
        python = _venv_python(kind)
        found = multihost.Mpi.detect(python) if os.path.exists(python) else None
        if found is not None and found.kind != kind:
            found = None
        _MPIS[kind] = found
        if found is None:
            _MPIS[kind] = (f"no venv with {kind} at {python}" + (
                "" if kind == "mpich" else
                ": make one with JAXMPI_MPI=system JAXMPI_VENV=.venv-openmpi ./run setup"
                " (or set JAXMPI_OPENMPI_VENV)"))
    if isinstance(_MPIS[kind], str):
        pytest.skip(_MPIS[kind])
    return _MPIS[kind]


@pytest.fixture(params=["mpich", "openmpi"])
def mpi(request):
    return find_mpi(request.param)


@pytest.fixture
def cluster():
    """cluster(n): n simulated hosts, torn down at the end of the test."""
    if _REASON:
        pytest.skip(_REASON)
    made = []

    def make(n):
        c = multihost.Cluster(n)
        c.__enter__()
        made.append(c)
        return c

    yield make
    errors = []
    for c in reversed(made):  # each restores the signal handlers it found
        try:
            c.__exit__(None, None, None)
        except multihost.HarnessError as e:
            errors.append(str(e))
    assert not errors, errors


@pytest.fixture
def run_across(cluster, mpi):
    """run_across(hosts, ranks_per_host, argv, timeout=..., env=...) -> Result.

    Brings up `hosts` simulated hosts, launches argv (first word "python":
    the MPI's venv interpreter) from the repository root with ranks in
    blocks of ranks_per_host per host, and returns the launcher's outcome
    with every host's eth0 byte counters. The launch is killed after
    timeout seconds (Result.timed_out)."""

    def run(hosts, ranks_per_host, argv, timeout=600, env=None, **kw):
        c = cluster(hosts)
        full_env = dict(RANK_ENV)
        full_env.update(env or {})
        res = c.launch(argv, mpi, ranks_per_host=ranks_per_host, env=full_env,
                       timeout=timeout, cwd=ROOT, **kw)
        res.cluster = c
        return res

    return run


def pytest_report_header(config):
    if _REASON:
        return f"multihost: skipped: {_REASON}"
    return "multihost: network namespaces available"
