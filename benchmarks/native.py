#!/usr/bin/env python
"""Plain JAX collectives across processes: jaxmpi's MPI layer for XLA
against gloo (JAX's default), XLA's MPI collectives on MPIwrapper (where
one is built), and jaxmpi's explicit allreduce, in one run.

    python benchmarks/native.py                      # 2 processes, 4 B .. 16 MiB
    python benchmarks/native.py --rounds 7 --sizes 4,1048576
    python benchmarks/native.py --mpiwrapper /path/libmpiwrapper.so \\
        --openmpi-venv .venv-openmpi                 # + Open MPI 4 jobs

Jobs (each `mpiexec -n P python -m jaxmpi.distributed benchmarks/native.py
--worker KIND`, one CPU device per process, the same program):

  gloo       jax_cpu_collectives_implementation="gloo" (JAX's default); the
             route only supplies the coordinator
  jaxmpi     XLA's MPI collectives over jaxmpi's layer (the route), MPI of
             the venv (PyPI MPICH by default); the same job also times
             jaxmpi's explicit allreduce (jaxmpi.notoken.allreduce in
             jax.jit on each process's block) and the layer's own cost
             (C: MPIABI_Allreduce through the surface against MPI_Allreduce
             called directly, 4 B, interleaved blocks)
  jaxmpi-ompi, mpiwrapper (with --mpiwrapper): the route and XLA's MPI
             collectives on MPIwrapper (MPITRAMPOLINE_LIB, built with cmake
             against Debian's Open MPI 4: no PyPI package) under Debian's
             mpirun, from --openmpi-venv (mpi4py on that Open MPI)

Ops, size = float32 bytes per process:

  loop   psum over the processes inside one jitted lax.fori_loop of k steps
         (each step's input the last one's result), time / k, k grown until
         a call takes --target seconds; the median of --repeats calls
  call   one jax.jit(shard_map(psum)) call, waited for: dispatch included;
         the median of the calls that fit in --repeats x --target seconds
  explicit-loop, explicit-call   the same with jaxmpi.notoken.allreduce on
         each process's block (one device: jaxmpi's own path)

Rounds run every job once, the order rotating; the table gives each
number's median over the rounds and its ratios to the others of the same
round, with the load average before and after each round (the machine is
shared: numbers move 2-10x between runs, ratios much less).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = [4, 65536, 1 << 20, 16 << 20]


# --- the worker (one process of a job) ---------------------------------------

def _timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    out.block_until_ready()
    return time.perf_counter() - t


def _agreed(value):
    """Rank 0's value on every process: the processes must make the same
    calls (a timing-based choice would differ between them)."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.bcast(value, root=0)


def _loop(make, x, target):
    """A jitted loop of k steps, k grown (on rank 0's timing) until one
    call takes target; returns (the loop, k)."""
    k = 4
    while True:
        f = make(k)
        _timed(f, x)  # compile and warm
        t = _agreed(_timed(f, x))
        if t >= target or k >= 1 << 20:
            return f, k
        k = min(k * max(2, int(target / max(t, 1e-6))), 1 << 20)


def _interleaved(runs, repeats):
    """Each of runs (name, fn, x, divisor) timed `repeats` times, taking
    turns: a slow spell falls on all of them alike. {name: median}."""
    times = {name: [] for name, *_ in runs}
    for _ in range(repeats):
        for name, f, x, k in runs:
            times[name].append(_timed(f, x) / k)
    return {name: statistics.median(v) for name, v in times.items()}


def _call_time(f, x, target, repeats):
    f(x).block_until_ready()
    probe = [_timed(f, x) for _ in range(repeats)]
    calls = _agreed(min(400, max(repeats, int(
        repeats * target / max(statistics.median(probe), 1e-6)))))
    return statistics.median(probe + [_timed(f, x) for _ in range(calls)])


