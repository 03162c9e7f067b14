"""A battery of bad input. Every case raises a clear exception, whose type
and message name the function, the argument and its value, on every rank
(conftest fails a test everywhere if it fails anywhere), with no hang (the
pytest timeout) and no crash (the job would die). Afterwards every
communicator still works.

The cross-rank cases turn checks on (jaxmpi.set_check) and make ranks
disagree: different shapes, dtypes, ops, roots, operations, message sizes.
"""

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from jaxmpi._validate import reserved_tag_bit
from util import RANK, SIZE, sender_first

# The suites this file belongs to (tests/suites.py).
SUITES = ("c_core", "mpi_errors")

X = jnp.ones((SIZE, 2), jnp.float32)
TAG_UB = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
TOP_TAG = reserved_tag_bit(TAG_UB) - 1


def _freed_comm():
    c = MPI.COMM_WORLD.Dup()
    c.Free()
    return c


def _freed_op():
    op = MPI.Op.Create(lambda a, b, t: None, commute=True)
    op.Free()
    return op


def _traced(fn, *static):
    return lambda: jax.jit(fn)(X, *static)


# (id, call, exception type, regular expression the message must match)
CASES = [
    # arrays
    ("x-none", lambda: mpx.allreduce(None, MPI.SUM), TypeError,
     r"allreduce: x must be an array, got NoneType: None"),
    ("x-dict", lambda: mpx.bcast({"a": 1, "b": "text"}, 0), TypeError,
     r"bcast: x\['b'\] must be an array, got str: 'text'"),
    ("x-string-array", lambda: mpx.allgather(np.array(["a"])), TypeError,
     r"allgather: x has dtype <U1, which jaxmpi does not support; supported: "
     r"bool, int8"),
    ("x-object-array", lambda: mpx.gather(np.array([object()]), 0), TypeError,
     r"gather: x has dtype object, which jaxmpi does not support"),
    ("x-ragged-list", lambda: mpx.allreduce([[1, 2], [object()]], MPI.SUM),
     TypeError, r"allreduce: x\[1\]\[0\] must be an array, got object"),
    ("x-int-too-large", lambda: mpx.allreduce(2**70, MPI.SUM), TypeError,
     r"allreduce: x must be an array, got int: 1180591620717411303424 "
     r"\(.*too large"),
    ("x-float8", lambda: mpx.bcast(jnp.zeros(2, jnp.float8_e4m3fn), 0),
     TypeError, r"bcast: x has dtype float8_e4m3fn, which jaxmpi does not "
     r"support"),
    ("x-int4", lambda: mpx.scan(jnp.zeros(2, jnp.int4), MPI.SUM), TypeError,
     r"scan: x has dtype int4, which jaxmpi does not support"),
    ("sendbuf-string", lambda: mpx.sendrecv("abc", X, 0, 0), TypeError,
     r"sendrecv: sendbuf must be an array, got str: 'abc'"),
    ("recv-template-none", lambda: mpx.recv(None, 0), TypeError,
     r"recv: x must be an array, got NoneType: None"),
    ("recvbuf-bytes", lambda: mpx.sendrecv(X, b"xy", 0, 0), TypeError,
     r"sendrecv: recvbuf must be an array, got bytes: b'xy'"),
    # roots and ranks
    ("root-none", lambda: mpx.bcast(X, None), TypeError,
     r"bcast: root must be an int, got NoneType: None"),
    ("root-str", lambda: mpx.gather(X, "0"), TypeError,
     r"gather: root must be an int, got str: '0'"),
    ("root-float", lambda: mpx.scatter(X, 0.0), TypeError,
     r"scatter: root must be an int, got float: 0.0"),
    ("root-bool", lambda: mpx.reduce(X, MPI.SUM, True), TypeError,
     r"reduce: root must be an int, got bool: True"),
    ("root-jax-array", lambda: mpx.gather(X, jnp.int32(0)), TypeError,
     r"gather: root must be an int, got ArrayImpl: Array\(0, dtype=int32\)"),
    ("root-too-large", lambda: mpx.bcast(X, SIZE), ValueError,
     rf"bcast: root={SIZE} is not a rank of the communicator \(valid: 0 to "
     rf"{SIZE - 1}\)"),
    ("root-negative", lambda: mpx.reduce(X, MPI.SUM, -1), ValueError,
     r"reduce: root=-1 is not a rank of the communicator"),
    ("root-any-source", lambda: mpx.gather(X, MPI.ANY_SOURCE), ValueError,
     rf"gather: root={MPI.ANY_SOURCE} is not a rank"),
    ("root-proc-null", lambda: mpx.bcast(X, MPI.PROC_NULL), ValueError,
     rf"bcast: root={MPI.PROC_NULL} is not a rank"),
    ("dest-too-large", lambda: mpx.send(X, SIZE), ValueError,
     rf"send: dest={SIZE} is not a rank of the communicator \(valid: 0 to "
     rf"{SIZE - 1} or MPI.PROC_NULL\)"),
    ("dest-any-source", lambda: mpx.send(X, MPI.ANY_SOURCE), ValueError,
     rf"send: dest={MPI.ANY_SOURCE} is not a rank"),
    ("source-too-large", lambda: mpx.recv(X, SIZE + 3), ValueError,
     rf"recv: source={SIZE + 3} is not a rank of the communicator \(valid: 0 "
     rf"to {SIZE - 1} or MPI.ANY_SOURCE or MPI.PROC_NULL\)"),
    ("sendrecv-dest-any-source",
     lambda: mpx.sendrecv(X, X, 0, MPI.ANY_SOURCE), ValueError,
     rf"sendrecv: dest={MPI.ANY_SOURCE} is not a rank"),
    ("sendrecv-source-negative", lambda: mpx.sendrecv(X, X, -7, 0), ValueError,
     r"sendrecv: source=-7 is not a rank"),
    # tags
    ("tag-negative", lambda: mpx.send(X, 0, tag=-3), ValueError,
     rf"send: tag=-3 is not a valid tag \(valid: 0 to {TOP_TAG};"),
    ("tag-reserved", lambda: mpx.send(X, 0, tag=TOP_TAG + 1), ValueError,
     rf"send: tag={TOP_TAG + 1} is not a valid tag .*higher tags carry "
     r"jaxmpi's gradient messages"),
    ("tag-above-tag-ub", lambda: mpx.recv(X, 0, tag=TAG_UB + 1), ValueError,
     rf"recv: tag={TAG_UB + 1} is not a valid tag \(valid: 0 to {TOP_TAG} or "
     r"MPI.ANY_TAG"),
    ("tag-none", lambda: mpx.send(X, 0, tag=None), TypeError,
     r"send: tag must be an int, got NoneType: None"),
    ("tag-float", lambda: mpx.recv(X, 0, tag=1.5), TypeError,
     r"recv: tag must be an int, got float: 1.5"),
    ("sendtag-any-tag", lambda: mpx.sendrecv(X, X, 0, 0, sendtag=MPI.ANY_TAG),
     ValueError, rf"sendrecv: sendtag={MPI.ANY_TAG} is not a valid tag"),
    ("recvtag-negative", lambda: mpx.sendrecv(X, X, 0, 0, recvtag=-5),
     ValueError, r"sendrecv: recvtag=-5 is not a valid tag"),
    # reduction ops
    ("op-none", lambda: mpx.allreduce(X, None), TypeError,
     r"allreduce: op must be an mpi4py reduction op such as MPI.SUM, got "
     r"NoneType: None"),
    ("op-string", lambda: mpx.scan(X, "sum"), TypeError,
     r"scan: op must be an mpi4py reduction op such as MPI.SUM, got str: "
     r"'sum'"),
    ("op-null", lambda: mpx.reduce(X, MPI.OP_NULL, 0), TypeError,
     r"reduce: op is MPI.OP_NULL \(a null or freed op\)"),
    ("op-freed", lambda: mpx.allreduce(X, _freed_op()), TypeError,
     r"allreduce: op is MPI.OP_NULL \(a null or freed op\)"),
    ("op-sum-bool", lambda: mpx.allreduce(jnp.ones(2, bool), MPI.SUM),
     TypeError, r"allreduce: MPI.SUM is not defined for dtype bool; for this "
     r"dtype use one of MPI.LAND, MPI.LOR, MPI.LXOR"),
    ("op-max-complex", lambda: mpx.scan(jnp.ones(2, jnp.complex64), MPI.MAX),
     TypeError, r"scan: MPI.MAX is not defined for dtype complex64"),
    ("op-band-float", lambda: mpx.reduce(X, MPI.BAND, 0), TypeError,
     r"reduce: MPI.BAND is not defined for dtype float32"),
    ("op-lor-float16", lambda: mpx.allreduce(jnp.ones(2, jnp.float16), MPI.LOR),
     TypeError, r"allreduce: MPI.LOR is not defined for dtype float16"),
    ("op-maxloc-int", lambda: mpx.allreduce(jnp.ones(2, jnp.int32), MPI.MAXLOC),
     TypeError, r"allreduce: MPI.MAXLOC is not defined for dtype int32"),
    ("op-replace", lambda: mpx.reduce(X, MPI.REPLACE, 0), TypeError,
     r"reduce: MPI.REPLACE is not defined for dtype float32"),
    ("adjoint-unknown", lambda: mpx.allreduce(X, MPI.SUM, adjoint="mean"),
     ValueError, r"allreduce: adjoint='mean' must be 'replicated' or 'sum'"),
    # communicators
    ("comm-int", lambda: mpx.allreduce(X, MPI.SUM, comm=5), TypeError,
     r"allreduce: comm must be an mpi4py intracommunicator \(MPI.Intracomm\) "
     r"or None, got int: 5"),
    ("comm-string", lambda: mpx.barrier(comm="world"), TypeError,
     r"barrier: comm must be an mpi4py intracommunicator .* got str: 'world'"),
    ("comm-group", lambda: mpx.allgather(X, comm=MPI.COMM_WORLD.Get_group()),
     TypeError, r"allgather: comm must be an mpi4py intracommunicator .* got "
     r"Group"),
    ("comm-null", lambda: mpx.bcast(X, 0, comm=MPI.COMM_NULL), TypeError,
     r"bcast: comm is MPI.COMM_NULL \(a null or freed communicator\)"),
    ("comm-freed", lambda: mpx.alltoall(X, comm=_freed_comm()), TypeError,
     r"alltoall: comm is MPI.COMM_NULL \(a null or freed communicator\)"),
    # status and tokens
    ("status-dict", lambda: mpx.recv(X, 0, status={}), TypeError,
     r"recv: status must be an mpi4py MPI.Status or None, got dict: \{\}"),
    ("status-class", lambda: mpx.sendrecv(X, X, 0, 0, status=MPI.Status),
     TypeError, r"sendrecv: status must be an mpi4py MPI.Status or None, got "
     r"type"),
    ("token-array", lambda: jaxmpi.allreduce(X, MPI.SUM, token=jnp.zeros(())),
     TypeError, r"allreduce: token must be a token returned by a jaxmpi call "
     r"\(or by jax.lax.create_token\(\)\), or None; got ArrayImpl"),
    ("token-int", lambda: jaxmpi.barrier(token=3), TypeError,
     r"barrier: token must be a token .* got int: 3"),
    ("token-string", lambda: jaxmpi.send(X, 0, token="t"), TypeError,
     r"send: token must be a token .* got str: 't'"),
    ("token-tuple", lambda: jaxmpi.bcast(X, 0, token=(None,)), TypeError, r"bcast: token must be a token .* got tuple: \(None,\)"),
    # shapes
    ("alltoall-leading-dim", lambda: mpx.alltoall(jnp.ones((SIZE + 1, 2))),
     ValueError, rf"alltoall: x must have leading dimension equal to the "
     rf"communicator size {SIZE}, got shape \({SIZE + 1}, 2\)"),
    ("alltoall-0d", lambda: mpx.alltoall(jnp.float32(1)), ValueError,
     r"alltoall: x must have leading dimension .* got shape \(\)"),
    # Every rank is the root of its own call: each validates the root's x.
    ("scatter-root-leading-dim",
     lambda: mpx.scatter(jnp.ones((SIZE + 2, 3)), RANK), ValueError,
     rf"scatter: x \(on the root\) must have leading dimension equal to the "
     rf"communicator size {SIZE}, got shape \({SIZE + 2}, 3\)"),
    # traced integers
    ("traced-root", _traced(lambda x, r: mpx.bcast(x, r), 0), TypeError,
     r"bcast: root must be a static Python int, got a traced value .*"
     r"static_argnums"),
    ("traced-tag", _traced(lambda x, t: mpx.send(x, 0, tag=t), 1), TypeError,
     r"send: tag must be a static Python int, got a traced value"),
    ("traced-dest", _traced(lambda x, d: mpx.sendrecv(x, x, 0, d), 0),
     TypeError, r"sendrecv: dest must be a static Python int, got a traced "
     r"value"),
    # switches
    ("set-check-string", lambda: jaxmpi.set_check("yes"), TypeError,
     r"set_check: on must be True, False or 'sparse', got str: 'yes'"),
    ("set-timeout-negative", lambda: jaxmpi.set_timeout(-1), ValueError,
     r"set_timeout: seconds must be a finite number of seconds >= 0, got -1"),
    ("set-timeout-string", lambda: jaxmpi.set_timeout("soon"), ValueError,
     r"set_timeout: seconds must be a number of seconds \(or 0/None: off\), "
     r"got 'soon'"),
    ("set-timeout-nan", lambda: jaxmpi.set_timeout(float("nan")), ValueError,
     r"set_timeout: seconds must be a finite number of seconds >= 0, got nan"),
    ("set-timeout-bool", lambda: jaxmpi.set_timeout(True), TypeError,
     r"set_timeout: seconds must be a number of seconds or None, got bool"),
    # neighbor_exchange
    ("exchange-sendbufs-array", lambda: mpx.neighbor_exchange(X, [X], [0], [0]),
     TypeError, r"neighbor_exchange: sendbufs must be a list or tuple, got "
     r"ArrayImpl"),
    ("exchange-lengths", lambda: mpx.neighbor_exchange([X], [X, X], [0], [0]),
     ValueError, r"neighbor_exchange: sendbufs, recvbufs, sources and dests "
     r"must have the same length, got \{'sendbufs': 1, 'recvbufs': 2"),
    ("exchange-source-rank",
     lambda: mpx.neighbor_exchange([X], [X], [SIZE], [0]), ValueError,
     rf"neighbor_exchange: sources\[0\]={SIZE} is not a rank of the "
     r"communicator"),
    ("exchange-recvbuf-dtype",
     lambda: mpx.neighbor_exchange([X, X], [X, np.array(["s"])], [0, 0],
                                   [0, 0]),
     TypeError, r"neighbor_exchange: recvbufs\[1\] has dtype <U1"),
    ("exchange-too-many-pairs",
     lambda: mpx.neighbor_exchange([X] * 33, [X] * 33, [0] * 33, [0] * 33),
     ValueError, r"neighbor_exchange: at most 32 pairs in one call, got 33"),
    # Python's own checks of the signature
    ("missing-op", lambda: mpx.allreduce(X), TypeError,
     r"allreduce\(\) missing 1 required positional argument: 'op'"),
    ("unknown-keyword", lambda: mpx.allreduce(X, MPI.SUM, root=0), TypeError,
     r"allreduce\(\) got an unexpected keyword argument 'root'"),
]

