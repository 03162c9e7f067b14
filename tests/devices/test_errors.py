"""Every bad configuration of several devices that a process can make by
itself gives a clear Python error on every rank before any MPI call (the
rest, which need processes that differ, are in tests/launch/
test_devices.py, with the cross-rank check per position, whose runtime
error would fail every later jaxmpi call of this process): an
auto-sharded jit, a partly manual shard_map, a DeviceCart outside its
shard_map or over another mesh or passed to an operation that is not a
topology one, axis_name naming no manual axis."""

import re

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from mpi4py import MPI

import jaxmpi
import jaxmpi.notoken as mpx
from devutil import N, SIZE, local, make_mesh, mesh1, spmd

several = pytest.mark.skipif(N < 2, reason="needs several devices per process "
                             "(XLA_FLAGS=--xla_force_host_platform_device_count)")


@several
def test_auto_sharded_jit_is_a_clear_error():
    mesh = mesh1("same")
    x = jax.device_put(np.arange(2.0 * N), NamedSharding(mesh, P("d")))
    f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM) * 2)
    with pytest.raises(ValueError, match=re.escape(
            f"jaxmpi.allreduce is compiled for {N} devices outside shard_map. "
            "JAX's partitioner cannot place an MPI call (a side effect) in an "
            "auto-sharded computation. Write the per-device part with "
            "jax.shard_map(")):
        f(x)
    # in_shardings/out_shardings over the mesh: the same error
    g = jax.jit(lambda x: mpx.bcast(x, 0), in_shardings=NamedSharding(mesh, P("d")))
    with pytest.raises(ValueError, match="jaxmpi.bcast is compiled for .* "
                       "devices outside shard_map"):
        g(np.arange(2.0 * N))


