"""Every operation inside shard_map, blocking and non-blocking, in both
APIs, against NumPy on every shard: the device at position k of process r
meets the devices at position k of the other processes (ranks and sizes are
the processes'), with data that differs per process and position; 1-D and
2-D meshes, meshes listing their devices in reverse order on odd ranks
(positions, not device ids, pair), every dtype kind for the main
collectives. The topology operations over positions are in
test_devicecart.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import jaxmpi.notoken as mpx
import util
from devutil import (DOWN, N, RANK, ROOT, SIZE, UP, Api, every, local,
                     make_mesh, on_line, pdata, spmd, split, stack)

COUNTS = util.COUNTS  # rows per process: a zero from 2 processes on


def sendcounts(r):
    """Rows process r sends to each process in alltoallv (zeros included,
    not symmetric)."""
    return [(r + 2 * s) % 3 for s in range(SIZE)]


def offsets(counts):
    return np.concatenate([[0], np.cumsum(counts)]).astype(int)


def inputs(rank, k, dtype):
    """Position k's operands on process rank."""
    sc = sendcounts(rank)
    return {
        "x": pdata(rank, k, (3,), dtype),
        "xs": pdata(rank, k, (SIZE, 3), dtype, seed=1),
        "v": pdata(rank, k, (COUNTS[rank], 2), dtype, seed=2),
        "sv": pdata(rank, k, (sum(COUNTS) if rank == ROOT else COUNTS[rank], 2),
                    dtype, seed=3),
        "av": pdata(rank, k, (sum(sc), 2), dtype, seed=4),
        "rs": pdata(rank, k, (sum(COUNTS), 2), dtype, seed=5),
    }


def boxed_inputs(dtype):
    per = [inputs(RANK, k, dtype) for k in range(N)]
    return {key: stack([p[key] for p in per]) for key in per[0]}


def expected(k, dtype):
    """What position k of this process gets from each operation."""
    me = inputs(RANK, k, dtype)
    al = [inputs(r, k, dtype) for r in range(SIZE)]
    xs = [a["x"] for a in al]
    out = {
        "allreduce": util.reduce_ref(xs, "SUM", dtype),
        "reduce": util.reduce_ref(xs, "SUM", dtype) if RANK == ROOT else me["x"],
        "scan": util.reduce_ref(xs[:RANK + 1], "SUM", dtype),
        "exscan": util.exscan_ref(xs, "SUM", dtype),
        "bcast": xs[ROOT],
        "gather": np.stack(xs) if RANK == ROOT else me["x"],
        "scatter": al[ROOT]["xs"][RANK],
        "allgather": np.stack(xs),
        "alltoall": np.stack([a["xs"][RANK] for a in al]),
        "recv": (on_line(DOWN, k, (3,), dtype) * 2).astype(dtype),
        "sendrecv_up": (on_line(DOWN, k, (3,), dtype) + 1).astype(dtype),
        "sendrecv_down": (on_line(UP, k, (3,), dtype) * 3).astype(dtype),
        "nx": [on_line(DOWN, k, (3,), dtype),
               (on_line(UP, k, (3,), dtype) - 2).astype(dtype)],
        "allgatherv": np.concatenate([a["v"] for a in al]),
        "gatherv": (np.concatenate([a["v"] for a in al]) if RANK == ROOT
                    else me["v"]),
        "scatterv": al[ROOT]["sv"][offsets(COUNTS)[RANK]:
                                   offsets(COUNTS)[RANK + 1]],
        "alltoallv": np.concatenate([
            a["av"][offsets(sendcounts(s))[RANK]:offsets(sendcounts(s))[RANK + 1]]
            for s, a in enumerate(al)]),
        "reduce_scatter": util.reduce_ref([a["xs"][RANK] for a in al], "SUM",
                                          dtype),
        "reduce_scatter_counts": util.reduce_ref(
            [a["rs"][offsets(COUNTS)[RANK]:offsets(COUNTS)[RANK + 1]]
             for a in al], "SUM", dtype),
    }
    if DOWN == MPI.PROC_NULL:  # recv, sendrecv and neighbor_exchange: zeros
        out["recv"] = np.zeros(3, dtype)
        out["sendrecv_up"] = np.zeros(3, dtype)
        out["nx"][0] = np.zeros(3, dtype)
    if UP == MPI.PROC_NULL:
        out["sendrecv_down"] = np.zeros(3, dtype)
        out["nx"][1] = np.zeros(3, dtype)
    return out


