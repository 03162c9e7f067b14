"""Order of MPI calls across dispatches: what a faster dispatch path could
break (the runtime-token fast path of _effect.py, the eager direct path of
_eager.py, or any later design).

Each test makes one rank's calls ready at a different time than its peers'
(a slow input computed asynchronously on some ranks only), so that a call
issued out of program order on one rank meets a different call on the
others: the mismatch gives wrong values (same shapes and dtypes everywhere,
different ops or data), never a hang. Results are computed first and
asserted at the end; the rank-agreement hook fails a one-rank failure on
every rank.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from mpi4py import MPI

import jaxmpi
from jaxmpi import _eager
from jaxmpi import notoken as mpx
from util import RANK, SIZE, check
from util import check_mode as util_check_mode

two_ranks = pytest.mark.skipif(SIZE < 2, reason="needs a peer")


@pytest.fixture(autouse=True, params=["off", "sparse"])
def check_mode(request):
    """Every test twice: with checks off, eager allreduce takes the direct
    path of _eager.py (MPI called at once); in the default sparse mode, the
    compiled path (the C core counts and checks every collective)."""
    with util_check_mode(request.param) as mode:
        yield mode

_N = 600
_STEPS = 16  # ~0.1-0.3 s of matmuls: far longer than a dispatch


@jax.jit
def _slow_add(value, m):
    for _ in range(_STEPS):
        m = jnp.tanh(m @ m) * 0.5
    return value + 0.0 * m[:2, 0]


_M = jnp.full((_N, _N), 0.01, jnp.float32)
_slow_add(jnp.zeros(2, jnp.float32), _M).block_until_ready()  # compiled now


def _late(value, slow=True):
    """value (float32[2]) made available late, through an asynchronously
    dispatched chain of matmuls, on the ranks where `slow` is true."""
    value = jnp.asarray(value, jnp.float32)
    return _slow_add(value, _M) if slow else value


def _ready(values):
    """A float32 array already on the device: an operand created after the
    late input would itself wait for it (XLA:CPU runs a device's work in
    enqueue order), hiding a call that overtook it."""
    return jnp.asarray(np.float32(values)).block_until_ready()


def _warm(*fns):
    """Compile each one-argument jitted fn (float32[2]) ahead, so that the
    late input is still pending when the timed call is dispatched (every
    rank calls them: they communicate)."""
    for f in fns:
        jax.block_until_ready(f(jnp.zeros(2, jnp.float32)))


def _ranks():
    return np.arange(SIZE, dtype=np.float32)


def test_jitted_then_eager_slow_input_on_rank0(jit):
    # jitted SUM whose input is late on rank 0, then an eager MAX: if the
    # eager call overtook the pending jitted one, rank 0's MAX would meet the
    # others' SUM.
    f = jit(lambda v: mpx.allreduce(v, MPI.SUM))
    _warm(f)
    e = _ready([-RANK, 3 * RANK])
    x = _late(np.float32([RANK + 1, 10 * RANK]), slow=RANK == 0)
    s = f(x)
    m = mpx.allreduce(e, MPI.MAX)
    r = _ranks()
    s, m = np.asarray(s), np.asarray(m)
    check(s, np.float32([(r + 1).sum(), (10 * r).sum()]))
    check(m, np.float32([0, 3 * (SIZE - 1)]))


def test_independent_computations_back_to_back_unread(jit):
    # Three unrelated jitted programs, the first one late on rank 0, then an
    # eager call; no result read until all four were issued.
    f = jit(lambda v: mpx.allreduce(v, MPI.SUM))
    g = jit(lambda v: mpx.allreduce(v, MPI.MAX))
    h = jit(lambda v: mpx.allreduce(v, MPI.MIN))
    _warm(f, g, h)
    ins = [_ready(v) for v in ([RANK * 2, -RANK], [RANK + 5, -RANK],
                               [RANK, RANK * RANK])]
    x = _late(np.float32([RANK, 1]), slow=RANK == 0)
    a = f(x)
    b = g(ins[0])
    c = h(ins[1])
    d = mpx.allreduce(ins[2], MPI.SUM)
    r = _ranks()
    a, b, c, d = map(np.asarray, (a, b, c, d))
    check(a, np.float32([r.sum(), SIZE]))
    check(b, np.float32([2 * (SIZE - 1), 0]))
    check(c, np.float32([5, -(SIZE - 1)]))
    check(d, np.float32([r.sum(), (r * r).sum()]))


@two_ranks
def test_sends_in_separate_dispatches_keep_order(jit):
    # Rank 0 sends three messages with the same tag in three dispatches, the
    # first one late; MPI never lets a later message overtake an earlier one
    # with the same tag, so rank 1 gets them in issue order only if they were
    # issued in program order.
    got = []
    send = jit(lambda v: mpx.send(v, 1, tag=7) or v)
    recv = jit(lambda t: mpx.recv(t, 0, tag=7))
    if RANK == 0:
        send(jnp.zeros(2, jnp.float32)).block_until_ready()
    elif RANK == 1:
        recv(jnp.zeros(2, jnp.float32)).block_until_ready()
    if RANK == 0:
        rest = [_ready([2, 2]), _ready([3, 3])]
        first = _late(np.float32([1, 1]))
        outs = [send(first), send(rest[0]), send(rest[1])]
        jax.block_until_ready(outs)
    elif RANK == 1:
        got = [np.asarray(recv(jnp.zeros(2, jnp.float32))) for _ in range(3)]
    if RANK == 1:
        check(np.stack(got), np.float32([[1, 1], [2, 2], [3, 3]]))


def test_eager_and_jitted_interleaved(jit):
    # Alternating jitted and eager calls with different ops, the jitted ones
    # late on odd ranks; all results read at the end.
    jit_sum = jit(lambda v: mpx.allreduce(v, MPI.SUM))
    _warm(jit_sum)
    outs = []
    eager_in = [_ready([RANK * (k + 1), -k]) for k in range(4)]
    for k in range(4):
        x = _late(np.float32([RANK + k, k]), slow=RANK % 2 == 1 and k % 2 == 0)
        outs.append(jit_sum(x))
        outs.append(mpx.allreduce(eager_in[k], MPI.MAX))
    r = _ranks()
    outs = [np.asarray(o) for o in outs]
    for k in range(4):
        check(outs[2 * k], np.float32([(r + k).sum(), SIZE * k]))
        check(outs[2 * k + 1], np.float32([(SIZE - 1) * (k + 1), -k]))


def test_control_flow_then_eager(jit):
    # A jitted loop of calls (late input on rank 0), then an eager call.
    def body(i, v):
        return mpx.allreduce(v, MPI.SUM) - v

    loop = jit(lambda v: lax.fori_loop(0, 3, body, v))
    _warm(loop)
    e = _ready([RANK, 2 * RANK])
    x = _late(np.float32([RANK, 1]), slow=RANK == 0)
    y = loop(x)
    z = mpx.allreduce(e, MPI.MIN)
    ref = np.stack([_ranks(), np.ones(SIZE, np.float32)], axis=1)
    for _ in range(3):
        ref = ref.sum(axis=0) - ref
    check(np.asarray(y), ref[RANK].astype(np.float32))
    check(np.asarray(z), np.float32([0, 0]))


def test_donated_input_and_effects_barrier(jit):
    f = jit(lambda v: mpx.allreduce(v, MPI.SUM) * 2, donate_argnums=0)
    _warm(f)
    ins = [_ready([1, RANK]), _ready([RANK, 0])]
    x = _late(np.float32([RANK, 3]), slow=RANK == 0)
    a = f(x)
    jax.effects_barrier()
    b = f(ins[0])
    c = mpx.allreduce(ins[1], MPI.MAX)
    jax.effects_barrier()
    r = _ranks()
    check(np.asarray(a), np.float32([2 * r.sum(), 6 * SIZE]))
    check(np.asarray(b), np.float32([2 * SIZE, 2 * r.sum()]))
    check(np.asarray(c), np.float32([SIZE - 1, 0]))


def test_many_dispatches_results_never_read(jit):
    # 50 dispatches whose results are dropped; the last one's value depends
    # on every call on every rank having matched its peers' in order.
    f = jit(lambda v: mpx.allreduce(v, MPI.SUM))
    g = jit(lambda v: mpx.allreduce(v, MPI.MAX))
    _warm(f, g)
    ins = [_ready([RANK, k]) for k in range(25)]
    final = _ready([RANK, -RANK])
    x = _late(np.float32([RANK, 0]), slow=RANK == SIZE - 1)
    for k in range(25):
        f(x)
        mpx.allreduce(ins[k], MPI.MIN)
    last = g(final)
    check(np.asarray(last), np.float32([SIZE - 1, 0]))


def _data(shape, dtype, rank, lead=None):
    full = shape if lead is None else (lead, *shape)
    n = int(np.prod(full))
    return ((np.arange(n).reshape(full) * (rank + 2) + rank) % 5).astype(dtype)


@pytest.mark.parametrize("op", ["bcast", "allgather", "alltoall", "scan"])
def test_eager_direct_path_of_other_collectives(check_mode, op, jit):
    # bcast, allgather, alltoall and scan take the direct path too: eager
    # and jitted results equal NumPy's on every rank, for every shape kind
    # and a dtype of each kind; the root's bcast gives x itself, as the
    # compiled op called eagerly does.
    root = SIZE - 1
    calls = {
        "bcast": lambda v: mpx.bcast(v, root),
        "allgather": mpx.allgather,
        "alltoall": mpx.alltoall,
        "scan": lambda v: mpx.scan(v, MPI.LOR if v.dtype == np.bool_ else MPI.SUM),
    }
    f = calls[op]
    g = jit(f)
    lead = SIZE if op == "alltoall" else None
    cases = []
    for shape in [(), (0,), (3,), (2, 3)]:
        for dtype in (np.int32, np.float64, np.complex64, np.bool_):
            if op == "scan" and dtype == np.complex64:
                dtype = np.float32  # MPI.SUM of complex: covered by allreduce
            x = jnp.asarray(_data(shape, dtype, RANK, lead))
            cases.append((shape, dtype, x, f(x), g(x)))
    for shape, dtype, x, y, z in cases:  # every call made: assert now
        parts = [_data(shape, dtype, r, lead) for r in range(SIZE)]
        if op == "bcast":
            ref = parts[root]
        elif op == "allgather":
            ref = np.stack(parts)
        elif op == "alltoall":
            ref = np.stack([parts[r][RANK] for r in range(SIZE)])
        elif dtype == np.bool_:
            ref = np.logical_or.reduce(parts[:RANK + 1])
        else:
            ref = np.sum(parts[:RANK + 1], axis=0).astype(dtype)
        assert isinstance(y, jax.Array) and y.devices() == x.devices()
        assert (y is x) == (op == "bcast" and RANK == root), (op, shape)
        check(y, np.asarray(ref, dtype))
        check(z, np.asarray(ref, dtype))


def test_eager_direct_path_values_and_types(check_mode, jit):
    # The eager direct path gives what the compiled call gives: a new jax
    # Array on the same device, same dtype and shape, 0-d and empty included.
    # It is taken in every check mode (the C core's check runs first).
    assert _eager.usable(jnp.zeros(3)) == _eager._ENABLED
    cases = []
    for shape in [(), (0,), (3,), (2, 3)]:
        for dtype in (np.int32, np.float64, np.complex64, np.bool_):
            n = int(np.prod(shape))
            x = jnp.asarray(((np.arange(n).reshape(shape) + RANK) % 3)
                            .astype(dtype))
            op = MPI.LOR if dtype == np.bool_ else MPI.SUM
            y = mpx.allreduce(x, op)
            z = jit(lambda v: mpx.allreduce(v, op))(x)
            cases.append((shape, dtype, x, y, z))
    for shape, dtype, x, y, z in cases:  # every call made: assert now
        n = int(np.prod(shape))
        parts = [((np.arange(n).reshape(shape) + r) % 3).astype(dtype)
                 for r in range(SIZE)]
        ref = (np.logical_or.reduce(parts) if dtype == np.bool_
               else np.sum(parts, axis=0).astype(dtype))
        assert isinstance(y, jax.Array) and y is not x
        assert y.devices() == x.devices()
        check(y, np.asarray(ref, dtype))
        check(z, np.asarray(ref, dtype))


def test_jaxmpi_jit_and_jax_jit_interleaved():
    # Dispatches of both kinds alternate (the first of each late on a
    # different rank), then an eager call: the runtime token orders only
    # jax.jit's; the device's queue must order the rest.
    f = jaxmpi.jit(lambda v: mpx.allreduce(v, MPI.SUM))
    g = jax.jit(lambda v: mpx.allreduce(v, MPI.MAX))
    _warm(f, g)
    assert f.fast
    ins = [_ready([RANK, -RANK]), _ready([2 * RANK, 1])]
    e = _ready([RANK + 1, 0])
    a = f(_late(np.float32([RANK, 1]), slow=RANK == 0))
    b = g(_late(np.float32([-RANK, RANK]), slow=RANK == SIZE - 1))
    c = f(ins[0])
    d = g(ins[1])
    z = mpx.allreduce(e, MPI.MIN)
    r = _ranks()
    a, b, c, d, z = map(np.asarray, (a, b, c, d, z))
    check(a, np.float32([r.sum(), SIZE]))
    check(b, np.float32([0, SIZE - 1]))
    check(c, np.float32([r.sum(), -r.sum()]))
    check(d, np.float32([2 * (SIZE - 1), 1]))
    check(z, np.float32([1, 0]))
