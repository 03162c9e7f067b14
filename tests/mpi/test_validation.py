"""Bad input raises a clear Python exception, on every rank, before any MPI
call: no hang, no crash."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import RANK, SIZE

X = jnp.ones((SIZE, 2), jnp.float32)


def raises(exc, match, fn, *args, **kw):
    with pytest.raises(exc, match=match):
        fn(*args, **kw)


def test_array_arguments():
    raises(TypeError, r"allreduce: x must be an array, got str", mpx.allreduce,
           "abc", MPI.SUM)
    raises(TypeError, r"allreduce: x must be an array, got object",
           mpx.allreduce, object(), MPI.SUM)
    raises(TypeError, r"bcast: x has dtype float8_e4m3fn, which jaxmpi does not "
           r"support; supported: bool", mpx.bcast,
           jnp.zeros(2, jnp.float8_e4m3fn), 0)
    raises(TypeError, r"sendrecv: recvbuf must be an array", mpx.sendrecv,
           X, None, 0, 0)


@pytest.mark.parametrize("fn,args,name", [
    (mpx.bcast, (X,), "root"), (mpx.gather, (X,), "root"),
    (mpx.scatter, (X,), "root"), (mpx.send, (X,), "dest"),
    (mpx.recv, (X,), "source"),
])
def test_rank_out_of_range(fn, args, name):
    for bad in (SIZE, -5, 10**6):
        raises(ValueError, rf"{name}={bad} is not a rank of the communicator "
               rf"\(valid: 0 to {SIZE - 1}", fn, *args, bad)


def test_reduce_root_and_types_of_ints():
    raises(ValueError, r"reduce: root=-1 is not a rank", mpx.reduce, X, MPI.SUM, -1)
    raises(TypeError, r"bcast: root must be an int, got bool", mpx.bcast, X, True)
    raises(TypeError, r"bcast: root must be an int, got float", mpx.bcast, X, 0.0)
    raises(TypeError, r"send: tag must be an int, got str", mpx.send, X, 0, tag="1")


def test_traced_root_has_hint():
    with pytest.raises(TypeError, match=r"root must be a static Python int, got "
                       r"a traced value.*static_argnums"):
        jax.jit(lambda x, r: mpx.bcast(x, r))(X, 0)


def test_tags():
    raises(ValueError, r"send: tag=-3 is not a valid tag \(valid: 0 to \d+;",
           mpx.send, X, 0, tag=-3)
    raises(ValueError, r"recv: tag=-7 is not a valid tag .* or MPI.ANY_TAG",
           mpx.recv, X, 0, tag=-7)
    ub = MPI.COMM_WORLD.Get_attr(MPI.TAG_UB)
    raises(ValueError, rf"sendrecv: sendtag={ub + 1} is not a valid tag",
           mpx.sendrecv, X, X, 0, 0, sendtag=ub + 1)
    raises(ValueError, rf"send: dest={MPI.ANY_SOURCE} is not a rank", mpx.send, X,
           MPI.ANY_SOURCE)


def test_leading_dimension():
    raises(ValueError, rf"alltoall: x must have leading dimension equal to the "
           rf"communicator size {SIZE}, got shape \({SIZE + 1}, 2\)",
           mpx.alltoall, jnp.ones((SIZE + 1, 2)))
    raises(ValueError, r"alltoall: .* got shape \(\)", mpx.alltoall, jnp.float32(1))
    if RANK == 0:  # only the root's x must be split
        raises(ValueError, r"scatter: x \(on the root\) must have leading "
               r"dimension", mpx.scatter, jnp.ones((SIZE + 2,)), 0)


@pytest.mark.parametrize("dtype,opname", [
    (jnp.bool_, "SUM"), (jnp.complex64, "MAX"), (jnp.float32, "BAND"),
    (jnp.float32, "LAND"), (jnp.int32, "MAXLOC"), (jnp.float16, "LOR"),
    (jnp.bfloat16, "BXOR"), (jnp.float32, "REPLACE"),
])
def test_op_not_defined_for_dtype(dtype, opname):
    raises(TypeError, rf"allreduce: MPI.{opname} is not defined for dtype",
           mpx.allreduce, jnp.zeros(2, dtype), getattr(MPI, opname))


def test_op_type():
    raises(TypeError, r"allreduce: op must be an mpi4py reduction op such as "
           r"MPI.SUM, got str", mpx.allreduce, X, "sum")
    raises(TypeError, r"reduce: op is MPI.OP_NULL", mpx.reduce, X, MPI.OP_NULL, 0)


def test_communicators():
    raises(TypeError, r"comm must be an mpi4py intracommunicator .* got int",
           mpx.allreduce, X, MPI.SUM, comm=5)
    raises(TypeError, r"comm is MPI.COMM_NULL", mpx.barrier, comm=MPI.COMM_NULL)
    dup = MPI.COMM_WORLD.Dup()
    dup.Free()
    raises(TypeError, r"comm is MPI.COMM_NULL \(a null or freed", mpx.bcast, X, 0,
           comm=dup)
    if SIZE >= 2:
        local = MPI.COMM_WORLD.Split(RANK % 2, RANK)
        inter = local.Create_intercomm(0, MPI.COMM_WORLD, 1 - RANK % 2, tag=9)
        raises(TypeError, r"comm is an intercommunicator", mpx.allgather, X,
               comm=inter)
        inter.Free()
        local.Free()


def test_status_and_token_types():
    raises(TypeError, r"recv: status must be an mpi4py MPI.Status or None, got "
           r"dict", mpx.recv, X, 0, status={})
    raises(TypeError, r"allreduce: token must be a token returned by a jaxmpi "
           r"call", jaxmpi.allreduce, X, MPI.SUM, token=jnp.ones(1))
    raises(TypeError, r"barrier: token must be", jaxmpi.barrier, token=3)


def test_everything_still_works_after_errors():
    y = mpx.allreduce(jnp.ones(2), MPI.SUM)
    np.testing.assert_array_equal(y, np.full(2, float(SIZE)))
