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
import subprocess
import sys

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
    assert libs == ["_core_mpiabi.so", "_core_mpich.so", "_core_openmpi.so"], libs


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
