"""Caches of compiled calls, keyed by their static arguments: a hashable
stand-in of each argument (``static``) and a bounded cache (``cached``),
for the eager calls that compile one program per operation and arguments
(pytrees as one region, sharded arrays per shard, their starts and
waits)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

# Entries a cache keeps; past them it starts afresh (a program that keeps
# changing shapes or arguments recompiles anyway).
LIMIT = 256


def static(value):
    """A hashable stand-in of a static argument: mpi4py's handles (not
    hashable) as their type and handle, sequences and NumPy arrays as a
    tuple of their items' stand-ins and their shape; anything else as it
    is. TypeError where it is not hashable."""
    if isinstance(value, (MPI.Comm, MPI.Op, MPI.Datatype)):
        return (type(value).__name__, MPI._handleof(value))
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(static(x) for x in np.asarray(value, object).ravel()) + (
            np.shape(value),)
    hash(value)
    return value


def cached(cache: dict, key, build):
    """``cache[key]``, made by ``build()`` on a miss (a key of None is not
    cached); the cache is emptied when it passes LIMIT entries."""
    hit = cache.get(key) if key is not None else None
    if hit is None:
        hit = build()
        if key is not None:
            if len(cache) >= LIMIT:
                cache.clear()
            cache[key] = hit
    return hit
