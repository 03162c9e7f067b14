"""Meshes, per-position data and NumPy references for tests/devices.

A position is a device's flat index in the mesh. Every test feeds the
shard at position k of process r data of its own (``pdata``: endpoint
r * n + k), so a shard paired with the wrong position or process, or a
result written to the wrong shard, gives other values. The references are
NumPy over those inputs (tests/mpi/util.py's ``data`` and ``reduce_ref``),
never jaxmpi.
"""

import jax
import numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from mpi4py import MPI

import util  # tests/mpi/util.py (conftest puts it on the path)

WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
N = jax.device_count()  # devices per process (no jax.distributed here)
ROOT = SIZE - 1  # not 0: a root taken as 0 fails from 2 processes on
# The non-periodic line of processes (util's UP/DOWN: PROC_NULL at the ends).
UP, DOWN = util.UP, util.DOWN


def factor2(n):
    """(a, b) with a * b == n and a >= b, as square as possible."""
    b = int(np.sqrt(n))
    while n % b:
        b -= 1
    return n // b, b


def devices(order):
    """This process's devices: "same" on every process, or "reversed" on
    odd ranks (position k is another device there: a communicator chosen by
    device id instead of position pairs the wrong shards)."""
    devs = list(jax.devices())
    if order == "reversed" and RANK % 2:
        devs = devs[::-1]
    return devs


def mesh1(order="reversed"):
    return Mesh(np.array(devices(order)), ("d",))


def mesh2(order="reversed", shape=None):
    shape = shape or factor2(N)
    return Mesh(np.array(devices(order)).reshape(shape), ("a", "b"))


def make_mesh(layout):
    """"1d", "1d-reversed", "2d", "2d-reversed" (odd ranks' devices in
    reverse order), "2d-t" (the 2-D mesh's transposed shape)."""
    order = "reversed" if layout.endswith("-reversed") else "same"
    if layout.startswith("1d"):
        return mesh1(order)
    if layout == "2d-t":
        return mesh2("same", factor2(N)[::-1])
    return mesh2(order)


def spec(mesh):
    """Axis 0 split over every mesh axis, in the mesh's order: block k
    (position k: flat index, row-major) is the k-th entry of axis 0."""
    return P(tuple(mesh.axis_names))


def position(mesh):
    """The device's flat index in the mesh (traced, inside shard_map)."""
    pos = 0
    for name in mesh.axis_names:
        pos = pos * mesh.shape[name] + jax.lax.axis_index(name)
    return pos


def box(tree):
    return jax.tree_util.tree_map(lambda a: a[None], tree)


def unbox(tree):
    return jax.tree_util.tree_map(lambda a: a[0], tree)


def spmd(body, mesh, jit=jax.jit, nargs=1):
    """jit(shard_map(body)) over every mesh axis. Each argument and result
    is a pytree of "boxed" arrays: axis 0 has one entry per position (the
    process's array of shape (N, *s), see ``stack``); body sees and returns
    the device's entry (shape s, any shape, scalars too)."""
    s = spec(mesh)

    def boxed(*args):
        return box(body(*unbox(args)))

    return jit(jax.shard_map(boxed, mesh=mesh, in_specs=(s,) * nargs,
                             out_specs=s))


def eid(rank, pos):
    """The endpoint: process rank x devices + position."""
    return rank * N + pos


def pdata(rank, pos, shape, dtype, seed=0, small=False):
    """The data of position pos of process rank (differs per endpoint)."""
    return util.data(eid(rank, pos), shape, dtype, seed=seed, small=small)


def stack(blocks):
    """This process's boxed array from its N per-position blocks."""
    return np.stack([np.asarray(b) for b in blocks])


def local(shape, dtype, seed=0, small=False, rank=None):
    """The boxed array whose position k holds pdata(rank, k, shape)."""
    rank = RANK if rank is None else rank
    return stack([pdata(rank, k, shape, dtype, seed, small) for k in range(N)])


def split(out):
    """A boxed result's per-position blocks."""
    out = np.asarray(out)
    assert out.shape[0] == N, out.shape
    return list(out)


def every(pos, shape, dtype, seed=0, small=False):
    """Position pos's data on every process, in rank order."""
    return [pdata(r, pos, shape, dtype, seed, small) for r in range(SIZE)]


def on_line(peer, pos, shape, dtype, seed=0):
    """What position pos receives from process peer: its data, zeros from
    MPI.PROC_NULL."""
    if peer == MPI.PROC_NULL:
        return np.zeros(shape, dtype)
    return pdata(peer, pos, shape, dtype, seed)


class Api:
    """One call form for both APIs. The token API ("token") threads each
    call's token into the next one's token= and hands back the results
    without it (None for a bare token, as send's). Make one per trace."""

    def __init__(self, name):
        import jaxmpi
        import jaxmpi.notoken

        self.name = name
        self.module = jaxmpi.notoken if name == "notoken" else jaxmpi
        self.token = None

    def __getattr__(self, op):
        fn = getattr(self.module, op)
        if self.name == "notoken":
            return fn

        def call(*args, **kwargs):
            if self.token is not None and "token" not in kwargs:
                kwargs["token"] = self.token
            out = fn(*args, **kwargs)
            if isinstance(out, tuple):
                self.token = out[1]
                return out[0]
            self.token = out
            return None  # a token alone

        return call