def _layer_cost(mpi_lib: str, world, repeats: int):
    """us per 4-byte MPI_Allreduce: through the surface (MPIABI_Allreduce,
    what XLA calls) and directly (the MPI's own), taking turns every 100
    calls (native_layer.c), `repeats` times 20000 calls of each."""
    import ctypes
    import tempfile

    from mpi4py import MPI

    from jaxmpi import _core, _native

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    src = os.path.join(HERE, "native_layer.c")
    out = os.path.join(tempfile.mkdtemp(), "native_layer.so")
    if MPI.COMM_WORLD.Get_rank() == 0:
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src, "-ldl"],
                       check=True)
    out = MPI.COMM_WORLD.bcast(out)
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() != 0 and not os.path.exists(out):
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", out, src, "-ldl"],
                       check=True)
    lib = ctypes.CDLL(out)
    lib.bench.restype = ctypes.c_int
    lib.bench.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                          ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64,
                          ctypes.c_int, ctypes.c_int,
                          ctypes.POINTER(ctypes.c_double),
                          ctypes.POINTER(ctypes.c_double)]
    handle = lambda o: int(_core.handle(o))
    surface, direct = [], []
    ts, td = ctypes.c_double(), ctypes.c_double()
    for _ in range(repeats):
        MPI.COMM_WORLD.Barrier()
        lib.bench(_native.SURFACE.encode(), mpi_lib.encode(),
                  MPI._sizeof(MPI.Comm), handle(MPI.FLOAT), handle(MPI.SUM),
                  handle(world), 200, 100, ctypes.byref(ts), ctypes.byref(td))
        surface.append(ts.value)
        direct.append(td.value)
    return statistics.median(surface), statistics.median(direct)


