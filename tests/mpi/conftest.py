"""Shared set-up for tests run under mpiexec at any rank count.

Every rank runs the same tests in the same order. After each test the ranks
agree on the outcome, so a failure on one rank fails the test everywhere.
"""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from mpi4py import MPI  # noqa: E402

import jaxmpi  # noqa: E402,F401
from rank_agreement import pytest_runtest_makereport  # noqa: E402,F401

WORLD = MPI.COMM_WORLD


def pytest_report_header(config):
    return (f"rank {WORLD.Get_rank()} of {WORLD.Get_size()}, "
            f"MPI {MPI.get_vendor()}, jax {jax.__version__}")


@pytest.fixture(params=["jax.jit", "jaxmpi.jit"])
def jit(request):
    """The test through jax.jit (the ordered effect's runtime token between
    dispatches, JAX's Python dispatch) and through jaxmpi.jit (an
    effect-free region: JAX's C++ dispatch, the device's queue and the
    region's marker keep the order)."""
    return jax.jit if request.param == "jax.jit" else jaxmpi.jit


@pytest.fixture
def rank():
    return WORLD.Get_rank()


@pytest.fixture
def size():
    return WORLD.Get_size()


def pytest_collection_modifyitems(config, items):
    # Only rank 0 prints progress; the others stay quiet.
    if WORLD.Get_rank() != 0:
        config.option.verbose = -1
