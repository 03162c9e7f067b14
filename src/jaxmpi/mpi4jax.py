"""Run programs and libraries written for mpi4jax on jaxmpi, unchanged.

Two ways in, both opt-in (nothing changes for a program that does neither):

* ``mpiexec -n 4 python -m jaxmpi.mpi4jax script.py [arg ...]`` (also
  ``-m module [arg ...]`` and ``-c command [arg ...]``), in the manner of
  ``python -m mpi4py``: installs the alias below, then runs the target as
  ``__main__`` with its own ``sys.argv``. A rank whose target raises, or
  calls ``sys.exit`` with a non-zero status, ends the whole job
  (``MPI_Abort``) instead of leaving the other ranks waiting for it.
* ``import jaxmpi.mpi4jax`` at the top of a program, before anything
  imports mpi4jax: installs the alias for the rest of the process.

The alias: from then on ``import mpi4jax`` and ``from mpi4jax import send``,
anywhere in the process (a library's own modules included), give jaxmpi's
operations under mpi4jax's names, with mpi4jax's ``__version__``,
``has_cuda_support`` and ``has_sycl_support``. By default it is mpi4jax >=
0.8's API (bare results, ``jaxmpi.notoken``); ``--tokens`` (or
``install(tokens=True)``) gives mpi4jax < 0.8's instead: operations return
``(result, token)`` (the ``jaxmpi`` API), with ``mpi4jax.notoken`` (0.7)
and ``mpi4jax.experimental.notoken`` (0.5 and 0.6). If the real mpi4jax is
already imported, installing is an ``ImportError`` naming both. See
docs/apis.md, "Running mpi4jax programs and libraries".

The alias is a finder at the front of ``sys.meta_path`` (the way
setuptools stands in for ``distutils``) rather than ready-made
``sys.modules`` entries: ``importlib.util.find_spec("mpi4jax")``, which
libraries use to ask whether mpi4jax is installed, answers as for an
installed package, the API can still be chosen until the first import, and
an installed mpi4jax is shadowed, never loaded.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import os
import re
import sys
import types

import jaxmpi

from . import _runner, notoken
from ._version import __version__ as jaxmpi_version

# A real mpi4jax already imported is refused before the alias is installed
# (_check_no_real_mpi4jax).

# The mpi4jax releases whose public API each choice mirrors: 0.9.1 is the
# newest (its API is 0.8.0's), 0.7.2 the last to return tokens.
API_VERSION = "0.9.1"
TOKEN_API_VERSION = "0.7.2"

# mpi4jax's operations, the same in every release from 0.5 on.
OPERATIONS = ("allgather", "allreduce", "alltoall", "barrier", "bcast",
              "gather", "recv", "reduce", "scan", "scatter", "send",
              "sendrecv")

# --- the alias -------------------------------------------------------------

def _real_mpi4jax():
    """The first module named mpi4jax or mpi4jax.* in sys.modules that the
    alias did not make, or None."""
    for name in sorted(sys.modules):
        if name == "mpi4jax" or name.startswith("mpi4jax."):
            module = sys.modules[name]
            loader = getattr(module, "__loader__", None)
            if module is not None and not isinstance(loader, _Finder):
                return module
    return None


def _check_no_real_mpi4jax() -> None:
    real = _real_mpi4jax()
    if real is None:
        return
    top = sys.modules.get("mpi4jax") or real
    what = (f"mpi4jax {getattr(top, '__version__', '(no __version__)')} from "
            f"{getattr(top, '__file__', None) or '(no file)'}")
    if real.__name__ != "mpi4jax":
        what = f"{real.__name__} of {what}"
    raise ImportError(
        f"jaxmpi.mpi4jax: the real mpi4jax is already imported in this "
        f"process ({what}), so "
        "jaxmpi cannot stand in for it: code that imported it would run on "
        "mpi4jax, code that imports it later on jaxmpi. Run the program as "
        "`python -m jaxmpi.mpi4jax script.py` (or `-m module`), or import "
        "jaxmpi.mpi4jax before anything imports mpi4jax.",
        name="mpi4jax")


def _version(mirrored: str) -> str:
    """mpi4jax's version string: the mirrored release, marked as jaxmpi's
    (a PEP 440 local label, so version comparisons see the release)."""
    label = ".".join(p for p in re.split(r"[^0-9A-Za-z]+", jaxmpi_version) if p)
    return f"{mirrored}+jaxmpi.{label}"


def has_sycl_support() -> bool:
    """False: jaxmpi has no SYCL (Intel GPU) path."""
    return False


def _no_token(fn):
    """An operation of mpi4jax >= 0.8's API: ``token=`` is an error, as in
    mpi4jax, whose bare results a caller passing tokens would unpack as
    ``(result, token)`` (a 2-row array unpacks without an error)."""

    @functools.wraps(fn)
    def op(*args, **kwargs):
        if "token" in kwargs:
            raise RuntimeError(
                f"{fn.__name__}: token= passed to mpi4jax, but mpi4jax here "
                f"is jaxmpi standing in for mpi4jax >= 0.8 ({API_VERSION}'s "
                "API), whose operations take no token and return bare "
                "results. Code that passes tokens was written for mpi4jax "
                "< 0.8, whose operations return (result, token): run it with "
                "`python -m jaxmpi.mpi4jax --tokens ...`, or call "
                "jaxmpi.mpi4jax.install(tokens=True) before mpi4jax is first "
                "imported (Explicit token management is not supported for "
                "mpi4jax>=0.8.0.)")
        return fn(*args, **kwargs)

    return op


# Where mpi4jax >= 0.8 code meets what only mpi4jax < 0.8 had.
_TOKEN_ONLY = ("mpi4jax.notoken", "mpi4jax.experimental",
               "mpi4jax.experimental.notoken")
_TOKEN_HINT = ("{name} is mpi4jax < 0.8's: code that uses it was written for "
               "mpi4jax < 0.8, whose operations return (result, token); run "
               "it with `python -m jaxmpi.mpi4jax --tokens ...`")


def _missing_attribute(module_name: str, what: str, tokens: bool):
    def __getattr__(name):
        full = f"{module_name}.{name}"
        hint = ("; " + _TOKEN_HINT.format(name=full)
                if not tokens and full in _TOKEN_ONLY else "")
        raise AttributeError(
            f"module {module_name!r} has no attribute {name!r} (here "
            f"mpi4jax is {what}, with mpi4jax's public names only{hint})")

    return __getattr__


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and makes the modules ``mpi4jax``, and with tokens
    ``mpi4jax.notoken``, ``mpi4jax.experimental`` and
    ``mpi4jax.experimental.notoken``; refuses any other mpi4jax.*."""

    def __init__(self, tokens: bool):
        self.tokens = tokens

    def modules(self):
        if self.tokens:
            return ("mpi4jax", "mpi4jax.notoken", "mpi4jax.experimental",
                    "mpi4jax.experimental.notoken")
        return ("mpi4jax",)

    def _what(self) -> str:
        if self.tokens:
            return (f"jaxmpi {jaxmpi_version} standing in for mpi4jax "
                    f"{TOKEN_API_VERSION}: mpi4jax < 0.8's API, operations "
                    "return (result, token)")
        return (f"jaxmpi {jaxmpi_version} standing in for mpi4jax "
                f"{API_VERSION}: mpi4jax >= 0.8's API, bare results")

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "mpi4jax" and not fullname.startswith("mpi4jax."):
            return None
        if fullname not in self.modules():
            hint = ""
            if not self.tokens and fullname in _TOKEN_ONLY:
                hint = ". " + _TOKEN_HINT.format(name=fullname)
            # (name=None: `from mpi4jax import notoken` would otherwise drop
            # this message for its own "cannot import name")
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: here mpi4jax is "
                f"{self._what()}, with the modules "
                f"{', '.join(self.modules())} only{hint}")
        package = fullname in ("mpi4jax", "mpi4jax.experimental")
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=__file__,
                                              is_package=package)
        spec.has_location = True  # module.__file__: this file
        return spec

    def create_module(self, spec):
        name = spec.name
        module = types.ModuleType(name)
        module.__doc__ = f"{name}: {self._what()}."
        if name == "mpi4jax":
            if self.tokens:
                ops = {op: getattr(jaxmpi, op) for op in OPERATIONS}
            else:
                ops = {op: _no_token(getattr(notoken, op)) for op in OPERATIONS}
            module.__dict__.update(ops)
            module.__version__ = _version(
                TOKEN_API_VERSION if self.tokens else API_VERSION)
            module.has_cuda_support = jaxmpi.has_cuda_support
            module.has_sycl_support = has_sycl_support
            module.__all__ = [*OPERATIONS, "has_cuda_support", "has_sycl_support"]
        elif name.endswith("notoken"):
            module.__dict__.update({op: getattr(notoken, op) for op in OPERATIONS})
            module.__all__ = list(OPERATIONS)
        else:  # mpi4jax.experimental: a package holding notoken
            module.__all__ = []
        module.__getattr__ = _missing_attribute(name, self._what(), self.tokens)
        return module

    def exec_module(self, module):
        pass  # made whole by create_module


