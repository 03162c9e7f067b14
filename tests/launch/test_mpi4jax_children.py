"""JAXMPI_MPI4JAX in the processes a program starts (the start-up hook,
jaxmpi-startup.pth): a library's own test suite that starts a subprocess
whose kernel spawns its ranks with MPI_Comm_spawn (mpi4jax_spawnlib/)
passes with only the variable set; `python -m jaxmpi.mpi4jax` sets it for
its children; =tokens gives mpi4jax < 0.8's API; refusals happen at
`import mpi4jax`; unset, nothing is imported. (Singleton MPI_Comm_spawn
works with PyPI's MPICH and Open MPI 5 and Debian's Open MPI 4; Intel
MPI 2021.18 (impi-rt) segfaults in it with mpi4py alone: skipped there.) And
JAXMPI_DISTRIBUTED=1 reaching the children of `python -m
jaxmpi.distributed`."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT

SUITES = ("mpi_dependent",)

LIB = os.path.join(ROOT, "tests", "launch", "mpi4jax_spawnlib")
FAKE = '"""Not mpi4jax: a stand-in for an installed one."""\n__version__ = "0.9.1"\n'


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM", "JAXMPI_MPI4JAX",
                                "JAXMPI_DISTRIBUTED", "MPITRAMPOLINE_"))}
    # the MPI's own launcher (singleton spawn starts it) on PATH; as root,
    # Open MPI 5's PRRTE refuses to start without these (./run sets the
    # first two for mpirun)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    if os.geteuid() == 0:
        for k in ("OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM",
                  "PRTE_ALLOW_RUN_AS_ROOT", "PRTE_ALLOW_RUN_AS_ROOT_CONFIRM"):
            env.setdefault(k, "1")
    env.update(extra)
    return env


SPAWN = ("from mpi4py import MPI; import sys\n"
         "c = MPI.COMM_SELF.Spawn(sys.executable, args=['-c', 'from mpi4py "
         "import MPI; p = MPI.Comm.Get_parent(); p.send(1, dest=0); "
         "p.Disconnect()'], maxprocs=1)\n"
         "print('spawned', c.recv(source=0), MPI.get_vendor()[0]); "
         "c.Disconnect()\n")
_spawn = []


def spawn_works():
    """MPI_Comm_spawn from a singleton with mpi4py alone: required of MPICH;
    an MPI where it fails without jaxmpi (Intel MPI 2021.18's impi-rt
    segfaults in it, under its mpiexec too) skips the suite's tests."""
    if not _spawn:
        _spawn.append(subprocess.run([sys.executable, "-c", SPAWN],
                                     capture_output=True, text=True,
                                     env=clean_env(), timeout=120))
    job = _spawn[0]
    if job.returncode == 0:
        return
    vendor = subprocess.run(
        [sys.executable, "-c", "from mpi4py import MPI; print(*MPI.get_vendor())"],
        capture_output=True, text=True, env=clean_env(), timeout=120).stdout
    assert not vendor.startswith("MPICH"), (job.returncode, job.stderr[-2000:])
    pytest.skip(f"{vendor.strip()}: MPI_Comm_spawn from a singleton fails with "
                f"mpi4py alone (rc {job.returncode}), without jaxmpi")


def library_suite(*runner, **env):
    """The library's suite, run as its authors would (pytest in its folder),
    optionally through a runner (`-m jaxmpi.mpi4jax`)."""
    return subprocess.run(
        [sys.executable, *runner, "-m", "pytest", "-q", "--confcutdir", ".",
         "-p", "no:cacheprovider", "tests"], cwd=LIB,
        env=clean_env(**env), capture_output=True, text=True, timeout=600)


def test_a_library_suite_that_spawns_passes_with_only_the_variable():
    spawn_works()
    job = library_suite(JAXMPI_MPI4JAX="1")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-2000:]
    assert "1 passed" in job.stdout, job.stdout
    # Without it the spawned ranks find no mpi4jax: the variable is what
    # makes the suite run on jaxmpi.
    job = library_suite()
    assert job.returncode != 0, job.stdout
    assert "ModuleNotFoundError: No module named 'mpi4jax'" in job.stdout, job.stdout


def test_the_runner_sets_it_for_its_children():
    spawn_works()
    job = library_suite("-m", "jaxmpi.mpi4jax")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-2000:]
    assert "1 passed" in job.stdout, job.stdout


def child(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=clean_env(**env), timeout=300)


