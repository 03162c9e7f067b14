"""shard_map's collectives across processes over jaxmpi's MPI layer for XLA,
every dtype, against NumPy on every process."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmpi.distributed
from nutil import (DTYPES, ME, N, REDUCIBLE, P, block, close, global_data,
                   local, shard_map, sharded)

ROWS = 2 * N  # rows per process: psum_scatter and all_to_all split them by N


def _all_ops(dtype):
    """Every collective of one dtype in one program (one compilation), and
    their references."""
    a = global_data((ROWS * N, 3), dtype)
    blocks = [block(a, r) for r in range(N)]
    chunk = ROWS // N
    reducible = dtype in REDUCIBLE or dtype == np.bool_

    keys = ["all_gather", "ppermute_line", "ppermute_back", "all_to_all"]
    if reducible and dtype != np.bool_:
        keys += ["psum", "psum_scatter"]
        keys += ["pmax", "pmin"] if dtype.kind != "c" else []
        keys += ["pmean"] if dtype.kind in "fc" else []

    def body(v):
        out = {
            "all_gather": jax.lax.all_gather(v, "p", tiled=True),
            # a line, 0 -> 1 -> ... -> N-1: process 0 receives nothing
            # (zeros), and the direction differs even at 2 processes
            "ppermute_line": jax.lax.ppermute(
                v, "p", [(i, i + 1) for i in range(N - 1)]),
            "ppermute_back": jax.lax.ppermute(
                v, "p", [(i, (i - 1) % N) for i in range(N)]),
            "all_to_all": jax.lax.all_to_all(v, "p", 0, 0, tiled=True),
        }
        if reducible and dtype != np.bool_:
            out["psum"] = jax.lax.psum(v, "p")
            out["psum_scatter"] = jax.lax.psum_scatter(
                v, "p", scatter_dimension=0, tiled=True)
            if dtype.kind != "c":
                out["pmax"] = jax.lax.pmax(v, "p")
                out["pmin"] = jax.lax.pmin(v, "p")
            if dtype.kind in "fc":
                out["pmean"] = jax.lax.pmean(v, "p")
        return out

    got = shard_map(body, out_specs={k: P("p") for k in keys})(sharded(a))
    got = {k: local(v) for k, v in got.items()}
    zeros = np.zeros_like(blocks[0])
    want = {
        "all_gather": a,
        "ppermute_line": blocks[ME - 1] if ME > 0 else zeros,
        "ppermute_back": blocks[(ME + 1) % N],
        "all_to_all": np.concatenate(
            [b[ME * chunk:(ME + 1) * chunk] for b in blocks]),
    }
    if "psum" in got:
        total = np.sum(np.stack(blocks).astype(
            np.complex128 if dtype.kind == "c" else np.float64
            if dtype.kind == "f" or dtype == np.dtype("bfloat16") else dtype),
            axis=0)
        want["psum"] = total
        want["psum_scatter"] = total[ME * chunk:(ME + 1) * chunk]
        if "pmax" in got:
            want["pmax"] = np.max(np.stack(blocks), axis=0)
            want["pmin"] = np.min(np.stack(blocks), axis=0)
        if "pmean" in got:
            want["pmean"] = total / N
    return got, want


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != np.float16],
                         ids=str)
def test_every_collective(dtype):
    got, want = _all_ops(dtype)
    bad = [k for k in want if not close(got[k], want[k], dtype)]
    assert not bad, {k: (got[k], want[k]) for k in bad}


def test_float16_moves_but_does_not_reduce():
    # XLA's MPI collectives move any dtype as bytes (collective-permute,
    # all-to-all) but reduce and all-gather only the types MPI has:
    # float16 is XLA's own error, raised on every process before any MPI
    # call, and the processes go on.
    dtype = np.dtype(np.float16)
    a = global_data((ROWS * N, 3), dtype)
    x = sharded(a)
    moved = local(shard_map(lambda v: jax.lax.ppermute(
        v, "p", [(i, (i + 1) % N) for i in range(N)]))(x))
    errors = []
    for op in (lambda v: jax.lax.psum(v, "p"),
               lambda v: jax.lax.all_gather(v, "p", tiled=True)):
        try:
            jax.block_until_ready(shard_map(op)(x))
            errors.append(None)
        except Exception as e:  # JaxRuntimeError (XlaRuntimeError before 0.7)
            errors.append(str(e))
    after = local(shard_map(lambda v: jax.lax.psum(v, "p"))(
        sharded(a.astype(np.float32))))
    assert np.array_equal(moved, block(a, (ME - 1) % N))
    if N > 1:
        for e in errors:
            assert e is not None and "Unsupported primitive type" in e \
                and "f16" in e, e
    assert np.array_equal(after, sum(block(a.astype(np.float32), r)
                                     for r in range(N)))


def test_collectives_run_over_jaxmpi():
    # Over gloo no MPI call would be counted: the count rises with every
    # collective across processes (an all-reduce is one MPI_Allreduce).
    assert jax.config.jax_cpu_collectives_implementation == "mpi"
    x = sharded(global_data((ROWS * N, 3), np.dtype(np.float32)))
    f = shard_map(lambda v: jax.lax.psum(v, "p"))
    jax.block_until_ready(f(x))
    before = jaxmpi.distributed.native_calls()
    for _ in range(3):
        jax.block_until_ready(f(x))
    calls = jaxmpi.distributed.native_calls() - before
    assert calls == (3 if N > 1 else 0), calls


def test_in_a_loop_and_under_grad():
    # psum in a fori_loop (the benchmark's shape) and its transpose under
    # jax.grad: d/dx sum_i psum(x)_i * w_i = psum(w) on every process.
    a = global_data((ROWS * N, 3), np.dtype(np.float32))
    w = global_data((ROWS * N, 3), np.dtype(np.float32), salt=5)

    def loop(v):
        # (+ 0 * c: the carry stays varying over "p", as JAX >= 0.7 types it)
        return jax.lax.fori_loop(
            0, 5, lambda i, c: jax.lax.psum(c, "p") / N + 0 * c, v)

    def loss(v, wv):
        return jnp.sum(jax.lax.psum(v, "p") * wv)

    grad = shard_map(jax.grad(loss), in_specs=(P("p"), P("p")))
    got_loop = local(shard_map(loop)(sharded(a)))
    got_grad = local(grad(sharded(a), sharded(w)))
    mean = sum(block(a, r) for r in range(N)) / N
    assert np.allclose(got_loop, mean, rtol=1e-5)
    assert np.allclose(got_grad, sum(block(w, r) for r in range(N)),
                       rtol=1e-5)


# From 4 MiB (csrc/native.c, JM_RING_BYTES) the layer makes XLA's
# out-of-place all-reduce itself, round a ring of MPI_Sendrecv and
# MPI_Reduce_local: each process's part of a large block, of a count
# that does not split evenly, for every dtype MPI reduces.
@pytest.mark.parametrize("dtype", REDUCIBLE, ids=str)
def test_large_reductions(dtype):
    count = (4 << 20) // dtype.itemsize + 2 * N + 1
    a = global_data((count * N,), dtype)
    blocks = [block(a, r) for r in range(N)]

    def body(v):
        out = {"psum": jax.lax.psum(v, "p")}
        if dtype.kind != "c":
            out["pmax"] = jax.lax.pmax(v, "p")
            out["pmin"] = jax.lax.pmin(v, "p")
        return out

    got = shard_map(body, out_specs=P("p"))(sharded(a))
    got = {k: local(v) for k, v in got.items()}
    stack = np.stack(blocks)
    wide = (np.complex128 if dtype.kind == "c" else np.int64
            if dtype.kind in "iu" else np.float64)
    want = {"psum": np.sum(stack.astype(wide), axis=0).astype(dtype)}
    if "pmax" in got:
        want["pmax"] = np.max(stack, axis=0)
        want["pmin"] = np.min(stack, axis=0)
    # global_data's values are small integers: every sum is exact, in any
    # order, so the ring's result is compared bit for bit
    bad = [k for k in want if not np.array_equal(got[k], want[k])]
    assert not bad, {k: (got[k][:8], want[k][:8]) for k in bad}
