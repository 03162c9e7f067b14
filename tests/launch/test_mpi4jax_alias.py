"""Programs and libraries written for mpi4jax, run unchanged on jaxmpi:
``python -m jaxmpi.mpi4jax`` and ``import jaxmpi.mpi4jax``
(src/jaxmpi/mpi4jax.py). The library is mpi4jax_lib/ (a halo exchange with
walls doing ``import mpi4jax``, a gather-solve-broadcast solver doing ``from
mpi4jax import ...``, a module for mpi4jax < 0.8's token API); the program
mpi4jax_app.py checks its results against NumPy on every rank."""

import os
import re
import time

import pytest

from conftest import ROOT

SUITES = ("jax_dependent",)

HERE = os.path.dirname(os.path.abspath(__file__))
APP = os.path.join("tests", "launch", "mpi4jax_app.py")
ALIAS_FILE = os.path.join("jaxmpi", "mpi4jax.py")

FAKE = '''"""Not mpi4jax: a stand-in for an installed mpi4jax."""
__version__ = "0.9.1"
FAKE = True
'''


def with_path(*dirs):
    """The environment that puts dirs first on the ranks' sys.path."""
    old = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*dirs, *([old] if old else [])])}


def rank_lines(job, rank):
    prefix = f"rank {rank}: "
    return [line[len(prefix):] for line in job.stdout.splitlines()
            if line.startswith(prefix)]


# mpi4jax's version: the release whose API it mirrors, marked as jaxmpi's.
VERSION = re.compile(r"mpi4jax 0\.9\.1\+jaxmpi\.[0-9A-Za-z.]+ from (?P<file>\S+), "
                     r"cuda True, sycl False")


def check_app(job, n, main="mpi4jax_app.py"):
    """What every rank of mpi4jax_app.py must have printed."""
    assert job.returncode == 0, job
    py, px = {2: (2, 1), 3: (3, 1), 4: (2, 2)}[n]
    for r in range(n):
        lines = rank_lines(job, r)
        assert f"grid {py}x{px}, 2 steps: OK" in lines, (r, job)
        # The library's bad send reaches the program as jaxmpi's own error.
        assert (f"notify: ValueError: send: dest={n} is not a rank of the "
                f"communicator (valid: 0 to {n - 1} or MPI.PROC_NULL)") in lines, (r, job)
        assert f"argv ['2'] main {main}" in lines, (r, job)
        version = [m for m in map(VERSION.fullmatch, lines) if m]
        assert len(version) == 1, (r, job)
        assert version[0]["file"].endswith(ALIAS_FILE), version[0]
        assert any(l.startswith("find_spec origin ") and l.endswith(ALIAS_FILE)
                   for l in lines), (r, job)
        # mpi4jax >= 0.8's API: a token is an error, as in mpi4jax, and
        # mpi4jax < 0.8's module is missing, with the way to run such code.
        token = [l for l in lines if l.startswith("token=: ")]
        assert token and token[0].startswith(
            "token=: RuntimeError: allreduce: token= passed to mpi4jax, but "
            "mpi4jax here is jaxmpi standing in for mpi4jax >= 0.8"), (token, job)
        assert token[0].endswith("(Explicit token management is not supported "
                                 "for mpi4jax>=0.8.0.)"), token
        notoken = [l for l in lines if l.startswith("mpi4jax.notoken: ")]
        assert notoken and notoken[0].startswith(
            "mpi4jax.notoken: ModuleNotFoundError: No module named "
            "'mpi4jax.notoken': here mpi4jax is jaxmpi "), (notoken, job)
        assert "python -m jaxmpi.mpi4jax --tokens" in notoken[0], notoken


def installed_fake(tmp_path):
    """A directory holding a package named mpi4jax that is not jaxmpi."""
    (tmp_path / "mpi4jax").mkdir()
    fake = tmp_path / "mpi4jax" / "__init__.py"
    fake.write_text(FAKE)
    return fake


