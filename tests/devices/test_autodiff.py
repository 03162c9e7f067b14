"""grad, jvp and vmap inside shard_map give what they give on one device
per process: each position is its own job of SIZE ranks, so the reference
of position k is the one-device rule (docs/autodiff.md) applied to the
data of position k of every process, written out in NumPy. The gradients
are taken per device inside the body. DeviceCart's are in
test_devicecart.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mpi4py import MPI

import util
from devutil import (DOWN, N, RANK, SIZE, UP, Api, every, local, make_mesh,
                     pdata, spmd, split)

B = 2  # vmap's batch


def weights(rank, k, shape=(3,)):
    """Position k's cotangent weights on process rank (seed 7)."""
    return pdata(rank, k, shape, np.float64, seed=7)


def line(peer, k, shape=(3,), fn=weights):
    return np.zeros(shape) if peer == MPI.PROC_NULL else fn(peer, k, shape)


@pytest.mark.parametrize("layout,api", [("1d-reversed", "notoken"),
                                        ("2d", "token")])
def test_grad_jvp_vmap_as_on_one_device(layout, api):
    mesh = make_mesh(layout)
    axes = tuple(mesh.axis_names)
    ins = {"x": local((3,), np.float64),
           "t": local((3,), np.float64, seed=1),
           "w": local((3,), np.float64, seed=7),
           "W": local((SIZE, 3), np.float64, seed=8),
           "xb": local((B, 3), np.float64, seed=2)}

    def body(d):
        mpx = Api(api)
        x, t, w, W, xb = d["x"], d["t"], d["w"], d["W"], d["xb"]

        def grad(f):
            return jax.grad(lambda x: jnp.sum(w * f(x)))(x)

        out = {
            "allreduce": grad(lambda x: mpx.allreduce(x, MPI.SUM)),
            "allreduce_sum": grad(lambda x: mpx.allreduce(x, MPI.SUM,
                                                          adjoint="sum")),
            "sendrecv": grad(lambda x: mpx.sendrecv(x, x, DOWN, UP)),
            "scan": grad(lambda x: mpx.scan(x, MPI.SUM)),
            "allgather": jax.grad(lambda x: jnp.sum(W * mpx.allgather(x)))(x),
            "axis": grad(lambda x: mpx.allreduce(x, MPI.SUM, axis_name=axes)),
        }
        out["jvp_allreduce"] = jax.jvp(lambda x: mpx.allreduce(x, MPI.SUM),
                                       (x,), (t,))[1]
        out["jvp_sendrecv"] = jax.jvp(lambda x: mpx.sendrecv(x, x, DOWN, UP),
                                      (x,), (t,))[1]
        out["vmap_allreduce"] = jax.vmap(lambda x: mpx.allreduce(x, MPI.MAX))(xb)
        out["vmap_sendrecv"] = jax.vmap(
            lambda x: mpx.sendrecv(x, x, UP, DOWN))(xb)
        out["vmap_allgather"] = jax.vmap(mpx.allgather)(xb)
        out["vmap_grad"] = jax.vmap(jax.grad(
            lambda x: jnp.sum(w * mpx.sendrecv(x * x, x, DOWN, UP))))(xb)
        # Last: no blocking call after a wait (with several devices that can
        # hang today: tests/launch/test_devices.py).
        out["isendrecv"] = grad(lambda x: mpx.wait(mpx.isendrecv(x, x, DOWN, UP)))
        return out

    got = spmd(body, mesh)(ins)
    later = util.Later()
    for k in range(N):
        w = [weights(r, k) for r in range(SIZE)]
        Ws = [pdata(r, k, (SIZE, 3), np.float64, seed=8) for r in range(SIZE)]
        ts = every(k, (3,), np.float64, seed=1)
        xbs = every(k, (B, 3), np.float64, seed=2)
        # the whole local group of the axis_name reduction: every position
        # of this process (all mesh axes named)
        local_w = sum(weights(RANK, j) for j in range(N))
        want = {
            "allreduce": w[RANK],                        # replicated: identity
            "allreduce_sum": np.sum(w, axis=0),          # exact adjoint
            "sendrecv": line(UP, k),                     # x went up
            "isendrecv": line(UP, k),
            "scan": np.sum(w[RANK:], axis=0),
            "allgather": np.sum([Wt[RANK] for Wt in Ws], axis=0),
            "axis": local_w,                             # psum's transpose
            "jvp_allreduce": np.sum(ts, axis=0),
            "jvp_sendrecv": np.zeros(3) if DOWN == MPI.PROC_NULL else ts[DOWN],
            "vmap_allreduce": np.max(xbs, axis=0),
            "vmap_sendrecv": (np.zeros((B, 3)) if UP == MPI.PROC_NULL
                              else xbs[UP]),
            "vmap_allgather": np.stack(xbs, axis=1),
            # d/dx sum(w * x_down^2) seen from the sender: 2 x w_up
            "vmap_grad": (np.zeros((B, 3)) if UP == MPI.PROC_NULL
                          else 2 * xbs[RANK] * line(UP, k)),
        }
        for name, wv in want.items():
            later.check(split(got[name])[k], np.asarray(wv, np.float64),
                        f"{name} at position {k} of rank {RANK}")
    later.done()
