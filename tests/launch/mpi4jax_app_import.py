"""mpi4jax_app.py with the alias installed by an import, the other way in:
the program's first lines, before anything imports mpi4jax."""

import sys

import jaxmpi.mpi4jax  # noqa: F401  (installs the alias)

import mpi4jax_app

if __name__ == "__main__":
    sys.exit(mpi4jax_app.main(sys.argv))