def worker(args) -> None:
    import jax

    if args.worker in ("gloo",):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize()
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    try:
        from jax import shard_map
    except ImportError:  # JAX < 0.7
        from jax.experimental.shard_map import shard_map

    import inspect

    n, me = jax.process_count(), jax.process_index()
    mesh = Mesh(np.array(jax.devices()), ("p",))
    params = inspect.signature(shard_map).parameters
    unchecked = ({"check_vma": False} if "check_vma" in params
                 else {"check_rep": False})
    explicit = args.worker.startswith("jaxmpi") or args.worker == "layer1"
    if explicit:
        from mpi4py import MPI

        import jaxmpi.notoken as mpx
    results = []

    def record(op, size, seconds):
        results.append({"job": args.worker, "op": op, "size": size,
                        "us": seconds * 1e6})

    for size in args.sizes:
        count = max(1, size // 4)
        a = np.full((n * count,), 1.0, np.float32)
        x = jax.make_array_from_callback(a.shape, NamedSharding(mesh, P("p")),
                                         lambda i: a[i])
        scale = np.float32(1.0 / n)

        def native_loop(k):
            # The same loop body as the explicit one's (a psum, a scale);
            # no type check of varying values (JAX >= 0.7 would want the
            # carry's type kept, at the price of an extra pass over it).
            body = lambda i, c: jax.lax.psum(c, "p") * scale
            return jax.jit(shard_map(
                lambda v: jax.lax.fori_loop(0, k, body, v), mesh=mesh,
                in_specs=P("p"), out_specs=P("p"), **unchecked))

        native_call = jax.jit(shard_map(lambda v: jax.lax.psum(v, "p"),
                                        mesh=mesh, in_specs=P("p"),
                                        out_specs=P("p")))
        reps = args.repeats if size < args.big_from else args.big_repeats
        loops = [("loop", *_loop(native_loop, x, args.target))]
        if explicit:
            local = jnp.asarray(a[:count])

            def explicit_loop(k):
                body = lambda i, c: mpx.allreduce(c, MPI.SUM) * scale
                return jax.jit(lambda v: jax.lax.fori_loop(0, k, body, v))

            loops.append(("explicit-loop",
                          *_loop(explicit_loop, local, args.target)))
        inputs = {"loop": x, "explicit-loop": local if explicit else None}
        got = _interleaved([(name, f, inputs[name], k) for name, f, k in loops],
                           reps)
        for name, seconds in got.items():
            record(name, size, seconds)
        calls = [("call", native_call, x)]
        if explicit:
            import jaxmpi

            calls.append(("explicit-call",
                          jax.jit(lambda v: mpx.allreduce(v, MPI.SUM)), local))
            # jaxmpi.jit: no runtime token between dispatches, JAX's C++
            # dispatch (docs/design.md, "Dispatch")
            calls.append(("explicit-region",
                          jaxmpi.jit(lambda v: mpx.allreduce(v, MPI.SUM)),
                          local))
        for name, f, arg in calls:
            record(name, size, _call_time(f, arg, args.target, reps))
    if explicit and args.layer_cost:
        from jaxmpi import _core, _native

        cost = _layer_cost(_core.get().library_path, _native._attached[0],
                           args.repeats)
        if cost is not None:
            record("layer-surface", 4, cost[0] * 1e-6)
            record("layer-direct", 4, cost[1] * 1e-6)
    if me == 0:
        for r in results:
            sys.stdout.write("result " + json.dumps(r) + "\n")
        sys.stdout.flush()


# --- the driver ---------------------------------------------------------------

def _jobs(args):
    py = sys.executable
    launcher = [os.path.join(os.path.dirname(py), "mpiexec"), "-n",
                str(args.procs)]
    me = [os.path.join(HERE, "native.py"), "--worker"]
    common = ["--sizes", ",".join(map(str, args.sizes)), "--repeats",
              str(args.repeats), "--target", str(args.target)]
    jobs = {
        "gloo": ([*launcher, py, "-m", "jaxmpi.distributed", *me, "gloo",
                  *common], {}),
        "jaxmpi": ([*launcher, py, "-m", "jaxmpi.distributed", *me, "jaxmpi",
                    *common, "--layer-cost"], {}),
        # the layer's own cost where MPI_Allreduce does no communication
        "layer1": ([launcher[0], "-n", "1", py, "-m", "jaxmpi.distributed",
                    *me, "layer1", "--sizes", "", "--repeats",
                    str(args.repeats), "--layer-cost"], {}),
    }
    if args.mpiwrapper:
        opy = os.path.join(os.path.abspath(args.openmpi_venv), "bin", "python")
        mpirun = ["mpirun", "-n", str(args.procs), "--oversubscribe",
                  "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
        jobs["jaxmpi-ompi"] = ([*mpirun, opy, "-m", "jaxmpi.distributed", *me,
                                "jaxmpi-ompi", *common], {})
        # XLA's MPI collectives on MPIwrapper: JAX's own Open MPI detection
        # (OmpiCluster) gives initialize() its arguments.
        jobs["mpiwrapper"] = ([*mpirun, "-x",
                               f"MPITRAMPOLINE_LIB={args.mpiwrapper}",
                               "-x", "JAX_CPU_COLLECTIVES_IMPLEMENTATION=mpi",
                               opy, *me, "mpiwrapper", *common], {})
    return jobs


def driver(args) -> int:
    env = dict(os.environ)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        " --xla_force_host_platform_device_count=1").strip()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               JAXMPI_ABORT_ON_ERROR="0")
    jobs = _jobs(args)
    names = list(jobs)
    rounds = []
    print(f"# {args.procs} processes x 1 CPU device, sizes {args.sizes}, "
          f"{args.rounds} rounds, jobs {names}; {os.cpu_count()} cores",
          flush=True)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        load0 = os.getloadavg()[0]
        got = {}
        for name in order:
            cmd, extra = jobs[name]
            proc = subprocess.run(cmd, cwd=ROOT, env={**env, **extra},
                                  capture_output=True, text=True,
                                  timeout=args.job_timeout)
            lines = [json.loads(l[len("result "):])
                     for l in proc.stdout.splitlines() if l.startswith("result ")]
            if not lines:
                log = os.path.join(args.logs, f"failed-{name}-round{r}.log")
                os.makedirs(args.logs, exist_ok=True)
                with open(log, "w") as f:
                    f.write(proc.stdout + "\n--- stderr\n" + proc.stderr)
                print(f"# round {r}: job {name} gave nothing (rc "
                      f"{proc.returncode}); its output: {log}", flush=True)
            for d in lines:
                got[(d["job"], d["op"], d["size"])] = d["us"]
        load1 = os.getloadavg()[0]
        rounds.append(got)
        print(f"# round {r}: load {load0:.1f} -> {load1:.1f}", flush=True)
    _table(rounds, args)
    return 0


