"""allreduce(x, op, axis_name=...): the reduction over every shard of the
named mesh axes on every process (XLA locally, MPI across), against NumPy
over all processes' shards: SUM, PROD, MAX and MIN, small and above 64 KiB
(a SUM goes by pieces there; a length that no device count divides, so the
pieces are padded), over one axis and two of a 2-D mesh and over a 1-D
mesh; both APIs."""

import numpy as np
import pytest
from mpi4py import MPI

import util
from devutil import (N, RANK, SIZE, Api, local, make_mesh, pdata, spmd,
                     split)

OPS = ("SUM", "PROD", "MAX", "MIN")
SMALL = 5
LARGE = 8193  # float64: 65544 bytes, >= 64 KiB; odd, so padded into pieces


def reference(members, n, op, seed, small):
    """op over the shards (process r, position j) for (r, j) in members."""
    xs = [pdata(r, j, (n,), np.float64, seed=seed, small=small)
          for r, j in members]
    if op == "SUM":  # exact: halves, at most 16 terms
        return np.sum(xs, axis=0)
    if op == "PROD":
        return np.prod(xs, axis=0)
    return (np.max if op == "MAX" else np.min)(xs, axis=0)


def members(mesh, k, axes):
    """The (process, position) pairs that position k reduces over: every
    process's positions that differ from k only along `axes`."""
    names = list(mesh.axis_names)
    shape = [mesh.shape[a] for a in names]
    mine = np.unravel_index(k, shape)
    out = []
    for j in range(N):
        other = np.unravel_index(j, shape)
        if all(o == m for a, o, m in zip(names, other, mine) if a not in axes):
            out += [(r, j) for r in range(SIZE)]
    return out


# (mesh layout, the axes as passed, API)
CASES = [("1d-reversed", "d", "notoken"),
         ("2d-reversed", "a", "token"),
         ("2d", ("a", "b"), "notoken")]


@pytest.mark.parametrize("layout,axes,api", CASES,
                         ids=[f"{l}-{a}-{p}" for l, a, p in CASES])
def test_allreduce_over_all_shards(layout, axes, api):
    mesh = make_mesh(layout)
    names = (axes,) if isinstance(axes, str) else axes
    ins = {(op, n): local((n,), np.float64, seed=i, small=(op == "PROD"))
           for i, op in enumerate(OPS) for n in (SMALL, LARGE)}
    ins = {f"{op}-{n}": v for (op, n), v in ins.items()}

    def body(t):
        mpx = Api(api)
        return {key: mpx.allreduce(x, getattr(MPI, key.split("-")[0]),
                                   axis_name=axes) for key, x in t.items()}

    got = spmd(body, mesh)(ins)
    later = util.Later()
    for k in range(N):
        for i, op in enumerate(OPS):
            for n in (SMALL, LARGE):
                want = reference(members(mesh, k, names), n, op, i,
                                 op == "PROD")
                later.check(split(got[f"{op}-{n}"])[k], want,
                            f"{op} of {n} over {axes} at position {k} of rank {RANK}")
    later.done()
