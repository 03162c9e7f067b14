"""Eager operations on sharded jax.Arrays (a NamedSharding over this
process's mesh) outside shard_map: per shard, between the shards at the
same mesh position on every process, the result keeping the argument's
sharding (allgather's new leading axis unsharded, scatter's leading axis
dropped). For an elementwise operation that is the operation on the whole
arrays, so the reference is NumPy over every process's global array; the
meshes list their devices in reverse order on odd ranks."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx
import util
from devutil import DOWN, N, RANK, ROOT, SIZE, UP, make_mesh

several = pytest.mark.skipif(N < 2, reason="needs several devices per process "
                             "(XLA_FLAGS=--xla_force_host_platform_device_count)")


def put(x, mesh, *spec):
    return jax.device_put(x, NamedSharding(mesh, P(*spec)))


def same_sharding(later, y, mesh, spec, what):
    want = NamedSharding(mesh, P(*spec))
    later.true(y.sharding.is_equivalent_to(want, y.ndim),
               f"{what}: sharding {y.sharding}, want {want}")


# (mesh layout, global shape, spec): 1-D; 2-D blocks; 2-D mesh with the
# array split over one axis only (the other axis's devices hold copies).
CASES = [("1d-reversed", (4 * N, 3), ("d",)),
         ("2d-reversed", (6, 4 * N), ("a", "b")),
         ("2d", (2 * N, 2), ("a",))]


@several
@pytest.mark.parametrize("layout,shape,spec", CASES,
                         ids=[f"{c[0]}-{'-'.join(c[2])}" for c in CASES])
def test_eager_sharded_blocking_ops(layout, shape, spec):
    mesh = make_mesh(layout)
    x = put(util.data(RANK, shape, np.float64), mesh, *spec)
    xs = [util.data(r, shape, np.float64) for r in range(SIZE)]
    later = util.Later()
    y = mpx.allreduce(x, MPI.SUM)
    mx, _ = jaxmpi.allreduce(x, MPI.MAX)          # the token API
    g = mpx.allgather(x)
    b = mpx.bcast(x, ROOT)
    # (a message into copies: test_eager_sharded_message_into_copies)
    copies = len(spec) < len(mesh.axis_names)
    s = x if copies else mpx.sendrecv(x, x, DOWN, UP)
    # the root's rows (leading axis unsharded); elsewhere a sharded template
    sc = mpx.scatter(put(np.stack([xs[RANK] * (j + 1) for j in range(SIZE)]),
                         mesh, None, *spec) if RANK == ROOT else x, ROOT)
    later.check(y, np.sum(xs, axis=0), "allreduce")
    same_sharding(later, y, mesh, spec, "allreduce")
    later.check(mx, np.max(xs, axis=0), "allreduce MAX (token API)")
    same_sharding(later, mx, mesh, spec, "allreduce MAX")
    later.check(g, np.stack(xs), "allgather")
    same_sharding(later, g, mesh, (None, *spec), "allgather")
    later.check(b, xs[ROOT], "bcast")
    same_sharding(later, b, mesh, spec, "bcast")
    if not copies:
        later.check(s, np.zeros(shape) if DOWN == MPI.PROC_NULL else xs[DOWN],
                    "sendrecv")
        same_sharding(later, s, mesh, spec, "sendrecv")
    later.check(sc, xs[ROOT] * (RANK + 1), "scatter")
    same_sharding(later, sc, mesh, spec, "scatter")
    later.done()


@several
def test_eager_sharded_message_into_copies():
    """sendrecv eagerly on an array split over one axis of a 2-D mesh and
    copied over the other: every copy gets the peer's shard."""
    mesh = make_mesh("2d")
    shape = (2 * N, 2)
    x = put(util.data(RANK, shape, np.float64), mesh, "a")
    s = mpx.sendrecv(x, x, DOWN, UP)
    later = util.Later()
    later.check(s, np.zeros(shape) if DOWN == MPI.PROC_NULL
                else util.data(DOWN, shape, np.float64), "sendrecv")
    same_sharding(later, s, mesh, ("a",), "sendrecv")
    later.done()


@several
def test_eager_sharded_nonblocking_is_a_clear_error():
    mesh = make_mesh("1d")
    x = put(np.arange(2.0 * N), mesh, "d")
    with pytest.raises(ValueError, match=re.escape(
            "iallreduce: x is an array sharded over %d devices" % N)
            + ".*" + re.escape("call it inside jax.shard_map over the array's mesh")):
        mpx.iallreduce(x, MPI.SUM)