@pytest.mark.parametrize("n", [2, 3, 4])
def test_unchanged_library_runs_under_the_runner(mpirun, tmp_path, n):
    # mpi4jax_lib is next to the script, not in the job's working directory:
    # the runner puts the script's directory first on sys.path, as Python
    # does. An installed mpi4jax (a fake one on sys.path) is shadowed.
    installed_fake(tmp_path)
    job = mpirun(n, "-m", "jaxmpi.mpi4jax", APP, "2",
                 env=with_path(str(tmp_path)), timeout=240)
    check_app(job, n)


def test_unchanged_library_after_import_opt_in(mpirun):
    job = mpirun(2, os.path.join("tests", "launch", "mpi4jax_app_import.py"),
                 "2", timeout=240)
    check_app(job, 2, main="mpi4jax_app_import.py")


def test_token_api_library_as_module(mpirun):
    # --tokens: mpi4jax < 0.8's API (the top level returns (result, token);
    # mpi4jax.notoken and mpi4jax.experimental.notoken exist); -m module.
    job = mpirun(3, "-m", "jaxmpi.mpi4jax", "--tokens", "-m", "mpi4jax_lib.legacy",
                 env=with_path(HERE), timeout=240)
    assert job.returncode == 0, job
    for r in range(3):
        lines = rank_lines(job, r)
        assert len(lines) == 1 and re.fullmatch(
            r"legacy mpi4jax 0\.7\.2\+jaxmpi\.[0-9A-Za-z.]+: OK", lines[0]), (r, job)


def test_uncaught_error_in_library_ends_the_job(mpirun):
    # -c command: the library's failing call raises jaxmpi's error on every
    # rank; the traceback goes through the library and the job ends.
    code = ("import jax.numpy as jnp\n"
            "import mpi4jax_lib.solver as solver\n"
            "solver.notify(jnp.ones(2), 2)\n"
            "print('not reached', flush=True)\n")
    t0 = time.monotonic()
    job = mpirun(2, "-m", "jaxmpi.mpi4jax", "-c", code, env=with_path(HERE),
                 timeout=120)
    took = time.monotonic() - t0
    assert job.returncode != 0, job
    assert "not reached" not in job.stdout, job
    assert os.path.join("mpi4jax_lib", "solver.py") in job.stderr, job
    assert ("ValueError: send: dest=2 is not a rank of the communicator "
            "(valid: 0 to 1 or MPI.PROC_NULL)") in job.stderr, job
    assert re.search(r"jaxmpi: uncaught ValueError on rank [01]: calling "
                     "MPI_Abort", job.stderr), job
    assert took < 60, (took, job)


FAILING_RANK = """
import sys, jax.numpy as jnp
from mpi4py import MPI
import mpi4jax
if MPI.COMM_WORLD.Get_rank() == 1:
    {action}
mpi4jax.recv(jnp.zeros(2), source=1).block_until_ready()
print("not reached", flush=True)
"""


@pytest.mark.parametrize("action,status,message", [
    # As python -m mpi4py: a non-zero sys.exit is MPI_Abort with its status.
    ("sys.exit(4)", 4, "jaxmpi: sys.exit(4) on rank 1: calling MPI_Abort(4) so "
     "that the other ranks do not wait for it forever"),
    # A program's own exception hook, in place of jaxmpi's aborting one,
    # prints; the runner still ends the job.
    ("sys.excepthook = lambda *a: print('own hook:', a[1], file=sys.stderr)\n"
     "    raise KeyError('rank 1 fails')", 1, "own hook: 'rank 1 fails'"),
], ids=["sys_exit", "own_excepthook"])
def test_failing_rank_ends_the_job(mpirun, action, status, message):
    # Rank 1 leaves while rank 0 waits in a receive from it: not a hang.
    t0 = time.monotonic()
    job = mpirun(2, "-m", "jaxmpi.mpi4jax", "-c", FAILING_RANK.format(action=action),
                 timeout=120)
    took = time.monotonic() - t0
    assert job.returncode == status, job
    assert "not reached" not in job.stdout, job
    assert message in job.stderr, job
    assert took < 60, (took, job)


