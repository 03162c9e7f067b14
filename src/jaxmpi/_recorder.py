"""The flight recorder and the timeline, set up when jaxmpi is imported.

The C core keeps the last ``JAXMPI_RECORD`` calls (default 256; 0 turns it
off) in a ring (csrc/record.h) and writes it to ``JAXMPI_RECORD_DIR`` on a
watchdog timeout, an MPI error, a fatal signal or SIGUSR1. Here, once per
process: the ring's size, the directory (named after the job when not given:
``jaxmpi-record-<SLURM_JOB_ID>``, else after rank 0's start, which every rank
learns from one allgather at import), the processes of the job on this host
(whom a timeout asks for their rings), and with ``JAXMPI_TRACE=DIR`` the
trace: clocks aligned with rank 0, every call written to
``DIR/rank-<r>.trace.bin`` and turned into Chrome trace events
(``DIR/rank-<r>.trace.json``) at exit. ``python -m jaxmpi.record DIR`` and
``python -m jaxmpi.trace DIR`` read them (docs/record.md).
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import socket
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

from . import _core, _dtypes
from ._errors import MPIConfigurationError

DEFAULT_CAPACITY = 256
# A trace keeps every call's entry until the call ends: at least as many as
# requests may be in flight at once (csrc/request.h, JM_SLOTS).
TRACE_KEEP = 4096
# Seconds the watchdog's report waits for the other ranks' rings.
DEFAULT_GRACE = 2.0
# Ping-pongs with rank 0 per rank when aligning the trace's clocks.
ALIGN_ROUNDS = 16

# Dump reasons (record.h, JM_DUMP_*) and call states (JM_REC_*).
DUMP_REQUEST, DUMP_ERROR = 1, 3
DONE, FAILED = 2, 3


def _declare(lib) -> None:
    c = ctypes
    lib.jaxmpi_record_configure.argtypes = [
        c.c_int, c.c_int, c.c_uint64, c.c_int, c.c_int, c.c_char_p,
        c.c_char_p, c.c_double, c.c_int, c.c_char_p, c.c_size_t]
    lib.jaxmpi_record_configure.restype = c.c_int
    lib.jaxmpi_record_peers.argtypes = [
        c.c_int, c.POINTER(c.c_int), c.POINTER(c.c_int),
        c.POINTER(c.c_int64)]
    lib.jaxmpi_record_set.argtypes = [c.c_int]
    lib.jaxmpi_record_set.restype = None
    lib.jaxmpi_record_capacity.restype = c.c_int
    lib.jaxmpi_record_dump_now.argtypes = [c.c_int, c.c_char_p]
    lib.jaxmpi_record_dump_now.restype = c.c_int
    lib.jaxmpi_record_dump_to.argtypes = [c.c_char_p, c.c_char_p]
    lib.jaxmpi_record_dump_to.restype = c.c_int
    lib.jaxmpi_record_json.argtypes = [c.c_char_p, c.c_int]
    lib.jaxmpi_record_json.restype = c.c_int
    lib.jaxmpi_record_eager_begin.argtypes = [
        c.c_int, c.c_uint64, c.c_int, c.c_int, c.c_int64, c.c_int64,
        c.POINTER(c.c_int64)]
    lib.jaxmpi_record_eager_begin.restype = c.c_int64
    lib.jaxmpi_record_eager_end.argtypes = [c.c_int64, c.c_int64, c.c_int]
    lib.jaxmpi_record_eager_end.restype = None
    lib.jaxmpi_record_now_ns.restype = c.c_int64
    lib.jaxmpi_record_align.argtypes = [
        c.c_uint64, c.c_int] + [c.POINTER(c.c_int64)] * 3
    lib.jaxmpi_record_align.restype = c.c_int
    lib.jaxmpi_trace_open.argtypes = [
        c.c_char_p, c.c_int64, c.c_int64, c.c_int64, c.c_char_p, c.c_size_t]
    lib.jaxmpi_trace_open.restype = c.c_int
    lib.jaxmpi_trace_set.argtypes = [c.c_int]
    lib.jaxmpi_trace_set.restype = None
    lib.jaxmpi_trace_on.restype = c.c_int
    lib.jaxmpi_trace_close.argtypes = [c.c_char_p, c.c_size_t]
    lib.jaxmpi_trace_close.restype = c.c_int
    lib.jaxmpi_trace_inner.argtypes = [c.c_int]
    lib.jaxmpi_trace_inner.restype = None
    lib.jaxmpi_trace_convert.argtypes = [
        c.c_char_p, c.c_char_p, c.c_char_p, c.c_size_t]
    lib.jaxmpi_trace_convert.restype = c.c_int64


def parse_capacity(value: str) -> int:
    """JAXMPI_RECORD: unset or empty is the default ring, 0 turns it off."""
    v = value.strip()
    if not v:
        return DEFAULT_CAPACITY
    try:
        n = int(v)
    except ValueError:
        n = -1
    if n < 0 or n > 1 << 24:
        raise MPIConfigurationError(
            f"JAXMPI_RECORD={value!r} must be the number of calls the flight "
            f"recorder keeps per process (0 to {1 << 24}; 0 turns it off; "
            f"default {DEFAULT_CAPACITY})")
    return n


def _start_ticks() -> int:
    """This process's start time (/proc/self/stat's 22nd field): with the
    pid, what tells it apart from a later process given the same pid."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return -1