def check_all(later, got, dtype, what):
    """got: the boxed results; each position against expected()."""
    leaves, tree = jax.tree_util.tree_flatten(got)
    per = [jax.tree_util.tree_unflatten(tree, [split(l)[k] for l in leaves])
           for k in range(N)]
    for k in range(N):
        want = expected(k, dtype)
        assert sorted(want) == sorted(per[k]), (sorted(want), sorted(per[k]))
        for name in want:
            w, g = want[name], per[k][name]
            for i, (wi, gi) in enumerate(zip(w, g) if isinstance(w, list)
                                         else [(w, g)]):
                later.check(gi, np.asarray(wi, dtype),
                            f"{what} {name}[{i}] at position {k} of rank {RANK}")


def blocking_body(api_name, dtype):
    def body(t):
        mpx = Api(api_name)
        x, xs = t["x"], t["xs"]
        out = {}
        out["allreduce"] = mpx.allreduce(x, MPI.SUM)
        out["reduce"] = mpx.reduce(x, MPI.SUM, ROOT)
        out["scan"] = mpx.scan(x, MPI.SUM)
        out["exscan"] = mpx.exscan(x, MPI.SUM)
        out["bcast"] = mpx.bcast(x, ROOT)
        out["gather"] = mpx.gather(x, ROOT)
        out["scatter"] = mpx.scatter(xs if RANK == ROOT else x, ROOT)
        out["allgather"] = mpx.allgather(x)
        out["alltoall"] = mpx.alltoall(xs)
        mpx.barrier()
        mpx.send((x * 2).astype(dtype), UP, tag=5)
        out["recv"] = mpx.recv(x, DOWN, tag=5)
        # Both directions of the line, with different data each way.
        out["sendrecv_up"] = mpx.sendrecv((x + 1).astype(dtype), x, DOWN, UP)
        out["sendrecv_down"] = mpx.sendrecv((x * 3).astype(dtype), x, UP, DOWN,
                                            sendtag=1, recvtag=1)
        out["nx"] = mpx.neighbor_exchange([x, (x - 2).astype(dtype)], [x, x],
                                          [DOWN, UP], [UP, DOWN], tag=8)
        out["allgatherv"] = mpx.allgatherv(t["v"], COUNTS)
        out["gatherv"] = mpx.gatherv(t["v"], COUNTS, ROOT)
        out["scatterv"] = mpx.scatterv(t["sv"], COUNTS, ROOT)
        out["alltoallv"] = mpx.alltoallv(
            t["av"], sendcounts(RANK), [sendcounts(s)[RANK] for s in range(SIZE)])
        out["reduce_scatter"] = mpx.reduce_scatter(xs, MPI.SUM)
        out["reduce_scatter_counts"] = mpx.reduce_scatter(t["rs"], MPI.SUM,
                                                          counts=COUNTS)
        return out
    return body


# (API, mesh, dtype): both APIs, 1-D and 2-D meshes, devices reversed on
# odd ranks or not.
VARIANTS = [("notoken", "1d-reversed", np.float32),
            ("token", "2d", np.int32),
            ("token", "2d-reversed", np.float64)]
IDS = [f"{a}-{m}-{np.dtype(d)}" for a, m, d in VARIANTS]


@pytest.mark.parametrize("api,layout,dtype", VARIANTS, ids=IDS)
def test_every_blocking_op(api, layout, dtype):
    mesh = make_mesh(layout)
    f = spmd(blocking_body(api, dtype), mesh)
    got = f(boxed_inputs(dtype))
    later = util.Later()
    check_all(later, got, dtype, "blocking")
    later.done()


