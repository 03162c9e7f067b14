"""Loading the C core that matches the running MPI, and configuring it.

jaxmpi links no MPI library. Its C core is built once per MPI ABI family
(MPICH, Open MPI, the MPI-5 standard ABI) from our own declaration headers,
needing neither mpi.h nor mpicc. At import we ask mpi4py which MPI it loaded,
pick the matching build, bind its function table to that very library
(already in the process) and hand it every handle and constant from mpi4py.
So whatever MPI mpi4py uses at run time, jaxmpi uses too: no rebuild when the
MPI changes, no ABI mismatch between build and run.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import warnings

import jax
import numpy as np
from mpi4py import MPI

from . import _dtypes
from ._errors import MPIConfigurationError

_HERE = os.path.dirname(os.path.abspath(__file__))
ABI_FAMILIES = ("mpich", "openmpi", "mpiabi")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def abi_family() -> str:
    """The ABI family of the MPI library mpi4py loaded."""
    forced = os.environ.get("JAXMPI_MPI_ABI")
    if forced:
        if forced not in ABI_FAMILIES:
            raise MPIConfigurationError(
                f"JAXMPI_MPI_ABI={forced!r} is not one of {ABI_FAMILIES}"
            )
        return forced
    get_abi = getattr(MPI, "Get_abi_version", None)
    if get_abi is not None and get_abi()[0] > 0:
        return "mpiabi"
    if MPI._sizeof(MPI.Comm) == 4:
        return "mpich"
    if MPI.get_vendor()[0] == "Open MPI":
        return "openmpi"
    raise MPIConfigurationError(
        f"unknown MPI ABI: vendor {MPI.get_vendor()}, handles of "
        f"{MPI._sizeof(MPI.Comm)} bytes. Set JAXMPI_MPI_ABI to one of "
        f"{ABI_FAMILIES} if your MPI implements one of them."
    )


def _load_library(family: str) -> ctypes.CDLL:
    # A plain shared library (no Python C API, no interpreter tag in its
    # name): one wheel serves every CPython.
    path = os.path.join(_HERE, f"_core_{family}.so")
    if not os.path.exists(path):
        raise MPIConfigurationError(
            f"jaxmpi has no C core for the {family!r} MPI ABI in {_HERE}; "
            "reinstall jaxmpi (pip install --force-reinstall jaxmpi)"
        )
    return ctypes.CDLL(path)


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    lib.jaxmpi_abi.restype = c.c_char_p
    lib.jaxmpi_sizeof_comm.restype = c.c_int
    lib.jaxmpi_sizeof_status.restype = c.c_int
    lib.jaxmpi_cuda_built.restype = c.c_int
    lib.jaxmpi_cuda_driver.argtypes = [c.c_char_p, c.c_size_t]
    lib.jaxmpi_cuda_driver.restype = c.c_int
    lib.jaxmpi_cuda_configure.argtypes = [c.c_int, c.c_int64]
    lib.jaxmpi_cuda_configure.restype = None
    lib.jaxmpi_cuda_aware_mode.restype = c.c_int
    lib.jaxmpi_cuda_stats.argtypes = [c.POINTER(c.c_int64)] * 3
    lib.jaxmpi_cuda_stats.restype = None
    lib.jaxmpi_bind.argtypes = [c.c_char_p, c.c_char_p, c.c_size_t]
    lib.jaxmpi_library_version.argtypes = [c.c_char_p, c.c_size_t]
    lib.jaxmpi_has_large_count.restype = c.c_int
    lib.jaxmpi_library_path.restype = c.c_char_p
    lib.jaxmpi_mpi_cuda_aware.restype = c.c_int
    lib.jaxmpi_configure.argtypes = [
        c.POINTER(c.c_uint64), c.c_int, c.c_uint64, c.c_uint64, c.c_int, c.c_int,
        c.c_int, c.c_int, c.c_int, c.c_int64, c.c_int, c.c_char_p, c.c_size_t,
    ]
    lib.jaxmpi_half_op.argtypes = [c.c_int, c.c_int, c.POINTER(c.c_uint64)]
    lib.jaxmpi_shadow_init.argtypes = [c.c_char_p, c.c_size_t]
    lib.jaxmpi_set_check.argtypes = [c.c_int]
    lib.jaxmpi_set_check.restype = None
    lib.jaxmpi_get_check.restype = c.c_int
    lib.jaxmpi_check_scheduled.argtypes = [c.c_int64]
    lib.jaxmpi_check_scheduled.restype = c.c_int
    lib.jaxmpi_set_error_classes.argtypes = [c.c_int, c.c_int]
    lib.jaxmpi_set_error_classes.restype = None
    lib.jaxmpi_register_site.argtypes = [c.c_int64, c.c_char_p]
    lib.jaxmpi_register_site.restype = c.c_int
    lib.jaxmpi_site_text.argtypes = [c.c_int64, c.c_char_p, c.c_size_t]
    lib.jaxmpi_site_text.restype = c.c_int
    lib.jaxmpi_check_name_op.argtypes = [c.c_uint64, c.c_char_p]
    lib.jaxmpi_set_timeout.argtypes = [c.c_double]
    lib.jaxmpi_set_timeout.restype = None
    lib.jaxmpi_get_timeout.restype = c.c_double
    lib.jaxmpi_set_async.argtypes = [c.c_int]
    lib.jaxmpi_set_async.restype = None
    lib.jaxmpi_get_async.restype = c.c_int
    lib.jaxmpi_requests_in_flight.restype = c.c_int
    lib.jaxmpi_requests_shutdown.restype = c.c_int
    lib.jaxmpi_check_eager.argtypes = [
        c.c_int, c.c_uint64, c.c_uint64, c.c_int, c.c_int, c.c_int64,
        c.POINTER(c.c_int64), c.c_char_p, c.c_size_t]
    lib.jaxmpi_check_eager.restype = c.c_int
    lib.jaxmpi_op_row.argtypes = [c.c_int, c.POINTER(c.c_char_p)] + [
        c.POINTER(c.c_int)] * 2 + [c.POINTER(c.c_uint)] * 2 + [c.POINTER(c.c_int)]
    lib.jaxmpi_op_row.restype = c.c_int
    lib.jaxmpi_attr_row.argtypes = [c.c_int, c.POINTER(c.c_char_p),
                                    c.POINTER(c.c_int)]
    lib.jaxmpi_attr_row.restype = c.c_int
    lib.jaxmpi_max_buffers.restype = c.c_int
    lib.jaxmpi_ndtypes.restype = c.c_int
    lib.jaxmpi_dtype_size.argtypes = [c.c_int]
    lib.jaxmpi_dtype_size.restype = c.c_int


def _clean_version(text: str) -> str:
    """A library version string as both readers agree on it: Open MPI counts
    the terminating NUL in its length, so mpi4py's string ends in a NUL
    character that C's does not have."""
    return text.split("\x00", 1)[0].strip()


