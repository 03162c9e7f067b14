"""The flight recorder and the timeline as a user meets them: planted
hangs at 2-4 ranks whose verdict (in the watchdog's error and from
``python -m jaxmpi.record``) names the right rank, op, sequence number and
line; the trace of a known program (``JAXMPI_TRACE``) with exactly the
expected events on every rank, spans that nest and clocks that align (with
each rank's clock skewed on purpose); the timeline drawn, and the table
and JSON without matplotlib; the commands never start MPI or JAX; a fatal
signal writes the ring. tests/mpi/test_record_ring.py checks the ring
itself."""

import json
import os
import re
import struct
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

APP = "tests/launch/record_app.py"
TRACE_APP = "tests/launch/trace_app.py"
HANG_TIMEOUT = "5"


def line(path, marker):
    """The line of `path` (from the root) holding the comment `marker`."""
    with open(os.path.join(ROOT, path)) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(marker):
                return n
    raise AssertionError(marker)


def site(fn, marker, path=APP):
    return f"{path}:{line(path, marker)} in {fn}"


def command(*args, env=None, timeout=120):
    """python -m jaxmpi.<cmd> ... from the repository's root."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def verdict(directory):
    out = command("-m", "jaxmpi.record", str(directory), "--quiet")
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip()


def hang(mpirun, tmp_path, n, scenario, at, env=None):
    rings = tmp_path / "rings"
    job = mpirun(n, APP, scenario, str(at), HANG_TIMEOUT, timeout=240,
                 env={"JAXMPI_RECORD_DIR": str(rings), **(env or {})})
    assert job.returncode != 0 and "no hang?" not in job.stdout, job
    assert "DEADLINE_EXCEEDED" in job.stderr, job
    return job, rings


def one_line(text):
    return " ".join(text.split())


def test_a_rank_that_skips_a_collective_is_named(mpirun, tmp_path):
    job, rings = hang(mpirun, tmp_path, 4, "skip", 6)
    expected = (
        f"Rank 3 never entered allreduce #6 "
        f"({site('summed', '# SITE:allreduce')}) that ranks 0-2 wait in; "
        f"its last "
        f"call was bcast #5, root 0 ({site('spread', '# SITE:bcast')}) "
        f"(done).")
    assert verdict(rings) == expected
    # The watchdog's own error says it too, on the ranks that timed out.
    assert expected in one_line(job.stderr), job
    # A ring that comes late, within the reader's grace period, is read.
    late = tmp_path / "rank-3.ring"
    os.rename(rings / "rank-3.ring", late)
    reader = subprocess.Popen(
        [sys.executable, "-m", "jaxmpi.record", str(rings), "--quiet",
         "--grace", "20"], cwd=ROOT, text=True, stdout=subprocess.PIPE)
    time.sleep(1.0)
    os.rename(late, rings / "rank-3.ring")
    out, _ = reader.communicate(timeout=60)
    assert out.strip() == expected, out
    # A missing ring is evidence too.
    os.remove(rings / "rank-3.ring")
    out = command("-m", "jaxmpi.record", str(rings), "--quiet", "--grace",
                  "0.5").stdout
    assert one_line(out) == (
        f"Rank 3 never entered allreduce #6 "
        f"({site('summed', '# SITE:allreduce')}) that ranks 0-2 wait in, as "
        f"far as the rings show: it wrote no ring to {rings} (it is dead, or "
        f"busy outside jaxmpi on a host where no signal reached it). No ring "
        f"from rank 3."), out


def test_a_rank_that_calls_another_collective_is_named(mpirun, tmp_path):
    # Collective #18: not one the default cross-rank check compares, so MPI
    # itself meets allreduce on rank 0 with bcast on rank 1, and hangs.
    job, rings = hang(mpirun, tmp_path, 2, "mismatch", 18)
    expected = (
        f"Rank 1 calls bcast #18, root 0 ({site('spread', '# SITE:bcast')}) "
        f"where rank 0 calls allreduce #18 "
        f"({site('summed', '# SITE:allreduce')}): the ranks disagree on the "
        f"order of collective calls on this communicator.")
    assert verdict(rings) == expected
    assert expected in one_line(job.stderr), job


def test_a_rank_that_waits_for_a_message_is_named(mpirun, tmp_path):
    job, rings = hang(mpirun, tmp_path, 3, "recv", 6)
    text = verdict(rings)
    assert re.fullmatch(
        re.escape(f"Rank 1 never entered allreduce #6 "
                  f"({site('summed', '# SITE:allreduce')}) that ranks 0,2 "
                  f"wait in; it waits in recv #1 from rank 0, tag 7 "
                  f"({site('receive', '# SITE:recv')}) (timed out after ")
        + r"\d+\.\d s\)\.", text), text
    # Every rank's last calls follow the verdict.
    full = command("-m", "jaxmpi.record", str(rings)).stdout
    assert full.count("ring written") == 3, full


# ---- the timeline ------------------------------------------------------------

ROUNDS = 3
# What every round of trace_app.py calls, and the MPI call inside each.
ROUND = ["allreduce", "bcast", "sendrecv", "iallreduce", "wait", "barrier"]
INNER = {"allreduce": "MPI_Allreduce", "bcast": "MPI_Bcast",
         "sendrecv": "MPI_Sendrecv", "iallreduce": "MPI_Iallreduce",
         "barrier": "MPI_Barrier"}


@pytest.fixture(scope="module")
def traced(mpirun_module, tmp_path_factory):
    """trace_app.py at 3 ranks under JAXMPI_TRACE, each rank's clock skewed
    by 0.3 s times its rank, then merged by python -m jaxmpi.trace."""
    d = tmp_path_factory.mktemp("trace")
    job = mpirun_module(3, TRACE_APP, str(ROUNDS), env={
        "JAXMPI_TRACE": str(d), "JAXMPI_RECORD_CLOCK_SKEW_NS": "300000000"})
    assert job.returncode == 0, job
    merged = command("-m", "jaxmpi.trace", str(d))
    assert merged.returncode == 0, merged.stdout + merged.stderr
    with open(d / "trace.json") as f:
        trace = json.load(f)
    return d, trace, merged


def spans(trace, pid):
    return sorted((e for e in trace["traceEvents"]
                   if e["ph"] == "X" and e["pid"] == pid
                   and e["cat"] == "jaxmpi"), key=lambda e: e["ts"])


def test_trace_has_exactly_the_calls_made(traced):
    _, trace, _ = traced
    size = 3
    for rank in range(size):
        calls = spans(trace, rank)
        assert [e["name"] for e in calls] == ROUND * ROUNDS + ["allreduce"]
        for k in range(ROUNDS):
            a, b, s, i, w, bar = calls[6 * k:6 * k + 6]
            seq = 4 * k + 1  # allreduce, bcast, iallreduce, barrier a round
            assert [c["args"]["seq"] for c in (a, b, i, bar)] == [
                seq, seq + 1, seq + 2, seq + 3]
            assert (b["args"]["peer"], a["args"]["bytes"]) == (1, 16)
            # The ring: from rank - 1, to rank + 1; its own numbering.
            assert (s["args"]["peer"], s["args"]["peer2"], s["args"]["tag"],
                    s["args"]["seq"]) == ((rank - 1) % size, (rank + 1) % size,
                                          3, k + 1), s
            assert (i["args"]["bytes"], i["args"]["dtype"]) == (32, "float32")
            assert (w["args"]["start"], w["args"]["seq"],
                    w["args"]["kind"]) == (i["args"]["call"], seq + 2,
                                           "iallreduce"), w
            assert a["args"]["site"] == (
                f"{TRACE_APP}:{line(TRACE_APP, 'x = mpx.allreduce(x, MPI.SUM)')}"
                " (step)")
            assert all(c["args"]["state"] == "done" and c["tid"] == 0
                       for c in (a, b, s, i, w, bar))
        eager = calls[-1]
        assert (eager["args"]["bytes"], eager["args"]["dtype"]) == (12, "int32")
        assert eager["args"]["eager"] and eager["args"]["seq"] == 4 * ROUNDS + 1


def test_trace_spans_nest_and_join_starts_to_waits(traced):
    _, trace, _ = traced
    events = trace["traceEvents"]
    for rank in range(3):
        calls = spans(trace, rank)
        by_call = {c["args"]["call"]: c for c in calls}
        # One device: a rank's calls follow one another.
        for x, y in zip(calls, calls[1:]):
            assert x["ts"] + x["dur"] <= y["ts"] + 1e-3, (x, y)
        # Each MPI call inside its call, and the ones expected there.
        inner = [e for e in events if e["ph"] == "X" and e["pid"] == rank
                 and e["cat"] == "mpi"]
        for e in inner:
            parent = by_call[e["args"]["call"]]
            assert parent["ts"] <= e["ts"] and (
                e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-3), e
            assert e["name"].startswith("MPI_"), e
        for c in calls:
            # (The eager call's MPI call is mpi4py's: not seen inside.)
            if c["name"] in INNER and not c["args"].get("eager"):
                names = [e["name"] for e in inner
                         if e["args"]["call"] == c["args"]["call"]]
                assert INNER[c["name"]] in names, (c, names)
        # A flow arrow from each start to its wait.
        flows = [e for e in events if e["pid"] == rank and e["ph"] in "sf"]
        starts = {e["id"]: e for e in flows if e["ph"] == "s"}
        ends = {e["id"]: e for e in flows if e["ph"] == "f"}
        assert len(starts) == ROUNDS and starts.keys() == ends.keys()
        for fid, s in starts.items():
            i = [c for c in calls if c["ts"] == s["ts"]
                 and c["name"] == "iallreduce"]
            w = [c for c in calls if c["ts"] == ends[fid]["ts"]
                 and c["name"] == "wait"]
            assert len(i) == len(w) == 1 and w[0]["args"]["start"] == i[0][
                "args"]["call"]


def test_trace_clocks_are_aligned(traced):
    # No rank leaves a barrier or an allreduce before every rank entered
    # it: with the clocks aligned, the latest entry precedes the earliest
    # exit, up to the alignment's error (and 0.5 ms for the counter's
    # conversion, whose reference clock NTP may slew). The skew (0.3 s a
    # rank) would break this by far.
    _, trace, _ = traced
    errors = [m["clock_error_ns"] / 1e3
              for m in trace["otherData"]["ranks"].values()]
    slack = 2 * max(errors) + 500.0
    per_rank = [[c for c in spans(trace, r) if c["name"] in ("barrier",
                                                             "allreduce")]
                for r in range(3)]
    for group in zip(*per_rank):
        assert len({c["args"]["seq"] for c in group}) == 1, group
        latest_entry = max(c["ts"] for c in group)
        earliest_exit = min(c["ts"] + c["dur"] for c in group)
        assert latest_entry <= earliest_exit + slack, group


def test_trace_table_and_timeline(traced):
    d, _, merged = traced
    table = merged.stdout
    for op in ROUND:
        row = re.search(rf"^{op}\s+(\d+)\s", table, re.M)
        assert row, table
        assert int(row.group(1)) == 3 * ROUNDS + (op == "allreduce") * 3, table
    assert "spread between ranks" in table
    with open(d / "timeline.png", "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width > 600 and height > 100, (width, height)


def test_trace_without_matplotlib(traced, tmp_path):
    # The PNG's library is an extra: without it, a clear message, and the
    # JSON and the table all the same.
    d, _, _ = traced
    fake = tmp_path / "fake" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('not installed')\n")
    os.remove(d / "trace.json")
    out = command("-m", "jaxmpi.trace", str(d),
                  env={"PYTHONPATH": str(tmp_path / "fake")})
    assert out.returncode == 0, out.stderr
    assert "pip install 'jaxmpi[trace]'" in out.stderr, out.stderr
    assert re.search(r"^barrier\s+9\s", out.stdout, re.M), out.stdout
    assert os.path.exists(d / "trace.json")


def test_commands_start_neither_mpi_nor_jax(traced, tmp_path):
    d, _, _ = traced
    for args in (["jaxmpi.record", str(tmp_path)],
                 ["jaxmpi.trace", str(d), "--no-png"]):
        out = command("-X", "importtime", "-m", *args)
        loaded = {line.split("|")[-1].strip() for line in
                  out.stderr.splitlines() if line.startswith("import time:")}
        assert "jaxmpi" in loaded, out.stderr[-2000:]
        assert not loaded & {"mpi4py", "mpi4py.MPI", "jax", "jaxlib",
                             "numpy"}, sorted(loaded)


def test_a_fatal_signal_writes_the_ring(mpirun, tmp_path):
    rings = tmp_path / "rings"
    code = ("import ctypes, jax.numpy as jnp; from mpi4py import MPI; "
            "import jaxmpi.notoken as mpx; "
            "mpx.allreduce(jnp.ones(2), MPI.SUM).block_until_ready(); "
            "ctypes.string_at(0)")
    job = mpirun(1, "-c", code, env={"JAXMPI_RECORD_DIR": str(rings)})
    assert job.returncode != 0, job
    out = command("-m", "jaxmpi.record", str(rings), "--json")
    (ring,) = json.loads(out.stdout)["rings"]
    assert (ring["reason"], ring["signal"]) == (4, 11), ring
    assert ring["entries"][-1]["op"] == "allreduce", ring


DEVICES_APP = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, PartitionSpec as P
from mpi4py import MPI
import jaxmpi.notoken as mpx
try:
    shard_map = jax.shard_map
except AttributeError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map
mesh = Mesh(np.array(jax.devices()), ("d",))
step = jax.jit(shard_map(lambda x: mpx.allreduce(x, MPI.SUM), mesh=mesh,
                         in_specs=P("d"), out_specs=P("d")))
x = jnp.arange(4.0 * jax.device_count())
for _ in range(2):
    x = step(x)
x.block_until_ready()
"""


