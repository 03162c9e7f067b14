"""jaxmpi operations returning bare results, like mpi4jax >= 0.8.

``send`` and ``barrier`` return None; the non-blocking starts return a
``Request``, and ``wait`` returns its result (None for a request of
``isend`` or ``ibarrier``). ``token=`` is still accepted (and
joined to the order of calls) but never needed. Code written for mpi4jax
>= 0.8 runs with ``import jaxmpi.notoken as mpi4jax``; mpi4jax 0.7's
``from mpi4jax.experimental import notoken`` becomes ``from
jaxmpi.experimental import notoken`` (this same module).
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
from ._api import exscan, reduce_scatter  # noqa: F401

from ._nonblocking import (  # noqa: F401
    Request,
    iallgather,
    iallreduce,
    ialltoall,
    igather,
    ineighbor_exchange,
    ireduce,
    iscan,
    iscatter,
    ibarrier,
    ibcast,
    irecv,
    isend,
    isendrecv,
    wait,
    waitall,
)

__all__ = [
    "Request", "iallgather", "iallreduce", "ialltoall", "igather",
    "ineighbor_exchange", "ireduce", "iscan", "iscatter", "ibarrier", "ibcast", "irecv", "isend",
    "isendrecv", "wait", "waitall",
    "allgather", "allreduce", "alltoall", "barrier", "bcast", "gather",
    "has_cuda_support", "neighbor_exchange", "recv", "reduce", "scan", "scatter", "send", "sendrecv",
    "reduce_scatter", "exscan",
]