def handle(obj) -> np.uint64:
    """An mpi4py handle (Comm, Datatype, Op) as the uint64 the C core reads."""
    return np.uint64(MPI._handleof(obj) & 0xFFFFFFFFFFFFFFFF)


class Core:
    """The loaded and configured C core (one per process)."""

    def __init__(self):
        self.family = abi_family()
        lib = _load_library(self.family)
        _declare(lib)
        self.lib = lib
        for what, ours, theirs in (
            ("MPI_Comm", lib.jaxmpi_sizeof_comm(), MPI._sizeof(MPI.Comm)),
            ("MPI_Status", lib.jaxmpi_sizeof_status(), MPI._sizeof(MPI.Status)),
        ):
            if ours != theirs:
                raise MPIConfigurationError(
                    f"jaxmpi's {self.family} core has sizeof({what}) = {ours} but "
                    f"the MPI mpi4py loaded ({MPI.get_vendor()[0]}) has {theirs}. "
                    "Set JAXMPI_MPI_ABI to the right family "
                    f"{ABI_FAMILIES} or report this as a bug."
                )
        err = ctypes.create_string_buffer(2048)
        libpath = os.environ.get("JAXMPI_LIBMPI") or None
        if lib.jaxmpi_bind(libpath.encode() if libpath else None, err, len(err)):
            raise MPIConfigurationError(f"jaxmpi: {err.value.decode()}")
        version = ctypes.create_string_buffer(8192)
        lib.jaxmpi_library_version(version, len(version))
        self.library_version = _clean_version(version.value.decode(errors="replace"))
        theirs = _clean_version(MPI.Get_library_version())
        if self.library_version != theirs:
            raise MPIConfigurationError(
                "jaxmpi bound to a different MPI library than mpi4py uses "
                f"({self.library_version.splitlines()[0]!r} vs "
                f"{theirs.splitlines()[0]!r}). Set "
                "JAXMPI_LIBMPI to the path of the library mpi4py loaded "
                "(python -m mpi4py --mpi-library)."
            )
        self.library_path = lib.jaxmpi_library_path().decode()
        self.has_large_count = bool(lib.jaxmpi_has_large_count())
        # mpi4jax's name for the same switch is honoured too.
        self.debug = _env_flag("JAXMPI_DEBUG") or _env_flag("MPI4JAX_DEBUG")
        limit = int(os.environ.get("JAXMPI_MAX_COUNT", 2**31 - 1))
        self.use_large_count = not _env_flag("JAXMPI_NO_LARGE_COUNT")
        table = (ctypes.c_uint64 * _dtypes.N_XLA_TYPES)()
        for dt in _dtypes.SUPPORTED:
            mpitype = _dtypes.MPI_TYPES.get(dt)
            if mpitype is not None:
                table[_dtypes.XLA_TYPE[dt]] = int(handle(getattr(MPI, mpitype)))
        if lib.jaxmpi_configure(
            table, len(table), int(handle(MPI.BYTE)), int(MPI.IN_PLACE),
            MPI.ANY_SOURCE, MPI.ANY_TAG,
            MPI.PROC_NULL, MPI.UNDEFINED, int(self.debug), limit,
            int(self.use_large_count), err, len(err),
        ):
            raise MPIConfigurationError(f"jaxmpi: {err.value.decode()}")
        self.count_limit = limit
        self.half_ops = {}
        for dt in _dtypes.HALF:
            for kind, opname in enumerate(("SUM", "PROD", "MAX", "MIN")):
                out = ctypes.c_uint64()
                if lib.jaxmpi_half_op(_dtypes.XLA_TYPE[dt], kind, ctypes.byref(out)):
                    raise MPIConfigurationError(f"jaxmpi: no {opname} op for {dt}")
                self.half_ops[(dt, opname)] = np.uint64(out.value)
        self._configure_reliability(err)
        self._configure_cuda()

    def _configure_cuda(self) -> None:
        """The GPU data path: staging through pinned host memory (default), or
        device pointers straight to a CUDA-aware MPI (JAXMPI_CUDA_AWARE=1, or
        mpi4jax's MPI4JAX_USE_CUDA_MPI=1)."""
        aware = _env_flag("JAXMPI_CUDA_AWARE") or _env_flag("MPI4JAX_USE_CUDA_MPI")
        raw = os.environ.get("JAXMPI_CUDA_STAGING_MB", "").strip()
        try:
            megabytes = float(raw) if raw else 0.0
        except ValueError:
            megabytes = -1.0
        if not megabytes >= 0 or megabytes == float("inf"):
            raise MPIConfigurationError(
                "JAXMPI_CUDA_STAGING_MB must be a number of MiB >= 0 (0: the "
                f"default, 512), got {raw!r}")
        self.lib.jaxmpi_cuda_configure(int(aware), int(megabytes * 2**20))
        if aware and self.mpi_cuda_aware is False:
            warnings.warn(
                "JAXMPI_CUDA_AWARE=1 (or MPI4JAX_USE_CUDA_MPI=1) hands GPU "
                "pointers to MPI, but this MPI reports that it is not "
                "CUDA-aware (MPIX_Query_cuda_support() == 0): GPU arrays will "
                "crash it. Unset the variable to stage through host memory.",
                RuntimeWarning, stacklevel=3)

    def _configure_reliability(self, err) -> None:
        """Cross-rank checks (JAXMPI_CHECK: the sparse default, 1: every
        call, 0: off) and the deadlock watchdog (JAXMPI_TIMEOUT: off unless
        set)."""
        if self.lib.jaxmpi_shadow_init(err, len(err)):
            raise MPIConfigurationError(f"jaxmpi: {err.value.decode()}")
        names = ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "LXOR", "BAND",
                 "BOR", "BXOR", "MAXLOC", "MINLOC", "REPLACE", "NO_OP")
        for name in names:
            op = getattr(MPI, name, None)
            if op is not None and op != MPI.OP_NULL:
                self.lib.jaxmpi_check_name_op(int(handle(op)), name.encode())
        for (_, name), h in self.half_ops.items():
            self.lib.jaxmpi_check_name_op(int(h), name.encode())
        self.lib.jaxmpi_set_error_classes(int(MPI.ERR_TRUNCATE),
                                         int(MPI.ERR_PENDING))
        self.set_check(parse_check(os.environ.get("JAXMPI_CHECK", ""),
                                   "JAXMPI_CHECK"))
        self.set_timeout(parse_timeout(os.environ.get("JAXMPI_TIMEOUT", ""),
                                       "JAXMPI_TIMEOUT"))
        # Waits of non-blocking ops complete from jaxmpi's progress thread,
        # which calls MPI while XLA's threads do: MPI_THREAD_MULTIPLE only.
        # JAXMPI_ASYNC_WAIT=0 makes every wait block in its handler instead.
        self.lib.jaxmpi_set_async(int(
            MPI.Query_thread() >= MPI.THREAD_MULTIPLE
            and os.environ.get("JAXMPI_ASYNC_WAIT", "1") != "0"))

    def set_async(self, on: bool) -> None:
        self.lib.jaxmpi_set_async(int(bool(on)))

    def async_wait(self) -> bool:
        return bool(self.lib.jaxmpi_get_async())

    def requests_in_flight(self) -> int:
        return int(self.lib.jaxmpi_requests_in_flight())

    def table(self) -> dict:
        """The C core's op table (csrc/ops.h) and constants: {"ops": {name:
        (nargs, nrets, attribute names, kind)}, "attrs": {name:
        is_array}, "max_buffers", "dtype_sizes": {XLA type code: bytes}}."""
        c, lib = ctypes, self.lib
        attrs, i = {}, 0
        name, flag = c.c_char_p(), c.c_int()
        while lib.jaxmpi_attr_row(i, c.byref(name), c.byref(flag)) == 0:
            attrs[name.value.decode()] = bool(flag.value)
            i += 1
        names = list(attrs)
        ops, i = {}, 0
        nargs, nrets, kind = c.c_int(), c.c_int(), c.c_int()
        templates, bits = c.c_uint(), c.c_uint()
        while lib.jaxmpi_op_row(i, c.byref(name), c.byref(nargs), c.byref(nrets),
                                c.byref(templates), c.byref(bits),
                                c.byref(kind)) == 0:
            ops[name.value.decode()] = (
                nargs.value, nrets.value,
                tuple(a for k, a in enumerate(names) if bits.value >> k & 1),
                KINDS[kind.value])
            i += 1
        return {"ops": ops, "attrs": attrs,
                "max_buffers": lib.jaxmpi_max_buffers(),
                "dtype_sizes": {k: lib.jaxmpi_dtype_size(k)
                                for k in range(lib.jaxmpi_ndtypes())}}

    def register_handlers(self) -> None:
        """Register the FFI targets of the C core's table (checked against
        Python's first: _registry.check_table): each operation's CPU handler
        jaxmpi_ffi_<op> and CUDA handler jaxmpi_ffi_<op>_cuda, the starts'
        and the wait's alike (CUDA registrations wait in JAX until a CUDA
        plugin loads, if ever), and join_token's (one for both
        platforms)."""
        table = self.table()
        capsule = lambda symbol: jax.ffi.pycapsule(getattr(self.lib, symbol))
        for name in table["ops"]:
            cpu = f"jaxmpi_ffi_{name}"
            jax.ffi.register_ffi_target(f"jaxmpi_{name}", capsule(cpu),
                                        platform="cpu")
            jax.ffi.register_ffi_target(f"jaxmpi_{name}",
                                        capsule(f"{cpu}_cuda"),
                                        platform="CUDA")
        for platform in ("cpu", "CUDA"):
            jax.ffi.register_ffi_target("jaxmpi_join_token",
                                        capsule("jaxmpi_ffi_join_token"),
                                        platform=platform)

    def set_check(self, mode: str) -> None:
        """mode: one of CHECK_MODES."""
        self.lib.jaxmpi_set_check(CHECK_MODES.index(mode))

    @property
    def check_mode(self) -> str:
        return CHECK_MODES[self.lib.jaxmpi_get_check()]

    @property
    def check(self) -> bool:
        """Whether every call is checked (JAXMPI_CHECK=1)."""
        return self.check_mode == "all"

    def check_eager(self, fn: str, comm, op_handle: int, x,
                    root: int = 0) -> None:
        """The cross-rank check of collective ``fn`` run eagerly without
        XLA (_eager.py's direct path), counted and compared exactly as its
        compiled handler would (check.h); raises the handler's error.
        About 1 us: the op numbers, shapes and error buffer are cached."""
        cache = self.__dict__.get("_eager_check")
        if cache is None:
            cache = self._eager_check = (
                {n: i for i, n in enumerate(self.table()["ops"])}, {},
                threading.local())
        ids, dims_of, local = cache
        shape = x.shape
        dims = dims_of.get(shape)
        if dims is None:
            if len(dims_of) > 256:
                dims_of.clear()
            dims = dims_of[shape] = (ctypes.c_int64 * max(len(shape), 1))(
                *shape)
        err = getattr(local, "err", None)
        if err is None:
            err = local.err = ctypes.create_string_buffer(1536)
        code = self.lib.jaxmpi_check_eager(
            ids[fn], handle(comm), op_handle, root,
            _dtypes.XLA_TYPE[np.dtype(x.dtype)], len(shape), dims, err,
            len(err))
        if code:
            raise jax.errors.JaxRuntimeError(
                f"{_ERROR_CODES.get(code, 'INTERNAL')}: "
                f"{err.value.decode(errors='replace')}")

    def check_scheduled(self, n: int) -> bool:
        """Whether the default mode checks a communicator's n-th collective."""
        return bool(self.lib.jaxmpi_check_scheduled(n))

    def register_site(self, text: str) -> int:
        """An id for a call's source line, for the watchdog's and the debug
        log's messages (the same id in every process for the same text)."""
        site = _site_ids.get(text)
        if site is None:
            digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
            site = int.from_bytes(digest, "little", signed=True) or 1
            self.lib.jaxmpi_register_site(site, text.encode(errors="replace"))
            _site_ids[text] = site
        return site

    def site_text(self, site: int) -> str:
        out = ctypes.create_string_buffer(256)
        self.lib.jaxmpi_site_text(site, out, len(out))
        return out.value.decode(errors="replace")

    def set_timeout(self, seconds: float | None) -> None:
        self.lib.jaxmpi_set_timeout(float(seconds or 0))

    @property
    def timeout(self) -> float | None:
        t = self.lib.jaxmpi_get_timeout()
        return t if t > 0 else None

    @property
    def cuda_built(self) -> bool:
        return bool(self.lib.jaxmpi_cuda_built())

    @property
    def cuda_aware_mode(self) -> bool:
        """Whether GPU arrays go to MPI as device pointers (else staged)."""
        return bool(self.lib.jaxmpi_cuda_aware_mode())

    def cuda_driver(self) -> tuple[int, str]:
        """(visible GPUs, description), or (-1, why the driver did not load).
        Loads libcuda.so.1 on first use."""
        msg = ctypes.create_string_buffer(1024)
        n = self.lib.jaxmpi_cuda_driver(msg, len(msg))
        return n, msg.value.decode(errors="replace")

    def cuda_staging_stats(self) -> dict:
        """Pinned staging memory held now, and buffers allocated/freed."""
        vals = [ctypes.c_int64() for _ in range(3)]
        self.lib.jaxmpi_cuda_stats(*[ctypes.byref(v) for v in vals])
        return dict(zip(("held_bytes", "allocs", "frees"), (v.value for v in vals)))

    @property
    def mpi_cuda_aware(self) -> bool | None:
        """What the MPI says of CUDA-awareness (None: it cannot say)."""
        r = self.lib.jaxmpi_mpi_cuda_aware()
        return None if r < 0 else bool(r)


