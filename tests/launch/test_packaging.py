"""The installed package as a release: the C core as plain shared libraries
(one wheel for every Python), the version in one place, JAX's internals in
one module, and an import that raises no deprecation warning of the JAX in
use (run by ./run in every CI configuration: newest and oldest JAX).
The sdist-to-wheel build is scripts/check_wheel.sh (CI: wheel)."""

import ast
import glob
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, san_env

# The suites this file belongs to (tests/suites.py).
SUITES = ("mpi_dependent", "jax_dependent")

SRC = os.path.join(ROOT, "src", "jaxmpi")


def run_python(*args, env=None):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))}
    full_env.update(san_env())  # a sanitized core needs its runtime preloaded
    full_env.update(env or {})
    # Outside the checkout, so that the installed jaxmpi is the one imported.
    return subprocess.run([sys.executable, *args], cwd="/", env=full_env,
                          capture_output=True, text=True, timeout=300)


def test_import_raises_no_deprecation_warning():
    proc = run_python(
        "-W", "error::DeprecationWarning", "-W", "error::PendingDeprecationWarning",
        "-c", "import jaxmpi, jaxmpi.notoken, jax; print(jax.__version__)",
        env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_installed_core_is_plain_shared_libraries():
    proc = run_python("-c", "import jaxmpi._version as v, os; print(os.path.dirname(v.__file__))")
    assert proc.returncode == 0, proc.stderr[-4000:]
    pkg = proc.stdout.strip()
    libs = sorted(os.path.basename(p) for p in glob.glob(os.path.join(pkg, "*.so")))
    # No interpreter tag (cpython-311-...): the same files serve every Python.
    # (_xla_mpi.so: the MPI layer jaxlib loads for plain JAX, docs/native.md)
    assert libs == ["_core_mpiabi.so", "_core_mpich.so", "_core_openmpi.so",
                    "_xla_mpi.so"], libs


def test_version_is_written_once():
    with open(os.path.join(SRC, "_version.py")) as f:
        stated = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M).group(1)
    proc = run_python("-c", "import jaxmpi; print(jaxmpi.__version__)",
                      env={"JAX_PLATFORMS": "cpu"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == stated
    assert importlib.metadata.version("jaxmpi") == stated
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        project = f.read().split("\n[project]\n", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^version\s*=', project, re.M) is None, "version written twice"
    assert re.search(r'^dynamic\s*=.*"version"', project, re.M), project


def test_jax_internals_only_in_jax_compat():
    # Every module but _jax_compat.py imports JAX's public top-level modules
    # only (jax, jax.numpy, jax.lax, jax.ffi, ...); internals and the
    # transformation registries go through _jax_compat.
    private = ("jax._src", "jax.interpreters", "jax.extend", "jaxlib")
    offenders = []
    for path in sorted(glob.glob(os.path.join(SRC, "*.py"))):
        if os.path.basename(path) == "_jax_compat.py":
            continue
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.startswith(private) and name != "jaxlib":
                    offenders.append(f"{os.path.basename(path)}:{node.lineno}: {name}")
    assert not offenders, offenders


def _readelf_glibc_needs(path):
    """{GLIBC_ version: undefined symbols needing it}, as binutils sees it."""
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True,
                         text=True, check=True).stdout
    needs = {}
    for m in re.finditer(r"\sUND (\S+)@(GLIBC_[0-9.]+) \(\d+\)$", out, re.M):
        needs.setdefault(m.group(2), set()).add(m.group(1))
    return needs


def test_glibc_needs_of_the_installed_core():
    # scripts/glibc_needs.py (the release check's reading of the ELF files)
    # against readelf, on the installed cores: the built checkout's (the
    # build machine's glibc) or the release wheel's (glibc 2.17 stubs). And
    # what the installed wheel's tag promises holds of its libraries.
    if shutil.which("readelf") is None:
        pytest.skip("no readelf (binutils) to compare with")
    proc = run_python("-c", "import jaxmpi._version as v, os; print(os.path.dirname(v.__file__))")
    assert proc.returncode == 0, proc.stderr[-4000:]
    libs = sorted(glob.glob(os.path.join(proc.stdout.strip(), "_core_*.so")))
    assert len(libs) == 3, libs
    script = os.path.join(ROOT, "scripts", "glibc_needs.py")
    key = lambda v: tuple(int(x) for x in v[len("GLIBC_"):].split("."))  # noqa: E731
    for lib in libs:
        reference = _readelf_glibc_needs(lib)
        top = max(reference, key=key)
        got = subprocess.run([sys.executable, script, lib], capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
        assert got.stdout == f"{lib}: {top} ({', '.join(sorted(reference[top]))})\n"
        # A floor below what the library needs fails, one at it passes
        # (GLIBC_2.3.2 needs 2.4, above 2.3).
        major, minor, *patch = key(top)
        at = (major, minor + 1) if patch else (major, minor)
        for floor, status in (((at[0], at[1] - 1), 1), (at, 0)):
            got = subprocess.run([sys.executable, script, "--max", "%d.%d" % floor, lib],
                                 capture_output=True, text=True)
            assert got.returncode == status, (floor, got.stdout, got.stderr)
    tags = [line.split(":", 1)[1].strip()
            for line in importlib.metadata.distribution("jaxmpi").read_text("WHEEL").splitlines()
            if line.startswith("Tag:")]
    floors = [m.groups() for t in tags for m in [re.search(r"manylinux_(\d+)_(\d+)_", t)] if m]
    if floors:  # installed from the release wheel (a local build says linux_x86_64)
        got = subprocess.run([sys.executable, script, "--max", ".".join(floors[0]), *libs],
                             capture_output=True, text=True)
        assert got.returncode == 0, (tags, got.stdout, got.stderr)
