"""A small library written for mpi4jax, the way a published model is: its
own modules import mpi4jax (``import mpi4jax`` in ``halo``, ``from mpi4jax
import ...`` in ``solver``, mpi4jax < 0.8's token API in ``legacy``).
Nothing in it knows about jaxmpi: tests/launch/test_mpi4jax_alias.py runs
it on jaxmpi through ``python -m jaxmpi.mpi4jax`` and ``import
jaxmpi.mpi4jax``."""
