"""The flight recorder's ring (csrc/record.h): every kind of call is recorded
as it was made, on every rank, against what the test itself knows of the
call (op, sequence number per communicator, peers in COMM_WORLD ranks, tag,
bytes, dtype, the Python line, state); the communicator's key is the same
on every rank; rings are written on SIGUSR1 and on an MPI error.
tests/launch/test_record.py has the planted hangs and the trace."""

import json
import os
import signal
import struct
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import _recorder
from jaxmpi import notoken as mpx
from util import LEFT, RANK, RIGHT, SIZE

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core", "mpi_errors")

WORLD = MPI.COMM_WORLD
REC = _recorder.get()
pytestmark = pytest.mark.skipif(
    not REC.capacity, reason="the flight recorder is off (JAXMPI_RECORD=0)")

HERE = os.path.abspath(__file__)


def line_of(marker):
    """The line of this file holding the comment `# REC:marker`."""
    with open(HERE) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# REC:{marker}"):
                return n
    raise AssertionError(marker)


def site_of(marker, function):
    """The site text jaxmpi records for the call marked `marker` (as
    _primitives.site writes it: the path from the working directory)."""
    path = os.path.relpath(HERE)
    path = HERE if path.startswith("..") else path
    return f"{path}:{line_of(marker)} ({function})"


def new_calls(fn, *args):
    """The ring's entries for the calls fn makes (run and waited for)."""
    before = REC.snapshot()["calls"]
    jax.block_until_ready(fn(*args))
    ring = REC.snapshot()
    return [e for e in ring["entries"] if e["number"] > before], ring


def last_seq(ring, comm=None):
    """The last collective's sequence number on comm (the default
    communicator's key when None) in a ring, 0 if none."""
    seqs = [e["seq"] for e in ring["entries"] if "collective" in e["flags"]
            and (comm is None or e["comm"] == comm)]
    return max(seqs, default=0)


def same_on_every_rank(value):
    everyone = WORLD.allgather(value)
    assert all(v == everyone[0] for v in everyone), everyone


def blocking_step(x, ints):
    a = mpx.allreduce(x, MPI.SUM)  # REC:allreduce
    b = mpx.bcast(a, 1 % SIZE)  # REC:bcast
    c = mpx.reduce(b, MPI.MAX, SIZE - 1)  # REC:reduce
    d = mpx.allgather(ints)  # REC:allgather
    e = mpx.sendrecv(x, x, source=LEFT, dest=RIGHT, sendtag=4,  # REC:sendrecv
                     recvtag=4)
    mpx.barrier()  # REC:barrier
    return a, b, c, d, e


def test_blocking_calls_are_recorded_as_made():
    x = jnp.arange(3, dtype=jnp.float32) + RANK
    ints = jnp.arange(2, dtype=jnp.int64)
    entries, ring = new_calls(jax.jit(blocking_step), x, ints)
    assert [e["op"] for e in entries] == [
        "allreduce", "bcast", "reduce", "allgather", "sendrecv", "barrier"]
    first = entries[0]["seq"]
    comm = entries[0]["comm"]
    expect = {
        # op: (flags, seq, peer, peer2, tag, bytes, dtype, marker)
        "allreduce": ("collective", first, -1, -1, -1, 12, "float32",
                      "allreduce"),
        "bcast": ("collective", first + 1, 1 % SIZE, -1, -1, 12, "float32",
                  "bcast"),
        "reduce": ("collective", first + 2, SIZE - 1, -1, -1, 12, "float32",
                   "reduce"),
        "allgather": ("collective", first + 3, -1, -1, -1, 16, "int64",
                      "allgather"),
        "sendrecv": ("p2p", None, LEFT, RIGHT, 4, 12, "float32", "sendrecv"),
        "barrier": ("collective", first + 4, -1, -1, -1, 0, "", "barrier"),
    }
    for e in entries:
        flags, seq, peer, peer2, tag, nbytes, dtype, marker = expect[e["op"]]
        assert e["flags"] == [flags], e
        if seq is not None:
            assert e["seq"] == seq, e
        assert (e["peer"], e["peer2"], e["tag"]) == (peer, peer2, tag), e
        assert (e["bytes"], e["dtype"]) == (nbytes, dtype), e
        assert e["site"] == site_of(marker, "blocking_step"), e
        assert e["state"] == "done" and e["end_ns"] >= e["begin_ns"] > 0, e
        assert e["comm"] == comm and e["position"] == -1, e
        assert e["comm_size"] == SIZE and e["comm_rank"] == RANK, e
    # Point-to-point calls are numbered among themselves.
    p2p = [e["seq"] for e in ring["entries"] if "p2p" in e["flags"]]
    assert entries[4]["seq"] == max(p2p)
    # The default communicator: the same key on every rank, and its members.
    same_on_every_rank((comm, first))
    (known,) = [c for c in ring["comms"] if c["key"] == comm]
    assert known["members"] == list(range(SIZE)), known


