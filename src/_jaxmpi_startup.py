"""jaxmpi's start-up hook: what must happen before jax or mpi4jax is imported.

Two opt-ins that reach every Python process that inherits them, through
one hook: ``jaxmpi-startup.pth`` (installed by the wheel) imports this
module at interpreter start only when one of these variables is set:

* ``JAXMPI_MPI4JAX=1`` (``=tokens``: mpi4jax < 0.8's API): ``import
  mpi4jax`` gives jaxmpi (``jaxmpi.mpi4jax``), in this process and in the
  processes it starts (``python -m jaxmpi.mpi4jax`` sets it).
* ``JAXMPI_DISTRIBUTED=1``: a plain JAX program's cross-process CPU
  collectives run over the MPI jaxmpi binds (``python -m
  jaxmpi.distributed`` sets it; ``jaxmpi/__init__.py`` calls
  :func:`package_import` first of all for that route and for ``import
  jaxmpi.distributed``).

This module imports neither jax nor MPI, and nothing here is imported when
no variable is set. Python's site machinery swallows a start-up hook's
exceptions, so at start-up this only records and installs import hooks:
every refusal happens at the import it concerns (``import mpi4jax``,
``import jax``). docs/design.md, "Plain JAX on MPI".
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import os
import re
import struct
import sys

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

# The names jaxlib's MPItrampoline resolves in the library MPITRAMPOLINE_LIB
# names (its string literals; docs/design.md).
_ABI_NAME = re.compile(
    r"(?:MPIX?ABI_[A-Za-z0-9_]+|mpiwrapper_version_(?:major|minor|patch)"
    r"|mpiabi_version_(?:major|minor|patch)"
    r"|mpiwrapper_export_fortran_constants_)")

LATE = (
    "jaxmpi.distributed: jax was imported before jaxmpi's route for plain "
    "JAX was switched on, so XLA's MPI collectives cannot run over jaxmpi "
    "(jaxlib chooses its MPI library when jax is first imported). Start the "
    "program with `python -m jaxmpi.distributed prog.py` (or `-m module`), "
    "set JAXMPI_DISTRIBUTED=1 in its environment, or import "
    "jaxmpi.distributed before anything imports jax.")

_opted_in = False
_startup_error: Exception | None = None


def _flag(name: str) -> str:
    return os.environ.get(name, "").strip().lower()


# --- the start-up hook -----------------------------------------------------

def at_startup() -> None:
    """Called by jaxmpi-startup.pth when JAXMPI_MPI4JAX or
    JAXMPI_DISTRIBUTED is set. Never raises: a failure is kept and raised
    at the import it concerns."""
    global _startup_error
    try:
        value = _flag("JAXMPI_MPI4JAX")
        if value not in _FALSE:
            _install_mpi4jax_hook(value)
        if _flag("JAXMPI_DISTRIBUTED") in _TRUE:
            opt_in(check_now=False)
    except Exception as e:  # raised again by the hooks, at their import
        _startup_error = e


# --- JAXMPI_MPI4JAX: `import mpi4jax` gives jaxmpi --------------------------

class _Mpi4jaxHook(importlib.abc.MetaPathFinder):
    """At the front of sys.meta_path until mpi4jax is first imported: then
    imports jaxmpi.mpi4jax (which installs the alias with the API the
    variable chose) and hands the import to it. Until then nothing of
    jaxmpi, jax or MPI is imported."""

    def __init__(self, value: str, real=None):
        self.value = value
        self.real = real  # a real mpi4jax imported before this hook

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mpi4jax" and not fullname.startswith("mpi4jax."):
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if self.value not in _TRUE and self.value != "tokens":
            raise ImportError(
                f"JAXMPI_MPI4JAX={os.environ.get('JAXMPI_MPI4JAX')!r}: use 1 "
                "(mpi4jax >= 0.8's API) or tokens (mpi4jax < 0.8's), or unset "
                "it", name=fullname)
        if self.real is not None:
            sys.modules.setdefault("mpi4jax", self.real)
            raise ImportError(
                "JAXMPI_MPI4JAX is set, but the real mpi4jax was imported "
                "before jaxmpi's start-up hook ran (mpi4jax "
                f"{getattr(self.real, '__version__', '?')} from "
                f"{getattr(self.real, '__file__', None)}), so jaxmpi cannot "
                "stand in for it: code that imported it runs on mpi4jax. "
                "Find what imports mpi4jax at start-up (a .pth file or "
                "sitecustomize), or unset JAXMPI_MPI4JAX.", name=fullname)
        alias = importlib.import_module("jaxmpi.mpi4jax")
        return alias._finder().find_spec(fullname, path, target)


def _install_mpi4jax_hook(value: str) -> None:
    real = sys.modules.pop("mpi4jax", None)
    if real is not None:
        # Imported before this hook (by an earlier start-up file): the next
        # `import mpi4jax` comes here and refuses.
        for name in [n for n in sys.modules if n.startswith("mpi4jax.")]:
            del sys.modules[name]
    if not any(isinstance(f, _Mpi4jaxHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Mpi4jaxHook(value, real))


# --- JAXMPI_DISTRIBUTED: XLA's MPI collectives over jaxmpi ------------------

def surface_path() -> str:
    """The library MPITRAMPOLINE_LIB names: jaxmpi/_xla_mpi.so (found
    without importing jaxmpi)."""
    spec = importlib.util.find_spec("jaxmpi")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("jaxmpi is not installed", name="jaxmpi")
    return os.path.join(list(spec.submodule_search_locations)[0],
                        "_xla_mpi.so")


def surface_loaded(path: str | None = None) -> bool:
    """Whether the surface library is in this process (jaxlib loaded it)."""
    import ctypes  # only where asked: the start-up hook's cost stays nil

    try:
        ctypes.CDLL(path or surface_path(),
                    mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return False
    return True


def opted_in() -> bool:
    return _opted_in


def opt_in(check_now: bool = True) -> None:
    """Switch the route on in this process: before jax is imported, name
    jaxmpi's surface library in MPITRAMPOLINE_LIB (after checking that it
    has every symbol the installed jaxlib needs: at once, or when jaxlib is
    imported) and arrange that jax, once imported, uses XLA's MPI
    collectives and jaxmpi's cluster environment. Raises ImportError if jax
    was imported before (without the surface)."""
    global _opted_in
    if _opted_in:
        return
    surface = surface_path()
    if "jax" in sys.modules or "jaxlib" in sys.modules:
        if not surface_loaded(surface):
            raise ImportError(LATE, name="jaxmpi.distributed")
    elif check_now:
        check_jaxlib(surface)
    else:
        sys.meta_path.insert(0, _JaxlibCheck(surface))
    os.environ["MPITRAMPOLINE_LIB"] = surface
    os.environ["JAXMPI_DISTRIBUTED"] = "1"  # for the processes it starts
    _opted_in = True
    if "jax" in sys.modules and hasattr(sys.modules["jax"], "distributed"):
        configure_jax()
    else:
        sys.meta_path.insert(0, _JaxHook())


def _importing_distributed() -> bool:
    """Whether `import jaxmpi.distributed` is what imports the package now
    (the import machinery's frame for that name is on the stack)."""
    frame = sys._getframe(1)
    while frame is not None:
        if (frame.f_code.co_name == "_find_and_load"
                and frame.f_locals.get("name") == "jaxmpi.distributed"):
            return True
        frame = frame.f_back
    return False


def _running_distributed_main() -> bool:
    """Whether this is `python -m jaxmpi.distributed` locating its module
    (sys.argv[0] is "-m" until the module is found)."""
    if not sys.argv or sys.argv[0] != "-m":
        return False
    argv = list(getattr(sys, "orig_argv", ()))
    for i, arg in enumerate(argv[1:], 1):
        if arg == "-m":
            return i + 1 < len(argv) and argv[i + 1] == "jaxmpi.distributed"
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:] == "jaxmpi.distributed"
    return False


