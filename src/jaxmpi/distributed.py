"""Plain JAX programs across processes, with their collectives over MPI.

``mpiexec -n 4 python -m jaxmpi.distributed prog.py [arg ...]`` (also ``-m
module`` and ``-c command``) runs an unchanged JAX program whose
``jax.distributed.initialize()`` (no arguments needed) sets up one global
set of devices, and whose cross-process CPU collectives (the ones
auto-sharded ``jit`` inserts, ``shard_map``'s ``psum``, ``all_gather``,
``psum_scatter``, ``ppermute``, ``all_to_all``,
``jax.experimental.multihost_utils``) then run over the MPI that jaxmpi
(mpi4py) uses: XLA's own MPI collectives, served by jaxmpi's MPI layer for
XLA instead of gloo. jaxmpi's own operations work in the same program.

Other ways in: ``JAXMPI_DISTRIBUTED=1`` in the environment (reaches the
processes a program starts; the runner sets it), or ``import
jaxmpi.distributed`` before anything imports jax. Either must come before
jax is imported: jaxlib chooses its MPI library then. Where they came too
late, the import is an ImportError saying so.

``jax.distributed.initialize()`` then takes the process count and id from
MPI's ``COMM_WORLD`` (under hydra's ``mpiexec``, Open MPI's ``mpirun``,
Intel MPI and Slurm's ``srun`` alike) and a coordinator address from rank
0: its host and a port the kernel chose, broadcast over MPI, so two jobs on
one host never collide. Explicit arguments and ``JAX_COORDINATOR_PORT``
keep working. One CPU device per process (several: a clear error at
``initialize()``, see docs/native.md); ``JAXMPI_TIMEOUT`` bounds every
MPI call of XLA's collectives, whose errors are Python exceptions.
See docs/native.md.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import sys

import _jaxmpi_startup
import jax
from mpi4py import MPI

from . import _jax_compat as jc
from . import _native, _runner
from ._errors import MPIConfigurationError

USAGE = """\
usage: python -m jaxmpi.distributed <script.py> [arg] ...
   or: python -m jaxmpi.distributed -m <module> [arg] ...
   or: python -m jaxmpi.distributed -c <command> [arg] ..."""

HELP = USAGE + """

