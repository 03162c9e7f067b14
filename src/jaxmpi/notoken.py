"""jaxmpi operations returning bare results, like mpi4jax >= 0.8.

``send`` and ``barrier`` return None; the non-blocking starts return a
``Request``, and ``wait`` returns its result (None for a request of
``isend`` or ``ibarrier``). ``token=`` is still accepted (and joined to
the order of calls) but never needed. Code written for mpi4jax 0.8 and
later runs with ``import jaxmpi.notoken as mpi4jax``; mpi4jax 0.7's
``from mpi4jax.experimental import notoken`` becomes ``from
jaxmpi.experimental import notoken`` (this same module).
"""

from __future__ import annotations

from . import _core
from ._reductions import (allreduce, exscan, iallreduce, iexscan, ireduce,
                          ireduce_scatter, iscan, reduce, reduce_scatter, scan)
from ._collectives import (allgather, alltoall, barrier, bcast, gather,
                           iallgather, ialltoall, ibarrier, ibcast, igather,
                           iscatter, scatter)
from ._vcollectives import (allgatherv, alltoallv, gatherv, iallgatherv,
                            ialltoallv, igatherv, iscatterv, scatterv)
from ._p2p import (ineighbor_exchange, irecv, isend, isendrecv,
                   neighbor_exchange, recv, send, sendrecv)
from ._topology import (halo_exchange, ihalo_exchange, ineighbor_alltoallv,
                        neighbor_alltoallv)
from ._wait import wait, waitall
from ._region import jit
from ._requests import Request
from ._devices import DeviceCart


def has_cuda_support() -> bool:
    """Whether jaxmpi's C core was built with its CUDA path.

    GPU arrays work when this is True and a CUDA driver and JAX's CUDA plugin
    are present (docs/gpu.md). Like mpi4jax's, it says nothing of whether a GPU
    is visible: ``python -m jaxmpi`` shows the driver.

    Returns:
        bool: True: every build has the CUDA handlers (no toolkit needed).

    Example:
        Every build has the CUDA path:

            jaxmpi.has_cuda_support()       # True
    """
    return _core.get().cuda_built


# The public names, written once (a literal list, which the documentation's
# reader can follow): jaxmpi (the token API) is made from it (adding an
# operation: docs/design.md).
__all__ = ["allgather", "allreduce", "alltoall", "barrier", "bcast", "gather",
           "neighbor_exchange", "recv", "reduce", "scan", "scatter", "send",
           "sendrecv", "has_cuda_support", "halo_exchange",
           "neighbor_alltoallv", "allgatherv", "gatherv", "scatterv",
           "alltoallv", "reduce_scatter", "exscan", "isend", "irecv",
           "isendrecv", "iallreduce", "ibcast", "ibarrier", "ireduce", "iscan",
           "igather", "iscatter", "iallgather", "ialltoall",
           "ineighbor_exchange", "iexscan", "ireduce_scatter", "iallgatherv",
           "igatherv", "iscatterv", "ialltoallv", "ihalo_exchange",
           "ineighbor_alltoallv", "wait", "waitall", "Request", "jit",
           "DeviceCart"]
