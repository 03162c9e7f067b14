"""Plain JAX programs across processes, their collectives over jaxmpi's MPI
layer for XLA (docs/native.md). Run under the route, at any process count
(one CPU device each):

    mpiexec -n 3 python -m jaxmpi.distributed -m pytest -q tests/native

Every process runs every test in the same order; after each test the
processes agree on its outcome (tests/mpi/rank_agreement.py), so a failure
on one process fails the test everywhere.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "mpi"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
# The plain JAX program's own start: no arguments (the route supplies them).
jax.distributed.initialize()

from mpi4py import MPI  # noqa: E402

from rank_agreement import pytest_runtest_makereport  # noqa: E402,F401  (the hook)

WORLD = MPI.COMM_WORLD


def pytest_report_header(config):
    return (f"process {jax.process_index()} of {jax.process_count()}, "
            f"{jax.device_count()} device(s), collectives "
            f"{jax.config.jax_cpu_collectives_implementation}, MPI "
            f"{MPI.get_vendor()}, jax {jax.__version__}")


def pytest_collection_modifyitems(config, items):
    # Only process 0 prints progress; the others stay quiet.
    if WORLD.Get_rank() != 0:
        config.option.verbose = -1