Run a plain JAX program across the processes of an MPI job, unchanged:
its jax.distributed.initialize() needs no arguments, and its cross-process
CPU collectives (auto-sharded jit, shard_map's psum and friends) run over
the MPI jaxmpi uses. Run it under your launcher:
mpiexec -n 4 python -m jaxmpi.distributed prog.py. A rank whose program
raises or calls sys.exit with a non-zero status ends the whole job
(MPI_Abort with that status; JAXMPI_ABORT_ON_ERROR=0 turns this off).

environment:
  JAXMPI_TIMEOUT=s           an MPI call of XLA's collectives that has not
                             completed after s seconds raises, naming it
  JAXMPI_COORDINATOR_HOST=h  the address other hosts reach rank 0 at
                             (default: from its host name or interfaces)
  JAX_COORDINATOR_PORT=p     the coordinator's port (default: a free one)

options:
  -h, --help  show this help and exit"""


# --- jax.distributed.initialize() -----------------------------------------

def _local_devices_requested() -> int:
    """The CPU devices each process will have: jax_num_cpu_devices, else
    XLA_FLAGS' --xla_force_host_platform_device_count, else 1."""
    n = getattr(jax.config, "jax_num_cpu_devices", -1)
    if isinstance(n, int) and n > 0:
        return n
    found = re.findall(r"--xla_force_host_platform_device_count=(\d+)",
                       os.environ.get("XLA_FLAGS", ""))
    return int(found[-1]) if found else 1


def _routable_host() -> str:
    """An address of this host that other hosts reach: JAXMPI_COORDINATOR_HOST,
    else what the host name resolves to unless that is a loopback address,
    else the first non-loopback IPv4 address of an interface."""
    forced = os.environ.get("JAXMPI_COORDINATOR_HOST", "").strip()
    if forced:
        return forced
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        address = ""
    if address and not address.startswith("127."):
        return address
    for address in _interface_addresses():
        return address
    return name


def _interface_addresses() -> list[str]:
    """This host's non-loopback IPv4 addresses (Linux: SIOCGIFADDR)."""
    import fcntl  # only where no host name resolves: Linux only
    import struct

    out = []
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
        address = socket.inet_ntoa(packed[20:24])
        if not address.startswith("127."):
            out.append(address)
    return out


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def coordinator_address(port=None) -> str:
    """The address of jax.distributed's coordinator, chosen by rank 0.

    What ``jax.distributed.initialize()`` gets under the route when no
    ``coordinator_address`` is passed: rank 0's host (127.0.0.1 when every
    rank runs on it; else ``JAXMPI_COORDINATOR_HOST``, the address its host
    name resolves to, or its first non-loopback interface) and ``port``, or
    a free port the kernel gave rank 0, broadcast over MPI, so that two jobs
    on one host never collide. Collective over ``MPI.COMM_WORLD``: call it
    on every rank.

    Args:
        port: the port to use (an int or a string of digits; JAX passes
            ``JAX_COORDINATOR_PORT``), or None for a free one.

    Returns:
        str: ``"host:port"``, the same on every rank.

    Raises:
        ValueError: ``port`` is not a number.

    Example:
        ::

            address = jaxmpi.distributed.coordinator_address()
            jax.distributed.initialize(address, MPI.COMM_WORLD.Get_size(),
                                       MPI.COMM_WORLD.Get_rank())
    """
    comm = MPI.COMM_WORLD
    hosts = comm.allgather(socket.gethostname())
    if comm.Get_rank() == 0:
        host = ("127.0.0.1" if all(h == hosts[0] for h in hosts)
                else _routable_host())
        address = f"{host}:{int(port) if port else _free_port()}"
    else:
        address = None
    return comm.bcast(address, root=0)


_cluster = None


def cluster_env():
    """jaxmpi's cluster environment for jax.distributed.initialize(), first
    among JAX's: present once the route is on; process count and id from
    MPI's COMM_WORLD; coordinator from coordinator_address()."""
    global _cluster
    if _cluster is not None:
        return _cluster

    class JaxmpiCluster(jc.ClusterEnv):
        name = "jaxmpi"
        opt_in_only_method = False

        @classmethod
        def is_env_present(cls) -> bool:
            return _jaxmpi_startup.opted_in()

        @classmethod
        def get_coordinator_address(cls, timeout_secs=None,
                                    override_coordinator_port=None) -> str:
            return coordinator_address(override_coordinator_port)

        @classmethod
        def get_process_count(cls) -> int:
            return MPI.COMM_WORLD.Get_size()

        @classmethod
        def get_process_id(cls) -> int:
            return MPI.COMM_WORLD.Get_rank()

        @classmethod
        def get_local_process_id(cls):
            return None  # every process sees its own CPU devices

    types = jc.ClusterEnv._cluster_types
    types.remove(JaxmpiCluster)
    types.insert(0, JaxmpiCluster)
    _cluster = JaxmpiCluster
    return _cluster


def prepare(args=(), kwargs=None) -> None:
    """What ``jax.distributed.initialize`` does first under the route:
    jaxmpi's cluster environment, then (with XLA's MPI collectives) the
    checks of the layout and thread level and the layer attached.

    Raises:
        MPIConfigurationError: jax was imported before the route, MPI runs
            below MPI_THREAD_MULTIPLE, or several CPU devices per process.
    """
    del args, kwargs  # JAX's own checks apply to them
    cluster_env()
    impl = getattr(jax.config, "jax_cpu_collectives_implementation", None)
    if impl != "mpi":
        return  # the program chose gloo (or none): nothing to attach
    if not _native.loaded():
        raise MPIConfigurationError(_jaxmpi_startup.LATE)
    devices = _local_devices_requested()
    if devices > 1:
        raise MPIConfigurationError(
            f"jax.distributed.initialize: {devices} CPU devices per process "
            "(XLA_FLAGS=--xla_force_host_platform_device_count or "
            "jax_num_cpu_devices) cannot run over XLA's MPI collectives, "
            "which map one MPI process to one device: XLA creates one "
            "communicator per device with nothing that tells which devices "
            "form it, and several devices of one process would meet on one "
            "MPI process (docs/native.md, 'Several devices per process'). "
            "What works: one device per process (start P x n processes "
            "instead), jaxmpi's own operations inside shard_map over "
            "several devices per process (docs/devices.md), or gloo "
            "(jax.config.update('jax_cpu_collectives_implementation', "
            "'gloo') before initialize).")
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise MPIConfigurationError(
            "jax.distributed.initialize: XLA's MPI collectives over jaxmpi "
            "need MPI_THREAD_MULTIPLE (XLA's threads and jaxmpi's may call "
            f"MPI at once), but MPI provides level {MPI.Query_thread()}: "
            "leave mpi4py.rc.thread_level at its default ('multiple').")
    _native.attach(devices)


def native_calls() -> int:
    """How many MPI calls XLA's collectives made through jaxmpi in this
    process (0 before ``jax.distributed.initialize()``).

    Returns:
        int: the count, for checking that a program's collectives ran over
        jaxmpi (gloo's make none).

    Example:
        ::

            before = jaxmpi.distributed.native_calls()
            jax.block_until_ready(total(x))
            assert jaxmpi.distributed.native_calls() > before
    """
    return _native.native_calls()


# --- python -m jaxmpi.distributed -----------------------------------------

def main(argv=None) -> int:
    """``python -m jaxmpi.distributed (script | -m module | -c command)
    [arg ...]``: run the target with the route on; end the job with
    MPI_Abort if it fails on this rank. Returns 0, or the status that the
    target passed to ``sys.exit``."""
    _, kind, target, args = _runner.parse(
        "jaxmpi.distributed", sys.argv[1:] if argv is None else argv, USAGE,
        HELP)
    if not _jaxmpi_startup.opted_in():
        # (jaxmpi was imported before, e.g. `python -c "import jaxmpi;
        # jaxmpi.distributed.main()"`): too late for jaxlib.
        raise MPIConfigurationError(_jaxmpi_startup.LATE)
    return _runner.execute("jaxmpi.distributed", kind, target, args)


if __name__ == "__main__":
    # The imported module, not this __main__ copy, keeps the state.
    sys.exit(importlib.import_module("jaxmpi.distributed").main())