def test_other_communicators_have_their_own_numbers_and_members():
    # Ranks split in two halves (even, odd), each numbered from 1 and
    # naming its members by their COMM_WORLD ranks.
    sub = WORLD.Split(RANK % 2, RANK)
    try:
        x = jnp.ones(2, jnp.float32)
        f = jax.jit(lambda a: mpx.allreduce(mpx.allreduce(a, MPI.SUM,  # REC:sub
                                                          comm=sub),
                                            MPI.SUM, comm=sub))
        entries, ring = new_calls(f, x)
        assert [(e["op"], e["seq"]) for e in entries] == [
            ("allreduce", 1), ("allreduce", 2)], entries
        (known,) = [c for c in ring["comms"] if c["key"] == entries[0]["comm"]]
        assert known["members"] == list(range(RANK % 2, SIZE, 2)), known
        halves = WORLD.allgather((RANK % 2, entries[0]["comm"]))
        for parity in (0, 1):
            keys = {k for p, k in halves if p == parity}
            assert len(keys) <= 1, halves
        if SIZE > 1:
            assert halves[0][1] != halves[1][1], halves
    finally:
        sub.Free()


def nonblocking_step(x):
    r = mpx.iallreduce(x, MPI.SUM)  # REC:iallreduce
    s = mpx.isend(x, RIGHT, tag=9)  # REC:isend
    q = mpx.irecv(x, LEFT, tag=9)  # REC:irecv
    y, _, z = mpx.waitall([r, s, q])
    return y, z


def test_starts_and_their_waits_are_recorded():
    x = jnp.arange(5, dtype=jnp.float64)
    entries, ring = new_calls(jax.jit(nonblocking_step), x)
    starts = [e for e in entries if "start" in e["flags"]]
    waits = [e for e in entries if e["op"] == "wait"]
    assert [e["op"] for e in starts] == ["iallreduce", "isend", "irecv"]
    assert [w["kind"] for w in waits] == ["iallreduce", "isend", "irecv"]
    for s, w in zip(starts, waits):
        # A start carries its line; a wait names its start and carries its
        # numbers, peers and line.
        assert s["site"] == site_of(s["op"], "nonblocking_step"), s
        assert w["link"] == s["number"] and w["seq"] == s["seq"], (s, w)
        assert (w["peer"], w["tag"], w["comm"], w["site"]) == (
            s["peer"], s["tag"], s["comm"], s["site"]), (s, w)
        assert "wait" in w["flags"] and w["state"] == "done", w
        assert s["bytes"] == 40 and s["dtype"] == "float64", s
    assert (starts[1]["peer"], starts[1]["tag"]) == (RIGHT, 9)
    assert (starts[2]["peer"], starts[2]["tag"]) == (LEFT, 9)
    assert starts[0]["flags"] == ["collective", "start"]
    assert starts[1]["flags"] == ["p2p", "start"]
    same_on_every_rank(starts[0]["seq"])


def test_eager_direct_calls_are_recorded():
    x = jnp.arange(6, dtype=jnp.int32) + RANK
    earlier = REC.snapshot()
    entries, _ = new_calls(lambda a: mpx.allreduce(a, MPI.SUM), x)
    (e,) = entries
    before = last_seq(earlier, e["comm"])
    assert e["op"] == "allreduce" and e["state"] == "done", e
    assert (e["bytes"], e["dtype"]) == (24, "int32"), e
    assert e["seq"] == before + 1, e
    # The direct path (mpi4py) unless the watchdog or the debug log send
    # eager calls to the compiled one.
    direct = jaxmpi._core.get().timeout is None and not jaxmpi._core.get().debug
    assert ("eager" in e["flags"]) == direct, e


