"""jaxmpi operations returning bare results, like mpi4jax >= 0.8.

``send`` and ``barrier`` return None. ``token=`` is still accepted (and
joined to the order of calls) but never needed.
"""

from ._api import (  # noqa: F401
    allgather,
    allreduce,
    alltoall,
    barrier,
    bcast,
    gather,
    has_cuda_support,
    neighbor_exchange,
    recv,
    reduce,
    scan,
    scatter,
    send,
    sendrecv,
)

__all__ = [
    "allgather", "allreduce", "alltoall", "barrier", "bcast", "gather",
    "has_cuda_support", "neighbor_exchange", "recv", "reduce", "scan", "scatter", "send", "sendrecv",
]
