"""Tests that start whole MPI jobs (examples, exit, debug log, large
counts). Run with plain pytest, not under mpiexec: each test launches its
own job through $JAXMPI_LAUNCH (set by ./run) with a timeout."""

import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# A library's own test suite that test_mpi4jax_children.py runs as its
# authors would (it fails without JAXMPI_MPI4JAX=1, by design).
collect_ignore = ["mpi4jax_spawnlib"]


def launcher():
    cmd = os.environ.get("JAXMPI_LAUNCH")
    if cmd:
        return shlex.split(cmd)
    return [os.path.join(os.path.dirname(sys.executable), "mpiexec")]


def san_env():
    out = {}
    for item in shlex.split(os.environ.get("JAXMPI_SAN_ENV", "")):
        k, _, v = item.partition("=")
        out[k] = v
    return out


# Open MPI's launcher gives ranks a pty, so a child pytest colours its
# summary ("\x1b[1m1 passed"), which a test's pattern must not see.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Job:
    def __init__(self, proc):
        self.returncode = proc.returncode
        self.stdout = _ANSI.sub("", proc.stdout)
        self.stderr = _ANSI.sub("", proc.stderr)

    def __repr__(self):
        return (f"rc={self.returncode}\n--- stdout\n{self.stdout[-4000:]}\n"
                f"--- stderr\n{self.stderr[-4000:]}")


def several_devices(env, args) -> bool:
    """Whether a job runs programs over several JAX devices per process
    (forced host devices above 1, or a script's --devices): JAX's
    persistent cache (CI's) is then off for it, since jax 0.10 crashes
    writing such a program and jaxmpi raises instead."""
    count = re.search(r"--xla_force_host_platform_device_count=(\d+)",
                      env.get("XLA_FLAGS", ""))
    return bool(count and int(count.group(1)) > 1) or "--devices" in args


def runner(record_dir):
    """run(n, *args, env=None, timeout=300): a job of n ranks of
    `python args...` from the repository's root, as a Job. The flight
    recorder's rings (a timeout, an MPI error) go to record_dir, not the
    working directory (the repository's root)."""
    def run(n, *args, env=None, timeout=300):
        full_env = dict(os.environ)
        for k in [k for k in full_env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
            del full_env[k]
        full_env.update(san_env())
        full_env["JAXMPI_RECORD_DIR"] = str(record_dir)
        full_env.update(env or {})
        if several_devices(full_env, args):
            full_env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
        cmd = [*launcher(), "-n", str(n), sys.executable, *args]
        proc = subprocess.run(cmd, cwd=ROOT, env=full_env, capture_output=True,
                              text=True, timeout=timeout)
        return Job(proc)

    return run


@pytest.fixture
def mpirun(tmp_path):
    return runner(tmp_path / "jaxmpi-record")


@pytest.fixture(scope="module")
def mpirun_module(tmp_path_factory):
    """mpirun for a job that a module's tests share."""
    return runner(tmp_path_factory.mktemp("jaxmpi-record"))