def test_trace_over_several_devices_has_a_row_per_position(mpirun, tmp_path):
    # 2 processes x 2 devices: each position's calls on its own row (tid),
    # numbered on its own communicator, the same on every process.
    d = tmp_path / "trace"
    app = tmp_path / "devices_app.py"
    app.write_text(DEVICES_APP)
    job = mpirun(2, str(app), env={
        "JAXMPI_TRACE": str(d),
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert job.returncode == 0, job
    assert command("-m", "jaxmpi.trace", str(d), "--no-png").returncode == 0
    with open(d / "trace.json") as f:
        trace = json.load(f)
    comms = {}
    for rank in range(2):
        calls = [e for e in trace["traceEvents"] if e["ph"] == "X"
                 and e["cat"] == "jaxmpi" and e["pid"] == rank]
        for tid in (0, 1):
            row = sorted((e for e in calls if e["tid"] == tid),
                         key=lambda e: e["ts"])
            assert [(e["name"], e["args"]["seq"], e["args"]["position"])
                    for e in row] == [("allreduce", 1, tid),
                                      ("allreduce", 2, tid)], row
            comms.setdefault(tid, set()).update(e["args"]["comm"] for e in row)
        assert {e["tid"] for e in calls} == {0, 1}
    assert all(len(keys) == 1 for keys in comms.values()), comms
    assert comms[0] != comms[1], comms
    names = [e for e in trace["traceEvents"] if e["ph"] == "M"
             and e["name"] == "thread_name" and e["pid"] == 0]
    assert sorted(e["args"]["name"] for e in names) == [
        "device position 0", "device position 1"]


# ---- plain JAX: XLA's own collectives over jaxmpi's MPI (issue 35) -----------

# A plain JAX program (no jaxmpi call) under python -m jaxmpi.distributed:
# ROUNDS steps of a psum and a ppermute one process up the ring. "skip":
# after one step, process 0 computes (sleeps) where process 1 makes the
# next step's psum.
NATIVE_APP = """
import sys, time, jax, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
try:
    from jax import shard_map
except ImportError:  # JAX < 0.7
    from jax.experimental.shard_map import shard_map
jax.distributed.initialize()
me, n = jax.process_index(), jax.process_count()
mesh = Mesh(np.array(jax.devices()), ("p",))
x = jax.make_array_from_callback((n,), NamedSharding(mesh, P("p")),
                                 lambda i: np.arange(n, dtype=np.float32)[i])
def step(v):
    v = jax.lax.psum(v, "p")
    return jax.lax.ppermute(v, "p", [(i, (i + 1) % n) for i in range(n)])
f = jax.jit(shard_map(step, mesh=mesh, in_specs=P("p"), out_specs=P("p")))
rounds = int(sys.argv[2])
for _ in range(rounds):
    x = f(x)
x.block_until_ready()
if sys.argv[1] == "skip":
    if me == 0:
        time.sleep(120)
    f(x).block_until_ready()
    print(f"process {me}: no hang?", flush=True)
"""
NATIVE_ROUNDS = 2
ALLREDUCE = "MPI_Allreduce (all-reduce)"
# One step's MPI calls on every process, in XLA's order.
NATIVE_STEP = [ALLREDUCE, "MPI_Irecv (collective-permute)",
               "MPI_Isend (collective-permute)",
               "MPI_Wait (of MPI_Irecv) (collective-permute)",
               "MPI_Wait (of MPI_Isend) (collective-permute)"]


def native_job(mpirun, tmp_path, n, *args, env):
    app = tmp_path / "native_app.py"
    app.write_text(NATIVE_APP)
    return mpirun(n, "-m", "jaxmpi.distributed", str(app), *args,
                  env=env, timeout=240)


def test_a_process_that_skips_a_native_collective_is_named(mpirun, tmp_path):
    # Process 0 never reaches the second step's psum: process 1 times out
    # in its MPI_Allreduce, and both its error and python -m jaxmpi.record
    # name process 0, the MPI call, XLA's collective and its number (the
    # same on both: the communicator's collectives, not its messages).
    rings = tmp_path / "rings"
    job = native_job(mpirun, tmp_path, 2, "skip", "1", env={
        "JAXMPI_RECORD_DIR": str(rings), "JAXMPI_TIMEOUT": HANG_TIMEOUT})
    assert job.returncode != 0 and "no hang?" not in job.stdout, job
    text = verdict(rings)
    first = ("Rank 0 never entered MPI_Allreduce #2 (XLA's all-reduce) that "
             "rank 1 waits in; its last call was ")
    assert text.startswith(first), text
    # XLA waits for its receives, then its sends; the peer is the other
    # process either way at 2.
    assert re.fullmatch(r"MPI_Wait \(of MPI_I(send|recv)\) #4 (to|from) rank "
                        r"1 \(XLA's collective-permute\) \(done\)\.",
                        text[len(first):]), text
    err = one_line(job.stderr)
    assert ("jaxmpi: MPI_Allreduce (XLA's all-reduce of MPI_FLOAT x 1, 4 "
            "bytes, MPI_SUM) on native communicator") in err, job
    assert ("its collective #2, did not complete within JAXMPI_TIMEOUT=5 s "
            "on world rank 1") in err, job
    assert text in err, job


@pytest.fixture(scope="module")
def native_traced(mpirun_module, tmp_path_factory):
    """NATIVE_APP at 3 processes under JAXMPI_TRACE, merged."""
    d = tmp_path_factory.mktemp("native-trace")
    job = native_job(mpirun_module, d, 3, "trace", str(NATIVE_ROUNDS),
                     env={"JAXMPI_TRACE": str(d / "trace")})
    assert job.returncode == 0, job
    merged = command("-m", "jaxmpi.trace", str(d / "trace"), "--no-png")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    with open(d / "trace" / "trace.json") as f:
        return json.load(f), merged.stdout


def test_native_trace_of_a_plain_jax_program_names_the_mpi_calls(native_traced):
    trace, table = native_traced
    size = 3
    assert not [e for e in trace["traceEvents"] if e["ph"] == "X"
                and e["cat"] == "jaxmpi"]
    for rank in range(size):
        calls = sorted((e for e in trace["traceEvents"] if e["ph"] == "X"
                        and e["cat"] == "native" and e["pid"] == rank),
                       key=lambda e: e["ts"])
        # XLA makes the communicator first, at its first collective.
        split, calls = calls[0], calls[1:]
        assert split["name"] == "MPI_Comm_split (communicator creation)"
        assert [e["name"] for e in calls] == NATIVE_STEP * NATIVE_ROUNDS
        up, down = (rank + 1) % size, (rank - 1) % size
        for k in range(NATIVE_ROUNDS):
            a, irecv, isend, wrecv, wsend = calls[5 * k:5 * k + 5]
            # Collectives numbered on their communicator, messages apart.
            assert a["args"]["seq"] == k + 1, a
            assert [c["args"]["seq"] for c in (irecv, isend, wrecv, wsend)] \
                == [4 * k + 1, 4 * k + 2, 4 * k + 3, 4 * k + 4]
            assert (a["args"]["kind"], a["args"]["dtype"],
                    a["args"]["bytes"]) == ("all-reduce", "MPI_FLOAT", 4), a
            # The ring: from the process below, to the one above.
            assert [c["args"]["peer"] for c in (irecv, isend, wrecv, wsend)] \
                == [down, up, down, up], calls
            assert all(c["args"]["state"] == "done" and c["tid"] == 0
                       for c in (a, irecv, isend, wrecv, wsend))
    # Each process's all-reduce on its own row: no process leaves one
    # before every process entered it (the clocks aligned).
    errors = [m["clock_error_ns"] / 1e3
              for m in trace["otherData"]["ranks"].values()]
    slack = 2 * max(errors) + 500.0
    per_rank = [[e for e in trace["traceEvents"] if e["ph"] == "X"
                 and e["pid"] == r and e["name"] == ALLREDUCE]
                for r in range(size)]
    for group in zip(*per_rank):
        assert len({c["args"]["seq"] for c in group}) == 1, group
        assert max(c["ts"] for c in group) <= min(
            c["ts"] + c["dur"] for c in group) + slack, group
    row = re.search(r"^MPI_Allreduce \(all-reduce\)\s+(\d+)\s", table, re.M)
    assert row and int(row.group(1)) == size * NATIVE_ROUNDS, table
