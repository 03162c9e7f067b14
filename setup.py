"""Build the C core once per MPI ABI family, as plain shared libraries.

The core links no MPI and includes no mpi.h: each build takes its handle
types from csrc/abi/<family>.h and binds to the MPI library mpi4py loaded at
import time. It uses no Python C API either (Python loads it with ctypes), so
the libraries are named jaxmpi/_core_<family>.so, without CPython's ABI tag,
and the wheel is tagged py3-none-<platform>: one wheel for every CPython
>= 3.10 and every MPI. Only a C11 compiler and jaxlib's FFI header (from the
build requirement) are needed to build.

Environment:
  JAXMPI_FFI_INCLUDE  directory holding xla/ffi/api/c_api.h (default: jaxlib's)
  JAXMPI_SANITIZE     e.g. "address,undefined": build with sanitizers
  JAXMPI_WERROR=1     warnings are errors (./run and CI set it; a user's
                      install does not, so a newer compiler's new warning
                      never breaks it)
"""

import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; older ones use the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # no wheel to build here (e.g. setup.py sdist)
        bdist_wheel = None


def ffi_include():
    path = os.environ.get("JAXMPI_FFI_INCLUDE")
    if path:
        return path
    import jaxlib

    return os.path.join(os.path.dirname(jaxlib.__file__), "include")


class build_shared_libraries(build_ext):
    """build_ext for libraries that ctypes loads: file names without the
    interpreter's tag (_core_mpich.so, not _core_mpich.cpython-311-...so)."""

    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"

    def get_export_symbols(self, ext):
        return ext.export_symbols  # no PyInit_<name>: not a Python module

    def run(self):
        # A build tree from before the libraries lost their tag still holds
        # _core_<family>.cpython-*.so, which would ship next to ours.
        ours = {self.get_ext_fullpath(ext.name) for ext in self.extensions}
        stale = glob.glob(os.path.join(self.build_lib, "jaxmpi", "_core_*.so"))
        for path in stale:
            if path not in ours:
                os.remove(path)
        super().run()


class build_py_with_startup_hook(build_py):
    """build_py, plus jaxmpi's start-up hook at the top of the wheel
    (site-packages/jaxmpi-startup.pth): one line that imports
    _jaxmpi_startup only when JAXMPI_MPI4JAX or JAXMPI_DISTRIBUTED is set
    (src/_jaxmpi_startup.py says what it does)."""

    HOOK = "jaxmpi-startup.pth"

    def run(self):
        super().run()
        self.copy_file(os.path.join("src", self.HOOK),
                       os.path.join(self.build_lib, self.HOOK))

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode),
                os.path.join(self.build_lib, self.HOOK)]


cmdclass = {"build_ext": build_shared_libraries,
            "build_py": build_py_with_startup_hook}
if bdist_wheel is not None:

    class bdist_wheel_any_python(bdist_wheel):
        """A platform wheel (it holds compiled code) for any Python 3."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = bdist_wheel_any_python


cflags = ["-std=c11", "-Wall", "-Wextra", "-fvisibility=hidden", "-O2"]
if os.environ.get("JAXMPI_WERROR", "").strip().lower() in ("1", "true", "yes", "on"):
    cflags.append("-Werror")
ldflags = []
sanitize = os.environ.get("JAXMPI_SANITIZE")
if sanitize:
    # Python's own CFLAGS, which setuptools puts first, hold -fwrapv: signed
    # overflow would be defined and UBSan blind to it. Ours come later, win.
    cflags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g",
               "-fno-sanitize-recover=undefined", "-fno-wrapv"]
    ldflags += [f"-fsanitize={sanitize}"]

sources = sorted(glob.glob("csrc/*.c"))
extensions = [
    Extension(
        f"jaxmpi._core_{family}",
        sources=sources,
        include_dirs=["csrc", ffi_include()],
        define_macros=[(f"JAXMPI_ABI_{family.upper()}", "1")],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        libraries=["dl", "pthread"],
        depends=sorted(glob.glob("csrc/*.h") + glob.glob("csrc/abi/*.h")
                       + glob.glob("csrc/xla/*.h")),
    )
    for family in ("mpich", "openmpi", "mpiabi")
]
# The library jaxlib's MPItrampoline loads for XLA's MPI collectives
# (MPITRAMPOLINE_LIB): every symbol of csrc/xla/abi.h's table, no MPI, the
# same for every family; the C core serves its calls once attached
# (docs/design.md, "Plain JAX on MPI").
extensions.append(Extension(
    "jaxmpi._xla_mpi",
    sources=["csrc/xla/surface.c"],
    include_dirs=["csrc/xla"],
    extra_compile_args=cflags,
    extra_link_args=ldflags,
    depends=["csrc/xla/abi.h"],
))

# Sanitized and plain objects must never be mixed: separate build trees.
build_base = "build/sanitize-" + sanitize.replace(",", "-") if sanitize else "build/plain"
setup(
    license="MIT",  # here, not in pyproject.toml: see its `dynamic`
    ext_modules=extensions,
    cmdclass=cmdclass,
    options={"build": {"build_base": build_base}},
)
