"""Build the C core once per MPI ABI family.

The core links no MPI and includes no mpi.h: each build takes its handle
types from csrc/abi/<family>.h and binds to the MPI library mpi4py loaded at
import time. Only a C11 compiler and jaxlib's FFI header are needed.

Environment:
  JAXMPI_FFI_INCLUDE  directory holding xla/ffi/api/c_api.h (default: jaxlib's)
  JAXMPI_SANITIZE     e.g. "address,undefined": build with sanitizers
"""

import glob
import os

from setuptools import Extension, setup


def ffi_include():
    path = os.environ.get("JAXMPI_FFI_INCLUDE")
    if path:
        return path
    import jaxlib

    return os.path.join(os.path.dirname(jaxlib.__file__), "include")


cflags = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-O2"]
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
        depends=glob.glob("csrc/*.h") + glob.glob("csrc/abi/*.h"),
    )
    for family in ("mpich", "openmpi", "mpiabi")
]

# Sanitized and plain objects must never be mixed: separate build trees.
build_base = "build/sanitize-" + sanitize.replace(",", "-") if sanitize else "build/plain"
setup(ext_modules=extensions, options={"build": {"build_base": build_base}})
