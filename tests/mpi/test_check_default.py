"""The default cross-rank check (no JAXMPI_CHECK set): mismatched collectives
raise on every rank with the same message as JAXMPI_CHECK=1, at the calls the
sparse schedule checks (the first 16 on each communicator, then powers of two
and multiples of 65536); a mismatch between two checked calls is reported at
the next one; ranks agree on the schedule. Point-to-point: a receive's size
mismatch is jaxmpi's message in the default mode too, and sends and receives
to the rank itself that could never complete raise instead of hanging.

Each mismatch runs on a fresh communicator (a clone of COMM_WORLD), so it is
that communicator's call #1 (or the call number the test chooses)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import _core
from jaxmpi import notoken as mpx
from util import check_mode as util_check_mode
from util import RANK, SIZE, sender_first

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core", "mpi_errors")

LAST = SIZE - 1
two_ranks = pytest.mark.skipif(SIZE < 2, reason="ranks must disagree")
CHECK_ERROR = (r"collective call #(\d+) on this communicator differs across "
               r"ranks \(JAXMPI_CHECK\): ")


@pytest.fixture(autouse=True)
def default_mode():
    # These tests need the default; they leave it as they found it.
    with util_check_mode("sparse"):
        yield


def fresh():
    comm = MPI.COMM_WORLD.Clone()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    return comm


def error_of(call, comm):
    """The message `call(comm)` raises on this rank ('' if none)."""
    try:
        jax.block_until_ready(call(comm))
    except jax.errors.JaxRuntimeError as e:
        return str(e)
    return ""


def both_modes(call):
    """The error of `call` on a fresh communicator in the default mode, then
    with every call checked (JAXMPI_CHECK=1), on another fresh one."""
    out = []
    for mode in ("sparse", "all"):
        _core.get().set_check(mode)
        comm = fresh()
        try:
            out.append(error_of(call, comm))
        finally:
            comm.Free()
    _core.get().set_check("sparse")
    return out


def last_differs(a, b):
    return b if RANK == LAST else a


def f32(n):
    return jnp.arange(n, dtype=jnp.float32) + RANK


# Every collective, a mismatch of each kind it can have: (name, call, what
# the message must say). The last rank differs from the others.
CASES = [
    ("allreduce-shape", lambda c: mpx.allreduce(f32(last_differs(3, 4)), MPI.SUM,
                                                comm=c),
     ('the array', 'has', "float32[4]", "float32[3]")),
    ("allreduce-dtype", lambda c: mpx.allreduce(
        f32(3).astype(last_differs(jnp.float32, jnp.int32)), MPI.SUM, comm=c),
     ('the array', 'has', "int32[3]", "float32[3]")),
    ("allreduce-op", lambda c: mpx.allreduce(f32(3), last_differs(MPI.SUM, MPI.MAX),
                                             comm=c),
     ('the reduction op', 'has', "op=MPI.MAX", "op=MPI.SUM")),
    ("reduce-shape", lambda c: mpx.reduce(f32(last_differs(2, 5)), MPI.SUM, 0,
                                          comm=c),
     ('the array', 'has', "float32[5]", "float32[2]")),
    ("reduce-root", lambda c: mpx.reduce(f32(2), MPI.SUM, last_differs(0, LAST),
                                         comm=c),
     ('the root', 'has', "root={L}", "root=0")),
    ("reduce-op", lambda c: mpx.reduce(f32(2), last_differs(MPI.MIN, MPI.PROD), 0,
                                       comm=c),
     ('the reduction op', 'has', "op=MPI.PROD", "op=MPI.MIN")),
    ("scan-shape", lambda c: mpx.scan(f32(last_differs(2, 1)), MPI.SUM, comm=c),
     ('the array', 'has', "float32[1]", "float32[2]")),
    ("scan-op", lambda c: mpx.scan(f32(2), last_differs(MPI.SUM, MPI.MAX), comm=c),
     ('the reduction op', 'has', "op=MPI.MAX", "op=MPI.SUM")),
    ("bcast-shape", lambda c: mpx.bcast(
        jnp.zeros(last_differs((2, 2), (2, 3)), jnp.float32), 0, comm=c),
     ('the array', 'has', "float32[2,3]", "float32[2,2]")),
    ("bcast-root", lambda c: mpx.bcast(f32(2), last_differs(0, LAST), comm=c),
     ('the root', 'has', "root={L}", "root=0")),
    ("gather-dtype", lambda c: mpx.gather(
        f32(2).astype(last_differs(jnp.float32, jnp.float64)), 0, comm=c),
     ('the array', 'has', "float64[2]", "float32[2]")),
    ("gather-root", lambda c: mpx.gather(f32(2), last_differs(0, LAST), comm=c),
     ('the root', 'has', "root={L}", "root=0")),
    # (the root passes the whole table, the others a template of their part)
    ("scatter-shape", lambda c: mpx.scatter(
        jnp.zeros((SIZE, 2), jnp.float32) if RANK == 0
        else jnp.zeros(last_differs(2, 3), jnp.float32), 0, comm=c),
     ('the array', 'has', "float32[3]", "float32[2]")),
    ("scatter-root", lambda c: mpx.scatter(
        jnp.zeros((SIZE, 2), jnp.float32) if RANK in (0, LAST)
        else jnp.zeros(2, jnp.float32), last_differs(0, LAST), comm=c),
     ('the root', 'has', "root={L}", "root=0")),
    ("allgather-shape", lambda c: mpx.allgather(f32(last_differs(2, 7)), comm=c),
     ('the array', 'has', "float32[7]", "float32[2]")),
    ("alltoall-shape", lambda c: mpx.alltoall(
        jnp.zeros((SIZE, last_differs(1, 2)), jnp.float32), comm=c),
     ('the array', 'has', "float32[{S},2]", "float32[{S},1]")),
    ("barrier-vs-allreduce", lambda c: (
        mpx.barrier(comm=c) if RANK == LAST else mpx.allreduce(f32(1), MPI.SUM,
                                                                comm=c)),
     ('the operation', 'calls', "jaxmpi.barrier", "jaxmpi.allreduce")),
    ("bcast-vs-allreduce", lambda c: (
        mpx.bcast(f32(3), 0, comm=c) if RANK == LAST
        else mpx.allreduce(f32(3), MPI.SUM, comm=c)),
     ('the operation', 'calls', "jaxmpi.bcast", "jaxmpi.allreduce")),
    ("alltoall-vs-allgather", lambda c: (
        mpx.alltoall(jnp.zeros((SIZE, 1), jnp.float32), comm=c) if RANK == LAST
        else mpx.allgather(f32(1), comm=c)),
     ('the operation', 'calls', "jaxmpi.alltoall", "jaxmpi.allgather")),
]


def _expected(what):
    """The check's report when the last rank has `a` and the others `b`:
    groups of ranks that agree, the smallest first (ties: lowest rank)."""
    field, verb, a, b = what
    a, b = a.format(L=LAST, S=SIZE), b.format(L=LAST, S=SIZE)
    plural = {"has": "have", "calls": "call"}[verb]
    if SIZE == 2:
        return f"{field}: rank 0 {verb} {b}, rank 1 {verb} {a}"
    ranks = ",".join(map(str, range(SIZE - 1)))
    return f"{field}: rank {LAST} {verb} {a}, ranks {ranks} {plural} {b}"


@two_ranks
@pytest.mark.parametrize("name,call,what", CASES, ids=[c[0] for c in CASES])
def test_default_mode_catches_mismatch_like_check_mode(name, call, what):
    default, every = both_modes(call)
    assert default, f"{name}: no error in the default mode"
    assert re.search(CHECK_ERROR, default), default
    assert re.search(CHECK_ERROR, default).group(1) == "1", default
    assert _expected(what) in default, (_expected(what), default)
    # The very message of JAXMPI_CHECK=1 (both at the communicator's call #1).
    assert default == every, (default, every)


@two_ranks
@pytest.mark.parametrize("jit", [False, True])
def test_every_collective_checked_on_its_first_calls(jit):
    # Call #16 (the last of the dense start) mismatches: caught there.
    comm = fresh()
    try:
        f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM, comm=comm)) if jit else \
            (lambda x: mpx.allreduce(x, MPI.SUM, comm=comm))
        ok = [np.asarray(f(f32(2))) for _ in range(15)]
        msg = error_of(lambda c: mpx.bcast(f32(2), last_differs(0, LAST), comm=c),
                       comm)
    finally:
        comm.Free()
    for y in ok:
        np.testing.assert_array_equal(y, SIZE * np.arange(2) + sum(range(SIZE)))
    assert re.search(CHECK_ERROR, msg) and "call #16 " in msg, msg
    assert _expected(('the root', 'has', "root={L}", "root=0")) in msg


def _run_with_late_mismatch(mode, bad_call, ncalls):
    """Calls 1..ncalls of allreduce on a fresh communicator, call `bad_call`
    with MAX on the last rank (MPI survives it: same sizes), the others SUM.
    Returns (the call number that raised or 0, its message)."""
    _core.get().set_check(mode)
    comm = fresh()
    try:
        f = {op: jax.jit(lambda x, op=op: mpx.allreduce(x, getattr(MPI, op),
                                                         comm=comm))
             for op in ("SUM", "MAX")}
        for n in range(1, ncalls + 1):
            op = "MAX" if (n == bad_call and RANK == LAST) else "SUM"
            try:
                jax.block_until_ready(f[op](f32(2)))
            except jax.errors.JaxRuntimeError as e:
                return n, str(e)
        return 0, ""
    finally:
        comm.Free()
        _core.get().set_check("sparse")


@two_ranks
def test_mismatch_off_schedule_is_reported_at_next_checked_call():
    # Call 20 is not checked by default: MPI reduces with different ops (a
    # wrong result, no error), and the digest of calls 17..31 differs at the
    # next checked call, #32, on every rank.
    n, msg = _run_with_late_mismatch("sparse", 20, 40)
    assert n == 32, (n, msg)
    assert re.search(CHECK_ERROR, msg), msg
    assert ("an earlier call, one of #17 to #31, differed (not checked one by "
            "one by default") in msg, msg
    assert "rerun with JAXMPI_CHECK=1 to name it" in msg, msg
    # JAXMPI_CHECK=1 names the call itself.
    n, msg = _run_with_late_mismatch("all", 20, 40)
    assert n == 20 and "the reduction op: rank" in msg, (n, msg)
    # Checks off: nothing is reported at all.
    n, msg = _run_with_late_mismatch("off", 20, 40)
    assert n == 0, msg


@two_ranks
def test_mismatch_at_a_checked_power_of_two():
    n, msg = _run_with_late_mismatch("sparse", 64, 70)
    assert n == 64 and "the reduction op: rank" in msg, (n, msg)
    assert "earlier call" not in msg, msg


def reference_schedule(n):
    # Independent of the C core: the documented schedule.
    if n < 1:
        return False
    if n <= 16:
        return True
    if bin(n).count("1") == 1:
        return True
    return n % 65536 == 0


def test_schedule_matches_reference():
    core = _core.get()
    numbers = [*range(-3, 70000), *(2**k + d for k in range(17, 62)
                                     for d in (-1, 0, 1)),
               *(65536 * k + d for k in range(2, 200) for d in (-1, 0, 1))]
    mismatched = [n for n in numbers
                  if core.check_scheduled(n) != reference_schedule(n)]
    assert not mismatched, mismatched[:20]
    # Sparse: 28 checks in 10^5 calls (1..16, then 2^5..2^16).
    assert sum(core.check_scheduled(n) for n in range(1, 100001)) == 16 + 12


def test_ranks_agree_on_the_schedule():
    core = _core.get()
    mine = [n for n in range(1, 2**18 + 1) if core.check_scheduled(n)]
    everyone = MPI.COMM_WORLD.allgather(mine)
    assert all(s == mine for s in everyone)


def test_correct_programs_pass_in_default_mode():
    comm = fresh()
    r = comm.Get_rank()
    try:
        f = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM, comm=comm))
        ys = [np.asarray(f(jnp.full(3, r + 1.0 + i))) for i in range(70)]
        b = np.asarray(mpx.bcast(jnp.full(2, r), 0, comm=comm))
        g = np.asarray(mpx.allgather(jnp.int32(r), comm=comm))
    finally:
        comm.Free()
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y, np.full(3, SIZE * (SIZE + 1) / 2 + SIZE * i))
    np.testing.assert_array_equal(b, np.zeros(2))
    np.testing.assert_array_equal(g, np.arange(SIZE))


# ---- point-to-point ---------------------------------------------------------


@two_ranks
def test_recv_too_small_is_jaxmpis_message_by_default():
    # The message is there when the receive starts: its probe finds it.
    comm = fresh()
    try:
        error = sender_first(
            lambda: mpx.send(f32(5), 1, tag=3, comm=comm),
            lambda: (mpx.recv(jnp.ones((2, 2), jnp.float32), 0, tag=3, comm=comm)
                     if RANK == 1 else jnp.zeros(())))
        msg = "" if error is None else str(error)
        # The message was consumed: the communicator still works.
        y = np.asarray(mpx.allreduce(jnp.ones(2), MPI.SUM, comm=comm))
    finally:
        comm.Free()
    np.testing.assert_array_equal(y, np.full(2, float(SIZE)))
    if RANK == 1:
        assert re.search(
            r"jaxmpi.recv: rank 1 expects float32\[2,2\] \(16 bytes\) but the "
            r"message from rank 0 with tag 3 has 20 bytes \(5 float32 elements\)",
            msg), msg
    else:
        assert msg == "", msg


@two_ranks
@pytest.mark.parametrize("sent, expected", [
    (5, r"jaxmpi.recv: rank 1 expects float32\[2,2\] \(16 bytes\) but the "
        r"message from rank 0 with tag 3 is larger \(MPI_Recv: message "
        r"truncated\): the sender's shape or dtype differs"),
    (3, r"jaxmpi.recv: rank 1 received 12 bytes from rank 0 \(tag 3\) but "
        r"expected 4 elements of float32 \(16 bytes\): the sender's shape or "
        r"dtype differs")])
def test_late_message_of_another_size_is_an_error_by_default(sent, expected):
    # The message comes after the receive started (rank 0 sends 0.5 s late):
    # the probe does not wait for it, the receive does, and it fails all the
    # same, with MPI's size when the message is larger (truncation), with
    # the size received when it is shorter. The message was consumed: the
    # communicator still works.
    comm = fresh()
    try:
        error = sender_first(
            lambda: mpx.send(f32(sent), 1, tag=3, comm=comm),
            lambda: (mpx.recv(jnp.ones((2, 2), jnp.float32), 0, tag=3, comm=comm)
                     if RANK == 1 else jnp.zeros(())), delay=0.5)
        msg = "" if error is None else str(error)
        y = np.asarray(mpx.allreduce(jnp.ones(2), MPI.SUM, comm=comm))
    finally:
        comm.Free()
    np.testing.assert_array_equal(y, np.full(2, float(SIZE)))
    if RANK == 1:
        assert re.search(expected, msg), msg
    else:
        assert msg == "", msg


@two_ranks
def test_sendrecv_too_small_is_jaxmpis_message():
    # Rank 0 sends 5 floats to rank 1, which expects 4 (a truncation in MPI);
    # the others exchange 4 around a ring.
    comm = fresh()
    try:
        x = f32(5 if RANK == 0 else 4)
        msg = error_of(lambda c: mpx.sendrecv(x, jnp.zeros(4, jnp.float32),
                                              (RANK - 1) % SIZE, (RANK + 1) % SIZE,
                                              sendtag=9, recvtag=9, comm=c), comm)
    finally:
        comm.Free()
    if RANK == 1:
        assert ("jaxmpi.sendrecv: rank 1 expects float32[4] (16 bytes) but the "
                "message from rank 0 with tag 9 is larger (MPI_Sendrecv: "
                "message truncated): the sender's shape or dtype differs") in msg, msg
    else:
        assert msg == "", msg


def test_send_and_recv_to_self_that_can_complete():
    # A send to itself matching a receive already posted (here by mpi4py)
    # completes; so does a receive from itself of a message already sent.
    comm = fresh()
    try:
        buf = np.zeros(3, np.float32)
        req = comm.Irecv(buf, source=RANK, tag=5)
        mpx.send(f32(3) * 10, RANK, tag=5, comm=comm)
        jax.effects_barrier()
        req.Wait()
        out = np.arange(3, dtype=np.float32) * 7 + RANK
        sreq = comm.Isend(out, dest=RANK, tag=8)
        y = np.asarray(mpx.recv(jnp.zeros(3, jnp.float32), RANK, tag=8, comm=comm))
        sreq.Wait()
    finally:
        comm.Free()
    np.testing.assert_array_equal(buf, (np.arange(3) + RANK) * 10)
    np.testing.assert_array_equal(y, np.arange(3) * 7 + RANK)


def test_large_send_to_self_raises_instead_of_hanging():
    # 4 MiB: above any MPI's eager limit (MPICH buffers no send to itself
    # at all); no receive can be posted while the send would block.
    comm = fresh()
    try:
        msg = error_of(lambda c: mpx.send(jnp.ones(2**20, jnp.float32), RANK,
                                          tag=6, comm=c), comm)
        # Cancelled, the message is no longer waiting.
        left = comm.Iprobe(source=RANK, tag=6)
    finally:
        comm.Free()
    assert (f"jaxmpi.send: rank {RANK} of {SIZE} sends float32[1048576] "
            "(4194304 bytes) to itself (tag 6), which cannot complete") in msg, msg
    assert "use sendrecv with source=dest=rank" in msg, msg
    assert ("mpirun" in msg) == (SIZE == 1), msg
    if msg.endswith("(the send was cancelled)"):
        # MPICH and Open MPI no longer show a cancelled send to a probe;
        # Intel MPI 2021 reports the cancel done and still shows it (an MPI
        # matter: jaxmpi's error and the survival of the rank hold there too).
        if "Intel" not in MPI.Get_library_version():
            assert not left
    else:
        # Some MPIs cannot cancel a send: said so, and the job must end.
        assert msg.endswith("(the send was not cancelled: the communicator "
                            "cannot be used any more)"), msg


def test_recv_from_self_with_nothing_sent_raises():
    comm = fresh()
    try:
        msg = error_of(lambda c: mpx.recv(jnp.zeros(3), RANK, tag=7, comm=c), comm)
        any_msg = error_of(lambda c: mpx.recv(jnp.zeros(3), MPI.ANY_SOURCE, tag=7,
                                              comm=c), comm) if SIZE == 1 else ""
    finally:
        comm.Free()
    assert (f"jaxmpi.recv: rank {RANK} of {SIZE} receives from itself (source "
            f"{RANK}, tag 7) but no such message from itself is waiting") in msg, msg
    assert ("mpirun" in msg) == (SIZE == 1), msg
    if SIZE == 1:
        assert "source MPI.ANY_SOURCE, tag 7" in any_msg, any_msg


@two_ranks
def test_eager_direct_and_compiled_calls_are_counted_alike():
    """Rank 0 calls allreduce eagerly (the direct path: MPI from Python,
    the C core's check first), the others through jit: one sequence of
    calls, so a mismatch at the next scheduled call (#32) is reported on
    every rank, and the calls in between agree."""
    from jaxmpi import _eager

    comm = fresh()
    x = jnp.full(3, RANK + 1.0, jnp.float32)
    compiled = jax.jit(lambda x: mpx.allreduce(x, MPI.SUM, comm=comm))
    eager = RANK == 0
    direct = _eager.usable(x)
    call = (lambda x: mpx.allreduce(x, MPI.SUM, comm=comm)) if eager else compiled
    sums = [np.asarray(call(x)) for _ in range(31)]
    bad = jnp.ones(4 if RANK == LAST else 3, jnp.float32)
    err = error_of(lambda c: call(bad), comm)
    assert direct or not eager, "the test needs the eager direct path"
    want = np.full(3, SIZE * (SIZE + 1) / 2, np.float32)
    for y in sums:
        np.testing.assert_array_equal(y, want)
    m = re.search(CHECK_ERROR, err)
    assert m and m.group(1) == "32", err
    assert "float32[4]" in err and "float32[3]" in err, err