# Cross-rank check modes, in the C core's numbering.
CHECK_MODES = ("off", "sparse", "all")
# The kinds of rows of the C core's op table (ops.h: JM_BLOCKING, JM_START,
# JM_WAIT), in the order of their numbers.
KINDS = ("blocking", "start", "wait")

# XLA_FFI_Error_Code names, as XLA prefixes a handler's error message.
_ERROR_CODES = {3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
                8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
                13: "INTERNAL"}
_site_ids: dict[str, int] = {}


def parse_check(value: str, what: str) -> str:
    """JAXMPI_CHECK: unset/empty/"sparse"/"default" is the sparse default,
    1/true/yes/on/"all" checks every call, 0/false/no/off turns checks off."""
    v = value.strip().lower()
    if v in ("", "sparse", "default"):
        return "sparse"
    if v in ("1", "true", "yes", "on", "all"):
        return "all"
    if v in ("0", "false", "no", "off"):
        return "off"
    raise MPIConfigurationError(
        f"{what}={value!r} is not one of 1 (check every call), 0 (off) or "
        "sparse (the default: a sparse schedule of calls)")


def parse_timeout(value, what: str) -> float | None:
    """A watchdog timeout: seconds > 0, or None/0/"" for off."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "0")):
        return None
    if isinstance(value, bool):
        raise TypeError(f"{what} must be a number of seconds or None, got bool: "
                        f"{value!r}")
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number of seconds (or 0/None: off), "
                         f"got {value!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got "
                         f"{value!r}")
    return seconds or None


def check_thread_level() -> None:
    """XLA runs handlers on its own threads: MPI must allow that."""
    provided = MPI.Query_thread()
    if provided < MPI.THREAD_SERIALIZED:
        raise MPIConfigurationError(
            "jaxmpi needs MPI initialised with at least MPI_THREAD_SERIALIZED "
            f"(got level {provided}), because XLA calls MPI from its worker "
            "threads. Do not lower mpi4py.rc.thread_level, or set it to "
            "'multiple' before importing mpi4py.MPI."
        )
    if provided < MPI.THREAD_MULTIPLE:
        warnings.warn(
            "MPI provides MPI_THREAD_SERIALIZED only: jaxmpi takes its calls "
            "from one Python thread (it refuses a second one) and is safe as "
            "long as your own MPI calls wait for jitted jaxmpi work "
            "(jax.effects_barrier()).",
            RuntimeWarning,
            stacklevel=3,
        )


# What each launcher tells the processes it starts about how many it
# started, and what makes its MPI see them. A process whose MPI came up
# alone (COMM_WORLD of 1 rank) while its launcher started several never
# reached the launcher's process manager: every rank is then a job of its
# own, runs to the end and a collective returns its own data, silently.
# Seen under Slurm: `srun -n 2` without --mpi (MpiDefault=none) printed
# "rank 0 of 1" twice with the PyPI mpich wheel, rc 0 (docs/cluster.md).
_LAUNCHERS = (
    ("SLURM_STEP_NUM_TASKS", "srun",
     "srun needs Slurm's PMI plugin: srun --mpi=pmi2 (MPICH, Intel MPI) or "
     "--mpi=pmix (Open MPI), or MpiDefault in slurm.conf"),
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun",
     "launch with the mpiexec of the MPI that mpi4py uses"),
    ("PMI_SIZE", "a PMI launcher (hydra's mpiexec or srun --mpi=pmi2)",
     "launch with the mpiexec of the MPI that mpi4py uses"),
)


def check_launch(size: int, env=os.environ) -> None:
    """A singleton whose launcher started several processes is an error
    (JAXMPI_SINGLETON=1: this process is meant to run alone)."""
    if size != 1 or _env_flag("JAXMPI_SINGLETON"):
        return
    for var, who, fix in _LAUNCHERS:
        try:
            n = int(env.get(var, ""))
        except ValueError:
            continue
        if n > 1 and (var != "SLURM_STEP_NUM_TASKS" or "SLURM_PROCID" in env):
            raise MPIConfigurationError(
                f"{who} started {n} processes ({var}={n}) but MPI_COMM_WORLD "
                f"here has 1 rank: each process is an MPI job of its own, and "
                f"collectives would return its own data. {fix[0].upper()}{fix[1:]} "
                f"(MPI: {' '.join(MPI.Get_library_version().split()[:3])}). "
                "Set JAXMPI_SINGLETON=1 if this process is meant to run alone.")


_loaded: Core | None = None


def get() -> Core:
    """The process's C core (loaded by ``import jaxmpi``)."""
    global _loaded
    if _loaded is None:
        _loaded = Core()
    return _loaded