def _finder():
    return next((f for f in sys.meta_path if isinstance(f, _Finder)), None)


def install(tokens: bool = False) -> None:
    """Make ``import mpi4jax`` give jaxmpi for the rest of the process.

    Importing ``jaxmpi.mpi4jax`` calls ``install()``. Call
    ``install(tokens=True)`` after it, before anything imports mpi4jax, for
    code written for mpi4jax < 0.8.

    Args:
        tokens: False for mpi4jax >= 0.8's API (bare results, as
            ``jaxmpi.notoken``; ``token=`` is an error, as in mpi4jax);
            True for mpi4jax < 0.8's (``(result, token)``, as ``jaxmpi``,
            with ``mpi4jax.notoken`` and ``mpi4jax.experimental.notoken``).

    Returns:
        None.

    Raises:
        TypeError: ``tokens`` is not a bool.
        ImportError: the real mpi4jax is already imported.
        RuntimeError: mpi4jax was already imported through the alias with
            the other API.

    Example:
        ::

            import jaxmpi.mpi4jax    # before the library imports mpi4jax
            import oceanmodel        # its `import mpi4jax` gives jaxmpi
    """
    if not isinstance(tokens, bool):
        raise TypeError("install: tokens must be True or False, got "
                        f"{type(tokens).__name__}: {tokens!r}")
    _check_no_real_mpi4jax()
    finder = _finder()
    if finder is None:
        sys.meta_path.insert(0, _Finder(tokens))
        return
    if finder.tokens != tokens and "mpi4jax" in sys.modules:
        raise RuntimeError(
            f"install(tokens={tokens}): mpi4jax was already imported "
            f"through jaxmpi.mpi4jax with tokens={finder.tokens} "
            f"({'mpi4jax < 0.8' if finder.tokens else 'mpi4jax >= 0.8'}'s "
            "API); choose the API before mpi4jax is first imported")
    finder.tokens = tokens


