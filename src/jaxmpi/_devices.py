"""Several devices per process: jaxmpi inside ``shard_map``.

Inside ``shard_map`` every device runs the body, each on its own XLA thread,
at the same time. MPI matches messages and collectives per communicator, so
two devices calling MPI on one communicator would pair each other's messages
at random (a prototype summed the wrong shards in 50 of 50 runs, silently).
So a communicator used from a program over n devices gets n duplicates, one
per position in the mesh: the device at position k calls MPI on duplicate k
only, and meets the devices at position k of the other processes there.
The position is the device's flat index in the mesh (``axis_index`` over the
mesh axes), not its device id, so that processes whose meshes list their
devices in other orders still pair the same positions.

The duplicates are made collectively the first time a communicator is used
over n devices, when the call is traced: every process traces the same
program in the same order. They are cached on the communicator (an MPI
attribute, freed with it). Making them first waits for the jaxmpi work this
thread dispatched (no other call may be in flight on the communicator),
checks that every process has n devices and that MPI runs at
``MPI_THREAD_MULTIPLE`` (the devices call MPI from several threads at once).

``DeviceCart(cart, mesh)`` is the Cartesian grid of every process's
devices, for the halo and neighbour operations between positions: one
duplicate of ``cart`` per ordered pair of neighbouring positions (k, j),
the same pairs on every process (a neighbour's position depends only on
the own position and the direction), made when the grid is made. A
message from position k to position j travels on pair (k, j)'s: in each
process only position j receives on it and only position k sends on it, so
no receive can match another device's message. Peers reach the C core as
endpoint ranks, ``process rank * devices + position``, one row per
position (csrc/ops.h).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
from jax import lax
from mpi4py import MPI

from . import _jax_compat as jc
from ._effect import manual_axes, mesh, wait_for_dispatched
from ._errors import MPIConfigurationError

_keyval = None


def _free(comm, keyval, dups):
    for group in dups.values():
        for d in group:
            if d != MPI.COMM_NULL:
                d.Free()


def manual_mesh(fn: str):
    """The positions of the mesh a traced call runs on: None outside
    ``shard_map`` (or over one device), else (axis names, axis sizes).
    Raises where some mesh axes are not manual (a side-effecting call
    cannot be placed by JAX's partitioner)."""
    m = mesh()
    if m is None or m.size == 1 or not m.manual:
        return None
    if not m.all_manual:
        auto = [a for a in m.names if a not in m.manual]
        raise ValueError(
            f"{fn}: called inside shard_map with mesh axes {auto} left to "
            "JAX's partitioner (axis_names=...): an MPI call has a side effect "
            "that the partitioner cannot place. Make every mesh axis manual "
            "(leave out axis_names=), and use XLA's collectives (psum, "
            "all_gather, ...) over the local axes inside the body.")
    return m.names, m.sizes


def make_duplicates(comm, n: int, count: int, fn: str, shape=None) -> list:
    """`count` duplicates of `comm` for a program over n devices per
    process, made collectively after the checks every process makes alike:
    MPI_THREAD_MULTIPLE, and the same n (or mesh `shape`) everywhere."""
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise MPIConfigurationError(
            f"{fn}: a program over {n} devices per process calls MPI from "
            f"{n} threads at once, which needs MPI_THREAD_MULTIPLE; MPI was "
            f"initialised at level {MPI.Query_thread()}. Keep mpi4py's "
            "default thread level ('multiple'), or run one device per process.")
    wait_for_dispatched()  # no jaxmpi call may be in flight on comm
    mine = n if shape is None else tuple(shape)
    every = comm.allgather(mine)
    if any(e != mine for e in every):
        what = "devices" if shape is None else "mesh shapes"
        raise ValueError(
            f"{fn}: the processes of the communicator have different {what} "
            f"({', '.join(f'rank {r}: {e}' for r, e in enumerate(every))}): "
            "each device pairs with the device at the same mesh position of "
            "every other process, so every process needs the same mesh. "
            "Give every process the same devices, or split the communicator "
            "(comm.Split) into groups of equal meshes.")
    dups = []
    for _ in range(count):
        d = comm.Dup()
        d.Set_errhandler(MPI.ERRORS_RETURN)
        dups.append(d)
    return dups


def _duplicates(comm, n: int, fn: str) -> list:
    global _keyval
    if _keyval is None:
        _keyval = MPI.Comm.Create_keyval(delete_fn=_free)
    cache = comm.Get_attr(_keyval)
    if cache is None:
        cache = {}
        comm.Set_attr(_keyval, cache)
    dups = cache.get(n)
    if dups is None:
        dups = cache[n] = make_duplicates(comm, n, n, fn)
    return dups


def per_device(info, comm, fn: str):
    """``info`` (a CommInfo) for the devices of the mesh the call is traced
    on: one duplicate of ``comm`` per position."""
    mesh = manual_mesh(fn)
    if isinstance(comm, DeviceCart):
        return for_grid(info, comm, mesh, fn)
    if mesh is None:
        return info
    n = int(np.prod(mesh[1]))
    dups = _duplicates(comm, n, fn)
    return dataclasses.replace(
        info, devices=n,
        comms=tuple(MPI._handleof(d) & 0xFFFFFFFFFFFFFFFF for d in dups))


def for_grid(info, grid, mesh, fn: str):
    """``info`` of a DeviceCart's process grid, with the grid's pair
    communicators (traced inside shard_map over the grid's mesh)."""
    if grid.devices == 1 and mesh is None:
        return info
    if mesh != (grid.axis_names, grid.mesh_shape):
        raise ValueError(
            f"{fn}: a DeviceCart over the mesh "
            f"{dict(zip(grid.axis_names, grid.mesh_shape))} is used "
            + ("outside shard_map" if mesh is None else
               f"inside shard_map over {dict(zip(*mesh))}")
            + ": use it inside shard_map over the mesh it was made for")
    return dataclasses.replace(info, devices=grid.devices, comms=grid.comms)


# ---- typing inside shard_map (check_vma) -----------------------------------
# JAX types every value of a shard_map body by the manual axes it varies
# over. A collective's result varies where its operands vary (every process
# runs the same program, so the devices along an axis its operand is the
# same over make the same calls with the same data, and get the same
# result). A message's does not follow from the receiver's operands (the
# sender's data, another variable of the peer's program): it varies over
# every manual axis (`messages`: the primitive's results are messages from
# peers, its row says). The operands are made to vary alike first (pvary,
# whose transpose sums an invariant operand's cotangents), so that
# transposes give every operand a cotangent of its own type.


def _target_vma(avals, messages):
    # The abstract mesh, not the trace state: JAX 0.12 transposes a
    # shard_map body with no trace active, and its results must still be
    # typed as varying there.
    axes = manual_axes()
    if not axes:
        return None
    if messages:
        return frozenset(axes)
    out = frozenset()
    for a in avals:
        out |= jc.vma(a)
    return out


def vary_operands(args, messages):
    """The operands of a jaxmpi primitive, each made to vary over the manual
    axes its result will (see above); as they are outside shard_map."""
    if not manual_axes():  # every bind: the cheap test
        return args
    want = _target_vma([getattr(a, "aval", a) for a in args], messages)
    if not want:
        return args
    return [a if want <= jc.vma(getattr(a, "aval", a))
            or not hasattr(a, "aval")
            else jc.pvary(a, want - jc.vma(a.aval)) for a in args]


def typed(outs, avals, messages, extra=()):
    """A primitive's result avals typed as varying where its result does;
    `extra`: results that vary over every manual axis (request handles)."""
    want = _target_vma(avals, messages)
    if want is None:
        return outs
    every = frozenset(manual_axes())
    return [jc.varying(o, every if i in extra else want)
            for i, o in enumerate(outs)]


class DeviceCart:
    """The Cartesian grid of every process's devices: neighbours at other
    mesh positions, for the halo and neighbour operations.

    The process grid of the Cartesian communicator ``cart``, each process's
    block split further along the axes of its device mesh (mesh axis i
    along grid dimension i): ``dims[i] * mesh.shape[i]`` blocks along
    dimension i, one per device, periodic where ``cart`` is.
    ``halo_exchange``, ``ihalo_exchange``, ``neighbor_alltoallv`` and
    ``ineighbor_alltoallv`` take it as their ``comm`` inside
    ``jax.shard_map`` over that mesh: a device's neighbour may be another
    device of its own process or a device of another process. Made
    collectively (every process of ``cart``, with a mesh of the same
    shape): one duplicate of ``cart`` per ordered pair of neighbouring
    positions (docs/devices.md).

    Args:
        cart: an mpi4py Cartesian communicator over the processes.
        mesh: this process's ``jax.sharding.Mesh``, an axis per dimension.

    Raises:
        TypeError: ``cart`` is not a Cartesian communicator or ``mesh`` not
            a Mesh.
        ValueError: the mesh's and ``cart``'s numbers of dimensions differ,
            or the processes' meshes differ in shape (on every rank).
        MPIConfigurationError: MPI runs below ``MPI_THREAD_MULTIPLE`` with
            several devices per process.

    Example:
        Two CPU devices per process, a ring of 2 x size blocks:

            cart = MPI.COMM_WORLD.Create_cart([size], periods=[True])
            mesh = Mesh(np.array(jax.devices()), ("x",))
            grid = jaxmpi.DeviceCart(cart, mesh)
            halo = jax.jit(jax.shard_map(
                lambda u: mpx.halo_exchange(u, grid), mesh=mesh,
                in_specs=P("x"), out_specs=P("x")))
    """

    def __init__(self, cart, mesh):
        fn = "DeviceCart"
        if not isinstance(cart, MPI.Cartcomm) or cart == MPI.COMM_NULL:
            raise TypeError(
                f"{fn}: cart must be a Cartesian communicator "
                f"(MPI.COMM_WORLD.Create_cart(dims, periods)), got "
                f"{type(cart).__name__}: {cart!r}")
        shape = getattr(getattr(mesh, "devices", None), "shape", None)
        if shape is None or not hasattr(mesh, "axis_names"):
            raise TypeError(f"{fn}: mesh must be a jax.sharding.Mesh of this "
                            f"process's devices, got {type(mesh).__name__}")
        dims, periods, coords = cart.Get_topo()
        if len(shape) != len(dims):
            raise ValueError(
                f"{fn}: the mesh has {len(shape)} axes {tuple(mesh.axis_names)} "
                f"but the Cartesian communicator {len(dims)} dimensions "
                f"(dims={list(dims)}): mesh axis i splits grid dimension i")
        self.cart = cart
        self.axis_names = tuple(mesh.axis_names)
        self.mesh_shape = tuple(int(s) for s in shape)
        self.devices = int(np.prod(self.mesh_shape))
        self.proc_dims = tuple(dims)
        self.periods = tuple(bool(p) for p in periods)
        self.proc_coords = tuple(coords)
        self.dims = tuple(p * m for p, m in zip(dims, self.mesh_shape))
        n = self.devices
        pairs = sorted({(k, self._position(k, d)) for k in range(n)
                        for d in itertools.product((-1, 0, 1),
                                                   repeat=len(dims))})
        # Every process makes the same duplicates in the same order.
        dups = make_duplicates(cart, n, len(pairs), fn,
                                        shape=self.mesh_shape)
        matrix = [0] * (n * n)
        for (k, j), d in zip(pairs, dups):
            matrix[k * n + j] = MPI._handleof(d) & 0xFFFFFFFFFFFFFFFF
        self._dups = dups
        self.comms = tuple(matrix)

    def _position(self, k: int, d) -> int:
        """The position of position k's neighbour in direction d."""
        kc = np.unravel_index(k, self.mesh_shape)
        return int(np.ravel_multi_index(
            [(c + s) % m for c, s, m in zip(kc, d, self.mesh_shape)],
            self.mesh_shape))

    def neighbours(self, d) -> tuple:
        """The endpoint rank (process rank * devices + position) of every
        position's neighbour in direction d, MPI.PROC_NULL beyond a
        non-periodic edge."""
        out = []
        for k in range(self.devices):
            kc = np.unravel_index(k, self.mesh_shape)
            proc, pos = [], []
            for i, (p, c, s, m) in enumerate(zip(self.proc_coords, kc, d,
                                                 self.mesh_shape)):
                g = p * m + c + s
                if not 0 <= g < self.dims[i]:
                    if not self.periods[i]:
                        break
                    g %= self.dims[i]
                proc.append(g // m)
                pos.append(g % m)
            else:
                rank = self.cart.Get_cart_rank(proc)
                out.append(rank * self.devices + int(np.ravel_multi_index(
                    pos, self.mesh_shape)))
                continue
            out.append(MPI.PROC_NULL)
        return tuple(out)

    def position(self):
        """This device's position in the mesh (traced, inside shard_map)."""
        pos = 0
        for name, m in zip(self.axis_names, self.mesh_shape):
            pos = pos * m + lax.axis_index(name)
        return pos

    def at_position(self, table):
        """This device's entry of a table with one entry per mesh position
        (traced, inside shard_map over the mesh)."""
        return lax.dynamic_index_in_dim(np.asarray(table), self.position(),
                                        keepdims=False)

    def coords(self):
        """This device's coordinates in the grid (a tuple of traced ints,
        inside shard_map over the mesh)."""
        return tuple(p * m + lax.axis_index(name) for p, m, name in
                     zip(self.proc_coords, self.mesh_shape, self.axis_names))

    def free(self) -> None:
        """Free the grid's communicators (collective, as MPI_Comm_free)."""
        for d in self._dups:
            if d != MPI.COMM_NULL:
                d.Free()
        self._dups = []
        self.comms = ()

    def __repr__(self):
        return (f"DeviceCart(dims={list(self.dims)}, periods="
                f"{list(self.periods)}, mesh {dict(zip(self.axis_names, self.mesh_shape))})")