NO_ALIAS = """
import importlib.util, sys
import jaxmpi, jaxmpi.notoken, jaxmpi.experimental.notoken
print("spec", importlib.util.find_spec("mpi4jax").origin)
import mpi4jax
print("fake", getattr(mpi4jax, "FAKE", False))
try:
    import jaxmpi.mpi4jax
    print("no error")
except ImportError as e:
    print("ImportError:", e)
print("alias", "jaxmpi.mpi4jax" in sys.modules,
      [type(f).__name__ for f in sys.meta_path if "jaxmpi" in type(f).__module__])
"""


def test_no_alias_without_opt_in_and_real_mpi4jax_first_is_an_error(mpirun, tmp_path):
    # Importing jaxmpi (and its notoken modules) aliases nothing: `import
    # mpi4jax` still finds the installed one (a fake on sys.path here).
    # Installing the alias after it is imported is an ImportError naming both.
    fake = installed_fake(tmp_path)
    job = mpirun(1, "-c", NO_ALIAS, env=with_path(str(tmp_path)), timeout=120)
    assert job.returncode == 0, job
    lines = job.stdout.splitlines()
    assert lines[0] == f"spec {fake}", job
    assert lines[1] == "fake True", job
    assert lines[2] == (
        "ImportError: jaxmpi.mpi4jax: the real mpi4jax is already imported in "
        f"this process (mpi4jax 0.9.1 from {fake}), so jaxmpi cannot "
        "stand in for it: code that imported it would run on mpi4jax, code "
        "that imports it later on jaxmpi. Run the program as `python -m "
        "jaxmpi.mpi4jax script.py` (or `-m module`), or import jaxmpi.mpi4jax "
        "before anything imports mpi4jax."), job
    assert lines[3] == "alias False []", job


USAGE = """
import contextlib, io
import jaxmpi.mpi4jax as runner
for argv in ([], ["--bogus", "x.py"], ["-c"], ["--tokens"], ["no_such_file.py"],
             ["-m", "no_such_module_here"], ["--help"]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = runner.main(argv)
        except SystemExit as e:
            status = e.code
    print(argv, status, (err.getvalue() or out.getvalue()).splitlines()[:2])
import mpi4jax  # the alias the last main() installed: mpi4jax >= 0.8's API
for tokens in (True, "yes"):
    try:
        runner.install(tokens=tokens)
    except (RuntimeError, TypeError) as e:
        print(type(e).__name__, e)
"""


def test_command_line_errors_and_install_misuse(mpirun):
    # Every rank parses the same command line and leaves alike, without
    # running anything; Python's statuses (2: usage, file; 1: module).
    job = mpirun(1, "-c", USAGE, timeout=120)
    assert job.returncode == 0, job
    usage = "usage: python -m jaxmpi.mpi4jax [--tokens] <script.py> [arg] ..."
    usage_m = "   or: python -m jaxmpi.mpi4jax [--tokens] -m <module> [arg] ..."
    err = "python -m jaxmpi.mpi4jax: "
    missing = os.path.join(ROOT, "no_such_file.py")
    want = [
        ([], 2, [err + "no script, -m module or -c command to run", usage]),
        (["--bogus", "x.py"], 2, [err + "unknown option '--bogus'", usage]),
        (["-c"], 2, [err + "-c needs an argument", usage]),
        (["--tokens"], 2, [err + "no script, -m module or -c command to run", usage]),
        (["no_such_file.py"], 2, [err + f"can't open file {missing!r}: no such file"]),
        (["-m", "no_such_module_here"], 1, [err + "No module named no_such_module_here"]),
        (["--help"], 0, [usage, usage_m]),
    ]
    assert job.stdout.splitlines() == [f"{a} {s} {t}" for a, s, t in want] + [
        "RuntimeError install(tokens=True): mpi4jax was already imported through "
        "jaxmpi.mpi4jax with tokens=False (mpi4jax >= 0.8's API); choose the API "
        "before mpi4jax is first imported",
        "TypeError install: tokens must be True or False, got str: 'yes'"], job
