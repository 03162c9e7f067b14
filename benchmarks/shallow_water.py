"""Shallow-water benchmark: mpi4jax against jaxmpi (plain sendrecv halo
exchange, the hand-written fused neighbor_exchange, halo_exchange, and the
overlap exchange that computes the interior while the halo is in flight),
same model, grid and steps.

    python benchmarks/shallow_water.py                 # 2 ranks, 3600 x 1800, 0.01 days, 3 repeats
    python benchmarks/shallow_water.py --days 0.1 --repeats 5
    python benchmarks/shallow_water.py --grid 360 180 --days 1
    python benchmarks/shallow_water.py --ranks 1,2,4,8,16 --weak 900 900

Runs `examples/shallow_water.py --benchmark` under mpiexec once per
configuration and repeat (configurations interleaved, so that a slow spell
of a busy machine does not favour one of them), reads each run's
"Solution took X s" (the time-stepping loop after a warm-up call that
compiles; start-up and compilation are not counted) and prints the median,
the spread and the ratio of each median to mpi4jax's.

Needs mpi4jax in the same environment, built against the same MPI as
mpi4py uses. With the PyPI `mpich` wheel (./run setup's default), that
wheel's compiler wrapper builds it:

    MPI4JAX_BUILD_MPICC=$VENV/bin/mpicc pip install --no-binary mpi4jax mpi4jax

(`$VENV/bin/mpicc -show` is `cc -I$VENV/include -L$VENV/lib ... -lmpi`: the
wheel ships mpi.h and libmpi.so.12.) mpi4jax's setup.py builds its CUDA
extension whenever it finds a CUDA directory (e.g. /usr/local/cuda, even one
without cuda_runtime.h); on a machine without a usable CUDA toolkit point
it at an empty directory: CUDA_PATH=$(mktemp -d). Configurations whose
library is missing are reported as skipped.
"""

import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = {
    "mpi4jax": ["--backend", "mpi4jax", "--exchange", "sendrecv"],
    "jaxmpi-sendrecv": ["--backend", "jaxmpi", "--exchange", "sendrecv"],
    "jaxmpi-fused": ["--backend", "jaxmpi", "--exchange", "fused"],
    "jaxmpi-halo": ["--backend", "jaxmpi", "--exchange", "halo"],
    "jaxmpi-overlap": ["--backend", "jaxmpi", "--exchange", "overlap"],
}


def available(name):
    code = {
        "mpi4jax": "import mpi4jax",
        "jaxmpi-sendrecv": "import jaxmpi.notoken",
        "jaxmpi-fused": "import jaxmpi.notoken as m; assert hasattr(m, 'neighbor_exchange')",
        "jaxmpi-halo": "import jaxmpi.notoken as m; assert hasattr(m, 'halo_exchange')",
        "jaxmpi-overlap": "import jaxmpi.notoken as m; assert hasattr(m, 'ihalo_exchange')",
    }[name]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True).returncode == 0


def launcher():
    cmd = os.environ.get("JAXMPI_LAUNCH")
    if cmd:
        return shlex.split(cmd)
    return [os.path.join(os.path.dirname(sys.executable), "mpiexec")]


def weak_grid(block, ranks):
    """Weak scaling: the grid of `ranks` blocks of block = (bx, by) cells,
    px x py of them with py the largest divisor of ranks up to its square
    root (the model then splits the grid its own way; every rank has bx * by
    cells whatever the layout)."""
    py = max(d for d in range(1, int(ranks ** 0.5) + 1) if ranks % d == 0)
    return block[0] * (ranks // py), block[1] * py


def run_once(args, name, ranks):
    grid = weak_grid(args.weak, ranks) if args.weak else args.grid
    cmd = [*launcher(), "-n", str(ranks), sys.executable,
           os.path.join(ROOT, "examples", "shallow_water.py"), "--benchmark",
           "--days", str(args.days), "--grid", *map(str, grid),
           "--steps-per-call", str(args.steps_per_call), *CONFIGS[name]]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for k in [k for k in env if k.startswith(("PMI_", "PMIX_", "OMPI_COMM"))]:
        del env[k]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=args.timeout)
    found = re.search(r"Solution took ([\d.]+)s", proc.stdout)
    steps = re.search(r"(\d+) steps", proc.stdout)
    if proc.returncode != 0 or not found or not steps:
        raise RuntimeError(f"{name} failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-3000:]}")
    return float(found.group(1)), int(steps.group(1))