def package_import() -> None:
    """The first statement of jaxmpi/__init__.py, before it imports mpi4py
    and jax: opt in for `python -m jaxmpi.distributed`, `import
    jaxmpi.distributed` and JAXMPI_DISTRIBUTED=1."""
    if _opted_in:
        return
    if _startup_error is not None and _flag("JAXMPI_DISTRIBUTED") in _TRUE:
        raise _startup_error
    if (_running_distributed_main() or _importing_distributed()
            or _flag("JAXMPI_DISTRIBUTED") in _TRUE):
        opt_in(check_now=True)


# --- before jaxlib: its MPItrampoline's needs, checked ----------------------

def _rodata(m):
    """(offset, size) of an ELF64 little-endian file's .rodata, or None."""
    if m[:4] != b"\x7fELF" or m[4] != 2 or m[5] != 1:
        return None
    (shoff,) = struct.unpack_from("<Q", m, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", m, 0x3A)

    def section(i):
        return struct.unpack_from("<IIQQQQIIQQ", m, shoff + i * shentsize)

    strings = section(shstrndx)[4]
    for i in range(shnum):
        name, _, _, _, offset, size, *_ = section(i)
        end = m.find(b"\x00", strings + name)
        if m[strings + name:end] == b".rodata":
            return offset, size
    return None


def abi_names(library: str) -> set[str]:
    """The names jaxlib's MPItrampoline will look up: the matching string
    literals of its library's .rodata (641 in jaxlib 0.6.2 to 0.12; about
    0.1 s, cached per file in the user's cache directory)."""
    import mmap  # only on this path

    stat = os.stat(library)
    cache_dir = os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
        "jaxmpi")
    key = f"{os.path.realpath(library)}|{stat.st_size}|{stat.st_mtime_ns}"
    cache = os.path.join(cache_dir, "jaxlib-abi-"
                         + format(abs(hash_text(key)), "x") + ".txt")
    try:
        with open(cache) as f:
            first, *names = f.read().split("\n")
        if first == key:
            return {n for n in names if n}
    except OSError:
        pass
    names: set[str] = set()
    with open(library, "rb") as f, \
            mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        start, size = _rodata(m) or (0, len(m))
        end = start + size
        for key_bytes in (b"ABI_", b"mpiwrapper_", b"mpiabi_version_"):
            i = m.find(key_bytes, start, end)
            while i >= 0:
                s = m.rfind(b"\x00", start, i) + 1
                e = m.find(b"\x00", i, end)
                if e < 0:
                    break
                text = m[max(s, start):e].decode("latin-1")
                if _ABI_NAME.fullmatch(text):
                    names.add(text)
                i = m.find(key_bytes, e, end)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{cache}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write("\n".join([key, *sorted(names)]) + "\n")
        os.replace(tmp, cache)
    except OSError:
        pass
    return names


