"""XLA's MPI collectives over jaxmpi: the surface library jaxlib loads
(``_xla_mpi.so``, csrc/xla/surface.c, the table csrc/xla/abi.h) attached
to the C core's native calls (csrc/native.c), with the handles of the
running MPI. docs/design.md, "Plain JAX on MPI".
"""

from __future__ import annotations

import ctypes
import os

from mpi4py import MPI

from . import _core
from ._errors import MPIConfigurationError

_HERE = os.path.dirname(os.path.abspath(__file__))
SURFACE = os.path.join(_HERE, "_xla_mpi.so")

# The surface's rows (jaxmpi_xla_row): kinds and, per kind, what `how` is.
FUNCTION, XFUNCTION, CONSTANT = 0, 1, 2
HOW = ("CORE", "SURFACE", "STUB", "STUBH")
CONSTANT_KINDS = ("INT", "HANDLE", "OFFSET", "POINTER", "FUNCTION")
# Handle classes (abi.h): the second byte of a handle constant.
DATATYPE, OP = 2, 3
# mpi4py's names where they differ from MPI's.
_MPI4PY_NAME = {"2INT": "TWOINT", "2REAL": "TWOREAL",
                "2DOUBLE_PRECISION": "TWODOUBLE_PRECISION",
                "2INTEGER": "TWOINTEGER"}

_surface = None
_attached = None  # (world duplicate, self duplicate): kept for the process


def surface() -> ctypes.CDLL:
    """The surface library (the very object jaxlib loaded, if it did)."""
    global _surface
    if _surface is None:
        lib = ctypes.CDLL(SURFACE)
        c = ctypes
        lib.jaxmpi_xla_attach.argtypes = [c.c_void_p]
        lib.jaxmpi_xla_attach.restype = c.c_int
        lib.jaxmpi_xla_attached.restype = c.c_int
        lib.jaxmpi_xla_row.argtypes = [c.c_int, c.POINTER(c.c_char_p)] + [
            c.POINTER(c.c_int)] * 2 + [c.POINTER(c.c_int64)]
        lib.jaxmpi_xla_row.restype = c.c_int
        _surface = lib
    return _surface


def loaded() -> bool:
    """Whether jaxlib loaded the surface (MPITRAMPOLINE_LIB named it when
    jax was imported)."""
    try:
        ctypes.CDLL(SURFACE, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


def rows() -> list[tuple[str, int, int, int]]:
    """The surface's table: (symbol, kind, how, value) per row."""
    lib, out, i = surface(), [], 0
    name, kind, how, value = (ctypes.c_char_p(), ctypes.c_int(),
                              ctypes.c_int(), ctypes.c_int64())
    while lib.jaxmpi_xla_row(i, ctypes.byref(name), ctypes.byref(kind),
                             ctypes.byref(how), ctypes.byref(value)) == 0:
        out.append((name.value.decode(), kind.value, how.value, value.value))
        i += 1
    return out


def _declare(lib: ctypes.CDLL) -> None:
    c = ctypes
    lib.jaxmpi_native_calls.restype = c.c_void_p
    lib.jaxmpi_native_configure.argtypes = [
        c.c_uint64, c.c_uint64, c.c_int, c.c_int, c.c_int, c.c_uint64,
        c.c_int, c.c_char_p, c.c_size_t]
    lib.jaxmpi_native_configure.restype = c.c_int
    lib.jaxmpi_native_set_handle.argtypes = [c.c_uint64, c.c_uint64, c.c_int,
                                             c.c_char_p]
    lib.jaxmpi_native_set_handle.restype = c.c_int
    lib.jaxmpi_native_count.restype = c.c_int64
    lib.jaxmpi_native_set_trace.argtypes = [c.c_int]
    lib.jaxmpi_native_set_trace.restype = None


def attach(devices: int = 1) -> None:
    """Configure the C core's native calls with this MPI's handles and hand
    them to the surface: from here on XLA's MPI collectives run over
    jaxmpi. Once per process (later calls do nothing)."""
    global _attached
    if _attached is not None:
        return
    core = _core.get()
    lib = core.lib
    _declare(lib)
    # XLA's MPI_COMM_WORLD: a duplicate, so its traffic never matches the
    # program's or jaxmpi's own, returning errors instead of aborting.
    world = MPI.COMM_WORLD.Dup()
    world.Set_errhandler(MPI.ERRORS_RETURN)
    self_ = MPI.COMM_SELF.Dup()
    self_.Set_errhandler(MPI.ERRORS_RETURN)
    base = ctypes.addressof(ctypes.c_ubyte.in_dll(surface(),
                                                  "jaxmpi_xla_sentinels"))
    err = ctypes.create_string_buffer(1024)
    if lib.jaxmpi_native_configure(
            int(_core.handle(world)), int(_core.handle(self_)),
            world.Get_rank(), world.Get_size(),
            int(MPI.Query_thread() >= MPI.THREAD_MULTIPLE), base, devices,
            err, len(err)):
        raise MPIConfigurationError(f"jaxmpi: {err.value.decode()}")
    for symbol, kind, how, value in rows():
        if kind != CONSTANT or CONSTANT_KINDS[how] != "HANDLE":
            continue
        cls = value >> 8
        if cls not in (DATATYPE, OP) or value & 0xFF == 0:
            continue
        name = symbol[len("MPIABI_"):]
        obj = getattr(MPI, _MPI4PY_NAME.get(name, name), None)
        if obj is None or obj in (MPI.DATATYPE_NULL, MPI.OP_NULL):
            continue  # this MPI lacks it: using it is the call's error
        size = 0
        if cls == DATATYPE:
            try:
                size = obj.Get_size()
            except MPI.Exception:
                continue
            if size <= 0:
                continue
        lib.jaxmpi_native_set_handle(value, int(_core.handle(obj)), size,
                                     f"MPI_{name}".encode())
    # JAXMPI_NATIVE_TRACE=1: a line on stderr per call (begin and end).
    if os.environ.get("JAXMPI_NATIVE_TRACE", "").strip().lower() in (
            "1", "true", "yes", "on"):
        lib.jaxmpi_native_set_trace(1)
    if surface().jaxmpi_xla_attach(lib.jaxmpi_native_calls()):
        raise MPIConfigurationError(
            "jaxmpi: the MPI layer for XLA (_xla_mpi.so) and the C core come "
            "from different builds; reinstall jaxmpi")
    _attached = (world, self_)


def native_calls() -> int:
    """How many MPI calls of XLA's collectives this process made through
    jaxmpi (0 before attach)."""
    if _attached is None:
        return 0
    return int(_core.get().lib.jaxmpi_native_count())
