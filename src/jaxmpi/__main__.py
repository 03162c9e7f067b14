"""python -m jaxmpi: what jaxmpi runs on (MPI, ABI, CUDA, JAX)."""

from __future__ import annotations

import sys


def info() -> dict:
    from mpi4py import MPI
    import jax
    import jaxlib
    import mpi4py

    import jaxmpi
    from jaxmpi import _core

    core = _core.get()
    vendor, version = MPI.get_vendor()
    levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
              MPI.THREAD_SERIALIZED: "serialized",
              MPI.THREAD_MULTIPLE: "multiple"}
    aware = core.mpi_cuda_aware
    ngpus, driver = core.cuda_driver()
    return {
        "jaxmpi": jaxmpi.__version__,
        "MPI vendor": f"{vendor} {'.'.join(map(str, version))}",
        "MPI standard": "{}.{}".format(*MPI.Get_version()),
        "MPI library": core.library_path,
        "MPI library version": core.library_version.splitlines()[0],
        "ABI": f"{core.family} (C core {core.lib._name.rsplit('/', 1)[-1]})",
        "thread level": levels.get(MPI.Query_thread(), MPI.Query_thread()),
        "large counts": ("MPI-4 large-count calls" if core.has_large_count
                         and core.use_large_count else "derived datatypes"),
        "CUDA built": "yes" if core.cuda_built else "no",
        "CUDA driver": driver if ngpus >= 0 else f"not loaded: {driver}",
        "MPI CUDA-aware": {None: "unknown (MPI cannot say)", True: "yes",
                           False: "no"}[aware],
        "GPU data path": ("device pointers to MPI (JAXMPI_CUDA_AWARE=1)"
                          if core.cuda_aware_mode else
                          "staged through pinned host memory"),
        "JAX": f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
               f"backend {jax.default_backend()}",
        "mpi4py": mpi4py.__version__,
        "Python": sys.version.split()[0],
        "ranks": f"{MPI.COMM_WORLD.Get_rank()} of {MPI.COMM_WORLD.Get_size()}",
    }


def fastest_safe_thread_level() -> str:
    """The `python -m jaxmpi` line on the thread level (docs/design.md,
    "Thread level")."""
    from mpi4py import MPI

    if MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
        return ("'serialized' is the fastest safe level (MPICH: ~0.25 us less "
                "per MPI call than 'multiple'): set mpi4py.rc.thread_level = "
                "'serialized' before importing mpi4py.MPI, dispatch jaxmpi "
                "work from one Python thread (enforced), call "
                "jax.effects_barrier() before your own mpi4py calls")
    return ("'serialized' in use, the fastest safe level: jaxmpi refuses a "
            "second Python thread; call jax.effects_barrier() before your own "
            "mpi4py calls")


def main() -> int:
    for key, value in info().items():
        print(f"{key:>20}: {value}")
    print(f"{'fastest safe level':>20}: {fastest_safe_thread_level()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
