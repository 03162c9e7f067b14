"""Plain JAX programs over jaxmpi's MPI layer for XLA, as a user starts
them: `mpiexec -n P python -m jaxmpi.distributed prog.py [args]` (also -m
and -c), JAXMPI_DISTRIBUTED=1, `import jaxmpi.distributed`; the errors
(jax imported first, several devices per process, a jaxlib needing a
symbol the layer lacks), two jobs on one host (a process that never comes
and a killed one: test_native_failures.py). The program, native_app.py, has no
jaxmpi in it and checks its results against NumPy on every process."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, Job, launcher

# (the failures under the launcher, whose handling depends on the MPI, are
# test_native_failures.py's; under the sanitizers jaxlib cannot load the
# layer: test_native_abi.py drives it from C)
SUITES = ("jax_dependent",)

APP = os.path.join("tests", "launch", "native_app.py")
ROUTE = ["-m", "jaxmpi.distributed"]


def lines_of(job, process):
    prefix = f"process {process}: "
    return [l[len(prefix):] for l in job.stdout.splitlines()
            if l.startswith(prefix)]


def check_app(job, n, argv="[]"):
    assert job.returncode == 0, job
    for p in range(n):
        lines = lines_of(job, p)
        for check in ("psum OK", "ppermute OK", f"argv {argv}",
                      "collectives mpi", f"processes {n} devices {n} local 1"):
            assert check in lines, (p, check, job)
        assert any(re.fullmatch(r"sum [0-9.]+ OK", l) for l in lines), (p, job)
        calls = [int(l.split()[-1]) for l in lines
                 if l.startswith("native calls ")]
        # over gloo no call would be counted; a split, two all-reduces
        # and a permute's sends and receives at least
        assert calls and calls[0] >= (3 if n > 1 else 0), (p, job)
    return lines_of(job, 0)


@pytest.mark.parametrize("n", [2, 3])
def test_route_runs_an_unchanged_program(mpirun, n):
    # The contract: mpiexec -n P python -m jaxmpi.distributed prog.py [args],
    # the program calling jax.distributed.initialize() with no arguments.
    job = mpirun(n, *ROUTE, APP, "x", "--y", env={}, timeout=240)
    lines = check_app(job, n, argv="['x', '--y']")
    # every process on this host: the coordinator is rank 0's, on loopback
    assert any(re.fullmatch(r"coordinator 127\.0\.0\.1:\d+", l)
               for l in lines), job


def test_route_runs_a_module_and_a_command(mpirun):
    env = {"PYTHONPATH": os.path.join(ROOT, "tests", "launch")}
    job = mpirun(2, *ROUTE, "-m", "native_app", "7", env=env, timeout=240)
    check_app(job, 2, argv="['7']")
    job = mpirun(2, *ROUTE, "-c", open(os.path.join(ROOT, APP)).read(), "z",
                 env={}, timeout=240)
    check_app(job, 2, argv="['z']")


def test_explicit_arguments_keep_working(mpirun):
    job = mpirun(2, *ROUTE, APP, "--explicit", str(29500 + os.getpid() % 3000),
                 env={}, timeout=240)
    check_app(job, 2, argv=f"['--explicit', '{29500 + os.getpid() % 3000}']")


OPT_IN = """
import jaxmpi.distributed  # before jax: the opt-in inside a program
import runpy, sys
sys.argv = ["native_app.py"]
runpy.run_path(%r, run_name="__main__")
"""


def test_opt_in_by_variable_and_by_import(mpirun):
    job = mpirun(2, APP, env={"JAXMPI_DISTRIBUTED": "1"}, timeout=240)
    check_app(job, 2)
    job = mpirun(2, "-c", OPT_IN % os.path.join(ROOT, APP), env={},
                 timeout=240)
    check_app(job, 2)


def test_without_opt_in_nothing_changes(mpirun):
    # No variable, no route: JAX's own default (gloo), no jaxmpi imported,
    # jax.distributed.initialize() needs its arguments as before.
    code = ("import sys, jax\n"
            "print('modules', sorted(m for m in sys.modules if 'jaxmpi' in m))\n"
            "print('collectives', jax.config.jax_cpu_collectives_implementation)\n")
    job = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=120, env={
                             k: v for k, v in os.environ.items()
                             if k not in ("JAXMPI_DISTRIBUTED", "JAXMPI_MPI4JAX",
                                          "MPITRAMPOLINE_LIB")})
    assert job.returncode == 0, job.stderr
    assert "modules []" in job.stdout, job.stdout
    assert "collectives mpi" not in job.stdout, job.stdout


def test_jax_imported_first_is_an_error(mpirun):
    # Too late for jaxlib: an ImportError that says how to opt in before jax.
    for code in ("import jax\nimport jaxmpi.distributed\n",
                 "import jax, os\nos.environ['JAXMPI_DISTRIBUTED'] = '1'\n"
                 "import jaxmpi\n"):
        job = mpirun(1, "-c", code, env={}, timeout=120)
        assert job.returncode != 0, job
        assert ("ImportError: jaxmpi.distributed: jax was imported before "
                "jaxmpi's route for plain JAX was switched on") in job.stderr, job
        assert "python -m jaxmpi.distributed prog.py" in job.stderr, job


def test_several_devices_per_process_is_a_clear_error(mpirun):
    job = mpirun(2, *ROUTE, APP, env={
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAXMPI_ABORT_ON_ERROR": "0"}, timeout=240)
    assert job.returncode != 0, job
    assert job.stderr.count(
        "jax.distributed.initialize: 2 CPU devices per process") == 2, job
    assert "What works: one device per process" in job.stderr, job
    assert "process 0: psum" not in job.stdout, job


def test_two_jobs_on_one_host_never_collide():
    # Each job's rank 0 takes a port from the kernel and broadcasts it: two
    # jobs started together get two coordinators, and both run.
    env = dict(os.environ)
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
        del env[k]
    cmd = [*launcher(), "-n", "2", sys.executable, *ROUTE, APP]
    procs = [subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    jobs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=300)
        finally:
            p.kill()
        jobs.append(Job(subprocess.CompletedProcess(cmd, p.returncode, out,
                                                    err)))
    coords = [next(l for l in check_app(j, 2) if l.startswith("coordinator"))
              for j in jobs]
    assert coords[0] != coords[1], coords


def test_the_table_is_what_jaxlib_resolves():
    # csrc/xla/abi.h's rows: exactly the names the installed jaxlib's
    # MPItrampoline looks up (read from its library), each defined by the
    # surface; the calls served by the C core are those XLA's collectives
    # make (and MPI_Abort).
    import ctypes

    import _jaxmpi_startup as s

    lib = ctypes.CDLL(s.surface_path())  # (no MPI here: not jaxmpi itself)
    rows, i = [], 0
    name, kind, how, value = (ctypes.c_char_p(), ctypes.c_int(),
                              ctypes.c_int(), ctypes.c_int64())
    while lib.jaxmpi_xla_row(i, ctypes.byref(name), ctypes.byref(kind),
                             ctypes.byref(how), ctypes.byref(value)) == 0:
        rows.append((name.value.decode(), kind.value, how.value))
        i += 1
    symbols = {r[0] for r in rows} | {
        "mpiwrapper_version_major", "mpiwrapper_version_minor",
        "mpiwrapper_version_patch", "mpiabi_version_major",
        "mpiabi_version_minor", "mpiabi_version_patch",
        "mpiwrapper_export_fortran_constants_"}
    assert s.abi_names(s.jaxlib_library()) == symbols
    assert len(rows) == 634
    core = sorted(r[0][len("MPIABI_"):] for r in rows
                  if r[1] == 0 and r[2] == 0)  # functions served by the core
    assert core == sorted(
        "Abort Allgather Allreduce Comm_free Comm_rank Comm_size Comm_split "
        "Finalize Finalized Get_library_version Get_version Init Init_thread "
        "Initialized Irecv Is_thread_main Isend Query_thread Reduce_scatter "
        "Sendrecv Wait".split())
    s.check_jaxlib(s.surface_path())  # passes: nothing missing


def test_a_jaxlib_needing_a_symbol_the_layer_lacks(tmp_path):
    # Named in the check before jax is imported; without the check, jaxlib's
    # MPItrampoline ends the process at `import jax`. A library lacking
    # every symbol stands for a layer lacking one.
    import _jaxmpi_startup as s

    with pytest.raises(RuntimeError) as e:
        s.check_jaxlib(s.surface_path(), drop=("MPIABI_Win_free",))
    assert "resolves 1 MPI symbol(s) that jaxmpi's MPI layer for XLA" \
        in str(e.value) and "MPIABI_Win_free" in str(e.value)
    assert "would end the process" in str(e.value)
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build a library lacking the symbols")
    (tmp_path / "lib.c").write_text("int jaxmpi_placeholder;\n")
    lib = tmp_path / "liblacking.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib),
                    str(tmp_path / "lib.c")], check=True)
    with pytest.raises(RuntimeError, match="resolves 641 MPI symbol"):
        s.check_jaxlib(str(lib))
    env = dict(os.environ, MPITRAMPOLINE_LIB=str(lib))
    job = subprocess.run([sys.executable, "-c", "import jax"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert job.returncode == 1, job
    assert "Could not resolve symbol" in job.stderr, job.stderr
