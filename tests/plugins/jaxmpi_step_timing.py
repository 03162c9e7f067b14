"""A pytest plugin that writes where a test run's time went, for CI's
summary (.ci/run): one line per test file (under mpiexec: tests/mpi,
tests/devices) or per test (plain pytest: tests/launch, tests/multihost),
with the seconds it took and, where JAX compiled in this process, how much
of that was JAX's tracing and lowering to MLIR (never cached across
processes) and its compilation (the backend compile, persistent-cache reads
included, and the hits and misses of the persistent cache), from JAX's
monitoring events.

Loaded by name (`-p jaxmpi_step_timing`, with tests/plugins on PYTHONPATH:
./run, scripts/ci_multihost.sh); it does nothing unless JAXMPI_STEP_LOG
names a file, to which it appends tab-separated lines

    SECONDS  part  NAME [LABEL] (JAX: trace and lowering T s, compile C s: ...)

(JAXMPI_STEP_LABEL: words joined by _, as env(1) takes them: at_2_ranks.)

Under an MPI launcher only rank 0 writes (every rank runs the same tests);
under pytest-xdist each worker writes its own tests.
It asserts nothing and changes no test's outcome.
"""

from __future__ import annotations

import os
import sys
import time

_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")


def _rank() -> int:
    for var in _RANK_VARS:
        value = os.environ.get(var)
        if value is not None and value.isdigit():
            return int(value)
    return 0


class _Jax:
    """JAX's compile events in this process, summed (registered once JAX is
    imported: the plugin itself never imports it)."""

    def __init__(self):
        self.registered = False
        self.compile_s = 0.0
        self.lower_s = 0.0
        self.hits = 0
        self.misses = 0

    def register(self):
        if self.registered or "jax" not in sys.modules:
            return
        self.registered = True
        try:
            from jax import monitoring
        except Exception:  # an old or partial JAX: no figures, no harm
            return

        def on_duration(event, duration, *args, **kwargs):
            if event == "/jax/core/compile/backend_compile_duration":
                self.compile_s += float(duration)
            elif event in ("/jax/core/compile/jaxpr_trace_duration",
                           "/jax/core/compile/jaxpr_to_mlir_module_duration"):
                self.lower_s += float(duration)

        def on_event(event, *args, **kwargs):
            if event == "/jax/compilation_cache/cache_hits":
                self.hits += 1
            elif event == "/jax/compilation_cache/cache_misses":
                self.misses += 1

        try:
            monitoring.register_event_duration_secs_listener(on_duration)
            monitoring.register_event_listener(on_event)
        except Exception:
            pass

    def snapshot(self):
        return self.compile_s, self.lower_s, self.hits, self.misses


class StepTiming:
    def __init__(self, path: str, per_test: bool, label: str):
        self.path = path
        self.per_test = per_test
        self.label = label
        self.jax = _Jax()
        self.current = None  # (key, start, jax snapshot)
        self.rows = []

    def _key(self, item):
        return item.nodeid if self.per_test else item.nodeid.split("::", 1)[0]

    def _close(self):
        if self.current is None:
            return
        key, start, (c0, l0, h0, m0) = self.current
        self.current = None
        took = time.monotonic() - start
        c1, l1, h1, m1 = self.jax.snapshot()
        detail = ""
        if self.jax.registered and (c1 - c0 > 0.05 or h1 + m1 > h0 + m0):
            detail = (f" (JAX: trace and lowering {l1 - l0:.1f} s, compile "
                      f"{c1 - c0:.1f} s: {h1 - h0} from the cache, {m1 - m0} "
                      f"compiled)")
        label = f" {self.label}" if self.label else ""
        self.rows.append(f"{took:.1f}\tpart\t{key}{label}{detail}\n")

    def pytest_runtest_logstart(self, nodeid, location):
        self.jax.register()
        key = nodeid if self.per_test else nodeid.split("::", 1)[0]
        if self.current is not None and self.current[0] == key:
            return
        self._close()
        self.current = (key, time.monotonic(), self.jax.snapshot())

    def pytest_sessionfinish(self, session, exitstatus):
        self._close()
        if not self.rows:
            return
        try:
            with open(self.path, "a") as f:
                f.writelines(self.rows)
        except OSError as e:  # a summary must never fail a run
            print(f"jaxmpi_step_timing: cannot write {self.path}: {e}", file=sys.stderr)


def pytest_configure(config):
    path = os.environ.get("JAXMPI_STEP_LOG")
    if not path or _rank() != 0:
        return
    # Under pytest-xdist the workers run the tests and write; the controller
    # only sees their reports arrive.
    if (getattr(config.option, "numprocesses", None)
            and not hasattr(config, "workerinput")):
        return
    per_test = os.environ.get("JAXMPI_STEP_PER_TEST", "0") == "1"
    config.pluginmanager.register(
        StepTiming(path, per_test,
                   os.environ.get("JAXMPI_STEP_LABEL", "").replace("_", " ")),
        "jaxmpi_step_timing_recorder")
