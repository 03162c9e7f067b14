"""The C core is layered: no file of csrc/ calls into its own layer or one
above it (scripts/c_layers.py; docs/design.md, "Layers")."""

import importlib.util
import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load():
    spec = importlib.util.spec_from_file_location(
        "c_layers", os.path.join(ROOT, "scripts", "c_layers.py"))
    mod = importlib.util.module_from_spec(spec)
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
    assert {"collectives", "p2p", "request"} <= set(deps["handlers"]), deps
    assert layers.violations(deps) == []


def test_every_mutant_still_applies():
    """scripts/mutants.py rewrites one exact text per mutant: a refactor
    that moves or changes that text must move the mutant with it."""
    spec = importlib.util.spec_from_file_location(
        "mutants", os.path.join(ROOT, "scripts", "mutants.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutants"] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    assert len(mod.MUTANTS) >= 20
    for m in mod.MUTANTS:
        mod.apply(ROOT, m, dry=True)  # SystemExit if not exactly once
