"""Set-up for the GPU tests, run under mpiexec like tests/mpi (any rank count,
all ranks may share one GPU):

    XLA_PYTHON_CLIENT_PREALLOCATE=false mpiexec -n 2 python -m pytest tests/gpu

Every test is skipped, with the reason, where JAX has no GPU (no CUDA plugin,
no NVIDIA driver, or JAX_PLATFORMS=cpu as ./run sets). After each test the
ranks agree on the outcome, so a failure on one rank fails it everywhere.
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


def _why_no_gpu():
    try:
        backend = jax.default_backend()
    except RuntimeError as e:  # no backend at all
        return f"JAX has no backend: {e}"
    if backend != "gpu":
        return (f"no GPU: JAX's default backend is {backend!r} (needs an NVIDIA "
                "GPU, its driver and jax[cuda]; JAX_PLATFORMS="
                f"{os.environ.get('JAX_PLATFORMS', '')!r})")
    return None


NO_GPU = _why_no_gpu()


def pytest_collection_modifyitems(config, items):
    if WORLD.Get_rank() != 0:
        config.option.verbose = -1
    if NO_GPU:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=NO_GPU))


def pytest_report_header(config):
    devices = "none" if NO_GPU else ", ".join(str(d) for d in jax.devices())
    return (f"rank {WORLD.Get_rank()} of {WORLD.Get_size()}, MPI "
            f"{MPI.get_vendor()}, jax {jax.__version__}, devices: {devices}")
