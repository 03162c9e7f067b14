"""Set-up for the tests of several devices per process, run under mpiexec
with forced host devices, at any process count P and devices per process n:

    XLA_FLAGS=--xla_force_host_platform_device_count=4 JAX_PLATFORMS=cpu \\
      mpiexec -n 2 python -m pytest -q tests/devices

P comes from MPI, n from jax.device_count() (./run runs the layouts of
JAXMPI_DEVICE_LAYOUTS). Every rank runs every test in the same order; after
each test the ranks agree on its outcome (tests/mpi/rank_agreement.py), so a
failure on one rank fails the test everywhere.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "mpi"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import pytest  # noqa: E402
from mpi4py import MPI  # noqa: E402

import jaxmpi  # noqa: E402,F401
from rank_agreement import pytest_runtest_makereport  # noqa: E402,F401

WORLD = MPI.COMM_WORLD


def pytest_report_header(config):
    return (f"rank {WORLD.Get_rank()} of {WORLD.Get_size()} x "
            f"{jax.device_count()} device(s) ({jax.default_backend()}), "
            f"MPI {MPI.get_vendor()}, jax {jax.__version__}")


def pytest_collection_modifyitems(config, items):
    # Only rank 0 prints progress; the others stay quiet.
    if WORLD.Get_rank() != 0:
        config.option.verbose = -1


@pytest.fixture(params=["jax.jit", "jaxmpi.jit"])
def jit(request):
    """The program through jax.jit (the ordered effect's runtime token per
    device) and through jaxmpi.jit (an effect-free region, bounded in
    flight)."""
    return jax.jit if request.param == "jax.jit" else jaxmpi.jit