def job_dir(env, rank0_stamp: str) -> str:
    """The rings' directory: JAXMPI_RECORD_DIR, else one named after the job
    (Slurm's job and step, else rank 0's start time and pid)."""
    given = env.get("JAXMPI_RECORD_DIR", "").strip()
    if given:
        return os.path.abspath(given)
    job = env.get("SLURM_JOB_ID", "").strip()
    if job:
        step = env.get("SLURM_STEP_ID", "").strip()
        name = f"jaxmpi-record-{job}" + (f".{step}" if step else "")
    else:
        name = f"jaxmpi-record-{rank0_stamp}"
    return os.path.abspath(name)


class Recorder:
    """This process's recorder and trace (one per process)."""

    def __init__(self):
        self.lib = None
        self.capacity = 0
        self.dir = ""
        self.trace_dir = ""
        self.rank = 0
        self.size = 1
        self._ops = None
        self._eager = {}

    # ---- set up at import -------------------------------------------------

    def start(self, comm) -> None:
        """Configure the ring (and the trace) for this process; collective
        over `comm` (jaxmpi's duplicate of COMM_WORLD) unless both are off."""
        core = _core.get()
        lib = self.lib = core.lib
        _declare(lib)
        env = os.environ
        self.capacity = parse_capacity(env.get("JAXMPI_RECORD", ""))
        self.trace_dir = env.get("JAXMPI_TRACE", "").strip()
        grace = _core.parse_timeout(env.get("JAXMPI_RECORD_GRACE", ""),
                                    "JAXMPI_RECORD_GRACE")
        world = MPI.COMM_WORLD
        self.rank, self.size = world.Get_rank(), world.Get_size()
        if not self.capacity and not self.trace_dir:
            return
        host = socket.gethostname()
        stamp = time.strftime("%Y%m%d-%H%M%S")
        # One collective: every process's host, pid and start; rank 0's
        # stamp names the job.
        everyone = comm.allgather((host, os.getpid(), _start_ticks(), stamp))
        self.dir = job_dir(env, f"{everyone[0][3]}-{everyone[0][1]}")
        err = ctypes.create_string_buffer(1024)
        if lib.jaxmpi_record_configure(
                self.capacity, TRACE_KEEP if self.trace_dir else 0,
                int(_core.handle(world)), self.rank, self.size,
                self.dir.encode(), host.encode(errors="replace"),
                DEFAULT_GRACE if grace is None else grace, 1, err, len(err)):
            raise MPIConfigurationError(f"jaxmpi: {err.value.decode()}")
        local = [(r, pid, start) for r, (h, pid, start, _) in
                 enumerate(everyone) if h == host and r != self.rank]
        n = len(local)
        lib.jaxmpi_record_peers(
            n, (ctypes.c_int * max(n, 1))(*[r for r, _, _ in local]),
            (ctypes.c_int * max(n, 1))(*[p for _, p, _ in local]),
            (ctypes.c_int64 * max(n, 1))(*[s for _, _, s in local]))
        if self.trace_dir:
            self._open_trace(comm)

    def _open_trace(self, comm) -> None:
        lib = self.lib
        d = self.trace_dir = os.path.abspath(self.trace_dir)
        if self.rank == 0:
            # A previous run's files (more ranks, the merged outputs) would
            # mix with this one's: rank 0 clears them before any rank writes
            # (the alignment below is collective).
            os.makedirs(d, exist_ok=True)
            for name in os.listdir(d):
                if name.startswith("rank-") and name.endswith(
                        (".trace.bin", ".trace.json")) or name in (
                        "trace.json", "timeline.png"):
                    try:
                        os.remove(os.path.join(d, name))
                    except OSError:
                        pass
        offset, error, origin = (ctypes.c_int64() for _ in range(3))
        rc = lib.jaxmpi_record_align(int(_core.handle(comm)), ALIGN_ROUNDS,
                                     ctypes.byref(offset), ctypes.byref(error),
                                     ctypes.byref(origin))
        if rc:
            raise MPIConfigurationError(
                f"jaxmpi: aligning the trace's clocks failed (MPI error {rc})")
        os.makedirs(d, exist_ok=True)
        err = ctypes.create_string_buffer(1024)
        if lib.jaxmpi_trace_open(self.trace_path(".bin").encode(),
                                 offset.value, origin.value, error.value, err,
                                 len(err)):
            raise MPIConfigurationError(
                f"jaxmpi: JAXMPI_TRACE={self.trace_dir}: {err.value.decode()}")
        lib.jaxmpi_trace_inner(1)
        # After the calls in flight (jax.effects_barrier, registered later,
        # runs first) and before MPI_Finalize (registered earlier).
        atexit.register(self.close_trace)

    def trace_path(self, ext: str) -> str:
        return os.path.join(self.trace_dir, f"rank-{self.rank}.trace{ext}")

    def close_trace(self) -> None:
        """Write this rank's trace as Chrome trace events (at exit)."""
        lib = self.lib
        if lib is None or not self.trace_dir:
            return
        lib.jaxmpi_trace_inner(0)
        err = ctypes.create_string_buffer(1024)
        if lib.jaxmpi_trace_close(err, len(err)):
            print(f"jaxmpi: {err.value.decode()}", file=sys.stderr)
            return
        binary, json_path = self.trace_path(".bin"), self.trace_path(".json")
        if not os.path.exists(binary):
            return
        n = lib.jaxmpi_trace_convert(binary.encode(), json_path.encode(), err,
                                     len(err))
        if n < 0:
            print(f"jaxmpi: {err.value.decode()}", file=sys.stderr)
            return
        os.remove(binary)
        if self.rank == 0:
            print(f"jaxmpi: trace of every call written to {self.trace_dir} "
                  f"(python -m jaxmpi.trace {self.trace_dir} merges it)",
                  file=sys.stderr)

    # ---- switches (benchmarks, tests) -------------------------------------

    def set_recording(self, on: bool) -> None:
        """Record calls or not (the ring stays allocated)."""
        if self.lib is not None:
            self.lib.jaxmpi_record_set(int(bool(on)))

    def set_tracing(self, on: bool) -> None:
        """Trace calls or not (only while a trace is open; tracing records
        calls even while recording is off, pausing it leaves recording as
        it was)."""
        if self.lib is not None and self.trace_dir:
            self.lib.jaxmpi_trace_set(int(bool(on)))
            self.lib.jaxmpi_trace_inner(int(bool(on)))

    def dump(self, why: str = "") -> None:
        """Write this process's ring now (as SIGUSR1 does)."""
        if self.lib is None or not self.capacity:
            raise RuntimeError("the flight recorder is off (JAXMPI_RECORD=0)")
        if self.lib.jaxmpi_record_dump_now(DUMP_REQUEST, why.encode()):
            raise OSError(f"cannot write the ring to {self.dir}")

    def snapshot(self) -> dict:
        """This process's ring as the reader sees it (csrc/record_read.c's
        JSON): a dict with "entries" (oldest first), "comms", "calls"."""
        if self.lib is None or not self.capacity:
            raise RuntimeError("the flight recorder is off (JAXMPI_RECORD=0)")
        with tempfile.TemporaryDirectory(prefix="jaxmpi-ring-") as d:
            if self.lib.jaxmpi_record_dump_to(d.encode(), b"snapshot"):
                raise OSError(f"cannot write the ring to {d}")
            out = os.path.join(d, "ring.json")
            with open(out, "w") as f:
                f.flush()
                self.lib.jaxmpi_record_json(d.encode(), f.fileno())
            with open(out) as f:
                (ring,) = json.load(f)["rings"]
        return ring

    # ---- the eager path (Python makes the MPI call) -----------------------

    def eager_begin(self, fn: str, comm, root: int, x) -> tuple[int, int]:
        """Record collective `fn` about to be made by mpi4py on x; returns
        what eager_end takes. About 0.9 us, most of it the two ctypes calls
        (the op's number, the handle and the dtype's code are cached)."""
        lib = self.lib
        if lib is None or not (self.capacity or self.trace_dir):
            return (0, 0)
        key = (fn, MPI._handleof(comm), x.dtype)
        known = self._eager.get(key)
        if known is None:
            if self._ops is None:
                self._ops = {n: i for i, n in
                             enumerate(_core.get().table()["ops"])}
            if len(self._eager) > 256:
                self._eager.clear()
            dtype = np.dtype(x.dtype)
            known = self._eager[key] = (
                self._ops[fn], int(_core.handle(comm)),
                _dtypes.XLA_TYPE[dtype], dtype.itemsize)
        op, handle, code, itemsize = known
        number = lib.jaxmpi_record_eager_begin(
            op, handle, root, code, x.size * itemsize, 0, None)
        return (number, 0)

    def eager_end(self, ref: tuple[int, int], failure: str = "") -> None:
        """End the call eager_begin recorded: done, or failed with MPI's
        message (the ring is then written, as the C core does)."""
        if not ref[0]:
            return
        self.lib.jaxmpi_record_eager_end(ref[0], ref[1],
                                         FAILED if failure else DONE)
        if failure and self.capacity:
            self.lib.jaxmpi_record_dump_now(DUMP_ERROR, failure.encode(
                errors="replace"))


_recorder = Recorder()


def get() -> Recorder:
    """The process's recorder (configured by ``import jaxmpi``)."""
    return _recorder