# --- python -m jaxmpi.mpi4jax --------------------------------------------

USAGE = """\
usage: python -m jaxmpi.mpi4jax [--tokens] <script.py> [arg] ...
   or: python -m jaxmpi.mpi4jax [--tokens] -m <module> [arg] ...
   or: python -m jaxmpi.mpi4jax [--tokens] -c <command> [arg] ..."""

HELP = USAGE + """

Run a program written for mpi4jax on jaxmpi, unchanged: `import mpi4jax`
and `from mpi4jax import ...` anywhere in it (its libraries included) give
jaxmpi's operations under mpi4jax's names. Run it under your launcher:
mpiexec -n 4 python -m jaxmpi.mpi4jax script.py. A rank whose program raises
or calls sys.exit with a non-zero status ends the whole job (MPI_Abort
with that status; JAXMPI_ABORT_ON_ERROR=0 turns this off).

options:
  --tokens    mpi4jax < 0.8's API: operations return (result, token), and
              mpi4jax.notoken and mpi4jax.experimental.notoken exist
              (default: mpi4jax >= 0.8's, bare results)
  -h, --help  show this help and exit"""


def main(argv=None) -> int:
    """``python -m jaxmpi.mpi4jax [--tokens] (script | -m module | -c
    command) [arg ...]``: install the alias (and set ``JAXMPI_MPI4JAX`` so
    that the processes the program starts get it too), run the target, end
    the job with MPI_Abort if it fails on this rank. Returns 0, or the
    status that the target passed to ``sys.exit``."""
    flags, kind, target, args = _runner.parse(
        "jaxmpi.mpi4jax", sys.argv[1:] if argv is None else argv, USAGE, HELP,
        ("--tokens",))
    tokens = "--tokens" in flags
    install(tokens=tokens)
    os.environ["JAXMPI_MPI4JAX"] = "tokens" if tokens else "1"
    return _runner.execute("jaxmpi.mpi4jax", kind, target, args)


if __name__ == "__main__":
    # The imported module, not this __main__ copy, keeps the alias's state.
    sys.exit(importlib.import_module("jaxmpi.mpi4jax").main())
else:
    # JAXMPI_MPI4JAX=tokens (a parent's `python -m jaxmpi.mpi4jax --tokens`)
    # chooses mpi4jax < 0.8's API for this process too.
    install(tokens=os.environ.get("JAXMPI_MPI4JAX", "").strip().lower() == "tokens")
