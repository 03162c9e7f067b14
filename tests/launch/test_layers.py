"""The C core and the Python package are layered: no file of csrc/ calls
into its own layer or one above it (scripts/c_layers.py), no module of
src/jaxmpi imports one of its own floor or above, or at any place but the
top of the file (scripts/py_layers.py); docs/design.md, "Layers"."""

import importlib.util
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load(name="c_layers"):
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(ROOT, "scripts", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_checker_catches_an_upward_call_and_an_unlisted_file():
    layers = _load()
    deps = {"mpi_api": {"watchdog": {"jm_wait"}}, "watchdog": {"mpi_api": {"jm_mpi"}},
            "newfile": {}}
    bad = layers.violations(deps)
    assert any("csrc/mpi_api.c (layer 0) uses jm_wait of csrc/watchdog.c" in b
               for b in bad), bad
    assert any("csrc/newfile.c is not in LAYERS" in b for b in bad), bad
    assert not any("watchdog.c (layer" in b and "uses jm_mpi" in b for b in bad)


@pytest.mark.skipif(not (shutil.which(os.environ.get("CC", "cc")) and shutil.which("nm")),
                    reason="needs a C compiler and nm")
def test_no_c_file_calls_into_its_layer_or_above():
    layers = _load()
    cc = os.environ.get("CC", "cc")
    if os.environ.get("JAXMPI_NO_COMPILER") or cc == "false":
        pytest.skip("no C compiler in this configuration")
    deps = layers.dependencies(cc, layers._ffi_include())
    assert set(deps) == {f[:-2] for f in os.listdir(os.path.join(ROOT, "csrc"))
                         if f.endswith(".c")}
    # the top uses the op bodies: the analysis sees calls between files
    assert {"collectives", "p2p", "starts", "wait"} <= set(deps["handlers"]), deps
    assert layers.violations(deps) == []


def test_no_python_module_imports_its_floor_or_above():
    layers = _load("py_layers")
    deps = layers.dependencies()
    # the analysis sees the package's imports, relative and absolute
    assert {"_registry", "_primitives", "_validate"} <= {
        i.target for i in deps["_prims_p2p"] if i.package}, deps["_prims_p2p"]
    assert {i.target for i in deps["__main__"] if i.package} >= {"__init__"}
    assert {i.target for i in deps["experimental"] if i.package} == {"notoken"}
    assert layers.violations(deps) == []


def test_python_checker_catches_a_cycle_and_more(tmp_path):
    """A copy of the package with a cycle planted (_effect imports _region,
    which imports _effect), an import inside a function, one after the top
    of a file, and a module no floor lists: each is reported."""
    layers = _load("py_layers")
    copy = tmp_path / "jaxmpi"
    shutil.copytree(os.path.join(ROOT, "src", "jaxmpi"), copy,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))

    def edit(name, old, new):
        path = copy / name
        text = path.read_text()
        assert text.count(old) == 1, (name, old)
        path.write_text(text.replace(old, new))

    future = "from __future__ import annotations\n"
    edit("_effect.py", future, future + "from . import _region\n")
    edit("_threads.py", "def guard() -> None:\n",
         "def guard() -> None:\n    from . import _core  # noqa\n")
    edit("_dtypes.py", "def supported_names() -> str:",
         "from . import _version\n\n\ndef supported_names() -> str:")
    (copy / "_newmod.py").write_text("from . import _core\n")
    bad = layers.violations(layers.dependencies(str(copy)))
    text = "\n".join(bad)
    assert "_effect (floor 3.0) imports _region (floor 4)" in text, text
    assert "import cycle: _effect -> _region -> _effect" in text, text
    assert "_threads imports jaxmpi _core inside a function" in text, text
    assert "_dtypes imports _version at line" in text, text
    assert "_newmod is not in LAYERS" in text, text
    # the same floor: _threads and _core, _dtypes and _version
    assert "_threads (floor 2) imports _core (floor 2)" in text, text
    assert "_dtypes (floor 0) imports _version (floor 0)" in text, text
    # nothing else: the planted faults only
    assert len(bad) == 7, bad


def test_every_mutant_still_applies():
    """scripts/mutants.py rewrites one exact text per mutant: a refactor
    that moves or changes that text must move the mutant with it."""
    mod = _load("mutants")
    assert len(mod.MUTANTS) >= 20
    for m in mod.MUTANTS:
        mod.apply(ROOT, m, dry=True)  # SystemExit if not exactly once
