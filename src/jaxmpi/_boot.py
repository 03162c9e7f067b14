"""Imported first of all by jaxmpi/__init__.py, before mpi4py and jax: the
plain-JAX route (``python -m jaxmpi.distributed``, ``import
jaxmpi.distributed``, ``JAXMPI_DISTRIBUTED=1``) must name jaxmpi's MPI
library to jaxlib before jax is imported (docs/design.md, "Plain JAX on
MPI"). Importing this module is the action: _jaxmpi_startup decides,
sets the environment or raises the ImportError that says how to opt in
before jax."""

import _jaxmpi_startup

_jaxmpi_startup.package_import()
