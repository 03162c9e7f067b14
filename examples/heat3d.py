"""The 3-D heat equation on a process grid, with jaxmpi.halo_exchange.

    du/dt = kappa (d2u/dx2 + d2u/dy2 + d2u/dz2)

on a box periodic in x and y, with cold walls (u = 0) at both ends of z;
explicit Euler steps of the 7-point stencil, in float64. The box is split
over a 3-D Cartesian communicator (MPI.Compute_dims: 2 x 2 x 1 on 4 ranks,
2 x 1 x 1 on 2); each rank holds its block with a one-cell halo, which one
halo_exchange call per step fills from the neighbouring blocks (across the
periodic faces too). At the walls there is no neighbour (MPI.PROC_NULL): the
halo keeps its zeros, the boundary condition. Many steps run in one jitted
lax.fori_loop.

    mpiexec -n 4 python examples/heat3d.py                   # 32 x 32 x 32, 200 steps
    mpiexec -n 4 python examples/heat3d.py --check           # also solve on one process in NumPy, compare
    mpiexec -n 2 python examples/heat3d.py --grid 64 32 16 --steps 500
"""

import argparse
import sys

import numpy as np

R = 1 / 8  # kappa dt / dx^2 (explicit Euler is stable up to 1/6 in 3-D)


def initial(shape):
    """Two warm blobs and a wave, from global cell indices: the same field
    whatever the decomposition."""
    i, j, k = (np.arange(n) + 0.5 for n in shape)
    x, y, z = np.meshgrid(i / shape[0], j / shape[1], k / shape[2], indexing="ij")
    blob = lambda cx, cy, cz, w: np.exp(  # noqa: E731
        -((x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2) / w ** 2)
    return (blob(0.3, 0.4, 0.5, 0.15) + 0.5 * blob(0.75, 0.7, 0.3, 0.1)
            + 0.2 * np.sin(2 * np.pi * x) * np.sin(np.pi * z))


def laplacian_step(u, lo, hi):
    """One Euler step of the interior of u (halo included around it);
    lo, hi: the interior's slices. The same expression for JAX and NumPy."""
    c = u[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
    lap = (u[lo[0] - 1:hi[0] - 1, lo[1]:hi[1], lo[2]:hi[2]]
           + u[lo[0] + 1:hi[0] + 1, lo[1]:hi[1], lo[2]:hi[2]]
           + u[lo[0]:hi[0], lo[1] - 1:hi[1] - 1, lo[2]:hi[2]]
           + u[lo[0]:hi[0], lo[1] + 1:hi[1] + 1, lo[2]:hi[2]]
           + u[lo[0]:hi[0], lo[1]:hi[1], lo[2] - 1:hi[2] - 1]
           + u[lo[0]:hi[0], lo[1]:hi[1], lo[2] + 1:hi[2] + 1]
           - 6.0 * c)
    return c + R * lap


def numpy_solution(shape, steps):
    """The whole box on one process: periodic x, y by wrapping, z walls."""
    u = initial(shape)
    for _ in range(steps):
        p = np.pad(u, ((1, 1), (1, 1), (0, 0)), mode="wrap")
        p = np.pad(p, ((0, 0), (0, 0), (1, 1)))  # the cold walls
        u = laplacian_step(p, (1, 1, 1), tuple(n + 1 for n in shape))
    return u


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", type=int, nargs=3, default=(32, 32, 32),
                    metavar=("NX", "NY", "NZ"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--steps-per-call", type=int, default=50)
    ap.add_argument("--check", action="store_true",
                    help="compare with a NumPy solution on one process")
    args = ap.parse_args(argv)

    import jax

    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax import lax
    from mpi4py import MPI

    import jaxmpi.notoken as mpx

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    dims = MPI.Compute_dims(size, 3)
    if any(n % d for n, d in zip(args.grid, dims)):
        if rank == 0:
            print(f"heat3d.py: error: the {args.grid} grid does not split "
                  f"into {dims} blocks", file=sys.stderr)
        return 2
    periods = (True, True, False)
    cart = world.Create_cart(dims, periods, reorder=False)
    coords = cart.Get_coords(rank)
    n = [g // d for g, d in zip(args.grid, dims)]
    own = tuple(slice(c * m, (c + 1) * m) for c, m in zip(coords, n))

    u0 = np.zeros([m + 2 for m in n])
    u0[1:-1, 1:-1, 1:-1] = initial(args.grid)[own]

    def step(_, u):
        u = mpx.halo_exchange(u, cart, 1)
        return u.at[1:-1, 1:-1, 1:-1].set(
            laplacian_step(u, (1, 1, 1), tuple(m + 1 for m in n)))

    run = jax.jit(lambda u, k: lax.fori_loop(0, k, step, u), static_argnums=1)
    u, done = jnp.asarray(u0), 0
    while done < args.steps:
        k = min(args.steps_per_call, args.steps - done)
        u = run(u, k)
        done += k

    blocks = mpx.gather(u[1:-1, 1:-1, 1:-1], 0, comm=cart)
    if rank == 0:
        whole = np.empty(args.grid)
        for r in range(size):
            c = cart.Get_coords(r)
            whole[tuple(slice(i * m, (i + 1) * m) for i, m in zip(c, n))] = \
                np.asarray(blocks[r])
        heat0 = initial(args.grid).sum()
        print(f"{args.grid[0]} x {args.grid[1]} x {args.grid[2]} cells on "
              f"{size} rank(s) as {dims[0]} x {dims[1]} x {dims[2]} blocks, "
              f"{done} steps: heat {whole.sum():.6f} of {heat0:.6f} "
              f"(the rest left through the cold walls)", flush=True)
        if args.check:
            ref = numpy_solution(tuple(args.grid), done)
            err = float(np.abs(whole - ref).max() / np.abs(ref).max())
            ok = err <= 1e-12
            print(f"max |parallel - numpy| / max |numpy| = {err:.3g} "
                  f"({'OK' if ok else 'TOO LARGE'})", flush=True)
            world.bcast(ok, root=0)
            cart.Free()
            return 0 if ok else 1
    elif args.check:
        ok = world.bcast(None, root=0)
        cart.Free()
        return 0 if ok else 1
    cart.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
