"""Drop-in errors: where mpi4jax raises for a misuse, jaxmpi raises the same
exception type and its message contains mpi4jax's wording (mpi4jax's
_src/validation.py @enforce_types, _src/utils.py, the op files), so code
that matches mpi4jax's messages keeps working. The expected wording is
written out here, as mpi4jax prints it, not taken from jaxmpi. Every case
raises before any MPI call (no communication: the same at any rank count)."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from mpi4py import MPI

from jaxmpi import notoken as mpx
from util import RANK, SIZE

X = jnp.arange(SIZE * 2, dtype=jnp.float32).reshape(SIZE, 2) + RANK
COMM = "['NoneType', 'Intracomm', 'HashableMPIType']"
OP = "['Op', 'HashableMPIType']"
STATUS = "['NoneType', 'Status', 'HashableMPIType']"
TOKEN = "['NoneType', 'Token', 'Tracer']"  # mpi4jax < 0.8
NULL = MPI.PROC_NULL


def typed(fn, arg, expected, got):
    return (f'{fn} got unexpected type for argument "{arg}" '
            f"(expected: {expected}, got: {got}).")


CASES = {
    # comm (every op)
    "comm-str": (lambda: mpx.allreduce(X, MPI.SUM, comm="world"), TypeError,
                 typed("allreduce", "comm", COMM, "<class 'str'>")),
    "comm-null": (lambda: mpx.bcast(X, 0, comm=MPI.COMM_NULL), TypeError,
                  typed("bcast", "comm", COMM, "<class 'mpi4py.MPI.Comm'>")),
    "comm-barrier": (lambda: mpx.barrier(comm=1), TypeError,
                     typed("barrier", "comm", COMM, "<class 'int'>")),
    # op
    "op-allreduce": (lambda: mpx.allreduce(X, "sum"), TypeError,
                     typed("allreduce", "op", OP, "<class 'str'>")),
    "op-reduce": (lambda: mpx.reduce(X, np.add, 0), TypeError,
                  typed("reduce", "op", OP, "<class 'numpy.ufunc'>")),
    "op-scan": (lambda: mpx.scan(X, None), TypeError,
                typed("scan", "op", OP, "<class 'NoneType'>")),
    # ranks, roots and tags: integers
    "root-bcast": (lambda: mpx.bcast(X, 0.0), TypeError,
                   typed("bcast", "root", "integer", "<class 'float'>")),
    "root-gather": (lambda: mpx.gather(X, "0"), TypeError,
                    typed("gather", "root", "integer", "<class 'str'>")),
    "root-scatter": (lambda: mpx.scatter(X, True), TypeError,
                     typed("scatter", "root", "integer", "<class 'bool'>")),
    "root-reduce": (lambda: mpx.reduce(X, MPI.SUM, None), TypeError,
                    typed("reduce", "root", "integer", "<class 'NoneType'>")),
    "dest-send": (lambda: mpx.send(X, 1.0), TypeError,
                  typed("send", "dest", "integer", "<class 'float'>")),
    "tag-send": (lambda: mpx.send(X, NULL, tag="a"), TypeError,
                 typed("send", "tag", "integer", "<class 'str'>")),
    "source-recv": (lambda: mpx.recv(X, 0.5), TypeError,
                    typed("recv", "source", "integer", "<class 'float'>")),
    "tag-recv": (lambda: mpx.recv(X, NULL, tag=2.0), TypeError,
                 typed("recv", "tag", "integer", "<class 'float'>")),
    "source-sendrecv": (lambda: mpx.sendrecv(X, X, "l", NULL), TypeError,
                        typed("sendrecv", "source", "integer", "<class 'str'>")),
    "dest-sendrecv": (lambda: mpx.sendrecv(X, X, NULL, [1]), TypeError,
                      typed("sendrecv", "dest", "integer", "<class 'list'>")),
    "sendtag-sendrecv": (lambda: mpx.sendrecv(X, X, NULL, NULL, sendtag=1.5),
                         TypeError, typed("sendrecv", "sendtag", "integer",
                                          "<class 'float'>")),
    "recvtag-sendrecv": (lambda: mpx.sendrecv(X, X, NULL, NULL, recvtag="t"),
                         TypeError, typed("sendrecv", "recvtag", "integer",
                                          "<class 'str'>")),
    # status
    "status-recv": (lambda: mpx.recv(X, NULL, status="s"), TypeError,
                    typed("recv", "status", STATUS, "<class 'str'>")),
    "status-sendrecv": (lambda: mpx.sendrecv(X, X, NULL, NULL, status={}),
                        TypeError, typed("sendrecv", "status", STATUS,
                                         "<class 'dict'>")),
    # token (mpi4jax < 0.8 checked its type)
    "token": (lambda: mpx.allreduce(X, MPI.SUM, token=1), TypeError,
              typed("allreduce", "token", TOKEN, "<class 'int'>")),
    # the rank axis
    "scatter-shape": (lambda: mpx.scatter(jnp.zeros((SIZE + 1, 2)), RANK),
                      ValueError, "Scatter input must have shape (nproc, ...)"),
    "alltoall-shape": (lambda: mpx.alltoall(jnp.zeros((SIZE + 1, 2))),
                       ValueError, "Alltoall input must have shape (nproc, ...)"),
    # a dtype without an MPI datatype: mpi4jax's RuntimeError (and jaxmpi's
    # TypeError, checked below)
    "dtype": (lambda: mpx.allreduce(
        jnp.ones(2, ml_dtypes.float8_e4m3fn), MPI.SUM), RuntimeError,
        "Unknown MPI type for dtype float8_e4m3fn"),
    # allreduce's derivatives
    "allreduce-jvp": (lambda: jax.jvp(
        lambda x: mpx.allreduce(x, USER_OP), (X,), (X,)), NotImplementedError,
        "The adjoint of allreduce is only defined for op=MPI.SUM"),
    "allreduce-transpose": (lambda: jax.linear_transpose(
        lambda x: mpx.allreduce(x, MPI.MAX), X)(X), NotImplementedError,
        "The linear transpose of allreduce is only defined for op=MPI.SUM"),
}

USER_OP = MPI.Op.Create(lambda a, b, t: None, commute=True)


@pytest.mark.parametrize("case", list(CASES))
def test_mpi4jax_wording(case):
    call, exc, words = CASES[case]
    with pytest.raises(exc) as info:
        call()
    assert words in str(info.value), str(info.value)


def test_unsupported_dtype_is_also_a_type_error():
    with pytest.raises(TypeError, match=r"^allreduce: x has dtype "
                       r"float8_e4m3fn, which jaxmpi does not support"):
        mpx.allreduce(np.ones(2, ml_dtypes.float8_e4m3fn), MPI.SUM)


def test_traced_root_has_mpi4jax_hint():
    """mpi4jax's static_argnums hint for a tracer where an int belongs."""
    with pytest.raises(TypeError) as info:
        jax.jit(lambda x, r: mpx.bcast(x, r))(X, 0)
    msg = str(info.value)
    assert 'bcast got unexpected type for argument "root" (expected: ' \
        "integer, got: <class '" in msg, msg
    assert ("An abstract tracer was passed where a concrete value is "
            "expected. Try using the static_argnums argument of jax.jit."
            in msg), msg


def test_intercomm_has_mpi4jax_wording():
    if SIZE < 2:
        pytest.skip("an intercommunicator needs two groups")
    world = MPI.COMM_WORLD
    local = world.Split(RANK % 2, RANK)
    inter = local.Create_intercomm(0, world, 1 - RANK % 2, 17)
    try:
        with pytest.raises(TypeError) as info:
            mpx.allgather(X, comm=inter)
    finally:
        inter.Free()
        local.Free()
    assert typed("allgather", "comm", COMM, "<class 'mpi4py.MPI.Intercomm'>") \
        in str(info.value)
