"""The lists of test files that launchers and CI run are derived from the
files (tests/suites.py): each names its suites in ``SUITES``. A typo in a
suite's name would drop the file from that suite silently: caught here."""

import glob
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _suites():
    spec = importlib.util.spec_from_file_location(
        "suites", os.path.join(ROOT, "tests", "suites.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_declared_suite_exists_and_has_files():
    suites = _suites()
    declared = {}
    for path in glob.glob(os.path.join(ROOT, "tests", "*", "test_*.py")):
        for name in suites.suites_of(path):
            declared.setdefault(name, []).append(os.path.relpath(path, ROOT))
    assert set(declared) == set(suites.DIRECTORY), declared
    for name, paths in declared.items():
        # a suite's files live where its runner looks for them
        assert all(p.startswith(suites.DIRECTORY[name] + os.sep)
                   for p in paths), (name, paths)
        assert sorted(paths) == suites.files(name)


def test_the_command_prints_a_suite():
    out = subprocess.run([sys.executable, "tests/suites.py", "mpi_errors"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    names = out.stdout.strip().split(",")
    assert "test_p2p.py" in names and "test_nonblocking.py" in names, names
    assert all(os.path.exists(os.path.join(ROOT, "tests", "mpi", n))
               for n in names), names
    bad = subprocess.run([sys.executable, "tests/suites.py", "nonsense"],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "unknown suite" in bad.stderr, bad