@several
def test_persistent_cache_is_a_clear_error_where_jax_would_crash(tmp_path):
    """JAX 0.10's persistent compilation cache crashes (segfault) writing a
    program over several devices with ordered-effect tokens: jaxmpi raises
    at the lowering instead; older JAX writes it, and the call runs."""
    mesh = mesh1("same")
    f = jax.jit(jax.shard_map(lambda x: mpx.allreduce(x, MPI.SUM) + 1,
                              mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    x = np.arange(2.0 * N)
    old = (jax.config.jax_compilation_cache_dir,
           jax.config.jax_enable_compilation_cache,
           jax.config.jax_persistent_cache_min_compile_time_secs)
    from jax._src import compilation_cache
    try:
        jax.config.update("jax_compilation_cache_dir", str(tmp_path))
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        compilation_cache.reset_cache()
        version = tuple(int(p) for p in jax.__version__.split(".")[:2])
        if version >= (0, 10):
            with pytest.raises(RuntimeError, match=re.escape(
                    "JAX's persistent compilation cache is on")
                    + ".*" + re.escape("jax_enable_compilation_cache")):
                f(x)
        else:
            np.testing.assert_array_equal(np.asarray(f(x)), x * SIZE + 1)
    finally:
        jax.config.update("jax_compilation_cache_dir", old[0])
        jax.config.update("jax_enable_compilation_cache", old[1])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", old[2])
        compilation_cache.reset_cache()


@several
def test_partly_manual_shard_map_is_a_clear_error():
    mesh = make_mesh("2d")
    f = jax.jit(jax.shard_map(lambda x: mpx.allreduce(x, MPI.SUM), mesh=mesh,
                              in_specs=P("a"), out_specs=P("a"),
                              axis_names={"a"}))
    with pytest.raises(ValueError, match=re.escape(
            "allreduce: called inside shard_map with mesh axes ['b'] left to "
            "JAX's partitioner (axis_names=...)")):
        f(np.arange(2.0 * N))


@several
def test_device_cart_misuse():
    mesh = mesh1("same")
    cart = MPI.COMM_WORLD.Create_cart([SIZE], periods=[True])
    dcart = jaxmpi.DeviceCart(cart, mesh)
    try:
        x = np.arange(5.0)
        # outside shard_map
        with pytest.raises(ValueError, match=re.escape(
                "halo_exchange: a DeviceCart over the mesh {'d': %d} is used "
                "outside shard_map: use it inside shard_map over the mesh it "
                "was made for" % N)):
            mpx.halo_exchange(x, dcart)
        # inside shard_map over another mesh (other axis name)
        other = Mesh(np.array(jax.devices()), ("e",))
        f = jax.jit(jax.shard_map(lambda x: mpx.halo_exchange(x, dcart),
                                  mesh=other, in_specs=P("e"), out_specs=P("e")))
        with pytest.raises(ValueError, match=re.escape(
                "halo_exchange: a DeviceCart over the mesh {'d': %d} is used "
                "inside shard_map over {'e': %d}" % (N, N))):
            f(np.arange(5.0 * N))
        # given to an operation that takes a communicator
        g = spmd(lambda x: mpx.allreduce(x, MPI.SUM, comm=dcart), mesh)
        with pytest.raises(TypeError, match=re.escape(
                "allreduce: comm is a DeviceCart, which the halo and neighbour "
                "operations take")):
            g(local((3,), np.float64))
        h = spmd(lambda x: mpx.wait(mpx.isend(x, 0, comm=dcart)), mesh)
        with pytest.raises(TypeError, match="isend: comm is a DeviceCart"):
            h(local((3,), np.float64))
    finally:
        dcart.free()
        cart.Free()


def test_device_cart_bad_arguments():
    mesh = mesh1("same")
    with pytest.raises(TypeError, match="DeviceCart: cart must be a Cartesian "
                       "communicator"):
        jaxmpi.DeviceCart(MPI.COMM_WORLD, mesh)
    cart = MPI.COMM_WORLD.Create_cart([SIZE, 1], periods=[True, True])
    try:
        with pytest.raises(ValueError, match=re.escape(
                "DeviceCart: the mesh has 1 axes ('d',) but the Cartesian "
                "communicator 2 dimensions")):
            jaxmpi.DeviceCart(cart, mesh)
        with pytest.raises(TypeError, match="DeviceCart: mesh must be a "
                           "jax.sharding.Mesh"):
            jaxmpi.DeviceCart(cart, jax.devices())
    finally:
        cart.Free()


def test_axis_name_errors():
    mesh = make_mesh("2d")
    x = local((3,), np.float64)

    def run(**kw):
        return spmd(lambda x: mpx.allreduce(x, kw.pop("op", MPI.SUM), **kw),
                    mesh)(x)

    with pytest.raises(ValueError, match=re.escape(
            "allreduce: axis_name='zz' must name mesh axes of the shard_map "
            "this call is traced in (manual axes here: ['a', 'b'])")):
        run(axis_name="zz")
    with pytest.raises(ValueError, match=re.escape(
            "allreduce: axis_name=('a', 'c') must name mesh axes")):
        run(axis_name=("a", "c"))
    with pytest.raises(ValueError, match=re.escape(
            "allreduce: with axis_name, op must be MPI.SUM, MPI.PROD, MPI.MAX "
            "or MPI.MIN (XLA reduces the local shards), got MPI.BAND")):
        spmd(lambda x: mpx.allreduce(x, MPI.BAND, axis_name="a"), mesh)(
            local((3,), np.int32))
    with pytest.raises(NotImplementedError, match=re.escape(
            "allreduce: with axis_name the local reduction is XLA's")):
        run(axis_name="a", adjoint="sum")
    # outside shard_map
    with pytest.raises(ValueError, match=re.escape(
            "allreduce: axis_name='a' must name mesh axes of the shard_map this "
            "call is traced in (manual axes here: none: not inside shard_map)")):
        mpx.allreduce(np.ones(3), MPI.SUM, axis_name="a")
