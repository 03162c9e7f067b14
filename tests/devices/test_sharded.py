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
@pytest.mark.parametrize("layout,shape,spec", CASES,
                         ids=[f"{c[0]}-{'-'.join(c[2])}" for c in CASES])
def test_eager_sharded_nonblocking_ops(layout, shape, spec):
    """The starts eagerly on sharded arrays, several in flight with work
    between, waited in another order than started: per shard, as the
    blocking ops, each result keeping the argument's sharding."""
    mesh = make_mesh(layout)
    x = put(util.data(RANK, shape, np.float64), mesh, *spec)
    xs = [util.data(r, shape, np.float64) for r in range(SIZE)]
    copies = len(spec) < len(mesh.axis_names)
    r_sum = mpx.iallreduce(x, MPI.SUM)
    r_gather = mpx.iallgather(x)
    r_bcast, _ = jaxmpi.ibcast(x, ROOT)            # the token API
    if not copies:
        r_recv = mpx.irecv(put(np.zeros(shape), mesh, *spec), DOWN, tag=3)
        r_send = mpx.isend(x * 2, UP, tag=3)
        r_pair = mpx.isendrecv(x, put(np.zeros(shape), mesh, *spec), DOWN, UP,
                               sendtag=4, recvtag=4)
    busy = (x * 3).block_until_ready()             # work while they travel
    later = util.Later()
    if not copies:
        got, sent, pair = mpx.waitall([r_recv, r_send, r_pair])
        down = np.zeros(shape) if DOWN == MPI.PROC_NULL else xs[DOWN]
        later.check(got, down * 2, "irecv/isend")
        later.true(sent is None, f"isend's wait gave {sent!r}")
        same_sharding(later, got, mesh, spec, "irecv")
        later.check(pair, down, "isendrecv")
        same_sharding(later, pair, mesh, spec, "isendrecv")
    b = mpx.wait(r_bcast)
    g = mpx.wait(r_gather)
    y = mpx.wait(r_sum)
    later.check(y, np.sum(xs, axis=0), "iallreduce")
    same_sharding(later, y, mesh, spec, "iallreduce")
    later.check(g, np.stack(xs), "iallgather")
    same_sharding(later, g, mesh, (None, *spec), "iallgather")
    later.check(b, xs[ROOT], "ibcast")
    same_sharding(later, b, mesh, spec, "ibcast")
    later.check(busy, xs[RANK] * 3, "the work between")
    later.check(x, xs[RANK], "the input, after its requests")
    later.done()


@several
def test_eager_sharded_halo_start_matches_the_blocking_exchange():
    """ihalo_exchange eagerly on an array sharded over a 2-D mesh, on a 1-D
    Cartesian communicator of the processes (non-periodic): each device
    exchanges with the same position of the neighbouring processes, as
    halo_exchange does inside shard_map."""
    mesh = make_mesh("2d-reversed")
    a, b = mesh.shape["a"], mesh.shape["b"]
    cart = MPI.COMM_WORLD.Create_cart([SIZE], periods=[False])
    try:
        x = put(util.data(RANK, (5 * a, 4 * b), np.float32), mesh, "a", "b")
        req = mpx.ihalo_exchange(x, cart, width=1)
        y = mpx.wait(req)
        ref = jax.jit(jax.shard_map(
            lambda u: mpx.halo_exchange(u, cart, width=1), mesh=mesh,
            in_specs=P("a", "b"), out_specs=P("a", "b")))(x)
        later = util.Later()
        later.check(y, np.asarray(ref), "ihalo_exchange")
        same_sharding(later, y, mesh, ("a", "b"), "ihalo_exchange")
        later.done()
    finally:
        cart.Free()


@several
def test_eager_sharded_request_misuse():
    """Waited twice, and dropped without a wait: the errors of a request on
    one device."""
    mesh = make_mesh("1d")
    x = put(np.arange(2.0 * N), mesh, "d")
    req = mpx.iallreduce(x, MPI.SUM)
    mpx.wait(req)
    with pytest.raises(RuntimeError, match="already waited"):
        mpx.wait(req)
    mpx.iallreduce(x, MPI.SUM)                     # dropped at once
    import gc
    gc.collect()
    with pytest.raises(RuntimeError, match="was never waited"):
        mpx.allreduce(x, MPI.SUM)
    with pytest.raises(ValueError, match="status= is not supported"):
        mpx.irecv(x, DOWN, status=MPI.Status())
