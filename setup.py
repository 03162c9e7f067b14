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
    cflags += [f"-fsanitize={sanitize}", "-fno-omit-frame-pointer", "-g",
               "-fno-sanitize-recover=undefined"]
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
        libraries=["dl"],
        depends=glob.glob("csrc/*.h") + glob.glob("csrc/abi/*.h"),
    )
    for family in ("mpich", "openmpi", "mpiabi")
]

setup(ext_modules=extensions)
