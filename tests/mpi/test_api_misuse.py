"""Mistakes a user porting mpi4jax code makes, each with jaxmpi's own clear
error on every rank before any MPI call: a token-API result (a ``(result,
token)`` pair) or a bare token used as an array, a pytree (list, tuple,
dict) where one array is still expected (the non-blocking operations,
neighbor_exchange's buffers; the blocking operations take pytrees); and the
import paths of every mpi4jax generation. Arrays on several devices are tested in tests/launch
(test_usability.py): this suite runs with one device per process."""

import dataclasses
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi
from jaxmpi import notoken as mpx
from util import RANK, SIZE
from util import LEFT, RIGHT

X = jnp.arange(SIZE * 2, dtype=jnp.float32).reshape(SIZE, 2) + RANK

# Every op and argument that takes an array, called with `bad` there.
CALLS = {
    "allreduce": lambda bad: mpx.allreduce(bad, MPI.SUM),
    "reduce": lambda bad: mpx.reduce(bad, MPI.SUM, 0),
    "scan": lambda bad: mpx.scan(bad, MPI.SUM),
    "bcast": lambda bad: mpx.bcast(bad, 0),
    "gather": lambda bad: mpx.gather(bad, 0),
    "scatter": lambda bad: mpx.scatter(bad, 0),
    "allgather": lambda bad: mpx.allgather(bad),
    "alltoall": lambda bad: mpx.alltoall(bad),
    "send": lambda bad: mpx.send(bad, MPI.PROC_NULL),
    "recv": lambda bad: mpx.recv(bad, MPI.PROC_NULL),
    "sendrecv.sendbuf": lambda bad: mpx.sendrecv(bad, X, LEFT, RIGHT),
    "sendrecv.recvbuf": lambda bad: mpx.sendrecv(X, bad, LEFT, RIGHT),
    "neighbor_exchange.sendbufs[1]": lambda bad: mpx.neighbor_exchange(
        [X, bad], [X, X], [LEFT, RIGHT], [RIGHT, LEFT]),
    "neighbor_exchange.recvbufs[0]": lambda bad: mpx.neighbor_exchange(
        [X], [bad], [LEFT], [RIGHT]),
}
ARG = {"sendrecv.sendbuf": "sendbuf", "sendrecv.recvbuf": "recvbuf",
       "neighbor_exchange.sendbufs[1]": r"sendbufs\[1\]",
       "neighbor_exchange.recvbufs[0]": r"recvbufs\[0\]"}


def _fn_arg(where):
    return where.split(".")[0], ARG.get(where, "x")


def _pair_message(fn, arg, kind):
    return (rf"^{fn}: {arg} must be an array, got {kind}: .*This looks like "
            r"the \(result, token\) pair that the token API returns "
            r"\(import jaxmpi; jaxmpi.<op> returns \(result, token\)\).*"
            r"jaxmpi.notoken .*return bare results")


@pytest.mark.parametrize("where", list(CALLS))
@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_token_api_pair_used_as_array(where, mode):
    """The (result, token) pair of a token-API call passed back into an op,
    as mpi4jax >= 0.8 code does when it imports the token API."""
    fn, arg = _fn_arg(where)

    def f(x):
        pair = jaxmpi.allreduce(x, MPI.SUM)  # (result, token)
        return CALLS[where](pair)

    run = jax.jit(f) if mode == "jit" else f
    with pytest.raises(TypeError, match=_pair_message(fn, arg, "tuple")):
        run(X)


def test_token_api_pair_as_list():
    pair = list(jaxmpi.bcast(X, 0))
    with pytest.raises(TypeError, match=_pair_message("allgather", "x", "list")):
        mpx.allgather(pair)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_bare_token_used_as_array(mode):
    def f(x):
        token = jaxmpi.barrier()  # the token API's barrier returns a token
        return mpx.allreduce(token, MPI.SUM)

    run = jax.jit(f) if mode == "jit" else f
    with pytest.raises(TypeError, match=r"^allreduce: x must be an array, got "
                       r".*This is a token: in the token API \(import jaxmpi\)"
                       r" send and barrier return only a token.*"
                       r"jaxmpi.notoken"):
        run(X)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_token_api_pair_passed_as_token(mode):
    def f(x):
        pair = jaxmpi.allreduce(x, MPI.SUM)
        return mpx.allgather(x, token=pair)

    run = jax.jit(f) if mode == "jit" else f
    with pytest.raises(TypeError, match=r"^allgather: token must be a token "
                       r"returned by a jaxmpi call .*got tuple: .*This looks "
                       r"like a whole \(result, token\) pair of the token "
                       r"API: pass its token"):
        run(X)