def read_ring(directory, rank):
    """Rank `rank`'s ring in `directory`, as the reader gives it."""
    with tempfile.TemporaryFile("w+") as f:
        REC.lib.jaxmpi_record_json(directory.encode(), f.fileno())
        f.seek(0)
        rings = json.load(f)["rings"]
    mine = [r for r in rings if r["rank"] == rank]
    return mine[0] if mine else None


def test_sigusr1_writes_the_ring():
    jax.block_until_ready(mpx.allreduce(jnp.ones(2), MPI.SUM))
    t0 = time.time_ns()
    os.kill(os.getpid(), signal.SIGUSR1)
    ring = read_ring(REC.dir, RANK)
    assert ring is not None and ring["dump_real_ns"] >= t0, ring
    assert (ring["reason"], ring["signal"]) == (1, signal.SIGUSR1), ring
    assert ring["entries"][-1]["op"] == "allreduce", ring["entries"][-1]


def test_an_mpi_error_writes_the_ring():
    # MPI's truncation error on every rank (as in test_p2p): the failed call
    # is in the ring written at once, with MPI's message.
    t0 = time.time_ns()
    with pytest.raises(Exception, match="MPI_Waitall"):
        jax.block_until_ready(mpx.neighbor_exchange(
            [jnp.ones(4, jnp.float64)], [jnp.ones(3, jnp.float64)], [LEFT],
            [RIGHT]))
    ring = read_ring(REC.dir, RANK)
    assert ring is not None and ring["dump_real_ns"] >= t0, ring
    assert ring["reason"] == 3 and "MPI_Waitall (receive) failed" in ring[
        "why"], ring
    (failed,) = [e for e in ring["entries"] if e["number"] == ring["cause"]]
    assert failed["op"] == "neighbor_exchange", failed
    assert failed["state"] == "failed", failed
    assert (failed["peer"], failed["peer2"]) == (LEFT, RIGHT), failed
    WORLD.Barrier()


def test_rings_an_earlier_job_left_are_not_read_as_this_jobs():
    # A directory reused by jobs of different sizes: beside this job's ring,
    # one a larger job wrote a minute ago. The reader takes the newest
    # ring's job (it once took the largest, and lost this job's). (A
    # directory of its own per rank, not pytest's tmp_path: the ranks'
    # pytest sessions would clean up each other's.)
    with tempfile.TemporaryDirectory(prefix="jaxmpi-rings-") as d:
        assert REC.lib.jaxmpi_record_dump_to(d.encode(), b"now") == 0
        with open(os.path.join(d, f"rank-{RANK}.ring"), "rb") as f:
            data = bytearray(f.read())
        # The header (record.h, jm_ring_header): rank and size at 32, the
        # dump's CLOCK_REALTIME at 96.
        assert data[:11] == b"jaxmpi ring"
        assert struct.unpack_from("=ii", data, 32) == (RANK, SIZE)
        (written,) = struct.unpack_from("=q", data, 96)
        struct.pack_into("=ii", data, 32, SIZE, SIZE + 1)
        struct.pack_into("=q", data, 96, written - 60 * 10**9)
        with open(os.path.join(d, f"rank-{SIZE}.ring"), "wb") as f:
            f.write(data)
        ring = read_ring(d, RANK)
    assert ring is not None and ring["dump_real_ns"] == written, ring
    assert ring["size"] == SIZE, ring


def test_the_directory_is_named_after_the_job():
    # Slurm's job (and step) where there is one, else rank 0's start: the
    # same directory on every rank.
    assert _recorder.job_dir({"SLURM_JOB_ID": "4711"}, "x").endswith(
        "/jaxmpi-record-4711")
    assert _recorder.job_dir({"SLURM_JOB_ID": "4711", "SLURM_STEP_ID": "2"},
                             "x").endswith("/jaxmpi-record-4711.2")
    assert _recorder.job_dir({}, "20261128-120000-99").endswith(
        "/jaxmpi-record-20261128-120000-99")
    assert _recorder.job_dir({"JAXMPI_RECORD_DIR": "rings"}, "x") == \
        os.path.abspath("rings")
    same_on_every_rank(os.path.basename(REC.dir))
