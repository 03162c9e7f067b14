"""One benchmark job: every op and size for one Python-based implementation.

Started by benchmarks/run.py under mpiexec, one process per rank:

    mpiexec -n 2 python benchmarks/worker.py --impl jaxmpi --out raw.jsonl ...

Implementations:
  mpi4py   NumPy buffers, uppercase buffer methods, plain Python loop
  mpi4jax  mpi4jax ops (jit)
  jaxmpi   jaxmpi.notoken ops (jit)
  jax      JAX's own collectives: jax.distributed over a localhost
           coordinator, CPU collectives (gloo), shard_map over one device
           per process (psum, ppermute, all_gather, all_to_all; bcast is
           emulated as a psum of the root's data and zeros elsewhere)
  jax_mpi  the same over JAX's MPI collectives
           (jax_cpu_collectives_implementation="mpi": MPItrampoline inside
           jaxlib, MPITRAMPOLINE_LIB naming an MPIwrapper built against
           this environment's MPI). JAX calls MPI_Init itself, at its first
           collective: mpi4py is imported without initialising MPI and
           joins afterwards (JAXMPI_BENCH_JAX_MPI=1, set by run.py, with
           the coordinator's port in JAXMPI_BENCH_PORT).

Modes of the JAX-based implementations:
  loop  the op inside one jitted lax.fori_loop; each iteration's input is
        the previous iteration's result, so the op can be neither hoisted
        nor elided. A sample is (T(2n) - T(n)) / n, the marginal cost of an
        iteration, free of the once-per-execution costs (dispatch, buffer
        allocation and first touch), which the per-call mode shows. The
        pairs (T(n), T(2n)) are recorded too. sendrecv sends from one
        buffer and receives into another: the loop carries two and swaps
        their roles (two ops per iteration, the time halved), as C and
        mpi4py swap theirs every call.
  call  one jitted call per op, n calls back to back (each taking the
        previous result, except allgather: the same input), then one
        block_until_ready: dispatch included.
  block one jitted call per op, each waited for (block_until_ready): the
        latency a program pays per jitted step (run.py's dispatch table).
  eager the op called outside jit, each waited for (jaxmpi, mpi4jax).
  region as block, through jaxmpi.jit (JAX's C++ dispatch; jaxmpi only).
mpi4py runs in mode "loop" (a plain Python loop of n calls). Implementation
"plain" runs a jitted x + 1 (no communication) in mode "block": the floor.

The protocol is the one of bench_c.c: WARMUP calls, n doubled until a batch
takes TARGET seconds on the slowest rank, REPEATS samples; a sample is the
slowest rank's time. mpi4py's COMM_WORLD is the control plane (barriers,
the slowest rank's time); the data travel on each library's communicator.
Rank 0 appends one JSON line per (mode, op, size) to --out.

Sizes: bytes of float32 data per rank (allreduce, sendrecv, bcast,
allgather's contribution) or per destination (alltoall's block).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

import numpy as np

# JAX's MPI collectives initialise MPI themselves and refuse an MPI that is
# initialised already: mpi4py must wait (see jax_mpi above).
JAX_MPI = os.environ.get("JAXMPI_BENCH_JAX_MPI") == "1"
if JAX_MPI:
    import mpi4py

    mpi4py.rc.initialize = mpi4py.rc.finalize = False
from mpi4py import MPI  # noqa: E402

if JAX_MPI:  # the launcher's variables until JAX has initialised MPI
    WORLD = None
    RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    SIZE = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
else:
    WORLD = MPI.COMM_WORLD
    RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
OPS = ("allreduce", "sendrecv", "bcast", "allgather", "alltoall",
       "allgatherv", "alltoallv", "reduce_scatter")


def timed(run_batch, n):
    """Seconds the slowest rank takes for run_batch(n)."""
    WORLD.Barrier()
    t0 = time.perf_counter()
    run_batch(n)
    dt = time.perf_counter() - t0
    return WORLD.allreduce(dt, op=MPI.MAX)


def measure(run_batch, args, slope):
    # The best of two batches decides, so that one preemption on a loaded
    # machine does not stop the doubling early. With the slope, what must
    # reach the target is the n iterations' own time, t(2n) - t(n), not the
    # batch's: a jitted loop's fixed cost (the call, copying its input into
    # the carry) made one iteration of a 16 MiB op "long enough", and its
    # sample the noise of one op (reduce_scatter 16 MiB: 1.24-1.36 x C with
    # one iteration per batch, 0.91 x with batches of 0.15 s).
    def span(n):
        once = min(timed(run_batch, n), timed(run_batch, n))
        if not slope:
            return once
        return min(timed(run_batch, 2 * n), timed(run_batch, 2 * n)) - once

    n = 1
    while span(n) < args.target and n < 2**40:
        n *= 2
    samples, pairs = [], []
    for _ in range(args.repeats):
        if slope:
            t1 = timed(run_batch, n)
            t2 = timed(run_batch, 2 * n)
            samples.append((t2 - t1) / n)
            pairs.append((t1, t2))
        else:
            samples.append(timed(run_batch, n) / n)
    return n, samples, pairs


def shapes(op, count):
    """(input shape, result shape) of one rank, float32 elements."""
    if op == "alltoall":
        return (SIZE, count), (SIZE, count)
    if op == "allgather":
        return (count,), (SIZE, count)
    # The v-forms, every count equal: rows of one element.
    if op == "allgatherv":
        return (count,), (SIZE * count,)
    if op == "alltoallv":
        return (SIZE * count,), (SIZE * count,)
    if op == "reduce_scatter":  # the message: each rank's result block
        return (SIZE, count), (count,)
    return (count,), (count,)


# The v-forms' data and results are their fixed-count twins', flattened.
TWIN = {"allgatherv": "allgather", "alltoallv": "alltoall"}


# ---- mpi4py ------------------------------------------------------------------


def bench_mpi4py(args, emit):
    comm = WORLD.Dup()
    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    for op in args.ops:
        for nbytes in args.sizes:
            xs, ys = shapes(op, nbytes // 4)
            x = np.ones(xs, np.float32)
            y = np.empty(ys, np.float32)
            y.fill(0)  # touch every page before timing
            call = {
                "allreduce": lambda a, b: comm.Allreduce(a, b, op=MPI.SUM),
                "sendrecv": lambda a, b: comm.Sendrecv(a, dest, 0, b, source, 0),
                "bcast": lambda a, b: comm.Bcast(a if RANK == 0 else b, root=0),
                "allgather": lambda a, b: comm.Allgather(a, b),
                "alltoall": lambda a, b: comm.Alltoall(a, b),
                "allgatherv": lambda a, b: comm.Allgatherv(
                    a, [b, [a.size] * SIZE]),
                "alltoallv": lambda a, b: comm.Alltoallv(
                    [a, [a.size // SIZE] * SIZE], [b, [b.size // SIZE] * SIZE]),
                "reduce_scatter": lambda a, b: comm.Reduce_scatter_block(
                    a, b, op=MPI.SUM),
            }[op]

            def fn(call=call, bufs=[x, y], swap=op not in (
                    "allgather", "allgatherv", "reduce_scatter")):
                # Each call's input is the last one's result, as in the
                # jitted loops: the buffers swap roles (allgather's result
                # is larger: the same input every call).
                call(*bufs)
                if swap:
                    bufs.reverse()

            def run_batch(n, fn=fn):
                for _ in range(n):
                    fn()

            if args.check:
                x[...] = check_input(op, nbytes // 4)
                fn()
                check("mpi4py", op, y if RANK or op != "bcast" else x, nbytes // 4)
                x.fill(1)
            for _ in range(args.warmup):
                fn()
            iters, samples, pairs = measure(run_batch, args, slope=False)
            emit("loop", op, nbytes, iters, samples, pairs)
    comm.Free()


def check_input(op, count):
    """A rank-dependent input for --check: element j of block k is
    rank * SIZE + k + 1 (one block unless alltoall)."""
    xs, _ = shapes(op, count)
    blocks = SIZE if TWIN.get(op, op) == "alltoall" else (
        xs[0] if op == "reduce_scatter" else 1)
    x = RANK * SIZE + 1 + np.arange(blocks, dtype=np.float32)[:, None]
    return np.broadcast_to(x, (blocks, count)).reshape(xs).copy()


def expected(op, count):
    """What one call of op returns on this rank for check_input."""
    src = (RANK - 1) % SIZE
    one = np.ones(count, np.float32)
    op = TWIN.get(op, op)
    if op == "allreduce":
        return one * sum(r * SIZE + 1 for r in range(SIZE))
    if op == "sendrecv":
        return one * (src * SIZE + 1)
    if op == "bcast":
        return one
    if op == "allgather":
        return np.stack([one * (r * SIZE + 1) for r in range(SIZE)])
    if op == "reduce_scatter":
        return one * sum(r * SIZE + RANK + 1 for r in range(SIZE))
    return np.stack([one * (r * SIZE + RANK + 1) for r in range(SIZE)])


def check(impl, op, got, count):
    want = expected(op, count)
    if not np.array_equal(np.asarray(got).reshape(want.shape), want):
        raise AssertionError(f"{impl} {op} of {count} floats on rank {RANK}: "
                             f"got {np.asarray(got).ravel()[:8]}..., "
                             f"want {want.ravel()[:8]}...")


# ---- JAX-based: shared driver --------------------------------------------------


def carry_fn(op):
    """Next loop input from (input, result): the result where shapes agree;
    for allgather one element of the result written into the input in place
    (an O(1) dynamic-update-slice), so each iteration depends on the last."""
    if op == "allgather":
        return lambda x, y: x.at[0].set(y[-1, 0])
    if op == "allgatherv":
        return lambda x, y: x.at[0].set(y[-1])
    if op == "reduce_scatter":  # the result is one block of the input
        return lambda x, y: x.at[0, 0].set(y[0])
    return lambda x, y: y


def bench_jax_based(args, emit, make_op, wrap, make_input, local,
                    wrap_region=None):
    """make_op(op) -> function of one (local) array; wrap(fn, nargs) -> the
    jitted callable (jax.jit, or jit of shard_map for JAX's collectives);
    make_input(array) -> what the jitted function takes; local(result) ->
    this rank's part of a result, as NumPy; wrap_region(fn) -> the callable
    of mode "region" (jaxmpi.jit; None: the mode is skipped)."""
    import jax
    from jax import lax

    for op in args.ops:
        try:
            f = make_op(op)
        except KeyError:  # the library has no such op (the v-forms)
            if RANK == 0:
                print(f"worker: {args.impl} has no {op}: skipped",
                      file=sys.stderr)
            continue
        carry = carry_fn(op)

        def loop(x, n, f=f, carry=carry):
            return lax.fori_loop(0, n, lambda i, x: carry(x, f(x)), x)

        if op == "sendrecv":
            # As C does: send from one buffer and receive into another, never
            # one buffer for both; the two swap roles, so an iteration is
            # two ops (the first one's result is returned, for --check).
            def loop(x, n, f=f):
                def body(i, xy):
                    x, y = xy
                    y = f(x, y)
                    return f(y, x), y

                return lax.fori_loop(0, n, body, (x, x * 0))[1]

        jloop = wrap(loop, 2)
        jcall = wrap(f, 1)
        # Results of allgather(v) are bigger, of reduce_scatter smaller.
        chained = op not in ("allgather", "allgatherv", "reduce_scatter")
        for nbytes in args.sizes:
            xs, _ = shapes(op, nbytes // 4)
            if args.check:
                xc = make_input(check_input(op, nbytes // 4))
                check(args.impl, op, local(jcall(xc)), nbytes // 4)
                # One loop iteration is one call (allgather: its carry).
                y = local(jloop(xc, np.int32(1)))
                if op in ("allgather", "allgatherv"):
                    y = np.concatenate([[(SIZE - 1) * SIZE + 1], y[1:]])
                    want = check_input(op, nbytes // 4)
                    want[0] = (SIZE - 1) * SIZE + 1
                    assert np.array_equal(y, want), (args.impl, op, "loop")
                elif op == "reduce_scatter":
                    want = check_input(op, nbytes // 4)
                    want[0, 0] = expected(op, nbytes // 4)[0]
                    assert np.array_equal(y, want), (args.impl, op, "loop")
                else:
                    check(args.impl, op, y, nbytes // 4)
            x0 = make_input(np.ones(xs, np.float32))
            for mode in args.modes:
                if (mode in ("block", "eager", "region")
                        and nbytes not in args.dispatch_sizes):
                    continue
                if mode == "region" and wrap_region is None:
                    continue
                if mode == "loop":
                    def run_batch(n, x0=x0):
                        jloop(x0, np.int32(n)).block_until_ready()

                    run_batch(max(args.warmup, 1))
                    run_batch(max(args.warmup, 1))
                    iters, samples, pairs = measure(run_batch, args, slope=True)
                    if op == "sendrecv":  # two ops per iteration
                        iters, samples = 2 * iters, [t / 2 for t in samples]
                elif mode in ("block", "eager", "region"):
                    # One call at a time, each waited for: the latency a
                    # program pays per step (dispatch table of run.py).
                    # "eager": the op called outside jit; "region": through
                    # jaxmpi.jit.
                    fn = {"eager": f, "block": jcall}.get(mode) or wrap_region(f)

                    def run_batch(n, x0=x0, fn=fn):
                        for _ in range(n):
                            jax.block_until_ready(fn(x0))

                    try:  # the same on every rank: a library without
                        run_batch(1)  # eager calls fails on all of them
                    except Exception as e:  # noqa: BLE001
                        if RANK == 0:
                            print(f"worker: {args.impl} {mode} {op}: skipped "
                                  f"({type(e).__name__}: {e})", file=sys.stderr)
                        continue
                    run_batch(max(args.warmup, 2))
                    iters, samples, pairs = measure(run_batch, args, slope=False)
                else:
                    def run_batch(n, x0=x0):
                        x = y = x0
                        for _ in range(n):
                            y = jcall(x)
                            if chained:
                                x = y
                        jax.block_until_ready(y)

                    run_batch(max(args.warmup, 2))
                    iters, samples, pairs = measure(run_batch, args, slope=False)
                emit(mode, op, nbytes, iters, samples, pairs)
            del x0


def mpi_style_ops(lib, comm):
    """Op functions for a library with mpi4jax's call signatures."""
    dest, source = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    return {
        "allreduce": lambda x: lib.allreduce(x, op=MPI.SUM, comm=comm),
        "sendrecv": lambda x, y=None: lib.sendrecv(
            x, x if y is None else y, source, dest, comm=comm),
        "bcast": lambda x: lib.bcast(x, 0, comm=comm),
        "allgather": lambda x: lib.allgather(x, comm=comm),
        "alltoall": lambda x: lib.alltoall(x, comm=comm),
        **({"allgatherv": lambda x: lib.allgatherv(
                x, [x.shape[0]] * SIZE, comm=comm),
            "alltoallv": lambda x: lib.alltoallv(
                x, [x.shape[0] // SIZE] * SIZE, [x.shape[0] // SIZE] * SIZE,
                comm=comm)}
           if hasattr(lib, "allgatherv") else {}),
        **({"reduce_scatter": lambda x: lib.reduce_scatter(
            x, MPI.SUM, comm=comm)} if hasattr(lib, "reduce_scatter") else {}),
    }


def bench_mpi_style(lib, comm, args, emit):
    import jax
    import jax.numpy as jnp

    region = getattr(lib, "jit", None)  # jaxmpi.jit
    ops = mpi_style_ops(lib, comm)
    missing = [op for op in args.ops if op not in ops]
    if missing and RANK == 0:
        print(f"worker: {args.impl} has no {', '.join(missing)}: skipped",
              file=sys.stderr)
    args.ops = [op for op in args.ops if op in ops]
    bench_jax_based(args, emit, ops.__getitem__,
                    lambda fn, nargs: jax.jit(fn), jnp.asarray, np.asarray,
                    wrap_region=region)


def bench_mpi4jax(args, emit):
    import mpi4jax

    bench_mpi_style(mpi4jax, MPI.COMM_WORLD.Clone(), args, emit)


def bench_plain(args, emit):
    """A jitted call holding no communication (x + 1), the floor of the
    dispatch table: what any jitted step costs."""
    import jax
    import jax.numpy as jnp

    args.modes = [m for m in args.modes if m == "block"]
    bench_jax_based(args, emit, lambda op: (lambda x: x + 1),
                    lambda fn, nargs: jax.jit(fn), jnp.asarray, np.asarray)


def bench_jaxmpi(args, emit):
    import jaxmpi.notoken

    bench_mpi_style(jaxmpi.notoken, None, args, emit)


# ---- JAX's own collectives -------------------------------------------------------


def start_jax_distributed(collectives):
    import jax

    if collectives == "mpi":
        port = int(os.environ["JAXMPI_BENCH_PORT"])
    else:
        port = None
        if RANK == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        port = WORLD.bcast(port, root=0)
    jax.config.update("jax_cpu_collectives_implementation", collectives)
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=SIZE, process_id=RANK)
    assert jax.process_count() == SIZE and jax.device_count() == SIZE, (
        jax.process_count(), jax.devices())


def join_mpi_after_jax():
    """mpi4py's world, once JAX's first collective has initialised MPI."""
    global WORLD
    assert MPI.Is_initialized(), "JAX's MPI collectives did not initialise MPI"
    WORLD = MPI.COMM_WORLD
    assert (WORLD.Get_rank(), WORLD.Get_size()) == (RANK, SIZE)


def bench_jax(args, emit, collectives="gloo"):
    args.modes = [m for m in args.modes if m != "eager"]  # shard_map only
    start_jax_distributed(collectives)
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    try:
        from jax import shard_map
        kw = {"check_vma": False}
    except ImportError:  # older JAX
        from jax.experimental.shard_map import shard_map
        kw = {"check_rep": False}

    mesh = Mesh(np.array(jax.devices()), ("i",))
    sharded = NamedSharding(mesh, P("i"))
    perm = [(j, (j + 1) % SIZE) for j in range(SIZE)]

    def bcast(x):
        # No rooted collectives in JAX: the root's data, zeros elsewhere, summed.
        keep = lax.axis_index("i") == 0
        return lax.psum(jnp.where(keep, x, jnp.zeros_like(x)), "i")

    ops = {
        "allreduce": lambda x: lax.psum(x, "i"),
        "sendrecv": lambda x, y=None: lax.ppermute(x, "i", perm),
        "bcast": bcast,
        "allgather": lambda x: lax.all_gather(x, "i"),
        "alltoall": lambda x: lax.all_to_all(x, "i", 0, 0, tiled=True),
        "reduce_scatter": lambda x: lax.psum_scatter(x, "i",
                                                     scatter_dimension=0),
    }

    def wrap(fn, nargs):
        specs = (P("i"),) if nargs == 1 else (P("i"), P())
        return jax.jit(shard_map(fn, mesh=mesh, in_specs=specs,
                                 out_specs=P("i"), **kw))

    def make_input(local):
        # The global array is the ranks' local arrays stacked along axis 0.
        glob = (SIZE * local.shape[0], *local.shape[1:])
        dev = jax.device_put(local, jax.local_devices()[0])
        return jax.make_array_from_single_device_arrays(glob, sharded, [dev])

    try:
        def local(y):
            return np.asarray(y.addressable_shards[0].data)

        if WORLD is None:
            x = make_input(np.ones(1, np.float32))
            assert local(wrap(ops["allreduce"], 1)(x))[0] == SIZE
            join_mpi_after_jax()
        bench_jax_based(args, emit, ops.__getitem__, wrap, make_input, local)
    finally:
        jax.distributed.shutdown()


# ---- main ----------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", required=True,
                   choices=("mpi4py", "mpi4jax", "jaxmpi", "jax", "jax_mpi", "plain"))
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", required=True, help="bytes, comma-separated")
    p.add_argument("--modes", default="loop,call")
    p.add_argument("--target", type=float, default=0.02)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--round", type=int, default=0)
    p.add_argument("--dispatch-sizes", default="4",
                   help="sizes (bytes) at which modes block and eager run")
    p.add_argument("--check", action="store_true",
                   help="first compare each op's result with NumPy's")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    args.ops = [o for o in args.ops.split(",") if o]
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    args.modes = [m for m in args.modes.split(",") if m]
    args.dispatch_sizes = {int(s) for s in args.dispatch_sizes.split(",") if s}
    bad = [o for o in args.ops if o not in OPS]
    if bad:
        p.error(f"--ops: unknown op(s) {bad}; choose from {OPS}")
    if any(s < 4 or s % 4 for s in args.sizes):
        p.error("--sizes: every size must be a positive multiple of 4 bytes")

    out = open(args.out, "a") if RANK == 0 else None

    def emit(mode, op, nbytes, iters, samples, pairs):
        if out:
            rec = {"impl": args.impl, "mode": mode, "op": op, "bytes": nbytes,
                   "ranks": SIZE, "iters": iters, "round": args.round,
                   "samples": samples}
            if pairs:  # loop mode: the times of n and 2n iterations
                rec["pairs"] = pairs
            out.write(json.dumps(rec) + "\n")
            out.flush()

    if args.impl == "jax_mpi" and not JAX_MPI:
        p.error("--impl jax_mpi needs JAXMPI_BENCH_JAX_MPI=1 (run.py sets it)")
    {"mpi4py": bench_mpi4py, "mpi4jax": bench_mpi4jax,
     "jaxmpi": bench_jaxmpi, "jax": bench_jax,
     "jax_mpi": lambda a, e: bench_jax(a, e, "mpi"),
     "plain": bench_plain}[args.impl](args, emit)
    if out:
        out.close()
    WORLD.Barrier()
    if JAX_MPI:
        # At exit JAX finalises MPI and then frees its communicators
        # ("MPI_Comm_free() ... called after MPI_FINALIZE", rc 1): finalise
        # here and leave before JAX's exit handlers run.
        sys.stdout.flush()
        MPI.Finalize()
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