@dataclasses.dataclass
class Params:
    w: jax.Array
    b: jax.Array


jax.tree_util.register_dataclass(Params, data_fields=["w", "b"],
                                 meta_fields=[])

PYTREES = {
    "list": ([X, X], "list"),
    "tuple": ((X, X), "tuple"),
    "dict": ({"w": X}, "dict"),
    "registered-dataclass": (Params(X, X), "Params"),
    "list-of-floats": ([1.0, 2.0], "list"),
    "nested-list": ([[1.0, 2.0], [3.0, 4.0]], "list"),
}


# The blocking operations take pytrees (tests/mpi/test_pytree.py); these
# take one array per argument, and say so.
ONE_ARRAY = {
    "neighbor_exchange.sendbufs[1]": CALLS["neighbor_exchange.sendbufs[1]"],
    "neighbor_exchange.recvbufs[0]": CALLS["neighbor_exchange.recvbufs[0]"],
    "iallreduce": lambda bad: mpx.iallreduce(bad, MPI.SUM),
    "ibcast": lambda bad: mpx.ibcast(bad, 0),
    "isendrecv.recvbuf": lambda bad: mpx.isendrecv(X, bad, MPI.PROC_NULL,
                                                   MPI.PROC_NULL),
}
ARG["isendrecv.recvbuf"] = "recvbuf"


@pytest.mark.parametrize("tree", list(PYTREES))
@pytest.mark.parametrize("where", list(ONE_ARRAY))
def test_pytree_rejected_where_one_array(where, tree):
    """Before pytrees, allreduce([a, a]) would silently stack into one
    (2, n) array and allreduce(dict) leak NumPy's 'entry not a 2- or 3-
    tuple'; where one array is still the rule, the error says so."""
    fn, arg = _fn_arg(where)
    value, type_name = PYTREES[tree]
    with pytest.raises(TypeError, match=(
            rf"^{fn}: {arg} must be an array, got {type_name}: .*{fn} takes "
            r"one array here; pytrees \(lists, tuples, dicts, dataclasses\) "
            r"are accepted by the blocking operations .*call it once per "
            r"leaf, e.g. jax.tree.map")):
        ONE_ARRAY[where](value)


def test_pytree_rejected_under_jit():
    with pytest.raises(TypeError, match=r"^neighbor_exchange: sendbufs\[0\] "
                       r"must be an array, got list: \[(\w*Tracer|Traced<)"
                       r".*pytrees"):
        jax.jit(lambda x: mpx.neighbor_exchange(
            [[x, x]], [x], [LEFT], [RIGHT]))(X)


def test_pytree_accepted_by_blocking_ops():
    """What used to be rejected is a pytree now: a list of two arrays is
    two arrays back (not one stacked (2, n) array)."""
    y = mpx.allreduce([X, 2 * X], MPI.SUM)
    ref = sum(np.arange(SIZE * 2, dtype=np.float32).reshape(SIZE, 2) + r
              for r in range(SIZE))
    assert isinstance(y, list) and len(y) == 2
    np.testing.assert_array_equal(np.asarray(y[0]), ref)
    np.testing.assert_array_equal(np.asarray(y[1]), 2 * ref)


def test_arrays_and_scalars_still_accepted():
    """What the checks must not reject: NumPy arrays, Python and NumPy
    scalars, JAX arrays, tracers; results against a NumPy reference."""
    ref = sum(np.arange(SIZE * 2, dtype=np.float32).reshape(SIZE, 2) + r
              for r in range(SIZE))
    got = [mpx.allreduce(np.asarray(X), MPI.SUM),
           mpx.allreduce(X, MPI.SUM),
           jax.jit(lambda x: mpx.allreduce(x, MPI.SUM))(X)]
    scalars = [mpx.allreduce(float(RANK + 1), MPI.SUM),
               mpx.allreduce(np.int32(RANK + 1), MPI.SUM)]
    for g in got:
        np.testing.assert_array_equal(np.asarray(g), ref)
    total = SIZE * (SIZE + 1) // 2
    assert float(scalars[0]) == total and int(scalars[1]) == total


def test_experimental_notoken_is_notoken():
    """mpi4jax 0.7: `from mpi4jax.experimental import notoken`."""
    from jaxmpi.experimental import notoken

    mod = importlib.import_module("jaxmpi.experimental.notoken")
    assert notoken is jaxmpi.notoken and mod is jaxmpi.notoken
    y = notoken.allreduce(X, MPI.SUM)
    assert isinstance(y, jax.Array)
    np.testing.assert_array_equal(np.asarray(y),
                                  np.asarray(jaxmpi.allreduce(X, MPI.SUM)[0]))
