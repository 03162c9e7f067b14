"""Run by test_native_abi.py under mpiexec: attaches jaxmpi's MPI layer for
XLA (as jax.distributed.initialize() does under the route), then calls the
compiled native_drive.c, which calls the surface's MPIABI_* functions as
XLA's MPI collectives do. Exits with the number of failed checks."""

import ctypes
import os
import sys

from jaxmpi import _native

_native.attach()
os.environ["JAXMPI_SURFACE"] = _native.SURFACE
driver = ctypes.CDLL(sys.argv[1])
sys.exit(min(driver.drive(), 100))
