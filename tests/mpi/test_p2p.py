"""send, recv and sendrecv: every dtype, status, wildcards, PROC_NULL,
mismatched messages, and orderings that deadlock unless calls stay in
program order."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import check_mode as util_check_mode
from util import (DOWN, DTYPE_IDS, DTYPES, LEFT, MODES, RANK, RIGHT, SIZE, UP,
                  Later, bfloat16, check, data, on_line, run, sender_first)

# The suites this file belongs to (tests/suites.py).
SUITES = ("large_count", "across_hosts", "c_core", "mpi_errors")

SHAPE = (4, 3)
needs2 = pytest.mark.skipif(SIZE < 2, reason="needs 2 ranks")

SOME_DTYPES = [np.dtype(d) for d in (np.bool_, np.int8, np.uint64, np.float16,
                                     bfloat16, np.float64, np.complex128)]


def from_below(shape, dtype, seed=0):
    """What rank RANK receives on the line going up."""
    return on_line(DOWN, shape, dtype, seed)


def from_above(shape, dtype, seed=0):
    return on_line(UP, shape, dtype, seed)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_sendrecv_ring(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, lambda a: mpx.sendrecv(a, a, LEFT, RIGHT), x)
    check(y, data(LEFT, SHAPE, dtype))


@needs2
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_send_recv_ring(dtype, mode):
    # Even ranks send first, odd ranks receive first; with an odd size the
    # last rank closes the ring, which still makes progress.
    x = jnp.asarray(data(RANK, SHAPE, dtype))

    def f(a):
        if RANK % 2 == 0:
            mpx.send(a, RIGHT)
            return mpx.recv(a, LEFT)
        b = mpx.recv(a, LEFT)
        mpx.send(a, RIGHT)
        return b

    check(run(mode, f, x), data(LEFT, SHAPE, dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_sendrecv_shift(dtype, mode):
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    y = run(mode, lambda a: mpx.sendrecv(a, a, DOWN, UP), x)
    check(y, from_below(SHAPE, dtype))


@pytest.mark.parametrize("mode", MODES)
def test_sendrecv_shift_both_ways(mode):
    # Different data (and shapes) up and down the line, in one program.
    a = jnp.asarray(data(RANK, SHAPE, np.float32, seed=1))
    b = jnp.asarray(data(RANK, (5,), np.int32, seed=2))

    def f(a, b):
        return (mpx.sendrecv(a, a, DOWN, UP, sendtag=1, recvtag=1),
                mpx.sendrecv(b, b, UP, DOWN, sendtag=2, recvtag=2))

    up, down = run(mode, f, a, b)
    later = Later()
    later.check(up, from_below(SHAPE, np.float32, seed=1), "up")
    later.check(down, from_above((5,), np.int32, seed=2), "down")
    later.done()


@pytest.mark.parametrize("mode", MODES)
def test_sendrecv_ring_both_ways(mode):
    # Different data each way round the ring (tells directions apart from
    # 3 ranks; the line above does from 2).
    a = jnp.asarray(data(RANK, SHAPE, np.float64, seed=3))
    b = jnp.asarray(data(RANK, SHAPE, np.float64, seed=4))

    def f(a, b):
        return (mpx.sendrecv(a, a, LEFT, RIGHT), mpx.sendrecv(b, b, RIGHT, LEFT))

    right, left = run(mode, f, a, b)
    later = Later()
    later.check(right, data(LEFT, SHAPE, np.float64, seed=3), "rightwards")
    later.check(left, data(RIGHT, SHAPE, np.float64, seed=4), "leftwards")
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_send_recv_shift(dtype, mode):
    # Up the line, then down with other data: each rank receives before it
    # sends, so the messages ripple from one end (PROC_NULL at the ends).
    a = jnp.asarray(data(RANK, SHAPE, dtype, seed=5))
    b = jnp.asarray(data(RANK, (2, 5), dtype, seed=6))

    def f(a, b):
        up = mpx.recv(a, DOWN, tag=11)
        mpx.send(a, UP, tag=11)
        down = mpx.recv(b, UP, tag=12)
        mpx.send(b, DOWN, tag=12)
        return up, down

    up, down = run(mode, f, a, b)
    later = Later()
    later.check(up, from_below(SHAPE, dtype, seed=5), "up")
    later.check(down, from_above((2, 5), dtype, seed=6), "down")
    later.done()


def test_sendrecv_different_shapes_and_dtypes():
    # The received array's shape and dtype come from recvbuf alone.
    x = jnp.asarray(data(RANK, (6,), np.float64))
    y = mpx.sendrecv(x, jnp.zeros((2, 3), np.float64), LEFT, RIGHT)
    check(y, data(LEFT, (6,), np.float64).reshape(2, 3))


@needs2
@pytest.mark.parametrize("mode", MODES)
def test_status_and_wildcards(mode):
    status = MPI.Status()
    x = jnp.asarray(data(RANK, SHAPE, np.int32))

    def f(a):
        if RANK == 0:
            out = a
            for _ in range(SIZE - 1):  # from everyone, in whatever order
                out = mpx.recv(a, MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=status)
            return out
        mpx.send(a, 0, tag=100 + RANK)
        return a

    y = run(mode, f, x)
    if RANK == 0:
        src = status.Get_source()
        assert 1 <= src < SIZE
        assert status.Get_tag() == 100 + src
        assert status.Get_count(MPI.INT32_T) == int(np.prod(SHAPE))
        check(y, data(src, SHAPE, np.int32))


@needs2
def test_sendrecv_status():
    status = MPI.Status()
    x = jnp.asarray(data(RANK, SHAPE, np.float32))
    jax.jit(lambda a: mpx.sendrecv(a, a, LEFT, RIGHT, sendtag=7 + RANK,
                                   status=status))(x)
    assert status.Get_source() == LEFT
    assert status.Get_tag() == 7 + LEFT


@needs2
@pytest.mark.parametrize("mode", MODES)
def test_tags_select_messages(mode):
    # Rank 0 sends tag 1 then tag 2; rank 1 receives tag 2 first.
    a = jnp.asarray(data(RANK, (5,), np.float32, seed=1))
    b = jnp.asarray(data(RANK, (5,), np.float32, seed=2))

    def f(a, b):
        if RANK == 0:
            mpx.send(a, 1, tag=1)
            mpx.send(b, 1, tag=2)
            return a, b
        if RANK == 1:
            y2 = mpx.recv(b, 0, tag=2)
            y1 = mpx.recv(a, 0, tag=1)
            return y1, y2
        return a, b

    y1, y2 = run(mode, f, a, b)
    if RANK == 1:
        check(y1, data(0, (5,), np.float32, seed=1))
        check(y2, data(0, (5,), np.float32, seed=2))


@pytest.mark.parametrize("mode", MODES)
def test_proc_null(mode):
    x = jnp.asarray(data(RANK, SHAPE, np.float32))
    y = run(mode, lambda a: mpx.recv(a, MPI.PROC_NULL), x)
    check(y, np.zeros(SHAPE, np.float32))
    run(mode, lambda a: mpx.send(a, MPI.PROC_NULL), x)
    y = run(mode, lambda a: mpx.sendrecv(a, a, MPI.PROC_NULL, MPI.PROC_NULL), x)
    check(y, np.zeros(SHAPE, np.float32))


@needs2
@pytest.mark.parametrize("mode", MODES)
def test_order_without_tokens_large_messages(mode):
    # Messages far above any eager limit: if the calls of one rank were
    # reordered (both receiving first), this would deadlock.
    n = 1 << 20
    x = jnp.full((n,), float(RANK), jnp.float32)
    peer = RANK ^ 1

    def f(a):
        if peer >= SIZE:
            return a
        if RANK % 2 == 0:
            mpx.send(a, peer)
            return mpx.recv(a, peer)
        b = mpx.recv(a, peer)
        mpx.send(a, peer)  # result unused: must still run, in this place
        return b

    y = run(mode, f, x)
    expected = float(peer) if peer < SIZE else float(RANK)
    assert float(y[0]) == expected and float(y[-1]) == expected


@needs2
def test_seed_example_with_tokens():
    # The mpi4jax usage example: tokens passed explicitly are accepted.
    x = jnp.zeros((3, 3))
    peer = RANK ^ 1

    @jax.jit
    def foo(arr):
        arr = arr + RANK
        if peer >= SIZE:
            return arr
        if RANK % 2 == 0:
            token = jaxmpi.send(arr, dest=peer)
            other, token = jaxmpi.recv(arr, source=peer, token=token)
        else:
            other, token = jaxmpi.recv(arr, source=peer)
            token = jaxmpi.send(arr, dest=peer, token=token)
        return other

    y = foo(x)
    check(y, np.full((3, 3), float(peer if peer < SIZE else RANK), x.dtype))


@pytest.fixture(params=["off", "sparse", "all"])
def check_mode(request):
    # Every rank sets the mode, and restores it, at the same point.
    with util_check_mode(request.param) as mode:
        yield mode


@needs2
@pytest.mark.parametrize("mode", MODES)
def test_short_message_is_an_error_not_garbage(mode, check_mode):
    # Rank 0 sends 3 elements where rank 1 expects 4: an error on rank 1,
    # and both ranks go on working afterwards. With checks on (the default)
    # the receive's probe finds the message, sent before the receive starts.
    def f(a):
        if RANK == 0:
            mpx.send(a[:3], 1, tag=5)
        elif RANK == 1:
            return mpx.recv(a, 0, tag=5)
        return a

    x = jnp.arange(4.0, dtype=jnp.float32)
    expected = (r"received 12 bytes from rank 0 \(tag 5\) but expected 4 "
                r"elements of float32" if check_mode == "off" else
                r"rank 1 expects float32\[4\] \(16 bytes\) but the message "
                r"from rank 0 with tag 5 has 12 bytes \(3 float32 elements\)")
    error = sender_first(lambda: run(mode, f, x), lambda: run(mode, f, x))
    total = mpx.allreduce(jnp.ones(2), MPI.SUM)
    if RANK == 1:
        assert error is not None, "no error on rank 1"
        assert re.search(expected, str(error)), str(error)
    else:
        assert error is None, error
    check(total, np.full(2, float(SIZE)))


@needs2
def test_long_message_is_an_error(check_mode):
    # Rank 0 sends 8 elements where rank 1 expects 4. Checks off: MPI
    # reports truncation, which becomes jaxmpi's message with the size
    # expected; on (the default): the probe, finding the message sent before
    # the receive starts, gives both sizes.
    x = jnp.arange(8.0, dtype=jnp.float32)
    error = sender_first(lambda: mpx.send(x, 1, tag=6),
                         lambda: mpx.recv(x[:4], 0, tag=6) if RANK == 1 else x)
    msg = None if error is None else str(error)
    total = mpx.allreduce(jnp.ones(2), MPI.SUM)
    if RANK == 1:
        assert msg is not None, "no error on rank 1"
        if check_mode == "off":
            assert ("jaxmpi.recv: rank 1 expects float32[4] (16 bytes) but the "
                    "message from rank 0 with tag 6 is larger (MPI_Recv: message "
                    "truncated): the sender's shape or dtype differs") in msg, msg
        else:
            assert ("jaxmpi.recv: rank 1 expects float32[4] (16 bytes) but the "
                    "message from rank 0 with tag 6 has 32 bytes (8 float32 "
                    "elements)") in msg, msg
    check(total, np.full(2, float(SIZE)))


# ---- neighbor_exchange -------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_neighbor_exchange_shift(dtype, mode):
    # Pair 0 shifts right, pair 1 (another shape) shifts left.
    x = jnp.asarray(data(RANK, SHAPE, dtype))
    z = jnp.asarray(data(RANK, (5,), dtype, seed=1))

    def f(a, b):
        return mpx.neighbor_exchange([a, b], [a, b], [LEFT, RIGHT],
                                     [RIGHT, LEFT], tag=7)

    y0, y1 = run(mode, f, x, z)
    later = Later()
    later.check(y0, data(LEFT, SHAPE, dtype))
    later.check(y1, data(RIGHT, (5,), dtype, seed=1))
    later.done()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", SOME_DTYPES, ids=str)
def test_neighbor_exchange_open_ends(dtype, mode):
    # The non-periodic line: pair 0 goes up, pair 1 (other data, another
    # shape) goes down; the ends talk to MPI.PROC_NULL and get zeros.
    x = jnp.asarray(data(RANK, SHAPE, dtype, seed=2))
    z = jnp.asarray(data(RANK, (5,), dtype, seed=3))

    def f(a, b):
        return mpx.neighbor_exchange([a, b], [a, b], [DOWN, UP], [UP, DOWN])

    up, down = run(mode, f, x, z)
    later = Later()
    later.check(up, from_below(SHAPE, dtype, seed=2), "up")
    later.check(down, from_above((5,), dtype, seed=3), "down")
    later.done()


def test_neighbor_exchange_token_api_and_empty():
    x = jnp.ones(3) * RANK
    (y,), tok = jaxmpi.neighbor_exchange([x], [x], [DOWN], [UP], token=None)
    empty = mpx.neighbor_exchange([], [], [], [])
    check(y, np.ones(3) * (DOWN if RANK > 0 else 0))
    assert empty == ()


def test_neighbor_exchange_short_message_is_an_error():
    # Every rank sends 3 elements but expects 4: jaxmpi's own check of the
    # received size, naming the sender and the tag (never garbage).
    with pytest.raises(Exception, match=(
            rf"jaxmpi.neighbor_exchange: rank {RANK} received 24 bytes from "
            rf"rank {LEFT} \(tag 7\) but expected 4 elements of float64 "
            r"\(32 bytes\): the sender's shape or dtype differs")):
        jax.block_until_ready(mpx.neighbor_exchange(
            [jnp.ones(3, jnp.float64)], [jnp.ones(4, jnp.float64)], [LEFT],
            [RIGHT], tag=7))


def test_neighbor_exchange_long_message_is_an_mpi_error():
    # Every rank sends 4 elements but expects 3: MPI's truncation error,
    # which jaxmpi reports with the op, the failed call, rank and peer.
    with pytest.raises(Exception, match=(
            rf"jaxmpi.neighbor_exchange: MPI_Waitall \(receive\) failed on "
            rf"rank {RANK} of {SIZE}, source {LEFT}: (?i:.*trunc)")):
        jax.block_until_ready(mpx.neighbor_exchange(
            [jnp.ones(4, jnp.float64)], [jnp.ones(3, jnp.float64)], [LEFT],
            [RIGHT]))


@pytest.mark.parametrize("args, err, match", [
    (lambda x: ([x], [x, x], [LEFT], [RIGHT]), ValueError, "same length"),
    (lambda x: (x, [x], [LEFT], [RIGHT]), TypeError, "sendbufs must be a list"),
    (lambda x: ([x], [x], [SIZE], [RIGHT]), ValueError, r"sources\[0\]"),
    (lambda x: ([x], [x], [LEFT], [-5]), ValueError, r"dests\[0\]"),
    (lambda x: ([x], [x], [MPI.ANY_SOURCE], [RIGHT]), ValueError,
     r"sources\[0\]"),
    (lambda x: ([x] * 33, [x] * 33, [LEFT] * 33, [RIGHT] * 33), ValueError,
     "at most 32"),
    (lambda x: ([x], [object()], [LEFT], [RIGHT]), TypeError, r"recvbufs\[0\]"),
])
def test_neighbor_exchange_bad_input(args, err, match):
    with pytest.raises(err, match=match):
        mpx.neighbor_exchange(*args(jnp.ones(2)))


def test_neighbor_exchange_last_tag_checked():
    ub = jaxmpi.get_default_comm().Get_attr(MPI.TAG_UB)
    from jaxmpi._validate import reserved_tag_bit
    top = reserved_tag_bit(ub) - 1
    x = jnp.ones(2)
    with pytest.raises(ValueError, match="last pair"):
        mpx.neighbor_exchange([x, x], [x, x], [LEFT, LEFT], [RIGHT, RIGHT],
                              tag=top)
