"""neighbor_alltoallv against JAX's ragged_all_to_all and ppermute rounds.

    python benchmarks/neighbor.py                      # 4 ranks / 4 devices, rows of 1 KiB
    python benchmarks/neighbor.py --rows 1 64 1024 --iters 200

A ring: each of 4 participants sends `rows` rows of 256 float32 to its left
and to its right neighbour and receives as many from each. jaxmpi: 4 MPI
processes (mpiexec), jaxmpi.notoken.neighbor_alltoallv on a
Create_dist_graph_adjacent ring communicator. JAX: one process with 4 CPU
devices (XLA_FLAGS=--xla_force_host_platform_device_count=4) under
shard_map, jax.lax.ragged_all_to_all (sizes and offsets for all 4 peers,
zeros for the two non-neighbours) and two jax.lax.ppermute rounds (one per
direction). Each runs --iters exchanges in one jitted lax.fori_loop;
microseconds per exchange, median of --repeats calls. The two sides differ
in kind (processes and MPI against threads in one XLA process): the ratio
says what a user of each gets, not which transport is faster. XLA:CPU (jax
0.10.2) does not implement ragged_all_to_all ("HLO opcode
`ragged-all-to-all` is not supported by XLA:CPU ThunkEmitter"): on CPU its
column reads n/a and the error is printed.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

COLS = 256  # float32: 1 KiB per row


def _median_loop(jax, loop, x, repeats, barrier=None):
    jax.block_until_ready(loop(x))
    times = []
    for _ in range(repeats):
        if barrier:
            barrier()
        t0 = time.perf_counter()
        jax.block_until_ready(loop(x))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def mpi_worker(args):
    import jax
    import jax.numpy as jnp
    from jax import lax
    from mpi4py import MPI

    import jaxmpi.notoken as mpx

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    left, right = (rank - 1) % size, (rank + 1) % size
    ring = world.Create_dist_graph_adjacent([left, right], [left, right],
                                            reorder=False)
    out = {}
    for rows in args.rows:
        x = jnp.full((2 * rows, COLS), float(rank), jnp.float32)
        f = lambda _, a: mpx.neighbor_alltoallv(  # noqa: E731
            a, [rows, rows], [rows, rows], comm=ring)
        loop = jax.jit(lambda a: lax.fori_loop(0, args.iters, f, a))
        t = _median_loop(jax, loop, x, args.repeats, world.Barrier)
        out[rows] = world.allreduce(t, MPI.MAX) / args.iters * 1e6
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    ring.Free()


def jax_worker(args):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    n = 4
    devs = jax.devices()[:n]
    mesh = Mesh(np.array(devs), ("i",))
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:
        from jax.experimental.shard_map import shard_map
    out = {"ragged_all_to_all": {}, "ppermute": {}}
    for rows in args.rows:
        x = jnp.zeros((n * 2 * rows, COLS), jnp.float32)

        def ragged(a):
            i = lax.axis_index("i")
            peers = jnp.arange(n)
            lft, rgt = (i - 1) % n, (i + 1) % n
            # Block 0 (rows 0..rows) to the left, block 1 to the right; a
            # receiver keeps its left neighbour's block first.
            send = jnp.where((peers == lft) | (peers == rgt), rows, 0)
            in_off = jnp.where(peers == rgt, rows, 0)
            out_off = jnp.where(peers == rgt, 0, rows)
            def body(_, b):
                return lax.ragged_all_to_all(
                    b, jnp.zeros_like(b), in_off.astype(jnp.int32),
                    send.astype(jnp.int32), out_off.astype(jnp.int32),
                    send.astype(jnp.int32), axis_name="i")
            return lax.fori_loop(0, args.iters, body, a)

        def permute(a):
            def body(_, b):
                to_left = lax.ppermute(b[:rows], "i",
                                       [(j, (j - 1) % n) for j in range(n)])
                to_right = lax.ppermute(b[rows:], "i",
                                        [(j, (j + 1) % n) for j in range(n)])
                return jnp.concatenate([to_right, to_left])
            return lax.fori_loop(0, args.iters, body, a)

        for name, fn in (("ragged_all_to_all", ragged), ("ppermute", permute)):
            loop = jax.jit(shard_map(fn, mesh=mesh, in_specs=P("i"),
                                     out_specs=P("i")))
            try:
                t = _median_loop(jax, loop, x, args.repeats)
                out[name][rows] = t / args.iters * 1e6
            except Exception as e:  # e.g. not implemented on this backend
                out[name][rows] = f"{type(e).__name__}: {str(e)[:120]}"
    print("RESULT " + json.dumps(out), flush=True)


def _run(cmd, env):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{cmd} failed (rc={proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=(1, 64))
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--worker", choices=("mpi", "jax"))
    args = ap.parse_args()
    if args.worker == "mpi":
        return mpi_worker(args)
    if args.worker == "jax":
        return jax_worker(args)

    me = [os.path.abspath(__file__), "--iters", str(args.iters), "--repeats",
          str(args.repeats), "--rows", *map(str, args.rows)]
    launch = shlex.split(os.environ.get("JAXMPI_LAUNCH") or os.path.join(
        os.path.dirname(sys.executable), "mpiexec"))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))}
    mpi = _run([*launch, "-n", "4", sys.executable, *me, "--worker", "mpi"],
               dict(env, JAX_PLATFORMS="cpu",
                    XLA_FLAGS="--xla_force_host_platform_device_count=1"))
    jx = _run([sys.executable, *me, "--worker", "jax"],
              dict(env, JAX_PLATFORMS="cpu",
                   XLA_FLAGS="--xla_force_host_platform_device_count=4"))
    print(f"ring of 4, {args.iters} exchanges per jitted call, median of "
          f"{args.repeats} calls, us per exchange (rows of {4 * COLS} B)")
    print(f"{'rows':>6s} {'jaxmpi nbr_a2av':>16s} {'ragged_all_to_all':>18s} "
          f"{'ppermute x2':>12s} {'ragged/jaxmpi':>14s} {'ppermute/jaxmpi':>16s}")
    for rows in args.rows:
        a = mpi[str(rows)]
        r, p = jx["ragged_all_to_all"][str(rows)], jx["ppermute"][str(rows)]
        fmt = lambda v, w: f"{v:{w}.1f}" if isinstance(v, float) else f"{'n/a':>{w}s}"  # noqa: E731
        ratio = lambda v: f"{v / a:.2f}" if isinstance(v, float) else "-"  # noqa: E731
        print(f"{rows:6d} {a:16.1f} {fmt(r, 18)} {fmt(p, 12)} "
              f"{ratio(r):>14s} {ratio(p):>16s}")
    for name in ("ragged_all_to_all", "ppermute"):
        for rows, v in jx[name].items():
            if not isinstance(v, float):
                print(f"{name} at {rows} rows: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