def nonblocking_body(api_name, dtype):
    """The same operations as starts, all in flight together, with work in
    between; waited one by one (some) and with waitall (the rest)."""
    def body(t):
        mpx = Api(api_name)
        x, xs = t["x"], t["xs"]
        reqs = {}
        reqs["allreduce"] = mpx.iallreduce(x, MPI.SUM)
        reqs["reduce"] = mpx.ireduce(x, MPI.SUM, ROOT)
        reqs["scan"] = mpx.iscan(x, MPI.SUM)
        reqs["exscan"] = mpx.iexscan(x, MPI.SUM)
        reqs["bcast"] = mpx.ibcast(x, ROOT)
        reqs["gather"] = mpx.igather(x, ROOT)
        reqs["scatter"] = mpx.iscatter(xs if RANK == ROOT else x, ROOT)
        reqs["allgather"] = mpx.iallgather(x)
        reqs["alltoall"] = mpx.ialltoall(xs)
        barrier = mpx.ibarrier()
        send = mpx.isend((x * 2).astype(dtype), UP, tag=5)
        reqs["recv"] = mpx.irecv(x, DOWN, tag=5)
        reqs["sendrecv_up"] = mpx.isendrecv((x + 1).astype(dtype), x, DOWN, UP)
        reqs["sendrecv_down"] = mpx.isendrecv((x * 3).astype(dtype), x, UP,
                                              DOWN, sendtag=1, recvtag=1)
        reqs["nx"] = mpx.ineighbor_exchange([x, (x - 2).astype(dtype)], [x, x],
                                            [DOWN, UP], [UP, DOWN], tag=8)
        reqs["allgatherv"] = mpx.iallgatherv(t["v"], COUNTS)
        reqs["gatherv"] = mpx.igatherv(t["v"], COUNTS, ROOT)
        reqs["scatterv"] = mpx.iscatterv(t["sv"], COUNTS, ROOT)
        reqs["alltoallv"] = mpx.ialltoallv(
            t["av"], sendcounts(RANK), [sendcounts(s)[RANK] for s in range(SIZE)])
        reqs["reduce_scatter"] = mpx.ireduce_scatter(xs, MPI.SUM)
        reqs["reduce_scatter_counts"] = mpx.ireduce_scatter(t["rs"], MPI.SUM,
                                                            counts=COUNTS)
        # Work while the messages travel (reads none of the results).
        work = jnp.tanh(jnp.outer(x, x).astype(jnp.float32)).sum()
        out = {}
        names = sorted(reqs)
        half = names[:len(names) // 2]
        for name in half:
            out[name] = mpx.wait(reqs[name])
        rest = [n for n in names if n not in half]
        results = mpx.waitall([reqs[n] for n in rest] + [send, barrier])
        for name, r in zip(rest, results):
            out[name] = r
        return out, work
    return body


NB_VARIANTS = [("notoken", "1d-reversed", np.float64),
               ("token", "2d-reversed", np.int64)]
NB_IDS = [f"{a}-{m}-{np.dtype(d)}" for a, m, d in NB_VARIANTS]


@pytest.mark.parametrize("api,layout,dtype", NB_VARIANTS, ids=NB_IDS)
def test_every_nonblocking_op(api, layout, dtype):
    mesh = make_mesh(layout)
    f = spmd(nonblocking_body(api, dtype), mesh)
    got, work = f(boxed_inputs(dtype))
    later = util.Later()
    check_all(later, got, dtype, "non-blocking")
    for k, w in enumerate(split(work)):
        x = pdata(RANK, k, (3,), dtype)
        later.close(w, np.tanh(np.outer(x, x).astype(np.float32)).sum(),
                    f"work at position {k}", rtol=1e-5)
    later.done()


# ---- every dtype kind: the main collectives ---------------------------------

# Each dtype with the reduction ops of its kind (integers: a selection).
DTYPE_OPS = [(d, ops if util.kind(d) != "int" else
              ("SUM", "PROD", "MAX", "MIN", "BAND", "LXOR"))
             for d in util.DTYPES for ops in [util.OPS_FOR_KIND[util.kind(d)]]]


def test_main_collectives_every_dtype():
    """allreduce with every op of each dtype's kind, iallreduce, bcast,
    allgather, alltoall and sendrecv: 15 dtypes (bool, signed and
    unsigned integers, float16, bfloat16, float32/64, complex64/128) in
    one program over the reversed 1-D mesh."""
    mesh = make_mesh("1d-reversed")
    ins = {str(d): {"x": local((4,), d, small=True),
                    "xs": local((SIZE, 2), d, seed=1)} for d, _ in DTYPE_OPS}

    def body(t):
        import jaxmpi.notoken as mpx
        out, reqs = {}, {}
        for d, ops in DTYPE_OPS:
            x, xs = t[str(d)]["x"], t[str(d)]["xs"]
            o = out[str(d)] = {}
            reqs[str(d)] = mpx.iallreduce(x, getattr(MPI, ops[0]))
            for op in ops:
                o[op] = mpx.allreduce(x, getattr(MPI, op))
            o["bcast"] = mpx.bcast(x, ROOT)
            o["allgather"] = mpx.allgather(x)
            o["alltoall"] = mpx.alltoall(xs)
            o["sendrecv"] = mpx.sendrecv(x, x, DOWN, UP)
        # The waits last: no blocking call after a wait (with several
        # devices that can hang today: tests/launch/test_devices.py).
        for d, ops in DTYPE_OPS:
            out[str(d)]["i" + ops[0]] = mpx.wait(reqs[str(d)])
        return out

    got = spmd(body, mesh)(ins)
    later = util.Later()
    for d, ops in DTYPE_OPS:
        o = got[str(d)]
        for k in range(N):
            xs = every(k, (4,), d, small=True)
            ys = every(k, (SIZE, 2), d, seed=1)
            want = {op: util.reduce_ref(xs, op, d) for op in ops}
            want["i" + ops[0]] = want[ops[0]]
            want["bcast"] = xs[ROOT]
            want["allgather"] = np.stack(xs)
            want["alltoall"] = np.stack([y[RANK] for y in ys])
            want["sendrecv"] = (np.zeros(4, d) if DOWN == MPI.PROC_NULL else
                                pdata(DOWN, k, (4,), d, small=True))
            for name, w in want.items():
                later.check(split(o[name])[k], np.asarray(w, d),
                            f"{d} {name} at position {k}")
    later.done()


# ---- XLA's collectives over the local axes next to MPI ----------------------

def test_local_xla_collectives_next_to_mpi():
    """On a 2-D mesh, psum and all_gather over one local axis, jaxmpi
    across processes, and psum over both axes, in one body; against NumPy
    over every process's shards."""
    mesh = make_mesh("2d-reversed")
    A, B = mesh.shape["a"], mesh.shape["b"]
    x = local((3,), np.float64)

    def body(x):
        import jaxmpi.notoken as mpx
        col = jax.lax.psum(x, "b")                 # over b, this process
        allcol = mpx.allreduce(col, MPI.SUM)       # then across processes
        rows = jax.lax.all_gather(x, "a")          # (A, 3), this process
        gathered = mpx.allgather(rows)             # (SIZE, A, 3)
        total = jax.lax.psum(mpx.allreduce(x, MPI.MAX), ("a", "b"))
        return {"allcol": allcol, "gathered": gathered, "total": total}

    got = spmd(body, mesh)(x)
    later = util.Later()
    for k in range(N):
        a, b = divmod(k, B)
        col = [sum(pdata(r, a * B + j, (3,), np.float64) for j in range(B))
               for r in range(SIZE)]
        rows = [np.stack([pdata(r, i * B + b, (3,), np.float64)
                          for i in range(A)]) for r in range(SIZE)]
        mx = [np.max(every(j, (3,), np.float64), axis=0) for j in range(N)]
        later.check(split(got["allcol"])[k], sum(col), f"allcol at {k}")
        later.check(split(got["gathered"])[k], np.stack(rows), f"gathered at {k}")
        later.check(split(got["total"])[k], sum(mx), f"total at {k}")
    later.done()


# ---- topology operations on a communicator of processes ---------------------

def test_topology_ops_on_a_process_grid():
    """halo_exchange, ihalo_exchange, neighbor_alltoallv and
    ineighbor_alltoallv with a Cartesian communicator of processes (a ring,
    periodic) inside shard_map: each position exchanges with the same
    position of the neighbouring processes (DeviceCart's grid over
    positions: test_devicecart.py)."""
    mesh = make_mesh("1d-reversed")
    cart = MPI.COMM_WORLD.Create_cart([SIZE], periods=[True], reorder=False)
    left, right = (RANK - 1) % SIZE, (RANK + 1) % SIZE
    # 4 interior cells and a halo of 1 each side (rank- and position-
    # dependent interior, the halo -1); 1 row to the left, 2 to the right.
    def block(r, k):
        b = pdata(r, k, (6,), np.float64, seed=3)
        b[0] = b[-1] = -1
        return b

    x = stack([block(RANK, k) for k in range(N)])
    n = local((3, 2), np.float64, seed=4)

    def body(t):
        req = mpx.ihalo_exchange(t["x"] * 2, cart, tag=10)
        nreq = mpx.ineighbor_alltoallv(t["n"] * 2, [1, 2], [2, 1], comm=cart,
                                       tag=20)
        h = mpx.halo_exchange(t["x"], cart)
        nb = mpx.neighbor_alltoallv(t["n"], [1, 2], [2, 1], comm=cart, tag=30)
        return {"h": h, "nb": nb, "ih": mpx.wait(req), "inb": mpx.wait(nreq)}

    try:
        got = jax.block_until_ready(spmd(body, mesh)({"x": x, "n": n}))
    finally:
        cart.Free()
    later = util.Later()
    for k in range(N):
        want = block(RANK, k)
        want[0] = block(left, k)[-2]
        want[-1] = block(right, k)[1]
        # slot 0 (from the left) gets what the left sent right (its rows 1:3),
        # slot 1 (from the right) what the right sent left (its row 0)
        nb = np.concatenate([pdata(left, k, (3, 2), np.float64, seed=4)[1:3],
                             pdata(right, k, (3, 2), np.float64, seed=4)[0:1]])
        later.check(split(got["h"])[k], want, f"halo_exchange at {k}")
        later.check(split(got["ih"])[k], want * 2, f"ihalo_exchange at {k}")
        later.check(split(got["nb"])[k], nb, f"neighbor_alltoallv at {k}")
        later.check(split(got["inb"])[k], nb * 2, f"ineighbor_alltoallv at {k}")
    later.done()