def _median(rounds, key):
    vals = [g[key] for g in rounds if key in g]
    return statistics.median(vals) if vals else None


def _ratio(rounds, a, b):
    """The median over rounds of a / b, each round's own."""
    vals = [g[a] / g[b] for g in rounds if a in g and b in g and g[b] > 0]
    return statistics.median(vals) if vals else None


def _fmt(v, digits=1):
    return "-" if v is None else (f"{v:.{digits}f}" if v < 1000 else f"{v:.0f}")


def _table(rounds, args):
    print()
    for mode in ("loop", "call"):
        print(f"## {mode}: median us per {'op' if mode == 'loop' else 'call'} "
              "(ratios: medians of each round's own ratio)")
        head = ["bytes", "gloo", "jaxmpi", "gloo/jaxmpi", "explicit",
                "jaxmpi/explicit"]
        if mode == "call":
            head += ["explicit (jaxmpi.jit)", "jaxmpi/that"]
        wrapper = any(k[0] == "mpiwrapper" for g in rounds for k in g)
        if wrapper:
            head += ["jaxmpi-ompi", "mpiwrapper", "mpiwrapper/jaxmpi-ompi"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for size in args.sizes:
            g = ("gloo", mode, size)
            j = ("jaxmpi", mode, size)
            e = ("jaxmpi", f"explicit-{mode}", size)
            row = [str(size), _fmt(_median(rounds, g)), _fmt(_median(rounds, j)),
                   _fmt(_ratio(rounds, g, j)), _fmt(_median(rounds, e)),
                   _fmt(_ratio(rounds, j, e), 2)]
            if mode == "call":
                z = ("jaxmpi", "explicit-region", size)
                row += [_fmt(_median(rounds, z)), _fmt(_ratio(rounds, j, z), 2)]
            if wrapper:
                o = ("jaxmpi-ompi", mode, size)
                w = ("mpiwrapper", mode, size)
                row += [_fmt(_median(rounds, o)), _fmt(_median(rounds, w)),
                        _fmt(_ratio(rounds, w, o), 2)]
            print("| " + " | ".join(row) + " |")
        print()
    for job, where in (("layer1", "1 process (no communication)"),
                       ("jaxmpi", "2 processes")):
        surface = ("%s" % job, "layer-surface", 4)
        direct = (job, "layer-direct", 4)
        diffs = [g[surface] - g[direct] for g in rounds
                 if surface in g and direct in g]
        if diffs:
            print(f"## the layer's own cost, 4-byte MPI_Allreduce in a C loop "
                  f"at {where}: through the surface "
                  f"{_median(rounds, surface):.3f} us, MPI directly "
                  f"{_median(rounds, direct):.3f} us, difference "
                  f"{statistics.median(diffs):.3f} us (median of the rounds' "
                  "differences)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--layer-cost", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--big-from", type=int, default=16 << 20)
    ap.add_argument("--big-repeats", type=int, default=3)
    ap.add_argument("--target", type=float, default=0.2,
                    help="seconds per timed loop call (default 0.2)")
    ap.add_argument("--mpiwrapper", help="libmpiwrapper.so (ABI 2.9: v2.10.x)")
    ap.add_argument("--openmpi-venv", default=os.path.join(ROOT, ".venv-openmpi"))
    ap.add_argument("--job-timeout", type=int, default=900)
    ap.add_argument("--logs", default=os.path.join(ROOT, "build", "native-bench"),
                    help="where a failed job's output goes")
    args = ap.parse_args(argv)
    args.sizes = [int(v) for v in args.sizes.split(",") if v]
    return worker(args) or 0 if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())
