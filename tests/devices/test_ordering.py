"""Order and separation: every device's calls in program order across
dispatches (jax.jit, jaxmpi.jit, eager single-device calls between them,
dispatches back to back without reading results), and no two devices on
one communicator: with rank- and position-dependent data over many
repetitions, every sum must be exact (devices sharing a communicator pair
each other's calls at random: wrong results, silently)."""

import jax
import jax.numpy as jnp
import numpy as np
from mpi4py import MPI

import jaxmpi.notoken as mpx
import util
from devutil import (DOWN, N, RANK, SIZE, UP, every, local, make_mesh, spmd,
                     split)

REPS = 40


def test_positions_never_share_a_communicator():
    """REPS rounds in one program of allreduce, allgather, alltoall and
    sendrecv, each round's data different per process, position and round:
    exact on every shard and round. Fails (wrong values, or a hang) if the
    devices of a process call MPI on one communicator. (Non-blocking waits
    followed by blocking calls in a loop hang today with several devices:
    tests/launch/test_devices.py.)"""
    mesh = make_mesh("1d-reversed")
    x = local((4,), np.int64)
    xs = local((SIZE, 2), np.int64, seed=1)

    def body(x, xs):
        def step(carry, i):
            xi = x * (i + 1) + i
            s = mpx.allreduce(xi, MPI.SUM)
            g = mpx.allgather(xi)
            a = mpx.alltoall(xs * (i + 1))
            r = mpx.sendrecv(xi, xi, DOWN, UP)
            return carry + s[0], (s, g, a, r)
        return jax.lax.scan(step, x[0] * 0, jnp.arange(REPS))  # (varying)

    total, (s, g, a, r) = spmd(body, mesh, nargs=2)(x, xs)
    later = util.Later()
    wrong = 0
    for k in range(N):
        xk = every(k, (4,), np.int64)
        ys = every(k, (SIZE, 2), np.int64, seed=1)
        for i in range(REPS):
            xi = [v * (i + 1) + i for v in xk]
            ok = (np.array_equal(split(s)[k][i], np.sum(xi, axis=0))
                  and np.array_equal(split(g)[k][i], np.stack(xi))
                  and np.array_equal(split(a)[k][i],
                                     np.stack([y[RANK] * (i + 1) for y in ys]))
                  and np.array_equal(split(r)[k][i],
                                     np.zeros(4, np.int64) if DOWN == MPI.PROC_NULL
                                     else xi[DOWN]))
            wrong += not ok
        later.equal(split(total)[k],
                    sum(np.sum([v[0] * (i + 1) + i for v in xk])
                        for i in range(REPS)), f"total at position {k}")
    later.true(wrong == 0, f"{wrong} of {N * REPS} rounds wrong on rank {RANK}")
    later.done()


def test_dispatches_back_to_back(jit):
    """Two programs over the mesh (allreduce; allgather and sendrecv),
    alternating, 12 dispatches without reading a result, eager
    single-device allreduces between them; every result checked at the
    end."""
    mesh = make_mesh("2d-reversed")
    f = spmd(lambda x: mpx.allreduce(x, MPI.SUM), mesh, jit=jit)
    g = spmd(lambda x: {"g": mpx.allgather(x),
                        "r": mpx.sendrecv(x, x, UP, DOWN)}, mesh, jit=jit)
    outs, eager = [], []
    dev0 = jax.devices()[0]
    for i in range(12):
        x = local((3,), np.float64, seed=i)
        outs.append((f if i % 2 == 0 else g)(x))
        y = jax.device_put(util.data(RANK, (2,), np.float64, seed=i), dev0)
        eager.append(mpx.allreduce(y, MPI.SUM))
    later = util.Later()
    for i, out in enumerate(outs):
        for k in range(N):
            xs = every(k, (3,), np.float64, seed=i)
            if i % 2 == 0:
                later.check(split(out)[k], np.sum(xs, axis=0),
                            f"dispatch {i} position {k}")
            else:
                later.check(split(out["g"])[k], np.stack(xs),
                            f"dispatch {i} allgather position {k}")
                later.check(split(out["r"])[k],
                            np.zeros(3) if UP == MPI.PROC_NULL else xs[UP],
                            f"dispatch {i} sendrecv position {k}")
        later.check(eager[i], np.sum(util.all_data((2,), np.float64, seed=i),
                                     axis=0), f"eager call {i}")
    later.done()


def test_many_dispatches_in_flight():
    """64 jaxmpi.jit dispatches of a program with psum over the local
    devices and an allreduce across processes, none read until the end
    (XLA:CPU hangs with about 48 multi-device programs queued; jaxmpi.jit
    bounds what it puts in flight)."""
    import jaxmpi

    mesh = make_mesh("1d")
    f = spmd(lambda x: mpx.allreduce(jax.lax.psum(x, "d"), MPI.SUM), mesh,
             jit=jaxmpi.jit)
    x = local((2,), np.float64)
    outs = [f(x + i) for i in range(64)]
    want = sum(np.sum(every(k, (2,), np.float64), axis=0) for k in range(N))
    later = util.Later()
    for i, out in enumerate(outs):
        for k in range(N):
            later.check(split(out)[k], want + i * N * SIZE, f"dispatch {i} at {k}")
    later.done()
