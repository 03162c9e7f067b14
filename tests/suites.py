"""Which test files belong to which suite, read from the files themselves.

A test file names the suites it belongs to in a module-level tuple,
``SUITES = ("c_core", "across_hosts")``; the lists of files that the
launcher tests and CI run are derived from these (no list of files is
kept by hand: a new test file joins a suite where it is written). Read
with ast, so nothing is imported.

  tests/mpi:
    large_count    rerun with counts above 7 elements treated as large
                   (tests/launch/test_process.py)
    across_hosts   launched across simulated hosts
                   (tests/multihost/test_across_hosts.py)
    c_core         the files that drive the C core (.ci/run: asan)
    mpi_errors     the files whose calls make MPI fail (.ci/run:
                   asan-openmpi)
  tests/launch:
    mpi_dependent  the launcher tests whose outcome depends on the MPI
                   (.ci/run: openmpi, impi, system)
    jax_dependent  those whose outcome depends on Python or JAX (.ci/run:
                   newest, oldest)
    sanitized      those run with the sanitized C core (.ci/run: asan)
    alone          those that time what they run (benchmark drivers): never
                   beside another file's jobs (./run, JAXMPI_LAUNCH_WORKERS)

    python tests/suites.py SUITE     the suite's file names, comma-separated
"""

from __future__ import annotations

import ast
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DIRECTORY = {"large_count": "tests/mpi", "across_hosts": "tests/mpi",
             "c_core": "tests/mpi", "mpi_errors": "tests/mpi",
             "mpi_dependent": "tests/launch", "jax_dependent": "tests/launch",
             "sanitized": "tests/launch", "alone": "tests/launch"}


def suites_of(path: str) -> tuple:
    """The SUITES a test file declares (a tuple of strings; () without)."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "SUITES"):
            value = ast.literal_eval(node.value)
            if not (isinstance(value, tuple)
                    and all(isinstance(v, str) for v in value)):
                raise ValueError(f"{path}: SUITES must be a tuple of strings")
            return value
    return ()


def files(suite: str) -> list[str]:
    """The suite's test files, as paths from the repository's root."""
    if suite not in DIRECTORY:
        raise ValueError(f"unknown suite {suite!r}: one of {sorted(DIRECTORY)}")
    directory = DIRECTORY[suite]
    return [os.path.relpath(p, ROOT) for p in sorted(
        glob.glob(os.path.join(ROOT, directory, "test_*.py")))
        if suite in suites_of(p)]


def main(argv) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(",".join(os.path.basename(p) for p in files(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
