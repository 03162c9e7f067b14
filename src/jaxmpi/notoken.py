"""jaxmpi operations returning bare results, like mpi4jax >= 0.8.

``send`` and ``barrier`` return None; the non-blocking starts return a
``Request``, and ``wait`` returns its result (None for a request of
``isend`` or ``ibarrier``). ``token=`` is still accepted (and
joined to the order of calls) but never needed. Code written for mpi4jax
>= 0.8 runs with ``import jaxmpi.notoken as mpi4jax``; mpi4jax 0.7's
``from mpi4jax.experimental import notoken`` becomes ``from
jaxmpi.experimental import notoken`` (this same module).
"""

from . import _api, _nonblocking
from ._api import *  # noqa: F401,F403  (_api.__all__: the blocking ops)
from ._nonblocking import *  # noqa: F401,F403  (the starts, wait, Request)
from ._region import jit

__all__ = [*_api.__all__, *_nonblocking.__all__, "jit"]
