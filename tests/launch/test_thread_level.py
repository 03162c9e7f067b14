"""Below MPI_THREAD_MULTIPLE jaxmpi takes its calls from one Python thread
only, and refuses a second one with a clear error (jaxmpi/_threads.py);
under MPI_THREAD_MULTIPLE threads are allowed."""

import pytest

# The suites this file belongs to (tests/suites.py).
SUITES = ("jax_dependent",)

SCRIPT = r"""
import sys, threading
import mpi4py
mpi4py.rc.thread_level = sys.argv[1]
import warnings
warnings.simplefilter("ignore")
import jax, jax.numpy as jnp
from mpi4py import MPI
import jaxmpi.notoken as mpx

f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM))
g = mpx.jit(lambda x: mpx.allreduce(x, MPI.SUM))
x = jnp.arange(3.0)
print(f"main {f(x).tolist()} {mpx.allreduce(x, MPI.SUM).tolist()}", flush=True)
for what, call in (("jit", lambda: f(x)), ("eager", lambda: mpx.allreduce(x, MPI.SUM)),
                   ("region", lambda: g(x))):
    got = []
    def other():
        try:
            got.append(("ok", jax.block_until_ready(call()).tolist()))
        except Exception as e:
            got.append((type(e).__name__, str(e)))
    t = threading.Thread(target=other)
    t.start(); t.join()
    print(what, got[0], flush=True)
"""


@pytest.mark.parametrize("level", ["serialized", "multiple"])
def test_second_thread(mpirun, tmp_path, level):
    script = tmp_path / "threads.py"
    script.write_text(SCRIPT)
    job = mpirun(1, str(script), level, timeout=120)
    assert job.returncode == 0, job
    out = job.stdout
    assert "main [0.0, 1.0, 2.0] [0.0, 1.0, 2.0]" in out, job
    for what in ("jit", "eager", "region"):
        line = next(l for l in out.splitlines() if l.startswith(what + " "))
        if level == "serialized":
            assert "MPIConfigurationError" in line, job
            assert "below MPI_THREAD_MULTIPLE" in line, job
            assert "dispatched from Python thread" in line, job
        else:
            assert line == f"{what} ('ok', [0.0, 1.0, 2.0])", job