assert len(CASES) >= 40


@pytest.mark.parametrize("call,exc,match", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        jax.block_until_ready(call())


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_intercommunicator():
    local = MPI.COMM_WORLD.Split(RANK % 2, RANK)
    inter = local.Create_intercomm(0, MPI.COMM_WORLD, 1 - RANK % 2, tag=9)
    try:
        with pytest.raises(TypeError, match=r"allgather: comm is an "
                           r"intercommunicator; jaxmpi supports "
                           r"intracommunicators only \(use Intercomm.Merge\(\)\)"):
            mpx.allgather(X, comm=inter)
    finally:
        inter.Free()
        local.Free()


def test_everything_still_works_after_bad_input():
    y = mpx.allreduce(jnp.ones(2), MPI.SUM)
    np.testing.assert_array_equal(y, np.full(2, float(SIZE)))


# ---- cross-rank checks ------------------------------------------------------


@pytest.fixture
def checks():
    # Every rank turns checks on and back at the same point of the program.
    before = jaxmpi._core.get().check_mode
    jaxmpi.set_check(True)
    try:
        yield
    finally:
        jaxmpi._core.get().set_check(before)


CHECK_ERROR = r"collective call #\d+ on this communicator differs across ranks " \
              r"\(JAXMPI_CHECK\): "


def _others(*ranks):
    """'ranks 1,2,3' style list of every rank not given."""
    rest = [r for r in range(SIZE) if r not in ranks]
    word = "ranks" if len(rest) > 1 else "rank"
    return f"{word} {','.join(map(str, rest))}"


def _last():
    return SIZE - 1


def expect_mismatch(call, *parts):
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        jax.block_until_ready(call())
    msg = str(info.value)
    assert re.search(CHECK_ERROR, msg), msg
    for what in parts:
        assert what in msg, f"{what!r} not in {msg!r}"


two_ranks = pytest.mark.skipif(SIZE < 2, reason="ranks must disagree")


@two_ranks
def test_check_shape(checks):
    shape = (4, 5) if RANK == _last() else (4, 4)
    expect_mismatch(lambda: mpx.allreduce(jnp.ones(shape, jnp.float32), MPI.SUM),
                    "jaxmpi.allreduce: collective call #",
                    "the array: rank ",
                    f"rank {_last()} has float32[4,5]",
                    f"{_others(_last())} {'have' if SIZE > 2 else 'has'} "
                    f"float32[4,4]")


@two_ranks
def test_check_same_size_other_shape(checks):
    shape = (3, 2) if RANK == 0 else (2, 3)
    expect_mismatch(lambda: mpx.allgather(jnp.ones(shape, jnp.int16)),
                    "rank 0 has int16[3,2]")


@two_ranks
def test_check_dtype(checks):
    dtype = jnp.float64 if RANK == 0 else jnp.float32
    expect_mismatch(lambda: mpx.bcast(jnp.ones(3, dtype), 0),
                    "rank 0 has float64[3]")


@two_ranks
def test_check_reduction_op(checks):
    op = MPI.MAX if RANK == 0 else MPI.SUM
    expect_mismatch(lambda: mpx.allreduce(jnp.ones(3), op),
                    "the reduction op: rank 0 has op=MPI.MAX")


@two_ranks
def test_check_half_precision_op(checks):
    op = MPI.PROD if RANK == 0 else MPI.SUM
    expect_mismatch(lambda: mpx.scan(jnp.ones(3, jnp.bfloat16), op),
                    "rank 0 has op=MPI.PROD")


@two_ranks
def test_check_root(checks):
    root = 1 if RANK == 0 else 0
    expect_mismatch(lambda: mpx.reduce(jnp.ones(2), MPI.SUM, root),
                    "the root: rank 0 has root=1")


@two_ranks
def test_check_different_operations(checks):
    def call():
        if RANK == 0:
            return mpx.bcast(jnp.ones(3), 0)
        return mpx.gather(jnp.ones(3), 0)
    expect_mismatch(call, "the operation: rank 0 calls jaxmpi.bcast, "
                    f"{_others(0)} call{'' if SIZE > 2 else 's'} jaxmpi.gather")
    # (ranks calling different operations differ in root too: not reported)


@two_ranks
def test_check_barrier_against_allreduce(checks):
    def call():
        if RANK == 0:
            return mpx.barrier()
        return mpx.allreduce(jnp.ones(3), MPI.SUM)
    expect_mismatch(call, "rank 0 calls jaxmpi.barrier")


@two_ranks
def test_check_scatter_result_shape(checks):
    shape = (SIZE, 2) if RANK == 0 else (3,)   # rank 0 is the root
    expect_mismatch(lambda: mpx.scatter(jnp.ones(shape, jnp.float32), 0),
                    "rank 0 has float32[2]")


@two_ranks
def test_check_inside_jit(checks):
    n = 2 + (RANK == 0)
    f = jax.jit(lambda x: mpx.allreduce(x * 2, MPI.SUM))
    expect_mismatch(lambda: f(jnp.ones(n, jnp.float32)), "rank 0 has float32[3]")


@two_ranks
def test_check_receive_size(checks):
    # rank 0 sends 5 floats, rank 1 expects 4: the receiver's probe finds the
    # message (sent before the receive starts), reports it and consumes it,
    # so the sender completes.
    error = sender_first(
        lambda: mpx.send(jnp.ones(5, jnp.float32), 1, tag=3),
        lambda: (mpx.recv(jnp.ones((2, 2), jnp.float32), 0, tag=3)
                 if RANK == 1 else jnp.zeros(())))
    if RANK == 1:
        assert isinstance(error, jax.errors.JaxRuntimeError), error
        assert re.search(r"jaxmpi.recv: rank 1 expects float32\[2,2\] "
                         r"\(16 bytes\) but the message from rank 0 with tag 3 "
                         r"has 20 bytes \(5 float32 elements\): the sender's "
                         r"shape or dtype differs \(JAXMPI_CHECK; the message "
                         r"was received and discarded\)", str(error)), error
    else:
        assert error is None, error


@two_ranks
def test_check_receive_dtype(checks):
    error = sender_first(
        lambda: mpx.send(jnp.ones(3, jnp.float16), 1, tag=4),
        lambda: (mpx.recv(jnp.ones(3, jnp.float32), 0, tag=4)
                 if RANK == 1 else jnp.zeros(())))
    if RANK == 1:
        assert isinstance(error, jax.errors.JaxRuntimeError), error
        assert re.search(r"has 6 bytes \(not a whole number of float32 "
                         r"elements\)", str(error)), error
    else:
        assert error is None, error


def test_check_passes_correct_programs(checks):
    # Checks on: every op still gives the right answer, also on a new
    # communicator (whose check communicator is made on first use).
    comm = MPI.COMM_WORLD.Split(0, SIZE - 1 - RANK)
    r = comm.Get_rank()
    try:  # every call made, then every result checked
        total = mpx.allreduce(jnp.full(3, r + 1.0), MPI.SUM, comm=comm)
        b = mpx.bcast(jnp.full(2, r), 0, comm=comm)
        g = mpx.allgather(jnp.int32(r), comm=comm)
        mpx.barrier(comm=comm)
        y = mpx.sendrecv(jnp.full(2, r, jnp.int32), jnp.zeros(2, jnp.int32),
                         (r - 1) % SIZE,
                         (r + 1) % SIZE, comm=comm)
        jax.block_until_ready((total, b, g, y))
    finally:
        comm.Free()
    np.testing.assert_array_equal(total, np.full(3, SIZE * (SIZE + 1) / 2))
    np.testing.assert_array_equal(b, np.zeros(2))
    np.testing.assert_array_equal(g, np.arange(SIZE))
    np.testing.assert_array_equal(y, np.full(2, (r - 1) % SIZE))


def test_everything_still_works_after_mismatches():
    y = mpx.allreduce(jnp.ones(2), MPI.SUM)
    np.testing.assert_array_equal(y, np.full(2, float(SIZE)))
    assert jaxmpi._core.get().check_mode == jaxmpi._core.parse_check(
        os.environ.get("JAXMPI_CHECK", ""), "JAXMPI_CHECK")