def rank_counts(text):
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(
            f"--ranks must be rank counts separated by commas, e.g. 2 or "
            f"1,2,4,8,16; got {text!r}")
    return counts


def table(names, times, steps):
    print(f"{'configuration':16s} {'median s':>9s} {'min s':>8s} {'max s':>8s} "
          f"{'ms/step':>8s} {'vs mpi4jax':>10s} {'vs fused':>9s}")
    ref = statistics.median(times["mpi4jax"]) if "mpi4jax" in times else None
    fused = statistics.median(times["jaxmpi-fused"]) if "jaxmpi-fused" in times else None
    for n in names:
        med = statistics.median(times[n])
        ratio = f"{med / ref:10.3f}" if ref else f"{'-':>10s}"
        vs_fused = f"{med / fused:9.3f}" if fused else f"{'-':>9s}"
        print(f"{n:16s} {med:9.2f} {min(times[n]):8.2f} {max(times[n]):8.2f} "
              f"{1e3 * med / steps:8.2f} {ratio} {vs_fused}")


def weak_scaling(names, counts, per_step, block):
    """Weak scaling: time per step with a fixed block per rank, and its
    efficiency (the fewest ranks' time per step over this one's; ideal 1;
    the grid grows with the ranks, and with it the steps per model day)."""
    base = counts[0]
    print(f"\nweak scaling ({block[0]} x {block[1]} cells per rank), against {base} "
          f"rank(s) of the same configuration: ms per step (efficiency)")
    print(f"{'configuration':16s} " + " ".join(f"{f'{c} ranks':>16s}" for c in counts))
    for n in names:
        cells = [f"{per_step[(n, c)]:8.2f} ({per_step[(n, base)] / per_step[(n, c)]:.2f})"
                 .rjust(16) for c in counts]
        print(f"{n:16s} " + " ".join(cells))


def scaling(names, counts, medians):
    """Strong scaling: speed-up and parallel efficiency against the fewest
    ranks run (ideally 1) of the same configuration."""
    base = counts[0]
    print(f"\nstrong scaling (fixed grid), against {base} rank(s) of the same "
          f"configuration: speed-up (parallel efficiency)")
    print(f"{'configuration':16s} " + " ".join(f"{f'{c} ranks':>16s}" for c in counts))
    for n in names:
        cells = []
        for c in counts:
            t0, t = medians[(n, base)], medians[(n, c)]
            speedup = t0 / t
            cells.append(f"{t:6.2f} s {speedup:4.1f}x ({speedup * base / c:.2f})"
                         .rjust(16))
        print(f"{n:16s} " + " ".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=rank_counts, default=[2],
                    help="rank count, or several separated by commas (strong "
                         "scaling: speed-up and efficiency against the first)")
    ap.add_argument("--grid", type=int, nargs=2, default=(3600, 1800), metavar=("NX", "NY"))
    ap.add_argument("--weak", type=int, nargs=2, metavar=("BX", "BY"),
                    help="weak scaling: a block of BX x BY cells per rank (the grid "
                         "grows with --ranks) instead of the fixed --grid")
    ap.add_argument("--days", type=float, default=0.01,
                    help="model days per run (0.01 days = 43 steps of 19.95 s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps-per-call", type=int, default=100)
    ap.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = ap.parse_args()

    names = [n for n in args.configs if available(n)]
    for n in args.configs:
        if n not in names:
            print(f"skipping {n}: its library (or the exchange) is not installed")
    if not names:
        return 1
    counts = sorted(set(args.ranks))
    medians, per_step = {}, {}
    for ranks in counts:
        grid = weak_grid(args.weak, ranks) if args.weak else args.grid
        print(f"shallow water {grid[0]} x {grid[1]}, {args.days:g} model days, "
              f"{ranks} ranks, {args.repeats} repeats", flush=True)
        times = {n: [] for n in names}
        for r in range(args.repeats):
            for n in names:
                t, steps = run_once(args, n, ranks)
                times[n].append(t)
                print(f"  repeat {r + 1}: {n:16s} {t:8.2f} s  ({steps} steps)", flush=True)
        print()
        table(names, times, steps)
        print(flush=True)
        medians.update({(n, ranks): statistics.median(times[n]) for n in names})
        per_step.update({(n, ranks): 1e3 * statistics.median(times[n]) / steps
                         for n in names})
    if len(counts) > 1 and args.weak:
        weak_scaling(names, counts, per_step, args.weak)
    elif len(counts) > 1:
        scaling(names, counts, medians)
    return 0


if __name__ == "__main__":
    sys.exit(main())