def hash_text(text: str) -> int:
    """A hash of text that is the same in every process (str's is not)."""
    h = 1469598103934665603
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def jaxlib_library() -> str | None:
    """The library of the installed jaxlib that embeds MPItrampoline."""
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        for name in ("libjax_common.so", "xla_extension.so"):
            path = os.path.join(folder, name)
            if os.path.exists(path):
                return path
    return None


def check_jaxlib(surface: str, library: str | None = None,
                 drop: tuple = ()) -> None:
    """Raise RuntimeError if jaxlib's MPItrampoline needs a symbol that the
    surface lacks: `import jax` would otherwise end the process (exit 1,
    "Could not resolve symbol"). ``drop``: names to treat as missing (the
    test of this check). JAXMPI_SKIP_ABI_CHECK=1 skips it."""
    if _flag("JAXMPI_SKIP_ABI_CHECK") in _TRUE:
        return
    library = library or jaxlib_library()
    if library is None:
        return  # no jaxlib: `import jax` fails on its own
    import ctypes  # only on this path

    lib = ctypes.CDLL(surface)
    missing = sorted(n for n in abi_names(library)
                     if n in drop or not hasattr(lib, n))
    if missing:
        shown = ", ".join(missing[:8]) + (" ..." if len(missing) > 8 else "")
        raise RuntimeError(
            f"jaxmpi.distributed: this jaxlib ({library}) resolves "
            f"{len(missing)} MPI symbol(s) that jaxmpi's MPI layer for XLA "
            f"({surface}) lacks: {shown}. Importing jax with it would end "
            "the process (MPItrampoline: Could not resolve symbol). Use a "
            "jaxlib that jaxmpi supports (0.6.2 to 0.12 are tested), or a "
            "newer jaxmpi.")


class _JaxlibCheck(importlib.abc.MetaPathFinder):
    """Checks jaxlib's needs when jaxlib is first imported (the start-up
    hook's deferred check: its exceptions would be swallowed there)."""

    def __init__(self, surface: str):
        self.surface = surface

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jaxlib":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        try:
            check_jaxlib(self.surface)
        except RuntimeError as e:
            raise ImportError(str(e), name="jaxlib") from None
        return None


# --- once jax is imported ---------------------------------------------------

class _PostImport(importlib.abc.Loader):
    """jax's own loader, followed by configure_jax()."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        configure_jax()

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _JaxHook(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "jax":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if _startup_error is not None:
            raise ImportError(str(_startup_error), name="jax")
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PostImport(spec.loader)
                return spec
        return None


_original_initialize = None


def configure_jax() -> None:
    """Once jax is imported: XLA's MPI collectives for the CPU (unless the
    program chose others) and jax.distributed.initialize through jaxmpi
    (jaxmpi.distributed.prepare: the cluster environment, the checks, the
    layer attached), with nothing of MPI initialised yet."""
    global _original_initialize
    jax = sys.modules["jax"]
    if _original_initialize is not None:
        return
    jax.config.update("jax_cpu_collectives_implementation", "mpi")
    original = jax.distributed.initialize

    @functools.wraps(original)
    def initialize(*args, **kwargs):
        prepare = importlib.import_module("jaxmpi.distributed").prepare
        prepare(args, kwargs)
        return original(*args, **kwargs)

    _original_initialize = original
    jax.distributed.initialize = initialize