def test_the_variable_imports_nothing_until_mpi4jax_is_imported():
    code = ("import sys\n"
            "heavy = ('jax', 'jaxlib', 'mpi4py', 'jaxmpi', 'numpy')\n"
            "print('start', sorted(m for m in sys.modules "
            "if m.split('.')[0] in heavy or m == '_jaxmpi_startup'))\n"
            "import mpi4jax, jax.numpy as jnp\n"
            "from mpi4py import MPI\n"
            "print('mpi4jax', mpi4jax.__version__, "
            "float(mpi4jax.allreduce(jnp.float32(2), op=MPI.SUM)))\n")
    job = child(code, JAXMPI_MPI4JAX="1")
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    assert lines[0] == "start ['_jaxmpi_startup']", lines
    assert lines[1].startswith("mpi4jax 0.9.1+jaxmpi.") and \
        lines[1].endswith(" 2.0"), lines
    # unset: not even the hook's module
    job = child("import sys; print([m for m in sys.modules "
                "if 'jaxmpi' in m or m.startswith('mpi4jax')])")
    assert job.returncode == 0 and job.stdout.strip() == "[]", job


def test_tokens_gives_the_token_api():
    code = ("import mpi4jax, mpi4jax.notoken, jax.numpy as jnp\n"
            "from mpi4py import MPI\n"
            "out = mpi4jax.allreduce(jnp.float32(3), op=MPI.SUM)\n"
            "print(mpi4jax.__version__, type(out).__name__, len(out), "
            "float(mpi4jax.notoken.allreduce(jnp.float32(3), op=MPI.SUM)))\n")
    job = child(code, JAXMPI_MPI4JAX="tokens")
    assert job.returncode == 0, job.stderr
    assert job.stdout.startswith("0.7.2+jaxmpi."), job.stdout
    assert job.stdout.split()[1:] == ["tuple", "2", "3.0"], job.stdout


def test_refusals_happen_at_import_not_at_start(tmp_path):
    # A value the hook does not know: the process starts and runs; `import
    # mpi4jax` raises, saying what to set.
    job = child("print('started')\nimport mpi4jax\n", JAXMPI_MPI4JAX="2")
    assert job.stdout == "started\n", job
    assert ("ImportError: JAXMPI_MPI4JAX='2': use 1 (mpi4jax >= 0.8's API) or "
            "tokens (mpi4jax < 0.8's)") in job.stderr, job.stderr
    # A real mpi4jax imported before the hook ran (as by a start-up file
    # that sorts before jaxmpi's: here site runs late, by hand): refused at
    # the next `import mpi4jax`, naming it; the real one stays usable.
    (tmp_path / "mpi4jax").mkdir()
    fake = tmp_path / "mpi4jax" / "__init__.py"
    fake.write_text(FAKE)
    code = (f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n"
            "import mpi4jax as real\n"
            "import site\nsite.main()  # jaxmpi-startup.pth runs here\n"
            "print('started', real.__version__)\n"
            "try:\n    import mpi4jax\nexcept ImportError as e:\n"
            "    print('ImportError:', e)\n")
    job = subprocess.run([sys.executable, "-S", "-c", code],
                         capture_output=True, text=True, timeout=300,
                         env=clean_env(JAXMPI_MPI4JAX="1"))
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    assert lines[0] == "started 0.9.1", lines
    assert lines[1] == (
        "ImportError: JAXMPI_MPI4JAX is set, but the real mpi4jax was "
        "imported before jaxmpi's start-up hook ran (mpi4jax 0.9.1 from "
        f"{fake}), so jaxmpi cannot stand in for it: code that imported it "
        "runs on mpi4jax. Find what imports mpi4jax at start-up (a .pth file "
        "or sitecustomize), or unset JAXMPI_MPI4JAX."), lines


CHILD_OF_ROUTE = r"""
import os, subprocess, sys
out = subprocess.run([sys.executable, "-c",
    "import os, sys; print(os.environ.get('JAXMPI_DISTRIBUTED'), "
    "'_jaxmpi_startup' in sys.modules, "
    "os.environ.get('MPITRAMPOLINE_LIB', '').endswith('_xla_mpi.so'))"],
    capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                         if not k.startswith(("PMI_", "HYDRA"))})
sys.stdout.write("child: " + out.stdout)
"""


def test_the_distributed_route_reaches_its_children(mpirun):
    job = mpirun(1, "-m", "jaxmpi.distributed", "-c", CHILD_OF_ROUTE, env={},
                 timeout=120)
    assert job.returncode == 0, job
    assert "child: 1 True True" in job.stdout, job
